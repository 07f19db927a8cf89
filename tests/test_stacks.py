"""Software stacks (taskgraph/stacks.py, options.stack): the same operator graph priced with the
kernels each framework runs -- closed forms on single operators, and the option end to end."""
from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.api import simulate_strategy
from strategies.errors import ConfigError
from strategies.strategy_file import parse_strategy
from taskgraph.cost import op_time
from taskgraph.operators import layer_operators
from taskgraph.overheads import op_kernels
from taskgraph.plan import resolve
from taskgraph.stacks import attention_efficiency, get_stack, stack_names, with_attention
from topologies.gpus import get_gpu


def _ops():
    from taskgraph.model import get_model
    ops = layer_operators(get_model("llama3-8b"), ep=1, dtype_bytes=2, flash_attention=True, layer_index=0,
                          micro_batch=1, seq_len=4096, tp=1, sp=False, cp=1)
    return {o.name: o for o in ops}


def test_default_stack_is_the_catalog():
    h100 = get_gpu("h100")
    for name, op in _ops().items():
        for p in ("fwd", "bwd_input", "bwd_weight"):
            assert op_time(op, p, h100, stack=get_stack("megatron-te")) == op_time(op, p, h100), (name, p)


def test_eager_norm_makes_six_passes():
    # PyTorch's composite rms_norm: six elementwise kernels, each a pass over the tensor and a launch
    h100, op = get_gpu("h100"), _ops()["input_norm"]
    eff = h100.efficiency
    one = op.fwd_bytes / (h100.hbm_bandwidth * eff.elementwise_efficiency)
    assert op_time(op, "fwd", h100, stack=get_stack("torchtitan")) == pytest.approx(6 * one + 6 * eff.launch_overhead)
    assert op_time(op, "fwd", h100) == pytest.approx(one + eff.launch_overhead)
    assert op_kernels(op, "fwd", get_stack("torchtitan")) == 6 and op_kernels(op, "fwd") == 1
    # torch.compile fuses it back
    assert op_time(op, "fwd", h100, stack=get_stack("torchtitan-compile")) == op_time(op, "fwd", h100)


def test_sdpa_flash_attention_2_priced_from_the_kernel_table():
    # llama3-8b at 4096 tokens: head dim 128, causal; FlashAttention-2 (the deepspeed stack's flash-attn 2)
    # on H100 forward 319 TFLOP/s (kernels.yaml, [FA3-F5] (d)), backward the non-causal 310 x the
    # forward's causal ratio 319 / 368
    h100, op, fa2 = get_gpu("h100"), _ops()["attn_core"], get_stack("deepspeed")
    e = attention_efficiency(fa2, h100, "fwd", op.attn_shape)
    assert e == pytest.approx(319 / 989.4)
    assert attention_efficiency(fa2, h100, "bwd_input", op.attn_shape) == pytest.approx(310 * 319 / 368 / 989.4)
    t = op_time(op, "fwd", h100, stack=fa2)
    mem = op.fwd_bytes / (h100.hbm_bandwidth * h100.efficiency.hbm_efficiency)
    assert t == pytest.approx(max(op.fwd_flops / (h100.peak_flops("bf16") * e), mem) + h100.efficiency.launch_overhead)
    # torchtitan's SDPA (options.attention_kernel: sdpa) runs cuDNN on Hopper ([SDPA]): forward 518
    # ([FA3-F5] (d)), backward the non-causal 499 x the forward's causal ratio 518 / 609 ([FA3-F6] (b), [FA3-F5] (c))
    tt = with_attention(get_stack("torchtitan"), "sdpa")
    assert attention_efficiency(tt, h100, "fwd", op.attn_shape) == pytest.approx(518 / 989.4)
    assert attention_efficiency(tt, h100, "bwd_input", op.attn_shape) == pytest.approx(499 * 518 / 609 / 989.4)
    # on an A100 only the combined forward + backward FA2 figure exists (173 TFLOP/s of 312, [FA2-F4] (d)):
    # FlashAttention-2 prices it, and cuDNN (torchtitan's choice there too) falls back to it
    a100 = get_gpu("a100")
    assert attention_efficiency(fa2, a100, "fwd", op.attn_shape) == pytest.approx(173 / 312)
    assert attention_efficiency(tt, a100, "fwd", op.attn_shape) == pytest.approx(173 / 312)


