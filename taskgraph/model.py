"""Model specifications: the architecture of a decoder-only transformer, presets and loaders.

A :class:`ModelSpec` holds only architecture (no parallelism, no batch). Parameter counts follow
the standard decomposition of Narayanan 2021 Section 5.1 / eq. 2 (``12 l h^2 (1 + 13/(12h) +
(V+s)/(12 l h))`` for GPT), generalised per component so GQA, SwiGLU, RMSNorm, MoE and untied
heads fall out of the same sums.

Presets live in :data:`PRESETS`; ``get_model(name)`` looks one up. ``load_model_yaml`` reads the
same fields from YAML/JSON (optionally on top of a ``preset``), ``load_hf_config`` reads a Hugging
Face ``config.json`` (Llama, Mistral, Mixtral, Qwen2) without needing ``transformers``.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

from strategies.config import check_keys, did_you_mean, get_bool, get_int, get_str, load_mapping
from strategies.errors import ConfigError, brief
from strategies.limits import MAX_DIM, MAX_LAYERS

MLP_KINDS = ("gelu", "swiglu")          # gelu: up + down (2 GEMMs); swiglu: gate + up + down (3 GEMMs)
NORM_KINDS = ("layernorm", "rmsnorm")   # layernorm: weight + bias (2h); rmsnorm: weight only (h)
POSITION_KINDS = ("learned", "rope", "alibi")  # only "learned" has parameters (max_seq x h)

MoeLayers = Union[str, int, tuple]


def _divisors(n: int) -> list[int]:
    """Divisors for an error message: bounded work and length (``strategies.config.divisors``)."""
    from strategies.config import divisors
    return divisors(n)


@dataclass(frozen=True)
class ParamCounts:
    """Parameter counts of a model, by component (numbers of parameters, not bytes)."""

    embedding: int
    """Word embeddings (vocab x hidden) + learned position embeddings + embedding norm (BLOOM)."""
    layers: tuple
    """Parameters of each decoder layer, in layer order (MoE layers count all or active experts)."""
    final_norm: int
    """The norm after the last layer."""
    lm_head: int
    """Output projection (hidden x vocab); 0 when tied to the word embeddings."""

    @property
    def total(self) -> int:
        """Sum of all components."""
        return self.embedding + sum(self.layers) + self.final_norm + self.lm_head


@dataclass(frozen=True)
class ModelSpec:
    """Architecture of a decoder-only transformer (Megatron GPT / Llama family).

    ``None`` defaults are resolved in ``__post_init__``: kv_heads -> heads, head_dim ->
    hidden/heads, ffn -> 4*hidden, qkv_bias -> bias, expert_ffn -> ffn.
    """

    name: str
    """Display name."""
    layers: int
    """Number of decoder layers (l)."""
    hidden: int
    """Model width h (residual stream features)."""
    heads: int
    """Number of query attention heads (a)."""
    vocab: int
    """Vocabulary size V (as trained, i.e. including any padding)."""
    kv_heads: int | None = None
    """Number of key/value heads (GQA groups, Ainslie 2023); == heads for MHA, 1 for MQA."""
    head_dim: int | None = None
    """Features per attention head d; defaults to hidden/heads."""
    ffn: int | None = None
    """MLP intermediate size f of dense layers; defaults to 4*hidden."""
    mlp: str = "gelu"
    """'gelu': 2 GEMMs h->f->h; 'swiglu': gated, 3 GEMMs (gate, up, down; Shazeer 2020)."""
    tied_embeddings: bool = True
    """The LM head reuses the word-embedding matrix (no separate lm_head parameters)."""
    norm: str = "layernorm"
    """'layernorm' (weight+bias) or 'rmsnorm' (weight only, Zhang & Sennrich 2019)."""
    position: str = "learned"
    """'learned' absolute position embeddings (max_seq x h params), 'rope' or 'alibi' (no params)."""
    max_seq: int = 2048
    """Longest sequence the model supports (size of the learned position table), tokens."""
    bias: bool = True
    """Linear layers (attention output projection, MLP) carry biases."""
    qkv_bias: bool | None = None
    """The QKV projection carries a bias; defaults to ``bias`` (Qwen2: True with bias=False)."""
    embedding_norm: bool = False
    """A norm right after the word embeddings (BLOOM's word_embeddings_layernorm)."""
    dropout: bool = True
    """Training uses dropout (stores 1-byte masks: Korthikanti 2022 Section 4.1)."""
    experts: int = 0
    """Routed experts per MoE layer; 0 = dense model."""
    top_k: int = 0
    """Experts each token is routed to (Mixtral: 2)."""
    expert_ffn: int | None = None
    """Intermediate size of each expert MLP; defaults to ffn."""
    shared_experts: int = 0
    """Always-active experts per MoE layer (DeepSeekMoE), each of size expert_ffn."""
    moe_layers: MoeLayers = "all"
    """Which layers are MoE: 'all', an int k (layer i is MoE when i % k == 0, Megatron-core
    moe_layer_freq), or a tuple of 0-based layer indices."""

    def __post_init__(self) -> None:
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731 - frozen dataclass
        w = f"model {brief(self.name)}:"
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"model.name = {brief(self.name)} must be a non-empty string")
        for f in ("layers", "hidden", "heads", "vocab", "max_seq"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"{w} model.{f} = {brief(v)} must be a positive integer")
        if self.layers > MAX_LAYERS:
            raise ConfigError(f"{w} model.layers = {self.layers} is over the limit of {MAX_LAYERS:,} layers "
                              f"(docs/strategy-file.md, Limits); is it the right value?")
        for f in ("hidden", "heads", "vocab", "kv_heads", "head_dim", "ffn", "expert_ffn", "experts", "top_k",
                  "shared_experts", "max_seq"):
            v = getattr(self, f)
            if isinstance(v, int) and not isinstance(v, bool) and v > MAX_DIM:
                raise ConfigError(f"{w} model.{f} = {v} is over the limit of {MAX_DIM:,} (2^24; docs/strategy-file.md, "
                                  f"Limits); is it the right value?")
        for f, choices in (("mlp", MLP_KINDS), ("norm", NORM_KINDS), ("position", POSITION_KINDS)):
            v = getattr(self, f)
            if v not in choices:
                raise ConfigError(f"{w} model.{f} = {brief(v)} is not one of {', '.join(choices)}"
                                  f"{did_you_mean(v, choices)}")
        if self.kv_heads is None:
            set_("kv_heads", self.heads)
        if isinstance(self.kv_heads, bool) or not isinstance(self.kv_heads, int):
            raise ConfigError(f"{w} model.kv_heads = {brief(self.kv_heads)} must be a positive integer")
        if self.kv_heads < 1 or self.heads % self.kv_heads:
            raise ConfigError(f"{w} model.heads={self.heads} is not divisible by model.kv_heads="
                              f"{self.kv_heads}; choose kv_heads in {_divisors(self.heads)}")
        if self.head_dim is None:
            if self.hidden % self.heads:
                raise ConfigError(f"{w} model.hidden={self.hidden} is not divisible by model.heads="
                                  f"{self.heads}; set model.head_dim explicitly or choose heads in "
                                  f"{_divisors(self.hidden)[:12]}")
            set_("head_dim", self.hidden // self.heads)
        if self.ffn is None:
            set_("ffn", 4 * self.hidden)
        if self.qkv_bias is None:
            set_("qkv_bias", self.bias)
        if self.expert_ffn is None:
            set_("expert_ffn", self.ffn)
        for f in ("head_dim", "ffn", "expert_ffn"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"{w} model.{f} = {brief(v)} must be a positive integer")
        for f in ("experts", "top_k", "shared_experts"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ConfigError(f"{w} model.{f} = {brief(v)} must be a non-negative integer")
        if self.experts and not 1 <= self.top_k <= self.experts:
            raise ConfigError(f"{w} model.top_k = {self.top_k} must be in 1..{self.experts} "
                              f"(model.experts) for an MoE model")
        if not self.experts and (self.top_k or self.shared_experts):
            raise ConfigError(f"{w} model.top_k/shared_experts are set but model.experts = 0; "
                              f"set experts > 0 or drop them")
        ml = self.moe_layers
        if isinstance(ml, list):
            ml = tuple(ml)
            set_("moe_layers", ml)
        if isinstance(ml, str):
            if ml != "all":
                raise ConfigError(f"{w} model.moe_layers = {brief(ml)}: use 'all', an integer k (every "
                                  f"k-th layer) or a list of layer indices")
        elif isinstance(ml, int) and not isinstance(ml, bool):
            if ml < 1:
                raise ConfigError(f"{w} model.moe_layers = {ml} must be >= 1 (every k-th layer)")
        elif isinstance(ml, tuple):
            bad = [i for i in ml if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < self.layers]
            if bad:
                raise ConfigError(f"{w} model.moe_layers has {brief(bad)}: indices must be integers in "
                                  f"0..{self.layers - 1}")
        else:
            raise ConfigError(f"{w} model.moe_layers = {brief(ml)}: use 'all', an integer or a list")

    # ---------------------------------------------------------------- structure
    @property
    def is_moe(self) -> bool:
        """True when some layers have routed experts."""
        return self.experts > 0

    def is_moe_layer(self, i: int) -> bool:
        """Whether 0-based layer ``i`` is an MoE layer."""
        if not self.experts:
            return False
        ml = self.moe_layers
        if ml == "all":
            return True
        if isinstance(ml, int):
            return i % ml == 0  # Megatron-core moe_layer_freq convention
        return i in ml

    def moe_layer_indices(self) -> tuple:
        """0-based indices of the MoE layers."""
        return tuple(i for i in range(self.layers) if self.is_moe_layer(i))

    # ---------------------------------------------------------------- parameters
    def norm_params(self) -> int:
        """Parameters of one norm: 2h for LayerNorm (gain+bias), h for RMSNorm."""
        return (2 if self.norm == "layernorm" else 1) * self.hidden

    def qkv_params(self) -> int:
        """Fused QKV projection: h x (a + 2 g) d weights (+ bias). GQA: Ainslie 2023."""
        out = (self.heads + 2 * self.kv_heads) * self.head_dim
        return self.hidden * out + (out if self.qkv_bias else 0)

    def attn_out_params(self) -> int:
        """Attention output projection: (a d) x h (+ bias h)."""
        return self.heads * self.head_dim * self.hidden + (self.hidden if self.bias else 0)

    def mlp_params(self, ffn: int | None = None) -> int:
        """One MLP (or one expert) of intermediate size ``ffn``: 2 or 3 (SwiGLU) h x f matrices."""
        f = self.ffn if ffn is None else ffn
        mats = 3 if self.mlp == "swiglu" else 2
        bias = ((mats - 1) * f + self.hidden) if self.bias else 0
        return mats * self.hidden * f + bias

    def router_params(self) -> int:
        """MoE router: h x E, no bias (Fedus 2021 Switch / Jiang 2024 Mixtral)."""
        return self.hidden * self.experts

    def layer_params(self, i: int = 0, *, active: bool = False) -> int:
        """Parameters of layer ``i``; ``active`` counts only top_k routed experts (MoE)."""
        attn = self.qkv_params() + self.attn_out_params()
        norms = 2 * self.norm_params()
        if not self.is_moe_layer(i):
            return attn + norms + self.mlp_params()
        routed = self.top_k if active else self.experts
        experts = (routed + self.shared_experts) * self.mlp_params(self.expert_ffn)
        return attn + norms + self.router_params() + experts

    def param_breakdown(self, *, active: bool = False) -> ParamCounts:
        """Parameter counts by component (Narayanan 2021 Section 5.1 decomposition)."""
        emb = self.vocab * self.hidden
        if self.position == "learned":
            emb += self.max_seq * self.hidden
        if self.embedding_norm:
            emb += self.norm_params()
        return ParamCounts(
            embedding=emb,
            layers=tuple(self.layer_params(i, active=active) for i in range(self.layers)),
            final_norm=self.norm_params(),
            lm_head=0 if self.tied_embeddings else self.vocab * self.hidden,
        )

    def param_count(self) -> int:
        """Total number of parameters (all experts counted)."""
        return self.param_breakdown().total

    def active_param_count(self) -> int:
        """Parameters touched per token: only top_k routed (+ shared) experts; == total if dense."""
        return self.param_breakdown(active=True).total


# -------------------------------------------------------------------- presets
def _gpt(name: str, layers: int, hidden: int, heads: int, vocab: int = 51200, max_seq: int = 2048,
         **kw: Any) -> ModelSpec:
    """GPT-2/3 style (Megatron GPT): learned positions, LayerNorm, biases, GELU 4h, tied head."""
    return ModelSpec(name=name, layers=layers, hidden=hidden, heads=heads, vocab=vocab,
                     max_seq=max_seq, **kw)


def _llama(name: str, layers: int, hidden: int, heads: int, kv_heads: int, ffn: int, vocab: int,
           max_seq: int, **kw: Any) -> ModelSpec:
    """Llama style: RoPE, RMSNorm, SwiGLU, no biases, untied head, no dropout."""
    return ModelSpec(name=name, layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads,
                     ffn=ffn, vocab=vocab, max_seq=max_seq, mlp="swiglu", norm="rmsnorm",
                     position="rope", bias=False, tied_embeddings=False, dropout=False, **kw)


gpt_style = _gpt  # public alias: build GPT-2-style models ad hoc (e.g. the zero-bubble paper's)

#: Published sizes the presets reproduce (tests check within 1%); source in each comment.
PUBLISHED_PARAMS = {
    "gpt3-175b": 174.6e9,    # Narayanan 2021 Table 1 / Brown 2020 Table 2.1 ("175.0B" nominal)
    "k22-22b": 22e9,         # Korthikanti 2022 Table 3 (nominal 22B)
    "k22-175b": 174.6e9,     # Korthikanti 2022 Table 3 (GPT-3 config; 174.6B exact)
    "k22-530b": 529.6e9,     # Narayanan 2021 Table 1 (same shape as Korthikanti's 530B MT-NLG)
    "k22-1t": 1008.0e9,      # Narayanan 2021 Table 1 (same shape as Korthikanti's 1T)
    "llama2-70b": 68.98e9,   # HF meta-llama/Llama-2-70b-hf safetensors total (68,976,648,192)
    "llama3-8b": 8.03e9,     # Meta Llama 3 model card / HF safetensors (8,030,261,248)
    "llama3-70b": 70.55e9,   # HF meta-llama/Meta-Llama-3-70B safetensors (70,553,706,496)
    "llama3-405b": 405.8e9,  # Dubey 2024 (Llama 3 herd) Table 3 ("405B"), HF total 405.85B
    "mixtral-8x7b": 46.7e9,  # Jiang 2024 (Mixtral) Section 2: 46.7B total, 12.9B active
    "bloom-176b": 176.2e9,   # BigScience 2022 (BLOOM) Table 3 / HF bigscience/bloom (176,247,271,424)
}
PUBLISHED_ACTIVE_PARAMS = {"mixtral-8x7b": 12.9e9}  # Jiang 2024 Section 2

PRESETS: dict[str, ModelSpec] = {
    # Brown 2020 Table 2.1: 96 layers, d_model 12288, 96 heads, n_ctx 2048, GPT-2 BPE vocab 50257.
    "gpt3-175b": _gpt("gpt3-175b", 96, 12288, 96, vocab=50257),
    # Korthikanti 2022 Table 3 (heads/hidden/layers); vocab 51200 (padded), seq 2048, GELU 4h.
    "k22-22b": _gpt("k22-22b", 48, 6144, 64),
    "k22-175b": _gpt("k22-175b", 96, 12288, 96),
    "k22-530b": _gpt("k22-530b", 105, 20480, 128),
    "k22-1t": _gpt("k22-1t", 128, 25600, 160),
    # Touvron 2023 (Llama 2) Table 1 + HF config.json: GQA 8 kv heads, ffn 28672, vocab 32000.
    "llama2-70b": _llama("llama2-70b", 80, 8192, 64, 8, 28672, 32000, 4096),
    # Dubey 2024 (Llama 3 herd) Table 3 + HF config.json: vocab 128256.
    "llama3-8b": _llama("llama3-8b", 32, 4096, 32, 8, 14336, 128256, 8192),
    "llama3-70b": _llama("llama3-70b", 80, 8192, 64, 8, 28672, 128256, 8192),
    "llama3-405b": _llama("llama3-405b", 126, 16384, 128, 8, 53248, 128256, 131072),
    # Jiang 2024 (Mixtral) Table 1 + HF config.json: 8 experts, top-2, expert ffn 14336.
    "mixtral-8x7b": _llama("mixtral-8x7b", 32, 4096, 32, 8, 14336, 32000, 32768,
                           experts=8, top_k=2),
    # BigScience 2022 (BLOOM) Table 3 + HF config: vocab 250880 (padded), ALiBi (Press 2022),
    # LayerNorm + embedding LayerNorm, biases, tied head; hidden/attention dropout 0.
    "bloom-176b": ModelSpec(name="bloom-176b", layers=70, hidden=14336, heads=112, vocab=250880,
                            position="alibi", embedding_norm=True, dropout=False),
}


def get_model(name: str) -> ModelSpec:
    """The preset called ``name`` (case-insensitive)."""
    key = str(name).lower()
    if key not in PRESETS:
        raise ConfigError(f"unknown model preset {brief(name)}{did_you_mean(key, PRESETS)}; "
                          f"known presets: {', '.join(PRESETS)}")
    return PRESETS[key]


# -------------------------------------------------------------------- loaders
_FIELDS = tuple(f.name for f in dataclasses.fields(ModelSpec))
_INT_FIELDS = ("layers", "hidden", "heads", "vocab", "kv_heads", "head_dim", "ffn", "max_seq",
               "experts", "top_k", "expert_ffn", "shared_experts")
_BOOL_FIELDS = ("tied_embeddings", "bias", "qkv_bias", "embedding_norm", "dropout")


def load_model_yaml(path_or_dict: Any) -> ModelSpec:
    """Build a ModelSpec from a YAML/JSON file or dict of ModelSpec fields.

    A ``preset: <name>`` key starts from that preset and overrides the given fields. A file whose
    only top-level key is ``model`` is unwrapped.
    """
    d = load_mapping(path_or_dict, "model file")
    if set(d) == {"model"} and isinstance(d["model"], dict):
        d = d["model"]
    check_keys(d, ("preset",) + _FIELDS, "model")
    base: dict = {}
    if "preset" in d:
        base = _underived(get_model(get_str(d, "preset", "model")))
    kw: dict = {}
    for f in _INT_FIELDS:
        if f in d:
            kw[f] = None if d[f] is None else get_int(d, f, "model", minimum=0)
    for f in _BOOL_FIELDS:
        if f in d:
            kw[f] = None if d[f] is None else get_bool(d, f, "model")
    for f, choices in (("mlp", MLP_KINDS), ("norm", NORM_KINDS), ("position", POSITION_KINDS)):
        if f in d:
            kw[f] = get_str(d, f, "model", choices=choices)
    if "name" in d:
        kw["name"] = get_str(d, "name", "model")
    if "moe_layers" in d:
        kw["moe_layers"] = tuple(d["moe_layers"]) if isinstance(d["moe_layers"], list) else d["moe_layers"]
    merged = {**base, **kw}
    merged.setdefault("name", "custom")
    for f in ("layers", "hidden", "heads", "vocab"):
        if f not in merged:
            raise ConfigError(f"missing required field 'model.{f}': add it (an integer) or give a preset")
    return ModelSpec(**merged)


def _underived(spec: ModelSpec) -> dict:
    """Fields of ``spec`` with values equal to their derived default reset to None, so that
    overriding e.g. ``hidden`` on top of a preset re-derives head_dim and ffn."""
    d = dataclasses.asdict(spec)
    derived = {"kv_heads": spec.heads, "head_dim": spec.hidden // spec.heads, "ffn": 4 * spec.hidden,
               "qkv_bias": spec.bias, "expert_ffn": spec.ffn}
    for k, v in derived.items():
        if d[k] == v:
            d[k] = None
    return d


HF_ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "MixtralForCausalLM": "mixtral",
    "Qwen2ForCausalLM": "qwen2",
}


def load_hf_config(path_or_dict: Any, name: str | None = None) -> ModelSpec:
    """Build a ModelSpec from a Hugging Face ``config.json`` (file, its directory, or dict).

    Supported: LlamaForCausalLM, MistralForCausalLM, MixtralForCausalLM, Qwen2ForCausalLM; all
    are RoPE + RMSNorm + gated MLP (3 GEMMs). Keys not affecting cost (rope_theta, rms_norm_eps,
    sliding_window, ...) are ignored. Llama's ``attention_bias`` maps to qkv_bias (its o_proj bias,
    h params per layer, is not represented).
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
    arch = next((a for a in archs if a in HF_ARCHITECTURES), None)
    mt = d.get("model_type")
    family = HF_ARCHITECTURES.get(arch) if arch else (mt if isinstance(mt, str) else None)
    for k in ("tie_word_embeddings", "mlp_bias", "attention_bias", "head_dim"):
        if k in d and d[k] is None:
            d = {kk: vv for kk, vv in d.items() if kk != k}  # null = the architecture's default
    if family not in HF_ARCHITECTURES.values():
        got = archs[0] if archs else d.get("model_type")
        raise ConfigError(f"Hugging Face config architectures = {brief(got)} is not supported"
                          f"{did_you_mean(got, HF_ARCHITECTURES)}; supported: {', '.join(HF_ARCHITECTURES)}")
    w = "config.json"
    heads = get_int(d, "num_attention_heads", w, minimum=1)
    hidden = get_int(d, "hidden_size", w, minimum=1)
    ffn = get_int(d, "intermediate_size", w, minimum=1)
    head_dim = get_int(d, "head_dim", w, default=None, minimum=1) if d.get("head_dim") is not None else None
    dropout = d.get("attention_dropout", 0.0) or 0.0
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)):
        raise ConfigError(f"config.json attention_dropout = {brief(dropout)} must be a number (e.g. 0.0)")
    kw: dict = dict(
        name=name or (d.get("_name_or_path") if isinstance(d.get("_name_or_path"), str) else None) or arch or family,
        layers=get_int(d, "num_hidden_layers", w, minimum=1),
        hidden=hidden,
        heads=heads,
        kv_heads=get_int(d, "num_key_value_heads", w, default=heads, minimum=1),
        head_dim=head_dim,
        ffn=ffn,
        vocab=get_int(d, "vocab_size", w, minimum=1),
        mlp="swiglu",                      # all four use gated MLPs: gate, up, down
        norm="rmsnorm",
        position="rope",
        max_seq=get_int(d, "max_position_embeddings", w, default=2048, minimum=1),
        tied_embeddings=get_bool(d, "tie_word_embeddings", w, default=False),  # these configs default False
        bias=get_bool(d, "mlp_bias", w, default=False),
        qkv_bias=True if family == "qwen2" else get_bool(d, "attention_bias", w, default=False),
        dropout=float(dropout) > 0,
    )
    if family == "mixtral":
        kw.update(experts=get_int(d, "num_local_experts", w, minimum=1),
                  top_k=get_int(d, "num_experts_per_tok", w, minimum=1), expert_ffn=ffn)
    return ModelSpec(**kw)
