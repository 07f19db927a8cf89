"""training.lora (taskgraph/lora.py): closed-form FLOPs, bytes and collectives on a tiny model, the
memory model's states, the MFU numerator, the checks, the NeMo 1 importer, and the invariants LoRA
must keep against full fine-tuning of the same configuration."""
from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strategies.errors import ConfigError
from strategies.lora_spec import parse_lora
from strategies.strategy_file import parse_strategy
from taskgraph.model import load_model_yaml
from taskgraph.operators import embedding_operators, head_operators, layer_operators

H, FFN, V, L = 64, 128, 256, 2          # tiny Llama: 4 heads of 16, SwiGLU, untied head
TINY = {"preset": "llama3-8b", "layers": L, "hidden": H, "heads": 4, "kv_heads": 4, "ffn": FFN, "vocab": V}
MODEL = load_model_yaml(TINY)
T = 8                                    # tokens: micro batch 1 x seq 8
R = 4


def _ops(lora=None, **kw):
    kw = {"micro_batch": 1, "seq_len": T, "tp": 1, **kw}
    return {o.name: o for o in layer_operators(MODEL, lora=lora, **kw)}


def test_tiny_model_shape():
    assert MODEL.head_dim == 16 and MODEL.gated_mlp


def test_base_gemms_keep_forward_and_dgrad_but_lose_wgrad():
    lora = parse_lora({"rank": R, "targets": ["qkv", "attn_out"]})
    full, tuned = _ops(), _ops(lora)
    for name in ("qkv", "attn_out", "mlp_gate_up", "mlp_down"):
        assert tuned[name].fwd_flops == full[name].fwd_flops == 2.0 * T * full[name].gemms[0].n * full[name].gemms[0].k
        assert tuned[name].bwd_input_flops == full[name].bwd_input_flops
        assert tuned[name].bwd_weight_flops == 0 and tuned[name].bwd_weight_bytes == 0
        assert tuned[name].frozen_params == full[name].params
    for name in ("qkv", "mlp_gate_up", "mlp_down"):
        assert tuned[name].saved_activation_bytes == 0           # TE: a frozen weight's input is not kept
    # ... but the fused attention kernel keeps its output O (attn_out's input) for its own backward
    assert tuned["attn_out"].saved_activation_bytes == full["attn_out"].saved_activation_bytes == 2 * T * H
    assert _ops(lora, flash_attention=False)["attn_out"].saved_activation_bytes == 0
    assert tuned["input_norm"].bwd_weight_flops == 0 and tuned["input_norm"].frozen_params == H
    assert tuned["input_norm"].saved_activation_bytes == full["input_norm"].saved_activation_bytes


def test_adapter_flops_params_and_saved_bytes_closed_form():
    lora = parse_lora({"rank": R, "targets": ["qkv", "attn_out"]})
    ops = _ops(lora)
    qkv_n = 3 * H                                             # MHA: q, k, v of 4 x 16
    q = ops["qkv_lora"]
    assert [(g.m, g.n, g.k) for g in q.gemms] == [(T, R, H), (T, qkv_n, R)]
    assert q.fwd_flops == q.bwd_input_flops == q.bwd_weight_flops == 2.0 * T * R * H + 2.0 * T * qkv_n * R
    assert q.params == R * H + qkv_n * R and q.frozen_params == 0
    assert q.saved_activation_bytes == 2 * T * H + 2 * T * R  # adapter input + A's output, bf16
    # forward bytes: both GEMMs' reads and writes + scale (2) and add (3) over the [T, 3h] output
    io = 2 * (T * H + H * R + T * R) + 2 * (T * R + R * qkv_n + T * qkv_n)
    assert q.fwd_bytes == io + 5 * 2 * T * qkv_n and q.bwd_weight_bytes == io
    o = ops["attn_out_lora"]
    assert [(g.m, g.n, g.k) for g in o.gemms] == [(T, R, H), (T, H, R)]
    assert o.params == 2 * R * H and o.comms == ()            # tp 1: no collective
    assert o.saved_activation_bytes == 2 * T * R              # its input O is the attention kernel's
    assert _ops(lora, flash_attention=False)["attn_out_lora"].saved_activation_bytes == 2 * T * H + 2 * T * R
    names = list(ops)
    assert names.index("qkv_lora") == names.index("qkv") + 1 and "mlp_down_lora" not in ops


