"""High-level entry points used by the CLI and by Python users."""
from __future__ import annotations

import time
from dataclasses import dataclass, replace

from simulator.engine import SimResult, simulate
from simulator.reports import Report, report
from strategies.actions import Schedule
from strategies.errors import ConfigError, brief
from strategies.limits import check_actions, check_tasks
from strategies.pipeline_file import PipelineSpec
from strategies.schedules import SCHEDULES, get_schedule
from taskgraph.estimate import estimate_tasks
from taskgraph.graph import TaskGraph
from taskgraph.lower_pipeline import StageCosts, lower_uniform


@dataclass
class Simulation:
    """Everything one simulation produced."""

    schedule: Schedule
    graph: TaskGraph
    result: SimResult
    report: Report
    sim_wall_s: float


def pipeline_schedule(spec: PipelineSpec) -> Schedule:
    if spec.schedule == "custom":
        from taskgraph.plan import load_custom_schedule
        sched = load_custom_schedule(spec.schedule_csv, "pipeline.schedule_csv")
        if sched.pp != spec.pp or sched.num_stages != spec.num_stages:
            raise ConfigError(f"pipeline.schedule_csv {brief(spec.schedule_csv)} has {sched.pp} ranks and "
                              f"{sched.num_stages} stages, but pipeline.pp = {spec.pp} and pp*vpp = "
                              f"{spec.num_stages}: make them agree")
        if sched.microbatches != spec.microbatches:
            raise ConfigError(f"pipeline.schedule_csv {brief(spec.schedule_csv)} has {sched.microbatches} microbatches "
                              f"but pipeline.microbatches = {spec.microbatches}: make them agree")
        return sched
    if spec.schedule not in SCHEDULES:
        from strategies.config import did_you_mean
        raise ConfigError(f"pipeline.schedule = {brief(spec.schedule)} is not a known schedule"
                          f"{did_you_mean(spec.schedule, SCHEDULES)}; valid: {', '.join(sorted(SCHEDULES))}, custom")
    return get_schedule(spec.schedule, spec.pp, spec.microbatches, spec.vpp)


def with_vpp(spec: PipelineSpec, vpp: int) -> PipelineSpec:
    """The same per-rank work split into ``vpp`` chunks: per-chunk times scale by old_vpp / vpp.
    Needs the same cost on every stage of a rank's chunks (else there is no unique split)."""
    if vpp == spec.vpp:
        return spec
    check_actions(spec.pp, vpp, spec.microbatches, f"{spec.schedule} with {vpp} chunks per rank")
    fields = {}
    for name in ("forward", "backward", "backward_input", "backward_weight", "activation"):
        vals = getattr(spec, name)
        if not vals:
            continue
        per_rank = [sum(vals[s] for s in range(spec.num_stages) if s % spec.pp == r) for r in range(spec.pp)]
        if len(set(vals)) > 1:
            raise ConfigError(f"cannot re-split pipeline.{name}_ms (different per stage) from vpp={spec.vpp} into "
                              f"vpp={vpp} chunks; give one value for all stages or compare files instead")
        fields[name] = tuple(per_rank[s % spec.pp] / vpp for s in range(spec.pp * vpp))
    return replace(spec, vpp=vpp, **fields)


def simulate_pipeline(spec: PipelineSpec, schedule: str | None = None, vpp: int | None = None) -> Simulation:
    """Lower and simulate a pipeline description (optionally with another schedule / chunk count)."""
    if schedule is not None:
        spec = replace(spec, schedule=schedule, schedule_csv=None)
    if vpp is not None:
        spec = with_vpp(spec, vpp)
    sched = pipeline_schedule(spec)
    if sched.num_stages != spec.num_stages:
        raise ConfigError(f"pipeline.schedule = {brief(spec.schedule)} places {sched.num_stages // sched.pp} stages per "
                          f"rank but pipeline.vpp = {spec.vpp}: set pipeline.vpp: {sched.num_stages // sched.pp}")
    check_tasks(estimate_tasks(sched), "this pipeline")
    costs = StageCosts(spec.forward, spec.backward, spec.backward_input, spec.backward_weight, spec.p2p,
                       spec.activation)
    t0 = time.perf_counter()
    graph = lower_uniform(sched, costs, overlap_handoff=spec.overlap_handoff)
    result = simulate(graph)
    rep = report(graph, result, sched)
    return Simulation(sched, graph, result, rep, time.perf_counter() - t0)


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
    if schedule is not None:
        strategy = replace(strategy, schedule=schedule, schedule_csv=None)
    if vpp is not None and vpp != strategy.parallel.vpp:
        strategy = replace(strategy, parallel=replace(strategy.parallel, vpp=vpp, layers_per_stage=None))
    if recompute_layers is not None:
        strategy = replace(strategy, training=replace(strategy.training, recompute_layers=recompute_layers))
    plan = resolve(strategy)
    if (fidelity or strategy.options.fidelity) == "coarse":
        return estimate_tasks(plan.schedule)
    return estimate_tasks(plan.schedule, build_work(plan, fidelity=fidelity))


