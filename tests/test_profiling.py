"""execsim profile / calibrate: the operator inventory, the profile CSV round trip, a profile of
another GPU (options.profile_gpu), kernel classes and GEMM mapping, Kineto reading (HTA's filter,
CPU self times), HTA's kernel breakdown on real traces, the alpha-beta fit, and (with PyTorch) the
CPU profile end to end."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from simulator.cli.main import main
from simulator.profiling.calibrate import calibrate, class_totals
from simulator.profiling.collectives import fit_alpha_beta
from simulator.profiling.inventory import plan_operators, profile_items
from simulator.profiling.kernels import gemm_key, kernel_class, plan_gemm_index
from simulator.profiling.kineto import read_trace, read_trace_dir
from simulator.profiling.profile_csv import ProfileRow, profile_text
from strategies.errors import ExecsimError
from strategies.strategy_file import load_strategy
from taskgraph.cost import PASSES, ProfileTable, op_shape_key
from taskgraph.plan import resolve

DATA = Path(__file__).parent / "data" / "kineto_hta"
TINY = """model: {name: tiny-gpt, layers: 2, hidden: 64, heads: 2, kv_heads: 2, head_dim: 32, ffn: 256, vocab: 512,
  mlp: gelu, norm: layernorm, position: learned, max_seq: 128, bias: true, tied_embeddings: false, dropout: false}
cluster: {gpu: cpu, nodes: 1, gpus_per_node: 1, nvlink_latency_us: 0, nvlink_efficiency: 1, nic_gbit: 1,
  nic_latency_us: 0, nic_efficiency: 1, host_us_per_kernel: 0, host_us_per_collective: 0,
  gpu_speed_cv: 0}
