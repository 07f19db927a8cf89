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

The side streams are slowed by the compute beside them in the same fixed point: a stream with an HBM
loss ``g`` (``graph.meta["hbm_loss"]``: stream -> g, ``taskgraph/overlap.py`` ``hbm_loss``) runs at
``1 - g`` while its rank's compute stream is busy, so each of its tasks satisfies ``T = d + g x
busy``, ``busy`` the compute time inside the task's interval (:func:`comm_slowdown`); the Newton step
is the same (``busy`` grows by 1 per second of the task's length while the compute runs at its end).

Closed-form checks (tests/test_interference.py): one 10 ms compute task beside a 4 ms DP bucket with
``f = 0.25`` takes 11 ms; with ``g = 0.2`` as well the bucket takes 4 / 0.8 = 5 ms and the compute
10 + 0.25 x 5 = 11.25 ms.
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
    comp = np.flatnonzero(dev_compute[task_device] & (base > 0.0))
    comp_rank = dev_rank[task_device[comp]]
    side = _by_rank(np.flatnonzero(dev_share[task_device] > 0.0), task_device, dev_rank, dev_share)
    _slowdown(start, end, side, {r: comp[comp_rank == r] for r in side}, extra, at_end)
    return (extra, at_end) if with_level else extra


def _by_rank(tasks: np.ndarray, task_device: np.ndarray, dev_rank: np.ndarray, dev_value: np.ndarray) -> dict:
    """rank -> (its tasks among ``tasks`` in index order, their devices' values), for the ranks that
    have any (ascending)."""
    if tasks.size == 0:
        return {}
    rank = dev_rank[task_device[tasks]]
    value = dev_value[task_device[tasks]]
    o = np.argsort(rank, kind="stable")  # index order kept inside a rank
    cut = np.concatenate([[0], np.cumsum(np.bincount(rank))])
    return {int(r): (tasks[o[cut[r]:cut[r + 1]]], value[o[cut[r]:cut[r + 1]]])
            for r in np.flatnonzero(cut[1:] > cut[:-1])}


def _slowdown(start, end, side: dict, comp: dict, extra: np.ndarray, at_end: np.ndarray) -> None:
    """:func:`slowdown` on rank groups: ``side`` rank -> (side tasks, their SM fractions), ``comp``
    rank -> its compute tasks with ``base > 0`` (any order: each value is computed on its own; in
    start order the searches below read the breakpoints forward)."""
    for r, (tasks, fraction) in side.items():
        keep = end[tasks] > start[tasks]
        sel, f = (tasks, fraction) if keep.all() else (tasks[keep], fraction[keep])
        cs = comp.get(r)
        if sel.size == 0 or cs is None or cs.size == 0:
            continue
        # piecewise-constant F(t): +share at each start, -share at each end, summed in time order
        t = np.concatenate([start[sel], end[sel]])
        w = np.concatenate([f, -f])
        order = np.lexsort((w, t))  # at equal times the ends (negative) first
        t, w = t[order], w[order]
        # level[i + 1]: F on [t_i, t_{i+1}) (level[0] = 0 before the first breakpoint)
        level = np.empty(t.size + 1, dtype=np.float64)
        level[0] = 0.0
        np.minimum(np.maximum(np.cumsum(w), 0.0, out=level[1:]), MAX_FRACTION, out=level[1:])
        # G(t_i) = integral of F up to breakpoint i
        G = np.empty(t.size, dtype=np.float64)
        G[0] = 0.0
        np.cumsum(level[1:-1] * np.diff(t), out=G[1:])
        ce = end[cs]
        extra[cs] = np.interp(ce, t, G) - np.interp(start[cs], t, G)
        # F on the breakpoint interval that contains end - 0
        at_end[cs] = level[np.searchsorted(t, ce, side="left")]


def comm_slowdown(base: np.ndarray, task_device: np.ndarray, start: np.ndarray, end: np.ndarray,
                  dev_rank: np.ndarray, dev_loss: np.ndarray, dev_compute: np.ndarray, order=None):
    """Per task on a side stream with a loss ``g > 0`` (:func:`device_losses`): ``g x`` the time its
    rank's compute stream is busy during the task's interval ``[start, end)``, and ``g`` if it is busy
    just before the task's end (the derivative); 0 elsewhere. The side task's own rate is ``1 - g``
    while compute runs beside it (HBM shared, taskgraph/overlap.py ``hbm_loss``), so it satisfies
    ``T = d + g x busy``. ``order``: the engine's pop order (a device's tasks in start order), which
    saves sorting the compute tasks; None sorts them."""
    n = base.size
    extra = np.zeros(n, dtype=np.float64)
    at_end = np.zeros(n, dtype=np.float64)
    side = _by_rank(np.flatnonzero((dev_loss[task_device] > 0.0) & (base > 0.0)), task_device, dev_rank, dev_loss)
    if side:
        comp = compute_by_rank(task_device, start, dev_rank, dev_compute, dev_compute[task_device], order)
        _comm_slowdown(start, end, side, comp, extra, at_end)
    return extra, at_end


def compute_by_rank(task_device, start, dev_rank, dev_compute, is_compute, order=None) -> dict:
    """rank -> its compute-stream tasks, grouped by device, each device's in start order
    (``is_compute``: per task, on a compute stream). ``order``: the engine's pop order (a device's
    tasks in start order), which saves sorting them; None sorts them."""
    if order is not None and len(order) == start.size:
        comp = np.asarray(order)
        comp = comp[is_compute[comp]]
    else:
        comp = np.flatnonzero(is_compute)
        comp = comp[np.argsort(start[comp], kind="stable")]
    # the compute tasks grouped by device, each device's in start order (a stable radix sort)
    cdev = task_device[comp]
    small = dev_rank.size < 65536
    comp = comp[np.argsort(cdev.astype(np.uint16) if small else cdev, kind="stable")]
    bounds = np.concatenate([[0], np.cumsum(np.bincount(cdev, minlength=dev_rank.size))])
    out = {}
    for d in np.flatnonzero(dev_compute):
        out.setdefault(int(dev_rank[d]), []).append(comp[bounds[d]:bounds[d + 1]])
    return {r: parts[0] if len(parts) == 1 else np.concatenate(parts) for r, parts in out.items()}


def _comm_slowdown(start, end, side: dict, comp: dict, extra: np.ndarray, at_end: np.ndarray) -> None:
    """:func:`comm_slowdown` on rank groups: ``side`` rank -> (lossy side tasks, their losses),
    ``comp`` the :func:`compute_by_rank` groups."""
    for r, (ss, loss) in side.items():
        sel = comp.get(r)
        if sel is None:
            continue
        sel = sel[end[sel] > start[sel]]
        if sel.size == 0:
            continue
        s0, e0 = start[sel], end[sel]
        a, b = start[ss], end[ss]
        if sel.size > 1 and not (np.all(s0[1:] >= s0[:-1]) and np.all(s0[1:] >= e0[:-1])):
            # not one stream running one task at a time in this order: sort, and merge overlaps
            o = np.argsort(s0, kind="stable")
            s0, e0 = s0[o], np.maximum.accumulate(e0[o])
            keep = np.flatnonzero(np.concatenate([[True], s0[1:] > e0[:-1]]))   # starts of merged runs
            s0, e0 = s0[keep], np.maximum.reduceat(e0, keep)
        # busy(t) is 1 on the disjoint [s_k, e_k): its integral from 0 is the busy time of the tasks
        # before k plus the part of task k before t
        before = np.concatenate([[0.0], np.cumsum(e0 - s0)])
        extra[ss] = loss * (_busy_to(b, s0, e0, before) - _busy_to(a, s0, e0, before))
        k = np.searchsorted(s0, b, side="left") - 1   # the task running just before the end
        kk = np.maximum(k, 0)
        at_end[ss] = loss * ((k >= 0) & (e0[kk] >= b))


def _busy_to(x: np.ndarray, s0: np.ndarray, e0: np.ndarray, before: np.ndarray) -> np.ndarray:
    """The integral from 0 to each ``x`` of busy(t), 1 on the disjoint sorted intervals ``[s0, e0)``
    (``before[k]``: the busy time of the intervals before k)."""
    k = np.searchsorted(s0, x, side="right") - 1
    kk = np.maximum(k, 0)
    return np.where(k >= 0, before[kk] + np.clip(x - s0[kk], 0.0, e0[kk] - s0[kk]), 0.0)


def device_losses(devices, losses: dict) -> np.ndarray:
    """Per device: the fraction ``g`` of its rate a side stream loses while its rank computes
    (``graph.meta["hbm_loss"]``: stream -> g; 0 for compute and links)."""
    return np.array([float(losses.get(d.stream, 0.0)) if d.stream not in ("link", "compute") else 0.0
                     for d in devices])


def fixed_point(base: np.ndarray, run, task_device: np.ndarray, devices, shares: dict,
                losses: dict | None = None):
    """The durations that satisfy the slowed-compute equation (module doc) and the last run's
    result: ``run(durations)`` returns an object with ``start``, ``end`` and ``makespan`` (an engine
    result), or None when it cannot (then the durations so far are returned with None).
    Returns ``(durations, result, rounds)``."""
    dur = np.array(base, dtype=np.float64)
    res = run(dur)
    if res is None or not (shares or losses):
        return dur, res, 1
    dev_rank, dev_share, dev_compute = device_shares(devices, shares or {})
    dev_loss = device_losses(devices, losses or {})
    if not bool(np.any(dev_share > 0) or np.any(dev_loss > 0)):
        return dur, res, 1
    total = max(float(np.sum(base)), 1e-30)
    # the rank groups the two integrals need, once: they depend on the graph, not on the timeline
    is_compute = dev_compute[task_device]
    side = _by_rank(np.flatnonzero(dev_share[task_device] > 0.0), task_device, dev_rank, dev_share)
    lossy = _by_rank(np.flatnonzero((dev_loss[task_device] > 0.0) & (base > 0.0)), task_device, dev_rank, dev_loss)
    positive = base > 0.0
    rounds = 1
    while rounds < MAX_ROUNDS:
        # each rank's compute tasks in start order, once per round for both integrals
        comp = compute_by_rank(task_device, res.start, dev_rank, dev_compute, is_compute, getattr(res, "order", None))
        extra = np.zeros(base.size, dtype=np.float64)
        level = np.zeros(base.size, dtype=np.float64)
        _slowdown(res.start, res.end, side, {r: c[positive[c]] for r, c in comp.items() if r in side}, extra, level)
        # the side streams slowed by the compute beside them (HBM shared): written into the same
        # arrays, on other tasks (a lossy stream is never a compute stream, device_losses)
        _comm_slowdown(res.start, res.end, lossy, comp, extra, level)
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
    losses = graph.meta.get("hbm_loss", {})
    base = graph.duration.copy()
    last, plans = [], []

    def once(dur):
        graph.duration[:] = dur
        res = resweep_round(graph, last[-1] if last else None, plans) if resweep else None
        res = run(graph) if res is None else res
        last.append(res)
        return res

    dur, res, rounds = fixed_point(base, once, graph.device, graph.devices, shares, losses)
    record_rounds(graph.meta, base, dur, rounds)
    return res, rounds


def record_rounds(meta: dict, base: np.ndarray, dur: np.ndarray, rounds: int) -> None:
    """Note a fixed point that slowed anything in a graph's ``meta``: its timeline runs
    (``interference_rounds``) and the seconds it added over all tasks (``interference_s``)."""
    if rounds > 1:
        meta["interference_rounds"] = rounds
        meta["interference_s"] = float(np.sum(dur - base))


def resweep_round(graph, prev, plans: list):
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
