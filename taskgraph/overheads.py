r"""Fixed costs that are not FLOPs: host dispatch per kernel, and per-step work besides the optimizer.

**Host dispatch (what makes small models CPU-bound).** PyTorch eager launches every kernel from one
host thread; each costs Python + pybind11 + autograd + ATen dispatch + ``cudaLaunchKernel`` on the
CPU, about 5-25 us per op (breakdown: Python ~1, pybind11 ~1, autograd ~1-3, ATen dispatch ~1-2,
backend ~1-5, driver ~1-3 us; "From PyTorch op to kernel launch", jiahuanglin.xyz GPU-kernel lesson
18). The GPU stream runs asynchronously behind the host, so it only waits when the host falls
behind over a stretch of work: per layer and pass we compare the host time ``kernels *
cluster.host_us_per_kernel`` with the GPU time (compute plus the collectives on its critical
path) and, when the host is slower, stretch the layer's compute by the difference (spread in
proportion to each op's time). Large layers never notice; small ones (hidden 2048, short
sequences) become host-bound, as measured on small models. PyTorch-native stacks add what their
framework runs on the host per layer: DTensor's dispatch under tensor parallelism (a multiplier of
the kernels' host time) and FSDP2's per-layer hooks (``stack_host_terms``; measured,
taskgraph/data/stacks.yaml [HOST-DT]). Kernels per op pass: one per GEMM
(``op.gemms``), one for fused attention (four unfused: QK^T, softmax, dropout, PV), one for
memory-bound kinds. Default 10 us per kernel (``clusters.yaml``; the low middle of the 5-25 us
range: Megatron and Transformer Engine fuse most elementwise work). An NCCL call costs the host more
(enqueue, proxy hand-off, launch): ``cluster.host_us_per_collective``, taken from the small-message
plateau of nccl-tests, which issues calls back to back so that a tiny all-reduce takes exactly the
issue cost (Azure ND A100 v4, NCCL 2.18: ~45 us for 1-32 KB; ND H200 v5, NCCL 2.20: ~30 us;
``benchmarks/validation/nccl_tests.csv``). This is a calibration on those microbenchmark rows,
not on training rows.

**The Adam step** (``adam_step_s``, the stage's optimizer step in ``taskgraph/costing.py``). Megatron-LM
steps with Transformer Engine's or apex's ``FusedAdam`` (megatron/core/optimizer/distrib_optimizer.py
imports ``transformer_engine.pytorch.optimizers.FusedAdam``, else ``apex.optimizers.FusedAdam``): one
multi-tensor kernel that reads the fp32 gradient, master weight and both moments and writes the weight
and moments, 28 bytes per parameter (torch's ``_fused_adam_``, ``torch.optim.Adam(fused=True)``, is
the same multi_tensor_apply design: aten/src/ATen/native/cuda/fused_adam_impl.cu). Megatron's
mixed-precision optimizers then copy the fp32 master weights into the bf16/fp16 model weights in a
separate pass (distrib_optimizer.py ``_copy_main_params_to_model_params``:
``shard_model_param.data.copy_(shard_main_param)``; optimizer.py Float16OptimizerWithFloat16Params: a
multi_tensor_scale from main to model), read 4 + write 2 bytes, and, when the gradients are not fp32
(fp16 training), cast them to fp32 first (``_copy_model_grads_to_main_grads``:
``main_param.grad = model_grad.float()``), read 2 + write 4. DeepSpeed's ZeRO-3 copies likewise
(stage3.py ``_reassign_or_swap_out_partitioned_parameters``). PyTorch FSDP under ZeRO-3 (torchtitan's
FSDP2, Composer's FSDP: the stacks with ``zero3_master_copy: false``, taskgraph/data/stacks.yaml) keeps
the fp32 shard as the parameter and casts to bf16 when it all-gathers, so its step is the fused kernel
alone (``master_copy``). Without master weights (``training.master_weights: false``: NeMo AutoModel's
bf16 model under FSDP2, stacks.yaml [AM], [FSDP2-BF16]) the parameter, its gradient and torch Adam's
two moments (torch/optim/adam.py ``_init_group``: ``torch.zeros_like(p)``, the parameter's dtype) are
bf16, so the same kernel streams 2-byte elements: 14 bytes per parameter, no copy and no gradient cast
(``value_bytes``). NeMo AutoModel's recipes step with ``torch.optim.Adam`` without ``fused=True``, which torch
runs as seven ``_foreach_`` passes (torch/optim/adam.py ``_multi_tensor_adam``): 72 bytes per fp32 parameter,
36 per bf16 one (stacks.yaml ``adam_bytes_per_param``, [TORCH-ADAM]), streamed at the copy rate. The fused
kernel is slower than a copy per byte: on an H200 ``torch.optim.AdamW(fused=True)``
over 134 M fp32 parameters moved its 28 bytes at 3,447 GB/s, 0.72 of the 4.8 TB/s peak, where a bf16
copy reached 4,189 GB/s (0.87) (benchmarks/kernel_data/h200-2026-11-26/membound.csv; the GPU catalog's
``optimizer_efficiency``; GPUs without a measurement use ``hbm_efficiency``). The copies stream at
``hbm_efficiency``.

**Per-step costs** (added to the stage's optimizer step, ``taskgraph/costing.py``): Megatron's gradient clipping (``megatron/core/optimizer/clip_grads.py``
``get_grad_norm_fp32``: a multi-tensor L2 norm reads every local fp32 gradient once, then an
all-reduce of one float over the model-parallel and, with the distributed optimizer, data-parallel
ranks, i.e. all GPUs) and, for fp16, the loss-scaler's found-inf check (``optimizer.py``
``_unscale_main_grads_and_check_for_nan``: another one-element all-reduce). Both reductions are
latency-bound and timed with the collective model on the whole world. The fp16 check is also a pass
over the gradients: ``torch._amp_foreach_non_finite_check_and_unscale_(main_grads, found_inf,
inv_scale)`` reads and writes every fp32 main gradient the optimizer steps (NVIDIA/Megatron-LM cdde433,
2021, and d98e8a6 megatron/core/optimizer/optimizer.py; DeepSpeed's fp16 optimizers unscale the same
way, ``grad.mul_(1. / combined_scale)``, ZeRO-3 stage3.py ``unscale_and_clip_grads``), 8 bytes per
parameter at ``hbm_efficiency``; bf16 runs have no loss scaler. Data loading is assumed prefetched
(Megatron's ``DataLoader`` with workers; not on the critical path).

**The gradient buffer** (:func:`grad_buffer_bytes`). Megatron's DDP zeroes its contiguous gradient buffer
once per step (a memset of every local gradient). Megatron-LM 2021's local DDP (cdde433
megatron/model/distributed.py ``allreduce_gradients``; the stack's ``ddp_flatten``) keeps 16-bit
gradients in no buffer unless asked (``--use-contiguous-buffers-in-ddp``, off by default, forced only by
fp32 accumulation): ``train_step`` sets them to None (``optimizer.zero_grad()``, ``set_to_none=True``),
and the reduction flattens them (``_flatten_dense_tensors``: a ``torch.cat``, read + write), divides the
flat copy by the data-parallel size in place (read + write), all-reduces it and copies each slice back
(``buf.copy_(synced)``, read + write): 6 gradient-widths per element, at data-parallel size 1 too (the
local DDP runs the same code). Its fp32 contiguous buffer (bf16) is zeroed and divided in place
(``buffer_.data /= ...``): 3 widths. PyTorch's DDP (``--DDP-impl torch``; the stack's ``ddp_bucket_copy``)
keeps its buckets from construction and zeroes nothing: its reducer copies each ready gradient into the
bucket dividing by the world size in the same kernel (``Reducer::copy_grad_to_bucket``, ``at::mul_out``:
"Divides while copying into the bucket view") and, after the all-reduce, each bucket view back
(``copy_bucket_to_grad``, ``grad.copy_(bucket_view)``; torch/csrc/distributed/c10d/reducer.cpp with
``gradient_as_bucket_view`` off, its default): 4 widths (stacks.yaml [TORCH-DDP]).
"""
from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

