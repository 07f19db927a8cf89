"""How sure is a prediction? A stated interval from the simulator's own leave-one-source-out errors.

Every prediction of a step time comes with an interval at a stated level (default 80 %), built
from the errors the simulator made on published runs it was *not* calibrated on (issue 39).

**Data** (``intervals.json`` beside this module, written by ``python -m benchmarks.validate
--write-intervals``, never by hand): per run row of the validation table, its calibration-envelope
group and features (:class:`simulator.reports.envelope.RunFeatures`), the fidelity it ran at and its
signed step-time error with the constants refitted without its source group
(``benchmarks/crossval.py``: each row's leave-one-source-out prediction). The residual is
``r = ln(predicted / measured)``; the quantiles are computed here, at load, from those rows.

**Method** -- split conformal prediction (Lei, G'Sell, Rinaldo, Tibshirani & Wasserman 2018,
"Distribution-free predictive inference for regression", JASA 113(523), Section 2.2, Algorithm 2),
with three standard refinements:

* *Signed, asymmetric* quantiles: the lower and upper ends are the ``floor((n+1) a)``-th and
  ``ceil((n+1)(1-a))``-th smallest scores, ``a = (1 - level) / 2`` (signed-error conformal
  regression, Linusson, Johansson & Boström 2014; the two one-sided tails of conformalized
  quantile regression, Romano, Patterson & Candès 2019, NeurIPS, Theorem 2). The simulator's error
  is one-sided (steps too short), so the interval reaches further above the prediction than below.
* *Normalized* scores (Lei et al. 2018 Section 5.2, locally weighted conformal; Papadopoulos,
  Gammerman & Vovk 2008, normalized nonconformity): ``s_i = r_i / (1 + k d_i)`` where ``d_i`` is the
  calibration-envelope distance (:func:`simulator.reports.envelope.distance`) from row ``i`` to the
  nearest group of *another* source (the groups its left-out refit saw) and ``k`` the growth of the
  mean |r| with that distance, estimated from the same rows (:func:`spread_per_distance`). A run at
  distance ``d`` from its nearest group (another stack, GPU generation, dense against MoE, or 8x
  the GPUs is one unit) gets ``[s_lo (1 + k d), s_hi (1 + k d)]``.
* *Group-conditional* (Mondrian) calibration (Vovk 2012, "Conditional validity of inductive conformal
  predictors", ACML): the scores of the rows of the run's nearest envelope group when it has at least
  :data:`MIN_GROUP_ROWS` rows, otherwise the scores of every row. The envelope's features (stack,
  GPU generation, dense/MoE, precision, scale) choose the group and the distance.

Fidelity: the calibration rows ran at operator fidelity unless very large; coarse fidelity agrees
with operator fidelity within 2 % (tests/test_fidelity_agreement.py ``TOLERANCE``, issue 11), so a
run at a fidelity none of its calibration rows used is widened by ``ln 1.02`` on each side.

The interval always contains the point prediction (the ends are clipped at ``r = 0``). A run no
measured group is near gets a wide interval and its note says why (the envelope's summary).
docs/validation.md ("Prediction intervals") reports the coverage on the rows themselves, each
with its whole source group left out (``python -m benchmarks.validate --interval-coverage``).

>>> iv = Interval(0.8, 0.9, 1.2, "all 3 rows", 0.0, 1.0, 3, "")
>>> iv.time(10.0), iv.rate(120.0)
((9.0, 12.0), (100.0, 133.33333333333334))
>>> iv.text(19.3, "s")
'19.3 s (80 %: 17.4–23.2 s)'
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from simulator.reports.envelope import CalibrationGroup, RunFeatures, assess, distance, load_envelope
from strategies.errors import ConfigError, brief

INTERVALS_PATH = Path(__file__).resolve().parent / "intervals.json"
#: The level every report states unless told otherwise (``--interval-level``).
DEFAULT_LEVEL = 0.8
#: Fewest rows of one envelope group for its own quantiles; smaller groups use every row's. An 80 %
#: two-sided split-conformal interval needs ceil((n + 1) * 0.9) <= n, i.e. n >= 9, but below ~19 rows
#: its ends are a group's largest or second-largest errors, which one row moves. On the shipped rows
#: (docs/validation.md) 9 gave 73 % coverage at a median half-width of 7.7 %, 20 gave 82 % at 5.6 %.
MIN_GROUP_ROWS = 20
#: Spread added per unit of envelope distance when the rows cannot estimate it (no row at distance 0,
#: or none beyond): one unit of distance doubles the spread. Otherwise :func:`spread_per_distance`.
DEFAULT_SPREAD = 1.0
#: ln(1 + the coarse/operator agreement bound): tests/test_fidelity_agreement.py TOLERANCE (2 %).
FIDELITY_WIDENING = math.log1p(0.02)
_ROW_FIELDS = ("id", "source_group", "envelope_group", "stack", "gpu", "architecture", "family", "precision",
               "gpus", "fidelity", "error_pct", "left_out_error_pct", "memory_error_pct")


@dataclass(frozen=True)
class CalibrationRow:
    """One validation row: its features, fidelity and errors (signed %, predicted vs measured)."""

    id: str
    source_group: str
    envelope_group: str
    features: RunFeatures
    fidelity: str
    error_pct: float
    left_out_error_pct: float
    memory_error_pct: float | None

    @property
    def residual(self) -> float:
        """ln(predicted / measured step time) with the constants refitted without its source."""
        return math.log1p(self.left_out_error_pct / 100.0)


@dataclass(frozen=True)
class Interval:
    """Where the measured step time lies, as factors on the predicted one, at ``level``."""

    level: float
    low_factor: float  # measured / predicted step time, lower end (<= 1)
    high_factor: float  # upper end (>= 1)
    basis: str  # whose residuals: "NAME (n rows)" or "all n rows"
    distance: float  # envelope distance to the nearest measured group
    widening: float  # 1 + spread * distance (spread: Calibration.spread)
    rows: int  # calibration rows behind the quantiles
    note: str  # why it is wide (outside the envelope), or ""

    def time(self, t: float) -> tuple[float, float]:
        """Interval of a quantity proportional to the step time (step time, days, GPU-hours, cost)."""
        return t * self.low_factor, t * self.high_factor

    def rate(self, x: float) -> tuple[float, float]:
        """Interval of a quantity inversely proportional to the step time (tokens/s, MFU)."""
        return x / self.high_factor, x / self.low_factor

    def half_width_pct(self) -> float:
        """Half the width, in % of the prediction."""
        return 50.0 * (self.high_factor - self.low_factor)

    def text(self, x: float, unit: str, *, rate: bool = False, fmt: str = "{:.1f}") -> str:
        """``19.3 s (80 %: 17.9–20.8 s)``."""
        lo, hi = self.rate(x) if rate else self.time(x)
        sep = " " if unit and unit != "%" else ""
        return (f"{fmt.format(x)}{sep}{unit} ({100 * self.level:g} %: {fmt.format(lo)}–{fmt.format(hi)}"
                f"{sep}{unit})")

    def summary(self) -> str:
        """One line: the level, the factors and where they come from."""
        s = (f"interval ({100 * self.level:g} %): measured step time {self.low_factor:.2f}-{self.high_factor:.2f}x "
             f"the prediction; split-conformal quantiles of the leave-one-source-out errors of {self.basis}")
        if self.distance > 0:
            s += f", widened x{self.widening:.2f} for envelope distance {self.distance:.2f}"
        return s + (f"; {self.note}" if self.note else "")

    def to_json(self) -> dict:
        return {"level": self.level, "step_time_factor": [round(self.low_factor, 6), round(self.high_factor, 6)],
                "basis": self.basis, "distance": round(self.distance, 4), "widening": round(self.widening, 4),
                "calibration_rows": self.rows, "note": self.note, "summary": self.summary(),
                "method": "split conformal, signed and normalized by envelope distance (Lei et al. 2018; "
                          "Romano et al. 2019); docs/validation.md"}


def check_level(level, where: str = "--interval-level") -> float:
    """``level`` as a float in (0, 1), or one :class:`ConfigError` line naming it."""
    try:
        x = float(level)
    except (TypeError, ValueError):
        raise ConfigError(f"{where} = {brief(level)}: expected a number between 0 and 1, e.g. 0.8") from None
    if not (0.0 < x < 1.0):
        raise ConfigError(f"{where} = {brief(level)}: must be strictly between 0 and 1 (e.g. 0.8 for an 80 % "
                          f"interval)")
    return x


def conformal_bounds(scores: tuple[float, ...], level: float) -> tuple[float, float]:
    """Lower and upper split-conformal quantiles of sorted ``scores`` (Lei et al. 2018 Algorithm 2,
    one-sided at (1 - level) / 2 each: Romano et al. 2019). A level finer than ``len(scores)`` rows
    resolve takes the extreme score.

    >>> conformal_bounds(tuple(range(1, 10)), 0.8)
    (1, 9)
    >>> conformal_bounds(tuple(range(1, 20)), 0.8)
    (2, 18)
    """
    n = len(scores)
    a = (1.0 - level) / 2.0
    k_lo = max(math.floor((n + 1) * a + 1e-9), 1)
    k_hi = min(math.ceil((n + 1) * (1.0 - a) - 1e-9), n)
    return scores[k_lo - 1], scores[k_hi - 1]


def spread_per_distance(points: Iterable[tuple[float, float]]) -> float:
    """``k`` of the spread model |r| = m0 (1 + k d) over ``(d, |r|)`` pairs, one per source group
    (its rows' mean distance and mean |r|: the source is the unit left out, so each weighs the same
    and one source's large error -- DeepSpeed ZeRO-3's -- does not set it alone): ``m0`` the mean
    |r| of the sources at distance 0, ``k`` by least squares through it (a one-parameter model of
    the mean absolute residual as a function of the distance, the rho(x) of locally weighted
    conformal prediction, Lei et al. 2018 Section 5.2); :data:`DEFAULT_SPREAD` when no source is at
    distance 0 or none beyond; never below 0.

    >>> spread_per_distance([(0, 0.1), (0, 0.1), (1, 0.3), (2, 0.5)])
    2.0
    >>> spread_per_distance([(1, 0.3), (2, 0.5)])
    1.0
    """
    pts = [(d, a) for d, a in points if math.isfinite(d)]
    at0 = [a for d, a in pts if d == 0]
    den = sum(d * d for d, _ in pts)
    if not at0 or den == 0 or sum(at0) == 0:
        return DEFAULT_SPREAD
    m0 = sum(at0) / len(at0)
    return max(sum((a - m0) * d for d, a in pts) / (m0 * den), 0.0)


def _nearest_other(f: RunFeatures, source: str, groups: tuple[CalibrationGroup, ...],
                   source_of: dict[str, str]) -> float:
    """Distance from ``f`` to the nearest group not of source ``source`` (inf: none)."""
    return min((distance(f, g)[0] for g in groups if source_of.get(g.name) != source), default=math.inf)


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: the lru_caches below key on it
class Calibration:
    """The calibration rows, the envelope groups and each row's normalized score (sorted per basis)."""

    rows: tuple[CalibrationRow, ...]
    groups: tuple[CalibrationGroup, ...]
    scores: dict  # row id -> r / (1 + spread d_i)
    spread: float  # k of the normalization 1 + k d (spread_per_distance of the rows)

    @classmethod
    def build(cls, rows: Iterable[CalibrationRow], groups: Iterable[CalibrationGroup]) -> Calibration:
        rows, groups = tuple(rows), tuple(groups)
        source_of = {r.envelope_group: r.source_group for r in rows}
        dist = {r.id: _nearest_other(r.features, r.source_group, groups, source_of) for r in rows}
        per_source: dict[str, list] = {}
        for r in rows:
            if math.isfinite(dist[r.id]):
                per_source.setdefault(r.source_group, []).append((dist[r.id], abs(r.residual)))
        k = spread_per_distance((sum(d for d, _ in v) / len(v), sum(a for _, a in v) / len(v))
                                for v in per_source.values())
        scores = {r.id: r.residual / (1.0 + k * dist[r.id]) if math.isfinite(dist[r.id]) else 0.0 for r in rows}
        return cls(rows, groups, scores, k)

    def without_source(self, source: str) -> Calibration:
        """The calibration rebuilt without every row and group of ``source`` (coverage checks: the
        other rows' distances, hence their scores, as if the source had never been measured)."""
        names = {r.envelope_group for r in self.rows if r.source_group == source}
        return Calibration.build((r for r in self.rows if r.source_group != source),
                                 (g for g in self.groups if g.name not in names))

    @lru_cache(maxsize=64)  # noqa: B019 -- one Calibration per shipped file, alive for the process
    def group_rows(self, group: str) -> int:
        return sum(1 for r in self.rows if r.envelope_group == group)

    @lru_cache(maxsize=64)  # noqa: B019 -- one Calibration per shipped file, alive for the process
    def sorted_scores(self, group: str | None) -> tuple[float, ...]:
        return tuple(sorted(self.scores[r.id] for r in self.rows if group is None or r.envelope_group == group))

    @lru_cache(maxsize=64)  # noqa: B019 -- one Calibration per shipped file, alive for the process
    def fidelities(self, group: str | None) -> frozenset:
        return frozenset(r.fidelity for r in self.rows if group is None or r.envelope_group == group)


