"""MoE token permutations as separate copy kernels (issue 38 item 5): Megatron-core's all-to-all
dispatcher permutes and unpermutes every routed copy and, with several local experts behind an
all-to-all, sorts the received chunks by expert and back (sort_chunks_by_idxs); DeepEP's dispatcher
(options.moe_max_nodes) skips the sort. Closed forms on one layer's experts operator."""
from __future__ import annotations

from dataclasses import replace

import pytest

from strategies.strategy_file import parse_strategy
from taskgraph.cost import op_time
from taskgraph.operators import layer_operators
from taskgraph.overheads import op_kernels
from taskgraph.plan import resolve
from taskgraph.stack_costs import op_as_run
from topologies.gpus import get_gpu

MOE = {"preset": "mixtral-8x7b", "layers": 2, "hidden": 1024, "heads": 8, "kv_heads": 4, "ffn": 2048,
       "vocab": 8192, "experts": 8, "top_k": 2, "expert_ffn": 1024}


def _experts(ep: int):
    from taskgraph.model import load_model_yaml
    m = load_model_yaml(MOE)
    ops = layer_operators(m, micro_batch=1, seq_len=1024, tp=1, sp=False, cp=1, ep=ep, dtype_bytes=2,
                          flash_attention=True, layer_index=0)
    return {o.name: o for o in ops}["moe_experts"]


def test_permutation_bytes_and_kernels():
    # 1,024 tokens x top-2 = 2,048 routed copies of 1,024 bf16 features; permute + unpermute read and
    # write each (4 x 2 B), the chunk sort and its inverse twice more when 4 experts sit behind an all-to-all
    copies = 1024 * 2
    sorted_ = _experts(ep=2)
    assert (sorted_.copy_bytes, sorted_.copy_kernels) == (8 * 2 * copies * 1024, 4)
    one_rank = _experts(ep=1)           # no all-to-all: the permutation already groups by expert
    assert (one_rank.copy_bytes, one_rank.copy_kernels) == (4 * 2 * copies * 1024, 2)


def test_copies_are_priced_after_the_gemms():
    h100 = get_gpu("h100")
    eff = h100.efficiency
    op = _experts(ep=2)
    bare = replace(op, copy_bytes=0, copy_kernels=0)
    for p in ("fwd", "bwd_input"):
        assert op_time(op, p, h100) - op_time(bare, p, h100) == pytest.approx(
            op.copy_bytes / (h100.hbm_bandwidth * eff.hbm_efficiency) + 4 * eff.launch_overhead)
        assert op_kernels(op, p) == 2 + 4
    assert op_time(op, "bwd_weight", h100) == op_time(bare, "bwd_weight", h100)
    assert op_kernels(op, "bwd_weight") == 2


def test_deepep_skips_the_chunk_sort(tmp_path):
    base = {"model": MOE, "cluster": {"preset": "dgx-h100", "nodes": 2}, "parallel": {"tp": 1, "pp": 1, "ep": 2},
            "schedule": "1f1b", "training": {"micro_batch": 1, "global_batch": 16, "seq_len": 1024}}
    op = _experts(ep=2)
    plan = resolve(parse_strategy({**base, "options": {"moe_max_nodes": 1}}, tmp_path))
    deepep, f, b = op_as_run(plan, None, op)
    assert (deepep.copy_bytes, deepep.copy_kernels, f, b) == (op.copy_bytes // 2, 2, 0.0, 0.0)
    plain = resolve(parse_strategy({**base, "options": {}}, tmp_path))
    assert op_as_run(plain, None, op) == (op, 0.0, 0.0)
