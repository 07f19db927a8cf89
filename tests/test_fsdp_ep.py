"""FSDP / ZeRO-3 with expert parallelism: the routed experts are an FSDP unit of their own over the
expert-data-parallel ranks (torchtitan apply_fsdp's dp_shard_mod_ep mesh), so their all-gather and
reduce-scatter run over dp*cp/ep ranks, not with the block's over dp*cp (taskgraph/costing.py
expert_shard_groups). Hand-computed from the collective closed forms."""
from __future__ import annotations

import pytest

from strategies.strategy_file import parse_strategy
from taskgraph.costing import build_work, expert_shard_groups
from taskgraph.plan import resolve
from topologies.collectives import collective_time
from topologies.placement import group_ranks


def rep_groups(plan) -> dict:
    """The dp x cp and expert-data-parallel groups of rank 0 (costing's representative)."""
    return {"dp": group_ranks("dp-cp", plan.sizes, 0), "edp": group_ranks("cp-edp", plan.sizes, 0)}


def comm_time(plan, kind: str, nbytes: float, ranks: tuple, family: str | None = None) -> float:
    share = {"axis": family, "sizes": plan.sizes, "background": ()} if family and plan.cluster.contention else None
    return collective_time(kind, float(nbytes), tuple(ranks), plan.cluster, share=share)


def _plan(nodes: int, ep: int, **parallel):
    return resolve(parse_strategy({
        "model": {"preset": "mixtral-8x7b", "layers": 2}, "cluster": {"preset": "dgx-h100", "nodes": nodes},
        "parallel": {"tp": 1, "pp": 1, "ep": ep, "zero": 3, **parallel}, "schedule": "1f1b",
        "training": {"micro_batch": 1, "global_batch": 8 * nodes, "seq_len": 2048, "recompute": "full"},
        "options": {"moe_routing": "balanced"}}, "."))


def test_expert_shard_groups():
    g = rep_groups(_plan(2, 8))
    assert g["edp"] == (0, 8)
    assert expert_shard_groups(_plan(2, 8), g["edp"]) == ((0, 8), (0,))
    assert expert_shard_groups(_plan(1, 8), rep_groups(_plan(1, 8))["edp"]) == ((0,), (0,))  # not sharded
    assert expert_shard_groups(_plan(2, 1), rep_groups(_plan(2, 1))["edp"]) is None            # with the block
    hsdp = _plan(2, 4, dp_shard=8)   # shard over 8 consecutive ranks: experts over 8/4 = 2 of them
    assert expert_shard_groups(hsdp, rep_groups(hsdp)["edp"]) == ((0, 4), (0, 8))


def _layer_comms(plan):
    layer = build_work(plan).stages[0].layers[1]     # the first decoder layer: its gather hides behind nothing
    gather = [c for op in layer.ops for c in op.fwd_pre if c.op == "zero3-param-gather"]
    reduce = [c for op in layer.ops for c in op.bwd_post if c.op == "zero3-grad-reduce-scatter"]
    experts = next(op for op in layer.ops if op.name == "moe_experts")
    return gather, reduce, experts


@pytest.mark.parametrize("nodes", [1, 2])
def test_block_and_experts_gather_over_their_own_groups(nodes):
    plan = _plan(nodes, 8)
    g = rep_groups(plan)
    gather, reduce, _ = _layer_comms(plan)
    from taskgraph.operators import layer_operators
    ops = layer_operators(plan.model, micro_batch=1, seq_len=2048, ep=8)
    expert = sum(o.params for o in ops if o.name == "moe_experts")
    dense = sum(o.params for o in ops) - expert
    # bf16 parameters gathered, fp32 gradients reduced (costing.param_bytes / grad_bytes_per_param)
    want_ag = comm_time(plan, "all-gather", 2 * dense, g["dp"], "dp-cp")
    want_rs = comm_time(plan, "reduce-scatter", 4 * dense, g["dp"], "dp-cp")
    if nodes == 2:    # one expert per GPU, shared with the GPU of the same EP rank on the other node
        want_ag += comm_time(plan, "all-gather", 2 * expert, (0, 8))
        want_rs += comm_time(plan, "reduce-scatter", 4 * expert, (0, 8))
    assert [c.seconds for c in gather] == [pytest.approx(want_ag, rel=1e-12)]
    assert [c.seconds for c in reduce] == [pytest.approx(want_rs, rel=1e-12)]
    assert gather[0].mem_bytes == 2 * (dense + expert)
