"""The costing side of overlap that costs something (taskgraph/overlap.py): Transformer Engine's
userbuffer overlap as closed-form blocks, the SM fractions of the side streams, and the coarse records'
closed form agreeing with the operator lowering's fixed point."""
from __future__ import annotations

import pytest

from simulator.api import simulate_strategy
from strategies.strategy_file import parse_strategy
from taskgraph.cost import op_time
from taskgraph.costing import build_work, representative_groups
from taskgraph.operators import layer_operators
from taskgraph.overlap import chunk_op, pipelined, ring_exchange, stream_shares
from taskgraph.plan import resolve


def strategy(tmp_path, nodes=1, **options):
    return parse_strategy({"model": {"preset": "llama3-8b", "layers": 4}, "cluster": {"preset": "dgx-h100", "nodes": nodes},
                           "parallel": {"tp": 4, "pp": 1, "sp": True}, "schedule": "1f1b",
                           "training": {"micro_batch": 1, "global_batch": 8 * nodes, "seq_len": 4096},
                           "options": options}, tmp_path)


def _layer(plan, name):
    ops = build_work(plan).stages[0].layers
    layer = next(lw for lw in ops if lw.name.startswith("layer"))
    return next(o for o in layer.ops if o.name == name)


def test_side_stream_shares_are_nccl_channels_over_sms(tmp_path):
    plan = resolve(strategy(tmp_path, nodes=2))
    shares = stream_shares(plan, dict(representative_groups(plan.sizes, 0)))
    # DP over 2 nodes: 2 channels per NIC x 8 NICs = 16 of 132 SMs; TP 4 inside a node: Hopper's 16
    assert shares == {"dp": pytest.approx(16 / 132), "tp": pytest.approx(16 / 132)}
    off = resolve(strategy(tmp_path, nodes=2, overlap_interference=False))
    assert stream_shares(off, dict(representative_groups(off.sizes, 0))) == {}


def test_userbuffer_overlap_is_the_chunked_closed_form(tmp_path):
    base = resolve(strategy(tmp_path))
    ub = resolve(strategy(tmp_path, tp_comm_overlap=True))
    gpu = base.cluster.gpu
    plain_qkv, plain_out = _layer(base, "qkv"), _layer(base, "attn_out")
    fused_qkv, fused_out = _layer(ub, "qkv"), _layer(ub, "attn_out")
    ops = {o.name: o for o in layer_operators(base.model, ep=1, dtype_bytes=2, flash_attention=True, layer_index=0,
                                                micro_batch=1, seq_len=4096, tp=4, sp=True, cp=1)}
    # forward all-gather + qkv GEMM: TE ring exchange in tp = 4 chunks on 1 SM (NeMo userbuffers)
    ag = plain_qkv.fwd_pre[0].seconds
    chunk = op_time(chunk_op(ops["qkv"], 4), "fwd", gpu, "bf16", grad_accum_bytes=4)
    assert fused_qkv.fwd_pre == ()
    assert fused_qkv.fwd == pytest.approx(ring_exchange(chunk, ag / 3, 4, 1 / 132), rel=1e-12)
    # attention output GEMM + reduce-scatter: TE pipeline, 4 splits on 132 - 24 SMs
    rs = plain_out.fwd_post[0].seconds
    chunk = op_time(chunk_op(ops["attn_out"], 4), "fwd", gpu, "bf16", grad_accum_bytes=4) * 132 / 108
    assert fused_out.fwd_post == ()
    assert fused_out.fwd == pytest.approx(pipelined(chunk, rs / 4, 4), rel=1e-12)
    # the MLP's fc2 + reduce-scatter: fc2_fprop holds 16 SMs, not proj_fprop's 24 (NeMo-Framework-Launcher
    # 24.07 ub_cfg_h100_h8192_tp4_*.yaml): its 4 GEMM chunks run on 132 - 16 SMs
    rs = _layer(base, "mlp_down").fwd_post[0].seconds
    chunk = op_time(chunk_op(ops["mlp_down"], 4), "fwd", gpu, "bf16", grad_accum_bytes=4) * 132 / 116
    assert _layer(ub, "mlp_down").fwd == pytest.approx(pipelined(chunk, rs / 4, 4), rel=1e-12)
    # the overlap is not free: slower than the GEMM alone (on this small model the chunks' wave
    # quantization even makes it slower than no overlap: 48 tiles of a 1,024-token chunk on 132 SMs)
    assert fused_qkv.fwd > plain_qkv.fwd and fused_out.fwd > plain_out.fwd