from taskgraph.cuda_graphs import graph_runs
from taskgraph.zero3_fetch import per_param_host_s, stage_refresh_s

US = 1e-6


def op_kernels(op, pass_: str, stack=None) -> int:
    """Kernel launches of one pass of one operator (see the module docstring); a memory-bound operator
    the stack does not fuse launches one kernel per pass over its tensors (taskgraph/stacks.py)."""
    flops = {"fwd": op.fwd_flops, "bwd_input": op.bwd_input_flops, "bwd_weight": op.bwd_weight_flops}[pass_]
    nbytes = {"fwd": op.fwd_bytes, "bwd_input": op.bwd_input_bytes, "bwd_weight": op.bwd_weight_bytes}[pass_]
    if flops <= 0 and nbytes <= 0:
        return 0
    if op.kind == "gemm" and op.gemms:
        return len(op.gemms) + (op.copy_kernels if pass_ != "bwd_weight" and op.copy_host_counted else 0)
    if op.kind == "attention":
        return 1 if getattr(op, "flash", True) else 4
    return stack.passes_of(op.name) if stack is not None else 1


def host_bound(ops, costs, host_s: float, flash: bool = True, host_coll_s: float | None = None, stack=None,
               scale: tuple = (1.0, 1.0), hook_s: tuple = (0.0, 0.0), zero3: tuple | None = None,
               graphs: tuple | None = None):
    """Stretch one layer's compute where the host dispatches slower than the GPU runs.

    ``ops`` and ``costs`` are parallel (operators and their :class:`OpCost`); returns new costs.
    Forward and backward (input + weight gradients) are judged separately. ``host_s`` per kernel,
    ``host_coll_s`` per collective (default ``host_s``); ``scale`` multiplies the kernels' host time
    and ``hook_s`` adds host seconds, (forward, backward) each (``stack_host_terms``). ``zero3``:
    (model, shard group size[, (forward, backward) wait]) of a ZeRO-3 layer; on a stack with
    ``zero3_sync_fetch`` (DeepSpeed 2021) its per-parameter fetch adds host time the GPU waits out, after
    the stretch, its gradients' reduce-scatters add host time that runs ahead, and the wait (GPU work
    the synchronizes wait out: taskgraph/zero3_fetch.py layer_sync_collectives) adds after the stretch. ``graphs``: (mask, replay
    seconds) under CUDA graphs (taskgraph/cuda_graphs.py): the ops the mask captures (their kernels and
    collectives) cost the host nothing, each replayed graph (a run of captured ops) the replay seconds.
    """
    coll_s = host_s if host_coll_s is None else host_coll_s
    if (host_s <= 0 and coll_s <= 0) or not costs:
        return tuple(costs)
    serial = (0.0, 0.0)
    if zero3 is not None and getattr(stack, "zero3_sync_fetch", False):
        serial, ahead = per_param_host_s(ops, zero3[0], zero3[1], host_s, coll_s)
        wait = zero3[2] if len(zero3) > 2 else (0.0, 0.0)
        serial = (serial[0] + wait[0], serial[1] + wait[1])
        hook_s = (hook_s[0] + ahead[0], hook_s[1] + ahead[1])

    mask, replay_s = graphs if graphs is not None else ((False,) * len(ops), 0.0)
    issued = [(o, c) for o, c, m in zip(ops, costs, mask) if not m]   # what the host still issues
    replays = graph_runs(mask) * replay_s

    def kernels(op, p):
        k = op_kernels(op, p, stack)
        if op.kind == "attention" and not flash and k:
            k = 4
        return k

    fwd_h = (sum(kernels(o, "fwd") for o, _ in issued) * host_s * scale[0] + hook_s[0] + replays
             + sum(len(c.fwd_pre) + len(c.fwd_post) for _, c in issued) * coll_s)
    bwd_h = (sum(kernels(o, "bwd_input") + kernels(o, "bwd_weight") for o, _ in issued) * host_s * scale[1]
             + hook_s[1] + replays + sum(len(c.bwd_pre) + len(c.bwd_post) for _, c in issued) * coll_s)
    fwd_c = sum(c.fwd for c in costs)
    bwd_c = sum(c.bwd_input + c.bwd_weight for c in costs)
    fwd_comm = sum(x.seconds for c in costs for x in c.fwd_pre + c.fwd_post)
    bwd_comm = sum(x.seconds for c in costs for x in c.bwd_pre + c.bwd_post)
    ff = 1.0 + (max(0.0, fwd_h - fwd_c - fwd_comm) + serial[0]) / fwd_c if fwd_c > 0 else 1.0
    fb = 1.0 + (max(0.0, bwd_h - bwd_c - bwd_comm) + serial[1]) / bwd_c if bwd_c > 0 else 1.0
    if ff == 1.0 and fb == 1.0:
        return tuple(costs)
    return tuple(replace(c, fwd=c.fwd * ff, bwd_input=c.bwd_input * fb, bwd_weight=c.bwd_weight * fb)
                 for c in costs)


