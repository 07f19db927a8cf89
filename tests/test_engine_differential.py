"""Differential test: the engine vs an independent SimPy model (simulator/engine/reference_simpy.py).

Random DAGs (ids not in topological order, duplicate edges allowed) with random devices; integer
durations force ties (equal ready times on one device), float durations check the arithmetic, and
zero durations exercise the "pop order" rule. Start and end times must be identical, not close.
Each example also checks the timeline properties exactly.
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.engine.core import simulate_arrays
from simulator.engine.reference_simpy import simulate_reference
from taskgraph.graph import csr_from_edges

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def dags(draw, durations: str):
    n = draw(st.integers(1, 60))
    num_devices = draw(st.integers(1, 4))
    perm = draw(st.permutations(range(n)))  # topological order != id order
    pairs = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3 * n))
    edges = [(perm[min(a, b)], perm[max(a, b)]) for a, b in pairs if a != b]
    device = draw(st.lists(st.integers(0, num_devices - 1), min_size=n, max_size=n))
    if durations == "int":
        dur = draw(st.lists(st.integers(1, 3), min_size=n, max_size=n))
    elif durations == "zero":
        dur = draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
    else:
        dur = draw(st.lists(st.floats(1e-3, 10.0, allow_nan=False, allow_infinity=False),
                            min_size=n, max_size=n))
    src = np.asarray([u for u, _ in edges], dtype=np.int64)
    dst = np.asarray([v for _, v in edges], dtype=np.int32)
    ptr, idx = csr_from_edges(n, src, dst)
    return (np.asarray(dur, dtype=np.float64), np.asarray(device, dtype=np.int32), ptr, idx, num_devices)


def check_properties(dur, device, ptr, idx, num_devices, res, positive: bool):
    n = dur.shape[0]
    start, end, ready, order = res.start, res.end, res.ready, res.order
    assert np.array_equal(end, start + dur)
    assert sorted(order.tolist()) == list(range(n))
    src = np.repeat(np.arange(n), np.diff(ptr))
    # no task starts before all its predecessors end; ready = latest predecessor end (or 0)
    assert np.all(start[idx] >= end[src])
    expect_ready = np.zeros(n)
    np.maximum.at(expect_ready, idx, end[src])
    assert np.array_equal(ready, expect_ready)
    assert np.all(start >= ready)
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n)
    for d in range(num_devices):
        run = order[device[order] == d]  # the device's tasks in pop order
        if run.size == 0:
            continue
        # no overlap, and no idling while a popped task waits: start = max(ready, previous end)
        prev_end = np.concatenate([[0.0], end[run][:-1]])
        assert np.array_equal(start[run], np.maximum(ready[run], prev_end))
        if positive:
            # positive durations: the device runs its tasks in (ready, id) order
            by_start = run[np.argsort(start[run], kind="stable")]
            assert np.array_equal(by_start, run)
            by_key = np.lexsort((run, ready[run]))
            assert np.array_equal(run[by_key], run)


@SETTINGS
@given(dags("int"))
def test_matches_simpy_integer_durations(g):
    res = simulate_arrays(*g)
    start, end = simulate_reference(*g)
    assert np.array_equal(res.start, start) and np.array_equal(res.end, end)
    check_properties(*g, res, positive=True)


@SETTINGS
@given(dags("float"))
def test_matches_simpy_float_durations(g):
    res = simulate_arrays(*g)
    start, end = simulate_reference(*g)
    assert np.array_equal(res.start, start) and np.array_equal(res.end, end)
    check_properties(*g, res, positive=True)


@SETTINGS
@given(dags("zero"))
def test_matches_simpy_with_zero_durations(g):
    # devices queue in request (= pop) order; see simulate_reference's ``queue`` argument
    res = simulate_arrays(*g)
    start, end = simulate_reference(*g, queue="request")
    assert np.array_equal(res.start, start) and np.array_equal(res.end, end)
    check_properties(*g, res, positive=False)


def test_priority_queue_reference_differs_only_with_zero_durations():
    # sources 0, 2, 3, 4; 3 (zero duration, device 0) -> 1. The engine pops 2 before 1 becomes ready
    # at the same instant, so device 1 runs 0, 2, 1; a (ready, id) priority queue would run 0, 1, 2.
    ptr, idx = csr_from_edges(5, np.array([3]), np.array([1]))
    g = (np.array([1.0, 1.0, 1.0, 0.0, 2.0]), np.array([1, 1, 1, 0, 0], np.int32), ptr, idx, 2)
    res = simulate_arrays(*g)
    assert res.start.tolist() == [0.0, 2.0, 1.0, 0.0, 0.0]
    assert simulate_reference(*g, queue="request")[0].tolist() == res.start.tolist()
    assert simulate_reference(*g, queue="priority")[0].tolist() == [0.0, 1.0, 2.0, 0.0, 0.0]


def test_reference_detects_cycle():
    ptr, idx = csr_from_edges(2, np.array([0, 1]), np.array([1, 0]))
    with pytest.raises(RuntimeError, match="never ran"):
        simulate_reference(np.ones(2), np.zeros(2, np.int32), ptr, idx, 1)
