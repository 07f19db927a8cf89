"""Optional compiled static re-sweep for :class:`simulator.engine.delta.simulator.DeltaSimulator` (extra
``fast``, i.e. numba): the loop of :meth:`~simulator.engine.delta.static.StaticResweep.resweep_py`
compiled, for duration changes (package doc of :mod:`simulator.engine.delta`, "Static re-sweep").

The tasks whose inputs changed are re-timed in the *old* key order (a heap over the keys they had
before the change), each with the device predecessor it had before (the linked-list queues ``qp`` /
``qn`` of :mod:`simulator.engine.delta.kernels_numba`, unchanged): no queue entry moves, so a task costs
one heap push and pop and the model equations. As it goes the loop checks what Lemma 1 needs for
the result to be the engine's: every device's tasks still in key order under the new keys, and (with
zero or rounding-lossy durations, ``guard``) every edge at a re-timed task forward in key order. The
first pair out of order stops it (``FAIL``) and every value it wrote is put back, so the caller runs
the ordinary sweep on an untouched state. Same IEEE operations as the engine (``max``, one addition
per task), so the same bits.
"""
from __future__ import annotations

import numpy as np

try:
    import numba
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("the compiled delta sweep needs numba: pip install 'execsim[fast]'") from exc

from simulator.engine.delta.kernels_numba import before, heap_pop, heap_push, ready_of

DONE, PAUSED, FAIL, LOSSY = 0, 1, 2, 3
# cnt slots (int64): tasks marked (``marks``), processed (``done``), changed, tasks whose key changed
# (``rr``); flt slots: largest new end, old makespan, an end at the makespan decreased (0/1), 1.0 once
# a positive duration was lost to rounding (guarded)
S_MARK, S_PROC, S_CHANGED, S_RR = 0, 1, 2, 3
# (:func:`resweep_all`) the key (ready, id) of the task met last, 1.0 once two tasks met one after
# the other are out of key order (the key order changed)
G_EMAX, G_MK0, G_LOST, G_LOSSY, G_PR, G_PX, G_UNSORTED = 0, 1, 2, 3, 4, 5, 6


@numba.njit(cache=True, inline="always")
def _mark(st, marks, hr, hx, hs, nm, R, z):
    """Queue task ``z`` at its old key (once): returns (hs, nm)."""
    if st[z] == 0:
        st[z] = 1
        marks[nm] = z
        nm += 1
        hs = heap_push(hr, hx, hs, R[z], z)
    return hs, nm


@numba.njit(cache=True, inline="always")
def _tied(R, E, pptr, pidx, x, nrx):
    """Does an edge into x go backwards in key order with x's new ready time ``nrx``? Only a
    predecessor that ends at ``nrx`` and is ready then (a zero or lost duration) can tie."""
    for j in range(pptr[x], pptr[x + 1]):
        u = pidx[j]
        if E[u] == nrx and not before(R[u], u, nrx, x):
            return True
    return False


@numba.njit(cache=True)
def lower_bound(order, R, r, x):
    """The first position of ``order`` (sorted by key ``(R, id)``) whose key is not below (r, x)."""
    lo = 0
    hi = order.shape[0]
    while lo < hi:
        mid = (lo + hi) >> 1
        y = order[mid]
        if before(R[y], y, r, x):
            lo = mid + 1
        else:
            hi = mid
    return lo


@numba.njit(cache=True)
def resweep(R, S, E, dur, lk, st, sptr, sidx, pptr, pidx, qn, qp, hr, hx, hs, marks, done, oR, oS, oE,
            rr, cnt, flt, stop, guard):
    """Re-time the marked tasks (``st == 1``, listed in ``marks``) in old key order: they come from
    the heap ``hr``/``hx`` of size ``hs`` (keys before the change). Returns (status, hs): DONE,
    PAUSED (``cnt[S_PROC] >= stop``; call again, or go on with :func:`resweep_all`), FAIL (a device
    or an edge out of key order), LOSSY (a positive duration lost to rounding without ``guard``):
    then the caller puts the state back (:func:`undo`). ``done``/``oR``/``oS``/``oE``: the
    processed tasks in order with their old values (for :func:`undo`); ``rr``: those whose key
    changed."""
    nm = cnt[S_MARK]
    k = cnt[S_PROC]
    changed = cnt[S_CHANGED]
    nrr = cnt[S_RR]
    emax = flt[G_EMAX]
    mk0 = flt[G_MK0]
    status = DONE
    while hs > 0:
        if k >= stop:
            status = PAUSED
            break
        r = hr[0]
        x = hx[0]
        hs = heap_pop(hr, hx, hs)
        # the model equations with the old device predecessor (Lemma 1's, if the keys agree)
        nrx = ready_of(x, pptr, pidx, E)
        if guard and _tied(R, E, pptr, pidx, x, nrx):
            status = FAIL
            break
        pv = qp[x]
        pe = 0.0
        if pv != -1:
            if not before(lk[pv], pv, nrx, x):  # the device's order would change
                status = FAIL
                break
            pe = E[pv]
        s = nrx if nrx > pe else pe
        e = s + dur[x]
        if e == s and dur[x] > 0.0:
            if not guard:
                status = LOSSY
                break
            flt[G_LOSSY] = 1.0
        s0 = S[x]
        e0 = E[x]
        done[k] = x
        oR[k] = r
        oS[k] = s0
        oE[k] = e0
        k += 1
        st[x] = 2
        R[x] = nrx
        lk[x] = nrx
        S[x] = s
        E[x] = e
        if nrx != r:
            rr[nrr] = x
            nrr += 1
        if s != s0 or e != e0:
            changed += 1
        if e > emax:
            emax = e
        if e0 == mk0 and e < e0:
            flt[G_LOST] = 1.0
        z = qn[x]
        if e != e0:  # the successors' ready times and the device successor's start may change
            for j in range(sptr[x], sptr[x + 1]):
                hs, nm = _mark(st, marks, hr, hx, hs, nm, R, sidx[j])
            if z != -1:
                hs, nm = _mark(st, marks, hr, hx, hs, nm, R, z)
        else:
            # nothing propagates; the keys of the unqueued neighbours are final unless one is
            # queued later (then its own check covers the pair): check the pairs now
            if z != -1 and st[z] == 0 and not before(nrx, x, lk[z], z):
                status = FAIL
                break
            if guard:
                for j in range(sptr[x], sptr[x + 1]):
                    v = sidx[j]
                    if st[v] == 0 and not before(nrx, x, R[v], v):
                        status = FAIL
                        break
                if status == FAIL:
                    break
    cnt[S_MARK] = nm
    cnt[S_PROC] = k
    cnt[S_CHANGED] = changed
    cnt[S_RR] = nrr
    flt[G_EMAX] = emax
    return status, hs


