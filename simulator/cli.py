"""The ``execsim`` command line. Library code raises; only this module prints and exits.

Subcommands: ``schedule`` (print a schedule's per-rank grid), ``simulate`` (simulate a file and
report), ``compare`` (several schedules or files side by side).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from strategies.errors import ExecsimError

EXIT_USAGE = 2


def _schedule_cmd(args) -> int:
    from strategies.schedules import get_schedule
    sched = get_schedule(args.schedule, args.pp, args.microbatches, args.vpp)
    if args.json:
        d = sched.to_json()
        print(json.dumps({k: d[k] for k in ("pp", "microbatches", "vpp", "stage_to_rank", "orders")}))
    elif args.csv:
        from strategies.schedule_csv import write_schedule_csv
        sys.stdout.write(write_schedule_csv(sched))
    else:
        print(sched.grid())
    return 0


def _load(path: str, sets: list[str]):
    """Load a simulation input: a pipeline description (``pipeline:`` section) or a strategy file."""
    from strategies.config import load_mapping, parse_set_value, set_dotted
    data = load_mapping(path, "input file")
    for item in sets or []:
        if "=" not in item:
            raise ExecsimError(f"--set {item!r} must look like section.key=value, e.g. --set pipeline.pp=8")
        k, v = item.split("=", 1)
        data = set_dotted(data, k.strip(), parse_set_value(v.strip()))
    if "pipeline" in data:
        from strategies.pipeline_file import parse_pipeline
        return "pipeline", parse_pipeline(data, Path(path).parent)
    from strategies.strategy_file import parse_strategy
    return "strategy", parse_strategy(data, Path(path).parent)


def _simulate_one(kind, spec, schedule=None, fidelity=None, vpp=None):
    from simulator.api import simulate_pipeline, simulate_strategy
    if kind == "pipeline":
        return simulate_pipeline(spec, schedule=schedule, vpp=vpp)
    return simulate_strategy(spec, schedule=schedule, fidelity=fidelity, vpp=vpp)


#: chunks per rank a schedule needs when compared against others (None = keep the file's, >= 2)
_FIXED_VPP = {"gpipe": 1, "1f1b": 1, "zb-v": 2, "dualpipe-v": 2}


def _schedule_item(item: str, spec, kind) -> tuple[str, int]:
    """``name`` or ``name:vpp``. Without a count: 1 for single-chunk schedules, 2 for V schedules,
    else the file's vpp (at least 2 for interleaved-1f1b, which equals 1f1b at vpp 1)."""
    name, _, v = item.partition(":")
    if v:
        if not v.isdigit() or int(v) < 1:
            raise ExecsimError(f"--schedules item {item!r}: the chunk count after ':' must be a positive integer")
        return name, int(v)
    file_vpp = spec.vpp if kind == "pipeline" else spec.parallel.vpp
    if name in _FIXED_VPP:
        return name, _FIXED_VPP[name]
    return name, max(file_vpp, 2) if name == "interleaved-1f1b" else file_vpp


def _simulate_cmd(args) -> int:
    from simulator.reports import format_report
    kind, spec = _load(args.file, args.set)
    sim = _simulate_one(kind, spec, fidelity=args.fidelity)
    mem = None
    if kind == "strategy":
        from simulator.memory_report import memory_report
        mem = memory_report(sim.plan, sim.graph, sim.result)
    written = _write_trace_outputs(args, sim, mem)
    s = sim.schedule
    deltas = None
    if args.mode == "delta" or args.what_if:
        if args.mode != "delta":
            raise ExecsimError("--what-if needs --mode delta (re-simulate only what each change affects)")
        import time as _time
        from simulator.api import what_if
        from simulator.engine import simulate as _full
        base, deltas = what_if(sim.graph, args.what_if or [])
        t0 = _time.perf_counter()
        _full(sim.graph)
        full_s = _time.perf_counter() - t0
    if args.json:
        out = sim.report.to_json()
        if deltas is not None:
            out["delta"] = [{**d.__dict__, "full_simulation_s": full_s} for d in deltas]
        out["schedule"] = s.name
        out["sim_wall_s"] = round(sim.sim_wall_s, 6)
        if kind == "strategy":
            t = sim.training.to_json()
            out.update({k: v for k, v in t.items()})
            out["critical_path"] = sim.report.to_json()["critical_path"]
            m = mem.to_json()
            for st, extra in zip(out["per_stage"], m["memory_per_stage"]):
                st["peak_memory_gb"] = extra["total_gb"]
            out.update(m)
        print(json.dumps(out, sort_keys=True))
    else:
        title = f"{args.file}: schedule {s.name}, pp={s.pp}, vpp={s.vpp}, microbatches={s.microbatches}"
        if kind == "strategy":
            from simulator.training_report import format_training_report
            p = sim.plan
            title += (f"\nmodel {p.model.name} on {p.num_gpus} x {p.cluster.gpu.name} ({p.cluster.name}): "
                      f"tp={p.sizes.tp} pp={p.sizes.pp} dp={p.sizes.dp} cp={p.sizes.cp} ep={p.sizes.ep} "
                      f"sp={p.sp} zero={p.zero} recompute={p.strategy.training.recompute}")
            print(format_training_report(sim.training, sim.report, title))
            worst = max(mem.per_stage, key=lambda x: x.total)
            print(f"memory: peak {worst.total / 2**30:.1f} GiB on rank {worst.rank} of {mem.capacity / 2**30:.1f} GiB "
                  f"-> {'fits' if mem.fits else 'OOM'} (execsim memory FILE for the breakdown)")
        else:
            print(format_report(sim.report, title))
        if deltas is not None:
            print(f"delta mode: base iteration {base:.6g} s; one full simulation takes {full_s * 1e3:.1f} ms")
            for d in deltas:
                fb = f", fell back to full ({d.reason})" if d.fallback else ""
                print(f"  what-if {d.change}: {d.tasks} tasks changed -> iteration {d.iteration_time_s:.6g} s "
                      f"({100 * (d.iteration_time_s / base - 1):+.2f}%), re-timed {d.retimed} of "
                      f"{sim.graph.num_tasks} tasks in {d.wall_s * 1e3:.2f} ms{fb}")
        for line in written:
            print(line)
    return 0


