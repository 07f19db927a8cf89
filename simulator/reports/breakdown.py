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
    device's previous task when it queued, as in :func:`simulator.reports.report.critical_path`) through
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


def _covered(iv: np.ndarray, iv_rank: np.ndarray, x: np.ndarray, x_rank: np.ndarray) -> np.ndarray:
    """Length of the rank's intervals (``iv`` sorted by (rank, start), disjoint per rank) before
    ``x``, plus the total length of all earlier ranks' intervals -- so the difference between two
    points of one rank is the exact coverage between them."""
    if iv.size == 0:
        return np.zeros(len(x))
    s, e = iv[:, 0], iv[:, 1]
    cum = np.concatenate([[0.0], np.cumsum(e - s)])
    lift = _lift(max(float(e.max()), float(np.max(x, initial=0.0))))
    k = np.searchsorted(iv_rank * lift + s, x_rank * lift + x, side="right")  # intervals ordered before x
    j = np.maximum(k - 1, 0)
    own = (k > 0) & (iv_rank[j] == x_rank)
    part = np.where(own, np.clip(np.minimum(x, e[j]) - s[j], 0.0, None), 0.0)
    return cum[np.where(own, k - 1, k)] + part


def _lift(t_max: float) -> float:
    """A power of two above 2 * t_max: ``rank * lift + t`` orders (rank, t) pairs by rank, then t.
    (Adding it rounds t to ~1e-12 s for 64 ranks; it is only used to compare and search, never as
    a time.)"""
    return 2.0 ** np.ceil(np.log2(max(t_max, 1.0) * 2.0))


class _Binding:
    """``of(ts)``: for each task, the task that made it start when it did -- its device's previous
    task when it queued (start > ready), else the lowest-id predecessor whose end equals its ready
    time; -1 for none. Built lazily: the edge scan once, the per-device order only if a queued task
    is asked about."""

    def __init__(self, graph, start, end, ready, pred=None):
        self.graph, self.start, self.ready = graph, start, ready
        self.pred = ready_binding(graph, end, ready) if pred is None else pred
        self.prev = None

    def of(self, ts: np.ndarray) -> np.ndarray:
        out = self.pred[ts]
        queued = self.start[ts] > self.ready[ts]
        if queued.any():
            if self.prev is None:
                n = self.graph.num_tasks
                dev = np.asarray(self.graph.device, dtype=np.int64)
                order = np.argsort(dev * _lift(float(self.start.max(initial=0.0))) + self.start, kind="stable")
                self.prev = np.full(n, -1, dtype=np.int64)
                same = dev[order][1:] == dev[order][:-1]
                self.prev[order[1:][same]] = order[:-1][same]
            out = np.where(queued, self.prev[ts], out)
        return out


def ready_binding(graph, end: np.ndarray, ready: np.ndarray) -> np.ndarray:
    """``p[t]``: the lowest-id predecessor of ``t`` whose end equals its ready time (> 0), else -1
    -- what set ``t``'s ready time (the critical path and the bubble's binding chain both use it)."""
    n = graph.num_tasks
    src = np.repeat(np.arange(n, dtype=np.int64), np.diff(graph.succ_ptr))
    dst = np.asarray(graph.succ_idx, dtype=np.int64)
    hit = (end[src] == ready[dst]) & (ready[dst] > 0.0)
    pred = np.full(n, n, dtype=np.int64)
    np.minimum.at(pred, dst[hit], src[hit])
    pred[pred == n] = -1
    return pred


def binding_predecessor(graph: TaskGraph, start: np.ndarray, end: np.ndarray, ready: np.ndarray) -> np.ndarray:
    """``b[t]``: the task that made ``t`` start when it did -- its device's previous task when it queued
    (start > ready), else the lowest-id predecessor whose end equals its ready time; -1 for none."""
    return _Binding(graph, start, end, ready).of(np.arange(graph.num_tasks))


