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
from taskgraph.graph import MEM_KINDS, TaskGraph

ACT, TMP = MEM_KINDS.index("activation"), MEM_KINDS.index("temporary")


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
    return curves_and_split(graph, result)[0]


def curves_and_split(graph: TaskGraph, result: SimResult) -> tuple[dict[int, MemoryCurve], dict]:
    """:func:`memory_curves` and, from the same sort of the events, the bytes alive at each rank's
    peak, activation and temporary: ``{rank: (activation bytes, temporary bytes)}`` (ranks with
    events only)."""
    ranks = sorted({d.rank for d in graph.devices if d.stream == "compute"})
    out: dict[int, MemoryCurve] = {}
    split: dict[int, tuple[float, float]] = {}
    if graph.mem_task.size == 0:
        for r in ranks:
            out[r] = MemoryCurve(r, np.zeros(1), np.zeros(1), 0.0, 0.0, ())
        return out, split
    task = graph.mem_task.astype(np.int64)
    delta = graph.mem_bytes
    t = np.where(graph.mem_at_end == 1, result.end[task], result.start[task])
    rank = np.array([d.rank for d in graph.devices])[graph.device[task]]
    # one sort of every rank's events: by rank, then time, frees first, task id (stable: within a
    # rank the same order as sorting that rank's events alone)
    by_rank = np.lexsort((task, delta > 0, t, rank))
    sorted_rank = rank[by_rank]
    kinds = graph.mem_kind if graph.mem_kind.size else np.zeros(task.size, dtype=np.int8)
    # (stage, microbatch) of each event as one code, increasing in (stage, microbatch)
    st, mb = graph.stage[task].astype(np.int64) + 1, graph.mb[task].astype(np.int64) + 1
    width = int(mb.max()) + 1
    code = st * width + mb
    for r in ranks:
        order = by_rank[np.searchsorted(sorted_rank, r, "left"):np.searchsorted(sorted_rank, r, "right")]
        if order.size == 0:
            out[r] = MemoryCurve(r, np.zeros(1), np.zeros(1), 0.0, 0.0, ())
            continue
        values = np.cumsum(delta[order])
        times = t[order]
        k = int(np.argmax(values))
        peak = float(values[k])
        upto = order[: k + 1]
        # bytes alive per (stage, microbatch): bincount adds the weights one by one in event order,
        # the same float sums as accumulating them in a dict
        alive = np.bincount(code[upto], weights=delta[upto])
        scale = max(abs(peak), 1.0)
        live = np.flatnonzero(alive > 1e-9 * scale)
        alive_keys = tuple(zip((live // width - 1).tolist(), (live % width - 1).tolist()))
        kd, dl = kinds[upto], delta[upto]
        split[r] = (float(dl[kd == ACT].sum()), float(dl[kd == TMP].sum()))
        out[r] = MemoryCurve(r, np.concatenate([[0.0], times]), np.concatenate([[0.0], values]),
                             max(peak, 0.0), float(times[k]) if peak > 0 else 0.0, alive_keys)
    return out, split


def peak_per_rank(graph: TaskGraph, result: SimResult) -> list[float]:
    """Peak dynamic memory (bytes) of each rank, in rank order (0 where no events)."""
    curves = memory_curves(graph, result)
    return [curves[r].peak_bytes for r in sorted(curves)]
