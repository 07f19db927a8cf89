"""FlashAttention-2 on Blackwell (kernels.yaml [CUDNN-FA2]): the GB200 fa2 rows re-derived from the
transcribed cudnn-frontend figures (benchmarks/kernel_data/cudnn-frontend/sdpa_fa2_blackwell.csv), their
FLOP convention, the B200 cross-check, and the unmasked figure a causal-only GPU takes."""
from __future__ import annotations

import csv
from pathlib import Path

import pytest

from strategies.documents import load_document
from topologies.kernels import KERNELS_PATH, attention_fraction

DATA = Path(__file__).resolve().parent.parent / "benchmarks" / "kernel_data" / "cudnn-frontend"
PEAK = {"GB200": 2500.0, "B200": 2250.0, "H100": 989.4}   # dense bf16 TFLOP/s, gpus.yaml
SEQ = (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)


def _fa2(gpu: str) -> dict:
    with open(DATA / "sdpa_fa2_blackwell.csv", newline="") as f:
        return {int(r["seqlen"]): r for r in csv.DictReader(f) if r["gpu"] == gpu}


def test_fa2_figures_follow_the_tables_flop_convention():
    """forward 4 b s^2 h d / 2 (causal), backward 2.5 x: the printed TFLOP/s within the rounding of the
    printed milliseconds."""
    for gpu in ("GB200", "B200"):
        for s, r in _fa2(gpu).items():
            assert r["is_causal"] == "True" and r["backend"] == "pyt_flash_attention"
            fwd = 4 * int(r["batch_size"]) * s * s * int(r["num_q_heads"]) * int(r["head_dim"]) / 2
            assert fwd / (float(r["fwd_ms"]) * 1e-3) / 1e12 == pytest.approx(float(r["fwd_tflops"]), rel=0.02)
            assert 2.5 * fwd / (float(r["bwd_ms"]) * 1e-3) / 1e12 == pytest.approx(float(r["bwd_tflops"]), rel=0.02)


def test_kernel_table_gb200_fa2_rows_are_the_transcribed_figures():
    rows = [r for r in load_document(KERNELS_PATH, "kernel table")["attention"]["curves"]
            if r["gpu"] == "GB200-186GB" and r["kernel"] == "fa2"]
    fig = _fa2("GB200")
    assert sorted(r["pass"] for r in rows) == ["bwd", "fwd"]
    for r in rows:
        assert (r["head_dim"], r["causal"]) == (128, True)
        assert r["tflops"] == [float(fig[s][f"{r['pass']}_tflops"]) for s in SEQ]
    # what the model reads: a fraction of GB200's 2.5 PFLOP/s, e.g. 387 / 2,500 = 15.5 % at 4k
    assert attention_fraction("fa2", "blackwell", "fwd", 128, 4096, causal=True) == pytest.approx(387 / 2500)
    assert attention_fraction("fa2", "blackwell", "bwd", 128, 32768, causal=True) == pytest.approx(360 / 2500)


def test_b200_figures_agree_with_gb200_from_4k():
    """The older B200 run (torch 2.9) reaches GB200's share of its own peak within 10 % from 4k on (4k
    forward 324.9 / 2,250 = 14.4 % vs 387 / 2,500 = 15.5 %, backward 11.4 % vs 12.4 %); below 4k its
    launches cost more (2k forward 10.8 % vs 13.4 %)."""
    gb, b = _fa2("GB200"), _fa2("B200")
    for s in SEQ[3:]:
        for p in ("fwd", "bwd"):
            share_b = float(b[s][f"{p}_tflops"]) / PEAK["B200"]
            share_gb = float(gb[s][f"{p}_tflops"]) / PEAK["GB200"]
            assert share_b == pytest.approx(share_gb, rel=0.10)


def test_causal_only_gpu_takes_h100s_unmasked_ratio():
    # GB200 fa2 at 4k: causal 387 (fwd) / 311 (bwd); H100 fa2 head dim 128 at 4k: unmasked 368, causal 319
    # forward ([FA3-F5] (c), (d)); the backward's causal row is itself the unmasked 310 x 319 / 368, so
    # its unmasked / causal ratio is the forward's
    assert attention_fraction("fa2", "blackwell", "fwd", 128, 4096, causal=False) == \
        pytest.approx(387 / 2500 * 368 / 319)
    assert attention_fraction("fa2", "blackwell", "bwd", 128, 4096, causal=False) == \
        pytest.approx(311 / 2500 * 368 / 319)
    # a GPU with both rows keeps its own: Hopper's unmasked forward at 4k is 368
    assert attention_fraction("fa2", "hopper", "fwd", 128, 4096, causal=False) == pytest.approx(368 / PEAK["H100"])


# ---- which kernel PyTorch's SDPA runs for the torchtitan stacks (stacks.yaml [SDPA], sdpa_attention)

