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
from taskgraph.stacks import attention_efficiency, get_stack, stack_names
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
    # llama3-8b at 4096 tokens: head dim 128, causal; FlashAttention-2 on H100 forward 319 TFLOP/s
    # (kernels.yaml, [FA3-F5] (d)), backward the non-causal 310 x the forward's causal ratio 319 / 368
    h100, op = get_gpu("h100"), _ops()["attn_core"]
    e = attention_efficiency(get_stack("torchtitan"), h100, "fwd", op.attn_shape)
    assert e == pytest.approx(319 / 989.4)
    assert attention_efficiency(get_stack("torchtitan"), h100, "bwd_input", op.attn_shape) == \
        pytest.approx(310 * 319 / 368 / 989.4)
    t = op_time(op, "fwd", h100, stack=get_stack("torchtitan"))
    mem = op.fwd_bytes / (h100.hbm_bandwidth * h100.efficiency.hbm_efficiency)
    assert t == pytest.approx(max(op.fwd_flops / (h100.peak_flops("bf16") * e), mem) + h100.efficiency.launch_overhead)
    # on an A100 only the combined forward + backward figure exists (173 TFLOP/s of 312, [FA2-F4] (d));
    # FlashAttention-3 is Hopper only and falls back to FlashAttention-2 there
    a100 = get_gpu("a100")
    assert attention_efficiency(get_stack("torchtitan"), a100, "fwd", op.attn_shape) == pytest.approx(173 / 312)


def test_stack_option_end_to_end(tmp_path):
    base = {"model": {"preset": "llama3-8b", "layers": 2}, "cluster": {"preset": "dgx-h100", "nodes": 1},
            "parallel": {"tp": 1, "pp": 1}, "schedule": "1f1b",
            "training": {"micro_batch": 1, "global_batch": 8, "seq_len": 4096}}
    times = {}
    for st in (None,) + stack_names():
        s = parse_strategy({**base, "options": {} if st is None else {"stack": st}}, tmp_path)
        times[st] = simulate_strategy(s).training.iteration_time_s
    assert times[None] == times["megatron-te"]
    assert times["torchtitan"] > times["torchtitan-compile"] > times["megatron-te"]
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
    from taskgraph.costing import hp_grad_accum_bytes
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
        from taskgraph.stacks import _table
        p = tmp_path / "stacks.yaml"
        p.write_text("stacks:\n  x: {attention: catalog, hp_grad_accum_bytes: 2.5}\n")
        _table(str(p))


def test_deepspeed_pipeline_exchanges_are_serial(tmp_path):
    # DeepSpeed's TrainSchedule ([DS-PIPE]): a boundary's activation and gradient transfers are two
    # blocking calls in a row, so each costs both directions' times; Megatron posts them together
    from taskgraph.costing import build_work, serial_exchanges
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