def stack_host_terms(stack, tp: int, fsdp2_sharded: bool, host_s: float) -> tuple[tuple, tuple]:
    """(scale, hook_s) of :func:`host_bound` for one transformer layer of a PyTorch-native stack
    (taskgraph/data/stacks.yaml [HOST-DT]): under tensor parallelism (``tp`` > 1) every op of the
    layer goes through DTensor's dispatch (sharding propagation, redistribute, the functional
    collectives' wrappers), which multiplies the kernels' host time by the stack's
    ``dtensor_host_factor``; with FSDP2 sharding the parameters (``fsdp2_sharded``) its per-layer
    pre/post forward and backward hooks (unshard with copy-in, copy-out, reshard, the gradients'
    reduce-scatter set-up) add ``fsdp2_hook_kernels`` times ``host_s`` (``fsdp2_hook_kernels_tp`` when
    the sharded parameters are TP's DTensors: FSDP2 over a 2-D mesh handles each as a DTensor). Other
    stacks: no change.

    >>> from types import SimpleNamespace as N
    >>> st = N(dtensor_host_factor=(3.0, 4.0), fsdp2_hook_kernels=(10.0, 20.0), fsdp2_hook_kernels_tp=(30.0, 40.0))
    >>> stack_host_terms(st, 8, True, 0.5)
    ((3.0, 4.0), (15.0, 20.0))
    >>> stack_host_terms(st, 1, True, 0.5)
    ((1.0, 1.0), (5.0, 10.0))
    >>> stack_host_terms(st, 1, False, 1e-6)
    ((1.0, 1.0), (0.0, 0.0))
    """
    if stack is None:
        return (1.0, 1.0), (0.0, 0.0)
    scale = tuple(stack.dtensor_host_factor) if tp > 1 else (1.0, 1.0)
    per_layer = stack.fsdp2_hook_kernels_tp if tp > 1 else stack.fsdp2_hook_kernels
    hooks = tuple(k * host_s for k in per_layer) if fsdp2_sharded else (0.0, 0.0)
    return scale, hooks


