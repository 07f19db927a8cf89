"""Megatron-LM ``pretrain_gpt.py`` arguments -> a strategy mapping (see :mod:`strategies.importers`)."""
from __future__ import annotations

import re
from typing import Any

from strategies.errors import ConfigError
from strategies.import_common import (
    TOKENIZER_VOCAB,
    Imported,
    cluster_mapping,
    cuda_graph_option,
    moe_capacity_options,
    moe_dispatch_options,
    moe_routing_option,
    named_tokenizer_vocab,
    recompute_fields,
)
from strategies.megatron_log import is_megatron_log, measured_iteration_ms, read_megatron_log
from strategies.optimizer_dtypes import OPTIMIZER_DTYPE_CHOICES
from strategies.shell_args import LaunchWords, launch_words, unset_error

# ----------------------------------------------------------------------------------------- Megatron

class _Flags(dict):
    """``{flag: [value, ...]}`` in kebab case; ``get`` returns the one value bash passed, checked:
    a value the script leaves to the environment, or one set only in a branch whose condition
    cannot be decided, is one error naming its line (:func:`strategies.shell_args.unset_error`);
    two different values of a flag the importer reads are one error."""

    def get(self, name: str, default: Any = None) -> Any:
        vals = dict.get(self, name)
        if not vals:
            return default
        distinct = list(dict.fromkeys(str(v) for v in vals))
        marked = [v for v in vals if v is not True and (getattr(v, "unset", None) or getattr(v, "cond", None))]
        if len(distinct) > 1:
            cond = next((v for v in vals if getattr(v, "cond", None)), None)
            if cond is not None:
                raise unset_error(cond, f"--{name}")
            raise ConfigError(f"megatron arguments: --{name} is given twice ({_show(vals[0])} and {_show(vals[-1])}); "
                              f"keep one")
        if marked:
            raise unset_error(marked[0], f"--{name}")
        return vals[-1] if vals[-1] is True else str(vals[-1])

    def __getitem__(self, name: str) -> Any:
        return self.get(name)


def _show(v) -> str:
    return repr(True) if v is True else repr(str(v)[:40])


def _flags(tokens: list) -> tuple[_Flags, list]:
    """``--flag value`` / ``--flag=value`` / ``--flag`` -> ordered :class:`_Flags`; flags in kebab
    case (argparse accepts ``--flag_name`` too). torchrun's ``--nnodes`` / ``--nproc_per_node`` come
    from the launcher's words."""
    flags = _Flags()
    order: list = []
    i, n = 0, len(tokens)
    while i < n:
        t = tokens[i]
        if len(t) > 1 and t[0] == "-" and t[1] != "-" and not _NUMBER.fullmatch(str(t)):
            raise ConfigError(f"megatron argument {str(t)[:40]!r} is a single-dash flag; pretrain_gpt.py's flags "
                              f"start with -- (argparse refuses it): write --{str(t)[1:41]}")
        if t.startswith("--") and len(t) > 2:
            name, eq, val = t[2:].partition("=")
            name = name.replace("_", "-")
            if eq:
                val = _same_marks(val, t)
            elif i + 1 < n and (not tokens[i + 1].startswith("-") or _NUMBER.fullmatch(str(tokens[i + 1]))
                                or tokens[i + 1] == "-"):
                val = tokens[i + 1]
                i += 1
            else:
                val = True
            flags.setdefault(name, []).append(val)
            order.append(name)
        i += 1
    return flags, order


def _same_marks(val: str, word) -> Any:
    from strategies.shell_args import Word
    u, c = getattr(word, "unset", None), getattr(word, "cond", None)
    return Word(val, u, c) if (u or c) else val


_NUMBER = re.compile(r"-[0-9.]+(?:[eE][-+]?[0-9]+)?|-inf|-nan", re.IGNORECASE)

#: flags whose 0 means something (no layers recomputed, offloaded or moved; no shared expert)
_ZERO_OK = {"recompute-num-layers", "cpu-offloading-num-layers", "decoder-first-pipeline-num-layers",
            "decoder-last-pipeline-num-layers", "moe-shared-expert-intermediate-size"}
#: the largest integer any Megatron size or count here may take (a bound on the work it causes)
_INT_MAX = 10**15


def _int(flags: dict, name: str, default: Any = None) -> Any:
    v = flags.get(name, default)
    if v is default:
        return default
    try:
        n = int(str(v))
    except ValueError:
        raise ConfigError(f"megatron argument --{name} = {str(v)[:40]!r} must be an integer") from None
    low = 0 if name in _ZERO_OK else 1
    if not low <= n <= _INT_MAX:
        raise ConfigError(f"megatron argument --{name} = {str(v)[:40]} must be an integer in [{low}, {_INT_MAX:.0e}]"
                          f"{'' if n >= low else ' (a size or count of 0 or less means nothing to Megatron)'}")
    return n


def _dropout(flags: _Flags, name: str) -> float:
    """A dropout probability (arguments.py default 0.1), checked to be in [0, 1]."""
    p = _float(flags, name)
    if p is None:
        return 0.1
    if not 0 <= p <= 1:
        raise ConfigError(f"megatron argument --{name} = {p!r} must be a probability in [0, 1]")
    return p


