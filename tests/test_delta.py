"""Delta simulation (simulator/engine/delta/) equals full simulation (simulator/engine/core.py) exactly.

Delta simulation after Jia et al. 2019, "Beyond Data and Model Parallelism for Deep Neural Networks"
(FlexFlow), Section 5.3 "Delta Simulation Algorithm". Every test compares start, end, ready, the
global pop order, each device's FIFO order and the makespan with a full run of the same graph.
No timing assertions (shared, noisy machines): only counts of re-timed tasks.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import simulator.engine.delta.params as delta_mod
from simulator.engine.core import simulate_arrays
from simulator.engine.delta.simulator import DeltaSimulator
from strategies.errors import SimulationError
from taskgraph.graph import Device, TaskGraphBuilder, csr_from_edges


@pytest.fixture(autouse=True, params=["python", "auto"])
def sweep_kernel(request, monkeypatch):
    """Every test runs with the Python sweep (the reference) and with the default, which is the
    compiled sweep of simulator/engine/delta/kernels_numba.py when numba is installed (extra ``fast``)."""
    monkeypatch.setattr(delta_mod, "DEFAULT_KERNEL", request.param)
    return request.param


# ---------------------------------------------------------------------------------------- helpers
def assert_matches_full(ds: DeltaSimulator):
    """The delta state equals a full engine run of the current graph, bit for bit."""
    arrays = ds.graph_arrays()
    full = simulate_arrays(*arrays)
    res = ds.result()
    np.testing.assert_array_equal(res.start, full.start)
    np.testing.assert_array_equal(res.end, full.end)
    np.testing.assert_array_equal(res.ready, full.ready)
    np.testing.assert_array_equal(res.order, full.order)
    assert res.makespan == full.makespan == ds.makespan
    live = ds.live_ids()
    dev = arrays[1]
    for d in range(arrays[4]):
        assert ds.device_order(d) == live[full.order[dev[full.order] == d]].tolist()
    return full


def device_orders(ds: DeltaSimulator) -> dict:
    return {d: ds.device_order(d) for d in range(ds.num_devices)}


def reordered(before: dict, after: dict) -> bool:
    """Did two tasks that stay on one device swap their FIFO order?"""
    for d, old in before.items():
        new = after[d]
        common = set(old) & set(new)
        if [t for t in old if t in common] != [t for t in new if t in common]:
            return True
    return False


def graph_arrays_from(n, nd, edges, dur, dev):
    src = np.array([u for u, _ in edges], dtype=np.int64)
    dst = np.array([v for _, v in edges], dtype=np.int64)
    ptr, idx = csr_from_edges(n, src, dst)
    return np.asarray(dur, dtype=np.float64), np.asarray(dev, dtype=np.int32), ptr, idx, nd


# ------------------------------------------------------------------------------ property test
@st.composite
def graphs(draw):
    n = draw(st.integers(1, 40))
    nd = draw(st.integers(1, 4))
    kind = draw(st.sampled_from(["int", "int", "float", "zero"]))  # integer durations -> ties
    perm = draw(st.permutations(range(n)))  # ids not in topological order: edges go both ways
    p = draw(st.floats(0.0, 0.25))
    rnd = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    edges = [(perm[u], perm[v]) for v in range(n) for u in range(v) if rnd.random() < p]
    if kind == "float":
        dur = rnd.uniform(0.1, 2.0, n)
    else:
        dur = rnd.integers(0 if kind == "zero" else 1, 4, n).astype(float)
    dev = rnd.integers(0, nd, n)
    return kind, graph_arrays_from(n, nd, edges, dur, dev)


def _new_duration(data, kind):
    if kind == "float":
        return data.draw(st.floats(0.05, 3.0))
    return float(data.draw(st.integers(0 if kind == "zero" else 1, 5)))


def _random_change(data, ds: DeltaSimulator, kind: str, nd: int):
    live = ds.live_ids().tolist()
    what = data.draw(st.sampled_from(["dur", "dur", "dev", "replace"]))
    if what == "dur":  # longer or shorter
        ids = data.draw(st.lists(st.sampled_from(live), min_size=1, max_size=3))
        return what, ds.set_durations(ids, [_new_duration(data, kind) for _ in ids])
    if what == "dev":
        ids = data.draw(st.lists(st.sampled_from(live), min_size=1, max_size=3, unique=True))
        return what, ds.set_devices(ids, [data.draw(st.integers(0, nd - 1)) for _ in ids])
    # operator replacement: remove up to 3 tasks, add up to 3 with edges consistent with a topological
    # order of the remaining tasks (so no cycle), optionally chained among themselves
    rem = data.draw(st.lists(st.sampled_from(live), min_size=0, max_size=3, unique=True))
    keep = [t for t in ds.pop_order.tolist() if t not in set(rem)]  # pop order is topological
    k = data.draw(st.integers(0 if rem else 1, 3))
    places = sorted(data.draw(st.integers(0, len(keep))) for _ in range(k))
    edges = []
    for j, place in enumerate(places):
        for q, t in enumerate(keep):
            if data.draw(st.integers(0, 9)) == 0:
                edges.append((t, ~j) if q < place else (~j, t))
        if j and data.draw(st.booleans()):
            edges.append((~(j - 1), ~j))
    durs = [_new_duration(data, kind) for _ in range(k)]
    devs = [data.draw(st.integers(0, nd - 1)) for _ in range(k)]
    return what, ds.replace_tasks(rem, durs, devs, edges, reuse_ids=data.draw(st.booleans()))


@settings(max_examples=1000, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(g=graphs(), data=st.data())
def test_delta_equals_full_after_successive_changes(g, data):
    kind, arrays = g
    small_chunks = data.draw(st.booleans())
    max_work = data.draw(st.one_of(st.none(), st.integers(1, 8)))  # small limits force fallbacks
    old_load = delta_mod.QUEUE_CHUNK
    if small_chunks:
        delta_mod.QUEUE_CHUNK = 2  # exercise chunk splits and chunk boundaries on small graphs
    try:
        ds = DeltaSimulator.from_arrays(*arrays, budget=None, max_work=max_work)
        assert_matches_full(ds)
        for _ in range(data.draw(st.integers(1, 5))):
            if not ds.num_tasks:
                break
            before = device_orders(ds)
            what, stats = _random_change(data, ds, kind, arrays[4])
            assert_matches_full(ds)
            event(f"{what}: {'fallback' if stats.fallback else 'delta'}")
            if reordered(before, device_orders(ds)):
                event("a device's FIFO order changed")
    finally:
        delta_mod.QUEUE_CHUNK = old_load


def test_random_changes_reorder_fifo_queues_and_stay_exact():
    """Deterministic companion of the property test: many changes reorder some device's FIFO queue
    (so that case is exercised, not just possible), and every result is exact."""
    rng = np.random.default_rng(7)
    reorders = deltas = 0
    for _ in range(150):
        n, nd = int(rng.integers(5, 30)), int(rng.integers(1, 4))
        edges = [(u, v) for v in range(n) for u in range(v) if rng.random() < 0.12]
        dur = rng.integers(1, 4, n).astype(float)
        ds = DeltaSimulator.from_arrays(*graph_arrays_from(n, nd, edges, dur, rng.integers(0, nd, n)),
                                        budget=None)
        for _ in range(3):
            before = device_orders(ds)
            t = int(rng.integers(0, n))
            stats = ds.set_durations([t], [float(rng.integers(1, 6))])
            assert_matches_full(ds)
            deltas += not stats.fallback
            reorders += reordered(before, device_orders(ds))
    assert deltas == 450  # positive durations: never a fallback without a budget
    assert reorders >= 20


# --------------------------------------------------------------------------- hand-checked cases
def _builder(ndev=3):
    b = TaskGraphBuilder()
    for i in range(ndev):
        b.add_device(Device(f"rank{i}/compute", i, "compute"))
    return b


def test_duration_change_hand_checked():
    # device 0: A (id 0, 2 s) and B (id 1, 1 s), both ready at 0 -> A first (lower id), B waits.
    b = _builder(1)
    a = b.add_task(2.0, 0, "forward")
    bb = b.add_task(1.0, 0, "forward")
    ds = DeltaSimulator(b.build(), budget=None)
    assert ds.start.tolist() == [0.0, 2.0]
    stats = ds.set_durations([a], [5.0])
    assert ds.start.tolist() == [0.0, 5.0] and ds.end.tolist() == [5.0, 6.0]
    assert ds.makespan == 6.0
    assert stats.retimed == 2 and stats.changed == 2 and not stats.fallback
    assert ds.device_order(0) == [a, bb]
    assert_matches_full(ds)


def test_fifo_reorder_hand_checked():
    # P (dev 1, 1 s) -> X (dev 0, 2 s);  Q (dev 2, 2 s) -> Y (dev 0, 2 s).
    # Before: X ready 1, Y ready 2 -> dev 0 runs X [1, 3], Y [3, 5].
    # P becomes 3 s long: X ready 3, Y ready 2 -> dev 0 runs Y [2, 4], X [4, 6] (the queue reorders).
    b = _builder(3)
    p = b.add_task(1.0, 1, "forward")
    x = b.add_task(2.0, 0, "forward")
    q = b.add_task(2.0, 2, "forward")
    y = b.add_task(2.0, 0, "forward")
    b.add_edge(p, x)
    b.add_edge(q, y)
    ds = DeltaSimulator(b.build(), budget=None)
    assert ds.device_order(0) == [x, y]
    assert (ds.start[x], ds.start[y]) == (1.0, 3.0)
    stats = ds.set_durations([p], [3.0])
    assert ds.device_order(0) == [y, x]
    assert (ds.start[y], ds.end[y], ds.start[x], ds.end[x]) == (2.0, 4.0, 4.0, 6.0)
    assert ds.pop_order.tolist() == [p, q, y, x]
    assert stats.moved >= 1 and not stats.fallback
    assert_matches_full(ds)
    # and back: the queue reorders again
    ds.set_durations([p], [1.0])
    assert ds.device_order(0) == [x, y]
    assert_matches_full(ds)


def test_device_move_hand_checked():
    # A, B, C on dev 0 (1 s each, no edges): [0,1], [1,2], [2,3]. Move B to dev 1: B [0,1], C [1,2].
    b = _builder(2)
    ids = [b.add_task(1.0, 0, "forward") for _ in range(3)]
    ds = DeltaSimulator(b.build(), budget=None)
    stats = ds.set_devices([ids[1]], [1])
    assert ds.start.tolist() == [0.0, 0.0, 1.0]
    assert ds.device_order(0) == [ids[0], ids[2]] and ds.device_order(1) == [ids[1]]
    assert stats.moved == 1 and stats.changed == 2
    assert_matches_full(ds)


def _chain_abc():
    """Chain A (dev 0, 1 s) -> B (dev 0, 2 s) -> C (dev 1, 1 s): (simulator, a, b, c)."""
    b = _builder(2)
    a = b.add_task(1.0, 0, "forward")
    bb = b.add_task(2.0, 0, "forward")
    c = b.add_task(1.0, 1, "forward")
    b.add_edge(a, bb)
    b.add_edge(bb, c)
    return DeltaSimulator(b.build(), budget=None), a, bb, c


def test_replace_tasks_split_hand_checked():
    # chain A -> B -> C (_chain_abc); split B into B1, B2 (1.5 s each).
    ds, a, bb, c = _chain_abc()
    assert ds.end[c] == 4.0
    stats = ds.replace_tasks([bb], [1.5, 1.5], [0, 0], [(a, ~0), (~0, ~1), (~1, c)])
    b1, b2 = stats.new_ids
    assert b1 == bb and b2 == 3  # the removed id is reused, the second new task gets a new id
    assert (ds.start[b1], ds.start[b2], ds.start[c], ds.end[c]) == (1.0, 2.5, 4.0, 5.0)
    assert ds.num_tasks == 4 and stats.removed == 1 and not stats.fallback
    assert_matches_full(ds)
    # back to one task, without id reuse: ids 1 and 3 become tombstones, compact numbering kept
    stats = ds.replace_tasks([b1, b2], [2.0], [0], [(a, ~0), (~0, c)], reuse_ids=False)
    assert stats.new_ids == (4,)
    assert not ds.alive(1) and not ds.alive(3) and np.isnan(ds.start[1])
    assert ds.live_ids().tolist() == [0, 2, 4]
    assert ds.end[c] == 4.0
    assert_matches_full(ds)


def test_replace_tasks_grows_the_state_past_a_view_left_in_a_reference_cycle():
    # numba leaves the numpy view of a state array it was called with in a reference cycle when the
    # kernel compiles on that call (empty numba cache: CI); growing the array then raised BufferError
    import gc
    ds, a, bb, c = _chain_abc()
    gc.disable()
    try:
        cycle = [np.frombuffer(ds._lk, dtype=np.float64), np.frombuffer(ds._R, dtype=np.float64)]
        cycle.append(cycle)
        del cycle  # unreachable, alive until the collector runs
        stats = ds.replace_tasks([bb], [1.5, 1.5], [0, 0], [(a, ~0), (~0, ~1), (~1, c)])
    finally:
        gc.enable()
    assert stats.new_ids == (bb, 3) and ds.end[c] == 5.0
    assert_matches_full(ds)


def test_replace_tasks_remove_edges_and_add_program_order():
    b = _builder(2)
    t = [b.add_task(1.0, i % 2, "forward") for i in range(4)]
    b.add_edge(t[0], t[1])
    b.add_edge(t[1], t[2])
    ds = DeltaSimulator(b.build(), budget=None)
    ds.replace_tasks([], edges=[(t[2], t[3])], remove_edges=[(t[1], t[2])])
    assert ds.predecessors(t[2]) == [] and ds.successors(t[2]) == [t[3]]
    assert_matches_full(ds)
    with pytest.raises(ValueError):
        ds.replace_tasks([], remove_edges=[(t[0], t[3])])  # no such edge
    assert_matches_full(ds)


def test_change_absorbed_by_slack_retimes_few_tasks():
    # a long 1F1B-like chain on three devices plus a side task with lots of slack
    b = _builder(3)
    chain = [b.add_task(1.0, i % 3, "forward") for i in range(3000)]
    for u, v in itertools.pairwise(chain):
        b.add_edge(u, v)
    side = b.add_task(1.0, 2, "forward")  # ready at 0 on dev 2, which is idle until chain[2] at 2
    b.add_edge(side, chain[2])
    ds = DeltaSimulator(b.build(), budget=None)
    stats = ds.set_durations([side], [1.5])  # still ends before chain[2] becomes ready
    assert not stats.fallback and stats.retimed <= 3 and stats.changed == 1
    assert_matches_full(ds)
    # a change on the critical path moves everything after it: all tasks re-timed, still exact
    stats = ds.set_durations([chain[10]], [2.0])
    assert stats.changed == 2990 and not stats.fallback
    assert_matches_full(ds)


def test_zero_duration_tie_is_non_canonical_and_falls_back():
    # u (id 1, 0 s, dev 0) -> v (id 0, 0 s, dev 1): both ready at 0, the engine pops 1 before 0 even
    # though key (0, 0) < (0, 1): the pop order is not (ready, id)-sorted.
    arrays = graph_arrays_from(3, 2, [(1, 0)], [0.0, 0.0, 1.0], [1, 0, 1])
    ds = DeltaSimulator.from_arrays(*arrays, budget=None)
    assert not ds.canonical
    assert ds.pop_order.tolist() == simulate_arrays(*arrays).order.tolist()
    stats = ds.set_durations([2], [2.0])
    assert stats.fallback and "canonical" in stats.reason
    assert_matches_full(ds)


def test_zero_duration_change_that_creates_a_tie_falls_back():
    # canonical at first (task 1 takes 1 s); making it 0 s creates the backward tie 1 -> 0
    arrays = graph_arrays_from(3, 2, [(1, 0)], [0.0, 1.0, 1.0], [1, 0, 1])
    ds = DeltaSimulator.from_arrays(*arrays, budget=None)
    assert ds.canonical
    stats = ds.set_durations([1], [0.0])
    assert stats.fallback and "zero-duration" in stats.reason
    assert not ds.canonical
    assert_matches_full(ds)
    stats = ds.set_durations([1], [1.0])  # fallback again (not canonical before), canonical after
    assert stats.fallback and ds.canonical
    assert_matches_full(ds)


def test_work_limit_and_budget_fall_back_exactly():
    b = _builder(2)
    chain = [b.add_task(1.0, i % 2, "forward") for i in range(500)]
    for u, v in itertools.pairwise(chain):
        b.add_edge(u, v)
    g = b.build()
    ds = DeltaSimulator(g, budget=None, max_work=10)
    stats = ds.set_durations([chain[0]], [3.0])
    assert stats.fallback and "work limit" in stats.reason and stats.retimed == 500
    assert stats.resumed == 0  # ~all tasks lie after the sweep point: a plain full run is cheaper
    assert stats.changed == 500
    assert_matches_full(ds)
    ds = DeltaSimulator(g, budget=0.0)  # no time at all: gives up at the first check (32 events)
    stats = ds.set_durations([chain[0]], [3.0])
    assert stats.fallback and "time budget" in stats.reason
    assert_matches_full(ds)
    stats = ds.set_durations([chain[-1]], [2.0])  # a small change still fits before the first check
    assert not stats.fallback and stats.retimed == 1
    assert_matches_full(ds)


def test_cycle_raises_and_poisons():
    b = _builder(1)
    x = b.add_task(1.0, 0, "forward")
    y = b.add_task(1.0, 0, "forward")
    b.add_edge(x, y)
    ds = DeltaSimulator(b.build(), budget=None)
    with pytest.raises(SimulationError):
        ds.replace_tasks([], edges=[(y, x)])
    with pytest.raises(SimulationError):
        _ = ds.start


def test_cycle_after_the_sweep_point_raises_and_poisons(monkeypatch):
    """A work-limited sweep on a change that closes a cycle resumes the engine, which meets the
    cycle: the full run then raises the usual error and the simulator stays poisoned."""
    monkeypatch.setattr(delta_mod, "RESUME_MAX_SHARE", 1.0)
    b = _builder(2)
    chain = [b.add_task(1.0, i % 2, "forward") for i in range(40)]
    for u, v in itertools.pairwise(chain):
        b.add_edge(u, v)
    ds = DeltaSimulator(b.build(), budget=None, max_work=3)
    with pytest.raises(SimulationError, match="stuck"):
        ds.replace_tasks([], edges=[(chain[-1], chain[20])])
    with pytest.raises(SimulationError):
        _ = ds.start


def test_invalid_changes_leave_state_untouched():
    b = _builder(2)
    x = b.add_task(1.0, 0, "forward")
    ds = DeltaSimulator(b.build(), budget=None)
    with pytest.raises(ValueError):
        ds.set_durations([x], [-1.0])
    with pytest.raises(ValueError):
        ds.set_durations([x], [float("nan")])
    with pytest.raises(ValueError):
        ds.set_durations([5], [1.0])
    with pytest.raises(ValueError):
        ds.set_devices([x], [7])
    with pytest.raises(ValueError):
        ds.replace_tasks([x], [1.0], [0], [(x, ~0)])  # a removed task cannot get an edge
    with pytest.raises(ValueError):
        ds.replace_tasks([], [1.0], [0], [(~3, x)])  # no such new task
    assert ds.end.tolist() == [1.0] and ds.num_tasks == 1
    assert_matches_full(ds)
    first = ds.add_devices(2)
    assert first == 2 and ds.num_devices == 4
    ds.set_devices([x], [3])
    assert ds.device_order(3) == [x]
    assert_matches_full(ds)


def test_empty_graph_and_removing_everything():
    ds = DeltaSimulator.from_arrays(np.zeros(0), np.zeros(0, np.int32), np.zeros(1, np.int64),
                                    np.zeros(0, np.int32), 1)
    assert ds.makespan == 0.0 and ds.num_tasks == 0
    stats = ds.replace_tasks([], [2.0], [0])
    assert stats.new_ids == (0,) and ds.makespan == 2.0
    assert_matches_full(ds)
    ds.replace_tasks([0])
    assert ds.num_tasks == 0 and ds.makespan == 0.0
    assert_matches_full(ds)


def test_benchmark_graph_changes_are_exact():
    bench = pytest.importorskip("benchmarks.delta")
    _g, _, rows = bench.run(tasks=3000, ranks=4, ops=4, reps=1, check=True)  # asserts exactness
    assert {r["change"] for r in rows} >= {"early slack", "middle crit+", "late split", "late dp"}


# ------------------------------------------------------------- durations lost to rounding (issue 16)
def test_positive_duration_lost_to_rounding_falls_back_exactly():
    # chain 2 -> 1 -> 0 on one device: 2.0 + 1e-16 == 2.0, so task 1 (1e-16 s > 0) ends when it starts
    # and edge 1 -> 0 ties backwards in (ready, id) order; the engine pops 2, 1, 0.
    arrays = graph_arrays_from(3, 1, [(2, 1), (1, 0)], [2.0, 1e-16, 1.0], [0, 0, 0])
    ds = DeltaSimulator.from_arrays(*arrays, budget=None)
    assert not ds.canonical
    assert ds.pop_order.tolist() == [2, 1, 0]
    stats = ds.set_durations([1], [1.0])
    assert stats.fallback and "rounding" in stats.reason
    assert ds.makespan == 4.0  # was 5.0 before the fix
    assert_matches_full(ds)


def test_change_that_loses_a_duration_to_rounding_falls_back():
    # canonical at first (task 1 takes 1 s); 1e-16 s after a 2 s task is lost to rounding
    arrays = graph_arrays_from(3, 1, [(2, 1), (1, 0)], [2.0, 1.0, 1.0], [0, 0, 0])
    ds = DeltaSimulator.from_arrays(*arrays, budget=None)
    assert ds.canonical
    stats = ds.set_durations([1], [1e-16])
    assert stats.fallback and stats.reason.startswith("positive duration lost to rounding")
    assert ds.makespan == 3.0 and not ds.canonical
    assert_matches_full(ds)


def test_rounding_and_zero_duration_campaign_subset():
    """Fast, derandomized subset of ``python -m benchmarks.delta`` (10,000 graphs there): zero and
    rounding-level durations, 3 changes per graph, every result equal to a full run. Before the fix,
    2,000 graphs of this campaign gave 326 wrong answers and 5 IndexErrors."""
    from benchmarks.delta import rounding_campaign

    c = rounding_campaign(300, seed=1)
    assert c["mismatches"] == 0 and c["errors"] == 0
    assert c["changes"] == 900
    assert c["deltas"] > 300  # most changes are still incremental
    assert c["fallbacks"].get("positive duration lost to rounding", 0) > 0  # the new guard is exercised


def test_work_limit_resumes_the_engine_from_the_sweep_point(monkeypatch):
    monkeypatch.setattr(delta_mod, "RESUME_MAX_SHARE", 1.0)  # resume whatever the share
    b = _builder(2)
    chain = [b.add_task(1.0, i % 2, "forward") for i in range(500)]
    for u, v in itertools.pairwise(chain):
        b.add_edge(u, v)
    ds = DeltaSimulator(b.build(), budget=None, max_work=10)
    stats = ds.set_durations([chain[0]], [3.0])
    # 10 events of work (tasks processed or moved out of a queue) -> at most 10 tasks kept from the
    # sweep; the engine re-ran the rest from the sweep point
    assert stats.fallback and 490 <= stats.resumed < 500 and stats.retimed == 500 and stats.changed == 500
    assert f"resumed from the sweep point ({stats.resumed} of 500" in stats.reason
    assert_matches_full(ds)
    assert ds.end[chain[-1]] == 502.0  # 2 s later than before, hand-computed


def test_resumed_fallbacks_equal_full_runs(monkeypatch):
    """A sweep stopped by its work limit hands the tasks after the sweep point to the engine
    (``DeltaStats.resumed``); the result is the full run's, bit for bit, on random graphs with
    duration and device changes (positive durations: the resume applies; the property test above
    covers zero durations and structural changes)."""
    monkeypatch.setattr(delta_mod, "RESUME_MAX_SHARE", 1.0)  # resume whatever the share
    rng = np.random.default_rng(1)
    resumed = 0
    for _ in range(300):
        n, nd = int(rng.integers(2, 50)), int(rng.integers(1, 5))
        edges = [(u, v) for v in range(n) for u in range(v) if rng.random() < 0.1]
        dur = rng.integers(1, 5, n).astype(float) * rng.choice([1.0, 0.1, 1e-3])
        ds = DeltaSimulator.from_arrays(*graph_arrays_from(n, nd, edges, dur, rng.integers(0, nd, n)),
                                        budget=None, max_work=int(rng.integers(1, 6)))
        for _ in range(3):
            t = int(rng.integers(0, n))
            if rng.random() < 0.5:
                stats = ds.set_durations([t], [float(rng.integers(1, 9)) * 0.5])
            else:
                stats = ds.set_devices([t], [int(rng.integers(0, nd))])
            assert_matches_full(ds)
            resumed += stats.resumed > 0
    assert resumed >= 200


def test_resumed_fallbacks_with_structural_changes_equal_full_runs(monkeypatch):
    """The resume patches the delta state in place (queues cut at the sweep point, the resumed tasks
    appended): later changes on that state, including task replacements (new ids, tombstones, new
    edges), still equal full runs bit for bit."""
    monkeypatch.setattr(delta_mod, "RESUME_MAX_SHARE", 1.0)
    rng = np.random.default_rng(7)
    resumed = 0
    for _ in range(150):
        n, nd = int(rng.integers(4, 40)), int(rng.integers(1, 4))
        edges = [(u, v) for v in range(n) for u in range(v) if rng.random() < 0.12]
        dur = rng.integers(1, 6, n).astype(float)
        ds = DeltaSimulator.from_arrays(*graph_arrays_from(n, nd, edges, dur, rng.integers(0, nd, n)),
                                        budget=None, max_work=int(rng.integers(1, 5)))
        for _ in range(4):
            live = ds.live_ids().tolist()
            t = int(rng.choice(live))
            kind = rng.random()
            if kind < 0.4:  # split t into two tasks in a chain (FlexFlow's operator replacement)
                preds, succs, d = ds.predecessors(t), ds.successors(t), ds._device_of[t]
                e = [(u, ~0) for u in preds] + [(~0, ~1)] + [(~1, v) for v in succs]
                stats = ds.replace_tasks([t], [1.5, 2.5], [d, int(rng.integers(0, nd))], e)
            elif kind < 0.6 and len(live) > 2:  # remove t
                stats = ds.replace_tasks([t])
            elif kind < 0.8:
                stats = ds.set_durations([t], [float(rng.integers(1, 9))])
            else:
                stats = ds.set_devices([t], [int(rng.integers(0, nd))])
            assert_matches_full(ds)
            resumed += stats.resumed > 0
    assert resumed >= 100


def test_sweep_hands_over_when_the_resumed_engine_is_cheaper(monkeypatch):
    """The cost-model rule (ski rental, RESUME_RACE): with a race share of 0 the sweep gives up at
    its first deadline check (32 events) and the engine resumes from that point; the result is the
    full run's and the reason names the estimate."""
    monkeypatch.setattr(delta_mod, "RESUME_RACE", 0.0)
    monkeypatch.setattr(delta_mod, "RESUME_MAX_SHARE", 1.0)
    b = _builder(2)
    chain = [b.add_task(1.0, i % 2, "forward") for i in range(400)]
    for u, v in itertools.pairwise(chain):
        b.add_edge(u, v)
    ds = DeltaSimulator(b.build(), budget=1e9)
    stats = ds.set_durations([chain[100]], [2.0])
    assert stats.fallback and stats.resumed > 0 and "the engine is expected to take" in stats.reason
    assert stats.retimed == 300 and stats.changed == 300
    assert_matches_full(ds)
    assert ds.end[chain[-1]] == 401.0  # 1 s later than before, hand-computed
    stats = ds.set_durations([chain[-1]], [3.0])  # a small change finishes before the first check
    assert not stats.fallback and stats.retimed == 1
    assert_matches_full(ds)


