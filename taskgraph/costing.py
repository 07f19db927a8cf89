"""Turn a resolved :class:`~taskgraph.plan.Plan` into cost records (:class:`IterationWork`) for the
lowering: operator times from the cost model, collective times on the actual rank placement,
activation bytes per recompute policy, DP gradient buckets and the optimizer step.

Representatives: pipeline rank r is simulated by global rank ``rank_of(0, 0, 0, r)``; its TP, CP and
DP peers behave identically (Megatron runs them in lock step), so each simulated rank stands for
tp*cp*dp GPUs and collectives are timed on that representative's real groups.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from strategies.schedules import has_split_backward
from taskgraph.coarse import coarse_stage_work
from taskgraph.cost import NVFP4_ELEMENT_BYTES, OPTIMIZER_OP, ProfileTable, op_time
from taskgraph.cpu_optimizer import cpu_offload_step_time
from taskgraph.cuda_graphs import layer_graphs
from taskgraph.fsdp1_flat import fsdp1_microbatches
from taskgraph.lora import ADAPTER_SUFFIX, NOT_TE, trainable_share
from taskgraph.operators import embedding_operators, head_operators, layer_operators
from taskgraph.overheads import adam_step_of, grad_buffer_bytes, host_bound, stack_host_terms, step_overhead_s
from taskgraph.overlap import bulk, chunk_op, pipelined, ring_exchange, ring_hbm_loss, sm_fraction, stream_shares
from taskgraph.pipeline_p2p import activation_bytes, transfer_times
from taskgraph.plan import DTYPE_BYTES, Plan
from taskgraph.stack_costs import op_as_run, reduce_kind, serial_exchanges, unfused_grad_accum, zero3_copy_times
from taskgraph.stacks import run_stack
from taskgraph.stage_records import named_stage, paced, stage_parts
from taskgraph.te_scaling import te_layer_gemms, te_scaling_applies, te_scaling_work, tp_gather_bytes, with_delayed_amax
from taskgraph.work import Bucket, Comm, IterationWork, LayerWork, OpCost, StageWork
from taskgraph.zero3_fetch import layer_sync_collectives
from topologies.collectives import collective_time
from topologies.comm_kernels import comm_kernels
from topologies.placement import group_ranks, rank_of
from topologies.stragglers import stage_pace

#: Megatron-LM DDP bucket size: max(40M, 1M x dp) parameters (megatron/core/distributed/
#: distributed_data_parallel.py, bucket_size default).
BUCKET_MIN_PARAMS = 40_000_000
BUCKET_PARAMS_PER_DP = 1_000_000


@dataclass(frozen=True)
class CostContext:
    plan: Plan
    profile: ProfileTable | None
    #: the GEMM precision of the layers costed with this context; None: the training precision (a layer an
    #: fp8 / fp4 recipe keeps in BF16 is costed with "bf16", Plan.bf16_layers)
    precision: str | None = None

    @property
    def dtype(self) -> str:
        return self.precision or self.plan.strategy.training.precision

    @property
    def stack(self):
        """The stack (taskgraph/stacks.py) with options.attention_kernel / cross_entropy; None: the default."""
        o = self.plan.strategy.options
        return run_stack(o.stack, o.attention_kernel, o.cross_entropy)


def comm_time(cluster, kind: str, nbytes: float, ranks: tuple[int, ...], share: tuple | None = None) -> float:
    """Collective time on the representative's group ``ranks``; ``share = (axis, sizes, background)``
    says every group of ``axis`` runs it at once, with ``background`` traffic of other axes, so the
    network leg shares links (``topologies/fabric.py``; ignored when ``cluster.contention`` is off)."""
    if share is not None and not getattr(cluster, "contention", False):
        share = None
    return _cached_comm(cluster, kind, float(nbytes), ranks, share)


@lru_cache(maxsize=4096)
def _cached_comm(cluster, kind, nbytes, ranks, share=None):
    if share is None:
        return collective_time(kind, nbytes, ranks, cluster)
    axis, sizes, background = share
    return collective_time(kind, nbytes, ranks, cluster,
                           share={"axis": axis, "sizes": sizes, "background": background})


@lru_cache(maxsize=1024)
def _node_limited(cluster, nbytes: float, ranks: tuple, copies: int, max_nodes: int, contention: bool) -> float:
    from topologies.moe_dispatch import node_limited_all_to_all
    return node_limited_all_to_all(nbytes, ranks, cluster, copies=copies, max_nodes=max_nodes,
                                   share={"axis": "ep"} if contention else None)


#: costing group name -> placement axis of the family of concurrent groups (Megatron dp-cp group).
_FAMILY_AXIS = {"tp": "tp", "cp": "cp", "ep": "ep", "dp": "dp-cp", "etp": "etp", "etp-ep": "etp-ep"}


#: FP8 all-to-all payload over the BF16 one: 1 byte per element plus a 4-byte scale per 128 (DeepSeek-V3
#: Section 3.3.3, low-precision communication)
FP8_COMM_FACTOR = (1 + 4 / 128) / 2


def pair_compute_scale(plan: Plan) -> float:
    """Compute slowdown of a concurrent DualPipe pair's halves: the communication kernels hold
    ``options.pair_comm_sms`` of the GPU's SMs while the pair runs (DeepSeek-V3 Section 3.2.1: 20 of
    the H800's 132 SMs for all-to-all and PP communication), so compute runs at (SMs - c) / SMs of
    its rate: scale = SMs / (SMs - c). 1.0 with serial pairs."""
    opt = plan.strategy.options
    if opt.pair_overlap != "concurrent" or not opt.pair_comm_sms:
        return 1.0
    sms = plan.cluster.gpu.sm_count
    return sms / (sms - opt.pair_comm_sms)


def _comm_stream(plan: Plan, group: str) -> str:
    """Stream of a collective of ``group``: the expert dispatch / combine run on their own
    communication stream with ``options.overlap_moe_expert_parallel_comm`` (Megatron-LM
    pipeline_parallel/utils.py set_streams / get_comm_stream: the combined 1F1B step puts moe_dispatch
    and moe_combine on that stream, model_chunk_schedule_plan.py _build_callable_nodes), so one
    micro-batch's all-to-all runs beside the other's compute; likewise with
    ``options.moe_shared_expert_overlap`` (the all-to-all beside the shared experts' stream,
    taskgraph/work.py shared_pair); every other collective on ``tp``."""
    opt = plan.strategy.options
    return "ep" if group == "ep" and (opt.overlap_moe_expert_parallel_comm or opt.moe_shared_expert_overlap) else "tp"


def shared_fc1_share(model) -> float:
    """Share of a shared expert's time in fc1 + activation, by its GEMM FLOPs: fc1 is
    [h, (mats - 1) f], fc2 [f, h] (taskgraph/operators.py _moe_ops, the shared experts' GemmShapes),
    so (mats - 1) / mats: 2/3 gated (SwiGLU), 1/2 otherwise."""
    mats = 3 if model.gated_mlp else 2
    return (mats - 1) / mats


def grad_bytes_per_param(plan: Plan) -> int:
    """Megatron accumulates and reduces gradients in fp32 with bf16 (arguments.py sets
    accumulate_allreduce_grads_in_fp32 for bf16); fp16 keeps fp16 gradients."""
    tr, opt = plan.strategy.training, plan.strategy.options
    return 4 if (tr.precision in ("bf16", "fp8", "fp4") and opt.fp32_grad_accum) else 2


def param_bytes(plan: Plan) -> int:
    """Bytes of one model parameter as the GPU holds and gathers it: 2 (bf16/fp16 weights), or 1
    with ``options.fp8_param_gather`` (Megatron --fp8-param-gather: Transformer Engine keeps the
    compute weights as Float8Tensor and the distributed optimizer / FSDP all-gathers them in FP8,
    arguments.py help "perform the param all-gather in fp8"; torchao enable_fsdp_float8_all_gather)."""
    return 1 if plan.strategy.options.fp8_param_gather else DTYPE_BYTES[plan.strategy.training.precision]


def layer_input_bytes(plan: Plan) -> float:
    """Bytes of one layer's input activation (what full recompute keeps): 2sbh, / t with sp
    (Korthikanti 2022 Section 5), / cp with context parallelism."""
    tr = plan.strategy.training
    tokens = tr.micro_batch * tr.seq_len / plan.sizes.cp
    return DTYPE_BYTES[tr.precision] * tokens * plan.model.hidden / (plan.sizes.tp if plan.sp else 1)


def _op_cost(ctx: CostContext, op, policy: str, groups: dict, first_in_layer: bool) -> OpCost:
    plan = ctx.plan
    gpu, cluster = plan.cluster.gpu, plan.cluster
    flash = plan.strategy.options.flash_attention
    gacc = grad_bytes_per_param(plan)  # weight gradients accumulate into main_grad per micro-batch
    recipe = plan.strategy.options.fp8_recipe
    op, *merge = op_as_run(plan, ctx.stack, op)   # PyTorch's CP, DeepEP (taskgraph/stack_costs.py)
    t = {p: op_time(op, p, gpu, ctx.dtype, flash=flash, profile=ctx.profile, grad_accum_bytes=gacc, fp8_recipe=recipe,
                    stack=ctx.stack, **unfused_grad_accum(plan, ctx.stack))
         for p in ("fwd", "bwd_input", "bwd_weight")}
    t["fwd"] += merge[0]
    t["bwd_input"] += merge[1]
    slots = {("fwd", "before"): [], ("fwd", "after"): [], ("bwd", "before"): [], ("bwd", "after"): []}
    async_bwd = plan.strategy.options.tp_async_backward
    for c in op.comms:
        ranks = groups[c.group]
        max_nodes = plan.strategy.options.moe_max_nodes
        nbytes = tp_gather_bytes(ctx, op, c)   # FP8 all-gathers of TE's per-tensor recipes
        if c.copies and ctx.dtype == "fp8" and recipe == "blockwise" and c.where == "before":
            # DeepSeek-V3 Section 3.3.3: the dispatch (forward) and the gradient sent to the experts'
            # down-projections (backward) travel in FP8 with 1 x 128 scales; both combines stay BF16
            nbytes = c.bytes * FP8_COMM_FACTOR
        if c.copies and max_nodes:
            # node-limited dispatch / combine (DeepSeek-V3 Sections 2.1.2, 3.2.2): topologies/moe_dispatch.py
            secs = _node_limited(cluster, float(nbytes), ranks, c.copies, max_nodes,
                                 bool(getattr(cluster, "contention", False)))
        else:
            secs = comm_time(cluster, c.op, nbytes, ranks, (_FAMILY_AXIS.get(c.group), plan.sizes, ()))
        overlaps = c.overlaps if async_bwd else ""
        if c.overlaps == "attn":
            # ring attention (Liu 2023 Section 3): cp-1 exchanges, each hidden behind one chunk's
            # attention (1/cp of the core pass); only the remainder is exposed
            n = len(ranks)
            secs = max(0.0, secs - (n - 1) / n * t["fwd" if c.phase == "fwd" else "bwd_input"])
            overlaps = ""
        grp = {"etp": "tp", "etp-ep": "ep"}.get(c.group, c.group)    # expert TP collectives are TP collectives
        slots[(c.phase, c.where)].append(Comm(f"{grp}-comm", f"{c.group}-{c.op}", secs, _comm_stream(plan, c.group),
                                              overlaps=overlaps))
    if plan.strategy.options.tp_comm_overlap and op.kind == "gemm" and op.gemms and not op.name.endswith(ADAPTER_SUFFIX):
        _userbuffer_overlap(ctx, op, t, slots, gacc, len(groups["tp"]))
    if te_scaling_applies(ctx) and op.kind == "gemm" and op.gemms and not op.name.endswith(NOT_TE):
        te_scaling_work(ctx, op, t, slots, groups, comm_time)
    saved, rec = float(op.saved_activation_bytes), 0.0
    if ctx.dtype == "fp8" and recipe == "blockwise" and op.kind == "gemm" and not op.name.endswith(NOT_TE):
        # DeepSeek-V3 Section 3.3.3 (low-precision storage): the inputs Linear operators keep for their
        # backward (and the SwiGLU inputs of the MoE experts) are cached in FP8 with 1 x 128 scales;
        # an MLA up-projection's output (the attention core's Q, K, V: selective bytes) stays BF16
        keep = float(op.selective_recompute_bytes)
        saved = (saved - keep) * FP8_COMM_FACTOR + keep
    if ctx.dtype == "fp4" and op.kind == "gemm" and op.gemms and not op.name.endswith(NOT_TE):
        # Transformer Engine keeps a quantized GEMM input for the backward as the column-wise NVFP4 copy
        # wgrad reads (E2M1 + one E4M3 scale per 16: NVFP4_ELEMENT_BYTES of bf16's 2), as blockwise above
        keep = float(op.selective_recompute_bytes)
        saved = (saved - keep) * NVFP4_ELEMENT_BYTES / 2 + keep
    if policy == "selective":
        saved, rec = saved - op.selective_recompute_bytes, float(op.selective_recompute_bytes)
    elif policy == "full":
        saved, rec = (layer_input_bytes(plan) if first_in_layer else 0.0), saved
    return OpCost(
        name=op.name, fwd=t["fwd"], bwd_input=t["bwd_input"], bwd_weight=t["bwd_weight"],
        fwd_pre=tuple(slots[("fwd", "before")]), fwd_post=tuple(slots[("fwd", "after")]),
        bwd_pre=tuple(slots[("bwd", "before")]), bwd_post=tuple(slots[("bwd", "after")]),
        selective=op.selective_recompute_bytes > 0, saved_bytes=saved, recompute_bytes=rec,
        grad_bytes=float(op.params - op.frozen_params) * gacc,   # LoRA: frozen weights have none
    )


def _userbuffer_overlap(ctx: CostContext, op, t: dict, slots: dict, gacc: int, n: int) -> None:
    """``options.tp_comm_overlap`` (Megatron ``--tp-comm-overlap``: Transformer Engine userbuffers,
    taskgraph/overlap.py): the sequence-parallel all-gather before a GEMM and the reduce-scatter
    after it run chunk by chunk with that GEMM -- forward all-gather and the backward all-gather of
    the output gradient as TE's ring exchange (TP chunks), forward reduce-scatter as its pipeline
    (num_splits chunks on the SMs the communication leaves) -- so the pair becomes one block whose
    time replaces the GEMM's and the collective leaves the op's list. The asynchronous backward
    collectives (``Comm.overlaps``) stay side work (TE's bulk overlap). All-reduces (no sequence
    parallelism) cannot be decomposed this way and stay blocking."""
    plan = ctx.plan
    gpu = plan.cluster.gpu
    S = gpu.sm_count
    k = comm_kernels()
    flash, recipe = plan.strategy.options.flash_attention, plan.strategy.options.fp8_recipe

    def chunk_time(pass_: str, n: int) -> float:
        if ctx.profile is not None and ctx.profile.lookup(gpu, ctx.dtype, op, pass_) is not None:
            return t[pass_] / n  # a measured operator: no shape to re-price its chunks at
        return op_time(chunk_op(op, n), pass_, gpu, ctx.dtype, flash=flash, profile=None,
                       grad_accum_bytes=gacc, fp8_recipe=recipe, stack=ctx.stack)

    f_ring = sm_fraction(k.ub_ring_exchange_sms, S)
    for (phase, where), pass_ in ((("fwd", "before"), "fwd"), (("fwd", "after"), "fwd"), (("bwd", "before"), "bwd_input")):
        lst = slots[(phase, where)]
        for c in list(lst):
            if n < 2 or c.category != "tp-comm" or c.overlaps or c.op not in ("tp-all-gather", "tp-reduce-scatter"):
                continue
            if c.op == "tp-all-gather":   # ring exchange: n - 1 transfers of one shard each
                t[pass_] = ring_exchange(chunk_time(pass_, n), c.seconds / (n - 1), n, f_ring)
            else:                         # pipeline: GEMM chunks on the SMs left, RS chunk by chunk
                splits = k.ub_pipeline_splits
                margin = S / max(S - k.pipeline_sms(op.name), 1)   # set_sm_margin: proj 24, fc2 16 SMs
                t[pass_] = pipelined(chunk_time(pass_, splits) * margin, c.seconds / splits, splits)
            lst.remove(c)


def shard_groups(plan: Plan, dp_group: tuple) -> tuple[tuple, tuple]:
    """(shard group, replica group) of the representative for ZeRO / FSDP states. HSDP (PyTorch
    ``fully_shard`` on a 2-D ("replicate", "shard") mesh; torchtitan data_parallel_shard_degree)
    shards over consecutive data-parallel ranks and replicates across the groups; without
    ``dp_shard`` the shard group is the whole dp x cp group and the replica group is the rank alone."""
    k = plan.shard_size
    return tuple(dp_group[:k]), tuple(dp_group[::k])


def _shard_share(plan: Plan, dp_group: tuple):
    """The contention family of ZeRO collectives: every dp x cp group at once when the shard group is
    the whole dp x cp group; None for HSDP sub-groups (not an axis of the placement)."""
    shard, _ = shard_groups(plan, dp_group)
    return ("dp-cp", plan.sizes, ()) if len(shard) == len(dp_group) else None


def _grad_reduce_time(plan: Plan, gbytes: float, dp_group: tuple, share=None, groups: tuple | None = None) -> float:
    """Reduce-scatter of gradients over the shard group, then (HSDP) all-reduce of the shard over the
    replica group (PyTorch HSDP: reduce-scatter intra-shard-group, all-reduce inter); DeepSpeed's
    BF16_Optimizer all-reduces at ZeRO-1 (taskgraph/stack_costs.py reduce_kind). ``groups``: (shard,
    replica) other than the dense parameters' (the routed experts': :func:`expert_shard_groups`)."""
    shard, rep = groups or shard_groups(plan, dp_group)
    t = comm_time(plan.cluster, reduce_kind(plan), gbytes, shard, share) if len(shard) > 1 else 0.0
    if len(rep) > 1:
        t += comm_time(plan.cluster, "all-reduce", gbytes / len(shard), rep)
    return t


def fsdp_layer_comms(plan: Plan) -> tuple[bool, bool, bool]:
    """Which ZeRO-3 / FSDP collectives run per layer and microbatch: (gather before forward, gather
    before backward, reduce-scatter after backward).

    Without pipeline parallelism FSDP gathers before each layer's forward, again before its backward
    when it resharded after forward, and reduce-scatters its gradients after backward (Rajbhandari
    2020 Section 5.3; PyTorch FSDP2 ``fully_shard``). With pipeline parallelism torch.distributed.
    pipelining turns off gradient sync and resharding after backward until a stage's last backward
    (``backward_maybe_with_nosync``): gradients are reduce-scattered once per stage at the end (as DP
    buckets), and with reshard_after_forward False the stage's parameters are gathered once per
    iteration (as the distributed optimizer's parameter gather) instead of per layer and microbatch.
    """
    if plan.zero < 3:
        return False, False, False
    reshard = plan.reshard_after_forward
    if plan.sizes.pp == 1:
        return True, reshard, True
    return reshard, reshard, False


def expert_shard_groups(plan: Plan, edp_group: tuple) -> tuple[tuple, tuple] | None:
    """(shard group, replica group) of the routed experts under ZeRO-3 / FSDP with ep > 1, or None when
    they are sharded with the dense parameters (ep 1, expert TP folding, a shard group ep does not
    divide). torchtitan apply_fsdp (torchtitan/models/llama4/infra/parallelize.py, deepseek_v3 likewise):
    ``fully_shard(transformer_block.moe.experts, mesh=dp_mod_ep_mesh)``, a separate FSDP unit on the
    ``dp_shard_mod_ep`` mesh of dp_shard * cp / ep ranks (the ranks holding the same experts: the
    expert-data-parallel group), prefetched beside its block (set_modules_to_forward_prefetch); with
    dp_shard * cp == ep the experts are not sharded at all. NeMo AutoModel's MoE parallelizer
    (nemo_automodel/components/moe/parallelizer.py) shards them the same way; DeepSpeed ZeRO-3 MoE
    partitions them over its expert-data-parallel group."""
    k = plan.shard_size
    if plan.sizes.ep == 1 or plan.sizes.etp is not None or k % plan.sizes.ep or not edp_group:
        return None
    ke = k // plan.sizes.ep
    return tuple(edp_group[:ke]), tuple(edp_group[::ke])


def _zero3_comms(ctx: CostContext, ops, dp_group, fwd_hide: float, bwd_hide: float,
                 edp_group: tuple = (), costs: tuple = ()) -> tuple[tuple, tuple, tuple, tuple]:
    """ZeRO-3 / FSDP collectives of one layer (see :func:`fsdp_layer_comms`), on the dp stream, and a wait (below).

    Prefetch (FSDP2 forward/backward prefetch; DeepSpeed ZeRO-3 prefetch, Rajbhandari 2020 Section 5.3): a layer's
    all-gather is issued while the previous layer computes, so only max(0, t_gather - t_hide) is exposed, ``t_hide``
    being the compute of the layer before it in that pass (0 for the first layer a stage runs in the pass). The
    gathered buffer lives from the gather to the end of the layer's pass (``Comm.mem_bytes``). With ep > 1 the routed
    experts are a unit of their own over the expert shard group (:func:`expert_shard_groups`): their gather and
    reduce-scatter follow the block's on the same stream, each with its own FSDP2 copies. DeepSpeed 2021's calls
    are per tensor, what the passes wait out (fourth) a stretch, not on the dp stream (taskgraph/zero3_fetch.py)."""
    plan = ctx.plan
    egroups = expert_shard_groups(plan, edp_group)
    eparams = sum(op.params for op in ops if op.name == "moe_experts") if egroups else 0
    params = sum(op.params for op in ops) - eparams  # this TP shard's layer parameters, gathered over dp
    pb, gb = param_bytes(plan), grad_bytes_per_param(plan)
    wbytes = pb * (params + eparams)
    shard, rep = shard_groups(plan, dp_group)
    g_fwd, g_bwd, rs_each = fsdp_layer_comms(plan)
    ag, copy_out, rs, grad_cat, wait = 0.0, 0.0, 0.0, 0.0, (0.0, 0.0)
    for n, group, unit in ((params, shard, None),) + (((eparams, egroups[0], egroups),) if eparams else ()):
        share = _shard_share(plan, dp_group) if unit is None else None
        cin, cout, rs_copy_in, cat = zero3_copy_times(ctx.stack, plan, n, len(group), pb, gb)  # FSDP2 / FSDP1
        grad_cat += cat
        if len(group) > 1:   # FSDP2's copy-in runs before its all-gather on the copy-in stream: prefetched with it
            ag += comm_time(plan.cluster, "all-gather", pb * n, group, share) + cin
        copy_out += cout
        rs += rs_copy_in + _grad_reduce_time(plan, gb * n * trainable_share(ops, unit is not None), dp_group, share, unit)
    if getattr(ctx.stack, "zero3_sync_fetch", False) and rs_each and not eparams and len(shard) > 1 == len(rep):
        ag, wait, rs_each = *layer_sync_collectives(plan, ops, costs, shard, share, comm_time, pb, gb), False
    # the prefetched gather holds its NCCL channels' SMs while the previous layer computes and shares
    # HBM with it (taskgraph/overlap.py): the pair takes bulk(hide, gather, f, g); the excess is charged here
    f = stream_shares(plan, {"dp": shard}).get("dp", 0.0)
    g = ring_hbm_loss(plan.cluster, shard) if f > 0 else 0.0
    # FSDP2's copy-out (after the gather) and reduce-scatter copy-in (before the reduce-scatter), FSDP1's
    # flat-gradient concat (after the backward) run on the compute stream: exposed (zero3_copy_times)
    fpre = (Comm("dp-comm", "zero3-param-gather", bulk(fwd_hide, ag, f, g) - fwd_hide + copy_out, "dp",
                 mem_bytes=wbytes),) if g_fwd else ()
    bpre = (Comm("dp-comm", "zero3-param-gather", bulk(bwd_hide, ag, f, g) - bwd_hide + copy_out + grad_cat, "dp",
                 mem_bytes=wbytes),) if g_bwd else ()
    bpost = (Comm("dp-comm", "zero3-grad-reduce-scatter", rs, "dp"),) if rs_each else ()
    return fpre, bpre, bpost, wait


#: Memo of cost records shared by every build_work call (a strategy sweep re-costs the same layers
#: and stages many times). Keys start with a context id standing for every plan input the costs read
#: (see ``context_id``); plans with a measured profile are not memoized (the file could change).
_MEMO: dict = {}
_CONTEXTS: dict = {}
_MEMO_MAX = 8192


def clear_cost_cache() -> None:
    """Forget memoized cost records and collective times (for benchmarks measuring cold costs)."""
    _MEMO.clear()
    _CONTEXTS.clear()
    _cached_comm.cache_clear()
    _node_limited.cache_clear()
    representative_groups.cache_clear()
    _groups_sig.cache_clear()


def _memo(key, fn):
    v = _MEMO.get(key)
    if v is None:
        if len(_MEMO) >= _MEMO_MAX:
            _MEMO.clear()
        v = _MEMO[key] = fn()
    return v


def context_id(plan: Plan) -> int | None:
    """A small int for the plan inputs stage costs depend on besides the stage's own layers."""
    strat = plan.strategy
    tr, opt = strat.training, strat.options
    if opt.profile:
        return None
    key = (plan.model, plan.cluster, plan.sizes, plan.sp, plan.zero, tr.micro_batch, tr.seq_len, tr.precision, tr.lora,
           opt.flash_attention, opt.fp32_grad_accum, opt.grad_bucket_mb, opt.tp_async_backward, opt.moe_load,
           opt.moe_max_nodes, opt.pair_overlap, opt.pair_comm_sms, opt.fp8_recipe, opt.fp8_param_gather, opt.activation_offload_layers, opt.cp_comm, opt.cp_load_balance, plan.shard_size, plan.reshard_after_forward, opt.overlap_grad_reduce,
           opt.tp_comm_overlap, opt.overlap_interference, opt.stack, opt.attention_kernel, opt.cross_entropy, opt.overlap_moe_expert_parallel_comm,
           opt.moe_flex_dispatcher_num_sms, opt.optimizer_cpu_offload, opt.optimizer_offload_fraction, opt.overlap_cpu_optimizer_d2h_h2d, opt.moe_shared_expert_overlap, opt.pipeline_scatter_gather, opt.moe_dispatcher, opt.cuda_graphs, fsdp1_microbatches(plan), tr.master_weights, opt.optimizer_dtypes)
    try:
        cid = _CONTEXTS.get(key)
    except TypeError:  # an unhashable field (a custom model spec holding a list, say)
        return None
    if cid is None:
        if len(_CONTEXTS) >= _MEMO_MAX:
            _CONTEXTS.clear()
            _MEMO.clear()
        cid = _CONTEXTS[key] = len(_CONTEXTS)
    return cid


def _layer_context(plan: Plan) -> tuple:
    """What a layer's cost records depend on besides its MoE flag, recompute policy and TP/CP/EP
    groups (the per-layer key in ``_build_stage``): shared by plans that differ only in pp, dp,
    ZeRO 0-2, the schedule or layers per stage (a strategy search re-costs the same layers)."""
    tr, opt, s = plan.strategy.training, plan.strategy.options, plan.sizes
    return (plan.model, plan.cluster, s.tp, plan.sp, s.cp, s.ep, tr.micro_batch, tr.seq_len, tr.precision, tr.lora,
            opt.flash_attention, opt.fp32_grad_accum, opt.tp_async_backward, opt.moe_load, opt.cp_comm,
            opt.cp_load_balance, opt.moe_max_nodes, opt.fp8_recipe, opt.fp8_param_gather, opt.activation_offload_layers,
            opt.tp_comm_overlap, opt.overlap_interference, opt.stack, opt.attention_kernel, opt.cross_entropy, opt.overlap_moe_expert_parallel_comm,
            opt.moe_dispatcher, opt.cuda_graphs, tr.master_weights, (s, plan.shard_size, plan.reshard_after_forward, fsdp1_microbatches(plan)) if plan.zero == 3 else None)


@lru_cache(maxsize=4096)
def _groups_sig(cluster, sizes, prank: int) -> tuple:
    """The placement of pipeline rank ``prank``'s groups as collective costs see it: collective times
    depend on a group's ranks only through ``topologies.collectives.group_layout`` (size, nodes,
    GPUs per node; tested in tests/test_strategy_search.py), so stages on pipeline ranks with equal
    signatures have equal cost records (a stage memo key; identical middle stages collapse)."""
    from topologies.collectives import group_layout
    return tuple((axis, group_layout(ranks, cluster)) for axis, ranks in representative_groups(sizes, prank))


@lru_cache(maxsize=1024)
def representative_groups(sizes, prank: int) -> tuple:
    """(axis, ranks) of the representative of pipeline rank ``prank``: tp, cp, dp (= dp x cp) and ep."""
    rep = rank_of(0, 0, 0, prank, sizes)
    groups = {g: group_ranks(g, sizes, rep) for g in ("tp", "cp", "dp", "ep", "etp", "etp-ep")}
    # the routed experts' data-parallel group (Megatron expert_data_parallel: world / (pp*ep*etp))
    groups["edp"] = group_ranks("edp" if sizes.etp is not None else "cp-edp", sizes, rep)
    # Gradients are reduced, and ZeRO / the distributed optimizer shard, over dp x cp (Megatron-LM
    # parallel_state "dp-cp" group: CP ranks hold the same weights and see different tokens).
    groups["dp"] = group_ranks("dp-cp", sizes, rep)
    groups["amax"] = group_ranks("tp-dp-cp", sizes, rep)  # TE delayed scaling's amax group (te_scaling.py)
    return tuple(groups.items())


def build_work(plan: Plan, *, fidelity: str | None = None, check_profile: bool = False, compute_only: bool = False) -> IterationWork:
    """Cost records for every virtual stage of ``plan``.

    ``check_profile``: raise when a row of ``options.profile`` matched no operator of this plan
    (``ProfileTable.check_all_used``; off in sweeps, where one profile serves many plans).
    ``compute_only``: the same operators and transfers without gradient buckets and optimizer steps, for a
    lower bound (``simulator/search/bound.py``) without the DP network model, shared across dp and ZeRO 0-2.

    Stage records are memoized across calls by everything they depend on (the plan's model, cluster,
    sizes, training and cost options, the stage's pipeline rank, whether it holds the embedding or
    the head, and its layers' MoE flags and recompute policies); coarse stages too.
    """
    strat = plan.strategy
    tr, opt = strat.training, strat.options
    # A concurrent DualPipe pair interleaves the operators of its two halves (one half's all-to-all
    # under the other's compute, DeepSeek-V3 Section 3.2.1); a coarse block per chunk cannot, so such
    # strategies are costed per operator at either fidelity (lower_coarse refuses them too) and the
    # two fidelities give the same answer (tests/test_fidelity_agreement.py).
    # Megatron's combined 1F1B steps (options.overlap_moe_expert_parallel_comm) are such pairs too.
    concurrent = opt.pair_overlap == "concurrent" or opt.overlap_moe_expert_parallel_comm
    coarse = (fidelity or opt.fidelity) == "coarse" and not concurrent
    # a profile measured on another GPU applies only when options.profile_gpu says so (one error otherwise)
    profile = ProfileTable.load(opt.profile).applied_to(plan.cluster.gpu.name, opt.profile_gpu) \
        if opt.profile else None
    ctx = CostContext(plan, profile)
    cid = context_id(plan)
    s, dt = plan.sizes, DTYPE_BYTES[tr.precision]
    kw = dict(micro_batch=tr.micro_batch, seq_len=tr.seq_len, tp=s.tp, sp=plan.sp, cp=s.cp, lora=tr.lora)
    stages = []
    # SM fractions of the side streams (taskgraph/overlap.py); coarse records fold the TP one in
    shares = stream_shares(plan, dict(representative_groups(s, 0)))
    f_tp, f_dp = shares.get("tp", 0.0), shares.get("dp", 0.0)
    # the DP stream slowed by the compute beside it (HBM shared; taskgraph/overlap.py hbm_loss)
    g_dp = (ring_hbm_loss(plan.cluster, tuple(dict(representative_groups(s, 0)).get("dp", ())))
            if "dp" in shares else 0.0)
    shared = (opt.moe_shared_expert_overlap, shared_fc1_share(plan.model), shares.get("ep", 0.0))
    # schedules with W actions reduce gradients during the W pass (taskgraph/coarse.py bucket_tail)
    split = has_split_backward(plan.schedule)
    layer_cache: dict = {} if cid is None else _memo(("layers",) + _layer_context(plan), dict)
    # a small id for the layer context (cleared with the memo, as context ids are); pace per pipeline rank
    lcid, paces = None if cid is None else _CONTEXTS.setdefault(("layers",) + _layer_context(plan), len(_CONTEXTS)), {}
    S = plan.schedule.num_stages
    hp = plan.bf16_layers != (0, 0)   # some layers of an fp8 / fp4 recipe stay BF16 (Plan.bf16_layers)
    for stage in range(S):
        prank = plan.schedule.stage_to_rank[stage]
        groups = dict(representative_groups(s, prank))
        lis = plan.stage_layers(stage)
        pols = [tr.recompute_layers[li] if tr.recompute_layers else tr.recompute for li in lis]
        if cid is None:
            stages.append(_build_stage(plan, ctx, stage, lis, pols, groups, layer_cache, dt, kw))
            continue
        # a named slow node paces only the pipeline rank holding it (topologies/stragglers.py), so the
        # stage's pace is part of the key along with its groups' placement
        first, last = plan.schedule.is_first_stage(stage), plan.schedule.is_last_stage(stage)
        pace = paces[prank] if prank in paces else paces.setdefault(prank, stage_pace(plan.cluster, s, prank))
        sig = (cid, first, last, _groups_sig(plan.cluster, s, prank), pace,
               tuple((plan.model.layer_kind(li), p, hp and plan.layer_in_bf16(li)) for li, p in zip(lis, pols)))
        if coarse:   # compute_only: the chunk operator depends on the layer context, not dp / ZeRO 0-2
            key = ("coarse-compute", split, f_tp, shared, lcid) + sig[1:] if compute_only else ("coarse", split) + sig
            stages.append(_memo(key, lambda: coarse_stage_work(_build_stage(plan, ctx, stage, lis, pols, groups, layer_cache, dt, kw, not compute_only), f_tp, f_dp, opt.overlap_grad_reduce, split, shared, g_dp)))
            continue
        parts = _memo(("stage",) + sig, lambda: stage_parts(
            _build_stage(plan, ctx, stage, lis, pols, groups, layer_cache, dt, kw)))
        stages.append(named_stage(parts, lis, pols, first, last))
    if check_profile and profile is not None:
        profile.check_all_used()

    # Pipeline transfers, rank r -> r+1 representatives (taskgraph/pipeline_p2p.py)
    sched = plan.schedule
    times = lambda: transfer_times(plan, comm_time)
    pairs, after = times() if cid is None else _memo(("p2p", cid, sched.stage_to_rank), times)
    pairs = dict(pairs)
    if not opt.p2p_overlap and opt.p2p_host_gap_us and opt.cuda_graphs != "full_iteration":
        # Blocking exchanges synchronize the device (Megatron-LM p2p_communication._communicate:
        # torch.cuda.synchronize() after batch_isend_irecv when batch_p2p_sync, the default), so both sides'
        # GPUs idle until the host launches the next action's first kernel (not in a full-iteration graph).
        pairs = {k: v + opt.p2p_host_gap_us * 1e-6 for k, v in pairs.items()}
    if ctx.stack is not None and ctx.stack.p2p_serial:
        pairs = serial_exchanges(pairs, after)
    p2p = max(pairs.values(), default=0.0)
    work = IterationWork(
        stages=tuple(stages), p2p_fwd_s=p2p, p2p_bwd_s=p2p,
        overlap_grad_reduce=opt.overlap_grad_reduce, overlap_param_gather=opt.overlap_param_gather,
        tp_comm_overlap=opt.tp_comm_overlap, p2p_overlap=opt.p2p_overlap, p2p_pairs=pairs,
        represents=s.tp * s.cp * s.dp,
        concurrent_pairs=concurrent, delay_wgrad=opt.delay_wgrad_compute,
        shared_expert_overlap=opt.moe_shared_expert_overlap, shared_fc1_share=shared_fc1_share(plan.model),
        pair_compute_scale=pair_compute_scale(plan),
        meta={"model": plan.model.name, "cluster": plan.cluster.name, "num_gpus": plan.num_gpus,
              "tp": s.tp, "pp": s.pp, "dp": s.dp, "cp": s.cp, "ep": s.ep, "vpp": plan.vpp,
              **({"sm_share": shares} if shares else {}), **({"hbm_loss": {"dp": g_dp}} if g_dp > 0 else {}),
              **({"split_backward": True} if split else {})},
    )
    if profile is not None:  # which operator passes the measured profile priced, which the cost model did
        work = replace(work, meta={**work.meta, "profile": profile_coverage(profile)})
    if coarse:
        if cid is None:
            from taskgraph.coarse import coarsen
            return coarsen(work)
        # the stages are coarse already (memoized); coarsen() would only add the meta entry
        work = replace(work, meta={**work.meta, "fidelity": "coarse"})
    return work


def profile_coverage(profile: ProfileTable) -> dict:
    """Measured operator times take precedence over the cost model (taskgraph/cost.py op_time): how
    many distinct operator passes the profile priced and which the cost model priced instead."""
    measured = sorted({f"{k[2]} {k[3]}" for k in profile.used})
    modelled = sorted({f"{k[2]} {k[3]}" for k in profile._seen} - set(measured))
    return {"path": profile.path, "measured": len(measured), "modelled": len(modelled),
            "modelled_examples": modelled[:6]}


def _build_stage(plan: Plan, ctx: CostContext, stage: int, lis, pols, groups: dict, layer_cache: dict, dt: int,
                 kw: dict, buckets: bool = True) -> StageWork:
    """Operator-level cost records of one stage (``buckets=False``: no buckets, no optimizer step). Layers pay
    DTensor's dispatch, FSDP2's hooks ([HOST-DT]) and DeepSpeed 2021's ZeRO-3 fetch (taskgraph/zero3_fetch.py)."""
    opt, s, layers = plan.strategy.options, plan.sizes, []  # layers: list[LayerWork]
    gemm_info: dict = {}   # layer index -> te_layer_gemms
    host_s, host_c = (getattr(plan.cluster, f, 0.0) * 1e-6 for f in ("host_us_per_kernel", "host_us_per_collective"))
    flash = opt.flash_attention
    scale, hooks = stack_host_terms(ctx.stack, len(groups["tp"]), plan.zero == 3 and plan.shard_size > 1, host_s)
    if plan.schedule.is_first_stage(stage):
        ops = embedding_operators(plan.model, dtype_bytes=dt, **kw)
        layers.append(LayerWork("embedding", host_bound(ops, [_op_cost(ctx, o, "none", groups, False) for o in ops],
                      host_s, flash, host_c, ctx.stack, graphs=layer_graphs(opt, ops, "embedding", host_s))))
    for j, (li, policy) in enumerate(zip(lis, pols)):
        # ZeRO-3 prefetch hides a gather behind the previous layer of the pass: the stage's first
        # layer (forward) and last layer (backward) have nothing to hide behind
        edge = (j == 0, j == len(lis) - 1) if plan.zero == 3 else (False, False)
        off, wait = j < opt.activation_offload_layers, (0.0, 0.0)
        bf16 = plan.layer_in_bf16(li)
        key = (plan.model.layer_kind(li), policy, groups["tp"], groups["cp"], groups["ep"], groups["etp"], edge, off,
               bf16)
        if key not in layer_cache:
            lctx = CostContext(plan, ctx.profile, "bf16") if bf16 else ctx
            ops = layer_operators(plan.model, ep=s.ep, etp=s.etp, dtype_bytes=dt, flash_attention=opt.flash_attention,
                                  layer_index=li, moe_load=opt.moe_load, cp_comm=opt.cp_comm,
                                  cp_balance=opt.cp_load_balance, moe_dispatcher=opt.moe_dispatcher, **kw)
            costs = [_op_cost(lctx, o, policy, groups, i == 0) for i, o in enumerate(ops)]
            if plan.zero == 3:
                fwd_c = sum(c.fwd for c in costs)
                bwd_c = sum(c.bwd_input + c.bwd_weight for c in costs)
                fpre, bpre, bpost, wait = _zero3_comms(lctx, ops, groups["dp"], 0.0 if edge[0] else fwd_c,
                                                       0.0 if edge[1] else bwd_c, groups.get("edp", ()), costs)
                costs[0] = _with(costs[0], fwd_pre=fpre + costs[0].fwd_pre, bwd_post=costs[0].bwd_post + bpost)
                costs[-1] = _with(costs[-1], bwd_pre=bpre + costs[-1].bwd_pre)
            if off:
                costs = _offloaded(plan, costs)
            layer_cache[key] = host_bound(ops, costs, host_s, flash, host_c, ctx.stack, scale, hooks, (
                plan.model, plan.shard_size if plan.zero == 3 else 1, wait), layer_graphs(opt, ops, "layer", host_s))
            layer_cache[("te-gemms",) + key] = te_layer_gemms(ops)
        gemm_info[li] = layer_cache[("te-gemms",) + key]
        layers.append(LayerWork(f"layer{li}", layer_cache[key], policy))
    with_delayed_amax(ctx, layers, len(layers) - len(lis), lis, groups, gemm_info, comm_time)
    if plan.schedule.is_last_stage(stage):
        ops = head_operators(plan.model, dtype_bytes=dt, ep=s.ep, etp=s.etp, flash_attention=opt.flash_attention,
                             moe_load=opt.moe_load, cp_comm=opt.cp_comm, cp_balance=opt.cp_load_balance,
                             moe_dispatcher=opt.moe_dispatcher, **kw)
        layers.append(LayerWork("head", host_bound(ops, [_op_cost(ctx, o, "none", groups, False) for o in ops],
                      host_s, flash, host_c, ctx.stack, graphs=layer_graphs(opt, ops, "head", host_s))))
    pace = stage_pace(plan.cluster, plan.sizes, plan.schedule.stage_to_rank[stage])
    if not buckets:
        return paced(StageWork(tuple(layers), (), 0.0), pace)
    return paced(_stage_work(plan, tuple(layers), groups["dp"], groups, pace, ctx.profile), pace)


def _offloaded(plan: Plan, costs: list) -> list:
    """A layer whose saved activations go to host memory (``options.activation_offload_layers``;
    Megatron --cpu-offloading, Transformer Engine ``get_cpu_offload_context``): after its forward the
    saved tensors are copied to the host on a copy stream while the next layer's forward runs, and
    copied back while the next layer's backward runs before its own (TE offload handler: "offloading
    of layer i overlaps with the computation of layer i+1"; the neighbouring layer is taken equal to
    this one). Each copy moves the layer's saved bytes S over the host link (PCIe / NVLink-C2C,
    ``cluster.host_link_bandwidth``) in S / bandwidth; only max(0, S / bandwidth - pass time) is
    exposed, as a transfer on the ``offload`` stream after the layer's forward and before its backward.
    The activations then hold no GPU memory between the passes (the one-layer staging buffer TE keeps
    is not counted)."""
    saved = sum(c.saved_bytes for c in costs)
    t = saved / plan.cluster.host_link_bandwidth
    fwd = sum(c.fwd for c in costs)
    bwd = sum(c.bwd_input + c.bwd_weight for c in costs)
    out = Comm("offload", "activation-offload", max(0.0, t - fwd), "offload")
    back = Comm("offload", "activation-reload", max(0.0, t - bwd), "offload")
    costs = [_with(c, saved_bytes=0.0) for c in costs]
    costs[-1] = _with(costs[-1], fwd_post=costs[-1].fwd_post + (out,), bwd_pre=(back,) + costs[-1].bwd_pre)
    return costs


def _with(c: OpCost, **kw) -> OpCost:
    return replace(c, **kw)


def _stage_work(plan: Plan, layers: tuple[LayerWork, ...], dp_group: tuple[int, ...],
                groups: dict | None = None, pace: float = 1.0, profile: ProfileTable | None = None) -> StageWork:
    """Gradient buckets in backward order (Megatron DDP) and the optimizer step of one stage; the
    step's GPU work runs at the stage's straggler ``pace`` (topologies/stragglers.py), and a profile
    row ``optimizer`` for the stage's parameter count replaces the streamed Adam bytes."""
    s, gbp, pbytes, opt = plan.sizes, grad_bytes_per_param(plan), param_bytes(plan), plan.strategy.options
    limit_params = (opt.grad_bucket_mb * 1e6 / gbp) if opt.grad_bucket_mb else max(
        BUCKET_MIN_PARAMS, BUCKET_PARAMS_PER_DP * s.dp)
    buckets: list[Bucket] = []
    total_params = 0.0
    share = ("dp-cp", s, _pp_background(plan, layers) + _axis_background(plan, layers, groups or {}))
    edp_group = (groups or {}).get("edp", dp_group[:1])
    times: dict = {}  # (expert?, bucket size) -> (reduce, gather) seconds: equal layers repeat bucket sizes

    def bucket(li, oi, params, expert=False):
        t = times.get((expert, params))
        if t is None:
            b = (_expert_bucket(plan, li, oi, params, gbp, pbytes, edp_group) if expert else
                 _bucket(plan, li, oi, params, gbp, pbytes, dp_group, share))
            times[(expert, params)] = (b.reduce_s, b.gather_s)
            return b
        return Bucket(li, oi, params * gbp, *t)

    if not fsdp_layer_comms(plan)[2]:   # gradients reduced in buckets at the end (DDP / ZeRO 1-2 / FSDP + PP)
        # Megatron DDP keeps the routed experts' gradients in buffers of their own, bucketed and reduced
        # over the expert-data-parallel group (distributed_data_parallel.py expert_parallel_buffers)
        acc = {False: 0.0, True: 0.0}
        for li in range(len(layers) - 1, -1, -1):
            for oi in range(len(layers[li].ops) - 1, -1, -1):
                op = layers[li].ops[oi]
                gb = op.grad_bytes
                if gb <= 0:
                    continue
                ex = op.name.endswith("moe_experts")
                acc[ex] += gb / gbp
                total_params += gb / gbp
                if acc[ex] >= limit_params:
                    buckets.append(bucket(li, oi, acc[ex], ex))
                    acc[ex] = 0.0
        for ex in (True, False):
            if acc[ex] > 0:  # the last (first-layer) bucket closes at the stage's first op with parameters
                li, oi = _first_param_op(layers)
                buckets.append(bucket(li, oi, acc[ex], ex))
    else:
        total_params = sum(op.grad_bytes for l in layers for op in l.ops) / gbp
    shard = optimizer_params(plan, layers)
    gpu = plan.cluster.gpu
    bw = gpu.hbm_bandwidth * gpu.efficiency.hbm_efficiency
    # a row measured at another data-parallel size scales with the parameters this rank updates
    measured = None if profile is None else profile.lookup_scaled(
        gpu, plan.strategy.training.precision, OPTIMIZER_OP, "fwd", shard)
    # the fused Adam kernel, plus the master-weight copy (PyTorch FSDP casts at its gather instead)
    adam = (adam_step_of(plan, shard, gbp) if measured is None else measured) * pace
    opt_s = step_overhead_s(plan, shard, layers)  # gradient norm (+ fp16 found-inf), taskgraph/overheads.py
    if plan.zero < 3:
        # Megatron-LM zeroes the contiguous gradient buffer once per iteration (megatron/core/distributed/
        # param_and_grad_buffer.py, _ParamAndGradBuffer.reset: grad_data.zero_()), FSDP frees its gradients
        # instead; Megatron 2021's flatten / divide / copy-back: taskgraph/overheads.py grad_buffer_bytes
        opt_s += total_params * grad_buffer_bytes(plan, gbp) / bw
    opt_s *= pace
    if opt.optimizer_cpu_offload:   # the offloaded share steps on the CPU (host link, host DRAM: no pace)
        tensors = max(1, sum(1 for l in layers for op in l.ops if op.grad_bytes > 0))
        adam = cpu_offload_step_time(plan, shard, adam, tensors, gbp, pbytes)
    return StageWork(layers, tuple(buckets), adam + opt_s)


def optimizer_params(plan: Plan, layers) -> float:
    """Parameters one rank of a stage (its cost records ``layers``) updates: each GPU its 1/dp shard
    with the distributed optimizer (ZeRO >= 1; HSDP: 1/dp_shard), the routed experts' 1/edp shard
    (except under FSDP's per-layer reduction, which shards them with the rest); all without ZeRO."""
    gbp = grad_bytes_per_param(plan)
    total = sum(op.grad_bytes for l in layers for op in l.ops) / gbp
    if plan.zero < 1:
        return total
    expert = sum(op.grad_bytes for l in layers for op in l.ops if op.name.endswith("moe_experts")) / gbp \
        if not fsdp_layer_comms(plan)[2] else 0.0
    return (total - expert) / plan.shard_size + expert / plan.expert_shard_size


def _first_param_op(layers) -> tuple[int, int]:
    for li, l in enumerate(layers):
        for oi, op in enumerate(l.ops):
            if op.grad_bytes > 0:
                return li, oi
    return 0, 0


def _axis_background(plan: Plan, layers, groups: dict) -> tuple:
    """TP / CP / EP collectives that cross nodes share the NICs with the overlapped DP reduction.
    Each enters at its average demand: the fraction of a micro-batch's compute time its
    collectives keep the NIC busy (their seconds / compute seconds, at most 0.9) times the NIC rate
    (``topologies/fabric.py``, demand-capped flows). Empty when the axis stays inside a node."""
    if not plan.strategy.options.overlap_grad_reduce or not getattr(plan.cluster, "contention", False):
        return ()
    per_mb = sum(op.fwd + op.bwd_input + op.bwd_weight for l in layers for op in l.ops)
    if per_mb <= 0:
        return ()
    g = plan.cluster.gpus_per_node
    out = []
    for axis in ("tp", "cp", "ep"):
        ranks = groups.get(axis, ())
        if len(ranks) < 2 or len({r // g for r in ranks}) < 2:
            continue
        busy = sum(c.seconds for l in layers for op in l.ops
                   for c in op.fwd_pre + op.fwd_post + op.bwd_pre + op.bwd_post if c.category == f"{axis}-comm")
        if busy > 0:
            duty = min(0.9, busy / per_mb)
            out.append((axis, float(f"{duty * plan.cluster.nic_bandwidth:.3g}")))
    return tuple(out)


def _pp_background(plan: Plan, layers) -> tuple:
    """Pipeline traffic sharing the NICs while DP buckets reduce (overlapped with backward): every
    rank sends one activation forward and one gradient backward per micro-batch, i.e. an average
    demand of p2p bytes / (the stage's compute time per micro-batch) on each neighbour flow
    (``topologies/fabric.py``, max-min fairness with demands). Empty without pp or overlap."""
    s, opt = plan.sizes, plan.strategy.options
    if s.pp < 2 or not opt.overlap_grad_reduce:
        return ()
    per_mb = sum(op.fwd + op.bwd_input + op.bwd_weight for l in layers for op in l.ops)
    if per_mb <= 0:
        return ()
    p2p = activation_bytes(plan)
    # rounded so that stages with nearly equal compute share one cache entry
    return (("pp", float(f"{p2p / per_mb:.3g}")),)


def _expert_bucket(plan: Plan, li, oi, params, gbp, pbytes, edp_group) -> Bucket:
    """A bucket of routed-expert gradients: all-reduce (zero 0) or reduce-scatter + parameter
    all-gather (zero >= 1) over the expert-data-parallel group (Megatron expert_data_parallel_group;
    its family is not an axis of the dense placement, so no all-groups-at-once contention)."""
    c = plan.cluster
    if len(edp_group) == 1:
        return Bucket(li, oi, params * gbp, 0.0, 0.0)
    if plan.zero == 0:
        return Bucket(li, oi, params * gbp, comm_time(c, "all-reduce", params * gbp, edp_group), 0.0)
    gather = plan.zero < 3 or not plan.reshard_after_forward
    return Bucket(li, oi, params * gbp, comm_time(c, "reduce-scatter", params * gbp, edp_group),
                  comm_time(c, "all-gather", params * pbytes, edp_group) if gather else 0.0)


def _bucket(plan: Plan, li, oi, params, gbp, pbytes, dp_group, share=None) -> Bucket:
    """Reduce: all-reduce (zero 0) or reduce-scatter (distributed optimizer, zero 1/2) of the bucket's
    gradients; gather: all-gather of the updated bf16 parameters (zero >= 1). All DP groups reduce
    at once (``share``: the dp-cp family, plus pipeline traffic on the same NICs)."""
    c = plan.cluster
    if len(dp_group) == 1:
        return Bucket(li, oi, params * gbp, 0.0, 0.0)
    if plan.zero == 0:
        return Bucket(li, oi, params * gbp, comm_time(c, "all-reduce", params * gbp, dp_group, share), 0.0)
    shard, _ = shard_groups(plan, dp_group)
    # FSDP + PP resharding after forward gathers per layer instead (fsdp_layer_comms); HSDP sub-groups
    # are timed without the all-groups-at-once contention (their family is not an axis of the placement)
    full = len(shard) == len(dp_group)
    gather = plan.zero < 3 or not plan.reshard_after_forward
    return Bucket(li, oi, params * gbp, _grad_reduce_time(plan, params * gbp, dp_group, share if full else None),
                  comm_time(c, "all-gather", params * pbytes, shard, (share[0], share[1], ()) if share and full else None)
                  if gather and len(shard) > 1 else 0.0)
