"""Simulate a pipeline-only description (schedule + per-stage times): the schedule it names, a re-split
into chunks, lowering and the engine."""
from __future__ import annotations

import time
from dataclasses import dataclass, replace

from simulator.engine.core import SimResult, simulate
from simulator.reports.report import Report, report
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
