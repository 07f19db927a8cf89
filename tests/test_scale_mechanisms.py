"""Stragglers, fixed costs, and the end-to-end directions of the network model (issue: trustworthy
at scale). Each direction is a small simulate() run; the closed forms are checked on the pieces."""
from __future__ import annotations

import copy
import math
from statistics import NormalDist

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.api import simulate_strategy
from strategies.strategy_file import parse_strategy
from taskgraph.overheads import host_bound
from taskgraph.work import Comm, OpCost
from topologies.cluster import get_cluster
from topologies.placement import ParallelSizes
from topologies.stragglers import (
    expected_max_std_normal,
    pace_summary,
    stage_pace,
    synchronised_gpus,
    variation_factor,
)


# --- order statistics ---------------------------------------------------------------------------
def test_expected_maximum_of_normals_matches_closed_forms_and_tables():
    assert expected_max_std_normal(1) == 0.0            # one GPU waits for nobody
    # closed forms: E[max of 2] = 1/sqrt(pi), E[max of 3] = 3/(2 sqrt(pi)) (David & Nagaraja 2003, 3.2)
    assert expected_max_std_normal(2) == pytest.approx(1 / math.sqrt(math.pi), abs=1e-9)
    assert expected_max_std_normal(3) == pytest.approx(1.5 / math.sqrt(math.pi), abs=1e-9)
    # Harter 1961, Biometrika 48, Table 1 (six decimals)
    for n, table in ((10, 1.538753), (100, 2.507594), (1000, 3.241436)):
        assert expected_max_std_normal(n) == pytest.approx(table, abs=1e-6)
    # the tail: E[max of n] grows like sqrt(2 ln n) (Cramer 1946; within 0.6 of it up to 10^6)
    for n in (10**4, 10**6):
        assert 0 < math.sqrt(2 * math.log(n)) - expected_max_std_normal(n) < 0.6


@settings(max_examples=40, deadline=None)
@given(st.integers(min_value=1, max_value=200_000), st.integers(min_value=1, max_value=200_000))
def test_expected_maximum_is_monotone_in_the_number_of_gpus(a, b):
    lo, hi = sorted((a, b))
    assert expected_max_std_normal(lo) <= expected_max_std_normal(hi)
    # ... and against the quantile bracket: Phi^-1(1 - 1/n) - 1 < E[max] < sqrt(2 ln n) for n >= 2
    if hi >= 2:
        assert NormalDist().inv_cdf(1 - 1 / hi) - 1 < expected_max_std_normal(hi) <= math.sqrt(2 * math.log(hi))


def test_the_step_waits_for_the_slowest_gpu_of_the_whole_job():
    c = get_cluster("dgx-h100", nodes=64)
    # tp 8, pp 8, dp 8: 512 GPUs; every pipeline rank is paced by the slowest of the 512, not of its 64
    sizes = ParallelSizes(tp=8, pp=8, dp=8)
    assert synchronised_gpus(sizes) == 512
    want = variation_factor(0.01, 512, reference=8)
    assert [stage_pace(c, sizes, p) for p in range(8)] == [pytest.approx(want)] * 8
    assert want > variation_factor(0.01, 64, reference=8) > 1.0
    # one node of 8 GPUs at tp 8 is the calibration group: no charge; gpu_speed_cv 0 turns it off
    assert stage_pace(get_cluster("dgx-h100", nodes=1), ParallelSizes(tp=8), 0) == 1.0
    assert stage_pace(get_cluster("dgx-h100", nodes=64, gpu_speed_cv=0), sizes, 3) == 1.0
    assert "the 512 GPUs the step waits for" in pace_summary(c, sizes)


def test_variation_factor_closed_form():
    z = expected_max_std_normal(128)
    assert variation_factor(0.01, 128) == pytest.approx(1 / (1 - 0.01 * z))
    assert variation_factor(0.0, 128) == 1.0 and variation_factor(0.05, 1) == 1.0


def test_named_slow_node_paces_its_pipeline_rank():
    c = get_cluster("dgx-h100", nodes=4, slow={3: 0.8}, gpu_speed_cv=0)
    sizes = ParallelSizes(tp=8, pp=4)  # pipeline rank p lives on node p
    assert [stage_pace(c, sizes, p) for p in range(4)] == [1.0, 1.0, 1.0, pytest.approx(1.25)]
    assert pace_summary(c, sizes) == "slow node 3 (speed 0.8) paces pipeline rank 3"
    assert pace_summary(get_cluster("dgx-h100", nodes=4, gpu_speed_cv=0), sizes) == ""


