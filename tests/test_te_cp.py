"""Transformer Engine's ring context parallelism: the kernels AttnFuncWithCP (TE v1.8) runs around its
per-step attention launches (taskgraph/te_cp.py)."""
from __future__ import annotations

import pytest

from simulator.api import simulate_strategy
from simulator.engine.timeline import timeline
from strategies.strategy_file import parse_strategy
from taskgraph import costing
from taskgraph.operators import layer_operators
from taskgraph.plan import resolve
from taskgraph.stacks import get_stack
from taskgraph.te_cp import te_ring_attention, te_ring_bytes
from topologies.gpus import get_gpu

LLAMA = {"model": {"preset": "llama3-8b", "layers": 2}, "cluster": {"preset": "dgx-h100", "nodes": 1},
         "parallel": {"tp": 1, "pp": 1, "cp": 2}, "schedule": "1f1b",
         "training": {"micro_batch": 1, "global_batch": 4, "seq_len": 8192},
         "options": {"cp_comm": "ring"}}


def _core(cp_comm="ring", cp=2):
    return {o.name: o for o in layer_operators(resolve(parse_strategy(LLAMA)).model, ep=1,
                                               dtype_bytes=2, flash_attention=True, layer_index=0, micro_batch=1,
                                               seq_len=8192, tp=1, sp=False, cp=cp, cp_comm=cp_comm)}["attn_core"]


def test_te_ring_bytes_llama3_8b_cp2():
    # 4096 local queries x 32 heads x 128 = Q = O; K + V: 2 x 4096 x 8 x 128; L = 32 x 4096 statistics
    q = out = 4096 * 32 * 128
    kv = 2 * 4096 * 8 * 128
    lse = 32 * 4096
    fwd, bwd = te_ring_bytes(_core(), 2, 8 / 32, 2)
    # forward: cat (2 KV e), one half-K/V copy (KV e), zero (O e), two corrections (2 x 3 O e), statistics 68 L
    assert fwd == 3 * kv * 2 + 7 * out * 2 + 68 * lse == 294_125_568
    # backward: buffer copy 2, half copy 1, cats 1 + 2, dK/dV copy 1 + add 3 (KV e); dQ copy 2 + add 3 (Q e)
    assert bwd == 10 * kv * 2 + 5 * q * 2 + 4 * lse == 336_068_608


def test_te_ring_bytes_grow_with_cp():
    # cp 4: KV e (cp + 1) + O e (3 cp + 1) + L (28 cp + 12); 4 L + KV e (3.5 cp + 3) + Q e (3 cp - 1)
    core = _core(cp=4)
    q = out = 2048 * 32 * 128
    kv = 2 * 2048 * 8 * 128
    lse = 32 * 2048
    assert te_ring_bytes(core, 4, 8 / 32, 2) == (5 * kv * 2 + 13 * out * 2 + 124 * lse,
                                                 4 * lse + 17 * kv * 2 + 11 * q * 2)


def test_te_ring_attention_seconds_and_where_it_applies():
    plan = resolve(parse_strategy(LLAMA))
    h100 = get_gpu("h100")
    bw, launch = h100.hbm_bandwidth * h100.efficiency.hbm_efficiency, h100.efficiency.launch_overhead
    f, b = te_ring_attention(plan, get_stack(None), _core(), 2)
    assert f == pytest.approx(294_125_568 / bw + 9 * launch) and b == pytest.approx(336_068_608 / bw + 9 * launch)
    assert f * 1e6 == pytest.approx(100.9 + 27.0, abs=0.1)          # 294 MB at 2.91 TB/s, 9 launches of 3 us
    assert te_ring_attention(plan, get_stack("megatron-te"), _core(), 2) == (f, b)
    # PyTorch's CP (torchtitan), all-gather CP, Ulysses, no fused kernel, cp 1: nothing
    assert te_ring_attention(plan, get_stack("torchtitan"), _core(), 2) == (0.0, 0.0)
    for options in ({"cp_comm": "allgather"}, {"cp_comm": "a2a"}, {"cp_comm": "ring", "flash_attention": False}):
        other = resolve(parse_strategy({**LLAMA, "options": options}))
        assert te_ring_attention(other, None, _core(), 2) == (0.0, 0.0), options
    one = resolve(parse_strategy({**LLAMA, "parallel": {"tp": 1, "pp": 1, "cp": 1},
                                  "training": {**LLAMA["training"], "global_batch": 8}, "options": {}}))
    assert te_ring_attention(one, None, _core(cp=1), 2) == (0.0, 0.0)


def test_te_ring_kernels_lengthen_the_attention_tasks(monkeypatch):
    # operator fidelity: layer 0's attention core forward / backward tasks get exactly the kernels' seconds
    # (without the SM share of overlapping collectives, which stretches a task by what runs beside it)
    from taskgraph import stack_costs
    bare = {**LLAMA, "options": {**LLAMA["options"], "overlap_interference": False}}

    def core_times():
        costing.clear_cost_cache()
        sim = simulate_strategy(parse_strategy(bare), fidelity="operator")
        df = timeline(sim.graph, sim.result)
        d = df[(df["op"] == "layer0.attn_core") & (df["mb"] == 0) & (df["rank"] == 0)]
        return {c: float((d[d["category"] == c]["end"] - d[d["category"] == c]["start"]).sum())
                for c in ("forward", "backward")}

    with_kernels = core_times()
    monkeypatch.setattr(stack_costs, "te_ring_attention", lambda plan, stack, op, elem: (0.0, 0.0))
    without = core_times()
    monkeypatch.undo()
    costing.clear_cost_cache()
    f, b = te_ring_attention(resolve(parse_strategy(LLAMA)), None, _core(), 2)
    assert with_kernels["forward"] - without["forward"] == pytest.approx(f, rel=1e-9)
    assert with_kernels["backward"] - without["backward"] == pytest.approx(b, rel=1e-9)
