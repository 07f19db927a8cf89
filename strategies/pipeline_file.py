"""The pipeline description file: a schedule plus per-chunk costs, no model or cluster.

YAML (or JSON) with one top-level section ``pipeline`` (the full model + cluster strategy file uses
other top-level sections; the CLI tells them apart by their keys)::

    pipeline:
      schedule: interleaved-1f1b   # a name from strategies.schedules.SCHEDULES, or "custom"
      pp: 4                        # pipeline ranks
      vpp: 2                       # chunks (virtual stages) per rank
      microbatches: 8
      forward_ms: 0.5              # per chunk: one number, or a list with one value per stage
      backward_ms: 1.0
      backward_input_ms: 0.5       # optional, split-backward schedules; default backward_ms / 2
      backward_weight_ms: 0.5      # optional; default backward_ms - backward_input_ms
      p2p_ms: 0.05                 # per activation / gradient transfer between ranks
      activation_mb: 300           # optional: MB one microbatch keeps per chunk from F until B (or W)
      overlap_handoff: pair-end    # DualPipe overlapped pairs: pair-end | each
      schedule_csv: my.csv         # only with schedule: custom (PyTorch action CSV)
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strategies.config import check_keys, check_number, get_float, get_int, get_str, load_mapping
from strategies.errors import ConfigError, brief
from strategies.limits import check_actions

PIPELINE_KEYS = ("schedule", "pp", "vpp", "microbatches", "forward_ms", "backward_ms", "backward_input_ms",
                 "backward_weight_ms", "p2p_ms", "activation_mb", "overlap_handoff", "schedule_csv")


#: Largest per-stage time (ms) or activation size (MB): 10^9 (11.6 days, 1 PB) keeps every sum of
#: up to MAX_TASKS durations finite and exact enough to print.
MAX_VALUE = 1e9


@dataclass(frozen=True)
class PipelineSpec:
    """A pipeline-only simulation input (times in seconds, per virtual stage).

    schedule: schedule name, or ``"custom"`` with ``schedule_csv``.
    pp, vpp, microbatches: pipeline ranks, chunks per rank, microbatches per iteration.
    forward, backward, backward_input, backward_weight: per-stage times, seconds (len pp*vpp).
    p2p: seconds per inter-rank transfer.
    activation: per-stage bytes kept per microbatch from F to B/W (empty = memory not modeled).
    overlap_handoff: ``pair-end`` or ``each`` (DualPipe overlapped F&B pairs).
    schedule_csv: path of a custom schedule, or None.
    """

    schedule: str
    pp: int
    vpp: int
    microbatches: int
    forward: tuple[float, ...]
    backward: tuple[float, ...]
    backward_input: tuple[float, ...]
    backward_weight: tuple[float, ...]
    p2p: float
    overlap_handoff: str = "pair-end"
    schedule_csv: str | None = None
    activation: tuple[float, ...] = ()

    @property
    def num_stages(self) -> int:
        return self.pp * self.vpp


def _per_stage_ms(d: dict, key: str, n: int, default: Any = ...) -> tuple[float, ...] | None:
    """A per-stage value (one number or one per stage), times 1e-3 (ms -> s)."""
    where = "pipeline"
    if key not in d:
        if default is ...:
            raise ConfigError(f"missing required field 'pipeline.{key}': add a time in milliseconds "
                              f"(one number, or a list of {n} numbers, one per stage)")
        return default
    v = d[key]
    if isinstance(v, list):
        if len(v) != n:
            raise ConfigError(f"pipeline.{key} has {len(v)} values but pp*vpp = {n} stages: give one number "
                              f"or exactly {n}")
        return tuple(check_number(x, f"{where}.{key}[{i}]", maximum=MAX_VALUE) * 1e-3 for i, x in enumerate(v))
    return (check_number(v, f"{where}.{key}", maximum=MAX_VALUE) * 1e-3,) * n


def parse_pipeline(data: dict, base_dir: Path | None = None) -> PipelineSpec:
    """Validate the ``pipeline`` section (the whole file's mapping is accepted too)."""
    check_keys(data, ("pipeline",), "")
    d = data.get("pipeline")
    if d is None:
        raise ConfigError("missing section 'pipeline': a pipeline file needs pipeline: {schedule, pp, microbatches, "
                          "forward_ms, backward_ms}")
    check_keys(d, PIPELINE_KEYS, "pipeline")
    schedule = get_str(d, "schedule", "pipeline", default="1f1b")
    pp = get_int(d, "pp", "pipeline", minimum=1)
    vpp = get_int(d, "vpp", "pipeline", default=1, minimum=1)
    m = get_int(d, "microbatches", "pipeline", minimum=1)
    check_actions(pp, vpp, m, "pipeline")
    csv = d.get("schedule_csv")
    if csv is not None and not isinstance(csv, str):
        raise ConfigError(f"pipeline.schedule_csv = {brief(csv)} must be the path of a PyTorch action CSV")
    if csv is not None:
        if schedule != "custom":
            raise ConfigError(f"pipeline.schedule_csv is set but pipeline.schedule = {brief(schedule)}: "
                              f"set schedule: custom to use the CSV, or remove schedule_csv")
        csv = str((base_dir / csv) if base_dir and not Path(csv).is_absolute() else csv)
    elif schedule == "custom":
        raise ConfigError("pipeline.schedule = 'custom' needs pipeline.schedule_csv (a PyTorch action CSV)")
    n = pp * vpp
    fwd = _per_stage_ms(d, "forward_ms", n)
    bwd = _per_stage_ms(d, "backward_ms", n)
    bi = _per_stage_ms(d, "backward_input_ms", n, default=None) or tuple(b / 2 for b in bwd)
    bw = _per_stage_ms(d, "backward_weight_ms", n, default=None) or tuple(b - i for b, i in zip(bwd, bi))
    if any(x < 0 for x in bw):
        raise ConfigError("pipeline.backward_weight_ms defaults to backward_ms - backward_input_ms, which is "
                          "negative here: give backward_weight_ms explicitly")
    p2p = get_float(d, "p2p_ms", "pipeline", default=0.0) * 1e-3
    if p2p > MAX_VALUE * 1e-3:
        raise ConfigError(f"pipeline.p2p_ms = {p2p * 1e3:g} must be <= {MAX_VALUE:g}")
    handoff = get_str(d, "overlap_handoff", "pipeline", default="pair-end", choices=("pair-end", "each"))
    act = _per_stage_ms(d, "activation_mb", n, default=None)  # same parsing; ms->s factor undone below
    act = tuple(a * 1e3 * 1e6 for a in act) if act else ()
    return PipelineSpec(schedule, pp, vpp, m, fwd, bwd, bi, bw, p2p, handoff, csv, act)


def load_pipeline(path) -> PipelineSpec:
    data = load_mapping(path, "pipeline file")
    return parse_pipeline(data, Path(path).parent if not isinstance(path, dict) else None)