def _write_trace_outputs(args, sim, mem) -> list[str]:
    """--trace, --trace-dir and --timeline (issue 15); returns one line per file written."""
    from simulator.trace import parse_ranks
    if args.trace_ranks and not (args.trace or args.trace_dir):
        raise ExecsimError("--trace-ranks selects ranks of --trace or --trace-dir; add one of them")
    if args.trace_level and not args.trace:
        raise ExecsimError("--trace-level applies to the Chrome trace; add --trace OUT.json")
    ranks = parse_ranks(args.trace_ranks) if args.trace_ranks else None
    out = []
    if args.trace:
        from simulator.trace import write_chrome_trace
        write_chrome_trace(args.trace, sim.graph, sim.result, counters=_memory_counters(sim, mem), ranks=ranks,
                           level=args.trace_level or "operator")
        out.append(f"trace written to {args.trace} (open in https://ui.perfetto.dev or chrome://tracing)")
    if args.trace_dir:
        from simulator.trace_hta import write_hta_traces
        paths = write_hta_traces(args.trace_dir, sim.graph, sim.result, ranks=ranks)
        out.append(f"{len(paths)} per-rank traces written to {args.trace_dir} (Holistic Trace Analysis: "
                   f"TraceAnalysis(trace_dir={str(args.trace_dir)!r}))")
    if args.timeline:
        from simulator.timeline_export import write_timeline
        write_timeline(args.timeline, sim.graph, sim.result)
        out.append(f"timeline ({sim.graph.num_tasks} tasks) written to {args.timeline}")
    return out


def _memory_counters(sim, mem):
    """Per-rank memory counter tracks (GiB): static states + reserve + the simulated curve."""
    from simulator.memory_timeline import memory_curves
    curves = memory_curves(sim.graph, sim.result)
    base = {s.rank: s.weights + s.grads + s.optimizer + s.reserve for s in mem.per_stage} if mem else {}
    return {r: (c.times, (c.values + base.get(r, 0.0)) / 2**30) for r, c in curves.items()}


def _memory_cmd(args) -> int:
    from simulator.memory_report import format_memory_report, memory_report
    from taskgraph.memory import layer_activation_table
    kind, spec = _load(args.file, args.set)
    if kind != "strategy":
        raise ExecsimError(f"{args.file} is a pipeline description; 'execsim memory' needs a strategy file "
                           f"(model + cluster + parallel + training)")
    sim = _simulate_one(kind, spec, fidelity=args.fidelity)
    mem = memory_report(sim.plan, sim.graph, sim.result)
    if args.plot:
        from simulator.plots import plot_memory
        static = {s.rank: s.weights + s.grads + s.optimizer + s.reserve for s in mem.per_stage}
        plot_memory(sim.graph, sim.result, args.plot, static_bytes=static, capacity_bytes=mem.capacity,
                    title=f"{args.file}: memory per GPU of each pipeline rank")
    if args.json:
        out = mem.to_json()
        out["layers"] = layer_activation_table(sim.plan)
        print(json.dumps(out, sort_keys=True))
    else:
        p = sim.plan
        print(f"{args.file}: {p.model.name} on {p.num_gpus} x {p.cluster.gpu.name}, tp={p.sizes.tp} pp={p.sizes.pp} "
              f"dp={p.sizes.dp} zero={p.zero} recompute={p.strategy.training.recompute}, schedule {p.schedule.name}, "
              f"{p.microbatches} microbatches (memory per GPU, GiB)")
        print(format_memory_report(mem, layer_activation_table(sim.plan) if args.layers else None))
        if args.plot:
            print(f"plot written to {args.plot}")
    return 0 if mem.fits or not args.check else 1


