"""2025 model families: Hugging Face config.json loading, MLA, sliding windows, QK-norm, MTP."""
import json
from pathlib import Path

import pytest

from strategies.errors import ConfigError
from taskgraph.hf_config import load_hf_config
from taskgraph.model import PRESETS, PUBLISHED_ACTIVE_PARAMS, PUBLISHED_PARAMS, ModelSpec, get_model
from taskgraph.operators import attention_pairs, head_operators, layer_operators, model_flops_per_token, model_operators

HF = json.loads((Path(__file__).parent / "data" / "hf_configs.json").read_text())

# config.json of a released checkpoint -> the preset it must reproduce exactly
HF_TO_PRESET = {
    "deepseek-ai/DeepSeek-V3": "deepseek-v3", "google/gemma-2-9b": "gemma2-9b",
    "google/gemma-3-1b-pt": "gemma3-1b", "Qwen/Qwen3-8B": "qwen3-8b", "Qwen/Qwen3-30B-A3B": "qwen3-30b-a3b",
    "microsoft/Phi-3-mini-4k-instruct": "phi3-mini",
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMS))
def test_published_totals_within_1_percent(name):
    assert abs(PRESETS[name].param_count() / PUBLISHED_PARAMS[name] - 1) < 0.01


@pytest.mark.parametrize("name", sorted(PUBLISHED_ACTIVE_PARAMS))
def test_published_active_params(name):
    # Published active counts have two significant digits ("37B", "3.3B"): their rounding alone is up
    # to 1.5%, and vendors differ on counting the input embedding. DeepSeek-V3 is 37.55B here with
    # the embedding (+1.5% of "37B"), 36.6B without it.
    assert abs(PRESETS[name].active_param_count() / PUBLISHED_ACTIVE_PARAMS[name] - 1) < 0.02


@pytest.mark.parametrize("repo", sorted(HF_TO_PRESET))
def test_hf_config_reproduces_preset(repo):
    unused = []
    m = load_hf_config(HF[repo], unused=unused)
    p = get_model(HF_TO_PRESET[repo])
    assert m.param_count() == p.param_count()
    assert m.active_param_count() == p.active_param_count()
    assert m.mtp_params() == p.mtp_params()
    assert unused == []  # every key is either read or known not to matter


def test_deepseek_v3_exact_structure():
    m = load_hf_config(HF["deepseek-ai/DeepSeek-V3"])
    assert m.attention == "mla" and m.head_dim == 192 and m.v_head_dim == 128
    assert m.moe_layer_indices() == tuple(range(3, 61)) and m.router_bias
    # hand count per layer (DeepSeek-V3 inference/model.py shapes)
    attn = 7168 * 1536 + 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 + 512 * 128 * 256 + 128 * 128 * 7168
    assert m.qkv_params() + m.attn_out_params() == attn == 187_107_328
    assert m.layer_params(0) == attn + 2 * 7168 + 3 * 7168 * 18432
    assert m.layer_params(3) == attn + 2 * 7168 + 256 * 7168 + 256 + 257 * 3 * 7168 * 2048
    # MTP: 2 + 1 norms, the 2h x h projection and one MoE layer; DeepSeek's "14B" also counts the
    # checkpoint's duplicated embedding and head (2 x 0.927B)
    assert m.mtp_params() == 3 * 7168 + 2 * 7168 * 7168 + m.layer_params(60)
    assert abs((m.mtp_params() + 2 * 129280 * 7168) / 14e9 - 1) < 0.05


def test_gemma_window_pattern_and_sandwich_norms():
    g2, g3 = get_model("gemma2-9b"), get_model("gemma3-1b")
    assert [g2.is_local_attention_layer(i) for i in range(4)] == [True, False, True, False]
    assert [i for i in range(26) if not g3.is_local_attention_layer(i)] == [5, 11, 17, 23]
    names = [o.name for o in layer_operators(g2, micro_batch=1, seq_len=8192)]
    assert names.count("post_attn_out_norm") == 1 and names.count("post_mlp_norm") == 1
    assert "qk_norm" in [o.name for o in layer_operators(g3, micro_batch=1, seq_len=1024)]
    assert "logit_softcap" in [o.name for o in head_operators(g2, micro_batch=1, seq_len=1024)]