def time_breakdown(graph: TaskGraph, start: np.ndarray, end: np.ndarray, ready: np.ndarray | None = None,
                   makespan: float | None = None, *, binding: np.ndarray | None = None) -> tuple[RankBreakdown, ...]:
    """Split every rank's iteration into compute, exposed communication, pipeline bubble and other
    idle (module docstring). One entry per rank that has a compute device, in rank order.

    graph: a :class:`TaskGraph` (only ``num_tasks``, ``device``, ``devices``, ``category`` and the
    successor CSR are read); start, end: task times; ready: ready times (recomputed from the
    predecessors when ``None``); makespan: iteration end (default: the latest end); binding:
    :func:`ready_binding` of these times when the caller has it already.

    All ranks are processed together (this runs inside every ``search.evaluate``): interval lists
    are sorted by (rank, start) and the per-rank running maxima and prefix sums are segmented by
    rank, so the cost is a few numpy passes over the tasks whatever the rank count.
    """
    return _split(graph, start, end, ready, makespan, True, binding)


def pipeline_bubble_total(graph: TaskGraph, start: np.ndarray, end: np.ndarray, ready: np.ndarray | None = None,
                          makespan: float | None = None) -> float:
    """``sum(b.pipeline_bubble_s for b in time_breakdown(...))``, the same float, without the
    exposed-communication term (what ``search.evaluate`` needs; the coverage of each gap does not
    depend on the other points searched, so the bubble is bit-identical)."""
    return sum(b.pipeline_bubble_s for b in _split(graph, start, end, ready, makespan, False))


def _split(graph, start, end, ready, makespan, with_exposed: bool, binding=None) -> tuple[RankBreakdown, ...]:
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
    nr = max(ranks) + 1
    device = np.asarray(graph.device, dtype=np.int64)
    t_rank = dev_rank[device]
    t_compute = dev_compute[device]
    timed = (t_rank >= 0) & (end > start)
    # merged busy intervals per rank, sorted by (rank, start); first task of each compute interval
    comp, comp_rank, comp_first = _rank_union(np.flatnonzero(timed & t_compute), t_rank, start, end)
    comm, comm_rank, _ = _rank_union(np.flatnonzero(timed & ~t_compute), t_rank, start, end)
    compute_s = np.bincount(comp_rank, weights=comp[:, 1] - comp[:, 0], minlength=nr)
    comm_s = np.bincount(comm_rank, weights=comm[:, 1] - comm[:, 0], minlength=nr)
    # compute-stream gaps: before each compute interval (from the rank's previous one, or 0) and the
    # tail after each rank's last interval up to the makespan (ranks with no compute: all tail)
    k = comp.shape[0]
    first_of_rank = np.ones(k, dtype=bool)
    first_of_rank[1:] = comp_rank[1:] != comp_rank[:-1]
    g0 = np.where(first_of_rank, 0.0, np.r_[0.0, comp[:-1, 1]] if k else np.zeros(0))
    g1 = comp[:, 0]
    last_end = np.zeros(nr)
    if k:
        last_of_rank = np.r_[comp_rank[1:] != comp_rank[:-1], True]
        last_end[comp_rank[last_of_rank]] = comp[last_of_rank, 1]
    rank_arr = np.asarray(ranks, dtype=np.int64)
    g0 = np.concatenate([g0, last_end[rank_arr]])
    g1 = np.concatenate([g1, np.full(rank_arr.size, makespan)])
    g_rank = np.concatenate([comp_rank, rank_arr])
    ends_task = np.concatenate([comp_first, np.full(rank_arr.size, -1)])
    tail = np.r_[np.zeros(k, dtype=bool), np.ones(rank_arr.size, dtype=bool)]
    # comm coverage at every compute start/end and gap end, in one search: exposed = comm - comm
    # inside compute intervals; idle of a gap = its length - comm inside it
    if with_exposed:
        # the gaps' bounds are compute bounds: g1[:k] are the intervals' starts and g0[:k] the end of
        # the rank's interval before (0.0 at a rank's first), so each point is searched once (the
        # coverage is computed point by point: the same floats as searching the copies)
        firsts = np.flatnonzero(first_of_rank)
        nt = rank_arr.size
        cov = _covered(comm, comm_rank, np.concatenate([comp[:, 1], comp[:, 0], g1[k:], g0[k:], g0[firsts]]),
                       np.concatenate([comp_rank, comp_rank, rank_arr, rank_arr, comp_rank[firsts]]))
        exposed = comm_s - np.bincount(comp_rank, weights=cov[:k] - cov[k:2 * k], minlength=nr)
        at_g0 = np.empty(k)
        at_g0[1:] = cov[:k][:-1]
        at_g0[firsts] = cov[2 * k + 2 * nt:]
        at_g1 = cov[k:2 * k + nt]
        at_g0 = np.concatenate([at_g0, cov[2 * k + nt:2 * k + 2 * nt]])
    else:  # same lift in _covered: g1 holds the makespan, the largest point either way
        cov = _covered(comm, comm_rank, np.concatenate([g1, g0]), np.concatenate([g_rank, g_rank]))
        at_g1, at_g0 = cov[:g1.size], cov[g1.size:]
        exposed = np.full(nr, np.nan)
    idle = np.maximum((g1 - g0) - (at_g1 - at_g0), 0.0)
    cause = np.full(g0.size, _OTHER, dtype=np.int64)
    if len(ranks) > 1:
        cause[tail] = _PIPE  # the drain: waiting for the other stages to finish
    inner = np.flatnonzero(~tail & (idle > 0))
    if inner.size:
        cause[inner] = _walk(_Binding(graph, start, end, ready, binding), ends_task[inner], g_rank[inner], t_rank, t_compute,
                             np.asarray(graph.category) == CAT["pp-send"])
    bubble = np.bincount(g_rank, weights=np.where(cause == _PIPE, idle, 0.0), minlength=nr)
    other = np.bincount(g_rank, weights=np.where(cause == _OTHER, idle, 0.0), minlength=nr)
    return tuple(RankBreakdown(r, float(compute_s[r]), float(exposed[r]), float(bubble[r]), float(other[r]))
                 for r in ranks)


