"""``execsim search``: the command-line face of :mod:`simulator.search.strategy_search` (parser, progress
bar, ranked table, CSV / JSON / Pareto plot / best-strategy file). Only the cli room
prints."""
from __future__ import annotations

import math
import os
import sys
from pathlib import Path

from simulator.cli.common import input_file
from strategies.errors import ConfigError


def add_parser(sub) -> None:
    import argparse
    ex = "gpt3-175b-1024-a100"
    s = sub.add_parser(
        "search", help="search strategies (and GPU counts) by time, cost or tokens per dollar",
        description="Search strategies (and GPU counts) by time, cost or tokens per dollar.",
        epilog="examples:\n  " + "\n  ".join([
            f"execsim search {ex} --write-best best.yaml",
            f"execsim search {ex} --method mcmc --budget 100 --seed 1",
            ("execsim search llama3-70b-64-h100 --gpus-range 64:4096 --deadline-days 30 "
            "--train-tokens 1e12 --objective cost"),
            f"execsim search {ex} --axis tp=4,8 --csv all.csv --plot pareto.png"]),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    s.add_argument("file", type=input_file, help="strategy file: fixes the model, cluster type and training settings")
    g = s.add_mutually_exclusive_group()
    g.add_argument("--gpus", type=int, help="world size to search (default: the file's cluster)")
    g.add_argument("--gpus-range", metavar="A:B", help="search world sizes from A to B GPUs")
    s.add_argument("--objective", choices=("time", "cost", "tokens-per-dollar"),
                   help="what to minimize (default: time; cost with --deadline-days)")
    s.add_argument("--deadline-days", type=float, metavar="D", help="only strategies that train within D days")
    s.add_argument("--train-tokens", type=float, metavar="T", help="token budget (default: training.train_tokens)")
    s.add_argument("--method", choices=("exhaustive", "mcmc"), default="exhaustive",
                   help="exhaustive over the valid grid (default) or Metropolis-Hastings (FlexFlow section 6)")
    s.add_argument("--budget", type=int, metavar="K", help="MCMC: simulations to spend (default min(200, grid))")
    s.add_argument("--seed", type=int, default=0, help="MCMC random seed")
    s.add_argument("--start", choices=("file", "random"),
                   help="MCMC: start from the file's strategy (default) or a random candidate")
    s.add_argument("--nonuniform", action="store_true",
                   help="MCMC: also move layers between stages and change single layers' recompute")
    s.add_argument("--axis", action="append", metavar="NAME=V1,V2",
                   help="restrict a search axis, e.g. --axis tp=4,8 --axis schedule=1f1b,zb-h1 (repeatable)")
    s.add_argument("--top", type=int, default=10,
                   help="rows of the ranked table to print; exhaustive search simulates only the candidates that "
                        "a lower bound cannot rule out of these rows (branch and bound)")
    s.add_argument("--no-prune", action="store_true",
                   help="exhaustive: simulate every candidate (no branch and bound; implied by --plot and --backend ray); "
                        "mcmc: no early rejection by the bound")
    s.add_argument("--backend", choices=("local", "ray"), default="local",
                   help="local process pool, or Ray tasks on an existing cluster (pip install 'execsim[ray]')")
    s.add_argument("--jobs", type=int, help="local worker processes (default: the CPUs available)")
    s.add_argument("--ray-address", help="Ray cluster address (default: RAY_ADDRESS or a new local Ray)")
    s.add_argument("--price", type=float, metavar="USD", help="price per GPU-hour (overrides the file and catalog)")
    s.add_argument("--fidelity", choices=("coarse", "operator"), default="coarse",
                   help="simulation fidelity of each candidate (default coarse: one task per stage pass)")
    s.add_argument("--json", action="store_true", help="print the result as JSON")
    s.add_argument("--interval-level", default="0.8", metavar="LEVEL",
                   help="level of the stated intervals of the ranked rows, in (0, 1) (default 0.8)")
    s.add_argument("--csv", metavar="OUT.csv", help="write every simulated candidate as CSV")
    s.add_argument("--plot", metavar="OUT.png", help="write the time-vs-cost Pareto plot")
    s.add_argument("--write-best", metavar="BEST.yaml", help="write the best strategy as a strategy file")
    s.add_argument("--mkdir", action="store_true", help="create an output file's folder if it does not exist")
    s.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a field of FILE first")
    s.set_defaults(func=run)


def _range(text: str) -> tuple[int, int]:
    from strategies.errors import brief
    from strategies.limits import MAX_GPUS
    a, sep, b = text.partition(":")
    a, b = a.strip(), b.strip()
    if not sep or not (a.isascii() and a.isdigit()) or not (b.isascii() and b.isdigit()):
        raise ConfigError(f"--gpus-range {brief(text)} must look like A:B with whole numbers, e.g. 64:1024")
    if len(b) > 12 or int(b) > MAX_GPUS:
        raise ConfigError(f"--gpus-range {brief(text)}: B = {brief(b)} GPUs is over the limit of {MAX_GPUS:,} "
                          f"(docs/strategy-file.md, Limits)")
    return int(a), int(b)


def _check_flags(args) -> None:
    """Flags that do not apply to this search, or whose numbers are out of range, before any work."""
    from simulator.search.backends import default_jobs
    from strategies.errors import brief
    if args.method != "mcmc":
        for flag, value in (("--budget", args.budget), ("--start", args.start)):
            if value is not None:
                raise ConfigError(f"{flag} {value} applies to --method mcmc (exhaustive simulates every candidate); "
                                  f"add --method mcmc or drop {flag}")
    if args.budget is not None and args.budget < 1:
        raise ConfigError(f"--budget {args.budget} must be >= 1 simulation")
    if args.ray_address is not None and args.backend != "ray":
        raise ConfigError(f"--ray-address {brief(args.ray_address)} applies to --backend ray; add --backend ray or "
                          f"drop it")
    if args.top < 1:
        raise ConfigError(f"--top {args.top} must be >= 1 (rows of the ranked table to print)")
    if args.jobs is not None:
        cpus = default_jobs()
        if args.jobs < 1:
            raise ConfigError(f"--jobs {args.jobs} must be >= 1 worker process")
        if args.backend == "local" and args.jobs > cpus:
            raise ConfigError(f"--jobs {args.jobs} is more worker processes than the {cpus} CPU(s) this process may "
                              f"use; give at most {cpus} (more only compete for the same CPUs)")
    for flag, value in (("--train-tokens", args.train_tokens), ("--deadline-days", args.deadline_days),
                        ("--price", args.price)):
        if value is not None and not 0 < value < math.inf:
            raise ConfigError(f"{flag} {value} must be a positive finite number")
    # bounds that keep days, GPU-hours and costs finite, readable figures
    for flag, value, most, what in (("--train-tokens", args.train_tokens, 1e18, "64,000x Llama 3's 15.6T"),
                                    ("--deadline-days", args.deadline_days, 36500, "a century")):
        if value is not None and value > most:
            raise ConfigError(f"{flag} {value:g} is over the limit of {most:g} ({what}); give a realistic value")
    if args.price is not None:
        from topologies.pricing import check_price
        check_price(args.price, "--price")
    if args.gpus is not None and not 1 <= args.gpus <= 2 ** 20:
        raise ConfigError(f"--gpus {args.gpus} must be in 1..1,048,576 (docs/strategy-file.md, Limits)")


class _Progress:
    """tqdm bar with evaluations/s and the best objective so far; silent when stderr is not a TTY."""

    def __init__(self, objective: str, deadline):
        from simulator.search.strategy_search import objective_value
        self.value = objective_value
        self.objective, self.deadline = objective, deadline
        self.best = math.inf
        self.bar = None

    def start(self, total: int) -> None:
        if hasattr(sys.stderr, "isatty") and not sys.stderr.isatty():
            return  # what tqdm's disable=None does, without importing it (~0.05 s of a cold start)
        from tqdm import tqdm
        self.bar = tqdm(total=total, unit="eval", file=sys.stderr, disable=None, dynamic_ncols=True,
                        desc="search", leave=False)

    def __call__(self, rows) -> None:
        if self.bar is None:
            return
        for r in rows:
            v = self.value(r, self.objective, self.deadline)
            if v < self.best:
                self.best = v
                shown = (f"{v:.2f} days" if self.objective == "time" else
                         f"${v:,.0f}" if self.objective == "cost" else f"{-v:,.0f} tokens/$")
                self.bar.set_postfix_str(f"best {shown}", refresh=False)
        self.bar.update(len(rows))

    def close(self):
        if self.bar is not None:
            self.bar.close()


def _prune_top(args) -> int | None:
    """The rows branch and bound keeps exact, or None to simulate every candidate (``--no-prune``;
    the Pareto plot and Ray need every candidate)."""
    if args.method != "exhaustive" or args.no_prune or args.plot or args.backend == "ray":
        return None
    if args.top < 1:
        raise ConfigError(f"--top {args.top} must be >= 1 row")
    return args.top


def run(args) -> int:
    from simulator.cli.common import check_command_outputs, input_files, load_strategy_arg
    from simulator.outputs.files import write_output
    from simulator.reports.intervals import check_level
    from simulator.search.backends import ROW_FIELDS
    from simulator.search.space import SearchSpace, parse_axis
    from simulator.search.strategy_search import format_table, search
    _check_flags(args)
    check_level(args.interval_level)
    axes = {}
    for item in args.axis or []:
        name, vals = parse_axis(item)
        if name in axes:
            raise ConfigError(f"--axis {name} is given twice ({','.join(map(str, axes[name]))} and "
                              f"{','.join(map(str, vals))}): give all its values in one --axis {name}=V1,V2")
        axes[name] = vals
    kind, base = load_strategy_arg(args, "search")
    # every output is checked before the search and written atomically (simulator/outputs/files.py)
    outs = check_command_outputs(args, input_files(args.file, kind, base), csv=args.csv, plot=args.plot,
                          write_best=args.write_best)
    space = SearchSpace(**axes)
    rng = _range(args.gpus_range) if args.gpus_range else None
    bar = _Progress(args.objective or ("cost" if args.deadline_days is not None else "time"), args.deadline_days)
    progress = bar
    try:
        res = search(base, gpus=args.gpus, gpus_range=rng, space=space, objective=args.objective,
                     deadline_days=args.deadline_days, train_tokens=args.train_tokens, method=args.method,
                     budget=args.budget, seed=args.seed, backend=args.backend, jobs=args.jobs, price=args.price,
                     fidelity=args.fidelity, nonuniform=args.nonuniform, progress=progress,
                     ray_address=args.ray_address, start=args.start or "file", top=_prune_top(args),
                     prune=not args.no_prune)
    finally:
        bar.close()
    if outs.get("--csv"):
        write_output(outs["--csv"], lambda tmp: res.table.to_csv(tmp, index=False), "--csv")
    if outs.get("--plot"):
        from simulator.search.plots import plot_pareto
        write_output(outs["--plot"], lambda tmp: plot_pareto(
            res, tmp, title=f"{Path(args.file).name}: {res.method} search"), "--plot")
    if outs.get("--write-best") and res.best_strategy is not None:
        write_output(outs["--write-best"], lambda tmp: write_strategy(
            res.best_strategy, tmp, price=args.price, fidelity=args.fidelity,
            header=f"written by: execsim search {Path(args.file).name} (best by {res.objective}: "
                   f"{res.best.label()} on {res.best.gpus} GPUs)"), "--write-best")
    level = check_level(args.interval_level)
    shown = res.ranked[:args.top] if res.best is not None else []
    ivs = _ranked_intervals(base, shown, res.objective, args.fidelity or "coarse", level)
    if args.json:
        cols = list(ROW_FIELDS) + ["meets", "rank"]
        from simulator.cli.common import print_json  # strict JSON: an infinite figure prints as null
        print_json({"objective": res.objective, "method": res.method, "gpus": res.gpus,
                          "train_tokens": res.train_tokens, "price_per_gpu_hour_usd": res.price,
                          "deadline_days": res.deadline_days, "simulated": res.evaluations,
                          "space": {"kept": res.stats.kept, "invalid": res.stats.invalid,
                                    "pruned_memory": res.stats.pruned_memory, "skipped_by_time_bound": res.skipped},
                          "optimality_gap": res.gap,
                          "best": {**_json_row(res.ranked[0], cols), **ivs[0]} if res.best else None,
                          "message": res.message or None, "interval_level": level,
                          "rows": [{**_json_row(r, cols), **(ivs[i] if i < len(ivs) else {})}
                                   for i, r in enumerate(res.ranked[:args.top])]})
    else:
        price = f"${res.price:.2f}/GPU-hour" if res.price is not None else "no price (cost columns empty)"
        print(f"{args.file}: {res.method} search over {'/'.join(map(str, res.gpus))} GPUs, objective {res.objective}"
              + (f", deadline {res.deadline_days:g} days" if res.deadline_days is not None else "")
              + f"; {res.train_tokens:.3g} tokens at {price}")
        decided = res.evaluations + res.skipped
        print(f"space: {res.stats.kept} candidates after closed-form checks ({res.stats.invalid} invalid) and the "
              f"static memory bound ({res.stats.pruned_memory} pruned); simulated {res.evaluations}"
              + (f", skipped {res.skipped} whose time bound cannot reach the top {args.top}" if res.skipped else "")
              + f" in {res.wall_s:.1f} s ({decided / max(res.wall_s, 1e-9):.0f}/s)"
              + (f"; optimality gap {100 * res.gap:.1f}%" if res.gap else ""))
        if res.best is None:
            print(f"no answer: {res.message}")
            if res.closest is not None and len(res.closest):
                from simulator.search.strategy_search import SearchResult
                print("closest candidates:")
                sub = SearchResult(res.closest.to_dict("records"), None, None, res.objective, res.method, res.train_tokens, res.price,
                                   res.deadline_days, res.gpus, res.stats, 0, 0.0)
                print(format_table(sub, top=len(res.closest)))
        else:
            print(format_table(res, args.top))
            for line in _overlap_lines(shown, ivs, res.objective, level):
                print(line)
            b = res.ranked[0]
            print(f"best: {res.best.label()} on {res.best.gpus} GPUs: iteration {b['iteration_time_s']:.3f} s, "
                  f"{b['tokens_per_s']:,.0f} tokens/s, MFU {100 * b['mfu']:.1f}%, peak {b['peak_memory_gb']:.1f} GiB, "
                  f"{_days(b['days_to_train'])} days, {b['gpu_hours']:,.0f} GPU-hours"
                  + (f", ${b['cost_usd']:,.0f}" if not math.isnan(b['cost_usd']) else ""))
        for what, path in (("table", args.csv), ("Pareto plot", args.plot), ("best strategy", args.write_best)):
            if path and not (what == "best strategy" and res.best is None):
                print(f"{what} written to {path}")
    return 0 if res.best is not None else 1


def _ranked_intervals(base, rows, objective: str, fidelity: str, level: float) -> list[dict]:
    """The stated intervals of the ranked rows (simulator/reports/intervals.py)."""
    if not len(rows):
        return []
    from simulator.reports.envelope import run_features
    from simulator.reports.interval_fields import ranked_intervals
    from taskgraph.plan import resolve
    records = rows.to_dict("records") if hasattr(rows, "to_dict") else list(rows)
    return ranked_intervals(records, run_features(resolve(base)), objective, fidelity, level, base.options.stack)


def _overlap_lines(rows, ivs: list[dict], objective: str, level: float) -> list[str]:
    """Each shown rank's stated interval, and which ranks above it it overlaps."""
    from simulator.reports.interval_fields import OBJECTIVE_COLUMNS
    col = OBJECTIVE_COLUMNS[objective][0]
    records = rows.to_dict("records") if hasattr(rows, "to_dict") else list(rows)
    out = [f"{100 * level:g} % intervals ({col}; docs/validation.md, \"Prediction intervals\"):"]
    for r, iv in zip(records, ivs):
        if iv["objective_interval"] is None:
            continue
        lo, hi = iv["objective_interval"]
        t0, t1 = iv["iteration_time_interval_s"]
        over = (f"overlaps rank {', '.join(map(str, iv['overlaps_ranks']))}: the order is within the stated error"
                if iv["overlaps_ranks"] else "the best" if len(out) == 1 else "clear of the ranks above")
        out.append(f"{int(r['rank']):>3} iteration {t0:.3f}–{t1:.3f} s, {col} {lo:,.4g}–{hi:,.4g}: {over}")
    return out if len(out) > 1 else []


def _days(d: float) -> str:
    return f"{d:,.1f}" if d >= 10 else f"{d:.3g}"


def _json_row(row, cols) -> dict:
    out = {}
    for k in cols:
        v = row[k]
        if hasattr(v, "item"):
            v = v.item()
        if isinstance(v, float) and math.isnan(v):
            v = None
        out[k] = v
    return out


def write_strategy(strategy, path: str, *, price: float | None = None, fidelity: str = "coarse",
                   header: str = "") -> None:
    """Write ``strategy`` (a parsed Strategy whose fields the search set) as a strategy file that
    ``execsim simulate`` reads back to the same strategy; relative model/cluster/profile paths are
    rewritten for ``path``'s folder (absolute when outside it)."""
    from dataclasses import asdict

    import yaml
    out_dir = Path(path).resolve().parent
    base_dir = Path(strategy.base_dir).resolve()

    def rel(p):
        if isinstance(p, str) and (base_dir / p).exists() and not os.path.isabs(p):
            r = os.path.relpath(base_dir / p, out_dir)
            return str((base_dir / p).resolve()) if r.startswith("..") else r
        return p

    par = {k: v for k, v in asdict(strategy.parallel).items()}
    par["layers_per_stage"] = list(par["layers_per_stage"]) if par["layers_per_stage"] else None
    if par["layers_per_stage"] is None:
        del par["layers_per_stage"]
    tr = dict(asdict(strategy.training))
    tr["recompute_layers"] = list(tr["recompute_layers"]) if tr["recompute_layers"] else None
    for k in ("recompute_layers", "train_tokens"):
        if tr[k] is None:
            del tr[k]
    if "recompute_layers" in tr:  # it sets every layer; a file may not give both
        del tr["recompute"]
    raw_opts = dict(strategy.raw.get("options") or {})
    if price is not None:
        raw_opts["price_per_gpu_hour_usd"] = float(price)
    if raw_opts.get("profile"):
        raw_opts["profile"] = rel(raw_opts["profile"])
    raw_opts["fidelity"] = fidelity  # the fidelity the search ranked with: simulate reproduces its numbers
    data = {"model": rel(strategy.model), "cluster": strategy.cluster, "parallel": par, "schedule": strategy.schedule,
            "training": tr, "options": raw_opts}
    text = yaml.safe_dump(data, sort_keys=False, default_flow_style=None)
    with open(path, "w", encoding="utf-8") as f:
        f.write((f"# {header}\n" if header else "") + text)
