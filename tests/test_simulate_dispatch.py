"""simulator/engine/dispatch.py: each fidelity's path returns the per-task reference's graph and timeline."""
import numpy as np
import pytest

from simulator.engine.core import simulate
from simulator.engine.dispatch import lower, lower_and_simulate
from strategies.schedules import get_schedule
from taskgraph.coarse import coarsen
from taskgraph.lower_model import lower_model
from taskgraph.work import Comm, IterationWork, LayerWork, OpCost, StageWork
from tests.test_lower_templates import assert_same_graph


def _work(stages):
    tp = Comm("tp-comm", "tp-allreduce", 0.5)
    ops = (OpCost("a", 1.0, 1.0, 2.0, fwd_post=(tp,), saved_bytes=8.0), OpCost("b", 2.0, 3.0, 0.0, bwd_pre=(tp,)))
    layers = tuple(LayerWork(f"L{i}", ops) for i in range(3))
    return IterationWork((StageWork(layers),) * stages, 0.1, 0.2)


@pytest.mark.parametrize("fidelity", [None, "coarse", "operator"])
@pytest.mark.parametrize("coarse", [False, True])
def test_every_path_gives_the_reference_arrays(fidelity, coarse):
    sched = get_schedule("1f1b", 2, 4)
    w = coarsen(_work(2)) if coarse else _work(2)
    ref = lower_model(sched, w, templates=False)
    g, r = lower_and_simulate(sched, w, fidelity=fidelity)
    assert_same_graph(ref, g)
    assert_same_graph(ref, lower(sched, w, fidelity=fidelity))
    want = simulate(ref)
    for k in ("ready", "start", "end", "order"):
        assert np.array_equal(getattr(want, k), getattr(r, k)), k
    assert r.makespan == want.makespan


def test_unknown_fidelity_is_named():
    with pytest.raises(ValueError, match="fidelity = 'fast'; valid: coarse, operator"):
        lower(get_schedule("1f1b", 2, 2), _work(2), fidelity="fast")


def _fixed_point_reference(sched, w):
    """lower_model's graph and its interference fixed point run by the engine (the per-task path)."""
    from simulator.engine.interference import with_interference
    ref = lower_model(sched, w, templates=False)
    res, rounds = with_interference(ref, simulate)
    return ref, res, rounds


@pytest.mark.parametrize("meta", [{}, {"sm_share": {"dp": 0.3}}, {"sm_share": {"dp": 0.3}, "hbm_loss": {"dp": 0.2}}])
@pytest.mark.parametrize("fidelity", ["coarse", "operator"])
def test_run_record_holds_the_reference_graph_and_timeline(fidelity, meta):
    """run_iteration's one record, either path, compute slowed beside SM-holding DP buckets or not:
    the graph (slowed durations, the fixed point's meta) and timeline of lower_model + the engine's
    fixed point, and the structure the reports read from it without the graph."""
    from dataclasses import replace

    from simulator.engine.dispatch import run_iteration
    from tests.test_search import coarse_work
    sched = get_schedule("interleaved-1f1b", 2, 4, 2)
    w = coarse_work(sched.num_stages)
    w = replace(w, meta={**w.meta, **meta})
    ref, want, rounds = _fixed_point_reference(sched, w)
    run = run_iteration(sched, w, fidelity=fidelity)
    assert run.fidelity == fidelity and (run.layout is not None) == (fidelity == "coarse")
    assert run.timeline == ("static-order" if fidelity == "coarse" else "engine")
    assert run.rounds == rounds and (rounds > 1) == bool(meta)
    # the structure, read before the graph is built
    assert run.num_tasks == ref.num_tasks and run.devices == ref.devices
    for k in ("device", "category", "succ_ptr", "succ_idx"):
        assert np.array_equal(getattr(run, k), getattr(ref, k)), k
    assert np.array_equal(run.duration, ref.duration)
    for k in ("ready", "start", "end"):
        assert np.array_equal(getattr(run, k), getattr(want, k)), k
    assert run.makespan == want.makespan
    assert_same_graph(ref, run.graph)
    for k in ("ready", "start", "end", "order"):
        assert np.array_equal(getattr(run.result, k), getattr(want, k)), k


def test_run_record_when_the_sweep_is_refused():
    """Zero-time transfers make the static-order check refuse the sweep: the coarse record holds the
    engine's result and the layout's graph."""
    from simulator.engine.dispatch import run_iteration
    from tests.test_search import coarse_work
    sched = get_schedule("1f1b", 4, 8)
    w = coarse_work(sched.num_stages, p2p=(0.0, 0.0))
    run = run_iteration(sched, w)
    assert run.fidelity == "coarse" and run.timeline == "engine"
    ref = lower_model(sched, w, templates=False)
    want = simulate(ref)
    assert_same_graph(ref, run.graph)
    for k in ("ready", "start", "end", "order"):
        assert np.array_equal(getattr(run.result, k), getattr(want, k)), k