def _walk(binding: _Binding, tasks: np.ndarray, rank: np.ndarray, t_rank, t_compute, is_pp) -> np.ndarray:
    """Cause of each idle gap ended by ``tasks[i]`` on ``rank[i]``: follow binding predecessors through
    the rank's own communication until a pipeline transfer / another rank (pipeline bubble) or the
    rank's own compute / nothing (other idle)."""
    cur = binding.of(tasks)
    res = np.zeros(tasks.size, dtype=np.int64)
    for _ in range(_MAX_WALK):
        open_ = np.flatnonzero(res == 0)
        if not open_.size:
            break
        c = cur[open_]
        r = rank[open_]
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
    return res


def _rank_union(idx: np.ndarray, t_rank: np.ndarray, start: np.ndarray, end: np.ndarray):
    """Merged intervals of tasks ``idx`` per rank: ((k, 2) array sorted by (rank, start), rank of
    each, first task (lowest start, then id) of each)."""
    if idx.size == 0:
        return np.zeros((0, 2)), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    # one stable float sort on (rank, start) (ties keep id order); ~4x faster than a 3-key lexsort
    o = idx[np.argsort(t_rank[idx] * _lift(float(end.max())) + start[idx], kind="stable")]
    s, e, r = start[o], end[o], t_rank[o]
    # running maximum of ends, restarted at each rank (ends are >= 0, so -1 marks a restart)
    new_rank = np.r_[True, r[1:] != r[:-1]]
    emax = _segmented_max(e, new_rank)
    new = new_rank.copy()
    new[1:] |= s[1:] > emax[:-1]
    f = np.flatnonzero(new)
    ends = np.maximum.reduceat(e, f)
    return np.stack([s[f], ends], axis=1), r[f], o[f]


def _segmented_max(x: np.ndarray, restart: np.ndarray) -> np.ndarray:
    """Running maximum of ``x`` that restarts where ``restart`` is True (x >= 0)."""
    seg = np.cumsum(restart) - 1
    # lift each segment above all earlier ones, accumulate, drop the lift; the result is x rounded
    # to ~1e-12 s, used only to decide where merged intervals split (a touching pair split by
    # rounding leaves a zero-length gap, which has no idle time)
    lift = _lift(float(x.max(initial=0.0)))
    return np.maximum.accumulate(x + seg * lift) - seg * lift


def _union_sorted(s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Merged intervals of non-empty [s, e) already sorted by s, as a (k, 2) array."""
    if s.size == 0:
        return np.zeros((0, 2))
    emax = np.maximum.accumulate(e)
    new = np.ones(s.size, dtype=bool)
    new[1:] = s[1:] > emax[:-1]
    idx = np.flatnonzero(new)
    return np.stack([s[idx], np.append(emax[idx[1:] - 1], emax[-1])], axis=1)
