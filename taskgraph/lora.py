"""LoRA fine-tuning on the operator graph (Hu et al. 2021, arXiv:2106.09685, Section 4).

What LoRA changes, and where each rule comes from:

* Frozen base (Hu 2021 Section 4.1: "W0 is frozen and does not receive gradient updates"): every
  operator keeps its forward and its input-gradient (dgrad) pass, but runs no weight-gradient pass;
  its parameters carry no gradient, no fp32 master copy and no optimizer state
  (``Operator.frozen_params``), so the DP reduction, the distributed optimizer's all-gather and the
  Adam step cover the adapters only (they are sized from the gradient bytes, taskgraph/costing.py).
* A frozen linear layer does not keep its input for the backward: Transformer Engine saves it only
  when ``backward_needs_input = is_grad_enabled and weight.requires_grad``
  (transformer_engine/pytorch/module/linear.py and layernorm_linear.py, forward). The norms keep
  theirs (their input gradient needs it).
* Each target gains Megatron-Bridge's ``ParallelLinearAdapter`` (src/megatron/bridge/peft/utils.py,
  wrapped by LoRALinear in peft/lora_layers.py: output = base(x) + adapter(x)), whose linears are
  megatron-core ``ColumnParallelLinear`` / ``RowParallelLinear`` (not Transformer Engine: they run in
  the base's 16-bit dtype even in an FP8 run, taskgraph/cost.py op_time):

  - column-parallel base (qkv, mlp_up / fc1): linear_in = ColumnParallelLinear(k, r,
    gather_output=True): A sharded r/tp, its [T, r/tp] output all-gathered to [T, r]; its input
    gradient is all-reduced over tp (without sequence parallelism; with it, TE returns the gathered
    layernorm output, ``return_layernorm_output_gathered``, Megatron-Bridge switches the adapter's own
    SP communication off and ``disable_grad_reduce`` its all-reduce: the input gradient is taken to ride
    on the base's reduce-scatter); linear_out = ColumnParallelLinear(r, d, gather_output=False): B sharded d/tp,
    its output adds onto the base's local shard.
  - row-parallel base (attn_out, mlp_down / fc2): linear_in = RowParallelLinear(k, r): A sharded k/tp,
    its [T, r] partial sums all-reduced; linear_out = ColumnParallelLinear(r, d, gather_output=True):
    B sharded d/tp, its output all-gathered to [T, d] (then split back to the sequence shard under
    sequence parallelism: no traffic forward, an all-gather backward); its input gradient
    ([T, r]) is all-reduced in the backward.
  - dropout on the adapter input ('pre', the default), the scale by alpha / r and the add onto the
    base output are elementwise kernels (their bytes below).
"""
from __future__ import annotations

import dataclasses

from strategies.errors import ConfigError
from strategies.lora_spec import LoraSpec

#: name suffix of an adapter operator (taskgraph/cost.py prices these GEMMs in 16 bits)
ADAPTER_SUFFIX = "_lora"
#: GEMM operators outside Transformer Engine (no FP8 / FP4 scaling work, no quantized saved inputs, no
#: userbuffers): Megatron's output head (its own ColumnParallelLinear) and the adapters
NOT_TE = ("lm_head", ADAPTER_SUFFIX)
_COLUMN = ("qkv", "mlp_up", "mlp_gate_up")
_ROW = ("attn_out", "mlp_down")
MASK_BYTES = 1   # a dropout mask: 1 byte per element (Korthikanti 2022 Section 4.1)


def lora_targets(lora: LoraSpec, names) -> set:
    """The operator names among ``names`` that get an adapter (``mlp_up`` also names ``mlp_gate_up``)."""
    want = set(lora.targets)
    if "mlp_up" in want:
        want.add("mlp_gate_up")
    return {n for n in names if n in want}