#: fused Adam (one multi-tensor kernel): read gradient, master weight, two moments (4 x 4), write weight and
#: moments (3 x 4) in fp32 (module docstring)
FUSED_ADAM_BYTES_PER_PARAM = 28
#: Megatron's master-to-model weight copy: read fp32 (4) + write bf16/fp16 (2) (module docstring)
MASTER_COPY_BYTES_PER_PARAM = 6
#: fp16/bf16 gradients cast to fp32 main gradients before the step: read 2 + write 4 (module docstring)
GRAD_CAST_BYTES_PER_PARAM = 6


def master_weights(plan) -> bool:
    """The optimizer keeps fp32 master weights and moments: ``training.master_weights``, or the stack's
    default (stacks.yaml ``master_weights``; False: bf16 parameters, gradients and moments, [FSDP2-BF16])."""
    return keeps_master_weights(plan.strategy)


def keeps_master_weights(strategy) -> bool:
    """:func:`master_weights` of a strategy (before it is resolved: the search's memory bound)."""
    mw = strategy.training.master_weights
    if mw is not None:
        return mw
    from taskgraph.stacks import get_stack
    return get_stack(strategy.options.stack).master_weights


def optimizer_value_bytes(plan) -> int:
    """Bytes of each element the Adam step streams (parameter, gradient, moments): 4, or 2 without
    master weights (module docstring)."""
    return 4 if master_weights(plan) else 2


