"""``execsim memory``: per-stage memory breakdown, OOM verdict and memory plot."""
from __future__ import annotations

from simulator.cli.common import input_file
from simulator.cli.common import (_EXAMPLE, _FID_HELP, _MKDIR_HELP, _SET_HELP, _check_outputs, _input_files,
                                 _load_strategy, _print_json, _simulate_one, _sub)


def add_parser(sub) -> None:
    s = _sub(sub, "memory", "per-stage memory breakdown and OOM verdict of a strategy file",
             [f"execsim memory {_EXAMPLE} --layers", f"execsim memory {_EXAMPLE} --plot mem.png",
              f"execsim memory {_EXAMPLE} --check --set training.micro_batch=16 --set training.recompute=none   # exit 1: OOM"])
    s.add_argument("file", type=input_file, help="strategy file")
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.add_argument("--layers", action="store_true", help="also print the per-layer activation table")
    s.add_argument("--plot", metavar="OUT.png", help="write memory over time per rank as a PNG")
    s.add_argument("--check", action="store_true", help="exit with status 1 when it does not fit")
    s.add_argument("--set", action="append", metavar="KEY=VALUE", help=_SET_HELP)
    s.add_argument("--fidelity", choices=("operator", "coarse"), help=_FID_HELP)
    s.add_argument("--mkdir", action="store_true", help=_MKDIR_HELP)
    s.set_defaults(func=_memory_cmd)



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
