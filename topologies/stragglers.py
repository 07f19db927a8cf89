r"""Stragglers: a synchronous step waits for its slowest GPU.

Two sources of slowness, both per GPU and persistent over a run (manufacturing and power-management
variation is a property of the chip: Sinha et al., "Not All GPUs Are Created Equal", SC 2022,
arXiv:2208.11035; the BLOOM-176B run was held back by a slow node and MegaScale, Jiang et al.
NSDI 2024 Section 5, built straggler detection for exactly this):

* **Variation** (``cluster.gpu_speed_cv`` = sigma): GPU speeds are i.i.d. normal with mean 1 and
  standard deviation sigma. A pipeline stage's compute is paced by the slowest of the N = tp*cp*dp
  GPUs its simulated representative stands for (TP syncs every layer; the DP gradient reduction
  waits for the slowest replica). The expected slowest speed is ``1 - sigma * E[Z_(N:N)]`` with
  the expected maximum of N standard normals from Blom's approximation
  ``E[Z_(N:N)] ~ Phi^-1((N - 0.375) / (N + 0.25))`` (Blom 1958, *Statistical estimates and
  transformed beta-variables*; order statistics, David & Nagaraja 2003 Section 4.5), so its compute
  times are multiplied by ``1 / (1 - sigma * E[Z_(N:N)])``. No N ranks are simulated.
  Default sigma 0.01 for every preset (``topologies.cluster.DEFAULT_GPU_SPEED_CV``; 0 turns it
  off), charged relative to the expected slowest of :data:`CALIBRATION_GPUS`. The value is grounded
  in Sinha et al.: their 8% median spread between the fastest and slowest of ~10^4 GPUs of one SKU
  is about ``2 * sigma * E[Z_(N:N)]`` with E[Z] ~ 3.9, i.e. sigma ~ 0.01 (our reading of
  "variation" as the range; documented in docs/cost-model.md).
* **Named slow nodes** (``cluster.slow: {node: speed}``): every GPU of that node runs at ``speed``
  (e.g. 0.8). That breaks the symmetry; the replica holding the slow node is the one the step
  waits for (its peers finish earlier and wait at the DP reduction), so the simulated pipeline is
  that replica's: the stage whose GPUs include the slow node runs at the slow speed. This is exact
  for the step time when the DP reduction is the only cross-replica synchronization.

:func:`stage_pace` gives the factor for one pipeline rank; :func:`pace_summary` says which node or
rank sets the pace.
"""
from __future__ import annotations

from functools import lru_cache
from statistics import NormalDist
from typing import Any

from topologies.placement import as_sizes, coords_of


def expected_max_std_normal(n: int) -> float:
    """Blom's approximation of E[max of n i.i.d. standard normals]; 0 for n = 1 (exact for n = 2 is
    1/sqrt(pi) = 0.564; Blom's is within 5% there and closer for larger n).

    >>> round(expected_max_std_normal(2), 3)
    0.589
    """
    if n <= 1:
        return 0.0
    return NormalDist().inv_cdf((n - 0.375) / (n + 0.25))


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
    """Compute-time multiplier (>= 1) of pipeline rank ``prank``: the slower of its expected
    slowest GPU under variation and its slowest named slow node."""
    s = as_sizes(sizes)
    f = variation_factor(float(cluster.gpu_speed_cv), s.tp * s.cp * s.dp, CALIBRATION_GPUS)
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
    n = s.tp * s.cp * s.dp
    f = variation_factor(float(cluster.gpu_speed_cv), n, CALIBRATION_GPUS)
    if f != 1.0:
        parts.append(f"GPU speed spread cv {cluster.gpu_speed_cv:g}: the expected slowest of the {n} GPUs "
                     f"behind each simulated rank runs {100 * abs(1 - 1 / f):.1f}% "
                     f"{'slower' if f > 1 else 'faster'} than the slowest of the {CALIBRATION_GPUS} GPUs "
                     f"the speed constants were measured on")
    return "; ".join(parts)


__all__ = ["expected_max_std_normal", "pace_summary", "stage_pace", "variation_factor"]
