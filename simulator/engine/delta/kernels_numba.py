"""Optional compiled sweep for :class:`simulator.engine.delta.simulator.DeltaSimulator` (extra ``fast``, i.e. numba).

The same event loop as ``PythonSweep.sweep`` (the package doc of :mod:`simulator.engine.delta` gives the
algorithm and its proof: FlexFlow's delta simulation, Jia et al. 2019 Section 5.3, made exact for the
FIFO engine), for the changes it is used for (``set_durations``, ``set_devices``), with the
zero-duration guards of the Python loop when the timeline has zero (or rounding-lossy) durations
(``guard``). Only the data structures differ:

* each device queue is a doubly linked list in key order ``(lk[x], x)`` (``qn``/``qp`` per task,
  ``qh``/``qt`` per device) instead of chunked Python lists; an insert searches from a nearby entry
  (the task's old neighbour, or the last entry the sweep placed on that device, ``cur``), so a
  search walks the entries the task moves past;
* the event heap is a binary min-heap over ``(ready, id)`` pairs in two arrays, ordered exactly as
  ``heapq`` orders the tuples;
* successors and predecessors come from CSR arrays.

Every floating-point operation is the Python loop's (``max``, one addition per task), so the new
timeline is the same bits; tests/test_delta.py runs both sweeps on the same changes and compares them.
The loop stops (``PAUSED``) every ``stop_work`` units of work so that the caller can read the clock
and apply the same cost model as the Python sweep (numba has no clock); the heap and counters carry
over between calls.
"""
from __future__ import annotations

import numpy as np

try:
    import numba
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("the compiled delta sweep needs numba: pip install 'execsim[fast]'") from exc

from simulator.engine.kernels_numba import run_numba_links

DONE, PAUSED, LIMIT, LOSSY, TIE, OVERFLOW = 0, 1, 2, 3, 4, 5
# cnt slots (int64): dirtied count, processed, changed, moved, vacated, work, tasks in ``rr`` (the
# processed tasks whose ready time changed)
C_DIRT, C_PROC, C_CHANGED, C_MOVED, C_VAC, C_WORK, C_RR = 0, 1, 2, 3, 4, 5, 6
# flt slots (float64): largest new end, old makespan, an end at the makespan decreased (0/1),
# sweep point (ready, id) of the last event handled, the task whose duration was lost to rounding,
# (guarded) the key (ready, id) of the last event popped that was not stale, and 1.0 once a
# positive duration was lost to rounding
F_EMAX, F_MK0, F_LOST, F_AT_R, F_AT_X, F_BAD, F_KR, F_KX, F_LOSSY = 0, 1, 2, 3, 4, 5, 6, 7, 8


@numba.njit(cache=True, inline="always")
def before(r1, x1, r2, x2):
    return r1 < r2 or (r1 == r2 and x1 < x2)


@numba.njit(cache=True, inline="always")
def heap_push(hr, hx, hs, r, x):
    """Push (r, x); returns the new size. The caller sizes the arrays for every push of a sweep
    (:func:`heap_capacity`), so nothing is reallocated (no array is returned: no reference counting
    in the loop). Past the capacity nothing is written and the size still grows, so the loop sees
    ``hs > capacity`` and stops with OVERFLOW (a full run follows: never a wrong answer)."""
    if hs >= hr.shape[0]:
        return hs + 1
    i = hs
    while i > 0:
        p = (i - 1) >> 1
        if before(r, x, hr[p], hx[p]):
            hr[i] = hr[p]
            hx[i] = hx[p]
            i = p
        else:
            break
    hr[i] = r
    hx[i] = x
    return hs + 1


def heap_capacity(initial: int, tasks: int, edges: int) -> int:
    """An upper bound on the events one sweep pushes (so on the heap's size): each task is marked
    dirty at most once (its queue entry pushed) and is a seed at most once; each edge causes at most
    one relocation push when its source is processed, one release push, and one blocking push."""
    return initial + 2 * tasks + 3 * edges + 16


@numba.njit(cache=True, inline="always")
def heap_pop(hr, hx, hs):
    """Remove the root; returns the new size (the root must be read before)."""
    hs -= 1
    if hs > 0:
        lr = hr[hs]
        lx = hx[hs]
        i = 0
        while True:
            c = 2 * i + 1
            if c >= hs:
                break
            if c + 1 < hs and before(hr[c + 1], hx[c + 1], hr[c], hx[c]):
                c += 1
            if before(hr[c], hx[c], lr, lx):
                hr[i] = hr[c]
                hx[i] = hx[c]
                i = c
            else:
                break
        hr[i] = lr
        hx[i] = lx
    return hs


