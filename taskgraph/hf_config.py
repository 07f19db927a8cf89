"""Hugging Face ``config.json`` -> :class:`taskgraph.model.ModelSpec`, without needing ``transformers``.

One parser per architecture family (Llama, Mistral, Mixtral, Qwen2/3, Qwen3-MoE, Phi-3, Gemma 2/3,
DeepSeek-V2/V3) in :data:`HF_ARCHITECTURES`; keys that do not change time or memory are listed in
:data:`HF_IRRELEVANT_KEYS`, and any other key a parser does not read is reported.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from strategies.config import did_you_mean, get_bool, get_int, load_mapping
from strategies.errors import ConfigError, brief
from taskgraph.model import ModelSpec

#: Hugging Face config.json keys that do not change time or memory (numerics, tokenizer ids,
#: inference-only settings, bookkeeping). They are accepted silently; any other key the loader does
#: not use is reported by ``load_hf_config(..., unused=[])`` (and by the CLI as one warning line).
HF_IRRELEVANT_KEYS = frozenset({
    "_name_or_path", "architectures", "model_type", "auto_map", "transformers_version", "torch_dtype",
    "dtype", "bos_token_id", "eos_token_id", "pad_token_id", "initializer_range", "rms_norm_eps",
    "layer_norm_eps", "rope_theta", "rope_scaling", "rope_parameters", "use_cache", "hidden_act",
    "hidden_activation", "attention_dropout", "hidden_dropout", "embd_pdrop", "resid_pdrop",
    "output_router_logits", "router_aux_loss_coef", "router_jitter_noise", "aux_loss_alpha",
    "seq_aux", "quantization_config", "pretraining_tp", "original_max_position_embeddings",
    "query_pre_attn_scalar", "attn_logit_softcapping", "cache_implementation", "final_logit_softcapping",
    "routed_scaling_factor", "scoring_func", "topk_method", "norm_topk_prob", "ep_size",
    "n_group", "topk_group", "num_nextn_predict_layers", "use_sliding_window", "max_window_layers",
    "rope_local_base_freq", "partial_rotary_factor", "bos_token", "eos_token", "tie_word_embeddings",
    "use_bidirectional_attention", "num_experts", "moe_intermediate_size", "decoder_sparse_step",
    "mlp_only_layers", "num_experts_per_tok", "num_local_experts", "n_routed_experts",
    "n_shared_experts", "first_k_dense_replace", "moe_layer_freq", "q_lora_rank", "kv_lora_rank",
    "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "sliding_window", "sliding_window_pattern",
    "layer_types", "head_dim", "num_key_value_heads", "mlp_bias", "attention_bias",
    "max_position_embeddings", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
    "num_attention_heads", "qkv_bias", "text_config", "vision_config", "mm_tokens_per_image",
    "boi_token_index", "eoi_token_index", "image_token_index", "initializer_factor",
    "attn_temperature_tuning", "floor_scale", "attn_scale", "intermediate_size_mlp", "interleave_moe_layer_step",
    "moe_layers", "use_qk_norm", "no_rope_layers", "no_rope_layer_interval", "attention_chunk_size",
    "swiglu_limit", "initial_context_length",
})
# Keys that only some families use: the family parser marks what it reads (``_HF.used``) and the
# rest of the file, minus HF_IRRELEVANT_KEYS, is reported. HF_IRRELEVANT_KEYS lists the family keys
# too so that a key known to one family is not reported as unknown when another family's file has it
# (e.g. Mistral's "sliding_window": null); family parsers still check the values they read.


class _HF:
    """One config.json being read: typed getters that record which keys were used."""

    def __init__(self, d: dict, where: str = "config.json") -> None:
        self.d, self.where, self.used = d, where, set()

    def int(self, key: str, default: Any = ..., minimum: int = 1) -> Any:
        self.used.add(key)
        if key in self.d and self.d[key] is None and default is not ...:
            return default
        return get_int(self.d, key, self.where, default=default, minimum=minimum)

    def bool(self, key: str, default: bool) -> bool:
        self.used.add(key)
        if self.d.get(key) is None:
            return default
        return get_bool(self.d, key, self.where)

    def float(self, key: str, default: float = 0.0) -> float:
        self.used.add(key)
        v = self.d.get(key)
        if v is None:
            return default
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v in (float("inf"), float("-inf")):
            raise ConfigError(f"{self.where} {key} = {str(v)[:60]!r} must be a finite number")
        return float(v)

    def act(self, key: str, allowed: tuple) -> str:
        self.used.add(key)
        v = self.d.get(key)
        if v is not None and v not in allowed:
            raise ConfigError(f"{self.where} {key} = {str(v)[:60]!r}: only {', '.join(allowed)} is modeled "
                              f"for this architecture")
        return v


def _hf_common(c: _HF, *, mlp: str = "swiglu", tied_default: bool = False) -> dict:
    """Fields every supported family shares: RoPE, RMSNorm, a gated MLP (3 GEMMs), no dropout
    unless attention_dropout > 0."""
    heads = c.int("num_attention_heads")
    dropout = c.float("attention_dropout")
    return dict(
        layers=c.int("num_hidden_layers"), hidden=c.int("hidden_size"), heads=heads,
        kv_heads=c.int("num_key_value_heads", heads), head_dim=c.int("head_dim", None),
        ffn=c.int("intermediate_size"), vocab=c.int("vocab_size"), mlp=mlp, norm="rmsnorm",
        position="rope", max_seq=c.int("max_position_embeddings", None),
        tied_embeddings=c.bool("tie_word_embeddings", tied_default), bias=c.bool("mlp_bias", False),
        qkv_bias=c.bool("attention_bias", False), dropout=dropout > 0)


def _hf_window(c: _HF, kw: dict, *, every: int = 0) -> None:
    """Sliding-window attention on all layers (Mistral 7B v0.1, Phi-3) or on all but every
    ``every``-th layer (Gemma 2/3); ``layer_types`` (newer configs) is read when present."""
    w = c.int("sliding_window", 0, minimum=0)
    # HF: one of "full_attention" / "sliding_attention" per layer
    types = _layer_list(c, "layer_types", kw["layers"], ("full_attention", "sliding_attention"), empty_is_unset=False)
    if types is not None and "sliding_attention" in types and not w:
        raise ConfigError(f"{c.where} layer_types has sliding_attention layers but sliding_window is "
                          f"{c.d.get('sliding_window')!r}; set the window size or make every layer full_attention")
    if not w:
        return
    kw["sliding_window"] = w
    if isinstance(types, list) and types:
        glob = [i for i, t in enumerate(types) if t == "full_attention"]
        every = 0                                  # no full-attention layer: every layer is local
        if glob:
            k = glob[0] + 1
            if [i for i in range(len(types)) if (i + 1) % k == 0] != glob:
                raise ConfigError(f"{c.where} layer_types: full-attention layers {glob[:8]} are not every k-th "
                                  f"layer; only periodic patterns are modeled")
            every = k
    elif "sliding_window_pattern" in c.d:
        every = c.int("sliding_window_pattern")
    kw["global_attention_every"] = every


def _hf_llama(c: _HF) -> dict:
    kw = _hf_common(c)
    c.act("hidden_act", ("silu",))
    return kw


def _hf_mistral(c: _HF) -> dict:
    kw = _hf_llama(c)
    _hf_window(c, kw)
    return kw


def _hf_mixtral(c: _HF) -> dict:
    kw = _hf_mistral(c)
    kw.update(experts=c.int("num_local_experts"), top_k=c.int("num_experts_per_tok"), expert_ffn=kw["ffn"])
    return kw


def _hf_gpt_oss(c: _HF) -> dict:
    """GPT-OSS (OpenAI gpt-oss model card, arXiv:2508.10925, Section 2.1; HF modeling_gpt_oss.py): banded
    128-token windows on alternate layers (layer_types), every linear layer with a bias (attention,
    experts, router), MoE in every layer. The per-head attention-sink logits (``sinks``, one scalar per
    head: one more softmax column) hold 64 parameters a layer and no GEMM work: not modeled."""
    kw = _hf_common(c)
    c.act("hidden_act", ("silu",))
    _hf_window(c, kw)
    top_k = c.int("num_experts_per_tok", None)
    top_k = c.int("experts_per_token") if top_k is None else top_k
    c.used.add("experts_per_token")
    kw.update(experts=c.int("num_local_experts"), top_k=top_k, expert_ffn=kw["ffn"], bias=True)
    return kw


def _hf_qwen(c: _HF, **fields) -> dict:
    """Qwen2/Qwen3: Llama's fields plus ``fields``; Qwen's per-layer window is refused, not ignored."""
    kw = {**_hf_llama(c), **fields}
    if c.bool("use_sliding_window", False):
        raise ConfigError(f"{c.where} use_sliding_window = true: Qwen's per-layer window (max_window_layers) is "
                          f"not modeled; set it false (the released Qwen2/Qwen3 checkpoints do)")
    return kw


def _hf_qwen2(c: _HF) -> dict:
    return _hf_qwen(c, qkv_bias=True)   # Qwen2 q/k/v projections carry biases (HF Qwen2Attention bias=True)


def _hf_qwen3(c: _HF) -> dict:
    return _hf_qwen(c, qk_norm=True)    # HF Qwen3Attention q_norm / k_norm (RMSNorm over head_dim)


def _hf_qwen3_moe(c: _HF) -> dict:
    kw = _hf_qwen3(c)
    E = c.int("num_experts")
    step = c.int("decoder_sparse_step", 1)
    dense = c.d.get("mlp_only_layers") or []
    c.used.add("mlp_only_layers")
    if not isinstance(dense, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in dense):
        raise ConfigError(f"{c.where} mlp_only_layers = {str(dense)[:60]} must be a list of layer indices")
    out = [i for i in dense if not 0 <= i < kw["layers"]]
    if out:
        raise ConfigError(f"{c.where} mlp_only_layers has {brief(out)}: layer indices must be in 0..{kw['layers'] - 1} "
                          f"(num_hidden_layers = {kw['layers']})")
    # HF Qwen3MoeDecoderLayer: MoE when layer not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0
    moe = tuple(i for i in range(kw["layers"]) if i not in dense and (i + 1) % step == 0)
    kw.update(experts=E, top_k=c.int("num_experts_per_tok"), expert_ffn=c.int("moe_intermediate_size"),
              moe_layers="all" if len(moe) == kw["layers"] else moe)
    return kw


def _hf_phi3(c: _HF) -> dict:
    kw = _hf_common(c)   # Phi-3 fuses qkv and gate_up; the parameter count is Llama's
    c.act("hidden_act", ("silu",))
    _hf_window(c, kw)
    return kw


def _hf_gemma2(c: _HF, *, every: int = 2) -> dict:
    # Gemma 2 report (arXiv:2408.00118) Section 2: GeGLU, RMSNorm pre+post (sandwich), tied embeddings,
    # local sliding window 4096 alternating with global attention, logit soft-capping.
    kw = _hf_common(c, mlp="geglu", tied_default=True)
    c.act("hidden_activation", ("gelu_pytorch_tanh", "gelu"))
    kw["sandwich_norm"] = True
    _hf_window(c, kw, every=every)
    kw["logit_softcap"] = c.float("final_logit_softcapping")
    return kw


#: What transformers' Gemma3TextConfig fills in for keys a config.json leaves out (the released
#: google/gemma-3-*-it files omit e.g. vocab_size and num_attention_heads from text_config):
#: huggingface/transformers src/transformers/models/gemma3/configuration_gemma3.py,
#: Gemma3TextConfig.__init__ defaults (commit 008f5c8c).
GEMMA3_TEXT_DEFAULTS = {"vocab_size": 262_208, "hidden_size": 2304, "intermediate_size": 9216,
                        "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                        "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 131_072,
                        "tie_word_embeddings": True, "attention_dropout": 0.0, "sliding_window": 4096,
                        "sliding_window_pattern": 6}


def _hf_gemma3(c: _HF) -> dict:
    # Gemma 3 report (arXiv:2503.19786) Section 2: 5 local (window 1024) : 1 global layers, QK-norm
    # replacing soft-capping; HF Gemma3 config sliding_window_pattern = 6.
    for k, v in GEMMA3_TEXT_DEFAULTS.items():
        if c.d.get(k) is None and not (k == "sliding_window_pattern" and "layer_types" in c.d):
            c.d[k] = v
    kw = _hf_gemma2(c, every=6)
    kw["qk_norm"] = True
    return kw


def _hf_deepseek(c: _HF) -> dict:
    # DeepSeek-V3 report (arXiv:2412.19437) Section 2 / 4.2 and HF DeepseekV3 config: MLA, DeepSeekMoE
    # with 1 shared + 256 routed experts (top-8), first 3 layers dense, 1 MTP module.
    kw = _hf_common(c)
    c.act("hidden_act", ("silu",))
    layers = kw["layers"]
    first_dense = c.int("first_k_dense_replace", 0, minimum=0)
    freq = c.int("moe_layer_freq", 1)
    E = c.int("n_routed_experts", 0, minimum=0)
    moe = tuple(i for i in range(first_dense, layers) if i % freq == 0) if E else ()
    nope = c.int("qk_nope_head_dim")
    rope = c.int("qk_rope_head_dim")
    kw.update(attention="mla", q_lora_rank=c.int("q_lora_rank", 0, minimum=0), kv_lora_rank=c.int("kv_lora_rank"),
              qk_rope_head_dim=rope, head_dim=nope + rope, v_head_dim=c.int("v_head_dim"),
              kv_heads=kw["heads"], mtp_layers=c.int("num_nextn_predict_layers", 0, minimum=0))
    if E:
        kw.update(experts=E, top_k=c.int("num_experts_per_tok"), expert_ffn=c.int("moe_intermediate_size"),
                  shared_experts=c.int("n_shared_experts", 0, minimum=0),
                  moe_layers="all" if len(moe) == layers else moe,
                  router_bias=c.d.get("topk_method") == "noaux_tc")
    return kw


#: Llama4TextConfig defaults a released text_config may rely on: huggingface/transformers
#: src/transformers/models/llama4/configuration_llama4.py, Llama4TextConfig (Llama 4 Scout's shapes)
LLAMA4_TEXT_DEFAULTS = {"vocab_size": 202_048, "hidden_size": 5120, "intermediate_size": 8192,
                        "intermediate_size_mlp": 16_384, "num_hidden_layers": 48, "num_attention_heads": 40,
                        "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 131_072,
                        "num_experts_per_tok": 1, "num_local_experts": 16, "interleave_moe_layer_step": 1,
                        "use_qk_norm": True, "no_rope_layer_interval": 4, "attention_chunk_size": 8192}


def _layer_list(c: _HF, key: str, layers: int, kinds: tuple, empty_is_unset: bool = True) -> list | None:
    """A per-layer list of ``kinds`` values (None when absent, or empty with ``empty_is_unset``, as
    transformers reads Llama 4's ``no_rope_layers``), checked for its values and its length."""
    v = c.d.get(key)
    c.used.add(key)
    if v is None or (empty_is_unset and v == []):
        return None
    if not isinstance(v, list) or not all(not isinstance(x, bool) and x in kinds for x in v):
        bad = next((x for x in v if isinstance(x, bool) or x not in kinds), None) if isinstance(v, list) else v
        hint = did_you_mean(bad, [k for k in kinds if isinstance(k, str)]) if isinstance(bad, str) else ""
        raise ConfigError(f"{c.where} {key} = {brief(v)} must be a list with one of {', '.join(map(str, kinds))} "
                          f"per layer ({brief(bad)} is not){hint}")
    if len(v) != layers:
        raise ConfigError(f"{c.where} {key} has {len(v)} entries but num_hidden_layers = {layers}; give one per layer")
    return v


def _hf_llama4(c: _HF) -> dict:
    """Llama 4 text model (transformers models/llama4: Llama4TextConfig, Llama4TextDecoderLayer): MoE
    layers ``moe_layers`` (default every ``interleave_moe_layer_step``-th, (i+1) % step == 0) with
    ``num_local_experts`` routed experts of ``intermediate_size``, top-``num_experts_per_tok``, and one
    shared expert of the same width (Llama4TextMoe.shared_expert); dense layers an MLP of
    ``intermediate_size_mlp``. Chunked attention (iRoPE) in blocks of ``attention_chunk_size`` on the
    RoPE layers, full attention on the NoPE ones: ``no_rope_layers`` (1 = RoPE) or ``layer_types``
    (chunked_attention / full_attention), default every ``no_rope_layer_interval``-th layer global at
    (i+1) % k == 0. ``use_qk_norm`` is a weightless L2 norm (Llama4TextL2Norm): costed as qk_norm,
    whose 2 x head_dim weights per layer it does not have (256 parameters a layer)."""
    for k, v in LLAMA4_TEXT_DEFAULTS.items():
        if k not in c.d:
            c.d[k] = v
    kw = _hf_common(c)
    c.act("hidden_act", ("silu",))
    layers = kw["layers"]
    E = c.int("num_local_experts", 0, minimum=0)
    step = c.int("interleave_moe_layer_step", 1)
    moe = c.d.get("moe_layers")
    c.used.add("moe_layers")
    if moe is None:
        moe = list(range(step - 1, layers, step))
    elif not isinstance(moe, list) or any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < layers
                                          for i in moe):
        raise ConfigError(f"{c.where} moe_layers = {brief(moe)} must be a list of layer indices in 0..{layers - 1}")
    dense_ffn = c.int("intermediate_size_mlp")
    if E and moe:
        kw.update(experts=E, top_k=c.int("num_experts_per_tok"), expert_ffn=kw["ffn"], shared_experts=1,
                  moe_layers="all" if sorted(set(moe)) == list(range(layers)) else tuple(sorted(set(moe))))
    kw["ffn"] = dense_ffn
    kw["qk_norm"] = c.bool("use_qk_norm", True)
    chunk = c.int("attention_chunk_size", 0, minimum=0)
    rope = _layer_list(c, "no_rope_layers", layers, (0, 1))
    types = _layer_list(c, "layer_types", layers, ("chunked_attention", "full_attention"))
    if types is not None:
        glob = [i for i, t in enumerate(types) if t == "full_attention"]
    elif rope is not None:
        glob = [i for i, r in enumerate(rope) if r == 0]
    else:
        k = c.int("no_rope_layer_interval")
        glob = [i for i in range(layers) if (i + 1) % k == 0]
    if not chunk or len(glob) == layers:
        return kw   # no chunk size, or every layer global: plain causal attention
    kw["attention_chunk"] = chunk
    if glob:
        k = glob[1] - glob[0] if len(glob) > 1 else glob[0] + 1
        if [i for i in range(glob[0], layers) if (i - glob[0]) % k == 0] != glob:
            raise ConfigError(f"{c.where}: full-attention (NoPE) layers {glob[:8]} are not every k-th layer; only "
                              f"periodic patterns are modeled")
        kw["global_attention_every"] = k
        if glob[0] != k - 1:
            kw["global_attention_start"] = glob[0]
    return kw


