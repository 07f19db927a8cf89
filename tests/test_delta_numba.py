"""The compiled delta sweep (simulator/engine/delta/kernels_numba.py, extra ``fast``) equals the Python sweep (the
reference) change by change: the same timeline bits, the same counters in DeltaStats, the same device
queues, including after resumes on its linked lists and after changes that switch back to the Python
queues (device moves, task replacements, added devices)."""
import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import simulator.engine.delta.params as delta_mod
from benchmarks.delta import pipeline_1f1b
from simulator.engine.delta.simulator import DeltaSimulator
from tests.test_delta import assert_matches_full, graph_arrays_from, zero_graphs

numba = pytest.importorskip("numba", reason="numba not installed: the optional extra 'fast' is absent")

FIELDS = ("retimed", "changed", "moved", "vacated", "fallback", "resumed", "new_ids", "removed")


def assert_same(a: DeltaSimulator, b: DeltaSimulator, sa, sb):
    for f in FIELDS:
        assert getattr(sa, f) == getattr(sb, f), (f, sa, sb)
    for f in ("ready", "start", "end"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f))
    assert a.makespan == b.makespan
    np.testing.assert_array_equal(a.pop_order, b.pop_order)


def test_kernel_argument():
    arrays = graph_arrays_from(2, 1, [(0, 1)], [1.0, 2.0], [0, 0])
    with pytest.raises(ValueError, match="kernel 'gpu' is not one of"):
        DeltaSimulator.from_arrays(*arrays, kernel="gpu")
    ds = DeltaSimulator.from_arrays(*arrays, kernel="numba", budget=None)
    stats = ds.set_durations([0], [3.0])
    assert ds._queue_set.links is not None and not stats.fallback  # the compiled sweep ran
    assert ds.end.tolist() == [3.0, 5.0]  # hand-computed: 1 starts when 0 ends
    assert ds.device_order(0) == [0, 1]


@pytest.mark.parametrize("seed", range(4))
def test_compiled_sweep_equals_python_sweep_on_random_graphs(seed, monkeypatch):
    monkeypatch.setattr(delta_mod, "RESUME_MAX_SHARE", 1.0)  # resume whatever the share
    rng = np.random.default_rng(100 + seed)
    compiled = resumed = 0
    for _ in range(60):
        n, nd = int(rng.integers(2, 60)), int(rng.integers(1, 5))
        edges = [(u, v) for v in range(n) for u in range(v) if rng.random() < 0.12]
        dur = rng.integers(1, 6, n).astype(float) * rng.choice([1.0, 0.1, 1e-3])
        arrays = graph_arrays_from(n, nd, edges, dur, rng.integers(0, nd, n))
        max_work = [None, None, int(rng.integers(1, 8))][int(rng.integers(0, 3))]
        a = DeltaSimulator.from_arrays(*arrays, budget=None, max_work=max_work, kernel="numba")
        b = DeltaSimulator.from_arrays(*arrays, budget=None, max_work=max_work, kernel="python")
        for _ in range(6):
            live = a.live_ids().tolist()
            t = int(rng.choice(live))
            kind = rng.random()
            if kind < 0.6:
                k = int(rng.integers(1, 3))
                ts = rng.choice(live, size=min(k, len(live)), replace=False).tolist()
                vals = (rng.integers(1, 9, len(ts)) * 0.5).tolist()
                sa, sb = a.set_durations(ts, vals), b.set_durations(ts, vals)
                compiled += a._queue_set.links is not None
            elif kind < 0.75:
                d = int(rng.integers(0, nd))
                sa, sb = a.set_devices([t], [d]), b.set_devices([t], [d])
            elif kind < 0.9:  # split t (new ids, tombstones): back to the Python queues
                preds, succs, d = a.predecessors(t), a.successors(t), a._device_of[t]
                e = [(u, ~0) for u in preds] + [(~0, ~1)] + [(~1, v) for v in succs]
                sa = a.replace_tasks([t], [1.5, 2.5], [d, d], e)
                sb = b.replace_tasks([t], [1.5, 2.5], [d, d], e)
            else:
                a.add_devices(1)
                b.add_devices(1)
                nd += 1
                continue
            assert_same(a, b, sa, sb)
            resumed += sa.resumed > 0
            if rng.random() < 0.3:  # reading the queues keeps the linked lists
                assert [a.device_order(d) for d in range(nd)] == [b.device_order(d) for d in range(nd)]
        assert_matches_full(a)
    assert compiled > 100 and resumed > 20


