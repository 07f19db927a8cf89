"""NeMo 1.x / NeMo-Framework-Launcher training recipes -> a strategy mapping (see :mod:`strategies.importers`).

What NeMo builds from each key is read from NVIDIA/NeMo at 8cfedd7 (2025-09-20):
``nemo/collections/nlp/models/language_modeling/megatron_base_model.py`` (build_transformer_config,
_vocab_size_with_padding), ``megatron_gpt_model.py`` (model_provider_func, get_specs, the data
section), ``nemo/collections/nlp/parts/utils_funcs.py`` (activation_to_func). Every field is read
through :class:`strategies.import_common.Fields`: a value of the wrong type is one error naming it."""
from __future__ import annotations

import math
import re
from typing import Any

from strategies.errors import ConfigError
from strategies.import_common import (
    Fields,
    Imported,
    check_expanded_size,
    cluster_mapping,
    cuda_graph_option,
    moe_capacity_options,
    moe_dispatch_options,
    moe_routing_option,
    named_tokenizer_vocab,
    recompute_fields,
    walk_keys,
)
from strategies.import_peft import PEFT_READ, nemo_lora
from strategies.limits import MAX_DOCUMENT_BYTES, MAX_GPUS

W = "nemo recipe: "
#: Lightning trainer.precision spellings (lightning.fabric.connector _PRECISION_INPUT) -> training.precision;
#: None = FP32 (not modeled)
NEMO_PRECISION = {"bf16": "bf16", "bf16-mixed": "bf16", "16": "fp16", "16-mixed": "fp16", "fp16": "fp16",
                  "32": None, "32-true": None, "fp32": None, "64": None, "64-true": None}
#: Every model.activation NeMo accepts (utils_funcs.py activation_to_func, supported_activations) ->
#: model.mlp; gated_linear_unit = the name ends in 'glu' (megatron_base_model.py l. 514). None: not
#: modeled. 'approx-gelu' is x * sigmoid(1.702 x) (ApproxGELUActivation): GELU's two GEMMs, an
#: elementwise op of similar cost; 'squared-relu' is relu(x)^2 (So et al. 2021, "Primer", Section 3).
NEMO_ACTIVATIONS = {"gelu": "gelu", "approx-gelu": "gelu", "geglu": "geglu", "fast-geglu": "geglu",
                    "swiglu": "swiglu", "fast-swiglu": "swiglu", "squared-relu": "squared-relu",
                    "reglu": None, "fast-reglu": None}
#: model.normalization (Megatron-core TransformerConfig.normalization; 'layernorm1p' is LayerNorm with a
#: zero-centred gain, the same parameters and cost)
NEMO_NORMS = {"layernorm": "layernorm", "layernorm1p": "layernorm", "rmsnorm": "rmsnorm"}
#: model.position_embedding_type -> model.position; None: NeMo accepts it, execsim does not model it
#: (MCoreGPTModel: learned_absolute, rope, none; NeMo's legacy model also alibi, kerple, xpos, sandwich:
#: nemo/collections/nlp/modules/common/megatron/language_model.py)
NEMO_POSITIONS = {"learned_absolute": "learned", "rope": "rope", "alibi": "alibi", "none": None, "kerple": None,
                  "learned_parameters": None,
                  "xpos": None, "sandwich": None}
#: model.attention_backend (megatron.core.transformer.enums.AttnBackend)
NEMO_ATTN_BACKENDS = ("auto", "flash", "fused", "unfused", "local")

# --------------------------------------------------------------------------------- interpolation
_REF = re.compile(r"\$\{([^${}]*)\}")
#: characters one resolved value may hold; an honest recipe's longest (a results path) has ~200
MAX_RESOLVED_VALUE = 100_000
#: references followed one through another (a -> b -> c ...) before giving up
MAX_REF_CHAIN = 64
#: nesting of ${...} inside ${...} resolved (NeMo's recipes nest two deep: multiply over two keys)
MAX_REF_NESTING = 16


class _Cycle(Exception):
    pass


_NONE = object()


