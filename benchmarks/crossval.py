"""Leave-one-group-out cross-validation of the constants fitted to measured runs (issue 26, item 7).

    python -m benchmarks.validate --cv [--markdown cv.md] [--fidelity auto|coarse]

``topologies/data/fitted.yaml`` declares every fitted constant with the rows it was fitted on, the
objective and a search bounded by its sources (``strategies/fitted.py``). For each source group G
that ``benchmarks/validate.py`` reports (``group_of``), :func:`refit` refits every constant on the
rows outside G with the declared objective and search, and :func:`cross_validate` reports G's error
with those constants beside its in-sample error (the declared constants). A model that generalises
loses little when a group is left out; the issue's target is at most 3 points per group.

The method, as run:

* **Fits in file order, one pass.** Each fit searches its own constants with the others held at
  their values at that point (the declared values to start with): a Gauss-Seidel pass over fits.
  A fit of several constants (``a100-kernels``) runs coordinate descent over them, starting from
  the middle of each grid, at most :data:`MAX_ROUNDS` rounds, until no constant moves.
* **Search.** Each constant's candidates are its declared grid ``{low, high, step}`` or value list.
  A grid of more than :data:`EXHAUSTIVE` points is searched by discrete golden-section search
  (:func:`argmin_unimodal`): each row's predicted time moves monotonically with an efficiency, so
  each row's |error| is V-shaped in it and their mean has one minimum in practice; ties go to the
  lower candidate. Shorter lists are searched exhaustively.
* **Rows.** A fit uses its declared rows outside G. When G holds all of them, it uses its declared
  ``fallback`` rows outside G, or takes another constant times a ratio of two sourced figures
  (``transfer``, applied after the row fits, snapped to the constant's grid). Fits on other data
  (``nccl-host-issue``: nccl-tests microbenchmarks) are not refitted: no training row enters them.
* **Simulation.** Rows run as ``benchmarks/validate.py`` runs them (``--fidelity``; default auto:
  operator unless a row is very large). A row is simulated again only when a constant that applies
  to it (a GPU field of the row's GPU, or a strategy-file option) differs from the declared value;
  every (row, values) pair is simulated once (:class:`Evaluator` caches the error).
"""
from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from strategies.fitted import Constant, Fit

#: Rounds of coordinate descent within a fit of several constants.
MAX_ROUNDS = 3
#: Candidate lists up to this long are searched exhaustively, longer ones by golden section.
EXHAUSTIVE = 8
#: ``error(row_id, values) -> signed % error`` (``values``: constant name -> value).
ErrorFn = Callable[[str, dict], float]


def match(globs: Iterable[str], ids: Iterable[str]) -> list[str]:
    """Row ids (in ``ids`` order) that match any of ``globs`` (fnmatch, exact otherwise)."""
    globs = list(globs)
    return [i for i in ids if any(fnmatch.fnmatchcase(i, g) for g in globs)]


def objective(kind: str, errors: list[float]) -> float:
    """mean_abs_error: mean |e|; mean_signed_error: |mean e| (errors in %)."""
    if kind == "mean_abs_error":
        return sum(abs(e) for e in errors) / len(errors)
    if kind == "mean_signed_error":
        return abs(sum(errors) / len(errors))
    raise ValueError(f"objective {kind!r} cannot be refitted")


def paired_objective(pairs: tuple[str, str], errors: dict[str, float]) -> float:
    """paired_signed_difference: |mean over pairs (e_a - e_b)|, each row whose id contains ``a``
    paired with the row that has ``b`` in its place; rows without a partner are not used. Two runs of
    one model that differ in one setting share whatever the model gets wrong elsewhere (e.g. a
    per-micro-batch compute rate), which cancels in the difference.

    >>> paired_objective(("-i-", "-p-"), {"m-i-1": 3.0, "m-p-1": 1.0, "m-i-2": -1.0, "m-p-2": 0.0})
    0.5
    """
    a, b = pairs
    diffs = [e - errors[r.replace(a, b)] for r, e in errors.items() if a in r and r.replace(a, b) in errors]
    if not diffs:
        raise ValueError(f"objective paired_signed_difference: no row pairs {a!r} / {b!r} among {sorted(errors)}")
    return abs(sum(diffs) / len(diffs))


