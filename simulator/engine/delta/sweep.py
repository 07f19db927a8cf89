"""The Python sweep (:meth:`PythonSweep.sweep`): the event loop of the package doc
(:mod:`simulator.engine.delta`, "Delta algorithm"), with the zero-duration guards, plus the checks
it needs (:func:`backward_edge`) and :class:`ListGraph`, the graph as the Python loops read it.
:class:`simulator.engine.delta.simulator.DeltaSimulator` holds the sweep as ``_python_sweep``."""
from __future__ import annotations

import heapq
import math
import time
from array import array
from typing import NamedTuple

import numpy as np

from simulator.engine.delta import params
from simulator.engine.delta.queues import gather_rows
from simulator.engine.delta.stats import SweepAbort


def first_backward_edge(tasks, R, ptr, idx, pptr, pidx):
    """The first edge at one of ``tasks`` (in their order; a task's successors before its
    predecessors, each in CSR order) that goes backwards in (ready, id) order, as (u, v), or None."""
    row_s, v = gather_rows(ptr, idx, tasks)
    xs = tasks[row_s]
    bad_s = (R[v] < R[xs]) | ((R[v] == R[xs]) & (v < xs))
    row_p, u = gather_rows(pptr, pidx, tasks)
    xp = tasks[row_p]
    bad_p = (R[xp] < R[u]) | ((R[xp] == R[u]) & (xp < u))
    ks = int(row_s[bad_s].min()) if bad_s.any() else tasks.shape[0]
    kp = int(row_p[bad_p].min()) if bad_p.any() else tasks.shape[0]
    if ks == kp == tasks.shape[0]:
        return None
    if ks <= kp:
        j = int(np.argmax(bad_s & (row_s == ks)))
        return int(xs[j]), int(v[j])
    j = int(np.argmax(bad_p & (row_p == kp)))
    return int(u[j]), int(xp[j])


class ListGraph(NamedTuple):
    """The graph as the Python loops read it, for one change: per id the duration (``array('d')``),
    the device (a list), the predecessor and successor lists; the device count and the live tasks.
    (A named tuple, as :class:`~simulator.engine.delta.compiled.KernelGraph`: one per change.)"""

    duration: array
    device: list
    pred: list
    succ: list
    num_devices: int
    num_live: int


def backward_edge(tasks, new_edges, R, succ, pred, kernels, kernel_csr, current_csr):
    """The first edge at one of ``tasks`` (or among ``new_edges``) that goes backwards in (ready,
    id) order, as (u, v), or None; ``R``: the ready times, ``succ`` / ``pred``: the lists. ``tasks``
    as a numpy array (from the compiled sweep, which runs on an unchanged edge set): checked by the
    compiled helper of ``kernels`` on the CSR arrays ``kernel_csr()`` returns (successor ptr, idx,
    predecessor ptr, idx); a list of at least ``params.VECTOR_MIN``: with numpy when ``current_csr``
    (the same four arrays, or None when they are not current) is given."""
    if isinstance(tasks, np.ndarray):
        if tasks.size:
            ptr, idx, pptr, pidx = kernel_csr()
            u, v = kernels.backward_edge(tasks, np.frombuffer(R, dtype=np.float64), ptr, idx, pptr, pidx)
            if u != -1:
                return int(u), int(v)
        tasks = ()
    elif len(tasks) >= params.VECTOR_MIN and current_csr is not None:  # check all edges at once
        found = first_backward_edge(np.array(tasks, dtype=np.int64), np.frombuffer(R, dtype=np.float64),
                                    *current_csr)
        if found is not None:
            return found
        tasks = ()
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


