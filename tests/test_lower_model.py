"""Operator-level lowering on synthetic cost records: exact timelines, memory balance, DP epilogue."""
import numpy as np
import pytest

from simulator.engine.core import simulate
from strategies.actions import Action, Schedule
from taskgraph.graph import CATEGORIES
from taskgraph.lower_model import lower_model
from taskgraph.work import Bucket, Comm, IterationWork, LayerWork, OpCost, StageWork
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
    orders = (tuple(map(Action.parse, ["0F0", "0F1", "0B0", "0B1"])), tuple(map(Action.parse, ["1F0", "1B0", "1F1", "1B1"])))
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


# --- asynchronous column-parallel backward (Megatron LinearWithGradAccumulationAndAsyncCommunication)
def _column_layer(overlap: bool, ag: float = 0.5, rs: float = 4.0):
    """A norm (fwd 1, dgrad 1) then a column-parallel GEMM (fwd 1, dgrad 2, wgrad 3) whose backward
    all-gathers the saved input (ag s) and reduce-scatters the input gradient (rs s)."""
    mark = (lambda m: m) if overlap else (lambda m: "")
    col = OpCost("qkv", 1.0, 2.0, 3.0, bwd_pre=(Comm("tp-comm", "tp-all-gather", ag, overlaps=mark("dgrad")),),
                 bwd_post=(Comm("tp-comm", "tp-reduce-scatter", rs, overlaps=mark("wgrad")),), saved_bytes=2.0)
    ln = OpCost("ln", 1.0, 1.0, 0.0, saved_bytes=1.0)
    return IterationWork((StageWork((LayerWork("L0", (ln, col)),)),))


@pytest.mark.parametrize("kinds, overlap, ag, expected", [
    # F 2; B: max(dgrad 2, ag .5) + max(wgrad 3, rs 4) + ln 1 = 7
    ("F B", True, 0.5, 2 + 7),
    # the all-gather longer than dgrad: max(2, 2.5) + 4 + 1
    ("F B", True, 2.5, 2 + 7.5),
    # blocking: .5 + 2 + 4 + 3 + 1
    ("F B", False, 0.5, 2 + 10.5),
    # split backward: I = max(2, .5) + rs 4 exposed + 1 = 7; W = 3
    ("F I W", True, 0.5, 2 + 7 + 3),
    ("F I W", False, 0.5, 2 + 7.5 + 3),
])
def test_async_column_backward_exact(kinds, overlap, ag, expected):
    from taskgraph.coarse import coarsen
    w = _column_layer(overlap, ag=ag)
    g = lower_model(one_stage(kinds), w)
    r = simulate(g)
    assert r.makespan == pytest.approx(expected)
    assert_timeline_invariants(g, r)
    assert g.mem_bytes.sum() == 0.0
    # coarse fidelity folds the same overlap into one task per pass and gives the same makespan
    assert simulate(lower_model(one_stage(kinds), coarsen(w))).makespan == pytest.approx(expected)


def test_async_column_backward_task_placement():
    g = lower_model(one_stage("F B"), _column_layer(True))
    r = simulate(g)
    names = [g.op_names[o] for o in g.op]
    start = dict(zip(names, r.start.tolist()))
    end = dict(zip(names, r.end.tolist()))
    # the gather starts with dgrad, the reduce-scatter and wgrad both start when dgrad ends,
    # and the norm's dgrad waits for the reduce-scatter (its input gradient)
    assert start["tp-all-gather"] == start["L0.qkv.dgrad"] == 2.0
    assert start["tp-reduce-scatter"] == start["L0.qkv.wgrad"] == end["L0.qkv.dgrad"] == 4.0
    assert start["L0.ln"] == end["tp-reduce-scatter"] == 8.0


def test_tp_async_backward_option_shortens_tp_runs():
    from simulator.api import simulate_strategy
    from strategies.strategy_file import parse_strategy
    base = {"model": "llama3-8b", "cluster": {"preset": "dgx-h100", "nodes": 1},
            "parallel": {"tp": 8, "sp": True}, "training": {"micro_batch": 1, "global_batch": 2, "seq_len": 4096}}
    on = parse_strategy(base)
    off = parse_strategy({**base, "options": {"tp_async_backward": False}})
    assert on.options.tp_async_backward and not off.options.tp_async_backward
    t_on, t_off = (simulate_strategy(s).result.makespan for s in (on, off))
    assert t_on < t_off
    # coarse fidelity agrees with operator fidelity in both modes
    for s, t in ((on, t_on), (off, t_off)):
        assert simulate_strategy(s, fidelity="coarse").result.makespan == pytest.approx(t, rel=1e-9)


def test_blocking_p2p_host_gap_is_added_to_every_boundary():
    """Megatron's batch_p2p_sync: each blocking exchange idles both GPUs for the host gap."""
    from strategies.strategy_file import P2P_HOST_GAP_US, parse_strategy
    from taskgraph.costing import build_work
    from taskgraph.plan import resolve
    base = {"model": "llama3-8b", "cluster": {"preset": "dgx-h100", "nodes": 1}, "parallel": {"pp": 4, "dp": 2},
            "training": {"micro_batch": 1, "global_batch": 8, "seq_len": 2048}}

    def pairs(**opts):
        return build_work(resolve(parse_strategy({**base, "options": opts}))).p2p_pairs

    plain = pairs(p2p_host_gap_us=0)
    assert set(plain) == {(0, 1), (1, 0), (1, 2), (2, 1), (2, 3), (3, 2)}
    for opts, gap in (({}, P2P_HOST_GAP_US), ({"p2p_host_gap_us": 120}, 120.0), ({"p2p_overlap": True}, 0.0)):
        got = pairs(**opts)
        assert got.keys() == plain.keys()
        for k in plain:
            assert got[k] == pytest.approx(plain[k] + gap * 1e-6), (opts, k)


def test_p2p_host_gap_must_be_non_negative():
    from strategies.errors import ConfigError
    from strategies.strategy_file import parse_strategy
    with pytest.raises(ConfigError, match=r"options.p2p_host_gap_us = -1"):
        parse_strategy({"model": "llama3-8b", "cluster": {"preset": "dgx-h100", "nodes": 1},
                        "training": {"micro_batch": 1, "global_batch": 8, "seq_len": 2048},
                        "options": {"p2p_host_gap_us": -1}})
