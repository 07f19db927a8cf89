"""Transformer Engine's per-tensor scaling work around its FP8 / NVFP4 GEMMs, as Megatron-LM runs it.

Sources: NVIDIA/TransformerEngine commit d0067d0 (TE) and NVIDIA/Megatron-LM commit d98e8a6 (Megatron).

**Cast kernels of the per-tensor FP8 recipes** ('delayed': TE DelayedScaling / Float8Quantizer; 'tensorwise':
TE Float8CurrentScaling / Float8CurrentScalingQuantizer). On Hopper an FP8 GEMM takes both operands in
the "TN" layout, so a quantized GEMM input is written row-wise (for fprop / dgrad) and column-wise (its
FP8 transpose, for wgrad). Per GEMM input, where TE does not fuse the cast into the producing kernel:

* norm-fused input (qkv, fc1: Megatron's TELayerNormColumnParallelLinear, gpt_layer_specs.py): delayed
  scaling writes FP8 from the norm kernel itself (transformer_engine/pytorch/csrc/extensions/
  normalization.cpp rmsnorm_fwd / layernorm_fwd, Impl::FULLY_FUSED) and the column-wise copy is a
  separate ``nvte_transpose`` (common/normalization/rmsnorm/rmsnorm_api.cpp "Compute FP8 transpose if
  required"): read 1, write 1. Current scaling cannot fuse the cast (its scale needs the amax of the
  whole tensor first): the norm writes BF16 and the amax (Impl::FUSED_NORM_AMAX_FP8), then
  ``Float8CurrentScalingQuantizer::quantize_with_amax`` (csrc/quantizer.cpp quantize_impl,
  compute_amax = false) runs a scale kernel (nvte_compute_scale_from_amax) and the cast
  (nvte_quantize_v2): read 2, write 1 (+ 1 for the column-wise copy).
* any other input (the attention output before attn_out, the activation before fc2 -- Megatron's own
  bias_swiglu / bias_gelu, not TE's --, every output gradient in backward): delayed scaling one
  cast-transpose kernel (read 2, write 1 + 1; ``fp8_cast_transpose_fused``, with the bias gradient
  ``cast_transpose_dbias``); current scaling the full ``Float8CurrentScalingQuantizer::quantize``:
  an amax pass (nvte_compute_amax_with_config, read 2), the scale kernel and the cast-transpose
  (read 2, write 1 + 1).
* sequence parallelism: a tensor all-gathered over TP is quantized row-wise only on the local shard
  ("All-gather is not supported with FP8 column-wise data", module/layernorm_linear.py and
  module/linear.py forward; grad_output in ``grad_output_preprocess``), gathered in FP8, and its
  column-wise copy is a transpose of the gathered tensor before wgrad
  (``ln_out_total.update_usage(columnwise_usage=True)``, ``grad_output.update_usage(...)`` in the
  modules' backward): read 1, write 1 on the full tensor.

Bytes per element run at the GPU's ``elementwise_efficiency`` plus one ``launch_overhead`` per kernel,
as the other recipes' quantization passes (taskgraph/cost.py). Weights are cast once per step
(Megatron passes ``is_first_microbatch`` to TE, which caches the FP8 weight and its transpose for the
step's other micro-batches): not charged per micro-batch, and not charged here.

**Amax reductions.** Delayed scaling keeps every FP8 tensor's amax in one global buffer per
``fp8_autocast`` region (quantization.py FP8GlobalStateManager.add_fp8_tensors_to_global_buffer:
3 per GEMM of a module in forward -- input, weight, output -- and 2 in backward, base.py
``num_gemms * 3 if fwd else num_gemms * 2``, fp32). ``reduce_and_update_fp8_tensors`` concatenates it
(torch.cat), all-reduces it with MAX over the region's group (``torch.distributed.all_reduce``,
async_op=False: the current stream waits for it) and runs ``fused_amax_and_scale_update_after_reduction``:
in forward at the region's exit (``autocast_exit``), in backward at the end of the backward of the
region's first FP8 module (``is_first_fp8_module`` -> ``ctx.reduce_and_update_bwd_fp8_tensors``,
module/layernorm_linear.py / linear.py backward). Megatron wraps the whole TransformerBlock (one
model chunk) in one region for 'delayed' (transformer/transformer_block.py
``use_outer_quantization_context = fp8_recipe == Fp8Recipe.delayed``) with
``fp8_group = parallel_state.get_amax_reduction_group(with_context_parallel=True)`` (fp8_utils.py
get_fp8_context): the tensor x data x context-parallel ranks of the pipeline stage
(_TENSOR_AND_DATA_PARALLEL_GROUP_WITH_CP). So per chunk and micro-batch: one all-reduce after its
forward, one at the end of its backward, over world / pp ranks.

Current scaling and NVFP4 keep no global buffer (``reduce_and_update_fp8_tensors`` is a no-op for
them); instead, under sequence parallelism, the amax of a tensor that is quantized before its TP
all-gather is all-reduced over the TP group before the scale is computed (module/_common.py
``set_quantizer_amax_reduction_group``; quantizer.cpp quantize_impl ``amax_reduction_group->allreduce(...)
->wait()``, the NVFP4 one ``allreduce_coalesced`` of its row-wise and column-wise amaxes): the input of a
column-parallel layer in forward (qkv, fc1: ``tp_group if sequence_parallel and parallel_mode ==
"column"``) and the output gradient of a row-parallel layer in backward (attn_out, fc2). Two per layer
and pass, blocking the stream (``wait()`` on the work makes the current stream wait).
"""
from __future__ import annotations

