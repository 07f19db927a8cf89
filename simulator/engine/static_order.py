"""The static-order timeline: the engine's exact timeline of a coarse task graph from one sweep
over a precomputed task order instead of the engine's heap, verified after the fact.

Why the static-order timeline equals the engine (``simulator/engine/core.py``): the engine pops tasks
keyed ``(ready, id)``; ``simulator/engine/delta/__init__.py`` (Lemma 1) shows that if per-task times satisfy
``R(x) = max(0, E of predecessors)``, ``S(x) = max(R(x), E(prev(x)))``, ``E(x) = S(x) + dur(x)``
with ``prev(x)`` the task before ``x`` on its device in ``(R, id)`` order, and every edge goes
forward in that order (``key(u) < key(v)``, "canonical"), then the engine pops exactly the
key-sorted order and produces exactly those times. The sweep guesses each device's order from the
schedule (program order on compute streams, the source's program order on links, gathers then
buckets on the DP stream), computes the times in one pass, and then checks the three equations, the
device orders and canonicity with numpy. Any failure (e.g. zero-duration ties the guess ordered the
other way) falls back to the engine, so the result is always the engine's.
"""
from __future__ import annotations

import numpy as np

# --------------------------------------------------------------------------------------------------
# Static-order timeline


class _Order:
    """Processing order and checks for one task structure (cached on a lowering layout)."""

    __slots__ = (
        "arrays",
        "dsel",
        "dst",
        "edge_lt",
        "n",
        "ndev",
        "pair_lt",
        "pair_x",
        "pair_y",
        "pdev",
        "phas",
        "pi",
        "prevdev",
        "psrc",
        "pstarts",
        "q1",
        "q2",
        "src",
        "total",
    )


