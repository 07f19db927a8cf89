"""Best-first branch and bound over the candidate list: the exact top rows of an exhaustive search
while simulating few candidates (docs/search.md, "Branch and bound").

Land & Doig 1960 / Lawler & Wood 1966 ("Branch-and-bound methods: a survey", Operations Research 14)
with lazily computed bounds, each tighter and dearer than the one before:

1. every candidate gets the closed-form compute bound (:func:`simulator.search.bound.compute_bound`,
   microseconds) and is visited in increasing order of it;
2. a visited candidate is resolved and its operators costed (``taskgraph.costing.build_work`` with
   ``compute_only``: transfers too, but no DP gradient buckets or optimizer steps, whose network
   model is most of a costing) and gets the records bound on them
   (:func:`simulator.search.bound.records_bound`);
3. when it comes up it gets the path bound on the same records
   (:func:`simulator.search.bound.path_bound`, ~0.98 of the simulated time) and goes back into the
   queue when that is larger;
4. when it comes up again it is fully costed and simulated.

Candidates come up in increasing order of their tightest bound known, as long as that bound is not
worse than the ``top``-th best objective simulated so
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from simulator.search.space import Candidate
from strategies.errors import ExecsimError


@dataclass
class BoundStats:
    """What the branch and bound did: ``simulated`` candidates, ``costed`` (fully costed: = simulated
    at coarse fidelity), ``pathed`` (path bound computed), ``skipped`` (ruled out by a bound, never
    simulated), ``invalid`` (rejected when resolved or costed), and the
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
    from taskgraph.costing import build_work
    from taskgraph.plan import resolve
    top = max(int(top), 1)
    coarse = job.fidelity == "coarse"
    stats = BoundStats()
    lb_a = [objective_bound(job, c, t, cost) for c, t in zip(cands, compute_bounds(job, cands))]
    order = sorted(range(len(cands)), key=lambda i: (lb_a[i], cands[i].sort_key()))
    best: list[float] = []  # max-heap (negated) of the ``top`` best qualifying objectives
    rows: list[dict] = []
    # (bound, sort key, index, level, data): level 1 = resolved, bounded by its operators' records
    # (data: plan, those records); 2 = path-bounded on them; 3 = fully costed, or any level off coarse
    # fidelity (data: plan, work, fidelity; simulated when it comes up)
    ready: list = []
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

    def invalid(i: int, exc: ExecsimError) -> None:
        rows.append(invalid_row(cands[i], str(exc)))
        stats.invalid += 1
        done.add(i)

    def bound(i: int, t: float) -> float:
        return objective_bound(job, cands[i], t, cost)

    def run_ready(limit: float) -> None:
        """Take the candidate with the smallest bound while it is <= limit and not worse than the
        k-th best: tighten its bound one level (costing, then the path bound) and put it back when
        that is larger, or simulate it (best-first over the tightest bound known)."""
        while ready and ready[0][0] <= limit and ready[0][0] <= kth() and not out_of_budget():
            b, key, i, level, data = heapq.heappop(ready)
            if level == 1:
                plan, ops = data
                stats.pathed += 1
                b2 = bound(i, path_bound(plan.schedule, ops, plan.strategy.options.overlap_handoff))
                if b2 > b:
                    heapq.heappush(ready, (b2, key, i, 2, data))
                    continue
                level = 2
            if level == 2:
                plan = data[0]
                try:
                    data = (plan, build_work(plan, fidelity=job.fidelity), job.fidelity)
                except ExecsimError as exc:
                    invalid(i, exc)
                    continue
                stats.costed += 1
            done.add(i)
            simulate(i, data)

    for i in order:
        run_ready(lb_a[i])
        if lb_a[i] > kth() or out_of_budget():
            break
        c = cands[i]
        try:
            plan = resolve(candidate_strategy(job.ctx, c))
            if not coarse:
                entry = (lb_a[i], c.sort_key(), i, 3, (plan, build_work(plan, fidelity=job.fidelity), job.fidelity))
                stats.costed += 1
            else:
                ops = build_work(plan, fidelity=job.fidelity, compute_only=True)
                entry = (max(lb_a[i], bound(i, records_bound(plan.schedule, ops))), c.sort_key(), i, 1, (plan, ops))
        except ExecsimError as exc:
            invalid(i, exc)
            continue
        heapq.heappush(ready, entry)
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


__all__ = ["BoundStats", "branch_and_bound", "compute_bounds", "objective_bound"]
