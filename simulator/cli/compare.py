"""``execsim compare``: several schedules on one file, or several files, side by side."""
from __future__ import annotations

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
from strategies.errors import ExecsimError, brief


def add_parser(sub) -> None:
    s = add_command(sub, "compare", "compare schedules on one file, or several files",
             [f"execsim compare {EXAMPLE_NAME} --schedules 1f1b,interleaved-1f1b,zb-h1,zb-v --plot cmp.png",
              "execsim compare pipeline-1f1b --schedules 1f1b,interleaved-1f1b:4",
              "execsim compare gpt3-175b-1024-a100 megatron-gpt3-175b-1024-a100 --fidelity coarse --json"])
    s.add_argument("files", nargs="+", type=input_file, help="one file with --schedules, or several files")
    s.add_argument("--schedules", help="comma-separated schedule names, NAME:VPP for a chunk count, e.g. "
                   "1f1b,interleaved-1f1b:4")
    s.add_argument("--plot", metavar="OUT.png", help="write stacked pipeline Gantts + memory panel as a PNG")
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.add_argument("--set", action="append", metavar="KEY=VALUE", help=SET_HELP)
    s.add_argument("--fidelity", choices=("operator", "coarse"), help=FID_HELP)
    s.add_argument("--interval-level", default="0.8", metavar="LEVEL",
                   help="level of the stated iteration-time intervals, in (0, 1) (default 0.8)")
    s.add_argument("--mkdir", action="store_true", help=MKDIR_HELP)
    s.set_defaults(func=_compare_cmd)



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


def _check_total_tasks(runs, fidelity) -> None:
    """Refuse a multi-run command whose runs together would build over ``MAX_TOTAL_TASKS`` tasks."""
    from simulator.simulation.estimate import estimate_run_tasks
    from strategies.limits import MAX_TOTAL_TASKS, check_tasks
    total = 0
    for kind, spec, name, vpp in runs:  # stops at the first run that crosses the limit
        total += estimate_run_tasks(kind, spec, schedule=name, vpp=vpp, fidelity=fidelity)
        check_tasks(total, f"these {len(runs)} runs together", MAX_TOTAL_TASKS)


def _compare_cmd(args) -> int:
    from simulator.reports.intervals import check_level, sim_interval
    level = check_level(args.interval_level)
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
        kind, spec = load_input(args.files[0], args.set)
        pipeline_flags(args, kind, args.files[0])
        outs = check_command_outputs(args, input_files(args.files[0], kind, spec), plot=args.plot)
        todo = [(item, *_schedule_item(item, spec, kind)) for item in items]
        _check_total_tasks([(kind, spec, name, vpp) for _item, name, vpp in todo], args.fidelity)
        from simulator.outputs.progress import progress
        for item, name, vpp in progress(todo, desc="compare", unit="schedule"):
            label = item if ":" in item else (f"{name} v={vpp}" if vpp > 1 and name not in ("zb-v", "dualpipe-v", "dualpipe") else name)
            runs.append((label, kind, simulate_one(kind, spec, schedule=name, fidelity=args.fidelity, vpp=vpp)))
    else:
        loaded = [(f, *load_input(f, args.set)) for f in args.files]
        if all(k == "pipeline" for _f, k, _sp in loaded):
            pipeline_flags(args, "pipeline", " and ".join(args.files))
        outs = check_command_outputs(args, [x for f, k, sp in loaded for x in input_files(f, k, sp)], plot=args.plot)
        _check_total_tasks([(k, sp, None, None) for _f, k, sp in loaded], args.fidelity)
        from simulator.outputs.progress import progress
        for f, kind, spec in progress(loaded, desc="compare", unit="file"):
            runs.append((Path(f).name, kind, simulate_one(kind, spec, fidelity=args.fidelity)))
    from simulator.reports.memory_timeline import peak_per_rank
    base = runs[0][2].report.makespan_s
    work = [_work_key(kind, sim) for _label, kind, sim in runs]
    same_work = len(set(work)) == 1  # a speedup only between runs of the same work on as many GPUs
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
        iv = sim_interval(sim, level) if kind == "strategy" else None  # a pipeline's durations are given
        rows.append({"label": label, "schedule": sim.schedule.name, "iteration_time_s": r.makespan_s,
                     "iteration_time_interval_s": list(iv.time(r.makespan_s)) if iv else None,
                     "interval_level": level,
                     "speedup": (base / r.makespan_s if r.makespan_s > 0 else float("nan")) if same_work else None,
                     "relative_time": r.makespan_s / base if base > 0 else float("nan"),
                     "gpus_and_batch": _work_label(work[len(rows)]),
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
        print_json(rows)
    else:
        unit = "s" if base >= 10 else "ms"
        k = 1.0 if unit == "s" else 1e3
        ratio = "speedup" if same_work else "time x"
        print(f"{'run':<22} {'iter ' + unit:>10} {f'{100 * level:g} % interval':>17} {ratio:>8} {'bubble':>7} "
              f"{'exp.comm ' + unit:>12} {'peak GiB/stage (max)':>22}  fits")
        for row in rows:
            ivs = row["iteration_time_interval_s"]
            ivs = f"{ivs[0] * k:.3f}–{ivs[1] * k:.3f}" if ivs else "-"
            pk = row["peak_memory_gb"]
            fits = "" if row["fits"] is None else ("yes" if row["fits"] else "NO")
            x = row["speedup"] if same_work else row["relative_time"]
            print(f"{row['label']:<22} {row['iteration_time_s'] * k:>10.3f} {ivs:>17} {x:>8.3f} "
                  f"{row['bubble_fraction']:>7.3f} {row['exposed_comm_s'] * k:>12.3f} "
                  f"{(' '.join(f'{x:.1f}' for x in pk) if len(pk) <= 4 else f'{max(pk):.1f}') if pk else '-':>22}  {fits}")
        if not same_work:
            print("note: the runs differ in GPUs or batch (" + "; ".join(f"{r['label']}: {r['gpus_and_batch']}"
                                                                   for r in rows)
                  + "), so 'time x' is each iteration time over the first run's, not a speedup; compare "
                    "tokens/s per GPU (execsim simulate) instead")
        if args.plot:
            print(f"plot written to {args.plot}")
    return 0


def _work_key(kind: str, sim) -> tuple:
    """What one iteration does on how many GPUs: (GPUs, global batch, sequence length) for a strategy,
    (pipeline ranks, microbatches) for a pipeline description. Equal keys make a speedup meaningful."""
    if kind == "strategy":
        tr = sim.plan.strategy.training
        return ("strategy", sim.plan.num_gpus, tr.global_batch, tr.seq_len)
    return ("pipeline", sim.schedule.pp, sim.schedule.microbatches)


def _work_label(key: tuple) -> str:
    if key[0] == "strategy":
        return f"{key[1]} GPUs, batch {key[2]} x {key[3]} tokens"
    return f"{key[1]} pipeline ranks, {key[2]} microbatches"
