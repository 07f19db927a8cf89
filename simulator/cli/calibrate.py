"""``execsim calibrate``: read a real run's PyTorch profiler traces (one JSON per rank), map kernels
to the strategy's operators, write the profile CSV and print measured vs simulated per rank and per
kernel class."""
from __future__ import annotations

from simulator.cli.common import (
    MKDIR_HELP,
    SET_HELP,
    add_command,
    input_file,
    input_files,
    load_strategy_arg,
    print_json,
    trace_folder,
)


def add_parser(sub) -> None:
    s = add_command(sub, "calibrate", "read PyTorch profiler traces of a real run (one JSON per rank), map kernels to the "
             "strategy's operators and write the profile CSV, with measured vs simulated per rank and class",
             ["execsim calibrate tiny-gpt-cpu tiny-gpt-cpu-trace -o measured.csv   # the shipped CPU trace",
              "execsim calibrate tiny-gpt-cpu tiny-gpt-cpu-trace -o measured.csv --include-last-step --json",
              "python benchmarks/trace_tiny.py -o trace/ && execsim calibrate tiny-gpt-cpu trace/ -o measured.csv"])
    s.add_argument("file", type=input_file, help="strategy file of the traced run")
    s.add_argument("trace_dir", type=trace_folder, help="folder with one profiler trace per rank (.json or .json.gz, "
                   "HTA's layout), or a shipped example trace's name (tiny-gpt-cpu-trace)")
    s.add_argument("-o", "--output", default="profile.csv", metavar="OUT.csv",
                   help="profile CSV of the mapped operators (default profile.csv)")
    s.add_argument("--include-last-step", action="store_true",
                   help="keep the last ProfilerStep (dropped by default, as Holistic Trace Analysis does)")
    s.add_argument("--no-simulate", action="store_true", help="only the measured figures, no simulation")
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.add_argument("--set", action="append", metavar="KEY=VALUE", help=SET_HELP)
    s.add_argument("--mkdir", action="store_true", help=MKDIR_HELP)
    s.set_defaults(func=_calibrate_cmd)


def _calibrate_cmd(args) -> int:
    from simulator.outputs.files import check_outputs, write_output
    from simulator.profiling.calibrate import calibrate, simulated_figures
    from simulator.profiling.kernels import CLASSES
    from simulator.profiling.kineto import read_trace_dir, trace_files
    from simulator.profiling.profile_csv import profile_text, report_lines, rows_json
    from simulator.profiling.trace_checks import check_ranks
    from taskgraph.plan import resolve
    kind, spec = load_strategy_arg(args, "calibrate")
    inputs = input_files(args.file, kind, spec) + [str(f) for f in trace_files(args.trace_dir)]
    outs = check_outputs({"--output": args.output}, inputs=inputs, mkdir=args.mkdir)
    plan = resolve(spec)
    traces = read_trace_dir(args.trace_dir, args.include_last_step)
    check_ranks(traces, plan.num_gpus, args.file)
    cal = calibrate(plan, traces)
    import sys

    from simulator.profiling.calibrate_cpu import calibrate_cpu, trace_warnings
    for w in trace_warnings(plan, traces):
        print(f"execsim: warning: {w}", file=sys.stderr)
    cpu_rows = bool(traces) and all(t.device == "cpu" for t in traces) and plan.sizes.pp == 1
    if cpu_rows:
        # operators' self times, per part of the median step (simulator/profiling/calibrate_cpu.py)
        cal.rows, notes = calibrate_cpu(plan, traces)
        for n in notes:
            print(f"execsim: warning: {n}", file=sys.stderr)
    gpu = "cpu" if all(t.device == "cpu" for t in traces) else plan.cluster.gpu.name
    dtype = plan.strategy.training.precision
    write_output(outs["--output"], profile_text(cal.rows, gpu, dtype), "--output")
    sim = {}
    if not args.no_simulate:
        sim["model"] = simulated_figures(plan)
        if cal.rows:
            sim["profile"] = simulated_figures(plan, outs["--output"], gpu)
    if args.json:
        print_json({"ranks": [vars(r) for r in cal.ranks], "rows": rows_json(cal.rows), "gpu": gpu,
                     "mapped_s_per_step": cal.mapped_s, "kernel_s_per_step": cal.total_s,
                     "unmapped": [{"class": c, "name": n, "s_per_step": v} for c, n, v in cal.unmapped[:50]],
                     "simulated": sim})
        return 0
    print(f"{args.file}: {len(traces)} rank trace(s) from {args.trace_dir}; {plan.model.name}, "
          f"{plan.num_gpus} x {plan.cluster.gpu.name}; device times per step (ms)")
    print(f"{'rank':>5} {'pp':>3} {'steps':>5} {'step ms':>10} " + " ".join(f"{c:>13}" for c in CLASSES))
    for r in cal.ranks:
        step = f"{r.step_s * 1e3:10.2f}" if r.step_s is not None else f"{'-':>10}"
        print(f"{r.rank:>5} {'-' if r.pp_rank is None else r.pp_rank:>3} {r.steps:>5} {step} "
              + " ".join(f"{r.class_s[c] * 1e3:13.3f}" for c in CLASSES))
    for label, fig in sim.items():
        how = "cost model" if label == "model" else f"with the mapped rows (measured on {gpu})"
        busy = ", ".join(f"pp {k}: busy {v * 1e3:.2f} idle {fig['idle_s'][k] * 1e3:.2f}"
                         for k, v in sorted(fig["busy_s"].items())[:8])
        print(f"simulated ({how}): step {fig['iteration_s'] * 1e3:.2f} ms; {busy}")
        print("  per class, pipeline rank 0 (ms): " + ", ".join(f"{c} {v * 1e3:.3f}"
                                                                for c, v in sorted(fig["class_s_rank0"].items())))
    if cal.rows:
        title = ("operator passes of the median step (per call; simulator/profiling/calibrate_cpu.py):" if cpu_rows
                 else "operators mapped from the traces (median per call):")
        print("\n".join(report_lines(cal.rows, title)))
    share = cal.mapped_s / cal.total_s if cal.total_s else 0.0
    print(f"mapped to operators: {cal.mapped_s * 1e3:.3f} of {cal.total_s * 1e3:.3f} ms of kernels per step "
          f"({share:.1%}); not mapped, largest first:")
    for c, n, v in cal.unmapped[:10]:
        print(f"  {c:<13} {v * 1e3:10.3f} ms  {n[:100]}")
    print(f"profile written to {args.output} ({len(cal.rows)} rows)")
    return 0