#: architectures name -> parser of its config.json fields (one function per family)
HF_ARCHITECTURES = {
    "LlamaForCausalLM": _hf_llama,
    "MistralForCausalLM": _hf_mistral,
    "MixtralForCausalLM": _hf_mixtral,
    "Qwen2ForCausalLM": _hf_qwen2,
    "Qwen3ForCausalLM": _hf_qwen3,
    "Qwen3MoeForCausalLM": _hf_qwen3_moe,
    "Phi3ForCausalLM": _hf_phi3,
    "Gemma2ForCausalLM": _hf_gemma2,
    "Gemma3ForCausalLM": _hf_gemma3,
    "Gemma3ForConditionalGeneration": _hf_gemma3,
    "DeepseekV2ForCausalLM": _hf_deepseek,
    "DeepseekV3ForCausalLM": _hf_deepseek,
    "Llama4ForCausalLM": _hf_llama4,
    "GptOssForCausalLM": _hf_gpt_oss,
    "Llama4ForConditionalGeneration": _hf_llama4,
}
_HF_MODEL_TYPES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "mixtral": "MixtralForCausalLM",
                   "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM",
                   "phi3": "Phi3ForCausalLM", "gemma2": "Gemma2ForCausalLM", "gemma3_text": "Gemma3ForCausalLM",
                   "gemma3": "Gemma3ForConditionalGeneration", "deepseek_v2": "DeepseekV2ForCausalLM",
                   "deepseek_v3": "DeepseekV3ForCausalLM", "llama4_text": "Llama4ForCausalLM",
                   "llama4": "Llama4ForConditionalGeneration", "gpt_oss": "GptOssForCausalLM"}


