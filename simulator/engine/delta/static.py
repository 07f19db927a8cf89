"""The static re-sweep (package doc, :mod:`simulator.engine.delta`, "Static re-sweep"): a duration
change re-timed in the old key order with every device's old order, verified as it goes against
Lemma 1, else handed untouched to the ordinary sweep. A mixin of
:class:`simulator.engine.delta.simulator.DeltaSimulator`."""
from __future__ import annotations

import math
import time

import numpy as np

from simulator.engine.delta import params
from simulator.engine.delta.stats import DeltaStats


def _static_kernels():
    """:mod:`simulator.engine.delta.kernels_static` (numba is installed when this is asked)."""
    import simulator.engine.delta.kernels_static as ks
    return ks


_NO_ORDER = np.zeros(0, dtype=np.int64)


class StaticResweepMixin:
    """:meth:`_resweep` of :class:`~simulator.engine.delta.simulator.DeltaSimulator`."""

    _static_skip = 0  # changes left before the next try (after failures: 1, 2, 4, ... up to 64)
    _static_fails = 0
    _rs_scratch = None
    _walk = None  # (order, inverse) for the dense walk, see _walk_order; None: taken when needed

    def _static_wanted(self) -> bool:
        """Try the static re-sweep on this change? Not with a work limit or a budget other than
        "auto" (tests and benchmarks that force the ordinary sweep's paths), nor while backing off
        after failures (a graph whose device orders change often: each try costs until its first
        pair out of order)."""
        if not params.STATIC_RESWEEP or self.max_work is not None or self.budget != "auto":
            return False
        if self._static_skip:
            self._static_skip -= 1
            return False
        return True

    def _static_failed(self) -> None:
        self._static_fails = min(self._static_fails + 1, 6)
        self._static_skip = (1 << self._static_fails) - 1

    def _scratch(self, n: int):
        """Per-task scratch of the compiled re-sweep, kept between changes (fresh pages cost ~1 ms
        on 346 k tasks when a change touches them all)."""
        sc = self._rs_scratch
        if sc is None or sc[0].shape[0] != n:
            # heap, marks, rr: a task at most once; the log (done, old R, S, E) of n more: the dense
            # walk re-times again (same values) the tasks the heap took before it
            hx, marks, rr = (np.empty(n, dtype=np.int64) for _ in range(3))
            hr = np.empty(n, dtype=np.float64)
            done = np.empty(2 * n, dtype=np.int64)
            oR, oS, oE = (np.empty(2 * n, dtype=np.float64) for _ in range(3))
            sc = self._rs_scratch = (hx, hr, marks, done, oR, oS, oE, rr)
        return sc

    def _walk_order(self, R, done, oR, k):
        """The order the dense walk follows: a topological order of the edges and of every device's
        queue (the key order when it was taken; it stays one while only static re-sweeps change the
        graph's timing, which keep the queues and edges), its inverse, and whether it is the key order
        before this change (the ``k`` tasks re-timed so far get their old ready times back while the
        key order is merged, :meth:`_current_order`)."""
        if self._walk is None:
            ids = done[:k]
            new = R[ids]  # (a copy: fancy indexing)
            R[ids] = oR[:k]
            order = self._current_order()
            R[ids] = new
            rank = np.empty(len(self._dur), dtype=np.int64)
            rank[order] = np.arange(order.size, dtype=np.int64)
            self._walk = (order, rank)
        order, rank = self._walk
        return order, rank, order is self._order_cache and not self._order_moved

    def _resweep_nb(self, t0, heap, dirtied, guard, stats, mk_lost):
        """The compiled static re-sweep of a duration change (``heap``: the changed tasks at their
        keys, marked dirty in ``dirtied``). Returns the change's :class:`DeltaStats`, or None when
        the check refused it or its time ran out: the state is then as it was (the changed tasks
        still marked), for the ordinary sweep."""
        ks = _static_kernels()
        qh, qt, qn, qp = self._links()
        n = len(self._dur)
        hx, hr, marks, done, oR, oS, oE, rr = self._scratch(n)
        hs = len(heap)
        if hs:
            hr[:hs] = [h[0] for h in heap]
            hx[:hs] = [h[1] for h in heap]
        n0 = len(dirtied)
        marks[:n0] = dirtied
        cnt = np.zeros(4, dtype=np.int64)
        cnt[ks.S_MARK] = n0
        flt = np.array([-math.inf, self._mk, 0.0, 0.0, -math.inf, -1.0, 0.0])
        sorted_ = False  # (only the dense walk checks whether the key order survives)
        heap_k = 0  # tasks the heap had re-timed when the dense walk took over (it re-times them again)
        f64 = lambda a: np.frombuffer(a, dtype=np.float64)  # noqa: E731 - views, dropped below
        R, S, E, lk = (f64(a) for a in (self._R, self._S, self._E, self._lk))
        st = np.frombuffer(self._st, dtype=np.int64)
        ptr, idx = self._csr_arrays()
        pptr, pidx = self._pred_csr()
        deadline = t0 + params.STATIC_BUDGET * self._t_full
        r0 = float(hr[0]) if hs else 0.0  # the first key re-timed
        stop = params.STATIC_DENSE_CHECK  # a pause after this many tasks: is the change dense?
        clock = time.perf_counter
        while True:
            status, hs = ks.resweep(R, S, E, self._dur_np, lk, st, ptr, idx, pptr, pidx, qn, qp, hr, hx, hs,
                                    marks, done, oR, oS, oE, rr, cnt, flt, stop, guard)
            if status != ks.PAUSED or clock() > deadline:
                break
            k = int(cnt[ks.S_PROC])
            first, rest = self._nb.count_after(lk, r0, float(hr[0]))
            if k >= params.STATIC_DENSE * max(int(first) - int(rest), 1):
                # it re-times most of the tasks it passes: walk all the rest in the old key order
                order, rank, is_key = self._walk_order(R, done, oR, k)
                heap_k = k
                pos = int(rank[marks[:n0]].min())  # nothing before the change's own tasks can change
                last = np.full(self._nd, -2, dtype=np.int64)
                sorted_ = is_key  # then: does the key order survive the change? (resweep_all checks)
                if pos:
                    flt[ks.G_PR], flt[ks.G_PX] = R[order[pos - 1]], order[pos - 1]
                while True:
                    status, pos = ks.resweep_all(R, S, E, self._dur_np, self._dev_np, lk, pptr, pidx, qp, order,
                                                 pos, pos + 65536, last, done, oR, oS, oE, rr, cnt, flt, guard)
                    if status != ks.PAUSED or clock() > deadline:
                        break
                break
            stop = 2 * k
        if status != ks.DONE:
            ks.undo(R, S, E, lk, st, marks, int(cnt[ks.S_MARK]), done, oR, oS, oE, int(cnt[ks.S_PROC]), n0)
            del R, S, E, lk, st
            self._static_failed()
            return None
        ks.clear(st, marks, int(cnt[ks.S_MARK]))
        del R, S, E, lk, st
        self._static_fails = 0
        self._q_stale = True  # the _Queue objects hold the old keys; the linked lists are current
        if flt[ks.G_LOSSY]:
            self._lossy = True
        nrr = int(cnt[ks.S_RR])
        if sorted_ and not flt[ks.G_UNSORTED]:
            pass  # the key order before the change is the key order after it
        elif self._order_cache is not None and nrr:
            self._order_moved.append(rr[:nrr].copy())  # merged into the key order when asked for
        emax = max(float(flt[ks.G_EMAX]), self._mk)
        self._mk = self._recompute_makespan() if (flt[ks.G_LOST] or mk_lost) else emax
        stats.retimed = int(cnt[ks.S_PROC]) - heap_k
        stats.changed = int(cnt[ks.S_CHANGED])
        stats.moved = nrr
        stats.static = True
        stats.wall_s = time.perf_counter() - t0
        return stats
