"""Fast strategy evaluation for search: :func:`evaluate` one strategy, :func:`sweep` many.

``evaluate`` runs resolve -> costs -> lowering -> timeline -> the numbers a search ranks by
(iteration time, tokens/s, MFU/HFU, bubble, peak memory per pipeline rank, fits) and skips what
only a human reads (critical path, exposed communication, traces). At coarse fidelity it is
bit-for-bit the iteration time, bubble, MFU and peak memory of :func:`simulator.api.simulate_strategy`
(tested); GPT-3 175B on 1024 GPUs takes ~2-3 ms with warm caches against ~55 ms for resolve + costs +
``lower_model`` + engine + reports (``python -m benchmarks.search``):

* lowering: :mod:`taskgraph.lower_coarse` (structure cached on the schedule, durations gathered);
* timeline: :func:`static_order_timeline`, a sweep over a precomputed task order instead of the
  engine's heap, *verified* after the fact to be exactly the engine's timeline (else the engine runs);
* reports: only the fields above, with the same arithmetic as the full reports.

Why the static-order timeline equals the engine (``simulator/engine.py``): the engine pops tasks
keyed ``(ready, id)``; ``simulator/delta.py`` (Lemma 1) shows that if per-task times satisfy
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

import itertools
import time
from dataclasses import dataclass, replace
from typing import Any, Iterable, Mapping

import numpy as np

from strategies.errors import ExecsimError


# --------------------------------------------------------------------------------------------------
# Static-order timeline


class _Order:
    """Processing order and checks for one task structure (cached on a lowering layout)."""

    __slots__ = ("n", "total", "pi", "pdev", "q1", "q2", "dsel", "prevdev", "pair_x", "pair_y", "psrc",
                 "pstarts", "phas", "src", "dst", "ndev", "pair_lt", "edge_lt", "arrays")


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
    not the engine's (then run :func:`simulator.engine.simulate`).

    ``kernel``: ``"auto"`` runs the sweep compiled when numba is installed (the same loop and IEEE
    operations, so the same bits: tests/test_engine_numba.py), ``"python"`` always the Python loop."""
    dur = np.asarray(duration, dtype=np.float64)
    if not bool(np.all(dur >= 0.0)):  # negative or NaN: the engine's semantics, not the sweep's
        return None
    n = o.n
    durs = np.append(dur, 0.0)[o.dsel] if o.total > n else dur[o.dsel]
    from simulator.engine import compiled_kernel
    sweep = compiled_kernel("static_sweep") if kernel != "python" else None
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


def _layout_order(lay) -> _Order | None:
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
    """:class:`simulator.engine.SimResult` of a coarse graph (from :mod:`taskgraph.lower_coarse`),
    by the static-order sweep when ``layout`` is given and the check passes, else by the engine."""
    from simulator.engine import SimResult, simulate
    o = _layout_order(layout) if layout is not None else None
    res = static_order_timeline(o, graph.duration) if o is not None else None
    if res is None:
        return simulate(graph)
    ready, start, end = res
    order = np.lexsort((np.arange(graph.num_tasks), ready)).astype(np.int32)  # = the engine's pop order
    return SimResult(ready=ready, start=start, end=end, order=order, makespan=float(end.max()))


# moved to simulator/simulate.py (simulation dispatch); re-exported for existing importers
from simulator.simulate import lower_and_simulate  # noqa: E402,F401


# --------------------------------------------------------------------------------------------------
# Lean reports


@dataclass(frozen=True)
class Evaluation:
    """What a strategy search ranks by (one simulated iteration).

    iteration_time_s, tokens_per_s, tokens_per_s_per_gpu, mfu, hfu: as in
    :class:`simulator.training_report.TrainingReport`. bubble_fraction, idle_fraction, imbalance: as
    in :class:`simulator.reports.Report`. peak_memory_gb: per pipeline rank, one GPU's peak (model
    states + activations alive at the simulated peak + reserve), GiB, as ``MemoryReport``'s
    ``peak_memory_gb``; fits: every rank's peak within capacity_gb (the GPU's HBM).
    timeline: ``static-order`` (verified sweep) or ``engine``.
    """

    iteration_time_s: float
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    mfu: float
    hfu: float
    bubble_fraction: float
    idle_fraction: float
    imbalance: float
    peak_memory_gb: tuple[float, ...]
    capacity_gb: float
    fits: bool
    num_gpus: int
    microbatches: int
    num_tasks: int
    fidelity: str
    timeline: str
    wall_s: float

    @property
    def max_memory_gb(self) -> float:
        return max(self.peak_memory_gb) if self.peak_memory_gb else 0.0

    def to_json(self) -> dict:
        d = dict(self.__dict__)
        d["peak_memory_gb"] = list(self.peak_memory_gb)
        return d


