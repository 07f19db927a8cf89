"""The contract between costing and lowering: the cost records one iteration runs.

``taskgraph/costing.py`` (operator records) and ``taskgraph/coarse.py`` (one block per stage) build
them from the operator graph, the cost model and the collectives; ``taskgraph/lower_model.py``
(task by task) and ``taskgraph/lower_coarse.py`` (vectorized, coarse records) turn them into a task
graph; ``taskgraph/estimate.py`` counts the tasks they will make. Plain frozen records (seconds,
bytes), nothing computed here but :func:`shared_pair`, which both sides read the same way.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Comm:
    """One collective attached to an operator pass.

    category: ``tp-comm``, ``cp-comm``, ``ep-comm`` or ``dp-comm``. op: display name (``tp-allreduce`` ...).
    seconds: duration. stream: device stream it runs on (``tp`` by default).
    """

    category: str
    op: str
    seconds: float
    stream: str = "tp"
    mem_bytes: float = 0.0  # buffer allocated when it ends and freed when its layer's pass ends
                            # (ZeRO-3 gathered parameters, Rajbhandari 2020 Section 5.3)
    overlaps: str = ""      # "dgrad" / "wgrad": runs concurrently with that backward GEMM
                            # (taskgraph/lower_model.py module doc)


@dataclass(frozen=True)
class OpCost:
    """Costs of one operator of one layer on one GPU (seconds, bytes).

    fwd, bwd_input, bwd_weight: compute times of the forward, input-gradient and weight-gradient
        passes (bwd_weight = 0 for operators without weights).
    fwd_pre, fwd_post, bwd_pre, bwd_post: collectives before / after the pass (backward lists are
        in backward execution order).
    selective: part of selective recomputation (its forward is re-run before the layer's backward
        when the layer's policy is ``selective``).
    saved_bytes: activation bytes the forward keeps for the backward under the layer's policy
        (allocated at the forward's end, freed when the op's backward ends).
    recompute_bytes: bytes re-materialized by recomputation before the backward (freed likewise).
    grad_bytes: bytes of gradients this op's parameters produce (bucketed for the DP reduction).
    wgrad_overlap: seconds by which the weight-gradient task of a fused backward (B) is shorter
        than ``bwd_weight`` because collectives that ``bwd_input`` counts ran concurrently with it
        (coarse records only, ``taskgraph/coarse.py``; operator records express overlap through
        ``Comm.overlaps``).
    last_bwd_extra: seconds the stage's last backward-ish action (the one that releases the DP
        buckets with ``overlap_grad_reduce``) takes beyond its plain duration because the buckets it
        releases hold SMs while it runs (coarse records only, ``taskgraph/coarse.py`` ``bucket_tail``;
        operator records get it from the interference fixed point). Added to the task the buckets
        follow, so what that backward sends to the previous stage leaves when it would at operator
        fidelity.
    """

    name: str
    fwd: float
    bwd_input: float
    bwd_weight: float = 0.0
    fwd_pre: tuple[Comm, ...] = ()
    fwd_post: tuple[Comm, ...] = ()
    bwd_pre: tuple[Comm, ...] = ()
    bwd_post: tuple[Comm, ...] = ()
    selective: bool = False
    saved_bytes: float = 0.0
    recompute_bytes: float = 0.0
    grad_bytes: float = 0.0
    wgrad_overlap: float = 0.0
    last_bwd_extra: float = 0.0


@dataclass(frozen=True)
class LayerWork:
    """One layer (or the embedding / head block) of a stage: its ops in forward order and its
    recompute policy (``none`` / ``selective`` / ``full``)."""

    name: str
    ops: tuple[OpCost, ...]
    recompute: str = "none"


@dataclass(frozen=True)
class Bucket:
    """A DP gradient bucket of a stage: closes when the backward reaches ``(layer, op)`` (indices into
    the stage's layers / ops), reduces in ``reduce_s``; parameters gather back in ``gather_s``."""

    layer: int
    op: int
    nbytes: float
    reduce_s: float
    gather_s: float = 0.0


@dataclass(frozen=True)
class StageWork:
    """Everything one virtual stage runs per microbatch, plus its DP and optimizer work."""

    layers: tuple[LayerWork, ...]
    buckets: tuple[Bucket, ...] = ()
    optimizer_s: float = 0.0


@dataclass(frozen=True)
class IterationWork:
    """Per-stage work plus pipeline transfer times and execution options."""

    stages: tuple[StageWork, ...]
    p2p_fwd_s: float = 0.0
    p2p_bwd_s: float = 0.0
    overlap_grad_reduce: bool = True
    overlap_param_gather: bool = True
    tp_comm_overlap: bool = False  # folded into the cost records (taskgraph/costing.py); kept as a fact
    p2p_overlap: bool = False     # Megatron default: blocking pipeline send/recv
    p2p_pairs: dict = field(default_factory=dict)  # (src rank, dst rank) -> seconds; default p2p_fwd_s/p2p_bwd_s
    represents: int = 1           # GPUs each simulated rank stands for
    meta: dict = field(default_factory=dict)
    concurrent_pairs: bool = False  # overlapped F&B pairs run their halves together (DeepSeek-V3 3.2.1)
    pair_compute_scale: float = 1.0  # compute of a concurrent pair's halves: SMs / (SMs - comm SMs)
    delay_wgrad: bool = False     # a B's weight-gradient GEMMs leave the chain (Megatron --delay-wgrad-compute)
    shared_expert_overlap: bool = False  # shared experts beside the expert all-to-alls (shared_pair below)
    shared_fc1_share: float = 0.5  # share of a shared expert's time in fc1 + activation (the rest: fc2)


def shared_pair(layer: LayerWork, on: bool):
    """(experts index, shared-experts index) of an MoE layer whose shared experts run beside the
    expert all-to-alls (Megatron-LM --moe-shared-expert-overlap), or None.

    Megatron-LM token_dispatcher.py MoEAlltoAllTokenDispatcher: dispatch_preprocess calls
    SharedExpertMLP.pre_forward_comm (the SP all-gather), token_dispatch launches the dispatch
    all-to-all and then linear_fc1_forward_and_act on the shared experts' own stream
    (shared_experts.py), token_combine launches the combine all-to-all and then linear_fc2_forward and
    post_forward_comm (the SP reduce-scatter), combine_postprocess joins them (get_output). Autograd
    runs each backward kernel on its forward's stream, so the backward mirrors it: fc2 beside the
    combine's backward all-to-all, fc1 beside the dispatch's. Needs the all-to-alls (ep > 1): the
    first forward-pre and last forward-post collectives of the experts are then the expert-parallel
    all-to-alls (taskgraph/operators.py _moe_ops)."""
    if not on:
        return None
    names = [op.name for op in layer.ops]
    if "moe_experts" not in names or "moe_shared_experts" not in names:
        return None
    ie, is_ = names.index("moe_experts"), names.index("moe_shared_experts")
    e = layer.ops[ie]
    ends = (e.fwd_pre[:1], e.fwd_post[-1:], e.bwd_pre[:1], e.bwd_post[-1:])
    if not all(len(c) == 1 and c[0].category == "ep-comm" for c in ends):
        return None
    return ie, is_
