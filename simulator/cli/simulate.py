"""``execsim simulate``: simulate a file and report; traces, HTA folder, timeline, HTML and delta what-ifs."""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from simulator.cli.common import (
    EXAMPLE_NAME,
    FID_HELP,
    MKDIR_HELP,
    SET_HELP,
    add_command,
    check_command_outputs,
    input_file,
    input_files,
    load_input,
    pipeline_flags,
    print_json,
    simulate_one,
)
from strategies.errors import ExecsimError
from strategies.limits import MAX_TRACE_TASKS

# The other imports stay inside the functions that use them, on purpose: every command module is
# imported to build the parser, so whatever is imported here loads for `execsim --help` and every
# other command too. The reports, writers, engine and what-if modules pull in numpy (~100-130
# modules each); simulator.outputs.files loads `typing`. strategies.limits loads nothing.


def add_parser(sub) -> None:
    s = add_command(sub, "simulate", "simulate a pipeline description or strategy file",
             [f"execsim simulate {EXAMPLE_NAME}",
              f"execsim simulate {EXAMPLE_NAME} --fidelity coarse --json",
              f"execsim simulate {EXAMPLE_NAME} --check --set training.micro_batch=16 --set training.recompute=none   # exit 1: OOM",
              f"execsim simulate {EXAMPLE_NAME} --html report.html --trace trace.json",
              f"execsim simulate {EXAMPLE_NAME} --trace t.json.gz --trace-ranks 0-3 --trace-level stage",
              f"execsim simulate {EXAMPLE_NAME} --trace-dir hta/ --timeline tasks.csv",
              f"execsim simulate {EXAMPLE_NAME} --mode delta --what-if 'dp-comm=0' --what-if 'backward=1.5'"])
    s.add_argument("file", type=input_file, help="strategy file (model + cluster + parallel + training) or pipeline description")
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
    s.add_argument("--set", action="append", metavar="KEY=VALUE", help=SET_HELP)
    s.add_argument("--fidelity", choices=("operator", "coarse"), help=FID_HELP)
    s.add_argument("--mode", choices=("full", "delta"), default="full",
                   help="delta: keep the simulation state and re-simulate only what each --what-if change affects")
    s.add_argument("--what-if", action="append", metavar="PATTERN=FACTOR",
                   help="scale matching tasks' durations (operator name or category, shell pattern), e.g. "
                        "'layer3.*=1.5' or 'dp-comm=0'; repeatable, changes accumulate")
    s.add_argument("--price", type=float, metavar="USD", help="price per GPU-hour for the cost line")
    s.add_argument("--interval-level", default="0.8", metavar="LEVEL",
                   help="level of the stated prediction intervals, in (0, 1) (default 0.8: 80 %%; "
                        "docs/validation.md, \"Prediction intervals\")")
    s.add_argument("--mkdir", action="store_true", help=MKDIR_HELP)
    s.set_defaults(func=_simulate_cmd)



def _simulate_cmd(args) -> int:
    """Validate every flag and path, run once, then render one summary as text or JSON."""
    checked = _validate(args)
    summary = _run(args, checked)
    if args.json:
        print_json(summary_json(summary))
    else:
        for line in summary_text(summary):
            print(line)
    if args.check and summary.mem is not None and not summary.mem.fits:
        print(f"execsim: check failed: {args.file} does not fit in memory", file=sys.stderr)
        return 1
    return 0


@dataclass(frozen=True)
class CheckedRun:
    """What validation hands to the run: the loaded input, the interval level, the input files and
    the output paths ``check_command_outputs`` accepted (by flag)."""

    kind: str
    spec: object
    level: float
    inputs: tuple
    outs: dict


@dataclass(frozen=True)
class DeltaRun:
    """``--mode delta``: the base iteration time, one record per ``--what-if`` change and the wall time
    of one full simulation for comparison."""

    base_s: float
    changes: list
    full_s: float


