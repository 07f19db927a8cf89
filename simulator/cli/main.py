"""The ``execsim`` command line. Library code raises; only this module prints and exits.

Subcommands: ``schedule`` (print a schedule's per-rank grid), ``simulate`` (simulate a file and
report), ``compare`` (several schedules or files side by side), ``search`` (strategies, GPU counts and
cost: ``simulator/cli/search.py``).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from strategies.errors import ExecsimError, brief, cut

EXIT_USAGE = 2
EXIT_INTERNAL = 3


def _json_safe(x):
    """``x`` with non-finite floats replaced by None (JSON has no NaN or Infinity)."""
    import math
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    if hasattr(x, "item") and not isinstance(x, (str, bytes)):  # numpy scalars
        return _json_safe(x.item())
    return x


def _print_json(obj) -> None:
    """Print ``obj`` as strict JSON (``allow_nan=False`` after replacing non-finite numbers by null)."""
    print(json.dumps(_json_safe(obj), sort_keys=True, allow_nan=False))


def _input_files(path: str, kind: str, spec) -> list[str]:
    """Every file a run reads: the input file and the files it names (never overwritten)."""
    files = [path]
    base = Path(path).parent
    if kind == "pipeline":
        files.append(spec.schedule_csv)
    else:
        for ref in (spec.model, spec.cluster):
            if isinstance(ref, str):
                files += [ref, str(base / ref), str(base / ref / "config.json")]
        files += [spec.schedule_csv, spec.options.profile]
    return [f for f in files if f]


def _check_outputs(args, inputs, **outputs) -> dict:
    """Check every output flag of this command before any simulation (``simulator.outputs.files``)."""
    from simulator.outputs.files import check_outputs
    return check_outputs({f"--{k.replace('_', '-')}": v for k, v in outputs.items()}, inputs=inputs,
                         mkdir=getattr(args, "mkdir", False))


def _schedule_cmd(args) -> int:
    from strategies.schedules import get_schedule
    outs = _check_outputs(args, [], output=args.output)
    sched = get_schedule(args.schedule, args.pp, args.microbatches, args.vpp)
    if args.json:
        d = sched.to_json()
        text = json.dumps({k: d[k] for k in ("pp", "microbatches", "vpp", "stage_to_rank", "orders")}) + "\n"
    elif args.csv:
        from strategies.schedule_csv import write_schedule_csv
        text = write_schedule_csv(sched)
    else:
        text = sched.grid() + "\n"
    if outs:
        from simulator.outputs.files import write_output
        write_output(outs["--output"], text, "--output")
    else:
        sys.stdout.write(text)
    return 0


def _load(path: str, sets: list[str]):
    """Load a simulation input: a pipeline description (``pipeline:`` section) or a strategy file."""
    from strategies.config import load_mapping, parse_set_value, set_dotted
    data = load_mapping(path, "input file")
    for item in sets or []:
        if "=" not in item:
            raise ExecsimError(f"--set {item!r} must look like section.key=value, e.g. --set pipeline.pp=8")
        k, v = item.split("=", 1)
        if not k.strip() or any(not part for part in k.strip().split(".")):
            raise ExecsimError(f"--set {brief(item)}: the key before '=' must be a dotted field name such as "
                               f"parallel.pp")
        data = set_dotted(data, k.strip(), parse_set_value(v.strip(), k.strip()))
    if "pipeline" in data:
        from strategies.pipeline_file import parse_pipeline
        return "pipeline", parse_pipeline(data, Path(path).parent)
    from strategies.strategy_file import parse_strategy
    return "strategy", parse_strategy(data, Path(path).parent)


def _simulate_one(kind, spec, schedule=None, fidelity=None, vpp=None):
    from simulator.simulation.pipeline import simulate_pipeline
    from simulator.simulation.strategy import simulate_strategy
    if kind == "pipeline":
        return simulate_pipeline(spec, schedule=schedule, vpp=vpp)
    return simulate_strategy(spec, schedule=schedule, fidelity=fidelity, vpp=vpp)


#: chunks per rank a schedule needs when compared against others (None = keep the file's, >= 2)
_FIXED_VPP = {"gpipe": 1, "1f1b": 1, "zb-v": 2, "dualpipe-v": 2, "dualpipe": 2}


def _schedule_item(item: str, spec, kind) -> tuple[str, int]:
    """``name`` or ``name:vpp``. Without a count: 1 for single-chunk schedules, 2 for V schedules,
    else the file's vpp (at least 2 for interleaved-1f1b, which equals 1f1b at vpp 1)."""
    from strategies.schedules import SCHEDULES
    name, _, v = item.partition(":")
    if name == "custom":
        raise ExecsimError("--schedules custom: a custom schedule needs its CSV; put schedule: {name: custom, csv: "
                           "FILE} in a file and compare files instead (execsim compare a.yaml b.yaml)")
    if name not in SCHEDULES:
        from strategies.config import did_you_mean
        raise ExecsimError(f"--schedules item {brief(item)}: unknown schedule {brief(name)}"
                           f"{did_you_mean(name, SCHEDULES)}; valid: {', '.join(sorted(SCHEDULES))}")
    if v:
        if not v.isascii() or not v.isdigit() or len(v) > 6 or int(v) < 1:
            raise ExecsimError(f"--schedules item {brief(item)}: the chunk count after ':' must be a positive "
                               f"integer (at most 6 digits)")
        return name, int(v)
    file_vpp = spec.vpp if kind == "pipeline" else spec.parallel.vpp
    if name in _FIXED_VPP:
        return name, _FIXED_VPP[name]
    return name, max(file_vpp, 2) if name == "interleaved-1f1b" else file_vpp


