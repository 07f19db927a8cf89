"""PyTorch FSDP1's FlatParameter kernels around one unit's all-gather and reduce-scatter (a stack with
``fsdp1_flat: true``, taskgraph/data/stacks.yaml [FSDP1]: llm-foundry's Composer).

Sources: pytorch/pytorch ``torch/distributed/fsdp`` of torch 2.0.1 / 2.1.0 (Composer 0.16's images,
composer docker/README.md at v0.16.3; llm-foundry v0.3.0 pins torch<2.1.1), with Composer 0.16.3's
FSDP defaults (composer/trainer/dist_strategy.py set_fsdp_default: use_orig_params True,
backward_prefetch BACKWARD_POST, forward_prefetch False) and mixed precision DEFAULT / PURE
(param_dtype bf16, reduce_dtype None -> param_dtype, or bf16). Per unit (one MPT block) and pass:

* every unshard (forward, and again before backward: FULL_SHARD reshards after forward),
  ``flat_param.py`` FlatParamHandle.pre_unshard -> ``_use_low_precision_shard``:
  ``_mp_shard.copy_(_local_shard)`` casts the fp32 shard to the param dtype on the pre-unshard stream
  (read 4, write p B per shard element), which the unshard stream waits for before
  ``all_gather_into_tensor`` into the padded unsharded flat parameter; the low-precision shard is freed
  after (``_free_low_precision_sharded_param``). No copy-out: the original parameters are views of the
  gathered flat parameter (``_use_unsharded_views``, Python only).
* backward on the compute stream: with use_orig_params the forward's parameters are autograd views of
  the flat parameter (``_get_unflat_views``: ``torch.split`` + ``.view``), so autograd's
  SplitWithSizesBackward concatenates the views' gradients into the flat gradient
  (``split_with_sizes_backward`` -> ``at::cat``: read c, write c B per element, c the compute dtype).
* ``_post_backward_hook`` on the post-backward stream (after waiting for the compute stream):
  ``flat_param.grad.to(reduce_dtype)`` when the gradient's dtype is not it (read c, write g);
  ``_reduce_grad``: ``_get_reduce_scatter_tensors`` pads the gradient to a multiple of the world size
  (``F.pad``, a copy, only when it does not divide), ``_div_if_needed(padded, predivide)``, the
  reduce-scatter, ``_div_if_needed(shard, postdivide)`` (in-place, read g write g), then
  ``_accumulate_sharded_grad``: ``_cast_grad_to_param_dtype`` to fp32 (read g, write 4) and, from the
  second micro-batch on, ``_saved_grad_shard += sharded_grad`` (read 4 + 4, write 4): Composer calls
  no ``no_sync`` under FSDP (dist_strategy.py ddp_sync_context yields at once for a model that is not
  DistributedDataParallel), so every micro-batch reduce-scatters and FlatParamHandle
  .prepare_gradient_for_backward moves the previous sharded gradient to ``_saved_grad_shard``.
  The factors: ``_get_gradient_predivide_factor`` doubles from 1 while it divides the world size and
  is below world / factor; postdivide = world / predivide (torch/distributed/algorithms/_comm_hooks/
  default_hooks.py DefaultState; _init_utils.py for the default path).

Prefetch: the rate limiter (``limit_all_gathers``, ``_limiter_utils.py`` _FreeEventQueue, at most two
in-flight unshards: the host synchronizes on the free event of the unit two back before issuing a
gather) lets the host run one unit ahead, so the gather of the next unit (forward: issued by its
pre-forward hook, forward_prefetch False; backward: BACKWARD_POST, issued by the current unit's
post-backward hook after ``_post_backward_reshard``) runs on the unshard stream beside the current
unit's compute: the one-layer-ahead prefetch ``taskgraph/costing.py`` already prices.
"""
from __future__ import annotations

import math

from taskgraph.stacks import DEFAULT_STACK, get_stack


