"""End-to-end speed of ``execsim simulate`` and of the lowering, template vs per-task path.

    python -m benchmarks.end_to_end [--examples gpt3-175b-1024-a100,...] [--repeat 5] [--cli-repeat 3]
                                    [--baseline DIR] [--json PATH]

For each shipped strategy example (``strategies/examples``):

* lowering: ``lower_model(templates=False)`` (the per-task reference: one ``add_task`` call per
  task) and ``lower_model(templates=True)`` (per-(stage, pass) blocks replicated over microbatches),
  timed alternately in the same run, best of ``--repeat``; the ratio is reference / template. The
  two graphs are checked array for array (tasks, durations, devices, categories, keys, CSR edges,
  memory events) and their engine timelines for equality; a mismatch stops the benchmark;
* phases of one in-process ``simulate_strategy``-like run: resolve + cost records, lowering,
  engine, reports (``report`` + ``training_report``);
* coarse vs operator fidelity: the iteration time of each and the difference (%);
* the interference fixed point (``simulator/engine/interference.py``) as ``simulate_strategy`` runs it:
  the engine, then every later round re-timed by the verified re-sweep (``simulator/engine/resweep.py``),
  against the engine in every round, alternated, best of ``--repeat``; the two must give the same arrays;
* end to end: wall time and user CPU of ``python -m simulator.cli.main simulate EXAMPLE`` in a fresh
  process (process start to report printed; ``.pyc`` files written and used, as a user runs it),
  best of ``--cli-repeat``, and of ``python -c "import simulator.cli.main"``; with ``--baseline DIR``
  the same command of another checkout, alternated with this one in the same run.

Speeds are ratios measured in the same run (the machine is shared and noisy; see
docs/performance.md).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "strategies" / "examples"


def strategy_examples() -> list[str]:
    from strategies.config import load_mapping
    from strategies.strategy_file import is_strategy
    return [p.stem for p in sorted(EXAMPLES.glob("*.yaml")) if is_strategy(load_mapping(p))]


def same_graph(a, b) -> bool:
    for k, v in a.__dict__.items():
        w = b.__dict__[k]
        if isinstance(v, np.ndarray):
            if v.dtype != w.dtype or not np.array_equal(v, w):
                return False
        elif v != w:
            return False
    return True


def _best(fn, repeat):
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def _fixed_point(plan, work, handoff, repeat):
    """Best CPU seconds of the interference fixed point with the re-sweep and with the engine in every
    round (fresh lowered graphs, alternated), and the number of rounds; the results must agree."""
    from simulator.engine.core import simulate
    from simulator.engine.interference import with_interference
    from taskgraph.lower_model import lower_model
    best = {True: float("inf"), False: float("inf")}
    out = {}
    mode = os.environ.get("EXECSIM_KERNEL")
    os.environ["EXECSIM_KERNEL"] = "python"  # the Python engine, as a fresh `execsim simulate` runs it
    try:
        for _ in range(repeat):
            for flag in (False, True):
                g = lower_model(plan.schedule, work, overlap_handoff=handoff)
                t = time.process_time()  # CPU seconds: the shared machine's load moves wall time more
                res, rounds = with_interference(g, simulate, resweep=flag)
                best[flag] = min(best[flag], time.process_time() - t)
                out[flag] = (g.duration, res, rounds)
    finally:
        if mode is None:
            os.environ.pop("EXECSIM_KERNEL")
        else:
            os.environ["EXECSIM_KERNEL"] = mode
    (d0, r0, k0), (d1, r1, k1) = out[False], out[True]
    if not (k0 == k1 and np.array_equal(d0, d1) and all(np.array_equal(getattr(r0, f), getattr(r1, f))
                                                        for f in ("ready", "start", "end", "order"))):
        raise SystemExit("the re-sweep's fixed point differs from the engine's")
    return best[True], best[False], k1


def cli_time(root: Path, path: Path, repeat: int, other: Path | None = None) -> dict:
    """Best wall seconds and best user + system CPU seconds of ``execsim simulate`` in fresh processes
    of the checkout ``root`` (and of ``other``, alternated with it, when given)."""
    roots = [root] + ([other] if other else [])
    walls = {r: [] for r in roots}
    cpus = {r: [] for r in roots}
    for _ in range(repeat):
        for r in roots:
            env = dict(os.environ, PYTHONPATH=str(r))
            env.pop("PYTHONDONTWRITEBYTECODE", None)  # as a user runs it: .pyc files written and used
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t = time.perf_counter()
            subprocess.run([sys.executable, "-m", "simulator.cli.main", "simulate", str(path)], cwd=r, env=env,
                           check=True, stdout=subprocess.DEVNULL)
            walls[r].append(time.perf_counter() - t)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus[r].append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    out = {"cli_s": min(walls[root]), "cli_cpu_s": min(cpus[root])}
    if other:
        out.update(baseline_cli_s=min(walls[other]), baseline_cli_cpu_s=min(cpus[other]))
    return out


def _plan_and_work(st):
    """The resolved plan and its operator-fidelity work (the costing step the benchmark times)."""
    from taskgraph.costing import build_work
    from taskgraph.plan import resolve
    plan = resolve(st)
    return plan, build_work(plan, fidelity="operator")


def bench_example(name: str, repeat: int, cli_repeat: int, baseline: Path | None = None) -> dict:
    from simulator.engine.core import simulate
    from simulator.engine.dispatch import lower_and_simulate
    from simulator.reports.report import report
    from simulator.reports.training import training_report
    from strategies.strategy_file import load_strategy
    from taskgraph.costing import build_work
    from taskgraph.lower_model import lower_model

    path = EXAMPLES / f"{name}.yaml"
    st = load_strategy(path)
    h = st.options.overlap_handoff
    t_cost, (plan, work) = _best(lambda: _plan_and_work(st), 1)
    ref_s = new_s = float("inf")
    for _ in range(repeat):  # alternate the two paths so drift hits both alike
        t = time.perf_counter()
        ref = lower_model(plan.schedule, work, overlap_handoff=h, templates=False)
        ref_s = min(ref_s, time.perf_counter() - t)
        t = time.perf_counter()
        new = lower_model(plan.schedule, work, overlap_handoff=h, templates=True)
        new_s = min(new_s, time.perf_counter() - t)
    if not same_graph(ref, new):
        raise SystemExit(f"{name}: template lowering differs from the per-task path")
    t_eng, r_new = _best(lambda: simulate(new), 1)
    r_ref = simulate(ref)
    if not (np.array_equal(r_ref.end, r_new.end) and r_ref.makespan == r_new.makespan):
        raise SystemExit(f"{name}: timelines differ")
    t_rep, _ = _best(lambda: training_report(plan, work, new, r_new, report(new, r_new)), 1)
    fp_s, fp_engine_s, rounds = _fixed_point(plan, work, h, repeat)
    cwork = build_work(plan, fidelity="coarse")
    cg, cr = lower_and_simulate(plan.schedule, cwork, h, fidelity="coarse")
    row = dict(example=name, tasks=new.num_tasks, edges=new.num_edges, lower_ref_s=ref_s, lower_new_s=new_s,
               lower_speedup=ref_s / new_s, tasks_per_s_ref=new.num_tasks / ref_s,
               tasks_per_s_new=new.num_tasks / new_s, resolve_cost_s=t_cost, engine_s=t_eng, reports_s=t_rep,
               operator_iter_s=r_new.makespan, coarse_iter_s=cr.makespan, coarse_tasks=cg.num_tasks,
               coarse_vs_operator_pct=100.0 * (cr.makespan - r_new.makespan) / r_new.makespan,
               fixed_point_s=fp_s, fixed_point_engine_s=fp_engine_s, interference_rounds=rounds)
    if cli_repeat:
        row.update(cli_time(ROOT, path, cli_repeat, baseline))
    return row


def import_time(repeat: int) -> float:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    walls = []
    for _ in range(repeat):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import simulator.cli.main"], cwd=ROOT, env=env, check=True)
        walls.append(time.perf_counter() - t)
    return min(walls)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", default="", help="comma-separated example names (default: all strategy examples)")
    ap.add_argument("--repeat", type=int, default=5, help="lowering runs per path (best is kept)")
    ap.add_argument("--cli-repeat", type=int, default=3, help="fresh-process CLI runs per example (0: skip)")
    ap.add_argument("--baseline", default="", help="another checkout whose command is timed alternately with this one")
    ap.add_argument("--json", default="", help="write the rows to this file")
    args = ap.parse_args(argv)
    names = [n for n in args.examples.split(",") if n] or strategy_examples()
    print(f"# {platform.platform()}, Python {platform.python_version()}, numpy {np.__version__}, "
          f"{os.cpu_count()} CPUs")
    imp = import_time(max(args.cli_repeat, 1))
    print(f"python -c 'import simulator.cli.main': {imp:.3f} s (process start included)")
    baseline = Path(args.baseline).resolve() if args.baseline else None
    hdr = (f"{'example':28} {'tasks':>8} {'per-task s':>10} {'template s':>10} {'speedup':>7} "
           f"{'M tasks/s':>9} {'cost s':>7} {'engine s':>8} {'fixed cpu':>10} {'(engine)':>8} {'reports s':>9} "
           f"{'cli s':>6} {'cli cpu':>7} {'operator it s':>13} {'coarse it s':>11} {'coarse-op':>9}")
    print(hdr)
    rows = []
    nan = float("nan")
    for n in names:
        r = bench_example(n, args.repeat, args.cli_repeat, baseline)
        rows.append(r)
        print(f"{n:28} {r['tasks']:8,d} {r['lower_ref_s']:10.3f} {r['lower_new_s']:10.3f} "
              f"{r['lower_speedup']:6.1f}x {r['tasks_per_s_new'] / 1e6:9.2f} {r['resolve_cost_s']:7.3f} "
              f"{r['engine_s']:8.3f} {r['fixed_point_s']:10.3f} {r['fixed_point_engine_s']:8.3f} {r['reports_s']:9.3f} "
              f"{r.get('cli_s', nan):6.2f} {r.get('cli_cpu_s', nan):7.2f} "
              f"{r['operator_iter_s']:13.4f} {r['coarse_iter_s']:11.4f} {r['coarse_vs_operator_pct']:+8.1f}%")
        if baseline:
            print(f"{'  baseline ' + str(baseline):40} cli s {r['baseline_cli_s']:.2f}  cli cpu {r['baseline_cli_cpu_s']:.2f}")
    print("every template graph equals its per-task graph array for array, with identical timelines; "
          "the re-sweep's fixed point equals the engine's")
    if args.json:
        Path(args.json).write_text(json.dumps(dict(import_s=imp, rows=rows), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
