import numpy as np
import pytest

from simulator.engine.core import simulate
from simulator.engine.timeline import timeline
from simulator.reports.report import critical_path, report
from taskgraph.graph import Device, TaskGraphBuilder


def two_rank_graph():
    b = TaskGraphBuilder()
    d0 = b.add_device(Device("rank0/compute", 0, "compute"))
    d1 = b.add_device(Device("rank1/compute", 1, "compute"))
    link = b.add_device(Device("link 0->1", 0, "link"))
    a = b.add_task(2.0, d0, "forward", op="F", stage=0, mb=0, rank=0)
    s = b.add_task(0.5, link, "pp-send", op="send-act", stage=0, mb=0, rank=0)
    c = b.add_task(3.0, d1, "forward", op="F", stage=1, mb=0, rank=1)
    x = b.add_task(1.0, d0, "backward", op="B", stage=0, mb=0, rank=0)
    b.add_edge(a, s); b.add_edge(s, c); b.add_edge(a, x)
    return b.build()


def test_report_exact_values():
    g = two_rank_graph()
    r = simulate(g)
    rep = report(g, r)
    assert rep.makespan_s == 5.5
    r0, r1 = rep.per_rank
    assert (r0.busy_s, r0.idle_s) == (3.0, 2.5)
    assert (r1.busy_s, r1.idle_s) == (3.0, 2.5)
    assert r0.bubble_fraction == pytest.approx(2.5 / 3.0)
    assert rep.bubble_fraction == pytest.approx(5.0 / 6.0)
    # the send [2, 2.5] overlaps rank 0's B: not exposed; rank 0's tail and rank 1's head are bubble
    assert (r0.exposed_comm_s, r0.pipeline_bubble_s, r0.other_idle_s) == (0.0, 2.5, 0.0)
    assert (r1.exposed_comm_s, r1.pipeline_bubble_s, r1.other_idle_s) == (0.0, 2.5, 0.0)
    assert rep.imbalance == 1.0


def test_critical_path_and_split_by_category():
    g = two_rank_graph()
    r = simulate(g)
    cp = critical_path(g, r)
    assert cp.tasks == (0, 1, 2)
    assert cp.by_category == {"forward": 5.0, "pp-send": 0.5}
    assert cp.length_s == r.makespan


def test_critical_path_follows_device_queue():
    b = TaskGraphBuilder()
    d = b.add_device(Device("rank0/compute", 0, "compute"))
    b.add_task(1.0, d, "forward")
    t1 = b.add_task(1.0, d, "forward")  # independent, waits for the device
    t2 = b.add_task(1.0, d, "backward")
    b.add_edge(t1, t2)
    g = b.build()
    r = simulate(g)
    assert critical_path(g, r).tasks == (0, 1, 2)


def test_timeline_columns():
    g = two_rank_graph()
    df = timeline(g, simulate(g))
    assert list(df.columns[:8]) == ["task", "op", "category", "stage", "chunk", "mb", "rank", "device"]
    assert df.loc[1, "device_name"] == "link 0->1" and bool(df.loc[1, "is_comm"])
    assert np.allclose(df["end"] - df["start"], df["duration"])