# --- host dispatch -------------------------------------------------------------------------------
class _Op:
    def __init__(self, kind="elementwise", gemms=()):
        self.kind, self.gemms = kind, gemms
        self.fwd_flops = self.bwd_input_flops = 1.0
        self.bwd_weight_flops = 0.0
        self.fwd_bytes = self.bwd_input_bytes = 1.0
        self.bwd_weight_bytes = 0.0


def test_host_bound_stretches_only_when_dispatch_outlasts_the_gpu():
    ops = [_Op(), _Op()]
    costs = [OpCost("a", fwd=3e-6, bwd_input=3e-6), OpCost("b", fwd=1e-6, bwd_input=1e-6)]
    # 2 kernels x 10 us = 20 us of host time against 4 us of GPU time per pass: +16 us spread 3:1
    out = host_bound(ops, costs, 10e-6)
    assert [c.fwd for c in out] == [pytest.approx(15e-6), pytest.approx(5e-6)]
    assert sum(c.bwd_input for c in out) == pytest.approx(20e-6)
    # large kernels: untouched
    big = [OpCost("a", fwd=1e-3, bwd_input=1e-3), OpCost("b", fwd=1e-3, bwd_input=1e-3)]
    assert host_bound(ops, big, 10e-6) == tuple(big)
    # a collective on the critical path counts as GPU time (and one more launch)
    with_comm = [OpCost("a", fwd=3e-6, bwd_input=3e-6, fwd_post=(Comm("tp-comm", "ar", 30e-6),)),
                 OpCost("b", fwd=1e-6, bwd_input=1e-6)]
    assert host_bound(ops, with_comm, 10e-6)[0].fwd == 3e-6
    # ... unless issuing the collective costs the host more: 2 x 10 + 1 x 40 = 60 us vs 34 us
    out = host_bound(ops, with_comm, 10e-6, host_coll_s=40e-6)
    assert sum(c.fwd for c in out) == pytest.approx(60e-6 - 30e-6)


# --- end-to-end directions ---------------------------------------------------------------------
BASE = {
    "model": {"preset": "llama3-8b", "name": "llama-8l", "layers": 8},
    "cluster": {"preset": "dgx-h100", "nodes": 4},
    "parallel": {"tp": 8, "pp": 2, "zero": 1},
    "schedule": "1f1b",
    "training": {"micro_batch": 1, "global_batch": 16, "seq_len": 2048, "precision": "bf16",
                 "recompute": "none"},
    "options": {"overlap_grad_reduce": True, "flash_attention": True, "fidelity": "coarse"},
}


def _sim(cluster=None, parallel=None, training=None, base=BASE):
    d = copy.deepcopy(base)
    d["cluster"].update(cluster or {})
    d["parallel"].update(parallel or {})
    d["training"].update(training or {})
    return simulate_strategy(parse_strategy(d))


def test_one_slow_node_at_0_8_slows_the_step():
    none, slow = _sim(), _sim({"slow": {2: 0.8}})  # node 2 holds pipeline rank 1 (dp 0)
    ratio = slow.report.makespan_s / none.report.makespan_s
    assert 1.05 < ratio <= 1.25  # at most the slow stage's 1/0.8, at least visibly slower
    assert "slow node 2" in slow.training.pace


def test_oversubscription_and_rail_optimization_directions():
    # fat-tree leaves of one node: the DP rings (tp 1, dp 16 over 2 nodes per stage) cross spines
    kw = {"network_topology": "fat-tree", "nodes_per_leaf": 1}
    par = {"tp": 1, "pp": 2}
    t = [_sim({**kw, "oversubscription": ov}, par).report.makespan_s for ov in (1, 2, 4)]
    assert t[0] < t[1] < t[2]
    rail = _sim({"network_topology": "rail-optimized", "nodes_per_leaf": 4, "oversubscription": 4}, par)
    assert rail.report.makespan_s < t[2]
    off = _sim({**kw, "oversubscription": 4, "contention": False}, par)
    assert off.report.makespan_s < t[0]  # contention off: idle links, no pipeline traffic on the NICs