from dataclasses import replace

from taskgraph.lora import NOT_TE
from taskgraph.work import Comm

#: operators whose forward input comes from Transformer Engine's fused norm (LayerNormLinear)
NORM_FUSED = ("qkv", "mlp_up", "mlp_gate_up")
#: recipes whose scaling work this module prices (TE per-tensor scaling)
PER_TENSOR = ("delayed", "tensorwise")
#: (bytes per element, kernels) of quantizing one GEMM input: recipe -> case (module docstring).
#: 'norm' / 'other': written row-wise and column-wise; '*_rowwise': row-wise only (sequence-parallel
#: shard, gathered in FP8 afterwards); 'transpose': the column-wise copy of a gathered FP8 tensor.
CASTS = {
    "delayed": {"norm": (2, 1), "norm_rowwise": (0, 0), "other": (4, 1), "other_rowwise": (3, 1),
                "transpose": (2, 1)},
    "tensorwise": {"norm": (4, 2), "norm_rowwise": (3, 2), "other": (6, 3), "other_rowwise": (5, 3),
                   "transpose": (2, 1)},
}
#: fp32 amaxes per GEMM in a delayed-scaling region's buffer (module docstring)
DELAYED_AMAXES = {"fwd": 3, "bwd": 2}
#: bytes of one per-tensor amax all-reduce over TP: current scaling one fp32; NVFP4 its row-wise and
#: column-wise (Hadamard-transformed) amaxes, coalesced into one call
TP_AMAX_BYTES = {"tensorwise": 4, "fp4": 8}
#: kernels beside the delayed region's all-reduce: torch.cat of the buffer, the fused amax/scale update
DELAYED_UPDATE_KERNELS = 2
#: bytes per element of a sequence-parallel TP all-gather under TE's per-tensor FP8 (1, E4M3 / E5M2;
#: the per-tensor scale_inv is not gathered) over the BF16 activations' 2 (:func:`tp_gather_bytes`)
FP8_GATHER_FACTOR = 1 / 2


def gathered(op) -> tuple[bool, bool]:
    """(input gathered in forward, output gradient gathered in backward) over TP by sequence parallelism:
    a column-parallel layer's forward all-gather; a row-parallel layer's backward all-gather of dY
    (taskgraph/operators.py _column_comms / _row_comms)."""
    fwd = any(c.group == "tp" and c.op == "all-gather" and c.phase == "fwd" for c in op.comms)
    bwd = any(c.group == "tp" and c.op == "all-gather" and c.phase == "bwd" for c in op.comms)
    return fwd, bwd and not fwd


