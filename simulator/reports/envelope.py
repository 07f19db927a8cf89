"""Is this prediction inside what was measured? The calibration group nearest to a run, and its error.

The simulator's error is known only where it was measured: ``benchmarks/validate.py`` simulates
published runs and reports the error per source group (docs/validation.md). A prediction for a run
unlike any of them (another software stack, a GPU generation, an MoE model, FP8, far more GPUs)
carries an error nobody measured. Every report therefore names the measured group nearest to the
run, the error measured there, and says plainly when nothing measured is near (issue 26, item 8).

**Groups** come from ``envelope.yaml`` beside this module, written by ``python -m benchmarks.validate
--write-envelope`` from the validation results (so the errors it quotes are the ones measured with
the constants shipped; tests and reports read only this file). One group per source group and
software stack: Narayanan 2021 Table 2 holds Megatron PTD-P rows and DeepSpeed ZeRO-3 rows, which
are two groups with very different errors. Layer-level rows (Korthikanti 2022 Table 4) measure one
layer, not a run, and are left out.

**Distance** (:func:`distance`): a sum over named features of the run against the group
(:data:`WEIGHTS`):

* ``stack`` -- the software stack: 0 same; 0.5 related (the Megatron family: Megatron-LM,
  Megatron-DeepSpeed, NeMo; or the sharded data-parallel family: FSDP, DeepSpeed ZeRO-3); 1 other.
  A run's stack is its ``options.stack`` (megatron-te → megatron, torchtitan and torchtitan-compile →
  torchtitan, in the sharded family; llm-foundry → fsdp; nemo-automodel → nemo-automodel, in the
  sharded family, no group of its own; deepspeed → megatron-deepspeed or deepspeed-zero3); without one it is inferred: ZeRO-3 → ``fsdp``, else ``megatron``.
* ``gpu`` -- 0 a GPU the group measured; 0.25 another product of the same generation
  (architecture: H800 or H200 against H100); 1 another generation.
* ``family`` -- dense or MoE: 0 same, 1 other.
* ``precision`` -- 0 same (bf16 and fp16 count as the same: same Tensor-Core rate and kernels);
  0.5 between any two of 16-bit, FP8 and FP4 (NVFP4).
* ``scale`` -- GPUs: 0 inside the group's measured range; beyond it, log2 of the ratio to the
  nearest end, divided by 3 (one point per factor of 8).

The nearest group is the one with the smallest distance (ties: more rows, then name). The run is
**inside** the calibrated envelope when that distance is at most :data:`NEAR` (one related stack,
another product of the same generation, or a scale within 2.8x of what was measured, alone), and
**outside** otherwise; the report then says what no measured group has at all (e.g. "MoE on
H800-SXM-80GB"), or that the run's features were measured, but never together, and in which
features the nearest group differs.

>>> g = CalibrationGroup("NeMo", "nemo", ("H100-SXM-80GB",), ("hopper",), ("dense",), ("fp8",), 64, 512, 4, 4.0, 13.3)
>>> run = RunFeatures("megatron", "H800-SXM-80GB", "hopper", "moe", "fp8", 2048)
>>> distance(run, g)
(2.4166666666666665, {'stack': 0.5, 'gpu': 0.25, 'family': 1.0, 'scale': 0.6666666666666666})
>>> for part in assess(run, (g,)).summary().split("; "):
...     print(part)
outside the calibrated envelope: no measured run with MoE on H800-SXM-80GB with megatron at 2048 GPUs
nearest: NeMo (nemo, H100-SXM-80GB, fp8, dense, 64-512 GPUs
differs in stack, GPU, model family, scale), 4.0% mean error over 4 runs
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

from strategies.errors import ConfigError, brief

ENVELOPE_PATH = Path(__file__).resolve().parent / "envelope.yaml"
#: Weight of each feature's mismatch (see the module doc).
WEIGHTS = {"stack": 1.0, "stack_related": 0.5, "gpu": 1.0, "gpu_same_generation": 0.25, "family": 1.0,
           "precision": 0.5, "scale_per_doubling": 1.0 / 3.0}
#: Largest distance still called inside the calibrated envelope.
NEAR = 0.5
#: Stacks that share kernels and schedules (Megatron code; sharded data parallel).
STACK_FAMILIES = ({"megatron", "megatron-deepspeed", "nemo"},
                  {"fsdp", "deepspeed-zero3", "torchtitan", "nemo-automodel"})
#: options.stack (taskgraph/data/stacks.yaml) -> the envelope's stack name
_STACKS = {"megatron-te": "megatron", "torchtitan": "torchtitan", "torchtitan-compile": "torchtitan",
           "llm-foundry": "fsdp", "nemo-automodel": "nemo-automodel"}   # FSDP2 + TE: no calibration rows
_GROUP_FIELDS = ("name", "stack", "gpus", "architectures", "families", "precisions", "min_gpus", "max_gpus",
                 "rows", "mean_abs_error_pct", "max_abs_error_pct")


@dataclass(frozen=True)
class RunFeatures:
    """What the distance compares: stack, GPU (and its architecture), dense/MoE, precision, GPUs."""

    stack: str
    gpu: str
    architecture: str
    family: str
    precision: str
    gpus: int


@dataclass(frozen=True)
class CalibrationGroup:
    """One measured group: its features (the values its rows take), GPU range and measured error (%)."""

    name: str
    stack: str
    gpus: tuple[str, ...]
    architectures: tuple[str, ...]
    families: tuple[str, ...]
    precisions: tuple[str, ...]
    min_gpus: int
    max_gpus: int
    rows: int
    mean_abs_error_pct: float
    max_abs_error_pct: float

    def describe(self) -> str:
        return (f"{self.stack}, {'/'.join(self.gpus)}, {'/'.join(self.precisions)}, {'/'.join(self.families)}, "
                f"{self.min_gpus}-{self.max_gpus} GPUs" if self.min_gpus != self.max_gpus else
                f"{self.stack}, {'/'.join(self.gpus)}, {'/'.join(self.precisions)}, {'/'.join(self.families)}, "
                f"{self.min_gpus} GPUs")


def _precision_class(p: str) -> str:
    return p if p in ("fp8", "fp4") else "16-bit"


def distance(run: RunFeatures, g: CalibrationGroup) -> tuple[float, dict[str, float]]:
    """Total distance of ``run`` to group ``g`` and the non-zero term of each feature."""
    terms: dict[str, float] = {}
    if run.stack != g.stack:
        related = any(run.stack in f and g.stack in f for f in STACK_FAMILIES)
        terms["stack"] = WEIGHTS["stack_related"] if related else WEIGHTS["stack"]
    if run.gpu not in g.gpus:
        terms["gpu"] = WEIGHTS["gpu_same_generation"] if run.architecture in g.architectures else WEIGHTS["gpu"]
    if run.family not in g.families:
        terms["family"] = WEIGHTS["family"]
    if _precision_class(run.precision) not in {_precision_class(p) for p in g.precisions}:
        terms["precision"] = WEIGHTS["precision"]
    if run.gpus > g.max_gpus or run.gpus < g.min_gpus:
        ratio = run.gpus / g.max_gpus if run.gpus > g.max_gpus else g.min_gpus / run.gpus
        terms["scale"] = math.log2(ratio) * WEIGHTS["scale_per_doubling"]
    return sum(terms.values()), terms


@dataclass(frozen=True)
class Envelope:
    """The nearest calibration group to a run, how far it is and whether that is inside."""

    run: RunFeatures
    nearest: CalibrationGroup | None
    distance: float
    terms: dict
    inside: bool
    absent: tuple = ()  # features of the run no measured group has: stack, gpu, family, precision, scale

    def _missing(self) -> str:
        """What no measured group has at all, e.g. ``MoE on H800-SXM-80GB``; or the whole run when
        every feature was measured somewhere, only never together."""
        r, a = self.run, self.absent
        if not a:
            return (f"combines {r.stack}, {r.gpu}, {r.precision}, {'MoE' if r.family == 'moe' else 'dense'} "
                    f"and {r.gpus} GPUs")
        what = [("MoE" if r.family == "moe" else "dense") if "family" in a else "",
                ({"fp8": "FP8", "fp4": "FP4"}.get(r.precision, "16-bit precision")) if "precision" in a else ""]
        parts = ["with " + " ".join(w for w in what if w)] if any(what) else []
        if "gpu" in a:
            parts.append(f"on {r.gpu}")
        if "stack" in a:
            parts.append(f"with {r.stack}")
        if "scale" in a:
            parts.append(f"at {r.gpus} GPUs")
        return " ".join(parts)

    def summary(self) -> str:
        """One line for the reports."""
        g = self.nearest
        if g is None:
            return "calibration: no measured group is known (simulator/reports/envelope.yaml is empty)"
        err = f"{g.mean_abs_error_pct:.1f}% mean error over {g.rows} run{'s' if g.rows != 1 else ''}"
        if self.inside:
            return (f"calibration: nearest measured group {g.name} ({g.describe()}): {err} "
                    f"(max {g.max_abs_error_pct:.1f}%; distance {self.distance:.2f})")
        names = {"stack": "stack", "gpu": "GPU", "family": "model family", "precision": "precision", "scale": "scale"}
        return (f"outside the calibrated envelope: no measured run {self._missing()}; nearest: "
                f"{g.name} ({g.describe()}; differs in {', '.join(names[k] for k in self.terms)}), {err}")

    def to_json(self) -> dict:
        g = self.nearest
        return {"inside": self.inside, "distance": round(self.distance, 4),
                "terms": {k: round(v, 4) for k, v in self.terms.items()},
                "run": asdict(self.run), "nearest_group": None if g is None else asdict(g),
                "never_measured": list(self.absent),
                "summary": self.summary()}


def assess(run: RunFeatures, groups: Iterable[CalibrationGroup] | None = None) -> Envelope:
    """The nearest of ``groups`` (default: the bundled envelope) to ``run``."""
    groups = tuple(load_envelope() if groups is None else groups)
    if not groups:
        return Envelope(run, None, math.inf, {}, False)
    scored = sorted(((*distance(run, g), g) for g in groups), key=lambda x: (x[0], -x[2].rows, x[2].name))
    d, terms, g = scored[0]
    absent = tuple(k for k, hit in (
        ("stack", any(run.stack == x.stack for x in groups)), ("gpu", any(run.gpu in x.gpus for x in groups)),
        ("family", any(run.family in x.families for x in groups)),
        ("precision", any(_precision_class(run.precision) in {_precision_class(p) for p in x.precisions}
                          for x in groups)),
        ("scale", min(x.min_gpus for x in groups) <= run.gpus <= max(x.max_gpus for x in groups))) if not hit)
    return Envelope(run, g, d, terms, d <= NEAR, absent)


def stack_name(options_stack: str | None, zero: int) -> str:
    """The envelope's stack of a run with ``options.stack`` and ZeRO stage ``zero`` (module doc).

    >>> stack_name(None, 3), stack_name("deepspeed", 1), stack_name("torchtitan-compile", 0)
    ('fsdp', 'megatron-deepspeed', 'torchtitan')
    """
    if options_stack == "deepspeed":
        return "deepspeed-zero3" if zero == 3 else "megatron-deepspeed"
    return _STACKS.get(options_stack or "", "fsdp" if zero == 3 else "megatron")


def run_features(plan) -> RunFeatures:
    """The features of a resolved strategy (:class:`taskgraph.plan.Plan`)."""
    stack = stack_name(plan.strategy.options.stack, plan.zero)
    gpu = plan.cluster.gpu
    return RunFeatures(stack=stack, gpu=gpu.name, architecture=gpu.architecture,
                       family="moe" if plan.model.experts else "dense",
                       precision=str(plan.strategy.training.precision), gpus=int(plan.num_gpus))


def plan_envelope(plan) -> Envelope:
    """:func:`assess` for a resolved strategy."""
    return assess(run_features(plan))


def group_from_dict(d, where: str) -> CalibrationGroup:
    if not isinstance(d, dict) or set(d) != set(_GROUP_FIELDS):
        raise ConfigError(f"{where}: expected the fields {', '.join(_GROUP_FIELDS)}, got {brief(d)}")
    try:
        return CalibrationGroup(
            name=str(d["name"]), stack=str(d["stack"]),
            **{k: tuple(str(x) for x in d[k]) for k in ("gpus", "architectures", "families", "precisions")},
            min_gpus=int(d["min_gpus"]), max_gpus=int(d["max_gpus"]), rows=int(d["rows"]),
            mean_abs_error_pct=float(d["mean_abs_error_pct"]), max_abs_error_pct=float(d["max_abs_error_pct"]))
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: {brief(str(exc), 120)}") from None


def load_envelope(path: str | Path | None = None) -> tuple[CalibrationGroup, ...]:
    """The calibration groups of ``path`` (default: the bundled ``envelope.yaml``)."""
    if path is None:
        return _bundled()
    return _load(Path(path))


def _load(path: Path) -> tuple[CalibrationGroup, ...]:
    from strategies.documents import check_finite, load_document
    where = f"calibration envelope {brief(str(path), 120)}"
    doc = load_document(path, "calibration envelope")
    check_finite(doc, where)
    if not isinstance(doc, dict) or not isinstance(doc.get("groups"), list):
        raise ConfigError(f"{where}: expected a top-level `groups:` list")
    return tuple(group_from_dict(g, f"{where}: groups[{i}]") for i, g in enumerate(doc["groups"]))


@lru_cache(maxsize=1)
def _bundled() -> tuple[CalibrationGroup, ...]:
    return _load(ENVELOPE_PATH)


__all__ = [
    "ENVELOPE_PATH",
    "NEAR",
    "WEIGHTS",
    "CalibrationGroup",
    "Envelope",
    "RunFeatures",
    "assess",
    "distance",
    "load_envelope",
    "plan_envelope",
    "run_features",
    "stack_name",
]
