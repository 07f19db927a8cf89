"""Static memory per GPU: weights, gradients and optimizer states by precision and ZeRO stage,
and per-layer activation bytes by recompute policy.

Model states for mixed-precision Adam (Rajbhandari et al. 2020, ZeRO, Section 3.1 and Figure 1):
16-bit weights 2Ψ, 16-bit gradients 2Ψ, optimizer states K·Ψ with K = 12 (fp32 master weights,
momentum, variance). Partitioned over N data-parallel ranks:
    ZeRO-0: 2Ψ + 2Ψ + 12Ψ = 16Ψ
    ZeRO-1 (P_os):     2Ψ + 2Ψ + 12Ψ/N = 4Ψ + 12Ψ/N
    ZeRO-2 (P_os+g):   2Ψ + (2Ψ + 12Ψ)/N = 2Ψ + 14Ψ/N
    ZeRO-3 (P_os+g+p): 16Ψ/N
Megatron-LM with bf16 keeps an fp32 gradient buffer (``accumulate_allreduce_grads_in_fp32``): 4Ψ
instead of 2Ψ; with the distributed optimizer that is 6Ψ + 12Ψ/N (Megatron-LM docs,
"Distributed Optimizer", bytes per parameter table).
Without master weights (``training.master_weights: false``, NeMo AutoModel's bf16 model under FSDP2:
stacks.yaml [AM], [FSDP2-BF16]) the bf16 parameter is what the optimizer steps, its gradient is bf16 (FSDP2
casts the reduced gradient to the parameter's dtype) and torch Adam's moments take the parameter's dtype:
2Ψ + 2Ψ + 4Ψ = 8Ψ, each sharded as above (ZeRO-3: 8Ψ/N).
Megatron-core's precision-aware optimizer (``options.optimizer_dtypes``) holds its masters and moments in
the dtypes given: 2Ψ (int16 remainders beside bf16 weights, or fp16) or 4Ψ (fp32) of masters plus 4/2/1 Ψ
per moment (``optimizer_state_bytes``); bf16 main gradients are 2Ψ.
"""
from __future__ import annotations

from dataclasses import dataclass

from taskgraph.operators import activation_bytes_per_layer, embedding_operators, head_operators, layer_operators

ADAM_STATE_BYTES = 12  # fp32 master weight + momentum + variance (ZeRO Section 3.1, K = 12)
BF16_ADAM_STATE_BYTES = 4  # bf16 momentum + variance, no master copy (module docstring)
#: bytes of one stored element of the precision-aware optimizer by dtype (fp8: TE's uint8 Float8Tensor)
STATE_ELEMENT_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}


@dataclass(frozen=True)
class ModelStates:
    """Bytes of model states on one GPU."""

    params: int        # parameters held (before ZeRO-3 partitioning), count
    weights: float
    grads: float
    optimizer: float

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.optimizer


def model_state_bytes(params: float, *, dp: int, zero: int, weight_bytes: int = 2, grad_bytes: int = 2,
                      optimizer_bytes: int = ADAM_STATE_BYTES, shard_weights: bool | None = None,
                      shard_grads: bool | None = None) -> ModelStates:
    """Model-state bytes of ``params`` parameters on one GPU of a ``dp``-way data-parallel group.

    ``shard_weights`` / ``shard_grads`` override the ZeRO stage's rule (weights sharded from stage 3,
    gradients from stage 2) where the execution keeps them whole (FSDP with pipelining, below).

    >>> m = model_state_bytes(1e9, dp=8, zero=1)
    >>> m.total / 1e9   # 4 + 12/8 bytes per parameter
    5.5
    """
    n = dp
    w = weight_bytes * params / (n if (zero >= 3 if shard_weights is None else shard_weights) else 1)
    g = grad_bytes * params / (n if (zero >= 2 if shard_grads is None else shard_grads) else 1)
    o = optimizer_bytes * params / (n if zero >= 1 else 1)
    return ModelStates(int(params), w, g, o)


def optimizer_state_bytes(strategy) -> int:
    """Bytes per parameter of the optimizer's state (masters and moments) before ZeRO sharding: 12 fp32,
    4 without master weights (module docstring), or the precision-aware optimizer's masters (2: int16
    remainders or fp16; 4: fp32) plus its two moments' dtypes (taskgraph/overheads.py ``master_kind``)."""
    from taskgraph.overheads import keeps_master_weights, master_kind
    kind = master_kind(strategy)
    if kind is None:
        return ADAM_STATE_BYTES if keeps_master_weights(strategy) else BF16_ADAM_STATE_BYTES
    dt = strategy.options.optimizer_dtypes
    return (2 if kind in ("remainder", "fp16") else 4) + STATE_ELEMENT_BYTES[dt.exp_avg] + STATE_ELEMENT_BYTES[dt.exp_avg_sq]