_MEMO: dict = {}


def _memo(key, fn):
    try:
        v = _MEMO.get(key)
    except TypeError:  # unhashable (a model spec holding a list, say)
        return fn()
    if v is None:
        if len(_MEMO) >= 4096:
            _MEMO.clear()
        v = _MEMO[key] = fn()
    return v


def _flops(plan) -> tuple[float, float]:
    """(model FLOPs per token, recomputed forward FLOPs per microbatch summed over layers, before
    scaling by GPUs and microbatches) -- training_report's numbers, memoized."""
    from taskgraph.operators import model_flops_per_token
    tr, s = plan.strategy.training, plan.sizes
    flash = plan.strategy.options.flash_attention

    def compute():
        from simulator.training_report import recompute_flops_per_microbatch
        return model_flops_per_token(plan.model, tr.seq_len, "megatron"), recompute_flops_per_microbatch(plan)

    return _memo(("flops", plan.model, tr.seq_len, tr.micro_batch, tr.recompute, tr.recompute_layers, s.tp,
                  plan.sp, s.cp, s.ep, flash), compute)


def _static_totals(plan) -> tuple[float, ...]:
    """Model-state bytes per GPU of each pipeline rank (``taskgraph.memory.static_memory``), memoized."""
    from taskgraph.memory import static_memory
    tr, opt = plan.strategy.training, plan.strategy.options
    key = ("static", plan.model, tr.micro_batch, tr.seq_len, tr.precision, opt.fp32_grad_accum, plan.sizes, plan.sp,
           plan.zero, plan.schedule.stage_to_rank, plan.layers_per_stage)
    return _memo(key, lambda: tuple(st.total for _, st in sorted(static_memory(plan).items())))


def _peaks(pp: int, task: np.ndarray, delta: np.ndarray, t: np.ndarray, erank: np.ndarray) -> list[float]:
    """Peak dynamic memory per rank: ``memory_timeline.memory_curves``' event order and sums."""
    out = [0.0] * pp
    if task.size == 0:
        return out
    order = np.lexsort((task, delta > 0, t, erank))
    bounds = np.searchsorted(erank[order], np.arange(pp + 1))
    d = delta[order]
    for r in range(pp):
        lo, hi = bounds[r], bounds[r + 1]
        if hi > lo:
            out[r] = max(float(np.cumsum(d[lo:hi]).max()), 0.0)
    return out


def _bubble(graph_like, start: np.ndarray, end: np.ndarray, makespan: float, busy: list[float],
            ready: np.ndarray | None = None) -> float:
    """Report.bubble_fraction: sum of pipeline bubble (simulator.breakdown) / sum of busy. ``ready``:
    the static-order sweep's ready times (the maximum of the predecessors' ends, exactly what
    time_breakdown would recompute), or None."""
    from simulator.breakdown import pipeline_bubble_total
    comp = sum(busy)
    return pipeline_bubble_total(graph_like, start, end, ready, makespan) / comp if comp > 0 else 0.0


