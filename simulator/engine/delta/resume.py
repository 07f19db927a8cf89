"""Full runs and what replaces a sweep that gives up (package doc, :mod:`simulator.engine.delta`,
"Fallback"): the full run and the state rebuilt from it, the fallback, the engine resumed from the
sweep point and its cost model, and the CSR arrays they hand to the engine. A mixin of
:class:`simulator.engine.delta.simulator.DeltaSimulator`."""
from __future__ import annotations

import time
from array import array

import numpy as np

from simulator.engine.core import simulate_arrays
from simulator.engine.delta import params
from simulator.engine.delta.queues import _gather, _Groups, _Queue
from simulator.engine.delta.stats import _NAN, DeltaStats, _zeros
from strategies.errors import SimulationError


class ResumeMixin:
    """Full runs, fallback and resume of :class:`~simulator.engine.delta.simulator.DeltaSimulator`."""

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
        if sub.size > params.RESUME_MAX_SHARE * self._n_live:
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
        if s_dst.size and int(new_id[s_dst].min()) < 0:  # cannot happen (package doc); be safe
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