@dataclass(frozen=True)
class SimulateSummary:
    """Everything ``execsim simulate`` reports, computed once; rendered by :func:`summary_text` or
    :func:`summary_json`. ``mem`` is None and ``oom`` "" for a pipeline description."""

    source: str
    kind: str
    sim: object
    mem: object
    oom: str
    level: float
    price: float | None
    delta: DeltaRun | None
    written: tuple[str, ...]
    html: str | None


def _validate(args) -> CheckedRun:
    """Every check that can fail, in the order users meet them, before any simulation starts."""
    level = _check_flags(args)
    kind, spec = load_input(args.file, args.set)
    _check_against_input(args, kind, spec)
    inputs = input_files(args.file, kind, spec)
    outs = _check_output_paths(args, kind, spec, inputs)
    return CheckedRun(kind, spec, level, inputs, outs)


def _check_flags(args) -> float:
    """The checks that need no input file; returns the interval level."""
    from simulator.reports.intervals import check_level
    level = check_level(args.interval_level)
    if args.what_if and args.mode != "delta":
        raise ExecsimError("--what-if needs --mode delta (re-simulate only what each change affects)")
    if args.what_if:
        from simulator.simulation.what_if import parse_what_if
        if len(args.what_if) > 64:
            raise ExecsimError(f"{len(args.what_if)} --what-if changes: give at most 64 per run")
        for w in args.what_if:
            parse_what_if(w)
    return level


def _check_against_input(args, kind: str, spec) -> None:
    """The flags whose meaning depends on the input: --check, the pipeline flags, --trace-ranks
    (parsed in place into a sorted list of ranks) and --price."""
    if args.check and kind != "strategy":
        raise ExecsimError(f"--check needs a strategy file (model + cluster give the memory capacity); {args.file} "
                           f"is a pipeline description")
    pipeline_flags(args, kind)
    if args.trace_ranks is not None and args.trace is None and args.trace_dir is None:
        raise ExecsimError("--trace-ranks selects ranks of --trace or --trace-dir; add one of them")
    if args.trace_level and args.trace is None:
        raise ExecsimError("--trace-level applies to the Chrome trace; add --trace OUT.json")
    if args.trace_ranks is not None:
        from simulator.outputs.trace import parse_ranks
        args.trace_ranks = parse_ranks(args.trace_ranks)
        pp = spec.pp if kind == "pipeline" else spec.parallel.pp  # one simulated rank per pipeline rank
        if args.trace_ranks[-1] >= pp:
            raise ExecsimError(f"--trace-ranks names rank {args.trace_ranks[-1]} but this run simulates ranks 0-{pp - 1} "
                               f"(one per pipeline rank); give ranks in 0-{pp - 1}")
    if getattr(args, "price", None) is not None:   # before the simulation, not at the cost line
        from topologies.pricing import check_price
        check_price(args.price, "--price")


def _check_output_paths(args, kind: str, spec, inputs) -> dict:
    """The output paths (none may overwrite an input), the timeline's format, the --trace-dir folder
    and the trace's size bound; returns the accepted paths by flag."""
    outs = check_command_outputs(args, inputs, trace=args.trace, html=args.html, timeline=args.timeline)
    if args.timeline is not None:   # its format, from the name, before the simulation
        from simulator.outputs.timeline_export import parquet_available, timeline_format
        if timeline_format(args.timeline) == "parquet" and not parquet_available():
            raise ExecsimError(f"--timeline {args.timeline!r} needs pyarrow, which is not installed: pip install "
                               f"'execsim[parquet]' (or write .csv)")
    if args.trace_dir is not None:
        from simulator.outputs.files import check_output_dir
        outs["--trace-dir"] = check_output_dir(args.trace_dir, "--trace-dir", inputs=inputs,
                                               mkdir=getattr(args, "mkdir", False), others=dict(outs))
    if outs.get("--trace") and not args.trace_ranks and args.trace_level != "stage":
        from simulator.simulation.estimate import estimate_run_tasks
        est = estimate_run_tasks(kind, spec, fidelity=args.fidelity)
        if est > MAX_TRACE_TASKS:
            raise ExecsimError(f"--trace: this run has about {est:,} tasks, over the limit of {MAX_TRACE_TASKS:,} "
                               f"for a trace (~250 MB, what Perfetto loads comfortably); trace a smaller run "
                               f"(fewer microbatches, or options.fidelity: coarse) or drop --trace")
    return outs