def saved_optimizer_state_bytes(strategy) -> int:
    """Bytes per parameter of the optimizer's state as a checkpoint saves it: :func:`optimizer_state_bytes`,
    except that with Transformer Engine's masters the saved state is ``FusedAdam.get_unscaled_state``'s.
    Megatron's distributed optimizer saves every sharding type through ``_get_main_param_and_optimizer_states``
    (megatron/core/optimizer/distrib_optimizer.py, NVIDIA/Megatron-LM d98e8a6), which reads TE's
    ``get_unscaled_state`` (transformer_engine/pytorch/optimizers/fused_adam.py, d0067d0): bf16 states stay
    bf16 (2), fp32 masters of bf16 weights stay int16 remainders (2), fp16 and fp8 states are unscaled to
    fp32 (4)."""
    from taskgraph.overheads import master_kind
    kind = master_kind(strategy)
    if kind in (None, "mcore"):
        # the plain optimizer, or Megatron-core's fp32 masters with the moments as stored (the else branch)
        return optimizer_state_bytes(strategy)
    dt = strategy.options.optimizer_dtypes

    def unscaled(dtype: str) -> int:
        return STATE_ELEMENT_BYTES["fp32" if dtype in ("fp16", "fp8") else dtype]
    masters = 2 if kind == "remainder" else unscaled(dt.main_params)
    return masters + unscaled(dt.exp_avg) + unscaled(dt.exp_avg_sq)


def params_per_gpu(plan) -> dict[int, int]:
    """Parameters held by one GPU of each pipeline rank (TP/EP sharded). With tied embeddings and
    pp > 1 the last stage keeps its own copy of the word embedding for the LM head (Megatron-LM
    ``shared_embedding``), counted once per rank that holds a copy."""
    return {r: d + e for r, (d, e) in params_split(plan).items()}


def params_split(plan, attr: str = "params") -> dict[int, tuple[int, int]]:
    """(dense, routed-expert) parameters held by one GPU of each pipeline rank (see params_per_gpu);
    ``attr`` = "frozen_params": the frozen ones (LoRA, :func:`frozen_params_per_gpu`)."""
    from taskgraph.plan import DTYPE_BYTES
    tr = plan.strategy.training
    s = plan.sizes
    kw = dict(micro_batch=tr.micro_batch, seq_len=tr.seq_len, tp=s.tp, sp=plan.sp, cp=s.cp,
              dtype_bytes=DTYPE_BYTES[tr.precision], lora=tr.lora)
    sched = plan.schedule
    emb = sum(getattr(o, attr) for o in embedding_operators(plan.model, **kw))
    head_ops = head_operators(plan.model, ep=s.ep, etp=s.etp, **kw)
    head_ex = sum(getattr(o, attr) for o in head_ops if o.name.endswith("moe_experts"))   # MTP modules' experts
    head = sum(getattr(o, attr) for o in head_ops) - head_ex
    word_emb = next(getattr(o, attr) for o in embedding_operators(plan.model, **kw) if o.name == "embedding")
    if plan.model.position == "learned":
        word_emb -= plan.model.max_seq * plan.model.hidden
    cache: dict = {}
    out = {}
    for r in range(sched.pp):
        total = experts = 0
        stages = sched.rank_stages[r]
        for st in stages:
            for li in plan.stage_layers(st):
                key = plan.model.layer_kind(li)
                if key not in cache:
                    ops = layer_operators(plan.model, ep=s.ep, etp=s.etp, layer_index=li, **kw)
                    ex = sum(getattr(o, attr) for o in ops if o.name.endswith("moe_experts"))
                    cache[key] = (sum(getattr(o, attr) for o in ops) - ex, ex)
                total += cache[key][0]
                experts += cache[key][1]
            if sched.is_first_stage(st):
                total += emb
            if sched.is_last_stage(st):
                total += head
                experts += head_ex
                if plan.model.tied_embeddings and not any(sched.is_first_stage(x) for x in stages):
                    total += word_emb
        out[r] = (int(total), int(experts))
    return out


def frozen_params_per_gpu(plan) -> dict[int, tuple[int, int]]:
    """(dense, routed-expert) frozen parameters of one GPU of each pipeline rank under ``training.lora``
    (taskgraph/lora.py: every base weight; the adapters are the only trainable ones)."""
    return params_split(plan, "frozen_params")


