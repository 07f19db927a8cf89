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
sequences) become host-bound, as measured on small models. Kernels per op pass: one per GEMM
(``op.gemms``), one for fused attention (four unfused: QK^T, softmax, dropout, PV), one for
memory-bound kinds. Default 10 us per kernel (``clusters.yaml``; the low middle of the 5-25 us
range: Megatron and Transformer Engine fuse most elementwise work). An NCCL call costs the host more
(enqueue, proxy hand-off, launch): ``cluster.host_us_per_collective``, taken from the small-message
plateau of nccl-tests, which issues calls back to back so that a tiny all-reduce takes exactly the
issue cost (Azure ND A100 v4, NCCL 2.18: ~45 us for 1-32 KB; ND H200 v5, NCCL 2.20: ~30 us;
``benchmarks/validation/nccl_tests.csv``). This is a calibration on those microbenchmark rows,
not on training rows.

**Per-step costs** (added to the stage's optimizer step, which already streams Adam's state,
``taskgraph/costing.py``): Megatron's gradient clipping (``megatron/core/optimizer/clip_grads.py``
``get_grad_norm_fp32``: a multi-tensor L2 norm reads every local fp32 gradient once, then an
all-reduce of one float over the model-parallel and, with the distributed optimizer, data-parallel
ranks, i.e. all GPUs) and, for fp16, the loss-scaler's found-inf check (``optimizer.py``
``_unscale_main_grads_and_check_for_nan``: another one-element all-reduce). Both reductions are
latency-bound and timed with the collective model on the whole world. Data loading is assumed
prefetched (Megatron's ``DataLoader`` with workers; not on the critical path).
"""
from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

US = 1e-6


def op_kernels(op, pass_: str, stack=None) -> int:
    """Kernel launches of one pass of one operator (see the module docstring); a memory-bound operator
    the stack does not fuse launches one kernel per pass over its tensors (taskgraph/stacks.py)."""
    flops = {"fwd": op.fwd_flops, "bwd_input": op.bwd_input_flops, "bwd_weight": op.bwd_weight_flops}[pass_]
    nbytes = {"fwd": op.fwd_bytes, "bwd_input": op.bwd_input_bytes, "bwd_weight": op.bwd_weight_bytes}[pass_]
    if flops <= 0 and nbytes <= 0:
        return 0
    if op.kind == "gemm" and op.gemms:
        return len(op.gemms)
    if op.kind == "attention":
        return 1 if getattr(op, "flash", True) else 4
    return stack.passes_of(op.name) if stack is not None else 1


def host_bound(ops, costs, host_s: float, flash: bool = True, host_coll_s: float | None = None, stack=None):
    """Stretch one layer's compute where the host dispatches slower than the GPU runs.

    ``ops`` and ``costs`` are parallel (operators and their :class:`OpCost`); returns new costs.
    Forward and backward (input + weight gradients) are judged separately. ``host_s`` per kernel,
    ``host_coll_s`` per collective (default ``host_s``).
    """
    coll_s = host_s if host_coll_s is None else host_coll_s
    if (host_s <= 0 and coll_s <= 0) or not costs:
        return tuple(costs)

    def kernels(op, p):
        k = op_kernels(op, p, stack)
        if op.kind == "attention" and not flash and k:
            k = 4
        return k

    fwd_h = (sum(kernels(o, "fwd") for o in ops) * host_s
             + sum(len(c.fwd_pre) + len(c.fwd_post) for c in costs) * coll_s)
    bwd_h = (sum(kernels(o, "bwd_input") + kernels(o, "bwd_weight") for o in ops) * host_s
             + sum(len(c.bwd_pre) + len(c.bwd_post) for c in costs) * coll_s)
    fwd_c = sum(c.fwd for c in costs)
    bwd_c = sum(c.bwd_input + c.bwd_weight for c in costs)
    fwd_comm = sum(x.seconds for c in costs for x in c.fwd_pre + c.fwd_post)
    bwd_comm = sum(x.seconds for c in costs for x in c.bwd_pre + c.bwd_post)
    ff = 1.0 + max(0.0, fwd_h - fwd_c - fwd_comm) / fwd_c if fwd_c > 0 else 1.0
    fb = 1.0 + max(0.0, bwd_h - bwd_c - bwd_comm) / bwd_c if bwd_c > 0 else 1.0
    if ff == 1.0 and fb == 1.0:
        return tuple(costs)
    return tuple(replace(c, fwd=c.fwd * ff, bwd_input=c.bwd_input * fb, bwd_weight=c.bwd_weight * fb)
                 for c in costs)


def step_overhead_s(plan, shard_params: float) -> float:
    """Per-step seconds besides the Adam update on one GPU: gradient-norm read of the local fp32
    gradient shard plus its one-float all-reduce over every GPU, and the fp16 found-inf all-reduce."""
    cluster, gpu = plan.cluster, plan.cluster.gpu
    norm_read = 4.0 * shard_params / (gpu.hbm_bandwidth * gpu.efficiency.hbm_efficiency)
    t = norm_read + _allreduce_latency(cluster, plan.num_gpus)
    if plan.strategy.training.precision == "fp16":
        t += _allreduce_latency(cluster, plan.num_gpus)
    return t


@lru_cache(maxsize=64)
def _allreduce_latency(cluster, n: int) -> float:
    """A one-float all-reduce over ranks 0..n-1 (latency-bound; NCCL picks tree/LL at scale)."""
    from topologies.collectives import collective_time
    return collective_time("all-reduce", 4.0, tuple(range(n)), cluster) if n > 1 else 0.0


__all__ = ["op_kernels", "host_bound", "step_overhead_s"]