def build_order(n: int, device: np.ndarray, src: np.ndarray, dst: np.ndarray, pi: np.ndarray,
                num_devices: int) -> _Order | None:
    """Precompute the sweep for a task graph (edges ``src -> dst``) and a proposed processing order
    ``pi`` (a topological order whose restriction to each device is the guessed FIFO order).

    A task's predecessors on its own device are implied by the device's previous task (ends never
    decrease along a device); of those on another device only the latest in ``pi`` per device
    counts. The sweep reads two of them per task; a task with more gets helper entries before it
    (each on a private device, zero duration: its end is the max of two ends). Returns None when
    ``pi`` is not topological.
    """
    o = _Order()
    dev = np.asarray(device, dtype=np.int64)
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    pi = np.asarray(pi, dtype=np.int64)
    pos = np.empty(n, dtype=np.int64)
    pos[pi] = np.arange(n)
    if src.size and np.any(pos[src] >= pos[dst]):
        return None
    # cross-device predecessors: keep the latest (in pi) per (task, device)
    m = dev[src] != dev[dst]
    u, v = src[m], dst[m]
    o1 = np.lexsort((pos[u], dev[u], v))
    u, v = u[o1], v[o1]
    du = dev[u]
    last = np.ones(u.size, dtype=bool)
    if u.size > 1:
        last[:-1] = (v[1:] != v[:-1]) | (du[1:] != du[:-1])
    u, v = u[last], v[last]
    firsts = np.ones(v.size, dtype=bool)
    if v.size > 1:
        firsts[1:] = v[1:] != v[:-1]
    rank_in = np.arange(v.size) - np.maximum.accumulate(np.where(firsts, np.arange(v.size), 0))
    q1 = np.full(n, -1, dtype=np.int64)
    q2 = np.full(n, -1, dtype=np.int64)
    q1[v[rank_in == 0]] = u[rank_in == 0]
    q2[v[rank_in == 1]] = u[rank_in == 1]
    # helpers for tasks with more than two: h_k = max(previous, next pred), the task reads (h, last)
    pi_l, dev_l = pi.tolist(), dev[pi].tolist()
    many = np.flatnonzero(np.bincount(v, minlength=n) > 2) if v.size else np.zeros(0, dtype=np.int64)
    hq1, hq2, hbefore = [], [], []
    nh = 0
    if many.size:
        extra = {int(t): u[v == t].tolist() for t in many}
        for t, preds in extra.items():
            acc = preds[0]
            for p in preds[1:-1]:
                hq1.append(acc)
                hq2.append(p)
                hbefore.append(pos[t])
                acc = n + nh
                nh += 1
            q1[t], q2[t] = acc, preds[-1]
    total = n + nh
    sentinel = total
    q1[q1 < 0] = sentinel
    q2[q2 < 0] = sentinel
    if nh:
        # sweep order: each helper right before its task, in creation order
        ids = np.concatenate([pi, n + np.arange(nh)])
        keys = np.concatenate([np.arange(n) * 2 + 1, np.asarray(hbefore, dtype=np.int64) * 2])
        sub = np.concatenate([np.zeros(n, dtype=np.int64), np.arange(nh)])
        seq = ids[np.lexsort((sub, keys))]
        hq1a = np.asarray(hq1, dtype=np.int64)
        hq2a = np.asarray(hq2, dtype=np.int64)
        hq1a[hq1a < 0] = sentinel
        qq1 = np.concatenate([q1, hq1a])
        qq2 = np.concatenate([q2, hq2a])
        hdev = num_devices + np.arange(nh)
        dd = np.concatenate([dev, hdev])
        o.pi = seq.tolist()
        o.pdev = dd[seq].tolist()
        o.q1 = qq1[seq].tolist()
        o.q2 = qq2[seq].tolist()
        o.dsel = np.where(seq < n, seq, n)  # durations: helpers read the appended 0.0
    else:
        o.pi = pi_l
        o.pdev = dev_l
        o.q1 = q1[pi].tolist()
        o.q2 = q2[pi].tolist()
        o.dsel = pi
    o.n, o.total, o.ndev = n, total, num_devices + nh
    # the same sequences as int64 arrays, for the compiled sweep (optional extra ``fast``)
    o.arrays = tuple(np.asarray(x, dtype=np.int64) for x in (o.pi, o.pdev, o.q1, o.q2))
    # previous task on the same device in pi
    by_dev = pi[np.argsort(dev[pi], kind="stable")]
    prevdev = np.full(n, n, dtype=np.int64)
    same = dev[by_dev][1:] == dev[by_dev][:-1]
    prevdev[by_dev[1:][same]] = by_dev[:-1][same]
    o.pair_x, o.pair_y = by_dev[:-1][same], by_dev[1:][same]
    o.prevdev = prevdev
    # predecessors grouped by task, for the exact ready times
    order = np.argsort(dst, kind="stable")
    o.psrc = src[order]
    counts = np.bincount(dst, minlength=n)
    starts = np.cumsum(counts) - counts
    o.phas = counts > 0
    o.pstarts = starts[o.phas]
    o.src, o.dst = src, dst
    o.pair_lt, o.edge_lt = o.pair_x < o.pair_y, src < dst  # the id tie-breaks of the checks
    return o


