"""The stated intervals as the reports show them: the ``simulate --json`` keys, a search's ranked rows
with the ranks whose intervals overlap, and the memory verdict of a memory report (issue 39).

The interval itself -- method, data, sources -- is :mod:`simulator.reports.intervals`; this module
only applies it to the figures each report prints (a quantity proportional to the step time gets
``[t lo, t hi]``, a rate ``[x / hi, x / lo]``).
"""
from __future__ import annotations

from simulator.reports.envelope import RunFeatures
from simulator.reports.intervals import DEFAULT_LEVEL, Calibration, Interval, interval_for, memory_margin, sim_interval

#: JSON key of each interval -> (the training report's field, how it moves with the step time)
TRAINING_INTERVALS = {"iteration_time_interval_s": ("iteration_time_s", "time"),
                      "tokens_per_s_interval": ("tokens_per_s", "rate"),
                      "tokens_per_s_per_gpu_interval": ("tokens_per_s_per_gpu", "rate"),
                      "mfu_interval": ("mfu", "rate"), "hfu_interval": ("hfu", "rate"),
                      "mfu_fp8_peak_interval": ("mfu_fp8_peak", "rate"),
                      "train_days_interval": ("train_days", "time"),
                      "train_gpu_hours_interval": ("train_gpu_hours", "time")}


def interval_fields(training, interval: Interval | None, cost_usd: float | None = None,
                    level: float = DEFAULT_LEVEL, reason: str = "") -> dict:
    """The JSON keys every ``simulate --json`` carries: ``interval_level``, ``[lo, hi]`` for the step
    time, tokens/s, MFU, HFU, days, GPU-hours and cost (None where the point value is None, or no
    interval applies: ``reason``), and ``interval`` (how it was built)."""
    out: dict = {"interval_level": interval.level if interval is not None else level}
    for key, (name, kind) in TRAINING_INTERVALS.items():
        x = getattr(training, name, None) if training is not None else None
        out[key] = None if (x is None or interval is None) else \
            list(interval.time(x) if kind == "time" else interval.rate(x))
    out["cost_usd_interval"] = None if (cost_usd is None or interval is None) else list(interval.time(cost_usd))
    out["interval"] = interval.to_json() if interval is not None else {"level": level, "note": reason}
    return out


def overlaps(a: tuple[float, float] | list, b: tuple[float, float] | list) -> bool:
    """Whether two intervals share a point.

    >>> overlaps((1.0, 2.0), (1.9, 3.0)), overlaps((1.0, 2.0), (2.1, 3.0))
    (True, False)
    """
    return a[0] <= b[1] and b[0] <= a[1]


#: search objective -> (the row's column it ranks by, how it moves with the step time)
OBJECTIVE_COLUMNS = {"time": ("days_to_train", "time"), "cost": ("cost_usd", "time"),
                     "tokens-per-dollar": ("tokens_per_dollar", "rate")}


def ranked_intervals(rows: list[dict], base: RunFeatures, objective: str, fidelity: str,
                     level: float = DEFAULT_LEVEL, options_stack: str | None = None) -> list[dict]:
    """Per ranked search row (dicts with ``gpus``, ``zero``, ``iteration_time_s`` and the objective's
    column): the iteration-time and objective intervals, and the ranks above it whose objective
    intervals overlap its own (their order is within the stated error). ``base``: the features of
    the searched file; a candidate differs in GPUs and ZeRO stage (hence, with ``options_stack``,
    perhaps in stack)."""
    from dataclasses import replace

    from simulator.reports.envelope import stack_name
    col, kind = OBJECTIVE_COLUMNS[objective]
    out: list[dict] = []
    cache: dict = {}
    for r in rows:
        x = r.get(col)
        if r.get("status") != "ok" or x is None or x != x:  # invalid, OOM, or no price (nan)
            out.append({"iteration_time_interval_s": None, "objective_interval": None, "overlaps_ranks": []})
            continue
        key = (int(r["gpus"]), int(r["zero"]))
        if key not in cache:
            f = replace(base, gpus=key[0], stack=stack_name(options_stack, key[1]))
            cache[key] = interval_for(f, fidelity, level)
        iv = cache[key]
        obj = list(iv.time(x) if kind == "time" else iv.rate(x))
        over = [int(rows[j]["rank"]) for j, o in enumerate(out)
                if o["objective_interval"] is not None and overlaps(o["objective_interval"], obj)]
        out.append({"iteration_time_interval_s": list(iv.time(r["iteration_time_s"])), "objective_interval": obj,
                    "overlaps_ranks": over})
    return out


def report_memory_margin(mem, level: float = DEFAULT_LEVEL, calibration: Calibration | None = None) -> dict:
    """:func:`memory_margin` of the worst rank of a :class:`simulator.reports.memory.MemoryReport`."""
    worst = max(mem.per_stage, key=lambda st: st.total)
    return memory_margin(worst.total, mem.capacity, level, worst.reserve, calibration)


NO_MODEL_NOTE = ("a pipeline description's task durations are given, not predicted from a model and cluster: "
                 "no calibration applies")


def simulation_fields(sim, mem=None, cost_usd: float | None = None, level: float = DEFAULT_LEVEL) -> dict:
    """The interval keys of ``simulate --json`` for a simulation (:func:`interval_fields`) and, with
    its memory report ``mem``, ``memory_interval`` (:func:`report_memory_margin`). A pipeline
    description (no plan) gets the keys with null values and the reason in ``interval.note``."""
    if getattr(sim, "plan", None) is None or mem is None:
        return interval_fields(None, None, level=level, reason=NO_MODEL_NOTE)
    out = interval_fields(sim.training, sim_interval(sim, level), cost_usd)
    out["memory_interval"] = report_memory_margin(mem, level)
    return out


__all__ = [
    "NO_MODEL_NOTE",
    "OBJECTIVE_COLUMNS",
    "TRAINING_INTERVALS",
    "interval_fields",
    "overlaps",
    "ranked_intervals",
    "report_memory_margin",
    "simulation_fields",
]
