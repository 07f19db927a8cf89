"""How many tasks a run will build, counted from the schedule and the cost records before lowering.

The counts follow the emitters of ``taskgraph/lower_model.py`` (operator fidelity: one task per
operator pass, one per collective, recompute tasks, a join when collectives run beside compute) and
``taskgraph/lower_pipeline.py`` (one transfer per activation or gradient that crosses ranks). The
per-action count is exact for the compute and collective tasks; transfers, joins and the
per-rank epilogue are bounded from above. On the shipped examples it is 0.6% to 13.5% above the
real count (GPT-3 175B: 352,672 estimated, 346,312 built); on tiny graphs, where the bounds
dominate, up to about 2x. It costs O(stages * ops per stage + ranks), independent of the
number of microbatches, so ``simulator.api`` calls it before building anything
(``strategies.limits.check_tasks``).

>>> from strategies.schedules import get_schedule
>>> from taskgraph.lower_model import lower_model
>>> from taskgraph.work import IterationWork, LayerWork, OpCost, StageWork
>>> st = StageWork((LayerWork("l0", (OpCost("mlp", 1.0, 1.0, 1.0),)),))
>>> sched, work = get_schedule("1f1b", 2, 4), IterationWork((st, st))
>>> estimate_tasks(sched, work), lower_model(sched, work).num_tasks
(78, 34)
"""
from __future__ import annotations

from strategies.actions import Schedule


def _action_tasks(stage, kind: str) -> int:
    """Tasks one action of ``kind`` (F, B, I, W) of a :class:`StageWork` adds (upper bound on joins)."""
    n = 0
    for layer in stage.layers:
        for op in layer.ops:
            if kind == "F":
                n += 1 + len(op.fwd_pre) + len(op.fwd_post)
            elif kind == "W":
                n += 1 if op.bwd_weight > 0 else 0
            else:
                n += 1 + len(op.bwd_pre) + len(op.bwd_post) + (1 if kind == "B" and op.bwd_weight > 0 else 0)
        if kind in ("B", "I") and layer.recompute == "full":
            n += sum(1 + len(op.fwd_pre) + len(op.fwd_post) for op in layer.ops)
        elif kind in ("B", "I") and layer.recompute == "selective":
            n += 1
    return max(n, 1) + 2  # the empty-stage task or a join, and a "start" anchor


def estimate_tasks(schedule: Schedule, work=None) -> int:
    """Upper estimate of the tasks lowering ``schedule`` builds: operator-level from ``work``
    (an ``IterationWork``), else one task per action (the pipeline and coarse lowerings).
    Each action may also send one transfer to another rank."""
    kinds = schedule.meta.get("_actions_by_stage_kind") if isinstance(schedule.meta, dict) else None
    if kinds is None:  # counted once per (cached, immutable) schedule
        kinds = {}
        for order in schedule.orders:
            for entry in order:
                for a in getattr(entry, "sub_actions", (entry,)):
                    kinds[(a.stage, a.kind)] = kinds.get((a.stage, a.kind), 0) + 1
        if isinstance(schedule.meta, dict):
            schedule.meta["_actions_by_stage_kind"] = kinds
    total = 0
    for (stage, kind), count in kinds.items():
        per = 1 if work is None else _action_tasks(work.stages[stage], kind)
        total += count * (per + 1)  # + at most one cross-rank transfer
    if work is not None:
        total += sum(2 * len(st.buckets) + 1 for st in work.stages) + 2 * schedule.pp
    return total
