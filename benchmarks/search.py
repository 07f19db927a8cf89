"""Strategy-search speed: ``python -m benchmarks.search [--quick]``.

1. Evaluations per second for GPT-3 175B on 1024 A100s (strategies/examples/gpt3-175b-1024-a100.yaml)
   at coarse fidelity, median over several runs:
   * ``evaluate`` (simulator/search.py), warm: the caches a search keeps across candidates (schedules,
     per-stage cost records, lowering structures) already hold this strategy;
   * ``evaluate``, cold: every cache cleared before each evaluation (schedule generation, costing,
     index structures included);
   * the reference path as it was before simulator/search.py: resolve -> build_work -> lower_model ->
     engine -> report -> training_report, caches cleared (what ``simulate_strategy`` did);
   and where one warm evaluation spends its time.
2. A sweep over tp x pp x vpp x micro_batch x recompute of the same model and cluster (top rows of the
   DataFrame, infeasible ones with their reasons) and its evaluations per second.
3. Coarse vs operator fidelity: iteration time of every strategy example (files with both ``model``
   and ``cluster`` keys) at both fidelities, and the gap.

Timings are wall-clock on whatever machine runs this (a shared 2-core box is noisy: compare medians).
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "strategies" / "examples"
GPT3 = EXAMPLES / "gpt3-175b-1024-a100.yaml"


def clear_caches() -> None:
    from simulator import search
    from strategies.schedules import clear_schedule_cache
    from taskgraph.costing import clear_cost_cache
    from taskgraph.lower_coarse import clear_layout_cache
    clear_schedule_cache()
    clear_cost_cache()
    clear_layout_cache()
    search._MEMO.clear()


def _rate(fn, runs: int, per_run: int, before=None) -> tuple[float, list[float]]:
    """Median evaluations per second over ``runs`` runs of ``per_run`` calls (``before`` runs
    untimed before each call)."""
    rates = []
    for _ in range(runs):
        total = 0.0
        for _ in range(per_run):
            if before:
                before()
            t = time.perf_counter()
            fn()
            total += time.perf_counter() - t
        rates.append(per_run / total)
    return statistics.median(rates), rates


def reference_path(strategy):
    from simulator.engine import simulate
    from simulator.reports import report
    from simulator.training_report import training_report
    from taskgraph.costing import build_work
    from taskgraph.lower_model import lower_model
    from taskgraph.plan import resolve
    plan = resolve(strategy)
    work = build_work(plan, fidelity="coarse")
    graph = lower_model(plan.schedule, work, overlap_handoff=strategy.options.overlap_handoff)
    result = simulate(graph)
    rep = report(graph, result)
    return training_report(plan, work, graph, result, rep)


def breakdown(strategy, reps: int = 31) -> dict[str, float]:
    """Median milliseconds of each step of one warm evaluation."""
    import numpy as np
    from simulator.search import _layout_busy, _layout_order, _metrics, _peaks, static_order_timeline
    from taskgraph.costing import build_work
    from taskgraph.lower_coarse import coarse_layout
    from taskgraph.plan import resolve
    plan = resolve(strategy)
    work = build_work(plan, fidelity="coarse")
    lay = coarse_layout(plan.schedule, work, strategy.options.overlap_handoff)
    dur = lay.durations(work)
    o = _layout_order(lay)
    _, _, end = static_order_timeline(o, dur)
    task = lay.mem_task.astype(np.int64)
    steps = {
        "resolve (schedule cached)": lambda: resolve(strategy),
        "build_work (stages memoized)": lambda: build_work(plan, fidelity="coarse"),
        "lowering (layout lookup + durations)": lambda: (coarse_layout(plan.schedule, work, "pair-end"),
                                                         lay.durations(work)),
        "timeline (sweep + verification)": lambda: static_order_timeline(o, dur),
        "reports (busy, memory peaks, MFU)": lambda: _metrics(
            plan, float(end.max()), _layout_busy(lay, dur),
            _peaks(lay.pp, task, lay.memory_bytes(work), end[task], lay.rank[task].astype(np.int64)),
            lay.n, "coarse", "static-order", time.perf_counter()),
    }
    out = {}
    for name, fn in steps.items():
        ts = []
        for _ in range(reps):
            t = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t)
        out[name] = statistics.median(ts) * 1e3
    return out


def strategy_examples() -> list[Path]:
    from strategies.config import load_mapping
    out = []
    for p in sorted(EXAMPLES.glob("*.yaml")):
        data = load_mapping(p)
        if isinstance(data, dict) and "model" in data and "cluster" in data:
            out.append(p)
    return out


def gaps() -> list[tuple[str, float, float, float, float]]:
    """(file, operator s, coarse s, gap %, operator-evaluation seconds) per strategy example."""
    from simulator.search import evaluate
    from strategies.strategy_file import load_strategy
    rows = []
    for p in strategy_examples():
        s = load_strategy(p)
        t = time.perf_counter()
        op = evaluate(s, "operator").iteration_time_s
        wall = time.perf_counter() - t
        co = evaluate(s, "coarse").iteration_time_s
        rows.append((p.name, op, co, 100.0 * (co - op) / op, wall))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer runs, no operator-fidelity gaps")
    args = ap.parse_args(argv)
    from simulator.search import evaluate, grid, sweep
    from strategies.strategy_file import load_strategy
    import pandas as pd

    s = load_strategy(GPT3)
    runs, per = (3, 10) if args.quick else (7, 30)
    ev = evaluate(s)
    print(f"GPT-3 175B, 1024 A100 (tp 8, pp 8, vpp 2, {ev.microbatches} microbatches), coarse: "
          f"{ev.num_tasks} tasks, iteration {ev.iteration_time_s:.4f} s, MFU {100 * ev.mfu:.1f}%, "
          f"timeline {ev.timeline}")
    warm, wr = _rate(lambda: evaluate(s), runs, per)
    cold, cr = _rate(lambda: evaluate(s), runs, max(per // 3, 3), before=clear_caches)
    ref, rr = _rate(lambda: reference_path(s), runs, max(per // 6, 3), before=clear_caches)
    print(f"  evaluate, warm caches : {warm:7.1f} evaluations/s  (median of {runs} runs: "
          f"{', '.join(f'{x:.0f}' for x in wr)})")
    print(f"  evaluate, cold caches : {cold:7.1f} evaluations/s  ({', '.join(f'{x:.0f}' for x in cr)})")
    print(f"  reference path        : {ref:7.1f} evaluations/s  (resolve+build_work+lower_model+engine+report+"
          f"training_report, cold; {', '.join(f'{x:.1f}' for x in rr)})")
    print("  one warm evaluation, median ms per step:")
    for name, ms in breakdown(s).items():
        print(f"    {name:40s} {ms:7.3f}")

    axes = dict(tp=[4, 8], pp=[4, 8, 16], vpp=[1, 2, 3], micro_batch=[1, 2], recompute=["selective", "full"])
    variations = grid(**axes) + [dict(tp=7), dict(schedule="zb-v", vpp=3)]  # two invalid ones
    t = time.perf_counter()
    df = sweep(s, variations)
    dt = time.perf_counter() - t
    t = time.perf_counter()
    sweep(s, variations)
    dt2 = time.perf_counter() - t
    print(f"\nsweep over {axes} plus tp=7 and zb-v with vpp=3:\n  {len(df)} variations in {dt:.2f} s "
          f"({len(df) / dt:.0f} evaluations/s; the same sweep again {len(df) / dt2:.0f}/s), "
          f"{int(df['feasible'].sum())} feasible")
    cols = ["tp", "pp", "vpp", "micro_batch", "recompute", "iteration_time_s", "mfu", "bubble_fraction",
            "peak_memory_gb", "feasible"]
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(df[cols].head(8).to_string(index=False))
        bad = df[~df["feasible"]]
        if len(bad):
            print("  rejected, e.g.:")
            for _, row in pd.concat([bad.head(2), bad.tail(2)]).iterrows():
                var = ", ".join(f"{k}={row[k]}" for k in ("tp", "pp", "vpp", "micro_batch", "recompute", "schedule")
                                if k in row and not pd.isna(row[k]))
                print(f"    {var}: {row.error[:160]}")

    if not args.quick:
        print("\ncoarse vs operator fidelity (iteration time):")
        worst = 0.0
        for name, op, co, gap, wall in gaps():
            worst = max(worst, abs(gap))
            print(f"  {name:32s} operator {op:10.5f} s   coarse {co:10.5f} s   gap {gap:+6.2f}%   "
                  f"(operator evaluation {wall:.2f} s)")
        print(f"  largest |gap| {worst:.2f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