def test_stack_option_end_to_end(tmp_path):
    base = {"model": {"preset": "llama3-8b", "layers": 2}, "cluster": {"preset": "dgx-h100", "nodes": 1},
            "parallel": {"tp": 1, "pp": 1}, "schedule": "1f1b",
            "training": {"micro_batch": 1, "global_batch": 8, "seq_len": 4096}}
    times = {}
    for st in (None,) + stack_names():
        s = parse_strategy({**base, "options": {} if st is None else {"stack": st}}, tmp_path)
        times[st] = simulate_strategy(s).training.iteration_time_s
    fused = parse_strategy({**base, "options": {"cross_entropy": "fused"}}, tmp_path)
    times["megatron-te-fused-loss"] = simulate_strategy(fused).training.iteration_time_s
    assert times[None] == times["megatron-te"]
    assert times["torchtitan"] > times["torchtitan-compile"] > times["megatron-te-fused-loss"]
    # megatron-te runs Megatron-core's 'native' loss (stacks.yaml [MEG-CE]): 22 / 10 B per logit where
    # torchtitan-compile's fused loss moves 10 / 6, which over a 128k vocabulary and two layers outweighs the rest
    assert times["torchtitan"] > times["megatron-te"] > times["megatron-te-fused-loss"]
    with pytest.raises(ConfigError, match="options.stack = 'torchtitan-eager' is not a known stack; valid: "):
        resolve(parse_strategy({**base, "options": {"stack": "torchtitan-eager"}}, tmp_path))


def test_torchtitan_import_names_its_stack():
    # torchtitan runs PyTorch eager unless torch.compile is on ([training] compile, or [compile] enable)
    from strategies.importers import import_config
    base = "[model]\nname = 'llama3'\nflavor = '8B'\n[training]\nlocal_batch_size = 1\nseq_len = 2048\n"
    assert import_config("torchtitan", base, cluster="dgx-h100", nodes=1).strategy["options"]["stack"] == "torchtitan"
    assert import_config("torchtitan", base + "compile = true\n", cluster="dgx-h100",
                         nodes=1).strategy["options"]["stack"] == "torchtitan-compile"
    assert import_config("torchtitan", base + "[compile]\nenable = true\ncomponents = ['model', 'loss']\n",
                         cluster="dgx-h100", nodes=1).strategy["options"]["stack"] == "torchtitan-compile"


def test_deepspeed_bf16_accumulates_gradients_in_separate_passes():
    # DeepSpeed BF16_Optimizer.update_hp_grads ([DS-BF16]): the GEMM writes a fresh bf16 gradient, then a
    # cast (2 + 4 B) and an add (4 + 4 + 4 B) per element, two more launches per weight; hand-computed
    # against the same operator priced with no accumulation at all
    from taskgraph.cost import HP_GRAD_ACCUM_KERNELS
    a100 = get_gpu("a100")
    eff = a100.efficiency
    for name in ("qkv", "attn_out", "mlp_gate_up", "mlp_down"):
        op = _ops()[name]
        grads = sum(g.k * g.n * g.batch for g in op.gemms)
        plain = op_time(op, "bwd_weight", a100)
        t = op_time(op, "bwd_weight", a100, grad_accum_bytes=4, grad_accum_unfused_bytes=18)
        assert HP_GRAD_ACCUM_KERNELS == 2
        assert t - plain == pytest.approx(18 * grads / (a100.hbm_bandwidth * eff.hbm_efficiency)
                                          + 2 * len(op.gemms) * eff.launch_overhead)
        # the forward and the input gradient do not change
        for p in ("fwd", "bwd_input"):
            assert op_time(op, p, a100, grad_accum_unfused_bytes=18) == op_time(op, p, a100)