def interval_for(run: RunFeatures, fidelity: str = "operator", level: float = DEFAULT_LEVEL,
                 calibration: Calibration | None = None) -> Interval:
    """The interval of a run with features ``run`` simulated at ``fidelity`` (see the module doc);
    memoized per calibration (a search asks once per GPU count)."""
    return _interval(run, fidelity, float(level), bundled() if calibration is None else calibration)


@lru_cache(maxsize=4096)
def _interval(run: RunFeatures, fidelity: str, level: float, cal: Calibration) -> Interval:
    env = assess(run, cal.groups)
    if env.nearest is None or not cal.rows:
        return Interval(level, 0.5, 2.0, "no calibration rows", math.inf, math.inf, 0,
                        "no calibration rows are known (simulator/reports/intervals.json is empty): a factor of 2 "
                        "either way")
    g = env.nearest
    n_group = cal.group_rows(g.name)
    group = g.name if n_group >= MIN_GROUP_ROWS else None
    scores = cal.sorted_scores(group)
    basis = (f"{g.name} ({len(scores)} rows)" if group
             else f"all {len(scores)} rows (nearest group {g.name} has {n_group})")
    s_lo, s_hi = conformal_bounds(scores, level)
    widening = 1.0 + cal.spread * env.distance
    lo, hi = min(s_lo, 0.0) * widening, max(s_hi, 0.0) * widening
    if fidelity not in cal.fidelities(group):
        lo, hi = lo - FIDELITY_WIDENING, hi + FIDELITY_WIDENING
    # why it is wide: what no measured group has (the envelope's summary, less its nearest group,
    # which the calibration line and JSON key name)
    note = "" if env.inside else env.summary().split("; nearest: ")[0]
    # r = ln(predicted / measured): measured = predicted * exp(-r)
    return Interval(level, math.exp(-hi), math.exp(-lo), basis, env.distance, widening, len(scores), note)


