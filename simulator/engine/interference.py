"""Compute slowed by the communication running beside it on the same GPU (taskgraph/overlap.py).

A rank's side streams (DP buckets and gathers, asynchronous TP collectives) hold a fraction ``f`` of
the GPU's SMs while one of their tasks runs (``graph.meta["sm_share"]``: stream -> f). A compute task
of duration ``d`` that overlaps such work for ``o`` seconds then takes ``T = d + integral of F over
its interval``, ``F(t)`` the summed fraction of the side work running at ``t`` (capped at
:data:`taskgraph.overlap.MAX_FRACTION`): at rate 1 outside the overlap and ``1 - F`` inside it, the
work ``d`` takes ``T`` with ``(T - o) + (1 - f) o = d`` for a constant ``f``.

The engine's FIFO semantics stay as they are. :func:`with_interference` finds the timeline in which
every compute task satisfies that equation: run the engine, integrate ``F`` over each compute task's
interval, set ``T = d + integral``, run again, until no duration moves by more than
:data:`TOLERANCE` x the makespan (at most :data:`MAX_ROUNDS` runs; the report keeps how many). Each run
is the ordinary engine (or the verified static-order sweep; on operator graphs every run after the
first is the re-sweep in the previous run's device order, ``simulator/engine/resweep.py``, which returns
the engine's arrays or is refused), so the result is deterministic and every
equality the engine's tests prove still holds for the final durations; the graph's ``duration`` array
holds them, so reports, traces and delta what-ifs see the slowed compute. Each round is a Newton step
per task (the integral grows by ``F(end)`` per second of the task's own length), damped by
:data:`DAMPING` after the first (starts move with the tasks before them, which can make the plain
iteration oscillate); the loop stops when the durations move by less than :data:`TOLERANCE` of the
total work in a round, or after :data:`MAX_ROUNDS` runs.

Closed-form check (tests/test_interference.py): one 10 ms compute task beside a 4 ms DP bucket with
``f = 0.25`` takes 11 ms.
"""
from __future__ import annotations

import numpy as np

from taskgraph.overlap import MAX_FRACTION

TOLERANCE = 1e-3
MAX_ROUNDS = 6
DAMPING = 0.7


def device_shares(devices, shares: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rank, share, is_compute) per device: the SM fraction a device's tasks hold (0 for compute
    and links) and whether the device is a rank's compute stream."""
    rank = np.array([d.rank for d in devices], dtype=np.int64)
    share = np.array([float(shares.get(d.stream, 0.0)) if d.stream != "link" else 0.0 for d in devices])
    compute = np.array([d.stream == "compute" for d in devices], dtype=bool)
    return rank, share, compute


def slowdown(base: np.ndarray, task_device: np.ndarray, start: np.ndarray, end: np.ndarray,
             dev_rank: np.ndarray, dev_share: np.ndarray, dev_compute: np.ndarray, *, with_level: bool = False):
    """Per task: the integral of the SM fraction its rank's side work holds over the task's
    interval ``[start, end)`` (compute tasks with ``base > 0`` only; 0 elsewhere); with
    ``with_level`` also the fraction held just before each task's end (the derivative of the
    integral in the task's length)."""
    n = base.size
    extra = np.zeros(n, dtype=np.float64)
    at_end = np.zeros(n, dtype=np.float64)
    out = (extra, at_end) if with_level else extra
    share = dev_share[task_device]
    side = np.flatnonzero((share > 0.0) & (end > start))
    if side.size == 0:
        return out
    comp = np.flatnonzero(dev_compute[task_device] & (base > 0.0))
    if comp.size == 0:
        return out
    side_rank = dev_rank[task_device[side]]
    comp_rank = dev_rank[task_device[comp]]
    for r in np.flatnonzero(np.bincount(side_rank)):  # the ranks in order (np.unique would import numpy.ma)
        sel = side[side_rank == r]
        cs = comp[comp_rank == r]
        if cs.size == 0:
            continue
        # piecewise-constant F(t): +share at each start, -share at each end, summed in time order
        t = np.concatenate([start[sel], end[sel]])
        w = np.concatenate([share[sel], -share[sel]])
        order = np.lexsort((w, t))  # at equal times the ends (negative) first
        t, w = t[order], w[order]
        level = np.minimum(np.maximum(np.cumsum(w), 0.0), MAX_FRACTION)
        # G(t_i) = integral of F up to breakpoint i; F holds level[i] on [t_i, t_{i+1})
        G = np.concatenate([[0.0], np.cumsum(level[:-1] * np.diff(t))])
        extra[cs] = np.interp(end[cs], t, G) - np.interp(start[cs], t, G)
        if with_level:  # F on the breakpoint interval that contains end - 0
            i = np.searchsorted(t, end[cs], side="left") - 1
            at_end[cs] = np.where(i >= 0, level[np.clip(i, 0, level.size - 1)], 0.0)
    return out


