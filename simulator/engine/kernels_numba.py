"""Optional compiled kernel for :func:`simulator.engine.core.simulate_arrays` (``kernel="numba"``).

Install with the ``fast`` extra (``pip install execsim[fast]``, i.e. numba). The loop is the plain
FlexFlow loop of :mod:`simulator.engine.core` (Jia et al. 2019, Section 5.2, Algorithm 1) -- pop the ready
task with the smallest ``(ready_time, task_id)``, ``start = max(ready, free[device])``, ``end = start +
duration``, a successor's ready time is the max of its predecessors' ends (and at least 0) -- compiled
with numba, with the heap written out as a binary min-heap over (ready, id) pairs so ties break by id
exactly as ``heapq`` does on tuples (keys are unique because ids are). NaN and negative durations
follow the same comparisons as the Python loop (``e > ready`` is False for NaN). The pure-Python engine
stays the default and the reference; tests/test_engine_numba.py checks identical results (skipped
with a reason when numba is not installed).
"""
from __future__ import annotations

import numpy as np

try:
    import numba
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("kernel='numba' needs numba: install the optional extra, pip install 'execsim[fast]'") \
        from exc


@numba.njit(cache=True)
def _less(r1, t1, r2, t2):
    # tuple order (r, t): as heapq compares (ready, id); NaN ready never occurs (ready starts at 0.0
    # and only grows through ``e > ready``)
    return r1 < r2 or (r1 == r2 and t1 < t2)


@numba.njit(cache=True)
def _kernel(dur, dev, ptr, idx, nd, alive, qt, qp):
    """The loop. With ``qp`` of n entries (delta mode's full run, :mod:`simulator.engine.delta`) it
    also records, for each task with ``alive`` set, the one popped before it on its device (``qp``,
    -1 for the first; ``qt``: each device's last), and checks that the pop order of those tasks is
    key-sorted (returned as ``canonical``); with empty arrays it does neither (a predictable branch
    per pop). Two writes per task: linking forwards too (``qn``) cost 15 % more, a random write to
    the previous task. The times go to arrays allocated here (the caller copies them): a version
    writing the caller's arrays with the delta sweep's inlined heap helpers ran 2x slower on the
    346 k-task GPT-3 graph (which of the two cost what was not separated)."""
    n = dur.shape[0]
    links = qp.shape[0] > 0
    if links:
        qt[:] = -1
    canonical = True
    pr = 0.0
    px = -1
    indeg = np.zeros(n, dtype=np.int64)
    for k in range(idx.shape[0]):
        indeg[idx[k]] += 1
    ready = np.zeros(n, dtype=np.float64)
    start = np.zeros(n, dtype=np.float64)
    order = np.empty(n, dtype=np.int64)
    free = np.zeros(nd, dtype=np.float64)
    hr = np.empty(n, dtype=np.float64)  # heap keys: ready time, task id
    ht = np.empty(n, dtype=np.int64)
    size = 0
    for t in range(n):  # sources in id order: already a valid heap (all keys (0.0, id), ascending)
        if indeg[t] == 0:
            hr[size] = 0.0
            ht[size] = t
            size += 1
    m = 0
    while size > 0:
        r = hr[0]
        t = ht[0]
        size -= 1  # pop: move the last item to the root and sift it down
        if size > 0:
            lr = hr[size]
            lt = ht[size]
            i = 0
            while True:
                c = 2 * i + 1
                if c >= size:
                    break
                if c + 1 < size and _less(hr[c + 1], ht[c + 1], hr[c], ht[c]):
                    c += 1
                if _less(hr[c], ht[c], lr, lt):
                    hr[i] = hr[c]
                    ht[i] = ht[c]
                    i = c
                else:
                    break
            hr[i] = lr
            ht[i] = lt
        order[m] = t
        m += 1
        d = dev[t]
        s = free[d]
        if r > s:
            s = r
        e = s + dur[t]
        free[d] = e
        start[t] = s
        if links and alive[t]:
            if px != -1 and not _less(pr, px, r, t):
                canonical = False
            pr = r
            px = t
            qp[t] = qt[d]  # t follows device d's last task (qh, qn: filled in afterwards)
            qt[d] = t
        for k in range(ptr[t], ptr[t + 1]):
            w = idx[k]
            if e > ready[w]:
                ready[w] = e
            indeg[w] -= 1
            if indeg[w] == 0:  # push: sift up
                i = size
                size += 1
                rw = ready[w]
                while i > 0:
                    p = (i - 1) >> 1
                    if _less(rw, w, hr[p], ht[p]):
                        hr[i] = hr[p]
                        ht[i] = ht[p]
                        i = p
                    else:
                        break
                hr[i] = rw
                ht[i] = w
    return order[:m], ready, start, indeg, canonical


_NO_B = np.zeros(0, dtype=np.bool_)
_NO_I = np.zeros(0, dtype=np.int64)


def run_numba(dur, dev, ptr, idx, nd):
    """(order, ready, start, indeg left) for validated engine inputs (see simulator/engine/core.py)."""
    return _kernel(np.ascontiguousarray(dur, dtype=np.float64), np.ascontiguousarray(dev, dtype=np.int64),
                   np.ascontiguousarray(ptr, dtype=np.int64), np.ascontiguousarray(idx, dtype=np.int64),
                   int(nd), _NO_B, _NO_I, _NO_I)[:4]


def run_numba_links(dur, dev, ptr, idx, nd, alive, qt, qp):
    """:func:`run_numba` that also records the device order of the ``alive`` tasks (``qp``: the task
    popped before on the same device, ``qt``: each device's last) and says whether their pop order is
    key-sorted (delta mode's full run, ``simulator.engine.delta.kernels_numba.full_run``): (order,
    ready, start, indeg left, canonical). Arrays as the delta state holds them, no conversions."""
    return _kernel(dur, dev, ptr, idx, nd, alive, qt, qp)


@numba.njit(cache=True)
def _static_sweep(pi, pdev, q1, q2, durs, total, nd):
    E = np.zeros(total + 1, dtype=np.float64)  # E[total] = 0.0: "no predecessor"
    free = np.zeros(nd, dtype=np.float64)
    for k in range(pi.shape[0]):
        r = E[q1[k]]
        x = E[q2[k]]
        if x > r:
            r = x
        s = free[pdev[k]]
        if r > s:
            s = r
        e = s + durs[k]
        free[pdev[k]] = e
        E[pi[k]] = e
    return E


def static_sweep(pi, pdev, q1, q2, durs, total: int, nd: int) -> np.ndarray:
    """Ends of the static-order sweep of :func:`simulator.engine.static_order.static_order_timeline` (same loop,
    same IEEE operations in the same order, so the same bits; tests/test_engine_numba.py)."""
    return _static_sweep(pi, pdev, q1, q2, np.ascontiguousarray(durs, dtype=np.float64), int(total), max(int(nd), 1))