def _simulate_cmd(args) -> int:
    from simulator.reports.report import format_report
    if args.what_if and args.mode != "delta":
        raise ExecsimError("--what-if needs --mode delta (re-simulate only what each change affects)")
    if args.what_if:
        from simulator.simulation.what_if import parse_what_if
        if len(args.what_if) > 64:
            raise ExecsimError(f"{len(args.what_if)} --what-if changes: give at most 64 per run")
        for w in args.what_if:
            parse_what_if(w)
    kind, spec = _load(args.file, args.set)
    if args.check and kind != "strategy":
        raise ExecsimError(f"--check needs a strategy file (model + cluster give the memory capacity); {args.file} "
                           f"is a pipeline description")
    if args.trace_ranks and not (args.trace or args.trace_dir):
        raise ExecsimError("--trace-ranks selects ranks of --trace or --trace-dir; add one of them")
    if args.trace_level and not args.trace:
        raise ExecsimError("--trace-level applies to the Chrome trace; add --trace OUT.json")
    outs = _check_outputs(args, _input_files(args.file, kind, spec), trace=args.trace, html=args.html,
                          timeline=args.timeline)
    if args.trace_dir:
        _check_trace_dir(args.trace_dir, getattr(args, "mkdir", False))
    if outs.get("--trace") and not args.trace_ranks and args.trace_level != "stage":
        from simulator.simulation.estimate import estimate_run_tasks
        from strategies.limits import MAX_TRACE_TASKS
        est = estimate_run_tasks(kind, spec, fidelity=args.fidelity)
        if est > MAX_TRACE_TASKS:
            raise ExecsimError(f"--trace: this run has about {est:,} tasks, over the limit of {MAX_TRACE_TASKS:,} "
                               f"for a trace (~250 MB, what Perfetto loads comfortably); trace a smaller run "
                               f"(fewer microbatches, or options.fidelity: coarse) or drop --trace")
    sim = _simulate_one(kind, spec, fidelity=args.fidelity)
    for w in getattr(getattr(sim, "plan", None), "warnings", ()):
        print(f"execsim: warning: {w}", file=sys.stderr)
    mem = None
    if kind == "strategy":
        from simulator.reports.memory import memory_report
        mem = memory_report(sim.plan, sim.graph, sim.result)
    s = sim.schedule
    deltas = None
    if args.mode == "delta" or args.what_if:
        import time as _time
        from simulator.simulation.what_if import what_if
        from simulator.engine.core import simulate as _full
        base, deltas = what_if(sim.graph, args.what_if or [])
        t0 = _time.perf_counter()
        _full(sim.graph)
        full_s = _time.perf_counter() - t0
    written = _write_trace_outputs(args, sim, mem, outs)
    if outs.get("--html"):
        _write_html(outs["--html"], args.file, kind, sim, args.set)
    if args.json:
        out = sim.report.to_json()
        if deltas is not None:
            out["delta"] = [{**d.__dict__, "full_simulation_s": full_s} for d in deltas]
        out["schedule"] = s.name
        out["sim_wall_s"] = round(sim.sim_wall_s, 6)
        if kind == "strategy":
            t = sim.training.to_json()
            out.update({k: v for k, v in t.items()})
            out.update(_cost_fields(sim, args.price))
            out["critical_path"] = sim.report.to_json()["critical_path"]
            m = mem.to_json()
            for st, extra in zip(out["per_stage"], m["memory_per_stage"]):
                st["peak_memory_gb"] = extra["total_gb"]
            out.update(m)
        out["oom"] = None if mem is None else not mem.fits
        out.setdefault("fits", None)
        _print_json(out)
    else:
        title = f"{args.file}: schedule {s.name}, pp={s.pp}, vpp={s.vpp}, microbatches={s.microbatches}"
        if kind == "strategy":
            from simulator.reports.training import format_training_report
            p = sim.plan
            title += (f"\nmodel {p.model.name} on {p.num_gpus} x {p.cluster.gpu.name} ({p.cluster.name}): "
                      f"tp={p.sizes.tp} pp={p.sizes.pp} dp={p.sizes.dp} cp={p.sizes.cp} ep={p.sizes.ep} "
                      f"sp={p.sp} zero={p.zero} recompute={p.strategy.training.recompute}")
            print(format_training_report(sim.training, sim.report, title))
            money = _cost_fields(sim, args.price)
            if money["cost_usd"] is not None:
                print(f"cost: ${money['cost_usd']:,.0f} at ${money['price_per_gpu_hour_usd']:.2f} per GPU-hour "
                      f"(topologies/data/prices.yaml; override with --price or options.price_per_gpu_hour_usd)")
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
        if args.html:
            print(f"HTML report written to {args.html}")
    if args.check and mem is not None and not mem.fits:
        print(f"execsim: check failed: {args.file} does not fit in memory", file=sys.stderr)
        return 1
    return 0