class _Resolver:
    """OmegaConf interpolation as NeMo's recipes use it, each key resolved once (memoised by its
    path), a reference back into a key being resolved left as written (cycle), the characters
    produced bounded per value and in all (``MAX_RESOLVED_VALUE`` more than the value's own text;
    four times ``MAX_DOCUMENT_BYTES`` over the file)."""

    def __init__(self, data: dict):
        self.data, self.memo, self.active, self.chars = data, {}, set(), 0

    def at(self, path: tuple) -> Any:
        """The resolved value at ``path`` (KeyError: nothing there; _Cycle: it refers to itself)."""
        if path in self.memo:
            return self.memo[path]
        if path in self.active:
            raise _Cycle
        if len(self.active) > MAX_REF_CHAIN:
            raise ConfigError(f"{W}interpolations refer one through another more than {MAX_REF_CHAIN} deep (at "
                              f"{'.'.join(map(str, path))[:80]}); write the value")
        node: Any = self.data
        for i, k in enumerate(path):
            if isinstance(node, str) and "${" in node:     # an interpolated section: resolve it, read below it
                return _child_path(self.at(path[:i]), path[i:])
            node = _child(node, k)
        self.active.add(path)
        try:
            out = self.value(node, path)
        finally:
            self.active.discard(path)
        self.memo[path] = out
        return out

    def value(self, node: Any, path: tuple) -> Any:
        if isinstance(node, dict):
            return {k: self.at(path + (k,)) for k in node}
        if isinstance(node, list):
            return [self.at(path + (i,)) for i in range(len(node))]
        if isinstance(node, str) and "${" in node:
            return self.text(node, path)
        return node

    def text(self, v: str, path: tuple) -> Any:
        here, grown = path[:-1], MAX_RESOLVED_VALUE + len(v)   # the value's own text is the file's
        for _ in range(MAX_REF_NESTING):
            whole = _REF.fullmatch(v)
            if whole:                        # the value is one reference: its typed value
                out = self.ref(whole.group(1).strip(), here)
                return v if out is _NONE or (isinstance(out, str) and "${" in out) else out
            new = _REF.sub(lambda m: self.piece(m, here), v)
            if new == v:
                return v
            self.chars += len(new)
            if len(new) > grown or self.chars > 4 * MAX_DOCUMENT_BYTES:
                raise ConfigError(f"{W}the interpolations in {'.'.join(map(str, path))[:80]} expand to more than "
                                  f"{MAX_RESOLVED_VALUE:,} characters (or all of them past "
                                  f"{4 * MAX_DOCUMENT_BYTES // 2 ** 20} MB); write the value")
            v = new
        return v

    def piece(self, m: re.Match, here: tuple) -> str:
        out = self.ref(m.group(1).strip(), here)
        if out is _NONE or isinstance(out, (dict, list)):
            return m.group(0)
        return str(out)

    def ref(self, expr: str, here: tuple) -> Any:
        """The value of one ``${...}`` body, or _NONE when it names nothing known."""
        name, colon, args = expr.partition(":")
        if colon and name.strip() in ("multiply", "sum"):   # NeMo's resolvers (core/config/hydra_runner.py)
            xs = [_number(a.strip()) for a in args.split(",")]
            if len(xs) != 2 or any(x is None for x in xs):
                return _NONE
            out = xs[0] * xs[1] if name.strip() == "multiply" else xs[0] + xs[1]
            return out if abs(out) <= 2 ** 63 else _NONE
        if colon:                                           # another resolver (oc.env, gpu_name ...)
            return _NONE
        if expr.startswith("."):
            up = len(expr) - len(expr.lstrip("."))
            keys = list(here[:len(here) - (up - 1)] if up > 1 else here) + expr.lstrip(".").split(".")
        else:
            keys = expr.split(".")
            if keys[0] == "training" and "training" not in self.data:   # the launcher mounts the recipe there
                keys = keys[1:]
        try:
            return self.at(tuple(_key(k) for k in keys))
        except (KeyError, IndexError, _Cycle):
            return _NONE


def _key(k: str) -> Any:
    return int(k) if k.isdigit() and len(k) < 10 else k


def _child(node: Any, k: Any) -> Any:
    if isinstance(node, dict):
        if k not in node and str(k) in node:
            return node[str(k)]
        return node[k]
    if isinstance(node, list) and isinstance(k, int):
        return node[k]
    raise KeyError(k)


def _child_path(node: Any, keys: tuple) -> Any:
    for k in keys:
        node = _child(node, k)
    return node


