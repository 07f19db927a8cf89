"""gpipe, 1f1b, interleaved-1f1b: exact per-rank orders, accepted sizes, errors, properties.

The string tables below were worked out by hand from the published algorithms:

* 1F1B (Megatron-LM ``forward_backward_pipelining_without_interleaving``): rank r runs
  ``min(pp - r - 1, m)`` warm-up forwards, then forward/backward pairs, then the rest of the
  backwards.
* Interleaved 1F1B (Narayanan et al. 2021, Sec. 2.2; Megatron-LM
  ``forward_backward_pipelining_with_interleaving``): rank r runs
  ``min((pp - r - 1) * 2 + (vpp - 1) * g, m * vpp)`` warm-up forwards, the k-th forward is chunk
  ``(k mod g*vpp) div g`` of microbatch ``(k div g*vpp) * g + k mod g``, the k-th backward the
  same with the chunk reversed, and chunk c on rank r is stage ``c * pp + r``.  The group size g
  is pp when pp divides m, and ``m // max(1, m // pp)`` otherwise (PyTorch
  ``ScheduleInterleaved1F1B``'s rounds).

Each table was then checked against PyTorch 2.13 ``torch.distributed.pipelining`` (idle slots and
send/recv dropped) by a script outside the repository.  This file does not import torch.
"""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strategies.actions import KINDS, Action, loop_placement
from strategies.errors import ScheduleError
from strategies.schedules import SCHEDULES, get_schedule
from strategies.validate import check_deadlock, validate_schedule


def grid(text: str) -> str:
    """Normalize a hand-written table: strip indentation and blank lines."""
    return "\n".join(line.strip() for line in text.strip().splitlines() if line.strip())


# --- exact tables ------------------------------------------------------------------------------

GPIPE_2_3 = """
rank 0: 0F0 0F1 0F2 0B0 0B1 0B2
rank 1: 1F0 1F1 1F2 1B0 1B1 1B2
"""

ONE_F_ONE_B_2_4 = """
rank 0: 0F0 0F1 0B0 0F2 0B1 0F3 0B2 0B3
rank 1: 1F0 1B0 1F1 1B1 1F2 1B2 1F3 1B3
"""

ONE_F_ONE_B_4_8 = """
rank 0: 0F0 0F1 0F2 0F3 0B0 0F4 0B1 0F5 0B2 0F6 0B3 0F7 0B4 0B5 0B6 0B7
rank 1: 1F0 1F1 1F2 1B0 1F3 1B1 1F4 1B2 1F5 1B3 1F6 1B4 1F7 1B5 1B6 1B7
rank 2: 2F0 2F1 2B0 2F2 2B1 2F3 2B2 2F4 2B3 2F5 2B4 2F6 2B5 2F7 2B6 2B7
rank 3: 3F0 3B0 3F1 3B1 3F2 3B2 3F3 3B3 3F4 3B4 3F5 3B5 3F6 3B6 3F7 3B7
"""

# m < pp: Megatron accepts it (warm-up is capped at m); PyTorch Schedule1F1B does not.
ONE_F_ONE_B_4_3 = """
rank 0: 0F0 0F1 0F2 0B0 0B1 0B2
rank 1: 1F0 1F1 1F2 1B0 1B1 1B2
rank 2: 2F0 2F1 2B0 2F2 2B1 2B2
rank 3: 3F0 3B0 3F1 3B1 3F2 3B2
"""

# pp=2, vpp=2, m=4: g=2; warm-up 4 on rank 0, 2 on rank 1.
INTERLEAVED_2_4_2 = """
rank 0: 0F0 0F1 2F0 2F1 0F2 2B0 0F3 2B1 2F2 0B0 2F3 0B1 2B2 2B3 0B2 0B3
rank 1: 1F0 1F1 3F0 3B0 3F1 3B1 1F2 1B0 1F3 1B1 3F2 3B2 3F3 3B3 1B2 1B3
"""

# pp=4, vpp=2, m=8: g=4; warm-up 10, 8, 6, 4.
INTERLEAVED_4_8_2 = """
rank 0: 0F0 0F1 0F2 0F3 4F0 4F1 4F2 4F3 0F4 0F5 0F6 4B0 0F7 4B1 4F4 4B2 4F5 4B3 4F6 0B0 4F7 0B1 0B2 0B3 4B4 4B5 4B6 4B7 0B4 0B5 0B6 0B7
rank 1: 1F0 1F1 1F2 1F3 5F0 5F1 5F2 5F3 1F4 5B0 1F5 5B1 1F6 5B2 1F7 5B3 5F4 1B0 5F5 1B1 5F6 1B2 5F7 1B3 5B4 5B5 5B6 5B7 1B4 1B5 1B6 1B7
rank 2: 2F0 2F1 2F2 2F3 6F0 6F1 6F2 6B0 6F3 6B1 2F4 6B2 2F5 6B3 2F6 2B0 2F7 2B1 6F4 2B2 6F5 2B3 6F6 6B4 6F7 6B5 6B6 6B7 2B4 2B5 2B6 2B7
rank 3: 3F0 3F1 3F2 3F3 7F0 7B0 7F1 7B1 7F2 7B2 7F3 7B3 3F4 3B0 3F5 3B1 3F6 3B2 3F7 3B3 7F4 7B4 7F5 7B5 7F6 7B6 7F7 7B7 3B4 3B5 3B6 3B7
"""