def load_hf_config(path_or_dict: Any, name: str | None = None, *, unused: list | None = None) -> ModelSpec:
    """Build a ModelSpec from a Hugging Face ``config.json`` (file, its directory, or dict).

    Supported architectures: the keys of :data:`HF_ARCHITECTURES` (Llama, Mistral, Mixtral, Qwen2,
    Qwen3, Qwen3-MoE, Phi-3, Gemma 2, Gemma 3, DeepSeek-V2/V3, Llama 4), found by ``architectures`` or
    ``model_type``. A multimodal Gemma 3 or Llama 4 file is read from its ``text_config`` (the vision tower is
    not modeled and is reported in ``unused``). Keys in :data:`HF_IRRELEVANT_KEYS` do not change time
    or memory; any other key the family does not read is appended to ``unused`` (when a list is
    given) - unless it is a near-miss of a key the family reads, which is an error with a suggestion.
    Llama's ``attention_bias`` maps to qkv_bias (its o_proj bias, h params per layer, is not represented).

    >>> m = load_hf_config({"architectures": ["Qwen3ForCausalLM"], "num_hidden_layers": 36, "hidden_size": 4096,
    ...     "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 12288,
    ...     "vocab_size": 151936, "tie_word_embeddings": False})
    >>> round(m.param_count() / 1e9, 2)   # Qwen3-8B: 8.19B
    8.19
    """
    if not isinstance(path_or_dict, dict) and Path(path_or_dict).is_dir():
        path_or_dict = Path(path_or_dict) / "config.json"
    d = load_mapping(path_or_dict, "Hugging Face config")
    archs = d.get("architectures") or []
    if isinstance(archs, str):
        archs = [archs]
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise ConfigError(f"config.json architectures = {brief(archs)} must be a list of class names such as "
                          f"['LlamaForCausalLM']")
    arch = next((a for a in archs if a in HF_ARCHITECTURES), None) or _HF_MODEL_TYPES.get(d.get("model_type"))
    if arch is None:
        got = archs[0] if archs else d.get("model_type")
        raise ConfigError(f"Hugging Face config architectures = {brief(got)} is not supported"
                          f"{did_you_mean(str(got), HF_ARCHITECTURES)}; supported: {', '.join(HF_ARCHITECTURES)}")
    extra: list = []
    if isinstance(d.get("text_config"), dict):   # multimodal wrapper (Gemma3ForConditionalGeneration)
        if d.get("vision_config") is not None:
            extra.append("vision_config (vision tower not modeled)")
        top_name = d.get("_name_or_path")
        d = dict(d["text_config"])
        d.setdefault("_name_or_path", top_name)
    c = _HF(d, "config.json" if isinstance(path_or_dict, dict) else Path(path_or_dict).name)
    kw = HF_ARCHITECTURES[arch](c)
    kw["name"] = name or d.get("_name_or_path") or arch
    spec = ModelSpec(**kw)
    reads = sorted(c.used)
    for key in d:
        if key in c.used or key in HF_IRRELEVANT_KEYS:
            continue
        close = did_you_mean(key, reads)
        if close:
            raise ConfigError(f"config.json key {key[:60]!r} is not a {arch} field{close}; fix its name")
        extra.append(key[:60])
    if unused is not None:
        unused.extend(extra)
    return spec