def test_race_hand_overs_equal_full_runs(monkeypatch):
    """With RESUME_RACE = 0 every sweep that reaches its first deadline check (32 events) hands over
    to the resumed engine at that point: on random graphs with duration, device and structural
    changes, every result still equals a full run bit for bit."""
    monkeypatch.setattr(delta_mod, "RESUME_RACE", 0.0)
    monkeypatch.setattr(delta_mod, "RESUME_MAX_SHARE", 1.0)
    rng = np.random.default_rng(11)
    handed = 0
    for _ in range(40):
        n, nd = int(rng.integers(60, 160)), int(rng.integers(1, 5))
        edges = [(u, v) for v in range(n) for u in range(max(0, v - 12), v) if rng.random() < 0.2]
        dur = rng.uniform(0.5, 2.0, n)
        ds = DeltaSimulator.from_arrays(*graph_arrays_from(n, nd, edges, dur, rng.integers(0, nd, n)),
                                        budget=1e9)
        for _ in range(4):
            t = int(rng.choice(ds.live_ids()))
            kind = rng.random()
            if kind < 0.3:
                preds, succs, d = ds.predecessors(t), ds.successors(t), ds._device_of[t]
                e = [(u, ~0) for u in preds] + [(~0, ~1)] + [(~1, v) for v in succs]
                stats = ds.replace_tasks([t], [0.7, 0.9], [d, int(rng.integers(0, nd))], e)
            elif kind < 0.7:
                stats = ds.set_durations([t], [float(rng.uniform(0.5, 4.0))])
            else:
                stats = ds.set_devices([t], [int(rng.integers(0, nd))])
            assert_matches_full(ds)
            handed += "expected to take" in stats.reason
    assert handed >= 20, handed