def test_attention_pairs_sliding_window():
    assert attention_pairs(4, True) == 10 and attention_pairs(4, False) == 16
    # window 2 over 4 tokens: query i sees min(i+1, 2) keys -> 1 + 2 + 2 + 2
    assert attention_pairs(4, True, window=2) == 7
    assert attention_pairs(4, True, window=8) == 10      # window longer than the sequence
    g = get_model("gemma2-9b")
    local, glob = (layer_operators(g, micro_batch=1, seq_len=8192, layer_index=i) for i in (0, 1))
    core = {i: next(o for o in ops if o.name == "attn_core") for i, ops in ((0, local), (1, glob))}
    assert core[0].fwd_flops / core[1].fwd_flops == pytest.approx(attention_pairs(8192, True, 4096)
                                                                  / attention_pairs(8192, True))


def test_attention_pairs_chunked():
    # blocks of 4 over 10 tokens: two full blocks (4*5/2 = 10 pairs each) and one of 2 tokens (3)
    assert attention_pairs(10, True, chunk=4) == 2 * 10 + 3
    assert attention_pairs(10, False, chunk=4) == 2 * 16 + 4    # a kernel that computes the masked half
    assert attention_pairs(8, True, chunk=8) == attention_pairs(8, True) == 36   # one block: plain causal
    assert attention_pairs(8, True, chunk=16) == 36


def test_chunked_attention_layers_and_flops():
    """Llama 4 iRoPE: torchtitan's layers 0, 4, 8 ... global (global_attention_start 0), Hugging
    Face's 3, 7, 11 ... (the default); the local layers' attention core scores the block pairs."""
    base = dict(name="c", layers=8, hidden=256, heads=4, vocab=1000)
    tt = ModelSpec(**base, attention_chunk=64, global_attention_every=4, global_attention_start=0)
    hf = ModelSpec(**base, attention_chunk=64, global_attention_every=4)
    assert [i for i in range(8) if not tt.is_local_attention_layer(i)] == [0, 4]
    assert [i for i in range(8) if not hf.is_local_attention_layer(i)] == [3, 7]
    core = {i: next(o for o in layer_operators(tt, micro_batch=1, seq_len=256, layer_index=i) if o.name == "attn_core")
            for i in (0, 1)}
    # 256 tokens in blocks of 64: 4 x 64*65/2 = 8,320 pairs against 256*257/2 = 32,896 for the global layer;
    # fwd = 2 b a (d_qk + d_v) pairs = 2 * 1 * 4 * (64 + 64) * pairs
    assert core[1].fwd_flops == 2 * 4 * 128 * 8320 and core[0].fwd_flops == 2 * 4 * 128 * 32896
    # model FLOPs: a local layer counts its block as its context (12 s a d per layer with min(s, C))
    full = ModelSpec(**base)
    per_layer = 6.0 * 256 * 4 * 128       # 6 x context x a (d + dv) for one layer at seq 256
    assert model_flops_per_token(full, 256) - model_flops_per_token(tt, 256) == pytest.approx(
        6 * (per_layer - 6.0 * 64 * 4 * 128))


def test_operator_params_sum_to_model_params_new_families():
    for name in ("deepseek-v3", "gemma2-9b", "gemma3-1b", "qwen3-30b-a3b", "phi3-mini"):
        m = get_model(name)
        ops = model_operators(m, micro_batch=1, seq_len=1024)
        assert sum(o.params for o in ops if not o.name.startswith("mtp")) == m.param_count(), name
        assert sum(o.params for o in ops if o.name.startswith("mtp")) == m.mtp_params(), name


def test_mla_tensor_parallel_shards_up_projections_only():
    m = get_model("deepseek-v3")
    one = {o.name: o for o in layer_operators(m, micro_batch=1, seq_len=4096, layer_index=0)}
    tp8 = {o.name: o for o in layer_operators(m, micro_batch=1, seq_len=4096, layer_index=0, tp=8, sp=True)}
    for name in ("q_down", "kv_down"):          # replicated on every TP rank
        assert tp8[name].params == one[name].params and tp8[name].fwd_flops == one[name].fwd_flops
    for name in ("q_up", "kv_up", "attn_core", "attn_out"):
        assert tp8[name].fwd_flops * 8 == one[name].fwd_flops
    assert [c.op for c in tp8["kv_down"].comms] == ["all-gather", "all-gather"]
    assert [c.op for c in tp8["kv_up"].comms] == ["all-reduce"]