def _number(a: str) -> Any:
    if len(a) > 40:
        return None
    try:
        return int(a)
    except ValueError:
        pass
    try:
        x = float(a)
    except ValueError:
        return None
    return x if math.isfinite(x) else None


def resolve_interpolations(data: dict) -> dict:
    """A copy of ``data`` with OmegaConf interpolations resolved as NeMo does: ``${a.b}`` (from the
    top, or from the launcher's ``training.`` root, where the launcher mounts the recipe), ``${.x}``
    relative to the key's mapping, and NeMo's ``${multiply:a,b}`` / ``${sum:a,b}`` resolvers; nested
    ones inside out. A reference that names nothing (``${data_dir}``, set by the launcher), another
    resolver, or a reference back to itself stays as written: the importer reports it only if it reads
    that key. Each key is resolved once; the result's size is bounded (``MAX_RESOLVED_VALUE``
    characters per value, the document limit in all, ``check_expanded_size`` on the whole).

    OmegaConf itself would do this, but it is a dependency for ~100 lines and NeMo's resolvers would
    have to be registered in its process-wide resolver table.

    >>> resolve_interpolations({"m": {"a": 4, "b": "${multiply:${.a},2}", "c": "x${.b}"}})
    {'m': {'a': 4, 'b': 8, 'c': 'x8'}}
    """
    check_expanded_size(data, "nemo recipe")
    out = _Resolver(data).at(())
    check_expanded_size(out, "nemo recipe")
    return out


#: NeMo keys read (dotted from the recipe's top level); everything else under trainer/model is reported
_NEMO_READ = {
    "trainer.num_nodes", "trainer.devices", "trainer.precision", "trainer.max_steps", "model.micro_batch_size",
    "model.global_batch_size", "model.tensor_model_parallel_size", "model.pipeline_model_parallel_size",
    "model.virtual_pipeline_model_parallel_size", "model.context_parallel_size", "model.expert_model_parallel_size",
    "model.sequence_parallel", "model.cp_comm_type", "model.encoder_seq_length", "model.max_position_embeddings", "model.num_layers",
    "model.hidden_size", "model.ffn_hidden_size", "model.num_attention_heads", "model.num_query_groups",
    "model.kv_channels", "model.hidden_dropout", "model.attention_dropout", "model.normalization", "model.bias",
    "model.qkv_bias", "model.activation", "model.openai_gelu", "model.position_embedding_type",
    "model.share_embeddings_and_output_weights", "model.override_vocab_size", "model.data.seq_length",
    "model.activations_checkpoint_granularity", "model.activations_checkpoint_method",
    "model.activations_checkpoint_num_layers", "model.fp8", "model.fp8_params", "model.optim.name", "model.optim.overlap_grad_sync",
    "model.optim.overlap_param_sync", "model.ub_tp_comm_overlap", "model.overlap_p2p_comm",
    "model.num_moe_experts", "model.moe_router_topk", "model.tokenizer.type", "model.tokenizer.library",
    "model.tokenizer.model", "model.tokenizer.vocab_file", "model.make_vocab_size_divisible_by",
    # the attention kernel: Transformer Engine's (mcore_gpt + transformer_engine), Megatron-core's local
    # one, or NeMo's legacy model with use_flash_attention; attention_backend picks within TE
    "model.use_flash_attention", "model.mcore_gpt", "model.transformer_engine", "model.attention_backend",
    # modeled as NeMo/Megatron run by default: blocking batched p2p, wgrad GEMMs accumulating into main_grad
    "model.batch_p2p_comm", "model.gradient_accumulation_fusion", "model.cpu_offloading",
    "model.cpu_offloading_num_layers", "model.moe_expert_capacity_factor", "model.moe_pad_expert_input_to_capacity",
    "model.moe_token_dispatcher_type", "model.optim.grad_sync_dtype", "model.overlap_moe_expert_parallel_comm",
    "model.delay_wgrad_compute", "model.moe_enable_deepep", "model.moe_flex_dispatcher_backend",
    "model.moe_flex_dispatcher_num_sms", "model.moe_deepep_num_sms", "model.moe_router_group_topk",
    "model.moe_shared_expert_intermediate_size", "model.moe_shared_expert_overlap", "model.window_size",
    "model.moe_router_force_load_balancing", "model.moe_router_enable_expert_bias",
    # Megatron-core's CUDA graph fields (strategies/import_common.py cuda_graph_option)
    "model.enable_cuda_graph", "model.external_cuda_graph", "model.cuda_graph_impl", "model.cuda_graph_scope",
    "model.cuda_graph_modules",
    "model.cross_entropy_loss_fusion", "model.cross_entropy_fusion_impl",
}