def test_compiled_sweep_on_the_benchmark_pipeline():
    """Early, late, absorbed and spreading changes on a 1F1B pipeline (the benchmark's graph, small)."""
    g = pipeline_1f1b(4, 24, 6, 0)
    a = DeltaSimulator(g, budget=None, kernel="numba")
    b = DeltaSimulator(g, budget=None, kernel="python")
    rng = np.random.default_rng(3)
    for t in [0, g.num_tasks - 1] + rng.integers(0, g.num_tasks, 40).tolist():
        f = float(rng.choice([0.5, 1.5, 3.0, 10.0]))
        v = a.duration[t] * f
        assert_same(a, b, a.set_durations([t], [v]), b.set_durations([t], [v]))
    assert_matches_full(a)


def test_compiled_sweep_rounding_loss_falls_back():
    arrays = graph_arrays_from(3, 1, [(2, 1), (1, 0)], [2.0, 1.0, 1.0], [0, 0, 0])
    ds = DeltaSimulator.from_arrays(*arrays, budget=None, kernel="numba")
    stats = ds.set_durations([1], [1e-16])
    assert stats.fallback and stats.reason.startswith("positive duration lost to rounding")
    assert ds.makespan == 3.0 and not ds.canonical
    assert_matches_full(ds)


def test_compiled_sweep_with_the_default_budget_is_exact():
    """The default budget ('auto') lets the compiled sweep run on while its measured rate says that
    re-timing everything after its point costs less than a resume or a full run; whichever way each
    change goes (timing-dependent), the result is the full run's."""
    g = pipeline_1f1b(8, 40, 8, 1)
    ds = DeltaSimulator(g, kernel="numba")
    first = int(ds.pop_order[0])
    for t in [first, g.num_tasks // 2, g.num_tasks - 1]:
        for f in (1.2, 3.0):
            ds.set_durations([t], [float(g.duration[t]) * f])
            assert_matches_full(ds)
            ds.set_durations([t], [float(g.duration[t])])
            assert_matches_full(ds)


def test_pace_rule_gives_up_early_and_stays_exact(monkeypatch):
    """The compiled sweep's pace rule (params.PACE_MIN_SWEPT, PACE_MIN_ALT): with the alternative's
    cost model set near zero, the first deadline check finds the sweep's pace slower than it and gives
    up there; the engine then resumes or runs in full, and the result is the full run's."""
    monkeypatch.setattr(delta_mod, "STATIC_RESWEEP", False)  # the ordinary sweep's rule, not the static one
    monkeypatch.setattr(delta_mod, "PACE_MIN_SWEPT", 1)
    monkeypatch.setattr(delta_mod, "PACE_MIN_ALT", 0.0)
    monkeypatch.setattr(delta_mod, "RESUME_MAX_SHARE", 1.0)  # resume whatever the share
    g = pipeline_1f1b(8, 40, 8, 1)
    ds = DeltaSimulator(g, kernel="numba")
    order = ds.pop_order
    gave_up = 0
    for t in (int(order[0]), int(order[len(order) // 3]), int(order[len(order) // 2])):
        ds._cost.full_run_s, ds._cost.resume_fixed_s, ds._cost.resume_per_task_s = 1e-9, 1e-12, 1e-15  # every alternative "free"
        stats = ds.set_durations([t], [float(g.duration[t]) * 3.0])
        gave_up += "at that pace" in stats.reason
        assert stats.fallback
        assert_matches_full(ds)
        ds.set_durations([t], [float(g.duration[t])])
        assert_matches_full(ds)
    assert gave_up == 3


def test_a_full_event_heap_falls_back(monkeypatch):
    """heap_capacity bounds the events of a sweep; were it wrong, the kernel stops (OVERFLOW) and
    the change falls back to a full run instead of writing past the arrays."""
    import simulator.engine.delta.kernels_numba as nb

    monkeypatch.setattr(nb, "heap_capacity", lambda initial, tasks, edges: initial)
    g = pipeline_1f1b(2, 6, 3, 0)
    ds = DeltaSimulator(g, budget=None, kernel="numba")
    t = int(ds.pop_order[0])
    stats = ds.set_durations([t], [float(g.duration[t]) * 2.0])
    assert stats.fallback and "event heap is full" in stats.reason
    assert_matches_full(ds)


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(arrays=zero_graphs(), data=st.data())
def test_compiled_sweep_with_zero_durations_equals_python_sweep(arrays, data):
    """Zero (and rounding-lossy) durations: the compiled sweep runs the Python sweep's guards; change
    by change both give the same bits, counters, fallbacks and resumes, with and without work
    limits (which force guarded resumes)."""
    n, nd = len(arrays[0]), arrays[4]
    max_work = data.draw(st.one_of(st.none(), st.integers(1, 6)))
    old = delta_mod.RESUME_MAX_SHARE
    delta_mod.RESUME_MAX_SHARE = 1.0
    try:
        a = DeltaSimulator.from_arrays(*arrays, budget=None, max_work=max_work, kernel="numba")
        b = DeltaSimulator.from_arrays(*arrays, budget=None, max_work=max_work, kernel="python")
        for _ in range(data.draw(st.integers(1, 5))):
            t = data.draw(st.integers(0, n - 1))
            if data.draw(st.integers(0, 3)):
                v = float(data.draw(st.sampled_from([0.0, 0.0, 1.0, 2.0, 3.0, 1e-16])))
                sa, sb = a.set_durations([t], [v]), b.set_durations([t], [v])
            else:
                d = data.draw(st.integers(0, nd - 1))
                sa, sb = a.set_devices([t], [d]), b.set_devices([t], [d])
            assert_same(a, b, sa, sb)
            event("compiled sweep" if a._queue_set.links is not None and not sa.fallback else "other")
        assert_matches_full(a)
    finally:
        delta_mod.RESUME_MAX_SHARE = old


def test_compiled_sweep_runs_with_zero_durations():
    """A timeline with a zero-duration task takes the compiled sweep (with its guards), not a full
    run; hand-computed: chain 0 -> 1 -> 2 on one device, durations [1, 0, 1], task 0 made 2 s."""
    arrays = graph_arrays_from(3, 1, [(0, 1), (1, 2)], [1.0, 0.0, 1.0], [0, 0, 0])
    ds = DeltaSimulator.from_arrays(*arrays, budget=None, kernel="numba")
    stats = ds.set_durations([0], [2.0])
    assert ds._queue_set.links is not None and not stats.fallback and stats.moved == 2
    assert ds.end.tolist() == [2.0, 2.0, 3.0]
    assert_matches_full(ds)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.floats(-4, 4), st.just(float("nan"))), max_size=40),
       st.floats(-5, 5), st.floats(-5, 5))
def test_count_after_equals_the_numpy_counts(vals, r0, r):
    """kernels_numba.count_after (the pace rule's two counts in one pass): the same counts as
    ``np.count_nonzero(lk > r)``, NaN (no queue entry) counted in neither."""
    from simulator.engine.delta import kernels_numba as nb
    lk = np.array(vals, dtype=np.float64)
    assert nb.count_after(lk, r0, r) == (int(np.count_nonzero(lk > r0)), int(np.count_nonzero(lk > r)))


def test_count_after_hand_case():
    from simulator.engine.delta import kernels_numba as nb
    lk = np.array([0.0, 1.0, float("nan"), 2.0, 2.0, 3.0])
    assert nb.count_after(lk, 1.0, 2.0) == (3, 1)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 7), max_size=5), min_size=1, max_size=8))
