"""The optimizer step with Megatron-LM's CPU optimizer offload (``options.optimizer_cpu_offload``):
the host-link copies, the CPU Adam step on host DRAM, and how Megatron's HybridDeviceOptimizer
overlaps them (megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py). Used by
``taskgraph/costing.py`` for a stage's optimizer time, the same record at both fidelities."""
from __future__ import annotations

#: Host DRAM bytes per parameter of the CPU optimizer step: torch.optim.AdamW(fused=True) on the CPU
#: (Megatron's CPUAdam, megatron/core/optimizer/__init__.py) reads the fp32 gradient (4), reads and
#: writes the fp32 master weight and both moments (24), and the copy back casts the master weight to
#: the GPU weight's dtype on the host (read 4, write 2: ATen native/cuda/Copy.cu copy_kernel_cuda
#: converts to the destination dtype before a host-to-device copy). Taken as memory-bound: about 15
#: flops per parameter against 34 bytes, for a vectorized multithreaded Adam such as ZeRO-Offload's
#: CPU-Adam (Ren et al. USENIX ATC 2021, Section 5.1) or PyTorch's fused CPU kernel; the balance
#: argument is ours, no measured CPU Adam rate is fitted.
CPU_ADAM_BYTES_PER_PARAM = 34


def cpu_offload_step_time(plan, shard: float, gpu_adam_s: float, tensors: int, grad_bytes: float,
                          weight_bytes: float) -> float:
    """Seconds of one stage's optimizer step with ``options.optimizer_cpu_offload`` (Megatron-LM
    HybridDeviceOptimizer, megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py): the first
    ``optimizer_offload_fraction`` x ``shard`` parameters step on the CPU, the rest on the GPU
    (``gpu_adam_s`` is the whole shard's GPU Adam time). The offloaded part copies its gradients to the
    host (d = n * ``grad_bytes`` / host link), steps on the CPU (c = n * CPU_ADAM_BYTES_PER_PARAM / the
    node's DRAM bandwidth over its GPUs, all stepping at once) and copies the weights back (h = n *
    ``weight_bytes`` / host link).

    * ``overlap_cpu_optimizer_d2h_h2d`` false: the copies run on the compute stream (``_d2h_stream`` =
      ``_h2d_stream`` = the current stream), the GPU optimizer is queued behind the gradient copies and
      the CPU steps meanwhile, the weight copies follow both: d + max(g, c) + h;
    * true: one CPU optimizer per parameter tensor (``build_cpu_optimizer_list``), gradient and weight
      copies on their own streams, each tensor's step waiting for its own gradient (``step``): a
      three-stage pipeline over ``tensors`` equal pieces, (d + c + h)/k + (k - 1)/k max(d, c, h), beside
      the GPU optimizer: max(g, that).

    >>> from types import SimpleNamespace as N
    >>> o = N(optimizer_offload_fraction=1.0, overlap_cpu_optimizer_d2h_h2d=False)
    >>> plan = N(strategy=N(options=o), cluster=N(host_link_bandwidth=64e9, host_memory_bandwidth=8 * 34e9,
    ...                                            gpus_per_node=8))
    >>> round(cpu_offload_step_time(plan, 16e9, 1.0, 4, 4, 2), 6)   # d = 1 s, c = 16 s, h = 0.5 s
    17.5
    """
    opt = plan.strategy.options
    f = opt.optimizer_offload_fraction
    n = f * shard
    g = (1.0 - f) * gpu_adam_s
    link = plan.cluster.host_link_bandwidth
    d = n * grad_bytes / link
    c = n * CPU_ADAM_BYTES_PER_PARAM / (plan.cluster.host_memory_bandwidth / max(1, plan.cluster.gpus_per_node))
    h = n * weight_bytes / link
    if not opt.overlap_cpu_optimizer_d2h_h2d:
        return d + max(g, c) + h if n > 0 else g
    k = tensors
    return max(g, (d + c + h) / k + (k - 1) / k * max(d, c, h))
