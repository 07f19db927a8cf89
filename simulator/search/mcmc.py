"""Metropolis-Hastings search over strategies (FlexFlow, Jia et al. 2019, Section 6).

The chain walks the candidate space; each step proposes a neighbour of the current strategy --
one axis changed to another valid value (tp, pp, cp, ep, the (vpp, schedule) pair, sp, ZeRO,
recompute, micro-batch, GPU count; dp follows from the world size) or, when ``nonuniform``, one
layer moved between adjacent pipeline stages or one layer's recompute policy changed -- simulates
it and accepts it with the Metropolis criterion on the objective ``cost`` (FlexFlow eq. 3 uses
``exp(beta * (cost(S) - cost(S*)))``; execsim takes the difference relative to the current cost
so ``beta`` does not depend on the unit; the default 100 accepts a 1% worse strategy with
probability 1/e and a 5% worse one with 0.7%, measured best of 30/100/200 on the test grid)::

    accept  if  cost(new) <= cost(cur)  or  u < exp(-beta * (cost(new) - cost(cur)) / cost(cur))

A proposal draws a move uniformly, then a target uniformly among the grid candidates that differ
from the current one in that axis (and the axes that must follow it: dp, sp with tp, the
(vpp, schedule) pair with pp). These sets have equal sizes in both directions except where a
dependent axis differs, so the proposal is nearly symmetric and the plain Metropolis rule is used
(FlexFlow's random re-configuration of one operator is the same kind of move). Infeasible candidates (invalid, out of memory, past the deadline) cost
infinity and are never accepted once a feasible state is held; a candidate the static memory bound
rules out is not simulated and does not count against the budget. As in FlexFlow, the search
restarts from the best strategy found when ``patience`` simulations bring no improvement.

``budget`` counts distinct simulations (a revisited candidate reuses its row), so the same seed
gives the same chain, the same rows and the same answer (``random.Random(seed)``).
"""
from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import replace

from simulator.search.space import RECOMPUTE, Candidate, Context, exceeds_memory, valid_variant
from strategies.errors import ConfigError

#: Axes a proposal may change; ``pipe`` is the (vpp, schedule) pair (a schedule fixes the chunks).
AXES = ("gpus", "tp", "pp", "cp", "ep", "pipe", "sp", "zero", "recompute", "micro_batch")


def _val(c: Candidate, axis: str):
    return (c.vpp, c.schedule) if axis == "pipe" else getattr(c, axis)


#: Axes that may change along with the proposed one: sp follows tp (it is off at tp 1), the
#: (vpp, schedule) pair follows pp (pp 1 has one chunk and 1f1b only); dp always follows.
DEPENDENT = {"tp": ("sp",), "pp": ("pipe",)}


def _key_without(c: Candidate, axis: str) -> tuple:
    skip = (axis,) + DEPENDENT.get(axis, ())
    return tuple(_val(c, a) for a in AXES if a not in skip)


def _uniform(c: Candidate) -> Candidate:
    return replace(c, layers_per_stage=None, recompute_layers=None)


class Neighbours:
    """For each axis, the grid candidates that differ from a candidate in that axis only."""

    def __init__(self, cands: Sequence[Candidate]):
        self.by_axis = {a: {} for a in AXES}
        for c in cands:
            for a in AXES:
                self.by_axis[a].setdefault(_key_without(c, a), []).append(c)

    def options(self, c: Candidate, axis: str) -> list[Candidate]:
        u = _uniform(c)
        v = _val(u, axis)
        return [x for x in self.by_axis[axis].get(_key_without(u, axis), ()) if _val(x, axis) != v]