def test_transpose_csr_equals_the_stable_argsort(rows):
    """kernels_numba.transpose_csr (the resume's predecessor CSR): the arrays of the numpy path in
    ``ResumeMixin._pred_csr`` (a stable argsort of the heads), repeated edges included."""
    from simulator.engine.delta import kernels_numba as nb
    n = len(rows)
    rows = [[v % n for v in r] for r in rows]
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum([len(r) for r in rows], out=ptr[1:])
    idx = np.array([v for r in rows for v in r], dtype=np.int64)
    pp, src = nb.transpose_csr(ptr, idx)
    order = np.argsort(idx, kind="stable")
    np.testing.assert_array_equal(src, np.repeat(np.arange(n, dtype=np.int64), np.diff(ptr))[order])
    np.testing.assert_array_equal(pp[1:], np.cumsum(np.bincount(idx, minlength=n)))
    assert pp[0] == 0


def test_transpose_csr_hand_case():
    from simulator.engine.delta import kernels_numba as nb
    # 0 -> 2, 0 -> 1, 1 -> 2, 2 -> (none): predecessors 1: [0]; 2: [0, 1]
    pp, src = nb.transpose_csr(np.array([0, 2, 3, 3]), np.array([2, 1, 2]))
    assert pp.tolist() == [0, 0, 1, 3] and src.tolist() == [0, 0, 1]


