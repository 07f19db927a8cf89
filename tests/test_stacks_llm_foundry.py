"""The llm-foundry stack as its benchmarking README ran MPT (taskgraph/data/stacks.yaml [LLMF]): the Triton
FlashAttention of attn_impl: triton as a published share of FlashAttention-2 ([FA-TRITON]), and the loss's
two passes (flash-attn's fused xentropy plus Composer's two per-micro-batch train metrics) -- closed forms
on single operators and the option end to end."""
from __future__ import annotations

import math

import pytest

from simulator.api import simulate_strategy
from strategies.strategy_file import parse_strategy
from taskgraph.cost import op_time
from taskgraph.model import get_model, load_model_yaml
from taskgraph.operators import head_operators, layer_operators
from taskgraph.overheads import op_kernels
from taskgraph.stacks import attention_efficiency, attention_kernel, get_stack, with_attention
from topologies.gpus import get_gpu

#: Dao 2023 Section 4.1: FlashAttention-2 "around 1.3-1.5x faster than FlashAttention in Triton in the forward
#: pass and around 2x faster in the backward pass" -> the Triton kernel's shares of FA2
TRITON_FWD, TRITON_BWD = 0.716, 0.5


def _attn_core(seq: int):
    ops = layer_operators(get_model("llama3-8b"), ep=1, dtype_bytes=2, flash_attention=True, layer_index=0,
                          micro_batch=1, seq_len=seq, tp=1, sp=False, cp=1)
    return {o.name: o for o in ops}["attn_core"]


def test_triton_share_is_the_papers_range():
    """The forward share is the geometric middle of 1/1.5 .. 1/1.3, the backward 1/2 (as [FLEX] takes ranges)."""
    assert TRITON_FWD == pytest.approx(1 / math.sqrt(1.3 * 1.5), abs=5e-4)
    assert TRITON_BWD == 1 / 2


def test_llm_foundry_runs_triton_attention_on_every_architecture():
    stack = get_stack("llm-foundry")
    assert stack.attention == "triton"
    assert [attention_kernel(stack, a) for a in ("ampere", "hopper", "blackwell")] == ["triton"] * 3


def test_triton_attention_on_a100_is_a_share_of_flashattention_2():
    """MPT's head dim 128 at 2k tokens, causal, on an A100: FA2's forward + backward 155 TFLOP/s of 312
    ([FA2-F4] (d), used for both passes), times 0.716 forward and 0.5 backward."""
    op, a100, stack = _attn_core(2048), get_gpu("a100"), get_stack("llm-foundry")
    assert attention_efficiency(stack, a100, "fwd", op.attn_shape) == pytest.approx(TRITON_FWD * 155 / 312)
    assert attention_efficiency(stack, a100, "bwd_input", op.attn_shape) == pytest.approx(TRITON_BWD * 155 / 312)
    # the operator's time: its FLOPs at that rate (compute-bound) plus one launch
    e = TRITON_BWD * 155 / 312
    t = op_time(op, "bwd_input", a100, stack=stack)
    assert t == pytest.approx(op.bwd_input_flops / (a100.peak_flops("bf16") * e) + a100.efficiency.launch_overhead)


def test_triton_attention_on_h100_is_a_share_of_flashattention_2():
    """H100 at 2k, head dim 128, causal: FA2's forward 298 ([FA3-F5] (d)); backward the non-causal 291
    ([FA3-F6] (b)) x the forward's causal ratio 298 / 362 ([FA3-F5] (c)); the shares as on the A100."""
    op, h100, stack = _attn_core(2048), get_gpu("h100"), get_stack("llm-foundry")
    fa2 = with_attention(stack, "fa2")
    assert attention_efficiency(fa2, h100, "fwd", op.attn_shape) == pytest.approx(298 / 989.4)
    assert attention_efficiency(stack, h100, "fwd", op.attn_shape) == pytest.approx(TRITON_FWD * 298 / 989.4)
    assert attention_efficiency(stack, h100, "bwd_input", op.attn_shape) == \
        pytest.approx(TRITON_BWD * 291 * 298 / 362 / 989.4)


def _tiny_loss():
    m = load_model_yaml(dict(name="tiny-mpt", layers=1, hidden=16, heads=2, kv_heads=2, ffn=64, vocab=64, mlp="gelu",
                             position="learned", norm="layernorm", bias=True, tied_embeddings=True, dropout=False,
                             max_seq=8))
    return {o.name: o for o in head_operators(m, micro_batch=1, seq_len=8)}["loss"]


def test_loss_takes_two_passes():
    """8 tokens x 64 vocab = 512 logits: the loss operator moves 10 B per logit forward and 6 backward (5,120 and
    3,072 B); llm-foundry's fused xentropy (2 + 4 B per logit) and Composer's two train metrics (each a bf16 ->
    fp32 cast, 2 + 4, and an fp32 log_softmax, 4 + 4) move 34 B per logit, priced as two passes (32 B):
    twice the bytes at the elementwise rate and two launches per pass."""
    op, h100 = _tiny_loss(), get_gpu("h100")
    assert (op.fwd_bytes, op.bwd_input_bytes) == (512 * 10, 512 * 6)
    assert 2 * (op.fwd_bytes + op.bwd_input_bytes) == 512 * 32
    eff = h100.efficiency
    bw = h100.hbm_bandwidth * eff.elementwise_efficiency
    stack = get_stack("llm-foundry")
    assert op_time(op, "fwd", h100, stack=stack) == pytest.approx(2 * 5120 / bw + 2 * eff.launch_overhead)
    assert op_time(op, "bwd_input", h100, stack=stack) == pytest.approx(2 * 3072 / bw + 2 * eff.launch_overhead)
    assert op_kernels(op, "fwd", stack) == 2
    # the catalog's fused loss: one pass
    assert op_time(op, "fwd", h100) == pytest.approx(5120 / bw + eff.launch_overhead)


