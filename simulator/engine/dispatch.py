"""Simulation dispatch: the one place that decides which fidelity lowers a schedule, and which
timeline runs it. :func:`run_iteration` lowers a schedule with its cost records, runs the timeline by
the fastest path that gives the reference arrays, and returns one :class:`IterationRun` -- what both
the reports (``simulator.simulation.strategy.simulate_strategy``) and the search
(``simulator.search.evaluate``) read:

* coarse records (one operator per stage, ``taskgraph/coarse.py``): the vectorized block-wise
  layout (``taskgraph/lower_coarse.py``) and the verified static-order sweep
  (``simulator.engine.static_order``; the engine when the check fails). The task graph is built from
  the layout only when a reader asks for it (a search reads the layout's arrays);
* operator records, ``fidelity="operator"``, or a schedule the layout does not cover
  (``taskgraph.lower_coarse.NotCoarse``): ``taskgraph.lower_model.lower_model`` -- per-(stage, pass)
  templates replicated over microbatches -- and the engine (``simulator/engine/core.py``).

When side streams hold SMs (``graph.meta["sm_share"]``), the compute durations are the slowed ones of
``simulator/engine/interference.py`` (the timeline re-run until they satisfy its equation).

Every path returns the arrays ``lower_model(..., templates=False)`` + ``simulate`` would
(``tests/test_search.py``, ``tests/test_lower_templates.py``, ``tests/test_simulate_dispatch.py``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FIDELITIES = ("coarse", "operator")


@dataclass
class IterationRun:
    """One lowered and simulated iteration, whichever fidelity ran.

    work: the cost records (:class:`taskgraph.work.IterationWork`).
    layout: the coarse :class:`taskgraph.lower_coarse.Layout` when the block-wise path ran, else None.
    duration: seconds per task the final timeline ran with (compute slowed beside SM-holding
        communication, ``simulator/engine/interference.py``).
    ready, start, end: per task, seconds; makespan: the latest end.
    timeline: ``"static-order"`` (the verified sweep) or ``"engine"``.
    rounds: timeline runs of the interference fixed point (1 when nothing slows compute).

    The run answers the structural questions a :class:`taskgraph.graph.TaskGraph` does
    (``num_tasks``, ``device``, ``category``, ``succ_ptr`` / ``succ_idx``, ``devices``) from whichever
    it holds; :attr:`graph` and :attr:`result` are the task graph and the engine-shaped result
    (on the coarse path built on first use).
    """

    work: object
    layout: object | None
    duration: np.ndarray
    ready: np.ndarray
    start: np.ndarray
    end: np.ndarray
    makespan: float
    timeline: str
    rounds: int
    _graph: object | None = None
    _result: object | None = None

    @property
    def fidelity(self) -> str:
        """The lowering that ran: ``"coarse"`` (block-wise layout) or ``"operator"``."""
        return "coarse" if self.layout is not None else "operator"

    @property
    def graph(self):
        """The :class:`taskgraph.graph.TaskGraph`, its ``duration`` the slowed durations."""
        if self._graph is None:
            from taskgraph.lower_coarse import graph_from_layout
            self._graph = _finish(graph_from_layout(self.layout, self.work), self.duration, self.rounds)
        return self._graph

    @property
    def result(self):
        """The :class:`simulator.engine.core.SimResult` (a sweep's carries the engine's pop order)."""
        if self._result is None:
            from simulator.engine.static_order import sweep_result
            self._result = sweep_result(self.ready, self.start, self.end)
        return self._result

    @property
    def _tasks(self):
        """The layout, else the graph: both hold the task arrays under the same names."""
        return self.layout if self.layout is not None else self._graph

    @property
    def num_tasks(self) -> int:
        return self.layout.n if self.layout is not None else self._graph.num_tasks

    @property
    def devices(self) -> tuple:
        return self.layout.devices(self.work.represents) if self.layout is not None else self._graph.devices

    device = property(lambda self: self._tasks.device, doc="Per task: its device index.")
    category = property(lambda self: self._tasks.category, doc="Per task: its category code.")
    succ_ptr = property(lambda self: self._tasks.succ_ptr, doc="Successors in CSR form: offsets.")
    succ_idx = property(lambda self: self._tasks.succ_idx, doc="Successors in CSR form: task ids.")


def run_iteration(schedule, work, overlap_handoff: str = "pair-end", fidelity: str | None = None) -> IterationRun:
    """Lower ``schedule`` with cost records ``work`` (a :class:`taskgraph.work.IterationWork`) and
    run its timeline. ``fidelity="operator"`` skips the coarse layout; ``None`` / ``"coarse"`` use it
    when ``work`` is coarse (one operator per stage) and the schedule is one it covers."""
    layout, graph = _lowering(schedule, work, overlap_handoff, fidelity)
    return _run_layout(layout, work) if layout is not None else _run_graph(graph, work)


def lower(schedule, work, overlap_handoff: str = "pair-end", fidelity: str | None = None):
    """The task graph of ``schedule`` with cost records ``work`` (a
    :class:`taskgraph.work.IterationWork`), lowered as :func:`run_iteration` would (no timeline)."""
    layout, graph = _lowering(schedule, work, overlap_handoff, fidelity)
    if layout is None:
        return graph
    from taskgraph.lower_coarse import graph_from_layout
    return graph_from_layout(layout, work)


def lower_and_simulate(schedule, work, overlap_handoff: str = "pair-end", fidelity: str | None = None):
    """``(graph, SimResult)`` of ``lower_model`` + ``simulate`` -- identical arrays -- through
    :func:`run_iteration` (the vectorized coarse lowering and the verified static-order timeline
    when ``work`` is coarse)."""
    run = run_iteration(schedule, work, overlap_handoff, fidelity)
    return run.graph, run.result


def _lowering(schedule, work, overlap_handoff, fidelity):
    """``(layout, None)`` when the coarse layout applies, else ``(None, lower_model's graph)``: the
    fidelity decision."""
    if fidelity is not None and fidelity not in FIDELITIES:
        raise ValueError(f"fidelity = {fidelity!r}; valid: {', '.join(FIDELITIES)}")
    if fidelity != "operator":
        from taskgraph.lower_coarse import NotCoarse, coarse_layout
        try:
            return coarse_layout(schedule, work, overlap_handoff), None
        except NotCoarse:
            pass
    from taskgraph.lower_model import lower_model
    return None, lower_model(schedule, work, overlap_handoff=overlap_handoff)


def _run_layout(layout, work) -> IterationRun:
    """The coarse path: compute slowed beside SM-holding communication by the fixed point of
    :func:`simulator.engine.interference.with_interference`, each run a :class:`_LayoutTimeline`."""
    from simulator.engine.interference import fixed_point
    timeline = _LayoutTimeline(layout, work)
    base = layout.durations(work)
    dur, res, rounds = fixed_point(base, timeline, layout.device, layout.devices(work.represents),
                                   work.meta.get("sm_share", {}), work.meta.get("hbm_loss", {}))
    graph = _finish(timeline.graph, dur, rounds, base) if timeline.graph is not None else None
    makespan = float(res.end.max()) if res.end.size else 0.0
    return IterationRun(work, layout, dur, res.ready, res.start, res.end, makespan,
                        "static-order" if timeline.engine_result is None else "engine", rounds, graph,
                        timeline.engine_result)


class _LayoutTimeline:
    """``timeline(durations)``: the static-order sweep over the layout's cached order, verified to be
    the engine's, else the engine on the layout's graph (built once; later runs change only its
    durations). ``engine_result``: the last run's engine result, None when the sweep gave it."""

    def __init__(self, layout, work):
        from simulator.engine.static_order import layout_order
        self.layout, self.work = layout, work
        self.order = layout_order(layout)
        self.graph = None
        self.engine_result = None

    def __call__(self, dur: np.ndarray):
        from simulator.engine.static_order import static_order_timeline
        swept = static_order_timeline(self.order, dur) if self.order is not None else None
        if swept is not None:
            self.engine_result = None
            return _Swept(*swept)
        from simulator.engine.core import simulate
        if self.graph is None:
            from taskgraph.lower_coarse import graph_from_layout
            self.graph = graph_from_layout(self.layout, self.work)
        self.graph.duration[:] = dur
        self.engine_result = simulate(self.graph)
        return self.engine_result


def _run_graph(graph, work) -> IterationRun:
    """The operator path: the engine, compute slowed beside SM-holding communication (rounds after
    the first re-sweep the previous device order when that is provably the engine's result)."""
    from simulator.engine.core import simulate
    from simulator.engine.interference import with_interference
    res, rounds = with_interference(graph, simulate, resweep=True)
    return IterationRun(work, None, graph.duration, res.ready, res.start, res.end, float(res.makespan), "engine",
                        rounds, graph, res)


@dataclass(frozen=True)
class _Swept:
    """One static-order sweep's arrays (what :func:`simulator.engine.interference.fixed_point` reads)."""

    ready: np.ndarray
    start: np.ndarray
    end: np.ndarray


def _finish(graph, dur: np.ndarray, rounds: int, base: np.ndarray | None = None):
    """``graph`` (built from the layout) with the run's slowed durations, and the fixed point's record
    in its meta (``base``: the durations before slowing, by default the graph's own)."""
    from simulator.engine.interference import record_rounds
    base = graph.duration.copy() if base is None else base
    graph.duration[:] = dur
    record_rounds(graph.meta, base, dur, rounds)
    return graph
