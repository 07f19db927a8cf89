"""Memory over time: integrate the task graph's memory events over the simulated timeline.

Each event says "task t changes its rank's memory by x bytes at its start (or end)". Sorting the
events by time (frees before allocations at the same instant, then by task id) and taking a
cumulative sum per rank gives each rank's memory curve; its maximum is the peak, and the events up to
the peak tell which (stage, microbatch) activations were alive then.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.engine.core import SimResult
from taskgraph.graph import TaskGraph


@dataclass(frozen=True)
class MemoryCurve:
    """One rank's dynamic memory (bytes above its static level) over time.

    times, values: step curve; ``values[i]`` holds from ``times[i]`` until ``times[i+1]``.
    peak_bytes, peak_time: maximum of ``values`` and when it is first reached.
    alive_at_peak: (stage, microbatch) pairs holding memory at the peak, sorted.
    """

    rank: int
    times: np.ndarray
    values: np.ndarray
    peak_bytes: float
    peak_time: float
    alive_at_peak: tuple[tuple[int, int], ...]


def memory_curves(graph: TaskGraph, result: SimResult) -> dict[int, MemoryCurve]:
    """Per-rank memory curves (ranks with no events get an all-zero curve)."""
    ranks = sorted({d.rank for d in graph.devices if d.stream == "compute"})
    out: dict[int, MemoryCurve] = {}
    if graph.mem_task.size == 0:
        for r in ranks:
            out[r] = MemoryCurve(r, np.zeros(1), np.zeros(1), 0.0, 0.0, ())
        return out
    task = graph.mem_task.astype(np.int64)
    delta = graph.mem_bytes
    t = np.where(graph.mem_at_end == 1, result.end[task], result.start[task])
    rank = np.array([d.rank for d in graph.devices])[graph.device[task]]
    by_rank = np.argsort(rank, kind="stable")  # each rank's events in one sort, not one scan per rank
    sorted_rank = rank[by_rank]
    for r in ranks:
        sel = by_rank[np.searchsorted(sorted_rank, r, "left"):np.searchsorted(sorted_rank, r, "right")]
        if sel.size == 0:
            out[r] = MemoryCurve(r, np.zeros(1), np.zeros(1), 0.0, 0.0, ())
            continue
        order = sel[np.lexsort((task[sel], delta[sel] > 0, t[sel]))]  # time, frees first, task id
        values = np.cumsum(delta[order])
        times = t[order]
        k = int(np.argmax(values))
        peak = float(values[k])
        alive: dict[tuple[int, int], float] = {}
        for e in order[: k + 1].tolist():
            key = (int(graph.stage[task[e]]), int(graph.mb[task[e]]))
            alive[key] = alive.get(key, 0.0) + float(delta[e])
        scale = max(abs(peak), 1.0)
        alive_keys = tuple(sorted(kk for kk, v in alive.items() if v > 1e-9 * scale))
        out[r] = MemoryCurve(r, np.concatenate([[0.0], times]), np.concatenate([[0.0], values]),
                             max(peak, 0.0), float(times[k]) if peak > 0 else 0.0, alive_keys)
    return out


def peak_per_rank(graph: TaskGraph, result: SimResult) -> list[float]:
    """Peak dynamic memory (bytes) of each rank, in rank order (0 where no events)."""
    curves = memory_curves(graph, result)
    return [curves[r].peak_bytes for r in sorted(curves)]