def plan_interval(plan, fidelity: str = "operator", level: float = DEFAULT_LEVEL) -> Interval:
    """:func:`interval_for` a resolved strategy (:class:`taskgraph.plan.Plan`)."""
    from simulator.reports.envelope import run_features
    return interval_for(run_features(plan), fidelity, level)


def sim_interval(sim, level: float = DEFAULT_LEVEL) -> Interval:
    """:func:`interval_for` a :class:`simulator.simulation.strategy.StrategySimulation`."""
    return plan_interval(sim.plan, sim.graph.meta.get("fidelity", "operator"), level)


# ----------------------------------------------------------------------------- memory
def memory_errors(calibration: Calibration | None = None) -> tuple[float, ...]:
    """Signed % errors of the memory model on the validation rows that give a measured peak, sorted."""
    cal = bundled() if calibration is None else calibration
    return tuple(sorted(r.memory_error_pct for r in cal.rows if r.memory_error_pct is not None))


def memory_margin(peak_bytes: float, capacity_bytes: float, level: float = DEFAULT_LEVEL, reserve_bytes: float = 0.0,
                  calibration: Calibration | None = None) -> dict:
    """How close a predicted peak is to the limit, against the memory model's measured error: the
    interval of the real peak (split-conformal quantiles of the signed errors of the validation rows
    that give a measured peak, as for step times; applied to the modelled part, the reserve kept as
    it is -- the rows compare allocated memory, benchmarks/validate.py) and the verdict it supports:
    "fits", "does not fit" or "too close to call"."""
    from simulator.reports.memory import GB
    errs = memory_errors(calibration)
    if not errs:
        return {"level": level, "peak_interval_gb": None, "verdict": "unknown", "rows": 0,
                "summary": "memory: no measured peak to judge the memory model by"}
    # error e (%) = predicted / measured - 1: measured = predicted / (1 + e / 100)
    e_lo, e_hi = conformal_bounds(errs, level)
    model = max(peak_bytes - reserve_bytes, 0.0)
    lo = reserve_bytes + model / (1 + max(e_hi, 0.0) / 100)
    hi = reserve_bytes + model / (1 + min(e_lo, 0.0) / 100)
    verdict = "fits" if hi <= capacity_bytes else "does not fit" if lo > capacity_bytes else "too close to call"
    s = (f"memory ({100 * level:g} %): peak {peak_bytes / GB:.1f} GiB ({lo / GB:.1f}–{hi / GB:.1f}) of "
         f"{capacity_bytes / GB:.1f} GiB, {100 * peak_bytes / capacity_bytes:.0f} % of the limit, against the memory "
         f"model's error of {errs[0]:+.1f} to {errs[-1]:+.1f} % on {len(errs)} measured peaks: {verdict}")
    return {"level": level, "peak_interval_gb": [lo / GB, hi / GB], "verdict": verdict, "rows": len(errs),
            "summary": s}


