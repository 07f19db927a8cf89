"""The goodput report: the policy over seeds and the interval sweep as a JSON-ready dict, and its text.
"""
from __future__ import annotations

import math

import numpy as np

from simulator.goodput.closed_forms import async_goodput, daly_goodput, weibull_renewal_count
from simulator.goodput.model import DAY, HOUR, MECHANISMS, RunModel
from simulator.goodput.seeds import best_interval, default_sweep, sweep_intervals
from simulator.goodput.setup import GoodputSetup
from strategies.goodput_file import check_seeds
from strategies.limits import check_goodput_events

#: SimPy events one failure causes (its timeout, the interrupt, detection, restart and load timeouts,
#: a repair process's start and timeout): the unit of the estimate checked before running
EVENTS_PER_FAILURE = 8


def _stats(x: np.ndarray) -> dict:
    """Mean with the 95 % interval of the mean (normal approximation), extremes and the spread
    across seeds (P10 / P50 / P90: numpy's linear interpolation between order statistics)."""
    n = x.size
    mean = float(x.mean())
    se = float(x.std(ddof=1) / math.sqrt(n)) if n > 1 else 0.0
    p10, p50, p90 = (float(v) for v in np.percentile(x, [10, 50, 90]))
    return {"mean": mean, "ci95": [mean - 1.96 * se, mean + 1.96 * se], "min": float(x.min()), "max": float(x.max()),
            "p10": p10, "p50": p50, "p90": p90}


def expected_wall_s(m: RunModel, goodput: float) -> float:
    """The run's wall time: the horizon, or the failure-free time over ``goodput`` (at least 5 %),
    capped at ``max_wall_s``."""
    if m.horizon_s is not None:
        return m.horizon_s
    return min(m.max_wall_s, m.target_tokens / m.full_tokens_per_s / max(goodput, 0.05))


def expected_events(m: RunModel, wall_s: float) -> float:
    """SimPy events one run causes, estimated before running: ``EVENTS_PER_FAILURE`` per expected
    failure (every source, bad nodes at most ``drain_after`` each), per slow node and per maintenance."""
    fails = 0.0
    for c in m.components:
        # Weibull gaps of shape < 1 cluster failures: the renewal count's second-order term
        # (closed_forms.weibull_renewal_count, Cox 1962) adds (cv^2 - 1) / 2 per process
        if c.per == "lemon" and c.drain_after:
            fails += c.count * min(c.drain_after, c.rate_per_device_hour / HOUR * wall_s)
        elif c.per == "lemon":
            fails += c.count * max(c.rate_per_device_hour / HOUR * wall_s,
                                   weibull_renewal_count(c.rate_per_device_hour / HOUR, c.shape, wall_s))
        else:
            fails += max(c.rate_per_s * wall_s, weibull_renewal_count(c.rate_per_s, c.shape, wall_s))
    fails += m.slow_rate_per_node_hour * m.num_nodes * wall_s / HOUR
    if m.maintenance_every_s > 0:
        fails += wall_s / m.maintenance_every_s
    return EVENTS_PER_FAILURE * fails + 20.0


