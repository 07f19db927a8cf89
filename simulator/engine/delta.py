"""Delta simulation: re-simulate only the tasks whose timing changes after a local change.

Reference: Jia et al. 2019, "Beyond Data and Model Parallelism for Deep Neural Networks" (FlexFlow),
Section 5.3 "Delta Simulation Algorithm": a strategy search evaluates thousands of candidates that
differ from the previous one in a single operator; instead of simulating the whole task graph again,
start from the previous timeline and propagate the change through the tasks whose ready / start / end
times actually change. This module implements that idea *exactly* for the FIFO engine of
:mod:`simulator.engine.core` (results are bit-identical to a full run, including per-device order and the
global pop order), and handles the part the paper leaves implicit: a change of ready times reorders the
FIFO queue of a device.

Engine semantics (simulator/engine/core.py, FlexFlow Section 5.2)
------------------------------------------------------------
A heap of tasks whose predecessors have all finished, keyed ``key(x) = (R(x), x)``; pop the smallest;
``S(x) = max(R(x), free[dev(x)])``, ``E(x) = S(x) + dur(x)``, ``free[dev(x)] = E(x)``; a successor's
ready time ``R(v) = max(0, max over predecessors E(u))``; it is pushed when its last predecessor pops.

The model the delta works on, and why it equals the engine
----------------------------------------------------------
Model equations, with ``prev(x)`` the task just before ``x`` in the *key-sorted* list of its device::

    R(x) = max(0, max_{u in pred(x)} E(u))
    S(x) = max(R(x), E(prev(x)))            (0 when x is first on its device)
    E(x) = S(x) + dur(x)

Call a timeline *canonical* when every edge ``u -> v`` goes forward in key order,
``key(u) < key(v)`` (then the key-sorted order of all tasks is a topological order).

Lemma 1 (model = engine). Let (R, S, E) satisfy the model equations and be canonical; let pi be all
tasks sorted by key. Then the engine pops exactly pi and produces exactly (R, S, E).
Proof by induction over pops: suppose the engine popped pi_1..pi_k with these values. Every task in its
heap has all predecessors among pi_1..pi_k, so its heap key is (R, id) with the model's R. pi_{k+1}
is in the heap (canonical: its predecessors come earlier in pi), and every other heap entry is some
pi_j with j > k+1, hence a larger key: the engine pops pi_{k+1}. Its ``free[dev]`` is the end of the last
popped task on that device, i.e. ``E(prev(pi_{k+1}))``: start and end agree. QED. (The engine's result
is unique, so a canonical fixed point of the model is unique too.)

Lemma 2 (when it is canonical). With every duration > 0 each edge has ``R(v) >= E(u) > R(u)``:
always canonical. With zero durations an edge can tie (``R(u) == R(v)``, u a zero-duration task
that did not wait) and then goes backwards iff ``v < u``; the engine then pops v after u although
its key is smaller, i.e. the pop order is not key-sorted (this is the "explicit rule" the notes in
shared/notes/engine-measurements.md ask for). Such timelines are *non-canonical*; delta mode detects
them (see below) and falls back to a full run, counted in :class:`DeltaStats` with the reason.
Conversely the engine's pop order is key-sorted iff its timeline is canonical.
"Duration > 0" must hold *after rounding*: ``E(u) > R(u)`` needs ``S(u) + dur(u) > S(u)`` in IEEE
doubles, and a positive duration below half an ulp of the start time (``2.0 + 1e-16 == 2.0``) is lost
and acts as a zero duration. Such a task is *lossy*; the state records whether the last full run had
one (``end == start`` with ``dur > 0``), and a lossy timeline is handled exactly like one with zero
durations (canonical check, guarded sweep). An unguarded sweep that would make a task lossy aborts to a
full run (reason "positive duration lost to rounding"), so the unguarded argument below, which needs
``E > S`` for every task, is never applied to a lossy task.

Delta algorithm (a sweep in key order over the dirty tasks only)
----------------------------------------------------------------
State: R, S, E per task; per device a queue of the device's tasks sorted by key (chunked parallel
lists of ready times and ids, searched with ``bisect``); successor and predecessor lists.
A change marks *dirty* the tasks whose inputs changed (its own duration / device / predecessor set,
the task after a removed or inserted list entry). Then a heap of events is processed in increasing
key order; the current event key is the *sweep point* K. Invariant (INV): every list entry with key
< K is final (its values and position equal the new fixed point), and every task whose new key is < K
is in its list at that key. Events for a dirty task x:

* process at ``(nr(x), x)`` where ``nr(x) = max(0, E of predecessors)`` is known (no predecessor is
  *unresolved*, below): put x's list entry at its new key / device if needed, ``prev`` = the entry
  just below, compute S and E. If E changed, the successors' ready times are updated incrementally
  (they become dirty only if their ready time really changes); if the entry moved or E changed, the
  next entry of the list becomes dirty (its ``prev`` or ``E(prev)`` changed). Otherwise nothing
  propagates: early termination.
* *move*: when a predecessor's new end gives x a new ready time (and no predecessor is unresolved),
  x's entry moves at once to its new key, which is > K; the entries after its old and its new place
  become dirty. If the new key is not below x's current end, x's successors could be reached by the
  sweep before x, so x becomes *unresolved*: each successor gets a pending count and cannot be
  processed (nor passed as clean) until x is.
* *vacate* at x's old list key, if the sweep reaches it while x is dirty but cannot be processed
  there (some predecessor is unresolved, or its ready time is known to move but it was not moved):
  x's entry leaves the list (so tasks behind it no longer see a stale end; the next entry becomes
  dirty), and x becomes unresolved. This keeps INV when a task moves *later* past other tasks of its
  device: the engine would not have x in its heap yet, and neither has the sweep.
* New tasks start unresolved.

Why INV holds with durations > 0: every event pushed while processing the event at K has a key > K
(successors: ``R >= E(x) > R(x)``; list neighbours: after the entry at K), a dirty task's list entry is
always >= K, and a provisional ``nr(y)`` computed from a predecessor p that is dirty but not yet
resolved is ``>= E_old(p) > key_old(p)``, so the sweep meets p's old entry (and vacates or processes
p) before it could process y. A moved entry sits at y's provisional key ``(nr(y), y) > K``: nothing
below it changes, nothing above it is processed before y, and if ``nr(y)`` changes again (a
predecessor processed at some K' < nr(y)) it moves again before the sweep gets there. Its successors
have keys ``>= (E(y), .)`` (their ready time includes y's current end), so y comes first when
``nr(y) < E(y)``; otherwise they pend on y. Hence each dirty task is processed once, with final
inputs, and at the end every task satisfies the model equations (a task never marked dirty had no
input change). The result is canonical (Lemma 2), so by Lemma 1 it equals the engine.
Work: the dirty tasks (ready, start or end changed, or moved in a device queue) and their direct
successors / list neighbours, each O(log n + degree + chunk memmove) -- not the suffix after the change.

With zero durations the same sweep runs with guards: a pop below the previous sweep point, or an input
change of an already processed task, aborts to a full run; at the end, edges at tasks whose ready
time changed (and new edges) are checked to go forward in key order (the timeline before the change
was canonical, so other edges still do). If no guard fired, the result is a canonical fixed point and
equals the engine by Lemma 1; otherwise the full run is used (counted).

Fallback (cheaper when the change touches much of the graph): the change is applied and the sweep
runs with a time budget, ``budget`` times a full run (the fastest full run so far: engine + state
rebuild; checked every 32 events; one event costs several engine pops, so only a sweep
that stays small can win). The sweep cannot know in advance how far a change will spread, so this is
the ski-rental rule: at most ``budget`` of a full run is wasted. When the budget runs out, when the
timeline is not canonical, or when a guard fires, :func:`simulator.engine.core.simulate_arrays` runs on
the current graph (tombstones enter it as isolated
zero-duration tasks: such a task pops at (0, id), starts and ends at its device's current free time
and leaves it unchanged, so it affects no other task), and the delta state is rebuilt from its
arrays with buffer copies; device queues are rebuilt lazily, per device, on first use.
Every fallback is reported in :class:`DeltaStats` (``fallback``, ``reason``).
When the sweep stops for its budget or work limit with durations > 0, the fallback does not start
over: the tasks up to the sweep point are final (INV) and are exactly those the engine would have
popped by then (Lemma 1), so the engine resumes from there on the remaining tasks
(:meth:`DeltaSimulator._resume`, counted in ``DeltaStats.resumed``) unless they are more than
``RESUME_MAX_SHARE`` of the graph. The resume costs about one engine pop per remaining task plus a
fixed part (it patches the state in place), against several pops per task for the sweep, so with
durations > 0 the sweep also races the resume (ski rental, a measured cost model): at its deadline
checks it counts the tasks after its point (one vectorized pass), estimates the resumed engine's
time on them (``_res_fix + _res_per * tasks``, seeded from the full run and refined from every
resume, :meth:`DeltaSimulator._learn_resume`), and hands over once it has itself cost
``RESUME_RACE`` of that estimate. A change late in the timeline then costs at most about
(1 + RESUME_RACE) x the engine on what follows it, while a change that re-times few tasks finishes
in the sweep. The budget still bounds the sweep when the resume is not an option (zero or lossy
durations, or most of the graph after the sweep point).

Compiled sweep
--------------
With numba installed (extra ``fast``) and ``kernel="auto"`` (the default), duration changes on a
timeline with durations > 0 run :func:`simulator.engine.delta_numba.sweep`: the same event loop, device
queues as doubly linked lists in key order instead of chunked lists, the event heap as two arrays.
It pauses every 256-1,024 units of work so that the deadline checks and the race above run here
unchanged. Resumes patch the linked lists (:func:`simulator.engine.delta_numba.last_upto`,
:func:`~simulator.engine.delta_numba.cut_and_append`); a change that takes the Python path (device moves,
task replacements, zero durations) first rebuilds the ``_Queue`` objects from them
(:meth:`DeltaSimulator._queues`), and the next compiled sweep rebuilds the lists
(:meth:`DeltaSimulator._links`). Full runs and resumes stay on the default (Python) engine, so that
the comparison with "a full run" is the product's full run. The event heap is sized once per sweep
from a bound on its pushes (:func:`simulator.engine.delta_numba.heap_capacity`), so the loop never
reallocates and never returns arrays (reference counting on every push had cost 60 % of its time).
The compiled sweep re-times a task in about the engine's time per task, so the ski rental above is
relaxed for it (``budget="auto"``, :data:`AUTO_BUDGET_COMPILED`): at each check it goes on while, at
the rate measured so far, re-timing every task after its point would cost no more than the
alternative, up to one full run's time in all.

Task ids
--------
Ids are stable across changes. :meth:`DeltaSimulator.replace_tasks` reuses the removed ids
(ascending) for the first new tasks and appends ids for the rest; a removed id that is not reused is a
*tombstone*: it has no device entry and no edges, and NaN times in :attr:`start` & co. (A tombstone is
not a zero-duration task on a virtual device: that would still take part in the FIFO tie-breaks and
in the edges.) :meth:`DeltaSimulator.result` and :meth:`DeltaSimulator.graph_arrays` renumber the live
tasks densely, keeping their relative order, so ties break the same way and ``result()`` equals
``simulate_arrays(*graph_arrays())``; with no tombstones the two numberings coincide.
"""
from __future__ import annotations