def _report_cmd(args) -> int:
    kind, spec = _load(args.file, args.set)
    outs = _check_outputs(args, _input_files(args.file, kind, spec), output=args.output)
    sim = _simulate_one(kind, spec, fidelity=args.fidelity)
    _write_html(outs["--output"], args.file, kind, sim, args.set)
    print(f"report written to {args.output}")
    return 0


def _write_html(path: str, source: str, kind: str, sim, sets=None) -> None:
    """The HTML report, written atomically (simulator.outputs.files)."""
    from simulator.outputs.html_report import write_html_report
    from simulator.outputs.files import write_output
    label = source + (" with --set " + " ".join(sets) if sets else "")
    text = Path(source).read_text(encoding="utf-8")
    write_output(path, lambda tmp: write_html_report(tmp, sim, source=label, strategy_text=text), "--html")


def _cost_fields(sim, override) -> dict:
    """Price per GPU-hour and the cost of training.train_tokens (topologies/pricing.py); None when
    there is no token budget or no price."""
    from topologies.pricing import plan_price
    price = plan_price(sim.plan, override)
    hours = sim.training.train_gpu_hours
    return {"price_per_gpu_hour_usd": price,
            "cost_usd": hours * price if (hours is not None and price is not None) else None}


def _check_trace_dir(path: str, mkdir: bool) -> None:
    """--trace-dir: a folder (created when missing if its parent exists, or with --mkdir)."""
    p = Path(path)
    if str(path).strip() == "":
        raise ExecsimError("--trace-dir '' is empty: give a folder for the per-rank traces")
    if p.exists() and not p.is_dir():
        raise ExecsimError(f"--trace-dir {brief(str(path))} is a file, not a folder: give a folder for rank_N.json files")
    if not p.exists() and not p.parent.exists() and not mkdir:
        raise ExecsimError(f"--trace-dir {brief(str(path))}: the folder {brief(str(p.parent))} does not exist; create "
                           f"it or add --mkdir")


def _write_trace_outputs(args, sim, mem, outs: dict) -> list[str]:
    """--trace, --trace-dir and --timeline (issue 15), to the paths ``_check_outputs`` accepted, each
    written atomically (simulator.outputs.files); returns one line per file written."""
    from simulator.outputs.trace import parse_ranks
    ranks = parse_ranks(args.trace_ranks) if args.trace_ranks else None
    out = []
    from simulator.outputs.files import write_output
    if args.trace:
        from simulator.outputs.trace import write_chrome_trace
        counters = _memory_counters(sim, mem)
        write_output(outs["--trace"], lambda tmp: write_chrome_trace(
            tmp, sim.graph, sim.result, counters=counters, ranks=ranks, level=args.trace_level or "operator"), "--trace")
        out.append(f"trace written to {args.trace} (open in https://ui.perfetto.dev or chrome://tracing)")
    if args.trace_dir:
        from simulator.outputs.trace_hta import write_hta_traces
        paths = write_hta_traces(args.trace_dir, sim.graph, sim.result, ranks=ranks)
        out.append(f"{len(paths)} per-rank traces written to {args.trace_dir} (Holistic Trace Analysis: "
                   f"TraceAnalysis(trace_dir={str(args.trace_dir)!r}))")
    if args.timeline:
        from simulator.outputs.timeline_export import write_timeline
        # the temporary file keeps the suffix (.csv / .parquet) the writer dispatches on
        write_output(outs["--timeline"], lambda tmp: write_timeline(tmp, sim.graph, sim.result), "--timeline")
        out.append(f"timeline ({sim.graph.num_tasks} tasks) written to {args.timeline}")
    return out