def goodput_report(setup: GoodputSetup, seeds: int | None = None, *, sweep: bool = True) -> dict:
    """Run the policy over seeds (and the interval sweep) and return the JSON-ready report."""
    m = setup.model
    n = seeds if seeds is not None else setup.spec.seeds
    check_seeds(n, "--seeds")
    cand = []
    if sweep and math.isfinite(setup.optimum_closed_form_s):
        cand = sorted(set(default_sweep(setup.optimum_closed_form_s, m.horizon_s)) | set(setup.intervals))
    cf = _closed_form_goodput(setup, setup.optimum_closed_form_s) if math.isfinite(setup.mtbf_s) else 1.0
    check_goodput_events(n, max(len(setup.intervals), len(cand)), expected_events(m, expected_wall_s(m, cf)))
    seed_list = [setup.spec.seed + i for i in range(n)]
    runs = sweep_intervals(m, setup.intervals, seed_list)
    best_listed = max(runs, key=lambda s: (s.goodput, -s.interval_s))
    main = best_listed
    out: dict = {}
    sw = []
    if cand:
        sweep_runs = [r for r in runs] + [s for s in sweep_intervals(m, [t for t in cand if t not in setup.intervals],
                                                                    seed_list)]
        sw = sorted(sweep_runs, key=lambda s: s.interval_s)
    rs = main.runs
    wall = np.array([r.wall_s for r in rs])
    gp = np.array([r.goodput for r in rs])
    tokens = np.array([r.tokens for r in rs])
    inter = np.array([sum(r.interruptions.values()) for r in rs], dtype=float)
    fails = np.array([sum(r.failures.values()) for r in rs], dtype=float)
    losses = {k: float(np.mean([r.losses[k] for r in rs])) / HOUR for k in MECHANISMS}
    by_comp = {k: float(np.mean([r.lost_by_component[k] for r in rs])) / HOUR for k in rs[0].lost_by_component}
    gpu_h_wasted = float(np.mean([(r.wall_s - r.useful_s) for r in rs])) / HOUR * setup.num_gpus
    held = float(sum(r.held_s for r in rs))
    n_int = float(inter.sum())
    by_cause = {k: float(np.mean([r.interruptions[k] for r in rs])) for k in rs[0].interruptions}
    by_cause["maintenance"] = float(np.mean([r.maintenances for r in rs]))
    out.update({
        "policy": setup.policy,
        "interval_s": main.interval_s,
        "seeds": n,
        "mode": "days" if m.horizon_s is not None else "train_tokens",
        "iteration_time_s": setup.iteration_time_s,
        "tokens_per_iteration": setup.tokens_per_iteration,
        "num_gpus": setup.num_gpus,
        "checkpoint_gb": setup.checkpoint_bytes / 1e9,
        "checkpoint_gb_per_gpu": setup.checkpoint_gb_per_gpu,
        "save_blocking_s": m.save_block_s,
        "save_durable_after_s": m.save_block_s + m.save_commit_s,
        "load_s": m.load_s,
        "restart_s": m.restart_s,
        "failure_rate_per_day": m.failure_rate_per_s * DAY,
        "mtbf_hours": setup.mtbf_s / HOUR,
        "wall_days": _stats(wall / DAY),
        "goodput": _stats(gp),
        # the seeds' P10-P90 spread is an 80 % interval, stated as every prediction's is (issue 39)
        "seed_interval_level": 0.8,
        "wall_days_interval": [float(v) for v in np.percentile(wall / DAY, [10, 90])],
        "goodput_interval": [float(v) for v in np.percentile(gp, [10, 90])],
        "ettr_available": _stats(np.array([r.ettr_available for r in rs])),
        "job_mttf_hours": held / n_int / HOUR if n_int > 0 else None,
        "interruptions_by_cause": by_cause,
        "failed_saves": float(np.mean([r.failed_saves for r in rs])),
        "drained_lemons": float(np.mean([r.drained_lemons for r in rs])),
        "fleet": setup.spec.fleet,
        "tokens": _stats(tokens),
        "interruptions": _stats(inter),
        "failures": _stats(fails),
        "expected_failures": _expected_failures(m, float(wall.mean())),
        "interruptions_by_component": {c.name: float(np.mean([r.interruptions[c.name] for r in rs]))
                                       for c in m.components},
        "lost_hours_by_mechanism": losses,
        "lost_hours_by_component": by_comp,
        "gpu_hours": float(wall.mean()) / HOUR * setup.num_gpus,
        "gpu_hours_wasted": gpu_h_wasted,
        "checkpoints": float(np.mean([r.checkpoints for r in rs])),
        "min_dp": int(min(r.min_dp for r in rs)),
        "finished": all(r.finished for r in rs) if m.target_tokens is not None else None,
        "closed_form": {"young_s": setup.young_s, "daly_s": setup.daly_s,
                        "optimum_s": setup.optimum_closed_form_s,
                        "goodput_at_optimum": cf,
                        "mean_down_s": setup.mean_down_s},
    })
    if setup.spec.cost_per_gpu_hour is not None:
        out["cost"] = out["gpu_hours"] * setup.spec.cost_per_gpu_hour
        out["cost_wasted"] = gpu_h_wasted * setup.spec.cost_per_gpu_hour
    if len(runs) > 1:
        out["intervals"] = [{"interval_s": s.interval_s, "goodput": s.goodput,
                             "wall_days": float(s.arr("wall_s").mean() / DAY)} for s in runs]
    if sw:
        out["sweep"] = [{"interval_s": s.interval_s, "goodput": s.goodput} for s in sw]
        out["best_interval_s"] = best_interval(sw)
    return out


def _expected_failures(m: RunModel, wall_s: float) -> float:
    """Rate x time over the sources; bad nodes count until drained (closed_forms.lemon_expected_failures)."""
    from simulator.goodput.closed_forms import lemon_expected_failures
    if not any(c.per == "lemon" for c in m.components):
        return m.failure_rate_per_s * wall_s
    return sum(lemon_expected_failures(c.count, c.rate_per_device_hour / HOUR, c.drain_after, wall_s)
               if c.per == "lemon" else c.rate_per_s * wall_s for c in m.components)


def _closed_form_goodput(setup: GoodputSetup, tau: float) -> float:
    """Daly's expected goodput at interval ``tau`` (asynchronous saves: :func:`async_goodput`)."""
    m = setup.model
    if m.save_commit_s > 0:
        return async_goodput(tau, m.save_block_s, m.save_commit_s, setup.mean_down_s, setup.mtbf_s)
    return daly_goodput(tau, m.save_block_s, setup.mean_down_s, setup.mtbf_s)