# ------------------------------------------- zero durations: compiled sweep and resume (issue 30)
@st.composite
def zero_graphs(draw):
    """Graphs with many zero durations whose ids mostly follow a topological order (so most
    timelines are canonical and the guarded sweep and its resume run, as on real lowered graphs)."""
    n = draw(st.integers(2, 40))
    nd = draw(st.integers(1, 4))
    rnd = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    perm = rnd.permutation(n) if draw(st.integers(0, 3)) == 0 else np.arange(n)
    p = draw(st.floats(0.02, 0.3))
    edges = [(int(perm[u]), int(perm[v])) for v in range(n) for u in range(v) if rnd.random() < p]
    dur = rnd.choice([0.0, 0.0, 1.0, 2.0, 3.0], n)
    return graph_arrays_from(n, nd, edges, dur, rnd.integers(0, nd, n))


@settings(max_examples=400, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])  # the monkeypatch is a constant
@given(arrays=zero_graphs(), data=st.data())
def test_zero_duration_sweeps_and_resumes_equal_full_runs(arrays, data, monkeypatch):
    """With zero durations the sweep runs with its guards (compiled too) and a sweep stopped by its
    work limit resumes the engine from the sweep point after checking the guarded prefix: every
    result equals a full run, bit for bit (times, pop order, device orders, makespan)."""
    monkeypatch.setattr(delta_mod, "RESUME_MAX_SHARE", 1.0)  # resume whatever the share
    max_work = data.draw(st.one_of(st.none(), st.integers(1, 6)))
    ds = DeltaSimulator.from_arrays(*arrays, budget=None, max_work=max_work)
    n, nd = len(arrays[0]), arrays[4]
    for _ in range(data.draw(st.integers(1, 5))):
        t = data.draw(st.integers(0, n - 1))
        if data.draw(st.integers(0, 3)):
            stats = ds.set_durations([t], [float(data.draw(st.sampled_from([0, 0, 1, 2, 3, 4])))])
        else:
            stats = ds.set_devices([t], [data.draw(st.integers(0, nd - 1))])
        assert_matches_full(ds)
        event("resumed" if stats.resumed else ("fallback" if stats.fallback else "delta"))