def _activation(m: Fields, notes: list) -> str:
    """model.mlp from model.activation (+ openai_gelu, which NeMo lets win: activation_to_func)."""
    act = m.choice("activation", "gelu", tuple(NEMO_ACTIVATIONS))
    mlp = NEMO_ACTIVATIONS[act]
    if m.flag("openai_gelu", False):          # activation_func = GELU, the gate (name ends in glu) kept
        return "geglu" if act.endswith("glu") else "gelu"
    if mlp is None:
        raise ConfigError(f"{W}model.activation = {act!r} (ReLU-gated, ReGLU) is not modeled by execsim; it models "
                          f"{', '.join(k for k, v in NEMO_ACTIVATIONS.items() if v)}")
    if act == "approx-gelu":
        notes.append("model.activation approx-gelu (simulated as gelu: the same GEMMs, a similar elementwise op)")
    return mlp


def _vocab(m: Fields, tp: int, vocab: int | None) -> int:
    """The model's vocabulary: ``override_vocab_size`` as NeMo builds it (megatron_gpt_model.py
    model_provider_func), else the tokenizer's (``--vocab``, or the tokenizer the recipe names) padded
    to a multiple of make_vocab_size_divisible_by x tp (megatron_base_model.py _vocab_size_with_padding)."""
    tok = m.section("tokenizer")
    for key in ("type", "model", "library", "vocab_file"):
        v = tok.get(key)
        if v is not None and not isinstance(v, str):
            raise tok.fail(key, v, "must be a name or a path (text)")
    div = m.integer("make_vocab_size_divisible_by", 128, hi=2 ** 20)
    override = m.integer("override_vocab_size", None, hi=2 ** 24)
    if override:
        return override
    base = vocab or named_tokenizer_vocab(tok.get("type")) or named_tokenizer_vocab(tok.get("model"))
    if not base:
        raise ConfigError(f"{W}the vocabulary size is not known from model.tokenizer (type "
                          f"{str(tok.get('type'))[:60]!r}, model {str(tok.get('model'))[:60]!r}) and the recipe sets "
                          f"no model.override_vocab_size; give --vocab N (the tokenizer's vocabulary)")
    multiple = div * tp
    return -(-base // multiple) * multiple


def _model(data: dict, m: Fields, tp: int, vocab: int | None, seq: int, notes: list) -> dict:
    layers, h = m.integer("num_layers", hi=2 ** 24), m.integer("hidden_size", hi=2 ** 24)
    heads = m.integer("num_attention_heads", hi=2 ** 24)
    bias = m.flag("bias", True)
    model = {"name": str(data.get("name") or m.get("name") or "nemo-gpt")[:80], "layers": layers, "hidden": h,
             "heads": heads, "kv_heads": m.integer("num_query_groups", heads, hi=2 ** 24),
             "ffn": m.integer("ffn_hidden_size", 4 * h, hi=2 ** 24), "vocab": _vocab(m, tp, vocab),
             "mlp": _activation(m, notes),
             "norm": NEMO_NORMS[m.choice("normalization", "layernorm", tuple(NEMO_NORMS) + ("LayerNorm", "RMSNorm"))
                                .lower()],
             "position": _position(m),
             "max_seq": m.integer("max_position_embeddings", m.integer("encoder_seq_length", seq, hi=2 ** 24),
                                  hi=2 ** 24),
             "tied_embeddings": m.flag("share_embeddings_and_output_weights", True),
             "bias": bias,
             "dropout": m.number("hidden_dropout", 0.1, hi=1.0) > 0 or m.number("attention_dropout", 0.1, hi=1.0) > 0}
    # Megatron-core linear_qkv: bias = add_bias_linear or add_qkv_bias (megatron_base_model.py l. 510-511)
    if m.flag("qkv_bias", False) and not bias:
        model["qkv_bias"] = True
    window = _window(m)
    if window:
        model["sliding_window"] = window
    if m.has("kv_channels"):
        model["head_dim"] = m.integer("kv_channels", hi=2 ** 24)
    experts = m.integer("num_moe_experts", 0, lo=0, hi=2 ** 24)
    if experts:
        model.update(experts=experts, top_k=m.integer("moe_router_topk", 2, hi=experts))
        # TransformerConfig.moe_shared_expert_intermediate_size: num_shared_experts x each one's size
        # (the experts' size here: model.ffn_hidden_size, moe_ffn_hidden_size not being read)
        shared = m.integer("moe_shared_expert_intermediate_size", 0, lo=0, hi=2 ** 30)
        if shared:
            if shared % model["ffn"]:
                raise ConfigError(f"{W}model.moe_shared_expert_intermediate_size = {shared} is not a multiple "
                                  f"of the expert size {model['ffn']}")
            model["shared_experts"] = shared // model["ffn"]
    return model


def _window(m: Fields) -> int:
    """Sliding-window attention: ``window_size: [left, right]`` is Megatron-core's
    TransformerConfig.window_size, which NeMo passes through (Transformer Engine's (left, right)
    window; -1 = unbounded): a causal window of ``left`` tokens is ``model.sliding_window``."""
    w = m.get("window_size")
    if w is None:
        return 0
    ok = isinstance(w, list) and len(w) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in w)
    if not ok or not -1 <= w[0] <= 2 ** 24 or w[1] not in (0, -1):
        raise m.fail("window_size", w, "must be [left, 0] (a causal window of left tokens; -1 = unbounded) as "
                                       "Megatron-core reads it")
    if w[0] == -1:
        return 0
    if w[1] == -1:
        raise m.fail("window_size", w, "looks right without bound, which a causal GPT does not; use [left, 0]")
    return w[0]