def _attn_core(seq: int):
    from taskgraph.model import get_model
    from taskgraph.operators import layer_operators
    ops = layer_operators(get_model("llama3-8b"), ep=1, dtype_bytes=2, flash_attention=True, layer_index=0,
                          micro_batch=1, seq_len=seq, tp=1, sp=False, cp=1)
    return {o.name: o for o in ops}["attn_core"]


def test_sdpa_backend_by_architecture():
    """torchtitan calls SDPA under sdpa_kernel([CUDNN_ATTENTION, FLASH_ATTENTION, MATH], set_priority=True)
    and PyTorch's cuDNN backend accepts sm80..sm121: cuDNN on every listed architecture; the flash-attn 2
    stack keeps FlashAttention-2, llm-foundry its Triton kernel; the catalog names no kernel; an unlisted
    architecture none."""
    from taskgraph.stacks import attention_kernel, get_stack, with_attention
    for name in ("torchtitan", "torchtitan-compile"):
        assert get_stack(name).attention == "flex"     # torchtitan's default since 1695457 ([SDPA])
        stack = with_attention(get_stack(name), "sdpa")   # options.attention_kernel: sdpa
        assert [attention_kernel(stack, a) for a in ("ampere", "hopper", "blackwell")] == ["cudnn"] * 3
        assert attention_kernel(stack, "cpu") is None
    assert attention_kernel(get_stack("deepspeed"), "blackwell") == "fa2"
    assert attention_kernel(get_stack("llm-foundry"), "hopper") == "triton"   # attn_impl: triton ([FA-TRITON])
    assert attention_kernel(get_stack("megatron-te"), "hopper") is None


def test_torchtitan_b200_attention_takes_blackwells_cudnn_figure():
    """Llama 3 8B at 8k tokens (head dim 128, causal) on a B200: torchtitan's cuDNN at GB200's [CUDNN-SDPA]
    share, 1,598 / 2,500 forward and 1,311 / 2,500 backward; FlashAttention-2 (the deepspeed stack) at
    [CUDNN-FA2]'s 414 / 2,500 and 338 / 2,500 -- before, both priced at Hopper's FA2 share (333 / 989.4)."""
    from taskgraph.cost import op_time
    from taskgraph.stacks import attention_efficiency, get_stack, with_attention
    from topologies.gpus import get_gpu
    b200, op = get_gpu("b200"), _attn_core(8192)
    assert (op.attn_shape.head_dim, op.attn_shape.seq, op.attn_shape.causal_share) == (128, 8192, 1.0)
    tt, ds = with_attention(get_stack("torchtitan"), "sdpa"), get_stack("deepspeed")
    assert attention_efficiency(tt, b200, "fwd", op.attn_shape) == pytest.approx(1598 / 2500)
    assert attention_efficiency(tt, b200, "bwd_input", op.attn_shape) == pytest.approx(1311 / 2500)
    assert attention_efficiency(ds, b200, "fwd", op.attn_shape) == pytest.approx(414 / 2500)
    assert attention_efficiency(ds, b200, "bwd_input", op.attn_shape) == pytest.approx(338 / 2500)
    # the op: 4 x 8192^2 x 32 heads x 128 / 2 = 1.759e13 FLOP forward at 2.25 PFLOP/s x 0.6392 = 12.23 ms
    assert op.fwd_flops == pytest.approx(4 * 8192 * 8193 / 2 * 32 * 128, rel=1e-3)
    eff = b200.efficiency
    mem = op.fwd_bytes / (b200.hbm_bandwidth * eff.hbm_efficiency)
    t = op.fwd_flops / (2.25e15 * 1598 / 2500)
    assert t > mem
    assert op_time(op, "fwd", b200, stack=tt) == pytest.approx(t + eff.launch_overhead)


@pytest.mark.parametrize("doc, message", [
    ({"stacks": {"x": {"attention": "sdpa"}}}, r"stack 'x' attention = 'sdpa' needs a sdpa_attention.kernel table"),
    ({"sdpa_attention": {"kernel": {"hopper": "fa4"}}},
     r"sdpa_attention.kernel.hopper = 'fa4' is not a kernel of attention_kernels \(cudnn, fa2\)"),
    ({"sdpa_attention": {"kernels": {"hopper": "fa2"}}}, r"sdpa_attention must be a mapping with one key, kernel"),
    ({"stacks": {"x": {"attention": "flash"}}}, r"attention = 'flash' must be 'catalog', 'sdpa' or a kernel"),
])
def test_sdpa_table_is_checked(tmp_path, doc, message):
    import yaml

    from strategies.errors import ConfigError
    from taskgraph.stacks import read_stack_file
    p = tmp_path / "stacks.yaml"
    p.write_text(yaml.safe_dump({"attention_kernels": {"fa2": {}, "cudnn": {"fallback": "fa2"}}, **doc}))
    with pytest.raises(ConfigError, match=message):
        read_stack_file(str(p))
