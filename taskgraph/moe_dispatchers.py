r"""MoE token dispatchers: the collectives that bring each MoE layer's tokens to its experts and back.

``options.moe_dispatcher`` names one of :data:`MOE_DISPATCHERS`; each value is a function of the layer's
sizes (:class:`MoeDispatchShape`) returning :class:`Dispatch`: the collectives as
``(group, op, phase, where, bytes, copies)`` rows (``taskgraph.operators.Collective`` fields) and the
permutation kernels' HBM bytes (per pass) and launches. Groups: ``ep`` (expert parallel), the expert
tensor-parallel group (``tp``, or ``etp`` with parallel folding) and ``etp-ep`` (Megatron's ``tp_ep``
group, expert-TP x EP ranks: ``topologies.placement.group_ranks``). Bytes follow the
``Collective.bytes`` convention: the gathered output (all-gather), the unreduced input
(reduce-scatter), the reduced tensor (all-reduce), the send buffer (all-to-all).

Sources (files at the commits named):

* ``alltoall``: Megatron-LM ``megatron/core/transformer/moe/token_dispatcher.py``
  ``MoEAlltoAllTokenDispatcher`` (NVIDIA/Megatron-LM d98e8a64dd): permute, all-to-all over EP, the
  expert-TP all-gather, experts, reduce-scatter, all-to-all back, unpermute; each all-to-all's backward
  is an all-to-all. The busiest rank's buffer is ``ceil(Tsp k load)`` token copies.
* ``allgather``: the same file's ``MoEAllGatherTokenDispatcher`` (Megatron's default
  ``moe_token_dispatcher_type``, transformer_config.py). ``token_dispatch`` all-gathers over ``tp_ep``
  (expert-TP x EP, G ranks) the routing map ([Tsp, E] bool, under no_grad), the probs ([Tsp, E], the
  router logits' dtype: bf16 unless moe_router_dtype, router.py ``type_as(logits)``) and the hidden
  states ([Tsp, h]); ``dispatch_postprocess`` permutes the rows routed to local experts out of the
  G Tsp gathered ones; ``token_combine`` reduce-scatters the unpermuted [G Tsp, h] output (cast to the
  probs' dtype). The all-gather's backward is a reduce-scatter and vice versa
  (tensor_parallel/mappings.py ``_GatherFromSequenceParallelRegion`` / ``_ReduceScatterToSequenceParallelRegion``).
  No all-to-all, no separate expert-TP gather, and the traffic does not depend on the routing.
* ``allgather_allreduce``: NeMo AutoModel's ``torch`` dispatcher, ``nemo_automodel/components/moe/experts.py``
  ``GroupedExperts.forward`` (NVIDIA-NeMo/Automodel 36044ad3d1): over the 1-D EP mesh it all-gathers the
  token counts (int64), x ([T, h] bf16, ``_AllGatherConcatVarlenFn``, whose backward is an
  all-reduce of the [G T, h] gradient), the routing weights (.float(): fp32 [T, k], same backward),
  the expert indices (int64 [T, k]) and the token mask (bool [T]); the local experts write an fp32
  [G T, h] output (``torch.zeros(..., dtype=float32)`` + ``scatter_add_``) that ``all_reduce``
  (torch.distributed.nn.functional: backward all-reduce too) sums over EP before each rank narrows
  its own T rows.
"""
from __future__ import annotations

from dataclasses import dataclass

#: Megatron's bool routing map; AutoModel's int64 indices and counts, bool mask, fp32 weights and output
BOOL, INT64, FP32 = 1, 8, 4