def test_userbuffer_overlap_pays_off_on_large_gemms(tmp_path):
    big = {"model": {"preset": "llama3-70b", "layers": 2}, "cluster": {"preset": "dgx-h100", "nodes": 1},
           "parallel": {"tp": 8, "pp": 1, "sp": True}, "schedule": "1f1b",
           "training": {"micro_batch": 1, "global_batch": 1, "seq_len": 8192}}
    base = resolve(parse_strategy(big, tmp_path))
    ub = resolve(parse_strategy({**big, "options": {"tp_comm_overlap": True}}, tmp_path))
    for name in ("qkv", "mlp_gate_up"):
        plain, fused = _layer(base, name), _layer(ub, name)
        ag = plain.fwd_pre[0].seconds
        # the overlap hides most of the all-gather; it need not cost anything on top of the GEMM here:
        # Hopper's measured GEMM table (topologies/data/gemm_shapes.yaml) prices the 1,024-row chunks up
        # to 3.5 % faster than the whole 8,192-row GEMM (the largest shapes hold lower clocks at 700 W)
        assert 0.95 * plain.fwd < fused.fwd < plain.fwd + ag, name


@pytest.mark.parametrize("options", [{}, {"tp_comm_overlap": True}, {"overlap_interference": False},
                                     {"tp_comm_overlap": True, "overlap_interference": False}])
def test_fidelities_agree_with_overlap(tmp_path, options):
    s = strategy(tmp_path, nodes=2, **options)
    op = simulate_strategy(s, fidelity="operator").training.iteration_time_s
    co = simulate_strategy(s, fidelity="coarse").training.iteration_time_s
    assert co == pytest.approx(op, rel=0.02)


def test_interference_slows_what_overlaps(tmp_path):
    on = simulate_strategy(strategy(tmp_path, nodes=2)).training.iteration_time_s
    off = simulate_strategy(strategy(tmp_path, nodes=2, overlap_interference=False)).training.iteration_time_s
    assert on > off


def test_optimizer_step_streams_adam_and_zeroes_the_gradient_buffer(tmp_path):
    # ZeRO-1 (distributed optimizer): fused Adam streams 28 bytes per parameter of this rank's 1/dp shard
    # at the H100's optimizer_efficiency and the master-to-model copy 6 at hbm_efficiency, the gradient
    # norm and its all-reduce (taskgraph/overheads.py), and Megatron zeroes the whole local fp32
    # gradient buffer once per iteration; ZeRO-3 (the default stack: DeepSpeed's copy) frees gradients instead
    from taskgraph.costing import grad_bytes_per_param
    from taskgraph.overheads import step_overhead_s
    for zero in (1, 3):
        s = parse_strategy({"model": {"preset": "llama3-8b", "layers": 2}, "cluster": {"preset": "dgx-h100", "nodes": 1},
                            "parallel": {"tp": 1, "pp": 1, "zero": zero}, "schedule": "1f1b",
                            "training": {"micro_batch": 1, "global_batch": 8, "seq_len": 4096}}, tmp_path)
        plan = resolve(s)
        st = build_work(plan).stages[0]
        gbp = grad_bytes_per_param(plan)
        params = sum(op.grad_bytes for lw in st.layers for op in lw.ops) / gbp
        gpu = plan.cluster.gpu
        bw = gpu.hbm_bandwidth * gpu.efficiency.hbm_efficiency
        shard = params / plan.shard_size
        assert (gpu.efficiency.optimizer_efficiency, gpu.efficiency.hbm_efficiency) == (0.72, 0.87)
        adam = shard * 28 / (gpu.hbm_bandwidth * 0.72) + shard * 6 / bw   # the default stack copies at ZeRO-3 too
        want = adam + step_overhead_s(plan, shard) + (params * gbp / bw if zero < 3 else 0.0)
        assert st.optimizer_s == pytest.approx(want, rel=1e-12), zero


