"""Where each rank's iteration goes: compute, exposed communication, pipeline bubble, other idle.

This is the ONE definition of these terms (``docs/glossary.md``); the text report, ``--json``, the
HTML report and the plots all read :func:`time_breakdown`.

For each rank r, over the iteration [0, makespan]:

* **compute** -- time r's compute stream(s) run a task (union of their intervals).
* **exposed communication** -- time one of r's communication devices (its ``tp``/``dp``/``send``...
  streams and its outgoing ``link`` devices) runs a task while r's compute stream is idle:
  ``|comm union \\ compute union|``.
* **idle** -- the rest: neither compute nor communication of r runs. Idle time lies in the gaps of the
  compute stream; each gap is attributed as a whole to one cause:

  - **pipeline bubble** -- the compute task that ends the gap waited on a cross-stage dependency:
    following its *binding* chain back (the predecessor whose end set its ready time, or its
    device's previous task when it queued, as in :func:`simulator.reports.critical_path`) through
    r's own communication tasks reaches a pipeline transfer (``pp-send``) or a task of another rank.
    The gap after a rank's last compute task (waiting for the other stages to drain) is pipeline
    bubble when the graph has more than one rank, else other idle.
  - **other idle** -- every other gap: the chain reaches r's own compute (idle between r's own
    communication tasks, launch gaps) or a task with no predecessor.

compute + exposed communication + pipeline bubble + other idle = makespan, per rank, exactly up to
rounding. With one rank (pp = 1) there is no cross-stage dependency, so no pipeline bubble.

Narayanan et al. 2021 (Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM), Section 2.2.1: bubble fraction = t_pb / t_id = (p-1)/m for GPipe and 1F1B, and
(p-1)/(v*m) for the interleaved schedule (Section 2.2.2) -- the pipeline bubble divided by the ideal
(compute) time. :func:`ideal_bubble_fraction` returns that closed form for the schedules it is
defined for; the simulated fraction is pipeline bubble / compute, so the two are directly comparable.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from taskgraph.graph import CAT, TaskGraph

#: schedules whose ideal bubble fraction Narayanan 2021 gives in closed form (Section 2.2)
NARAYANAN_SCHEDULES = frozenset({"gpipe", "1f1b", "interleaved-1f1b"})

_PIPE, _OTHER = 1, 2
_MAX_WALK = 256  # binding-chain steps through a rank's own communication before giving up (-> other)


@dataclass(frozen=True)
class RankBreakdown:
    """One rank's iteration split into four parts (seconds; they sum to the makespan)."""

    rank: int
    compute_s: float
    exposed_comm_s: float
    pipeline_bubble_s: float
    other_idle_s: float

    @property
    def bubble_fraction(self) -> float:
        """Pipeline bubble / compute (Narayanan 2021 t_pb / t_id)."""
        return self.pipeline_bubble_s / self.compute_s if self.compute_s > 0 else 0.0


def ideal_bubble_fraction(schedule_name: str | None, pp: int, vpp: int, microbatches: int) -> float | None:
    """Narayanan 2021 Section 2.2: (p-1)/m for gpipe and 1f1b, (p-1)/(v*m) for interleaved-1f1b;
    ``None`` for schedules without this closed form (zero-bubble, DualPipe, custom ...).

    >>> ideal_bubble_fraction("interleaved-1f1b", 8, 2, 96)
    0.036458333333333336
    >>> ideal_bubble_fraction("zb-h1", 4, 1, 8) is None
    True
    """
    if schedule_name not in NARAYANAN_SCHEDULES or microbatches <= 0:
        return None
    return (pp - 1) / (vpp * microbatches)