# pp=4, vpp=2, m=pp=4: warm-up min(10, 8)=8, 8, 6, 4 (current Megatron-LM and PyTorch; Megatron
# releases before microbatch_group_size_per_vp_stage made all 8 forwards warm-up on every rank).
INTERLEAVED_4_4_2 = """
rank 0: 0F0 0F1 0F2 0F3 4F0 4F1 4F2 4F3 4B0 4B1 4B2 4B3 0B0 0B1 0B2 0B3
rank 1: 1F0 1F1 1F2 1F3 5F0 5F1 5F2 5F3 5B0 5B1 5B2 5B3 1B0 1B1 1B2 1B3
rank 2: 2F0 2F1 2F2 2F3 6F0 6F1 6F2 6B0 6F3 6B1 6B2 6B3 2B0 2B1 2B2 2B3
rank 3: 3F0 3F1 3F2 3F3 7F0 7B0 7F1 7B1 7F2 7B2 7F3 7B3 3B0 3B1 3B2 3B3
"""

# m not a multiple of pp (PyTorch only): pp=2, vpp=2, m=3 -> one round of g=3.
INTERLEAVED_2_3_2 = """
rank 0: 0F0 0F1 0F2 2F0 2F1 2F2 2B0 2B1 2B2 0B0 0B1 0B2
rank 1: 1F0 1F1 1F2 3F0 3B0 3F1 3B1 3F2 3B2 1B0 1B1 1B2
"""

# m < pp (PyTorch only): pp=4, vpp=2, m=3 -> g=3.
INTERLEAVED_4_3_2 = """
rank 0: 0F0 0F1 0F2 4F0 4F1 4F2 4B0 4B1 4B2 0B0 0B1 0B2
rank 1: 1F0 1F1 1F2 5F0 5F1 5F2 5B0 5B1 5B2 1B0 1B1 1B2
rank 2: 2F0 2F1 2F2 6F0 6F1 6F2 6B0 6B1 6B2 2B0 2B1 2B2
rank 3: 3F0 3F1 3F2 7F0 7B0 7F1 7B1 7F2 7B2 3B0 3B1 3B2
"""

# pp=3, vpp=2, m=4 -> g=4 (m // max(1, m // pp) = 4); warm-up min(8, 8), 6, 4.
INTERLEAVED_3_4_2 = """
rank 0: 0F0 0F1 0F2 0F3 3F0 3F1 3F2 3F3 3B0 3B1 3B2 3B3 0B0 0B1 0B2 0B3
rank 1: 1F0 1F1 1F2 1F3 4F0 4F1 4F2 4B0 4F3 4B1 4B2 4B3 1B0 1B1 1B2 1B3
rank 2: 2F0 2F1 2F2 2F3 5F0 5B0 5F1 5B1 5F2 5B2 5F3 5B3 2B0 2B1 2B2 2B3
"""


@pytest.mark.parametrize(
    "name, pp, m, vpp, table",
    [
        ("gpipe", 2, 3, 1, GPIPE_2_3),
        ("1f1b", 2, 4, 1, ONE_F_ONE_B_2_4),
        ("1f1b", 4, 8, 1, ONE_F_ONE_B_4_8),
        ("1f1b", 4, 3, 1, ONE_F_ONE_B_4_3),
        ("interleaved-1f1b", 2, 4, 1, ONE_F_ONE_B_2_4),
        ("interleaved-1f1b", 2, 4, 2, INTERLEAVED_2_4_2),
        ("interleaved-1f1b", 4, 8, 2, INTERLEAVED_4_8_2),
        ("interleaved-1f1b", 4, 4, 2, INTERLEAVED_4_4_2),
        ("interleaved-1f1b", 2, 3, 2, INTERLEAVED_2_3_2),
        ("interleaved-1f1b", 4, 3, 2, INTERLEAVED_4_3_2),
        ("interleaved-1f1b", 3, 4, 2, INTERLEAVED_3_4_2),
    ],
)
def test_exact_orders(name, pp, m, vpp, table):
    s = get_schedule(name, pp, m, vpp)
    assert s.grid() == grid(table)
    assert (s.name, s.pp, s.microbatches, s.vpp) == (name, pp, m, vpp)
    assert s.stage_to_rank == loop_placement(pp, vpp)
    validate_schedule(s)
    check_deadlock(s)