@numba.njit(cache=True, inline="always")
def _unlink(qh, qt, qn, qp, d, x):
    """Take x out of device d's list; returns the id that followed it (-1: none)."""
    p = qp[x]
    c = qn[x]
    if p != -1:
        qn[p] = c
    else:
        qh[d] = c
    if c != -1:
        qp[c] = p
    else:
        qt[d] = p
    return c


@numba.njit(cache=True, inline="always")
def _insert(qh, qt, qn, qp, lk, d, r, x, start):
    """Put x at key (r, x) in device d's list, searching from entry ``start`` of d (-1: the head);
    returns (id before, id after), -1 = none. lk[x] is not written."""
    p = start
    while p != -1 and not before(lk[p], p, r, x):
        p = qp[p]
    c = qh[d] if p == -1 else qn[p]
    while c != -1 and before(lk[c], c, r, x):
        p = c
        c = qn[c]
    if p == -1:
        qh[d] = x
    else:
        qn[p] = x
    qp[x] = p
    qn[x] = c
    if c != -1:
        qp[c] = x
    else:
        qt[d] = x
    return p, c


@numba.njit(cache=True, inline="always")
def ready_of(y, pptr, pidx, E):
    """Ready time of y: the latest end of its predecessors (0.0 without any)."""
    new = 0.0
    for j in range(pptr[y], pptr[y + 1]):
        ep = E[pidx[j]]
        if ep > new:
            new = ep
    return new


@numba.njit(cache=True)
def build_links(ids, bounds, n, nd):
    """Linked lists from the ids of each device in key order (``ids[bounds[d]:bounds[d + 1]]``)."""
    qn = np.full(n, -1, dtype=np.int64)
    qp = np.full(n, -1, dtype=np.int64)
    qh = np.full(nd, -1, dtype=np.int64)
    qt = np.full(nd, -1, dtype=np.int64)
    for d in range(nd):
        a = bounds[d]
        b = bounds[d + 1]
        if b > a:
            qh[d] = ids[a]
            qt[d] = ids[b - 1]
            for k in range(a, b - 1):
                qn[ids[k]] = ids[k + 1]
                qp[ids[k + 1]] = ids[k]
    return qh, qt, qn, qp


@numba.njit(cache=True)
def dump_links(qh, qn, nd, count):
    """The lists as (ids of each device in key order, bounds): the inverse of :func:`build_links`."""
    ids = np.empty(count, dtype=np.int64)
    bounds = np.zeros(nd + 1, dtype=np.int64)
    k = 0
    for d in range(nd):
        x = qh[d]
        while x != -1:
            if k == count:
                raise ValueError("delta queues: more linked entries than queued tasks")
            ids[k] = x
            k += 1
            x = qn[x]
        bounds[d + 1] = k
    return ids[:k], bounds


@numba.njit(cache=True)
def last_upto(qt, qp, lk, d, kr, kx):
    """Id of device d's last entry with key <= (kr, kx), or -1 (walks back from the tail)."""
    x = qt[d]
    while x != -1 and before(kr, kx, lk[x], x):
        x = qp[x]
    return x


@numba.njit(cache=True)
def cut_and_append(qh, qt, qn, qp, d, last, ids):
    """Drop device d's entries after ``last`` (-1: all) and append ``ids`` (key order, all later)."""
    p = last
    if p == -1:
        qh[d] = -1
    else:
        qn[p] = -1
    qt[d] = p
    for k in range(ids.shape[0]):
        x = ids[k]
        qp[x] = p
        qn[x] = -1
        if p == -1:
            qh[d] = x
        else:
            qn[p] = x
        p = x
    qt[d] = p