def _run(args, checked: CheckedRun) -> SimulateSummary:
    """Simulate, report memory, run the what-if changes and write the requested files; warnings go to
    stderr as they arise."""
    kind = checked.kind
    sim = simulate_one(kind, checked.spec, fidelity=args.fidelity)
    for w in getattr(getattr(sim, "plan", None), "warnings", ()):
        print(f"execsim: warning: {w}", file=sys.stderr)
    mem = None
    if kind == "strategy":
        from simulator.reports.memory import memory_report
        mem = memory_report(sim.plan, sim.graph, sim.result)
    oom = oom_verdict(args.file, mem)
    if oom and not args.check:   # --check says it in its own line and exit status
        print(f"execsim: warning: {oom}", file=sys.stderr)
    delta = _delta_run(sim, args.what_if) if (args.mode == "delta" or args.what_if) else None
    outs = checked.outs
    written = _write_trace_outputs(args, sim, mem, outs, checked.inputs)
    if outs.get("--html"):
        write_html(outs["--html"], args.file, kind, sim, args.set, checked.level)
    return SimulateSummary(source=args.file, kind=kind, sim=sim, mem=mem, oom=oom, level=checked.level,
                           price=args.price, delta=delta, written=tuple(written), html=args.html)


def _delta_run(sim, what_ifs) -> DeltaRun:
    """Apply ``what_ifs`` in delta mode, then time one full simulation of the same graph."""
    import time

    from simulator.engine.core import simulate as full_simulation
    from simulator.simulation.what_if import what_if
    base, changes = what_if(sim.graph, what_ifs or [])
    t0 = time.perf_counter()
    full_simulation(sim.graph)
    return DeltaRun(base_s=base, changes=changes, full_s=time.perf_counter() - t0)


def summary_json(s: SimulateSummary) -> dict:
    """The ``--json`` object: the report, the delta records, and for a strategy file the training,
    cost, memory, calibration envelope, interval and fit fields."""
    sim = s.sim
    out = sim.report.to_json()
    if s.delta is not None:
        out["delta"] = [{**d.__dict__, "full_simulation_s": s.delta.full_s} for d in s.delta.changes]
    out["schedule"] = sim.schedule.name
    out["sim_wall_s"] = round(sim.sim_wall_s, 6)
    if s.kind == "strategy":
        out.update(_strategy_json(s))
    from simulator.reports.interval_fields import simulation_fields
    out.update(simulation_fields(sim, s.mem, out.get("cost_usd"), s.level))
    out["oom"] = None if s.mem is None else not s.mem.fits
    out.setdefault("fits", None)
    return out


def _strategy_json(s: SimulateSummary) -> dict:
    """The keys only a strategy file has: training report (per stage with its peak memory), cost,
    operator profile coverage, memory report and calibration envelope."""
    from simulator.reports.envelope import plan_envelope
    sim = s.sim
    fields = sim.training.to_json()
    fields.update(_cost_fields(sim, s.price))
    if sim.graph.meta.get("profile"):
        fields["profile"] = sim.graph.meta["profile"]
    m = s.mem.to_json()
    for st, extra in zip(fields["per_stage"], m["memory_per_stage"]):
        st["peak_memory_gb"] = extra["total_gb"]
    fields.update(m)
    fields["calibration"] = plan_envelope(sim.plan).to_json()
    return fields