def test_dropout_keeps_a_mask_and_reads_and_writes_the_input():
    a = _ops(parse_lora({"rank": R, "targets": ["qkv"]}))["qkv_lora"]
    b = _ops(parse_lora({"rank": R, "targets": ["qkv"], "dropout": 0.1}))["qkv_lora"]
    assert b.saved_activation_bytes - a.saved_activation_bytes == T * H            # 1-byte mask
    assert b.fwd_bytes - a.fwd_bytes == b.bwd_input_bytes - a.bwd_input_bytes == (2 * 2 + 1) * T * H


def test_tensor_parallel_shards_and_collectives_follow_megatron_bridge():
    lora = parse_lora({"rank": R, "targets": ["qkv", "attn_out"]})
    ops = _ops(lora, tp=2)
    q, o = ops["qkv_lora"], ops["attn_out_lora"]
    # column-parallel base: A [r/tp, h] on the whole input, its output gathered; B [3h/tp, r]
    assert [(g.m, g.n, g.k) for g in q.gemms] == [(T, R // 2, H), (T, 3 * H // 2, R)]
    assert [(c.op, c.phase, c.bytes, c.overlaps) for c in q.comms] == [("all-gather", "fwd", 2 * T * R, ""),
                                                                       ("all-reduce", "bwd", 2 * T * H, "wgrad")]
    # row-parallel base: A [r, h/tp] with its partial sums all-reduced; B [h/tp, r] output gathered
    assert [(g.m, g.n, g.k) for g in o.gemms] == [(T, R, H // 2), (T, H // 2, R)]
    assert [(c.op, c.phase, c.bytes, c.overlaps) for c in o.comms] == [("all-reduce", "fwd", 2 * T * R, ""),
                                                                       ("all-gather", "fwd", 2 * T * H, ""),
                                                                       ("all-reduce", "bwd", 2 * T * R, "wgrad")]
    sp = _ops(lora, tp=2, sp=True)
    assert [(c.op, c.phase) for c in sp["qkv_lora"].comms] == [("all-gather", "fwd")]
    assert ("all-gather", "bwd") in [(c.op, c.phase) for c in sp["attn_out_lora"].comms]
    # the frozen column-parallel base no longer re-gathers its input for a wgrad it does not run
    assert [(c.op, c.phase) for c in sp["qkv"].comms] == [("all-gather", "fwd"), ("reduce-scatter", "bwd")]


def test_embedding_and_head_are_frozen():
    lora = parse_lora({"rank": R})
    emb = embedding_operators(MODEL, micro_batch=1, seq_len=T, tp=2, sp=True, lora=lora)[0]
    assert emb.bwd_weight_flops == 0 and emb.frozen_params == emb.params > 0
    assert all(c.phase == "fwd" for c in emb.comms)
    head = {o.name: o for o in head_operators(MODEL, micro_batch=1, seq_len=T, lora=lora)}
    assert head["lm_head"].bwd_weight_flops == 0 and head["lm_head"].bwd_input_flops > 0
    assert head["lm_head"].frozen_params == V * H


def _strategy(lora=None, **par):
    d = {"model": dict(TINY), "cluster": {"preset": "dgx-h100", "nodes": 1},
         "parallel": {"tp": 1, "pp": 1, "zero": 0, **par},
         "training": {"micro_batch": 1, "global_batch": 8 // (par.get("tp", 1) * par.get("pp", 1)) * 2,
                      "seq_len": T}}
    if lora is not None:
        d["training"]["lora"] = lora
    return parse_strategy(d)


def test_memory_states_cover_only_the_adapters():
    from taskgraph.costing import grad_bytes_per_param
    from taskgraph.memory import params_per_gpu, static_memory
    from taskgraph.plan import resolve
    full, tuned = resolve(_strategy()), resolve(_strategy({"rank": R}))   # default targets: all four linears
    base = params_per_gpu(full)[0]
    adapters = L * (R * H + 3 * H * R + R * H + H * R + R * H + 2 * FFN * R + R * FFN + H * R)
    assert params_per_gpu(tuned)[0] == base + adapters
    m = static_memory(tuned)[0]
    gbp = grad_bytes_per_param(tuned)
    assert m.weights == 2 * (base + adapters)
    assert m.grads == gbp * adapters and m.optimizer == 12 * adapters


def test_mfu_numerator_drops_frozen_wgrad_and_adds_the_adapters():
    from taskgraph.lora_flops import lora_flops_per_token
    from taskgraph.operators import model_flops_per_token
    lora = parse_lora({"rank": R, "targets": ["qkv", "attn_out"]})
    linear = 3 * H * H + H * H + 2 * FFN * H + FFN * H       # per layer
    norms_wgrad = 2 * 2 * H                                   # two RMSNorms: 2 FLOPs per element
    adapters = (R * H + 3 * H * R) + (R * H + H * R)
    want = (model_flops_per_token(MODEL, T) - L * (2 * linear + norms_wgrad - 6 * adapters)
            - 2 * V * H - 2 * H - H)                          # LM head wgrad, final norm, embedding rows
    assert lora_flops_per_token(MODEL, T, lora) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("lora,match", [
    ({"rank": 0}, r"training\.lora\.rank = 0 must be"),
    ({"rank": 65}, r"training\.lora\.rank = 65 exceeds min\(in, out\) = 64 of 'qkv'"),
    ({"rank": 8, "targets": ["mlp_gate"]}, r"'mlp_gate' is not a LoRA target.*did you mean"),
    ({"rank": 8, "alpha": 0}, r"training\.lora\.alpha"),
    ({"rank": 8, "targets": "qkv"}, r"training\.lora\.targets = .* must be a non-empty list"),
    ({"rank": 8, "dropout": 1.0}, r"training\.lora\.dropout = 1\.0 must be in \[0, 1\)"),
    ({"rank": 8, "extra": 1}, r"training\.lora"),
    ({"rank": 3}, r"training\.lora\.rank = 3 must be divisible by parallel\.tp = 2"),
])
def test_bad_lora_is_one_clear_error(lora, match):
    from taskgraph.plan import resolve
    with pytest.raises(ConfigError, match=match):
        resolve(_strategy(lora, tp=2))


def test_targets_the_model_lacks_are_refused():
    from taskgraph.plan import resolve
    d = {"model": {"preset": "mixtral-8x7b", "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 4, "ffn": 128,
                   "vocab": 256, "expert_ffn": 64},
         "cluster": {"preset": "dgx-h100", "nodes": 1}, "parallel": {"tp": 1},
         "training": {"micro_batch": 1, "global_batch": 8, "seq_len": 8, "lora": {"rank": 4, "targets": ["mlp_down"]}}}
    with pytest.raises(ConfigError, match=r"has no 'mlp_down' layer .*attn_out, qkv"):
        resolve(parse_strategy(d))
    d["training"]["lora"]["targets"] = ["qkv", "attn_out"]
    resolve(parse_strategy(d))


def test_nemo1_peft_lora_imports():
    from strategies.importers import import_config
    from tests.test_import_recipes import NEMO_70B
    d = copy.deepcopy(NEMO_70B)
    d["model"]["peft"] = {"peft_scheme": "lora", "restore_from_path": None,
                          "lora_tuning": {"adapter_dim": 16, "alpha": 32, "adapter_dropout": 0.1,
                                          "target_modules": ["attention"], "column_init_method": "xavier",
                                          "row_init_method": "zero", "weight_tying": False}}
    imp = import_config("nemo", d, cluster="dgx-h100")
    assert imp.strategy["training"]["lora"] == {"rank": 16, "alpha": 32.0, "dropout": 0.1,
                                                "targets": ["qkv", "attn_out"]}
    assert not any("peft" in u for u in imp.unmodeled)
    d["model"]["peft"] = {"peft_scheme": "lora", "lora_tuning": {"adapter_dim": 8}}
    assert import_config("nemo", d, cluster="dgx-h100").strategy["training"]["lora"]["targets"] == ["qkv"]
    d["model"]["peft"] = {"peft_scheme": "ia3"}
    with pytest.raises(ConfigError, match=r"model\.peft\.peft_scheme = 'ia3' is not modelled"):
        import_config("nemo", d, cluster="dgx-h100")


@settings(max_examples=12, deadline=None)
@given(tp=st.sampled_from([1, 2]), pp=st.sampled_from([1, 2]), zero=st.sampled_from([0, 1]),
       rank_div=st.sampled_from([8, 16, 32]), attn_only=st.booleans(), dropout=st.sampled_from([0.0, 0.1]))
def test_lora_never_costs_more_than_full_fine_tuning(tp, pp, zero, rank_div, attn_only, dropout):
    """At rank <= hidden / 8 on a 4096-wide model: LoRA's memory (states + activations) never exceeds full fine-tuning's of
    the same configuration, and its step is shorter (no frozen wgrad, an adapter-sized optimizer)."""
    from simulator.reports.memory import memory_report
    from simulator.simulation.strategy import simulate_strategy
    # wide enough that the GEMMs outweigh the adapters' elementwise passes over the layer outputs (scale,
    # add: 5 x 2 bytes per output element against 2h FLOPs; on an H100 the two cross near h ~ 1.5k, below
    # which eager LoRA steps are slower than full fine-tuning's)
    h = 4096
    lora = {"rank": h // rank_div, "dropout": dropout,
            "targets": ["qkv", "attn_out"] if attn_only else ["qkv", "attn_out", "mlp_up", "mlp_down"]}
    d = {"model": {**TINY, "layers": 2, "hidden": h, "heads": 32, "kv_heads": 8, "ffn": 4 * h, "vocab": 8192},
         "cluster": {"preset": "dgx-h100", "nodes": 1}, "parallel": {"tp": tp, "pp": pp, "zero": zero, "sp": tp > 1},
         "training": {"micro_batch": 1, "global_batch": 8 // (tp * pp) * 4, "seq_len": 4096}}
    a = simulate_strategy(parse_strategy(d))
    d["training"]["lora"] = lora
    b = simulate_strategy(parse_strategy(d))
    assert b.training.iteration_time_s < a.training.iteration_time_s
    assert memory_report(b.plan, b.graph, b.result).peak <= memory_report(a.plan, a.graph, a.result).peak


def test_search_bounds_hold_for_lora():
    """The strategy search's pruning bounds see the frozen weights and the adapters: the static memory
    bound never exceeds a LoRA candidate's simulated peak, the time bound never its step, and the search
    keeps the layouts that fit (with full fine-tuning's 16 bytes per parameter none of them would)."""
    from pathlib import Path

    from simulator.search.backends import Job, evaluate_row
    from simulator.search.bnb import compute_bounds
    from simulator.search.space import SearchSpace, context, enumerate_space
    from simulator.search.strategy_search import search
    from strategies.strategy_file import load_strategy
    ex = Path(__file__).resolve().parent.parent / "strategies" / "examples" / "llama2-70b-lora-8-h100.yaml"
    base = load_strategy(ex)
    space = SearchSpace(tp=(1, 2, 4), pp=(1, 2), cp=(1,), micro_batch=(1,), zero=(1, 3), recompute=("full",))
    t = search(base, space=space, jobs=1).table
    ok = t[t["status"] == "ok"]
    assert len(ok) >= 3
    sim = t[t["peak_memory_gb"].notna()]   # the simulated ones (pruned candidates have no peak)
    assert len(sim) >= len(ok) and (sim["static_bound_gb"] <= sim["peak_memory_gb"] + 1e-9).all()
    ctx = context(base)
    cands, stats = enumerate_space(ctx, space, [8])
    # tp 1, pp 1 without ZeRO-3 holds all 69 B frozen weights (138 GB): pruned by the bound, rightly
    assert [(c.tp, c.pp, c.zero) for c in stats.pruned] == [(1, 1, 1)]
    job = Job(ctx, 2.0, 1e9)
    for c, lb in zip(cands, compute_bounds(job, cands)):
        row = evaluate_row(job, c)
        if row["status"] != "invalid":
            assert 0 < lb <= row["iteration_time_s"], c.label()


def test_adapters_stay_in_16_bits_in_fp8_and_fp4_runs():
    """Megatron-Bridge's adapters are megatron-core linears, outside Transformer Engine's autocast: their
    GEMMs are priced at the bf16 rate and they join no TE scaling region (taskgraph/te_scaling.py)."""
    from taskgraph.cost import op_time
    from taskgraph.te_scaling import fp8_gemm_count
    from topologies.gpus import get_gpu
    lora = parse_lora({"rank": R, "targets": ["qkv", "attn_out"]})
    ops = _ops(lora)
    gpu = get_gpu("B200")
    for p in ("fwd", "bwd_input", "bwd_weight"):
        for dtype in ("fp8", "fp4"):
            assert op_time(ops["qkv_lora"], p, gpu, dtype) == op_time(ops["qkv_lora"], p, gpu, "bf16")
    assert fp8_gemm_count(list(ops.values())) == fp8_gemm_count(list(_ops().values()))


def _bridge_recipe(peft_line: str) -> str:
    """tests/data/pyrecipes/bridge_qwen3_moe.py with ``cfg.peft = ...`` added (Megatron-Bridge's finetune
    recipes set ConfigContainer.peft; src/megatron/bridge/peft/lora.py LoRA)."""
    from pathlib import Path
    text = (Path(__file__).parent / "data" / "pyrecipes" / "bridge_qwen3_moe.py").read_text()
    text = text.replace("from megatron.bridge.training.config import ConfigContainer",
                        "from megatron.bridge.training.config import ConfigContainer\nfrom megatron.bridge.peft.lora import LoRA")
    return text.replace("    _moe_common(cfg, ep=8)\n", f"    _moe_common(cfg, ep=8)\n    cfg.peft = {peft_line}\n", 1)


def test_megatron_bridge_peft_lora_imports():
    from strategies.importers import import_config

    def imp(line, **kw):
        return import_config("bridge", _bridge_recipe(line), origin="r.py", cluster="dgx-h100", **kw)
    s = imp("LoRA(target_modules=['linear_qkv', 'linear_proj'], dim=16, alpha=32, dropout=0.1)").strategy
    assert s["training"]["lora"] == {"rank": 16, "alpha": 32.0, "dropout": 0.1, "targets": ["qkv", "attn_out"]}
    s = imp("LoRA()").strategy       # the dataclass defaults: dim 32, alpha 32, every linear layer
    assert s["training"]["lora"] == {"rank": 32, "alpha": 32.0, "dropout": 0.0,
                                     "targets": ["qkv", "attn_out", "mlp_up", "mlp_down"]}
    with pytest.raises(ConfigError, match=r"peft = default_peft_config\('lora'\) is not modelled or not known.*"
                                          r"--set peft\._target_=LoRA"):
        imp("default_peft_config('lora')")
    fixed = imp("default_peft_config('lora')", sets={"peft._target_": "LoRA", "peft.dim": 8,
                                                     "peft.target_modules": ["linear_qkv"]}).strategy
    assert fixed["training"]["lora"]["rank"] == 8 and fixed["training"]["lora"]["targets"] == ["qkv"]
    with pytest.raises(ConfigError, match=r"peft = DoRA\(\) is not modelled"):
        imp("DoRA()")
    with pytest.raises(ConfigError, match=r"peft\.target_modules = .*\(wildcard"):
        imp("LoRA(target_modules=['*.layers.0.*.linear_qkv'])")