@numba.njit(cache=True)
def sweep(R, S, E, lk, where, st, nr, pend, oS, oE, dur, dev, sptr, sidx, pptr, pidx,
          qh, qt, qn, qp, cur, hr, hx, hs, dirt, cnt, flt, stop_work, limit, guard, rr):
    """``PythonSweep.sweep``. Returns (status, hs); the heap arrays hold :func:`heap_capacity`
    entries.

    Arguments, in groups: the state's ten arrays in :class:`~simulator.engine.delta.state.DeltaState`'s
    field order (``R`` ready_time, ``S`` start_time, ``E`` end_time, ``lk`` queue_key, ``where``
    queue_device, ``st`` sweep_status, ``nr`` new_ready, ``pend`` pending_preds, ``oS`` / ``oE``
    old_start / old_end: :meth:`DeltaState.views` gives them in this order); the graph (durations,
    devices, successor and predecessor CSR); the linked-list queues (``qh``/``qt`` head and tail per
    device, ``qn``/``qp`` next and previous per task) and ``cur``; the event heap (``hr``, ``hx``,
    size ``hs``); then the per-call counters and limits. The driver
    (``CompiledSweep.sweep``) builds the fixed groups once per change and passes them as
    one tuple.

    One long function on purpose: numba compiles it as one loop, and the Python loop's helpers
    (``mark_queue``, ``block_successors``, ``relocate``) are written out where they occur (see the
    last paragraph), so it keeps the ~120-line limit's exemption for compiled kernels.

    guard: the timeline has zero (or rounding-lossy) durations: the Python loop's guards run (an
    event behind the sweep point, a task behind it relocated, an input change of a processed task:
    TIE) and a task whose positive duration is lost to rounding is allowed (``F_LOSSY`` set);
    without ``guard`` a lost duration stops the loop (LOSSY). The processed tasks whose ready time
    changed are written to ``rr`` (count ``cnt[C_RR]``): the caller's backward-edge check
    (:func:`backward_edge`) and the patch of the global key order use them.

    st: 0 clean, 1 dirty, 3 dirty and unresolved, 2 done (see the Python loop). ``cur[d]``: the last
    entry placed at the sweep point on device d (final, so a valid place to search from), -1 none.
    Stops before the next event once ``work >= stop_work`` (PAUSED), and, as the Python loop, in the
    middle of the event that makes ``work == limit`` (LIMIT; ``limit`` < 0: none).

    ``mark_queue`` and ``block_successors`` of the Python loop are written out where they occur:
    as inlined helpers returning (nmark, hs) they made the sweep 1.6x slower (measured on the
    benchmarks/delta.py pipeline: 26 -> 42 ms for a change that re-times every task)."""
    mk0 = flt[F_MK0]
    emax = flt[F_EMAX]
    lost = flt[F_LOST] != 0.0
    processed = cnt[C_PROC]
    changed = cnt[C_CHANGED]
    moved = cnt[C_MOVED]
    vacated = cnt[C_VAC]
    work = cnt[C_WORK]
    nmark = cnt[C_DIRT]
    nrr = cnt[C_RR]
    kr = flt[F_KR]
    kx = np.int64(flt[F_KX])
    status = DONE
    cap = hr.shape[0]
    while hs > 0:
        if hs > cap:
            status = OVERFLOW
            break
        if work >= stop_work:
            status = PAUSED
            break
        r = hr[0]
        x = hx[0]
        hs = heap_pop(hr, hx, hs)
        sx = st[x]
        if not sx & 1:
            continue  # clean or done: a stale event
        if guard:
            if before(r, x, kr, kx):  # zero-duration tie: an event fell behind the sweep
                status = TIE
                break
            kr = r
            kx = x
        if pend[x] == 0 and nr[x] == r:
            # ---- process x at its final key (r, x)
            d = dev[x]
            w = where[x]
            if w != -1 and (w != d or lk[x] != r):
                z = _unlink(qh, qt, qn, qp, w, x)
                if z != -1:  # mark_queue(z)
                    sz = st[z]
                    if sz == 0:
                        st[z] = 1
                        dirt[nmark] = z
                        nmark += 1
                        nr[z] = R[z]
                        hs = heap_push(hr, hx, hs, R[z], z)
                    elif sz == 2:
                        status = TIE
                        break
                w = -1
            if w != -1:
                pv = qp[x]
                z = qn[x]
            else:
                pv, z = _insert(qh, qt, qn, qp, lk, d, r, x, cur[d])
            cur[d] = x
            pe = E[pv] if pv != -1 else 0.0
            s = r if r > pe else pe
            e = s + dur[x]
            if e == s and dur[x] > 0.0:
                if not guard:  # the unguarded argument needs E > S
                    flt[F_BAD] = x
                    status = LOSSY
                    break
                flt[F_LOSSY] = 1.0
            oe = E[x]
            if w == -1:
                where[x] = d
                lk[x] = r
                mark_next = True
            else:
                mark_next = e != oe
            if R[x] != r:
                moved += 1
                rr[nrr] = x
                nrr += 1
            if e != oe or s != S[x]:
                changed += 1
                if e > emax:
                    emax = e
                if oe >= mk0 and e < oe:
                    lost = True
            oS[x] = S[x]
            oE[x] = oe
            R[x] = r
            S[x] = s
            E[x] = e
            st[x] = 2
            processed += 1
            work += 1
            flt[F_AT_R] = r
            flt[F_AT_X] = x
            if work == limit:  # as the Python loop: stop here, the resume takes the rest
                status = LIMIT
                break
            if mark_next and z != -1:
                sz = st[z]
                if sz == 0:
                    st[z] = 1
                    dirt[nmark] = z
                    nmark += 1
                    nr[z] = R[z]
                    hs = heap_push(hr, hx, hs, R[z], z)
                elif sz == 2:
                    status = TIE
                    break
            bad = False
            for k in range(sptr[x], sptr[x + 1]):
                y = sidx[k]
                sy = 0
                new = 0.0
                if sx == 3:  # x was unresolved: release its successors
                    c = pend[y] - 1
                    pend[y] = c
                    if c != 0:
                        continue
                    new = ready_of(y, pptr, pidx, E)
                    if not (where[y] != -1 and lk[y] != new):
                        nr[y] = new
                        hs = heap_push(hr, hx, hs, new, y)
                        continue
                    sy = st[y]
                elif e != oe:
                    if pend[y]:
                        continue  # its ready time is computed when it is released
                    sy = st[y]
                    if sy == 0:
                        cur_r = R[y]
                    elif sy == 2:
                        bad = True
                        break
                    else:
                        cur_r = nr[y]
                    if e > cur_r:
                        new = e
                    elif e == cur_r or oe != cur_r:
                        continue  # ready time unchanged
                    else:  # the old maximum decreased: recompute
                        new = ready_of(y, pptr, pidx, E)
                        if new == cur_r:
                            continue
                    if sy == 0:
                        st[y] = 1
                        dirt[nmark] = y
                        nmark += 1
                else:
                    break
                # ---- relocate(y, new, sy): y (pend 0) gets the new ready time: move its entry now
                nr[y] = new
                wy = where[y]
                dy = dev[y]
                if wy == dy and lk[y] == new:
                    hs = heap_push(hr, hx, hs, new, y)
                    continue
                if guard and wy != -1 and before(lk[y], y, kr, kx):
                    bad = True  # zero-duration tie: a task behind the sweep changed
                    break
                z1 = -1
                z2 = -1
                if wy == dy:
                    # Q.move: rewrite the key when the neighbours stay, else remove and insert
                    p0 = qp[y]
                    n0 = qn[y]
                    ok = p0 == -1 or before(lk[p0], p0, new, y)
                    if ok:
                        ok = n0 == -1 or before(new, y, lk[n0], n0)
                    if not ok:
                        z1 = _unlink(qh, qt, qn, qp, dy, y)
                        start = p0 if p0 != -1 else n0
                        _, z2 = _insert(qh, qt, qn, qp, lk, dy, new, y, start)
                else:
                    if wy != -1:
                        z1 = _unlink(qh, qt, qn, qp, wy, y)
                    _, z2 = _insert(qh, qt, qn, qp, lk, dy, new, y, cur[dy])
                    where[y] = dy
                for z in (z1, z2):
                    if z >= 0:
                        sz = st[z]
                        if sz == 0:
                            st[z] = 1
                            dirt[nmark] = z
                            nmark += 1
                            nr[z] = R[z]
                            hs = heap_push(hr, hx, hs, R[z], z)
                        elif sz == 2:
                            bad = True
                if bad:
                    break
                lk[y] = new
                hs = heap_push(hr, hx, hs, new, y)
                if sy != 3 and new >= E[y]:
                    st[y] = 3
                    # block_successors(y): y may be processed after its successors' keys
                    for k2 in range(sptr[y], sptr[y + 1]):
                        v = sidx[k2]
                        pend[v] += 1
                        sv = st[v]
                        if sv == 0:
                            st[v] = 1
                            dirt[nmark] = v
                            nmark += 1
                            if where[v] != -1:
                                hs = heap_push(hr, hx, hs, lk[v], v)
                        elif sv == 2:
                            bad = True
                            break
                    if bad:
                        break
            if bad:
                status = TIE
                break
        elif where[x] != -1 and lk[x] == r:
            # ---- vacate: x's entry is at the sweep point but x cannot be processed here
            z = _unlink(qh, qt, qn, qp, where[x], x)
            where[x] = -1
            if z != -1:
                sz = st[z]
                if sz == 0:
                    st[z] = 1
                    dirt[nmark] = z
                    nmark += 1
                    nr[z] = R[z]
                    hs = heap_push(hr, hx, hs, R[z], z)
                elif sz == 2:
                    status = TIE
                    break
            vacated += 1
            work += 1
            flt[F_AT_R] = r
            flt[F_AT_X] = x
            if work == limit:
                status = LIMIT
                break
            if sx != 3:
                st[x] = 3
                bad = False
                for k2 in range(sptr[x], sptr[x + 1]):
                    v = sidx[k2]
                    pend[v] += 1
                    sv = st[v]
                    if sv == 0:
                        st[v] = 1
                        dirt[nmark] = v
                        nmark += 1
                        if where[v] != -1:
                            hs = heap_push(hr, hx, hs, lk[v], v)
                    elif sv == 2:
                        bad = True
                        break
                if bad:
                    status = TIE
                    break
        # else: a stale event
    cnt[C_DIRT] = nmark
    cnt[C_PROC] = processed
    cnt[C_CHANGED] = changed
    cnt[C_MOVED] = moved
    cnt[C_VAC] = vacated
    cnt[C_WORK] = work
    cnt[C_RR] = nrr
    flt[F_KR] = kr
    flt[F_KX] = kx
    flt[F_EMAX] = emax
    flt[F_LOST] = 1.0 if lost else 0.0
    return status, hs