def _position(m: Fields) -> str:
    kind = m.choice("position_embedding_type", "learned_absolute", tuple(NEMO_POSITIONS))
    if NEMO_POSITIONS[kind] is None:
        raise ConfigError(f"{W}model.position_embedding_type = {kind!r} is not modeled by execsim; it models "
                          f"{', '.join(k for k, v in NEMO_POSITIONS.items() if v)}")
    return NEMO_POSITIONS[kind]


def _flash_attention(m: Fields) -> bool:
    """The attention kernel NeMo runs: with ``mcore_gpt`` and ``transformer_engine`` it is Transformer
    Engine's DotProductAttention (flash or cuDNN fused, whatever ``use_flash_attention`` says: "this
    config does nothing when transformer_engine=True", megatron_gpt_config.yaml l. 246) unless
    ``attention_backend`` asks for the unfused one; Megatron-core without TE builds the local spec
    (get_specs: get_gpt_layer_local_spec, unfused attention); NeMo's legacy model uses flash-attn
    only with ``use_flash_attention`` (default false)."""
    backend = m.choice("attention_backend", "auto", NEMO_ATTN_BACKENDS)
    mcore, te = m.flag("mcore_gpt", False), m.flag("transformer_engine", False)
    use_flash = m.flag("use_flash_attention", False)
    if mcore:
        return te and backend not in ("unfused", "local")
    return use_flash


def _parallel(m: Fields, optim: Fields) -> tuple:
    tp = m.integer("tensor_model_parallel_size", 1, hi=MAX_GPUS)
    pp = m.integer("pipeline_model_parallel_size", 1, hi=MAX_GPUS)
    vpp = m.integer("virtual_pipeline_model_parallel_size", 1, hi=2 ** 14)
    # the distributed optimizer: Apex distributed_fused_adam, or Megatron-core's
    # (mcore_distributed_optim, NeMo nlp/parts/megatron_trainer_builder / MegatronGPTModel.setup_optimization)
    dist = optim.text("name", "").startswith(("distributed_fused_adam", "mcore_distributed_optim"))
    parallel = {"tp": tp, "pp": pp, "cp": m.integer("context_parallel_size", 1, hi=MAX_GPUS),
                "ep": m.integer("expert_model_parallel_size", 1, hi=MAX_GPUS),
                "sp": m.flag("sequence_parallel", False) and tp > 1, "zero": 1 if dist else 0}
    if vpp > 1:
        parallel["vpp"] = vpp
    return parallel, dist


