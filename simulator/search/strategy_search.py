"""Which strategy, how many GPUs, what will it cost: the search behind ``execsim search``.

:func:`search` takes a strategy file (it fixes the model, the cluster type and the training
settings), lists the candidate space (:mod:`simulator.search.space`: valid in closed form, pruned by the
static memory bound), simulates candidates -- all of them (``exhaustive``) or a Metropolis-Hastings
chain (``mcmc``, :mod:`simulator.search.mcmc`) -- on a backend (:mod:`simulator.search.backends`), and ranks the
rows by the objective:

* ``time``: days to train the token budget (= fewest seconds per token);
* ``cost``: dollars to train it (GPU-hours x price per GPU-hour, :mod:`topologies.pricing`);
* ``tokens-per-dollar``: the most tokens per dollar (the same order as ``cost`` for one budget).

With ``deadline_days`` only candidates that train the budget within the deadline qualify; the
cheapest of them wins unless another objective is named ("how many GPUs do I need to train T
tokens in D days, cheapest?"). When nothing qualifies, :class:`SearchResult` says so
(``message``) and ``closest`` lists the nearest misses.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from simulator.search.backends import ROW_FIELDS, Job, evaluate_row, evaluate_rows
from simulator.search.space import (
    Candidate,
    SearchSpace,
    SpaceStats,
    check_gpus,
    context,
    enumerate_space,
    gpu_counts,
    static_bound,
)
from strategies.errors import ConfigError

OBJECTIVES = ("time", "cost", "tokens-per-dollar")
METHODS = ("exhaustive", "mcmc")
#: Token budget of the days / GPU-hours / cost columns when neither the file nor the command sets one.
DEFAULT_TRAIN_TOKENS = 1e9


@dataclass
class SearchResult:
    """The outcome of :func:`search`.

    ranked: every simulated candidate's row (``simulator.search.backends.ROW_FIELDS`` plus ``meets``
    and ``rank``), best first: candidates that fit and meet the deadline ranked by the objective,
    then out-of-memory and deadline misses, then invalid ones; ``table`` is the same rows as a pandas
    DataFrame, built on first use (the command prints from ``ranked`` and does not import pandas,
    ~0.3 CPU-s of a cold start, unless it writes a CSV or a plot). best: the winning
    :class:`Candidate` or None; best_strategy: its strategy (for ``--write-best``). message: the
    "no strategy meets ..." answer when there is no winner; closest: the nearest misses then.
    """

    ranked: list
    best: Candidate | None
    best_strategy: object
    objective: str
    method: str
    train_tokens: float
    price: float | None
    deadline_days: float | None
    gpus: list[int]
    stats: SpaceStats
    evaluations: int
    wall_s: float
    message: str = ""
    closest: object = None
    skipped: int = 0
    gap: float | None = None
    _table: object = field(default=None, repr=False, compare=False)

    @property
    def table(self):
        """``ranked`` as a pandas DataFrame (built once)."""
        if self._table is None:
            self._table = ranked_table(self.ranked)
        return self._table


def objective_value(row: dict, objective: str, deadline_days: float | None = None) -> float:
    """What the search minimizes for a row; ``inf`` when the row does not qualify (invalid, out of
    memory, or past the deadline)."""
    if row["status"] != "ok":
        return math.inf
    if deadline_days is not None and not row["days_to_train"] <= deadline_days:
        return math.inf
    if objective == "time":
        return row["days_to_train"]
    if objective == "cost":
        return row["cost_usd"]
    return -row["tokens_per_dollar"]



def _no_price_error(ctx, objective) -> ConfigError:
    return ConfigError(f"--objective {objective} needs a price for {ctx.cluster.gpu.name}, which "
                       f"topologies/data/prices.yaml does not list; pass --price USD_PER_GPU_HOUR or set "
                       f"options.price_per_gpu_hour_usd in the strategy file")


def search(base, *, gpus: int | None = None, gpus_range: tuple[int, int] | None = None,
           space: SearchSpace = SearchSpace(), objective: str | None = None, deadline_days: float | None = None,
           train_tokens: float | None = None, method: str = "exhaustive", budget: int | None = None, seed: int = 0,
           backend: str = "local", jobs: int | None = None, price: float | None = None, fidelity: str = "coarse",
           nonuniform: bool = False, beta: float = 100.0, progress: Callable[[list[dict]], None] | None = None,
           ray_address: str | None = None, candidates: list[Candidate] | None = None, chunk: int = 16,
           start: str = "file", top: int | None = None, prune: bool = True) -> SearchResult:
    """Search strategies for ``base`` (a :class:`strategies.strategy_file.Strategy`); see the module
    docstring. ``gpus`` / ``gpus_range`` set the world sizes (default: the file's cluster);
    ``candidates`` replaces the enumerated grid (tests, benchmarks); ``chunk``: candidates per
    backend task; ``start``: where the MCMC chain starts, ``file`` (the file's own strategy when it
    is in the space, as FlexFlow starts from an expert-designed strategy) or ``random`` (a seeded
    random candidate). ``top`` (exhaustive, coarse fidelity): branch and bound
    (:mod:`simulator.search.bnb`) -- only candidates that can still enter the ``top`` best are
    simulated; the first ``top`` rows equal those of simulating every candidate, the others are
    counted in ``skipped``; ``None`` simulates every candidate. ``prune`` (MCMC, coarse): reject
    proposals early by their compute bound (:func:`simulator.search.mcmc.metropolis_hastings`) and
    report the optimality gap against the smallest bound of the candidates not simulated."""
    t0 = time.perf_counter()
    objective = _checked_objective(method, objective, deadline_days, train_tokens, nonuniform)
    ctx = context(base)
    tokens, price = _budget_and_price(ctx, base, objective, deadline_days, train_tokens, price)
    gpus_list = _world_sizes(ctx, gpus, gpus_range)
    job = Job(ctx, price, tokens, fidelity)
    cands, stats = _candidates(ctx, space, gpus_list, candidates)
    if progress is not None and hasattr(progress, "start"):
        progress.start(len(cands) if method == "exhaustive" else (budget or min(200, len(cands))))
    skipped, gap, evaluations = 0, None, None
    if method == "exhaustive" and top is not None:
        from simulator.search.bnb import branch_and_bound
        if backend != "local":
            raise ConfigError("branch and bound runs in this process: use --backend local, or --no-prune to "
                              "simulate every candidate on Ray")
        rows, bstats = branch_and_bound(job, cands, top=top, cost=lambda r: objective_value(r, objective, deadline_days),
                                        budget=budget, progress=progress)
        skipped, gap, evaluations = bstats.skipped, bstats.gap, bstats.simulated
    elif method == "exhaustive":
        rows = evaluate_rows(job, cands, backend=backend, jobs=jobs, progress=progress, ray_address=ray_address,
                             chunk=chunk)
        gap = 0.0
    else:
        rows, gap = _mcmc_rows(job, ctx, base, cands, objective, deadline_days, budget=budget, seed=seed, beta=beta,
                               nonuniform=nonuniform, start=start, progress=progress, fidelity=fidelity, prune=prune)
    ranked = ranked_rows(rows, objective, deadline_days)
    best = best_strategy = None
    message, closest = "", None
    if ranked and bool(ranked[0]["meets"]):
        best = row_candidate(ranked[0])
        from simulator.search.backends import candidate_strategy
        best_strategy = candidate_strategy(ctx, best)
    else:
        message, closest = _no_answer(ranked_table(ranked), objective, deadline_days, tokens, gpus_list)
    return SearchResult(ranked, best, best_strategy, objective, method, tokens, price, deadline_days, gpus_list, stats,
                        evaluations if evaluations is not None else len(rows),
                        time.perf_counter() - t0, message, closest, skipped, gap)


def _checked_objective(method: str, objective: str | None, deadline_days: float | None,
                       train_tokens: float | None, nonuniform: bool) -> str:
    """The objective (``cost`` with a deadline, else ``time``, unless named), with the method and
    the budget's numbers checked."""
    if method not in METHODS:
        raise ConfigError(f"--method {method!r} must be one of {', '.join(METHODS)}")
    if objective is None:
        objective = "cost" if deadline_days is not None else "time"
    if objective not in OBJECTIVES:
        raise ConfigError(f"--objective {objective!r} must be one of {', '.join(OBJECTIVES)}")
    if deadline_days is not None and not (isinstance(deadline_days, (int, float)) and 0 < deadline_days < math.inf):
        raise ConfigError(f"--deadline-days {deadline_days!r} must be a positive finite number of days")
    if train_tokens is not None and not 0 < train_tokens < math.inf:
        raise ConfigError(f"--train-tokens {train_tokens!r} must be a positive finite number of tokens, e.g. 300e9")
    if nonuniform and method != "mcmc":
        raise ConfigError("--nonuniform (layers per stage and per-layer recompute) needs --method mcmc: that space is "
                          "too large to enumerate")
    return objective


def _budget_and_price(ctx, base, objective: str, deadline_days: float | None, train_tokens: float | None,
                      price: float | None) -> tuple[float, float | None]:
    """The token budget and the price per GPU-hour (None when unknown and not needed)."""
    from topologies.pricing import check_price, price_per_gpu_hour
    tokens = train_tokens or base.training.train_tokens
    if deadline_days is not None and tokens is None:
        raise ConfigError("--deadline-days needs a token budget: pass --train-tokens T or set training.train_tokens")
    tokens = float(tokens or DEFAULT_TRAIN_TOKENS)
    if price is not None:
        price = check_price(price, "--price")
    else:
        price = price_per_gpu_hour(ctx.cluster.gpu.name, base.options.price_per_gpu_hour_usd)
    if price is None and objective != "time":
        raise _no_price_error(ctx, objective)
    return tokens, price


def _world_sizes(ctx, gpus: int | None, gpus_range: tuple[int, int] | None) -> list[int]:
    """The GPU counts to search: ``gpus``, the counts in ``gpus_range``, or the file's cluster."""
    if gpus is not None and gpus_range is not None:
        raise ConfigError("give --gpus N or --gpus-range A:B, not both")
    if gpus_range is not None:
        gpus_list = gpu_counts(ctx, *gpus_range)
    else:
        gpus_list = [gpus if gpus is not None else ctx.cluster.num_gpus]
        check_gpus(ctx, gpus_list[0])
    return gpus_list


def _candidates(ctx, space: SearchSpace, gpus_list: list[int],
                candidates: list[Candidate] | None) -> tuple[list[Candidate], SpaceStats]:
    """The candidates (the enumerated grid, bounded before it is built, or the ones given) and the
    grid's counts; an empty space is one error naming the closest misses."""
    if candidates is None:
        from simulator.search.backends import gc_paused
        from simulator.search.space import grid_points
        from strategies.limits import MAX_GRID_POINTS
        points = grid_points(ctx, space, gpus_list)
        if points > MAX_GRID_POINTS:
            raise ConfigError(f"the search grid has {points:,} points over {len(gpus_list)} GPU count(s), over the limit of "
                              f"{MAX_GRID_POINTS:,} (about 0.4 ms each before any simulation; docs/strategy-file.md, "
                              f"Limits): narrow it with --axis (e.g. --axis tp=4,8 --axis micro_batch=1) or fewer GPU "
                              f"counts")
        with gc_paused():
            cands, stats = enumerate_space(ctx, space, gpus_list)
    else:
        cands = sorted(candidates, key=Candidate.sort_key)
        stats = SpaceStats(kept=len(cands))
    if not cands:
        why = (f"{stats.invalid} grid points are invalid for {ctx.model.name} and {stats.pruned_memory} exceed the "
               f"{ctx.cluster.gpu.hbm_capacity / 2**30:.0f} GiB of one {ctx.cluster.gpu.name} by the static memory bound")
        closest = sorted(((static_bound(ctx, c) / 2**30, c) for c in stats.pruned),
                         key=lambda x: (x[0], x[1].sort_key()))[:5]
        hint = ("; closest by memory bound: " + "; ".join(f"{c.label()} on {c.gpus} GPUs needs >= {b:.1f} GiB"
                                                           for b, c in closest)) if closest else ""
        raise ConfigError(f"empty search space on {', '.join(map(str, gpus_list))} GPUs: {why}{hint}. Widen the axes "
                          f"(--axis), add GPUs (--gpus / --gpus-range), or recompute activations")
    return cands, stats


def _mcmc_rows(job, ctx, base, cands: list[Candidate], objective: str, deadline_days: float | None, *,
               budget: int | None, seed: int, beta: float, nonuniform: bool, start: str, progress,
               fidelity: str, prune: bool) -> tuple[list[dict], float | None]:
    """The rows of a Metropolis-Hastings chain over ``cands`` and its optimality gap (None when the
    chain was not pruned by bounds)."""
    from simulator.search.mcmc import metropolis_hastings
    gap = None
    if budget is None:
        budget = min(200, len(cands))
    if budget > len(cands):
        raise ConfigError(f"--budget {budget} is more than the {len(cands)} candidates of this space (each "
                          f"simulation is a distinct candidate): give at most {len(cands)}, or --method "
                          f"exhaustive to simulate them all")
    if start not in ("file", "random"):
        raise ConfigError(f"MCMC start {start!r} must be 'file' or 'random'")
    first = _file_candidate(ctx, base, cands) if start == "file" else None
    cost = lambda r: objective_value(r, objective, deadline_days)
    bound = None
    if fidelity == "coarse" and prune:
        from simulator.search.bnb import compute_bounds, objective_bound
        lbs = dict(zip(cands, compute_bounds(job, cands)))

        def bound(c):
            t = lbs.get(c)
            return objective_bound(job, c, compute_bounds(job, [c])[0] if t is None else t, cost)
    rows = metropolis_hastings(cands, ctx, lambda c: evaluate_row(job, c), cost, budget=budget, seed=seed,
                               beta=beta, nonuniform=nonuniform, start=first, progress=progress, bound=bound)
    if bound is not None:
        gap = _gap(rows, cands, bound, cost)
    return rows, gap


def _gap(rows: list[dict], cands, bound, cost) -> float | None:
    """(best objective found - smallest bound of the grid candidates not simulated) / |that bound|;
    0.0 when no unsimulated candidate can beat what was found, None when nothing qualifies."""
    from simulator.search.backends import candidate_cells
    from simulator.search.space import CANDIDATE_FIELDS
    found = min((cost(r) for r in rows), default=math.inf)
    if not math.isfinite(found):
        return None
    done = {tuple(r[k] for k in CANDIDATE_FIELDS) for r in rows}
    left = min((bound(c) for c in cands if tuple(candidate_cells(c)[k] for k in CANDIDATE_FIELDS) not in done),
               default=math.inf)
    if left >= found:
        return 0.0
    return (found - left) / abs(left) if math.isfinite(left) and left != 0 else math.inf


def _file_candidate(ctx, base, cands) -> Candidate | None:
    """The strategy file's own strategy as a grid candidate, when it is one (the chain's start)."""
    p, tr = base.parallel, base.training
    for c in cands:
        if (c.tp, c.pp, c.cp, c.ep, c.vpp, c.schedule, c.zero, c.recompute, c.micro_batch) == \
                (p.tp, p.pp, p.cp, p.ep, p.vpp, base.schedule, p.zero, tr.recompute, tr.micro_batch) and \
                c.gpus == ctx.cluster.num_gpus:
            return c
    return None


def rank_rows(rows: list[dict], objective: str, deadline_days: float | None = None):
    """The rows as a DataFrame in ranking order (see :class:`SearchResult`), with ``meets`` (fits
    and meets the deadline) and ``rank`` (1 = best) columns."""
    return ranked_table(ranked_rows(rows, objective, deadline_days))


def ranked_table(ranked: list[dict]):
    """Rows from :func:`ranked_rows` as a DataFrame: ``ROW_FIELDS`` then ``meets`` and ``rank``."""
    import pandas as pd
    if not ranked:
        return pd.DataFrame(columns=list(ROW_FIELDS) + ["meets", "rank"])
    df = pd.DataFrame(ranked, columns=list(ROW_FIELDS))
    df["meets"] = [r["meets"] for r in ranked]
    df["rank"] = [r["rank"] for r in ranked]
    return df


def ranked_rows(rows: list[dict], objective: str, deadline_days: float | None = None) -> list[dict]:
    """The rows in ranking order (see :class:`SearchResult`), each a new dict with ``meets`` (fits
    and meets the deadline) and ``rank`` (1 = best) added."""
    from simulator.search.space import CANDIDATE_FIELDS
    group = {"ok": 0, "oom": 1, "invalid": 3}

    def key(r):
        v = objective_value(r, objective, deadline_days)
        g = 0 if math.isfinite(v) else (2 if r["status"] == "ok" else group[r["status"]])
        secondary = r["days_to_train"] if r["status"] != "invalid" else math.inf
        return (g, v if math.isfinite(v) else secondary, tuple(r[k] for k in CANDIDATE_FIELDS))

    ordered = sorted(rows, key=key)
    return [{**{k: r[k] for k in ROW_FIELDS}, "meets": math.isfinite(objective_value(r, objective, deadline_days)),
             "rank": i} for i, r in enumerate(ordered, 1)]


def row_candidate(row) -> Candidate:
    """The :class:`Candidate` of a table row."""
    lps = row["layers_per_stage"]
    rl = row["recompute_layers"]
    return Candidate(int(row["gpus"]), int(row["tp"]), int(row["pp"]), int(row["dp"]), int(row["cp"]), int(row["ep"]),
                     int(row["vpp"]), str(row["schedule"]), bool(row["sp"]), int(row["zero"]), str(row["recompute"]),
                     int(row["micro_batch"]), tuple(int(x) for x in lps.split("/")) if lps else None,
                     tuple(rl.split(",")) if rl else None)


def _no_answer(table, objective, deadline_days, tokens, gpus_list):
    n = len(table)
    ok = table[table["status"] == "ok"] if n else table
    if deadline_days is not None and len(ok):
        closest = ok.sort_values(["days_to_train", "rank"], kind="stable").head(5)
        fastest = closest.iloc[0]
        msg = (f"no strategy meets the deadline of {deadline_days:g} days for {tokens:.3g} tokens on "
               f"{_gpus_text(gpus_list)}: the fastest that fits takes {fastest['days_to_train']:.1f} days "
               f"({fastest['gpus']} GPUs, ${fastest['cost_usd']:,.0f}); more GPUs (--gpus-range) or a later deadline")
        return msg, closest
    oom = table[table["status"] == "oom"] if n else table
    if len(oom):
        closest = oom.sort_values(["peak_memory_gb", "rank"], kind="stable").head(5)
        return (f"no strategy fits in memory on {_gpus_text(gpus_list)}: the smallest simulated peak is "
                f"{closest.iloc[0]['peak_memory_gb']:.1f} GiB; add GPUs or allow recompute"), closest
    closest = table.head(5)
    first = closest.iloc[0]["error"] if n else "nothing was simulated"
    return f"no valid strategy among {n} simulated candidates on {_gpus_text(gpus_list)}: {first}", closest


def _gpus_text(gpus_list) -> str:
    return f"{gpus_list[0]} GPUs" if len(gpus_list) == 1 else f"{gpus_list[0]}-{gpus_list[-1]} GPUs"


def format_table(result: SearchResult, top: int = 10) -> str:
    """The ranked rows as text (the CLI's table)."""
    lines = [(f"{'#':>3} {'GPUs':>5} {'tp':>3} {'pp':>3} {'dp':>4} {'cp':>2} {'ep':>2} {'vpp':>3} {'schedule':<16} "
             f"{'mb':>2} {'recompute':<9} {'z':>1} {'iter s':>8} {'tok/s':>10} {'MFU':>6} {'mem GiB':>7} "
             f"{'days':>7} {'GPU-h':>10} {'cost $':>12}")]
    for r in result.ranked[:top]:
        rec = "per-layer" if r["recompute_layers"] else r["recompute"]
        sched = r["schedule"] + ("*" if r["layers_per_stage"] else "")
        if r["status"] == "invalid":
            lines.append(f"{r['rank']:>3} {r['gpus']:>5} {r['tp']:>3} {r['pp']:>3} {r['dp']:>4} {r['cp']:>2} "
                         f"{r['ep']:>2} {r['vpp']:>3} {sched:<16} {r['micro_batch']:>2} {rec:<9} {r['zero']:>1} "
                         f"invalid: {r['error'][:60]}")
            continue
        flag = "" if r["meets"] else (" OOM" if r["status"] == "oom" else " late")
        days = f"{r['days_to_train']:>7.1f}" if r["days_to_train"] >= 10 else f"{r['days_to_train']:>7.3g}"
        cost = "-" if math.isnan(r["cost_usd"]) else f"{r['cost_usd']:,.0f}"
        lines.append(f"{r['rank']:>3} {r['gpus']:>5} {r['tp']:>3} {r['pp']:>3} {r['dp']:>4} {r['cp']:>2} {r['ep']:>2} "
                     f"{r['vpp']:>3} {sched:<16} {r['micro_batch']:>2} {rec:<9} {r['zero']:>1} "
                     f"{r['iteration_time_s']:>8.3f} {r['tokens_per_s']:>10,.0f} {100 * r['mfu']:>5.1f}% "
                     f"{r['peak_memory_gb']:>7.1f} {days} {r['gpu_hours']:>10,.0f} {cost:>12}{flag}")
    return "\n".join(lines)


__all__ = [
    "METHODS",
    "OBJECTIVES",
    "SearchResult",
    "format_table",
    "objective_value",
    "rank_rows",
    "ranked_rows",
    "ranked_table",
    "row_candidate",
    "search",
]