@numba.njit(cache=True)
def backward_edge(tasks, R, sptr, sidx, pptr, pidx):
    """``sweep.backward_edge`` over ``tasks`` (existing edges only): the first edge at one
    of them that goes backwards in (ready, id) order, as (u, v), or (-1, -1)."""
    for k in range(tasks.shape[0]):
        x = tasks[k]
        rx = R[x]
        for j in range(sptr[x], sptr[x + 1]):
            v = sidx[j]
            if before(R[v], v, rx, x):
                return x, v
        for j in range(pptr[x], pptr[x + 1]):
            u = pidx[j]
            if before(rx, x, R[u], u):
                return u, x
    return -1, -1


@numba.njit(cache=True)
def any_lossy(start, end, dur):
    """Does a task end when it starts with a positive duration (lost to rounding)? NaN: no."""
    for i in range(dur.shape[0]):
        if end[i] == start[i] and dur[i] > 0.0:
            return True
    return False


@numba.njit(cache=True)
def count_after(lk, r0, r):
    """The entries of ``lk`` above ``r0`` and above ``r``, in one pass without a temporary (the
    pace rule's counts, :meth:`~simulator.engine.delta.simulator.DeltaSimulator._delta`; NaN, an
    id that is no queue entry, counts in neither, as with ``np.count_nonzero(lk > r)``)."""
    a = 0
    b = 0
    for k in range(lk.shape[0]):
        v = lk[k]
        if v > r0:
            a += 1
        if v > r:
            b += 1
    return a, b