def _seq_len(m: Fields) -> int:
    """The length the run trains on: the data section's seq_length (megatron_gpt_model.py builds the
    datasets with cfg.data.seq_length), else encoder_seq_length (the launcher recipes set data.seq_length
    to ${model.encoder_seq_length}); never max_position_embeddings, the model's maximum."""
    seq = m.section("data").integer("seq_length", None, hi=2 ** 24)
    seq = seq if seq is not None else m.integer("encoder_seq_length", None, hi=2 ** 24)
    if seq is None:
        raise ConfigError(f"{W}model.data.seq_length (the sequence length the run trains on) and "
                          f"model.encoder_seq_length are missing; add one")
    return seq


def _precision(tr: Fields, m: Fields) -> str:
    prec = tr.choice("precision", "bf16", tuple(NEMO_PRECISION))
    if NEMO_PRECISION[prec] is None:
        raise ConfigError(f"{W}trainer.precision = {prec!r} trains in FP32, which execsim does not model "
                          f"(bf16, fp16 and fp8 mixed precision); use bf16-mixed")
    return "fp8" if m.flag("fp8", False) else NEMO_PRECISION[prec]


def _training(tr: Fields, m: Fields, layers: int, stages: int, seq: int, precision: str) -> dict:
    training = {"micro_batch": m.integer("micro_batch_size", 1, hi=2 ** 26),
                "global_batch": m.integer("global_batch_size", hi=2 ** 40), "seq_len": seq, "precision": precision}
    gran = m.choice("activations_checkpoint_granularity", None, ("full", "selective"))
    method = m.choice("activations_checkpoint_method", None, ("uniform", "block"))
    training.update(recompute_fields(gran, method, m.integer("activations_checkpoint_num_layers", None, lo=0, hi=2 ** 24),
                               layers, stages, "nemo recipe: model.activations_checkpoint"))
    steps = tr.integer("max_steps", None, extra=(-1,))
    if steps is not None and steps != -1:   # Lightning: -1 = no step limit (train on max_epochs/max_time)
        training["train_tokens"] = float(steps) * training["global_batch"] * seq
    return training


def _options(m: Fields, optim: Fields, dist: bool, moe: bool, shared: bool, extra: list) -> dict:
    param_sync = optim.flag("overlap_param_sync", dist)
    if param_sync and not dist:   # only the distributed optimizer gathers parameters (the strategy file
        extra.append("model.optim.overlap_param_sync (no effect without the distributed optimizer)")  # refuses it)
    options = {"overlap_grad_reduce": optim.flag("overlap_grad_sync", dist),
               "overlap_param_gather": param_sync and dist,
               "tp_comm_overlap": m.flag("ub_tp_comm_overlap", False),
               "p2p_overlap": m.flag("overlap_p2p_comm", False),
               "flash_attention": _flash_attention(m)}
    ep = m.integer("expert_model_parallel_size", 1, hi=MAX_GPUS) > 1
    if moe:
        moe_capacity_options(options, m.number("moe_expert_capacity_factor", None, lo=-1.0, hi=1e6),
                  m.flag("moe_pad_expert_input_to_capacity", False))
        moe_routing_option(options, m.flag("moe_router_force_load_balancing", False),
                           m.flag("moe_router_enable_expert_bias", False))
        disp = m.choice("moe_token_dispatcher_type", "allgather", ("allgather", "alltoall", "alltoall_seq", "flex"))
        if ep and disp not in ("alltoall", "flex", "allgather"):
            extra.append(f"model.moe_token_dispatcher_type {disp} (simulated as the all-to-all dispatcher)")
    # NeMo 1 hands model.* keys that name TransformerConfig fields to Megatron-core unchanged
    # (MegatronBaseModel.build_transformer_config), so Megatron's MoE overlap fields read the same
    cuda_graph_option(m.get, lambda k: f"model.{k}", options, W)
    moe_dispatch_options(m.get, lambda k: f"model.{k}", options, extra, moe and ep, W, shared=shared,
                         dispatcher_default="allgather")
    # NeMo mcore optimizer: grad_reduce_in_fp32 = (optim.grad_sync_dtype == fp32), fp32 by default
    if optim.choice("grad_sync_dtype", "fp32", ("fp32", "bf16", "fp16", "32", "16")) in ("bf16", "fp16", "16"):
        options["fp32_grad_accum"] = False
    if m.flag("fp8", False):
        # Transformer Engine's DelayedScaling (megatron_gpt_model.py l. 241 and 402; Megatron-core's
        # TransformerConfig.fp8_recipe default 'delayed'); fp8_params keeps the weights in FP8, so the
        # distributed optimizer gathers FP8 parameters (megatron_base_model.py l. 854)
        options["fp8_recipe"] = "delayed"
        if m.flag("fp8_params", False):
            options["fp8_param_gather"] = True
    elif m.flag("fp8_params", False):
        extra.append("model.fp8_params (no effect without model.fp8)")
    if m.flag("cpu_offloading", False) and m.integer("cpu_offloading_num_layers", 0, lo=0, hi=2 ** 24):
        options["activation_offload_layers"] = m.integer("cpu_offloading_num_layers")
    # model.cross_entropy_loss_fusion reaches Megatron-core's TransformerConfig unchanged (build_transformer_config);
    # left out, Megatron-core's default False runs the eager fp32 loss (Launcher 24.07's GPT-3 and Llama 2
    # configs; its Llama 3 / Nemotron ones set true: the fused 'native' loss, the megatron-te stack's; stacks.yaml
    # [MEG-CE])
    options["cross_entropy"] = (m.choice("cross_entropy_fusion_impl", "native", ("native", "te"))
                                if m.flag("cross_entropy_loss_fusion", False) else "eager-fp32")
    return options