def test_deepspeed_accumulation_applies_to_bf16_below_zero_2(tmp_path):
    from taskgraph.stack_costs import hp_grad_accum_bytes
    base = {"model": {"preset": "llama3-8b", "layers": 2}, "cluster": {"preset": "dgx-a100", "nodes": 1},
            "parallel": {"tp": 1, "pp": 1, "dp": 8}, "schedule": "1f1b",
            "training": {"micro_batch": 1, "global_batch": 16, "seq_len": 2048}}

    def plan(stack, precision="bf16", zero=1):
        d = {**base, "parallel": {**base["parallel"], "zero": zero},
             "training": {**base["training"], "precision": precision}, "options": {"stack": stack}}
        return resolve(parse_strategy(d, tmp_path))

    assert get_stack("deepspeed").hp_grad_accum_bytes == 18 and get_stack("megatron-te").hp_grad_accum_bytes == 0
    ds = get_stack("deepspeed")
    assert hp_grad_accum_bytes(plan("deepspeed"), ds) == 18
    assert hp_grad_accum_bytes(plan("deepspeed", zero=0), ds) == 18
    assert hp_grad_accum_bytes(plan("deepspeed", zero=3), ds) == 0          # ZeRO-3 partitions its gradients
    assert hp_grad_accum_bytes(plan("deepspeed", precision="fp16"), ds) == 0  # FP16_Optimizer, not BF16
    assert hp_grad_accum_bytes(plan("megatron-te"), None) == 0
    # end to end, attention unfused so that the stacks differ only in the accumulation: every backward
    # of the two micro-batches per rank adds its passes over the layer weights
    base["options"] = {"flash_attention": False}
    times = {}
    for st in ("deepspeed", "megatron-te"):
        d = {**base, "parallel": {**base["parallel"], "zero": 1}, "options": {"flash_attention": False, "stack": st}}
        times[st] = simulate_strategy(parse_strategy(d, tmp_path)).training.iteration_time_s
    assert times["deepspeed"] > times["megatron-te"]
    with pytest.raises(ConfigError, match="hp_grad_accum_bytes = 2.5 must be an integer"):
        from taskgraph.stacks import read_stack_file
        p = tmp_path / "stacks.yaml"
        p.write_text("stacks:\n  x: {attention: catalog, hp_grad_accum_bytes: 2.5}\n")
        read_stack_file(str(p))


def test_deepspeed_pipeline_exchanges_are_serial(tmp_path):
    # DeepSpeed's TrainSchedule ([DS-PIPE]): a boundary's activation and gradient transfers are two
    # blocking calls in a row, so each costs both directions' times; Megatron posts them together
    from taskgraph.costing import build_work
    from taskgraph.stack_costs import serial_exchanges
    assert serial_exchanges({(0, 1): 2.0, (1, 0): 3.0, (1, 2): 1.0}) == {(0, 1): 5.0, (1, 0): 5.0, (1, 2): 1.0}
    assert get_stack("deepspeed").p2p_serial and not get_stack("megatron-te").p2p_serial
    base = {"model": {"preset": "llama3-8b", "layers": 4}, "cluster": {"preset": "dgx-a100", "nodes": 2},
            "parallel": {"tp": 8, "pp": 2}, "schedule": "1f1b",
            "training": {"micro_batch": 1, "global_batch": 8, "seq_len": 2048}}
    works = {st: build_work(resolve(parse_strategy({**base, "options": {"flash_attention": False, "stack": st}},
                                                   tmp_path)))
             for st in ("deepspeed", "megatron-te")}
    te, ds = works["megatron-te"].p2p_pairs, works["deepspeed"].p2p_pairs
    assert set(te) == set(ds) == {(0, 1), (1, 0)} and te[(0, 1)] > 0
    assert ds[(0, 1)] == pytest.approx(te[(0, 1)] + te[(1, 0)]) and ds[(1, 0)] == ds[(0, 1)]


