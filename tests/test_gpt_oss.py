"""GPT-OSS (gpt-oss model card, arXiv:2508.10925): presets, the Hugging Face config, and the banded
128-token window on alternate layers, by hand."""
from __future__ import annotations

import pytest

from taskgraph.hf_config import load_hf_config
from taskgraph.model import get_model
from taskgraph.operators import layer_operators


@pytest.mark.parametrize("name,active", [("gpt-oss-120b", 5.13e9), ("gpt-oss-20b", 3.61e9)])
def test_active_parameters_as_the_model_card_counts_them(name, active):
    # model card Table 1 counts the unembedding but not the embedding among active parameters
    m = get_model(name)
    assert abs((m.active_param_count() - m.vocab * m.hidden) / active - 1) < 0.01


def test_windowed_and_full_layers_alternate():
    m = get_model("gpt-oss-120b")
    s, a, d = 4096, 64, 64
    core = [next(o for o in layer_operators(m, micro_batch=1, seq_len=s, layer_index=i) if o.name == "attn_core")
            for i in (0, 1)]
    # layer 0: each query sees its last 128 keys: 128 s - 128*127/2 pairs; layer 1: causal s(s+1)/2
    assert core[0].fwd_flops == 4 * a * d * (128 * s - 128 * 127 // 2)
    assert core[1].fwd_flops == 4 * a * d * s * (s + 1) // 2
    assert [m.is_local_attention_layer(i) for i in range(4)] == [True, False, True, False]


def test_hugging_face_config_reads_as_the_preset():
    layer_types = ["sliding_attention", "full_attention"] * 18
    cfg = {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "attention_bias": True,
           "experts_per_token": 4, "num_experts_per_tok": 4, "head_dim": 64, "hidden_act": "silu",
           "hidden_size": 2880, "initial_context_length": 4096, "intermediate_size": 2880,
           "layer_types": layer_types, "max_position_embeddings": 131072, "num_attention_heads": 64,
           "num_hidden_layers": 36, "num_key_value_heads": 8, "num_local_experts": 128,
           "router_aux_loss_coef": 0.9, "sliding_window": 128, "swiglu_limit": 7.0,
           "tie_word_embeddings": False, "vocab_size": 201088, "rope_theta": 150000}
    unused: list = []
    m = load_hf_config(cfg, unused=unused)
    assert unused == []
    assert m.param_count() == get_model("gpt-oss-120b").param_count()
    assert [m.is_local_attention_layer(i) for i in range(36)] == \
        [get_model("gpt-oss-120b").is_local_attention_layer(i) for i in range(36)]