def _plan_recompute_cmd(args) -> int:
    from simulator.planner import format_plan, plan_recompute
    kind, spec = _load(args.file, args.set)
    if kind != "strategy":
        raise ExecsimError(f"{args.file} is a pipeline description; plan-recompute needs a strategy file")
    rp = plan_recompute(spec, fidelity=args.fidelity)
    if args.json:
        out = {"uniform": {p: {"iteration_time_s": e.iteration_time_s, "peak_memory_gb": e.peak_bytes / 2**30,
                               "fits": e.fits} for p, e in rp.uniform.items()}, "simulations": rp.steps}
        if rp.best:
            out["plan"] = {"recompute_layers": list(rp.best.policies), "iteration_time_s": rp.best.iteration_time_s,
                           "peak_memory_gb": rp.best.peak_bytes / 2**30, "fits": rp.best.fits}
        print(json.dumps(out, sort_keys=True))
    else:
        print(f"{args.file}: per-layer recompute plan (memory judged by simulation; GiB per GPU)")
        print(format_plan(rp))
        if rp.best:
            print("use it with training.recompute_layers: [" + ", ".join(rp.best.policies) + "]"
                  if len(rp.best.policies) <= 16 else "use it with training.recompute_layers (see --json)")
    return 0 if rp.best else 1