def master_copy(plan) -> bool:
    """The Adam step copies fp32 master weights into the model's (module docstring): always below ZeRO-3;
    under ZeRO-3 unless the stack is PyTorch FSDP (``zero3_master_copy: false``); never without master
    weights."""
    if not master_weights(plan):
        return False
    if plan.zero < 3:
        return True
    from taskgraph.stacks import get_stack
    return get_stack(plan.strategy.options.stack).zero3_master_copy


#: HBM bytes per element of a precision-aware moment (TE fused_adam.py, NVIDIA/TransformerEngine d0067d0,
#: ``FusedAdam.step``): a pair of bf16 moments is read and written by the kernel itself (``fuse_unscale``:
#: 2 + 2 each); otherwise a non-fp32 moment is unscaled into an fp32 temporary (``get_unscaled_state``:
#: ``.float()``, fp16 then ``mul_`` by its scale), stepped in fp32 (4 + 4) and scaled back
#: (``_apply_scale``: bf16 ``copy_(x.bfloat16())``; fp16 / fp8 ``aminmax``, fp16 ``mul_``, ``copy_``)
_MOMENT_BYTES = {"fp32": 8, "bf16": (2 + 4) + 8 + (4 + 2 + 2 + 2), "fp16": (2 + 4 + 8) + 8 + (4 + 8 + 4 + 2),
                 "fp8": (1 + 4) + 8 + (4 + 4 + 1)}
#: the master weight's bytes in the kernel: TE masters (``master_weights=True``) are read and written and the
#: kernel writes the bf16/fp16 model weight itself (no separate copy): int16 remainders with the bf16 weight
#: (``multi_tensor_adam_param_remainder``: read and write 2 + 2), fp32 (4 + 4 + 2), fp16 scaled as a fp16
#: moment above plus the weight's 2 (transformer_engine/common/multi_tensor/adam.cu, d0067d0: the master
#: kernel reads ``p_master`` and writes ``p_master`` and ``p``); Megatron-core's own fp32 masters: 4 + 4
_MASTER_BYTES = {"remainder": 8, "fp32": 10, "fp16": _MOMENT_BYTES["fp16"] + 2, "mcore": 8}


def master_kind(strategy) -> str | None:
    """Where the precision-aware optimizer keeps the master weights (None: the plain optimizer).
    Megatron-core optimizer_config.py ``use_precision_aware_optimizer_no_fp8_or_ds_fp8`` (d98e8a6): TE
    keeps them (optimizer/__init__.py: ``master_weights=True``, ``master_weight_dtype=main_params_dtype``)
    unless main params are fp32 under an fp8 recipe other than delayed scaling, where Megatron-core keeps
    fp32 masters and copies them into the model as today ("mcore"); fp32 TE masters of bf16 weights are
    stored as int16 remainders (``store_param_remainders``, Megatron's default True; TE fused_adam.py:
    "Works only when param type is BF16 and master weight type is FP32")."""
    dt = strategy.options.optimizer_dtypes
    if dt is None:
        return None
    tr, opt = strategy.training, strategy.options
    if dt.main_params == "fp16":
        return "fp16"
    if tr.precision == "fp8" and opt.fp8_recipe != "delayed" and not opt.optimizer_cpu_offload:
        return "mcore"
    bf16_weights = tr.precision in ("bf16", "fp8", "fp4") and not opt.fp8_param_gather
    return "remainder" if bf16_weights else "fp32"