def precision_aware_option(flags: _Flags, options: dict) -> None:
    """``options.optimizer_dtypes`` from ``--use-precision-aware-optimizer`` and its four dtype flags
    (arguments.py, NVIDIA/Megatron-LM d98e8a6: each defaults to fp32; without the switch optimizer_config.py
    asserts "... can only be fp32 when not using precision-aware optimizer"). ``--main-grads-dtype bf16``
    is the bf16 gradient buffer (arguments.py: accumulate_allreduce_grads_in_fp32 stays off, and must)."""
    given = {k: str(flags[f"{k.replace('_', '-')}-dtype"]) for k in OPTIMIZER_DTYPE_CHOICES
             if f"{k.replace('_', '-')}-dtype" in flags}
    for k, v in given.items():
        if v not in OPTIMIZER_DTYPE_CHOICES[k]:
            raise ConfigError(f"megatron argument --{k.replace('_', '-')}-dtype = {v[:40]!r} is not one of "
                              f"{', '.join(OPTIMIZER_DTYPE_CHOICES[k])}")
    if flags.get("use-precision-aware-optimizer") is not True:
        low = [k for k, v in given.items() if v != "fp32"]
        if low:
            raise ConfigError(f"megatron arguments: --{low[0].replace('_', '-')}-dtype {given[low[0]]} needs "
                              f"--use-precision-aware-optimizer (Megatron asserts it is fp32 otherwise); add it")
        return
    options["optimizer_dtypes"] = {k: v for k, v in given.items() if v != "fp32"}
    if given.get("main_grads") == "bf16":
        if flags.get("accumulate-allreduce-grads-in-fp32") is True:
            raise ConfigError("megatron arguments: --main-grads-dtype bf16 with --accumulate-allreduce-grads-in-fp32 "
                              "(Megatron asserts that main grads can only be fp32 then); drop one of them")
        options["fp32_grad_accum"] = False


def _float(flags: _Flags, name: str) -> float | None:
    v = flags.get(name)
    if v is None:
        return None
    try:
        return float(str(v))
    except ValueError:
        raise ConfigError(f"megatron argument --{name} = {str(v)[:40]!r} must be a number") from None


#: Megatron flags the importer reads (everything else is reported as not modeled)
MEGATRON_READ = {
    "tensor-model-parallel-size", "pipeline-model-parallel-size", "context-parallel-size",
    "expert-model-parallel-size", "num-layers-per-virtual-pipeline-stage", "virtual-pipeline-model-parallel-size",
    "sequence-parallel", "use-distributed-optimizer", "overlap-grad-reduce", "overlap-param-gather",
    "tp-comm-overlap", "decoder-first-pipeline-num-layers", "decoder-last-pipeline-num-layers",
    "micro-batch-size", "global-batch-size", "seq-length", "num-layers", "hidden-size", "num-attention-heads",
    "ffn-hidden-size", "group-query-attention", "num-query-groups", "kv-channels", "max-position-embeddings",
    "swiglu", "normalization", "position-embedding-type", "untie-embeddings-and-output-weights",
    "disable-bias-linear", "add-qkv-bias", "num-experts", "moe-router-topk", "moe-ffn-hidden-size",
    "moe-shared-expert-intermediate-size", "vocab-size", "tokenizer-type", "tokenizer-model", "bf16", "fp16",
    "fp8-format", "recompute-activations", "recompute-granularity", "recompute-method", "recompute-num-layers",
    "use-flash-attn", "attention-backend", "transformer-impl", "attention-dropout", "hidden-dropout",
    "train-iters", "train-samples", "nnodes", "nproc-per-node", "accumulate-allreduce-grads-in-fp32",
    "use-torch-fsdp2", "expert-tensor-parallel-size", "apply-layernorm-1p", "vocab-file", "merge-file",
    "cp-comm-type", "fp8-recipe", "fp8-param-gather", "grad-reduce-in-bf16", "use-megatron-fsdp",
    "data-parallel-sharding-strategy", "no-position-embedding", "use-mcore-models", "cpu-offloading",
    "cpu-offloading-num-layers", "moe-token-dispatcher-type", "moe-expert-capacity-factor",
    "moe-pad-expert-input-to-capacity", "overlap-moe-expert-parallel-comm", "delay-wgrad-compute",
    "moe-enable-deepep", "moe-flex-dispatcher-backend", "moe-flex-dispatcher-num-sms", "moe-deepep-num-sms",
    "moe-router-group-topk", "optimizer-cpu-offload", "optimizer-offload-fraction", "overlap-cpu-optimizer-d2h-h2d",
    "use-precision-aware-optimizer", "moe-shared-expert-overlap", "main-grads-dtype", "main-params-dtype",
    "exp-avg-dtype", "exp-avg-sq-dtype",
    "multi-latent-attention", "q-lora-rank", "kv-lora-rank", "qk-head-dim", "qk-pos-emb-head-dim", "v-head-dim",
    "moe-layer-freq", "mtp-num-layers", "quick-geglu", "window-size", "window-attn-skip-freq",
    "fp4-format", "fp4-recipe", "first-last-layers-bf16", "num-layers-at-start-in-bf16", "num-layers-at-end-in-bf16",
    "moe-router-force-load-balancing", "moe-router-enable-expert-bias",
    "cuda-graph-impl", "cuda-graph-scope", "cuda-graph-modules", "enable-cuda-graph", "external-cuda-graph",
    "cross-entropy-loss-fusion", "cross-entropy-fusion-impl",
}
#: Megatron-LM training scripts other than GPT (their models are not decoder-only GPTs) -> what they train
OTHER_MODELS = {"pretrain_mamba.py": "a Mamba / hybrid Mamba-Transformer model",
                "pretrain_hybrid.py": "a hybrid Mamba-Transformer model",
                "pretrain_bert.py": "BERT (an encoder with a binary head)", "pretrain_t5.py": "T5 (an encoder-decoder)",
                "pretrain_retro.py": "RETRO (retrieval-augmented)", "pretrain_ict.py": "ICT (a BERT retriever)",
                "pretrain_vlm.py": "a vision-language model", "pretrain_vision_classify.py": "a vision model",
                "pretrain_vision_dino.py": "a vision model", "pretrain_vision_inpaint.py": "a vision model"}