def _metrics(plan, makespan: float, busy: list[float], peaks: list[float], num_tasks: int, fidelity: str,
             timeline: str, t0: float, bubble: float = 0.0) -> Evaluation:
    """The report() / training_report() / memory_report() formulas on the needed numbers only."""
    from simulator.memory_report import GB
    s = plan.sizes
    per = []
    for b in busy:
        idle = max(makespan - b, 0.0)
        per.append((b, idle, idle / makespan if makespan > 0 else 0.0))
    total_busy = sum(x[0] for x in per)
    mean_busy = total_busy / len(per) if per else 0.0
    idle_fraction = float(np.mean([x[2] for x in per])) if per else 0.0
    imbalance = (max(x[0] for x in per) / mean_busy) if mean_busy > 0 else 1.0
    mf, rec = _flops(plan)
    tokens = plan.tokens_per_iteration
    model_flops = mf * tokens
    recompute = rec * (s.tp * s.cp * s.dp * plan.microbatches)
    peak = plan.cluster.gpu.peak_flops("bf16")
    n = plan.num_gpus
    it = makespan
    mfu = model_flops / (it * n * peak) if it > 0 else 0.0
    hfu = (model_flops + recompute) / (it * n * peak) if it > 0 else 0.0
    tps = tokens / it if it > 0 else 0.0
    reserve = plan.strategy.options.memory_reserve_gb * GB
    cap = plan.cluster.gpu.hbm_capacity
    totals = [st + p + reserve for st, p in zip(_static_totals(plan), peaks)]
    return Evaluation(
        iteration_time_s=it, tokens_per_s=tps, tokens_per_s_per_gpu=tps / n, mfu=mfu, hfu=hfu,
        bubble_fraction=bubble, idle_fraction=idle_fraction, imbalance=imbalance,
        peak_memory_gb=tuple(x / GB for x in totals), capacity_gb=cap / GB, fits=all(x <= cap for x in totals),
        num_gpus=n, microbatches=plan.microbatches, num_tasks=num_tasks, fidelity=fidelity, timeline=timeline,
        wall_s=time.perf_counter() - t0)


def _graph_numbers(graph, start: np.ndarray, end: np.ndarray) -> tuple[list[float], list[float]]:
    """(busy per rank, peak dynamic memory per rank) of any graph: compute_busy and memory_curves."""
    from simulator.reports import compute_busy
    busy_d = compute_busy(graph)
    ranks = sorted(busy_d)
    dev_rank = np.array([d.rank for d in graph.devices], dtype=np.int64)
    task = graph.mem_task.astype(np.int64)
    t = np.where(graph.mem_at_end == 1, end[task], start[task])
    pp = max(ranks) + 1 if ranks else 0
    peaks = _peaks(pp, task, graph.mem_bytes, t, dev_rank[graph.device[task]])
    return [busy_d[r] for r in ranks], [peaks[r] for r in ranks]


def _layout_busy(lay, dur: np.ndarray) -> list[float]:
    """compute_busy on a coarse layout (compute devices are 3r; arrays cached)."""
    c = lay.extra.get("busy")
    if c is None:
        ndev = 3 * lay.pp + len(lay.links)
        is_comp = np.zeros(ndev, dtype=bool)
        is_comp[0:3 * lay.pp:3] = True
        dev_rank = np.array([r for r in range(lay.pp) for _ in range(3)] + [a for a, _ in lay.links], dtype=np.int64)
        mask = is_comp[lay.device]
        c = lay.extra["busy"] = (mask, dev_rank[lay.device[mask]], int(dev_rank.max(initial=0)) + 1)
    mask, ranks, minlength = c
    busy = np.bincount(ranks, weights=dur[mask], minlength=minlength)
    return [float(busy[r]) for r in range(lay.pp)]


def _apply_overrides(strategy, schedule, vpp):
    if schedule is not None:
        strategy = replace(strategy, schedule=schedule, schedule_csv=None)
    if vpp is not None and vpp != strategy.parallel.vpp:
        strategy = replace(strategy, parallel=replace(strategy.parallel, vpp=vpp, layers_per_stage=None))
    return strategy


