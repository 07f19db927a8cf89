"""ModelSpec: parameter counts of presets vs published sizes, validation, YAML and HF loaders."""
import json

import pytest

from strategies.errors import ConfigError
from taskgraph.hf_config import load_hf_config
from taskgraph.model import PRESETS, ModelSpec, get_model, gpt_style, load_model_yaml

# Published total parameter counts, and where each number comes from.
PUBLISHED = {
    "gpt3-175b": 174.6e9,    # Narayanan 2021 Table 1 (GPT-3 shape, 174.6B)
    "k22-22b": 22e9,         # Korthikanti 2022 Table 3 nominal "22B" (ours: 22.07B)
    "k22-175b": 175e9,       # Korthikanti 2022 Table 3 nominal "175B" (GPT-3)
    "k22-530b": 529.6e9,     # Narayanan 2021 Table 1: 105 layers, h=20480, 128 heads
    "k22-1t": 1008.0e9,      # Narayanan 2021 Table 1: 128 layers, h=25600, 160 heads
    "llama2-70b": 68.98e9,   # HF meta-llama/Llama-2-70b-hf: 68,976,648,192
    "llama3-8b": 8.03e9,     # HF meta-llama/Meta-Llama-3-8B: 8,030,261,248
    "llama3-70b": 70.55e9,   # HF meta-llama/Meta-Llama-3-70B: 70,553,706,496
    "llama3-405b": 405.8e9,  # Dubey 2024 / HF Meta-Llama-3.1-405B: 405.85B
    "mixtral-8x7b": 46.7e9,  # Jiang 2024 Section 2
    "bloom-176b": 176.2e9,   # BigScience 2022 / HF bigscience/bloom: 176,247,271,424
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_preset_param_counts_within_1_percent(name):
    n = get_model(name).param_count()
    assert abs(n / PUBLISHED[name] - 1) < 0.01, (name, n)


def test_every_preset_is_checked():
    # 2025 families are checked against taskgraph.model.PUBLISHED_PARAMS in test_model_families.py
    from taskgraph.model import PUBLISHED_PARAMS
    assert set(PRESETS) == set(PUBLISHED) | set(PUBLISHED_PARAMS)


@pytest.mark.parametrize("name,exact", [
    ("llama2-70b", 68_976_648_192), ("llama3-8b", 8_030_261_248), ("llama3-70b", 70_553_706_496),
    ("mixtral-8x7b", 46_702_792_704), ("bloom-176b", 176_247_271_424),
])
def test_exact_counts_match_released_checkpoints(name, exact):
    assert get_model(name).param_count() == exact


def test_gpt3_matches_narayanan_eq2():
    # Narayanan 2021 eq. 2: P = 12 l h^2 (1 + 13/(12h) + (V+s)/(12 l h)) (+ final LayerNorm 2h)
    m = get_model("gpt3-175b")
    l, h, V, s = m.layers, m.hidden, m.vocab, m.max_seq
    assert m.param_count() == 12 * l * h * h + 13 * l * h + (V + s) * h + 2 * h


def test_mixtral_active_params():
    m = get_model("mixtral-8x7b")
    assert abs(m.active_param_count() / 12.9e9 - 1) < 0.01  # Jiang 2024 Section 2
    assert get_model("llama3-8b").active_param_count() == get_model("llama3-8b").param_count()


def test_breakdown_components():
    m = get_model("llama3-8b")
    b = m.param_breakdown()
    assert b.embedding == m.vocab * m.hidden and b.lm_head == m.vocab * m.hidden
    assert b.final_norm == m.hidden and len(b.layers) == 32 and b.total == m.param_count()
    g = get_model("gpt3-175b").param_breakdown()
    assert g.lm_head == 0 and g.embedding == (50257 + 2048) * 12288


def test_gqa_qkv_and_swiglu_matrices():
    m = get_model("llama2-70b")
    h = m.hidden
    assert m.kv_heads == 8 and m.head_dim == 128
    assert m.qkv_params() == h * (h + 2 * m.kv_heads * m.head_dim)
    assert m.mlp_params() == 3 * h * m.ffn
    assert get_model("gpt3-175b").mlp_params() == 2 * 12288 * 4 * 12288 + 4 * 12288 + 12288


def test_moe_layer_selection():
    base = dict(name="m", layers=8, hidden=64, heads=4, vocab=100, experts=4, top_k=1)
    assert ModelSpec(**base).moe_layer_indices() == tuple(range(8))
    assert ModelSpec(**base, moe_layers=2).moe_layer_indices() == (0, 2, 4, 6)
    m = ModelSpec(**base, moe_layers=(1, 5))
    assert m.moe_layer_indices() == (1, 5)
    assert m.layer_params(1) > m.layer_params(0)
    with pytest.raises(ConfigError, match="0..7"):
        ModelSpec(**base, moe_layers=(9,))


def test_shared_experts_counted_as_active():
    m = ModelSpec(name="m", layers=2, hidden=64, heads=4, vocab=100, experts=8, top_k=2,
                  expert_ffn=32, shared_experts=1, mlp="swiglu", bias=False)
    per = m.mlp_params(32)
    assert m.layer_params(0) - m.layer_params(0, active=True) == (8 - 2) * per


def test_validation_messages():
    with pytest.raises(ConfigError, match=r"heads=64 is not divisible by model.kv_heads=6"):
        ModelSpec(name="x", layers=1, hidden=64, heads=64, kv_heads=6, vocab=10)
    with pytest.raises(ConfigError, match="did you mean 'swiglu'"):
        ModelSpec(name="x", layers=1, hidden=64, heads=4, vocab=10, mlp="swiglue")
    with pytest.raises(ConfigError, match="top_k"):
        ModelSpec(name="x", layers=1, hidden=64, heads=4, vocab=10, experts=4, top_k=5)
    with pytest.raises(ConfigError, match="head_dim"):
        ModelSpec(name="x", layers=1, hidden=100, heads=3, vocab=10)
    with pytest.raises(ConfigError, match="did you mean 'llama3-8b'"):
        get_model("llama3-8")


def test_head_dim_override():
    m = ModelSpec(name="x", layers=1, hidden=100, heads=4, head_dim=32, vocab=10)
    assert m.qkv_params() == 100 * 3 * 128 + 3 * 128


def test_gpt_style_ad_hoc():
    # Zero-bubble paper (Qi 2023 Table 3) 1.5B-class shape: built from fields, not a preset.
    m = gpt_style("zb-1.5b", 22, 2304, 24, max_seq=1024)
    assert m.mlp == "gelu" and m.ffn == 4 * 2304 and m.tied_embeddings
    assert 1.4e9 < m.param_count() < 1.6e9


def test_load_model_yaml_dict_file_and_preset(tmp_path):
    m = load_model_yaml({"name": "tiny", "layers": 2, "hidden": 64, "heads": 4, "vocab": 128})
    assert m.ffn == 256 and m.kv_heads == 4
    p = tmp_path / "m.yaml"
    p.write_text("model:\n  preset: gpt3-175b\n  name: gpt3-half\n  hidden: 6144\n  heads: 48\n")
    m2 = load_model_yaml(p)
    assert m2.name == "gpt3-half" and m2.ffn == 4 * 6144 and m2.head_dim == 128 and m2.layers == 96
    m3 = load_model_yaml({"preset": "mixtral-8x7b", "moe_layers": [0, 1]})
    assert m3.moe_layer_indices() == (0, 1)


def test_load_model_yaml_errors():
    with pytest.raises(ConfigError, match="did you mean 'hidden'"):
        load_model_yaml({"name": "x", "layers": 2, "hiden": 64, "heads": 4, "vocab": 10})
    with pytest.raises(ConfigError, match="model.layers"):
        load_model_yaml({"name": "x", "layers": "two", "hidden": 64, "heads": 4, "vocab": 10})
    with pytest.raises(ConfigError, match="missing required field 'model.vocab'"):
        load_model_yaml({"name": "x", "layers": 2, "hidden": 64, "heads": 4})
    with pytest.raises(ConfigError, match="did you mean 'rmsnorm'"):
        load_model_yaml({"preset": "llama3-8b", "norm": "rmsnrom"})


LLAMA3_8B_HF = {  # meta-llama/Meta-Llama-3-8B config.json (subset + noise keys)
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": False,
    "attention_bias": False, "hidden_act": "silu", "torch_dtype": "bfloat16",
}


def test_hf_llama3_matches_preset(tmp_path):
    m = load_hf_config(LLAMA3_8B_HF)
    assert m.param_count() == get_model("llama3-8b").param_count()
    (tmp_path / "config.json").write_text(json.dumps(LLAMA3_8B_HF))
    assert load_hf_config(tmp_path).param_count() == m.param_count()
    assert load_hf_config(tmp_path / "config.json", name="l3").name == "l3"


def test_hf_mixtral_and_qwen2():
    mix = load_hf_config({
        "architectures": ["MixtralForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
        "vocab_size": 32000, "num_local_experts": 8, "num_experts_per_tok": 2,
        "max_position_embeddings": 32768, "tie_word_embeddings": False})
    assert mix.param_count() == get_model("mixtral-8x7b").param_count()
    assert mix.active_param_count() == get_model("mixtral-8x7b").active_param_count()
    qwen = load_hf_config({  # Qwen/Qwen2-7B config.json; HF reports 7,615,616,512 parameters
        "architectures": ["Qwen2ForCausalLM"], "hidden_size": 3584, "intermediate_size": 18944,
        "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
        "vocab_size": 152064, "max_position_embeddings": 131072, "tie_word_embeddings": False})
    assert qwen.qkv_bias and not qwen.bias
    assert qwen.param_count() == 7_615_616_512


def test_hf_head_dim_and_errors():
    nemo = dict(LLAMA3_8B_HF, architectures=["MistralForCausalLM"], hidden_size=5120,
                num_attention_heads=32, head_dim=128, num_hidden_layers=40)
    assert load_hf_config(nemo).head_dim == 128
    with pytest.raises(ConfigError, match="not supported"):
        load_hf_config(dict(LLAMA3_8B_HF, architectures=["GPT2LMHeadModel"], model_type="gpt2"))
    bad = dict(LLAMA3_8B_HF)
    del bad["hidden_size"]
    with pytest.raises(ConfigError, match="hidden_size"):
        load_hf_config(bad)