@numba.njit(cache=True)
def resweep_all(R, S, E, dur, dev, lk, pptr, pidx, qp, order, pos, stop, last, done, oR, oS, oE, rr, cnt,
                flt, guard):
    """Re-time every task of ``order`` (the key order before the change) from position ``pos`` on,
    with the model equations and the same checks as :func:`resweep` (the device predecessor is the
    task met last on the device, ``last[d]``, -2 before the first: then the old list's ``qp``). No
    heap and no marks: for a change that re-times most of what follows it. Pauses at position
    ``stop``; returns (status, pos); the processed tasks are logged after those of :func:`resweep`.
    Also says whether ``order`` stays sorted under the new keys (``G_PR``/``G_PX``: the key met last,
    ``G_UNSORTED``). The body repeats :func:`resweep`'s on purpose: the model equations and the
    log as inlined helpers returning tuples made both loops 4-6x slower (numba; measured on the
    GPT-3 graph of benchmarks/delta.py), as the ordinary sweep found for its own helpers."""
    k = cnt[S_PROC]
    pr = flt[G_PR]
    px = np.int64(flt[G_PX])
    changed = cnt[S_CHANGED]
    nrr = cnt[S_RR]
    emax = flt[G_EMAX]
    mk0 = flt[G_MK0]
    status = DONE
    end = min(stop, order.shape[0])
    if pos >= order.shape[0]:
        status = DONE
    elif end < order.shape[0]:
        status = PAUSED
    while pos < end:
        x = order[pos]
        r = R[x]
        nrx = ready_of(x, pptr, pidx, E)
        if guard and _tied(R, E, pptr, pidx, x, nrx):
            status = FAIL
            break
        d = dev[x]
        pv = last[d]
        if pv == -2:
            pv = qp[x]
        pe = 0.0
        if pv != -1:
            if not before(lk[pv], pv, nrx, x):
                status = FAIL
                break
            pe = E[pv]
        s = nrx if nrx > pe else pe
        e = s + dur[x]
        if e == s and dur[x] > 0.0:
            if not guard:
                status = LOSSY
                break
            flt[G_LOSSY] = 1.0
        s0 = S[x]
        e0 = E[x]
        done[k] = x
        oR[k] = r
        oS[k] = s0
        oE[k] = e0
        k += 1
        R[x] = nrx
        lk[x] = nrx
        S[x] = s
        E[x] = e
        last[d] = x
        if not before(pr, px, nrx, x):
            flt[G_UNSORTED] = 1.0
        pr = nrx
        px = x
        if nrx != r:
            rr[nrr] = x
            nrr += 1
        if s != s0 or e != e0:
            changed += 1
        if e > emax:
            emax = e
        if e0 == mk0 and e < e0:
            flt[G_LOST] = 1.0
        pos += 1
    cnt[S_PROC] = k
    cnt[S_CHANGED] = changed
    cnt[S_RR] = nrr
    flt[G_EMAX] = emax
    flt[G_PR] = pr
    flt[G_PX] = px
    return status, pos


@numba.njit(cache=True)
def key_sorted_range(order, R, lo, hi):
    """Is ``order[lo:hi]`` sorted by key (ready, id)?"""
    for i in range(lo + 1, hi):
        a = order[i - 1]
        b = order[i]
        if not before(R[a], a, R[b], b):
            return False
    return True


@numba.njit(cache=True)
def undo(R, S, E, lk, st, marks, nm, done, oR, oS, oE, k, seeds):
    """Put back the values of the ``k`` processed tasks and clear the marks of all ``nm`` marked
    tasks, except the first ``seeds`` (the change's own tasks), which stay queued (``st == 1``) for
    the ordinary sweep."""
    for i in range(k - 1, -1, -1):
        x = done[i]
        R[x] = oR[i]
        lk[x] = oR[i]
        S[x] = oS[i]
        E[x] = oE[i]
    for i in range(nm):
        st[marks[i]] = 1 if i < seeds else 0


@numba.njit(cache=True)
def clear(st, marks, nm):
    for i in range(nm):
        st[marks[i]] = 0


@numba.njit(cache=True)
def fix_ties(order, R):
    """Sort by id each run of equal ready times in ``order`` (sorted by ready time, stably from an
    older order), in place: then it is sorted by key (ready, id)."""
    n = order.shape[0]
    i = 0
    while i < n:
        j = i + 1
        r = R[order[i]]
        ok = True
        while j < n and R[order[j]] == r:
            if order[j] < order[j - 1]:
                ok = False
            j += 1
        if not ok:
            order[i:j] = np.sort(order[i:j])
        i = j