def summary_text(s: SimulateSummary) -> list[str]:
    """The text report, one entry per printed line (an entry may hold several lines)."""
    from simulator.reports.report import format_report
    sched = s.sim.schedule
    title = f"{s.source}: schedule {sched.name}, pp={sched.pp}, vpp={sched.vpp}, microbatches={sched.microbatches}"
    if isinstance(sched.meta, dict) and sched.meta.get("combined_1f1b"):
        title += " (combined 1F1B steps: options.overlap_moe_expert_parallel_comm)"
    lines = _strategy_text(s, title) if s.kind == "strategy" else [format_report(s.sim.report, title)]
    if s.delta is not None:
        lines += _delta_text(s.delta, s.sim.graph.num_tasks)
    lines += s.written
    if s.html:
        lines.append(f"HTML report written to {s.html}")
    return lines


def _strategy_text(s: SimulateSummary, title: str) -> list[str]:
    """A strategy file's report: OOM verdict first, training report with intervals, cost, memory,
    profile coverage, memory margin and calibration envelope."""
    from simulator.reports.envelope import plan_envelope
    from simulator.reports.interval_fields import report_memory_margin
    from simulator.reports.intervals import sim_interval
    from simulator.reports.training import format_training_report
    sim, mem, p = s.sim, s.mem, s.sim.plan
    title += (f"\nmodel {p.model.name} on {p.num_gpus} x {p.cluster.gpu.name} ({p.cluster.name}): "
              f"tp={p.sizes.tp} pp={p.sizes.pp} dp={p.sizes.dp} cp={p.sizes.cp} ep={p.sizes.ep} "
              f"sp={p.sp} zero={p.zero} recompute={p.strategy.training.recompute}")
    lines = [f"OOM: {s.oom}"] if s.oom else []   # the verdict first: the times below are those of a run that cannot start
    iv = sim_interval(sim, s.level)
    lines.append(format_training_report(sim.training, sim.report, title, interval=iv))
    money = _cost_fields(sim, s.price)
    if money["cost_usd"] is not None:
        lines.append(f"cost: {iv.text(money['cost_usd'], '', fmt='${:,.0f}')} at "
                     f"${money['price_per_gpu_hour_usd']:.2f} per GPU-hour (price from {money['price_source']})")
    elif sim.training.train_gpu_hours is not None:
        lines.append(f"cost: not known ({money['price_source']})")
    worst = max(mem.per_stage, key=lambda x: x.total)
    lines.append(f"memory: peak {worst.total / 2**30:.1f} GiB on rank {worst.rank} of {mem.capacity / 2**30:.1f} GiB "
                 f"-> {'fits' if mem.fits else 'OOM'} (execsim memory FILE for the breakdown)")
    cov = sim.graph.meta.get("profile")
    if cov:
        rest = (f"; {cov['modelled']} from the cost model ({', '.join(cov['modelled_examples'])}"
                f"{', ...' if cov['modelled'] > len(cov['modelled_examples']) else ''})" if cov["modelled"] else "")
        lines.append(f"profile: {cov['measured']} operator passes measured ({cov['path']}){rest}")
    lines.append(report_memory_margin(mem, s.level)["summary"])
    lines.append(plan_envelope(p).summary())
    return lines


def _delta_text(delta: DeltaRun, num_tasks: int) -> list[str]:
    """The delta lines: the base iteration and one line per what-if change."""
    base = delta.base_s
    lines = [f"delta mode: base iteration {base:.6g} s; one full simulation takes {delta.full_s * 1e3:.1f} ms"]
    for d in delta.changes:
        fb = f", fell back to full ({d.reason})" if d.fallback else ""
        lines.append(f"  what-if {d.change}: {d.tasks} tasks changed -> iteration {d.iteration_time_s:.6g} s "
                     f"({100 * (d.iteration_time_s / base - 1):+.2f}%), re-timed {d.retimed} of "
                     f"{num_tasks} tasks in {d.wall_s * 1e3:.2f} ms{fb}")
    return lines