def tp_gather_bytes(ctx, op, c) -> float:
    """Bytes on the wire of collective ``c`` of ``op`` (``c.bytes`` counts BF16 activations): a
    sequence-parallel TP all-gather of a Transformer Engine GEMM under per-tensor FP8 moves FP8 bytes
    (:data:`FP8_GATHER_FACTOR`), with or without userbuffers. TE v1.8 (3ec998e, NeMo 24.07's):
    module/layernorm_linear.py forward writes the norm output as uint8 FP8 (``ln_out_dtype =
    torch.uint8 if fp8``) and gathers it (``gather_along_first_dim(ln_out, tp_group)``, or the
    ``qkv_fprop`` / ``fc1_fprop`` userbuffer, FP8 since it is in ``layers_all_gather_overlap``:
    module/base.py initialize_ub ``fp8_buf``); its backward re-gathers that saved FP8 ``ln_out`` for
    wgrad (the bulk ``qkv_dgrad`` / ``fc1_dgrad`` buffer, FP8 likewise); base.py
    ``grad_output_preprocess`` casts a row-parallel layer's dY to FP8 before gathering it ("FP8 case
    with gather"; ``proj_dgrad`` / ``fc2_dgrad`` userbuffers). Reduce-scatters stay BF16 (GEMM
    outputs; ``proj_fprop`` / ``fc2_fprop`` / ``*_wgrad`` buffers are not FP8 unless a config sets
    ``fp8_buf``). TE 2.x keeps it ("All-gather is not supported with FP8 column-wise data": row-wise
    FP8 gathered, module docstring)."""
    if c.group == "tp" and c.op == "all-gather" and ctx.dtype == "fp8" and te_scaling_applies(ctx) \
            and op.kind == "gemm" and op.gemms and not op.name.endswith(NOT_TE):
        return c.bytes * FP8_GATHER_FACTOR
    return c.bytes


def te_cast_cost(op, pass_: str, recipe: str, tp: int) -> tuple[float, int]:
    """(HBM bytes, kernel launches) of Transformer Engine's casts before ``pass_`` of GEMM operator ``op``
    under per-tensor ``recipe`` with TP size ``tp`` (module docstring).

    >>> from taskgraph.operators import GemmShape, Operator
    >>> op = Operator("attn_out", "gemm", 0, (GemmShape(4, 8, 2),), 0, 0, 0, 0, 0, 0)
    >>> te_cast_cost(op, "fwd", "delayed", 1), te_cast_cost(op, "bwd_input", "tensorwise", 1)
    ((32.0, 1), (192.0, 3))
    """
    table = CASTS[recipe]
    g_in, g_dy = gathered(op)
    norm = op.name.endswith(NORM_FUSED)
    total, kernels = 0.0, 0
    for g in op.gemms:
        x, dy = g.m * g.k * g.batch, g.m * g.n * g.batch
        if pass_ == "fwd":
            case = ("norm" if norm else "other") + ("_rowwise" if g_in else "")
            b, k = table[case]
            total += b * (x / tp if g_in else x)
        elif pass_ == "bwd_input":
            b, k = table["other_rowwise" if g_dy else "other"]
            total += b * (dy / tp if g_dy else dy)
        else:
            b, k = table["transpose"]
            n = (x if g_in else 0) + (dy if g_dy else 0)
            total += b * n
            k = k * (int(g_in) + int(g_dy))
        kernels += k
    return float(total), kernels


def te_cast_time(op, pass_: str, gpu, recipe: str, tp: int) -> float:
    """Seconds of :func:`te_cast_cost` on ``gpu``: bytes at its elementwise efficiency plus launches."""
    nbytes, kernels = te_cast_cost(op, pass_, recipe, tp)
    eff = gpu.efficiency
    return nbytes / (gpu.hbm_bandwidth * eff.elementwise_efficiency) + kernels * eff.launch_overhead


def tp_amax_reductions(op, precision: str, recipe: str) -> tuple[tuple[str, int], ...]:
    """The per-tensor amax all-reduces over TP around ``op``: ((phase, bytes), ...), phase 'fwd' (before
    the forward all-gather of a column-parallel input) or 'bwd' (before the backward all-gather of a
    row-parallel output gradient); current scaling and NVFP4 only (module docstring)."""
    key = "fp4" if precision == "fp4" else (recipe if precision == "fp8" else "")
    if key not in TP_AMAX_BYTES or op.kind != "gemm" or not op.gemms:
        return ()
    g_in, g_dy = gathered(op)
    return ((("fwd", TP_AMAX_BYTES[key]),) if g_in else ()) + ((("bwd", TP_AMAX_BYTES[key]),) if g_dy else ())


def fp8_gemm_count(ops) -> int:
    """TE GEMMs of a layer's operators (each one's amaxes join a delayed-scaling buffer): a grouped GEMM
    of n experts is n GEMMs of its TE GroupedLinear; the output head (Megatron's own
    ColumnParallelLinear) and LoRA's adapters (megatron-core linears, taskgraph/lora.py) are outside the region."""
    return sum(g.batch for op in ops if op.kind == "gemm" and not op.name.endswith(NOT_TE) for g in op.gemms)


def delayed_amax_bytes(gemms: int, phase: str) -> float:
    """Bytes of a delayed-scaling region's amax buffer in ``phase`` ('fwd' / 'bwd') over ``gemms`` GEMMs."""
    return 4.0 * DELAYED_AMAXES[phase] * gemms


