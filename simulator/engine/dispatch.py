"""Simulation dispatch: lower a schedule with its cost records and run the timeline, choosing the
fastest path that gives the reference arrays.

* coarse records (one operator per stage, ``taskgraph/coarse.py``): the vectorized block-wise
  layout (``taskgraph/lower_coarse.py``) and the verified static-order sweep
  (``simulator.engine.static_order.simulate_coarse``; the engine when the check fails);
* operator records: ``taskgraph.lower_model.lower_model`` -- per-(stage, pass) templates replicated
  over microbatches -- and the engine (``simulator/engine/core.py``).

When side streams hold SMs (``graph.meta["sm_share"]``), the compute durations are the slowed ones of
``simulator/engine/interference.py`` (the engine re-run until they satisfy its equation).

Every path returns the arrays ``lower_model(..., templates=False)`` + ``simulate`` would
(``tests/test_search.py``, ``tests/test_lower_templates.py``).
"""
from __future__ import annotations

FIDELITIES = ("coarse", "operator")


def lower(schedule, work, overlap_handoff: str = "pair-end", fidelity: str | None = None):
    """The task graph of ``schedule`` with cost records ``work`` (a
    :class:`taskgraph.plan.IterationWork`). ``fidelity="operator"`` skips the coarse layout attempt;
    ``None`` / ``"coarse"`` use it when ``work`` is coarse."""
    return _lower(schedule, work, overlap_handoff, fidelity)[0]


def lower_and_simulate(schedule, work, overlap_handoff: str = "pair-end", fidelity: str | None = None):
    """``(graph, SimResult)`` of ``lower_model`` + ``simulate`` -- identical arrays -- through the
    vectorized coarse lowering and the verified static-order timeline when ``work`` is coarse."""
    graph, layout = _lower(schedule, work, overlap_handoff, fidelity)
    if layout is not None:
        from simulator.engine.static_order import simulate_coarse
        run = lambda g: simulate_coarse(g, layout)
    else:
        from simulator.engine.core import simulate as run
    # compute beside communication that holds SMs is slowed (taskgraph/overlap.py): the durations
    # that satisfy it, found by re-running the engine (simulator/engine/interference.py; operator
    # graphs re-timed in the previous run's device order when that is provably the engine's result)
    from simulator.engine.interference import with_interference
    return graph, with_interference(graph, run, resweep=layout is None)[0]


def _lower(schedule, work, overlap_handoff, fidelity):
    if fidelity is not None and fidelity not in FIDELITIES:
        raise ValueError(f"fidelity = {fidelity!r}; valid: {', '.join(FIDELITIES)}")
    if fidelity != "operator":
        from taskgraph.lower_coarse import NotCoarse, coarse_layout, graph_from_layout
        try:
            lay = coarse_layout(schedule, work, overlap_handoff)
        except NotCoarse:
            pass
        else:
            return graph_from_layout(lay, work), lay
    from taskgraph.lower_model import lower_model
    return lower_model(schedule, work, overlap_handoff=overlap_handoff), None