def test_fsdp2_copy_kernels_closed_form(tmp_path):
    # [FSDP2-COPY]: copy-in (4 + 3p) P / n, copy-out 2p P, reduce-scatter copy-in (2 + g) P bytes at
    # hbm_efficiency, p = 2 (bf16 gather), g = 4 (fp32 reduction), one launch each (two for the copy-in)
    from taskgraph.stack_costs import fsdp2_copy_times
    d = {"model": {"preset": "llama3-8b", "layers": 2}, "cluster": {"preset": "dgx-h100", "nodes": 1},
         "parallel": {"tp": 1, "pp": 1, "dp": 8, "zero": 3}, "schedule": "1f1b",
         "training": {"micro_batch": 1, "global_batch": 8, "seq_len": 2048}, "options": {"stack": "torchtitan"}}
    plan = resolve(parse_strategy(d, tmp_path))
    h100 = get_gpu("h100")
    bw, L = h100.hbm_bandwidth * h100.efficiency.hbm_efficiency, h100.efficiency.launch_overhead
    P = 218_112_000
    cin, cout, rs = fsdp2_copy_times(plan.cluster.gpu, P, 8, 2, 4)
    assert cin == pytest.approx(10 * P / 8 / bw + 2 * L)
    assert cout == pytest.approx(4 * P / bw + L)
    assert rs == pytest.approx(6 * P / bw + L)
    assert cout * 1e6 == pytest.approx(299.3 + 3.0, abs=0.1)   # 872 MB at 3.35 TB/s x 0.87, + a 3 us launch


def test_fsdp2_copies_join_the_zero3_collectives(tmp_path, monkeypatch):
    # the first layer's forward gather (nothing to hide behind) grows by copy-in + copy-out, every
    # reduce-scatter by its copy-in; a stack without FSDP2 (llm-foundry's FSDP1) has neither
    from taskgraph import costing
    from taskgraph.stack_costs import fsdp2_copy_times
    d = {"model": {"preset": "llama3-8b", "layers": 2}, "cluster": {"preset": "dgx-h100", "nodes": 1},
         "parallel": {"tp": 1, "pp": 1, "dp": 8, "zero": 3}, "schedule": "1f1b",
         "training": {"micro_batch": 1, "global_batch": 8, "seq_len": 2048}, "options": {"stack": "torchtitan"}}
    plan = resolve(parse_strategy(d, tmp_path))

    def comms(work):
        layer = work.stages[0].layers[1]   # layers[0] is the embedding block
        return ([c.seconds for c in layer.ops[0].fwd_pre if c.op == "zero3-param-gather"],
                [c.seconds for c in layer.ops[0].bwd_post if c.op == "zero3-grad-reduce-scatter"])

    costing.clear_cost_cache()
    with_copies = comms(costing.build_work(plan))
    real = costing.run_stack
    monkeypatch.setattr(costing, "run_stack", lambda name, kernel=None, ce=None: replace(real(name, kernel, ce), fsdp2_copies=False))
    costing.clear_cost_cache()
    without = comms(costing.build_work(plan))
    monkeypatch.undo()
    costing.clear_cost_cache()
    params = sum(o.params for o in layer_operators(plan.model, ep=1, dtype_bytes=2, flash_attention=True,
                                                   layer_index=0, micro_batch=1, seq_len=2048, tp=1, sp=False, cp=1))
    cin, cout, rs = fsdp2_copy_times(plan.cluster.gpu, params, 8, costing.param_bytes(plan),
                                     costing.grad_bytes_per_param(plan))
    assert len(with_copies[0]) == len(with_copies[1]) == 1
    assert with_copies[0][0] - without[0][0] == pytest.approx(cin + cout)
    assert with_copies[1][0] - without[1][0] == pytest.approx(rs)