def test_mla_flops_per_token():
    m = get_model("deepseek-v3")
    s = 4096
    per_layer_attn = 6 * s * 128 * (192 + 128)
    matmul = m.active_param_count() - 129280 * 7168 - 7168 - 61 * (2 * 7168 + 1536 + 512) - 58 * 256  # no norms/bias
    assert model_flops_per_token(m, s) == pytest.approx(6 * matmul + 61 * per_layer_attn, rel=1e-12)


def test_hf_unknown_keys_listed_and_misspellings_rejected():
    cfg = dict(HF["Qwen/Qwen3-8B"], my_custom_flag=3)
    unused = []
    load_hf_config(cfg, unused=unused)
    assert unused == ["my_custom_flag"]
    bad = dict(HF["Qwen/Qwen3-8B"])
    bad["num_hiden_layers"] = bad.pop("num_hidden_layers")
    with pytest.raises(ConfigError, match="num_hidden_layers"):
        load_hf_config(bad)
    typo = dict(HF["deepseek-ai/DeepSeek-V3"], n_shared_expert=2)
    with pytest.raises(ConfigError, match="n_shared_experts"):
        load_hf_config(typo)


def test_hf_strict_booleans_and_windows():
    with pytest.raises(ConfigError, match="tie_word_embeddings"):
        load_hf_config(dict(HF["Qwen/Qwen3-8B"], tie_word_embeddings="false"))
    with pytest.raises(ConfigError, match="use_sliding_window"):
        load_hf_config(dict(HF["Qwen/Qwen3-8B"], use_sliding_window=True))
    layer_types = ["sliding_attention"] * 5 + ["full_attention"]
    g3 = load_hf_config(dict(HF["google/gemma-3-1b-pt"], layer_types=layer_types * 4 + layer_types[:2]))
    assert g3.global_attention_every == 6
    with pytest.raises(ConfigError, match="layer_types"):
        load_hf_config(dict(HF["google/gemma-3-1b-pt"], layer_types=["full_attention", "sliding_attention",
                                                                         "sliding_attention", "full_attention"]))


def test_multimodal_gemma3_reads_text_config():
    text = HF["google/gemma-3-1b-pt"]
    unused = []
    m = load_hf_config({"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
                        "text_config": text, "vision_config": {"hidden_size": 1152}}, unused=unused)
    assert m.param_count() == get_model("gemma3-1b").param_count()
    assert unused == ["vision_config (vision tower not modeled)"]


def test_cli_simulates_hf_config_and_warns_once_about_unmodeled_keys(tmp_path, capsys):
    from simulator.cli.main import main
    cfg = dict(HF["Qwen/Qwen3-8B"], num_hidden_layers=4, my_custom_flag=1)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "s.yaml").write_text(
        "model: config.json\ncluster: {preset: dgx-h100, nodes: 1}\nparallel: {tp: 2, pp: 2, sp: true}\n"
        "schedule: 1f1b\ntraining: {micro_batch: 1, global_batch: 8, seq_len: 1024, precision: bf16}\n")
    assert main(["simulate", str(tmp_path / "s.yaml")]) == 0
    out, err = capsys.readouterr()
    assert "iteration time" in out
    assert err.strip().splitlines() == ["execsim: warning: model config keys not modeled (ignored): my_custom_flag"]


@pytest.mark.parametrize("preset", ["deepseek-v3", "gemma2-9b", "qwen3-30b-a3b"])
def test_new_families_simulate_end_to_end(preset, tmp_path):
    """A 4-layer cut of each family lowers and simulates at both fidelities with equal parameters."""
    from simulator.api import simulate_strategy
    from strategies.strategy_file import parse_strategy
    m = {"preset": preset, "layers": 4}
    if preset == "deepseek-v3":
        m["moe_layers"] = [1, 2, 3]
    par = {"tp": 2, "pp": 2, "sp": True, "ep": 2 if preset != "gemma2-9b" else 1}
    s = parse_strategy({"model": m, "cluster": {"preset": "h800", "nodes": 1}, "parallel": par, "schedule": "1f1b",
                        "training": {"micro_batch": 1, "global_batch": 8, "seq_len": 2048, "precision": "bf16"}},
                       tmp_path)
    op = simulate_strategy(s)
    co = simulate_strategy(s, fidelity="coarse")
    assert op.training.to_json()["iteration_time_s"] > 0
    # the two fidelities agree (coarse records fold each block's costs the operator lowering schedules)
    assert abs(co.result.makespan / op.result.makespan - 1) <= 0.02