def te_layer_gemms(ops) -> tuple[int, int]:
    """(:func:`fp8_gemm_count` of a layer's operators, index of its first GEMM operator)."""
    return fp8_gemm_count(ops), next((i for i, o in enumerate(ops) if o.kind == "gemm" and o.gemms), 0)


def te_scaling_applies(ctx) -> bool:
    """Whether the GEMMs of ``ctx`` (a taskgraph.costing.CostContext) run Transformer Engine's per-tensor
    scaling: FP8 with the 'delayed' or 'tensorwise' recipe, or NVFP4, on a stack without torchao's casts
    (taskgraph/float8_casts.py prices those)."""
    stack = ctx.stack
    if stack is not None and stack.float8_casts:
        return False
    return ctx.dtype == "fp4" or (ctx.dtype == "fp8" and ctx.plan.strategy.options.fp8_recipe in PER_TENSOR)


def te_scaling_work(ctx, op, t: dict, slots: dict, groups: dict, comm_time) -> None:
    """Add TE's cast kernels of the per-tensor FP8 recipes to ``op``'s pass times ``t`` (a pass a profile
    measured keeps its time), and put the per-tensor amax all-reduces over TP of current scaling and
    NVFP4 first in ``slots`` (phase, 'before'): blocking Comm entries before the sequence-parallel
    all-gather they precede. ``comm_time(cluster, kind, bytes, ranks)``: the costing's collective time."""
    plan = ctx.plan
    gpu, recipe, tp = plan.cluster.gpu, plan.strategy.options.fp8_recipe, groups["tp"]
    if ctx.dtype == "fp8":
        for p in t:
            if ctx.profile is None or ctx.profile.lookup(gpu, ctx.dtype, op, p) is None:
                t[p] += te_cast_time(op, p, gpu, recipe, len(tp))
    for phase, nbytes in tp_amax_reductions(op, ctx.dtype, recipe):
        secs = comm_time(plan.cluster, "all-reduce", nbytes, tp)
        slots[(phase, "before")].insert(0, Comm("tp-comm", "tp-amax-all-reduce", secs, "tp"))


def delayed_amax_comms(plan, group: tuple, gemms: int, comm_time) -> tuple[Comm, Comm]:
    """The (forward, backward) amax reductions of one model chunk's delayed-scaling region holding
    ``gemms`` FP8 GEMMs, over the amax reduction group ``group``: an all-reduce of the amax buffer on
    the compute stream's critical path, plus the buffer's concatenation and the fused amax / scale
    update kernels (:data:`DELAYED_UPDATE_KERNELS` launches)."""
    launch = plan.cluster.gpu.efficiency.launch_overhead * DELAYED_UPDATE_KERNELS
    fwd, bwd = (Comm("dp-comm", "amax-all-reduce", comm_time(plan.cluster, "all-reduce",
                                                             delayed_amax_bytes(gemms, p), group) + launch, "tp")
                for p in ("fwd", "bwd"))
    return fwd, bwd


def with_delayed_amax(ctx, layers: list, off: int, lis, groups: dict, gemm_info: dict, comm_time) -> None:
    """Attach one chunk's delayed-scaling amax reductions to its LayerWork list ``layers`` (in place):
    the forward one after the last FP8 layer's forward (the region's exit), the backward one after the
    backward of the first FP8 layer's first GEMM (the region's first FP8 module). ``lis``: the chunk's
    layer indices, the first at ``layers[off]``; ``gemm_info``: layer index -> :func:`te_layer_gemms`.
    The layers an fp8 recipe keeps in BF16 (Plan.bf16_layers) are outside the region."""
    plan = ctx.plan
    if not (te_scaling_applies(ctx) and ctx.dtype == "fp8" and plan.strategy.options.fp8_recipe == "delayed"):
        return
    pos = [j for j, li in enumerate(lis) if not plan.layer_in_bf16(li) and gemm_info[li][0] > 0]
    if not pos:
        return
    fwd, bwd = delayed_amax_comms(plan, groups["amax"], sum(gemm_info[lis[j]][0] for j in pos), comm_time)
    for j, i, side, c in ((pos[-1], -1, "fwd_post", fwd), (pos[0], gemm_info[lis[pos[0]]][1], "bwd_post", bwd)):
        lw = layers[j + off]
        ops = list(lw.ops)
        ops[i] = replace(ops[i], **{side: getattr(ops[i], side) + (c,)})
        layers[j + off] = replace(lw, ops=tuple(ops))
