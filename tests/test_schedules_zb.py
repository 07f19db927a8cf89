"""zb-h1, zb-v, dualpipe-v, looped-bfs: exact orders, invariants, makespans, errors, Overlap I/O.

The string tables are the per-rank compute orders of PyTorch 2.13 ``torch.distributed.pipelining``
(ScheduleInterleavedZeroBubble, ScheduleZBVZeroBubble, ScheduleDualPipeV, ScheduleLoopedBFS) with
idle slots and SEND/RECV removed, cross-checked by a script outside the repo; their structure
follows the published algorithms (Qi et al., arXiv:2401.10241, Section 2.1 / Figure 3 for ZB-H1,
Section 6 for ZB-V; DeepSeek-V3 report, arXiv:2412.19437, Section 3.2.1 for DualPipe).
This file does not import torch.
"""
from __future__ import annotations

import json

import pytest

from strategies import validate as _validate
from strategies.actions import Action, Overlap, Schedule, flatten_order, parse_entry
from strategies.errors import ScheduleError
from strategies.schedules import SCHEDULES, get_schedule
from strategies.schedules_zb import dualpipe_v, looped_bfs, zb_h1, zb_v

NAMES = ("zb-h1", "zb-v", "dualpipe-v", "looped-bfs")


# --- local helpers ------------------------------------------------------------------------------

def accepted(name: str, pp: int, m: int, vpp: int) -> Schedule | None:
    try:
        return get_schedule(name, pp, m, vpp)
    except ScheduleError:
        return None


def sweep(name: str, pps=range(1, 6), ms=range(1, 13), vpps=(1, 2, 3)):
    """Every accepted configuration of a small grid."""
    for pp in pps:
        for m in ms:
            for vpp in vpps:
                s = accepted(name, pp, m, vpp)
                if s is not None:
                    yield s


def assert_complete(s: Schedule) -> None:
    """Local invariant check: each (stage, mb) has one F and one B or I+W, all on the owning rank,
    F before B/I, I before W (validate.py is written separately; it is also called below)."""
    seen: dict[tuple[int, str, int], tuple[int, int]] = {}
    for r, order in enumerate(s.orders):
        for i, a in enumerate(flatten_order(order)):
            assert isinstance(a, Action)
            assert s.stage_to_rank[a.stage] == r, f"{a} on rank {r}"
            assert 0 <= a.mb < s.microbatches
            key = (a.stage, a.kind, a.mb)
            assert key not in seen, f"duplicate {a}"
            seen[key] = (r, i)
    for st in range(s.num_stages):
        for mb in range(s.microbatches):
            f = seen.pop((st, "F", mb))
            b, i, w = (seen.pop((st, k, mb), None) for k in "BIW")
            assert (b is None) != (i is None), f"stage {st} mb {mb}: need exactly one of B, I"
            assert (i is None) == (w is None), f"stage {st} mb {mb}: I without W or W without I"
            grad = b or i
            assert f[1] < grad[1], f"{st}F{mb} after its backward"
            if w is not None:
                assert i[1] < w[1], f"{st}W{mb} before {st}I{mb}"
    assert not seen, f"stray actions {sorted(seen)}"


DUR = {"F": 1, "I": 1, "W": 1, "B": 2}


def _key(a: Action):
    return ("G" if a.kind in "BI" else a.kind, a.stage, a.mb)  # G: gradient to stage-1


def _deps(a: Action, n_stages: int):
    if a.kind == "F":
        return [("F", a.stage - 1, a.mb)] if a.stage else []
    if a.kind in "BI":
        return [("F", a.stage, a.mb)] + ([("G", a.stage + 1, a.mb)] if a.stage < n_stages - 1 else [])
    return [("G", a.stage, a.mb)]


