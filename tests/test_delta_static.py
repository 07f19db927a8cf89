"""The static re-sweep of delta mode (simulator/engine/delta/static.py, kernels_static.py; package doc
"Static re-sweep"): duration changes re-timed in the old device orders, checked against Lemma 1 as
they go, else handed back untouched to the ordinary sweep. Every path is forced here (heap only,
the dense walk, refusals, the time limit, a lost duration) and every result is compared with a full
run bit for bit."""
import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import simulator.engine.delta.params as delta_mod
from benchmarks.delta import pipeline_1f1b
from simulator.engine.delta.simulator import DeltaSimulator
from simulator.engine.delta.static import StaticResweep
from tests.test_delta import assert_matches_full, graph_arrays_from, graphs, zero_graphs

try:
    import numba  # noqa: F401
    KERNELS = ["python", "numba"]
except ImportError:  # the compiled re-sweep's tests skip, with this reason
    KERNELS = ["python", pytest.param("numba", marks=pytest.mark.skip(
        reason="numba not installed: the optional extra 'fast' is absent"))]


def always_try(monkeypatch):
    """No back-off after a refusal, no time limit, no pace rule: every duration change tries the
    static re-sweep, and only the checks refuse it (not the clock)."""
    monkeypatch.setattr(StaticResweep, "failed", lambda self: None)
    monkeypatch.setattr(delta_mod, "STATIC_BUDGET", 1e9)
    monkeypatch.setattr(delta_mod, "STATIC_BUDGET_PYTHON", 1e9)
    monkeypatch.setattr(delta_mod, "STATIC_PACE_PYTHON", 1e9)
    monkeypatch.setattr(delta_mod, "STATIC_PACE_PYTHON_LATE", 1e9)
    monkeypatch.setattr(delta_mod, "RESUME_MAX_SHARE", 1.0)  # (also: the Python try after a full run)


@pytest.mark.parametrize("kernel", KERNELS)
def test_static_resweep_hand_case(kernel):
    """Device 0 runs 0 then 1 (edge 0 -> 1), device 1 runs 2 (edge 0 -> 2). Task 0 made 2 s: 1 and 2
    become ready at 2 and keep their places. Hand-computed: ends 2, 3, 4.5."""
    arrays = graph_arrays_from(3, 2, [(0, 1), (0, 2)], [1.0, 1.0, 2.5], [0, 0, 1])
    ds = DeltaSimulator.from_arrays(*arrays, kernel=kernel)
    stats = ds.set_durations([0], [2.0])
    assert stats.static and not stats.fallback
    assert (stats.retimed, stats.changed, stats.moved) == (3, 3, 2)
    assert ds.end.tolist() == [2.0, 3.0, 4.5] and ds.ready.tolist() == [0.0, 2.0, 2.0]
    assert ds.makespan == 4.5
    assert_matches_full(ds)


@pytest.mark.parametrize("kernel", KERNELS)
def test_static_resweep_refuses_a_reordered_device(kernel, monkeypatch):
    """Device 0 runs 1 (ready 1, after 0 on device 1) then 2 (ready 2, after 3 on device 2). Task 0
    made 3 s: 1 becomes ready at 3, after 2, so device 0's order changes: the check refuses at 2, the
    state is put back and the ordinary sweep re-times. Hand-computed: 2 runs 2-2.5, 1 runs 3-4."""
    always_try(monkeypatch)
    arrays = graph_arrays_from(4, 3, [(0, 1), (3, 2)], [1.0, 1.0, 0.5, 2.0], [1, 0, 0, 2])
    ds = DeltaSimulator.from_arrays(*arrays, kernel=kernel)
    assert ds.device_order(0) == [1, 2]
    stats = ds.set_durations([0], [3.0])
    assert not stats.static and not stats.fallback
    assert ds.device_order(0) == [2, 1]
    assert ds.start.tolist() == [0.0, 3.0, 2.0, 0.0] and ds.end.tolist() == [3.0, 4.0, 2.5, 2.0]
    assert_matches_full(ds)


@pytest.mark.parametrize("kernel", KERNELS)
def test_refusals_back_off(kernel):
    """After a refusal the next change skips the static re-sweep (1, then 3, 7, ... changes)."""
    arrays = graph_arrays_from(4, 3, [(0, 1), (3, 2)], [1.0, 1.0, 0.5, 2.0], [1, 0, 0, 2])
    ds = DeltaSimulator.from_arrays(*arrays, kernel=kernel)
    assert not ds.set_durations([0], [3.0]).static
    assert ds._static.skip == 1
    assert not ds.set_durations([3], [2.5]).static  # skipped (its order would be kept: 2 ready at 2.5)
    assert ds.set_durations([3], [2.0]).static  # tried again, and taken
    assert ds._static.fails == 0
    assert_matches_full(ds)