def oom_verdict(source: str, mem) -> str:
    """One line saying ``source`` does not fit (peak, rank, capacity), or "" when it fits or has no
    memory report (a pipeline description)."""
    if mem is None or mem.fits:
        return ""
    worst = max(mem.per_stage, key=lambda x: x.total)
    return (f"{source} does not fit in memory: peak {worst.total / 2**30:.1f} GiB on rank {worst.rank} of "
            f"{mem.capacity / 2**30:.1f} GiB (execsim memory FILE for the breakdown; the times assume it fits)")


def write_html(path: str, source: str, kind: str, sim, sets=None, level: float = 0.8) -> None:
    """The HTML report, written atomically (simulator.outputs.files)."""
    from simulator.outputs.files import write_output
    from simulator.outputs.html_report import write_html_report
    label = source + (" with --set " + " ".join(sets) if sets else "")
    text = Path(source).read_text(encoding="utf-8")
    write_output(path, lambda tmp: write_html_report(tmp, sim, source=label, strategy_text=text,
                                                     interval_level=level), "--html")


def _cost_fields(sim, override) -> dict:
    """Price per GPU-hour and the cost of training.train_tokens (topologies/pricing.py); None when
    there is no token budget or no price."""
    from topologies.pricing import plan_price_origin
    price, source = plan_price_origin(sim.plan, override)
    hours = sim.training.train_gpu_hours
    return {"price_per_gpu_hour_usd": price, "price_source": source,
            "cost_usd": hours * price if (hours is not None and price is not None) else None}


def _write_trace_outputs(args, sim, mem, outs: dict, inputs=()) -> list[str]:
    """--trace, --trace-dir and --timeline (issue 15), to the paths ``check_command_outputs`` accepted, each
    written atomically (simulator.outputs.files); returns one line per file written."""
    ranks = args.trace_ranks  # parsed before the simulation (simulator.outputs.trace.parse_ranks)
    out = []
    from simulator.outputs.files import write_output
    if args.trace:
        from simulator.outputs.trace import write_chrome_trace
        counters = memory_counters(sim, mem)
        write_output(outs["--trace"], lambda tmp: write_chrome_trace(
            tmp, sim.graph, sim.result, counters=counters, ranks=ranks, level=args.trace_level or "operator"), "--trace")
        out.append(f"trace written to {args.trace} (open in https://ui.perfetto.dev or chrome://tracing)")
    if outs.get("--trace-dir") is not None:
        from simulator.outputs.trace_hta import write_hta_traces
        paths = write_hta_traces(outs["--trace-dir"], sim.graph, sim.result, ranks=ranks, inputs=inputs)
        out.append(f"{len(paths)} per-rank traces written to {args.trace_dir} (Holistic Trace Analysis: "
                   f"TraceAnalysis(trace_dir={str(args.trace_dir)!r}))")
    if args.timeline:
        from simulator.outputs.timeline_export import write_timeline
        # the temporary file keeps the suffix (.csv / .parquet) the writer dispatches on
        write_output(outs["--timeline"], lambda tmp: write_timeline(tmp, sim.graph, sim.result), "--timeline")
        out.append(f"timeline ({sim.graph.num_tasks} tasks) written to {args.timeline}")
    return out


def memory_counters(sim, mem):
    """Per-rank memory counter tracks (GiB): static states + reserve + the simulated curve."""
    from simulator.reports.memory_timeline import memory_curves
    curves = memory_curves(sim.graph, sim.result)
    base = {s.rank: s.weights + s.grads + s.optimizer + s.reserve for s in mem.per_stage} if mem else {}
    return {r: (c.times, (c.values + base.get(r, 0.0)) / 2**30) for r, c in curves.items()}