class PythonSweep:
    """The Python event loop of :class:`~simulator.engine.delta.simulator.DeltaSimulator` on the
    per-task times of ``state`` (:class:`~simulator.engine.delta.state.DeltaState`) and the
    ``DeviceQueue`` objects of ``queue_set``
    (:class:`~simulator.engine.delta.device_queues.DeviceQueueSet`). What the last :meth:`sweep`
    leaves for its caller, also when it gave up: ``rekeyed`` (the processed tasks whose key changed,
    kept for the resume) and ``lost_rounding`` (a positive duration was lost to rounding)."""

    def __init__(self, state, queue_set):
        self.state = state
        self.queue_set = queue_set
        self.rekeyed = None
        self.lost_rounding = False

    def _steps(self, graph, heap, mark, guard):
        """The steps of :meth:`sweep` that change other tasks than the one at the sweep point, as
        closures over the state (one set per sweep; a closure call is cheaper than a method's attribute
        reads in the loop): ``mark_queue(z)`` (z's queue predecessor changed), ``block_successors(y)``
        (y's successors pend on it), ``relocate(y, new, sy, Kr, Kx)`` (y's entry moves to its new
        ready time now), ``release(x, Kr, Kx)`` (x, unresolved, was processed: its successors'
        pending counts drop) and ``propagate(x, e, oe, Kr, Kx)`` (x's end changed from ``oe`` to
        ``e``: its successors' ready times follow). ``(Kr, Kx)``: the sweep point, for the guards."""
        state = self.state
        R, E, lk, where = state.ready_time, state.end_time, state.queue_key, state.queue_device
        st, nr, pend = state.sweep_status, state.new_ready, state.pending_preds
        dev, succ, pred = graph.device, graph.succ, graph.pred
        Q = self.queue_set.objects
        push = heapq.heappush

        def mark_queue(z):
            """z's queue predecessor changed."""
            sz = st[z]
            if sz == 0:
                st[z] = 1
                mark(z)
                nr[z] = R[z]
                push(heap, (R[z], z))
            elif sz == 2:
                raise SweepAbort("zero-duration tie: a processed task's queue predecessor changed")

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
                    raise SweepAbort("zero-duration tie: a processed task's predecessor changed")

        def relocate(y, new, sy, Kr, Kx):
            """y (pend 0) gets the new ready time ``new``: move its entry there now."""
            nr[y] = new
            w = where[y]
            d = dev[y]
            if w == d and lk[y] == new:
                push(heap, (new, y))
                return
            if w != -1 and guard and (lk[y] < Kr or (lk[y] == Kr and y < Kx)):
                raise SweepAbort("zero-duration tie: a task behind the sweep changed")
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

        def release(x, Kr, Kx):
            """x was unresolved: release its successors."""
            for y in succ[x]:
                c = pend[y] - 1
                pend[y] = c
                if not c:
                    m = 0.0
                    for p in pred[y]:
                        if E[p] > m:
                            m = E[p]
                    if where[y] != -1 and lk[y] != m:
                        relocate(y, m, st[y], Kr, Kx)
                    else:
                        nr[y] = m
                        push(heap, (m, y))

        def propagate(x, e, oe, Kr, Kx):
            """x's end changed from ``oe`` to ``e``: update its successors' ready times incrementally."""
            for y in succ[x]:
                if pend[y]:
                    continue  # its ready time is computed when it is released
                sy = st[y]
                if sy == 0:
                    cur = R[y]
                elif sy == 2:
                    raise SweepAbort("zero-duration tie: a processed task's predecessor changed")
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
                relocate(y, new, sy, Kr, Kx)

        return mark_queue, block_successors, release, propagate

    def sweep(self, graph: ListGraph, makespan: float, heap, dirtied, limit, deadline, guard, replan):
        """The event loop (see package doc) on ``graph``, from the timeline's ``makespan``: pops events in key order and, for each, processes the
        task at its final key or vacates its entry; the steps that reach other tasks are
        :meth:`_steps`. Returns counters, the processed tasks whose ready time changed, the
        largest new end and whether an end that was the makespan decreased.

        st[x]: 0 clean, 1 dirty, 3 dirty and unresolved (vacated, new, or moved to a key not below
        its end: its successors pend on it), 2 done. nr[x]: x's new ready time when st is odd and
        pend[x] == 0. pend[x]: unresolved predecessors. lk[x]: the ready time of x's queue entry on
        device where[x] (-1: no entry). Ids whose st left 0 are appended to ``dirtied``.
        """
        state = self.state
        R, S, E, lk, where = state.ready_time, state.start_time, state.end_time, state.queue_key, state.queue_device
        st, nr, pend, oS, oE = state.sweep_status, state.new_ready, state.pending_preds, state.old_start, state.old_end
        dur, dev = graph.duration, graph.device
        Q = self.queue_set.objects
        pop = heapq.heappop
        mark_queue, block_successors, release, propagate = self._steps(graph, heap, dirtied.append, guard)
        processed = changed = moved = vacated = work = 0
        if limit is None:
            limit = -1
        clock = time.perf_counter
        timed = deadline != math.inf
        retimed_r: list[int] = []  # processed tasks whose ready time (key) changed
        self.rekeyed = retimed_r  # (kept for the resume if the sweep gives up)
        self.lost_rounding = False
        mk0 = makespan
        emax = -math.inf
        lost = False
        Kr, Kx = -math.inf, -1

        while heap:
            r, x = pop(heap)
            sx = st[x]
            if not sx & 1:
                continue  # clean or done: a stale event
            if guard:
                if r < Kr or (r == Kr and x < Kx):
                    raise SweepAbort("zero-duration tie: an event fell behind the sweep")
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
                if e == s and dur[x] > 0.0:
                    if not guard:
                        # the addition lost a positive duration to rounding, so x ends when it
                        # starts and an edge can tie; the no-guard argument needs E > S
                        raise SweepAbort(f"positive duration lost to rounding: task {x} ({dur[x]!r} s) "
                                     f"starts and ends at {s!r} s")
                    self.lost_rounding = True  # later changes keep the guards (package doc)
                oe = E[x]
                if w == -1:
                    where[x] = d
                    lk[x] = r
                    mark_next = True
                else:
                    mark_next = e != oe
                if R[x] != r:
                    moved += 1
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
                    raise SweepAbort(f"work limit of {limit} tasks reached", (r, x), processed)
                if timed and not work & 31 and clock() > deadline:
                    deadline = replan(r, x, processed, work)
                if mark_next and z != -1:
                    mark_queue(z)
                if sx == 3:  # x was unresolved: release its successors
                    release(x, Kr, Kx)
                elif e != oe:
                    propagate(x, e, oe, Kr, Kx)
            elif where[x] != -1 and lk[x] == r:
                # ---- vacate: x's entry is at the sweep point but x cannot be processed here
                z = Q[where[x]].remove(r, x)
                if z != -1:
                    mark_queue(z)
                where[x] = -1
                vacated += 1
                work += 1
                if work == limit:
                    raise SweepAbort(f"work limit of {limit} tasks reached", (r, x), processed)
                if timed and not work & 31 and clock() > deadline:
                    deadline = replan(r, x, processed, work)
                if sx != 3:
                    st[x] = 3
                    block_successors(x)
            # else: a stale event
        if emax < mk0 and not lost:
            emax = mk0
        return processed, changed, moved, vacated, retimed_r, max(emax, mk0), lost
