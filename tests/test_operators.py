"""Operator graph: FLOPs vs 6N + attention, sharding, Korthikanti 2022 Table 2, MoE, comms."""
import dataclasses

import networkx as nx
import pytest

from strategies.errors import ConfigError
from taskgraph.model import ModelSpec, get_model
from taskgraph.operators import (
    activation_bytes_per_layer,
    embedding_operators,
    head_operators,
    layer_operators,
    model_flops_per_token,
    model_operators,
    operator_graph,
)


def by_name(ops):
    return {o.name: o for o in ops}


def step_flops(model, s, **kw):
    """fwd + bwd FLOPs per token of the whole model, one sequence, one GPU."""
    layer = sum(o.total_flops for o in layer_operators(model, micro_batch=1, seq_len=s, **kw))
    head = sum(o.total_flops for o in head_operators(model, micro_batch=1, seq_len=s))
    emb = sum(o.total_flops for o in embedding_operators(model, micro_batch=1, seq_len=s))
    return (model.layers * layer + head + emb) / s


# ---------------------------------------------------------------- FLOPs
def test_gpt3_training_flops_equal_6n_plus_attention():
    m, s = get_model("gpt3-175b"), 2048
    ops_total = step_flops(m, s, flash_attention=False, causal_halved=False)
    six_n = 6 * m.param_count() + 12 * m.layers * m.hidden * s  # Kaplan / Narayanan 2021
    assert abs(ops_total / six_n - 1) < 0.01
    assert abs(ops_total / model_flops_per_token(m, s) - 1) < 0.01


def test_megatron_convention_is_narayanan_eq3():
    m, s = get_model("gpt3-175b"), 2048
    l, h, V = m.layers, m.hidden, m.vocab
    # Narayanan 2021 eq. 3 without recomputation (72 instead of 96), per token
    assert model_flops_per_token(m, s) == pytest.approx(72 * l * h * h * (1 + s / (6 * h) + V / (12 * l * h)))
    assert model_flops_per_token(m, s, "palm") == pytest.approx(6 * m.param_count() + 12 * l * h * s)
    assert model_flops_per_token(m, s, "kaplan") == pytest.approx(6 * 12 * l * h * h + 6 * l * s * h)
    with pytest.raises(ConfigError, match="did you mean 'palm'"):
        model_flops_per_token(m, s, "plam")


def test_llama_flops_match_megatron_convention():
    m, s = get_model("llama3-8b"), 8192
    assert step_flops(m, s, flash_attention=False, causal_halved=False) == pytest.approx(
        model_flops_per_token(m, s), rel=0.01)


def test_flash_causal_executed_flops():
    m, s = get_model("llama3-8b"), 4096
    full = by_name(layer_operators(m, micro_batch=2, seq_len=s, flash_attention=False))["attn_core"]
    flash = by_name(layer_operators(m, micro_batch=2, seq_len=s))["attn_core"]
    # unfused kernel computes all s^2 pairs; causal flash only s(s+1)/2
    assert full.fwd_flops == 4 * 2 * m.heads * m.head_dim * s * s
    assert flash.fwd_flops == pytest.approx(full.fwd_flops * (s + 1) / (2 * s))
    assert full.bwd_input_flops == 2 * full.fwd_flops and full.bwd_weight_flops == 0
    assert flash.bwd_input_flops == 2.5 * flash.fwd_flops  # Dao 2022: backward recomputes QK^T


