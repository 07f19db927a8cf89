r"""Stragglers: a synchronous step waits for its slowest GPU.

Two sources of slowness, both per GPU and persistent over a run (manufacturing and power-management
variation is a property of the chip: Sinha et al., "Not All GPUs Are Created Equal", SC 2022,
arXiv:2208.11035; the BLOOM-176B run was held back by a slow node and MegaScale, Jiang et al.
NSDI 2024 Section 5, built straggler detection for exactly this):

* **Variation** (``cluster.gpu_speed_cv`` = sigma): per-GPU speeds are i.i.d. normal with mean 1 and
  standard deviation sigma. A synchronous step waits for the slowest GPU of the whole job: a TP (and
  CP) group syncs every layer, so a stage runs at its slowest GPU; a pipeline's steady state runs at
  its slowest stage (1F1B: (m - 1) of the m + pp - 1 slots of the critical path are paced by the
  slowest stage); the DP gradient reduction waits for the slowest replica. So the step is paced by
  the slowest of all N = tp*cp*dp*pp GPUs (:func:`synchronised_gpus`), whose expected speed is
  ``1 - sigma * E[Z_(N:N)]``, E[Z_(N:N)] the expected maximum of N standard normals computed by a
  deterministic quadrature (:func:`expected_max_std_normal`; it reproduces Harter 1961's table:
  1.538753 for N = 10, 2.507594 for 100, 3.241436 for 1000). Every simulated pipeline rank's compute
  times are multiplied by ``1 / (1 - sigma * E[Z_(N:N)])``; no N ranks are simulated. Charging the
  world's maximum to every stage overcharges only the pipeline fill and drain, whose slots run at
  each stage's own (less slow) pace: at most ``(pp - 1) / (m + pp - 1)`` of the step times
  ``sigma * (E[Z_(N:N)] - E[Z_(N/pp:N/pp)])`` (0.35% for 16 micro-batches on pp 16 at N = 16384).
  Default sigma 0.01 for every preset (``topologies.cluster.DEFAULT_GPU_SPEED_CV``; 0 turns it
  off), charged relative to the expected slowest of :data:`CALIBRATION_GPUS`. The value is grounded
  in Sinha et al.: their 8% median spread between the fastest and slowest of ~10^4 GPUs of one SKU
  is about ``2 * sigma * E[Z_(N:N)]`` with E[Z] ~ 3.9, i.e. sigma ~ 0.01 (our reading of
  "variation" as the range; documented in docs/cost-model.md). Healthy workers of the production
  traces published with Lin et al. (OSDI 2025, arXiv:2505.05713; benchmarks/straggler_traces.py)
  deviate from their DP peers per step with a normal body of sigma 0.5-0.7%, half persistent and half
  transient: smaller than the default, but over 8-15 workers, not a fleet (docs/cost-model.md says
  why the default stays). Meta's PRISM (Golden et al., arXiv
  2510.15596, abstract) reports 9% GPU-time variability per step at 64k GPUs, the same sigma ~ 0.011
  under the same reading (E[Z_(65536:65536)] = 4.29): per-step (transient) and per-GPU (persistent)
  slowdowns both enter a step as one normal draw per GPU, so this sigma prices both; separating them
  matters for eviction (a persistent slow GPU can be drained: goodput), not for the expected step.
  Rare broken GPUs (Sinha et al.: outliers up to 1.5x slower than the median; Falcon, arXiv
  2410.12588: fail-slow episodes of tens of seconds to ten hours) are not a per-step draw: name them
  with ``cluster.slow`` below, or price their episodes with the goodput model's slow-node source
  (``simulator/goodput``: ``slow_nodes`` rate, slowdown and detection time).
* **Named slow nodes** (``cluster.slow: {node: speed}``): every GPU of that node runs at ``speed``
  (e.g. 0.8). That breaks the symmetry; the replica holding the slow node is the one the step
  waits for (its peers finish earlier and wait at the DP reduction), so the simulated pipeline is
  that replica's: the stage whose GPUs include the slow node runs at the slow speed. This is exact
  for the step time when the DP reduction is the only cross-replica synchronization.

:func:`stage_pace` gives the factor for one pipeline rank; :func:`pace_summary` says which node or
rank sets the pace.
"""
from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

from topologies.placement import as_sizes, coords_of

#: Quadrature of :func:`expected_max_std_normal`: composite Simpson on [-12, 0] and [0, 12] with this
#: many intervals each (step 0.05). The integrands are analytic, so Simpson converges fast: against
#: step 0.005 the result differs by < 1e-10 for 2 <= N <= 10^7 (E[Z] ~ 5.3 at 10^7 sits far inside the
#: range), at ~0.5 ms per N instead of ~5 ms (one call per distinct N and process: cached).
QUADRATURE_INTERVALS = 240
QUADRATURE_BOUND = 12.0


def _simpson(f, a: float, b: float, k: int) -> float:
    h = (b - a) / k
    total = f(a) + f(b)
    for i in range(1, k):
        total += (4.0 if i % 2 else 2.0) * f(a + i * h)
    return total * h / 3.0


