"""RoPE's fused kernels on Q and K, priced as the QKV projection's separate kernels (taskgraph/rope.py)."""
from __future__ import annotations

import dataclasses

import pytest

from taskgraph.cost import op_time
from taskgraph.model import get_model
from taskgraph.operators import layer_operators
from taskgraph.rope import rope_bytes
from topologies.gpus import get_gpu


def _ops(model, layer=0, cp=2, tp=1):
    return {o.name: o for o in layer_operators(model, ep=1, dtype_bytes=2, flash_attention=True, layer_index=layer,
                                               micro_batch=1, seq_len=8192, tp=tp, sp=tp > 1, cp=cp)}


def test_rope_bytes_llama3_8b():
    # 4096 local tokens x (32 query + 8 key heads) x 128, read and written in bf16, + the fp32 angle table
    # of 4096 positions x 128 read by each of the two calls
    assert rope_bytes(4096, 32, 8, 128, 4096, 2) == 4 * 4096 * 40 * 128 + 2 * 4096 * 128 * 4 == 88_080_384
    qkv = _ops(get_model("llama3-8b"))["qkv"]
    assert (qkv.copy_bytes, qkv.copy_kernels) == (88_080_384, 2)
    qkv4 = _ops(get_model("llama3-8b"), tp=4)["qkv"]     # heads over tp: 8 query + 2 key heads per rank
    assert qkv4.copy_bytes == rope_bytes(4096, 8, 2, 128, 4096, 2)


def test_no_rope_without_rotary_positions():
    assert _ops(get_model("gpt3-175b"), cp=1)["qkv"].copy_bytes == 0      # learned positions
    assert _ops(get_model("bloom-176b"), cp=1)["qkv"].copy_bytes == 0     # ALiBi
    # Llama 4 style chunked attention: the global (NoPE) layers have none, the chunked (RoPE) ones do
    chunked = dataclasses.replace(get_model("llama3-8b"), attention_chunk=2048, global_attention_every=4)
    assert _ops(chunked, layer=3)["qkv"].copy_bytes == 0 and _ops(chunked, layer=0)["qkv"].copy_bytes > 0


def test_rope_lengthens_the_qkv_forward_and_input_gradient():
    qkv, h100 = _ops(get_model("llama3-8b"))["qkv"], get_gpu("h100")
    bare = dataclasses.replace(qkv, copy_bytes=0, copy_kernels=0)
    eff = h100.efficiency
    extra = 88_080_384 / (h100.hbm_bandwidth * eff.hbm_efficiency) + 2 * eff.launch_overhead
    for p in ("fwd", "bwd_input"):
        assert op_time(qkv, p, h100, "bf16") - op_time(bare, p, h100, "bf16") == pytest.approx(extra, rel=1e-9)
    assert op_time(qkv, "bwd_weight", h100, "bf16") == op_time(bare, "bwd_weight", h100, "bf16")
    assert extra * 1e6 == pytest.approx(36.2, abs=0.1)    # 88 MB at 2.91 TB/s, two launches of 3 us
