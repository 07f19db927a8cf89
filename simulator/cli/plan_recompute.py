"""``execsim plan-recompute``: per-layer recompute that fits, fastest."""
from __future__ import annotations

from simulator.cli.common import EXAMPLE_NAME, FID_HELP, SET_HELP, add_command, input_file, load_input, print_json
from strategies.errors import ExecsimError


def add_parser(sub) -> None:
    s = add_command(sub, "plan-recompute", "choose per-layer recompute that fits with the least time",
             [f"execsim plan-recompute {EXAMPLE_NAME}", f"execsim plan-recompute {EXAMPLE_NAME} --json --fidelity coarse"])
    s.add_argument("file", type=input_file, help="strategy file")
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.add_argument("--set", action="append", metavar="KEY=VALUE", help=SET_HELP)
    s.add_argument("--fidelity", choices=("operator", "coarse"), help=FID_HELP)
    s.set_defaults(func=_plan_recompute_cmd)



def _plan_recompute_cmd(args) -> int:
    from simulator.search.recompute import format_plan, plan_recompute
    kind, spec = load_input(args.file, args.set)
    if kind != "strategy":
        raise ExecsimError(f"{args.file} is a pipeline description; plan-recompute needs a strategy file")
    rp = plan_recompute(spec, fidelity=args.fidelity, progress=None)
    if rp.note:
        import sys
        print(f"execsim: note: {rp.note}", file=sys.stderr)
    if args.json:
        out = {"uniform": {p: {"iteration_time_s": e.iteration_time_s, "peak_memory_gb": e.peak_bytes / 2**30,
                               "fits": e.fits} for p, e in rp.uniform.items()}, "simulations": rp.steps,
               "note": rp.note or None}
        if rp.best:
            out["plan"] = {"recompute_layers": list(rp.best.policies), "iteration_time_s": rp.best.iteration_time_s,
                           "peak_memory_gb": rp.best.peak_bytes / 2**30, "fits": rp.best.fits}
        print_json(out)
    else:
        print(f"{args.file}: per-layer recompute plan (memory judged by simulation; GiB per GPU)")
        print(format_plan(rp))
        if rp.best:
            print("use it with training.recompute_layers: [" + ", ".join(rp.best.policies) + "]"
                  if len(rp.best.policies) <= 16 else "use it with training.recompute_layers (see --json)")
    return 0 if rp.best else 1