import heapq
import math
import time
from array import array
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from itertools import chain

import numpy as np

from simulator.engine.core import SimResult, simulate_arrays
from strategies.errors import SimulationError

_NAN = float("nan")
#: A sweep that gives up hands the tasks after its sweep point to the engine (DeltaSimulator._resume)
#: when they are at most this share of the live tasks, else runs the engine on everything: the
#: resumed engine costs about 1.4x a full run's per-task time (sub-graph, state patching), so it
#: breaks even near 80 % (measured on the 103,496-task pipeline of python -m benchmarks.delta: 82 %
#: of the tasks resumed at 0.97x of a full run, 89 % at 0.89x, the plain fallback at 0.93x).
RESUME_MAX_SHARE = 0.75
#: Ski rental between the sweep and the resumed engine: the sweep gives up once it has cost this share
#: of the engine's expected time on the tasks after the current sweep point (the cost model
#: ``_res_fix + _res_per * tasks``, measured on this machine as changes run), so a change costs at most
#: about (1 + RESUME_RACE) x the resumed engine, and a small change is never handed to it.
RESUME_RACE = 0.3
#: The sweep a DeltaSimulator uses when its ``kernel`` argument is None (see DeltaSimulator).
DEFAULT_KERNEL = "auto"
#: ``budget="auto"`` (the default): the Python sweep costs ~10x the engine per re-timed task, so it gets
#: 5 % of a full run (ski rental: a change that falls back costs ~1.05-1.1 full runs); the compiled
#: sweep re-times a task in about the engine's time per task (0.12-0.6 us against 0.3 us, measured by
#: benchmarks/delta.py), so it may take up to one full run's time, and at each check it goes on only
#: while, at the rate measured so far, re-timing every task after its point would still cost no more
#: than the alternative (the resumed engine, or a full run).
AUTO_BUDGET_PYTHON = 0.05
AUTO_BUDGET_COMPILED = 1.0


class _Abort(Exception):
    """Internal: the sweep gives up (budget spent or a zero-duration guard fired). ``at``: the sweep
    point ``(ready, id)`` of the event just handled when the sweep stopped for budget or work (every
    list entry with a key up to it is final), None when a guard fired; ``processed``: tasks
    processed so far."""

    def __init__(self, msg: str, at: tuple | None = None, processed: int = 0):
        super().__init__(msg)
        self.at = at
        self.processed = processed


@dataclass
class DeltaStats:
    """What one change cost.

    retimed: tasks whose times were recomputed (all live tasks after a fallback).
    changed: tasks whose start or end changed (new tasks count; removed ones do not).
    moved: tasks whose device-queue key changed (new ready time or new device): FIFO reorderings.
    vacated: tasks pulled out of their device queue while their new time was unknown.
    fallback: True when a full run was used.
    reason: why ('' when no fallback).
    wall_s: wall-clock seconds of the call.
    new_ids: ids given to the new tasks of :meth:`DeltaSimulator.replace_tasks`.
    removed: tasks removed.
    resumed: tasks the engine re-ran from the sweep point when the sweep gave up (0: none; see
        ``DeltaSimulator._resume``); the tasks before that point kept the sweep's times.
    """

    retimed: int = 0
    changed: int = 0
    moved: int = 0
    vacated: int = 0
    fallback: bool = False
    reason: str = ""
    wall_s: float = 0.0
    new_ids: tuple = ()
    removed: int = 0
    resumed: int = 0


_LOAD = 256  # entries per chunk of a device queue (split at 2x): bounded memmoves on insert/delete


class _Groups:
    """The tasks of a full run grouped by device, in pop order (shared by the device queues, which
    take their slice on first use)."""

    __slots__ = ("order", "dev_o", "ready", "nd", "perm", "bounds")

    def __init__(self, order, dev_o, ready, nd):
        self.order, self.dev_o, self.ready, self.nd = order, dev_o, ready, nd
        self.perm = None

    def device(self, d):
        """(ids, ready times) of device d's tasks in pop order (numpy)."""
        if self.perm is None:
            small = self.dev_o.astype(np.int16 if self.nd < 32768 else np.int32)
            self.perm = np.argsort(small, kind="stable")  # radix sort for small ints
            self.bounds = np.zeros(self.nd + 1, dtype=np.int64)
            np.cumsum(np.bincount(self.dev_o, minlength=self.nd), out=self.bounds[1:])
        ids = self.order[self.perm[self.bounds[d]:self.bounds[d + 1]]]
        return ids, self.ready[ids]