def makespan(s: Schedule, early_forward: bool = False, atomic_pair: bool = False) -> int:
    """Unit-time list scheduling: each rank runs its order in sequence; an action starts when its
    rank is free and its dependencies are done (F(s,m) <- F(s-1,m); B/I(s,m) <- F(s,m) and
    B/I(s+1,m); W(s,m) <- I(s,m)); F = I = W = 1, B = 2, zero communication.

    An ``Overlap`` pair occupies its rank for F + B back to back: the forward half starts when the
    rank is free and the forward's inputs are ready (with ``atomic_pair`` it also waits for the
    backward's inputs), the backward half right after it (later if its input gradient is not
    there yet). ``early_forward``: the forward's output is released at the forward's end instead
    of the pair's end. Raises AssertionError on a deadlock.
    """
    n_stages = s.num_stages
    done: dict = {}
    free = [0] * s.pp
    head = [0] * s.pp
    left = sum(len(o) for o in s.orders)
    while left:
        progressed = False
        for r, order in enumerate(s.orders):
            while head[r] < len(order):
                e = order[head[r]]
                subs = e.sub_actions if isinstance(e, Overlap) else (e,)
                if any(d not in done for a in subs for d in _deps(a, n_stages)):
                    break
                t = max([free[r]] + [done[d] for d in _deps(subs[0], n_stages)])
                if isinstance(e, Overlap):
                    fwd, bwd = subs
                    if atomic_pair:
                        t = max([t] + [done[d] for d in _deps(bwd, n_stages)])
                    f_end = t + DUR["F"]
                    end = max([f_end] + [done[d] for d in _deps(bwd, n_stages)]) + DUR[bwd.kind]
                    done[_key(fwd)] = f_end if early_forward else end
                    done[_key(bwd)] = end
                else:
                    end = t + DUR[e.kind]
                    done[_key(e)] = end
                free[r] = end
                head[r] += 1
                left -= 1
                progressed = True
        assert progressed, f"{s.name} pp={s.pp} m={s.microbatches}: deadlock at heads {head}"
    return max(free)


# --- registry -----------------------------------------------------------------------------------

def test_registered():
    assert {"zb-h1": zb_h1, "zb-v": zb_v, "dualpipe-v": dualpipe_v, "looped-bfs": looped_bfs}.items() \
        <= SCHEDULES.items()


# --- exact orders (PyTorch 2.13, cross-checked) --------------------------------------------------