def fixed_point(base: np.ndarray, run, task_device: np.ndarray, devices, shares: dict):
    """The durations that satisfy the slowed-compute equation (module doc) and the last run's
    result: ``run(durations)`` returns an object with ``start``, ``end`` and ``makespan`` (an engine
    result), or None when it cannot (then the durations so far are returned with None).
    Returns ``(durations, result, rounds)``."""
    dur = np.array(base, dtype=np.float64)
    res = run(dur)
    if res is None or not shares:
        return dur, res, 1
    dev_rank, dev_share, dev_compute = device_shares(devices, shares)
    if not bool(np.any(dev_share > 0)):
        return dur, res, 1
    total = max(float(np.sum(base)), 1e-30)
    rounds = 1
    while rounds < MAX_ROUNDS:
        extra, level = slowdown(base, task_device, res.start, res.end, dev_rank, dev_share, dev_compute,
                                with_level=True)
        # Newton on T = d + integral(T) with the start held: the integral grows by F(end) per second
        # of T, so T += (d + integral - T) / (1 - F(end))
        new = dur + (base + extra - dur) / (1.0 - level)
        # stop when the durations move by less than TOLERANCE of all the work they stand for
        if float(np.sum(np.abs(new - dur))) <= TOLERANCE * total:
            break
        # damped after the first step: a task's start moves with the tasks before it, which can
        # make the plain iteration oscillate around the fixed point
        dur = new if rounds == 1 else dur + DAMPING * (new - dur)
        res = run(dur)
        rounds += 1
        if res is None:
            break
    return dur, res, rounds


def with_interference(graph, run, shares: dict | None = None, *, resweep: bool = False):
    """``run(graph) -> SimResult`` repeated until the compute durations satisfy the slowed-compute
    equation (module doc). ``graph.duration`` ends as the slowed durations (in place); returns
    ``(result, rounds)``; ``rounds`` = 1 when nothing runs beside compute.

    ``resweep`` (``run`` is the engine): each run after the first re-times the graph in the previous
    run's device order (:func:`simulator.engine.resweep.resweep`, proven equal to the engine's result
    or refused) and runs the engine only when that is refused, or when the engine's compiled kernel
    is loaded (faster than the sweep)."""
    shares = graph.meta.get("sm_share", {}) if shares is None else shares
    base = graph.duration.copy()
    last, plans = [], []

    def once(dur):
        graph.duration[:] = dur
        res = _resweep(graph, last[-1] if last else None, plans) if resweep else None
        res = run(graph) if res is None else res
        last.append(res)
        return res

    dur, res, rounds = fixed_point(base, once, graph.device, graph.devices, shares)
    if rounds > 1:
        graph.meta["interference_rounds"] = rounds
        graph.meta["interference_s"] = float(np.sum(dur - base))
    return res, rounds


def _resweep(graph, prev, plans: list):
    """The graph swept in the order of the last accepted sweep (``plans[-1]``, a
    :class:`~simulator.engine.resweep.SweepPlan`: only the durations changed), else in the previous
    run's order, or before any run in the lowering's guess (``order_hint``); None when refused
    (then the engine runs). A refused plan is dropped: the previous run's order has the same
    per-device orders (the accepted result is key-sorted, and the check keeps each device's order),
    so the engine runs at once."""
    hint = getattr(graph, "order_hint", None)
    if prev is None and hint is None:
        return None
    from simulator.engine.core import compiled_kernel
    if compiled_kernel("run_numba", 0.0) is not None:  # the compiled engine beats the Python sweep
        return None
    from simulator.engine.resweep import SweepPlan, plan_for_guess
    if plans:
        res = plans[-1].run(graph.duration)
        if res is None:
            plans.clear()
        return res
    if prev is None:
        plan = plan_for_guess(graph, hint)
    else:
        plan = SweepPlan(graph, prev.order.astype(np.int64)) if prev.order.shape[0] == graph.num_tasks else None
    res = plan.run(graph.duration) if plan is not None else None
    if res is not None:
        plans.append(plan)
    return res
