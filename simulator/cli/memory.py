"""``execsim memory``: per-stage memory breakdown, OOM verdict and memory plot."""
from __future__ import annotations

from simulator.cli.common import (
    EXAMPLE_NAME,
    FID_HELP,
    MKDIR_HELP,
    SET_HELP,
    add_command,
    check_command_outputs,
    input_file,
    input_files,
    load_strategy_arg,
    print_json,
    simulate_one,
)


def add_parser(sub) -> None:
    s = add_command(sub, "memory", "per-stage memory breakdown and OOM verdict of a strategy file",
             [f"execsim memory {EXAMPLE_NAME} --layers", f"execsim memory {EXAMPLE_NAME} --plot mem.png",
              f"execsim memory {EXAMPLE_NAME} --check --set training.micro_batch=16 --set training.recompute=none   # exit 1: OOM"])
    s.add_argument("file", type=input_file, help="strategy file")
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.add_argument("--layers", action="store_true", help="also print the per-layer activation table")
    s.add_argument("--plot", metavar="OUT.png", help="write memory over time per rank as a PNG")
    s.add_argument("--check", action="store_true", help="exit with status 1 when it does not fit")
    s.add_argument("--set", action="append", metavar="KEY=VALUE", help=SET_HELP)
    s.add_argument("--fidelity", choices=("operator", "coarse"), help=FID_HELP)
    s.add_argument("--mkdir", action="store_true", help=MKDIR_HELP)
    s.set_defaults(func=_memory_cmd)



def _memory_cmd(args) -> int:
    from simulator.reports.memory import format_memory_report, memory_report
    from taskgraph.memory import layer_activation_table
    kind, spec = load_strategy_arg(args, "memory")
    outs = check_command_outputs(args, input_files(args.file, kind, spec), plot=args.plot)
    sim = simulate_one(kind, spec, fidelity=args.fidelity)
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
        print_json(out)
    else:
        p = sim.plan
        print(f"{args.file}: {p.model.name} on {p.num_gpus} x {p.cluster.gpu.name}, tp={p.sizes.tp} pp={p.sizes.pp} "
              f"dp={p.sizes.dp} zero={p.zero} recompute={p.strategy.training.recompute}, schedule {p.schedule.name}, "
              f"{p.microbatches} microbatches (memory per GPU, GiB)")
        print(format_memory_report(mem, layer_activation_table(sim.plan) if args.layers else None))
        if args.plot:
            print(f"plot written to {args.plot}")
    return 0 if mem.fits or not args.check else 1