# ----------------------------------------------------------------------------- coverage
def coverage(level: float = DEFAULT_LEVEL, calibration: Calibration | None = None) -> dict:
    """Per source group and overall: the share of rows whose measured step time falls inside the
    interval computed with the row's whole source group left out (its rows and its envelope groups),
    and the median half-width (% of the prediction)."""
    cal = bundled() if calibration is None else calibration
    per: dict[str, list] = {}
    for src in dict.fromkeys(r.source_group for r in cal.rows):
        rest = cal.without_source(src)
        for r in cal.rows:
            if r.source_group != src:
                continue
            iv = interval_for(r.features, r.fidelity, level, rest)
            measured_factor = math.exp(-r.residual)
            per.setdefault(src, []).append((iv.low_factor <= measured_factor <= iv.high_factor,
                                            iv.half_width_pct()))
    per["overall"] = [x for v in list(per.values()) for x in v]

    def median(xs):
        xs = sorted(xs)
        m = len(xs) // 2
        return xs[m] if len(xs) % 2 else (xs[m - 1] + xs[m]) / 2
    return {g: {"rows": len(v), "coverage_pct": 100.0 * sum(c for c, _ in v) / len(v),
                "median_half_width_pct": median([w for _, w in v])} for g, v in per.items()}


def coverage_table(level: float = DEFAULT_LEVEL, calibration: Calibration | None = None, *,
                   markdown: bool = False) -> str:
    """:func:`coverage` as text or Markdown (docs/validation.md)."""
    cov = coverage(level, calibration)
    head = f"coverage of the {100 * level:g} % interval"
    if markdown:
        out = [f"| source group left out | rows | {head} | median half-width |", "|---|---:|---:|---:|"]
        out += [f"| {g} | {c['rows']} | {c['coverage_pct']:.0f} % | {c['median_half_width_pct']:.1f} % |"
                for g, c in cov.items()]
    else:
        out = [f"{'source group left out':40s} {'rows':>4s} {'coverage':>9s} {'half-width':>10s}"]
        out += [f"{g:40s} {c['rows']:4d} {c['coverage_pct']:8.0f}% {c['median_half_width_pct']:9.1f}%"
                for g, c in cov.items()]
    return "\n".join(out)


