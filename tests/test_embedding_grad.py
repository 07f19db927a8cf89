"""The embedding's dense weight gradient: PyTorch's zero-filled vocab x hidden gradient and its add into
the main gradient, once per micro-batch (taskgraph/cost.py dense_embedding_grad_bytes)."""
from __future__ import annotations

import pytest

from taskgraph.cost import dense_embedding_grad_bytes, op_time
from taskgraph.lora import frozen
from taskgraph.model import get_model
from taskgraph.operators import embedding_operators
from topologies.gpus import get_gpu


def _embedding(tp=1):
    return embedding_operators(get_model("llama3-8b"), micro_batch=1, seq_len=8192, tp=tp, cp=2)[0]


def test_dense_embedding_gradient_bytes_llama3_8b():
    emb = _embedding()
    assert emb.params == 128256 * 4096
    # zero fill (2 B) + add into the fp32 main gradient (read 2 + 4, write 4): 12 B per parameter
    assert dense_embedding_grad_bytes(emb, 2, 4) == 128256 * 4096 * 12 == 6_304_038_912
    assert dense_embedding_grad_bytes(emb, 2, 0) == 128256 * 4096 * 2       # not accumulated: the zero fill
    assert dense_embedding_grad_bytes(_embedding(tp=4), 2, 4) == 128256 // 4 * 4096 * 12   # the vocab shard


def test_embedding_backward_prices_the_dense_gradient():
    emb, h100 = _embedding(), get_gpu("h100")
    eff = h100.efficiency
    tokens = 2 * 2 * 4096 * 4096 / (h100.hbm_bandwidth * eff.elementwise_efficiency) + eff.launch_overhead
    bw = h100.hbm_bandwidth * eff.hbm_efficiency
    t = op_time(emb, "bwd_weight", h100, "fp8", grad_accum_bytes=4)
    assert t == pytest.approx(tokens + 6_304_038_912 / bw + 2 * eff.launch_overhead, rel=1e-12)
    assert t * 1e3 == pytest.approx(2.20, abs=0.005)        # 6.3 GB at 2.91 TB/s, per micro-batch
    assert op_time(emb, "bwd_weight", h100, "bf16") == pytest.approx(
        tokens + 128256 * 4096 * 2 / bw + eff.launch_overhead, rel=1e-12)
    assert op_time(emb, "fwd", h100, "bf16") < 1e-4             # the lookup itself is unchanged


def test_frozen_embedding_has_no_gradient():
    emb = frozen(_embedding())
    assert dense_embedding_grad_bytes(emb, 2, 4) == 0.0
    assert op_time(emb, "bwd_weight", get_gpu("h100"), "bf16", grad_accum_bytes=4) == 0.0
