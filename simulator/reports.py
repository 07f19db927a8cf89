"""Reports computed from a simulated timeline: makespan, per-rank busy/idle/bubble, imbalance,
critical path split by category.

Bubble convention (Narayanan et al. 2021, Section 2.2.1): the bubble fraction of a rank is its
compute stream's idle time within the iteration divided by its busy time, t_pb / t_id; for 1F1B
with uniform stages that is (p-1)/m, and (p-1)/(v*m) for the interleaved schedule. ``idle_fraction``
is the same idle time divided by the iteration time.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from simulator.engine import SimResult
from taskgraph.graph import CATEGORIES, TaskGraph


@dataclass(frozen=True)
class RankReport:
    """One rank's compute stream over the iteration [0, makespan] (seconds)."""

    rank: int
    busy_s: float
    idle_s: float
    bubble_fraction: float  # idle / busy (Narayanan 2021 t_pb / t_id)
    idle_fraction: float    # idle / makespan


@dataclass(frozen=True)
class CriticalPath:
    """The chain of tasks that sets the makespan (first task first) and its time per category."""

    tasks: tuple[int, ...]
    by_category: dict = field(default_factory=dict)  # category -> seconds on the path

    @property
    def length_s(self) -> float:
        return float(sum(self.by_category.values()))


@dataclass(frozen=True)
class Report:
    makespan_s: float
    bubble_fraction: float  # sum of idle / sum of busy over ranks
    idle_fraction: float    # mean over ranks of idle / makespan
    imbalance: float        # max busy / mean busy
    per_rank: tuple[RankReport, ...]
    critical_path: CriticalPath
    num_tasks: int
    num_devices: int

    def to_json(self) -> dict:
        return {
            "makespan_s": self.makespan_s,
            "bubble_fraction": self.bubble_fraction,
            "idle_fraction": self.idle_fraction,
            "imbalance": self.imbalance,
            "num_tasks": self.num_tasks,
            "num_devices": self.num_devices,
            "per_rank": [r.__dict__.copy() for r in self.per_rank],
            "critical_path": {"num_tasks": len(self.critical_path.tasks),
                              "by_category_s": dict(self.critical_path.by_category)},
        }


def compute_busy(graph: TaskGraph) -> dict[int, float]:
    """Busy seconds of each rank's compute stream(s)."""
    is_compute_dev = np.array([d.stream == "compute" for d in graph.devices], dtype=bool)
    dev_rank = np.array([d.rank for d in graph.devices], dtype=np.int64)
    mask = is_compute_dev[graph.device]
    ranks = dev_rank[graph.device[mask]]
    busy = np.bincount(ranks, weights=graph.duration[mask], minlength=int(dev_rank.max(initial=0)) + 1)
    ranks_present = sorted({d.rank for d in graph.devices if d.stream == "compute"})
    return {r: float(busy[r]) for r in ranks_present}


def prev_on_device(graph: TaskGraph, result: SimResult) -> np.ndarray:
    """``prev[t]`` = task that ran just before ``t`` on its device (-1 for the first)."""
    order = result.order.astype(np.int64)
    devs = graph.device[order]
    by_dev = np.argsort(devs, kind="stable")
    seq = order[by_dev]
    prev = np.full(graph.num_tasks, -1, dtype=np.int64)
    same = devs[by_dev][1:] == devs[by_dev][:-1]
    prev[seq[1:][same]] = seq[:-1][same]
    return prev


def critical_path(graph: TaskGraph, result: SimResult) -> CriticalPath:
    """Walk back from the last task to finish: a task that waited for its device is bound by the
    device's previous task; otherwise by the predecessor whose end set its ready time."""
    n = graph.num_tasks
    if n == 0:
        return CriticalPath((), {})
    start, end, ready = result.start, result.end, result.ready
    prev = prev_on_device(graph, result)
    # each task's step back, for all tasks at once: the device's previous task if it waited for its
    # device, else its lowest-id predecessor whose end equals its ready time; -1 ends the walk
    src = np.repeat(np.arange(n, dtype=np.int64), np.diff(graph.succ_ptr))
    dst = graph.succ_idx.astype(np.int64)
    hit = (end[src] == ready[dst]) & (ready[dst] > 0.0)
    bind = np.full(n, n, dtype=np.int64)
    np.minimum.at(bind, dst[hit], src[hit])
    bind[bind == n] = -1
    step = np.where((start > ready) & (prev >= 0), prev, bind).tolist()
    t = int(np.flatnonzero(end == end.max())[0])
    path = [t]
    while step[t] >= 0:
        t = step[t]
        path.append(t)
    path.reverse()
    by_cat: dict[str, float] = {}
    for c, d in zip(graph.category[path].tolist(), graph.duration[path].tolist()):
        by_cat[CATEGORIES[c]] = by_cat.get(CATEGORIES[c], 0.0) + d
    return CriticalPath(tuple(path), dict(sorted(by_cat.items(), key=lambda kv: -kv[1])))


def report(graph: TaskGraph, result: SimResult) -> Report:
    makespan = float(result.makespan)
    busy = compute_busy(graph)
    per_rank = []
    for r, b in busy.items():
        idle = max(makespan - b, 0.0)
        per_rank.append(RankReport(r, b, idle, idle / b if b > 0 else 0.0, idle / makespan if makespan > 0 else 0.0))
    total_busy = sum(x.busy_s for x in per_rank)
    mean_busy = total_busy / len(per_rank) if per_rank else 0.0
    return Report(
        makespan_s=makespan,
        bubble_fraction=(sum(x.idle_s for x in per_rank) / total_busy) if total_busy > 0 else 0.0,
        idle_fraction=float(np.mean([x.idle_fraction for x in per_rank])) if per_rank else 0.0,
        imbalance=(max(x.busy_s for x in per_rank) / mean_busy) if mean_busy > 0 else 1.0,
        per_rank=tuple(per_rank),
        critical_path=critical_path(graph, result),
        num_tasks=graph.num_tasks,
        num_devices=graph.num_devices,
    )


def format_report(rep: Report, title: str = "") -> str:
    ms = 1e3
    lines = []
    if title:
        lines.append(title)
    lines.append(f"iteration time {rep.makespan_s * ms:.3f} ms   bubble fraction {rep.bubble_fraction:.4f} "
                 f"(idle/busy)   idle fraction {rep.idle_fraction:.4f}   imbalance {rep.imbalance:.3f}   "
                 f"tasks {rep.num_tasks}")
    lines.append(f"{'rank':>4} {'busy ms':>10} {'idle ms':>10} {'bubble':>8}")
    for r in rep.per_rank:
        lines.append(f"{r.rank:>4} {r.busy_s * ms:>10.3f} {r.idle_s * ms:>10.3f} {r.bubble_fraction:>8.4f}")
    cp = rep.critical_path
    total = cp.length_s or 1.0
    parts = ", ".join(f"{k} {v * ms:.3f} ms ({100 * v / total:.0f}%)" for k, v in cp.by_category.items())
    lines.append(f"critical path: {len(cp.tasks)} tasks, {cp.length_s * ms:.3f} ms: {parts}")
    return "\n".join(lines)