def evaluate(strategy, fidelity: str | None = "coarse", *, schedule: str | None = None,
             vpp: int | None = None) -> Evaluation:
    """Resolve, cost, lower and simulate ``strategy`` (a :class:`strategies.strategy_file.Strategy`)
    and return the numbers a search needs. ``fidelity=None`` uses the strategy's own option.

    Raises the :class:`strategies.errors.ConfigError` of an infeasible strategy (as
    ``simulate_strategy`` does); memory that does not fit is reported (``fits``), not raised.
    """
    from simulator.engine import simulate
    from taskgraph.costing import build_work
    from taskgraph.lower_coarse import NotCoarse, coarse_layout, graph_from_layout
    from taskgraph.plan import resolve
    t0 = time.perf_counter()
    strategy = _apply_overrides(strategy, schedule, vpp)
    fid = fidelity or strategy.options.fidelity
    plan = resolve(strategy)
    work = build_work(plan, fidelity=fid)
    handoff = strategy.options.overlap_handoff
    lay = None
    if fid == "coarse":
        try:
            lay = coarse_layout(plan.schedule, work, handoff)
        except NotCoarse:
            lay = None
    if lay is not None:
        dur = lay.durations(work)
        o = _layout_order(lay)
        res = static_order_timeline(o, dur) if o is not None else None
        if res is not None:
            ready, start, end = res
            timeline = "static-order"
        else:
            r = simulate(graph_from_layout(lay, work))
            ready, start, end = None, r.start, r.end
            timeline = "engine"
        makespan = float(end.max()) if end.size else 0.0
        busy = _layout_busy(lay, dur)
        task = lay.mem_task.astype(np.int64)
        peaks = _peaks(lay.pp, task, lay.memory_bytes(work), end[task], lay.rank[task].astype(np.int64))
        from types import SimpleNamespace
        shape = SimpleNamespace(num_tasks=lay.n, succ_ptr=lay.succ_ptr, succ_idx=lay.succ_idx, device=lay.device,
                                category=lay.category, devices=lay.devices(1))
        return _metrics(plan, makespan, busy, peaks, lay.n, fid, timeline, t0,
                        _bubble(shape, start, end, makespan, busy, ready))
    from taskgraph.lower_model import lower_model
    graph = lower_model(plan.schedule, work, overlap_handoff=handoff)
    r = simulate(graph)
    busy, peaks = _graph_numbers(graph, r.start, r.end)
    return _metrics(plan, float(r.makespan), busy, peaks, graph.num_tasks, fid, "engine", t0,
                    _bubble(graph, r.start, r.end, float(r.makespan), busy))


# --------------------------------------------------------------------------------------------------
# Sweeps


def _field_names():
    from dataclasses import fields
    from strategies.strategy_file import OptionsSpec, ParallelSpec, TrainingSpec
    return {"parallel": {f.name for f in fields(ParallelSpec)}, "training": {f.name for f in fields(TrainingSpec)},
            "options": {f.name for f in fields(OptionsSpec)}}


def vary(strategy, variation: Mapping[str, Any]):
    """``strategy`` with the fields in ``variation`` replaced.

    Keys: a field name of ``parallel``, ``training`` or ``options`` (``tp``, ``micro_batch``,
    ``overlap_grad_reduce`` ...), optionally dotted (``parallel.tp``), or ``schedule``, ``model``,
    ``cluster``. When tp, pp or cp change and the variation does not set dp, dp is re-derived from
    the world size; when pp or vpp change and it does not set layers_per_stage, layers split evenly.
    Values are checked like the strategy file's (:class:`strategies.errors.ConfigError`).
    """
    from strategies.config import did_you_mean
    from strategies.errors import ConfigError
    from strategies.strategy_file import FIDELITIES, PRECISIONS, RECOMPUTE
    names = _field_names()
    sections: dict[str, dict] = {"parallel": {}, "training": {}, "options": {}}
    top: dict[str, Any] = {}
    for key, value in variation.items():
        sec, _, name = key.rpartition(".")
        if key in ("schedule", "model", "cluster"):
            top[key] = value
            continue
        if sec:
            if sec not in names or name not in names[sec]:
                valid = sorted(f"{s}.{n}" for s in names for n in names[s])
                raise ConfigError(f"variation key {key!r} is not a strategy field{did_you_mean(key, valid)}")
        else:
            owners = [s for s in names if name in names[s]]
            if not owners:
                valid = sorted({n for s in names for n in names[s]} | {"schedule", "model", "cluster"})
                raise ConfigError(f"variation key {key!r} is not a strategy field{did_you_mean(key, valid)}; "
                                  f"valid: {', '.join(valid)}")
            sec = owners[0]
        if name in ("tp", "pp", "vpp", "cp", "ep", "micro_batch", "global_batch", "seq_len") or \
                (name == "dp" and value is not None):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{sec}.{name} = {value!r} must be a positive integer")
        elif name == "zero" and (isinstance(value, bool) or value not in (0, 1, 2, 3)):
            raise ConfigError(f"parallel.zero = {value!r} must be 0, 1, 2 or 3")
        elif name == "precision" and value not in PRECISIONS:
            raise ConfigError(f"training.precision = {value!r} must be one of {', '.join(PRECISIONS)}")
        elif name == "recompute" and value not in RECOMPUTE:
            raise ConfigError(f"training.recompute = {value!r} must be one of {', '.join(RECOMPUTE)}")
        elif name == "fidelity" and value not in FIDELITIES:
            raise ConfigError(f"options.fidelity = {value!r} must be one of {', '.join(FIDELITIES)}")
        elif name in ("layers_per_stage", "recompute_layers") and value is not None:
            value = tuple(value)
        elif isinstance(getattr(getattr(strategy, sec), name), bool) and not isinstance(value, bool):
            raise ConfigError(f"{sec}.{name} = {value!r} must be true or false")
        sections[sec][name] = value
    par = sections["parallel"]
    if any(k in par for k in ("tp", "pp", "cp")) and "dp" not in par:
        par["dp"] = None
    if any(k in par for k in ("pp", "vpp")) and "layers_per_stage" not in par:
        par["layers_per_stage"] = None
    if par.get("zero") == 3 and par.get("pp", strategy.parallel.pp) > 1:
        raise ConfigError(f"parallel.zero = 3 with parallel.pp = {par.get('pp', strategy.parallel.pp)}: ZeRO-3 is "
                          f"not combined with pipeline parallelism; use zero <= 1 with pp > 1")
    out = replace(strategy, parallel=replace(strategy.parallel, **par),
                  training=replace(strategy.training, **sections["training"]),
                  options=replace(strategy.options, **sections["options"]))
    if "schedule" in top:
        out = replace(out, schedule=top["schedule"], schedule_csv=None)
    for k in ("model", "cluster"):
        if k in top:
            out = replace(out, **{k: top[k]})
    from strategies.strategy_file import check_strategy
    check_strategy(out)  # every check of the strategy file (types, finiteness, limits), same messages
    return out