def _compare_cmd(args) -> int:
    runs = []
    if args.schedules:
        if len(args.files) != 1:
            raise ExecsimError("--schedules compares schedules on ONE file; give exactly one file")
        kind, spec = _load(args.files[0], args.set)
        for item in [s.strip() for s in args.schedules.split(",") if s.strip()]:
            name, vpp = _schedule_item(item, spec, kind)
            label = item if ":" in item else (f"{name} v={vpp}" if vpp > 1 and name not in ("zb-v", "dualpipe-v") else name)
            runs.append((label, kind, _simulate_one(kind, spec, schedule=name, fidelity=args.fidelity, vpp=vpp)))
    else:
        for f in args.files:
            kind, spec = _load(f, args.set)
            runs.append((Path(f).name, kind, _simulate_one(kind, spec, fidelity=args.fidelity)))
    from simulator.memory_timeline import peak_per_rank
    from simulator.training_report import exposed_comm
    base = runs[0][2].report.makespan_s
    rows, mems = [], []
    for label, kind, sim in runs:
        r = sim.report
        mem = None
        if kind == "strategy":
            from simulator.memory_report import memory_report
            mem = memory_report(sim.plan, sim.graph, sim.result)
            peaks = [x.total / 2**30 for x in mem.per_stage]
        elif sim.graph.mem_task.size:
            peaks = [v / 2**30 for v in peak_per_rank(sim.graph, sim.result)]
        else:
            peaks = []
        mems.append(mem)
        exposed = [exposed_comm(sim.graph, sim.result, rr.rank) for rr in r.per_rank]
        rows.append({"label": label, "schedule": sim.schedule.name, "iteration_time_s": r.makespan_s,
                     "speedup": base / r.makespan_s if r.makespan_s > 0 else float("nan"),
                     "bubble_fraction": r.bubble_fraction, "imbalance": r.imbalance, "num_tasks": r.num_tasks,
                     "peak_memory_gb": peaks, "fits": (mem.fits if mem else None),
                     "exposed_comm_s": max(exposed) if exposed else 0.0})
    if args.plot:
        from simulator.plots import plot_pipelines
        static = [({x.rank: x.weights + x.grads + x.optimizer + x.reserve for x in m.per_stage} if m else None)
                  for m in mems]
        cap = next((m.capacity for m in mems if m), None)
        plot_pipelines([(label, sim.graph, sim.result) for label, _k, sim in runs], args.plot,
                       static_bytes=static if any(x is not None for x in static) else None, capacity_bytes=cap)
    if args.json:
        print(json.dumps(rows, sort_keys=True))
    else:
        unit = "s" if base >= 10 else "ms"
        k = 1.0 if unit == "s" else 1e3
        print(f"{'run':<22} {'iter ' + unit:>10} {'speedup':>8} {'bubble':>7} {'exp.comm ' + unit:>12} "
              f"{'peak GiB/stage (max)':>22}  fits")
        for row in rows:
            pk = row["peak_memory_gb"]
            fits = "" if row["fits"] is None else ("yes" if row["fits"] else "NO")
            print(f"{row['label']:<22} {row['iteration_time_s'] * k:>10.3f} {row['speedup']:>8.3f} "
                  f"{row['bubble_fraction']:>7.3f} {row['exposed_comm_s'] * k:>12.3f} "
                  f"{(' '.join(f'{x:.1f}' for x in pk) if len(pk) <= 4 else f'{max(pk):.1f}') if pk else '-':>22}  {fits}")
        if args.plot:
            print(f"plot written to {args.plot}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="execsim", description="Discrete-event execution simulator for distributed "
                                "LLM training.")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("schedule", help="print a pipeline schedule's per-rank action grid")
    s.add_argument("--schedule", required=True)
    s.add_argument("--pp", type=int, required=True)
    s.add_argument("--microbatches", type=int, required=True)
    s.add_argument("--vpp", type=int, default=1)
    g = s.add_mutually_exclusive_group()
    g.add_argument("--json", action="store_true", help="machine-readable output")
    g.add_argument("--csv", action="store_true", help="PyTorch action CSV (one line per rank)")
    s.set_defaults(func=_schedule_cmd)

    s = sub.add_parser("simulate", help="simulate a pipeline description or strategy file")
    s.add_argument("file")
    s.add_argument("--trace", metavar="OUT.json", help="write a Chrome/Perfetto trace (OUT.json.gz: gzip-compressed)")
    s.add_argument("--trace-ranks", metavar="RANKS", help="keep only these ranks in --trace/--trace-dir, "
                   "e.g. 0,1 or 0-3,15 (makes a 1,024-GPU trace small)")
    s.add_argument("--trace-level", choices=("operator", "stage"),
                   help="operator: one slice per task (default); stage: one slice per run of a stage's "
                        "microbatch on a stream (much smaller)")
    s.add_argument("--trace-dir", metavar="DIR", help="write one trace per rank (rank_N.json) in the layout "
                   "Holistic Trace Analysis reads")
    s.add_argument("--timeline", metavar="OUT.csv|OUT.parquet",
                   help="write one row per task (times in s); .parquet needs pyarrow (pip install 'execsim[parquet]')")
    s.add_argument("--json", action="store_true", help="print a machine-readable summary")
    s.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a field, e.g. parallel.pp=16")
    s.add_argument("--fidelity", choices=("operator", "coarse"), help="override options.fidelity")
    s.add_argument("--mode", choices=("full", "delta"), default="full",
                   help="delta: keep the simulation state and re-simulate only what each --what-if change affects")
    s.add_argument("--what-if", action="append", metavar="PATTERN=FACTOR",
                   help="scale matching tasks' durations (operator name or category, shell pattern), e.g. "
                        "'layer3.*=1.5' or 'dp-comm=0'; repeatable, changes accumulate")
    s.set_defaults(func=_simulate_cmd)

    s = sub.add_parser("memory", help="per-stage memory breakdown and OOM verdict of a strategy file")
    s.add_argument("file")
    s.add_argument("--json", action="store_true")
    s.add_argument("--layers", action="store_true", help="also print the per-layer activation table")
    s.add_argument("--plot", metavar="OUT.png", help="write memory over time per rank as a PNG")
    s.add_argument("--check", action="store_true", help="exit with status 1 when it does not fit")
    s.add_argument("--set", action="append", metavar="KEY=VALUE")
    s.add_argument("--fidelity", choices=("operator", "coarse"))
    s.set_defaults(func=_memory_cmd)

    s = sub.add_parser("plan-recompute", help="choose per-layer recompute that fits with the least time")
    s.add_argument("file")
    s.add_argument("--json", action="store_true")
    s.add_argument("--set", action="append", metavar="KEY=VALUE")
    s.add_argument("--fidelity", choices=("operator", "coarse"))
    s.set_defaults(func=_plan_recompute_cmd)

    s = sub.add_parser("compare", help="compare schedules on one file, or several files")
    s.add_argument("files", nargs="+")
    s.add_argument("--schedules", help="comma-separated schedule names, e.g. 1f1b,interleaved-1f1b")
    s.add_argument("--plot", metavar="OUT.png", help="write stacked pipeline Gantts + memory panel as a PNG")
    s.add_argument("--json", action="store_true")
    s.add_argument("--set", action="append", metavar="KEY=VALUE")
    s.add_argument("--fidelity", choices=("operator", "coarse"), help="override options.fidelity")
    s.set_defaults(func=_compare_cmd)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ExecsimError as exc:
        print(f"execsim: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