def test_zero_duration_resumes_happen_and_stay_exact(monkeypatch):
    """Derandomized companion of the property test: on graphs with zero durations, work-limited
    sweeps resume the engine (with the guards) and every result equals a full run."""
    monkeypatch.setattr(delta_mod, "RESUME_MAX_SHARE", 1.0)
    rng = np.random.default_rng(5)
    resumed = 0
    for _ in range(300):
        n, nd = int(rng.integers(2, 30)), int(rng.integers(1, 4))
        edges = [(u, v) for v in range(n) for u in range(v) if rng.random() < 0.15]
        dur = rng.choice([0.0, 0.0, 1.0, 2.0, 3.0], n)
        ds = DeltaSimulator.from_arrays(*graph_arrays_from(n, nd, edges, dur, rng.integers(0, nd, n)),
                                        budget=None, max_work=int(rng.integers(1, 6)))
        for _ in range(4):
            t = int(rng.integers(0, n))
            if rng.random() < 0.7:
                stats = ds.set_durations([t], [float(rng.choice([0.0, 1.0, 2.0, 3.0]))])
            else:
                stats = ds.set_devices([t], [int(rng.integers(0, nd))])
            resumed += stats.resumed > 0 and ds._zero_durations > 0
            assert_matches_full(ds)
    assert resumed >= 100, resumed