def fused_adam_bytes(strategy, grad_bytes: int) -> int:
    """HBM bytes per parameter of the precision-aware optimizer's step (TE ``FusedAdam``): the gradient
    (``grad_bytes``: Megatron's ``decoupled_grad``, the main-grad buffer as it is), the master weight
    (``_MASTER_BYTES``) and the two moments (``_MOMENT_BYTES``). Today's fp32 case: 4 + 8 + 16 = 28."""
    dt = strategy.options.optimizer_dtypes
    if dt.exp_avg == dt.exp_avg_sq == "bf16":
        moments = 2 * (2 + 2)
    else:
        moments = _MOMENT_BYTES[dt.exp_avg] + _MOMENT_BYTES[dt.exp_avg_sq]
    kind = master_kind(strategy)
    # Megatron-core's own masters step fp32 gradients (``_copy_model_grads_to_main_grads`` casts: module docstring)
    return (4 if kind == "mcore" else grad_bytes) + _MASTER_BYTES[kind] + moments


def adam_bytes(plan) -> int:
    """HBM bytes per parameter of the run's stack's unfused Adam step (stacks.yaml ``adam_bytes_per_param``;
    0: the fused kernel)."""
    from taskgraph.stacks import get_stack
    return get_stack(plan.strategy.options.stack).adam_bytes_per_param


def adam_step_s(gpu, params: float, master_copy: bool = True, grad_bytes: int = 4, unfused_bytes: int = 0,
                value_bytes: int = 4, fused_bytes: int = FUSED_ADAM_BYTES_PER_PARAM) -> float:
    """Seconds of one Adam step over ``params`` parameters on ``gpu``: the fused kernel's 28 bytes each at
    the GPU's ``optimizer_efficiency`` (``hbm_efficiency`` when it has none), or a stack's unfused
    per-operation kernels, ``unfused_bytes`` each at ``hbm_efficiency`` (Composer's DecoupledAdamW:
    stacks.yaml [COMPOSER-ADAM]), plus, with ``master_copy`` (Megatron's mixed-precision optimizers, not
    FSDP), the master-to-model weight copy and, for ``grad_bytes`` < 4, the gradient cast, at
    ``hbm_efficiency`` (module docstring). ``value_bytes``: each streamed element's bytes, 4 (fp32 master
    weights and moments) or 2 (bf16 parameters and moments, no master copy): the step's bytes scale by
    value_bytes / 4. ``fused_bytes``: the fused kernel's bytes per parameter (the precision-aware optimizer's,
    :func:`fused_adam_bytes`).

    >>> from types import SimpleNamespace as N
    >>> g = N(hbm_bandwidth=4.8e12, efficiency=N(optimizer_efficiency=0.72, hbm_efficiency=0.87))
    >>> round(adam_step_s(g, 1e9) * 1e3, 3)   # 28e9 / 3.456e12 + 6e9 / 4.176e12 ms
    9.539
    >>> round(adam_step_s(g, 1e9, master_copy=False) * 1e3, 3)
    8.102
    >>> round(adam_step_s(g, 1e9, master_copy=False, value_bytes=2) * 1e3, 3)   # 14e9 / 3.456e12
    4.051
    """
    eff = gpu.efficiency
    opt = getattr(eff, "optimizer_efficiency", None) or eff.hbm_efficiency
    copies = (MASTER_COPY_BYTES_PER_PARAM + (GRAD_CAST_BYTES_PER_PARAM if grad_bytes < 4 else 0)) if master_copy else 0
    step = (unfused_bytes * params / (gpu.hbm_bandwidth * eff.hbm_efficiency) if unfused_bytes
            else fused_bytes * params / (gpu.hbm_bandwidth * opt)) * value_bytes / 4
    return step + copies * params / (gpu.hbm_bandwidth * eff.hbm_efficiency)


