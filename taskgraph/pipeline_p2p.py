"""Pipeline transfers between the representatives of adjacent stages: the bytes one activation (or
its gradient) puts on the wire, and the time of every stage boundary's send/recv, each on its own
placement (NVLink inside a node, the NIC across nodes). ``taskgraph/costing.py`` adds the blocking
exchange's host gap and hands the times to the lowering (``IterationWork.p2p_pairs``).

What each tensor-parallel rank sends (activation [s/cp, b, h], 2 bytes per element in 16-bit):

* with sequence parallelism the activation is already split over tp (Korthikanti 2022 Section 4.2.2):
  1/tp of it (Megatron-LM schedules.get_tensor_shapes: seq_length // tp when sequence_parallel);
* without it, Megatron-core, torch's pipelining and BLOOM-era code without the option send the whole
  activation from every TP rank (get_tensor_shapes: the full seq_length);
* ``options.pipeline_scatter_gather`` (Megatron-LM 2021-2022, ``--scatter-gather-tensors-in-pipeline``,
  on by default there; DeepSpeed's PipelineEngine partitions activations the same way,
  ``is_pipe_partitioned``): 1/tp of it (Narayanan 2021 Section 4.1), and the receiving TP group
  all-gathers the pieces after the exchange and before the next action (p2p_communication._communicate:
  ``torch.cuda.synchronize()``, then ``gather_split_1d_tensor``, an all-gather over the TP group;
  DeepSpeed ``PartitionedTensor.full()``), priced as an NCCL all-gather of the whole activation on
  the receiver's TP group and added to the transfer.
"""
from __future__ import annotations

from taskgraph.plan import DTYPE_BYTES, Plan
from topologies.placement import group_ranks, rank_of


def _split(plan: Plan) -> bool:
    """Each TP rank sends 1/tp of the activation (module docstring)."""
    return bool(plan.sp or plan.strategy.options.pipeline_scatter_gather)


def activation_bytes(plan: Plan) -> float:
    """Bytes of one pipeline transfer per representative (module docstring)."""
    s, tr = plan.sizes, plan.strategy.training
    full = DTYPE_BYTES[tr.precision] * tr.micro_batch * tr.seq_len / s.cp * plan.model.hidden
    return full / s.tp if _split(plan) else full


def boundary_times(plan: Plan, comm_time) -> dict:
    """(sending pipeline rank, receiving pipeline rank) -> seconds of one transfer, both directions of
    every boundary between two ranks; ``comm_time(cluster, kind, nbytes, ranks, share)`` prices it."""
    s, sched = plan.sizes, plan.schedule
    nbytes = activation_bytes(plan)
    # the receiving TP group re-assembles a scattered activation (module docstring)
    gather = bool(plan.strategy.options.pipeline_scatter_gather and not plan.sp and s.tp > 1)
    pairs = {}
    for st in range(sched.num_stages - 1):  # every boundary, timed on its own placement (NVLink or NIC)
        ra, rb = sched.stage_to_rank[st], sched.stage_to_rank[st + 1]
        if ra != rb:
            for x, y in ((ra, rb), (rb, ra)):
                rx, ry = rank_of(0, 0, 0, x, s), rank_of(0, 0, 0, y, s)
                t = comm_time(plan.cluster, "send-recv", nbytes, (rx, ry), ("pp", s, ()))
                if gather:
                    t += comm_time(plan.cluster, "all-gather", nbytes * s.tp, group_ranks("tp", s, ry), ("tp", s, ()))
                pairs[(x, y)] = t
    return pairs