parallel: {tp: 1, pp: 1, dp: 1}
schedule: 1f1b
training: {micro_batch: 1, global_batch: 2, seq_len: 64, precision: bf16}
"""


def _tiny(tmp_path, extra=""):
    p = tmp_path / "s.yaml"
    p.write_text(TINY + extra)
    return p


def test_inventory_is_every_distinct_operator_once(tmp_path):
    plan = resolve(load_strategy(_tiny(tmp_path)))
    items = profile_items(plan)
    names = [it.name for it in items]
    assert names == ["embedding", "input_norm", "qkv", "attn_core", "attn_out", "attn_residual", "post_attn_norm",
                     "mlp_up", "mlp_act", "mlp_down", "mlp_residual", "final_norm", "lm_head", "loss"]
    assert [it.count for it in items if it.name in ("qkv", "loss")] == [2, 1]   # 2 layers, one head
    assert {(o.name, op_shape_key(o)) for o in plan_operators(plan)} == {(it.name, it.shape) for it in items}
    qkv = items[2]
    assert qkv.shape == "64x192x64x1"   # tokens 64, 3h = 192, h = 64


def _fake_profile(tmp_path, plan, gpu="cpu", scale=1e-6):
    rows = [ProfileRow(it.name, it.shape, p, scale * (i + 1), 0.0) for i, it in enumerate(profile_items(plan))
            for p in PASSES]
    path = tmp_path / "prof.csv"
    path.write_text(profile_text(rows, gpu, "bf16"))
    return path, rows


def test_a_row_for_every_operator_is_used_and_sets_the_times(tmp_path):
    from simulator.simulation.strategy import simulate_strategy
    plan = resolve(load_strategy(_tiny(tmp_path)))
    path, rows = _fake_profile(tmp_path, plan)
    sim = simulate_strategy(load_strategy(_tiny(tmp_path, "options: {profile: prof.csv}\n")))
    # one micro-batch of the profile: sum over operators of (fwd + bwd_input + bwd_weight) x count;
    # two micro-batches, one rank, no communication: the iteration is their sum plus the optimizer
    per_mb = sum(r.measured_s * it.count for r, it in zip(rows, [i for i in profile_items(plan) for _ in PASSES]))
    from taskgraph.costing import build_work
    opt_s = build_work(resolve(load_strategy(_tiny(tmp_path, "options: {profile: prof.csv}\n")))).stages[0].optimizer_s
    assert sim.report.per_rank[0].busy_s == pytest.approx(2 * per_mb + opt_s, rel=1e-9)
    table = ProfileTable.load(path).applied_to("cpu")
    assert table.gpus() == ["cpu"]


def test_profile_of_another_gpu_needs_profile_gpu(tmp_path, capsys):
    plan = resolve(load_strategy(_tiny(tmp_path)))
    _fake_profile(tmp_path, plan, gpu="H100-SXM-80GB")
    s = _tiny(tmp_path, "options: {profile: prof.csv}\n")
    assert main(["simulate", str(s)]) == 2
    err = capsys.readouterr().err
    assert "was measured on h100-sxm-80gb but the cluster's GPU is cpu" in err and "profile_gpu" in err
    s2 = _tiny(tmp_path, "options: {profile: prof.csv, profile_gpu: H100-SXM-80GB}\n")
    assert main(["simulate", str(s2)]) == 0
    s3 = _tiny(tmp_path, "options: {profile: prof.csv, profile_gpu: a100}\n")
    assert main(["simulate", str(s3)]) == 2
    assert "options.profile_gpu = 'a100' but profile" in capsys.readouterr().err


def test_profile_gpu_times_are_applied_unchanged(tmp_path):
    from simulator.simulation.strategy import simulate_strategy
    plan = resolve(load_strategy(_tiny(tmp_path)))
    _fake_profile(tmp_path, plan, gpu="cpu")
    a = simulate_strategy(load_strategy(_tiny(tmp_path, "options: {profile: prof.csv}\n")))
    _fake_profile(tmp_path, plan, gpu="h100-sxm-80gb")
    b = simulate_strategy(load_strategy(_tiny(tmp_path, "options: {profile: prof.csv, profile_gpu: h100-sxm-80gb}\n")))
    assert a.training.iteration_time_s == b.training.iteration_time_s


@pytest.mark.parametrize("name, cls", [
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", "communication"),
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "communication"),
    ("Memcpy HtoD (Pageable -> Device)", "memcpy"), ("Memset (Device)", "memcpy"),
    ("cudaStreamSync", "other"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64", "gemm"), ("nvjet_tst_128x256_64x4_1x2_h_bz", "gemm"),
    ("ampere_sgemm_128x128_tn", "gemm"), ("aten::addmm", "gemm"),
    ("void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>>", "attention"),
    ("aten::_scaled_dot_product_flash_attention_for_cpu", "attention"),
    ("void fbgemm_gpu::permute_2D_lengths_kernel<int>(int, int, int const*, int const*, int*)", "elementwise"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<int>>", "elementwise"),
    ("c10d::allreduce_", "communication"), ("aten::gelu", "elementwise"),
])
def test_kernel_classes(name, cls):
    assert kernel_class(name) == cls


def test_gemm_keys_match_the_plan_passes(tmp_path):
    plan = resolve(load_strategy(_tiny(tmp_path)))
    index = plan_gemm_index(plan_operators(plan))
    # nn.Linear forward of qkv: X[64, 64] @ W^T[64, 192] -> addmm(bias, X, W^T)
    assert gemm_key("aten::addmm", ((192,), (64, 64), (64, 192))) == (64, 192, 64, 1)
    # weight gradient dW = dY^T X: mm([192, 64], [64, 64]) -> output 192 x 64, reduction 64
    assert gemm_key("aten::mm", ((192, 64), (64, 64))) == (64, 192, 64, 1)
    assert gemm_key("aten::bmm", ((8, 16, 32), (8, 32, 4))) == (4, 16, 32, 8)
    assert gemm_key("aten::gelu", ((1, 2),)) is None
    qkv = index[(64, 192, 64, 1)]
    assert ("qkv", "64x192x64x1", "fwd") in qkv and ("qkv", "64x192x64x1", "bwd_weight") in qkv


def _write_trace(path, events, rank=0):
    path.write_text(json.dumps({"distributedInfo": {"rank": rank}, "traceEvents": events}))


def test_kineto_drops_the_last_step_like_hta(tmp_path):
    ev = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 100, "tid": 1},
          {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#2", "ts": 100, "dur": 50, "tid": 1},
          {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 10, "dur": 2, "args": {"correlation": 7}},
          {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 110, "dur": 2, "args": {"correlation": 8}},
          {"ph": "X", "cat": "kernel", "name": "ampere_sgemm_128x128_tn", "ts": 20, "dur": 30,
           "args": {"stream": 7, "correlation": 7}},
          {"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce", "ts": 120, "dur": 5,
           "args": {"stream": 9, "correlation": 8}}]
    _write_trace(tmp_path / "rank0.json", ev)
    rt = read_trace(tmp_path / "rank0.json")
    assert [k.name for k in rt.kernels] == ["ampere_sgemm_128x128_tn"] and rt.steps_us == (100.0,)
    rt = read_trace(tmp_path / "rank0.json", include_last_step=True)
    assert len(rt.kernels) == 2 and rt.steps_us == (100.0, 50.0) and rt.device == "gpu"


def test_kineto_cpu_trace_uses_self_times(tmp_path):
    ev = [{"ph": "X", "cat": "cpu_op", "name": "aten::linear", "ts": 0, "dur": 100, "tid": 3},
          {"ph": "X", "cat": "cpu_op", "name": "aten::t", "ts": 1, "dur": 4, "tid": 3},
          {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "ts": 10, "dur": 80, "tid": 3,
           "args": {"Input Dims": [[192], [64, 64], [64, 192]]}},
          {"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "ts": 20, "dur": 10, "tid": 3}]
    _write_trace(tmp_path / "rank0.json", ev)
    rt = read_trace(tmp_path / "rank0.json")
    assert rt.device == "cpu"
    assert [(k.name, k.dur) for k in rt.kernels] == [("aten::linear", 16.0), ("aten::t", 4.0), ("aten::addmm", 70.0),
                                                     ("aten::copy_", 10.0)]
    assert sum(k.dur for k in rt.kernels) == 100.0   # every microsecond once


def test_calibrate_maps_cpu_gemms_to_operators(tmp_path):
    plan = resolve(load_strategy(_tiny(tmp_path)))
    ev = [{"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "ts": t, "dur": d, "tid": 3,
           "args": {"Input Dims": [[192], [64, 64], [64, 192]]}} for t, d in ((0, 10), (20, 30), (60, 20))]
    (tmp_path / "tr").mkdir()
    _write_trace(tmp_path / "tr" / "rank0.json", ev)
    cal = calibrate(plan, read_trace_dir(tmp_path / "tr"))
    assert [(r.op, r.pass_, round(r.measured_s * 1e6, 6)) for r in cal.rows if r.op == "qkv"] == \
        [("qkv", p, 20.0) for p in ("fwd", "bwd_weight")]
    assert cal.mapped_s == pytest.approx(60e-6) and cal.unmapped == []


def test_class_totals_equal_hta_kernel_breakdown(hta_in_process):
    hta = pytest.importorskip("hta.trace_analysis", reason="HolisticTraceAnalysis not installed (extra 'hta')")
    traces = read_trace_dir(DATA)
    assert [t.rank for t in traces] == [0, 1] and all(t.device == "gpu" for t in traces)
    ta = hta.TraceAnalysis(trace_dir=str(DATA))
    _, kd = ta.get_gpu_kernel_breakdown(visualize=False, duration_ratio=1.0, num_kernels=10**6,
                                        include_memory_kernels=True)
    types = {"COMMUNICATION": ("communication",), "MEMORY": ("memcpy",),
             "COMPUTATION": ("gemm", "attention", "elementwise")}
    for rt in traces:
        mine = class_totals(rt.kernels)
        theirs = kd[kd["rank"] == rt.rank].groupby("kernel_type")["sum (us)"].sum().to_dict()
        for t, classes in types.items():
            assert sum(mine[c] for c in classes) == theirs.get(t, 0.0), (rt.rank, t)
        assert mine["other"] == 0.0
        per_name = {}
        for k in rt.kernels:
            per_name[k.name] = per_name.get(k.name, 0.0) + k.dur
        hn = kd[kd["rank"] == rt.rank].set_index("name")["sum (us)"].to_dict()
        assert per_name == hn


def test_shipped_hta_traces_totals():
    """The figures docs/validation.md quotes (exact microseconds, HTA's filter: last step dropped)."""
    tot = [class_totals(t.kernels) for t in read_trace_dir(DATA)]
    assert [round(t["communication"]) for t in tot] == [195327, 168027]
    assert [round(t["memcpy"]) for t in tot] == [662, 2667]
    assert [round(t["gemm"] + t["attention"] + t["elementwise"]) for t in tot] == [106252, 135548]


def test_alpha_beta_fit_is_exact_on_a_line():
    rows = [("all-reduce", 2, s, 1e-4 + s / 2e9) for s in (1e3, 1e5, 1e7)]   # bus bytes = S for n = 2
    alpha, bw = fit_alpha_beta(rows)
    assert math.isclose(alpha, 1e-4, rel_tol=1e-9) and math.isclose(bw, 2e9, rel_tol=1e-9)


def test_profile_refuses_bad_counts_before_work(tmp_path, capsys):
    s = _tiny(tmp_path)
    assert main(["profile", str(s), "--device", "cpu", "--repeats", "0", "-o", str(tmp_path / "p.csv")]) == 2
    assert "--repeats = 0 must be an integer in [1, 1000]" in capsys.readouterr().err
    assert not (tmp_path / "p.csv").exists()


def test_calibrate_cli_on_the_shipped_traces(tmp_path, capsys):
    out = tmp_path / "cal.csv"
    assert main(["calibrate", str(_tiny(tmp_path)), str(DATA), "-o", str(out), "--no-simulate",   # ranks 0 and 1
                 "--set", "parallel.dp=2", "--set", "cluster.gpus_per_node=2"]) == 0
    text = capsys.readouterr().out
    assert "195.327" in text and "ncclKernel_SendRecv" in text
    assert out.read_text() == "gpu,dtype,op,pass,shape,time_us\n"   # a recommendation model: nothing maps


def test_cpu_profile_end_to_end(tmp_path, capsys):
    torch = pytest.importorskip("torch", reason="PyTorch not installed (extra 'profile'): execsim profile untested")
    assert torch is not None
    s = _tiny(tmp_path)
    out = tmp_path / "cpu.csv"
    assert main(["profile", str(s), "--device", "cpu", "--threads", "1", "--repeats", "1", "--warmup", "0",
                 "-o", str(out)]) == 0
    assert "profile written to" in capsys.readouterr().out
    lines = out.read_text().splitlines()
    # a row per operator pass, and one for the optimizer step of the stage's parameters
    assert lines[0] == "gpu,dtype,op,pass,shape,time_us" and len(lines) == 1 + 14 * 3 + 1
    assert all(line.startswith("cpu,bf16,") for line in lines[1:])
    assert lines[-1].startswith("cpu,bf16,optimizer,fwd,params=")
    s2 = _tiny(tmp_path, "options: {profile: cpu.csv}\n")
    assert main(["simulate", str(s2)]) == 0   # every row matches an operator (check_all_used)
    with pytest.raises(ExecsimError, match="fp8|FP8"):
        from dataclasses import replace

        from simulator.profiling.measure import profile_plan
        plan = resolve(load_strategy(s))
        strat = replace(plan.strategy, training=replace(plan.strategy.training, precision="fp8"))
        profile_plan(resolve(strat), "cpu", 1, 0)


def test_report_says_which_operators_were_measured(tmp_path):
    # measured times take precedence over the cost model; the simulation says which came from which
    from simulator.simulation.strategy import simulate_strategy
    plan = resolve(load_strategy(_tiny(tmp_path)))
    items = profile_items(plan)
    rows = [ProfileRow(items[0].name, items[0].shape, p, 1e-6, 0.0) for p in PASSES]
    (tmp_path / "prof.csv").write_text(profile_text(rows, "cpu", "bf16"))
    sim = simulate_strategy(load_strategy(_tiny(tmp_path, "options: {profile: prof.csv}\n")))
    cov = sim.graph.meta["profile"]
    passes_of_first = {f"{items[0].name} {p}" for p in PASSES}
    assert cov["measured"] == len(passes_of_first)
    assert cov["modelled"] > 0 and not passes_of_first & set(cov["modelled_examples"])


def test_an_optimizer_row_replaces_the_streamed_adam_step(tmp_path):
    from simulator.profiling.measure import optimizer_items
    from taskgraph.costing import build_work
    plan = resolve(load_strategy(_tiny(tmp_path)))
    ((n, sizes, modelled),) = optimizer_items(plan)
    assert sum(sizes) == n and n == sum(op.grad_bytes for l in build_work(plan).stages[0].layers
                                        for op in l.ops) / 4   # fp32 gradients: 4 bytes per parameter
    rows = [ProfileRow("optimizer", f"params={int(n)}", "fwd", 0.0123, modelled, 0, "adam")]
    (tmp_path / "prof.csv").write_text(profile_text(rows, "cpu", "bf16"))
    with_row = build_work(resolve(load_strategy(_tiny(tmp_path, "options: {profile: prof.csv}\n"))),
                          check_profile=True).stages[0].optimizer_s
    assert with_row == pytest.approx(build_work(plan).stages[0].optimizer_s - modelled + 0.0123, rel=1e-12)
    # a row for another parameter count (another dp size under ZeRO) scales linearly to this run's count
    (tmp_path / "prof.csv").write_text(profile_text([ProfileRow("optimizer", f"params={int(n) * 4}", "fwd", 0.04,
                                                                0.0)], "cpu", "bf16"))
    scaled = build_work(resolve(load_strategy(_tiny(tmp_path, "options: {profile: prof.csv}\n"))),
                        check_profile=True).stages[0].optimizer_s
    assert scaled == pytest.approx(build_work(plan).stages[0].optimizer_s - modelled + 0.04 * n / (int(n) * 4),
                                   rel=1e-9)


def test_a_profile_taken_on_one_node_serves_other_node_counts(tmp_path):
    """Issue 41: ZeRO shards the optimizer over dp, so its row's parameter count changes with the node
    count; the profile still applies (no 'matches no operator'), the step scaled by the parameters."""
    from simulator.profiling.measure import optimizer_items
    from taskgraph.costing import build_work
    zero1 = TINY.replace("parallel: {tp: 1, pp: 1, dp: 1}", "parallel: {tp: 1, pp: 1, dp: 1, zero: 1}")
    (tmp_path / "one.yaml").write_text(zero1)
    plan = resolve(load_strategy(tmp_path / "one.yaml"))
    rows = [ProfileRow("optimizer", f"params={int(n)}", "fwd", 0.02, modelled, 0, "adam")
            for n, _, modelled in optimizer_items(plan)]
    (tmp_path / "prof.csv").write_text(profile_text(rows, "cpu", "bf16"))
    opts = "options: {profile: prof.csv}\n"
    (tmp_path / "one.yaml").write_text(zero1 + opts)
    (tmp_path / "two.yaml").write_text(zero1.replace("nodes: 1", "nodes: 2").replace("dp: 1", "dp: 2") + opts)
    one, two = (resolve(load_strategy(tmp_path / f)) for f in ("one.yaml", "two.yaml"))
    assert two.sizes.dp == 2 * one.sizes.dp and two.zero >= 1
    s1 = build_work(one, check_profile=True).stages[0]
    s2 = build_work(two, check_profile=True).stages[0]   # refused before: params=N matched no operator
    from taskgraph.costing import optimizer_params
    n1, n2 = optimizer_params(one, s1.layers), optimizer_params(two, s2.layers)
    assert n2 == pytest.approx(n1 / 2)
    # the measured 20 ms halves with the parameters each rank updates (the rest is modelled)
    assert (s1.optimizer_s - s2.optimizer_s) > 0.0099
