"""Reports computed from a simulated timeline: makespan, per-rank compute / exposed communication /
pipeline bubble / other idle, imbalance, critical path split by category.

The four-way split of each rank's iteration is :func:`simulator.reports.breakdown.time_breakdown` (the one
definition, ``docs/glossary.md``). Bubble convention (Narayanan et al. 2021, Section 2.2.1): the
bubble fraction is the *pipeline bubble* (idle waiting on a cross-stage dependency) divided by the
compute time, t_pb / t_id; for 1F1B with uniform stages that is (p-1)/m, and (p-1)/(v*m) for the
interleaved schedule (``ideal_bubble_fraction``). Exposed communication and other idle are NOT
bubble. ``idle_fraction`` is all non-compute time (exposed comm + bubble + other idle) divided by
the iteration time.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from simulator.engine.core import SimResult
from simulator.reports.breakdown import ideal_bubble_fraction, ready_binding, time_breakdown
from taskgraph.graph import CATEGORIES, TaskGraph


@dataclass(frozen=True)
class RankReport:
    """One rank's compute stream over the iteration [0, makespan] (seconds)."""

    rank: int
    busy_s: float           # compute
    idle_s: float           # makespan - busy = exposed_comm_s + pipeline_bubble_s + other_idle_s
    bubble_fraction: float  # pipeline_bubble / busy (Narayanan 2021 t_pb / t_id)
    idle_fraction: float    # idle / makespan
    exposed_comm_s: float = 0.0      # communication running while compute is idle
    pipeline_bubble_s: float = 0.0   # idle waiting on a cross-stage dependency
    other_idle_s: float = 0.0        # idle for any other reason


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
    bubble_fraction: float  # sum of pipeline bubble / sum of busy over ranks (Narayanan t_pb / t_id)
    idle_fraction: float    # mean over ranks of idle / makespan (idle = everything but compute)
    imbalance: float        # max busy / mean busy
    per_rank: tuple[RankReport, ...]
    critical_path: CriticalPath
    num_tasks: int
    num_devices: int
    #: Narayanan 2021 closed form (p-1)/(v*m) for gpipe / 1f1b / interleaved-1f1b, else None
    ideal_bubble_fraction: float | None = None
    #: sum over ranks of each part / (ranks * makespan): compute, exposed_comm, pipeline_bubble, other_idle
    time_split: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {
            "makespan_s": self.makespan_s,
            "bubble_fraction": self.bubble_fraction,
            "ideal_bubble_fraction": self.ideal_bubble_fraction,
            "time_split": dict(self.time_split),
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
    # a stable sort by device; 16-bit keys sort by radix (the same permutation, faster)
    by_dev = np.argsort(devs.astype(np.uint16) if graph.num_devices < 65536 else devs, kind="stable")
    seq = order[by_dev]
    prev = np.full(graph.num_tasks, -1, dtype=np.int64)
    same = devs[by_dev][1:] == devs[by_dev][:-1]
    prev[seq[1:][same]] = seq[:-1][same]
    return prev


def critical_path(graph: TaskGraph, result: SimResult, binding: np.ndarray | None = None) -> CriticalPath:
    """Walk back from the last task to finish: a task that waited for its device is bound by the
    device's previous task; otherwise by the predecessor whose end set its ready time
    (``binding``: :func:`simulator.reports.breakdown.ready_binding` of ``result``, when known)."""
    n = graph.num_tasks
    if n == 0:
        return CriticalPath((), {})
    start, end, ready = result.start, result.end, result.ready
    prev = prev_on_device(graph, result)
    # each task's step back, for all tasks at once: the device's previous task if it waited for its
    # device, else its lowest-id predecessor whose end equals its ready time; -1 ends the walk
    bind = ready_binding(graph, end, ready) if binding is None else binding
    # read through a memoryview: the walk touches ~10 % of the tasks, ``tolist`` would make an int
    # object for every one (the same ints either way)
    step = memoryview(np.ascontiguousarray(np.where((start > ready) & (prev >= 0), prev, bind), dtype=np.int64))
    t = int(np.flatnonzero(end == end.max())[0])
    path = [t]
    while step[t] >= 0:
        t = step[t]
        path.append(t)
    path.reverse()
    # seconds per category along the path: bincount adds the weights one by one in path order (the
    # same float sums as a running total per category); categories listed in order of first
    # appearance, then sorted by time (a stable sort: ties keep that order)
    cats = graph.category[path].astype(np.int64)
    sums = np.bincount(cats, weights=graph.duration[path], minlength=len(CATEGORIES))
    first = np.full(len(CATEGORIES), len(path), dtype=np.int64)
    np.minimum.at(first, cats, np.arange(len(path), dtype=np.int64))
    seen = sorted(np.flatnonzero(first < len(path)).tolist(), key=lambda c: int(first[c]))
    by_cat = {CATEGORIES[c]: float(sums[c]) for c in seen}
    return CriticalPath(tuple(path), dict(sorted(by_cat.items(), key=lambda kv: -kv[1])))


def report(graph: TaskGraph, result: SimResult, schedule=None) -> Report:
    """Makespan, per-rank split, imbalance and critical path. ``schedule`` (a
    :class:`strategies.actions.Schedule`, optional) adds Narayanan's ideal bubble fraction."""
    makespan = float(result.makespan)
    per_rank = []
    busy = compute_busy(graph)  # sum of durations (the split's compute is the same up to rounding)
    binding = ready_binding(graph, result.end, result.ready) if graph.num_tasks else None
    for b in time_breakdown(graph, result.start, result.end, result.ready, makespan, binding=binding):
        c = busy.get(b.rank, b.compute_s)
        idle = max(makespan - c, 0.0)
        per_rank.append(RankReport(b.rank, c, idle, b.pipeline_bubble_s / c if c > 0 else 0.0,
                                   idle / makespan if makespan > 0 else 0.0,
                                   b.exposed_comm_s, b.pipeline_bubble_s, b.other_idle_s))
    total_busy = sum(x.busy_s for x in per_rank)
    mean_busy = total_busy / len(per_rank) if per_rank else 0.0
    denom = len(per_rank) * makespan
    split = {k: (sum(getattr(x, a) for x in per_rank) / denom if denom > 0 else 0.0)
             for k, a in (("compute", "busy_s"), ("exposed_comm", "exposed_comm_s"),
                          ("pipeline_bubble", "pipeline_bubble_s"), ("other_idle", "other_idle_s"))}
    ideal = (ideal_bubble_fraction(schedule.name, schedule.pp, schedule.vpp, schedule.microbatches)
             if schedule is not None else None)
    return Report(
        makespan_s=makespan,
        bubble_fraction=(sum(x.pipeline_bubble_s for x in per_rank) / total_busy) if total_busy > 0 else 0.0,
        idle_fraction=float(np.mean([x.idle_fraction for x in per_rank])) if per_rank else 0.0,
        imbalance=(max(x.busy_s for x in per_rank) / mean_busy) if mean_busy > 0 else 1.0,
        per_rank=tuple(per_rank),
        critical_path=critical_path(graph, result, binding),
        num_tasks=graph.num_tasks,
        num_devices=graph.num_devices,
        ideal_bubble_fraction=ideal,
        time_split=split,
    )


def format_report(rep: Report, title: str = "") -> str:
    ms = 1e3
    lines = []
    if title:
        lines.append(title)
    lines.append(f"iteration time {rep.makespan_s * ms:.3f} ms   {format_bubble(rep)}   "
                 f"imbalance {rep.imbalance:.3f}   tasks {rep.num_tasks}")
    lines.append(format_split(rep))
    lines.append(f"{'rank':>4} {'compute ms':>10} {'exp.comm ms':>11} {'bubble ms':>10} {'other ms':>9} {'bubble':>8}")
    for r in rep.per_rank:
        lines.append(f"{r.rank:>4} {r.busy_s * ms:>10.3f} {r.exposed_comm_s * ms:>11.3f} "
                     f"{r.pipeline_bubble_s * ms:>10.3f} {r.other_idle_s * ms:>9.3f} {r.bubble_fraction:>8.4f}")
    cp = rep.critical_path
    total = cp.length_s or 1.0
    parts = ", ".join(f"{k} {v * ms:.3f} ms ({100 * v / total:.0f}%)" for k, v in cp.by_category.items())
    lines.append(f"critical path: {len(cp.tasks)} tasks, {cp.length_s * ms:.3f} ms: {parts}")
    return "\n".join(lines)


def format_bubble(rep: Report) -> str:
    """``pipeline bubble 0.0365 (ideal (p-1)/(v*m) 0.0365)`` -- the headline bubble, one wording."""
    if len(rep.per_rank) == 1:
        return "pipeline bubble none (one pipeline rank)"
    ideal = (f" (ideal (p-1)/(v*m) {rep.ideal_bubble_fraction:.4f})" if rep.ideal_bubble_fraction is not None
             else "")
    return f"pipeline bubble {rep.bubble_fraction:.4f} of compute{ideal}"


def format_split(rep: Report) -> str:
    """One line: share of the ranks' iteration time in each part (they sum to 100 %)."""
    ts = rep.time_split or {}
    names = (("compute", "compute"), ("exposed_comm", "exposed comm"), ("pipeline_bubble", "pipeline bubble"),
             ("other_idle", "other idle"))
    return "time split (all ranks): " + ", ".join(f"{label} {100 * ts.get(k, 0.0):.1f}%" for k, label in names)