def static_memory(plan) -> dict[int, ModelStates]:
    """Model states per GPU of each pipeline rank for ``plan``'s precision and ZeRO stage.

    ZeRO / distributed-optimizer shards span dp x cp (Megatron's "dp-cp" group), or ``dp_shard`` ranks
    with HSDP. With pipeline parallelism gradients accumulate whole over a stage's microbatches and are
    reduce-scattered after its last backward (Megatron's distributed optimizer; torch.distributed.
    pipelining with FSDP turns gradient sync off until then), so they are not sharded; FSDP + PP that
    does not reshard after forward keeps the stage's gathered weights through the step (Llama 3)."""
    from taskgraph.costing import grad_bytes_per_param, param_bytes
    from taskgraph.overheads import master_weights
    pp1 = plan.sizes.pp == 1
    shard_w = None if plan.zero < 3 else (pp1 or plan.reshard_after_forward)
    shard_g = None if pp1 else False
    master = master_weights(plan)   # without: bf16 gradients and moments (module docstring)
    # options.optimizer_dtypes (Megatron's precision-aware optimizer): its masters and moments' dtypes
    gbytes, obytes = (grad_bytes_per_param(plan) if master else 2), optimizer_state_bytes(plan.strategy)

    def states(p: int, shard: int) -> ModelStates:
        return model_state_bytes(p, dp=shard, zero=plan.zero, weight_bytes=param_bytes(plan), grad_bytes=gbytes,
                                 optimizer_bytes=obytes, shard_weights=shard_w, shard_grads=shard_g)
    # options.optimizer_cpu_offload: the offloaded share's fp32 master weights and Adam moments live in
    # host memory (Megatron HybridDeviceOptimizer: the CPU optimizer's parameters are host copies)
    opt = plan.strategy.options
    on_gpu = 1.0 - opt.optimizer_offload_fraction if opt.optimizer_cpu_offload else 1.0
    out = {}
    frozen = frozen_params_per_gpu(plan) if plan.strategy.training.lora else {}
    for r, (dense, experts) in params_split(plan).items():
        # routed experts: ZeRO / distributed-optimizer shards over the expert-data-parallel group
        # (Megatron: world / (pp * ep * etp); plan.expert_shard_size)
        fd, fe = frozen.get(r, (0, 0))
        a, b = states(dense - fd, plan.shard_size), states(experts - fe, plan.expert_shard_size)
        # LoRA's frozen weights: held (sharded like the rest under ZeRO-3), no gradient, no optimizer state
        wf = states(fd, plan.shard_size).weights + states(fe, plan.expert_shard_size).weights
        out[r] = ModelStates(a.params + b.params + fd + fe, a.weights + b.weights + wf, a.grads + b.grads,
                             (a.optimizer + b.optimizer) * on_gpu)
    return out


#: static buffers a per-layer CUDA graph keeps for each micro-batch in flight, each the size of the layer's
#: input activation: its input surface and its grad-output surface (TE graph.py make_graphed_callables:
#: static_input_surface, static_grad_outputs; the output and the grad input are the neighbouring layers'
#: surfaces); Megatron-core reuses a set once that micro-batch's backward has run (cuda_graphs.py
#: _get_sample_arguments), so the sets alive are the micro-batches in flight (taskgraph/cuda_graphs.py)
CUDA_GRAPH_BUFFERS_PER_LAYER = 2


def cuda_graph_buffer_bytes(plan, alive) -> float:
    """Bytes of the per-layer graphs' static buffers on one GPU whose (stage, micro-batch) activation sets
    ``alive`` are in flight at its peak (``options.cuda_graphs: layers``; 0 otherwise). A full-iteration
    graph's pool holds what the eager step allocates (its static data buffers, a few bytes per token, are
    not counted)."""
    if plan.strategy.options.cuda_graphs != "layers":
        return 0.0
    from taskgraph.costing import layer_input_bytes
    layers = sum(plan.layers_per_stage[st] for st, _ in alive)
    return CUDA_GRAPH_BUFFERS_PER_LAYER * layer_input_bytes(plan) * layers


def layer_activation_table(plan) -> list[dict]:
    """Per transformer layer: saved activation bytes per microbatch under each policy and the chosen one."""
    from taskgraph.plan import DTYPE_BYTES
    tr = plan.strategy.training
    s = plan.sizes
    rows = []
    cache: dict = {}
    for li in range(plan.model.layers):
        stage = next(st for st in range(plan.schedule.num_stages) if li in plan.stage_layers(st))
        moe = plan.model.layer_kind(li)
        if moe not in cache:
            cache[moe] = {pol: activation_bytes_per_layer(plan.model, tr.micro_batch, tr.seq_len, s.tp, plan.sp,
                                                          pol, plan.strategy.options.flash_attention, cp=s.cp,
                                                          ep=s.ep, dtype_bytes=DTYPE_BYTES[tr.precision],
                                                          layer_index=li,
                                                          moe_load=plan.strategy.options.moe_load,
                                                          cp_comm=plan.strategy.options.cp_comm, etp=s.etp,
                                                          lora=tr.lora)
                          for pol in ("none", "selective", "full")}
        policy = tr.recompute_layers[li] if tr.recompute_layers else tr.recompute
        rows.append({"layer": li, "stage": stage, "rank": plan.schedule.stage_to_rank[stage], "policy": policy,
                     **{f"{pol}_bytes": v for pol, v in cache[moe].items()}})
    return rows