def gradient_divide_factors(world: int) -> tuple[float, float]:
    """(predivide, postdivide) of FSDP1's gradient division over ``world`` ranks
    (default_hooks.py DefaultState._get_gradient_predivide_factor).

    >>> gradient_divide_factors(8), gradient_divide_factors(64), gradient_divide_factors(128)
    ((4.0, 2.0), (8.0, 8.0), (16.0, 8.0))
    >>> gradient_divide_factors(2), gradient_divide_factors(1)
    ((2.0, 1.0), (1.0, 1.0))
    """
    factor = 1
    while world % factor == 0 and world / factor > factor:
        factor *= 2
    return float(factor), world / factor


def fsdp1_flat_kernels(params: float, n: int, p: int, g: int, microbatches: int) -> dict:
    """FSDP1's kernels around one unit's collectives over ``n`` ranks, ``params`` the unit's unsharded
    elements: ``{"gather": [...], "grad": [...], "reduce": [...]}``, each a list of (kernel, HBM bytes,
    launches) per micro-batch: before every all-gather (pre-unshard stream), on the compute stream after
    the unit's backward, on the post-backward stream around the reduce-scatter (module doc). ``p``: the
    gathered element's bytes (2 bf16; 4: no mixed precision, no cast); ``g``: the reduce dtype's bytes;
    the gradient autograd produces is in the compute dtype (2, or 4 without mixed precision); the
    accumulation add runs on micro-batches 2..m, so (m - 1) / m of one per micro-batch.

    >>> k = fsdp1_flat_kernels(1000, 8, 2, 2, 1)
    >>> k["gather"], k["grad"]
    ([('cast-shard', 750, 1)], [('grad-cat', 4000, 1)])
    >>> k["reduce"]
    [('predivide', 4000, 1), ('postdivide', 500, 1), ('cast-fp32', 750, 1)]
    """
    shard = math.ceil(params / n)   # FlatParamHandle._get_shard pads the flat parameter to n shards
    padded = shard * n
    c = 4 if p >= 4 else 2
    gather = [("cast-shard", (4 + p) * shard, 1)] if p < 4 else []
    reduce = [("cast-reduce", (c + g) * params, 1)] if g != c else []
    if padded != params:
        reduce.append(("pad", g * (params + padded), 1))
    pre, post = gradient_divide_factors(n)
    if pre > 1:
        reduce.append(("predivide", 2 * g * padded, 1))
    if post > 1:
        reduce.append(("postdivide", 2 * g * shard, 1))
    if g != 4:
        reduce.append(("cast-fp32", (g + 4) * shard, 1))
    if microbatches > 1:
        share = (microbatches - 1) / microbatches
        reduce.append(("accumulate", 12 * shard * share, share))
    return {"gather": gather, "grad": [("grad-cat", 2 * c * params, 1)], "reduce": reduce}


def fsdp1_flat_times(gpu, params: float, n: int, p: int, g: int, microbatches: int) -> tuple[float, float, float]:
    """Seconds of :func:`fsdp1_flat_kernels`: (before each all-gather, the gradient's concat on the
    compute stream, the post-backward stream's kernels around the reduce-scatter), streaming at the
    GPU's ``hbm_efficiency`` with one ``launch_overhead`` per launch (as FSDP2's copies,
    ``taskgraph/stack_costs.py`` fsdp2_copy_times)."""
    eff = gpu.efficiency
    bw = gpu.hbm_bandwidth * eff.hbm_efficiency
    k = fsdp1_flat_kernels(params, n, p, g, microbatches)
    return tuple(sum(b / bw + launches * eff.launch_overhead for _, b, launches in k[part])
                 for part in ("gather", "grad", "reduce"))


def fsdp1_microbatches(plan) -> int:
    """The micro-batch count where a layer's ZeRO-3 costs depend on it (FSDP1's sharded-gradient
    accumulation from the second micro-batch on, :func:`fsdp1_flat_kernels`), else 0: a cost-memo key."""
    name = plan.strategy.options.stack
    if plan.zero < 3 or name in (None, DEFAULT_STACK) or not get_stack(name).fsdp1_flat:
        return 0
    return plan.microbatches