# ----------------------------------------------------------------------------- the file
def row_from_dict(d, where: str) -> CalibrationRow:
    if not isinstance(d, dict) or set(d) != set(_ROW_FIELDS):
        raise ConfigError(f"{where}: expected the fields {', '.join(_ROW_FIELDS)}, got {brief(d)}")
    try:
        f = RunFeatures(str(d["stack"]), str(d["gpu"]), str(d["architecture"]), str(d["family"]),
                        str(d["precision"]), int(d["gpus"]))
        mem = d["memory_error_pct"]
        return CalibrationRow(str(d["id"]), str(d["source_group"]), str(d["envelope_group"]), f, str(d["fidelity"]),
                              float(d["error_pct"]), float(d["left_out_error_pct"]),
                              None if mem is None else float(mem))
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: {brief(str(exc), 120)}") from None


def load_rows(path: str | Path | None = None) -> tuple[CalibrationRow, ...]:
    """The calibration rows of ``path`` (default: the bundled ``intervals.json``)."""
    from strategies.documents import check_finite, load_document
    path = Path(path) if path is not None else INTERVALS_PATH
    where = f"interval calibration {brief(str(path), 120)}"
    doc = load_document(path, "interval calibration")
    check_finite(doc, where)
    if not isinstance(doc, dict) or set(doc) != {"about", "rows"} or not isinstance(doc["rows"], list):
        raise ConfigError(f"{where}: expected an object with the fields about and rows (a list)")
    return tuple(row_from_dict(r, f"{where}: rows[{i}]") for i, r in enumerate(doc["rows"]))


@lru_cache(maxsize=1)
def bundled() -> Calibration:
    """The bundled rows and envelope, scored once per process."""
    return Calibration.build(load_rows(), load_envelope())


__all__ = [
    "DEFAULT_LEVEL",
    "DEFAULT_SPREAD",
    "FIDELITY_WIDENING",
    "INTERVALS_PATH",
    "MIN_GROUP_ROWS",
    "Calibration",
    "CalibrationRow",
    "Interval",
    "bundled",
    "check_level",
    "conformal_bounds",
    "coverage",
    "coverage_table",
    "interval_for",
    "load_rows",
    "memory_errors",
    "memory_margin",
    "plan_interval",
    "sim_interval",
    "spread_per_distance",
]