def propose(rng: random.Random, c: Candidate, nb: Neighbours, ctx: Context, nonuniform: bool) -> Candidate | None:
    """One symmetric proposal from ``c`` (None when the drawn move has no valid target)."""
    moves = list(AXES) + (["layers", "recompute_layer"] if nonuniform else [])
    move = moves[rng.randrange(len(moves))]
    if move in AXES:
        opts = nb.options(c, move)
        if not opts:
            return None
        new = opts[rng.randrange(len(opts))]
        # keep the non-uniform refinements where they still apply
        if c.recompute_layers is not None and move != "recompute":
            new = replace(new, recompute_layers=c.recompute_layers)
        if c.layers_per_stage is not None and (new.pp, new.vpp) == (c.pp, c.vpp) and new.schedule == c.schedule:
            new = replace(new, layers_per_stage=c.layers_per_stage)
        return new if valid_variant(ctx, new) else None
    L = ctx.model.layers
    if move == "layers":
        S = c.pp * c.vpp
        if S < 2:
            return None
        lps = list(c.layers_per_stage or (L // S,) * S)
        i = rng.randrange(S)
        j = i + (1 if rng.random() < 0.5 else -1)
        if not 0 <= j < S or lps[i] <= 1:
            return None
        lps[i] -= 1
        lps[j] += 1
        new = replace(c, layers_per_stage=tuple(lps))
        return new if valid_variant(ctx, new) else None
    pols = list(c.recompute_layers or (c.recompute,) * L)
    li = rng.randrange(L)
    others = [p for p in RECOMPUTE if p != pols[li]]
    pols[li] = others[rng.randrange(len(others))]
    if len(set(pols)) == 1:
        return replace(c, recompute=pols[0], recompute_layers=None)
    return replace(c, recompute_layers=tuple(pols))


def metropolis_hastings(cands: Sequence[Candidate], ctx: Context, evaluate: Callable[[Candidate], dict],
                        cost: Callable[[dict], float], *, budget: int, seed: int = 0, beta: float = 100.0,
                        nonuniform: bool = False, start: Candidate | None = None,
                        patience: int | None = None, progress: Callable[[list[dict]], None] | None = None,
                        bound: Callable[[Candidate], float] | None = None) -> list[dict]:
    """Run the chain; returns the rows of the distinct candidates simulated, in simulation order.

    ``cands``: the (pruned, valid) uniform grid the axis moves stay on; ``evaluate``: candidate ->
    row (``simulator.search.backends.evaluate_row``); ``cost``: row -> objective (lower is better, inf =
    infeasible); ``start``: the first state (default: a random grid candidate); ``bound``: candidate
    -> a lower bound on its objective (:func:`simulator.search.bnb.objective_bound`). With a bound
    the chain rejects early (Solonen et al. 2012, "Efficient MCMC for climate model parameter
    estimation", Bayesian Analysis 7(3), Section 3: draw the acceptance number first and reject,
    without evaluating, a proposal whose lower bound already fails the Metropolis test): the same
    decisions as simulating it, and a rejected proposal costs no simulation.
    """
    if budget < 1:
        raise ConfigError(f"--budget {budget} must be >= 1 simulation")
    rng = random.Random(seed)
    nb = Neighbours(cands)
    cap = ctx.cluster.gpu.hbm_capacity
    seen: dict[Candidate, dict] = {}
    rows: list[dict] = []

    def score(c: Candidate) -> float:
        r = seen.get(c)
        if r is None:
            try:
                if exceeds_memory(ctx, c, cap):
                    return math.inf
            except ConfigError:  # the operators reject this combination: invalid, not simulated
                return math.inf
            r = seen[c] = evaluate(c)
            rows.append(r)
            if progress:
                progress([r])
        return cost(r)

    cur = start if start is not None else cands[rng.randrange(len(cands))]
    cur_cost = score(cur)
    best, best_cost = cur, cur_cost
    patience = patience or max(10, budget // 4)
    since = 0
    proposals = 0
    while len(rows) < budget and proposals < 50 * budget:
        proposals += 1
        new = propose(rng, cur, nb, ctx, nonuniform)
        if new is None or new == cur:
            continue
        n_before = len(rows)
        limit = None
        if bound is not None and math.isfinite(cur_cost) and cur_cost > 0:
            # early rejection: u drawn before the evaluation; the Metropolis test below is
            # u < exp(-beta (new - cur) / cur), i.e. new < cur (1 - ln(u) / beta)
            u = rng.random()
            limit = cur_cost * (1.0 - math.log(u) / beta) if u > 0 else math.inf
            if new not in seen and bound(new) > limit:
                continue
        new_cost = score(new)
        if limit is not None:
            accept = new_cost <= limit  # False when new_cost is inf
        elif new_cost <= cur_cost or (math.isfinite(new_cost) and not math.isfinite(cur_cost)):
            accept = True
        elif not math.isfinite(new_cost):
            accept = False
        else:
            accept = rng.random() < math.exp(-beta * (new_cost - cur_cost) / cur_cost)
        if accept:
            cur, cur_cost = new, new_cost
        if cur_cost < best_cost:
            best, best_cost, since = cur, cur_cost, 0
        elif len(rows) > n_before:
            since += 1
            if since >= patience:  # FlexFlow: restart from the best strategy found so far
                cur, cur_cost, since = best, best_cost, 0
    return rows


__all__ = ["AXES", "Neighbours", "metropolis_hastings", "propose"]
