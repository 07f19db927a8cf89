"""The delta simulator: :class:`DeltaSimulator` -- its public API (construction, accessors, the
changes), their checks, and ``_delta``, which marks the tasks a change makes dirty, sets the sweep's
budget and its race with the resumed engine, and runs a sweep. The algorithm is in the package doc
(:mod:`simulator.engine.delta`); the fallback and the resume are the mixin of
:mod:`~simulator.engine.delta.resume`; the Python sweep, the compiled sweep and the static re-sweep
are objects it holds (:mod:`~simulator.engine.delta.sweep`, :mod:`~simulator.engine.delta.compiled`,
:mod:`~simulator.engine.delta.static`)."""
from __future__ import annotations

import heapq
import time
from array import array
from itertools import chain

import numpy as np

from simulator.engine.core import SimResult
from simulator.engine.delta import params
from simulator.engine.delta.compiled import CompiledSweep, KernelGraph, delta_kernel
from simulator.engine.delta.cost import CostModel
from simulator.engine.delta.device_queues import DeviceQueueSet
from simulator.engine.delta.queues import DeviceQueue
from simulator.engine.delta.race import SweepRace
from simulator.engine.delta.resume import ResumeMixin
from simulator.engine.delta.state import DeltaState
from simulator.engine.delta.static import StaticResweep
from simulator.engine.delta.stats import NAN, DeltaStats, SweepAbort, extend_array, zeros_array
from simulator.engine.delta.sweep import ListGraph, PythonSweep, backward_edge
from strategies.errors import SimulationError