def _memory_counters(sim, mem):
    """Per-rank memory counter tracks (GiB): static states + reserve + the simulated curve."""
    from simulator.reports.memory_timeline import memory_curves
    curves = memory_curves(sim.graph, sim.result)
    base = {s.rank: s.weights + s.grads + s.optimizer + s.reserve for s in mem.per_stage} if mem else {}
    return {r: (c.times, (c.values + base.get(r, 0.0)) / 2**30) for r, c in curves.items()}


def _load_strategy(args, command: str):
    """``_load`` for the commands that need a strategy file (model + cluster), not a pipeline file."""
    kind, spec = _load(args.file, args.set)
    if kind != "strategy":
        raise ExecsimError(f"{args.file} is a pipeline description; 'execsim {command}' needs a strategy file "
                           f"(model + cluster + parallel + training)")
    return kind, spec


def _memory_cmd(args) -> int:
    from simulator.reports.memory import format_memory_report, memory_report
    from taskgraph.memory import layer_activation_table
    kind, spec = _load_strategy(args, "memory")
    outs = _check_outputs(args, _input_files(args.file, kind, spec), plot=args.plot)
    sim = _simulate_one(kind, spec, fidelity=args.fidelity)
    mem = memory_report(sim.plan, sim.graph, sim.result)
    if outs:
        from simulator.outputs.files import write_output
        from simulator.outputs.plots import plot_memory
        static = {s.rank: s.weights + s.grads + s.optimizer + s.reserve for s in mem.per_stage}
        write_output(outs["--plot"], lambda tmp: plot_memory(
            sim.graph, sim.result, tmp, static_bytes=static, capacity_bytes=mem.capacity,
            title=f"{args.file}: memory per GPU of each pipeline rank"), "--plot")
    if args.json:
        out = mem.to_json()
        out["layers"] = layer_activation_table(sim.plan)
        _print_json(out)
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
    from simulator.search.recompute import format_plan, plan_recompute
    kind, spec = _load(args.file, args.set)
    if kind != "strategy":
        raise ExecsimError(f"{args.file} is a pipeline description; plan-recompute needs a strategy file")
    rp = plan_recompute(spec, fidelity=args.fidelity, progress=None)
    if args.json:
        out = {"uniform": {p: {"iteration_time_s": e.iteration_time_s, "peak_memory_gb": e.peak_bytes / 2**30,
                               "fits": e.fits} for p, e in rp.uniform.items()}, "simulations": rp.steps}
        if rp.best:
            out["plan"] = {"recompute_layers": list(rp.best.policies), "iteration_time_s": rp.best.iteration_time_s,
                           "peak_memory_gb": rp.best.peak_bytes / 2**30, "fits": rp.best.fits}
        _print_json(out)
    else:
        print(f"{args.file}: per-layer recompute plan (memory judged by simulation; GiB per GPU)")
        print(format_plan(rp))
        if rp.best:
            print("use it with training.recompute_layers: [" + ", ".join(rp.best.policies) + "]"
                  if len(rp.best.policies) <= 16 else "use it with training.recompute_layers (see --json)")
    return 0 if rp.best else 1


def _check_total_tasks(runs, fidelity) -> None:
    """Refuse a multi-run command whose runs together would build over ``MAX_TOTAL_TASKS`` tasks."""
    from simulator.simulation.estimate import estimate_run_tasks
    from strategies.limits import MAX_TOTAL_TASKS, check_tasks
    total = 0
    for kind, spec, name, vpp in runs:  # stops at the first run that crosses the limit
        total += estimate_run_tasks(kind, spec, schedule=name, vpp=vpp, fidelity=fidelity)
        check_tasks(total, f"these {len(runs)} runs together", MAX_TOTAL_TASKS)