@lru_cache(maxsize=1024)
def expected_max_std_normal(n: int) -> float:
    """E[max of n i.i.d. standard normals] by a deterministic quadrature of
    ``E[M] = int_0^inf (1 - Phi(x)^n) dx - int_-inf^0 Phi(x)^n dx`` (David & Nagaraja 2003, Order
    Statistics, eq. 3.1.1 integrated by parts); ``1 - Phi^n`` is evaluated as
    ``-expm1(n log1p(-Q(x)))`` so the far tail keeps its precision. 0 for n = 1; exact for n = 2 is
    1/sqrt(pi); Harter 1961 (Biometrika 48, Table 1) gives 1.538753 for n = 10.

    >>> round(expected_max_std_normal(2), 6), round(expected_max_std_normal(10), 6)
    (0.56419, 1.538753)
    """
    n = int(n)
    if n <= 1:
        return 0.0
    root2 = math.sqrt(2.0)

    def below(x):   # Phi(x)^n for x <= 0
        return math.exp(n * math.log(0.5 * math.erfc(-x / root2)))

    def above(x):   # 1 - Phi(x)^n for x >= 0
        return -math.expm1(n * math.log1p(-0.5 * math.erfc(x / root2)))
    k, b = QUADRATURE_INTERVALS, QUADRATURE_BOUND
    return _simpson(above, 0.0, b, k) - _simpson(below, -b, 0.0, k)


def synchronised_gpus(sizes: Any) -> int:
    """GPUs whose slowest paces a training step: all tp*cp*dp*pp of them (TP/CP sync every layer,
    the pipeline's steady state runs at its slowest stage, the DP reduction waits for the slowest
    replica; see the module docstring)."""
    return as_sizes(sizes).world_size


#: GPUs that synchronised in the measurements the per-GPU efficiency constants were calibrated on:
#: the A100 GEMM and NVLink efficiencies reproduce Korthikanti 2022 Table 4, one 22B layer on the 8
#: GPUs of one DGX A100 node at tp 8 (topologies/data/gpus.yaml [K22T4], clusters.yaml), a timing
#: that already contains the expected slowest of those 8 GPUs. Variation is charged relative to it.
CALIBRATION_GPUS = 8


def variation_factor(cv: float, n: int, reference: int = 1) -> float:
    """Compute-time multiplier of the expected slowest of ``n`` GPUs with speed spread ``cv``,
    relative to the expected slowest of ``reference`` GPUs (the group the speed constants were
    measured on; 1 = a single GPU). Below 1 when ``n < reference``.

    >>> variation_factor(0.01, 8, reference=8)
    1.0
    """
    if cv <= 0 or n == reference:
        return 1.0

    def slow(k):
        return 1.0 / max(1.0 - cv * expected_max_std_normal(k), 1e-3)
    return slow(n) / slow(reference)


def node_speeds(cluster: Any) -> tuple[tuple[int, float], ...]:
    """(node, speed) of every node slower than nominal: named slow nodes, and nodes of another GPU
    model (``cluster.node_gpus``) at the ratio of dense bf16 peaks, capped at 1 (a faster GPU
    cannot speed up its synchronous peers). Memory differences are not modelled."""
    speeds: dict[int, float] = {}
    base = cluster.gpu.peak_flops("bf16")
    for node, gpu in getattr(cluster, "node_gpus", ()):
        speeds[int(node)] = min(1.0, gpu.peak_flops("bf16") / base)
    for node, speed in cluster.slow:
        speeds[int(node)] = min(speeds.get(int(node), 1.0), float(speed))
    return tuple(sorted((n, v) for n, v in speeds.items() if v < 1.0))


@lru_cache(maxsize=256)
def _slow_by_prank(cluster: Any, sizes: Any) -> dict:
    """pipeline rank -> (slowest named speed, node) among its GPUs."""
    out: dict[int, tuple[float, int]] = {}
    slow = node_speeds(cluster)
    if not slow:
        return out
    s = as_sizes(sizes)
    g = cluster.gpus_per_node
    for node, speed in slow:
        for r in range(node * g, min((node + 1) * g, s.world_size)):
            p = coords_of(r, s)["pp"]
            if p not in out or speed < out[p][0]:
                out[p] = (float(speed), int(node))
    return out


def stage_pace(cluster: Any, sizes: Any, prank: int) -> float:
    """Compute-time multiplier of pipeline rank ``prank``: the slower of the job's expected slowest
    GPU under variation (:func:`synchronised_gpus`) and the rank's slowest named slow node."""
    s = as_sizes(sizes)
    f = variation_factor(float(cluster.gpu_speed_cv), synchronised_gpus(s), CALIBRATION_GPUS)
    named = _slow_by_prank(cluster, s).get(prank)
    if named is not None:
        f = max(f, 1.0 / named[0])
    return f


def pace_summary(cluster: Any, sizes: Any) -> str:
    """One line naming what sets the pace ('' when nothing does)."""
    s = as_sizes(sizes)
    parts = []
    for p, (speed, node) in sorted(_slow_by_prank(cluster, s).items()):
        parts.append(f"slow node {node} (speed {speed:.3g}) paces pipeline rank {p}")
    n = synchronised_gpus(s)
    f = variation_factor(float(cluster.gpu_speed_cv), n, CALIBRATION_GPUS)
    if f != 1.0:
        parts.append(f"GPU speed spread cv {cluster.gpu_speed_cv:g}: the expected slowest of the {n} GPUs "
                     f"the step waits for runs {100 * abs(1 - 1 / f):.1f}% "
                     f"{'slower' if f > 1 else 'faster'} than the slowest of the {CALIBRATION_GPUS} GPUs "
                     f"the speed constants were measured on")
    return "; ".join(parts)


__all__ = ["expected_max_std_normal", "pace_summary", "stage_pace", "synchronised_gpus", "variation_factor"]