def adam_step_of(plan, params: float, grad_bytes: int) -> float:
    """:func:`adam_step_s` of ``plan``'s run over ``params`` parameters: its stack's kernel, master copy and
    element bytes (``grad_bytes``: ``taskgraph.costing.grad_bytes_per_param``). The precision-aware optimizer
    streams :func:`fused_adam_bytes`; with TE's masters the kernel writes the model weight and reads the
    gradient as it is, so no master copy or gradient cast follows (:func:`master_kind`)."""
    kind = master_kind(plan.strategy)
    if kind is None:
        return adam_step_s(plan.cluster.gpu, params, master_copy(plan), grad_bytes, adam_bytes(plan),
                           optimizer_value_bytes(plan))
    return adam_step_s(plan.cluster.gpu, params, kind == "mcore" and master_copy(plan), grad_bytes,
                       fused_bytes=fused_adam_bytes(plan.strategy, grad_bytes))


def step_overhead_s(plan, shard_params: float, layers: tuple = ()) -> float:
    """Per-step seconds besides the Adam update on one GPU: gradient-norm read of the local fp32
    gradient shard plus its one-float all-reduce over every GPU, and for fp16 the loss scaler's unscale
    pass over that shard and its found-inf all-reduce; on DeepSpeed's 2021 ZeRO-3 the refresh of the stage's ``layers``' persistent parameters
    (taskgraph/zero3_fetch.py)."""
    cluster, gpu = plan.cluster, plan.cluster.gpu
    norm_read = optimizer_value_bytes(plan) * shard_params / (gpu.hbm_bandwidth * gpu.efficiency.hbm_efficiency)
    t = norm_read + _allreduce_latency(cluster, plan.num_gpus) + stage_refresh_s(plan, layers)
    if plan.strategy.training.precision == "fp16":
        # the loss scaler's unscale reads and writes every gradient stepped, then its found-inf all-reduce
        # (Megatron-LM cdde433 optimizer.py _unscale_main_grads_and_check_for_nan; module docstring)
        t += 2 * norm_read + _allreduce_latency(cluster, plan.num_gpus)
    return t


def grad_buffer_bytes(plan, grad_bytes: int) -> int:
    """HBM bytes per local gradient element that the data-parallel gradient path moves once per step
    besides the collective (module docstring): the contiguous buffer's memset (``grad_bytes``); on a
    ``ddp_flatten`` stack (Megatron-LM 2021's local DDP) 16-bit gradients are flattened, divided and copied
    back (6 x ``grad_bytes``, no memset) and an fp32 buffer is zeroed and divided (3 x ``grad_bytes``); on a
    ``ddp_bucket_copy`` stack (PyTorch's DDP) copied into the buckets and back (4 x ``grad_bytes``).

    >>> from types import SimpleNamespace as N
    >>> run = lambda stack: N(strategy=N(options=N(stack=stack)))
    >>> grad_buffer_bytes(run("megatron-2021"), 2), grad_buffer_bytes(run("megatron-2021"), 4)
    (12, 12)
    >>> grad_buffer_bytes(run("megatron-2022"), 2), grad_buffer_bytes(run(None), 4)
    (2, 4)
    >>> grad_buffer_bytes(run("megatron-2021-torch-ddp"), 2)
    8
    """
    from taskgraph.stacks import get_stack
    stack = get_stack(plan.strategy.options.stack)
    if stack.ddp_bucket_copy:
        return 4 * grad_bytes
    if not stack.ddp_flatten:
        return grad_bytes
    return 6 * grad_bytes if grad_bytes < 4 else 3 * grad_bytes


@lru_cache(maxsize=64)
def _allreduce_latency(cluster, n: int) -> float:
    """A one-float all-reduce over ranks 0..n-1 (latency-bound; NCCL picks tree/LL at scale)."""
    from topologies.collectives import collective_time
    return collective_time("all-reduce", 4.0, tuple(range(n)), cluster) if n > 1 else 0.0


__all__ = [
    "FUSED_ADAM_BYTES_PER_PARAM",
    "GRAD_CAST_BYTES_PER_PARAM",
    "MASTER_COPY_BYTES_PER_PARAM",
    "adam_step_of",
    "adam_step_s",
    "fused_adam_bytes",
    "grad_buffer_bytes",
    "host_bound",
    "keeps_master_weights",
    "master_copy",
    "master_kind",
    "master_weights",
    "op_kernels",
    "optimizer_value_bytes",
    "stack_host_terms",
    "step_overhead_s",
]