def argmin_unimodal(f: Callable[[int], float], n: int) -> int:
    """Index in ``range(n)`` minimising ``f`` (assumed unimodal), by discrete golden-section
    search; ``f`` should be memoised by the caller. Ties go to the lower index.

    >>> argmin_unimodal(lambda i: abs(i - 13), 40)
    13
    >>> argmin_unimodal(lambda i: abs(i - 0.5), 2)
    0
    """
    if n <= EXHAUSTIVE:
        return min(range(n), key=lambda i: (f(i), i))
    lo, hi = 0, n - 1
    while hi - lo > 3:
        m1 = lo + int(round(0.381966 * (hi - lo)))
        m2 = lo + int(round(0.618034 * (hi - lo)))
        if m2 <= m1:
            m2 = m1 + 1
        if f(m1) <= f(m2):
            hi = m2
        else:
            lo = m1
    return min(range(lo, hi + 1), key=lambda i: (f(i), i))


def _snap(c: Constant, value: float):
    """The candidate of ``c``'s search nearest ``value`` (ties: the lower)."""
    return min(c.search.values, key=lambda v: (abs(v - value), v))


def _with_tied(fit: Fit, values: dict) -> dict:
    for c in fit.constants:
        if c.tied_to is not None:
            values[c.name] = round(values[c.tied_to] + c.tied_offset, 6)
    return values