# a graph found by a 15,000-change campaign (zero and rounding-level durations, work limits): at the
# third change the guarded sweep stops with a task behind its sweep point still dirty
_PREFIX_EDGES = ("4-22 21-22 27-22 30-22 30-19 32-14 14-17 20-9 27-9 17-9 27-12 31-7 21-7 27-7 32-26 1-26 "
                 "17-26 9-26 0-26 10-3 27-3 27-18 26-18 4-33 19-33 9-33 3-33 20-2 32-2 19-2 17-2 9-2 10-8 "
                 "32-8 22-8 5-8 3-8 10-25 1-25 17-25 0-25 7-24 26-24 31-29 4-29 14-29 17-29 18-29 27-6 "
                 "0-6 7-6 2-6 21-28 0-28 12-28 18-28 32-35 5-35 3-35 33-35 8-35 6-35 10-23 4-23 21-23 "
                 "22-23 14-23 4-15 21-15 19-15 18-15 10-34 32-34 27-34 17-34 12-34 7-34 8-34 24-34 29-34 "
                 "6-34 35-34 15-34 1-13 19-13 14-13 5-13 26-13 25-13 30-16 19-16 12-16 7-16 33-16 2-16 "
                 "6-16 35-16 23-16 15-16 20-11 4-11 9-11 26-11 3-11 25-11 6-11")
