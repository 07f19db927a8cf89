"""The optional compiled kernel (``kernel="numba"``, extra ``fast``) equals the pure-Python engine
(the reference) bit for bit: times, pop order, makespan, deadlock errors."""
import numpy as np
import pytest

from simulator.engine.core import simulate_arrays
from strategies.errors import SimulationError
from taskgraph.graph import csr_from_edges
from tests.test_engine import random_graph

numba = pytest.importorskip("numba", reason="numba not installed: the optional extra 'fast' is absent")


def assert_same(dur, dev, ptr, idx, nd):
    a = simulate_arrays(dur, dev, ptr, idx, nd)
    b = simulate_arrays(dur, dev, ptr, idx, nd, kernel="numba")
    for f in ("ready", "start", "end", "order"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f))
    assert a.order.dtype == b.order.dtype and (a.makespan == b.makespan or np.isnan(a.makespan))


@pytest.mark.parametrize("durations", ["int", "zero", "float", "negative"])
@pytest.mark.parametrize("avg_succ", [0.5, 1.0, 2.5])
def test_numba_kernel_matches_python_on_random_graphs(durations, avg_succ):
    rng = np.random.default_rng(11 + 7 * int(avg_succ * 2) + len(durations))
    for _ in range(30):
        n = int(rng.integers(1, 200))
        nd = int(rng.integers(1, 6))
        assert_same(*random_graph(rng, n, nd, avg_succ, durations), nd)


def test_numba_kernel_matches_python_on_benchmark_shapes():
    from benchmarks.graphs import GENERATORS

    for build in GENERATORS.values():
        g = build(3000, 1)
        assert_same(g.duration, g.device, g.succ_ptr, g.succ_idx, g.num_devices)


def test_numba_kernel_nan_duration_and_rounding():
    ptr, idx = csr_from_edges(4, np.array([2, 1, 3]), np.array([1, 0, 0]))
    for dur in ([1.0, np.nan, 2.0, 0.5], [1.0, 1e-16, 2.0, 0.0]):
        assert_same(np.array(dur), np.zeros(4, dtype=np.int32), ptr, idx, 1)


def test_numba_kernel_deadlock_error_is_the_same():
    ptr, idx = csr_from_edges(3, np.array([0, 1]), np.array([1, 0]))  # 0 <-> 1 cycle, 2 free
    msgs = []
    for kernel in ("python", "numba"):
        with pytest.raises(SimulationError) as exc:
            simulate_arrays(np.ones(3), np.array([0, 1, 0]), ptr, idx, 2, kernel=kernel)
        msgs.append(str(exc.value))
    assert msgs[0] == msgs[1] and "2 of 3 tasks" in msgs[0]


def test_unknown_kernel_is_one_clear_error():
    with pytest.raises(ValueError, match="kernel 'cuda' is not one of 'auto', 'python', 'numba'"):
        simulate_arrays(np.ones(1), np.zeros(1, dtype=np.int32), [0, 0], [], 1, kernel="cuda")


# --------------------------------------------------------------------------------------------------
# The compiled static-order sweep and topological order a search uses (simulator/engine/static_order.py,
# taskgraph/lower_coarse.py) give the Python loops' bits and order.


def _python_topo(monkeypatch, fn, *args):
    import simulator.engine.core as engine
    from taskgraph.compiled import qualified
    monkeypatch.setitem(engine.COMPILED, qualified("kahn_order"), None)  # force the Python loop
    return fn(*args)


def test_compiled_topological_order_matches_python(monkeypatch):
    from taskgraph.lower_coarse import NotCoarse, topo_order
    rng = np.random.default_rng(5)
    for _ in range(200):
        A = int(rng.integers(1, 60))
        preds = []
        for _k in range(3):
            p = np.full(A, -1, dtype=np.int64)
            for v in range(A):
                if rng.random() < 0.6:
                    p[v] = int(rng.integers(0, A))  # a random predecessor: cycles happen
            preds.append(p)
        try:
            fast = topo_order(A, *preds)
        except NotCoarse:
            fast = None
        with monkeypatch.context() as m:
            try:
                slow = _python_topo(m, topo_order, A, *preds)
            except NotCoarse:
                slow = None
        assert (fast is None) == (slow is None)
        if fast is not None:
            np.testing.assert_array_equal(fast, slow)


def test_compiled_static_sweep_matches_python():
    from simulator.engine.dispatch import lower
    from simulator.engine.static_order import layout_order, static_order_timeline
    from strategies.schedules import get_schedule
    from taskgraph.lower_coarse import coarse_layout
    from tests.test_search import SCHEDULE_CASES, WORK_CASES, coarse_work
    rng = np.random.default_rng(3)
    for case in SCHEDULE_CASES:
        sched = get_schedule(*case)
        for kw in WORK_CASES.values():
            w = coarse_work(sched.num_stages, **kw)
            g = lower(sched, w)
            o = layout_order(coarse_layout(sched, w))
            for dur in (g.duration, g.duration * rng.uniform(0.5, 2.0, g.duration.size),
                        np.where(rng.random(g.duration.size) < 0.2, 0.0, g.duration)):
                a = static_order_timeline(o, dur, kernel="python")
                b = static_order_timeline(o, dur)
                assert (a is None) == (b is None), case
                if a is not None:
                    for x, y in zip(a, b):
                        np.testing.assert_array_equal(x, y)