def _mixtral(tmp_path, **options):
    from strategies.strategy_file import parse_strategy
    return parse_strategy({"model": {"preset": "mixtral-8x7b", "layers": 4}, "cluster": {"preset": "dgx-h100", "nodes": 2},
                           "parallel": {"tp": 1, "pp": 2, "ep": 8}, "schedule": "1f1b",
                           "training": {"micro_batch": 1, "global_batch": 16, "seq_len": 2048},
                           "options": options}, tmp_path)


def test_moe_imbalance_one_is_balanced_routing(tmp_path):
    from simulator.api import simulate_strategy
    base = simulate_strategy(_mixtral(tmp_path, moe_routing="balanced"))
    same = simulate_strategy(_mixtral(tmp_path, moe_imbalance=1.0))
    assert same.result.makespan == base.result.makespan
    assert list(same.graph.duration) == list(base.graph.duration)


def test_moe_busiest_rank_sets_the_pace(tmp_path):
    from simulator.api import simulate_strategy
    m = get_model("mixtral-8x7b")
    kw = dict(micro_batch=1, seq_len=2048, ep=8)
    even = {o.name: o for o in layer_operators(m, **kw)}
    skew = {o.name: o for o in layer_operators(m, **kw, moe_load=1.5)}
    assert skew["moe_experts"].fwd_flops == pytest.approx(1.5 * even["moe_experts"].fwd_flops)
    assert skew["moe_experts"].saved_activation_bytes == pytest.approx(1.5 * even["moe_experts"].saved_activation_bytes)
    a2a = lambda ops: [x.bytes for x in ops["moe_experts"].comms if x.op == "all-to-all"]
    assert a2a(skew) == [1.5 * b for b in a2a(even)]
    assert skew["qkv"] == even["qkv"] and skew["moe_router"] == even["moe_router"]
    base = simulate_strategy(_mixtral(tmp_path, moe_imbalance=1.0)).result.makespan
    slow = simulate_strategy(_mixtral(tmp_path, moe_imbalance=1.5)).result.makespan
    capped = simulate_strategy(_mixtral(tmp_path, moe_imbalance=1.5, moe_capacity_factor=1.25)).result.makespan
    at_cap = simulate_strategy(_mixtral(tmp_path, moe_imbalance=1.25)).result.makespan
    assert base < capped == at_cap < slow      # dropping tokens past capacity bounds the busiest rank's work
    with pytest.raises(ConfigError, match="moe_imbalance"):
        _mixtral(tmp_path, moe_imbalance=0.8)


def _cp_core(cp_comm="allgather", cp=4, balance=True, **kw):
    ops = layer_operators(get_model("llama3-8b"), micro_batch=1, seq_len=8192, tp=2, sp=True, cp=cp,
                          cp_comm=cp_comm, cp_balance=balance, **kw)
    return next(o for o in ops if o.name == "attn_core")


def test_context_parallel_variants():
    ag, ring, a2a = _cp_core("allgather"), _cp_core("ring"), _cp_core("a2a")
    assert ag.fwd_flops == ring.fwd_flops == a2a.fwd_flops                # same work, different traffic
    assert [(x.op, x.overlaps) for x in ring.comms] == [("all-gather", "attn")] * 2 + [("reduce-scatter", "attn")]
    assert [x.overlaps for x in ag.comms] == ["", "", ""]
    # Ulysses: Q, K, V of this rank's sequence shard out, the output back; backward mirrors
    T, at, gt, d = 8192 // 4, 32 // 2, 8 // 2, 128
    assert [(x.op, x.phase, x.where, x.bytes) for x in a2a.comms] == [
        ("all-to-all", "fwd", "before", 2 * T * (at + 2 * gt) * d), ("all-to-all", "fwd", "after", 2 * T * at * d),
        ("all-to-all", "bwd", "before", 2 * T * at * d), ("all-to-all", "bwd", "after", 2 * T * (at + 2 * gt) * d)]
    with pytest.raises(ConfigError, match="Ulysses"):
        _cp_core("a2a", cp=8)   # kv_heads/tp = 4 cannot split over 8
    with pytest.raises(ConfigError, match="cp_comm"):
        _cp_core("rings")