def test_triton_attention_slows_an_mpt_step(tmp_path):
    """End to end: the stack's Triton attention makes the step longer than the same stack with FlashAttention-2."""
    base = {"model": {"preset": "llama3-8b", "layers": 2}, "cluster": {"preset": "dgx-h100", "nodes": 1},
            "parallel": {"tp": 1, "pp": 1}, "schedule": "1f1b",
            "training": {"micro_batch": 1, "global_batch": 8, "seq_len": 2048}}
    times = {}
    for k in (None, "fa2"):
        opts = {"stack": "llm-foundry", **({} if k is None else {"attention_kernel": k})}
        times[k] = simulate_strategy(parse_strategy({**base, "options": opts}, tmp_path)).training.iteration_time_s
    assert times[None] > times["fa2"]


#: the benchmarking README's NumParams column (scripts/train/benchmarking/README.md, b2a43a1): the model the runs built
README_NUM_PARAMS = {"1B": 1_315_950_592, "7B": 6_658_859_008, "13B": 12_853_954_560, "30B": 29_975_214_080,
                     "70B": 64_862_437_376}


def test_mpt_rows_build_the_readme_model():
    """The pretrain yamls leave MPTConfig's defaults (biases, learned positions, no ALiBi): each MosaicML row's
    model has the README's parameter count exactly (50368 h + 12 L h^2 + 2048 h + 13 L h + 2 h)."""
    from benchmarks.validate import load_rows, model_mapping
    rows = [r for r in load_rows() if r["id"].startswith("MPT-")]
    assert len(rows) == 10
    for r in rows:
        size = r["id"].split("-")[1]
        assert load_model_yaml(model_mapping(r, [])).param_count() == README_NUM_PARAMS[size], r["id"]


def test_mpt_rows_reduce_bf16_gradients():
    """Composer's mixed_precision DEFAULT (PURE in May 2023) leaves FSDP's reduce_dtype at None (bf16 for PURE),
    so the gradients are reduce-scattered in bf16 (torch MixedPrecision: None takes param_dtype): 2 B per
    gradient element, not Megatron's fp32 buffer."""
    from benchmarks.validate import load_rows, strategy_for
    from taskgraph.costing import grad_bytes_per_param
    from taskgraph.plan import resolve
    row = next(r for r in load_rows() if r["id"] == "MPT-7B-h100")
    d, _ = strategy_for(row)
    assert d["options"]["stack"] == "llm-foundry" and d["options"]["fp32_grad_accum"] is False
    d["model"]["layers"] = 1
    assert grad_bytes_per_param(resolve(parse_strategy(d, "."))) == 2


def test_composer_adam_streams_80_bytes_per_parameter():
    """Composer's DecoupledAdamW runs eight unfused fp32 kernels per parameter tensor ([COMPOSER-ADAM]):
    8 + 12 + 8 + 12 + 8 + 8 + 8 + 16 = 80 B per element at hbm_efficiency, where the fused kernel moves 28 at
    optimizer_efficiency; FSDP (zero3_master_copy false) adds no master copy."""
    from taskgraph.overheads import adam_step_s
    assert get_stack("llm-foundry").adam_bytes_per_param == 8 + 12 + 8 + 12 + 8 + 8 + 8 + 16 == 80
    assert get_stack("megatron-te").adam_bytes_per_param == 0
    assert get_stack("torchtitan").adam_bytes_per_param == 0   # optimizer.implementation "fused" by default
    # torch's foreach Adam ([TORCH-ADAM]): lerp 12, mul 8, addcmul 12, sqrt 8, div 8, add 8, addcdiv 16
    assert get_stack("nemo-automodel").adam_bytes_per_param == 12 + 8 + 12 + 8 + 8 + 8 + 16 == 72
    h100 = get_gpu("h100")
    eff = h100.efficiency
    assert adam_step_s(h100, 1e9, master_copy=False, unfused_bytes=80) == \
        pytest.approx(80e9 / (h100.hbm_bandwidth * eff.hbm_efficiency), rel=1e-12)
    opt = getattr(eff, "optimizer_efficiency", None) or eff.hbm_efficiency
    assert adam_step_s(h100, 1e9, master_copy=False) == pytest.approx(28e9 / (h100.hbm_bandwidth * opt), rel=1e-12)


def test_adam_bytes_of_a_stack_file_are_checked(tmp_path):
    import yaml

    from strategies.errors import ConfigError
    from taskgraph.stacks import read_stack_file
    p = tmp_path / "stacks.yaml"
    p.write_text(yaml.safe_dump({"attention_kernels": {"fa2": {}},
                                 "stacks": {"s": {"attention": "fa2", "adam_bytes_per_param": -1}}}))
    with pytest.raises(ConfigError) as e:
        read_stack_file(str(p))
    assert "\n" not in str(e.value)
    assert "stack 's' adam_bytes_per_param = -1 must be an integer number of bytes per parameter in [0, 256]" in \
        str(e.value)
