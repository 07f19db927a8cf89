"""Fast strategy evaluation for search: :func:`evaluate` one strategy, :func:`sweep` many.

``evaluate`` runs resolve -> costs -> lowering -> timeline -> the numbers a search ranks by
(iteration time, tokens/s, MFU/HFU, bubble, peak memory per pipeline rank, fits) and skips what
only a human reads (critical path, exposed communication, traces). At coarse fidelity it is
bit-for-bit the iteration time, bubble, MFU and peak memory of :func:`simulator.api.simulate_strategy`
(tested); GPT-3 175B on 1024 GPUs takes ~2-3 ms with warm caches against ~55 ms for resolve + costs +
``lower_model`` + engine + reports (``python -m benchmarks.search``):

* lowering and timeline: :func:`simulator.engine.dispatch.run_iteration`, the one dispatcher
  ``simulate_strategy`` also runs -- at coarse fidelity the layout of :mod:`taskgraph.lower_coarse`
  (structure cached on the schedule, durations gathered) and a sweep over a precomputed task order
  instead of the engine's heap, *verified* after the fact to be exactly the engine's timeline (else
  the engine runs);
* reports: only the fields above, read from the run record with the same arithmetic as the full
  reports (at coarse fidelity from the layout's arrays, without building the task graph).
"""
from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from strategies.errors import ExecsimError

# --------------------------------------------------------------------------------------------------
# Lean reports


@dataclass(frozen=True)
class Evaluation:
    """What a strategy search ranks by (one simulated iteration).

    iteration_time_s, tokens_per_s, tokens_per_s_per_gpu, mfu, hfu: as in
    :class:`simulator.reports.training.TrainingReport`. bubble_fraction, idle_fraction, imbalance: as
    in :class:`simulator.reports.report.Report`. peak_memory_gb: per pipeline rank, one GPU's peak (model
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


MEMO: dict = {}


def _memo(key, fn):
    try:
        v = MEMO.get(key)
    except TypeError:  # unhashable (a model spec holding a list, say)
        return fn()
    if v is None:
        if len(MEMO) >= 4096:
            MEMO.clear()
        v = MEMO[key] = fn()
    return v


def _flops(plan) -> tuple[float, float]:
    """(model FLOPs per token, recomputed forward FLOPs per microbatch summed over layers, before
    scaling by GPUs and microbatches) -- training_report's numbers, memoized."""
    from taskgraph.operators import model_flops_per_token
    tr, s = plan.strategy.training, plan.sizes
    flash = plan.strategy.options.flash_attention

    def compute():
        from simulator.reports.training import recompute_flops_per_microbatch
        from taskgraph.lora_flops import lora_flops_per_token  # LoRA: what the step computes (training_report)
        per_token = model_flops_per_token(plan.model, tr.seq_len, "megatron") if tr.lora is None else \
            lora_flops_per_token(plan.model, tr.seq_len, tr.lora)
        return per_token, recompute_flops_per_microbatch(plan)

    return _memo(("flops", plan.model, tr.seq_len, tr.micro_batch, tr.recompute, tr.recompute_layers, s.tp,
                  plan.sp, s.cp, s.ep, flash, tr.lora), compute)


def _static_totals(plan) -> tuple[float, ...]:
    """Model-state bytes per GPU of each pipeline rank (``taskgraph.memory.static_memory``), memoized."""
    from taskgraph.memory import static_memory
    tr, opt = plan.strategy.training, plan.strategy.options
    key = ("static", plan.model, tr.micro_batch, tr.seq_len, tr.precision, opt.fp32_grad_accum, plan.sizes, plan.sp,
           plan.zero, plan.schedule.stage_to_rank, plan.layers_per_stage)
    return _memo(key, lambda: tuple(st.total for _, st in sorted(static_memory(plan).items())))


def memory_peaks(pp: int, task: np.ndarray, delta: np.ndarray, t: np.ndarray, erank: np.ndarray) -> list[float]:
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


def _bubble(run, busy: list[float]) -> float:
    """Report.bubble_fraction of a :class:`simulator.engine.dispatch.IterationRun`: sum of pipeline
    bubble (simulator.reports.breakdown) / sum of busy, with the run's ready times (the maximum of the
    predecessors' ends, exactly what time_breakdown would recompute)."""
    from simulator.reports.breakdown import pipeline_bubble_total
    comp = sum(busy)
    return pipeline_bubble_total(run, run.start, run.end, run.ready, run.makespan) / comp if comp > 0 else 0.0


def search_metrics(plan, makespan: float, busy: list[float], peaks: list[float], num_tasks: int, fidelity: str,
             timeline: str, t0: float, bubble: float = 0.0) -> Evaluation:
    """The report() / training_report() / memory_report() formulas on the needed numbers only."""
    from simulator.reports.memory import GB
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


def _busy_and_peaks(run) -> tuple[list[float], list[float]]:
    """(busy per rank, peak dynamic memory per rank) of a run: compute_busy and memory_curves, at
    coarse fidelity from the layout's arrays."""
    lay = run.layout
    if lay is not None:
        task = lay.mem_task.astype(np.int64)
        peaks = memory_peaks(lay.pp, task, lay.memory_bytes(run.work), run.end[task], lay.rank[task].astype(np.int64))
        return layout_busy(lay, run.duration), peaks
    from simulator.reports.report import compute_busy
    graph, start, end = run.graph, run.start, run.end
    busy_d = compute_busy(graph)
    ranks = sorted(busy_d)
    dev_rank = np.array([d.rank for d in graph.devices], dtype=np.int64)
    task = graph.mem_task.astype(np.int64)
    t = np.where(graph.mem_at_end == 1, end[task], start[task])
    pp = max(ranks) + 1 if ranks else 0
    peaks = memory_peaks(pp, task, graph.mem_bytes, t, dev_rank[graph.device[task]])
    return [busy_d[r] for r in ranks], [peaks[r] for r in ranks]


def layout_busy(lay, dur: np.ndarray) -> list[float]:
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
    t0 = time.perf_counter()
    plan, work, fid = prepare(_apply_overrides(strategy, schedule, vpp), fidelity)
    return evaluate_prepared(plan, work, fid, t0)


def prepare(strategy, fidelity: str | None = "coarse"):
    """``(plan, work, fidelity)``: the resolved plan and its cost records, the first half of
    :func:`evaluate` (a branch and bound bounds a candidate from them before simulating it)."""
    from taskgraph.costing import build_work
    from taskgraph.plan import resolve
    fid = fidelity or strategy.options.fidelity
    plan = resolve(strategy)
    return plan, build_work(plan, fidelity=fid), fid


def evaluate_prepared(plan, work, fid: str, t0: float | None = None) -> Evaluation:
    """The second half of :func:`evaluate`: lower and simulate ``plan`` with ``work`` (from
    :func:`prepare`); the same numbers as :func:`evaluate`."""
    from simulator.engine.dispatch import run_iteration
    t0 = time.perf_counter() if t0 is None else t0
    # the one dispatcher simulate_strategy runs (compute slowed beside SM-holding communication)
    run = run_iteration(plan.schedule, work, plan.strategy.options.overlap_handoff, fid)
    busy, peaks = _busy_and_peaks(run)
    return search_metrics(plan, run.makespan, busy, peaks, run.num_tasks, fid, run.timeline, t0, _bubble(run, busy))


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
    stderr (``None``: only when stderr is a terminal; ``simulator.outputs.progress``).
    """
    import pandas as pd

    from simulator.outputs.progress import progress as _progress
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