def static_order_timeline(o: _Order, duration: np.ndarray, kernel: str = "auto"):
    """``(ready, start, end)`` of the engine for these durations, or None when the guessed order is
    not the engine's (then run :func:`simulator.engine.core.simulate`).

    ``kernel``: ``"auto"`` runs the sweep compiled when numba is installed (the same loop and IEEE
    operations, so the same bits: tests/test_engine_numba.py), ``"python"`` always the Python loop."""
    dur = np.asarray(duration, dtype=np.float64)
    if not bool(np.all(dur >= 0.0)):  # negative or NaN: the engine's semantics, not the sweep's
        return None
    n = o.n
    durs = np.append(dur, 0.0)[o.dsel] if o.total > n else dur[o.dsel]
    from simulator.engine.core import compiled_kernel
    # ~0.2 us per entry in the Python loop (docs/changelog-performance.md): the registry compiles once it pays
    sweep = compiled_kernel("static_sweep", work=o.total * 0.2e-6) if kernel != "python" else None
    if sweep is not None:
        end = sweep(*o.arrays, durs, o.total, o.ndev)[:n]
    else:
        E = [0.0] * (o.total + 1)  # E[total] = 0.0: "no predecessor"
        free = [0.0] * max(o.ndev, 1)
        # only ends are kept in the loop (the hot path of a search); starts follow from the ends below
        for t, dv, a, b, d in zip(o.pi, o.pdev, o.q1, o.q2, durs.tolist()):
            r = E[a]
            x = E[b]
            if x > r:
                r = x
            s = free[dv]
            if r > s:
                s = r
            e = s + d
            free[dv] = e
            E[t] = e
        end = np.array(E, dtype=np.float64)[:n]
    ready = np.zeros(n, dtype=np.float64)
    if o.psrc.size:
        ready[o.phas] = np.maximum.reduceat(end[o.psrc], o.pstarts)
    ext = np.append(end, 0.0)
    # the engine's equations: start = max(ready, end of the device's previous task), end = start +
    # duration (same IEEE addition as e above); when they hold, (start, end) is the engine's timeline
    start = np.maximum(ready, ext[o.prevdev])
    if not np.array_equal(end, start + dur):
        return None
    rx, ry = ready[o.pair_x], ready[o.pair_y]
    if not bool(np.all((rx < ry) | ((rx == ry) & o.pair_lt))):
        return None
    ru, rv = ready[o.src], ready[o.dst]
    if not bool(np.all((ru < rv) | ((ru == rv) & o.edge_lt))):
        return None
    return ready, start, end


def layout_order(lay) -> _Order | None:
    """The sweep order of a coarse lowering layout: DP parameter gathers first (ready at 0), then
    actions in a topological order, each followed by the transfers its exit releases; then each
    rank's epilogue."""
    if "order" in lay.extra:
        return lay.extra["order"]
    from taskgraph.lower_coarse import R_GAT
    ax = lay.extra["actions"]
    A = ax.stage.size
    n, N1 = lay.n, lay.extra["n_phase1"]
    X = lay.extra["transfer_dst"]
    topo_pos = np.empty(A, dtype=np.int64)
    topo_pos[ax.topo] = np.arange(A)
    key1 = np.empty(n, dtype=np.int64)
    key2 = np.zeros(n, dtype=np.int64)
    key1[:N1] = topo_pos[lay.extra["phase1_action"]]
    key1[N1:N1 + X.size] = topo_pos[ax.data_out[X]]
    key2[N1:N1 + X.size] = 1
    key1[N1 + X.size:] = A + lay.rank[N1 + X.size:]
    if lay.extra["overlap_param_gather"]:
        key1[(lay.extra["roles"] == R_GAT)] = -1
    pi = np.lexsort((np.arange(n), key2, key1))
    o = build_order(n, lay.device, lay.src, lay.dst, pi, 3 * lay.pp + len(lay.links))
    lay.extra["order"] = o
    return o


def simulate_coarse(graph, layout=None):
    """:class:`simulator.engine.core.SimResult` of a coarse graph (from :mod:`taskgraph.lower_coarse`),
    by the static-order sweep when ``layout`` is given and the check passes, else by the engine."""
    from simulator.engine.core import simulate
    o = layout_order(layout) if layout is not None else None
    res = static_order_timeline(o, graph.duration) if o is not None else None
    return simulate(graph) if res is None else sweep_result(*res)


def sweep_result(ready: np.ndarray, start: np.ndarray, end: np.ndarray):
    """The :class:`simulator.engine.core.SimResult` of a verified sweep's arrays, with the engine's
    pop order (ready times, ties by id)."""
    from simulator.engine.core import SimResult
    order = np.lexsort((np.arange(ready.size), ready)).astype(np.int32)  # = the engine's pop order
    return SimResult(ready=ready, start=start, end=end, order=order, makespan=float(end.max()))