class _Queue:
    """One device's tasks sorted by key (ready, id): a list of chunks (parallel lists of ready times and
    ids) plus each chunk's first key, so a lookup is two bisects and an insert / delete moves at most
    2 * _LOAD entries (one flat list would memmove O(n) per change).

    After a full run a queue starts as a slice of the run's arrays (``src``); on first use it gets
    its chunk index (``fr``, ``fi``), and each chunk becomes Python lists only when it is touched
    (an unmaterialized chunk is ``R[c] = (a, b, ids, ready)``, ``I[c] = None``: rows a..b of those
    arrays), so a change pays for the chunks it touches, not for the device. The resumed fallback
    appends its tasks the same way (:meth:`extend`). In a non-canonical timeline the queue
    holds the engine's device order instead (only ``ids()`` is used then)."""

    __slots__ = ("R", "I", "fr", "fi", "src")

    def __init__(self, src=None):
        self.src = src  # (_Groups, device) or None
        if src is None:
            self.R, self.I, self.fr, self.fi = [], [], [], []
        else:
            self.R = None

    def _load(self):
        groups, d = self.src
        self.src = None
        ids, rs = groups.device(d)
        self.R, self.I, self.fr, self.fi = [], [], [], []
        self._append_np(rs, ids)

    def _append_np(self, rs: np.ndarray, ids: np.ndarray) -> None:
        """Append key-sorted entries (all after the last one) as unmaterialized chunks."""
        L = _LOAD
        m = ids.shape[0]
        self.R.extend((a, min(a + L, m), ids, rs) for a in range(0, m, L))
        self.I.extend([None] * ((m + L - 1) // L))
        self.fr.extend(rs[::L].tolist())
        self.fi.extend(ids[::L].tolist())

    def _mat(self, c):
        """Materialize chunk c; returns (R[c], I[c])."""
        a, b, ids, rs = self.R[c]
        Rc = self.R[c] = rs[a:b].tolist()
        Ic = self.I[c] = ids[a:b].tolist()
        return Rc, Ic

    def ids(self) -> list:
        if self.R is None:
            return self.src[0].device(self.src[1])[0].tolist()
        out = []
        for c, Ic in enumerate(self.I):
            if Ic is None:
                a, b, ids, _ = self.R[c]
                out.extend(ids[a:b].tolist())
            else:
                out.extend(Ic)
        return out

    def _find(self, r, x):
        """(chunk, index) where key (r, x) is, or would be inserted; the chunk is materialized."""
        fr = self.fr
        c = bisect_right(fr, r) - 1
        if c >= 0 and fr[c] == r:
            fi = self.fi
            while c >= 0 and fr[c] == r and fi[c] > x:
                c -= 1
        if c < 0:
            c = 0
        Ic = self.I[c]
        if Ic is None:
            Rc, Ic = self._mat(c)
        else:
            Rc = self.R[c]
        i = bisect_left(Rc, r)
        L = len(Rc)
        while i < L and Ic[i] < x and Rc[i] == r:
            i += 1
        return c, i

    def _last_before(self, c):
        """(ready, id) of the last entry of chunk c - 1 (materializing it)."""
        Ip = self.I[c - 1]
        if Ip is None:
            Rp, Ip = self._mat(c - 1)
        else:
            Rp = self.R[c - 1]
        return Rp[-1], Ip[-1]

    def remove(self, r, x) -> int:
        """Delete x (key (r, x)); return the id of the entry that followed it, or -1."""
        if self.R is None:
            self._load()
        c, i = self._find(r, x)
        Rc = self.R[c]
        Ic = self.I[c]
        del Rc[i]
        del Ic[i]
        if not Ic:
            del self.R[c]
            del self.I[c]
            del self.fr[c]
            del self.fi[c]
            return self.fi[c] if c < len(self.fi) else -1
        if i == 0:
            self.fr[c] = Rc[0]
            self.fi[c] = Ic[0]
        if i < len(Ic):
            return Ic[i]
        return self.fi[c + 1] if c + 1 < len(self.fi) else -1

    def move(self, r0, x, r1):
        """Change x's key from (r0, x) to (r1, x). When its neighbours stay the same, only the key is
        rewritten and (-2, -2) is returned; otherwise the entry moves and the ids after its old and
        after its new place are returned (-1 = none)."""
        if self.R is None:
            self._load()
        c, i = self._find(r0, x)
        Rc = self.R[c]
        Ic = self.I[c]
        if i:
            ok = Rc[i - 1] < r1 or (Rc[i - 1] == r1 and Ic[i - 1] < x)
        elif c:
            pr, pi = self._last_before(c)
            ok = pr < r1 or (pr == r1 and pi < x)
        else:
            ok = True
        if ok:
            j = i + 1
            if j < len(Ic):
                ok = r1 < Rc[j] or (r1 == Rc[j] and x < Ic[j])
            elif c + 1 < len(self.fr):
                nx = self.fr[c + 1]
                ok = r1 < nx or (r1 == nx and x < self.fi[c + 1])
            if ok:
                Rc[i] = r1
                if i == 0:
                    self.fr[c] = r1
                return -2, -2
        return self.remove(r0, x), self.place(r1, x, False)[1]

    def last_upto(self, r, x) -> int:
        """Id of the last entry with key <= (r, x), or -1."""
        if self.R is None:
            self._load()
        if not self.I:
            return -1
        c, i = self._find(r, x)
        Rc, Ic = self.R[c], self.I[c]
        if i < len(Ic) and Rc[i] == r and Ic[i] == x:
            i += 1
        if i:
            return Ic[i - 1]
        return self._last_before(c)[1] if c else -1

    def cut_after(self, r, x) -> None:
        """Delete every entry with key > (r, x)."""
        if self.R is None:
            self._load()
        if not self.I:
            return
        c, i = self._find(r, x)
        Rc, Ic = self.R[c], self.I[c]
        if i < len(Ic) and Rc[i] == r and Ic[i] == x:
            i += 1
        del Rc[i:], Ic[i:]
        keep = c + 1 if i else c
        del self.R[keep:], self.I[keep:], self.fr[keep:], self.fi[keep:]

    def extend(self, rs: np.ndarray, ids: np.ndarray) -> None:
        """Append key-sorted entries (all after the last one), materialized on first touch."""
        if self.R is None:
            self._load()
        self._append_np(rs, ids)


    def place(self, r, x, present: bool):
        """Insert x at key (r, x) unless ``present``; return (id before it, id after it), -1 = none."""
        if self.R is None:
            self._load()
        if not self.I:
            self.R.append([r])
            self.I.append([x])
            self.fr.append(r)
            self.fi.append(x)
            return -1, -1
        c, i = self._find(r, x)
        Rc = self.R[c]
        Ic = self.I[c]
        if not present:
            Rc.insert(i, r)
            Ic.insert(i, x)
            if i == 0:
                self.fr[c] = r
                self.fi[c] = x
        prev = Ic[i - 1] if i else (self._last_before(c)[1] if c else -1)
        j = i + 1
        L = len(Ic)
        nxt = Ic[j] if j < L else (self.fi[c + 1] if c + 1 < len(self.fi) else -1)
        if L > 2 * _LOAD:
            h = L // 2
            self.R.insert(c + 1, Rc[h:])
            self.I.insert(c + 1, Ic[h:])
            self.fr.insert(c + 1, Rc[h])
            self.fi.insert(c + 1, Ic[h])
            del Rc[h:]
            del Ic[h:]
        return prev, nxt


class _Dump:
    """Device queues dumped from the compiled sweep's linked lists (``_Queue`` source, like
    :class:`_Groups`): ids of each device in key order and their ready times."""

    __slots__ = ("ids", "rs", "bounds")

    def __init__(self, ids, rs, bounds):
        self.ids, self.rs, self.bounds = ids, rs, bounds

    def device(self, d):
        a, b = int(self.bounds[d]), int(self.bounds[d + 1])
        return self.ids[a:b], self.rs[a:b]


def _gather(ptr: np.ndarray, idx: np.ndarray, rows: np.ndarray):
    """The CSR entries of ``rows``: (position in ``rows`` of each entry's row, entry), vectorized."""
    starts = ptr[rows]
    cnt = ptr[rows + 1] - starts
    tot = int(cnt.sum())
    if not tot:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    row = np.repeat(np.arange(rows.size, dtype=np.int64), cnt)
    pos = np.arange(tot, dtype=np.int64) + np.repeat(starts - (np.cumsum(cnt) - cnt), cnt)
    return row, idx[pos]


def _delta_kernel(kernel: str):
    """:mod:`simulator.engine.delta_numba` for ``kernel`` (None: the Python sweep)."""
    if kernel not in ("auto", "python", "numba"):
        raise ValueError(f"kernel {kernel!r} is not one of 'auto', 'python', 'numba'")
    if kernel == "python":
        return None
    try:
        import simulator.engine.delta_numba as kernels
    except ImportError:
        if kernel == "numba":
            raise
        return None
    return kernels


def _zeros(typecode: str, n: int) -> array:
    return array(typecode, bytes(8 * n))


class DeltaSimulator:
    """Incremental FIFO-engine simulation of a task graph under local changes (see module doc).

    Build from a :class:`taskgraph.graph.TaskGraph` (``DeltaSimulator(graph)``) or from the engine's raw
    arrays (:meth:`from_arrays`). The constructor runs a full simulation.

    budget: the sweep gives up (and a full run is used) once the change has taken this fraction of
        a full run's time (the fastest full run so far: engine + state rebuild), so a
        change that moves most of the timeline costs about ``1 + budget`` full runs
        (``python -m benchmarks.delta``). ``None``: no time budget. ``"auto"`` (default):
        :data:`AUTO_BUDGET_PYTHON` for the Python sweep; for the compiled sweep
        :data:`AUTO_BUDGET_COMPILED` with the projection described there.
    max_work: also give up after this many processed + vacated tasks (deterministic; None = no limit).
    kernel: None means :data:`DEFAULT_KERNEL`, ``"auto"``. ``"auto"`` runs the sweep of duration changes on a timeline with durations > 0
        compiled when numba is installed (optional extra ``fast``, :mod:`simulator.engine.delta_numba`: the
        same loop and IEEE operations, so the same bits; tests/test_delta.py compares them),
        ``"python"`` always the Python loop, ``"numba"`` requires numba.
    """

    def __init__(self, graph=None, *, budget: float | str | None = "auto", max_work: int | None = None,
                 kernel: str | None = None, _arrays=None):
        if _arrays is None:
            if graph is None:
                raise ValueError("DeltaSimulator needs a TaskGraph (or use DeltaSimulator.from_arrays)")
            _arrays = (graph.duration, graph.device, graph.succ_ptr, graph.succ_idx, graph.num_devices)
            self._describe_graph = graph
        else:
            self._describe_graph = None
        duration, device, succ_ptr, succ_idx, num_devices = _arrays
        if isinstance(budget, str) and budget != "auto":
            raise ValueError(f"budget {budget!r}: give a fraction of a full run (e.g. 0.05), None or 'auto'")
        self.budget = budget
        self.max_work = max_work
        self._nb = _delta_kernel(DEFAULT_KERNEL if kernel is None else kernel)
        self._ll = None  # the compiled sweep's device queues (qh, qt, qn, qp), see _links
        self._q_stale = False  # True while _ll is newer than _Q
        self._t_full = math.inf
        # the resumed engine's cost model (seconds): fixed part + per task after the sweep point;
        # seeded from the full run (per task x 1.5) and refined from every resume (_resume)
        self._res_fix = 3e-4
        self._res_per: float | None = None
        self._t_full_n = 0
        self._nd = max(int(num_devices), 1)
        dur_np = np.array(duration, dtype=np.float64).reshape(-1)
        n = int(dur_np.shape[0])
        dev_np = np.array(device, dtype=np.int32).reshape(-1)
        if dev_np.shape[0] != n:
            raise ValueError(f"device has {dev_np.shape[0]} entries for {n} tasks")
        self._check_durations(dur_np)
        if n and (int(dev_np.min()) < 0 or int(dev_np.max()) >= self._nd):
            raise ValueError(f"a device index is outside [0, {self._nd})")
        ptr = np.asarray(succ_ptr, dtype=np.int64).reshape(-1)
        idx = np.asarray(succ_idx, dtype=np.int64).reshape(-1)
        if ptr.shape[0] != n + 1 or (n and (ptr[0] != 0 or ptr[-1] != idx.shape[0])):
            raise ValueError("succ_ptr must have num_tasks + 1 entries, start at 0 and end at the edge count")
        if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= n):
            raise ValueError("successor id out of range")
        pl, il = ptr.tolist(), idx.tolist()
        self._succ = [il[pl[i]:pl[i + 1]] for i in range(n)]
        order = np.argsort(idx, kind="stable")
        src_np = np.repeat(np.arange(n, dtype=np.int64), np.diff(ptr))[order]
        pp_np = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(idx, minlength=n), out=pp_np[1:])
        src, pp = src_np.tolist(), pp_np.tolist()
        self._pred = [src[pp[i]:pp[i + 1]] for i in range(n)]
        self._csr = (ptr, idx)
        self._pcsr = (ptr, pp_np, src_np)  # predecessor CSR for the resumed fallback (_pred_csr)
        self._csr_dirty: set[int] = set()  # tasks whose successor list changed since _csr was built
        self._dur_np = dur_np
        self._dev_np = dev_np
        self._alive_np = np.ones(n, dtype=bool)
        self._dur = array("d", dur_np.tobytes())
        self._dev = dev_np.tolist()
        self._alive = [True] * n
        self._n_live = n
        self._n_zero = int(np.count_nonzero(dur_np == 0.0))
        self._lossy = False  # some positive duration was lost to rounding (start + dur == start)
        self._broken: str | None = None
        self._st = self._nr = self._pend = None
        self._full()

    @classmethod
    def from_arrays(cls, duration, device, succ_ptr, succ_idx, num_devices: int, *,
                    budget: float | str | None = "auto", max_work: int | None = None,
                    kernel: str | None = None) -> "DeltaSimulator":
        """Same inputs as :func:`simulator.engine.core.simulate_arrays`."""
        return cls(None, budget=budget, max_work=max_work, kernel=kernel,
                   _arrays=(duration, device, succ_ptr, succ_idx, num_devices))

    # ------------------------------------------------------------------ accessors
    @property
    def num_tasks(self) -> int:
        """Live tasks (tombstones excluded)."""
        return self._n_live

    @property
    def num_ids(self) -> int:
        """Size of the id space (live tasks + tombstones)."""
        return len(self._dur)

    @property
    def num_devices(self) -> int:
        return self._nd

    @property
    def canonical(self) -> bool:
        """True when the pop order is key-sorted (always with positive durations); else changes fall back."""
        return self._canonical

    @property
    def ready(self) -> np.ndarray:
        """Ready time per id (NaN for tombstones)."""
        self._check_ok()
        return np.frombuffer(self._R, dtype=np.float64).copy()

    @property
    def start(self) -> np.ndarray:
        self._check_ok()
        return np.frombuffer(self._S, dtype=np.float64).copy()

    @property
    def end(self) -> np.ndarray:
        self._check_ok()
        return np.frombuffer(self._E, dtype=np.float64).copy()

    @property
    def duration(self) -> np.ndarray:
        return self._dur_np.copy()

    @property
    def device(self) -> np.ndarray:
        return self._dev_np.copy()

    def alive(self, task: int) -> bool:
        return 0 <= task < len(self._alive) and self._alive[task]

    def successors(self, task: int) -> list[int]:
        return list(self._succ[task])

    def predecessors(self, task: int) -> list[int]:
        return list(self._pred[task])

    @property
    def makespan(self) -> float:
        """Latest end (kept up to date by every change)."""
        self._check_ok()
        return self._mk

    def device_order(self, d: int) -> list[int]:
        """Ids of device ``d``'s tasks in the order it runs them (FIFO by (ready, id))."""
        self._check_ok()
        return self._queues(keep_links=True)[d].ids()

    @property
    def pop_order(self) -> np.ndarray:
        """Live ids in the engine's global pop order (key-sorted when canonical; sorted lazily)."""
        self._check_ok()
        if self._order_cache is None:
            live = self.live_ids()
            r = np.frombuffer(self._R, dtype=np.float64)[live]
            self._order_cache = live[np.lexsort((live, r))]
        return self._order_cache.copy()

    def live_ids(self) -> np.ndarray:
        """Internal ids of the live tasks, ascending: compact id ``i`` is internal id ``live_ids()[i]``."""
        return np.flatnonzero(self._alive_np)

    def graph_arrays(self):
        """The current live graph, renumbered densely (order kept): ``(duration, device, succ_ptr,
        succ_idx, num_devices)``, the inputs of :func:`simulator.engine.core.simulate_arrays`."""
        live = self.live_ids()
        remap = np.full(len(self._dur), -1, dtype=np.int64)
        remap[live] = np.arange(live.size)
        succ = self._succ
        lv = live.tolist()
        counts = np.array([len(succ[x]) for x in lv], dtype=np.int64)
        ptr = np.zeros(live.size + 1, dtype=np.int64)
        np.cumsum(counts, out=ptr[1:])
        flat = np.fromiter(chain.from_iterable(succ[x] for x in lv), dtype=np.int64, count=int(ptr[-1]))
        idx = remap[flat].astype(np.int32)
        return self._dur_np[live].copy(), self._dev_np[live].copy(), ptr, idx, self._nd

    def result(self) -> SimResult:
        """The timeline as a :class:`SimResult` over the compact numbering (equal to a full run of
        :meth:`graph_arrays`)."""
        self._check_ok()
        live = self.live_ids()
        remap = np.full(len(self._dur), -1, dtype=np.int64)
        remap[live] = np.arange(live.size)
        return SimResult(
            ready=np.frombuffer(self._R, dtype=np.float64)[live],
            start=np.frombuffer(self._S, dtype=np.float64)[live],
            end=np.frombuffer(self._E, dtype=np.float64)[live],
            order=remap[self.pop_order].astype(np.int32),
            makespan=self._mk,
        )

    # ------------------------------------------------------------------ changes
    def set_durations(self, task_ids, new_durations) -> DeltaStats:
        """Change the durations of live tasks, then re-simulate incrementally."""
        t0 = time.perf_counter()
        self._check_ok()
        ids = np.asarray(task_ids, dtype=np.int64).reshape(-1).tolist()
        vals_np = np.asarray(new_durations, dtype=np.float64).reshape(-1)
        if len(ids) != vals_np.shape[0]:
            raise ValueError("task_ids and new_durations differ in length")
        self._check_durations(vals_np)
        self._check_live(ids)
        dur, dur_np = self._dur, self._dur_np
        seeds = []
        for x, v in zip(ids, vals_np.tolist()):
            if dur[x] != v:
                self._n_zero += (v == 0.0) - (dur[x] == 0.0)
                dur[x] = v
                dur_np[x] = v
                seeds.append(x)
        return self._delta(t0, seeds, 0, [], [], set(), (), 0, (), False)

    def set_devices(self, task_ids, new_devices) -> DeltaStats:
        """Move live tasks to other devices (streams); their FIFO queues change, incrementally."""
        t0 = time.perf_counter()
        self._check_ok()
        ids = np.asarray(task_ids, dtype=np.int64).reshape(-1).tolist()
        vals = np.asarray(new_devices, dtype=np.int64).reshape(-1).tolist()
        if len(ids) != len(vals):
            raise ValueError("task_ids and new_devices differ in length")
        self._check_live(ids)
        for d in vals:
            if not 0 <= d < self._nd:
                raise ValueError(f"device index {d} out of range [0, {self._nd}); add_devices() first")
        dev = self._dev
        seeds = []
        for x, d in zip(ids, vals):
            if dev[x] != d:
                dev[x] = d
                self._dev_np[x] = d
                seeds.append(x)
        return self._delta(t0, seeds, len(seeds), [], [], set(), (), 0, (), False)

    def add_devices(self, k: int = 1) -> int:
        """Append ``k`` empty devices; returns the index of the first."""
        queues = self._queues()  # before the count changes (the linked lists have one head per device)
        first = self._nd
        self._nd += int(k)
        queues.extend(_Queue() for _ in range(k))
        return first

    def replace_tasks(self, remove, durations=(), devices=(), edges=(), *, remove_edges=(),
                      reuse_ids: bool = True) -> DeltaStats:
        """FlexFlow's change: replace a set of tasks (e.g. one operator's) by a new set.

        remove: live ids to delete (with all their edges).
        durations, devices: one entry per new task.
        edges: ``(u, v)`` pairs to add; an id ``>= 0`` is an existing live task (not removed), and
            ``~j`` (i.e. ``-1 - j``) is the ``j``-th new task. Edges between existing tasks are allowed
            (e.g. a new program-order edge).
        remove_edges: ``(u, v)`` pairs between existing tasks to delete (one occurrence each).
        reuse_ids: give the removed ids (ascending) to the first new tasks, so a same-size replacement
            keeps the id space (and the tie-break positions) of the operator it replaces; otherwise,
            and for the rest, new ids are appended. The ids given are in ``stats.new_ids``.

        A cycle makes the full run raise :class:`SimulationError`; the simulator is then unusable
        (every later call raises).
        """
        t0 = time.perf_counter()
        self._check_ok()
        rem = sorted(set(np.asarray(remove, dtype=np.int64).reshape(-1).tolist()))
        self._check_live(rem)
        durs_np = np.asarray(durations, dtype=np.float64).reshape(-1)
        devs = np.asarray(devices, dtype=np.int64).reshape(-1).tolist()
        if durs_np.shape[0] != len(devs):
            raise ValueError("durations and devices must have one entry per new task")
        self._check_durations(durs_np)
        durs = durs_np.tolist()
        for d in devs:
            if not 0 <= d < self._nd:
                raise ValueError(f"device index {d} out of range [0, {self._nd}); add_devices() first")
        k = len(durs)
        rem_set = set(rem)
        alive = self._alive
        n_ids = len(self._dur)
        reused = rem[:k] if reuse_ids else []
        new_ids = reused + list(range(n_ids, n_ids + k - len(reused)))

        def resolve(t) -> int:
            t = int(t)
            if t < 0:
                j = ~t
                if j >= k:
                    raise ValueError(f"edge names new task {j} but only {k} new tasks are given")
                return new_ids[j]
            if not (0 <= t < n_ids and alive[t]) or t in rem_set:
                raise ValueError(f"edge endpoint {t} is not a live task that stays")
            return t

        # validate everything before mutating, so errors leave the state untouched
        add = [(resolve(u), resolve(v)) for u, v in edges]
        drop = [(resolve(u), resolve(v)) for u, v in remove_edges]
        new_set = set(new_ids)
        for u, v in drop:
            if u in new_set or v in new_set or v not in self._succ[u]:
                raise ValueError(f"remove_edges: no edge {u} -> {v} between existing tasks")

        self._queues()
        R, S, E, dur, dev, succ, pred = self._R, self._S, self._E, self._dur, self._dev, self._succ, self._pred
        where, alive_np, dur_np, dev_np = self._where, self._alive_np, self._dur_np, self._dev_np
        canonical = self._canonical
        mk_lost = False
        # 1. remove tasks: out of their device queues, edges dropped; successors' predecessor sets change
        touched: set[int] = set()
        dev_marks: list[int] = []
        for x in rem:
            alive[x] = False
        for x in rem:
            w = where[x]
            if w != -1 and canonical:
                nxt = self._Q[w].remove(R[x], x)
                if nxt != -1:
                    dev_marks.append(nxt)
            if E[x] >= self._mk:
                mk_lost = True
            for y in succ[x]:
                if alive[y]:
                    pred[y] = [p for p in pred[y] if p != x]
                    touched.add(y)
            for p in pred[x]:
                if alive[p]:
                    succ[p] = [s for s in succ[p] if s != x]
                    self._csr_dirty.add(p)
            succ[x] = []
            pred[x] = []
            self._n_zero -= dur[x] == 0.0
            R[x] = S[x] = E[x] = self._lk[x] = _NAN
            where[x] = -1
            alive_np[x] = False
            dur[x] = 0.0  # a tombstone enters full runs as an isolated zero-duration task (module doc)
            dur_np[x] = 0.0
            dev[x] = 0
            dev_np[x] = 0
        # 2. new tasks
        grow = len(new_ids) - len(reused)
        if grow:
            nan_block = array("d", [_NAN]) * grow
            for arr in (R, S, E, self._lk):
                arr.extend(nan_block)
            dur.extend(_zeros("d", grow))
            where.extend(array("q", [-1]) * grow)
            self._st.extend(_zeros("q", grow))
            self._pend.extend(_zeros("q", grow))
            self._nr.extend(_zeros("d", grow))
            self._oS.extend(_zeros("d", grow))
            self._oE.extend(_zeros("d", grow))
            dev.extend([0] * grow)
            alive.extend([False] * grow)
            succ.extend([] for _ in range(grow))
            pred.extend([] for _ in range(grow))
            self._dur_np = dur_np = np.concatenate([dur_np, np.zeros(grow)])
            self._dev_np = dev_np = np.concatenate([dev_np, np.zeros(grow, dtype=np.int32)])
            self._alive_np = alive_np = np.concatenate([alive_np, np.zeros(grow, dtype=bool)])
        for j, x in enumerate(new_ids):
            dur[x] = dur_np[x] = durs[j]
            dev[x] = dev_np[x] = devs[j]
            alive[x] = True
            alive_np[x] = True
            self._n_zero += durs[j] == 0.0
        self._n_live += k - len(rem)
        # 3. edges
        for u, v in drop:
            succ[u].remove(v)
            pred[v].remove(u)
            touched.add(v)
        for u, v in add:
            succ[u].append(v)
            pred[v].append(u)
            if v not in new_set:
                touched.add(v)
        self._csr_dirty.update(new_ids)
        self._csr_dirty.update(rem)
        self._csr_dirty.update(u for u, _ in chain(add, drop))
        touched -= new_set
        dev_marks = [z for z in dev_marks if alive[z] and z not in new_set]  # next entry may be removed too
        return self._delta(t0, [], 0, dev_marks, new_ids, touched, tuple(add), len(rem), tuple(new_ids),
                           mk_lost)

    # ------------------------------------------------------------------ internals
    @staticmethod
    def _check_durations(vals: np.ndarray) -> None:
        ok = np.isfinite(vals) & (vals >= 0.0)
        if not ok.all():
            bad = vals[~ok][0]
            raise ValueError(f"delta mode needs finite durations >= 0, got {bad!r}")

    def _check_live(self, ids) -> None:
        n = len(self._alive)
        for x in ids:
            if not (0 <= x < n and self._alive[x]):
                raise ValueError(f"task {x} is not a live task")

    def _check_ok(self) -> None:
        if self._broken is not None:
            raise SimulationError("DeltaSimulator is unusable after a failed change: " + self._broken)

    def _csr_arrays(self):
        """Successor CSR of the whole id space for the engine, patched from the last one: unchanged
        tasks' segments are block-copied, changed ones rewritten from the successor lists."""
        dirty = self._csr_dirty
        if not dirty:
            return self._csr
        succ = self._succ
        n = len(succ)
        ptr0, idx0 = self._csr
        n0 = ptr0.shape[0] - 1
        dl = sorted(dirty)
        counts = np.zeros(n, dtype=np.int64)
        counts[:n0] = np.diff(ptr0)
        counts[dl] = [len(succ[t]) for t in dl]
        ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(counts, out=ptr[1:])
        idx = np.empty(int(ptr[-1]), dtype=np.int64)
        prev = 0
        for t in dl:
            if t > prev:  # tasks prev..t-1 are unchanged, hence < n0 (every id added since is dirty)
                idx[ptr[prev]:ptr[t]] = idx0[ptr0[prev]:ptr0[t]]
            idx[ptr[t]:ptr[t + 1]] = succ[t]
            prev = t + 1
        if prev < n0:
            idx[ptr[prev]:] = idx0[ptr0[prev]:]
        self._csr = (ptr, idx)
        dirty.clear()
        return self._csr

    def _delta(self, t0, seeds, n_dev_moves, dev_marks, new_tasks, touched, new_edges, removed, new_ids,
               mk_lost) -> DeltaStats:
        """Run the sweep from the given dirty sets; fall back to a full run when it gives up."""
        self._order_cache = None
        self._t_change = t0
        if not self._canonical:
            return self._fallback(t0, "timeline before the change was not canonical (a zero duration, or one lost to rounding, ties an edge)",
                                  (), new_ids, removed)
        R, E, pred, succ, where = self._R, self._E, self._pred, self._succ, self._where
        st, nr, pend = self._st, self._nr, self._pend
        heap: list = []
        dirtied: list[int] = []

        def dirty_in_list(x):
            if st[x] == 0:
                st[x] = 1
                dirtied.append(x)
                if where[x] != -1:
                    heap.append((R[x], x))

        for x in seeds:  # own duration / device changed; ready unchanged
            dirty_in_list(x)
            nr[x] = R[x]
        for z in dev_marks:
            dirty_in_list(z)
            nr[z] = R[z]
        for x in new_tasks:  # unresolved from the start: their successors wait for them
            st[x] = 3
            dirtied.append(x)
        for x in new_tasks:
            for y in succ[x]:
                pend[y] += 1
                dirty_in_list(y)
        for y in touched:
            dirty_in_list(y)
        for y in chain(touched, new_tasks):
            if not pend[y]:
                m = 0.0
                for p in pred[y]:
                    if E[p] > m:
                        m = E[p]
                nr[y] = m
                heap.append((m, y))
        stats = DeltaStats(removed=removed, new_ids=new_ids)
        if not dirtied:
            if mk_lost:
                self._mk = self._recompute_makespan()
            stats.wall_s = time.perf_counter() - t0
            stats.changed = 0
            return stats
        heapq.heapify(heap)
        # a positive duration lost to rounding (start + dur == start) acts as a zero duration
        guard = self._n_zero > 0 or self._lossy
        # the compiled sweep (simulator/engine/delta_numba.py) takes duration and device changes without
        # guards; task replacements (new ids, removed entries) keep the Python sweep
        compiled = (self._nb is not None and not guard
                    and not (dev_marks or new_tasks or touched or removed))
        budget, project = self.budget, False
        if budget == "auto":
            budget = AUTO_BUDGET_COMPILED if compiled else AUTO_BUDGET_PYTHON
            project = compiled
        if budget is None:
            deadline = math.inf
        else:
            cap = t0 + budget * self._t_full
            # first look at the resume's cost once the sweep has spent a share of its fixed part
            deadline = cap if guard else min(cap, t0 + RESUME_RACE * self._res_fix)

        def replan(r, x, processed, work, since=t0):
            """The sweep passed its deadline at (r, x): give up (the engine resumes from here) or
            set the next deadline, from the measured cost model (module doc, "Fallback"). ``since``:
            when the sweep itself started (the compiled sweep's set-up is not part of the race)."""
            now = time.perf_counter()
            if guard:
                raise _Abort(f"time budget spent after {work} tasks", (r, x), processed)
            lkv = np.frombuffer(self._lk, dtype=np.float64)
            rest = int(np.count_nonzero(lkv > r))
            del lkv
            est = (self._res_fix + self._res_per * rest if rest <= RESUME_MAX_SHARE * self._n_live
                   else self._t_full)
            if project and processed and (now - since) / processed * rest <= est:
                # the compiled sweep re-times tasks about as fast as the engine runs them: even if
                # every task after its point moves, at the rate measured so far it finishes before
                # the alternative would (resume or full run), so it goes on (checked again later)
                return now + 0.1 * est
            if now >= cap:
                raise _Abort(f"time budget spent after {work} tasks", (r, x), processed)
            if now - since >= RESUME_RACE * est:
                raise _Abort(f"the sweep had cost {1e3 * (now - since):.2f} ms after {work} tasks, more than "
                             f"{RESUME_RACE} x the {1e3 * est:.2f} ms the engine is expected to take on the "
                             f"{rest} tasks after its point", (r, x), processed)
            return min(cap, since + RESUME_RACE * est)

        if not compiled:
            self._queues()
        try:
            if compiled:
                processed, changed, moved, vacated, retimed_r, emax, lost = self._sweep_nb(
                    heap, dirtied, self.max_work, deadline, replan)
            else:
                processed, changed, moved, vacated, retimed_r, emax, lost = self._sweep(
                    heap, dirtied, self.max_work, deadline, guard, replan)
        except _Abort as exc:
            if exc.at is not None and not guard:
                return self._resume(t0, str(exc), exc.at, exc.processed, dirtied, new_ids, removed)
            return self._fallback(t0, str(exc), dirtied, new_ids, removed)
        clean = compiled and self._nb_clean  # the compiled sweep cleared its scratch itself
        left = 0 if clean else sum(1 for x in dirtied if st[x] != 2)
        if left:
            return self._fallback(t0, f"{left} task(s) never became ready (cycle)", dirtied, new_ids, removed)
        if guard:
            bad = self._backward_edge(retimed_r, new_edges)
            if bad is not None:
                return self._fallback(
                    t0, f"zero-duration tie: edge {bad[0]} -> {bad[1]} goes backwards in (ready, id) "
                        f"order, the engine's pop order is not key-sorted", dirtied, new_ids, removed)
        if not clean:
            for x in dirtied:
                st[x] = 0
        self._mk = self._recompute_makespan() if (lost or mk_lost) else emax
        stats.retimed = processed
        stats.changed = changed
        stats.moved = moved + n_dev_moves
        stats.vacated = vacated
        stats.wall_s = time.perf_counter() - t0
        return stats

    def _recompute_makespan(self) -> float:
        if not self._n_live:
            return 0.0
        return float(np.nanmax(np.frombuffer(self._E, dtype=np.float64)))

    def _backward_edge(self, tasks, new_edges):
        R, succ, pred = self._R, self._succ, self._pred
        for x in tasks:
            rx = R[x]
            for v in succ[x]:
                if R[v] < rx or (R[v] == rx and v < x):
                    return (x, v)
            for u in pred[x]:
                if rx < R[u] or (rx == R[u] and x < u):
                    return (u, x)
        for u, v in new_edges:
            if R[v] < R[u] or (R[v] == R[u] and v < u):
                return (u, v)
        return None

    def _sweep(self, heap, dirtied, limit, deadline, guard, replan):
        """The event loop (see module doc). Returns counters, the largest new end and whether an end
        that was the makespan decreased.

        st[x]: 0 clean, 1 dirty, 3 dirty and unresolved (vacated, new, or moved to a key not below
        its end: its successors pend on it), 2 done. nr[x]: x's new ready time when st is odd and
        pend[x] == 0. pend[x]: unresolved predecessors. lk[x]: the ready time of x's queue entry on
        device where[x] (-1: no entry). Ids whose st left 0 are appended to ``dirtied``.
        """
        R, S, E = self._R, self._S, self._E
        dur, dev, succ, pred, where = self._dur, self._dev, self._succ, self._pred, self._where
        st, nr, pend, lk = self._st, self._nr, self._pend, self._lk
        oS, oE = self._oS, self._oE
        Q = self._Q
        pop, push = heapq.heappop, heapq.heappush
        mark = dirtied.append
        processed = changed = moved = vacated = work = 0
        if limit is None:
            limit = -1
        clock = time.perf_counter
        timed = deadline != math.inf
        retimed_r: list[int] = []
        mk0 = self._mk
        emax = -math.inf
        lost = False
        Kr, Kx = -math.inf, -1

        def mark_queue(z):
            """z's queue predecessor changed."""
            sz = st[z]
            if sz == 0:
                st[z] = 1
                mark(z)
                nr[z] = R[z]
                push(heap, (R[z], z))
            elif sz == 2:
                raise _Abort("zero-duration tie: a processed task's queue predecessor changed")

        def block_successors(y):
            """y may be processed after its successors' keys: they wait for it (pend)."""
            for v in succ[y]:
                pend[v] += 1
                sv = st[v]
                if sv == 0:
                    st[v] = 1
                    mark(v)
                    if where[v] != -1:
                        push(heap, (lk[v], v))  # vacate it there if it is still waiting
                elif sv == 2:
                    raise _Abort("zero-duration tie: a processed task's predecessor changed")

        def relocate(y, new, sy):
            """y (pend 0) gets the new ready time ``new``: move its entry there now."""
            nr[y] = new
            w = where[y]
            d = dev[y]
            if w == d and lk[y] == new:
                push(heap, (new, y))
                return
            if w != -1 and guard and (lk[y] < Kr or (lk[y] == Kr and y < Kx)):
                raise _Abort("zero-duration tie: a task behind the sweep changed")
            if w == d:
                z, z2 = Q[d].move(lk[y], y, new)
                if z >= 0:
                    mark_queue(z)
                if z2 >= 0:
                    mark_queue(z2)
            else:
                if w != -1:
                    z = Q[w].remove(lk[y], y)
                    if z != -1:
                        mark_queue(z)
                z = Q[d].place(new, y, False)[1]
                where[y] = d
                if z != -1:
                    mark_queue(z)
            lk[y] = new
            push(heap, (new, y))
            if sy != 3 and new >= E[y]:
                st[y] = 3
                block_successors(y)

        while heap:
            r, x = pop(heap)
            sx = st[x]
            if not sx & 1:
                continue  # clean or done: a stale event
            if guard:
                if r < Kr or (r == Kr and x < Kx):
                    raise _Abort("zero-duration tie: an event fell behind the sweep")
                Kr, Kx = r, x
            if not pend[x] and nr[x] == r:
                # ---- process x at its final key (r, x)
                d = dev[x]
                w = where[x]
                if w != -1 and (w != d or lk[x] != r):
                    z = Q[w].remove(lk[x], x)
                    if z != -1:
                        mark_queue(z)
                    w = -1
                pv, z = Q[d].place(r, x, w != -1)
                pe = E[pv] if pv != -1 else 0.0
                s = r if r > pe else pe
                e = s + dur[x]
                if e == s and not guard:
                    # dur > 0 here (no zero durations): the addition lost it to rounding, so x ends
                    # when it starts and an edge can tie; the no-guard argument needs E > S
                    raise _Abort(f"positive duration lost to rounding: task {x} ({dur[x]!r} s) starts "
                                 f"and ends at {s!r} s")
                oe = E[x]
                if w == -1:
                    where[x] = d
                    lk[x] = r
                    mark_next = True
                else:
                    mark_next = e != oe
                if R[x] != r:
                    moved += 1
                    if guard:
                        retimed_r.append(x)
                if e != oe or s != S[x]:
                    changed += 1
                    if e > emax:
                        emax = e
                    if oe >= mk0 and e < oe:
                        lost = True
                oS[x] = S[x]  # kept for the stats of a fallback
                oE[x] = oe
                R[x] = r
                S[x] = s
                E[x] = e
                st[x] = 2
                processed += 1
                work += 1
                if work == limit:
                    raise _Abort(f"work limit of {limit} tasks reached", (r, x), processed)
                if timed and not work & 31 and clock() > deadline:
                    deadline = replan(r, x, processed, work)
                if mark_next and z != -1:
                    mark_queue(z)
                if sx == 3:  # x was unresolved: release its successors
                    for y in succ[x]:
                        c = pend[y] - 1
                        pend[y] = c
                        if not c:
                            m = 0.0
                            for p in pred[y]:
                                if E[p] > m:
                                    m = E[p]
                            if where[y] != -1 and lk[y] != m:
                                relocate(y, m, st[y])
                            else:
                                nr[y] = m
                                push(heap, (m, y))
                elif e != oe:
                    for y in succ[x]:
                        if pend[y]:
                            continue  # its ready time is computed when it is released
                        sy = st[y]
                        if sy == 0:
                            cur = R[y]
                        elif sy == 2:
                            raise _Abort("zero-duration tie: a processed task's predecessor changed")
                        else:
                            cur = nr[y]
                        if e > cur:
                            new = e
                        elif e == cur or oe != cur:
                            continue  # ready time unchanged
                        else:  # the old maximum decreased: recompute
                            new = 0.0
                            for p in pred[y]:
                                if E[p] > new:
                                    new = E[p]
                            if new == cur:
                                continue
                        if sy == 0:
                            st[y] = 1
                            mark(y)
                        relocate(y, new, sy)
            elif where[x] != -1 and lk[x] == r:
                # ---- vacate: x's entry is at the sweep point but x cannot be processed here
                z = Q[where[x]].remove(r, x)
                if z != -1:
                    mark_queue(z)
                where[x] = -1
                vacated += 1
                work += 1
                if work == limit:
                    raise _Abort(f"work limit of {limit} tasks reached", (r, x), processed)
                if timed and not work & 31 and clock() > deadline:
                    deadline = replan(r, x, processed, work)
                if sx != 3:
                    st[x] = 3
                    block_successors(x)
            # else: a stale event
        if emax < mk0 and not lost:
            emax = mk0
        return processed, changed, moved, vacated, retimed_r, max(emax, mk0), lost

    def _queues(self, keep_links: bool = False) -> list:
        """The device queues as ``_Queue`` objects, brought up to date from the compiled sweep's
        linked lists when those are newer; unless ``keep_links`` (read only), the caller changes
        them, so the linked lists are dropped (rebuilt by the next compiled sweep)."""
        if self._q_stale:
            qh, qt, qn, qp = self._ll
            where = np.frombuffer(self._where, dtype=np.int64)
            count = int(np.count_nonzero(where != -1))
            del where
            ids, bounds = self._nb.dump_links(qh, qn, self._nd, count)
            rs = np.frombuffer(self._lk, dtype=np.float64)[ids]
            dump = _Dump(ids, rs, bounds)
            self._Q = [_Queue((dump, d)) for d in range(self._nd)]
            self._q_stale = False
        if not keep_links:
            self._ll = None
            self._q_fresh = False
        return self._Q

    def _links(self):
        """The compiled sweep's device queues: linked lists in key order (``qh``/``qt`` head and
        tail per device, ``qn``/``qp`` next and previous per task), built from the last full run's
        device groups when no queue changed since, else by sorting the entries by (device, key)."""
        if self._ll is None:
            n, nd = len(self._dur), self._nd
            if self._q_fresh:
                g = self._groups
                g.device(0)  # computes the grouping
                ids = g.order[g.perm]
                bounds = g.bounds
            else:
                where = np.frombuffer(self._where, dtype=np.int64)
                lk = np.frombuffer(self._lk, dtype=np.float64)
                e = np.flatnonzero(where != -1)
                ids = e[np.lexsort((e, lk[e], where[e]))]
                bounds = np.zeros(nd + 1, dtype=np.int64)
                np.cumsum(np.bincount(where[e], minlength=nd), out=bounds[1:])
                del where, lk
            self._ll = self._nb.build_links(np.ascontiguousarray(ids, dtype=np.int64),
                                            np.ascontiguousarray(bounds, dtype=np.int64), n, nd)
            self._cur = np.full(nd, -1, dtype=np.int64)
        return self._ll

    def _sweep_nb(self, heap, dirtied, limit, deadline, replan):
        """:meth:`_sweep` compiled (:func:`simulator.engine.delta_numba.sweep`, durations > 0, duration
        changes only); same returns and aborts. The kernel pauses every ``step`` units of work so the
        deadline is checked here (the Python loop checks every 32)."""
        nb = self._nb
        qh, qt, qn, qp = self._links()
        cur = self._cur
        cur.fill(-1)  # per change: the last entry the sweep placed on each device
        f64 = lambda a: np.frombuffer(a, dtype=np.float64)  # noqa: E731 - views, dropped below
        i64 = lambda a: np.frombuffer(a, dtype=np.int64)  # noqa: E731
        R, S, E, lk, nr, oS, oE = (f64(a) for a in (self._R, self._S, self._E, self._lk, self._nr,
                                                    self._oS, self._oE))
        where, st, pend = i64(self._where), i64(self._st), i64(self._pend)
        n = len(self._dur)
        hs = len(heap)
        ptr, idx = self._csr_arrays()
        pptr, pidx = self._pred_csr()
        cap = nb.heap_capacity(hs, n, int(idx.shape[0]))  # a bound: the kernel never reallocates
        hr = np.empty(cap, dtype=np.float64)
        hx = np.empty(cap, dtype=np.int64)
        if hs:  # a heapq list is already in heap order for the same comparison
            hr[:hs] = [h[0] for h in heap]
            hx[:hs] = [h[1] for h in heap]
        n0 = len(dirtied)
        dirt = np.empty(n, dtype=np.int64)
        dirt[:n0] = dirtied
        cnt = np.zeros(6, dtype=np.int64)
        cnt[nb.C_DIRT] = n0
        flt = np.array([-math.inf, self._mk, 0.0, _NAN, -1.0, -1.0])
        timed = deadline != math.inf
        lim = -1 if limit is None else int(limit)
        step = 256  # a pause costs a call (~10 us): fewer checks than the Python loop's every 32
        clock = time.perf_counter
        t_k = clock()  # the race counts from here: the set-up above is paid whoever wins
        deadline += t_k - self._t_change
        try:
            while True:
                stop = int(cnt[nb.C_WORK]) + step if timed else 1 << 62
                status, hs = nb.sweep(R, S, E, self._dur_np, self._dev_np, lk, where, st, nr,
                                              pend, oS, oE, ptr, idx, pptr, pidx, qh, qt, qn, qp, cur,
                                              hr, hx, hs, dirt, cnt, flt, stop, lim)
                if status == nb.DONE:
                    break
                at = (float(flt[nb.F_AT_R]), int(flt[nb.F_AT_X]))
                processed, work = int(cnt[nb.C_PROC]), int(cnt[nb.C_WORK])
                if status == nb.PAUSED:
                    if clock() > deadline:
                        deadline = replan(at[0], at[1], processed, work, t_k)
                    step = min(2 * step, 1024)  # a check at least every ~0.3 ms: the budget is not overshot
                    continue
                if status == nb.LIMIT:
                    raise _Abort(f"work limit of {limit} tasks reached", at, processed)
                if status == nb.LOSSY:
                    x = int(flt[nb.F_BAD])
                    raise _Abort(f"positive duration lost to rounding: task {x} ({self._dur[x]!r} s) "
                                 f"ends when it starts")
                if status == nb.OVERFLOW:  # cannot happen (heap_capacity is a bound); be safe
                    raise _Abort("the compiled sweep's event heap is full")
                raise _Abort("zero-duration tie: a processed task's input changed")
            # done: every marked task processed (else a cycle: the caller falls back with the list)
            # -> clear the scratch here, vectorized, instead of the caller's loop over ``dirtied``
            marked = dirt[:int(cnt[nb.C_DIRT])]
            self._nb_clean = not np.any(st[marked] != 2)
            if self._nb_clean:
                st[marked] = 0
        except BaseException:
            self._nb_clean = False
            raise
        finally:
            self._q_stale = True
            if not self._nb_clean:
                dirtied.extend(dirt[n0:int(cnt[nb.C_DIRT])].tolist())
            del R, S, E, lk, nr, oS, oE, where, st, pend
        mk0 = self._mk
        return (int(cnt[nb.C_PROC]), int(cnt[nb.C_CHANGED]), int(cnt[nb.C_MOVED]), int(cnt[nb.C_VAC]),
                [], max(float(flt[nb.F_EMAX]), mk0), bool(flt[nb.F_LOST]))

    def _fallback(self, t0, reason, dirtied, new_ids, removed) -> DeltaStats:
        st, pend, S, E, oS, oE = self._st, self._pend, self._S, self._E, self._oS, self._oE
        for x in dirtied:  # leave the sweep scratch all zero; undo the sweep's writes for the stats
            if st[x] == 2:
                S[x] = oS[x]
                E[x] = oE[x]
            st[x] = 0
            pend[x] = 0
        old_S, old_E, old_alive = S, E, self._alive_np.copy()
        self._full()
        wall = time.perf_counter() - t0
        n_old = len(old_S)  # tasks whose start or end changed (new ones count), vectorized
        nS = np.frombuffer(self._S, dtype=np.float64)
        nE = np.frombuffer(self._E, dtype=np.float64)
        diff = self._alive_np.copy()
        diff[:n_old] &= ~((nS[:n_old] == np.frombuffer(old_S, dtype=np.float64))
                          & (nE[:n_old] == np.frombuffer(old_E, dtype=np.float64)) & old_alive)
        if new_ids:
            diff[list(new_ids)] = True
        return DeltaStats(retimed=self._n_live, fallback=True, reason=reason, wall_s=wall,
                          new_ids=new_ids, removed=removed, changed=int(np.count_nonzero(diff)))

    def _pred_csr(self):
        """Predecessor CSR (ptr, idx) of the whole id space, rebuilt from the successor CSR when the
        edges changed (numpy; used by the resumed fallback to find the edges into the resumed part)."""
        ptr, idx = self._csr_arrays()
        if self._pcsr is None or self._pcsr[0] is not ptr:
            n = ptr.shape[0] - 1
            order = np.argsort(idx, kind="stable")
            src = np.repeat(np.arange(n, dtype=np.int64), np.diff(ptr))[order]
            pp = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(np.bincount(idx, minlength=n), out=pp[1:])
            self._pcsr = (ptr, pp, src)
        return self._pcsr[1], self._pcsr[2]

    def _resume(self, t0, reason, at, processed, dirtied, new_ids, removed) -> DeltaStats:
        """The sweep stopped at point ``at`` (budget or work limit, durations > 0): hand the rest to
        the engine instead of starting over.

        By the sweep's invariant every task whose queue entry has a key up to ``at`` is final, and
        they are exactly the tasks the engine would have popped by then (Lemma 1: the new timeline is
        canonical, the engine pops in key order). The engine's state at that point is: each device
        free at the end of its last final task; each other task waiting for its non-final
        predecessors, its ready time so far the latest end of its final ones. That state is handed
        to :func:`simulator.engine.core.simulate_arrays` as a small graph of the non-final tasks (ids in
        the same relative order, so ties break the same way) plus zero-ready source tasks that stand
        for it: one per device, occupying the device until it is free, and one per task with final
        predecessors, on a private device, ending at that task's ready time so far. Sources pop
        first (key (0, lowest ids)), so the real tasks see exactly the engine's state.

        Cost: a few vectorized passes over the id space (the final / rest split), then work in the
        resumed tasks only: their edges are gathered from the CSR arrays, and the delta state is
        patched in place (times written back; each device queue cut at the sweep point and the
        resumed tasks appended in key order, all of them after it), not rebuilt. So the fallback
        costs the sweep so far plus about one engine pop per task after the sweep point."""
        n, nd = len(self._dur), self._nd
        alive = self._alive_np
        where = np.frombuffer(self._where, dtype=np.int64)
        lk = np.frombuffer(self._lk, dtype=np.float64)
        kr, kx = at
        final = (where != -1) & (lk <= kr)
        tie = np.flatnonzero((lk == kr) & (where != -1))  # entries at the sweep point's ready time:
        final[tie[tie > kx]] = False                       # final up to the sweep point's id
        rest = alive & ~final
        sub = np.flatnonzero(rest)
        if sub.size > RESUME_MAX_SHARE * self._n_live:
            # the resumed part costs about as much per task as a full run, plus the state patching:
            # with most tasks after the sweep point, the plain full run is cheaper
            return self._fallback(t0, reason, dirtied, new_ids, removed)
        st, pend, oS, oE = self._st, self._pend, self._oS, self._oE
        R = np.frombuffer(self._R, dtype=np.float64)
        S = np.frombuffer(self._S, dtype=np.float64)
        E = np.frombuffer(self._E, dtype=np.float64)
        # tasks whose times may change: the ones the sweep processed, and the resumed ones
        swept = [x for x in dirtied if st[x] == 2]
        old_sw = (np.array([oS[x] for x in swept]), np.array([oE[x] for x in swept]))
        for x in dirtied:  # leave the sweep scratch all zero
            st[x] = 0
            pend[x] = 0
        old_S, old_E = S[sub].copy(), E[sub].copy()
        dev = self._dev_np
        # edges inside the resumed part (a resumed task's successors are all resumed: they come
        # later in key order) and edges into it from final tasks
        ptr, idx = self._csr_arrays()
        pptr, pidx = self._pred_csr()
        new_id = np.full(n, -1, dtype=np.int64)
        s_src, s_dst = _gather(ptr, idx, sub)
        p_dst, p_src = _gather(pptr, pidx, sub)
        fin = final[p_src]
        p_dst, p_src = p_dst[fin], p_src[fin]
        inj = np.zeros(sub.size)
        np.maximum.at(inj, p_dst, E[p_src])
        pready = np.flatnonzero(inj > 0.0)  # rows of sub
        # each device's free time at the sweep point: the end of its last final entry
        w_sub = where[sub]
        has = np.bincount(dev[sub], minlength=nd) > 0
        has[w_sub[w_sub != -1]] = True
        devs = np.flatnonzero(has)
        free = np.zeros(nd)
        links = self._ll  # the compiled sweep's queues are patched instead of the _Queue objects
        lasts = {}
        for d in devs.tolist():
            if links is not None:
                last = lasts[d] = int(self._nb.last_upto(links[1], links[3], lk, d, kr, kx))
            else:
                last = self._Q[d].last_upto(kr, kx)
            if last != -1:
                free[d] = E[last]
        pdev = np.flatnonzero(free > 0.0)
        a, b = pdev.size, pready.size
        k = a + b
        new_id[sub] = k + np.arange(sub.size)
        if s_dst.size and int(new_id[s_dst].min()) < 0:  # cannot happen (module doc); be safe
            return self._fallback(t0, reason, (), new_ids, removed)
        sdur = np.concatenate([free[pdev], inj[pready], self._dur_np[sub]])
        sdev = np.concatenate([pdev, nd + np.arange(b), dev[sub]])
        esrc = np.concatenate([a + np.arange(b), k + s_src])
        edst = np.concatenate([k + pready, new_id[s_dst]])
        from taskgraph.graph import csr_from_edges
        sptr, sidx = csr_from_edges(k + sub.size, esrc, edst)
        t_res = time.perf_counter()
        try:
            res = simulate_arrays(sdur, sdev, sptr, sidx, nd + b)
        except SimulationError:  # a cycle after the sweep point: the full run reports it by task name
            return self._fallback(t0, reason, (), new_ids, removed)
        nR, nS, nE = res.ready[k:], res.start[k:], res.end[k:]
        if np.any((nE == nS) & (self._dur_np[sub] > 0.0)) or (sub.size and nR.min() < kr):
            # a duration lost to rounding after the sweep point: the timeline may not be canonical
            return self._fallback(t0, f"{reason}; a positive duration was lost to rounding after the sweep point",
                                  (), new_ids, removed)
        # patch the state: times, queue entries (cut at the sweep point, resumed tasks appended)
        R[sub], S[sub], E[sub] = nR, nS, nE
        lk[sub] = nR
        ko = res.order[res.order >= k].astype(np.int64) - k  # pop order = key order (canonical)
        kd = dev[sub][ko]
        by_dev = np.argsort(kd.astype(np.int16) if nd < 32768 else kd, kind="stable")  # radix sort
        ids_sorted = sub[ko][by_dev]
        r_sorted = nR[ko][by_dev]
        bounds = np.searchsorted(kd[by_dev], devs, side="left")
        ends = np.searchsorted(kd[by_dev], devs, side="right")
        if links is not None:  # one call per device: cut at the sweep point, append the resumed tasks
            self._q_stale = True
            for d, lo, hi in zip(devs.tolist(), bounds.tolist(), ends.tolist()):
                self._nb.cut_and_append(*links, d, lasts[d], ids_sorted[lo:hi])
        else:
            for d, lo, hi in zip(devs.tolist(), bounds.tolist(), ends.tolist()):
                self._Q[d].cut_after(kr, kx)
                if hi > lo:
                    self._Q[d].extend(r_sorted[lo:hi], ids_sorted[lo:hi])
        where[sub] = dev[sub]
        self._order_cache = None
        self._mk = self._recompute_makespan()
        changed = int(np.count_nonzero((old_S != nS) | (old_E != nE)))
        if swept:
            sw = np.array(swept, dtype=np.int64)
            keep = ~rest[sw]  # swept tasks that stayed final (the others are counted above)
            changed += int(np.count_nonzero(((S[sw] != old_sw[0]) | (E[sw] != old_sw[1])) & keep))
        self._learn_resume(int(sub.size), time.perf_counter() - t_res)
        return DeltaStats(retimed=processed + int(sub.size), fallback=True,
                          reason=f"{reason}; the engine resumed from the sweep point ({sub.size} of "
                                 f"{self._n_live} tasks)", wall_s=time.perf_counter() - t0,
                          new_ids=new_ids, removed=removed, changed=changed, resumed=int(sub.size))

    def _learn_resume(self, tasks: int, seconds: float) -> None:
        """Refine the resumed engine's cost model from one measured resume (half-life of one
        resume): the per-task part from large resumes, the fixed part from small ones."""
        per = self._res_per or 0.0
        if tasks * per > self._res_fix:
            self._res_per = 0.5 * per + 0.5 * max(seconds - self._res_fix, 0.0) / tasks
        else:
            self._res_fix = 0.5 * self._res_fix + 0.5 * max(seconds - tasks * per, 0.0)

    def _full(self) -> None:
        """Full run with :func:`simulator.engine.core.simulate_arrays`; rebuilds the delta state from it."""
        t0 = time.perf_counter()
        n = len(self._dur)
        ptr, idx = self._csr_arrays()
        g = self._describe_graph
        describe = g.describe if (g is not None and n == g.num_tasks and self._n_live == n) else None
        try:
            res = simulate_arrays(self._dur_np, self._dev_np, ptr, idx, self._nd, describe=describe)
        except SimulationError as exc:
            self._broken = str(exc)
            raise
        alive = self._alive_np
        order = res.order.astype(np.int64)
        ready, start, end = res.ready, res.start, res.end
        if self._n_live < n:  # drop tombstones (isolated zero-duration tasks: they changed nothing)
            order = order[alive[order]]
            dead = ~alive
            ready, start, end = ready.copy(), start.copy(), end.copy()
            ready[dead] = start[dead] = end[dead] = _NAN
        self._adopt(order, ready, start, end, float(res.makespan) if self._n_live else 0.0)
        t = time.perf_counter() - t0
        if abs(n - self._t_full_n) * 10 > n:  # the graph changed size: forget older timings
            self._t_full = t
            self._t_full_n = n
        else:  # the fastest run seen: a slow (loaded) run must not inflate the budget
            self._t_full = min(self._t_full, t)
        if self._res_per is None and self._n_live:
            self._res_per = 1.5 * self._t_full / self._n_live

    def _adopt(self, order, ready, start, end, makespan: float) -> None:
        """Rebuild the delta state from a timeline of the current graph (engine pop ``order`` of the
        live tasks; NaN times for tombstones)."""
        n = len(self._dur)
        alive = self._alive_np
        canonical = True
        # start + dur == start with dur > 0: a duration lost to rounding, a zero duration in effect
        lossy = bool(np.any((end == start) & (self._dur_np > 0.0)))
        self._lossy = lossy
        if (self._n_zero or lossy) and order.size > 1:
            r = ready[order]
            canonical = bool(np.all((r[1:] > r[:-1]) | ((r[1:] == r[:-1]) & (order[1:] > order[:-1]))))
        ready = np.ascontiguousarray(ready, dtype=np.float64)
        self._R = array("d", ready.tobytes())
        self._S = array("d", np.ascontiguousarray(start, dtype=np.float64).tobytes())
        self._E = array("d", np.ascontiguousarray(end, dtype=np.float64).tobytes())
        self._lk = array("d", self._R)
        where = self._dev_np.astype(np.int64)
        if self._n_live < n:
            where[~alive] = -1
        self._where = array("q", where.tobytes())
        groups = _Groups(order, self._dev_np[order], ready, self._nd)
        self._Q = [_Queue((groups, d)) for d in range(self._nd)]
        self._groups = groups
        self._q_fresh = True  # no queue changed since this run (_links can use the grouping)
        self._ll = None
        self._q_stale = False
        self._mk = makespan
        self._canonical = canonical
        self._order_cache = order
        if self._st is None or len(self._st) != n:
            self._st = _zeros("q", n)  # sweep scratch (see _sweep), all zero between changes
            self._pend = _zeros("q", n)
            self._nr = _zeros("d", n)
            self._oS = _zeros("d", n)
            self._oE = _zeros("d", n)