def check_lora(model, lora: LoraSpec | None, tp: int) -> None:
    """One ConfigError line for a LoRA that cannot run on ``model``: a target no layer has, a rank
    <= 0 or above min(in, out) of a target, or a rank the column-parallel A shard cannot split over tp
    (megatron-core ColumnParallelLinear divides its output size by tp)."""
    if lora is None:
        return
    names = {"attn_out"} | ({"qkv"} if model.attention != "mla" else set())
    if any(not model.is_moe_layer(li) for li in range(model.layers)):
        names |= {"mlp_gate_up" if model.gated_mlp else "mlp_up", "mlp_down"}
    for t in lora.targets:
        if not lora_targets(LoraSpec(lora.rank, targets=(t,)), names):
            raise ConfigError(f"training.lora.targets: model {model.name!r} has no {t!r} layer (its linear "
                              f"layers: {', '.join(sorted(names & set(_COLUMN + _ROW))) or 'none'}); drop it")
    dims = {"qkv": (model.hidden, (model.heads + 2 * model.kv_heads) * model.head_dim),
            "attn_out": (model.heads * model.v_head_dim, model.hidden),
            "mlp_up": (model.hidden, model.ffn), "mlp_gate_up": (model.hidden, model.ffn),
            "mlp_down": (model.ffn, model.hidden)}
    chosen = lora_targets(lora, names)
    for t in (x for x in _COLUMN + _ROW if x in chosen):    # a fixed order: one deterministic message
        k, d = dims[t]
        if lora.rank > min(k, d):
            raise ConfigError(f"training.lora.rank = {lora.rank} exceeds min(in, out) = {min(k, d)} of {t!r} "
                              f"({k} x {d}); choose rank <= {min(k, d)}")
        if t in _COLUMN and tp > 1 and lora.rank % tp:
            raise ConfigError(f"training.lora.rank = {lora.rank} must be divisible by parallel.tp = {tp} (the "
                              f"adapter's A of a column-parallel {t!r} is sharded over tp); choose a multiple of {tp}")


def frozen(op, input_kept: bool = False):
    """``op`` with its weights frozen: no weight-gradient pass, no gradient, and (a linear layer) no
    saved input unless another operator keeps it (``input_kept``: the attention output a fused attention
    kernel saves for its own backward, which operators.py counts on attn_out); what else it keeps (an
    MLA up-projection's Q/K/V: its selective bytes) stays. The embedding (its whole backward is the
    weight gradient) runs no backward and no backward collective."""
    if op.params <= 0 and op.bwd_weight_flops <= 0:
        return op
    saved, comms = op.saved_activation_bytes, op.comms
    if op.kind == "gemm" and len(op.gemms) == 1 and not input_kept:
        saved = op.selective_recompute_bytes
    if op.bwd_input_flops <= 0 and op.bwd_input_bytes <= 0:   # the embedding: no backward at all
        comms = tuple(c for c in comms if c.phase == "fwd")
    # the sequence-parallel re-gather of the saved input feeds only the weight gradient (Megatron /
    # TE: all-gathered for wgrad while dgrad runs, Collective.overlaps "dgrad"): gone with it
    comms = tuple(c for c in comms if not (c.phase == "bwd" and c.op == "all-gather" and c.overlaps == "dgrad"))
    return dataclasses.replace(op, bwd_weight_flops=0.0, bwd_weight_bytes=0, frozen_params=op.params,
                               saved_activation_bytes=saved, comms=comms)