def test_causal_load_balancing_over_cp():
    s, cp = 8192, 4
    bal, unbal = _cp_core(balance=True), _cp_core(balance=False)
    q = s // cp
    last = attention_pairs(s, True) - attention_pairs(s - q, True)
    assert unbal.fwd_flops / bal.fwd_flops == pytest.approx(last / (attention_pairs(s, True) / cp))
    assert unbal.fwd_flops / bal.fwd_flops == pytest.approx((2 * cp - 1) / cp, rel=1e-3)


def test_ring_attention_exposes_only_what_the_chunks_do_not_hide(tmp_path):
    from strategies.strategy_file import parse_strategy
    from taskgraph.costing import build_work
    from taskgraph.plan import resolve

    def core_cost(cp_comm):
        s = parse_strategy({"model": {"preset": "llama3-8b", "layers": 2}, "cluster": {"preset": "dgx-h100", "nodes": 1},
                            "parallel": {"tp": 2, "cp": 4, "sp": True}, "schedule": "1f1b",
                            "training": {"micro_batch": 1, "global_batch": 1, "seq_len": 8192},
                            "options": {"cp_comm": cp_comm}}, tmp_path)
        plan = resolve(s)
        work = build_work(plan)
        layer = next(lw for lw in work.stages[0].layers if lw.name.startswith("layer"))
        return plan, next(c for c in layer.ops if c.name == "attn_core")

    plan, ag = core_cost("allgather")
    ring_plan, ring = core_cost("ring")
    # Transformer Engine's ring-CP kernels around the chunked launches (taskgraph/te_cp.py) come on top
    from taskgraph.operators import layer_operators
    from taskgraph.te_cp import te_ring_attention
    core = {o.name: o for o in layer_operators(ring_plan.model, ep=1, micro_batch=1, seq_len=8192, tp=2, sp=True,
                                               cp=4, cp_comm="ring")}["attn_core"]
    te_fwd = te_ring_attention(ring_plan, None, core, 2)[0]
    assert te_fwd > 0
    # the same FLOPs, but ring CP's kernels run 2k chunks with 3 of 4 steps unmasked where all-gather's
    # runs the 8k key loop under the mask (taskgraph/attention_shape.py; cuDNN on H100, kernels.yaml)
    # forward, cuDNN causal / unmasked TFLOP/s: all-gather 529 (8k, masked); ring 1 / (1/4 / 484 + 3/4 / 617)
    # (2k); the catalog figure scales both alike, so the compute times stand in the inverse ratio
    launch = plan.cluster.gpu.efficiency.launch_overhead
    ring_tf = 1 / (0.25 / 484 + 0.75 / 617)
    assert (ring.fwd - te_fwd - launch) / (ag.fwd - launch) == pytest.approx(529 / ring_tf)
    t_ag = ag.fwd_pre[0].seconds
    assert ring.fwd_pre[0].seconds == pytest.approx(max(0.0, t_ag - 3 / 4 * ring.fwd))
    assert ring.fwd_pre[0].seconds < t_ag


def test_gemma3_text_config_takes_transformers_defaults():
    """The released google/gemma-3-4b-it config.json gives text_config without vocab_size,
    num_attention_heads, num_key_value_heads or head_dim: transformers' Gemma3TextConfig fills in
    262208, 8, 4, 256 (configuration_gemma3.py defaults), so must we."""
    from taskgraph.hf_config import GEMMA3_TEXT_DEFAULTS, load_hf_config
    unused: list = []
    d = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
         "text_config": {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text",
                         "num_hidden_layers": 34, "sliding_window": 1024}, "vision_config": {"hidden_size": 1152}}
    m = load_hf_config(d, unused=unused)
    assert (m.heads, m.kv_heads, m.head_dim, m.vocab) == (8, 4, 256, 262208)
    assert (m.sliding_window, m.global_attention_every, m.tied_embeddings) == (1024, 6, True)
    assert unused == ["vision_config (vision tower not modeled)"]
    assert GEMMA3_TEXT_DEFAULTS["sliding_window_pattern"] == 6


