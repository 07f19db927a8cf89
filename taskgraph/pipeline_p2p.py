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

DeepSpeed's PipelineEngine (stacks with ``partitioned_pipe``, stacks.yaml [DS-PIPE]; microsoft/DeepSpeed
56c5223, the bf16 + pipeline code BLOOM ran) re-assembles with ``PartitionedTensor`` (runtime/utils.py),
which costs more than Megatron's gather (:func:`partitioned_copy_bytes`): every transfer is two
blocking sends, the partition's meta LongTensor first (``to_meta``: ndims, the shape, num_parts, rank
and the tp + 1 partition offsets) then the data (engine.py ``_exec_send_activations`` /
``_exec_send_grads``); the sender keeps only its 1/tp piece of its output (``first_output.data =
torch.zeros(1)``), so before each backward it all-gathers its own output again
(``_exec_backward_pass``: ``part_output.full()``), a second all-gather of the whole activation on the
gradient's receiver, besides the one of the gradient (``part_grad.full()``).
"""
from __future__ import annotations

from taskgraph.plan import DTYPE_BYTES, Plan
from taskgraph.stacks import get_stack
from topologies.placement import group_ranks, rank_of


def partitioned_copy_bytes(full_bytes: float, tp: int, grad: bool) -> float:
    """HBM bytes of the copies DeepSpeed's PipelineEngine runs around one partitioned pipeline transfer of
    an activation of ``full_bytes`` (``grad``: its gradient), all ranks of the chain in a row (module
    docstring; microsoft/DeepSpeed 56c5223, runtime/pipe/engine.py and runtime/utils.py).

    ``PartitionedTensor.full()`` (a read or write of the whole tensor is ``full_bytes``): ``torch.zeros``
    of the flat buffer (1), ``copy_`` of the own piece into it (2 / tp), ``dist.all_gather`` into a list
    of views, which torch 1.11's ProcessGroupNCCL::allgather gathers into a flat buffer and copies back
    view by view (``outputTensors[i][j].copy_(outputFlattened[i][j])``: 2), and ``.clone()`` (2): 5 + 2 / tp.
    Activation: the sender clones its piece (``PartitionedTensor._partition_tensor``: 2 / tp), the receiver
    clones the received piece (``_exec_recv_activations``: 2 / tp) and again in ``_exec_forward_pass``
    (``t.clone()``: 2 / tp), then ``full()``: 5 + 8 / tp. Gradient: the sender partitions its input's
    gradient (2 / tp); the receiver runs ``full()`` on its own output and on the gradient: 10 + 6 / tp.

    >>> partitioned_copy_bytes(8.0, 4, grad=False), partitioned_copy_bytes(8.0, 4, grad=True)
    (56.0, 92.0)
    """
    return full_bytes * ((10.0 + 6.0 / tp) if grad else (5.0 + 8.0 / tp))


def partition_meta_bytes(tp: int) -> int:
    """Bytes of ``PartitionedTensor.to_meta()`` of a [s, b, h] activation: int64 ndims, the 3 sizes,
    num_parts, rank and the tp + 1 partition offsets.

    >>> partition_meta_bytes(4)
    88
    """
    return 8 * (1 + 3 + 2 + tp + 1)


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
    return transfer_times(plan, comm_time)[0]


def receiver_times(plan: Plan, comm_time) -> dict:
    """The part of each :func:`boundary_times` entry that runs on the receiving rank after the wire
    transfer: the re-assembling all-gather(s) and, with ``partitioned_pipe``, DeepSpeed's copies
    (``taskgraph/stack_costs.py`` serial_exchanges keeps it out of the partner's wait)."""
    return transfer_times(plan, comm_time)[1]


def transfer_times(plan: Plan, comm_time) -> tuple[dict, dict]:
    """(:func:`boundary_times`, :func:`receiver_times`), computed together."""
    s, sched = plan.sizes, plan.schedule
    nbytes = activation_bytes(plan)
    # the receiving TP group re-assembles a scattered activation (module docstring)
    gather = bool(plan.strategy.options.pipeline_scatter_gather and not plan.sp and s.tp > 1)
    # DeepSpeed's PartitionedTensor: the meta send, the copies and the output's own re-gather (module docstring)
    part = gather and get_stack(plan.strategy.options.stack).partitioned_pipe
    gpu = plan.cluster.gpu
    pairs, after = {}, {}
    for st in range(sched.num_stages - 1):  # every boundary, timed on its own placement (NVLink or NIC)
        ra, rb = sched.stage_to_rank[st], sched.stage_to_rank[st + 1]
        if ra != rb:
            for x, y in ((ra, rb), (rb, ra)):
                rx, ry = rank_of(0, 0, 0, x, s), rank_of(0, 0, 0, y, s)
                t = comm_time(plan.cluster, "send-recv", nbytes, (rx, ry), ("pp", s, ()))
                r = 0.0   # on the receiver, after the wire
                if gather:
                    regathers = 2 if part and x == rb else 1   # the gradient's receiver re-gathers its output
                    r += regathers * comm_time(plan.cluster, "all-gather", nbytes * s.tp, group_ranks("tp", s, ry),
                                               ("tp", s, ()))
                if part:
                    t += comm_time(plan.cluster, "send-recv", partition_meta_bytes(s.tp), (rx, ry), ("pp", s, ()))
                    r += partitioned_copy_bytes(nbytes * s.tp, s.tp, x == rb) / (
                        gpu.hbm_bandwidth * gpu.efficiency.hbm_efficiency)
                pairs[(x, y)], after[(x, y)] = t + r, r
    return pairs, after