#: flags that only a model other than a GPT takes -> that model
OTHER_MODEL_FLAGS = {"hybrid-override-pattern": "a hybrid Mamba model", "hybrid-layer-pattern": "a hybrid Mamba model",
                     "hybrid-attention-ratio": "a hybrid Mamba model", "hybrid-mlp-ratio": "a hybrid Mamba model",
                     "mamba-state-dim": "a Mamba model", "encoder-num-layers": "an encoder-decoder (T5)",
                     "encoder-seq-length": "an encoder-decoder (T5) or a vision-language model",
                     "decoder-seq-length": "an encoder-decoder (T5) or a vision-language model",
                     "bert-no-binary-head": "BERT", "bert-binary-head": "BERT"}
#: flags the importer recognises but cannot map to the strategy schema -> why
REFUSED_FLAGS: dict = {}


def _edit1(a: str, b: str) -> bool:
    """One insertion, deletion or substitution apart."""
    if abs(len(a) - len(b)) > 1 or a == b:
        return False
    if len(a) > len(b):
        a, b = b, a
    i = 0
    while i < len(a) and a[i] == b[i]:
        i += 1
    return a[i:] == b[i + 1:] or (len(a) == len(b) and a[i + 1:] == b[i + 1:])


def _near_miss(flag: str) -> str | None:
    """The read flag one edit away from ``flag`` (at least 8 letters long, so that short real flags
    such as --fp16 / --bf16 are not each other's typos), or None."""
    if len(flag) < 8 or flag in REFUSED_FLAGS or flag in OTHER_MODEL_FLAGS:
        return None
    hits = sorted(k for k in MEGATRON_READ if len(k) >= 8 and _edit1(flag, k))
    return hits[0] if hits else None


def _maybe(flags: _Flags, name: str) -> Any:
    """A flag's value where an unknown one is harmless (a tokenizer path): None when not known."""
    try:
        return flags.get(name)
    except ConfigError:
        return None


