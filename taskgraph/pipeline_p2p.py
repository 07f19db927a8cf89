"""Pipeline transfers between the representatives of adjacent stages: the bytes one activation (or
its gradient) puts on the wire, and the time of every stage boundary's send/recv, each on its own
placement (NVLink inside a node, the NIC across nodes). ``taskgraph/costing.py`` adds the blocking
exchange's host gap and hands the times to the lowering (``IterationWork.p2p_pairs``)."""
from __future__ import annotations

from taskgraph.plan import DTYPE_BYTES, Plan
from topologies.placement import rank_of


def activation_bytes(plan: Plan) -> float:
    """Bytes of one pipeline transfer per representative: activations [s/cp, b, h] split over tp
    (Narayanan 2021 Section 4.1 scatter/gather; with sp the tensor is already sequence-sharded)."""
    s, tr = plan.sizes, plan.strategy.training
    return DTYPE_BYTES[tr.precision] * tr.micro_batch * tr.seq_len / s.cp * plan.model.hidden / s.tp


def boundary_times(plan: Plan, comm_time) -> dict:
    """(sending pipeline rank, receiving pipeline rank) -> seconds of one transfer, both directions of
    every boundary between two ranks; ``comm_time(cluster, kind, nbytes, ranks, share)`` prices it."""
    s, sched = plan.sizes, plan.schedule
    nbytes = activation_bytes(plan)
    pairs = {}
    for st in range(sched.num_stages - 1):  # every boundary, timed on its own placement (NVLink or NIC)
        ra, rb = sched.stage_to_rank[st], sched.stage_to_rank[st + 1]
        if ra != rb:
            for x, y in ((ra, rb), (rb, ra)):
                pairs[(x, y)] = comm_time(plan.cluster, "send-recv", nbytes,
                                          (rank_of(0, 0, 0, x, s), rank_of(0, 0, 0, y, s)), ("pp", s, ()))
    return pairs