def search_fit(fit: Fit, rows: list[str], values: dict, error: ErrorFn, kind: str | None = None) -> dict:
    """The values of ``fit``'s constants that minimise its objective (or ``kind``) over ``rows``
    (the other constants held at ``values``); returns a new ``values``."""
    kind = kind or fit.objective
    free = [c for c in fit.constants if c.search is not None and c.tied_to is None]
    cur = dict(values)
    if len(free) > 1:  # coordinate descent from the middle of each grid
        for c in free:
            cur[c.name] = c.search.values[(len(c.search.values) - 1) // 2]
    _with_tied(fit, cur)

    def score(vals: dict) -> float:
        if kind == "paired_signed_difference":
            return paired_objective(fit.pairs, {r: error(r, vals) for r in rows})
        return objective(kind, [error(r, vals) for r in rows])

    for _ in range(MAX_ROUNDS):
        moved = False
        for c in free:
            grid = c.search.values
            memo: dict[int, float] = {}

            def f(i: int, c=c, grid=grid, memo=memo) -> float:
                if i not in memo:
                    memo[i] = score(_with_tied(fit, {**cur, c.name: grid[i]}))
                return memo[i]
            best = grid[argmin_unimodal(f, len(grid))]
            if best != cur[c.name]:
                moved = True
                cur[c.name] = best
                _with_tied(fit, cur)
        if not moved or len(free) == 1:
            break
    return cur


@dataclass
class Refit:
    """The constants refitted without one group: values and, per fit, how it was refitted."""

    left_out: str | None
    values: dict
    how: dict = field(default_factory=dict)  # fit name -> "rows (n)" / "fallback rows (n)" / "transfer" / ...


def refit(fits: tuple[Fit, ...], groups: dict[str, str], declared: dict, error: ErrorFn,
          left_out: str | None = None) -> Refit:
    """Refit every fit of ``fits`` on the rows outside group ``left_out`` (None: on all rows).

    ``groups``: row id -> group (the rows that can be simulated, in CSV order); ``declared``: the
    file's values, where the pass starts."""
    ids = [r for r, g in groups.items() if g != left_out]
    out = Refit(left_out, dict(declared))
    deferred = []
    for fit in fits:
        if fit.data is not None:
            out.how[fit.name] = f"not refitted (fitted on {fit.data})"
            continue
        rows = match(fit.rows, ids)
        how, kind = f"its rows ({len(rows)})", fit.objective
        if not rows and fit.fallback_rows:
            rows = match(fit.fallback_rows, ids)
            how, kind = f"fallback rows ({len(rows)})", fit.fallback_objective or fit.objective
        if not rows:
            if fit.transfer_from is not None:
                deferred.append(fit)
                continue
            out.how[fit.name] = "no rows left: kept"
            continue
        out.values = search_fit(fit, rows, out.values, error, kind)
        out.how[fit.name] = how
    for fit in deferred:  # transfers take the refitted value of the constant they scale
        for c in fit.constants:
            if c.search is not None and c.tied_to is None:
                out.values[c.name] = _snap(c, out.values[fit.transfer_from] * fit.transfer_scale)
        _with_tied(fit, out.values)
        out.how[fit.name] = f"transfer from {fit.transfer_from} x {fit.transfer_scale:g}"
    return out


def applies(c: Constant, row: dict) -> bool:
    """Whether constant ``c`` reaches ``row``'s simulation: a GPU field of the row's GPU, or a
    strategy-file option (every row)."""
    return (c.kind == "gpu" and row["gpu"] in c.names) or c.kind == "option"


def patch_strategy(d: dict, row: dict, values: dict, consts: dict[str, Constant]) -> None:
    """Write the constants of ``values`` that differ from their declared value into the strategy
    mapping ``d`` of ``row`` (GPU overrides on the cluster's GPU, options)."""
    for name, v in sorted(values.items()):
        c = consts[name]
        if v == c.value or not applies(c, row):
            continue
        if c.kind == "gpu":
            gpu = d["cluster"].setdefault("gpu", {"base": row["gpu"], "efficiency": {}})
            gpu["efficiency"][c.field] = v
        else:
            d.setdefault("options", {})[c.field] = v


class Evaluator:
    """``error(row_id, values)``: the row's signed % error with those constants, simulated once per
    distinct set of values that reach the row; the in-sample result when they are the declared ones.

    ``simulate(row, values) -> signed % error`` does the work (``benchmarks.validate.run_row``)."""

    def __init__(self, rows: dict[str, dict], consts: dict[str, Constant], in_sample: dict[str, float],
                 simulate: Callable[[dict, dict], float]):
        self.rows, self.consts, self.in_sample, self.simulate = rows, consts, in_sample, simulate
        self.cache: dict[tuple, float] = {}
        self.simulations = 0

    def __call__(self, rid: str, values: dict) -> float:
        row = self.rows[rid]
        key = tuple((n, values[n]) for n in sorted(values)
                    if applies(self.consts[n], row) and values[n] != self.consts[n].value)
        if not key:
            return self.in_sample[rid]
        if (rid, key) not in self.cache:
            self.cache[(rid, key)] = self.simulate(row, dict(key))
            self.simulations += 1
        return self.cache[(rid, key)]


@dataclass
class GroupCV:
    group: str
    n: int
    in_sample_mae: float  # with the declared constants (the model as shipped)
    refit_all_mae: float  # with the constants refitted on every row (the method, in-sample)
    left_out_mae: float  # with the constants refitted without this group
    values: dict  # constant -> value refitted without the group
    how: dict  # fit -> how it was refitted
    #: row id -> the row's signed % error with the constants refitted without its group (its
    #: leave-one-source-out residual; simulator/reports/intervals.py builds the intervals from them)
    left_out_errors: dict = field(default_factory=dict)


def cross_validate(fits: tuple[Fit, ...], groups: dict[str, str], error: ErrorFn,
                   progress: Callable[[str], None] | None = None) -> tuple[Refit, list[GroupCV]]:
    """The full-data refit (does the declared method give the declared values?) and, per group,
    its mean |error| in-sample (declared constants) and left out (refitted without it)."""
    declared = {c.name: c.value for f in fits for c in f.constants}
    full = refit(fits, groups, declared, error)
    out = []
    for g in dict.fromkeys(groups.values()):
        if progress:
            progress(g)
        r = refit(fits, groups, declared, error, left_out=g)
        ids = [i for i, gg in groups.items() if gg == g]
        mae = [sum(abs(error(i, v)) for i in ids) / len(ids) for v in (declared, full.values, r.values)]
        out.append(GroupCV(g, len(ids), *mae, r.values, r.how, {i: error(i, r.values) for i in ids}))
    return full, out


def format_cv(full: Refit, rows: list[GroupCV], fits: tuple[Fit, ...], *, markdown: bool = False) -> str:
    """The refit of every constant and the per-group table (text or Markdown)."""
    declared = {c.name: c.value for f in fits for c in f.constants}
    lines = []
    if markdown:
        lines += ["| constant | declared | refit on all rows | refit without a group, where it differs |", "|---|---:|---:|---|"]
    else:
        lines.append(f"{'constant':34s} {'declared':>9s} {'all rows':>9s}  without a group")
    for f in fits:
        for c in f.constants:
            moved = [f"{g.group}: {g.values[c.name]:g}" for g in rows if g.values[c.name] != full.values[c.name]]
            cell = "; ".join(moved) or "-"
            if markdown:
                lines.append(f"| `{c.name}` | {declared[c.name]:g} | {full.values[c.name]:g} | {cell} |")
            else:
                lines.append(f"{c.name:34s} {declared[c.name]:>9g} {full.values[c.name]:>9g}  {cell}")
    lines.append("")
    n = sum(g.n for g in rows)
    tot = GroupCV("overall", n, *(sum(getattr(g, k) * g.n for g in rows) / n
                                  for k in ("in_sample_mae", "refit_all_mae", "left_out_mae")), {}, {})
    if markdown:
        lines += [("| group left out | rows | in-sample, declared constants | in-sample, refit on all rows | "
                  "left out (refit without the group) | left out minus declared | left out minus refit on all |"),
                  "|---|---:|---:|---:|---:|---:|---:|"]
        lines += [f"| {g.group} | {g.n} | {g.in_sample_mae:.1f}% | {g.refit_all_mae:.1f}% | {g.left_out_mae:.1f}% | "
                  f"{g.left_out_mae - g.in_sample_mae:+.1f} | {g.left_out_mae - g.refit_all_mae:+.1f} |"
                  for g in rows + [tot]]
    else:
        lines.append(f"{'group left out':38s} {'rows':>4s} {'declared':>9s} {'refit all':>9s} {'left out':>9s} "
                     f"{'-decl':>6s} {'-all':>6s}")
        lines += [f"{g.group:38s} {g.n:4d} {g.in_sample_mae:8.1f}% {g.refit_all_mae:8.1f}% {g.left_out_mae:8.1f}% "
                  f"{g.left_out_mae - g.in_sample_mae:+6.1f} {g.left_out_mae - g.refit_all_mae:+6.1f}"
                  for g in rows + [tot]]
    lines.append("")
    for label, key in (("the declared constants", "in_sample_mae"), ("the refit on all rows", "refit_all_mae")):
        worst = max(rows, key=lambda g: g.left_out_mae - getattr(g, key))
        d = worst.left_out_mae - getattr(worst, key)
        lines.append(f"largest left-out minus in-sample ({label}): {d:+.1f} points, {worst.group} "
                     f"({'within' if d <= 3.0 else 'ABOVE'} the 3-point target)")
    return "\n".join(lines)


__all__ = [
    "Evaluator",
    "GroupCV",
    "Refit",
    "applies",
    "argmin_unimodal",
    "cross_validate",
    "format_cv",
    "match",
    "objective",
    "patch_strategy",
    "refit",
    "search_fit",
]