def import_nemo(data: dict, *, cluster: str | None = None, nodes: int | None = None,
                vocab: int | None = None) -> Imported:
    """Map a NeMo 1.x / NeMo-Framework-Launcher training recipe (``trainer:`` + ``model:``) to a strategy."""
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        got = "" if not isinstance(data, dict) or data.get("model") is None else \
            f" (model: is {type(data['model']).__name__}, not a section)"
        raise ConfigError(f"{W}expected a mapping with a 'model:' section{got} (NeMo 1.x megatron_gpt_config.yaml "
                          f"or a NeMo-Framework-Launcher conf/training recipe)")
    data = resolve_interpolations(data)
    top = Fields(data, W)
    tr, m = top.section("trainer"), top.section("model")
    for req in ("num_layers", "hidden_size", "num_attention_heads", "global_batch_size"):
        if not m.has(req):
            raise ConfigError(f"{W}model.{req} is missing; add it")
    optim = m.section("optim")
    notes: list = []
    precision = _precision(tr, m)
    parallel, dist = _parallel(m, optim)
    vpp = parallel.get("vpp", 1)
    seq = _seq_len(m)
    model = _model(data, m, parallel["tp"], vocab, seq, notes)
    training = _training(tr, m, model["layers"], parallel["pp"] * vpp, seq, precision)
    lora = nemo_lora(m, notes)   # model.peft (strategies/import_peft.py)
    if lora is not None:
        training["lora"] = lora
    options = _options(m, optim, dist, "experts" in model, bool(model.get("shared_experts")), notes)
    if parallel["cp"] > 1:
        # NeMo 1 hands model.cp_comm_type to Megatron-core's TransformerConfig (default "p2p": Transformer
        # Engine's ring, the only CP before TE 1.10: TE v1.8 3ec998e attention.py AttnFuncWithCP)
        cp_type = m.choice("cp_comm_type", "p2p", ("p2p", "a2a", "all_gather", "a2a+p2p"))
        options["cp_comm"] = {"p2p": "ring", "a2a": "a2a", "all_gather": "allgather"}.get(cp_type, "ring")
        if cp_type == "a2a+p2p":
            notes.append("model.cp_comm_type a2a+p2p (hierarchical not modeled; simulated as ring)")
    n = nodes if nodes is not None else tr.integer("num_nodes", None, hi=MAX_GPUS)
    strategy = {"model": model, "cluster": cluster_mapping(cluster, n, "nemo recipe"), "parallel": parallel,
                "schedule": "interleaved-1f1b" if vpp > 1 else "1f1b", "training": training, "options": options}
    devices = tr.get("devices")
    if devices not in ("auto", -1):
        strategy["_gpus_per_node"] = tr.integer("devices", None, hi=1024)
    if strategy.get("_gpus_per_node") is None:
        strategy.pop("_gpus_per_node", None)
    seen = [k for k in walk_keys({"trainer": tr.data, "model": m.data}) if k not in _NEMO_READ | PEFT_READ] + notes
    return Imported(strategy, tuple(seen), "nemo")