_PREFIX_DUR = [5e-324, 0, 2, 2, 0, 3, 3, 0, 1e-16, 3, 2, 3, 1e-16, 2, 1e-16, 3, 1e-16, 0, 2, 0, 1e-16, 0,
               0, 3, 2, 1e-16, 2, 0, 1, 0, 1, 0, 1e-16, 1, 2, 0]
_PREFIX_DEV = [1, 0, 0, 1, 1, 0, 0, 0, 1, 1, 1, 0, 0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1, 0, 1, 1,
               0, 0, 1, 1, 0, 1]


def test_guarded_resume_checks_its_prefix(monkeypatch):
    """The resume after a guarded sweep checks that the tasks up to the sweep point are final; here
    the check rejects the resume (the plain full run is used, exact), and without the check the
    resumed result would be wrong (so the check is needed, not vacuous)."""
    from simulator.engine.delta.resume import ResumeMixin

    monkeypatch.setattr(delta_mod, "RESUME_MAX_SHARE", 1.0)
    edges = [tuple(map(int, e.split("-"))) for e in _PREFIX_EDGES.split()]
    arrays = graph_arrays_from(36, 2, edges, _PREFIX_DUR, _PREFIX_DEV)

    def run():
        ds = DeltaSimulator.from_arrays(*arrays, budget=None, max_work=5)
        ds.set_devices([33], [0])
        ds.set_durations([35], [0.0])
        return ds, ds.set_durations([3], [0.0])

    ds, stats = run()
    assert stats.fallback and not stats.resumed and "at or before the sweep point" in stats.reason
    assert_matches_full(ds)
    monkeypatch.setattr(ResumeMixin, "_guarded_prefix_ok", lambda self, *a: True)
    ds, stats = run()
    assert stats.resumed
    full, res = simulate_arrays(*ds.graph_arrays()), ds.result()
    assert not (np.array_equal(res.end, full.end) and np.array_equal(res.order, full.order))