def _compare_cmd(args) -> int:
    runs = []
    if args.schedules is not None:
        if len(args.files) != 1:
            raise ExecsimError("--schedules compares schedules on ONE file; give exactly one file")
        items = [s.strip() for s in args.schedules.split(",") if s.strip()]
        if not items:
            raise ExecsimError(f"--schedules {brief(args.schedules)} names no schedule: give comma-separated names, "
                               f"e.g. --schedules 1f1b,interleaved-1f1b")
        if len(items) > 64:
            raise ExecsimError(f"--schedules names {len(items)} schedules; compare at most 64 at a time")
        kind, spec = _load(args.files[0], args.set)
        outs = _check_outputs(args, _input_files(args.files[0], kind, spec), plot=args.plot)
        todo = [(item, *_schedule_item(item, spec, kind)) for item in items]
        _check_total_tasks([(kind, spec, name, vpp) for _item, name, vpp in todo], args.fidelity)
        from simulator.outputs.progress import progress
        for item, name, vpp in progress(todo, desc="compare", unit="schedule"):
            label = item if ":" in item else (f"{name} v={vpp}" if vpp > 1 and name not in ("zb-v", "dualpipe-v", "dualpipe") else name)
            runs.append((label, kind, _simulate_one(kind, spec, schedule=name, fidelity=args.fidelity, vpp=vpp)))
    else:
        loaded = [(f, *_load(f, args.set)) for f in args.files]
        outs = _check_outputs(args, [x for f, k, sp in loaded for x in _input_files(f, k, sp)], plot=args.plot)
        _check_total_tasks([(k, sp, None, None) for _f, k, sp in loaded], args.fidelity)
        from simulator.outputs.progress import progress
        for f, kind, spec in progress(loaded, desc="compare", unit="file"):
            runs.append((Path(f).name, kind, _simulate_one(kind, spec, fidelity=args.fidelity)))
    from simulator.reports.memory_timeline import peak_per_rank
    base = runs[0][2].report.makespan_s
    rows, mems = [], []
    for label, kind, sim in runs:
        r = sim.report
        mem = None
        if kind == "strategy":
            from simulator.reports.memory import memory_report
            mem = memory_report(sim.plan, sim.graph, sim.result)
            peaks = [x.total / 2**30 for x in mem.per_stage]
        elif sim.graph.mem_task.size:
            peaks = [v / 2**30 for v in peak_per_rank(sim.graph, sim.result)]
        else:
            peaks = []
        mems.append(mem)
        exposed = [rr.exposed_comm_s for rr in r.per_rank]
        rows.append({"label": label, "schedule": sim.schedule.name, "iteration_time_s": r.makespan_s,
                     "speedup": base / r.makespan_s if r.makespan_s > 0 else float("nan"),
                     "bubble_fraction": r.bubble_fraction, "ideal_bubble_fraction": r.ideal_bubble_fraction,
                     "time_split": dict(r.time_split), "imbalance": r.imbalance, "num_tasks": r.num_tasks,
                     "peak_memory_gb": peaks, "fits": (mem.fits if mem else None),
                     "exposed_comm_s": max(exposed) if exposed else 0.0})
    if outs:
        from simulator.outputs.files import write_output
        from simulator.outputs.plots import plot_pipelines
        static = [({x.rank: x.weights + x.grads + x.optimizer + x.reserve for x in m.per_stage} if m else None)
                  for m in mems]
        cap = next((m.capacity for m in mems if m), None)
        write_output(outs["--plot"], lambda tmp: plot_pipelines(
            [(label, sim.graph, sim.result) for label, _k, sim in runs], tmp,
            static_bytes=static if any(x is not None for x in static) else None, capacity_bytes=cap), "--plot")
    if args.json:
        _print_json(rows)
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


def _goodput_cmd(args) -> int:
    """A whole run with failures, checkpoints and restarts (simulator/goodput/goodput.py)."""
    from simulator.goodput.goodput import daly_goodput, format_goodput, goodput_report, setup_from_strategy, simulate_run
    kind, spec = _load_strategy(args, "goodput")
    outs = _check_outputs(args, _input_files(args.file, kind, spec), plot=args.plot)
    setup = setup_from_strategy(spec, days=args.days, train_tokens=args.train_tokens, interval=args.interval)
    rep = goodput_report(setup, args.seeds, sweep=not args.no_sweep)
    if outs.get("--plot"):
        from dataclasses import replace as _replace

        from simulator.goodput.plot import plot_run
        from simulator.outputs.files import write_output
        run = simulate_run(_replace(setup.model, interval_s=rep["interval_s"]), setup.spec.seed,
                           record_checkpoints=True)
        m = setup.model
        write_output(outs["--plot"], lambda tmp: plot_run(run, rep, tmp, closed_form=lambda t: daly_goodput(
            t, m.save_block_s + m.save_commit_s, setup.mean_down_s, setup.mtbf_s)), "--plot")
    if args.json:
        _print_json(rep)
    else:
        length = f"{setup.spec.days:g}-day" if setup.spec.days else f"{setup.spec.train_tokens:.4g}-token"
        print(format_goodput(rep, f"{args.file}: a {length} run with failures, checkpoints and restarts"))
        if args.plot:
            print(f"plot written to {args.plot}")
    return 0



