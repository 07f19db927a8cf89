"""Model specifications: the architecture of a decoder-only transformer, presets and loaders.

A :class:`ModelSpec` holds only architecture (no parallelism, no batch). Parameter counts follow
the standard decomposition of Narayanan 2021 Section 5.1 / eq. 2 (``12 l h^2 (1 + 13/(12h) +
(V+s)/(12 l h))`` for GPT), generalised per component so GQA, SwiGLU, RMSNorm, MoE and untied
heads fall out of the same sums.

Presets live in :data:`PRESETS`; ``get_model(name)`` looks one up. ``load_model_yaml`` reads the
same fields from YAML/JSON (optionally on top of a ``preset``); :mod:`taskgraph.hf_config` reads a
Hugging Face ``config.json`` into the same spec (the seam: architecture and presets here, the foreign
format there).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from strategies.config import check_keys, did_you_mean, get_bool, get_float, get_int, get_str, load_mapping
from strategies.errors import ConfigError, brief
from strategies.limits import MAX_DIM, MAX_LAYERS

# gelu / squared-relu: up + down (2 GEMMs); swiglu/geglu: gate + up + down (3). squared-relu is relu(x)^2
# (So et al. 2021 "Primer: Searching for Efficient Transformers", Section 3; NeMo 'squared-relu', Nemotron-4)
MLP_KINDS = ("gelu", "swiglu", "geglu", "squared-relu")
GATED_MLPS = ("swiglu", "geglu")        # Shazeer 2020 "GLU Variants Improve Transformer": SwiGLU, GEGLU
ATTENTION_KINDS = ("standard", "mla")   # mla: DeepSeek-V2 multi-head latent attention (DeepSeek-AI 2024)
NORM_KINDS = ("layernorm", "rmsnorm")   # layernorm: weight + bias (2h); rmsnorm: weight only (h)
POSITION_KINDS = ("learned", "rope", "alibi")  # only "learned" has parameters (max_seq x h)

MoeLayers = str | int | tuple


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
    mtp: int = 0
    """Multi-token-prediction modules (DeepSeek-V3 Section 2.2), NOT included in ``total``."""

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
    """'gelu' / 'squared-relu' (relu(x)^2, So 2021 "Primer"): 2 GEMMs h->f->h; 'swiglu' / 'geglu': gated,
    3 GEMMs (gate, up, down; Shazeer 2020)."""
    tied_embeddings: bool = True
    """The LM head reuses the word-embedding matrix (no separate lm_head parameters)."""
    norm: str = "layernorm"
    """'layernorm' (weight+bias) or 'rmsnorm' (weight only, Zhang & Sennrich 2019)."""
    position: str = "learned"
    """'learned' absolute position embeddings (max_seq x h params), 'rope' or 'alibi' (no params)."""
    max_seq: int | None = None
    """Longest sequence the model supports, tokens: the size of the learned position table (default
    2048 with ``position: learned``), or the trained context of a RoPE / ALiBi model
    (``max_position_embeddings``); None = not stated (no limit is checked)."""
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
    attention: str = "standard"
    """'standard' multi-head / grouped-query attention, or 'mla': DeepSeek multi-head latent
    attention (DeepSeek-V2, arXiv:2405.04434 Section 2.1): queries and keys/values go through
    low-rank latents (q_lora_rank, kv_lora_rank) plus a decoupled RoPE key shared by all heads. With
    'mla', head_dim is the query/key width per head (qk_nope + qk_rope) and v_head_dim the value width."""
    q_lora_rank: int = 0
    """MLA query latent width d_c' (DeepSeek-V3: 1536); 0 = queries projected directly from h."""
    kv_lora_rank: int = 0
    """MLA key/value latent width d_c (DeepSeek-V3: 512)."""
    qk_rope_head_dim: int = 0
    """MLA decoupled RoPE width d_h^R of queries and of the shared key (DeepSeek-V3: 64)."""
    v_head_dim: int | None = None
    """Value features per head; defaults to head_dim (MLA DeepSeek-V3: 128 with head_dim 192)."""
    qk_norm: bool = False
    """RMSNorm over head_dim on queries and keys (Qwen3, Gemma 3; Dehghani 2023 ViT-22B): 2 d params."""
    sandwich_norm: bool = False
    """Extra norms after attention and after the MLP (Gemma 2/3: pre- and post-norms, 4 per layer)."""
    sliding_window: int = 0
    """Local attention window in tokens (Gemma 2: 4096, Gemma 3: 1024, Mistral 7B v0.1: 4096); 0 = none."""
    global_attention_every: int = 0
    """With a sliding window or chunked attention, every k-th layer attends globally: layer i when
    (i+1) % k == 0 (Gemma 2: 2, Gemma 3: 6, Hugging Face Gemma2/Gemma3 modeling code; Llama 4: 4, HF
    Llama4TextConfig no_rope_layers), or from ``global_attention_start`` on; 0 = every layer is local."""
    global_attention_start: int | None = None
    """Index of the first global layer of the every-k pattern; None = k - 1 (Hugging Face's (i+1) % k).
    torchtitan's Llama 4 makes layers 0, k, 2k ... global (models/llama4 TransformerBlock:
    ``layer_id % every_n_layers_nope == 0`` uses no RoPE and the full causal mask): 0."""
    attention_chunk: int = 0
    """Chunked local attention (Llama 4 iRoPE): the sequence is cut into blocks of C tokens and each
    query attends causally within its own block only (HF Llama4TextConfig attention_chunk_size 8192;
    torchtitan llama4 fixed_attn_block_size: "the query will only attend to the tokens within the
    same block regardless how long is the sequence"); 0 = none."""
    logit_softcap: float = 0.0
    """Final-logit soft-capping c: logits <- c tanh(logits / c) (Gemma 2 report, Section 2); 0 = off.
    Attention soft-capping runs inside the fused attention kernel and costs no extra HBM traffic."""
    router_bias: bool = False
    """MoE router carries a per-expert bias (DeepSeek-V3 auxiliary-loss-free balancing, Section 2.1.2)."""
    mtp_layers: int = 0
    """Multi-token-prediction modules after the main model (DeepSeek-V3 Section 2.2: D = 1). Each has
    an h x 2h projection, two RMSNorms and one transformer layer like the last one, and shares the
    embedding and output head. Not counted in ``param_count`` (DeepSeek reports 671B without the
    14B of MTP), but held and trained by the last pipeline stage."""

    def __post_init__(self) -> None:
        set_ = lambda k, v: object.__setattr__(self, k, v)
        w = f"model {brief(self.name)}:"
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"model.name = {brief(self.name)} must be a non-empty string")
        if self.max_seq is None and self.position == "learned":
            set_("max_seq", 2048)
        for f in ("layers", "hidden", "heads", "vocab") + (("max_seq",) if self.max_seq is not None else ()):
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
        for f, choices in (("mlp", MLP_KINDS), ("norm", NORM_KINDS), ("position", POSITION_KINDS),
                           ("attention", ATTENTION_KINDS)):
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
        if self.v_head_dim is None:
            set_("v_head_dim", self.head_dim)
        for f in ("head_dim", "ffn", "expert_ffn", "v_head_dim"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"{w} model.{f} = {brief(v)} must be a positive integer")
        for f in ("experts", "top_k", "shared_experts", "q_lora_rank", "kv_lora_rank", "qk_rope_head_dim",
                  "sliding_window", "global_attention_every", "attention_chunk", "mtp_layers"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ConfigError(f"{w} model.{f} = {brief(v)} must be a non-negative integer")
        if self.layers + self.mtp_layers > MAX_LAYERS:  # each MTP module is one more transformer layer to cost
            raise ConfigError(f"{w} model.mtp_layers = {self.mtp_layers} (num_nextn_predict_layers in a Hugging Face "
                              f"config.json) makes {self.layers} + {self.mtp_layers} layers, over the limit of "
                              f"{MAX_LAYERS:,} (docs/strategy-file.md, Limits); DeepSeek-V3 uses 1")
        cap = self.logit_softcap
        if isinstance(cap, bool) or not isinstance(cap, (int, float)) or not 0 <= cap < float("inf"):
            raise ConfigError(f"{w} model.logit_softcap = {brief(cap)} must be a finite number >= 0 (0 = off)")
        if self.attention == "mla":
            if not self.kv_lora_rank or not self.qk_rope_head_dim:
                raise ConfigError(f"{w} model.attention = 'mla' needs kv_lora_rank and qk_rope_head_dim > 0 "
                                  f"(DeepSeek-V3: 512 and 64)")
            if self.qk_rope_head_dim >= self.head_dim:
                raise ConfigError(f"{w} model.qk_rope_head_dim = {self.qk_rope_head_dim} must be smaller than "
                                  f"model.head_dim = {self.head_dim} (head_dim = qk_nope + qk_rope, e.g. 128 + 64)")
            if self.kv_heads != self.heads:
                raise ConfigError(f"{w} model.kv_heads = {self.kv_heads}: MLA decompresses keys and values per "
                                  f"head, so kv_heads must equal heads ({self.heads}); drop kv_heads")
        elif self.q_lora_rank or self.kv_lora_rank or self.qk_rope_head_dim:
            raise ConfigError(f"{w} model.q_lora_rank/kv_lora_rank/qk_rope_head_dim are MLA fields but "
                              f"model.attention = {self.attention!r}; set attention: mla or drop them")
        if self.global_attention_every and not (self.sliding_window or self.attention_chunk):
            raise ConfigError(f"{w} model.global_attention_every = {self.global_attention_every} needs "
                              f"model.sliding_window > 0 or model.attention_chunk > 0")
        if self.sliding_window and self.attention_chunk:
            raise ConfigError(f"{w} model.sliding_window = {self.sliding_window} and model.attention_chunk = "
                              f"{self.attention_chunk}: a local layer has one mask; set one of them to 0")
        start = self.global_attention_start
        if start is not None:
            if isinstance(start, bool) or not isinstance(start, int) or not 0 <= start < max(self.layers, 1):
                raise ConfigError(f"{w} model.global_attention_start = {brief(start)} must be a layer index in "
                                  f"0..{self.layers - 1} (torchtitan Llama 4: 0; omit it for Hugging Face's (i+1) % k)")
            if not self.global_attention_every:
                raise ConfigError(f"{w} model.global_attention_start = {start} needs model.global_attention_every "
                                  f"> 0 (the period of the global layers)")
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

    def is_local_attention_layer(self, i: int) -> bool:
        """Whether layer ``i`` attends within ``sliding_window`` tokens or its ``attention_chunk`` block
        (see global_attention_every and global_attention_start)."""
        if not (self.sliding_window or self.attention_chunk):
            return False
        k = self.global_attention_every
        if not k:
            return True
        start = k - 1 if self.global_attention_start is None else self.global_attention_start
        return not (i >= start and (i - start) % k == 0)

    def layer_kind(self, i: int) -> tuple:
        """Hashable key shared by layers with identical operators (MoE or dense, local or global
        attention): costs and memory computed for one layer of a kind hold for all of them."""
        return (self.is_moe_layer(i), self.is_local_attention_layer(i))

    @property
    def gated_mlp(self) -> bool:
        """MLP has gate, up and down matrices (SwiGLU / GEGLU, Shazeer 2020)."""
        return self.mlp in GATED_MLPS

    # ---------------------------------------------------------------- parameters
    def norm_params(self) -> int:
        """Parameters of one norm: 2h for LayerNorm (gain+bias), h for RMSNorm."""
        return (2 if self.norm == "layernorm" else 1) * self.hidden

    def qkv_params(self) -> int:
        """Query/key/value projections (+ bias, + q/k norms).

        Standard: fused h x (a + 2 g) d (GQA: Ainslie 2023). MLA (DeepSeek-V2 Section 2.1.2-2.1.3,
        DeepSeek-V3 inference/model.py): W^DQ h x d_c' + its RMSNorm + W^UQ d_c' x a d_qk (or
        h x a d_qk without a query latent), W^DKV h x (d_c + d^R) + its RMSNorm + W^UKV
        d_c x a (d_nope + d_v)."""
        h, a, d = self.hidden, self.heads, self.head_dim
        if self.attention == "mla":
            qr, kr, rope = self.q_lora_rank, self.kv_lora_rank, self.qk_rope_head_dim
            q = (h * qr + qr + qr * a * d) if qr else h * a * d
            kv = h * (kr + rope) + kr + kr * a * (d - rope + self.v_head_dim)
            return q + kv + (2 * d if self.qk_norm else 0)
        out = (a + 2 * self.kv_heads) * d
        return h * out + (out if self.qkv_bias else 0) + (2 * d if self.qk_norm else 0)

    def attn_out_params(self) -> int:
        """Attention output projection: (a d_v) x h (+ bias h)."""
        return self.heads * self.v_head_dim * self.hidden + (self.hidden if self.bias else 0)

    def mlp_params(self, ffn: int | None = None) -> int:
        """One MLP (or one expert) of intermediate size ``ffn``: 2 or 3 (gated) h x f matrices."""
        f = self.ffn if ffn is None else ffn
        mats = 3 if self.gated_mlp else 2
        bias = ((mats - 1) * f + self.hidden) if self.bias else 0
        return mats * self.hidden * f + bias

    def router_params(self) -> int:
        """MoE router: h x E (Fedus 2021 Switch / Jiang 2024 Mixtral), + E bias terms with
        DeepSeek-V3's auxiliary-loss-free balancing (Section 2.1.2)."""
        return self.hidden * self.experts + (self.experts if self.router_bias else 0)

    def norms_per_layer(self) -> int:
        """2 pre-norms, or 4 with Gemma's sandwich (pre + post) norms."""
        return 4 if self.sandwich_norm else 2

    def mtp_params(self) -> int:
        """Multi-token-prediction modules (DeepSeek-V3 Section 2.2, eq. 21): per module two RMSNorms,
        the h x 2h projection M_k and one transformer layer (like the last main layer); embedding and
        output head are shared with the main model."""
        if not self.mtp_layers:
            return 0
        return self.mtp_layers * (2 * self.norm_params() + 2 * self.hidden * self.hidden
                                  + self.layer_params(self.layers - 1) + self.norm_params())

    def layer_params(self, i: int = 0, *, active: bool = False) -> int:
        """Parameters of layer ``i``; ``active`` counts only top_k routed experts (MoE)."""
        attn = self.qkv_params() + self.attn_out_params()
        norms = self.norms_per_layer() * self.norm_params()
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
            mtp=self.mtp_params(),
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
    base = dict(mlp="swiglu", norm="rmsnorm", position="rope", bias=False, tied_embeddings=False, dropout=False)
    return ModelSpec(name=name, layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads,
                     ffn=ffn, vocab=vocab, max_seq=max_seq, **{**base, **kw})


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
    "deepseek-v3": 671e9,    # DeepSeek-V3 report (arXiv:2412.19437) Abstract: 671B total (MTP's 14B excluded)
    "qwen3-8b": 8.2e9,       # Qwen3 technical report (arXiv:2505.09388) Table 1 / HF model card: 8.2B
    "qwen3-32b": 32.8e9,     # Qwen3 model card: 32.8B
    "qwen3-30b-a3b": 30.5e9,     # Qwen3 report Table 2 / model card: 30.5B total, 3.3B activated
    "qwen3-235b-a22b": 235e9,    # Qwen3 report Table 2 / model card: 235B total, 22B activated
    "gemma2-2b": 2.61e9,     # Gemma 2 report (arXiv:2408.00118) Table 1 + HF safetensors (2,614,341,888)
    "gemma2-9b": 9.24e9,     # HF google/gemma-2-9b safetensors total (9,241,705,984)
    "gemma2-27b": 27.2e9,    # HF google/gemma-2-27b safetensors total (27,227,128,320)
    "gemma3-1b": 1.0e9,      # Gemma 3 report (arXiv:2503.19786) Table 1 / HF google/gemma-3-1b-pt (999,885,952)
    "phi3-mini": 3.8e9,      # Phi-3 report (arXiv:2404.14219) Section 2: phi-3-mini 3.8B (HF 3,821,079,552)
    "phi3-medium": 14e9,     # Phi-3 report Section 2: phi-3-medium 14B (HF 13,960,238,080)
    "gpt-oss-120b": 116.83e9,  # gpt-oss model card (arXiv:2508.10925) Table 1: 116.83B total
    "gpt-oss-20b": 20.91e9,    # gpt-oss model card Table 1: 20.91B total
}
PUBLISHED_ACTIVE_PARAMS = {
    "mixtral-8x7b": 12.9e9,      # Jiang 2024 Section 2
    "deepseek-v3": 37e9,         # DeepSeek-V3 report Abstract: 37B activated per token
    "qwen3-30b-a3b": 3.3e9,      # Qwen3 report Table 2
    "qwen3-235b-a22b": 22e9,     # Qwen3 report Table 2
}

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
    # DeepSeek-V3 report (arXiv:2412.19437) Section 4.2 + HF deepseek-ai/DeepSeek-V3 config.json: 61 layers,
    # h 7168, 128 heads, MLA (d_c 512, d_c' 1536, d_h 128 + d_h^R 64, d_v 128), first 3 layers dense
    # (ffn 18432), then 1 shared + 256 routed experts of 2048, top-8, vocab 129280, 1 MTP module.
    "deepseek-v3": _llama("deepseek-v3", 61, 7168, 128, 128, 18432, 129280, 4096, attention="mla",
                          head_dim=192, v_head_dim=128, q_lora_rank=1536, kv_lora_rank=512, qk_rope_head_dim=64,
                          experts=256, top_k=8, expert_ffn=2048, shared_experts=1, router_bias=True,
                          moe_layers=tuple(range(3, 61)), mtp_layers=1),
    # Qwen3 report (arXiv:2505.09388) Tables 1-2 + HF config.json: QK-norm, GQA, head_dim 128.
    "qwen3-8b": _llama("qwen3-8b", 36, 4096, 32, 8, 12288, 151936, 32768, head_dim=128, qk_norm=True),
    "qwen3-32b": _llama("qwen3-32b", 64, 5120, 64, 8, 25600, 151936, 32768, head_dim=128, qk_norm=True),
    "qwen3-30b-a3b": _llama("qwen3-30b-a3b", 48, 2048, 32, 4, 6144, 151936, 32768, head_dim=128, qk_norm=True,
                            experts=128, top_k=8, expert_ffn=768),
    "qwen3-235b-a22b": _llama("qwen3-235b-a22b", 94, 4096, 64, 4, 12288, 151936, 32768, head_dim=128,
                              qk_norm=True, experts=128, top_k=8, expert_ffn=1536),
    # Gemma 2 report (arXiv:2408.00118) Table 1 + HF config.json: GeGLU, sandwich RMSNorms, tied
    # embeddings, vocab 256000, window 4096 on every other layer, final logit soft-cap 30.
    "gemma2-2b": _llama("gemma2-2b", 26, 2304, 8, 4, 9216, 256000, 8192, head_dim=256, mlp="geglu",
                        tied_embeddings=True, sandwich_norm=True, sliding_window=4096, global_attention_every=2,
                        logit_softcap=30.0),
    "gemma2-9b": _llama("gemma2-9b", 42, 3584, 16, 8, 14336, 256000, 8192, head_dim=256, mlp="geglu",
                        tied_embeddings=True, sandwich_norm=True, sliding_window=4096, global_attention_every=2,
                        logit_softcap=30.0),
    "gemma2-27b": _llama("gemma2-27b", 46, 4608, 32, 16, 36864, 256000, 8192, head_dim=128, mlp="geglu",
                         tied_embeddings=True, sandwich_norm=True, sliding_window=4096, global_attention_every=2,
                         logit_softcap=30.0),
    # Gemma 3 report (arXiv:2503.19786) Section 2 + HF google/gemma-3-1b-pt: 5 local (window 512 for 1B)
    # : 1 global, QK-norm instead of soft-capping, vocab 262144.
    "gemma3-1b": _llama("gemma3-1b", 26, 1152, 4, 1, 6912, 262144, 32768, head_dim=256, mlp="geglu",
                        tied_embeddings=True, sandwich_norm=True, qk_norm=True, sliding_window=512,
                        global_attention_every=6),
    # gpt-oss model card (OpenAI, arXiv:2508.10925) Section 2.1 / Table 1 + HF openai/gpt-oss-120b and -20b
    # config.json: h 2880, 64 heads of 64, 8 KV heads, 128 (20b: 32) experts of 2880, top-4, biases on every
    # linear layer, banded 128-token window on alternate layers from layer 0 (layer_types), vocab 201088.
    # The per-head attention sinks (a learned logit per head) are 64 parameters a layer: not modeled.
    "gpt-oss-120b": _llama("gpt-oss-120b", 36, 2880, 64, 8, 2880, 201088, 131072, head_dim=64, bias=True,
                           experts=128, top_k=4, expert_ffn=2880, sliding_window=128, global_attention_every=2),
    "gpt-oss-20b": _llama("gpt-oss-20b", 24, 2880, 64, 8, 2880, 201088, 131072, head_dim=64, bias=True,
                          experts=32, top_k=4, expert_ffn=2880, sliding_window=128, global_attention_every=2),
    # Phi-3 report (arXiv:2404.14219) Section 2 + HF config.json: Llama-style, vocab 32064, window 2047.
    "phi3-mini": _llama("phi3-mini", 32, 3072, 32, 32, 8192, 32064, 4096, sliding_window=2047),
    "phi3-medium": _llama("phi3-medium", 40, 5120, 40, 10, 17920, 32064, 4096, sliding_window=2047),
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
               "experts", "top_k", "expert_ffn", "shared_experts", "q_lora_rank", "kv_lora_rank",
               "qk_rope_head_dim", "v_head_dim", "sliding_window", "global_attention_every", "attention_chunk",
               "global_attention_start", "mtp_layers")
_BOOL_FIELDS = ("tied_embeddings", "bias", "qkv_bias", "embedding_norm", "dropout", "qk_norm", "sandwich_norm",
                "router_bias")


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
    for f, choices in (("mlp", MLP_KINDS), ("norm", NORM_KINDS), ("position", POSITION_KINDS),
                       ("attention", ATTENTION_KINDS)):
        if f in d:
            kw[f] = get_str(d, f, "model", choices=choices)
    if "logit_softcap" in d:
        kw["logit_softcap"] = get_float(d, "logit_softcap", "model")
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
               "qkv_bias": spec.bias, "expert_ffn": spec.ffn, "v_head_dim": spec.head_dim}
    for k, v in derived.items():
        if d[k] == v:
            d[k] = None
    return d
