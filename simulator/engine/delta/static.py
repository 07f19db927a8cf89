"""The static re-sweep (package doc, :mod:`simulator.engine.delta`, "Static re-sweep"): a duration
change re-timed in the old key order with every device's old order, verified as it goes against
Lemma 1, else handed untouched to the ordinary sweep: :class:`StaticResweep`, which
:class:`simulator.engine.delta.simulator.DeltaSimulator` holds as ``_static`` and which returns a
:class:`StaticOutcome` for the simulator to record."""
from __future__ import annotations

import heapq
import math
import time
from array import array
from typing import NamedTuple

import numpy as np

from simulator.engine.delta import params
from simulator.engine.delta.sweep import ListGraph


def static_kernels():
    """:mod:`simulator.engine.delta.kernels_static` (numba is installed when this is asked)."""
    import simulator.engine.delta.kernels_static as ks
    return ks


class StaticOutcome(NamedTuple):
    """A duration change the static re-sweep took: ``retimed`` tasks re-timed (once each), ``changed``
    of them with a new start or end, ``moved`` with a new key; ``rekeyed`` those tasks (None: the key
    order before the change is the key order after it); ``emax`` the largest new end, ``lost`` an
    end that was the makespan decreased, ``lossy`` a positive duration was lost to rounding. (A named
    tuple, as :class:`~simulator.engine.delta.compiled.KernelGraph`: one per change.)"""

    retimed: int
    changed: int
    moved: int
    rekeyed: np.ndarray | None
    emax: float
    lost: bool
    lossy: bool