@pytest.mark.parametrize("kernel", KERNELS)
def test_zero_duration_tie_is_refused(kernel, monkeypatch):
    """Chain 0 -> 1 on device 0, task 2 of zero duration on device 1 with edge 2 -> 1; 0 made 0 s:
    1 becomes ready at 0 with key (0, 1), before its predecessor 2's (0, 2): a backward edge, which
    the check refuses; the ordinary sweep's guard then falls back to a full run."""
    always_try(monkeypatch)
    arrays = graph_arrays_from(3, 2, [(0, 1), (2, 1)], [1.0, 1.0, 0.0], [0, 0, 1])
    ds = DeltaSimulator.from_arrays(*arrays, kernel=kernel)
    stats = ds.set_durations([0], [0.0])
    assert not stats.static
    assert_matches_full(ds)


@pytest.mark.parametrize("kernel", KERNELS)
def test_lost_duration_is_refused(kernel):
    """Positive durations, one lost to rounding by the change: the static re-sweep refuses (LOSSY)
    and the ordinary sweep falls back to a full run, as without it."""
    arrays = graph_arrays_from(3, 1, [(2, 1), (1, 0)], [2.0, 1.0, 1.0], [0, 0, 0])
    ds = DeltaSimulator.from_arrays(*arrays, kernel=kernel)
    stats = ds.set_durations([1], [1e-16])
    assert not stats.static and stats.fallback and stats.reason.startswith("positive duration lost")
    assert_matches_full(ds)


@pytest.mark.parametrize("kernel", KERNELS)
def test_time_limit_gives_back_the_change(kernel, monkeypatch):
    """With no time at all the static re-sweep stops at its first pause, puts the state back, and the
    ordinary sweep (here without a budget of its own) re-times the change."""
    monkeypatch.setattr(delta_mod, "STATIC_BUDGET", -1.0)
    monkeypatch.setattr(delta_mod, "STATIC_DENSE_CHECK", 1)
    g = pipeline_1f1b(4, 12, 4, 0)
    ds = DeltaSimulator(g, kernel=kernel)
    t = int(ds.pop_order[0])
    stats = ds.set_durations([t], [float(g.duration[t]) * 3.0])
    assert not stats.static
    assert_matches_full(ds)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("dense", [False, True])
def test_first_task_change_on_a_pipeline(kernel, dense, monkeypatch):
    """A 1F1B pipeline keeps its device orders when its first task gets longer or shorter: the static
    re-sweep takes every change (the heap alone, or the dense walk from the first pause), and with the
    dense walk the key order survives (nothing left to merge for result())."""
    monkeypatch.setattr(delta_mod, "STATIC_DENSE_CHECK", 1 if dense else 1 << 40)
    monkeypatch.setattr(delta_mod, "STATIC_DENSE", 0.0 if dense else 2.0)
    always_try(monkeypatch)
    g = pipeline_1f1b(4, 16, 4, 0)
    ds = DeltaSimulator(g, kernel=kernel)
    t = int(ds.pop_order[0])
    for f in (1.5, 1.0, 0.5, 1.0):
        stats = ds.set_durations([t], [float(g.duration[t]) * f])
        assert stats.static and stats.retimed <= g.num_tasks
        if dense and f != 1.0 and kernel == "numba":  # (the Python re-sweep has no dense walk)
            assert stats.retimed == g.num_tasks and ds._order_moved == []
        assert_matches_full(ds)


def _campaign(ds, data, n, nd):
    """Random changes, durations mostly, checked against full runs now and then (so several changes
    build up pending key-order patches between checks)."""
    for _ in range(data.draw(st.integers(1, 6))):
        t = data.draw(st.integers(0, n - 1))
        kind = data.draw(st.integers(0, 5))
        if kind:
            ts = sorted({t, data.draw(st.integers(0, n - 1))}) if kind == 1 else [t]
            vals = [float(data.draw(st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.0, 1e-16]))) for _ in ts]
            stats = ds.set_durations(ts, vals)
            event("static" if stats.static else "ordinary")
        else:
            ds.set_devices([t], [data.draw(st.integers(0, nd - 1))])
        if data.draw(st.booleans()):
            assert_matches_full(ds)
    assert_matches_full(ds)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("dense", [False, True])
@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])  # the monkeypatch is a constant
@given(arrays=zero_graphs(), data=st.data())
def test_static_resweep_with_zero_durations_equals_full_runs(kernel, dense, arrays, data, monkeypatch):
    """Graphs with many zero durations (ties the checks must refuse): every result equals a full run,
    the heap alone or the dense walk from the first task on."""
    always_try(monkeypatch)
    monkeypatch.setattr(delta_mod, "STATIC_DENSE_CHECK", 1 if dense else 1 << 40)
    monkeypatch.setattr(delta_mod, "STATIC_DENSE", 0.0)
    ds = DeltaSimulator.from_arrays(*arrays, kernel=kernel)
    _campaign(ds, data, len(arrays[0]), arrays[4])


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("dense", [False, True])
@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(drawn=graphs(), data=st.data())
def test_static_resweep_on_random_graphs_equals_full_runs(kernel, dense, drawn, data, monkeypatch):
    """Random graphs (ids in any order, integer durations with ties, devices that reorder)."""
    always_try(monkeypatch)
    monkeypatch.setattr(delta_mod, "STATIC_DENSE_CHECK", 1 if dense else 1 << 40)
    monkeypatch.setattr(delta_mod, "STATIC_DENSE", 0.0)
    _, arrays = drawn
    ds = DeltaSimulator.from_arrays(*arrays, kernel=kernel)
    _campaign(ds, data, len(arrays[0]), arrays[4])


