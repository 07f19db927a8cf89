"""Transformer Engine's per-tensor scaling work (taskgraph/te_scaling.py, issue 38): the cast bytes per
GEMM input and pass, and the amax all-reduces (count, group and seconds from the collective model) on a
tiny configuration -- one Llama-3-8B layer, tp 2, dp 4 on one DGX node -- computed by hand."""
import pytest

from strategies.strategy_file import parse_strategy
from taskgraph.costing import build_work
from taskgraph.operators import Collective, GemmShape, Operator
from taskgraph.plan import resolve
from taskgraph.te_scaling import CASTS, te_cast_cost, te_cast_time
from topologies.collectives import collective_time
from topologies.gpus import get_gpu

SHAPE = GemmShape(8, 6, 4)            # X 8x4 (32 elements), dY 8x6 (48), W 4x6
GATHER_F = Collective("tp", "all-gather", "fwd", "before", 64)
GATHER_B = Collective("tp", "all-gather", "bwd", "before", 64)


def _op(name, comms=()):
    return Operator(name, "gemm", 0, (SHAPE,), comms=comms)


@pytest.mark.parametrize("name, comms, recipe, expect", [
    # column-parallel, norm-fused, sequence-parallel: the local shard (32 / 2 = 16 elements) quantized
    # row-wise (delayed: inside the norm kernel; current scaling: scale + cast, read 2 write 1), dY
    # cast-transposed in full (48), the gathered input's transpose before wgrad (read 1 write 1 x 32)
    ("qkv", (GATHER_F, GATHER_B), "delayed", {"fwd": (0, 0), "bwd_input": (4 * 48, 1), "bwd_weight": (2 * 32, 1)}),
    ("qkv", (GATHER_F, GATHER_B), "tensorwise",
     {"fwd": (3 * 16, 2), "bwd_input": (6 * 48, 3), "bwd_weight": (2 * 32, 1)}),
    # the same without sequence parallelism: the norm writes both copies
    ("mlp_gate_up", (), "delayed", {"fwd": (2 * 32, 1), "bwd_input": (4 * 48, 1), "bwd_weight": (0, 0)}),
    ("mlp_gate_up", (), "tensorwise", {"fwd": (4 * 32, 2), "bwd_input": (6 * 48, 3), "bwd_weight": (0, 0)}),
    # row-parallel, sequence-parallel: input cast-transposed in full, the dY shard (24) row-wise, then
    # the gathered dY's transpose (48)
    ("attn_out", (GATHER_B,), "delayed", {"fwd": (4 * 32, 1), "bwd_input": (3 * 24, 1), "bwd_weight": (2 * 48, 1)}),
    ("mlp_down", (GATHER_B,), "tensorwise",
     {"fwd": (6 * 32, 3), "bwd_input": (5 * 24, 3), "bwd_weight": (2 * 48, 1)}),
])
def test_cast_bytes_per_pass(name, comms, recipe, expect):
    for p, (b, k) in expect.items():
        assert te_cast_cost(_op(name, comms), p, recipe, 2) == (float(b), k), p


def test_cast_time_is_bytes_at_the_elementwise_rate_plus_launches():
    gpu = get_gpu("h100")
    eff = gpu.efficiency
    op = _op("attn_out")
    want = 6 * 32 / (gpu.hbm_bandwidth * eff.elementwise_efficiency) + 3 * eff.launch_overhead
    assert te_cast_time(op, "fwd", gpu, "tensorwise", 1) == pytest.approx(want, rel=1e-12)
    # current scaling's extra amax pass and scale kernel make it dearer than delayed scaling, per case
    for case in CASTS["delayed"]:
        assert CASTS["tensorwise"][case] >= CASTS["delayed"][case]


def _tiny(precision="fp8", recipe="delayed", nodes=1, tp=2, sp=True, extra=None):
    opts = {"fp8_recipe": recipe} if precision == "fp8" else {}
    opts.update(extra or {})
    return parse_strategy({
        "model": {"preset": "llama3-8b", "layers": 1}, "cluster": {"preset": "dgx-b200" if precision == "fp4"
                                                                    else "dgx-h100", "nodes": nodes},
        "parallel": {"tp": tp, "pp": 1, "sp": sp, "zero": 1},
        "training": {"micro_batch": 1, "global_batch": 32 * nodes, "seq_len": 4096, "precision": precision},
        "options": opts})


def _amax(strategy):
    plan = resolve(strategy)
    work = build_work(plan, fidelity="operator")
    out = []
    for layer in work.stages[0].layers:
        for op in layer.ops:
            for side in ("fwd_pre", "fwd_post", "bwd_pre", "bwd_post"):
                out += [(layer.name, op.name, side, c) for c in getattr(op, side) if "amax" in c.op]
    return plan, out