@numba.njit(cache=True)
def transpose_csr(ptr, idx):
    """The predecessor CSR ``(pptr, src)`` of the successor CSR ``(ptr, idx)``: a counting sort of the
    edges by head, stable in (tail, position in the tail's row) -- the arrays
    ``np.argsort(idx, kind="stable")`` gives (``ResumeMixin._pred_csr``), in two passes over the
    edges instead of a comparison sort (2.5-3.3 ms on the 103 k-task pipeline's edges after a task
    replacement, when the resume needs it)."""
    n = ptr.shape[0] - 1
    pptr = np.zeros(n + 1, dtype=np.int64)
    for k in range(idx.shape[0]):
        pptr[idx[k] + 1] += 1
    for v in range(n):
        pptr[v + 1] += pptr[v]
    fill = pptr[:n].copy()
    src = np.empty(idx.shape[0], dtype=np.int64)
    for u in range(n):
        for k in range(ptr[u], ptr[u + 1]):
            v = idx[k]
            src[fill[v]] = u
            fill[v] += 1
    return pptr, src


@numba.njit(cache=True)
def key_sorted(order, ready):
    """Is the pop ``order`` sorted by key (ready, id)? (The timeline is then canonical.)"""
    for k in range(1, order.shape[0]):
        a = order[k - 1]
        b = order[k]
        if not before(ready[a], a, ready[b], b):
            return False
    return True