@pytest.mark.parametrize("kernel", KERNELS)
def test_static_campaign_takes_both_paths(kernel, monkeypatch):
    """A derandomized campaign on small pipelines and random graphs: the static re-sweep takes most
    changes of the pipelines and refuses some on the random graphs, and every result is exact."""
    always_try(monkeypatch)
    monkeypatch.setattr(delta_mod, "STATIC_DENSE_CHECK", 8)
    rng = np.random.default_rng(7)
    taken = refused = 0
    for seed in range(12):
        if seed % 2:
            g = pipeline_1f1b(3, 6, 3, seed)
            ds = DeltaSimulator(g, kernel=kernel)
            n = g.num_tasks
        else:
            n, nd = int(rng.integers(20, 80)), int(rng.integers(1, 4))
            edges = [(u, v) for v in range(n) for u in range(v) if rng.random() < 0.08]
            dur = rng.choice([0.0, 1.0, 2.0, 0.5], n)
            ds = DeltaSimulator.from_arrays(*graph_arrays_from(n, nd, edges, dur, rng.integers(0, nd, n)),
                                            kernel=kernel)
        for _ in range(20):
            t = int(rng.integers(0, n))
            stats = ds.set_durations([t], [float(rng.choice([0.0, 0.5, 1.0, 4.0])) * (1 + ds.duration[t])])
            taken += stats.static
            refused += not stats.static and stats.retimed > 0
            assert_matches_full(ds)
    assert taken > 100 and refused > 5


def test_fix_ties_sorts_equal_ready_times_by_id():
    # numba first: the kernel module raises a plain ImportError without it, which importorskip
    # (pytest >= 8.2) no longer takes for a missing module
    pytest.importorskip("numba", reason="numba not installed: the optional extra 'fast' is absent")
    from simulator.engine.delta import kernels_static as ks

    R = np.array([1.0, 0.0, 1.0, 2.0, 1.0])
    order = np.array([1, 4, 0, 2, 3])  # sorted by ready time, equal ones out of id order
    ks.fix_ties(order, R)
    assert order.tolist() == [1, 0, 2, 4, 3]


def test_python_resweep_waits_for_its_lists_on_an_early_change():
    """After a full run the Python re-sweep's device lists are still to be built: a change with more
    than RESUME_MAX_SHARE of the tasks after it takes the ordinary sweep; once the lists exist (a
    later change built them) the same change is re-swept statically."""
    g = pipeline_1f1b(3, 6, 3, 0)
    ds = DeltaSimulator(g, kernel="python")
    t = int(ds.pop_order[0])
    assert not ds.set_durations([t], [float(g.duration[t]) * 1.5]).static and ds._static.py_device_lists is None
    late = int(ds.pop_order[-2])
    assert ds.set_durations([late], [float(g.duration[late]) * 1.5]).static and ds._static.py_device_lists is not None
    assert ds.set_durations([t], [float(g.duration[t])]).static
    assert_matches_full(ds)


def test_python_resweep_pace_gives_up_without_back_off(monkeypatch):
    """The Python re-sweep's pace rule (forced: any pace is too slow) gives the change back to the
    ordinary sweep after its first check (256 tasks), state untouched, and it does not count as a
    refusal (no back-off); the result is the full run's."""
    monkeypatch.setattr(delta_mod, "STATIC_PACE_PYTHON", 0.0)
    monkeypatch.setattr(delta_mod, "STATIC_PACE_PYTHON_LATE", 0.0)
    g = pipeline_1f1b(4, 40, 4, 0)
    ds = DeltaSimulator(g, kernel="python")
    ds._static.py_links(ds.num_ids, ds.num_devices)
    t = int(ds.pop_order[0])
    stats = ds.set_durations([t], [float(g.duration[t]) * 3.0])
    assert not stats.static and stats.retimed >= 256 and ds._static.skip == 0
    assert_matches_full(ds)


def test_queue_ids_np_equals_ids():
    """queues.DeviceQueue.ids_np (the Python re-sweep's device lists after an ordinary sweep) gives the
    ids of ids(), in order, with chunks unmaterialized, materialized and changed."""
    from simulator.engine.delta.queues import DeviceQueue
    rng = np.random.default_rng(0)
    n = 5 * delta_mod.QUEUE_CHUNK + 7
    rs = np.sort(rng.random(n))
    ids = rng.permutation(n).astype(np.int64)
    q = DeviceQueue()
    q._append_np(rs, ids)
    assert q.ids_np().tolist() == q.ids() == ids.tolist()
    q.remove(float(rs[3]), int(ids[3]))  # materializes a chunk and changes it
    q.place(float(rs[-1]) + 1.0, n, False)
    assert q.ids_np().tolist() == q.ids() == ids[:3].tolist() + ids[4:].tolist() + [n]
    assert q.ids_np().dtype == np.int64
    assert DeviceQueue().ids_np().tolist() == []