GRIDS = {
    # ZB-H1, Figure 3 (top) shape with p = 4: rank r has p-1-r warm-up F, then F/I steps, and
    # postpones its first r W passes to the cool-down.
    ("zb-h1", 4, 8, 1): """
rank 0: 0F0 0F1 0F2 0F3 0I0 0W0 0F4 0I1 0W1 0F5 0I2 0W2 0F6 0I3 0W3 0F7 0I4 0W4 0I5 0W5 0I6 0W6 0I7 0W7
rank 1: 1F0 1F1 1F2 1I0 1F3 1I1 1W0 1F4 1I2 1W1 1F5 1I3 1W2 1F6 1I4 1W3 1F7 1I5 1W4 1I6 1W5 1I7 1W6 1W7
rank 2: 2F0 2F1 2I0 2F2 2I1 2F3 2I2 2W0 2F4 2I3 2W1 2F5 2I4 2W2 2F6 2I5 2W3 2F7 2I6 2W4 2I7 2W5 2W6 2W7
rank 3: 3F0 3I0 3F1 3I1 3F2 3I2 3F3 3I3 3W0 3F4 3I4 3W1 3F5 3I5 3W2 3F6 3I6 3W3 3F7 3I7 3W4 3W5 3W6 3W7
""",
    ("zb-h1", 2, 4, 2): """
rank 0: 0F0 0F1 2F0 2F1 2I0 2W0 0F2 2I1 2W1 0F3 0I0 0W0 2F2 0I1 0W1 2F3 2I2 2W2 2I3 2W3 0I2 0W2 0I3 0W3
rank 1: 1F0 1F1 3F0 3I0 3F1 3I1 3W0 1F2 1I0 3W1 1F3 1I1 1W0 3F2 3I2 1W1 3F3 3I3 3W2 1I2 3W3 1I3 1W2 1W3
""",
    ("zb-v", 2, 4, 2): """
rank 0: 0F0 0F1 0F2 3F0 3I0 3W0 3F1 3I1 3W1 0F3 0I0 0W0 3F2 3I2 3W2 0I1 0W1 3F3 3I3 3W3 0I2 0W2 0I3 0W3
rank 1: 1F0 2F0 1F1 2F1 2I0 2W0 1F2 1I0 1W0 2F2 2I1 2W1 1F3 1I1 1W1 2F3 2I2 2W2 1I2 2I3 1I3 1W2 2W3 1W3
""",
    # fewer microbatches than 2p-1: generated for 2p-1 and the missing microbatches dropped
    ("zb-v", 2, 2, 2): """
rank 0: 0F0 0F1 3F0 3I0 3W0 3F1 3I1 3W1 0I0 0W0 0I1 0W1
rank 1: 1F0 2F0 1F1 2F1 2I0 2W0 1I0 1W0 2I1 2W1 1I1 1W1
""",
    ("dualpipe-v", 1, 2, 2): """
rank 0: 0F0 1F0 0F1 1B0 (1F1;0B0)OVERLAP_F_B 1B1 0I1 0W1
""",
    ("dualpipe-v", 2, 4, 2): """
rank 0: 0F0 0F1 0F2 3F0 3I0 3W0 3F1 (0F3;3B1)OVERLAP_F_B (3F2;0B0)OVERLAP_F_B 3B2 (3F3;0B1)OVERLAP_F_B 3B3 0I2 0W2 0I3 0W3
rank 1: 1F0 2F0 1F1 2F1 1F2 2B0 (2F2;1B0)OVERLAP_F_B (1F3;2B1)OVERLAP_F_B (2F3;1B1)OVERLAP_F_B 2B2 1B2 2I3 1I3 2W3 1W3
""",
    ("dualpipe-v", 3, 6, 2): """
rank 0: 0F0 0F1 0F2 0F3 0F4 5F0 5I0 5W0 5F1 5I1 5W1 5F2 (0F5;5B2)OVERLAP_F_B (5F3;0B0)OVERLAP_F_B 5B3 (5F4;0B1)OVERLAP_F_B 5B4 (5F5;0B2)OVERLAP_F_B 5B5 0I3 0W3 0I4 0W4 0I5 0W5
rank 1: 1F0 1F1 1F2 4F0 1F3 4F1 4I0 4W0 4F2 (1F4;4B1)OVERLAP_F_B (4F3;1B0)OVERLAP_F_B (1F5;4B2)OVERLAP_F_B (4F4;1B1)OVERLAP_F_B 4B3 (4F5;1B2)OVERLAP_F_B 4B4 1B3 4I5 1I4 4W5 1I5 1W4 1W5
rank 2: 2F0 3F0 2F1 3F1 2F2 3F2 2F3 3B0 (3F3;2B0)OVERLAP_F_B (2F4;3B1)OVERLAP_F_B (3F4;2B1)OVERLAP_F_B (2F5;3B2)OVERLAP_F_B (3F5;2B2)OVERLAP_F_B 3B3 2B3 3B4 2I4 3I5 2I5 2W4 3W5 2W5
""",
    ("looped-bfs", 2, 2, 2): """
rank 0: 0F0 0F1 2F0 2F1 2B1 2B0 0B1 0B0
rank 1: 1F0 1F1 3F0 3F1 3B1 3B0 1B1 1B0
""",
}


@pytest.mark.parametrize("cfg", sorted(GRIDS), ids=lambda c: "-".join(map(str, c)))
def test_exact_orders(cfg):
    s = get_schedule(*cfg)
    assert s.grid() == GRIDS[cfg].strip()
    # the printed grid parses back to the same entries
    for r, line in enumerate(GRIDS[cfg].strip().splitlines()):
        entries = tuple(parse_entry(t) for t in line.split(": ", 1)[1].split())
        assert entries == s.orders[r]


def test_zb_h1_paper_rules():
    """ZB-H1 (Qi et al. Section 2.1): 1F1B warm-up p-1-r, same in-flight count as 1F1B, rank r
    runs r+1 I passes before its first W."""
    for pp in range(1, 7):
        for m in range(pp, 3 * pp + 1):
            s = accepted("zb-h1", pp, m, 1)
            if s is None:
                continue
            for r, order in enumerate(s.orders):
                kinds = [a.kind for a in order]
                assert kinds[: kinds.index("I")].count("F") == min(m, pp - r)  # warm-up + 1 steady F
                assert kinds[: kinds.index("W")].count("I") == min(m, r + 1)
                inflight = peak = 0
                for k in kinds:
                    inflight += {"F": 1, "I": -1}.get(k, 0)
                    peak = max(peak, inflight)
                assert peak == min(m, pp - r)


