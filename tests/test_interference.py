"""Overlap that costs something (taskgraph/overlap.py, simulator/engine/interference.py): closed forms
on tiny hand-computable timelines, and the fixed point against them."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.engine.core import simulate
from simulator.engine.interference import fixed_point, slowdown, with_interference
from taskgraph.graph import Device, TaskGraphBuilder
from taskgraph.overlap import MAX_FRACTION, bulk, pipelined, ring_exchange, sm_fraction


def _graph(compute: list[float], side: list[tuple[int, float]], share: float, stream: str = "dp"):
    """Rank 0: a chain of compute tasks; side tasks on ``stream`` released after compute task i
    (``(i, seconds)``; i = -1: at time 0)."""
    b = TaskGraphBuilder()
    c = b.add_device(Device("rank0/compute", 0, "compute"))
    d = b.add_device(Device(f"rank0/{stream}", 0, stream))
    prev = None
    ids = []
    for x in compute:
        t = b.add_task(x, c, "forward")
        if prev is not None:
            b.add_edge(prev, t)
        prev = t
        ids.append(t)
    for i, secs in side:
        t = b.add_task(secs, d, "dp-comm")
        if i >= 0:
            b.add_edge(ids[i], t)
    g = b.build()
    g.meta["sm_share"] = {stream: share}
    return g


def test_one_compute_task_beside_one_bucket_closed_form():
    # 10 ms of compute, a 4 ms bucket from t = 0 holding a quarter of the SMs: 10 + 0.25 x 4 = 11 ms
    g = _graph([10e-3], [(-1, 4e-3)], 0.25)
    res, rounds = with_interference(g, simulate)
    assert res.makespan == pytest.approx(11e-3, rel=1e-12)
    assert g.duration[0] == pytest.approx(11e-3, rel=1e-12)
    assert g.meta["interference_s"] == pytest.approx(1e-3, rel=1e-9)
    assert rounds == 2


def test_a_bucket_longer_than_the_compute_charges_only_the_overlap():
    # 2 ms of compute beside a 10 ms bucket (f = 0.5): the compute takes T = 2 + 0.5 T -> 4 ms; the
    # bucket sets the makespan
    g = _graph([2e-3], [(-1, 10e-3)], 0.5)
    res, _ = with_interference(g, simulate)
    assert g.duration[0] == pytest.approx(4e-3, rel=1e-5)
    assert res.makespan == pytest.approx(10e-3, rel=1e-12)


def test_compute_after_the_bucket_is_not_slowed():
    # the bucket is released after task 0 and lasts 1 ms; task 1 (5 ms) overlaps it fully
    g = _graph([3e-3, 5e-3], [(0, 1e-3)], 0.2)
    res, _ = with_interference(g, simulate)
    assert g.duration[0] == pytest.approx(3e-3, rel=1e-12)
    assert g.duration[1] == pytest.approx(5.2e-3, rel=1e-12)
    assert res.makespan == pytest.approx(8.2e-3, rel=1e-12)


def test_no_share_means_one_plain_run():
    g = _graph([3e-3, 5e-3], [(0, 1e-3)], 0.0)
    base = g.duration.copy()
    res, rounds = with_interference(g, simulate)
    assert rounds == 1 and np.array_equal(g.duration, base) and res.makespan == pytest.approx(8e-3)


def test_overlapping_side_work_adds_up_to_the_cap():
    # two side streams each holding 0.4 from t = 0 for 10 ms: F = min(0.8, cap) over a 1 ms compute task
    b = TaskGraphBuilder()
    c = b.add_device(Device("rank0/compute", 0, "compute"))
    d1 = b.add_device(Device("rank0/dp", 0, "dp"))
    d2 = b.add_device(Device("rank0/tp", 0, "tp"))
    t = b.add_task(1.0, c, "forward")
    b.add_task(10.0, d1, "dp-comm")
    b.add_task(10.0, d2, "tp-comm")
    g = b.build()
    extra = slowdown(g.duration, g.device, np.array([0.0, 0.0, 0.0]), np.array([1.0, 10.0, 10.0]),
                     np.array([0, 0, 0]), np.array([0.0, 0.4, 0.4]), np.array([True, False, False]))
    assert extra[t] == pytest.approx(MAX_FRACTION * 1.0)


@pytest.mark.parametrize("compute,comm,f,want", [
    (10.0, 4.0, 0.25, 11.0),     # the comm finishes under the compute: compute + f comm
    (2.0, 10.0, 0.5, 10.0),      # the compute finishes under the comm: the comm
    (3.0, 4.0, 0.25, 4.0),       # 4 x 0.75 = 3: exactly at the edge
    (3.0, 0.0, 0.25, 3.0),
    (3.0, 5.0, 0.0, 5.0),        # f = 0: max(compute, comm), the free overlap of the old model
])
def test_bulk_closed_form(compute, comm, f, want):
    assert bulk(compute, comm, f) == pytest.approx(want)


def test_bulk_is_the_fixed_point_of_an_isolated_pair():
    for compute, comm, f in ((10e-3, 4e-3, 0.25), (2e-3, 10e-3, 0.5), (7e-3, 6e-3, 0.15)):
        g = _graph([compute], [(-1, comm)], f)
        res, _ = with_interference(g, simulate)
        assert res.makespan == pytest.approx(bulk(compute, comm, f), rel=1e-5)


@pytest.mark.parametrize("compute,comm,f,loss,want", [
    (10.0, 4.0, 0.25, 0.2, 11.25),   # the collective (4 / 0.8 = 5) under the compute: 10 + 0.25 x 5
    (2.0, 10.0, 0.0, 0.5, 11.0),     # the compute (2) under the collective: 10 + 0.5 x 2
    (2.0, 10.0, 0.5, 0.5, 12.0),     # ... slowed to 4 by the collective: 10 + 0.5 x 4
])
def test_bulk_with_hbm_loss_closed_form_and_fixed_point(compute, comm, f, loss, want):
    assert bulk(compute, comm, f, loss) == pytest.approx(want)
    g = _graph([compute * 1e-3], [(-1, comm * 1e-3)], f)
    g.meta["hbm_loss"] = {"dp": loss}
    res, _ = with_interference(g, simulate)
    assert res.makespan == pytest.approx(want * 1e-3, rel=1e-3)


def test_ring_exchange_and_pipeline_closed_forms():
    # 4 chunks of 1 ms GEMM, 0.5 ms transfers, f = 0.01: 1 + 3 x (1 + 0.005) ms
    assert ring_exchange(1.0, 0.5, 4, 0.01) == pytest.approx(1 + 3 * 1.005)
    # transfers longer than the chunks: 1 + 3 x 2
    assert ring_exchange(1.0, 2.0, 4, 0.01) == pytest.approx(7.0)
    # pipeline: first chunk, 3 x max(chunk, comm chunk), the last comm chunk exposed
    assert pipelined(1.0, 0.5, 4) == pytest.approx(1 + 3 * 1.0 + 0.5)
    assert pipelined(1.0, 2.0, 4) == pytest.approx(1 + 3 * 2.0 + 2.0)


def test_sm_fraction():
    assert sm_fraction(16, 132) == pytest.approx(16 / 132)
    assert sm_fraction(24, 108) == pytest.approx(24 / 108)
    assert sm_fraction(200, 132) == MAX_FRACTION
    assert sm_fraction(0, 132) == 0.0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(1e-4, 1e-2), min_size=1, max_size=6),
       st.lists(st.tuples(st.integers(-1, 5), st.floats(1e-4, 2e-2)), max_size=4),
       st.floats(0.0, 0.5))
def test_fixed_point_properties(compute, side, f):
    side = [(min(i, len(compute) - 1), s) for i, s in side]
    g = _graph(compute, side, f)
    base = g.duration.copy()
    _res, rounds = with_interference(g, simulate)
    comp = np.flatnonzero(g.category == g.category[0])[: len(compute)]
    # never faster than without interference, never slower than if every task ran at 1 - f
    assert np.all(g.duration[comp] >= base[comp] - 1e-15)
    assert np.all(g.duration[comp] <= base[comp] / (1 - min(f, MAX_FRACTION)) + 1e-12)
    assert 1 <= rounds <= 8
    # deterministic: the same inputs give the same durations
    g2 = _graph(compute, side, f)
    with_interference(g2, simulate)
    assert np.array_equal(g.duration, g2.duration)


def test_fixed_point_stops_when_the_run_cannot_answer():
    _dur, res, rounds = fixed_point(np.ones(2), lambda d: None, np.zeros(2, dtype=np.int32), [], {"dp": 0.1})
    assert res is None and rounds == 1


def test_a_bucket_beside_compute_is_slowed_by_shared_hbm_closed_form():
    # a 4 ms bucket from t = 0 beside 10 ms of compute; the bucket holds f = 0.25 of the SMs and
    # loses g = 0.2 of its rate while the compute runs (HBM shared): the bucket satisfies
    # T_b = 4 + 0.2 T_b -> 5 ms (fully under the compute), the compute T_c = 10 + 0.25 x 5 = 11.25 ms
    g = _graph([10e-3], [(-1, 4e-3)], 0.25)
    g.meta["hbm_loss"] = {"dp": 0.2}
    res, _ = with_interference(g, simulate)
    # within the fixed point's tolerance (10^-3 of the work a round may still move)
    assert g.duration[1] == pytest.approx(5e-3, rel=1e-3)
    assert g.duration[0] == pytest.approx(11.25e-3, rel=1e-3)
    assert res.makespan == pytest.approx(11.25e-3, rel=1e-3)


def test_a_bucket_past_the_compute_is_slowed_only_under_it():
    # 2 ms of compute beside a 10 ms bucket, no SM share, g = 0.5: the bucket loses half its rate for
    # the 2 ms the compute runs, T_b = 10 + 0.5 x 2 = 11 ms; the compute is not slowed
    g = _graph([2e-3], [(-1, 10e-3)], 0.0)
    g.meta["sm_share"] = {}
    g.meta["hbm_loss"] = {"dp": 0.5}
    res, _ = with_interference(g, simulate)
    assert g.duration[0] == pytest.approx(2e-3, rel=1e-12)
    assert g.duration[1] == pytest.approx(11e-3, rel=1e-4)
    assert res.makespan == pytest.approx(11e-3, rel=1e-4)


def test_hbm_loss_closed_form():
    from taskgraph.overlap import RING_HBM_PER_WIRE_BYTE, hbm_loss
    # u = 3 x 100 / 1000 = 0.3 beside memory-bound compute (c = 1): the ring runs at 1 / 1.3
    assert RING_HBM_PER_WIRE_BYTE == 3.0
    assert hbm_loss(100.0, 1000.0) == pytest.approx(1 - 1 / 1.3, rel=1e-12)
    # demands that fit in the HBM together slow nothing
    assert hbm_loss(100.0, 1000.0, compute_demand=0.5) == 0.0
    assert hbm_loss(0.0, 1000.0) == 0.0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(1e-4, 1e-2), min_size=1, max_size=6),
       st.lists(st.tuples(st.integers(-1, 5), st.floats(1e-4, 2e-2)), min_size=1, max_size=4),
       st.floats(0.0, 0.5), st.floats(0.0, 0.5))
def test_fixed_point_with_hbm_loss_properties(compute, side, f, loss):
    side = [(min(i, len(compute) - 1), s) for i, s in side]
    g = _graph(compute, side, f)
    g.meta["hbm_loss"] = {"dp": loss}
    base = g.duration.copy()
    with_interference(g, simulate)
    comm = np.arange(len(compute), g.num_tasks)
    # a bucket is never faster than alone, never slower than at 1 - g throughout (within the
    # fixed point's tolerance of 10^-3 of the work), and the same inputs give the same durations
    assert np.all(g.duration[comm] >= base[comm] * (1 - 1e-3) - 1e-12)
    assert np.all(g.duration[comm] <= base[comm] / (1 - loss) * (1 + 1e-3) + 1e-12)
    g2 = _graph(compute, side, f)
    g2.meta["hbm_loss"] = {"dp": loss}
    with_interference(g2, simulate)
    assert np.array_equal(g.duration, g2.duration)


def test_comm_slowdown_counts_busy_time_once():
    from simulator.engine.interference import comm_slowdown
    # rank 0: compute [0, 4) and, on a second compute stream, [2, 6) -> busy [0, 6); a side task on
    # [1, 5) with g = 0.5 is slowed by 0.5 x 4 and the compute is busy at its end; one on [7, 9) not
    dev_rank = np.array([0, 0, 0])
    dev_loss = np.array([0.0, 0.0, 0.5])
    dev_compute = np.array([True, True, False])
    task_device = np.array([0, 1, 2, 2])
    start, end = np.array([0.0, 2.0, 1.0, 7.0]), np.array([4.0, 6.0, 5.0, 9.0])
    base = end - start
    for order in (None, np.array([0, 2, 1, 3])):
        extra, level = comm_slowdown(base, task_device, start, end, dev_rank, dev_loss, dev_compute, order)
        assert extra.tolist() == [0.0, 0.0, 2.0, 0.0]
        assert level.tolist() == [0.0, 0.0, 0.5, 0.0]