@dataclass(frozen=True)
class MoeDispatchShape:
    """Sizes of one MoE layer's dispatch on one GPU (``taskgraph/operators.py`` ``_moe_ops``)."""

    tsp: int
    """Tokens in this GPU's residual stream (b s / cp, / tp with sequence parallelism)."""
    routed: int
    """Token copies the local experts process: Tsp x expert-TP x top_k x the busiest rank's load."""
    sent: int
    """Token copies in the busiest rank's all-to-all buffer: ceil(Tsp x top_k x load)."""
    hidden: int
    experts: int
    top_k: int
    dt: int
    """Bytes per activation element (2: bf16)."""
    etp: int
    """Expert tensor-parallel size (tp, or etp with parallel folding)."""
    etp_group: str
    """Costing group of the expert TP collectives: 'tp' or 'etp'."""
    ep: int
    local_experts: int


@dataclass(frozen=True)
class Dispatch:
    """What a dispatcher adds to the routed experts' operator."""

    comms: tuple
    """``(group, op, phase, where, bytes, copies)`` rows in issue order."""
    copy_bytes: int
    """HBM bytes of the permutation kernels, per pass (forward; again in the input-gradient pass)."""
    copy_kernels: int


def alltoall(d: MoeDispatchShape) -> Dispatch:
    """Megatron's MoEAlltoAllTokenDispatcher (module docstring).

    >>> s = MoeDispatchShape(8, 16, 16, 4, 4, 2, 2, 1, "tp", 2, 2)
    >>> [r[:4] for r in alltoall(s).comms]  # doctest: +NORMALIZE_WHITESPACE
    [('ep', 'all-to-all', 'fwd', 'before'), ('ep', 'all-to-all', 'fwd', 'after'),
     ('ep', 'all-to-all', 'bwd', 'before'), ('ep', 'all-to-all', 'bwd', 'after')]
    """
    a2a = d.dt * d.sent * d.hidden
    ag = d.dt * d.routed * d.hidden
    k = d.top_k
    ep = [("ep", "all-to-all", ph, w, a2a, k) for ph, w in (("fwd", "before"), ("fwd", "after"),
                                                          ("bwd", "before"), ("bwd", "after"))] if d.ep > 1 else []
    tp = [(d.etp_group, op, ph, w, ag, 0) for ph in ("fwd", "bwd")
          for op, w in (("all-gather", "before"), ("reduce-scatter", "after"))] if d.etp > 1 else []
    rows = ep[:1] + tp[:2] + ep[1:3] + tp[2:] + ep[3:]
    # moe_utils permute / unpermute read and write every routed copy; with several local experts behind
    # an all-to-all, "Permutation 2" (sort_chunks_by_idxs) sorts the chunks by local expert after the
    # dispatch and back before the combine (torch.cat: another read and write); each again in the backward
    sort = d.ep > 1 and d.local_experts > 1
    return Dispatch(tuple(rows), (8 if sort else 4) * d.dt * d.routed * d.hidden, 4 if sort else 2)


def allgather(d: MoeDispatchShape) -> Dispatch:
    """Megatron's MoEAllGatherTokenDispatcher over the expert-TP x EP group of G ranks (module docstring).

    >>> s = MoeDispatchShape(8, 16, 16, 4, 4, 2, 2, 1, "tp", 2, 2)
    >>> [(r[1], r[2], r[3], r[4]) for r in allgather(s).comms]  # doctest: +NORMALIZE_WHITESPACE
    [('all-gather', 'fwd', 'before', 64), ('all-gather', 'fwd', 'before', 128),
     ('all-gather', 'fwd', 'before', 128), ('reduce-scatter', 'fwd', 'after', 128),
     ('all-gather', 'bwd', 'before', 128), ('reduce-scatter', 'bwd', 'after', 128),
     ('reduce-scatter', 'bwd', 'after', 128)]
    """
    g = d.etp * d.ep
    rows_g = g * d.tsp                       # [S*B*EP, .] after the gather (token_dispatch comments)
    hid, probs = d.dt * rows_g * d.hidden, d.dt * rows_g * d.experts
    rows = [] if g == 1 else [
        ("etp-ep", "all-gather", "fwd", "before", BOOL * rows_g * d.experts, 0),   # routing_map, no grad
        ("etp-ep", "all-gather", "fwd", "before", probs, 0),
        ("etp-ep", "all-gather", "fwd", "before", hid, 0),
        ("etp-ep", "reduce-scatter", "fwd", "after", hid, 0),                     # token_combine
        ("etp-ep", "all-gather", "bwd", "before", hid, 0),                        # its backward
        ("etp-ep", "reduce-scatter", "bwd", "after", hid, 0),                     # hidden states' gradient
        ("etp-ep", "reduce-scatter", "bwd", "after", probs, 0)]                   # probs' gradient
    # permute reads and writes the routed rows out of the gathered ones; unpermute reads them and writes
    # the whole [G Tsp, h] output (moe_utils unpermute: zeros + scatter-add); the backward mirrors both
    return Dispatch(tuple(rows), d.dt * d.hidden * (3 * d.routed + rows_g), 2)