#: Megatron-FSDP --data-parallel-sharding-strategy -> ZeRO stage (arguments.py; default optim_grads_params)
FSDP_SHARDING = {"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}
#: --fp8-recipe (megatron/core/transformer/transformer_config.py fp8_recipe, default 'delayed') -> options.fp8_recipe
FP8_RECIPES = {"delayed": "delayed", "tensorwise": "tensorwise", "blockwise": "blockwise", "mxfp8": "mxfp8"}


def import_megatron(text: str, *, cluster: str | None = None, nodes: int | None = None,
                    vocab: int | None = None, env: dict | None = None) -> Imported:
    """Map a Megatron-LM launch script (or the ``pretrain_gpt.py`` arguments pasted alone) to a
    strategy: the words bash would pass (:mod:`strategies.shell_args`), read as argparse would.

    The steps, in the order their errors are raised: the words (:func:`_launch_source`), the flags
    that refuse the run (:func:`_check_flags`), the sizes, then each section of the strategy —
    model (:func:`_model_section`), parallel (:func:`_parallel_section`), training
    (:func:`_training_section`), options (:func:`_options_section`) — and the cluster."""
    words, world, measured = _launch_source(text, env)
    flags, order = _flags(words.args)
    launcher, _ = _flags(words.launcher)
    _check_flags(flags, words)
    tp, pp, layers, h, heads, vpp = _sizes(flags)
    model, experts = _model_section(flags, order, layers, h, heads, vocab)
    parallel, ep = _parallel_section(flags, order, experts, tp, pp, layers, vpp)
    training, precision = _training_section(flags, layers, pp, vpp)
    options = _options_section(flags, order, precision, experts, ep, model, parallel["cp"])
    # --nodes / --cluster given: the launcher's counts are not needed (they may come from $NNODES unset here)
    nn_ = None if nodes is not None or world is not None else \
        (_int(launcher, "nnodes") if "nnodes" in launcher else _int(flags, "nnodes"))
    src = launcher if "nproc-per-node" in launcher else flags
    npn = _maybe(src, "nproc-per-node") if cluster else _int(src, "nproc-per-node")
    if npn is not None:
        npn = _int({"nproc-per-node": npn}, "nproc-per-node")
    strategy = {"model": model, "cluster": cluster_mapping(cluster, nodes if nodes is not None else (nn_ or (1 if world else None)),
                                                    "megatron arguments"),
                "parallel": parallel, "schedule": "interleaved-1f1b" if vpp > 1 else "1f1b",
                "training": training, "options": options}
    if npn is not None:
        strategy["_gpus_per_node"] = npn
    if world is not None:
        strategy["_world_size"] = world
        strategy["_nodes_from_world"] = nodes is None
    if measured is not None:
        strategy["_measured_iteration_ms"] = measured
    unmodeled = tuple("--" + f if " " not in f else f for f in dict.fromkeys(order) if f not in MEGATRON_READ)
    for f in unmodeled:   # a typo of a flag this importer reads would silently drop that setting
        near = _near_miss(f[2:]) if f.startswith("--") else None
        if near:
            raise ConfigError(f"megatron argument {f} is not a flag this importer knows, and it is one letter from "
                              f"--{near}, which it reads; fix the spelling (or remove it)")
    return Imported(strategy, unmodeled, "megatron")


def _launch_source(text: str, env: dict | None) -> tuple[LaunchWords, int | None, float | None]:
    """The words bash would pass, the world size a training log printed (or None) and the iteration
    time it measured (or None); a script that trains a model other than a GPT is refused here."""
    world, measured = None, None
    if is_megatron_log(text):        # a training log: the argument dump the run printed
        if env:
            raise ConfigError("--env sets shell variables of a launch script; a training log has none: drop it")
        args, world, times = read_megatron_log(text, MEGATRON_READ | set(REFUSED_FLAGS) | set(OTHER_MODEL_FLAGS))
        measured = measured_iteration_ms(times)
        words = LaunchWords(args, [], None)
    else:
        _check_source(text)
        words = launch_words(text, env)
    if words.script and words.script.rsplit("/", 1)[-1] in OTHER_MODELS:
        name = words.script.rsplit("/", 1)[-1]
        raise ConfigError(f"megatron script launches {name}, which trains {OTHER_MODELS[name]}; execsim models "
                          f"decoder-only GPT models (pretrain_gpt.py): not supported")
    return words, world, measured


def _check_flags(flags: _Flags, words: LaunchWords) -> None:
    """Flags that refuse the run: another model's, refused ones, none at all, contradictions, missing
    required ones."""
    for f in flags:
        if f in OTHER_MODEL_FLAGS:
            raise ConfigError(f"megatron argument --{f} configures {OTHER_MODEL_FLAGS[f]}; execsim models "
                              f"decoder-only GPT models (pretrain_gpt.py): not supported")
        if f in REFUSED_FLAGS:
            raise ConfigError(f"megatron argument --{f} is {REFUSED_FLAGS[f]}; not supported: drop it to "
                              f"simulate the run in BF16 or FP8 (--fp8-format)")
    if not flags and words.other_program and not words.args:
        prog = words.other_program[-60:]
        if prog.endswith(".sh"):
            raise ConfigError(f"megatron script runs {prog}, which execsim does not open (it reads only the file it "
                              f"is given); import that script instead")
        raise ConfigError(f"megatron script launches {prog}, not a Megatron-LM pretrain_*.py training script; "
                          f"give the script that runs pretrain_gpt.py")
    hidden = next((w for w in words.args if getattr(w, "unset", None)), None)
    if not flags and hidden is not None:
        raise unset_error(hidden, "the pretrain_gpt.py argument list")
    if not flags:
        raise ConfigError("megatron arguments: no --flags found; give the launch script or the pretrain_gpt.py "
                          "arguments")
    if flags.get("bf16") is True and flags.get("fp16") is True:
        raise ConfigError("megatron arguments: --bf16 and --fp16 are both given; keep one")
    if "recompute-activations" in flags and flags.get("recompute-granularity") == "full":
        raise ConfigError("megatron arguments: --recompute-activations (selective) contradicts "
                          "--recompute-granularity full; keep one")
    for req in ("num-layers", "hidden-size", "num-attention-heads", "seq-length", "global-batch-size"):
        if req not in flags:
            raise ConfigError(f"megatron arguments: --{req} is missing; add it (pretrain_gpt.py requires it)")


def _sizes(flags: _Flags) -> tuple[int, int, int, int, int, int]:
    """``(tp, pp, layers, hidden, heads, vpp)``; vpp from either of Megatron's two flags for it."""
    tp = _int(flags, "tensor-model-parallel-size", 1)
    pp = _int(flags, "pipeline-model-parallel-size", 1)
    layers = _int(flags, "num-layers")
    h = _int(flags, "hidden-size")
    heads = _int(flags, "num-attention-heads")
    vpp = _int(flags, "virtual-pipeline-model-parallel-size", 1)
    per_chunk = _int(flags, "num-layers-per-virtual-pipeline-stage")
    if per_chunk is not None:
        if layers % (pp * per_chunk):
            raise ConfigError(f"megatron arguments: --num-layers {layers} is not divisible by "
                              f"--pipeline-model-parallel-size {pp} x --num-layers-per-virtual-pipeline-stage {per_chunk}")
        v = layers // (pp * per_chunk)
        if "virtual-pipeline-model-parallel-size" in flags and v != vpp:
            raise ConfigError(f"megatron arguments: --num-layers-per-virtual-pipeline-stage {per_chunk} gives "
                              f"{v} chunks per rank but --virtual-pipeline-model-parallel-size is {vpp}; keep one")
        vpp = v
    return tp, pp, layers, h, heads, vpp


def _model_section(flags: _Flags, order: list, layers: int, h: int, heads: int,
                   vocab: int | None) -> tuple[dict, int | None]:
    """The strategy's ``model`` mapping and the expert count (None for a dense model); ``vocab`` is
    the user's ``--vocab``, which wins over the tokenizer's."""
    swiglu = flags.get("swiglu") is True
    geglu = flags.get("quick-geglu") is True
    if swiglu and geglu:
        raise ConfigError("megatron arguments: --swiglu and --quick-geglu are both given; keep one")
    ffn = _int(flags, "ffn-hidden-size")
    if ffn is None:  # Megatron arguments.py: 4h, or int(4h * 2/3 / 64) * 64 with --swiglu
        ffn = int(4 * h * 2 / 3 / 64) * 64 if swiglu else 4 * h
    kv = _int(flags, "num-query-groups", 1) if flags.get("group-query-attention") is True else heads
    v_size = vocab or _int(flags, "vocab-size") or named_tokenizer_vocab(_maybe(flags, "tokenizer-model")) \
        or named_tokenizer_vocab(_maybe(flags, "tokenizer-type"))
    if not v_size and "gpt2" in str(_maybe(flags, "vocab-file") or "").lower() and "merge-file" in flags:
        v_size = TOKENIZER_VOCAB["gpt2"]   # GPT-2 BPE vocab/merges files (Megatron examples/gpt3)
    if not v_size:
        raise ConfigError("megatron arguments: the vocabulary size is not known from --tokenizer-type/--tokenizer-model; "
                          "add --vocab-size N to the arguments or give --vocab N")
    model: dict = {"name": "megatron-gpt", "layers": layers, "hidden": h, "heads": heads, "kv_heads": kv,
                   "ffn": ffn, "vocab": v_size, "mlp": "swiglu" if swiglu else ("geglu" if geglu else "gelu"),
                   "norm": "rmsnorm" if str(flags.get("normalization", "LayerNorm")).lower() == "rmsnorm" else "layernorm",
                   "position": "rope" if flags.get("position-embedding-type", "learned_absolute") == "rope" else "learned",
                   "max_seq": _int(flags, "max-position-embeddings", _int(flags, "seq-length")),
                   "tied_embeddings": flags.get("untie-embeddings-and-output-weights") is not True,
                   "bias": flags.get("disable-bias-linear") is not True,
                   "dropout": max(_dropout(flags, "hidden-dropout"), _dropout(flags, "attention-dropout")) > 0}
    if flags.get("add-qkv-bias") is True:
        model["qkv_bias"] = True
    if "kv-channels" in flags:
        model["head_dim"] = _int(flags, "kv-channels")
    _mla_window_mtp(flags, model, layers)
    experts = _int(flags, "num-experts")
    if experts:
        model.update(experts=experts, top_k=_int(flags, "moe-router-topk", 2),
                     expert_ffn=_int(flags, "moe-ffn-hidden-size", ffn))
        shared = _int(flags, "moe-shared-expert-intermediate-size")
        if shared:
            if shared % model["expert_ffn"]:
                raise ConfigError(f"megatron arguments: --moe-shared-expert-intermediate-size {shared} is not a multiple "
                                  f"of the expert size {model['expert_ffn']}")
            model["shared_experts"] = shared // model["expert_ffn"]
        freq = flags.get("moe-layer-freq")
        if freq is not None:
            pattern = _layer_pattern(str(freq), layers, "moe-layer-freq")
            if isinstance(pattern, int):
                if pattern > 1:
                    model["moe_layers"] = pattern     # gpt_layer_specs.py: layer i is MoE when i % freq == 0
            else:
                model["moe_layers"] = [i for i, v in enumerate(pattern) if v]
    elif "moe-layer-freq" in flags:
        order.append("moe-layer-freq (no effect without --num-experts)")
    return model, experts


def _parallel_section(flags: _Flags, order: list, experts: int | None, tp: int, pp: int, layers: int,
                      vpp: int) -> tuple[dict, int]:
    """The strategy's ``parallel`` mapping and the expert-parallel size."""
    ep = _int(flags, "expert-model-parallel-size", 1)
    if experts and ep > 1:
        # transformer_config.py moe_token_dispatcher_type: 'allgather' (default), 'alltoall', 'flex' (DeepEP)
        disp = str(flags.get("moe-token-dispatcher-type", "allgather"))
        if disp not in ("alltoall", "flex", "allgather"):
            order.append(f"moe-token-dispatcher-type {disp}{' (the default)' if 'moe-token-dispatcher-type' not in flags else ''}"
                         f" (simulated as the all-to-all dispatcher)")
    # Megatron defaults expert TP to TP (arguments.py: expert_tensor_parallel_size = tensor_model_parallel_size)
    etp = _int(flags, "expert-tensor-parallel-size", tp)
    if flags.get("use-megatron-fsdp") is True:
        strat = str(flags.get("data-parallel-sharding-strategy", "optim_grads_params"))
        if strat not in FSDP_SHARDING:
            raise ConfigError(f"megatron argument --data-parallel-sharding-strategy = {strat[:40]!r} must be one of "
                              f"{', '.join(FSDP_SHARDING)}")
        zero = FSDP_SHARDING[strat]
    else:
        zero = 3 if flags.get("use-torch-fsdp2") is True else (1 if flags.get("use-distributed-optimizer") is True else 0)
    parallel: dict = {"tp": tp, "pp": pp, "cp": _int(flags, "context-parallel-size", 1), "ep": ep,
                      # Megatron turns sequence parallelism off when tp == 1 (arguments.py)
                      "sp": flags.get("sequence-parallel") is True and tp > 1, "zero": zero}
    if etp != tp:
        parallel["etp"] = etp
    if vpp > 1:
        parallel["vpp"] = vpp
    first, last = _int(flags, "decoder-first-pipeline-num-layers"), _int(flags, "decoder-last-pipeline-num-layers")
    if first is not None or last is not None:
        if vpp > 1:
            raise ConfigError("megatron arguments: --decoder-first/last-pipeline-num-layers with virtual pipelining "
                              "is not modeled; drop one")
        inner = pp - (first is not None) - (last is not None)
        rest = layers - (first or 0) - (last or 0)
        if inner < 0 or (inner and rest % inner) or (not inner and rest):
            raise ConfigError(f"megatron arguments: --num-layers {layers} minus the first/last stage layers does not "
                              f"split evenly over the other {inner} stages")
        lps = ([first] if first is not None else []) + [rest // inner] * inner if inner else []
        if not inner:
            lps = [first] if first is not None else []
        lps += [last] if last is not None else []
        parallel["layers_per_stage"] = lps
    return parallel, ep


def _training_section(flags: _Flags, layers: int, pp: int, vpp: int) -> tuple[dict, str]:
    """The strategy's ``training`` mapping and its GEMM precision."""
    seq = _int(flags, "seq-length")
    gb = _int(flags, "global-batch-size")
    # --fp4-format e2m1 (dest fp4) with --fp4-recipe nvfp4, Megatron-LM arguments.py _add_transformer_engine_args
    if flags.get("fp4-format") is not None and flags.get("fp8-format") is not None:
        raise ConfigError("megatron arguments: --fp4-format and --fp8-format are both set; a run trains its GEMMs "
                          "in one of them: keep one")
    precision = "fp4" if flags.get("fp4-format") is not None else \
        "fp8" if flags.get("fp8-format") is not None else ("fp16" if flags.get("fp16") is True else "bf16")
    training: dict = {"micro_batch": _int(flags, "micro-batch-size", 1), "global_batch": gb, "seq_len": seq,
                      "precision": precision}
    if "recompute-activations" in flags:
        training["recompute"] = "selective"
    else:
        training.update(recompute_fields(flags.get("recompute-granularity"), flags.get("recompute-method"),
                                   _int(flags, "recompute-num-layers"), layers, pp * vpp, "megatron arguments:"))
    if "train-samples" in flags:
        training["train_tokens"] = float(_int(flags, "train-samples") * seq)
    elif "train-iters" in flags:
        training["train_tokens"] = float(_int(flags, "train-iters") * gb * seq)
    return training, precision


def _options_section(flags: _Flags, order: list, precision: str, experts: int | None, ep: int, model: dict,
                     cp: int) -> dict:
    """The strategy's ``options`` mapping: overlaps, attention kernel, low-precision recipe, MoE
    dispatch and capacity, offloads, the context-parallel exchange."""
    backend = flags.get("attention-backend", "auto")
    impl = flags.get("transformer-impl", "transformer_engine")
    flash = backend in ("flash", "fused", "auto") and (impl == "transformer_engine" or flags.get("use-flash-attn") is True)
    if backend == "flash" or flags.get("use-flash-attn") is True:
        flash = True
    cp_type = str(flags.get("cp-comm-type", "p2p"))   # Megatron default: p2p (ring attention)
    cp_map = {"p2p": "ring", "a2a": "a2a", "allgather": "allgather"}
    if cp_type not in cp_map:
        order.append(f"cp-comm-type {cp_type} (hierarchical not modeled; simulated as ring)")
    options = {"overlap_grad_reduce": flags.get("overlap-grad-reduce") is True,
               "overlap_param_gather": flags.get("overlap-param-gather") is True,
               "tp_comm_overlap": flags.get("tp-comm-overlap") is True,
               "flash_attention": bool(flash),
               # Megatron keeps main grads in fp32 with bf16 (arguments.py forces it) or when asked
               # --grad-reduce-in-bf16 keeps the gradient buffer (and its reduction) in bf16 (arguments.py
               # sets grad_reduce_in_fp32 False; distributed_data_parallel_config.py)
               "fp32_grad_accum": (precision != "fp16" and flags.get("grad-reduce-in-bf16") is not True)
               or flags.get("accumulate-allreduce-grads-in-fp32") is True}
    if precision == "fp8":
        recipe = str(flags.get("fp8-recipe", "delayed"))
        if recipe not in FP8_RECIPES:
            raise ConfigError(f"megatron argument --fp8-recipe = {recipe[:40]!r} is not modeled; one of "
                              f"{', '.join(FP8_RECIPES)}")
        options["fp8_recipe"] = FP8_RECIPES[recipe]
        if flags.get("fp8-param-gather") is True:
            options["fp8_param_gather"] = True
    if precision == "fp4":
        recipe = str(flags.get("fp4-recipe", "nvfp4"))
        if recipe != "nvfp4":
            raise ConfigError(f"megatron argument --fp4-recipe = {recipe[:40]!r} is not modeled; the one recipe is nvfp4")
        options["fp4_recipe"] = "nvfp4"
    if precision in ("fp8", "fp4"):
        # --first-last-layers-bf16 keeps --num-layers-at-start/end-in-bf16 layers (default 1 each) in BF16;
        # without it Megatron builds every layer in the low precision (arguments.py, transformer_config.py)
        both = flags.get("first-last-layers-bf16") is True
        if both or precision == "fp4":   # fp4's own default would be the NVFP4 paper's share: say what ran
            options["num_layers_at_start_in_bf16"] = _int(flags, "num-layers-at-start-in-bf16", 1) if both else 0
            options["num_layers_at_end_in_bf16"] = _int(flags, "num-layers-at-end-in-bf16", 1) if both else 0
    if experts:
        moe_capacity_options(options, _float(flags, "moe-expert-capacity-factor"), flags.get("moe-pad-expert-input-to-capacity") is True)
        moe_routing_option(options, flags.get("moe-router-force-load-balancing") is True,
                           flags.get("moe-router-enable-expert-bias") is True)
    if flags.get("optimizer-cpu-offload") is True:
        # optimizer_config.py: optimizer_offload_fraction defaults to 0.0 (nothing offloaded); arguments.py
        # asserts --use-precision-aware-optimizer (options.optimizer_dtypes, below)
        if flags.get("use-precision-aware-optimizer") is not True:
            raise ConfigError("megatron arguments: --optimizer-cpu-offload needs --use-precision-aware-optimizer "
                              "(Megatron asserts it: \"the hybrid device optimizer reuses the code path of this "
                              "flag\"); add it")
        options["optimizer_cpu_offload"] = True
        options["optimizer_offload_fraction"] = _float(flags, "optimizer-offload-fraction") or 0.0
        if flags.get("overlap-cpu-optimizer-d2h-h2d") is True:
            options["overlap_cpu_optimizer_d2h_h2d"] = True
    else:
        for f in ("optimizer-offload-fraction", "overlap-cpu-optimizer-d2h-h2d"):
            if f in flags:
                order.append(f"{f} (no effect without optimizer-cpu-offload)")
    precision_aware_option(flags, options)
    cuda_graph_option(lambda k: flags.get(k.replace("_", "-")), lambda k: k.replace("_", "-"), options,
                      "megatron arguments: --")
    moe_dispatch_options(lambda k: flags.get(k.replace("_", "-")), lambda k: k.replace("_", "-"), options, order,
                         bool(experts) and ep > 1, "megatron arguments: --", shared=bool(model.get("shared_experts")),
                         dispatcher_default="allgather")
    offload = _int(flags, "cpu-offloading-num-layers", 0)
    if offload:   # activations of that many layers to host memory (transformer_config.cpu_offloading_num_layers)
        options["activation_offload_layers"] = offload
    if cp > 1:
        options["cp_comm"] = cp_map.get(cp_type, "ring")
    options["cross_entropy"] = _cross_entropy(flags, order)   # taskgraph/data/stacks.yaml [MEG-CE]
    return options


def _cross_entropy(flags: _Flags, order: list) -> str:
    """options.cross_entropy as Megatron runs the loss (megatron/core/models/common/language_module/
    language_module.py compute_language_model_loss, d98e8a6): the eager fp32 VocabParallelCrossEntropy
    unless --cross-entropy-loss-fusion (off by default: model_parallel_config.py), then
    --cross-entropy-fusion-impl native (the default) or te."""
    impl = str(flags.get("cross-entropy-fusion-impl", "native"))
    if impl not in ("native", "te"):
        raise ConfigError(f"megatron argument --cross-entropy-fusion-impl = {impl[:40]!r} is not one of native, te")
    if flags.get("cross-entropy-loss-fusion") is not True:
        if "cross-entropy-fusion-impl" in flags:
            order.append("cross-entropy-fusion-impl (no effect without cross-entropy-loss-fusion)")
        return "eager-fp32"
    return impl


def _check_source(text: str) -> None:
    """A file that is no launch script: one error saying what it is."""
    if "\x00" in text:
        raise ConfigError("megatron script contains NUL bytes (a binary file?); give the bash launch script, the "
                          "pretrain_gpt.py arguments or a training log")
    if "elapsed time per iteration (ms)" in text or "> building " in text and " tokenizer" in text:
        raise ConfigError("megatron source is a training log without its argument dump (the '---- arguments ----' "
                          "banner Megatron-LM prints at the start): give the log from its first line")
    head = text.lstrip()[:4000]
    if head.startswith(("import ", "from ", "def ", "class ", '"""', "#!/usr/bin/env python", "#!/usr/bin/python")) \
            or "\nimport " in head[:2000] and "\ndef " in head or "if __name__ == " in text:
        raise ConfigError("megatron script is a Python file; execsim reads a bash launch script (or the "
                          "pretrain_gpt.py arguments, or a training log), and never runs Python: give the .sh "
                          "script that launches training")


def _mla_window_mtp(flags: _Flags, model: dict, layers: int) -> None:
    """Multi-latent attention, sliding-window attention and MTP modules (Megatron-LM arguments.py,
    commit d98e8a64: _add_mla_args defaults q_lora_rank None, kv_lora_rank 32, qk_head_dim 128,
    qk_pos_emb_head_dim 64, v_head_dim 128; --window-size (left, right); --mtp-num-layers)."""
    if flags.get("multi-latent-attention") is True:
        qk, rope = _int(flags, "qk-head-dim", 128), _int(flags, "qk-pos-emb-head-dim", 64)
        # MLA queries/keys are qk_head_dim (no RoPE) + qk_pos_emb_head_dim (decoupled RoPE) wide per head
        model.update(attention="mla", head_dim=qk + rope, qk_rope_head_dim=rope,
                     kv_lora_rank=_int(flags, "kv-lora-rank", 32), v_head_dim=_int(flags, "v-head-dim", 128))
        q = _int(flags, "q-lora-rank")
        if q:
            model["q_lora_rank"] = q
    else:
        for f in ("q-lora-rank", "kv-lora-rank", "qk-head-dim", "qk-pos-emb-head-dim", "v-head-dim"):
            if f in flags:
                raise ConfigError(f"megatron argument --{f} is a multi-latent attention size but "
                                  f"--multi-latent-attention is not given; add it or drop --{f}")
    if "window-size" in flags:
        m = re.fullmatch(r"\(?\s*(-?\d+)\s*,\s*(-?\d+)\s*\)?", str(flags.get("window-size")))
        if not m:
            raise ConfigError(f"megatron argument --window-size = {str(flags.get('window-size'))[:40]!r} must be "
                              f"(LEFT,RIGHT), e.g. (4096,0)")
        left = int(m.group(1))
        if left > 0:     # TE window (left, right): each query sees `left` earlier tokens; -1 = unlimited
            model["sliding_window"] = left
            skip = flags.get("window-attn-skip-freq")
            if skip is not None:
                _window_skip(_layer_pattern(str(skip), layers, "window-attn-skip-freq"), model)
    elif "window-attn-skip-freq" in flags:
        raise ConfigError("megatron argument --window-attn-skip-freq has no effect without --window-size; "
                          "add --window-size or drop it")
    mtp = _int(flags, "mtp-num-layers")
    if mtp:
        model["mtp_layers"] = mtp


def _window_skip(pattern, model: dict) -> None:
    """``--window-attn-skip-freq``: an int N makes 1-based layer n global when n % N == 0
    (megatron/core/transformer/utils.py is_layer_window_attention) = every N-th from index N-1; a list
    marks window layers 1 and global layers 0, read when its global layers are every k-th from one start."""
    if isinstance(pattern, int):
        if pattern > 1:
            model["global_attention_every"] = pattern
        return
    glob = [i for i, v in enumerate(pattern) if not v]
    if not glob:
        return
    step = glob[1] - glob[0] if len(glob) > 1 else len(pattern)
    if glob != list(range(glob[0], len(pattern), step)):
        raise ConfigError(f"megatron argument --window-attn-skip-freq: the full-attention layers {glob[:8]} are "
                          f"not every k-th layer from one start, which is what execsim models; not supported")
    model["global_attention_every"] = step
    if glob[0] != step - 1:
        model["global_attention_start"] = glob[0]


def _layer_pattern(text: str, layers: int, flag: str):
    """Megatron's moe_freq_type (arguments.py): an integer, or a list expression such as
    ``([0]*3+[1]*58)`` of one 0/1 per layer, read here without evaluating Python (lists of 0/1,
    ``+``, ``*`` by an integer, parentheses; each product's length checked before it is built)."""
    import ast
    t = text.strip()
    if re.fullmatch(r"\d+", t):
        n = int(t)
        if not 1 <= n <= max(layers, 1):
            raise ConfigError(f"megatron argument --{flag} = {n} must be in [1, {layers}] (the number of layers)")
        return n
    if len(t) > 10_000:
        raise ConfigError(f"megatron argument --{flag} is {len(t):,} characters long; write the pattern with * ")
    try:
        tree = ast.parse(t, mode="eval").body
    except SyntaxError:
        tree = None

    def build(node) -> list:
        if isinstance(node, ast.List) and all(isinstance(e, ast.Constant) and e.value in (0, 1)
                                              and type(e.value) is int for e in node.elts):
            return [e.value for e in node.elts]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            a, b = build(node.left), build(node.right)
            if len(a) + len(b) > layers:
                raise ValueError
            return a + b
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            lst, k = (node.left, node.right) if isinstance(node.right, ast.Constant) else (node.right, node.left)
            if not (isinstance(k, ast.Constant) and type(k.value) is int and 0 <= k.value <= layers):
                raise ValueError
            base = build(lst)
            if len(base) * k.value > layers:
                raise ValueError
            return base * k.value
        raise ValueError
    try:
        pattern = build(tree) if tree is not None else None
    except (ValueError, RecursionError):
        pattern = None
    if pattern is None or len(pattern) != layers:
        raise ConfigError(f"megatron argument --{flag} = {t[:40]!r} must be an integer or a list of one 0/1 per "
                          f"layer ({layers}), written with [0], [1], + and *, e.g. ([0]*3+[1]*{max(layers - 3, 1)})")
    return pattern
