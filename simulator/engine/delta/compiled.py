"""The compiled sweep's driver (package doc, :mod:`simulator.engine.delta`, "Compiled sweep"): the
choice of kernel, the device queues as linked lists and their conversion to and from the
:class:`~simulator.engine.delta.queues.DeviceQueue` objects, and the loop that runs
:func:`simulator.engine.delta.kernels_numba.sweep` between deadline checks: :class:`CompiledSweep`,
which :class:`simulator.engine.delta.simulator.DeltaSimulator` holds as ``_compiled``, and
:class:`KernelGraph`, the graph's arrays it hands to the kernels."""
from __future__ import annotations

import math
import time
from typing import NamedTuple

import numpy as np

from simulator.engine.delta.stats import NAN, SweepAbort


def delta_kernel(kernel: str):
    """:mod:`simulator.engine.delta.kernels_numba` for ``kernel`` (None: the Python sweep)."""
    if kernel not in ("auto", "python", "numba"):
        raise ValueError(f"kernel {kernel!r} is not one of 'auto', 'python', 'numba'")
    if kernel == "python":
        return None
    if kernel == "auto":
        from taskgraph.compiled import kernel_mode
        if kernel_mode() == "python":  # EXECSIM_KERNEL=python forces the reference loops everywhere
            return None
    try:
        import simulator.engine.delta.kernels_numba as kernels
    except ImportError:
        if kernel == "numba":
            raise
        return None
    return kernels


class KernelGraph(NamedTuple):
    """The graph as the compiled kernels take it, for one change: per id, the duration (float64)
    and the device (int32), the successor CSR and the predecessor CSR (int64), and the device count.
    (A named tuple, not a frozen dataclass: one is built per change, and it builds in a third of
    the time.)"""

    duration: np.ndarray
    device: np.ndarray
    succ_ptr: np.ndarray
    succ_idx: np.ndarray
    pred_ptr: np.ndarray
    pred_idx: np.ndarray
    num_devices: int


class CompiledSweep:
    """The compiled sweep (``kernels``: :mod:`simulator.engine.delta.kernels_numba`) on the per-task
    times of ``state`` (:class:`~simulator.engine.delta.state.DeltaState`) and the linked-list device
    queues of ``queue_set`` (:class:`~simulator.engine.delta.device_queues.DeviceQueueSet`).

    What the last :meth:`sweep` leaves for its caller: ``marked`` (every task it marked, the caller's
    list first), ``cleared`` (it found them all processed and cleared their scratch, except with the
    guards: after the backward-edge check), ``rekeyed`` (the processed tasks whose key changed, kept
    for the resume if it gives up) and ``lost_rounding`` (a positive duration was lost to rounding)."""

    def __init__(self, kernels, state, queue_set):
        self.kernels = kernels
        self.state = state
        self.queue_set = queue_set
        self.marked = None
        self.cleared = False
        self.rekeyed = None
        self.lost_rounding = False

    def sweep(self, graph: KernelGraph, makespan: float, began: float, heap, dirtied, limit, deadline, guard,
              replan):
        """``PythonSweep.sweep`` compiled (:func:`simulator.engine.delta.kernels_numba.sweep`;
        duration and device changes; with the zero-duration guards when ``guard``) on ``graph``, from
        the timeline's ``makespan``, for a change that began at ``began`` (perf_counter); same returns
        and aborts, except that the processed tasks whose ready time changed come as a numpy array.
        The kernel pauses every ``step`` units of work so the deadline is checked here (the Python
        loop checks every 32)."""
        nb = self.kernels
        n = int(graph.duration.shape[0])
        qh, qt, qn, qp = self.queue_set.as_links(n, graph.num_devices)
        cur = self.queue_set.last_placed
        cur.fill(-1)  # per change: the last entry the sweep placed on each device
        views = self.state.views()  # the state's arrays, in the kernel's order
        st = views[5]  # sweep_status (read after the loop)
        hs = len(heap)
        ptr, idx, pptr, pidx = graph.succ_ptr, graph.succ_idx, graph.pred_ptr, graph.pred_idx
        cap = nb.heap_capacity(hs, n, int(idx.shape[0]))  # a bound: the kernel never reallocates
        hr = np.empty(cap, dtype=np.float64)
        hx = np.empty(cap, dtype=np.int64)
        if hs:  # a heapq list is already in heap order for the same comparison
            hr[:hs] = [h[0] for h in heap]
            hx[:hs] = [h[1] for h in heap]
        n0 = len(dirtied)
        dirt = np.empty(n, dtype=np.int64)
        dirt[:n0] = dirtied
        cnt = np.zeros(7, dtype=np.int64)
        cnt[nb.C_DIRT] = n0
        flt = np.array([-math.inf, makespan, 0.0, NAN, -1.0, -1.0, -math.inf, -1.0, 0.0])
        rr = np.empty(n, dtype=np.int64)  # (pages touched only as it fills)
        timed = deadline != math.inf
        lim = -1 if limit is None else int(limit)
        step = 256  # a pause costs a call (~10 us): fewer checks than the Python loop's every 32
        # every argument that stays the same between pauses, in the kernel's order
        fixed = (*views, graph.duration, graph.device, ptr, idx, pptr, pidx, qh, qt, qn, qp, cur, hr, hx)
        clock = time.perf_counter
        t_k = clock()  # the race counts from here: the set-up above is paid whoever wins
        deadline += t_k - began
        try:
            while True:
                stop = int(cnt[nb.C_WORK]) + step if timed else 1 << 62
                status, hs = nb.sweep(*fixed, hs, dirt, cnt, flt, stop, lim, guard, rr)
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
                    raise SweepAbort(f"work limit of {limit} tasks reached", at, processed)
                if status == nb.LOSSY:
                    x = int(flt[nb.F_BAD])
                    raise SweepAbort(f"positive duration lost to rounding: task {x} ({float(graph.duration[x])!r} s) "
                                 f"ends when it starts")
                if status == nb.OVERFLOW:  # cannot happen (heap_capacity is a bound); be safe
                    raise SweepAbort("the compiled sweep's event heap is full")
                raise SweepAbort("zero-duration tie: a processed task's input changed")
            # done: every marked task processed (else a cycle: the caller falls back with the list)
            # -> clear the scratch here, vectorized, instead of the caller's loop over ``dirtied``
            marked = dirt[:int(cnt[nb.C_DIRT])]
            self.cleared = not np.any(st[marked] != 2)
            if self.cleared and not guard:  # (guarded: after the backward-edge check, _delta)
                st[marked] = 0
        except BaseException:
            self.cleared = False
            raise
        finally:
            self.queue_set.links_changed()
            self.marked = dirt[:int(cnt[nb.C_DIRT])]  # every marked task (the caller's list first)
            self.rekeyed = rr[:int(cnt[nb.C_RR])]  # (kept for the resume if the sweep gives up)
            del views, fixed, st
            # a positive duration lost to rounding: the caller guards later changes too
            self.lost_rounding = bool(flt[nb.F_LOSSY])
        mk0 = makespan
        return (int(cnt[nb.C_PROC]), int(cnt[nb.C_CHANGED]), int(cnt[nb.C_MOVED]), int(cnt[nb.C_VAC]),
                rr[:int(cnt[nb.C_RR])], max(float(flt[nb.F_EMAX]), mk0), bool(flt[nb.F_LOST]))