def test_interleaved_placement_is_looped():
    s = get_schedule("interleaved-1f1b", 4, 8, 3)
    assert s.stage_to_rank == tuple(st % 4 for st in range(12))
    for r, order in enumerate(s.orders):
        assert {a.stage for a in order} == {r, r + 4, r + 8}


def test_registered_names():
    assert {"gpipe", "1f1b", "interleaved-1f1b"} <= set(SCHEDULES)


# --- errors ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
def test_single_stage_schedules_reject_vpp(name):
    with pytest.raises(ScheduleError, match=r"vpp must be 1, got vpp=2.*interleaved-1f1b"):
        get_schedule(name, 4, 8, 2)


@pytest.mark.parametrize(
    "pp, m, nearby",
    [(2, 5, "microbatches=4 or 6"), (4, 9, "microbatches=8 or 10"), (3, 7, "microbatches=6 or 8")],
)
def test_interleaved_rejects_uneven_rounds(pp, m, nearby):
    # Neither Megatron-LM (needs m % pp == 0) nor PyTorch (needs m % max(1, m // pp) == 0) runs these.
    with pytest.raises(ScheduleError) as exc:
        get_schedule("interleaved-1f1b", pp, m, 2)
    msg = str(exc.value)
    assert f"microbatches={m}" in msg and f"pp={pp}" in msg and nearby in msg


def test_interleaved_vpp1_accepts_any_m():
    # vpp == 1 is plain 1F1B (Megatron dispatches to the non-interleaved schedule).
    assert get_schedule("interleaved-1f1b", 4, 9, 1).orders == get_schedule("1f1b", 4, 9, 1).orders


@pytest.mark.parametrize("field, args", [("pp", (0, 4, 1)), ("microbatches", (2, 0, 1)), ("vpp", (2, 4, 0))])
def test_non_positive_sizes(field, args):
    with pytest.raises(ScheduleError, match=field):
        get_schedule("1f1b", *args)


# --- Action print/parse ------------------------------------------------------------------------

@given(st.integers(0, 10_000), st.sampled_from(KINDS), st.integers(0, 10_000))
def test_action_round_trip(stage, kind, mb):
    a = Action(stage, kind, mb)
    assert Action.parse(str(a)) == a
    assert str(a) == f"{stage}{kind}{mb}"


@pytest.mark.parametrize("text", ["F0", "0X1", "0F", "-1F0", "0 F 0", ""])
def test_action_parse_errors(text):
    with pytest.raises(ScheduleError, match="cannot parse action"):
        Action.parse(text)


# --- properties --------------------------------------------------------------------------------

@st.composite
def interleaved_sizes(draw):
    """pp in 1..8, vpp in 1..4, and m either below 2*pp (one round) or a multiple of pp."""
    pp = draw(st.integers(1, 8))
    vpp = draw(st.integers(1, 4))
    m = draw(st.one_of(st.integers(1, 2 * pp - 1 if pp > 1 else 1), st.integers(1, 4).map(lambda k: k * pp)))
    return pp, m, vpp


@settings(max_examples=150, deadline=None)
@given(interleaved_sizes())
def test_interleaved_is_valid_and_deadlock_free(sizes):
    pp, m, vpp = sizes
    s = get_schedule("interleaved-1f1b", pp, m, vpp)
    validate_schedule(s)
    check_deadlock(s)
    assert all(len(order) == 2 * m * vpp for order in s.orders)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 8), st.integers(1, 4), st.integers(1, 4))
def test_interleaved_warmup_matches_megatron(pp, rounds, vpp):
    """With m a multiple of pp, rank r's leading forwards are Megatron's warm-up + the first steady F."""
    m = rounds * pp
    s = get_schedule("interleaved-1f1b", pp, m, vpp)
    for r, order in enumerate(s.orders):
        lead = next((i for i, a in enumerate(order) if a.kind == "B"), len(order))
        if vpp == 1:
            warmup = min(pp - r - 1, m)
        else:
            warmup = min((pp - r - 1) * 2 + (vpp - 1) * pp, m * vpp)
        assert lead == min(warmup + 1, m * vpp)


@settings(max_examples=80, deadline=None)
@given(st.sampled_from(["gpipe", "1f1b"]), st.integers(1, 8), st.integers(1, 24))
def test_single_stage_schedules_valid(name, pp, m):
    s = get_schedule(name, pp, m, 1)
    validate_schedule(s)
    check_deadlock(s)
    # 1F1B keeps at most pp - r forwards in flight on rank r (Megatron's memory bound).
    if name == "1f1b":
        for r, order in enumerate(s.orders):
            live = peak = 0
            for a in order:
                live += 1 if a.kind == "F" else -1
                peak = max(peak, live)
            assert peak == min(pp - r, m)