def test_dp_stream_hbm_loss_is_the_ring_traffic_over_hbm(tmp_path):
    from taskgraph.costing import comm_time
    from taskgraph.overlap import RING_HBM_PER_WIRE_BYTE
    plan = resolve(strategy(tmp_path, nodes=2))
    meta = build_work(plan).meta
    # DP over 2 nodes (ranks 0 and 8 of the tp 4 layout): busBw = (n - 1)/n x size / time of a
    # 1 GiB reduce-scatter; u = 3 busBw / HBM; g = 1 - 1/(1 + u)
    dp = dict(representative_groups(plan.sizes, 0))["dp"]
    bus = (len(dp) - 1) / len(dp) * 2.0 ** 30 / comm_time(plan.cluster, "reduce-scatter", 2.0 ** 30, tuple(dp))
    u = RING_HBM_PER_WIRE_BYTE * bus / plan.cluster.gpu.hbm_bandwidth
    assert meta["hbm_loss"] == {"dp": pytest.approx(1 - 1 / (1 + u), rel=1e-12)}
    assert 0.0 < meta["hbm_loss"]["dp"] < 0.1   # a NIC ring's traffic is a few % of an H100's HBM
    assert "hbm_loss" not in build_work(resolve(strategy(tmp_path, nodes=2, overlap_interference=False))).meta


def test_coarse_bucket_tail_with_hbm_loss_closed_form():
    from taskgraph.coarse import bucket_tail
    from taskgraph.work import Bucket
    # backward: 4 s closing a 4 s bucket, then 10 s; f = 0.25, g = 0.2: the bucket runs at 0.8 for
    # 5 s beside the compute, which takes 10 + 0.25 x 5 = 11.25 s: the 14 s backward is 1.25 s longer,
    # and the bucket is done inside it (no tail)
    steps = [(0, 1, 4.0), (0, 0, 10.0)]
    assert bucket_tail(steps, [Bucket(0, 1, 1.0, 4.0)], 0.25, 0.2) == pytest.approx((1.25, 0.0))
    # without the loss the old closed form: 10 + 0.25 x 4 -> 1 s longer
    assert bucket_tail(steps, [Bucket(0, 1, 1.0, 4.0)], 0.25) == pytest.approx((1.0, 0.0))
    # a bucket released at the end runs alone after the backward: its full length
    assert bucket_tail(steps, [Bucket(0, 0, 1.0, 4.0)], 0.25, 0.2) == pytest.approx((0.0, 4.0))


def test_fp8_sequence_parallel_all_gathers_move_fp8_bytes(tmp_path):
    # Transformer Engine v1.8 (3ec998e): the norm output is FP8 before its TP all-gather (forward and the
    # backward re-gather for wgrad) and a row-parallel layer's dY is cast to FP8 before its gather; the
    # reduce-scatters carry the BF16 GEMM outputs (taskgraph/te_scaling.py tp_gather_bytes)
    from taskgraph.costing import comm_time
    d = {"model": {"preset": "llama3-8b", "layers": 4}, "cluster": {"preset": "dgx-h100", "nodes": 1},
         "parallel": {"tp": 4, "pp": 1, "sp": True}, "schedule": "1f1b",
         "training": {"micro_batch": 1, "global_batch": 2, "seq_len": 4096, "precision": "fp8"},
         "options": {"fp8_recipe": "delayed"}}
    plan = resolve(parse_strategy(d, tmp_path))
    tp = tuple(dict(representative_groups(plan.sizes, 0))["tp"])
    bf16_bytes = 2 * 4096 * 4096            # the whole sequence's BF16 activations, h = 4,096
    fp8_ag = comm_time(plan.cluster, "all-gather", bf16_bytes / 2, tp)
    bf16_rs = comm_time(plan.cluster, "reduce-scatter", bf16_bytes, tp)
    qkv, out = _layer(plan, "qkv"), _layer(plan, "attn_out")
    assert [c.seconds for c in qkv.fwd_pre if c.op == "tp-all-gather"] == [fp8_ag]
    assert [c.seconds for c in qkv.bwd_pre if c.op == "tp-all-gather"] == [fp8_ag]
    assert [c.seconds for c in qkv.bwd_post if c.op == "tp-reduce-scatter"] == [bf16_rs]
    assert [c.seconds for c in out.bwd_pre if c.op == "tp-all-gather"] == [fp8_ag]
    assert [c.seconds for c in out.fwd_post if c.op == "tp-reduce-scatter"] == [bf16_rs]
    assert fp8_ag < 0.61 * comm_time(plan.cluster, "all-gather", bf16_bytes, tp)   # 54 us for 88 us
    # BF16 training gathers BF16
    bf = resolve(parse_strategy({**d, "training": {**d["training"], "precision": "bf16"}, "options": {}}, tmp_path))
    assert [c.seconds for c in _layer(bf, "qkv").fwd_pre] == [comm_time(bf.cluster, "all-gather", bf16_bytes, tp)]