def test_layer_types_read_or_refused():
    from taskgraph.hf_config import load_hf_config
    d = {"architectures": ["Gemma3ForCausalLM"], "num_hidden_layers": 4, "hidden_size": 64, "intermediate_size": 128,
         "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 16, "vocab_size": 100, "sliding_window": 512}
    assert load_hf_config({**d, "layer_types": ["sliding_attention"] * 4}).global_attention_every == 0
    assert load_hf_config({**d, "layer_types": ["sliding_attention", "full_attention"] * 2}).global_attention_every == 2
    for bad in (["sliding", "full_attention"] * 2, ["full_attention"] * 3, "sliding_attention"):
        with pytest.raises(ConfigError, match="layer_types"):
            load_hf_config({**d, "layer_types": bad})


def test_hf_llama4_text_config():
    """A Llama 4 config.json (transformers Llama4TextConfig defaults = Scout): 16 routed + 1 shared
    expert on every layer, chunked attention in 8192-token blocks, every 4th layer global at (i+1) % 4
    == 0; Scout 109B total with a 17B-active count (Meta's model card: 17B active, 109B total with
    its vision encoder), Maverick (128 experts on every other layer) 400B."""
    wrap = {"architectures": ["Llama4ForConditionalGeneration"], "vision_config": {"hidden_size": 1408}}
    unused = []
    scout = load_hf_config({**wrap, "text_config": {"model_type": "llama4_text"}}, unused=unused)
    assert round(scout.param_count() / 1e9, 1) == 107.8 and round(scout.active_param_count() / 1e9, 1) == 17.2
    assert (scout.experts, scout.top_k, scout.shared_experts, scout.expert_ffn, scout.ffn) == (16, 1, 1, 8192, 16384)
    assert (scout.attention_chunk, scout.global_attention_every, scout.global_attention_start) == (8192, 4, None)
    assert [i for i in range(8) if not scout.is_local_attention_layer(i)] == [3, 7]
    assert unused == ["vision_config (vision tower not modeled)"]
    mav = load_hf_config({**wrap, "text_config": {"num_local_experts": 128, "interleave_moe_layer_step": 2}})
    assert round(mav.param_count() / 1e9, 1) == 400.7 and mav.moe_layer_indices()[:3] == (1, 3, 5)
    # an explicit no_rope_layers list (0 = NoPE = global) with torchtitan's phase: layers 0, 4, 8 ...
    tt = load_hf_config({**wrap, "text_config": {"num_hidden_layers": 8, "no_rope_layers": [0, 1, 1, 1] * 2}})
    assert (tt.global_attention_every, tt.global_attention_start) == (4, 0)
    lt = load_hf_config({**wrap, "text_config": {"num_hidden_layers": 4,
                                                "layer_types": ["chunked_attention"] * 3 + ["full_attention"]}})
    assert (lt.attention_chunk, lt.global_attention_every, lt.global_attention_start) == (8192, 4, None)
    assert load_hf_config({**wrap, "text_config": {"attention_chunk_size": None}}).attention_chunk == 0
    with pytest.raises(ConfigError, match=r"no_rope_layers has 3 entries but num_hidden_layers = 8"):
        load_hf_config({**wrap, "text_config": {"num_hidden_layers": 8, "no_rope_layers": [0, 1, 1]}})
    with pytest.raises(ConfigError, match=r"NoPE\) layers \[0, 1, 5\] are not every k-th layer"):
        load_hf_config({**wrap, "text_config": {"num_hidden_layers": 8, "no_rope_layers": [0, 0, 1, 1, 1, 0, 1, 1]}})
    with pytest.raises(ConfigError, match=r"layer_types = .* must be a list with one of chunked_attention"):
        load_hf_config({**wrap, "text_config": {"num_hidden_layers": 2, "layer_types": ["chunked", "full_attention"]}})