def grid(**axes: Iterable) -> list[dict]:
    """The cartesian product of ``axes`` as variations: ``grid(tp=[4, 8], pp=[8, 16])``."""
    keys = list(axes)
    return [dict(zip(keys, vals)) for vals in itertools.product(*(list(axes[k]) for k in keys))]


def sweep(base_strategy, variations: Iterable[Mapping[str, Any]] | Mapping[str, Iterable], *,
          fidelity: str | None = "coarse", require_fit: bool = True, progress: bool | None = None):
    """Evaluate ``base_strategy`` under each variation (see :func:`vary`); a mapping of lists is
    expanded with :func:`grid`. Returns a pandas DataFrame, one row per variation: its keys, then
    ``feasible``, ``error`` and the :class:`Evaluation` fields (``peak_memory_gb`` as the maximum
    over ranks; ``memory_gb_per_rank`` the tuple). Feasible rows come first, fastest first; then
    those that do not fit in memory (``require_fit``; their times are kept), then those rejected
    with their error message (invalid sizes, an unsupported schedule ...). ``progress``: a bar on
    stderr (``None``: only when stderr is a terminal; ``simulator.progress``).
    """
    import pandas as pd

    from simulator.progress import progress as _progress
    variations = grid(**variations) if isinstance(variations, Mapping) else list(variations)
    rows = []
    for i, var in enumerate(_progress(variations, desc="sweep", enabled=progress, unit="case")):
        row: dict[str, Any] = {k: (list(v) if isinstance(v, tuple) else v) for k, v in var.items()}
        try:
            ev = evaluate(vary(base_strategy, var), fidelity)
        except ExecsimError as exc:
            row.update(feasible=False, error=str(exc), iteration_time_s=float("nan"))
        else:
            d = ev.to_json()
            mem = d.pop("peak_memory_gb")
            ok = ev.fits or not require_fit
            err = None if ev.fits else (f"out of memory: peak {max(mem):.2f} GiB on rank {int(np.argmax(mem))} > "
                                        f"{ev.capacity_gb:.2f} GiB")
            row.update(feasible=ok, error=err, **d, peak_memory_gb=max(mem), memory_gb_per_rank=tuple(mem))
        row["_i"] = i
        rows.append(row)
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    keys = [c for c in df.columns if c in {k for var in variations for k in var}]
    df[keys] = df[keys].convert_dtypes()  # integer keys stay integers where a variation omits them
    df["_rank"] = np.where(df["feasible"], 0, np.where(df["error"].fillna("").str.startswith("out of memory"), 1, 2))
    df = df.sort_values(["_rank", "iteration_time_s", "_i"], na_position="last", kind="stable")
    return df.drop(columns=["_rank", "_i"]).reset_index(drop=True)