def test_delayed_scaling_two_reductions_per_chunk_over_tp_dp():
    plan, got = _amax(_tiny())
    assert plan.sizes.tp == 2 and plan.sizes.dp == 4
    # one after the region's forward (its last op), one after the first FP8 module's backward (qkv)
    assert [(lay, op, side) for lay, op, side, _ in got] == [("layer0", "qkv", "bwd_post"),
                                                              ("layer0", "mlp_residual", "fwd_post")]
    # the buffer: 4 TE GEMMs (qkv, attn_out, fc1, fc2) x 3 fp32 amaxes in forward, x 2 in backward,
    # all-reduced over the 8 ranks of the stage (tp x dp), plus torch.cat and the fused update kernel
    cluster, launch = plan.cluster, plan.cluster.gpu.efficiency.launch_overhead
    ranks = tuple(range(8))
    fwd = collective_time("all-reduce", 4 * 3 * 4, ranks, cluster) + 2 * launch
    bwd = collective_time("all-reduce", 4 * 2 * 4, ranks, cluster) + 2 * launch
    by_side = {side: c for _, _, side, c in got}
    assert by_side["fwd_post"].seconds == pytest.approx(fwd, rel=1e-12)
    assert by_side["bwd_post"].seconds == pytest.approx(bwd, rel=1e-12)
    assert all(c.stream == "tp" and not c.overlaps for _, _, _, c in got)   # blocking, on the stream's path


@pytest.mark.parametrize("precision, recipe, nbytes", [("fp8", "tensorwise", 4), ("fp4", None, 8)])
def test_current_scaling_and_nvfp4_reduce_the_gathered_amaxes_over_tp(precision, recipe, nbytes):
    plan, got = _amax(_tiny(precision, recipe))
    # per layer and micro-batch: fc1's and qkv's inputs in forward, attn_out's and fc2's dY in backward
    assert sorted((op, side) for _, op, side, _ in got) == [("attn_out", "bwd_pre"), ("mlp_down", "bwd_pre"),
                                                           ("mlp_gate_up", "fwd_pre"), ("qkv", "fwd_pre")]
    want = collective_time("all-reduce", nbytes, (0, 1), plan.cluster)
    assert all(c.seconds == pytest.approx(want, rel=1e-12) and c.category == "tp-comm" for *_, c in got)
    # without sequence parallelism (or TP) nothing is gathered, nothing is reduced
    assert _amax(_tiny(precision, recipe, sp=False))[1] == []
    assert _amax(_tiny(precision, recipe, tp=1))[1] == []


@pytest.mark.parametrize("recipe, extra", [("blockwise", None), ("mxfp8", None), ("tensorwise", {"stack": "torchtitan"})])
def test_no_te_amax_reduction_for_block_scales_or_torchao(recipe, extra):
    strategy = _tiny("fp8", recipe, extra=extra)
    if recipe == "mxfp8":
        strategy = parse_strategy({**_mapping(strategy), "cluster": {"preset": "dgx-b200", "nodes": 1}})
    assert _amax(strategy)[1] == []


def _mapping(strategy):
    return {"model": {"preset": "llama3-8b", "layers": 1},
            "parallel": {"tp": 2, "pp": 1, "sp": True, "zero": 1},
            "training": {"micro_batch": 1, "global_batch": 32, "seq_len": 4096, "precision": "fp8"},
            "options": {"fp8_recipe": strategy.options.fp8_recipe}}


def test_delayed_amax_cost_grows_with_the_reduction_group():
    # tp 8 on 1, 4, 16 nodes: the amax group is the stage's 8, 32, 128 ranks; per step 2 reductions per
    # micro-batch, so the step's amax time grows with the group (latency-bound trees at scale)
    per_step = []
    for nodes in (1, 4, 16):
        plan, got = _amax(_tiny(nodes=nodes, tp=8))
        assert plan.sizes.tp * plan.sizes.dp == 8 * nodes
        micro = 32 * nodes // plan.sizes.dp   # micro-batches per step (global batch 32 x nodes, micro-batch 1)
        assert micro == 32
        per_step.append(micro * sum(c.seconds for *_, c in got))
    assert per_step[0] < per_step[1] < per_step[2]


def test_casts_add_to_the_gemm_passes():
    d = {op.name: op for op in build_work(resolve(_tiny()), fidelity="operator").stages[0].layers[1].ops}
    t = {op.name: op for op in build_work(resolve(_tiny("fp8", "tensorwise")), fidelity="operator")
         .stages[0].layers[1].ops}
    # current scaling's amax passes and scale kernels cost more than delayed scaling's casts, GEMM by GEMM
    for name in ("qkv", "attn_out", "mlp_gate_up", "mlp_down"):
        assert t[name].fwd > d[name].fwd and t[name].bwd_input > d[name].bwd_input
