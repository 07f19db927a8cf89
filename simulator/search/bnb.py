"""Best-first branch and bound over the candidate list: the exact top rows of an exhaustive search
while simulating few candidates (docs/search.md, "Branch and bound").

Land & Doig 1960 / Lawler & Wood 1966 ("Branch-and-bound methods: a survey", Operations Research 14)
with lazily computed bounds: every candidate gets the closed-form compute bound
(:func:`simulator.search.bound.compute_bound`, microseconds); candidates are visited in increasing
order of it; a visited candidate is resolved and costed and gets the tighter records bound
(:func:`simulator.search.bound.records_bound`); when it comes up for simulation it gets the path
bound (:func:`simulator.search.bound.path_bound`, tighter still) and goes back into the queue when
that is larger; candidates are simulated in increasing order of their best bound, as long as that bound is not worse than the ``top``-th best objective simulated so
far. A candidate whose bound is worse than the ``top``-th best cannot be among the ``top`` best (its
simulated objective is at least its bound), so it is skipped; once the smallest remaining bound is
worse, the search is done and its ``top`` rows are those of an exhaustive search
(tests/test_search_bound.py). Bounds order the work too: the best candidates are simulated first,
so the ``top``-th best falls fast and most candidates are ruled out before they are costed.

Objectives are monotone in the iteration time for a fixed candidate (days, cost and tokens per
dollar follow from tokens per second: ``topologies.pricing.training_cost``), so a bound on the time
is a bound on the objective. A candidate that cannot meet the deadline by its bound is not
simulated once ``top`` candidates qualify. ``budget`` stops after that many simulations; the
optimality gap is then the best objective found against the smallest bound of what was not
simulated (0 when the search ran to the end).
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Callable, Sequence

from simulator.search.space import Candidate
from strategies.errors import ExecsimError


@dataclass
class BoundStats:
    """What the branch and bound did: ``simulated`` candidates, ``costed`` (records bound computed),
    ``pathed`` (path bound computed), ``skipped`` (ruled out by a bound, never simulated), ``invalid`` (rejected when resolved), and the
    optimality ``gap`` (best found / smallest bound not simulated - 1; 0.0 = proven optimal, None
    = nothing qualifies)."""

    simulated: int = 0
    costed: int = 0
    pathed: int = 0
    skipped: int = 0
    invalid: int = 0
    gap: float | None = 0.0
    best_bound: float = math.inf


def objective_bound(job, c: Candidate, time_s: float, cost: Callable[[dict], float]) -> float:
    """``cost`` (row -> objective) of a row whose iteration takes ``time_s``: a lower bound on
    ``c``'s objective when ``time_s`` bounds its iteration time (monotone; ``inf`` when it misses the
    deadline)."""
    from topologies.pricing import training_cost
    if not time_s > 0:
        return -math.inf
    tokens = job.ctx.base.training.global_batch * job.ctx.base.training.seq_len
    row = dict(status="ok", **training_cost(tokens / time_s, c.gpus, job.train_tokens, job.price))
    return cost(row)


def compute_bounds(job, cands: Sequence[Candidate]) -> list[float]:
    """:func:`simulator.search.bound.compute_bound` of every candidate (0.0 off coarse fidelity)."""
    from simulator.search.bound import compute_bound
    from simulator.search.space import cluster_for
    from taskgraph.plan import resolve_cluster
    if job.fidelity != "coarse":
        return [0.0] * len(cands)
    clusters: dict = {}
    out = []
    for c in cands:
        cl = clusters.get(c.gpus)
        if cl is None:
            cl = clusters[c.gpus] = resolve_cluster(cluster_for(job.ctx, c.gpus), job.ctx.base.base_dir)
        try:
            out.append(compute_bound(job.ctx, c, cl))
        except ExecsimError:  # the operators reject the candidate: resolve will say why
            out.append(0.0)
    return out


def branch_and_bound(job, cands: Sequence[Candidate], *, top: int, cost: Callable[[dict], float],
                     budget: int | None = None, progress: Callable[[list[dict]], None] | None = None
                     ) -> tuple[list[dict], BoundStats]:
    """Rows of the simulated (and rejected) candidates, in simulation order, and what was skipped;
    the ``top`` best rows are those an exhaustive search ranks first (module doc). ``cost``: row ->
    objective, lower is better, ``inf`` = does not qualify
    (``simulator.search.strategy_search.objective_value``)."""
    from simulator.search.backends import candidate_strategy, evaluate_row, invalid_row
    from simulator.search.bound import path_bound, records_bound
    from simulator.search.evaluate import prepare
    top = max(int(top), 1)
    stats = BoundStats()
    lb_a = [objective_bound(job, c, t, cost) for c, t in zip(cands, compute_bounds(job, cands))]
    order = sorted(range(len(cands)), key=lambda i: (lb_a[i], cands[i].sort_key()))
    best: list[float] = []  # max-heap (negated) of the ``top`` best qualifying objectives
    rows: list[dict] = []
    ready: list = []  # (records bound, sort key, index, prepared)
    done = set()

    def kth() -> float:
        return -best[0] if len(best) >= top else math.inf

    def simulate(i: int, prep) -> None:
        row = evaluate_row(job, cands[i], prep)
        rows.append(row)
        stats.simulated += 1
        v = cost(row)
        if math.isfinite(v):
            if len(best) < top:
                heapq.heappush(best, -v)
            elif v < -best[0]:
                heapq.heapreplace(best, -v)
        if progress:
            progress([row])

    def out_of_budget() -> bool:
        return budget is not None and stats.simulated >= budget

    def run_ready(limit: float) -> None:
        """Simulate costed candidates whose bound is <= limit and not worse than the k-th best; a
        candidate's path bound is computed when it first comes up, and it goes back into the queue
        when that bound is larger (best-first over the tightest bound known)."""
        while ready and ready[0][0] <= limit and ready[0][0] <= kth() and not out_of_budget():
            b, key, i, prep, pathed = heapq.heappop(ready)
            if not pathed:
                plan, work, _ = prep
                stats.pathed += 1
                lb_c = objective_bound(job, cands[i], path_bound(plan.schedule, work,
                                                                 plan.strategy.options.overlap_handoff), cost)
                if lb_c > b:
                    heapq.heappush(ready, (lb_c, key, i, prep, True))
                    continue
            done.add(i)
            simulate(i, prep)

    for pos, i in enumerate(order):
        run_ready(lb_a[i])
        if lb_a[i] > kth() or out_of_budget():
            break
        c = cands[i]
        try:
            prep = prepare(candidate_strategy(job.ctx, c), job.fidelity)
        except ExecsimError as exc:
            rows.append(invalid_row(c, str(exc)))
            stats.invalid += 1
            done.add(i)
            continue
        stats.costed += 1
        plan, work, _ = prep
        lb_b = objective_bound(job, c, records_bound(plan.schedule, work), cost) \
            if job.fidelity == "coarse" else -math.inf
        heapq.heappush(ready, (max(lb_a[i], lb_b), c.sort_key(), i, prep, job.fidelity != "coarse"))
    run_ready(math.inf)
    # what was not simulated: the costed ones left in ``ready`` and every candidate never visited
    costed = {i: b for b, _, i, _, _ in ready}
    stats.best_bound = min((costed.get(i, lb_a[i]) for i in order if i not in done), default=math.inf)
    stats.skipped = len(cands) - len(done)
    found = min((cost(r) for r in rows), default=math.inf)
    if not math.isfinite(found):
        stats.gap = None
    elif stats.best_bound >= found:
        stats.gap = 0.0
    else:  # relative to the bound's magnitude (tokens per dollar is minimized as a negative number)
        stats.gap = (found - stats.best_bound) / abs(stats.best_bound) if math.isfinite(stats.best_bound) and \
            stats.best_bound != 0 else math.inf
    return rows, stats


__all__ = ["branch_and_bound", "BoundStats", "objective_bound", "compute_bounds"]