@numba.njit(cache=True, inline="always")
def _append_tail(qh, qt, qn, qp, d, x):
    """Append task ``x`` at the tail of device ``d``'s linked-list queue (``qn`` already -1 at x)."""
    p = qt[d]
    if p == -1:
        qh[d] = x
    else:
        qn[p] = x
    qp[x] = p
    qt[d] = x


@numba.njit(cache=True)
def links_from_order(order, dev, n, nd):
    """The linked-list device queues of a canonical full run: its pop ``order`` is key order, so each
    device's tasks come in key order (one pass; :func:`build_links` without the grouping). ``dev``:
    the device of each task's queue entry (``where``: a change may have set a new device since)."""
    qn = np.full(n, -1, dtype=np.int64)
    qp = np.full(n, -1, dtype=np.int64)
    qh = np.full(nd, -1, dtype=np.int64)
    qt = np.full(nd, -1, dtype=np.int64)
    for k in range(order.shape[0]):
        x = order[k]
        _append_tail(qh, qt, qn, qp, dev[x], x)
    return qh, qt, qn, qp


def full_run(dur, dev, ptr, idx, nd, alive, R, S, E, lk, where, qh, qt, qn, qp, count):
    """A full run of the compiled engine into the delta state (``DeltaSimulator._full``): the engine
    loop builds the linked-list queues and checks canonicity as tasks pop
    (:func:`simulator.engine.kernels_numba.run_numba_links`), then one sequential pass
    (:func:`_adopt_times`) copies the times. The former separate pass over the pop order (queues,
    canonicity) touched every task again in time order and cost as much as the run itself (18 against
    16 ms on the 346 k-task GPT-3 graph). Returns (pop order, changed, lossy, canonical, makespan);
    an order shorter than n means a cycle (the state is then not a timeline: the caller raises)."""
    order, ready, start, _, canonical = run_numba_links(dur, dev, ptr, idx, nd, alive, qt, qp)
    if order.shape[0] != dur.shape[0]:
        return order, 0, False, False, 0.0
    changed, lossy, mk = _adopt_times(ready, start, dur, dev, alive, R, S, E, lk, where, qh, qt, qn, qp, count)
    return order, changed, lossy, canonical, mk


@numba.njit(cache=True)
def _adopt_times(ready, start, dur, dev, alive, R, S, E, lk, where, qh, qt, qn, qp, count):
    """A full run's times into the delta state, one sequential pass: NaN times for tombstones (and no
    queue links); the end is the engine's ``start + dur``, the same IEEE addition. Completes the
    linked-list queues from the engine's ``qp`` and ``qt`` (``qn[qp[i]] = i``, heads, tails). Counts
    the live tasks whose start or end differ from the state before (``count``; a NaN before, i.e. a
    new task, counts) and says whether a positive duration was lost to rounding. Returns (changed,
    lossy, makespan)."""
    n = ready.shape[0]
    nan = np.nan
    changed = 0
    lossy = False
    mk = 0.0
    qh[:] = -1
    for i in range(n):
        if alive[i]:
            p = qp[i]
            if p == -1:
                qh[dev[i]] = i
            else:
                qn[p] = i
            s = start[i]
            e = s + dur[i]
            if e > mk:
                mk = e
            if count and (s != S[i] or e != E[i]):
                changed += 1
            if e == s and dur[i] > 0.0:
                lossy = True
            R[i] = ready[i]
            lk[i] = ready[i]
            S[i] = s
            E[i] = e
            where[i] = dev[i]
        else:
            R[i] = nan
            lk[i] = nan
            S[i] = nan
            E[i] = nan
            where[i] = -1
            qn[i] = -1
            qp[i] = -1
    for d in range(qt.shape[0]):
        if qt[d] != -1:
            qn[qt[d]] = -1
    return changed, lossy, mk


@numba.njit(cache=True)
def merge_order(order, moved, R, mark):
    """The key order after a change: ``order`` (the old key order of the live tasks) without the
    ``moved`` tasks (``mark[x]`` True), merged with ``moved`` (sorted by their new key). The other
    tasks kept their keys, so they stay in key order. One pass (``DeltaSimulator._current_order``)."""
    out = np.empty(order.shape[0], dtype=np.int64)
    j = 0
    k = 0
    m = moved.shape[0]
    for i in range(order.shape[0]):
        x = order[i]
        if mark[x]:
            continue
        rx = R[x]
        while j < m and before(R[moved[j]], moved[j], rx, x):
            out[k] = moved[j]
            k += 1
            j += 1
        out[k] = x
        k += 1
    while j < m:
        out[k] = moved[j]
        k += 1
        j += 1
    return out
