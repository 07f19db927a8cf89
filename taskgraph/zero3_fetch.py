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

* **Persistent parameters** (``stage3.py`` ``persistent_parameters``: a tensor of fewer than
  ``stage3_param_persistence_threshold`` elements, 100,000 by default in ``runtime/zero/constants.py``,
  is ``ds_persist`` and never released): a layer's biases and LayerNorm weights stay gathered; after
  the optimizer step ``_post_step`` gathers them all again at once (``all_gather(async_op=False)`` ->
  ``_allgather_params``: one NCCL call, each tensor's shard ``copy_`` into the flat buffer and ``n``
  ``copy_`` out of it), so ``n + 1`` kernels per persistent tensor once per step
  (``persistent_refresh_s``). Their gradients are reduced like the others'.

Each transformer layer's other tensors are gathered in the forward, again in the recomputed forward
(full recomputation reruns the sub-modules' hooks) and in the backward (``pre_sub_module_backward_function``
fetches). A tensor is released after use unless its reuse distance is below ``stage3_max_reuse_distance``
(1e9 elements by default); at GPT-3 175B scale a layer holds 1.8e9 parameters, so only the layer's
last sub-modules could stay gathered between its recomputed forward and its backward: not modelled (every
pass gathers every such tensor). The host seconds are the project's per-kernel and per-collective issue
costs (``cluster.host_us_per_kernel``, ``cluster.host_us_per_collective``); nothing here is fitted.