def test_zero_duration_chain_takes_the_sweep_hand_checked():
    # chain 0 -> 1 -> 2 on one device, durations [1, 0, 1]: task 1 ends when it starts, and task 2 is
    # ready then with a higher id, key (1.0, 2) > (1.0, 1): the edge goes forward, canonical
    arrays = graph_arrays_from(3, 1, [(0, 1), (1, 2)], [1.0, 0.0, 1.0], [0, 0, 0])
    ds = DeltaSimulator.from_arrays(*arrays, budget=None)
    assert ds.canonical and ds._zero_durations == 1
    stats = ds.set_durations([0], [2.0])
    assert not stats.fallback and stats.retimed == 3  # the guarded sweep, no full run
    assert ds.end.tolist() == [2.0, 2.0, 3.0] and ds.ready.tolist() == [0.0, 2.0, 2.0]
    assert_matches_full(ds)


def test_full_runs_use_the_engine_of_the_sweep(sweep_kernel):
    """A DeltaSimulator with the Python sweep falls back to the Python engine; the default runs the
    compiled engine when the compiled sweep is in use (numba installed)."""
    arrays = graph_arrays_from(2, 1, [(0, 1)], [1.0, 2.0], [0, 0])
    ds = DeltaSimulator.from_arrays(*arrays)
    assert ds._engine == ("python" if ds._kernels is None else "numba")
    if sweep_kernel == "python":
        assert ds._engine == "python"


def _chain_sim(n=400):
    b = _builder(2)
    chain = [b.add_task(1.0, i % 2, "forward") for i in range(n)]
    for u, v in itertools.pairwise(chain):
        b.add_edge(u, v)
    return chain, DeltaSimulator(b.build())


def test_pace_rule_of_either_sweep_gives_up_and_stays_exact(monkeypatch):
    """The pace rule applies to the Python sweep too (its threshold params.PACE_ABORT_PYTHON): with the
    alternatives' cost model set near zero, the first deadline check finds the pace slower and gives
    up there; the engine resumes from the sweep point and the result is the full run's."""
    monkeypatch.setattr(delta_mod, "STATIC_RESWEEP", False)  # the ordinary sweep's rule, not the static one
    monkeypatch.setattr(delta_mod, "PACE_MIN_SWEPT", 1)
    monkeypatch.setattr(delta_mod, "PACE_MIN_ALT", 0.0)
    monkeypatch.setattr(delta_mod, "RESUME_MAX_SHARE", 1.0)
    chain, ds = _chain_sim()
    ds._cost.full_run_s, ds._cost.resume_fixed_s, ds._cost.resume_per_task_s = 1e-9, 1e-12, 1e-15  # every alternative "free"
    stats = ds.set_durations([chain[0]], [2.0])
    assert stats.fallback and "at that pace" in stats.reason and stats.resumed > 0
    assert_matches_full(ds)
    assert ds.end[chain[-1]] == 401.0  # hand-computed: the chain ends 1 s later