def allgather_allreduce(d: MoeDispatchShape) -> Dispatch:
    """NeMo AutoModel's ``torch`` dispatcher (GroupedExperts) over the EP group (module docstring).

    >>> s = MoeDispatchShape(8, 4, 16, 4, 4, 2, 2, 1, "tp", 2, 2)
    >>> [(r[1], r[2], r[3], r[4]) for r in allgather_allreduce(s).comms]  # doctest: +NORMALIZE_WHITESPACE
    [('all-gather', 'fwd', 'before', 16), ('all-gather', 'fwd', 'before', 128),
     ('all-gather', 'fwd', 'before', 128), ('all-gather', 'fwd', 'before', 256),
     ('all-gather', 'fwd', 'before', 16), ('all-reduce', 'fwd', 'after', 256),
     ('all-reduce', 'bwd', 'before', 256), ('all-reduce', 'bwd', 'after', 128),
     ('all-reduce', 'bwd', 'after', 128)]
    """
    g, t = d.ep, d.tsp
    rows_g = g * t
    x, y, w = d.dt * rows_g * d.hidden, FP32 * rows_g * d.hidden, FP32 * rows_g * d.top_k
    rows = [] if g == 1 else [
        ("ep", "all-gather", "fwd", "before", INT64 * g, 0),                     # per-rank token counts
        ("ep", "all-gather", "fwd", "before", x, 0),
        ("ep", "all-gather", "fwd", "before", w, 0),
        ("ep", "all-gather", "fwd", "before", INT64 * rows_g * d.top_k, 0),       # indices, no grad
        ("ep", "all-gather", "fwd", "before", BOOL * rows_g, 0),                  # token mask, no grad
        ("ep", "all-reduce", "fwd", "after", y, 0),                               # fp32 expert output
        ("ep", "all-reduce", "bwd", "before", y, 0),                              # its gradient
        ("ep", "all-reduce", "bwd", "after", x, 0),                               # x's gradient (varlen backward)
        ("ep", "all-reduce", "bwd", "after", w, 0)]                               # weights' gradient
    # _forward_grouped_mm: x[sorted_token_ids] reads and writes the routed rows; the fp32 output is
    # zero-filled, cast from the bf16 expert output and scatter-added (read-modify-write) row by row; the
    # keep-alive y.add_(x.sum() * 0) reads x and rewrites y; the backward gathers and scatters the same
    # rows into zero-filled gradients of the same sizes
    fp32_out = FP32 * rows_g * d.hidden * 3 + d.dt * rows_g * d.hidden
    routed = d.routed * d.hidden * (2 * d.dt + d.dt + FP32 + 2 * FP32)
    return Dispatch(tuple(rows), fp32_out + routed, 6)


#: options.moe_dispatcher -> its collectives (a new dispatcher is one function here)
MOE_DISPATCHERS = {"alltoall": alltoall, "allgather": allgather, "allgather_allreduce": allgather_allreduce}


__all__ = ["MOE_DISPATCHERS", "Dispatch", "MoeDispatchShape", "allgather", "allgather_allreduce", "alltoall"]
