"""Simulate a strategy file: resolve, cost, check the task count, lower and run at the chosen fidelity,
then the iteration and training reports."""
from __future__ import annotations

import time
from dataclasses import dataclass

from simulator.engine.core import SimResult
from simulator.reports.report import Report, report
from strategies.actions import Schedule
from strategies.limits import check_tasks
from taskgraph.estimate import estimate_tasks
from taskgraph.graph import TaskGraph


@dataclass
class StrategySimulation:
    """A real-model simulation: the plan, the graph, the timeline result and the reports."""

    plan: object
    graph: TaskGraph
    result: SimResult
    report: Report
    training: object  # simulator.reports.training.TrainingReport
    sim_wall_s: float

    @property
    def schedule(self) -> Schedule:
        return self.plan.schedule


def simulate_strategy(strategy, *, fidelity: str | None = None, schedule: str | None = None,
                      vpp: int | None = None) -> StrategySimulation:
    """Resolve, cost, lower and simulate a strategy (:class:`strategies.strategy_file.Strategy`)."""
    from simulator.engine.dispatch import run_iteration
    from simulator.reports.training import training_report
    from taskgraph.costing import build_work
    from taskgraph.plan import rescheduled, resolve
    strategy = rescheduled(strategy, schedule, vpp)   # layers_per_stage regrouped for the new stage count
    t0 = time.perf_counter()
    plan = resolve(strategy)
    work = build_work(plan, fidelity=fidelity, check_profile=True)
    coarse = (fidelity or strategy.options.fidelity) == "coarse"
    check_tasks(estimate_tasks(plan.schedule, None if coarse else work),
                f"this strategy ({'coarse' if coarse else 'operator'} fidelity)")
    # the one fidelity dispatcher: coarse = vectorized layout + verified static-order timeline;
    # operator = template lowering + engine -- the same graph and result arrays as the per-task path
    run = run_iteration(plan.schedule, work, strategy.options.overlap_handoff,
                        fidelity=fidelity or strategy.options.fidelity)
    graph, result = run.graph, run.result
    rep = report(graph, result, plan.schedule)
    wall = time.perf_counter() - t0
    tr = training_report(plan, work, graph, result, rep)
    return StrategySimulation(plan, graph, result, rep, tr, wall)