def test_resume_takes_the_pace_rules_count(monkeypatch):
    """When the pace rule gives up at a point, the resume reuses its count of the tasks after that
    point instead of counting again: the count it is given is the one a fresh count gives."""
    monkeypatch.setattr(delta_mod, "PACE_MIN_SWEPT", 1)
    monkeypatch.setattr(delta_mod, "PACE_MIN_ALT", 0.0)
    monkeypatch.setattr(delta_mod, "RESUME_MAX_SHARE", 0.99)  # the resume's share check runs
    g = pipeline_1f1b(8, 40, 8, 1)
    ds = DeltaSimulator(g, kernel="numba")
    seen = []
    costs_more = DeltaSimulator._resume_costs_more

    def spy(self, tasks):
        if seen_at and seen_at[-1] is not None:  # the resume's first check: the tasks after the point
            kr = seen_at[-1]
            seen_at[-1] = None
            seen.append((tasks, int(np.count_nonzero(np.frombuffer(self._lk, dtype=np.float64) > kr))))
        return costs_more(self, tasks)

    seen_at = []
    resume = DeltaSimulator._resume

    def resume_spy(self, t0, reason, at, *a, **k):
        seen_at.append(at[0])
        assert self._rest_seen is not None and self._rest_seen[:2] == at  # the pace rule's count, kept
        return resume(self, t0, reason, at, *a, **k)

    monkeypatch.setattr(DeltaSimulator, "_resume_costs_more", spy)
    monkeypatch.setattr(DeltaSimulator, "_resume", resume_spy)
    order = ds.pop_order
    for t in (int(order[0]), int(order[len(order) // 2])):
        ds._cost.full_run_s, ds._cost.resume_fixed_s, ds._cost.resume_per_task_s = 1e-9, 1e-12, 1e-15  # every alternative "free"
        stats = ds.set_durations([t], [float(g.duration[t]) * 3.0])
        assert "at that pace" in stats.reason
        assert_matches_full(ds)
        ds.set_durations([t], [float(g.duration[t])])
        assert_matches_full(ds)
    assert len(seen) >= 2 and all(tasks == fresh for tasks, fresh in seen)


def _split_first(ds: DeltaSimulator):
    """Replace the first task in key order by two in a chain (half the duration each)."""
    t = int(ds.pop_order[0])
    preds, succs, dur, dev = ds.predecessors(t), ds.successors(t), ds.duration[t], ds.device[t]
    edges = [(u, ~0) for u in preds] + [(~0, ~1)] + [(~1, v) for v in succs]
    return ds.replace_tasks([t], [0.5 * dur, 0.5 * dur], [dev, dev], edges)


def test_early_task_replacement_runs_in_full_at_once():
    """A task replacement with the compiled engine and the default budget, with more than
    RESUME_MAX_SHARE of the tasks after it: the compiled full run at once (no Python sweep, no queue
    rebuilt), the result a full run's; later changes (sweeps, another replacement) stay exact. With
    an explicit budget, or without the compiled engine, the sweep is tried first as before."""
    g = pipeline_1f1b(4, 24, 6, 0)
    ds = DeltaSimulator(g, kernel="numba")
    st = _split_first(ds)
    assert st.fallback and st.reason.startswith("task replacement at ready time 0:"), st.reason
    assert st.retimed == ds.num_tasks and st.removed == 1 and len(st.new_ids) == 2
    assert_matches_full(ds)
    t = int(ds.pop_order[len(ds.pop_order) // 2])
    ds.set_durations([t], [ds.duration[t] * 3.0])
    assert_matches_full(ds)
    ds.set_devices([t], [(int(ds.device[t]) + 1) % ds.num_devices])
    assert_matches_full(ds)
    assert _split_first(ds).reason.startswith("task replacement at")
    assert_matches_full(ds)
    for other in (DeltaSimulator(g, kernel="numba", budget=0.5), DeltaSimulator(g, kernel="python")):
        st = _split_first(other)
        assert not st.reason.startswith("task replacement at"), st.reason
        assert_matches_full(other)