class StaticResweep:
    """The static re-sweep of :class:`~simulator.engine.delta.simulator.DeltaSimulator`: :meth:`resweep_nb`
    and :meth:`resweep_py` on the per-task times of ``state``
    (:class:`~simulator.engine.delta.state.DeltaState`) and the device queues of ``queue_set``
    (:class:`~simulator.engine.delta.device_queues.DeviceQueueSet`), timed against ``cost``
    (:class:`~simulator.engine.delta.cost.CostModel`); ``kernels``: :mod:`~simulator.engine.delta.kernels_numba`
    or None. It keeps its back-off and the orders it takes between changes."""

    def __init__(self, state, queue_set, kernels, cost):
        self.state = state
        self.queue_set = queue_set
        self.kernels = kernels
        self.cost = cost
        self.skip = 0  # changes left before the next try (after failures: 1, 2, 4, ... up to 64)
        self.fails = 0
        self.scratch = None
        self.dense_walk = None  # (order, inverse) for the dense walk, see _walk_order; None: taken when needed
        self.py_device_lists = None  # the Python re-sweep's device lists, see py_links; None: taken when needed

    def wanted(self, max_work, budget) -> bool:
        """Try the static re-sweep on this change? Not with a work limit or a budget other than
        "auto" (tests and benchmarks that force the ordinary sweep's paths), nor while backing off
        after refusals by its checks (a graph whose device orders change often: each try costs
        until its first pair out of order; a try stopped by the clock or the pace does not count)."""
        if not params.STATIC_RESWEEP or max_work is not None or budget != "auto":
            return False
        if self.skip:
            self.skip -= 1
            return False
        return True

    def failed(self) -> None:
        """A refusal by the checks: skip the next 1, 3, 7, ... up to 63 changes."""
        self.fails = min(self.fails + 1, 6)
        self.skip = (1 << self.fails) - 1

    def drop_orders(self) -> None:
        """The device queues or the key order were rebuilt: the orders kept are taken again when needed."""
        self.dense_walk = self.py_device_lists = None

    def _scratch(self, n: int):
        """Per-task scratch of the compiled re-sweep, kept between changes (fresh pages cost ~1 ms
        on 346 k tasks when a change touches them all)."""
        sc = self.scratch
        if sc is None or sc[0].shape[0] != n:
            # heap, marks, rr: a task at most once; the log (done, old R, S, E) of n more: the dense
            # walk re-times again (same values) the tasks the heap took before it
            hx, marks, rr = (np.empty(n, dtype=np.int64) for _ in range(3))
            hr = np.empty(n, dtype=np.float64)
            done = np.empty(2 * n, dtype=np.int64)
            oR, oS, oE = (np.empty(2 * n, dtype=np.float64) for _ in range(3))
            sc = self.scratch = (hx, hr, marks, done, oR, oS, oE, rr)
        return sc

    def _walk_order(self, R, done, oR, k, current_order, order_is_current):
        """The order the dense walk follows: a topological order of the edges and of every device's
        queue (the key order when it was taken; it stays one while only static re-sweeps change the
        graph's timing, which keep the queues and edges), its inverse, and whether it is the key order
        before this change (the ``k`` tasks re-timed so far get their old ready times back while the
        key order is merged by ``current_order``, ``DeltaSimulator._current_order``; ``order_is_current``
        tells whether an order is the simulator's key order as it stands)."""
        if self.dense_walk is None:
            ids = done[:k]
            new = R[ids]  # (a copy: fancy indexing)
            R[ids] = oR[:k]
            order = current_order()
            R[ids] = new
            rank = np.empty(R.shape[0], dtype=np.int64)
            rank[order] = np.arange(order.size, dtype=np.int64)
            self.dense_walk = (order, rank)
        order, rank = self.dense_walk
        return order, rank, order_is_current(order)

    def resweep_nb(self, graph, makespan, t0, heap, dirtied, guard, current_order, order_is_current):
        """The compiled static re-sweep of a duration change (``heap``: the changed tasks at their
        keys, marked dirty in ``dirtied``) on ``graph`` (:class:`~simulator.engine.delta.compiled.KernelGraph`),
        from the timeline's ``makespan``; ``current_order`` / ``order_is_current``: see :meth:`_walk_order`.
        Returns its :class:`StaticOutcome`, or None when the check refused it or its time ran out: the
        state is then as it was (the changed tasks still marked), for the ordinary sweep."""
        ks = static_kernels()
        n = int(graph.duration.shape[0])
        _, _, qn, qp = self.queue_set.as_links(n, graph.num_devices)
        hx, hr, marks, done, oR, oS, oE, rr = self._scratch(n)
        hs = len(heap)
        if hs:
            hr[:hs] = [h[0] for h in heap]
            hx[:hs] = [h[1] for h in heap]
        n0 = len(dirtied)
        marks[:n0] = dirtied
        cnt = np.zeros(4, dtype=np.int64)
        cnt[ks.S_MARK] = n0
        flt = np.array([-math.inf, makespan, 0.0, 0.0, -math.inf, -1.0, 0.0])
        sorted_ = False  # (only the dense walk checks whether the key order survives)
        heap_k = 0  # tasks the heap had re-timed when the dense walk took over (it re-times them again)
        f64 = lambda a: np.frombuffer(a, dtype=np.float64)
        state = self.state
        R, S, E, lk = (f64(a) for a in (state.ready_time, state.start_time, state.end_time, state.queue_key))
        st = np.frombuffer(state.sweep_status, dtype=np.int64)
        ptr, idx, pptr, pidx = graph.succ_ptr, graph.succ_idx, graph.pred_ptr, graph.pred_idx
        dur, dev = graph.duration, graph.device
        deadline = t0 + params.STATIC_BUDGET * self.cost.full_run_s
        r0 = float(hr[0]) if hs else 0.0  # the first key re-timed
        stop = params.STATIC_DENSE_CHECK  # a pause after this many tasks: is the change dense?
        clock = time.perf_counter
        while True:
            status, hs = ks.resweep(R, S, E, dur, lk, st, ptr, idx, pptr, pidx, qn, qp, hr, hx, hs,
                                    marks, done, oR, oS, oE, rr, cnt, flt, stop, guard)
            if status != ks.PAUSED or clock() > deadline:
                break
            k = int(cnt[ks.S_PROC])
            first, rest = self.kernels.count_after(lk, r0, float(hr[0]))
            if k >= params.STATIC_DENSE * max(int(first) - int(rest), 1):
                # it re-times most of the tasks it passes: walk all the rest in the old key order
                order, rank, is_key = self._walk_order(R, done, oR, k, current_order, order_is_current)
                heap_k = k
                pos = int(rank[marks[:n0]].min())  # nothing before the change's own tasks can change
                last = np.full(graph.num_devices, -2, dtype=np.int64)
                sorted_ = is_key  # then: does the key order survive the change? (resweep_all checks)
                if pos:
                    flt[ks.G_PR], flt[ks.G_PX] = R[order[pos - 1]], order[pos - 1]
                while True:
                    status, pos = ks.resweep_all(R, S, E, dur, dev, lk, pptr, pidx, qp, order,
                                                 pos, pos + 65536, last, done, oR, oS, oE, rr, cnt, flt, guard)
                    if status != ks.PAUSED or clock() > deadline:
                        break
                break
            stop = 2 * k
        if status != ks.DONE:
            ks.undo(R, S, E, lk, st, marks, int(cnt[ks.S_MARK]), done, oR, oS, oE, int(cnt[ks.S_PROC]), n0)
            del R, S, E, lk, st
            if status != ks.PAUSED:  # refused by a check (not stopped by the clock): back off
                self.failed()
            return None
        ks.clear(st, marks, int(cnt[ks.S_MARK]))
        del R, S, E, lk, st
        self.fails = 0
        self.queue_set.links_changed()  # the DeviceQueue objects hold the old keys; the linked lists are current
        nrr = int(cnt[ks.S_RR])
        # None: the key order before the change is the key order after it
        rekeyed = None if sorted_ and not flt[ks.G_UNSORTED] else rr[:nrr].copy()
        return StaticOutcome(retimed=int(cnt[ks.S_PROC]) - heap_k, changed=int(cnt[ks.S_CHANGED]), moved=nrr,
                             rekeyed=rekeyed, emax=float(flt[ks.G_EMAX]), lost=bool(flt[ks.G_LOST]),
                             lossy=bool(flt[ks.G_LOSSY]))

    def orders_stale(self, n_devices: int) -> None:
        """Something other than a static re-sweep changes the timeline (device queues may move):
        drop the orders the re-sweeps keep (after bringing the ``DeviceQueue`` keys up to date)."""
        self.queue_set.settle_keys(n_devices)
        self.drop_orders()

    # ------------------------------------------------------------------ Python
    def py_links(self, n: int, nd: int):
        """The Python re-sweep's device queues as lists: ids grouped by device in key order, the
        bounds of each device's group, and per task the one before and after it on its device (-1:
        none). Valid while only static re-sweeps change the timeline (no queue entry moves); dropped
        with the dense walk's order (``dense_walk``); ``n`` ids, ``nd`` devices."""
        if self.py_device_lists is None:
            queues = self.queue_set
            if queues.as_full_run and not queues.keys_stale and nd:  # a full run's groups: one gather
                groups = queues.groups
                groups.device(0)  # (groups them)
                ids = groups.order[groups.perm].astype(np.int64)
                bounds = groups.bounds.copy()
            else:
                parts = [q.ids_np() for q in queues.as_objects(nd)]
                ids = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
                bounds = np.zeros(nd + 1, dtype=np.int64)
                np.cumsum([p.size for p in parts], out=bounds[1:])
            qp = np.full(n, -1, dtype=np.int64)
            qn = np.full(n, -1, dtype=np.int64)
            if ids.size > 1:
                same = np.ones(ids.size - 1, dtype=bool)  # neighbours in ids on the same device
                inner = bounds[1:-1]
                same[inner[(inner > 0) & (inner < ids.size)] - 1] = False
                qp[ids[1:][same]] = ids[:-1][same]
                qn[ids[:-1][same]] = ids[1:][same]
            self.py_device_lists = (ids, bounds, array("q", qp.tobytes()), array("q", qn.tobytes()))  # (fast scalar reads)
        return self.py_device_lists

    def resweep_py(self, graph: ListGraph, makespan: float, t0, heap, dirtied, guard):
        """:meth:`resweep_nb` in Python on ``graph``, the heap only (the dense walk, one Python step per task,
        is no cheaper than the Python engine). Gives up, as the Python sweep's pace rule does, once
        its pace predicts too much (:meth:`_py_pace_ok`), and is not tried when more than
        ``params.RESUME_MAX_SHARE`` of the tasks come after the change while its device lists are
        still to be built (after a full run). Returns the change's :class:`DeltaStats`, or None
        (state as it was, for the ordinary sweep)."""
        if self.py_device_lists is None and heap and int(np.count_nonzero(
                np.frombuffer(self.state.queue_key, dtype=np.float64) > heap[0][0])) > (
                    params.RESUME_MAX_SHARE * graph.num_live):
            # most of the graph after the change, whose alternative is a full run, and the lists to build
            # first (~6 ms on 346 k tasks): the static re-sweep would have to re-time sparsely there
            return None
        _, _, qp, qn = self.py_links(len(graph.duration), graph.num_devices)
        since = time.perf_counter()  # the pace counts from here (the lists are built once per full run)
        marks = list(dirtied)
        n0 = len(marks)
        log: list = []  # (task, old ready, old start, old end) per re-timed task, to put back
        rr: list[int] = []  # re-timed tasks whose ready time (key) changed
        ok, paced, changed, emax, lost, lossy = self._resweep_py_loop(
            graph, makespan, t0, since, list(heap), marks, log, rr, qp, qn, guard)
        state = self.state
        R, S, E, lk, st = state.ready_time, state.start_time, state.end_time, state.queue_key, state.sweep_status
        if not ok:
            for x, r, s0, e0 in reversed(log):
                R[x] = lk[x] = r
                S[x] = s0
                E[x] = e0
            for i, x in enumerate(marks):
                st[x] = 1 if i < n0 else 0
            if not paced:
                self.failed()
            return None
        for x in marks:
            st[x] = 0
        self.fails = 0
        ids, bounds = self.py_device_lists[0], self.py_device_lists[1]
        self.queue_set.keys_changed(ids, bounds)  # the DeviceQueue objects hold the old keys (rebuilt when needed)
        return StaticOutcome(retimed=len(log), changed=changed, moved=len(rr), rekeyed=np.array(rr, dtype=np.int64),
                             emax=emax, lost=lost, lossy=lossy)

    def _resweep_py_loop(self, graph, makespan, t0, since, heap, marks, log, rr, qp, qn, guard):
        """The loop of :meth:`resweep_py`: re-time the tasks of ``heap`` in the old key order on the
        device lists ``qp`` / ``qn`` (previous / next task on its device), marking (``marks``) the
        successors and device successors of each whose end changed, and checking as it goes that
        every device keeps its order and (``guard``) that the edges it passes go forward in key order.
        Every value it overwrites goes to ``log``; the re-timed tasks whose key changed to ``rr``.
        Returns ``(ok, paced, changed, emax, lost, lossy)``: ``ok`` False when a check refused the
        change or (``paced``) the pace rule stopped it; the count of tasks whose start or end changed,
        the largest new end, whether an end that was the makespan decreased, and whether a positive
        duration was lost to rounding."""
        state = self.state
        R, S, E, lk, st = state.ready_time, state.start_time, state.end_time, state.queue_key, state.sweep_status
        dur = graph.duration
        pred, succ = graph.pred, graph.succ
        push, pop = heapq.heappush, heapq.heappop
        mk0 = makespan
        emax = -math.inf
        changed = 0
        lost = lossy = False
        ok = True
        paced = False  # stopped by the pace rule, not refused by a check
        r0 = heap[0][0] if heap else 0.0
        stop = 256
        while heap:
            r, x = pop(heap)
            m = 0.0
            for u in pred[x]:
                eu = E[u]
                if eu > m:
                    m = eu
            if guard:  # an edge into x tied by a zero or lost duration must go forward in key order
                for u in pred[x]:
                    if E[u] == m and (R[u] > m or (R[u] == m and u > x)):
                        ok = False
                if not ok:
                    break
            pv = qp[x]
            pe = 0.0
            if pv != -1:
                lp = lk[pv]
                if lp > m or (lp == m and pv > x):  # the device's order would change
                    ok = False
                    break
                pe = E[pv]
            s = m if m > pe else pe
            e = s + dur[x]
            if e == s and dur[x] > 0.0:
                if not guard:
                    ok = False
                    break
                lossy = True
            s0 = S[x]
            e0 = E[x]
            log.append((x, r, s0, e0))
            st[x] = 2
            R[x] = m
            lk[x] = m
            S[x] = s
            E[x] = e
            if m != r:
                rr.append(x)
            if s != s0 or e != e0:
                changed += 1
            if e > emax:
                emax = e
            if e0 == mk0 and e < e0:
                lost = True
            z = qn[x]
            if e != e0:
                for v in succ[x]:
                    if not st[v]:
                        st[v] = 1
                        marks.append(v)
                        push(heap, (R[v], v))
                if z != -1 and not st[z]:
                    st[z] = 1
                    marks.append(z)
                    push(heap, (R[z], z))
            else:
                if z != -1 and not st[z] and (m > lk[z] or (m == lk[z] and x > z)):
                    ok = False
                    break
                if guard:
                    for v in succ[x]:
                        if not st[v] and (m > R[v] or (m == R[v] and x > v)):
                            ok = False
                    if not ok:
                        break
            if len(log) >= stop and heap:
                stop *= 2
                if not self._py_pace_ok(t0, since, len(log), r0, heap[0][0], graph.num_live):
                    ok = False
                    paced = True
                    break
        return ok, paced, changed, emax, lost, lossy

    def _py_pace_ok(self, t0, since, k, r0, r, n_live) -> bool:
        """Go on after ``k`` tasks? Within ``params.STATIC_BUDGET_PYTHON`` full runs, and while the pace since
        ``since`` (time per task the sweep point has passed since the first key ``r0``, times the tasks
        after ``r``) predicts at most ``params.STATIC_PACE_PYTHON_LATE`` x the cheaper of the resumed
        engine and a full run (plus the time spent: the ordinary sweep that follows a give-up passes
        the same tasks again), and at most ``params.STATIC_PACE_PYTHON`` x it at the check after
        ``params.STATIC_JUDGE_PYTHON`` tasks (the first whose sample judges a change that re-times
        every task it passes, and the last before a change whose pace slows down later has cost much)."""
        now = time.perf_counter()
        if now - t0 > params.STATIC_BUDGET_PYTHON * self.cost.full_run_s:
            return False
        lkv = np.frombuffer(self.state.queue_key, dtype=np.float64)
        first, rest = int(np.count_nonzero(lkv > r0)), int(np.count_nonzero(lkv > r))
        del lkv
        est = self.cost.alternative_s(rest, n_live)
        limit = params.STATIC_PACE_PYTHON if k == params.STATIC_JUDGE_PYTHON else params.STATIC_PACE_PYTHON_LATE
        # giving up costs the alternative plus about what was spent (the ordinary sweep starts over)
        return (now - since) * rest / max(first - rest, 1) <= limit * (est + now - since)