# --- invariants ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_complete_and_deadlock_free(name):
    n = 0
    for s in sweep(name):
        assert_complete(s)
        _validate.validate_schedule(s)
        _validate.check_deadlock(s)
        makespan(s)  # asserts no deadlock under the local simulator too
        n += 1
    assert n > 50


@pytest.mark.parametrize("name", ("zb-v", "dualpipe-v"))
def test_v_placement(name):
    for pp in range(1, 6):
        s = get_schedule(name, pp, 2 * pp + 1, 2)
        assert s.vpp == 2 and s.num_stages == 2 * pp
        for r in range(pp):
            assert s.stage_to_rank[r] == r and s.stage_to_rank[2 * pp - 1 - r] == r
            assert {a.stage for a in flatten_order(s.orders[r])} == {r, 2 * pp - 1 - r}
        assert get_schedule(name, pp, 2 * pp + 1, 1) == s  # vpp=1 means the same 2-chunk V


@pytest.mark.parametrize("name", ("zb-h1", "looped-bfs"))
def test_loop_placement(name):
    s = get_schedule(name, 3, 6, 2)
    assert s.stage_to_rank == (0, 1, 2, 0, 1, 2)
    for r in range(3):
        assert {a.stage for a in flatten_order(s.orders[r])} == {r, r + 3}


def test_split_backward_kinds():
    for s in sweep("zb-h1"):
        assert {a.kind for o in s.orders for a in o} == {"F", "I", "W"}
    for s in sweep("zb-v"):
        assert {a.kind for o in s.orders for a in o} == {"F", "I", "W"}
    for s in sweep("looped-bfs"):
        assert {a.kind for o in s.orders for a in o} == {"F", "B"}


def test_dualpipe_v_pairs():
    """DualPipe (DeepSeek-V3 Section 3.2.1) overlaps a forward chunk with a backward chunk: each
    pair is F of one of the rank's two stages with B of the other, and both halves hand their
    output to the same neighbour rank."""
    for s in sweep("dualpipe-v"):
        pp = s.pp
        n_pairs = 0
        for r, order in enumerate(s.orders):
            for e in order:
                if not isinstance(e, Overlap):
                    continue
                n_pairs += 1
                f, b = e.sub_actions
                assert {f.stage, b.stage} == {r, 2 * pp - 1 - r} and b.kind == "B"
                nxt_f = f.stage + 1          # consumer of the forward output
                nxt_b = b.stage - 1          # consumer of the input gradient
                if 0 <= nxt_b and nxt_f < 2 * pp:
                    assert s.stage_to_rank[nxt_f] == s.stage_to_rank[nxt_b]
        # main step: two pairs per iteration (rank p-1 runs its first F0,B1 unpaired); then p-r-1
        assert n_pairs == sum(2 * (s.microbatches - 2 * pp + r + 1) + (pp - r - 1) - (r == pp - 1)
                              for r in range(pp))


# --- makespans (uniform F = I = W = 1, B = 2, zero comm) ----------------------------------------

def test_makespan_zb_h1():
    checked = 0
    for pp in range(1, 7):
        for m in range(pp, 3 * pp + 3):
            for v in (1, 2, 3):
                s = accepted("zb-h1", pp, m, v)
                if s is not None:
                    assert makespan(s) == 3 * v * m + (pp - 1), (pp, m, v)
                    checked += 1
    assert checked > 100


def test_makespan_zb_v():
    for pp in range(1, 7):
        for m in range(2 * pp - 1, 2 * pp + 8):
            assert makespan(get_schedule("zb-v", pp, m, 2)) == 6 * m + (pp - 1), (pp, m)


def test_makespan_dualpipe_v():
    for pp in range(1, 7):
        for m in range(2 * pp, 2 * pp + 8):
            s = get_schedule("dualpipe-v", pp, m, 2)
            assert makespan(s, early_forward=False) == 6 * m + 2 * (pp - 1), (pp, m)
            assert makespan(s, early_forward=True) == 6 * m + (pp - 1), (pp, m)
            # a pair that waits for both halves' inputs before starting gains nothing from the
            # early forward hand-off
            assert makespan(s, early_forward=True, atomic_pair=True) == 6 * m + 2 * (pp - 1)


