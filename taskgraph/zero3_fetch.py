r"""DeepSpeed's early ZeRO-3 (v0.3.13-v0.3.16, March-April 2021; taskgraph/data/stacks.yaml [DS-Z3-2021]):
each parameter tensor is all-gathered on its own, behind a ``torch.cuda.synchronize()``, and every
gathered tensor and every reduced gradient costs the host one copy kernel per rank of the shard group.

What the code launches, per parameter tensor (microsoft/DeepSpeed v0.3.15, 2c2a7f3, 2021-04-19):

* **Gather** (``deepspeed/runtime/zero/partition_parameters.py`` ``_allgather_param``, called for
  each parameter of a sub-module by ``_all_gather`` with ``async_op=True`` from
  ``stage3.py`` ``PartitionedParameterCoordinator.fetch_sub_module`` and ``prefetch_next_sub_modules``):
  ``torch.zeros`` of the full tensor (a fill kernel), ``torch.cuda.synchronize()``, the rank's own
  shard ``copy_`` into its slice (a copy kernel), then ``torch.distributed.all_gather(partitions, ...)``
  with ``partitions`` a Python list of ``world_size`` views. PyTorch's ProcessGroupNCCL of that time
  (pytorch/pytorch 00f5dfd, torch/lib/c10d/ProcessGroupNCCL.cpp ``ProcessGroupNCCL::allgather``)
  gathers into one flattened buffer with one ``ncclAllGather`` and then copies the buffer back into
  each of the ``world_size`` outputs with its own ``copy_`` (``allgather_coalesced`` is not supported
  there). So ``n + 2`` kernels and one NCCL call per tensor, ``n`` the shard group size.
  ``fetch_sub_module`` then waits for the gathers (``_synchronize_communication``:
  ``comm_stream.synchronize()`` and ``torch.cuda.synchronize()``). Both synchronizations stop the host
  from running ahead of the GPU: the host issues a fetch while the GPU has nothing queued, so the
  fetch's host time adds to the step instead of hiding behind the GPU (``serial`` below).
* **Gradient** (``stage3.py`` ``reduce_independent_p_g_buckets_and_remove_grads``: the gradient
  ``copy_`` into the contiguous bucket; ``average_tensor`` -> ``partition_parameters.py``
  ``_reduce_scatter_gradients`` -> ``_reduce_scatter_gradient`` per parameter: one
  ``torch.distributed.reduce_scatter`` over a list of ``world_size`` views, which ProcessGroupNCCL's
  ``reduce_scatter`` first copies into a flat buffer, one ``copy_`` per view;
  ``partition_previous_reduced_grads`` -> ``_partition_gradient``: a ``copy_`` of the rank's reduced
  shard): ``n + 2`` kernels and one NCCL call per tensor, issued with ``async_op=True`` on the reduction
  stream, so this host time runs ahead of the GPU like the kernels' (``taskgraph/overheads.py``
  host_bound).

Each transformer layer's parameter tensors are gathered in the forward, again in the recomputed forward
(full recomputation reruns the sub-modules' hooks) and in the backward (``pre_sub_module_backward_function``
fetches). A tensor is released after use unless its reuse distance is below ``stage3_max_reuse_distance``
(1e9 elements by default); at GPT-3 175B scale a layer holds 1.8e9 parameters, so only the layer's
last sub-modules could stay gathered between its recomputed forward and its backward: not modelled (every
pass gathers every tensor). The host seconds are the project's per-kernel and per-collective issue costs
(``cluster.host_us_per_kernel``, ``cluster.host_us_per_collective``); nothing here is fitted.
"""
from __future__ import annotations

#: kernels per gathered tensor besides the n copy-outs: torch.zeros' fill and the own shard's copy_
GATHER_EXTRA_KERNELS = 2
#: kernels per reduced gradient besides the n copy-ins: the bucket copy_ and the partition copy_
REDUCE_EXTRA_KERNELS = 2


def param_tensors(op, model) -> int:
    """Parameter tensors (``nn.Parameter`` objects) of one operator: one weight per GEMM of a linear op
    plus its bias where the model has biases (the query/key/value projection follows ``qkv_bias``) and
    two q/k norm weights with ``qk_norm``; a LayerNorm's gain and bias (RMSNorm: the gain); 0 for
    operators without parameters.

    >>> from types import SimpleNamespace as N
    >>> gpt = N(bias=True, qkv_bias=True, qk_norm=False, norm="layernorm")
    >>> param_tensors(N(kind="gemm", name="qkv", gemms=(1,), params=10), gpt)
    2
    >>> param_tensors(N(kind="norm", name="input_norm", gemms=(), params=4), gpt)
    2
    >>> param_tensors(N(kind="attention", name="attn_core", gemms=(), params=0), gpt)
    0
    """
    if op.params <= 0:
        return 0
    if op.kind == "norm":
        return 2 if model.norm == "layernorm" else 1
    if op.kind in ("gemm", "router") and op.gemms:
        weights = len(op.gemms)
        bias = model.qkv_bias if op.name.rsplit(".", 1)[-1] == "qkv" else model.bias
        norms = 2 if model.qk_norm and op.name.rsplit(".", 1)[-1] in ("qkv", "q_proj", "q_up") else 0
        return weights * (2 if bias else 1) + norms
    return 1


def per_param_host_s(ops, model, shard: int, host_s: float, coll_s: float) -> tuple[tuple, tuple]:
    """(serial, ahead) host seconds of one layer under the per-parameter synchronous fetch, each a
    (forward, backward) pair (module docstring). ``serial``: the gathers' issue time, which the GPU waits
    out (one gather per tensor and pass); ``ahead``: the gradients' reduce-scatter issue time in the
    backward, which runs ahead of the GPU. ``shard``: ranks the parameters are sharded over (1: no
    sharding, nothing to gather).

    >>> from types import SimpleNamespace as N
    >>> gpt = N(bias=True, qkv_bias=True, qk_norm=False, norm="layernorm")
    >>> ops = [N(kind="norm", name="ln", gemms=(), params=2), N(kind="gemm", name="qkv", gemms=(1,), params=3)]
    >>> serial, ahead = per_param_host_s(ops, gpt, 4, 10e-6, 40e-6)   # 4 tensors x (6 kernels x 10 us + 40 us)
    >>> [round(x * 1e6, 6) for x in serial + ahead]
    [400.0, 400.0, 0.0, 400.0]
    """
    if shard <= 1:
        return (0.0, 0.0), (0.0, 0.0)
    tensors = sum(param_tensors(o, model) for o in ops)
    gather = tensors * ((shard + GATHER_EXTRA_KERNELS) * host_s + coll_s)
    reduce = tensors * ((shard + REDUCE_EXTRA_KERNELS) * host_s + coll_s)
    return (gather, gather), (0.0, reduce)
