"""validate_schedule, check_deadlock and the PyTorch-format schedule CSV reader/writer.

Every broken schedule here is written by hand; each test checks that the error names the rank,
the position and the action, and says what to change.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from strategies import actions as actions_mod
from strategies.actions import Action, Schedule, loop_placement, v_placement
from strategies.errors import ScheduleError
from strategies.schedule_csv import infer_stage_to_rank, read_schedule_csv, write_schedule_csv
from strategies.schedules import get_schedule
from strategies.validate import check_deadlock, entry_actions, validate_schedule


@dataclass(frozen=True)
class Pair:
    """Stand-in for an overlapped forward/backward entry: anything with ``sub_actions``."""

    forward: Action
    backward: Action

    @property
    def sub_actions(self):
        return (self.forward, self.backward)


def _entry(tok: str):
    if tok.startswith("("):
        f, b = tok.strip("()").split(";")
        return Pair(Action.parse(f), Action.parse(b))
    return Action.parse(tok)


def sched(*rows: str, m: int = 1, vpp: int = 1, stage_to_rank=None) -> Schedule:
    """Schedule from rows like ``"0F0 0B0"``; ``(0F1;0B0)`` is a pair entry."""
    pp = len(rows)
    orders = tuple(tuple(_entry(t) for t in row.split()) for row in rows)
    placement = loop_placement(pp, vpp) if stage_to_rank is None else tuple(stage_to_rank)
    return Schedule("t", pp, m, vpp, placement, orders)


def error_of(fn, s) -> str:
    with pytest.raises(ScheduleError) as exc:
        fn(s)
    return str(exc.value)


# --- validate_schedule: valid inputs ----------------------------------------------------------

def test_valid_hand_written_schedules_pass():
    validate_schedule(sched("0F0 0F1 0B0 0B1", "1F0 1B0 1F1 1B1", m=2))
    validate_schedule(sched("0F0 0I0 0W0", m=1))  # split backward
    validate_schedule(sched("0F0 (0F1;0B0) 0B1", "1F0 1B0 1F1 1B1", m=2))  # pair entry


@pytest.mark.parametrize("name, pp, m, vpp", [("gpipe", 3, 5, 1), ("1f1b", 4, 6, 1), ("interleaved-1f1b", 4, 8, 3)])
def test_generated_schedules_pass(name, pp, m, vpp):
    s = get_schedule(name, pp, m, vpp)
    validate_schedule(s)
    check_deadlock(s)


# --- validate_schedule: each error ------------------------------------------------------------

def test_wrong_number_of_rank_orders():
    s = Schedule("t", 3, 1, 1, loop_placement(3, 1), ((Action(0, "F", 0),),))
    msg = error_of(validate_schedule, s)
    assert "1 rank orders but pp=3" in msg and "one action list per pipeline rank" in msg


def test_stage_to_rank_length():
    s = Schedule("t", 2, 1, 2, loop_placement(2, 1), ((), ()))
    assert "stage_to_rank has 2 entries but pp*vpp = 2*2 = 4" in error_of(validate_schedule, s)


def test_stage_out_of_range():
    msg = error_of(validate_schedule, sched("0F0 2F0", "1F0", m=1))
    assert msg.startswith("rank 0, position 1 (action 2F0): stage 2 is out of range")
    assert "stages 0..1" in msg


def test_microbatch_out_of_range():
    msg = error_of(validate_schedule, sched("0F0 0F2 0B0", m=2))
    assert msg.startswith("rank 0, position 1 (action 0F2): microbatch 2 is out of range")
    assert "microbatches=2 allows 0..1" in msg


def test_action_on_wrong_rank():
    msg = error_of(validate_schedule, sched("0F0 0B0", "1F0 0F0 1B0"))
    assert msg.startswith("rank 1, position 1 (action 0F0): stage 0 belongs to rank 0")
    assert "move 0F0 to rank 0's list" in msg


def test_duplicate_action():
    msg = error_of(validate_schedule, sched("0F0 0F0 0B0"))
    assert msg.startswith("rank 0, position 1 (action 0F0): duplicate of the same action at rank 0, position 0")


def test_duplicate_inside_pair_reports_entry_position():
    msg = error_of(validate_schedule, sched("0F0 (0F1;0B0) 0B0 0B1", m=2))
    assert msg.startswith("rank 0, position 2 (action 0B0): duplicate of the same action at rank 0, position 1")


def test_missing_forward():
    msg = error_of(validate_schedule, sched("0F0 0B0 0B1", m=2))
    assert msg == "stage 0 microbatch 1 has no forward: add 0F1 to rank 0's list"


def test_missing_backward():
    msg = error_of(validate_schedule, sched("0F0 0F1 0B0", "1F0 1F1 1B0 1B1", m=2))
    assert msg.startswith("stage 0 microbatch 1 has no backward: add 0B1 (or 0I1 then 0W1) to rank 0's list")


def test_backward_before_forward():
    msg = error_of(validate_schedule, sched("0B0 0F0"))
    assert msg == (
        "rank 0, position 0 (action 0B0): runs before its forward 0F0 at position 1; move 0F0 earlier on rank 0"
    )


def test_input_grad_before_forward():
    msg = error_of(validate_schedule, sched("0I0 0F0 0W0"))
    assert msg.startswith("rank 0, position 0 (action 0I0): runs before its forward 0F0 at position 1")


def test_weight_grad_before_input_grad():
    msg = error_of(validate_schedule, sched("0F0 0W0 0I0"))
    assert msg.startswith("rank 0, position 1 (action 0W0): runs before its input-gradient backward 0I0 at position 2")


def test_weight_grad_without_input_grad():
    msg = error_of(validate_schedule, sched("0F0 0W0"))
    assert msg.startswith("rank 0, position 1 (action 0W0): weight-gradient backward without its input-gradient")
    assert "add 0I0 before it on rank 0" in msg


def test_input_grad_without_weight_grad():
    msg = error_of(validate_schedule, sched("0F0 0I0"))
    assert "input-gradient backward without its weight-gradient backward 0W0" in msg


def test_full_and_split_backward_mixed():
    msg = error_of(validate_schedule, sched("0F0 0B0 0I0 0W0"))
    assert msg.startswith("rank 0, position 2 (action 0I0): stage 0 microbatch 0 already has a full backward 0B0")
    assert "not both" in msg


def test_non_action_entry():
    s = Schedule("t", 1, 1, 1, (0,), (("0F0",),))
    assert error_of(validate_schedule, s).startswith("rank 0, position 0: entry '0F0' is not an Action")


def test_entry_actions_flattens_pairs():
    assert entry_actions(Pair(Action(1, "F", 2), Action(0, "B", 0))) == (Action(1, "F", 2), Action(0, "B", 0))
    if hasattr(actions_mod, "Overlap"):
        ov = actions_mod.Overlap(Action(1, "F", 2), Action(0, "B", 0))
        assert entry_actions(ov) == (Action(1, "F", 2), Action(0, "B", 0))


# --- check_deadlock ----------------------------------------------------------------------------

def test_deadlock_backward_too_early():
    # Valid per validate_schedule (complete, F before B) but rank 0 runs 0B0 before 0F1, and
    # rank 1 needs 0F1 before it can produce the gradient 0B0 waits for.
    s = sched("0F0 0B0 0F1 0B1", "1F0 1F1 1B0 1B1", m=2)
    validate_schedule(s)
    msg = error_of(check_deadlock, s)
    assert msg.splitlines() == [
        "schedule 't' deadlocks: no rank can run its next action.",
        "  rank 0, position 1 (action 0B0): waits for 1B0 or 1I0 (stage 1, rank 1)",
        "  rank 1, position 1 (action 1F1): waits for 0F1 (stage 0, rank 0)",
    ]


def test_deadlock_first_action_backward():
    msg = error_of(check_deadlock, sched("0B0 0F0", "1F0 1B0"))
    assert "rank 0, position 0 (action 0B0): waits for 0F0 (stage 0, rank 0) and 1B0 or 1I0 (stage 1, rank 1)" in msg
    assert "rank 1, position 0 (action 1F0): waits for 0F0 (stage 0, rank 0)" in msg


def test_deadlock_dependency_never_scheduled():
    msg = error_of(check_deadlock, sched("0F0 0B0", ""))
    assert "rank 0, position 1 (action 0B0): waits for 1B0 or 1I0 (stage 1, rank 1, scheduled on no rank)" in msg


def test_deadlock_weight_waits_for_input_grad():
    msg = error_of(check_deadlock, sched("0F0 0W0 0I0"))
    assert "rank 0, position 1 (action 0W0): waits for 0I0 (stage 0, rank 0)" in msg


def test_no_deadlock_with_split_backward_and_pairs():
    check_deadlock(sched("0F0 0F1 0I0 0W0 0I1 0W1", "1F0 1I0 1F1 1I1 1W0 1W1", m=2))
    check_deadlock(sched("0F0 0F1 0B0 0B1", "1F0 (1F1;1B0) 1B1", m=2))


# --- CSV ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "name, pp, m, vpp",
    [("gpipe", 2, 3, 1), ("1f1b", 4, 8, 1), ("interleaved-1f1b", 4, 8, 2), ("interleaved-1f1b", 3, 4, 3)],
)
def test_csv_round_trip(name, pp, m, vpp):
    s = get_schedule(name, pp, m, vpp)
    text = write_schedule_csv(s)
    assert len(text.splitlines()) == pp
    back = read_schedule_csv(text)
    assert (back.name, back.pp, back.microbatches, back.vpp) == ("custom", pp, m, vpp)
    assert back.stage_to_rank == s.stage_to_rank
    assert back.orders == s.orders
    assert write_schedule_csv(back) == text


def test_csv_exact_text():
    assert write_schedule_csv(get_schedule("1f1b", 2, 2)) == "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n"


def test_csv_blank_cells_skipped():
    # PyTorch's _dump_csv writes idle (None) steps as empty cells.
    s = read_schedule_csv("0F0,0F1,,0B0,,0B1\n,1F0,1B0,1F1,1B1,\n\n")
    assert s.grid() == "rank 0: 0F0 0F1 0B0 0B1\nrank 1: 1F0 1B0 1F1 1B1"
    validate_schedule(s)


# Written by PyTorch 2.13: ScheduleInterleaved1F1B(pp=2, 2 stages per rank, 4 microbatches)._dump_csv
# (runtime "compute_comms" order, including its UNSHARD/SEND/RECV/REDUCE_GRAD/RESHARD actions).
TORCH_INTERLEAVED_2_4_2_CSV = (
    "0UNSHARD,2UNSHARD,0F0,0SEND_F0,2RECV_F0,0F1,0SEND_F1,2RECV_F1,2F0,2SEND_F0,2F1,2SEND_F1,2RECV_B0,0F2,"
    "0SEND_F2,2B0,2SEND_B0,2RECV_B1,0F3,0SEND_F3,2RECV_F2,2B1,2SEND_B1,0RECV_B0,2F2,2SEND_F2,2RECV_F3,0B0,"
    "0RECV_B1,2F3,2SEND_F3,0B1,2RECV_B2,2B2,2SEND_B2,2RECV_B3,2B3,2SEND_B3,2REDUCE_GRAD,2RESHARD,0RECV_B2,"
    "0B2,0RECV_B3,0B3,0REDUCE_GRAD,0RESHARD\n"
    "1UNSHARD,3UNSHARD,1RECV_F0,1F0,1SEND_F0,1RECV_F1,1F1,1SEND_F1,3RECV_F0,3F0,3RECV_F1,3B0,3SEND_B0,"
    "1RECV_F2,3F1,1RECV_B0,3B1,3SEND_B1,1RECV_F3,1F2,1SEND_F2,1RECV_B1,1B0,1SEND_B0,3RECV_F2,1F3,1SEND_F3,"
    "1B1,1SEND_B1,3RECV_F3,3F2,3B2,3SEND_B2,1RECV_B2,3F3,3B3,3SEND_B3,1RECV_B3,3REDUCE_GRAD,3RESHARD,1B2,"
    "1SEND_B2,1B3,1SEND_B3,1REDUCE_GRAD,1RESHARD\n"
)


def test_csv_reads_pytorch_dump_with_comms():
    s = read_schedule_csv(TORCH_INTERLEAVED_2_4_2_CSV)
    assert (s.pp, s.vpp, s.microbatches, s.stage_to_rank) == (2, 2, 4, (0, 1, 0, 1))
    assert s.grid() == (
        "rank 0: 0F0 0F1 2F0 2F1 0F2 2B0 0F3 2B1 2F2 0B0 2F3 0B1 2B2 2B3 0B2 0B3\n"
        "rank 1: 1F0 1F1 3F0 3B0 3F1 3B1 1F2 1B0 1F3 1B1 3F2 3B2 3F3 3B3 1B2 1B3"
    )
    assert s.orders == get_schedule("interleaved-1f1b", 2, 4, 2).orders


def test_csv_from_file(tmp_path: Path):
    p = tmp_path / "sched.csv"
    p.write_text("0F0,0B0\n1F0,1B0\n")
    assert read_schedule_csv(p, name="mine").name == "mine"
    assert read_schedule_csv(str(p)).orders == read_schedule_csv(p).orders


def test_csv_parse_error_names_line_and_column():
    with pytest.raises(ScheduleError) as exc:
        read_schedule_csv("0F0,0B0\n1F0,1X0,1B0\n")
    msg = str(exc.value)
    assert msg.startswith("line 2 (rank 1), column 2: cannot parse action '1X0'")


def test_csv_stage_on_two_ranks():
    with pytest.raises(ScheduleError) as exc:
        read_schedule_csv("0F0,0B0\n1F0,0F1,1B0\n")
    msg = str(exc.value)
    assert "line 2 (rank 1), column 2 (action 0F1): stage 0 also appears on rank 0 (line 1, column 1)" in msg


def test_csv_stage_count_not_multiple_of_ranks():
    with pytest.raises(ScheduleError, match="2 lines .ranks. but 3 stages"):
        read_schedule_csv("0F0,2F0\n1F0\n")


def test_csv_empty():
    with pytest.raises(ScheduleError, match="empty"):
        read_schedule_csv("\n\n")


def test_csv_infers_v_placement():
    # zb-v / dualpipe-v style: rank 0 holds stages 0 and 3, rank 1 holds 1 and 2.
    s = read_schedule_csv("0F0,3F0,3B0,0B0\n1F0,2F0,2B0,1B0\n")
    assert s.stage_to_rank == v_placement(2) == (0, 1, 1, 0)
    assert s.vpp == 2
    validate_schedule(s)
    check_deadlock(s)


def test_infer_placement_fills_unseen_stage_from_v_shape():
    orders = [[Action(0, "F", 0), Action(5, "F", 0)], [Action(1, "F", 0)], [Action(2, "F", 0), Action(3, "F", 0)]]
    assert infer_stage_to_rank(orders, 3, 6) == v_placement(3)


def test_csv_explicit_stage_to_rank():
    s = read_schedule_csv("0F0,0B0\n1F0,1B0\n", stage_to_rank=(0, 1))
    assert s.stage_to_rank == (0, 1)
    with pytest.raises(ScheduleError, match=r"stage_to_rank has 2 entries but the CSV uses stages 0\.\.2"):
        read_schedule_csv("0F0,0B0\n1F0,1B0\n2F0,2B0\n", stage_to_rank=(0, 1))


@pytest.mark.skipif(not hasattr(actions_mod, "Overlap"), reason="strategies.actions has no Overlap")
def test_csv_overlap_round_trip():
    text = "0F0,0F1,0B0,0B1\n1F0,(1F1;1B0)OVERLAP_F_B,1B1\n"
    s = read_schedule_csv(text)
    assert isinstance(s.orders[1][1], actions_mod.Overlap)
    assert write_schedule_csv(s) == text
    validate_schedule(s)
    check_deadlock(s)