class DeltaSimulator(ResumeMixin):
    """Incremental FIFO-engine simulation of a task graph under local changes (see package doc).

    Build from a :class:`taskgraph.graph.TaskGraph` (``DeltaSimulator(graph)``) or from the engine's raw
    arrays (:meth:`from_arrays`). The constructor runs a full simulation.

    budget: the sweep gives up (and a full run is used) once the change has taken this fraction of
        a full run's time (the fastest full run so far: engine + state rebuild), so a
        change that moves most of the timeline costs about ``1 + budget`` full runs
        (``python -m benchmarks.delta``). ``None``: no time budget. ``"auto"`` (default):
        :data:`params.AUTO_BUDGET_PYTHON` for the Python sweep, :data:`params.AUTO_BUDGET_COMPILED`
        for the compiled one, each with the pace rule described there.
    max_work: also give up after this many processed + vacated tasks (deterministic; None = no limit).
    kernel: None means :data:`params.DEFAULT_KERNEL`, ``"auto"``. ``"auto"`` runs the sweep of duration
        and device changes compiled when numba is installed (optional extra ``fast``,
        :mod:`simulator.engine.delta.kernels_numba`: the same loop, guards and IEEE operations, so the
        same bits; tests/test_delta_numba.py compares them), and its full runs and resumes on the
        compiled engine; ``"python"`` always the Python loop and engine, ``"numba"`` requires numba.

    What the modules of this package share, by job (private attributes; the per-task times and the
    sweep's scratch are one :class:`~simulator.engine.delta.state.DeltaState`, ``_state``):

    * the graph: ``_duration`` / ``_duration_np`` and ``_device_of`` / ``_device_np`` (per id, as a
      Python buffer for the loops and as numpy for the kernels), ``_alive`` / ``_alive_np``,
      ``_succ`` / ``_pred`` (lists per id), ``_succ_csr`` (patched from ``_succ`` for the rows in
      ``_succ_rows_changed``), ``_pred_csr_cache``, ``_n_live``, ``_n_devices``,
      ``_zero_durations`` (how many tasks have a zero duration);
    * the timeline's facts: ``_makespan``, ``_canonical``, ``_lossy`` (a positive duration was lost
      to rounding), ``_broken`` (why the simulator is unusable), and the key order for
      :meth:`result` (``_order_cache`` plus the tasks whose key changed since, ``_order_moved``);
    * the device queues: ``_queue_set``
      (:class:`~simulator.engine.delta.device_queues.DeviceQueueSet`: the Python sweep's
      ``DeviceQueue`` objects and the compiled sweep's linked lists, and which of them is current);
    * the kernels and the costs: ``_kernels`` (:mod:`~simulator.engine.delta.kernels_numba` or None),
      ``_engine``, ``_cost`` (:class:`~simulator.engine.delta.cost.CostModel`);
    * one change: ``_change_began``, ``_rest_seen`` (the race's count of the tasks after its last
      check, :class:`~simulator.engine.delta.race.SweepRace`), ``_swept_rekeyed`` (the swept tasks
      whose key changed);
    * the Python sweep: ``_python_sweep`` (:class:`~simulator.engine.delta.sweep.PythonSweep`),
      handed the graph as a :class:`~simulator.engine.delta.sweep.ListGraph`;
    * the compiled sweep: ``_compiled`` (:class:`~simulator.engine.delta.compiled.CompiledSweep`, None
      without the kernels: its driver, which keeps the tasks it marked and whether it cleared their
      scratch), handed the graph's arrays as a :class:`~simulator.engine.delta.compiled.KernelGraph`;
    * the static re-sweep: ``_static`` (:class:`~simulator.engine.delta.static.StaticResweep`: its
      back-off, scratch, the dense walk's order and the Python re-sweep's device lists), handed the
      graph as a ``KernelGraph`` or a ``ListGraph``.
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
        self._kernels = delta_kernel(params.DEFAULT_KERNEL if kernel is None else kernel)
        # full runs and resumes run the engine of the same kind as the sweep: compiled with the
        # compiled sweep, the Python loop with the Python sweep (never slower than a full run of it)
        self._engine = "python" if self._kernels is None else "numba"
        # what a full run and the resumed engine cost, measured as changes run
        self._cost = CostModel()
        self._rest_seen = None  # (r, x, tasks after (r, x)) at the sweep's last deadline check (_delta)
        self._n_devices = max(int(num_devices), 1)
        dur_np = np.array(duration, dtype=np.float64).reshape(-1)
        n = int(dur_np.shape[0])
        dev_np = np.array(device, dtype=np.int32).reshape(-1)
        if dev_np.shape[0] != n:
            raise ValueError(f"device has {dev_np.shape[0]} entries for {n} tasks")
        self._check_durations(dur_np)
        if n and (int(dev_np.min()) < 0 or int(dev_np.max()) >= self._n_devices):
            raise ValueError(f"a device index is outside [0, {self._n_devices})")
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
        self._succ_csr = (ptr, idx)
        self._pred_csr_cache = (ptr, pp_np, src_np)  # predecessor CSR for the resumed fallback (_pred_csr)
        self._succ_rows_changed: set[int] = set()  # tasks whose successor list changed since _succ_csr was built
        self._duration_np = dur_np
        self._device_np = dev_np
        self._alive_np = np.ones(n, dtype=bool)
        self._duration = array("d", dur_np.tobytes())
        self._device_of = dev_np.tolist()
        self._alive = [True] * n
        self._n_live = n
        self._zero_durations = int(np.count_nonzero(dur_np == 0.0))
        self._lossy = False  # some positive duration was lost to rounding (start + dur == start)
        self._broken: str | None = None
        self._state = DeltaState()  # the per-task times, queue keys and sweep scratch (allocated by _full)
        self._queue_set = DeviceQueueSet(self._state, self._kernels)  # the device queues, in both forms
        # the compiled sweep's driver (None without the kernels)
        self._compiled = None if self._kernels is None else CompiledSweep(self._kernels, self._state, self._queue_set)
        self._python_sweep = PythonSweep(self._state, self._queue_set)  # the Python sweep
        self._static = StaticResweep(self._state, self._queue_set, self._kernels, self._cost)  # the static re-sweep
        self._order_cache, self._order_moved = None, []  # key order of the live tasks (_current_order)
        if self._engine == "numba":
            # load the compiled engine and state rebuild first: a full run's time is a cost model
            self._warm()
        self._full()
        if self._engine == "numba":  # the first run also paid for its fresh pages: time a second one
            self._full()

    @classmethod
    def from_arrays(cls, duration, device, succ_ptr, succ_idx, num_devices: int, *,
                    budget: float | str | None = "auto", max_work: int | None = None,
                    kernel: str | None = None) -> DeltaSimulator:
        """Same inputs as :func:`simulator.engine.core.simulate_arrays`."""
        return cls(None, budget=budget, max_work=max_work, kernel=kernel,
                   _arrays=(duration, device, succ_ptr, succ_idx, num_devices))

    # ------------------------------------------------------------------ accessors
    @property
    def _R(self):
        """The ready times' buffer (:attr:`DeltaState.ready_time`), under the name the exactness tests
        (tests/test_delta*.py, kept unchanged by the move to :class:`DeltaState`) read."""
        return self._state.ready_time

    @property
    def _lk(self):
        """The queue keys' buffer (:attr:`DeltaState.queue_key`), for the exactness tests as :attr:`_R`."""
        return self._state.queue_key

    @property
    def num_tasks(self) -> int:
        """Live tasks (tombstones excluded)."""
        return self._n_live

    @property
    def num_ids(self) -> int:
        """Size of the id space (live tasks + tombstones)."""
        return len(self._duration)

    @property
    def num_devices(self) -> int:
        return self._n_devices

    @property
    def canonical(self) -> bool:
        """True when the pop order is key-sorted (always with positive durations); else changes fall back."""
        return self._canonical

    @property
    def ready(self) -> np.ndarray:
        """Ready time per id (NaN for tombstones)."""
        self._check_ok()
        return np.frombuffer(self._state.ready_time, dtype=np.float64).copy()

    @property
    def start(self) -> np.ndarray:
        self._check_ok()
        return np.frombuffer(self._state.start_time, dtype=np.float64).copy()

    @property
    def end(self) -> np.ndarray:
        self._check_ok()
        return np.frombuffer(self._state.end_time, dtype=np.float64).copy()

    @property
    def duration(self) -> np.ndarray:
        return self._duration_np.copy()

    @property
    def device(self) -> np.ndarray:
        return self._device_np.copy()

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
        return self._makespan

    def device_order(self, d: int) -> list[int]:
        """Ids of device ``d``'s tasks in the order it runs them (FIFO by (ready, id))."""
        self._check_ok()
        return self._queue_set.as_objects(self._n_devices, keep_links=True)[d].ids()

    @property
    def pop_order(self) -> np.ndarray:
        """Live ids in the engine's global pop order (key-sorted when canonical; sorted lazily)."""
        self._check_ok()
        return self._current_order().copy()

    def _current_order(self) -> np.ndarray:
        """The live ids in key order: the last full run's order, patched with the tasks whose key
        changed since (merged in one pass); sorted from scratch only after a task replacement."""
        order = self._order_cache
        R = np.frombuffer(self._state.ready_time, dtype=np.float64)
        if order is None:
            live = self.live_ids()
            order = live[np.lexsort((live, R[live]))]
        elif sum(len(m) for m in self._order_moved) * 8 > order.size:
            # many keys changed (a static re-sweep of most of the graph): the old order is nearly
            # sorted, which numpy's stable sort exploits, then equal ready times by id; without numba
            # one sort by (ready, id)
            if self._kernels is not None:
                from simulator.engine.delta.static import static_kernels
                order = order[np.argsort(R[order], kind="stable")]
                static_kernels().fix_ties(order, R)
            else:
                order = order[np.lexsort((order, R[order]))]
        elif self._order_moved:
            moved = np.unique(np.concatenate([np.asarray(m, dtype=np.int64) for m in self._order_moved]))
            moved = moved[np.lexsort((moved, R[moved]))]
            mark = np.zeros(len(self._duration), dtype=bool)
            mark[moved] = True
            if self._kernels is not None:
                order = self._kernels.merge_order(order, moved, R, mark)
            else:
                keep = order[~mark[order]]
                rk, rm = R[keep], R[moved]
                pos = np.searchsorted(rk, rm, "left")
                hi = np.searchsorted(rk, rm, "right")
                for j in np.flatnonzero(hi > pos).tolist():  # equal ready times: by id among them
                    pos[j] += int(np.searchsorted(keep[pos[j]:hi[j]], moved[j]))
                order = np.insert(keep, pos, moved)
        self._order_cache = order
        self._order_moved = []
        return order

    def live_ids(self) -> np.ndarray:
        """Internal ids of the live tasks, ascending: compact id ``i`` is internal id ``live_ids()[i]``."""
        return np.flatnonzero(self._alive_np)

    def graph_arrays(self):
        """The current live graph, renumbered densely (order kept): ``(duration, device, succ_ptr,
        succ_idx, num_devices)``, the inputs of :func:`simulator.engine.core.simulate_arrays`."""
        live = self.live_ids()
        remap = np.full(len(self._duration), -1, dtype=np.int64)
        remap[live] = np.arange(live.size)
        succ = self._succ
        lv = live.tolist()
        counts = np.array([len(succ[x]) for x in lv], dtype=np.int64)
        ptr = np.zeros(live.size + 1, dtype=np.int64)
        np.cumsum(counts, out=ptr[1:])
        flat = np.fromiter(chain.from_iterable(succ[x] for x in lv), dtype=np.int64, count=int(ptr[-1]))
        idx = remap[flat].astype(np.int32)
        return self._duration_np[live].copy(), self._device_np[live].copy(), ptr, idx, self._n_devices

    def result(self) -> SimResult:
        """The timeline as a :class:`SimResult` over the compact numbering (equal to a full run of
        :meth:`graph_arrays`)."""
        self._check_ok()
        order = self._current_order()
        state = self._state
        R, S, E = (np.frombuffer(a, dtype=np.float64) for a in (state.ready_time, state.start_time, state.end_time))
        if self._n_live == len(self._duration):  # no tombstones: the compact numbering is the id space
            return SimResult(ready=R.copy(), start=S.copy(), end=E.copy(), order=order.astype(np.int32),
                             makespan=self._makespan)
        live = self.live_ids()
        remap = np.full(len(self._duration), -1, dtype=np.int64)
        remap[live] = np.arange(live.size)
        return SimResult(ready=R[live], start=S[live], end=E[live], order=remap[order].astype(np.int32),
                         makespan=self._makespan)

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
        dur, dur_np = self._duration, self._duration_np
        seeds = []
        for x, v in zip(ids, vals_np.tolist()):
            if dur[x] != v:
                self._zero_durations += (v == 0.0) - (dur[x] == 0.0)
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
            if not 0 <= d < self._n_devices:
                raise ValueError(f"device index {d} out of range [0, {self._n_devices}); add_devices() first")
        dev = self._device_of
        self._queue_set.groups.freeze()  # the last full run's device groups keep its devices
        seeds = []
        for x, d in zip(ids, vals):
            if dev[x] != d:
                dev[x] = d
                self._device_np[x] = d
                seeds.append(x)
        return self._delta(t0, seeds, len(seeds), [], [], set(), (), 0, (), False)

    def add_devices(self, k: int = 1) -> int:
        """Append ``k`` empty devices; returns the index of the first."""
        queues = self._queue_set.as_objects(self._n_devices)  # before the count changes (the linked lists have one head per device)
        self._static.orders_stale(self._n_devices)
        first = self._n_devices
        self._n_devices += int(k)
        queues.extend(DeviceQueue() for _ in range(k))
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
            if not 0 <= d < self._n_devices:
                raise ValueError(f"device index {d} out of range [0, {self._n_devices}); add_devices() first")
        k = len(durs)
        rem_set = set(rem)
        alive = self._alive
        n_ids = len(self._duration)
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

        direct = self._replacement_runs_in_full(rem, add, drop, new_ids)
        if not direct:
            self._queue_set.as_objects(self._n_devices)
        self._queue_set.groups.freeze()
        touched, dev_marks, mk_lost = self._remove_tasks(rem, direct)
        self._add_tasks(new_ids, len(reused), durs, devs)
        self._n_live += k - len(rem)
        self._change_edges(add, drop, new_set, touched)
        self._succ_rows_changed.update(new_ids)
        self._succ_rows_changed.update(rem)
        touched -= new_set
        dev_marks = [z for z in dev_marks if alive[z] and z not in new_set]  # next entry may be removed too
        if direct:  # the full run rebuilds the queues and the key order
            self._change_began = t0
            return self._fallback(t0, direct, (), tuple(new_ids), len(rem))
        return self._delta(t0, [], 0, dev_marks, new_ids, touched, tuple(add), len(rem), tuple(new_ids),
                           mk_lost)

    def _remove_tasks(self, rem, direct):
        """Step 1 of :meth:`replace_tasks`: the tasks ``rem`` become tombstones -- out of their device
        queues (unless ``direct``: a full run follows, or the timeline is not canonical), their edges
        dropped, NaN times. Returns the live tasks whose predecessor set changed, the queue entries
        after removed ones (dirty: their queue predecessor changed), and whether a removed task
        ended at the makespan."""
        R, S, E, where = self._state.ready_time, self._state.start_time, self._state.end_time, self._state.queue_device
        dur, dev, succ, pred, alive = self._duration, self._device_of, self._succ, self._pred, self._alive
        alive_np, dur_np, dev_np = self._alive_np, self._duration_np, self._device_np
        canonical = self._canonical
        mk_lost = False
        touched: set[int] = set()
        dev_marks: list[int] = []
        for x in rem:
            alive[x] = False
        for x in rem:
            w = where[x]
            if w != -1 and canonical and not direct:
                nxt = self._queue_set.objects[w].remove(R[x], x)
                if nxt != -1:
                    dev_marks.append(nxt)
            if E[x] >= self._makespan:
                mk_lost = True
            for y in succ[x]:
                if alive[y]:
                    pred[y] = [p for p in pred[y] if p != x]
                    touched.add(y)
            for p in pred[x]:
                if alive[p]:
                    succ[p] = [s for s in succ[p] if s != x]
                    self._succ_rows_changed.add(p)
            succ[x] = []
            pred[x] = []
            self._zero_durations -= dur[x] == 0.0
            R[x] = S[x] = E[x] = self._state.queue_key[x] = NAN
            where[x] = -1
            alive_np[x] = False
            dur[x] = 0.0  # a tombstone enters full runs as an isolated zero-duration task (package doc)
            dur_np[x] = 0.0
            dev[x] = 0
            dev_np[x] = 0
        return touched, dev_marks, mk_lost

    def _add_tasks(self, new_ids, reused: int, durs, devs) -> None:
        """Step 2 of :meth:`replace_tasks`: the new tasks ``new_ids`` (the first ``reused`` of them
        reuse removed ids, the rest are appended to the id space) with their durations and devices;
        no edges and no times yet."""
        dur, dev, succ, pred, alive = self._duration, self._device_of, self._succ, self._pred, self._alive
        alive_np, dur_np, dev_np = self._alive_np, self._duration_np, self._device_np
        grow = len(new_ids) - reused
        if grow:
            self._state.grow(grow)
            extend_array(dur, zeros_array("d", grow))
            dev.extend([0] * grow)
            alive.extend([False] * grow)
            succ.extend([] for _ in range(grow))
            pred.extend([] for _ in range(grow))
            self._duration_np = dur_np = np.concatenate([dur_np, np.zeros(grow)])
            self._device_np = dev_np = np.concatenate([dev_np, np.zeros(grow, dtype=np.int32)])
            self._alive_np = alive_np = np.concatenate([alive_np, np.zeros(grow, dtype=bool)])
        for j, x in enumerate(new_ids):
            dur[x] = dur_np[x] = durs[j]
            dev[x] = dev_np[x] = devs[j]
            alive[x] = True
            alive_np[x] = True
            self._zero_durations += durs[j] == 0.0

    def _change_edges(self, add, drop, new_set, touched: set) -> None:
        """Step 3 of :meth:`replace_tasks`: the edges ``drop`` removed and ``add`` added (resolved
        ids); their heads join ``touched`` unless they are new tasks (``new_set``), and their tails'
        successor rows are marked for the CSR."""
        succ, pred = self._succ, self._pred
        for u, v in drop:
            succ[u].remove(v)
            pred[v].remove(u)
            touched.add(v)
        for u, v in add:
            succ[u].append(v)
            pred[v].append(u)
            if v not in new_set:
                touched.add(v)
        self._succ_rows_changed.update(u for u, _ in chain(add, drop))

    # ------------------------------------------------------------------ internals
    def _replacement_runs_in_full(self, rem, add, drop, new_ids) -> str:
        """A cheap up-front estimate for a task replacement with the compiled engine (package doc,
        "Compiled sweep"): replacements take the Python sweep, which costs ~4.5 us per re-timed task against
        ~0.05 us per task for a compiled full run, behind a set-up of ~1-1.5 ms (the ``DeviceQueue`` objects
        rebuilt from the linked lists, the dirty marks) that the race with the resume already counts
        against it; when more than ``params.RESUME_MAX_SHARE`` of the live tasks come after the
        earliest key the change touches (or the resume's cost model expects more than a full run on
        them), the full run is the only alternative and the sweep gives up at its first check
        (measured on the 1F1B pipeline of benchmarks/delta.py: the early and middle splits after 32
        tasks, 9.5-10.5 ms against a 5.2-6 ms compiled full run), so the full run starts at once.
        Returns the reason, or '' to sweep. Only with the default budget (``"auto"``): an explicit
        budget or None asks for the sweep."""
        if self._kernels is None or self.budget != "auto" or not self._canonical or not self._n_live:
            return ""
        R, E, alive = self._state.ready_time, self._state.end_time, self._alive
        new_set = set(new_ids)
        keys = [R[x] for x in rem]
        keys += [R[v] for _, v in chain(add, drop) if v not in new_set]
        into: dict = {x: [] for x in new_ids}  # a new task's key: the latest end of its predecessors
        for u, v in add:
            if v in new_set:
                into[v].append(u)
        for ps in into.values():
            if not any(p in new_set for p in ps):  # (after a new predecessor otherwise)
                keys.append(max((E[p] for p in ps if alive[p]), default=0.0))
        if not keys:
            return ""
        r = min(keys)
        _, rest = self._kernels.count_after(np.frombuffer(self._state.queue_key, dtype=np.float64), r, r)
        if params.RESUME_MAX_SHARE >= 1.0 or not self._resume_costs_more(rest):
            return ""
        return (f"task replacement at ready time {r:.6g}: {rest} of the {self._n_live} live tasks come after it, "
                f"a resume on them is expected to cost more than a full run, so a compiled full run at "
                f"once instead of the Python sweep")

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

    def _mark_dirty(self, seeds, dev_marks, new_tasks, touched):
        """The change's dirty tasks (package doc, "Delta algorithm"): ``seeds`` (own duration or
        device changed) and ``dev_marks`` (the entry after a removed one) at their keys, ``new_tasks``
        unresolved from the start (their successors pend on them), ``touched`` (predecessor set
        changed) at their new ready time. Returns the event heap (a list, not yet heapified) and the
        tasks marked, in marking order."""
        state = self._state
        R, E, where = state.ready_time, state.end_time, state.queue_device
        st, nr, pend = state.sweep_status, state.new_ready, state.pending_preds
        pred, succ = self._pred, self._succ
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
        return heap, dirtied

    def _delta(self, t0, seeds, n_dev_moves, dev_marks, new_tasks, touched, new_edges, removed, new_ids,
               mk_lost) -> DeltaStats:
        """Run the sweep from the given dirty sets; fall back to a full run when it gives up. Marks
        the dirty tasks (:meth:`_mark_dirty`), sets the budget and the race with the resume
        (:class:`~simulator.engine.delta.race.SweepRace`), picks a sweep (the static re-sweep first
        for duration changes, then the compiled or the Python one) and routes its outcome
        (:meth:`_sweep_outcome`)."""
        replacement = bool(dev_marks or new_tasks or touched or removed)
        if replacement:  # a task replacement: the key order is sorted anew
            self._order_cache = None
            self._order_moved = []
        self._change_began = t0
        if not self._canonical:
            return self._fallback(t0, "timeline before the change was not canonical (a zero duration, or one lost to rounding, ties an edge)",
                                  (), new_ids, removed)
        heap, dirtied = self._mark_dirty(seeds, dev_marks, new_tasks, touched)
        stats = DeltaStats(removed=removed, new_ids=new_ids)
        if not dirtied:
            if mk_lost:
                self._makespan = self._recompute_makespan()
            stats.wall_s = time.perf_counter() - t0
            stats.changed = 0
            return stats
        heapq.heapify(heap)
        # a positive duration lost to rounding (start + dur == start) acts as a zero duration
        guard = self._zero_durations > 0 or self._lossy
        # the compiled sweep (simulator/engine/delta/kernels_numba.py) takes duration and device changes,
        # with the guards when needed; task replacements (new ids, removed entries) keep the Python sweep
        compiled = self._kernels is not None and not replacement
        race = SweepRace(self, t0, heap[0][0] if heap else 0.0, compiled)
        if self._canonical and not (n_dev_moves or replacement) \
                and self._static.wanted(self.max_work, self.budget):  # duration changes: the static re-sweep first
            done = self._static_resweep(compiled, t0, heap, dirtied, guard, stats, mk_lost)
            if done is not None:
                return done
            race.began = time.perf_counter()
        self._static.orders_stale(self._n_devices)  # the ordinary sweep may reorder device queues
        if not compiled:
            self._queue_set.as_objects(self._n_devices)
        self._rest_seen = None
        try:
            sweep = self._sweep_compiled if compiled else self._sweep_python
            outcome = sweep(heap, dirtied, self.max_work, race.deadline, guard, race.replan)
        except SweepAbort as exc:
            if compiled:
                dirtied = self._compiled.marked
            if exc.at is not None:
                return self._resume(t0, str(exc), exc.at, exc.processed, dirtied, new_ids, removed, guard)
            return self._fallback(t0, str(exc), dirtied, new_ids, removed)
        if compiled:
            dirtied = self._compiled.marked
        return self._sweep_outcome(t0, outcome, stats, dirtied, compiled, guard, new_edges, new_ids, removed,
                                   n_dev_moves, mk_lost)

    def _static_resweep(self, compiled, t0, heap, dirtied, guard, stats, mk_lost) -> DeltaStats | None:
        """Try the static re-sweep (:class:`~simulator.engine.delta.static.StaticResweep`, compiled or
        in Python) on a duration change and record what it took: the makespan, the tasks whose key
        changed, the stats. None: it gave the change back untouched, for the ordinary sweep."""
        static = self._static
        if compiled:
            out = static.resweep_nb(self._kernel_graph(), self._makespan, t0, heap, dirtied, guard,
                                    self._current_order, self._order_is_current)
        else:
            out = static.resweep_py(self._list_graph(), self._makespan, t0, heap, dirtied, guard)
        if out is None:
            return None
        if out.lossy:  # a positive duration lost to rounding: guard later changes too
            self._lossy = True
        if out.rekeyed is not None and self._order_cache is not None and len(out.rekeyed):
            self._order_moved.append(out.rekeyed)  # merged into the key order when it is asked for
        self._makespan = self._recompute_makespan() if (out.lost or mk_lost) else max(out.emax, self._makespan)
        stats.retimed = out.retimed
        stats.changed = out.changed
        stats.moved = out.moved
        stats.static = True
        stats.wall_s = time.perf_counter() - t0
        return stats

    def _order_is_current(self, order) -> bool:
        """Is ``order`` the key order as it stands (the last one taken, no task's key changed since)?"""
        return order is self._order_cache and not self._order_moved

    def _list_graph(self) -> ListGraph:
        """The graph as the Python loops read it."""
        return ListGraph(self._duration, self._device_of, self._pred, self._succ, self._n_devices, self._n_live)

    def _sweep_python(self, heap, dirtied, limit, deadline, guard, replan):
        """The Python sweep (:meth:`PythonSweep.sweep <simulator.engine.delta.sweep.PythonSweep.sweep>`);
        records the tasks whose key changed (for the resume) and a duration lost to rounding even
        when it gives up."""
        run = self._python_sweep
        try:
            return run.sweep(self._list_graph(), self._makespan, heap, dirtied, limit, deadline, guard, replan)
        finally:
            self._swept_rekeyed = run.rekeyed
            if run.lost_rounding:  # guard later changes too
                self._lossy = True

    def _recompute_makespan(self) -> float:
        if not self._n_live:
            return 0.0
        return float(np.nanmax(np.frombuffer(self._state.end_time, dtype=np.float64)))

    def _backward_edge(self, tasks, new_edges):
        """:func:`~simulator.engine.delta.sweep.backward_edge` on the current graph, with numpy on
        the CSR arrays when they are current."""
        cache, current = self._pred_csr_cache, None
        if not self._succ_rows_changed and cache is not None and cache[0] is self._succ_csr[0]:
            current = (*self._succ_csr, cache[1], cache[2])
        return backward_edge(tasks, new_edges, self._state.ready_time, self._succ, self._pred, self._kernels,
                             lambda: (*self._csr_arrays(), *self._pred_csr()), current)

    def _kernel_graph(self) -> KernelGraph:
        """The graph's arrays for the compiled kernels, the CSR arrays patched first."""
        ptr, idx = self._csr_arrays()
        pptr, pidx = self._pred_csr()
        return KernelGraph(self._duration_np, self._device_np, ptr, idx, pptr, pidx, self._n_devices)

    def _sweep_compiled(self, heap, dirtied, limit, deadline, guard, replan):
        """:meth:`_sweep_python` compiled (:meth:`CompiledSweep.sweep
        <simulator.engine.delta.compiled.CompiledSweep.sweep>`); records the tasks whose key changed
        (for the resume) and a duration lost to rounding even when it gives up."""
        run = self._compiled
        try:
            return run.sweep(self._kernel_graph(), self._makespan, self._change_began, heap, dirtied, limit,
                             deadline, guard, replan)
        finally:
            self._swept_rekeyed = run.rekeyed
            if run.lost_rounding:  # guard later changes too
                self._lossy = True

    def _sweep_outcome(self, t0, outcome, stats, dirtied, compiled, guard, new_edges, new_ids, removed,
                       n_dev_moves, mk_lost) -> DeltaStats:
        """A sweep that ran to its end: check that every marked task was processed (else a cycle)
        and, with the guards, that no edge goes backwards in key order (else the full run); clear the
        sweep's scratch; record the makespan, the tasks whose key changed and the stats."""
        processed, changed, moved, vacated, retimed_r, emax, lost = outcome
        st = self._state.sweep_status
        clean = compiled and self._compiled.cleared  # the compiled sweep cleared its scratch itself
        if compiled:
            left = 0 if clean else int(np.count_nonzero(np.frombuffer(st, dtype=np.int64)[dirtied] != 2))
        elif len(dirtied) >= params.VECTOR_MIN:
            dirtied = np.array(dirtied, dtype=np.int64)  # one numpy pass here and for the clearing below
            left = int(np.count_nonzero(np.frombuffer(st, dtype=np.int64)[dirtied] != 2))
        else:
            left = sum(1 for x in dirtied if st[x] != 2)
        if left:
            return self._fallback(t0, f"{left} task(s) never became ready (cycle)", dirtied, new_ids, removed)
        if guard:
            bad = self._backward_edge(retimed_r, new_edges)
            if clean and bad is None:  # the compiled sweep left its scratch for this check
                np.frombuffer(st, dtype=np.int64)[dirtied] = 0
            if bad is not None:
                return self._fallback(
                    t0, f"zero-duration tie: edge {bad[0]} -> {bad[1]} goes backwards in (ready, id) "
                        f"order, the engine's pop order is not key-sorted", dirtied, new_ids, removed)
        if not clean:
            if compiled or isinstance(dirtied, np.ndarray):
                np.frombuffer(st, dtype=np.int64)[dirtied] = 0
            else:
                for x in dirtied:
                    st[x] = 0
        self._makespan = self._recompute_makespan() if (lost or mk_lost) else emax
        if self._order_cache is not None and len(retimed_r):
            self._order_moved.append(retimed_r)  # merged into the key order when it is asked for
        stats.retimed = processed
        stats.changed = changed
        stats.moved = moved + n_dev_moves
        stats.vacated = vacated
        stats.wall_s = time.perf_counter() - t0
        return stats