def test_torch_ring_attention_closed_form(tmp_path):
    # [TORCH-CP]: one SDPA launch per ring step on s/cp chunks, fp32 merges: forward 6 cp + 28 (cp - 1) + 6
    # B per output element, backward 4 + 10 cp + 6 per Q/K/V element plus 8 cp per K/V element
    from taskgraph.attention_shape import AttentionShape
    from taskgraph.torch_cp import merge_bytes, ring_step_shape, torch_ring_attention
    assert ring_step_shape(AttentionShape(128.0, 8192, 1.0), 8192, 4) == AttentionShape(128.0, 2048, 0.25)
    d = {"model": {"preset": "llama3-8b", "layers": 2}, "cluster": {"preset": "dgx-h100", "nodes": 1},
         "parallel": {"tp": 1, "pp": 1, "cp": 2}, "schedule": "1f1b",
         "training": {"micro_batch": 1, "global_batch": 4, "seq_len": 8192}, "options": {"stack": "torchtitan"}}
    plan = resolve(parse_strategy(d, tmp_path))
    op = {o.name: o for o in layer_operators(plan.model, ep=1, dtype_bytes=2, flash_attention=True, layer_index=0,
                                             micro_batch=1, seq_len=8192, tp=1, sp=False, cp=2)}["attn_core"]
    # llama3-8b: 32 query heads, 8 K/V heads of 128; 4096 local queries
    q = out = 4096 * 128 * 32
    kv = 2 * 4096 * 128 * 8
    assert merge_bytes(op, 2, 8 / 32) == (out * (12 + 28 + 6), (q + kv) * (4 + 20 + 6) + kv * 16)
    h100 = get_gpu("h100")
    bw, L = h100.hbm_bandwidth * h100.efficiency.hbm_efficiency, h100.efficiency.launch_overhead
    op2, f, b = torch_ring_attention(plan, get_stack("torchtitan"), op)
    assert op.attn_shape.seq == 8192 and op2.attn_shape.seq == 4096          # all-gather CP: whole-sequence loop
    assert op2.attn_shape.causal_share == pytest.approx(op.attn_shape.causal_share / 2)
    assert f == pytest.approx(out * 46 / bw + 5 * 2 * L) and b == pytest.approx(((q + kv) * 30 + kv * 16) / bw + 4 * 2 * L)
    assert f * 1e3 == pytest.approx(0.265 + 0.030, abs=0.002)   # 772 MB at 2.91 TB/s, 10 launches of 3 us
    # other stacks, Ulysses, cp = 1: nothing
    assert torch_ring_attention(plan, get_stack("megatron-te"), op) == (op, 0.0, 0.0)
    d1 = {**d, "parallel": {"tp": 1, "pp": 1, "cp": 1}, "training": {**d["training"], "global_batch": 8}}
    assert torch_ring_attention(resolve(parse_strategy(d1, tmp_path)), get_stack("torchtitan"), op) == (op, 0.0, 0.0)
    ring = resolve(parse_strategy({**d, "options": {"stack": "torchtitan", "cp_comm": "ring"}}, tmp_path))
    op_ring = {o.name: o for o in layer_operators(plan.model, ep=1, dtype_bytes=2, flash_attention=True, layer_index=0,
                                                  micro_batch=1, seq_len=8192, tp=1, sp=False, cp=2,
                                                  cp_comm="ring")}["attn_core"]
    assert torch_ring_attention(ring, get_stack("torchtitan"), op_ring)[0] == op_ring   # already per-step shaped