class _UsageError(ExecsimError):
    """A command-line argument argparse refused."""


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad argument is one ``execsim: error:`` line (like every other error)."""

    def error(self, message):
        raise _UsageError(f"{self.prog}: {cut(message, 200)} (see '{self.prog} --help')")


_MKDIR_HELP = "create the output file's folder if it does not exist"


_EX = "examples:\n  "


def _sub(sub, name: str, help: str, examples: list[str]):
    """A subcommand whose --help ends with runnable examples."""
    return sub.add_parser(name, help=help, description=help[0].upper() + help[1:] + ".",
                          epilog=_EX + "\n  ".join(examples), formatter_class=argparse.RawDescriptionHelpFormatter)


_SET_HELP = "override a field of the file, e.g. parallel.pp=16 or training.micro_batch=2 (repeatable)"
_FID_HELP = "override options.fidelity: operator (one task per operator pass) or coarse (one per stage pass, fast)"
_EXAMPLE = "strategies/examples/gpt3-175b-1024-a100.yaml"


def build_parser() -> argparse.ArgumentParser:
    from simulator import __version__
    p = _Parser(
        prog="execsim", description="Discrete-event execution simulator for distributed LLM training.",
        epilog=_EX + "\n  ".join([f"execsim simulate {_EXAMPLE}",
                                   f"execsim simulate {_EXAMPLE} --json --check",
                                   f"execsim simulate {_EXAMPLE} --html report.html",
                                   f"execsim compare {_EXAMPLE} --schedules 1f1b,interleaved-1f1b --plot cmp.png",
                                   "execsim <command> --help   (options and examples of one command)"]),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"execsim {__version__}",
                   help="print the version and exit")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = _sub(sub, "schedule", "print a pipeline schedule's per-rank action grid",
             ["execsim schedule --schedule interleaved-1f1b --pp 4 --microbatches 8 --vpp 2",
              "execsim schedule --schedule zb-h1 --pp 4 --microbatches 8 --csv > zb.csv"])
    s.add_argument("--schedule", required=True, help="schedule name: gpipe, 1f1b, interleaved-1f1b, zb-h1, zb-v, "
                   "dualpipe-v, dualpipe, looped-bfs")
    s.add_argument("--pp", type=int, required=True, help="pipeline ranks")
    s.add_argument("--microbatches", type=int, required=True, help="microbatches per iteration")
    s.add_argument("--vpp", type=int, default=1, help="chunks (virtual stages) per rank (default 1)")
    g = s.add_mutually_exclusive_group()
    g.add_argument("--json", action="store_true", help="machine-readable output")
    g.add_argument("--csv", action="store_true", help="PyTorch action CSV (one line per rank)")
    s.add_argument("--output", "-o", metavar="FILE", help="write to FILE (atomically) instead of stdout")
    s.add_argument("--mkdir", action="store_true", help=_MKDIR_HELP)
    s.set_defaults(func=_schedule_cmd)

    s = _sub(sub, "simulate", "simulate a pipeline description or strategy file",
             [f"execsim simulate {_EXAMPLE}",
              f"execsim simulate {_EXAMPLE} --fidelity coarse --json",
              f"execsim simulate {_EXAMPLE} --check --set training.micro_batch=16 --set training.recompute=none   # exit 1: OOM",
              f"execsim simulate {_EXAMPLE} --html report.html --trace trace.json",
              f"execsim simulate {_EXAMPLE} --trace t.json.gz --trace-ranks 0-3 --trace-level stage",
              f"execsim simulate {_EXAMPLE} --trace-dir hta/ --timeline tasks.csv",
              f"execsim simulate {_EXAMPLE} --mode delta --what-if 'dp-comm=0' --what-if 'layer3.*=1.5'"])
    s.add_argument("file", help="strategy file (model + cluster + parallel + training) or pipeline description")
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
    s.add_argument("--html", metavar="OUT.html", help="write a self-contained interactive HTML report "
                   "(summary, per-stage table, Gantt, memory, bubble and exposed communication, critical path)")
    s.add_argument("--json", action="store_true", help="print a machine-readable summary (includes fits / oom "
                   "for strategy files)")
    s.add_argument("--check", action="store_true", help="exit with status 1 when memory does not fit (strategy "
                   "files)")
    s.add_argument("--set", action="append", metavar="KEY=VALUE", help=_SET_HELP)
    s.add_argument("--fidelity", choices=("operator", "coarse"), help=_FID_HELP)
    s.add_argument("--mode", choices=("full", "delta"), default="full",
                   help="delta: keep the simulation state and re-simulate only what each --what-if change affects")
    s.add_argument("--what-if", action="append", metavar="PATTERN=FACTOR",
                   help="scale matching tasks' durations (operator name or category, shell pattern), e.g. "
                        "'layer3.*=1.5' or 'dp-comm=0'; repeatable, changes accumulate")
    s.add_argument("--price", type=float, metavar="USD", help="price per GPU-hour for the cost line")
    s.add_argument("--mkdir", action="store_true", help=_MKDIR_HELP)
    s.set_defaults(func=_simulate_cmd)

    s = _sub(sub, "report", "write the HTML report of a strategy file or pipeline description",
             [f"execsim report {_EXAMPLE} -o report.html",
              "execsim report strategies/examples/pipeline-interleaved.yaml -o pipe.html --set pipeline.pp=8"])
    s.add_argument("file", help="strategy file or pipeline description")
    s.add_argument("-o", "--output", metavar="OUT.html", required=True, help="the HTML file to write")
    s.add_argument("--set", action="append", metavar="KEY=VALUE", help=_SET_HELP)
    s.add_argument("--fidelity", choices=("operator", "coarse"), help=_FID_HELP)
    s.set_defaults(func=_report_cmd)

    s = _sub(sub, "memory", "per-stage memory breakdown and OOM verdict of a strategy file",
             [f"execsim memory {_EXAMPLE} --layers", f"execsim memory {_EXAMPLE} --plot mem.png",
              f"execsim memory {_EXAMPLE} --check --set training.micro_batch=16 --set training.recompute=none   # exit 1: OOM"])
    s.add_argument("file", help="strategy file")
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.add_argument("--layers", action="store_true", help="also print the per-layer activation table")
    s.add_argument("--plot", metavar="OUT.png", help="write memory over time per rank as a PNG")
    s.add_argument("--check", action="store_true", help="exit with status 1 when it does not fit")
    s.add_argument("--set", action="append", metavar="KEY=VALUE", help=_SET_HELP)
    s.add_argument("--fidelity", choices=("operator", "coarse"), help=_FID_HELP)
    s.add_argument("--mkdir", action="store_true", help=_MKDIR_HELP)
    s.set_defaults(func=_memory_cmd)

    s = _sub(sub, "plan-recompute", "choose per-layer recompute that fits with the least time",
             [f"execsim plan-recompute {_EXAMPLE}", f"execsim plan-recompute {_EXAMPLE} --json --fidelity coarse"])
    s.add_argument("file", help="strategy file")
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.add_argument("--set", action="append", metavar="KEY=VALUE", help=_SET_HELP)
    s.add_argument("--fidelity", choices=("operator", "coarse"), help=_FID_HELP)
    s.set_defaults(func=_plan_recompute_cmd)

    s = _sub(sub, "compare", "compare schedules on one file, or several files",
             [f"execsim compare {_EXAMPLE} --schedules 1f1b,interleaved-1f1b,zb-h1,zb-v --plot cmp.png",
              "execsim compare strategies/examples/pipeline-1f1b.yaml --schedules 1f1b,interleaved-1f1b:4",
              "execsim compare A.yaml B.yaml --json"])
    s.add_argument("files", nargs="+", help="one file with --schedules, or several files")
    s.add_argument("--schedules", help="comma-separated schedule names, NAME:VPP for a chunk count, e.g. "
                   "1f1b,interleaved-1f1b:4")
    s.add_argument("--plot", metavar="OUT.png", help="write stacked pipeline Gantts + memory panel as a PNG")
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.add_argument("--set", action="append", metavar="KEY=VALUE", help=_SET_HELP)
    s.add_argument("--fidelity", choices=("operator", "coarse"), help=_FID_HELP)
    s.add_argument("--mkdir", action="store_true", help=_MKDIR_HELP)
    s.set_defaults(func=_compare_cmd)

    s = _sub(sub, "import", "write a strategy file from a Megatron-LM launch script, a NeMo recipe or a torchtitan TOML",
             ["execsim import megatron strategies/examples/sources/train_gpt3_175b_distributed.sh "
              "--cluster dgx-a100-80g --nodes 128 -o gpt3.yaml",
              "execsim import nemo strategies/examples/sources/nemo_llama3_8b.yaml --cluster dgx-h100 -o s.yaml",
              "execsim import torchtitan strategies/examples/sources/torchtitan_llama3_8b.toml --cluster dgx-h100 "
              "--nodes 1"])
    s.add_argument("kind", choices=("megatron", "nemo", "torchtitan"), help="what SOURCE is")
    s.add_argument("source", help="the file, or - for standard input")
    s.add_argument("-o", "--output", metavar="OUT.yaml", help="write the strategy here (default: standard output)")
    s.add_argument("--cluster", metavar="PRESET", help="cluster preset, e.g. dgx-h100 or dgx-a100-80g (required: "
                   "launch scripts and recipes do not name the hardware)")
    s.add_argument("--nodes", type=int, help="number of nodes (default: from the source where it says)")
    s.add_argument("--vocab", type=int, help="vocabulary size when the source's tokenizer does not tell it")
    s.set_defaults(func=_import_cmd)

    from simulator.cli.search import add_parser as _add_search
    _add_search(sub)

    s = _sub(sub, "goodput", "simulate a whole training run: failures, checkpoints, restarts, goodput (SimPy)",
             ["execsim goodput strategies/examples/llama3-405b-16k-h100-goodput.yaml",
              "execsim goodput strategies/examples/llama3-405b-16k-h100-goodput.yaml --seeds 50 --plot run.png",
              "execsim goodput strategies/examples/llama3-405b-16k-h100-goodput.yaml --interval daly --no-sweep --json",
              "execsim goodput strategies/examples/llama3-405b-16k-h100-goodput.yaml --set goodput.spares=0 "
              "--set goodput.elastic=true"])
    s.add_argument("file", help="strategy file; its goodput: section sets failure rates, recovery and checkpoints")
    g = s.add_mutually_exclusive_group()
    g.add_argument("--days", type=float, help="wall-clock horizon in days (overrides goodput.days)")
    g.add_argument("--train-tokens", type=float, help="token budget (overrides goodput.train_tokens)")
    s.add_argument("--seeds", type=int, help="independent runs (default goodput.seeds, 20)")
    s.add_argument("--interval", metavar="young|daly|SECONDS|S1,S2,..",
                   help="checkpoint interval policy (overrides goodput.checkpoint.interval_s)")
    s.add_argument("--no-sweep", action="store_true", help="skip the search for the best interval")
    s.add_argument("--json", action="store_true", help="machine-readable output (keys in docs/goodput.md)")
    s.add_argument("--plot", metavar="OUT.png", help="tokens vs wall time with failures and checkpoints, and "
                   "goodput vs interval")
    s.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a field, e.g. goodput.restart_s=600")
    s.set_defaults(func=_goodput_cmd)
    return p


def _import_cmd(args) -> int:
    from simulator.simulation.importing import import_strategy, summary
    if args.source == "-":
        text, origin = sys.stdin.read(), "standard input"
    else:
        from strategies.documents import read_text
        path = Path(args.source)
        if not path.is_file():
            raise ExecsimError(f"import source {brief(args.source)} is not a file: give the path of the "
                               f"{args.kind} configuration, or - for standard input")
        text = read_text(path, f"import source {path.name}")
        origin = path.name
    outs = _check_outputs(args, [] if args.source == "-" else [args.source], output=args.output)
    out, imp = import_strategy(args.kind, text, origin=origin, cluster=args.cluster, nodes=args.nodes,
                               vocab=args.vocab)
    if imp.unmodeled:
        print(f"execsim: warning: {summary(imp)}", file=sys.stderr)
    if outs.get("--output"):
        from simulator.outputs.files import write_output
        write_output(outs["--output"], out, "--output")
        print(f"strategy written to {args.output} (execsim simulate {args.output})")
    else:
        sys.stdout.write(out)
    return 0


def _one_line(text: str) -> str:
    """An error message as printed: its lines joined (one ``execsim: error:`` line per error)."""
    return " | ".join(line.strip() for line in str(text).strip().splitlines() if line.strip())


def main(argv: list[str] | None = None) -> int:
    """Run the CLI. Every refused input prints one ``execsim: error: ...`` line and returns 2; an
    unexpected exception prints one ``execsim: internal error`` line and returns 3 (set
    ``EXECSIM_DEBUG=1`` for the traceback)."""
    import os
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        return args.func(args)
    except ExecsimError as exc:
        print(f"execsim: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        print("execsim: interrupted", file=sys.stderr)
        return 130
    except (MemoryError, RecursionError) as exc:
        print(f"execsim: error: out of {'memory' if isinstance(exc, MemoryError) else 'stack'}: the input is too "
              f"large for this machine; reduce its sizes (docs/strategy-file.md, Limits)", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:  # a bug: one line, not a traceback, unless asked for
        if os.environ.get("EXECSIM_DEBUG"):
            raise
        print(f"execsim: internal error: {type(exc).__name__}: {cut(str(exc), 200)} (a bug: please report "
              f"it with the input; EXECSIM_DEBUG=1 shows the traceback)", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