def closed_form_curve(setup: GoodputSetup):
    """tau -> the closed-form goodput (the plot's bottom panel)."""
    return lambda tau: _closed_form_goodput(setup, tau)


def _seed_spread(rep: dict) -> str:
    """The seeds' P10-P90 spread in the form every prediction's interval takes (issue 39)."""
    pct = f"{100 * rep['seed_interval_level']:g} %"
    (d0, d1), (g0, g1) = rep["wall_days_interval"], rep["goodput_interval"]
    return (f"spread of the {rep['seeds']} seeds ({pct}: P10-P90): wall-clock {rep['wall_days']['p50']:.2f} days "
            f"({pct}: {d0:.2f}–{d1:.2f} days), goodput {100 * rep['goodput']['p50']:.1f} % "
            f"({pct}: {100 * g0:.1f}–{100 * g1:.1f} %)")


def format_goodput(rep: dict, title: str) -> str:
    def ci(d, k=1.0, fmt=".2f"):
        return f"{d['mean'] * k:{fmt}} (95% CI {d['ci95'][0] * k:{fmt}} .. {d['ci95'][1] * k:{fmt}})"

    def pct(d, k=1.0, fmt=".2f"):
        return " / ".join(f"{d[q] * k:{fmt}}" for q in ("p10", "p50", "p90"))
    lines = [title,
             (f"iteration {rep['iteration_time_s']:.3f} s on {rep['num_gpus']} GPUs; checkpoint "
             f"{rep['checkpoint_gb']:.0f} GB ({rep['checkpoint_gb_per_gpu']:.2f} GB/GPU): job pauses "
             f"{rep['save_blocking_s']:.1f} s per save, durable after {rep['save_durable_after_s']:.1f} s; "
             f"restart {rep['restart_s']:.0f} s + load {rep['load_s']:.1f} s"),
             (f"fleet {rep['fleet']}: failures {rep['failure_rate_per_day']:.2f}/day (job MTBF {rep['mtbf_hours']:.2f} h); "
             f"checkpoint every {rep['interval_s']:.0f} s ({rep['policy']}); {rep['seeds']} seeds"),
             f"wall-clock days   {ci(rep['wall_days'])}; P10 / P50 / P90 {pct(rep['wall_days'])}",
             f"goodput (ETTR)    {ci(rep['goodput'], 100, '.1f')} %; P10 / P50 / P90 {pct(rep['goodput'], 100, '.1f')} %",
             _seed_spread(rep),
             f"ETTR, held time   {ci(rep['ettr_available'], 100, '.1f')} % (without repair queueing and maintenance)",
             "job MTTF          " + (f"{rep['job_mttf_hours']:.2f} h" if rep["job_mttf_hours"] is not None
                                     else "no interruption")
             + "; interruptions by cause: " + ", ".join(f"{k} {v:.1f}" for k, v in
                                                       sorted(rep["interruptions_by_cause"].items(),
                                                              key=lambda kv: -kv[1]) if v > 0),
             f"tokens trained    {rep['tokens']['mean']:.4g}",
             (f"interruptions     {ci(rep['interruptions'], 1, '.1f')}   (failures {rep['failures']['mean']:.1f}, "
             f"expected rate x time {rep['expected_failures']:.1f})"),
             "lost hours by mechanism: " + ", ".join(f"{k} {v:.1f}" for k, v in rep["lost_hours_by_mechanism"].items()
                                                     if v > 0),
             "lost hours by cause:     " + ", ".join(f"{k} {v:.1f}" for k, v in
                                                     sorted(rep["lost_hours_by_component"].items(),
                                                            key=lambda kv: -kv[1]) if v > 0),
             f"GPU-hours {rep['gpu_hours']:.4g}, wasted {rep['gpu_hours_wasted']:.4g}"
             + (f"; cost {rep['cost']:.4g}, wasted {rep['cost_wasted']:.4g}" if "cost" in rep else "")]
    if rep["failed_saves"] or rep["drained_lemons"]:
        lines.append(f"failed saves {rep['failed_saves']:.1f}; bad nodes drained {rep['drained_lemons']:.1f}")
    cf = rep["closed_form"]
    if "best_interval_s" in rep:
        lines.append(f"best interval (simulated) {rep['best_interval_s']:.0f} s; closed form: optimum "
                     f"{cf['optimum_s']:.0f} s (goodput {100 * cf['goodput_at_optimum']:.1f} %), Young "
                     f"{cf['young_s']:.0f} s, Daly {cf['daly_s']:.0f} s")
    for row in rep.get("intervals", []):
        lines.append(f"  interval {row['interval_s']:>8.0f} s: goodput {100 * row['goodput']:.2f} %, "
                     f"{row['wall_days']:.2f} days")
    return "\n".join(lines)