def test_torch_ring_attention_lengthens_the_step(tmp_path, monkeypatch):
    from taskgraph import costing
    d = {"model": {"preset": "llama3-8b", "layers": 2}, "cluster": {"preset": "dgx-h100", "nodes": 1},
         "parallel": {"tp": 1, "pp": 1, "cp": 2}, "schedule": "1f1b",
         "training": {"micro_batch": 1, "global_batch": 4, "seq_len": 8192}, "options": {"stack": "torchtitan"}}
    s = parse_strategy(d, tmp_path)
    costing.clear_cost_cache()
    with_cp = simulate_strategy(s).training.iteration_time_s
    real = costing.run_stack
    monkeypatch.setattr(costing, "run_stack", lambda name, kernel=None, ce=None: replace(real(name, kernel, ce), torch_cp=False))
    costing.clear_cost_cache()
    without = simulate_strategy(s).training.iteration_time_s
    monkeypatch.undo()
    costing.clear_cost_cache()
    assert with_cp > without


@pytest.mark.parametrize("field, value, message", [
    ("p2p_serial", "yes", "p2p_serial = 'yes' must be true or false"),
    ("partitioned_pipe", "on", "partitioned_pipe = 'on' must be true or false"),
    ("fsdp2_copies", 1, "fsdp2_copies = 1 must be true or false"),
    ("torch_cp", "on", "torch_cp = 'on' must be true or false"),
    ("hp_grad_accum_bytes", 65, "hp_grad_accum_bytes = 65 must be an integer"),
    ("hp_grad_accum_bytes", True, "hp_grad_accum_bytes = True must be an integer"),
])
def test_stack_file_flags_are_checked(tmp_path, field, value, message):
    import yaml

    from taskgraph.stacks import read_stack_file
    p = tmp_path / "stacks.yaml"
    p.write_text(yaml.safe_dump({"stacks": {"x": {"attention": "catalog", field: value}}}))
    with pytest.raises(ConfigError, match=message):
        read_stack_file(str(p))
    p.write_text(yaml.safe_dump({"stacks": {"x": {"attention": "catalog"}}}))
    assert getattr(read_stack_file(str(p))["x"], field) in (False, 0)   # left out: the default


def test_deepspeed_bf16_zero1_all_reduces_its_gradients(tmp_path):
    # [DS-BF16]: BF16_Optimizer's ZeRO-1 all-reduces the fp32 gradients whole (_bf16_reduce_grads), where
    # Megatron's distributed optimizer reduce-scatters them: twice the ring traffic of the same bytes
    from taskgraph.costing import build_work
    from taskgraph.stack_costs import reduce_kind
    base = {"model": {"preset": "llama3-8b", "layers": 2}, "cluster": {"preset": "dgx-a100", "nodes": 2},
            "parallel": {"tp": 1, "pp": 1, "zero": 1}, "schedule": "1f1b",
            "training": {"micro_batch": 1, "global_batch": 16, "seq_len": 2048}}
    plans = {st: resolve(parse_strategy({**base, "options": {"flash_attention": False, "stack": st}}, tmp_path))
             for st in ("deepspeed", "megatron-te")}
    assert reduce_kind(plans["deepspeed"]) == "all-reduce" and reduce_kind(plans["megatron-te"]) == "reduce-scatter"
    z3 = resolve(parse_strategy({**base, "parallel": {"tp": 1, "pp": 1, "zero": 3},
                                 "options": {"stack": "deepspeed"}}, tmp_path))
    assert reduce_kind(z3) == "reduce-scatter"          # DeepSpeed ZeRO-3 partitions its gradients
    red = {st: sum(b.reduce_s for s in build_work(p).stages for b in s.buckets) for st, p in plans.items()}
    gat = {st: sum(b.gather_s for s in build_work(p).stages for b in s.buckets) for st, p in plans.items()}
    assert 1.8 < red["deepspeed"] / red["megatron-te"] <= 2.05   # 2 (n - 1) / n against (n - 1) / n, n = 16
    assert gat["deepspeed"] == gat["megatron-te"] > 0            # both all-gather the updated bf16 partitions
