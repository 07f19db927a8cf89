"""``execsim goodput``: a whole training run with failures, checkpoints and restarts."""
from __future__ import annotations

from simulator.cli.common import (
    add_command,
    check_command_outputs,
    input_file,
    input_files,
    load_strategy_arg,
    print_json,
)


def add_parser(sub) -> None:
    s = add_command(sub, "goodput", "simulate a whole training run: failures, checkpoints, restarts, goodput (SimPy)",
             ["execsim goodput llama3-405b-16k-h100-goodput",
              "execsim goodput llama3-405b-16k-h100-goodput --seeds 50 --plot run.png",
              "execsim goodput llama3-405b-16k-h100-goodput --interval daly --no-sweep --json",
              ("execsim goodput llama3-405b-16k-h100-goodput --set goodput.spare_nodes=0 "
              "--set goodput.elastic=true")])
    s.add_argument("file", type=input_file, help="strategy file; its goodput: section sets failure rates, recovery and checkpoints")
    g = s.add_mutually_exclusive_group()
    g.add_argument("--days", type=float, help="wall-clock horizon in days (overrides goodput.days)")
    g.add_argument("--train-tokens", type=float, help="token budget (overrides goodput.train_tokens)")
    s.add_argument("--seeds", type=_count, help="independent runs (default goodput.seeds, 20; at most 10,000)")
    s.add_argument("--interval", metavar="young|daly|SECONDS|S1,S2,..",
                   help="checkpoint interval policy (overrides goodput.checkpoint.interval_s)")
    s.add_argument("--no-sweep", action="store_true", help="skip the search for the best interval")
    s.add_argument("--json", action="store_true", help="machine-readable output (keys in docs/goodput.md)")
    s.add_argument("--plot", metavar="OUT.png", help="tokens vs wall time with failures and checkpoints, and "
                   "goodput vs interval")
    s.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a field, e.g. goodput.restart_s=600")
    s.set_defaults(func=_goodput_cmd)



def _count(text: str) -> int:
    """A whole number, also written as ``1e3`` (the limit is checked with the run's other limits)."""
    import argparse
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seeds") from None
    if not abs(v) < float("inf") or v != int(v):
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of seeds")
    return int(v)


def _goodput_cmd(args) -> int:
    """A whole run with failures, checkpoints and restarts (simulator/goodput/)."""
    from simulator.goodput.replay import simulate_run
    from simulator.goodput.report import closed_form_curve, format_goodput, goodput_report
    from simulator.goodput.setup import setup_from_strategy
    from strategies.goodput_file import check_seeds
    if args.seeds is not None:
        check_seeds(args.seeds, "--seeds")
    kind, spec = load_strategy_arg(args, "goodput")
    outs = check_command_outputs(args, input_files(args.file, kind, spec), plot=args.plot)
    setup = setup_from_strategy(spec, days=args.days, train_tokens=args.train_tokens, interval=args.interval)
    rep = goodput_report(setup, args.seeds, sweep=not args.no_sweep)
    if outs.get("--plot"):
        from dataclasses import replace as _replace

        from simulator.goodput.plot import plot_run
        from simulator.outputs.files import write_output
        run = simulate_run(_replace(setup.model, interval_s=rep["interval_s"]), setup.spec.seed,
                           record_checkpoints=True)
        write_output(outs["--plot"], lambda tmp: plot_run(run, rep, tmp, closed_form=closed_form_curve(setup)),
                     "--plot")
    if args.json:
        print_json(rep)
    else:
        length = f"{setup.spec.days:g}-day" if setup.spec.days else f"{setup.spec.train_tokens:.4g}-token"
        print(format_goodput(rep, f"{args.file}: a {length} run with failures, checkpoints and restarts"))
        if args.plot:
            print(f"plot written to {args.plot}")
    return 0
