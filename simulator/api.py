"""The public face of execsim for Python users: every entry point, from the room that owns it.

    from simulator.api import simulate_strategy, memory_report, load_strategy
    sim = simulate_strategy(load_strategy("strategies/examples/llama3-8b-8-h100.yaml"))
    print(sim.training.iteration_time_s, memory_report(sim.plan, sim.graph, sim.result).fits)

Nothing inside ``simulator/`` imports this module (tests/test_layout.py): it sits above every room.
The simulation path, the engine and the reports are imported at once; the heavier rooms (outputs
with matplotlib, search with pandas, goodput with SimPy) load on first use of one of their names.
"""
from __future__ import annotations

import importlib

from simulator.engine.core import SimResult, simulate, simulate_arrays
from simulator.engine.dispatch import lower, lower_and_simulate
from simulator.reports.memory import MemoryReport, format_memory_report, memory_report
from simulator.reports.report import CriticalPath, Report, critical_path, format_report, report
from simulator.reports.training import TrainingReport, format_training_report, training_report
from simulator.simulation.estimate import estimate_run_tasks
from simulator.simulation.pipeline import Simulation, pipeline_schedule, simulate_pipeline, with_vpp
from simulator.simulation.strategy import StrategySimulation, simulate_strategy
from simulator.simulation.what_if import WhatIf, parse_what_if, what_if
from strategies.pipeline_file import PipelineSpec, load_pipeline
from strategies.strategy_file import Strategy, example_path, load_strategy

#: name -> module, imported on first use (``from simulator.api import sweep`` works as any import)
_LAZY = {
    "DeltaSimulator": "simulator.engine.delta.simulator",
    "DeltaStats": "simulator.engine.delta.stats",
    "simulate_reference": "simulator.engine.reference_simpy",
    "timeline": "simulator.engine.timeline",
    "memory_curves": "simulator.reports.memory_timeline",
    "time_breakdown": "simulator.reports.breakdown",
    "chrome_trace": "simulator.outputs.trace",
    "write_chrome_trace": "simulator.outputs.trace",
    "write_hta_traces": "simulator.outputs.trace_hta",
    "write_timeline": "simulator.outputs.timeline_export",
    "html_report": "simulator.outputs.html_report",
    "write_html_report": "simulator.outputs.html_report",
    "plot_pipelines": "simulator.outputs.plots",
    "plot_memory": "simulator.outputs.plots",
    "Evaluation": "simulator.search.evaluate",
    "evaluate": "simulator.search.evaluate",
    "vary": "simulator.search.evaluate",
    "grid": "simulator.search.evaluate",
    "sweep": "simulator.search.evaluate",
    "SearchSpace": "simulator.search.space",
    "SearchResult": "simulator.search.strategy_search",
    "search": "simulator.search.strategy_search",
    "plan_recompute": "simulator.search.recompute",
    "setup_from_strategy": "simulator.goodput.setup",
    "goodput_report": "simulator.goodput.report",
    "format_goodput": "simulator.goodput.report",
    "import_strategy": "simulator.simulation.importing",
    "Interval": "simulator.reports.intervals",
    "sim_interval": "simulator.reports.intervals",
    "interval_for": "simulator.reports.intervals",
    "interval_fields": "simulator.reports.interval_fields",
    "memory_margin": "simulator.reports.intervals",
}

__all__ = [
    "CriticalPath",
    "MemoryReport",
    "PipelineSpec",
    "Report",
    "SimResult",
    "Simulation",
    "Strategy",
    "StrategySimulation",
    "TrainingReport",
    "WhatIf",
    "critical_path",
    "estimate_run_tasks",
    "example_path",
    "format_memory_report",
    "format_report",
    "format_training_report",
    "load_pipeline",
    "load_strategy",
    "lower",
    "lower_and_simulate",
    "memory_report",
    "parse_what_if",
    "pipeline_schedule",
    "report",
    "simulate",
    "simulate_arrays",
    "simulate_pipeline",
    "simulate_strategy",
    "training_report",
    "what_if",
    "with_vpp",
]
__all__ += sorted(_LAZY)  # noqa: PLE0605 -- the lazy names, after the eager ones


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'simulator.api' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
