"""Operator-level lowering on synthetic cost records: exact timelines, memory balance, DP epilogue."""
import numpy as np
import pytest

from simulator.engine import simulate
from strategies.actions import Action, Schedule
from taskgraph.graph import CATEGORIES
from taskgraph.lower_model import Bucket, Comm, IterationWork, LayerWork, OpCost, StageWork, lower_model
from tests.helpers import assert_timeline_invariants


def one_stage(kinds="F B"):
    orders = (tuple(Action.parse(f"0{k}0") for k in kinds.split()),)
    return Schedule("hand", 1, 1, 1, (0,), orders)


def cats(g):
    return [CATEGORIES[c] for c in g.category]


def test_single_rank_forward_backward_exact():
    tp = Comm("tp-comm", "tp-allreduce", 0.5)
    ops = (OpCost("a", 1.0, 1.0, 2.0, fwd_post=(tp,), saved_bytes=8.0),
           OpCost("b", 2.0, 3.0, 0.0, bwd_post=(tp,), saved_bytes=4.0))
    w = IterationWork((StageWork((LayerWork("L0", ops),), optimizer_s=0.25),))
    g = lower_model(one_stage(), w)
    r = simulate(g)
    # F: a 1 + ar .5 + b 2 = 3.5; B: b dgrad 3 + ar .5 + a dgrad 1 + a wgrad 2 = 6.5; opt .25
    assert r.makespan == pytest.approx(3.5 + 6.5 + 0.25)
    assert cats(g).count("tp-comm") == 2
    assert_timeline_invariants(g, r)
    # memory returns to zero, never negative along the timeline
    assert g.mem_bytes.sum() == 0.0


def test_split_backward_defers_weight_grad_and_its_memory():
    ops = (OpCost("a", 1.0, 1.0, 2.0, saved_bytes=8.0),)
    w = IterationWork((StageWork((LayerWork("L0", ops),)),))
    g = lower_model(one_stage("F I W"), w)
    r = simulate(g)
    wt = cats(g).index("backward-weight")
    # the 8 bytes are freed at the end of W, not of I
    k = np.flatnonzero(g.mem_bytes < 0)
    assert g.mem_task[k].tolist() == [wt]
    assert r.makespan == 4.0


def test_selective_and_full_recompute_tasks():
    ops = (OpCost("attn", 1.0, 1.0, 0.0, selective=True), OpCost("mlp", 2.0, 2.0, 2.0))
    for policy, expected in (("none", 0.0), ("selective", 1.0), ("full", 3.0)):
        w = IterationWork((StageWork((LayerWork("L0", ops, recompute=policy),)),))
        g = lower_model(one_stage(), w)
        rc = g.duration[np.asarray(cats(g)) == "recompute"].sum()
        assert rc == expected
        assert simulate(g).makespan == pytest.approx(3.0 + 5.0 + expected)


def test_dp_buckets_overlap_backward_or_follow_it():
    ops = (OpCost("a", 1.0, 1.0, 1.0, grad_bytes=1.0), OpCost("b", 1.0, 1.0, 1.0, grad_bytes=1.0))
    buckets = (Bucket(0, 1, 1.0, 1.5), Bucket(0, 0, 1.0, 1.5))  # backward reaches op b first, then a
    for overlap, expected in ((True, 2 + 4 + 1.5), (False, 2 + 4 + 3.0)):
        w = IterationWork((StageWork((LayerWork("L0", ops),), buckets=buckets),), overlap_grad_reduce=overlap)
        g = lower_model(one_stage(), w)
        r = simulate(g)
        assert cats(g).count("dp-comm") == 2
        # overlapped: bucket b reduces during a's backward (starts at 4, ends 5.5; bucket a 6..7.5)
        assert r.makespan == pytest.approx(expected)


def test_param_gather_blocks_first_forward_when_overlapped():
    ops = (OpCost("a", 1.0, 1.0, 1.0, grad_bytes=1.0),)
    st = StageWork((LayerWork("L0", ops),), buckets=(Bucket(0, 0, 1.0, 0.5, gather_s=0.75),))
    g = lower_model(one_stage(), IterationWork((st,), overlap_param_gather=True))
    r = simulate(g)
    assert r.makespan == pytest.approx(0.75 + 1 + 2 + 0.5)
    g = lower_model(one_stage(), IterationWork((st,), overlap_param_gather=False))
    assert simulate(g).makespan == pytest.approx(1 + 2 + 0.5 + 0.75)


def test_two_stage_pipeline_with_transfers_is_consistent():
    orders = (tuple(map(Action.parse, "0F0 0F1 0B0 0B1".split())), tuple(map(Action.parse, "1F0 1B0 1F1 1B1".split())))
    s = Schedule("hand", 2, 2, 1, (0, 1), orders)
    ops = (OpCost("a", 1.0, 1.0, 1.0, saved_bytes=3.0),)
    st = StageWork((LayerWork("L0", ops),))
    g = lower_model(s, IterationWork((st, st), p2p_fwd_s=0.25, p2p_bwd_s=0.25, p2p_overlap=True))
    r = simulate(g)
    assert_timeline_invariants(g, r)
    # (m + p - 1) * (tf + tb) + 2 transfers on the critical path, each way
    assert r.makespan == pytest.approx((2 + 2 - 1) * 3.0 + 2 * 0.25)
    # Blocking sends (Megatron default): rank 0's F1 waits for F0's activation to leave (1.0 -> 1.25),
    # rank 1's F1 waits for its gradient send (4.25 -> 4.5); hand-computed makespan 9.75.
    g = lower_model(s, IterationWork((st, st), p2p_fwd_s=0.25, p2p_bwd_s=0.25, p2p_overlap=False))
    r = simulate(g)
    assert_timeline_invariants(g, r)
    assert r.makespan == pytest.approx(9.75)