def _covered(iv: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Length of the disjoint sorted intervals ``iv`` inside [0, x], for each x."""
    if iv.size == 0:
        return np.zeros(len(x))
    s, e = iv[:, 0], iv[:, 1]
    cum = np.concatenate([[0.0], np.cumsum(e - s)])
    k = np.searchsorted(s, x, side="right")  # intervals starting at or before x
    part = np.where(k > 0, np.minimum(x, e[np.maximum(k - 1, 0)]) - s[np.maximum(k - 1, 0)], 0.0)
    return cum[np.maximum(k - 1, 0)] * (k > 0) + np.maximum(part, 0.0)


class _Binding:
    """``of(ts)``: for each task, the task that made it start when it did -- its device's previous
    task when it queued (start > ready), else the lowest-id predecessor whose end equals its ready
    time; -1 for none. Built lazily: the edge scan once, the per-device order only if a queued task
    is asked about."""

    def __init__(self, graph, start, end, ready):
        n = graph.num_tasks
        self.graph, self.start, self.ready = graph, start, ready
        src = np.repeat(np.arange(n, dtype=np.int64), np.diff(graph.succ_ptr))
        dst = np.asarray(graph.succ_idx, dtype=np.int64)
        hit = (end[src] == ready[dst]) & (ready[dst] > 0.0)
        self.pred = np.full(n, n, dtype=np.int64)
        np.minimum.at(self.pred, dst[hit], src[hit])
        self.pred[self.pred == n] = -1
        self.prev = None

    def of(self, ts: np.ndarray) -> np.ndarray:
        out = self.pred[ts]
        queued = self.start[ts] > self.ready[ts]
        if queued.any():
            if self.prev is None:
                n = self.graph.num_tasks
                dev = np.asarray(self.graph.device, dtype=np.int64)
                order = np.lexsort((np.arange(n), self.start, dev))
                self.prev = np.full(n, -1, dtype=np.int64)
                same = dev[order][1:] == dev[order][:-1]
                self.prev[order[1:][same]] = order[:-1][same]
            out = np.where(queued, self.prev[ts], out)
        return out


def binding_predecessor(graph: TaskGraph, start: np.ndarray, end: np.ndarray, ready: np.ndarray) -> np.ndarray:
    """``b[t]``: the task that made ``t`` start when it did -- its device's previous task when it queued
    (start > ready), else the lowest-id predecessor whose end equals its ready time; -1 for none."""
    return _Binding(graph, start, end, ready).of(np.arange(graph.num_tasks))


def time_breakdown(graph: TaskGraph, start: np.ndarray, end: np.ndarray, ready: np.ndarray | None = None,
                   makespan: float | None = None) -> tuple[RankBreakdown, ...]:
    """Split every rank's iteration into compute, exposed communication, pipeline bubble and other
    idle (module docstring). One entry per rank that has a compute device, in rank order.

    graph: a :class:`TaskGraph` (only ``num_tasks``, ``device``, ``devices``, ``category`` and the
    successor CSR are read); start, end: task times; ready: ready times (recomputed from the
    predecessors when ``None``); makespan: iteration end (default: the latest end).
    """
    n = graph.num_tasks
    start = np.asarray(start, dtype=np.float64)
    end = np.asarray(end, dtype=np.float64)
    if makespan is None:
        makespan = float(end.max()) if n else 0.0
    if ready is None:
        ready = np.zeros(n)
        if n:
            src = np.repeat(np.arange(n), np.diff(graph.succ_ptr))
            np.maximum.at(ready, graph.succ_idx, end[src])
    dev_rank = np.array([d.rank for d in graph.devices], dtype=np.int64)
    dev_compute = np.array([d.stream == "compute" for d in graph.devices], dtype=bool)
    ranks = sorted({d.rank for d in graph.devices if d.stream == "compute" and d.rank >= 0})
    if not ranks:
        return ()
    pipelined = len(ranks) > 1
    device = np.asarray(graph.device, dtype=np.int64)
    t_rank = dev_rank[device]
    t_compute = dev_compute[device]
    is_pp = np.asarray(graph.category) == CAT["pp-send"]
    # one sort for all ranks: tasks with time, by (rank, compute first, start, id)
    sel = np.flatnonzero((t_rank >= 0) & (end > start))
    o = np.lexsort((sel, start[sel], ~t_compute[sel], t_rank[sel]))
    sel = sel[o]
    key = t_rank[sel] * 2 + (~t_compute[sel])
    bounds = np.searchsorted(key, np.arange(2 * (max(ranks) + 1) + 1))
    binding = None
    out = []
    for r in ranks:
        comp_idx = sel[bounds[2 * r]:bounds[2 * r + 1]]      # sorted by start
        comm_idx = sel[bounds[2 * r + 1]:bounds[2 * r + 2]]
        comp = _union_sorted(start[comp_idx], end[comp_idx])
        comm = _union_sorted(start[comm_idx], end[comm_idx])
        compute_s = float((comp[:, 1] - comp[:, 0]).sum()) if comp.size else 0.0
        # covered comm at every compute start/end: exposed = |comm| - |comm inside compute|; idle per
        # compute gap [g0, g1) = gap length - comm inside the gap
        k = comp.shape[0]
        cov = _covered(comm, np.concatenate([comp[:, 0], comp[:, 1], [0.0, makespan]]))
        c_start, c_end = cov[:k], cov[k:2 * k]
        comm_total = float((comm[:, 1] - comm[:, 0]).sum()) if comm.size else 0.0
        exposed = comm_total - float((c_end - c_start).sum())
        g0 = np.concatenate([[0.0], comp[:, 1]])
        g1 = np.concatenate([comp[:, 0], [makespan]])
        cov0 = np.concatenate([cov[2 * k:2 * k + 1], c_end])
        cov1 = np.concatenate([c_start, cov[2 * k + 1:]])
        keep = g1 > g0
        g0, g1 = g0[keep], g1[keep]
        idle = np.maximum((g1 - g0) - (cov1[keep] - cov0[keep]), 0.0)
        cause = np.full(g0.size, _OTHER, dtype=np.int64)
        tail = g1 >= makespan
        if pipelined:
            cause[tail] = _PIPE
        inner = np.flatnonzero(~tail & (idle > 0))
        if inner.size:
            if binding is None:
                binding = _Binding(graph, start, end, ready)
            # the compute task of r that starts at each gap's end (lowest id on ties)
            pos = np.searchsorted(start[comp_idx], g1[inner], side="left")
            cur = binding.of(comp_idx[np.minimum(pos, comp_idx.size - 1)])
            res = np.zeros(inner.size, dtype=np.int64)
            for _ in range(_MAX_WALK):
                open_ = np.flatnonzero(res == 0)
                if not open_.size:
                    break
                c = cur[open_]
                none = c < 0
                cc = np.where(none, 0, c)
                pipe = ~none & (is_pp[cc] | ((t_rank[cc] != r) & (t_rank[cc] >= 0)))
                own_compute = ~none & ~pipe & t_compute[cc] & (t_rank[cc] == r)
                res[open_[none | own_compute]] = _OTHER
                res[open_[pipe]] = _PIPE
                walk = ~(none | pipe | own_compute)
                if walk.any():
                    cur[open_[walk]] = binding.of(cc[walk])
            res[res == 0] = _OTHER
            cause[inner] = res
        bubble = float(idle[cause == _PIPE].sum())
        other = float(idle[cause == _OTHER].sum())
        out.append(RankBreakdown(r, compute_s, exposed, bubble, other))
    return tuple(out)


def _union_sorted(s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Merged intervals of non-empty [s, e) already sorted by s, as a (k, 2) array."""
    if s.size == 0:
        return np.zeros((0, 2))
    emax = np.maximum.accumulate(e)
    new = np.ones(s.size, dtype=bool)
    new[1:] = s[1:] > emax[:-1]
    idx = np.flatnonzero(new)
    return np.stack([s[idx], np.append(emax[idx[1:] - 1], emax[-1])], axis=1)