def adapter(op, lora: LoraSpec, *, tokens: int, tokens_sp: int, tp: int, sp: bool, dt: int, operator, gemm, coll,
            input_kept: bool = False):
    """The adapter operator of target ``op`` (class ``operator``, shapes ``gemm``, collectives ``coll``:
    taskgraph/operators.py's Operator, GemmShape, Collective; passed in to keep the import one-way).
    ``input_kept``: its input is saved by another operator already (:func:`frozen`). The backward
    all-reduces of an input gradient are asynchronous beside the weight-gradient GEMMs (megatron-core
    LinearWithGradAccumulationAndAsyncCommunication, which both adapter linears use)."""
    g = op.gemms[0]
    T, r, k, n = tokens, lora.rank, g.k, g.n
    column = op.name in _COLUMN
    if column:   # A: [r/tp, k] on the gathered input; B: [n, r] (n = the base's local output)
        shapes, out_elems = (gemm(T, r // tp, k), gemm(T, n, r)), T * n
        params = (r // tp) * k + n * r
        comms = ()
        if tp > 1:
            comms = (coll("tp", "all-gather", "fwd", "after", dt * T * r),)
            if not sp:   # linear_in's input gradient (ColumnParallelLinear backward all-reduce)
                comms += (coll("tp", "all-reduce", "bwd", "after", dt * T * k, overlaps="wgrad"),)
    else:        # A: [r, k/tp] (k = the base's local input); B: [d/tp, r], output gathered to [T, d]
        d = n
        shapes, out_elems = (gemm(T, r, k), gemm(T, d // tp, r)), tokens_sp * d
        params = r * k + (d // tp) * r
        comms = ()
        if tp > 1:
            comms = (coll("tp", "all-reduce", "fwd", "after", dt * T * r),
                     coll("tp", "all-gather", "fwd", "after", dt * T * d))
            comms += ((coll("tp", "all-gather", "bwd", "before", dt * T * d),) if sp else ()) + \
                (coll("tp", "all-reduce", "bwd", "after", dt * T * r, overlaps="wgrad"),)
    f = sum(2.0 * s.m * s.n * s.k for s in shapes)
    io = sum(dt * (s.m * s.k + s.k * s.n + s.m * s.n) for s in shapes)
    # scale by alpha / r (read + write) and the add onto the base output (2 reads + 1 write); backward:
    # the scale again (the add's gradient is the output gradient itself)
    ew_f, ew_b = 5 * dt * out_elems, 2 * dt * out_elems
    x_elems = T * k
    drop = (2 * dt + MASK_BYTES) * x_elems if lora.dropout > 0 else 0
    # saved: linear_in's input (with dropout: the dropout output and its mask; without, nothing when another
    # operator keeps that tensor already) and linear_out's input
    saved = ((dt + MASK_BYTES) * x_elems if lora.dropout > 0 else (0 if input_kept else dt * x_elems)) + dt * T * r
    return operator(op.name + ADAPTER_SUFFIX, "gemm", op.layer, shapes, f, f, f, io + ew_f + drop, io + ew_b + drop,
                    io, params, saved, comms=comms)


def apply_lora(ops: list, lora: LoraSpec | None, *, flash: bool = True, **kw) -> list:
    """``ops`` (one layer, the embedding or the head, in forward order) under LoRA: every operator
    frozen, each target followed by its adapter (:func:`adapter`'s keywords). None: unchanged.
    ``flash``: a fused attention kernel, which saves its output O for its backward (FlashAttention,
    Dao 2022 Algorithm 2 reads O; TE's FusedAttnFunc saves it), so attn_out's input stays kept."""
    if lora is None:
        return ops
    targets = lora_targets(lora, [o.name for o in ops])
    out = []
    for o in ops:
        kept = flash and o.name == "attn_out"
        out.append(frozen(o, kept))
        if o.name in targets:
            out.append(adapter(o, lora, input_kept=kept, **kw))
    return out


def trainable_share(ops, experts: bool) -> float:
    """Share of the parameters of ``ops`` (the routed experts' if ``experts``, the rest otherwise) that
    carry a gradient: 1 without LoRA. FSDP gathers every weight, frozen ones too, but reduce-scatters
    only the gradients that exist (ZeRO-3 / FSDP layer collectives, taskgraph/costing.py)."""
    sel = [o for o in ops if (o.name == "moe_experts") == experts]
    total = sum(o.params for o in sel)
    return 1.0 if total <= 0 else sum(o.params - o.frozen_params for o in sel) / total
