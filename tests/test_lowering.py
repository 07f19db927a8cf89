"""Pipeline lowering on hand-written schedules: exact timelines and structure."""
import pytest

from simulator.engine.core import simulate
from strategies.actions import Action, Schedule
from strategies.errors import ScheduleError
from taskgraph.graph import CATEGORIES
from taskgraph.lower_pipeline import StageCosts, lower_uniform, per_stage
from tests.helpers import assert_timeline_invariants


def sched(rows, stage_to_rank=None, m=None, name="hand"):
    orders = tuple(tuple(Action.parse(x) for x in row.split()) for row in rows)
    pp = len(orders)
    s2r = stage_to_rank or tuple(range(pp))
    mb = m if m is not None else 1 + max(a.mb for o in orders for a in o)
    return Schedule(name, pp, mb, len(s2r) // pp, tuple(s2r), orders)


ONE_F_ONE_B_P2_M3 = ["0F0 0F1 0B0 0F2 0B1 0B2", "1F0 1B0 1F1 1B1 1F2 1B2"]


def test_1f1b_exact_timeline():
    g = lower_uniform(sched(ONE_F_ONE_B_P2_M3), StageCosts.uniform(2, 1.0, 2.0))
    r = simulate(g)
    comp = {(int(g.stage[t]), CATEGORIES[g.category[t]][0].upper(), int(g.mb[t])): (r.start[t], r.end[t])
            for t in range(g.num_tasks) if CATEGORIES[g.category[t]] != "pp-send"}
    # rank 1: F0 [1,2] B0 [2,4] F1 [4,5] B1 [5,7] F2 [7,8] B2 [8,10]; rank 0 B2 ends at 12
    assert comp[(1, "F", 0)] == (1.0, 2.0)
    assert comp[(1, "B", 0)] == (2.0, 4.0)
    assert comp[(0, "B", 0)] == (4.0, 6.0)
    assert comp[(0, "F", 2)] == (6.0, 7.0)
    assert comp[(1, "B", 2)] == (8.0, 10.0)
    assert comp[(0, "B", 2)] == (10.0, 12.0)
    assert r.makespan == 12.0 == (3 + 2 - 1) * (1.0 + 2.0)
    assert_timeline_invariants(g, r)


def test_p2p_transfers_take_time_and_overlap_compute():
    g = lower_uniform(sched(ONE_F_ONE_B_P2_M3), StageCosts.uniform(2, 1.0, 2.0, p2p=0.5))
    r = simulate(g)
    sends = [t for t in range(g.num_tasks) if CATEGORIES[g.category[t]] == "pp-send"]
    assert len(sends) == 6  # 3 activations 0->1, 3 gradients 1->0
    assert {g.devices[g.device[t]].name for t in sends} == {"link 0->1", "link 1->0"}
    # F0 on rank 1 starts after F0 on rank 0 (1.0) + transfer (0.5)
    f10 = next(t for t in range(g.num_tasks) if g.stage[t] == 1 and g.mb[t] == 0 and CATEGORIES[g.category[t]] == "forward")
    assert r.start[f10] == 1.5
    # rank 0 keeps computing F1 while activation 0 is in flight
    f01 = next(t for t in range(g.num_tasks) if g.stage[t] == 0 and g.mb[t] == 1 and CATEGORIES[g.category[t]] == "forward")
    assert r.start[f01] == 1.0
    assert_timeline_invariants(g, r)


def test_same_rank_stages_need_no_transfer():
    # V placement on one rank pair: stages 0,3 on rank 0 and 1,2 on rank 1
    s = sched(["0F0 3F0 3B0 0B0", "1F0 2F0 2B0 1B0"], stage_to_rank=(0, 1, 1, 0))
    g = lower_uniform(s, StageCosts.uniform(4, 1.0, 2.0, p2p=0.25))
    sends = [t for t in range(g.num_tasks) if CATEGORIES[g.category[t]] == "pp-send"]
    assert len(sends) == 4  # 0->1 and 2->3 forward, 3->2 and 1->0 backward; 1->2 and 2->1 are local
    r = simulate(g)
    assert r.makespan == pytest.approx(4 * 1.0 + 4 * 2.0 + 4 * 0.25)


def test_split_backward_w_after_i():
    s = sched(["0F0 0I0 0W0", "1F0 1I0 1W0"])
    g = lower_uniform(s, StageCosts.uniform(2, 1.0, 2.0, ti=1.0, tw=1.0))
    r = simulate(g)
    # 0I0 waits for 1I0 (ends 3), not for 1W0
    i0 = next(t for t in range(g.num_tasks) if g.stage[t] == 0 and CATEGORIES[g.category[t]] == "backward-input")
    assert r.start[i0] == 3.0
    assert r.makespan == 5.0


def test_misplaced_and_missing_actions_raise():
    with pytest.raises(ScheduleError, match="lives on rank"):
        lower_uniform(sched(["1F0", "0F0"], stage_to_rank=(0, 1)), StageCosts.uniform(2, 1, 1))
    with pytest.raises(ScheduleError, match="no F action for stage 0"):
        lower_uniform(sched(["0B0", "1F0 1B0"]), StageCosts.uniform(2, 1, 1))


def test_per_stage_broadcast_and_length_check():
    assert per_stage(2.0, 3, "x") == (2.0, 2.0, 2.0)
    with pytest.raises(ScheduleError, match="3 stages"):
        per_stage([1, 2], 3, "forward_ms")


def test_deadlocked_order_reports_blocked_heads():
    from strategies.errors import SimulationError
    # rank 0 runs its backward before its forward of mb1 is ... a genuine cycle: 0B0 before 0F0? F->B edge.
    s = sched(["0F0 0B1 0F1 0B0", "1F0 1B0 1F1 1B1"])
    g = lower_uniform(s, StageCosts.uniform(2, 1.0, 2.0))
    with pytest.raises(SimulationError) as e:
        simulate(g)
    msg = str(e.value)
    assert "Blocked head task of each device" in msg and "rank0/compute" in msg and "mb=1" in msg