def test_pace_rule_below_its_threshold_lets_the_sweep_finish(monkeypatch):
    """The pace rule refuses to give up while the pace is below the threshold (here: any pace), even
    though the alternative's model says it is cheaper: the sweep re-times the whole chain itself,
    checking again every 32 events, and equals the full run."""
    monkeypatch.setattr(delta_mod, "PACE_MIN_SWEPT", 1)
    monkeypatch.setattr(delta_mod, "PACE_MIN_ALT", 0.0)
    monkeypatch.setattr(delta_mod, "PACE_ABORT", 1e300)
    monkeypatch.setattr(delta_mod, "PACE_ABORT_PYTHON", 1e300)
    chain, ds = _chain_sim()
    ds._cost.full_run_s, ds._cost.resume_fixed_s, ds._cost.resume_per_task_s = 1e3, 1e-12, 1e-15  # the resume "free", a full run dear
    stats = ds.set_durations([chain[0]], [2.0])
    assert not stats.fallback and stats.retimed == 400 and stats.changed == 400
    assert_matches_full(ds)
    assert ds.end[chain[-1]] == 401.0


# ------------------------------------- the Python path's numpy bookkeeping (params.VECTOR_MIN, issue 30)
@settings(max_examples=200, deadline=None)
@given(arrays=zero_graphs(), data=st.data())
def test_first_backward_edge_equals_the_loop(arrays, data):
    """sweep.first_backward_edge (numpy) finds the edge the loop over the CSR rows finds first: a
    task's successors, then its predecessors, tasks in the given order; ready times with many ties."""
    from simulator.engine.delta.queues import gather_rows
    from simulator.engine.delta.sweep import first_backward_edge

    dur, _dev, ptr, idx, _nd = arrays
    n = len(dur)
    R = np.array(data.draw(st.lists(st.sampled_from([0.0, 1.0, 2.0]), min_size=n, max_size=n)))
    tasks = np.array(data.draw(st.lists(st.integers(0, n - 1), max_size=2 * n)), dtype=np.int64)
    rows, src = gather_rows(ptr, idx, np.arange(n, dtype=np.int64))
    order = np.argsort(src, kind="stable")
    pptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=pptr[1:])
    pidx = rows[order]
    want = None
    for x in tasks.tolist():
        for v in idx[ptr[x]:ptr[x + 1]].tolist():
            if R[v] < R[x] or (R[v] == R[x] and v < x):
                want = (x, v)
                break
        if want is None:
            for u in pidx[pptr[x]:pptr[x + 1]].tolist():
                if R[x] < R[u] or (R[x] == R[u] and x < u):
                    want = (u, x)
                    break
        if want is not None:
            break
    assert first_backward_edge(tasks, R, ptr, idx, pptr, pidx) == want


def test_vectorized_bookkeeping_refuses_a_backward_tie_and_falls_back(monkeypatch, sweep_kernel):
    """With params.VECTOR_MIN = 0 the Python path checks the re-timed tasks' edges with numpy. Hand
    case (found by a search over small graphs): dev 0 runs 1 (2 s) then 3 (1 s), dev 1 runs 2 (0 s);
    edges 1 -> 2, 1 -> 0, 2 -> 0, 3 -> 0; 0 (2 s) waits for 3 and starts at 3. Making 3 last 0 s makes 0
    ready at 2 like 2, its predecessor: key (2, 0) before (2, 2), so edge 2 -> 0 goes backwards. The
    sweep passes, the edge check refuses, and the change falls back to a full run."""
    import simulator.engine.delta.sweep as sweep_mod

    monkeypatch.setattr(delta_mod, "VECTOR_MIN", 0)
    calls = []
    check = sweep_mod.first_backward_edge
    monkeypatch.setattr(sweep_mod, "first_backward_edge", lambda *a: calls.append(1) or check(*a))
    arrays = graph_arrays_from(4, 2, [(1, 2), (1, 0), (2, 0), (3, 0)], [2.0, 2.0, 0.0, 1.0], [0, 0, 1, 0])
    ds = DeltaSimulator.from_arrays(*arrays, budget=None)
    assert ds.canonical and ds.start.tolist() == [3.0, 0.0, 2.0, 2.0]
    stats = ds.set_durations([3], [0.0])
    assert stats.fallback and "zero-duration" in stats.reason
    if sweep_kernel == "python":
        assert "edge 2 -> 0 goes backwards" in stats.reason and calls  # found by the numpy check
    assert_matches_full(ds)
    ds.set_durations([3], [1.0])
    assert_matches_full(ds)


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])  # the monkeypatch is a constant
@given(arrays=zero_graphs(), data=st.data())
def test_vectorized_bookkeeping_equals_full_runs(arrays, data, monkeypatch):
    """params.VECTOR_MIN = 0 (the numpy edge check and scratch clearing on every change) on graphs with
    many zero durations: every result equals a full run, bit for bit."""
    monkeypatch.setattr(delta_mod, "VECTOR_MIN", 0)
    monkeypatch.setattr(delta_mod, "RESUME_MAX_SHARE", 1.0)
    max_work = data.draw(st.one_of(st.none(), st.integers(1, 6)))
    ds = DeltaSimulator.from_arrays(*arrays, budget=None, max_work=max_work)
    n, nd = len(arrays[0]), arrays[4]
    for _ in range(data.draw(st.integers(1, 5))):
        t = data.draw(st.integers(0, n - 1))
        if data.draw(st.integers(0, 3)):
            stats = ds.set_durations([t], [float(data.draw(st.sampled_from([0, 0, 1, 2, 3, 4])))])
        else:
            stats = ds.set_devices([t], [data.draw(st.integers(0, nd - 1))])
        assert_matches_full(ds)
        event("fallback" if stats.fallback else "delta")
