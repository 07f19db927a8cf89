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
