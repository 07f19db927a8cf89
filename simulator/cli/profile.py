"""``execsim profile``: time every distinct operator of a strategy's graph on this machine with
PyTorch and write the profile CSV ``options.profile`` reads, with measured vs modelled per operator."""
from __future__ import annotations

from simulator.cli.common import (
    MKDIR_HELP,
    SET_HELP,
    add_command,
    input_file,
    input_files,
    load_strategy_arg,
    print_json,
)

_EX_FILE = "llama3-8b-8-h100"


def add_parser(sub) -> None:
    s = add_command(sub, "profile", "time every operator of a strategy's graph with PyTorch on this machine and write "
             "the profile CSV options.profile reads",
             [f"execsim profile {_EX_FILE} -o h100.csv --device cuda --repeats 20",
              "execsim profile tiny-gpt-cpu --device cpu --threads 1 -o cpu.csv",
              f"execsim profile {_EX_FILE} --device cuda --collectives coll.csv   # also an NCCL sweep",
              "execsim simulate tiny-gpt-cpu --set options.profile=cpu.csv --set cluster.nodes=4"])
    s.add_argument("file", type=input_file, help="strategy file")
    s.add_argument("-o", "--output", default="profile.csv", metavar="OUT.csv",
                   help="profile CSV to write (default profile.csv)")
    s.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="where to run (default cuda)")
    s.add_argument("--repeats", type=int, default=10, metavar="N", help="timed calls per pass, median (default 10)")
    s.add_argument("--warmup", type=int, default=3, metavar="N", help="untimed calls first (default 3)")
    s.add_argument("--threads", type=int, metavar="N", help="CPU threads (torch.set_num_threads); default torch's")
    s.add_argument("--collectives", metavar="OUT.csv",
                   help="also sweep the strategy's collectives on this node (torch.distributed: NCCL on cuda, "
                        "gloo on cpu) and write them as a collective profile")
    s.add_argument("--json", action="store_true", help="machine-readable report")
    s.add_argument("--set", action="append", metavar="KEY=VALUE", help=SET_HELP)
    s.add_argument("--mkdir", action="store_true", help=MKDIR_HELP)
    s.set_defaults(func=_profile_cmd)


def _profile_cmd(args) -> int:
    import sys

    from simulator.outputs.files import check_outputs, write_output
    from simulator.outputs.progress import progress_bar
    from simulator.profiling.measure import profile_plan
    from simulator.profiling.profile_csv import profile_text, report_lines, rows_json
    from taskgraph.plan import resolve
    kind, spec = load_strategy_arg(args, "profile")
    outs = check_outputs({"--output": args.output, "--collectives": args.collectives},
                         inputs=input_files(args.file, kind, spec), mkdir=args.mkdir)
    plan = resolve(spec)
    dtype = plan.strategy.training.precision
    from simulator.profiling.inventory import profile_items
    bar = progress_bar(len(profile_items(plan)), desc="profile", unit="op")   # one step per distinct operator
    with bar:
        gpu, rows = profile_plan(plan, args.device, args.repeats, args.warmup, args.threads,
                                 progress=lambda done, total: bar.update(1))
    write_output(outs["--output"], profile_text(rows, gpu, dtype), "--output")
    coll = None
    if args.collectives:
        from simulator.profiling.collectives import collective_text, sweep_plan
        coll = sweep_plan(plan, args.device, args.repeats, args.warmup)
        write_output(outs["--collectives"], collective_text(coll, gpu), "--collectives")
    if args.json:
        print_json({"gpu": gpu, "dtype": dtype, "device": args.device, "output": args.output, "rows": rows_json(rows),
                     "collectives": [c._asdict() for c in coll] if coll else []})
        return 0
    title = (f"{args.file}: {plan.model.name}, {len({(r.op, r.shape) for r in rows})} distinct operators measured on "
             f"{gpu} ({args.device}, median of {args.repeats}), modelled for {plan.cluster.gpu.name}")
    print("\n".join(report_lines(rows, title)))
    if coll:
        print(f"{'collective':<16} {'ranks':>5} {'bytes':>12} {'measured us':>12} {'modelled us':>12}")
        for c in coll:
            print(f"{c.collective:<16} {c.ranks:>5} {c.bytes:>12} {c.time_s * 1e6:12.1f} {c.modelled_s * 1e6:12.1f}")
        print(f"collective profile written to {args.collectives}")
    print(f"profile written to {args.output}" + (f"; simulate with options.profile_gpu: {gpu} on another GPU's "
                                                  f"cluster" if gpu.lower() != plan.cluster.gpu.name.lower() else ""))
    sys.stdout.flush()
    return 0
