"""How many tasks a simulation would build, before building them (the limits check of every command)."""
from __future__ import annotations

from dataclasses import replace

from simulator.simulation.pipeline import pipeline_schedule, with_vpp
from strategies.schedules import SCHEDULES, get_schedule
from taskgraph.estimate import estimate_tasks

_PER_PAIR: dict = {}


def _actions_per_pair(name: str) -> int:
    """Actions per (stage, microbatch) of a named schedule: 2 (F, B) or 3 (F, I, W), read off a small
    instance of it (every schedule of a family has the same ratio)."""
    if name not in _PER_PAIR:
        s = get_schedule(name, 2, 4, 2 if name in ("zb-v", "dualpipe-v", "dualpipe", "interleaved-1f1b") else 1)
        n = sum(len(getattr(e, "sub_actions", (e,))) for o in s.orders for e in o)
        _PER_PAIR[name] = -(-n // (s.num_stages * s.microbatches))
    return _PER_PAIR[name]


def estimate_run_tasks(kind: str, spec, *, schedule: str | None = None, vpp: int | None = None,
                       fidelity: str | None = None, recompute_layers: tuple | None = None) -> int:
    """Tasks ``simulate_pipeline`` / ``simulate_strategy`` would build for these arguments, without
    building them (schedule generation and costing only; both are bounded by ``strategies.limits``)."""
    from taskgraph.costing import build_work
    from taskgraph.plan import resolve
    if kind == "pipeline":
        if schedule is not None:
            spec = replace(spec, schedule=schedule, schedule_csv=None)
        if vpp is not None:
            spec = with_vpp(spec, vpp)
        if spec.schedule in SCHEDULES:  # closed form: the family's actions per (stage, microbatch)
            stages = spec.pp * max(spec.vpp, 2 if spec.schedule in ("zb-v", "dualpipe-v", "dualpipe") else 1)
            return 2 * stages * spec.microbatches * _actions_per_pair(spec.schedule)
        return estimate_tasks(pipeline_schedule(spec))
    strategy = spec
    from taskgraph.plan import rescheduled
    strategy = rescheduled(strategy, schedule, vpp)   # layers_per_stage regrouped for the new stage count
    if recompute_layers is not None:
        strategy = replace(strategy, training=replace(strategy.training, recompute_layers=recompute_layers))
    plan = resolve(strategy)
    opt = strategy.options
    # concurrent pairs (DualPipe's, Megatron's combined 1F1B) are lowered per operator at either fidelity
    if (fidelity or opt.fidelity) == "coarse" and opt.pair_overlap != "concurrent" and \
            not opt.overlap_moe_expert_parallel_comm:
        return estimate_tasks(plan.schedule)
    return estimate_tasks(plan.schedule, build_work(plan, fidelity=fidelity))
