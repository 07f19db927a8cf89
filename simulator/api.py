"""High-level entry points used by the CLI and by Python users."""
from __future__ import annotations

import time
from dataclasses import dataclass, replace

from simulator.engine import SimResult, simulate
from simulator.reports import Report, report
from strategies.actions import Schedule
from strategies.errors import ConfigError
from strategies.pipeline_file import PipelineSpec
from strategies.schedules import SCHEDULES, get_schedule
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
        from strategies.schedule_csv import read_schedule_csv
        from strategies.validate import check_deadlock, validate_schedule
        sched = read_schedule_csv(spec.schedule_csv)
        if sched.pp != spec.pp or sched.num_stages != spec.num_stages:
            raise ConfigError(f"pipeline.schedule_csv {spec.schedule_csv!r} has {sched.pp} ranks and "
                              f"{sched.num_stages} stages, but pipeline.pp = {spec.pp} and pp*vpp = "
                              f"{spec.num_stages}: make them agree")
        if sched.microbatches != spec.microbatches:
            raise ConfigError(f"pipeline.schedule_csv {spec.schedule_csv!r} has {sched.microbatches} microbatches "
                              f"but pipeline.microbatches = {spec.microbatches}: make them agree")
        validate_schedule(sched)
        check_deadlock(sched)
        return sched
    if spec.schedule not in SCHEDULES:
        from strategies.config import did_you_mean
        raise ConfigError(f"pipeline.schedule = {spec.schedule!r} is not a known schedule"
                          f"{did_you_mean(spec.schedule, SCHEDULES)}; valid: {', '.join(sorted(SCHEDULES))}, custom")
    return get_schedule(spec.schedule, spec.pp, spec.microbatches, spec.vpp)


def simulate_pipeline(spec: PipelineSpec, schedule: str | None = None) -> Simulation:
    """Lower and simulate a pipeline description (optionally with another schedule name)."""
    if schedule is not None:
        spec = replace(spec, schedule=schedule, schedule_csv=None)
    sched = pipeline_schedule(spec)
    costs = StageCosts(spec.forward, spec.backward, spec.backward_input, spec.backward_weight, spec.p2p)
    t0 = time.perf_counter()
    graph = lower_uniform(sched, costs, overlap_handoff=spec.overlap_handoff)
    result = simulate(graph)
    rep = report(graph, result)
    return Simulation(sched, graph, result, rep, time.perf_counter() - t0)