Each tensor's gather and reduce-scatter is also its own NCCL call, with its own latency
(:func:`sync_fetch_collectives`, :func:`layer_sync_collectives`): the gathers run behind the host's issue of
their copy-outs and what is left is prefetched; each gather's ``torch.zeros`` fill is waited out by the
synchronize after it; the backward waits for the weights' reduce-scatters.
"""
from __future__ import annotations

#: kernels per gathered tensor besides the n copy-outs: torch.zeros' fill and the own shard's copy_
GATHER_EXTRA_KERNELS = 2
#: kernels per reduced gradient besides the n copy-ins: the bucket copy_ and the partition copy_
REDUCE_EXTRA_KERNELS = 2
#: kernels per persistent tensor besides the n copy-outs of the step's refresh: its shard's copy_ in
REFRESH_EXTRA_KERNELS = 1
#: DeepSpeed's default stage3_param_persistence_threshold (runtime/zero/constants.py, v0.3.15): tensors of
#: fewer elements stay gathered (module docstring)
PERSISTENCE_THRESHOLD = 100_000


def param_tensor_sizes(op, model) -> list:
    """Elements of each parameter tensor (``nn.Parameter``) of one operator on this GPU: one weight per
    GEMM (n x k) plus its bias (n) where the model has biases (the query/key/value projection follows
    ``qkv_bias``), the q/k norm weights with ``qk_norm``, what else the operator holds as one tensor;
    a LayerNorm's gain and bias (RMSNorm: the gain); none for operators without parameters.

    >>> from types import SimpleNamespace as N
    >>> gpt = N(bias=True, qkv_bias=True, qk_norm=False, norm="layernorm")
    >>> param_tensor_sizes(N(kind="gemm", name="qkv", gemms=(N(n=12, k=4),), params=60), gpt)
    [48, 12]
    >>> param_tensor_sizes(N(kind="norm", name="input_norm", gemms=(), params=8), gpt)
    [4, 4]
    >>> param_tensor_sizes(N(kind="attention", name="attn_core", gemms=(), params=0), gpt)
    []
    """
    if op.params <= 0:
        return []
    if op.kind == "norm":
        k = 2 if model.norm == "layernorm" else 1
        return [op.params // k] * k
    if op.kind not in ("gemm", "router") or not op.gemms:
        return [op.params]
    role = op.name.rsplit(".", 1)[-1]
    bias = model.qkv_bias if role == "qkv" else model.bias
    sizes = [g.n * g.k for g in op.gemms] + ([g.n for g in op.gemms] if bias else [])
    rest = op.params - sum(sizes)
    if rest > 0:   # q/k norms (two tensors), or what the operator holds besides its GEMMs' weights
        sizes += [rest // 2, rest - rest // 2] if model.qk_norm and role in ("qkv", "q_proj", "q_up") else [rest]
    return sizes


def per_param_host_s(ops, model, shard: int, host_s: float, coll_s: float) -> tuple[tuple, tuple]:
    """(serial, ahead) host seconds of one layer under the per-parameter synchronous fetch, each a
    (forward, backward) pair (module docstring). ``serial``: the gathers' issue time, which the GPU waits
    out (one gather per pass of each tensor of at least PERSISTENCE_THRESHOLD elements); ``ahead``: the
    gradients' reduce-scatter issue time in the backward (every tensor), which runs ahead of the GPU.
    ``shard``: ranks the parameters are sharded over (1: no sharding, nothing to gather).

    >>> from types import SimpleNamespace as N
    >>> gpt = N(bias=True, qkv_bias=True, qk_norm=False, norm="layernorm")
    >>> ops = [N(kind="norm", name="ln", gemms=(), params=2), N(kind="gemm", name="qkv", gemms=(N(n=1000, k=100),),
    ...                                                          params=101_000)]
    >>> serial, ahead = per_param_host_s(ops, gpt, 4, 10e-6, 40e-6)   # gathered: the weight, 6 x 10 + 40 us
    >>> [round(x * 1e6, 6) for x in serial + ahead]                   # reduced: 4 tensors
    [100.0, 100.0, 0.0, 400.0]
    """
    if shard <= 1:
        return (0.0, 0.0), (0.0, 0.0)
    sizes = [n for o in ops for n in param_tensor_sizes(o, model)]
    gathered = sum(1 for n in sizes if n >= PERSISTENCE_THRESHOLD)
    gather = gathered * ((shard + GATHER_EXTRA_KERNELS) * host_s + coll_s)
    reduce = len(sizes) * ((shard + REDUCE_EXTRA_KERNELS) * host_s + coll_s)
    return (gather, gather), (0.0, reduce)


def persistent_refresh_s(ops_per_layer, model, shard: int, host_s: float, coll_s: float) -> float:
    """Host seconds of the step's refresh of the persistent tensors (module docstring): one NCCL call
    and n + 1 kernels per tensor of fewer than PERSISTENCE_THRESHOLD elements, over ``ops_per_layer``
    (the operator lists of the rank's layers); the GPU has nothing else queued then.

    >>> from types import SimpleNamespace as N
    >>> gpt = N(bias=True, qkv_bias=True, qk_norm=False, norm="layernorm")
    >>> ln = [N(kind="norm", name="ln", gemms=(), params=2)]
    >>> round(persistent_refresh_s([ln, ln], gpt, 4, 10e-6, 40e-6) * 1e6, 6)   # 4 tensors x 5 x 10 + 40 us
    240.0
    """
    if shard <= 1:
        return 0.0
    persistent = sum(1 for ops in ops_per_layer for o in ops for n in param_tensor_sizes(o, model)
                     if n < PERSISTENCE_THRESHOLD)
    return persistent * (shard + REFRESH_EXTRA_KERNELS) * host_s + (coll_s if persistent else 0.0)


def stage_refresh_s(plan, layers) -> float:
    """:func:`persistent_refresh_s` of one stage (its ``LayerWork`` records named ``layer<i>``) when the
    plan runs ZeRO-3 on a stack with ``zero3_sync_fetch``; else 0."""
    from taskgraph.operators import layer_operators
    from taskgraph.stacks import get_stack
    name = plan.strategy.options.stack
    if plan.zero != 3 or plan.shard_size <= 1 or name is None or not get_stack(name).zero3_sync_fetch:
        return 0.0
    s, tr, model, by_kind = plan.sizes, plan.strategy.training, plan.model, {}
    ops = []
    for li in (int(lw.name[5:]) for lw in layers if lw.name.startswith("layer")):
        kind = model.layer_kind(li)   # the parameter tensors do not depend on the batch: one list per kind
        if kind not in by_kind:
            by_kind[kind] = layer_operators(model, micro_batch=tr.micro_batch, seq_len=tr.seq_len, tp=s.tp,
                                            sp=plan.sp, cp=s.cp, ep=s.ep, etp=s.etp, layer_index=li, lora=tr.lora)
        ops.append(by_kind[kind])
    c = plan.cluster
    return persistent_refresh_s(ops, model, plan.shard_size, c.host_us_per_kernel * 1e-6,
                                c.host_us_per_collective * 1e-6)


def sync_fetch_collectives(ops, bwd_s, model, shard: int, host_s: float, time_of) -> tuple[float, float]:
    """(gather, reduce) NCCL seconds of one layer under the per-parameter synchronous fetch, one collective
    per tensor, each with its own latency (``time_of(kind, elements)``: the project's NCCL model of one
    call on the shard group, ``topologies/nccl.py``). microsoft/DeepSpeed v0.3.15 (2c2a7f3):

    * ``gather``: per pass, the part of each gathered tensor's ``ncclAllGather`` that outlasts the host's
      issue of its ``shard`` copy-outs (``ProcessGroupNCCL::allgather`` issues them right after the call,
      the GPU computing nothing meanwhile), summed: what the prefetch (``stage3.py``
      ``prefetch_next_sub_modules``) leaves to hide behind the compute.
    * ``reduce``: the part of the gradients' reduce-scatters the backward waits out. Each tensor's
      ``_reduce_scatter_gradient`` runs after its gradient and after the host issued its ``shard``
      copy-ins; the next gathered sub-module's fetch (``_allgather_param`` and ``_synchronize_communication``:
      ``torch.cuda.synchronize()``) waits for it. A gathered tensor's call is exposed but for the backward
      of the operators between its operator and the previous gathered one (``bwd_s``, parallel to
      ``ops``), which run before that synchronize; a persistent tensor's call runs while the host issues
      the next tensor's copy-ins (exposed beyond ``shard`` x ``host_s`` only). Priced as each weight's
      reduce-scatter issued at its own sub-module's gradient hooks: ``reduce_bucket_size`` below a
      weight's size, as DeepSpeedExamples' ZeRO-3 configs set it (Megatron-LM-v1.1.5-ZeRO3/examples:
      6.7e7 and 9e7 elements; every GPT-3 175B weight holds >= 1.5e8).

    >>> from types import SimpleNamespace as N
    >>> gpt = N(bias=True, qkv_bias=True, qk_norm=False, norm="layernorm")
    >>> ops = [N(kind="norm", name="ln", gemms=(), params=2), N(kind="gemm", name="qkv", gemms=(N(n=1000, k=100),),
    ...        params=101_000), N(kind="attention", name="core", gemms=(), params=0),
    ...        N(kind="gemm", name="out", gemms=(N(n=1000, k=100),), params=101_000)]
    >>> t = lambda kind, e: 1e-3 if e >= 100_000 else 1e-4           # 1 ms per weight, 0.1 ms per bias
    >>> g, r = sync_fetch_collectives(ops, [2e-4, 5e-4, 3e-4, 5e-4], gpt, 4, 1e-5, t)
    >>> round(g * 1e6, 6), round(r * 1e6, 6)    # gathers: 2 x (1000 - 40) us; reduces: (1000 - 200) + (1000 - 300)
    (1920.0, 1740.0)
    >>> # ... + 4 persistent tensors x (100 - 40) us (the 4 ranks' copy-ins: 40 us)
    """
    if shard <= 1:
        return 0.0, 0.0
    window, gather, reduce, between = shard * host_s, 0.0, 0.0, 0.0
    for op, b in zip(ops, bwd_s):
        sizes = param_tensor_sizes(op, model)
        big = [n for n in sizes if n >= PERSISTENCE_THRESHOLD]
        reduce += sum(max(0.0, time_of("reduce-scatter", n) - window) for n in sizes if n < PERSISTENCE_THRESHOLD)
        if not big:
            between += b
            continue
        gather += sum(max(0.0, time_of("all-gather", n) - window) for n in big)
        reduce += max(0.0, sum(time_of("reduce-scatter", n) for n in big) - between)
        between = 0.0
    return gather, reduce


def layer_sync_collectives(plan, ops, costs, shard: tuple, share, comm_time, pbytes: int, gbytes: int) -> tuple:
    """(gather, (forward wait, backward wait)) seconds of one layer of ``plan`` under the per-parameter
    synchronous fetch (``costs`` parallel to ``ops``). ``gather``: :func:`sync_fetch_collectives`' gathers, each
    call timed on the shard group ``shard`` with the contention family ``share`` (``comm_time``:
    ``taskgraph.costing.comm_time``), ``pbytes`` per gathered element, ``gbytes`` per reduced one (fp16: 2 B, as
    DeepSpeed 0.3.15's ``torch.half`` reduction buckets). The waits, per pass: ``_allgather_param``'s
    ``torch.zeros`` of each gathered tensor, a fill kernel writing the full tensor at the GPU's streaming rate,
    which the ``torch.cuda.synchronize()`` right after it waits out; the backward adds the gradients' wait."""
    size = {"all-gather": pbytes, "reduce-scatter": gbytes}
    gpu = plan.cluster.gpu
    gathered = sum(n for o in ops for n in param_tensor_sizes(o, plan.model) if n >= PERSISTENCE_THRESHOLD)
    fill = gathered * size["all-gather"] / (gpu.hbm_bandwidth * gpu.efficiency.hbm_efficiency)
    gather, reduce = sync_fetch_collectives(ops, [c.bwd_input + c.bwd_weight for c in costs], plan.model, len(shard),
                                            getattr(plan.cluster, "host_us_per_kernel", 0.0) * 1e-6,
                                            lambda kind, e: comm_time(plan.cluster, kind, size[kind] * e, shard, share))
    return gather, (fill, fill + reduce)
