"""Full runs and what replaces a sweep that gives up (package doc, :mod:`simulator.engine.delta`,
"Fallback"): the full run and the state rebuilt from it, the fallback, the engine resumed from the
sweep point and its cost model, and the CSR arrays they hand to the engine. A mixin of
:class:`simulator.engine.delta.simulator.DeltaSimulator`."""
from __future__ import annotations

import time

import numpy as np

from simulator.engine.core import simulate_arrays
from simulator.engine.delta import params
from simulator.engine.delta.queues import gather_rows
from simulator.engine.delta.stats import NAN, DeltaStats
from strategies.errors import SimulationError


class ResumeMixin:
    """Full runs, fallback and resume of :class:`~simulator.engine.delta.simulator.DeltaSimulator`."""

    def _csr_arrays(self):
        """Successor CSR of the whole id space for the engine, patched from the last one: unchanged
        tasks' segments are block-copied, changed ones rewritten from the successor lists."""
        dirty = self._succ_rows_changed
        if not dirty:
            return self._succ_csr
        succ = self._succ
        n = len(succ)
        ptr0, idx0 = self._succ_csr
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
        self._succ_csr = (ptr, idx)
        dirty.clear()
        return self._succ_csr

    def _clear_scratch(self, dirtied, undo: bool) -> np.ndarray:
        """Leave the sweep scratch (st, pend) all zero for the tasks in ``dirtied`` (a list, or the
        compiled sweep's numpy array), vectorized; with ``undo``, also put back the start and end the
        sweep overwrote (so that a fallback counts the tasks that changed against the old timeline).
        Returns the tasks the sweep processed."""
        d = np.asarray(dirtied, dtype=np.int64).reshape(-1)
        if not d.size:
            return d
        state = self._state
        st = np.frombuffer(state.sweep_status, dtype=np.int64)
        done = d[st[d] == 2]
        if undo and done.size:
            f64 = lambda a: np.frombuffer(a, dtype=np.float64)
            f64(state.start_time)[done] = f64(state.old_start)[done]
            f64(state.end_time)[done] = f64(state.old_end)[done]
        st[d] = 0
        np.frombuffer(state.pending_preds, dtype=np.int64)[d] = 0
        return done

    def _fallback(self, t0, reason, dirtied, new_ids, removed) -> DeltaStats:
        self._clear_scratch(dirtied, undo=True)
        changed = self._full(count_changed=True)
        return DeltaStats(retimed=self._n_live, fallback=True, reason=reason,
                          wall_s=time.perf_counter() - t0, new_ids=new_ids, removed=removed, changed=changed)

    def _pred_csr(self):
        """Predecessor CSR (ptr, idx) of the whole id space, rebuilt from the successor CSR when the
        edges changed (numpy; used by the resumed fallback to find the edges into the resumed part)."""
        ptr, idx = self._csr_arrays()
        if self._pred_csr_cache is None or self._pred_csr_cache[0] is not ptr:
            if self._kernels is not None:  # the same arrays in one counting sort (kernels_numba.transpose_csr)
                self._pred_csr_cache = (ptr, *self._kernels.transpose_csr(ptr, idx))
            else:
                n = ptr.shape[0] - 1
                order = np.argsort(idx, kind="stable")
                src = np.repeat(np.arange(n, dtype=np.int64), np.diff(ptr))[order]
                pp = np.zeros(n + 1, dtype=np.int64)
                np.cumsum(np.bincount(idx, minlength=n), out=pp[1:])
                self._pred_csr_cache = (ptr, pp, src)
        return self._pred_csr_cache[1], self._pred_csr_cache[2]

    def _resume(self, t0, reason, at, processed, dirtied, new_ids, removed, guard=False) -> DeltaStats:
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

        Cost: a few vectorized passes over the id space (the final / rest split,
        :meth:`_final_upto`), then work in the resumed tasks only: their edges are gathered from the
        CSR arrays (:meth:`_resume_graph`), and the delta state is patched in place (times written
        back; each device queue cut at the sweep point and the resumed tasks appended in key order,
        all of them after it: :meth:`_resume_patch`), not rebuilt. So the fallback costs the sweep so
        far plus about one engine pop per task after the sweep point.

        ``guard`` (zero or rounding-lossy durations): the guarded sweep's invariant is checked here
        instead of assumed (package doc, "Zero durations and the resume"): no dirty task left at or
        before the sweep point, no edge from a resumed task into a final one, every resumed task
        after the sweep point in key order, no edge at a processed task backwards in key order, and
        the resumed tasks popped in key order; if one check fails, the plain full run is used."""
        t_in = time.perf_counter()
        kr, kx = at
        share = params.RESUME_MAX_SHARE
        seen = self._rest_seen  # the pace rule's count when it gave up at this point (_delta)
        rest = seen[2] if seen is not None and seen[:2] == (kr, kx) else None
        self._rest_seen = None
        if share < 1.0 and self._resume_costs_more(int(np.count_nonzero(
                np.frombuffer(self._state.queue_key, dtype=np.float64) > kr)) if rest is None else rest):
            # (at least that many tasks after the sweep point: decided before building any mask)
            return self._fallback(t0, reason, dirtied, new_ids, removed)
        f64 = lambda a: np.frombuffer(a, dtype=np.float64)
        state = self._state
        S, E = f64(state.start_time), f64(state.end_time)
        # tasks whose times may change: the ones the sweep processed, and the resumed ones
        dirtied = np.asarray(dirtied, dtype=np.int64).reshape(-1)
        sw = dirtied[np.frombuffer(state.sweep_status, dtype=np.int64)[dirtied] == 2]
        final = self._final_upto(kr, kx, dirtied, sw, guard)
        if final is None:
            return self._fallback(t0, f"{reason}; a zero-duration tie at or before the sweep point",
                                  dirtied, new_ids, removed)
        rest = self._alive_np & ~final
        sub = np.flatnonzero(rest)
        if share < 1.0 and self._resume_costs_more(int(sub.size)):
            return self._fallback(t0, reason, dirtied, new_ids, removed)
        old_sw = (f64(state.old_start)[sw], f64(state.old_end)[sw])
        self._clear_scratch(dirtied, undo=False)
        old_S, old_E = S[sub].copy(), E[sub].copy()
        graph = self._resume_graph(kr, kx, final, sub)
        if graph is None:  # an edge into a final task: cannot happen with durations > 0 (package doc)
            return self._fallback(t0, reason, (), new_ids, removed)
        sdur, sdev, sptr, sidx, n_dev, k, devs, lasts = graph
        # the cost model learns the compiled resume whole: its set-up (masks over the id space, gathers,
        # the sub-graph's CSR: 0.2-0.3 us per resumed task on the random DAG of benchmarks/delta.py) is
        # as large as its engine (~0.2 us), and learning the engine alone (0.17 us against 0.38-0.47
        # measured) chose a resume of half that graph (19-21 ms) over a full run (11-12 ms). The Python
        # resume keeps the model its pace thresholds were measured against (PACE_ABORT_PYTHON,
        # STATIC_PACE_PYTHON*: from the engine call on; its set-up is a small share of a Python engine)
        t_res = t_in if self._engine == "numba" else time.perf_counter()
        try:
            res = simulate_arrays(sdur, sdev, sptr, sidx, n_dev, kernel=self._engine)
        except SimulationError:  # a cycle after the sweep point: the full run reports it by task name
            return self._fallback(t0, reason, (), new_ids, removed)
        nR, nS, nE = res.ready[k:], res.start[k:], res.end[k:]
        lossy = bool(np.any((nE == nS) & (self._duration_np[sub] > 0.0)))
        if lossy and not guard:
            # a duration lost to rounding after the sweep point: the timeline may not be canonical
            return self._fallback(t0, f"{reason}; a positive duration was lost to rounding after the sweep point",
                                  (), new_ids, removed)
        ko = res.order[res.order >= k].astype(np.int64) - k  # pop order of the resumed tasks
        if sub.size:
            rk, xk = nR[ko], sub[ko]
            # every resumed task after the sweep point (it cannot have been popped before it), and
            # (with zero durations) popped in key order, so the new timeline is canonical
            if nR.min() < kr or bool(np.any((nR == kr) & (sub < kx))) or (guard and not bool(np.all(
                    (rk[1:] > rk[:-1]) | ((rk[1:] == rk[:-1]) & (xk[1:] > xk[:-1]))))):
                return self._fallback(t0, f"{reason}; a resumed task was not after the sweep point in "
                                          f"key order (a zero duration, or one lost to rounding, ties)",
                                      (), new_ids, removed)
        if lossy:
            self._lossy = True
        self._resume_patch(kr, kx, sub, nR, nS, nE, ko, devs, lasts)
        self._makespan = self._recompute_makespan()
        changed = int(np.count_nonzero((old_S != nS) | (old_E != nE)))
        if sw.size:
            keep = ~rest[sw]  # swept tasks that stayed final (the others are counted above)
            changed += int(np.count_nonzero(((S[sw] != old_sw[0]) | (E[sw] != old_sw[1])) & keep))
        self._cost.learn_resume(int(sub.size), time.perf_counter() - t_res)
        return DeltaStats(retimed=processed + int(sub.size), fallback=True,
                          reason=f"{reason}; the engine resumed from the sweep point ({sub.size} of "
                                 f"{self._n_live} tasks)", wall_s=time.perf_counter() - t0,
                          new_ids=new_ids, removed=removed, changed=changed, resumed=int(sub.size))

    def _final_upto(self, kr, kx, dirtied, sw, guard):
        """The final tasks of a resume at the sweep point ``(kr, kx)``: a boolean mask over the id
        space of the queue entries with a key up to it; None when, with ``guard``, the guarded
        sweep's prefix fails its checks (:meth:`_guarded_prefix_ok`: then the plain full run).
        ``dirtied``: the tasks the sweep marked; ``sw``: those it processed."""
        where = np.frombuffer(self._state.queue_device, dtype=np.int64)
        lk = np.frombuffer(self._state.queue_key, dtype=np.float64)

        def final_of(ids):  # a queue entry up to the sweep point (ready, id) <= (kr, kx)
            k = lk[ids]
            return (where[ids] != -1) & ((k < kr) | ((k == kr) & (ids <= kx)))

        # (checked on the few tasks it concerns, before any pass over the id space)
        if guard:
            R = np.frombuffer(self._state.ready_time, dtype=np.float64)
            ptr, idx = self._csr_arrays()
            pptr, pidx = self._pred_csr()
            if not self._guarded_prefix_ok(final_of, dirtied, sw, R, ptr, idx, pptr, pidx):
                return None
        final = (where != -1) & (lk <= kr)
        tie = np.flatnonzero((lk == kr) & (where != -1))  # entries at the sweep point's ready time:
        final[tie[tie > kx]] = False                       # final up to the sweep point's id
        return final

    def _resume_graph(self, kr, kx, final, sub):
        """The graph the engine resumes on (see :meth:`_resume`): the resumed tasks ``sub`` (the
        live tasks not ``final``) renumbered after the source tasks that stand for the engine's state
        at the sweep point ``(kr, kx)`` -- one per device still busy then, one per resumed task with
        final predecessors. Returns ``(duration, device, succ_ptr, succ_idx, num_devices, k, devs,
        lasts)`` (``k`` sources first; ``devs``: the devices of the resumed tasks and of their queue
        entries; ``lasts``: per such device, its last final entry in the compiled sweep's linked lists),
        or None when an edge goes from a resumed task into a final one."""
        n, nd = len(self._duration), self._n_devices
        where = np.frombuffer(self._state.queue_device, dtype=np.int64)
        lk = np.frombuffer(self._state.queue_key, dtype=np.float64)
        E = np.frombuffer(self._state.end_time, dtype=np.float64)
        ptr, idx = self._csr_arrays()
        pptr, pidx = self._pred_csr()
        dev = self._device_np
        # edges inside the resumed part (a resumed task's successors are all resumed: they come
        # later in key order) and edges into it from final tasks
        new_id = np.full(n, -1, dtype=np.int64)
        s_src, s_dst = gather_rows(ptr, idx, sub)
        p_dst, p_src = gather_rows(pptr, pidx, sub)
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
        links = self._queue_set.links  # the compiled sweep's queues are patched instead of the DeviceQueue objects
        lasts = {}
        for d in devs.tolist():
            if links is not None:
                last = lasts[d] = int(self._kernels.last_upto(links[1], links[3], lk, d, kr, kx))
            else:
                last = self._queue_set.objects[d].last_upto(kr, kx)
            if last != -1:
                free[d] = E[last]
        pdev = np.flatnonzero(free > 0.0)
        a, b = pdev.size, pready.size
        k = a + b
        new_id[sub] = k + np.arange(sub.size)
        if s_dst.size and int(new_id[s_dst].min()) < 0:  # an edge into a final task
            return None
        sdur = np.concatenate([free[pdev], inj[pready], self._duration_np[sub]])
        sdev = np.concatenate([pdev, nd + np.arange(b), dev[sub]])
        esrc = np.concatenate([a + np.arange(b), k + s_src])
        edst = np.concatenate([k + pready, new_id[s_dst]])
        from taskgraph.graph import csr_from_edges
        sptr, sidx = csr_from_edges(k + sub.size, esrc, edst)
        return sdur, sdev, sptr, sidx, nd + b, k, devs, lasts

    def _resume_patch(self, kr, kx, sub, nR, nS, nE, ko, devs, lasts) -> None:
        """Patch the state with the resumed run: the times of the resumed tasks ``sub`` (``nR``,
        ``nS``, ``nE``, popped in the order ``ko``), and each device queue in ``devs`` cut at the
        sweep point ``(kr, kx)`` with the resumed tasks appended in key order (the compiled sweep's
        linked lists after ``lasts``, else the ``DeviceQueue`` objects); the tasks whose key changed
        are recorded for the key order."""
        nd = self._n_devices
        f64 = lambda a: np.frombuffer(a, dtype=np.float64)
        state = self._state
        R, S, E, lk = f64(state.ready_time), f64(state.start_time), f64(state.end_time), f64(state.queue_key)
        where = np.frombuffer(state.queue_device, dtype=np.int64)
        dev = self._device_np
        key_changed = R[sub] != nR
        R[sub], S[sub], E[sub] = nR, nS, nE
        lk[sub] = nR
        kd = dev[sub][ko]
        by_dev = np.argsort(kd.astype(np.int16) if nd < 32768 else kd, kind="stable")  # radix sort
        ids_sorted = sub[ko][by_dev]
        r_sorted = nR[ko][by_dev]
        bounds = np.searchsorted(kd[by_dev], devs, side="left")
        ends = np.searchsorted(kd[by_dev], devs, side="right")
        queues = self._queue_set
        links = queues.links
        if links is not None:  # one call per device: cut at the sweep point, append the resumed tasks
            queues.links_changed()
            for d, lo, hi in zip(devs.tolist(), bounds.tolist(), ends.tolist()):
                self._kernels.cut_and_append(*links, d, lasts[d], ids_sorted[lo:hi])
        else:
            for d, lo, hi in zip(devs.tolist(), bounds.tolist(), ends.tolist()):
                queues.objects[d].cut_after(kr, kx)
                if hi > lo:
                    queues.objects[d].extend(r_sorted[lo:hi], ids_sorted[lo:hi])
        where[sub] = dev[sub]
        if self._order_cache is not None:  # tasks whose key changed: swept ones, resumed ones
            self._order_moved += [self._swept_rekeyed, sub[key_changed]]

    def _guarded_prefix_ok(self, final_of, dirtied, sw, R, ptr, idx, pptr, pidx) -> bool:
        """With zero durations, the checks that make the guarded sweep's tasks up to the sweep point
        what the engine pops first (package doc, "Zero durations and the resume"): no dirty task is
        left with a queue entry at or before the sweep point (its event would have fallen behind the
        sweep), and no edge between a processed task and a final task goes backwards in key order.
        ``final_of(ids)``: which of ``ids`` are final (a queue entry up to the sweep point)."""
        if dirtied.size:
            stv = np.frombuffer(self._state.sweep_status, dtype=np.int64)[dirtied]
            if bool(np.any(final_of(dirtied[(stv & 1) == 1]))):
                return False
        if not sw.size:
            return True
        for rows, other, out in ((gather_rows(ptr, idx, sw)) + (True,), (gather_rows(pptr, pidx, sw)) + (False,)):
            keep = final_of(other)
            x, y = sw[rows[keep]], other[keep]
            u, v = (x, y) if out else (y, x)
            if bool(np.any((R[v] < R[u]) | ((R[v] == R[u]) & (v < u)))):
                return False
        return True

    def _resume_costs_more(self, tasks: int) -> bool:
        """Is the plain full run the better fallback than resuming the engine on ``tasks`` tasks? When
        they are more than ``params.RESUME_MAX_SHARE`` of the live tasks, or the resume's cost model
        expects more than a full run (with ``RESUME_MAX_SHARE = 1`` the resume is always taken)."""
        return self._cost.resume_costs_more(tasks, self._n_live)

    def _warm(self) -> None:
        """Load (or compile) :func:`~simulator.engine.delta.kernels_numba.full_run` on a one-task graph,
        with the argument types of :meth:`_full`, so that the first timed full run measures the run
        and not the loading."""
        one, i64 = np.zeros(1), np.zeros(1, dtype=np.int64)
        self._kernels.full_run(one, np.zeros(1, dtype=np.int32), np.zeros(2, dtype=np.int64),
                          np.zeros(0, dtype=np.int64), 1, np.ones(1, dtype=bool), one.copy(), one.copy(),
                          one.copy(), one.copy(), i64.copy(), i64.copy(), i64.copy(), i64.copy(), i64.copy(),
                          False)

    def _full(self, count_changed: bool = False) -> int:
        """Full run of the engine of the same kind as the sweep; rebuilds the delta state from it. The
        compiled engine runs in place (:func:`~simulator.engine.delta.kernels_numba.full_run`: the
        state is its output); the Python engine is :func:`simulator.engine.core.simulate_arrays`,
        whose result is copied in (:meth:`_adopt`). With ``count_changed``, returns the live tasks
        whose start or end differ from the state before (new tasks count)."""
        t0 = time.perf_counter()
        n = len(self._duration)
        ptr, idx = self._csr_arrays()
        changed = self._full_nb(ptr, idx, count_changed) if self._engine == "numba" else None
        if changed is None:  # the Python engine, or a cycle (reported by task name)
            g = self._describe_graph
            describe = g.describe if (g is not None and n == g.num_tasks and self._n_live == n) else None
            try:
                res = simulate_arrays(self._duration_np, self._device_np, ptr, idx, self._n_devices, describe=describe,
                                      kernel=self._engine)
            except SimulationError as exc:
                self._broken = str(exc)
                raise
            changed = self._adopt(res.order.astype(np.int64), res.ready, res.start, res.end,
                                  float(res.makespan), count_changed)
        self._cost.record_full_run(time.perf_counter() - t0, n, self._n_live)
        return changed

    def _full_nb(self, ptr, idx, count_changed: bool):
        """The compiled full run in place (:func:`~simulator.engine.delta.kernels_numba.full_run`):
        times, queue devices and linked-list queues written into the state by the engine loop itself;
        the ``DeviceQueue`` objects are rebuilt from the lists when a Python path needs them. Returns the
        changed count, or None on a cycle."""
        n = len(self._duration)
        self._state.allocate(n, count_changed)
        links = self._queue_set.links_for_full_run(n, self._n_devices)
        state = self._state
        R, S, E, lk = (np.frombuffer(a, dtype=np.float64)
                       for a in (state.ready_time, state.start_time, state.end_time, state.queue_key))
        where = np.frombuffer(state.queue_device, dtype=np.int64)
        alive = self._alive_np
        order, changed, lossy, canonical, makespan = self._kernels.full_run(
            self._duration_np, self._device_np, ptr, idx, self._n_devices, alive, R, S, E, lk, where, *links, count_changed)
        del R, S, E, lk, where
        self._queue_set.filled_by_full_run(links, self._n_devices)
        if order.shape[0] != n:
            return None
        if self._n_live < n:
            order = order[alive[order]]
        self._lossy = bool(lossy)
        self._queue_set.from_compiled_run(order, self._device_np, self._n_devices)
        self._ran(order, makespan, canonical)
        return int(changed)

    def _ran(self, order, makespan, canonical) -> None:
        """Bookkeeping after a full run: makespan, canonicity, the key order for result()."""
        self._makespan = float(makespan) if self._n_live else 0.0
        self._canonical = bool(canonical)
        self._order_cache = order
        self._order_moved = []
        self._static.drop_orders()  # (the static re-sweep's orders: taken again when needed)

    def _adopt(self, order, ready, start, end, makespan, count_changed: bool = False) -> int:
        """Rebuild the delta state from a full run of the Python engine (pop ``order`` of all ids,
        tombstones included: isolated zero-duration tasks that changed nothing): the per-task arrays
        are overwritten in place when the id space kept its size (one copy each). With
        ``count_changed``, returns the live tasks whose start or end differ from the state before."""
        n = len(self._duration)
        alive = self._alive_np
        self._state.allocate(n, count_changed)
        if self._n_live < n:
            order = order[alive[order]]
        state = self._state
        R, S, E, lk = (np.frombuffer(a, dtype=np.float64)
                       for a in (state.ready_time, state.start_time, state.end_time, state.queue_key))
        where = np.frombuffer(state.queue_device, dtype=np.int64)
        if self._n_live < n:
            dead = ~alive
            ready, start, end = ready.copy(), start.copy(), end.copy()
            ready[dead] = start[dead] = end[dead] = NAN
        changed = 0
        if count_changed:  # NaN before (new, reused ids) != anything
            changed = int(np.count_nonzero(alive & ((start != S) | (end != E))))
        # start + dur == start with dur > 0: a duration lost to rounding, a zero duration in effect
        lossy = bool(np.any((end == start) & (self._duration_np > 0.0)))
        canonical = True
        if (self._zero_durations or lossy) and order.size > 1:
            r = ready[order]
            canonical = bool(np.all((r[1:] > r[:-1]) | ((r[1:] == r[:-1]) & (order[1:] > order[:-1]))))
        R[:] = ready
        lk[:] = ready
        S[:] = start
        E[:] = end
        where[:] = self._device_np
        if self._n_live < n:
            where[~alive] = -1
        del R, S, E, lk, where
        self._lossy = bool(lossy)
        self._queue_set.from_python_run(order, self._device_np, ready, self._n_devices)
        self._ran(order, makespan, canonical)
        return int(changed)