def test_unfused_attention_moves_megatron_kernel_bytes():
    # Megatron-LM's unfused causal core (QK^T, causal fused softmax, dropout, PV), one layer of
    # Korthikanti's 22B at tp 8, b 4, s 2048: per score element 12 B forward, 17 B backward
    # (taskgraph/attention_shape.unfused_score_bytes); Q, K, V and the output read/written besides.
    h, a, t, b, s = 6144, 64, 8, 4, 2048
    m = ModelSpec("k22", layers=1, hidden=h, heads=a, kv_heads=a, ffn=4 * h, vocab=51200, dropout=True)
    core = by_name(layer_operators(m, micro_batch=b, seq_len=s, tp=t, flash_attention=False))["attn_core"]
    scores, qkvo = b * (a // t) * s * s, 2 * b * s * h // t   # elements; bytes of one of Q, K, V, O
    assert core.fwd_bytes == 12 * scores + 4 * qkvo
    assert core.bwd_input_bytes == 17 * scores + 2 * 4 * qkvo
    nodrop = by_name(layer_operators(dataclasses.replace(m, dropout=False), micro_batch=b, seq_len=s, tp=t,
                                     flash_attention=False))["attn_core"]
    assert (nodrop.fwd_bytes, nodrop.bwd_input_bytes) == (7 * scores + 4 * qkvo, 12 * scores + 2 * 4 * qkvo)


def test_unfused_alibi_copies_the_bias_into_the_scores():
    # Megatron-DeepSpeed's (and HF Bloom's) ALiBi: torch.baddbmm(alibi, q, k^T, beta=1) copies the
    # broadcast bias into the [b np, s, s] scores and the GEMM reads them back: 2 x 2 B more per score
    # forward (taskgraph/attention_shape.unfused_score_bytes); backward and FlashAttention unchanged.
    h, a, t, b, s = 14336, 112, 4, 2, 2048
    m = ModelSpec("bloom", layers=1, hidden=h, heads=a, kv_heads=a, ffn=4 * h, vocab=250880, dropout=True)
    kw = dict(micro_batch=b, seq_len=s, tp=t, flash_attention=False)
    learned = by_name(layer_operators(m, **kw))["attn_core"]
    alibi = by_name(layer_operators(dataclasses.replace(m, position="alibi"), **kw))["attn_core"]
    scores = b * (a // t) * s * s
    assert alibi.fwd_bytes - learned.fwd_bytes == 4 * scores == 939_524_096
    assert alibi.bwd_input_bytes == learned.bwd_input_bytes
    flash = dict(kw, flash_attention=True)
    assert by_name(layer_operators(dataclasses.replace(m, position="alibi"), **flash))["attn_core"].fwd_bytes == \
        by_name(layer_operators(m, **flash))["attn_core"].fwd_bytes


def test_gemm_backward_split():
    for o in layer_operators(get_model("gpt3-175b"), micro_batch=1, seq_len=2048):
        if o.kind == "gemm":
            assert o.bwd_input_flops == o.bwd_weight_flops == o.fwd_flops == sum(g.flops for g in o.gemms)


# ---------------------------------------------------------------- sharding
@pytest.mark.parametrize("sp", [False, True])
def test_tp8_divides_gemm_flops_and_keeps_totals(sp):
    m = get_model("llama3-70b")
    kw = dict(micro_batch=1, seq_len=4096)
    one = by_name(layer_operators(m, **kw))
    eight = by_name(layer_operators(m, **kw, tp=8, sp=sp))
    for name in ("qkv", "attn_core", "attn_out", "mlp_gate_up", "mlp_down"):
        assert eight[name].fwd_flops * 8 == pytest.approx(one[name].fwd_flops)
        assert eight[name].bwd_flops * 8 == pytest.approx(one[name].bwd_flops)
    assert eight["qkv"].gemms[0].n * 8 == one["qkv"].gemms[0].n
    assert sum(o.params for o in eight.values() if o.kind == "gemm") * 8 == \
        sum(o.params for o in one.values() if o.kind == "gemm")  # no biases in Llama
    head1 = by_name(head_operators(m, **kw))["lm_head"]
    head8 = by_name(head_operators(m, **kw, tp=8, sp=sp))["lm_head"]
    assert head8.fwd_flops * 8 == head1.fwd_flops and head8.params * 8 == head1.params


def test_operator_params_sum_to_model_params():
    for name in ("gpt3-175b", "llama3-8b", "mixtral-8x7b", "bloom-176b"):
        m = get_model(name)
        ops = model_operators(m, micro_batch=1, seq_len=1024)
        assert sum(o.params for o in ops) == m.param_count()


def test_context_parallel_splits_sequence():
    m, s = get_model("llama3-8b"), 8192
    one = by_name(layer_operators(m, micro_batch=1, seq_len=s))
    four = by_name(layer_operators(m, micro_batch=1, seq_len=s, cp=4))
    assert four["attn_core"].fwd_flops * 4 == pytest.approx(one["attn_core"].fwd_flops)
    assert four["mlp_down"].fwd_flops * 4 == one["mlp_down"].fwd_flops
    kv = 2 * s * 2 * m.kv_heads * m.head_dim  # bf16 K and V of the whole sequence
    cp = four["attn_core"].comm("cp")
    assert [(c.op, c.phase) for c in cp] == [("all-gather", "fwd"), ("all-gather", "bwd"),
                                             ("reduce-scatter", "bwd")]
    assert all(c.bytes == kv for c in cp)
    assert not one["attn_core"].comms


# ---------------------------------------------------------------- Megatron TP collectives
def test_tp_collectives_without_and_with_sp():
    m = get_model("gpt3-175b")
    b, s, h = 2, 2048, m.hidden
    msg = 2 * b * s * h
    ops = by_name(layer_operators(m, micro_batch=b, seq_len=s, tp=8))
    sig = lambda o: [(c.op, c.phase, c.where, c.bytes) for c in o.tp_comm]
    assert sig(ops["qkv"]) == [("all-reduce", "bwd", "after", msg)]
    assert sig(ops["mlp_up"]) == [("all-reduce", "bwd", "after", msg)]
    assert sig(ops["attn_out"]) == [("all-reduce", "fwd", "after", msg)]
    assert sig(ops["mlp_down"]) == [("all-reduce", "fwd", "after", msg)]
    assert not ops["attn_core"].comms and not ops["input_norm"].comms
    sp = by_name(layer_operators(m, micro_batch=b, seq_len=s, tp=8, sp=True))
    assert sig(sp["qkv"]) == [("all-gather", "fwd", "before", msg), ("all-gather", "bwd", "before", msg),
                              ("reduce-scatter", "bwd", "after", msg)]
    assert sig(sp["mlp_down"]) == [("reduce-scatter", "fwd", "after", msg),
                                   ("all-gather", "bwd", "before", msg)]
    assert sp["input_norm"].fwd_bytes * 8 == ops["input_norm"].fwd_bytes
    assert not layer_operators(m, micro_batch=b, seq_len=s)[1].comms


# ---------------------------------------------------------------- Korthikanti 2022 Table 2
K22 = get_model("k22-22b")  # a=64, h=6144, GELU 4h, dropout: Korthikanti's setting


@pytest.mark.parametrize("b,s,t", [(1, 2048, 1), (4, 2048, 8), (2, 1024, 4), (1, 2048, 2)])
def test_korthikanti_table2_exact(b, s, t):
    a, h = K22.heads, K22.hidden
    sbh = s * b * h
    act = lambda **kw: activation_bytes_per_layer(K22, b, s, tp=t, flash_attention=False, **kw)
    if t == 1:
        assert act() == 34 * sbh + 5 * a * s * s * b
    assert act() == 10 * sbh + 24 * sbh // t + 5 * a * s * s * b // t          # TP
    assert act(sp=True) == 34 * sbh // t + 5 * a * s * s * b // t               # TP + SP
    assert act(recompute="selective") == 10 * sbh + 24 * sbh // t               # TP + selective
    assert act(sp=True, recompute="selective") == 34 * sbh // t                 # TP + SP + selective
    assert act(recompute="full") == 2 * sbh                                     # full recompute


def test_flash_replaces_score_term_with_lse():
    b, s, t = 2, 2048, 4
    a, h = K22.heads, K22.hidden
    lse = 4 * b * (a // t) * s  # fp32 log-sum-exp per query and head
    assert activation_bytes_per_layer(K22, b, s, tp=t, sp=True) == 34 * s * b * h // t + lse
    assert activation_bytes_per_layer(K22, b, s, tp=t, sp=True, recompute="selective") == 34 * s * b * h // t


def test_head_activation_korthikanti_section_4_3():
    m, b, s, t = get_model("k22-175b"), 1, 2048, 8
    saved = sum(o.saved_activation_bytes for o in head_operators(m, micro_batch=b, seq_len=s, tp=t, sp=True))
    assert saved == 4 * s * b * m.hidden // t + 4 * s * b * m.vocab // t  # 4sbh/t (1 + v/h)


def test_recompute_name_checked():
    with pytest.raises(ConfigError, match="did you mean 'selective'"):
        activation_bytes_per_layer(K22, 1, 2048, recompute="selectiv")


# ---------------------------------------------------------------- MoE
def test_mixtral_expert_flops_ep_and_all_to_all():
    m, b, s = get_model("mixtral-8x7b"), 1, 4096
    T, h, f = b * s, m.hidden, m.expert_ffn
    one = by_name(layer_operators(m, micro_batch=b, seq_len=s))
    assert "moe_router" in one and "mlp_down" not in one
    ex = one["moe_experts"]
    gemm = 2 * T * m.top_k * 3 * h * f  # top_k x SwiGLU expert FFN per token
    assert ex.bwd_weight_flops == gemm and ex.fwd_flops == pytest.approx(gemm, rel=1e-3)
    assert one["moe_router"].fwd_flops == 2 * T * h * m.experts
    assert ex.params == 8 * 3 * h * f
    ep4 = by_name(layer_operators(m, micro_batch=b, seq_len=s, ep=4))["moe_experts"]
    assert ep4.params * 4 == ex.params and ep4.fwd_flops == ex.fwd_flops  # balanced routing
    assert ep4.gemms[0].batch == 2
    a2a = [c for c in ep4.comms if c.group == "ep"]
    assert len(a2a) == 4 and all(c.bytes == 2 * T * m.top_k * h for c in a2a)  # dispatch + combine
    tp = by_name(layer_operators(m, micro_batch=b, seq_len=s, tp=2, sp=True, ep=4))["moe_experts"]
    assert tp.fwd_flops * 2 == pytest.approx(ep4.fwd_flops) and tp.params * 2 == ep4.params
    assert [c.bytes for c in tp.comms if c.group == "ep"] == [2 * T // 2 * m.top_k * h] * 4


def test_shared_experts_and_moe_layers():
    m = ModelSpec(name="moe", layers=4, hidden=256, heads=8, vocab=1000, mlp="swiglu", bias=False,
                  experts=16, top_k=4, expert_ffn=128, shared_experts=2, moe_layers=2)
    ops0 = by_name(layer_operators(m, micro_batch=1, seq_len=512, layer_index=0))
    ops1 = by_name(layer_operators(m, micro_batch=1, seq_len=512, layer_index=1))
    assert "moe_shared_experts" in ops0 and "mlp_gate_up" in ops1
    assert ops0["moe_shared_experts"].bwd_weight_flops == 2 * 512 * 256 * 2 * 128 * 3
    assert sum(o.params for o in model_operators(m, micro_batch=1, seq_len=512)) == m.param_count()
    g = operator_graph(m, micro_batch=1, seq_len=512)
    assert nx.is_directed_acyclic_graph(g)
    assert set(g.predecessors("mlp_residual")) == {"moe_experts", "moe_shared_experts", "attn_residual"}


# ---------------------------------------------------------------- graph and validation
def test_operator_graph_dense_swiglu():
    g = operator_graph(get_model("llama3-8b"), micro_batch=1, seq_len=1024, include_embedding=True,
                       include_head=True)
    order = list(nx.topological_sort(g))
    assert order[0] == "embedding" and order[-1] == "loss"
    assert ["mlp_gate_up", "mlp_act", "mlp_down"] == [n for n in order if n.startswith("mlp_") and
                                                       n != "mlp_residual"]
    assert g.nodes["qkv"]["op"].kind == "gemm"


def test_parallel_validation_messages():
    m = get_model("gpt3-175b")
    with pytest.raises(ConfigError, match=r"model.heads=96 is not divisible by parallel.tp=7; choose tp in"):
        layer_operators(m, micro_batch=1, seq_len=2048, tp=7)
    with pytest.raises(ConfigError, match="kv_heads=8 is not divisible by parallel.tp=16"):
        layer_operators(get_model("llama3-70b"), micro_batch=1, seq_len=2048, tp=16)
    with pytest.raises(ConfigError, match="sequence parallelism"):
        layer_operators(m, micro_batch=1, seq_len=2044, tp=8, sp=True)
    with pytest.raises(ConfigError, match="no experts"):
        layer_operators(m, micro_batch=1, seq_len=2048, ep=2)
    with pytest.raises(ConfigError, match="sp: true"):
        layer_operators(get_model("mixtral-8x7b"), micro_batch=1, seq_len=2048, tp=2)
    with pytest.raises(ConfigError, match="max_seq"):
        embedding_operators(m, micro_batch=1, seq_len=4096)