def test_pipeline_traffic_on_the_dp_nics_slows_the_dp_reduction():
    # pp neighbours on other nodes share the NICs with the overlapped DP reduce-scatter
    par = {"tp": 1, "pp": 2}
    with_pp = _sim({"nodes": 4}, par)
    off = _sim({"nodes": 4, "contention": False}, par)
    assert with_pp.report.makespan_s > off.report.makespan_s
    # the same layout inside one node per stage pair has no pipeline traffic on the NICs
    tp_only = _sim({"nodes": 4}, {"tp": 8, "pp": 1})
    tp_only_off = _sim({"nodes": 4, "contention": False}, {"tp": 8, "pp": 1})
    assert tp_only.report.makespan_s == tp_only_off.report.makespan_s


def test_per_gpu_throughput_falls_from_256_to_16384_gpus():
    small = _sim({"nodes": 32}, {"tp": 8, "pp": 2}, {"global_batch": 256})
    large = _sim({"nodes": 2048}, {"tp": 8, "pp": 2}, {"global_batch": 16384})
    assert large.training.tokens_per_s_per_gpu < small.training.tokens_per_s_per_gpu


@pytest.mark.parametrize("cluster", [{"slow": {2: 0.8}}, {"gpu_speed_cv": 0.02},
                                     {"network_topology": "fat-tree", "nodes_per_leaf": 1, "oversubscription": 4},
                                     {"host_us_per_kernel": 200}])
def test_every_mechanism_moves_both_fidelities_alike(cluster):
    # costs enter through the cost records both lowerings consume: the effect (ratio to the plain
    # run) agrees between operator and coarse fidelity
    par = {"tp": 1, "pp": 2} if "oversubscription" in cluster else None
    ratios = []
    for fid in ("operator", "coarse"):
        base = copy.deepcopy(BASE)
        base["options"]["fidelity"] = fid
        plain = _sim(None, par, base=base).report.makespan_s
        ratios.append(_sim(cluster, par, base=base).report.makespan_s / plain)
    assert ratios[0] > 1.0 and ratios[1] > 1.0
    # 5%: the coarse lowering exposes DP communication differently (its own open issue), which
    # shows when 4:1 oversubscription makes the DP reduction 1.8x longer
    assert ratios[0] == pytest.approx(ratios[1], rel=0.05)


def test_tensor_parallel_traffic_across_nodes_slows_the_dp_reduction():
    # 4-GPU nodes: tp 8 spans two nodes, its all-reduces use the NICs the overlapped DP
    # reduce-scatter needs; the DP bucket takes longer than on idle links (tp 4 stays in a node)
    from taskgraph.costing import build_work
    from taskgraph.plan import resolve

    def bucket_s(tp, contention):
        d = copy.deepcopy(BASE)
        d["cluster"].update({"nodes": 8, "gpus_per_node": 4, "contention": contention})
        d["parallel"].update({"tp": tp, "pp": 1})
        work = build_work(resolve(parse_strategy(d)))
        return max(b.reduce_s for st in work.stages for b in st.buckets)

    assert bucket_s(8, True) > bucket_s(8, False)
    assert bucket_s(4, True) == bucket_s(4, False)


def test_a_node_of_a_slower_gpu_model_paces_like_a_slow_node():
    c = get_cluster("dgx-h100", nodes=4, node_gpus={1: "A100-SXM-80GB"}, gpu_speed_cv=0)
    sizes = ParallelSizes(tp=8, pp=4)
    ratio = c.gpu.peak_flops("bf16") / c.node_gpus[0][1].peak_flops("bf16")
    assert stage_pace(c, sizes, 1) == pytest.approx(ratio) and stage_pace(c, sizes, 0) == 1.0
    assert "slow node 1" in pace_summary(c, sizes)
    # a faster GPU in the mix does not speed its peers up
    c2 = get_cluster("dgx-a100-80g", nodes=4, node_gpus={1: "H100-SXM-80GB"}, gpu_speed_cv=0)
    assert stage_pace(c2, sizes, 1) == 1.0


def test_weak_scaling_benchmark_mfu_falls_and_each_mechanism_adds_to_the_fall():
    from benchmarks.weak_scaling import run
    rows = run([256, 3072], "dgx-a100-80g")
    mfu = {(r["config"], r["gpus"]): r["mfu"] for r in rows}
    for config in ("off", "on", "ecmp", "on, no overlap"):
        assert mfu[(config, 3072)] < mfu[(config, 256)], config
    # at 3,072 GPUs: hashed routing and an unoverlapped DP reduction each cost throughput
    assert mfu[("ecmp", 3072)] < mfu[("on", 3072)] < mfu[("off", 3072)]
    assert mfu[("on, no overlap", 3072)] < mfu[("on", 3072)]