def test_makespan_looped_bfs():
    # BFS: all forwards, then all backwards; with one chunk it is GPipe: (m + p - 1) * (F + B)
    for pp in range(1, 6):
        for m in range(1, 8):
            assert makespan(get_schedule("looped-bfs", pp, m, 1)) == 3 * (m + pp - 1)


# --- errors -------------------------------------------------------------------------------------

def test_zb_h1_rejects_uneven_rounds():
    with pytest.raises(ScheduleError, match=r"microbatches=5.*pp=2.*< 2\*pp \(= 4\).*\(= 2\).*4 and 6"):
        get_schedule("zb-h1", 2, 5, 1)
    with pytest.raises(ScheduleError, match="microbatches=11"):
        zb_h1(4, 11, 2)
    zb_h1(4, 7, 2)   # m < 2p: one round
    zb_h1(4, 10, 2)  # 10 // 4 = 2 rounds of 5


@pytest.mark.parametrize("fn", (zb_v, dualpipe_v))
def test_v_schedules_reject_vpp(fn):
    with pytest.raises(ScheduleError, match=r"vpp must be 1 or 2.*got vpp=3"):
        fn(2, 8, 3)


def test_dualpipe_v_needs_2p_microbatches():
    with pytest.raises(ScheduleError, match=r"microbatches must be >= 2\*pp \(= 8.*got microbatches=7"):
        get_schedule("dualpipe-v", 4, 7, 2)
    get_schedule("dualpipe-v", 4, 8, 2)


@pytest.mark.parametrize("fn", (zb_h1, zb_v, dualpipe_v, looped_bfs))
@pytest.mark.parametrize("field,args", [("pp", (0, 4, 1)), ("microbatches", (2, -1, 1)), ("vpp", (2, 4, 0))])
def test_direct_call_rejects_bad_sizes(fn, field, args):
    with pytest.raises(ScheduleError, match=f"{field} must be a positive integer"):
        fn(*args)


# --- Overlap entries ----------------------------------------------------------------------------

def test_overlap_print_parse_round_trip():
    o = Overlap(Action(0, "F", 14), Action(1, "B", 10))
    assert str(o) == "(0F14;1B10)OVERLAP_F_B"
    assert o.sub_actions == (Action(0, "F", 14), Action(1, "B", 10))
    assert parse_entry(str(o)) == o == Overlap.parse(" (0F14; 1B10)OVERLAP_F_B ")
    assert parse_entry("(3F2;0I0)OVERLAP_F_B").backward == Action(0, "I", 0)
    assert parse_entry("2W7") == Action(2, "W", 7)
    for s in sweep("dualpipe-v"):
        for order in s.orders:
            assert tuple(parse_entry(str(e)) for e in order) == order


def test_flatten_order():
    order = [Action(0, "F", 0), Overlap.parse("(1F0;0B0)OVERLAP_F_B"), Action(1, "B", 0)]
    assert [str(a) for a in flatten_order(order)] == ["0F0", "1F0", "0B0", "1B0"]
    assert flatten_order(()) == []


@pytest.mark.parametrize("text", ["(0F1)OVERLAP_F_B", "(0F1;1B0)", "(0F1;1B0)OVERLAP", "(0F1;1X0)OVERLAP_F_B",
                                  "0F1;1B0"])
def test_overlap_parse_errors(text):
    with pytest.raises(ScheduleError):
        parse_entry(text)


def test_overlap_kind_checks():
    with pytest.raises(ScheduleError, match="forward must be an F action"):
        Overlap(Action(0, "B", 0), Action(1, "B", 0))
    with pytest.raises(ScheduleError, match="backward must be a B or I action"):
        Overlap(Action(0, "F", 0), Action(1, "W", 0))


def test_to_json_with_overlap():
    d = json.loads(json.dumps(get_schedule("dualpipe-v", 2, 4, 2).to_json()))
    pair = next(e for e in d["orders"][0] if e["kind"] == "OVERLAP_F_B")
    assert pair["sub_actions"] == [{"stage": 0, "mb": 3, "kind": "F"}, {"stage": 3, "mb": 1, "kind": "B"}]