@dataclass
class StrategySimulation:
    """A real-model simulation: the plan, the graph, the timeline result and the reports."""

    plan: object
    graph: TaskGraph
    result: SimResult
    report: Report
    training: object  # simulator.training_report.TrainingReport
    sim_wall_s: float

    @property
    def schedule(self) -> Schedule:
        return self.plan.schedule


def simulate_strategy(strategy, *, fidelity: str | None = None, schedule: str | None = None,
                      vpp: int | None = None) -> StrategySimulation:
    """Resolve, cost, lower and simulate a strategy (:class:`strategies.strategy_file.Strategy`)."""
    from simulator.training_report import training_report
    from taskgraph.costing import build_work
    from simulator.simulate import lower_and_simulate
    from taskgraph.plan import resolve
    if schedule is not None:
        strategy = replace(strategy, schedule=schedule, schedule_csv=None)
    if vpp is not None and vpp != strategy.parallel.vpp:
        strategy = replace(strategy, parallel=replace(strategy.parallel, vpp=vpp, layers_per_stage=None))
    t0 = time.perf_counter()
    plan = resolve(strategy)
    work = build_work(plan, fidelity=fidelity, check_profile=True)
    coarse = (fidelity or strategy.options.fidelity) == "coarse"
    check_tasks(estimate_tasks(plan.schedule, None if coarse else work),
                f"this strategy ({'coarse' if coarse else 'operator'} fidelity)")
    # coarse: vectorized layout + verified static-order timeline; operator: template lowering +
    # engine -- the same graph and result arrays as the per-task path (simulator/simulate.py)
    graph, result = lower_and_simulate(plan.schedule, work, strategy.options.overlap_handoff,
                                       fidelity=fidelity or strategy.options.fidelity)
    rep = report(graph, result, plan.schedule)
    wall = time.perf_counter() - t0
    tr = training_report(plan, work, graph, result, rep)
    return StrategySimulation(plan, graph, result, rep, tr, wall)


@dataclass(frozen=True)
class WhatIf:
    """One delta-mode change and its outcome.

    change: ``PATTERN=FACTOR`` as given; tasks: how many tasks matched; iteration_time_s: after the
    change; retimed: tasks the delta simulation re-timed; fallback: whether it fell back to a full
    run (and why); wall_s: seconds the delta call took.
    """

    change: str
    tasks: int
    iteration_time_s: float
    retimed: int
    changed: int
    fallback: bool
    reason: str
    wall_s: float


def parse_what_if(text: str) -> tuple[str, float]:
    import math
    pattern, sep, factor = text.rpartition("=")
    try:
        f = float(factor)
    except ValueError:
        f = -1.0
    if not sep or not pattern or not math.isfinite(f) or f < 0 or f > 1e6:
        raise ConfigError(f"--what-if {brief(text)} must look like PATTERN=FACTOR with a finite FACTOR in [0, 1e6], e.g. "
                          f"'layer3.*=1.5' (operator names), 'dp-comm=0' (a category) or '*=1.1'")
    return pattern, f


def what_if(graph: TaskGraph, changes: list[str], *, budget: float | str | None = "auto") -> tuple[float, list[WhatIf]]:
    """Apply ``PATTERN=FACTOR`` changes one after another with delta simulation.

    A pattern matches a task's operator name (``layer3.mlp_up.wgrad``, ``F``, ``send-act`` ...) or its
    category (``dp-comm``, ``recompute`` ...), shell-style (``fnmatch``). Returns the base iteration
    time and one :class:`WhatIf` per change (changes accumulate).
    """
    import fnmatch

    import numpy as np

    from simulator.delta import DeltaSimulator
    from taskgraph.graph import CATEGORIES
    ds = DeltaSimulator(graph, budget=budget)
    base = ds.makespan
    names = list(graph.op_names) + [""]
    ops = np.array(names, dtype=object)[graph.op]
    cats = np.array(CATEGORIES, dtype=object)[graph.category]
    dur = graph.duration.copy()
    out = []
    for text in changes:
        pattern, factor = parse_what_if(text)
        # match each distinct operator name once, then index by task (work per name, not per task)
        name_hit = np.array([fnmatch.fnmatchcase(o, pattern) for o in names], dtype=bool)
        op_hit = name_hit[graph.op] if ops.size else np.zeros(0, dtype=bool)
        hit = np.flatnonzero(op_hit | (cats == pattern))
        if hit.size == 0:
            raise ConfigError(f"--what-if {brief(text)}: no task matches {brief(pattern)}; patterns match "
                              f"operator names such as {', '.join(sorted(set(names) - {''})[:5])} or categories such as "
                              f"{', '.join(sorted(set(cats.tolist()))[:5])}")
        dur[hit] = dur[hit] * factor
        st = ds.set_durations(hit, dur[hit])
        out.append(WhatIf(text, int(hit.size), ds.makespan, st.retimed, st.changed, st.fallback, st.reason, st.wall_s))
    return base, out
