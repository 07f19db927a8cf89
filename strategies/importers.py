"""Strategy files from the configurations people already have: a Megatron-LM launch script, a NeMo
(1.x / NeMo-Framework-Launcher) YAML recipe, a torchtitan TOML file.

Each importer is one function in :data:`IMPORTERS` that maps the source's flags or keys to a strategy
mapping (the schema of :mod:`strategies.strategy_file`) and returns an :class:`Imported` with the
flags/keys it read but does not model (the CLI prints them in one warning line; nothing is dropped
silently). Contradictory settings raise one :class:`ConfigError` naming both. The cluster comes from
the caller (``cluster``, ``nodes``), or from the source where it says (``torchrun --nnodes``, NeMo
``trainer.num_nodes``).

Sources of the flag meanings: Megatron-LM ``megatron/training/arguments.py`` (flag names, defaults
such as ``--ffn-hidden-size`` = 4h, or 8h/3 rounded down to a multiple of 64 with ``--swiglu``;
``--overlap-grad-reduce`` / ``--overlap-param-gather`` off unless given); NeMo 1.x
``examples/nlp/language_modeling/conf/megatron_gpt_config.yaml`` and the NeMo-Framework-Launcher
``conf/training/*`` recipes; torchtitan ``torchtitan/config/job_config.py`` and
``torchtitan/models/llama3/train_configs/*.toml``.

>>> imp = import_config("megatron", "--tensor-model-parallel-size 2 --num-layers 4 --hidden-size 256 "
...     "--num-attention-heads 8 --seq-length 512 --micro-batch-size 1 --global-batch-size 8 --vocab-size 1000 "
...     "--bf16 --lr 3e-4", cluster="dgx-h100", nodes=1)
>>> imp.strategy["parallel"]["tp"], imp.strategy["training"]["precision"], imp.unmodeled
(2, 'bf16', ('--lr',))
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any, Callable

from strategies.config import did_you_mean
from strategies.errors import ConfigError

#: Vocabulary sizes of tokenizers named in recipes (the tokenizer's own vocab; Megatron pads it).
#: GPT-2 BPE 50257 (Radford 2019); Llama 2 / Mistral / Mixtral SentencePiece 32000 (Touvron 2023,
#: HF config.json); Llama 3 tiktoken 128256 (Dubey 2024 Section 2.1 / HF config.json).
TOKENIZER_VOCAB = {"gpt2": 50257, "GPT2BPETokenizer": 50257, "meta-llama/Llama-2": 32000,
                   "meta-llama/Meta-Llama-3": 128256, "meta-llama/Llama-3": 128256, "meta-llama/Meta-Llama-3.1": 128256,
                   "mistralai/Mistral": 32000, "mistralai/Mixtral": 32000}


@dataclass(frozen=True)
class Imported:
    """A strategy mapping built from another tool's configuration."""

    strategy: dict
    """Strategy-file mapping (model, cluster, parallel, schedule, training, options)."""
    unmodeled: tuple
    """Flags or keys the source sets that the simulator does not model, in source order."""
    source: str
    """Which importer made it ('megatron', 'nemo', 'torchtitan')."""


def _tokenizer_vocab(name: str | None) -> int | None:
    if not name:
        return None
    for prefix, v in TOKENIZER_VOCAB.items():
        if str(name).startswith(prefix):
            return v
    return None


def _cluster(cluster: str | None, nodes: int | None, where: str) -> dict:
    if not cluster:
        raise ConfigError(f"{where}: the cluster is not in the source; give --cluster PRESET (e.g. dgx-h100) "
                          f"and --nodes N")
    if nodes is None:
        raise ConfigError(f"{where}: the number of nodes is not in the source; give --nodes N")
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise ConfigError(f"--nodes = {nodes!r} must be a positive integer")
    return {"preset": cluster, "nodes": nodes}


def _recompute(granularity: str | None, method: str | None, num_layers: int | None, layers: int,
               stages: int, where: str) -> dict:
    """Megatron/NeMo activation recomputation -> training.recompute (+ recompute_layers for 'block').

    Megatron (arguments.py, transformer_block.py): 'selective' recomputes the attention core;
    'full' + 'uniform' recomputes every layer (in groups of N); 'full' + 'block' recomputes the first
    N layers of each pipeline (virtual) stage and keeps the rest."""
    if granularity in (None, "", "none", "null"):
        return {"recompute": "none"}
    if granularity == "selective":
        return {"recompute": "selective"}
    if granularity != "full":
        raise ConfigError(f"{where} recompute granularity = {granularity!r} must be full or selective")
    if method in (None, "uniform"):
        return {"recompute": "full"}
    if method != "block":
        raise ConfigError(f"{where} recompute method = {method!r} must be uniform or block")
    if num_layers is None:
        raise ConfigError(f"{where} recompute method 'block' needs the number of layers (recompute-num-layers)")
    if layers % stages:
        return {"recompute": "full"}  # uneven stages: the simulator's own split decides; stay conservative
    per = layers // stages
    if not 0 <= num_layers <= per:
        raise ConfigError(f"{where} recompute-num-layers = {num_layers} with method 'block' recomputes that many "
                          f"layers of each pipeline stage, but a stage holds {per} ({layers} layers over {stages} "
                          f"stages); give at most {per}")
    n = num_layers
    return {"recompute_layers": (["full"] * n + ["none"] * (per - n)) * stages}


# ----------------------------------------------------------------------------------------- Megatron

def _shell_tokens(text: str) -> list[str]:
    """Tokens of a launch script: comments and line continuations removed, simple ``NAME=value``
    assignments substituted for ``$NAME`` / ``${NAME}`` (bash arrays ``X=( ... )`` included)."""
    text = text.replace("\\\r\n", " ").replace("\\\n", " ")
    env: dict = {}
    for m in re.finditer(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(\S[^\n#]*)", text, re.M):
        val = m.group(2).strip()
        if val.startswith("(") or val.startswith('"') or val.startswith("'"):
            continue
        env[m.group(1)] = val.split()[0]

    def sub(s: str) -> str:
        for _ in range(5):
            s2 = re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)",
                        lambda m: env.get(m.group(1) or m.group(3), m.group(2) if m.group(2) is not None else m.group(0)),
                        s)
            if s2 == s:
                break
            s = s2
        return s

    try:
        toks = shlex.split(sub(text), comments=True)
    except ValueError as exc:
        raise ConfigError(f"megatron arguments: cannot split the text into words ({exc}); check the quotes") from None
    out = []
    for t in toks:
        t = t.strip("()")
        if t:
            out.append(t)
    return out


def _flags(tokens: list[str]) -> tuple[dict, list]:
    """``--flag value`` / ``--flag=value`` / ``--flag`` -> ordered {flag: value or True}; flags in
    kebab case. Also torchrun's ``--nnodes`` / ``--nproc_per_node``."""
    flags: dict = {}
    order: list = []
    i = 0
    while i < len(tokens):
        t = tokens[i]
        if t.startswith("--") and len(t) > 2:
            name, eq, val = t[2:].partition("=")
            name = name.replace("_", "-")
            if not eq:
                if i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
                    val = tokens[i + 1]
                    i += 1
                else:
                    val = True
            if name in flags and flags[name] != val:
                raise ConfigError(f"megatron arguments: --{name} is given twice ({flags[name]!r} and {val!r}); keep one")
            flags[name] = val
            order.append(name)
        i += 1
    return flags, order


def _int(flags: dict, name: str, default: Any = None) -> Any:
    v = flags.get(name, default)
    if v is default:
        return default
    try:
        return int(str(v))
    except ValueError:
        raise ConfigError(f"megatron argument --{name} = {str(v)[:40]!r} must be an integer") from None


#: Megatron flags the importer reads (everything else is reported as not modeled)
_MEGATRON_READ = {
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
    "cp-comm-type",
}


def import_megatron(text: str, *, cluster: str | None = None, nodes: int | None = None,
                    vocab: int | None = None) -> Imported:
    """Map Megatron-LM ``pretrain_gpt.py`` arguments (as pasted from a launch script) to a strategy."""
    flags, order = _flags(_shell_tokens(text))
    if not flags:
        raise ConfigError("megatron arguments: no --flags found; paste the pretrain_gpt.py arguments")
    if flags.get("bf16") is True and flags.get("fp16") is True:
        raise ConfigError("megatron arguments: --bf16 and --fp16 are both given; keep one")
    if "recompute-activations" in flags and flags.get("recompute-granularity") == "full":
        raise ConfigError("megatron arguments: --recompute-activations (selective) contradicts "
                          "--recompute-granularity full; keep one")
    for req in ("num-layers", "hidden-size", "num-attention-heads", "seq-length", "global-batch-size"):
        if req not in flags:
            raise ConfigError(f"megatron arguments: --{req} is missing; add it (pretrain_gpt.py requires it)")
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
    swiglu = flags.get("swiglu") is True
    ffn = _int(flags, "ffn-hidden-size")
    if ffn is None:  # Megatron arguments.py: 4h, or int(4h * 2/3 / 64) * 64 with --swiglu
        ffn = int(4 * h * 2 / 3 / 64) * 64 if swiglu else 4 * h
    kv = _int(flags, "num-query-groups", 1) if flags.get("group-query-attention") is True else heads
    v_size = vocab or _int(flags, "vocab-size") or _tokenizer_vocab(flags.get("tokenizer-model")) \
        or _tokenizer_vocab(flags.get("tokenizer-type"))
    if not v_size and "gpt2" in str(flags.get("vocab-file", "")).lower() and "merge-file" in flags:
        v_size = TOKENIZER_VOCAB["gpt2"]   # GPT-2 BPE vocab/merges files (Megatron examples/gpt3)
    if not v_size:
        raise ConfigError("megatron arguments: the vocabulary size is not known from --tokenizer-type/--tokenizer-model; "
                          "add --vocab-size N to the arguments or give --vocab N")
    model: dict = {"name": "megatron-gpt", "layers": layers, "hidden": h, "heads": heads, "kv_heads": kv,
                   "ffn": ffn, "vocab": v_size, "mlp": "swiglu" if swiglu else "gelu",
                   "norm": "rmsnorm" if str(flags.get("normalization", "LayerNorm")).lower() == "rmsnorm" else "layernorm",
                   "position": "rope" if flags.get("position-embedding-type", "learned_absolute") == "rope" else "learned",
                   "max_seq": _int(flags, "max-position-embeddings", _int(flags, "seq-length")),
                   "tied_embeddings": flags.get("untie-embeddings-and-output-weights") is not True,
                   "bias": flags.get("disable-bias-linear") is not True,
                   "dropout": float(flags.get("hidden-dropout", 0.1)) > 0 or float(flags.get("attention-dropout", 0.1)) > 0}
    if flags.get("add-qkv-bias") is True:
        model["qkv_bias"] = True
    if "kv-channels" in flags:
        model["head_dim"] = _int(flags, "kv-channels")
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
    ep = _int(flags, "expert-model-parallel-size", 1)
    etp = _int(flags, "expert-tensor-parallel-size")
    if etp is not None and etp != tp:
        order.append("expert-tensor-parallel-size (!= tp not modeled)")
    parallel: dict = {"tp": tp, "pp": pp, "cp": _int(flags, "context-parallel-size", 1), "ep": ep,
                      # Megatron turns sequence parallelism off when tp == 1 (arguments.py)
                      "sp": flags.get("sequence-parallel") is True and tp > 1,
                      "zero": 3 if flags.get("use-torch-fsdp2") is True else
                      (1 if flags.get("use-distributed-optimizer") is True else 0)}
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
    seq = _int(flags, "seq-length")
    gb = _int(flags, "global-batch-size")
    precision = "fp8" if "fp8-format" in flags else ("fp16" if flags.get("fp16") is True else "bf16")
    training: dict = {"micro_batch": _int(flags, "micro-batch-size", 1), "global_batch": gb, "seq_len": seq,
                      "precision": precision}
    if "recompute-activations" in flags:
        training["recompute"] = "selective"
    else:
        training.update(_recompute(flags.get("recompute-granularity"), flags.get("recompute-method"),
                                   _int(flags, "recompute-num-layers"), layers, pp * vpp, "megatron arguments:"))
    if "train-samples" in flags:
        training["train_tokens"] = float(_int(flags, "train-samples") * seq)
    elif "train-iters" in flags:
        training["train_tokens"] = float(_int(flags, "train-iters") * gb * seq)
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
               "fp32_grad_accum": precision != "fp16" or flags.get("accumulate-allreduce-grads-in-fp32") is True}
    if parallel["cp"] > 1:
        options["cp_comm"] = cp_map.get(cp_type, "ring")
    nn_, npn = _int(flags, "nnodes"), _int(flags, "nproc-per-node")
    strategy = {"model": model, "cluster": _cluster(cluster, nodes if nodes is not None else nn_, "megatron arguments"),
                "parallel": parallel, "schedule": "interleaved-1f1b" if vpp > 1 else "1f1b",
                "training": training, "options": options}
    if npn is not None:
        strategy["_gpus_per_node"] = npn
    unmodeled = tuple("--" + f if " " not in f else f for f in dict.fromkeys(order) if f not in _MEGATRON_READ)
    return Imported(strategy, unmodeled, "megatron")


# ------------------------------------------------------------------------------------------------ NeMo

def _walk(d: Any, prefix: str = "") -> list[str]:
    """Dotted names of the leaves of ``d`` that are set (None = not set, not listed)."""
    if isinstance(d, dict):
        out = []
        for k, v in d.items():
            if v is None:
                continue
            out += _walk(v, f"{prefix}{k}.") if isinstance(v, dict) else [f"{prefix}{k}"]
        return out
    return []


#: NeMo keys read (dotted from the recipe's top level); everything else under trainer/model is reported
_NEMO_READ = {
    "trainer.num_nodes", "trainer.devices", "trainer.precision", "trainer.max_steps", "model.micro_batch_size",
    "model.global_batch_size", "model.tensor_model_parallel_size", "model.pipeline_model_parallel_size",
    "model.virtual_pipeline_model_parallel_size", "model.context_parallel_size", "model.expert_model_parallel_size",
    "model.sequence_parallel", "model.encoder_seq_length", "model.max_position_embeddings", "model.num_layers",
    "model.hidden_size", "model.ffn_hidden_size", "model.num_attention_heads", "model.num_query_groups",
    "model.kv_channels", "model.hidden_dropout", "model.attention_dropout", "model.normalization", "model.bias",
    "model.activation", "model.position_embedding_type", "model.share_embeddings_and_output_weights",
    "model.activations_checkpoint_granularity", "model.activations_checkpoint_method",
    "model.activations_checkpoint_num_layers", "model.fp8", "model.optim.name", "model.optim.overlap_grad_sync",
    "model.optim.overlap_param_sync", "model.ub_tp_comm_overlap", "model.overlap_p2p_comm",
    "model.num_moe_experts", "model.moe_router_topk", "model.tokenizer.type", "model.tokenizer.library",
    "model.tokenizer.model", "model.tokenizer.vocab_file", "model.use_flash_attention", "model.make_vocab_size_divisible_by",
    # modeled as NeMo/Megatron run by default: blocking batched p2p, wgrad GEMMs accumulating into main_grad
    "model.batch_p2p_comm", "model.gradient_accumulation_fusion",
}


def import_nemo(data: dict, *, cluster: str | None = None, nodes: int | None = None,
                vocab: int | None = None) -> Imported:
    """Map a NeMo 1.x / NeMo-Framework-Launcher training recipe (``trainer:`` + ``model:``) to a strategy."""
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        raise ConfigError("nemo recipe: expected a mapping with a 'model:' section (NeMo 1.x megatron_gpt_config.yaml "
                          "or a NeMo-Framework-Launcher conf/training recipe)")
    tr = data.get("trainer") or {}
    m = data["model"]

    def g(key: str, default: Any = None, kind: type = int) -> Any:
        v = m.get(key, default)
        if v is None or v is default:
            return default
        if kind is int and (isinstance(v, bool) or not isinstance(v, int)):
            raise ConfigError(f"nemo recipe: model.{key} = {str(v)[:40]!r} must be an integer")
        if kind is bool and not isinstance(v, bool):
            raise ConfigError(f"nemo recipe: model.{key} = {str(v)[:40]!r} must be true or false")
        return v

    for req in ("num_layers", "hidden_size", "num_attention_heads", "global_batch_size"):
        if m.get(req) is None:
            raise ConfigError(f"nemo recipe: model.{req} is missing; add it")
    tp, pp = g("tensor_model_parallel_size", 1), g("pipeline_model_parallel_size", 1)
    vpp = g("virtual_pipeline_model_parallel_size", 1) or 1
    layers, h, heads = g("num_layers"), g("hidden_size"), g("num_attention_heads")
    act = str(m.get("activation", "gelu"))
    gated = act in ("swiglu", "fast-swiglu")
    if act not in ("gelu", "swiglu", "fast-swiglu"):
        raise ConfigError(f"nemo recipe: model.activation = {act!r} is not modeled; use gelu or (fast-)swiglu")
    tok = m.get("tokenizer") or {}
    v_size = vocab or _tokenizer_vocab(tok.get("type")) or _tokenizer_vocab(tok.get("model"))
    if not v_size:
        raise ConfigError(f"nemo recipe: the vocabulary size is not known from model.tokenizer "
                          f"({str(tok.get('type'))[:40]!r}); give --vocab N")
    seq = g("encoder_seq_length", 2048)
    model = {"name": str(data.get("name") or m.get("name") or "nemo-gpt"), "layers": layers, "hidden": h,
             "heads": heads, "kv_heads": g("num_query_groups", heads) or heads,
             "ffn": g("ffn_hidden_size", 4 * h), "vocab": v_size, "mlp": "swiglu" if gated else "gelu",
             "norm": "rmsnorm" if str(m.get("normalization", "layernorm")).lower() == "rmsnorm" else "layernorm",
             "position": "rope" if m.get("position_embedding_type", "learned_absolute") == "rope" else "learned",
             "max_seq": g("max_position_embeddings", seq),
             "tied_embeddings": g("share_embeddings_and_output_weights", True, bool),
             "bias": g("bias", True, bool),
             "dropout": float(m.get("hidden_dropout", 0.1) or 0) > 0 or float(m.get("attention_dropout", 0.1) or 0) > 0}
    if m.get("kv_channels") is not None:
        model["head_dim"] = g("kv_channels")
    if g("num_moe_experts", 0):
        model.update(experts=g("num_moe_experts"), top_k=g("moe_router_topk", 2))
    optim = m.get("optim") or {}
    dist = str(optim.get("name", "")).startswith("distributed_fused_adam")
    parallel = {"tp": tp, "pp": pp, "cp": g("context_parallel_size", 1), "ep": g("expert_model_parallel_size", 1),
                "sp": g("sequence_parallel", False, bool) and tp > 1, "zero": 1 if dist else 0}
    if vpp > 1:
        parallel["vpp"] = vpp
    prec = str(tr.get("precision", "bf16"))
    if prec not in ("bf16", "bf16-mixed", "16", "16-mixed", "32"):
        raise ConfigError(f"nemo recipe: trainer.precision = {prec!r} must be bf16, bf16-mixed, 16 or 16-mixed")
    precision = "fp8" if m.get("fp8") is True else ("fp16" if prec.startswith("16") else "bf16")
    training = {"micro_batch": g("micro_batch_size", 1), "global_batch": g("global_batch_size"), "seq_len": seq,
                "precision": precision}
    training.update(_recompute(m.get("activations_checkpoint_granularity"), m.get("activations_checkpoint_method"),
                               m.get("activations_checkpoint_num_layers"), layers, pp * vpp, "nemo recipe: model.activations_checkpoint"))
    if tr.get("max_steps"):
        training["train_tokens"] = float(tr["max_steps"]) * training["global_batch"] * seq
    options = {"overlap_grad_reduce": bool(optim.get("overlap_grad_sync", dist)),
               "overlap_param_gather": bool(optim.get("overlap_param_sync", dist)),
               "tp_comm_overlap": m.get("ub_tp_comm_overlap") is True,
               "p2p_overlap": m.get("overlap_p2p_comm") is True,
               "flash_attention": m.get("use_flash_attention", True) is not False}
    n = nodes if nodes is not None else tr.get("num_nodes")
    strategy = {"model": model, "cluster": _cluster(cluster, n, "nemo recipe"), "parallel": parallel,
                "schedule": "interleaved-1f1b" if vpp > 1 else "1f1b", "training": training, "options": options}
    if tr.get("devices") is not None:
        strategy["_gpus_per_node"] = tr.get("devices")
    seen = [k for k in _walk({"trainer": tr, "model": m}) if k not in _NEMO_READ]
    return Imported(strategy, tuple(seen), "nemo")


# ------------------------------------------------------------------------------------------ torchtitan

#: torchtitan [model] name + flavor -> execsim preset (torchtitan/models/*/__init__.py flavors)
TORCHTITAN_FLAVORS = {("llama3", "8B"): "llama3-8b", ("llama3", "70B"): "llama3-70b", ("llama3", "405B"): "llama3-405b",
                      ("deepseek_v3", "671B"): "deepseek-v3", ("qwen3", "8B"): "qwen3-8b", ("qwen3", "32B"): "qwen3-32b"}
#: torchtitan pipeline_parallel_schedule (torch.distributed.pipelining names) -> execsim schedule, chunks per rank
TORCHTITAN_SCHEDULES = {"1F1B": ("1f1b", 1), "GPipe": ("gpipe", 1), "Interleaved1F1B": ("interleaved-1f1b", 2),
                        "LoopedBFS": ("looped-bfs", 2), "ZBVZeroBubble": ("zb-v", 2), "DualPipeV": ("dualpipe-v", 2),
                        "InterleavedZeroBubble": ("zb-h1", 1)}
_TT_READ = {"model.name", "model.flavor", "training.local_batch_size", "training.batch_size", "training.global_batch_size",
            "training.seq_len", "training.steps", "training.mixed_precision_param", "parallelism.data_parallel_replicate_degree",
            "parallelism.data_parallel_shard_degree", "parallelism.tensor_parallel_degree",
            "parallelism.pipeline_parallel_degree", "parallelism.context_parallel_degree",
            "parallelism.expert_parallel_degree", "parallelism.pipeline_parallel_schedule",
            "parallelism.pipeline_parallel_microbatch_size", "parallelism.fsdp_reshard_after_forward",
            "parallelism.enable_async_tensor_parallel", "activation_checkpoint.mode"}
#: sections that hold no execution settings (logging, checkpoint paths, data): not reported
_TT_QUIET = ("job.", "metrics.", "profiling.", "checkpoint.", "comm.", "validation.", "optimizer.", "lr_scheduler.")


def import_torchtitan(data: dict, *, cluster: str | None = None, nodes: int | None = None,
                      vocab: int | None = None) -> Imported:
    """Map a torchtitan ``train_configs/*.toml`` job to a strategy (FSDP = ZeRO-3 over the shard group)."""
    sec = lambda name: data.get(name) or {}  # noqa: E731
    mdl, tr, par, ac = sec("model"), sec("training"), sec("parallelism"), sec("activation_checkpoint")
    key = (str(mdl.get("name", "")), str(mdl.get("flavor", "")))
    if key not in TORCHTITAN_FLAVORS:
        raise ConfigError(f"torchtitan [model] name = {key[0]!r} flavor = {key[1]!r} has no execsim preset"
                          f"{did_you_mean(key[1], [f for n, f in TORCHTITAN_FLAVORS if n == key[0]])}; known: "
                          f"{', '.join(f'{n} {f}' for n, f in TORCHTITAN_FLAVORS)}")
    cl = _cluster(cluster, nodes, "torchtitan config")

    def deg(name: str, default: int = 1) -> int:
        v = par.get(name, default)
        if isinstance(v, bool) or not isinstance(v, int) or (v < 1 and not (v == -1 and name.endswith("shard_degree"))):
            raise ConfigError(f"torchtitan [parallelism] {name} = {str(v)[:40]!r} must be a positive integer"
                              f"{' or -1' if name.endswith('shard_degree') else ''}")
        return v

    tp, pp, cp = deg("tensor_parallel_degree"), deg("pipeline_parallel_degree"), deg("context_parallel_degree")
    rep, shard = deg("data_parallel_replicate_degree"), deg("data_parallel_shard_degree", -1)
    ep = deg("expert_parallel_degree")
    name, vpp = "1f1b", 1
    if pp > 1:
        sname = str(par.get("pipeline_parallel_schedule", "1F1B"))
        if sname not in TORCHTITAN_SCHEDULES:
            raise ConfigError(f"torchtitan [parallelism] pipeline_parallel_schedule = {sname!r} is not modeled"
                              f"{did_you_mean(sname, TORCHTITAN_SCHEDULES)}; use one of {', '.join(TORCHTITAN_SCHEDULES)}")
        name, vpp = TORCHTITAN_SCHEDULES[sname]
    local = tr.get("local_batch_size", tr.get("batch_size", 8))
    seq = tr.get("seq_len", 2048)
    for k, v in (("local_batch_size", local), ("seq_len", seq)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ConfigError(f"torchtitan [training] {k} = {str(v)[:40]!r} must be a positive integer")
    parallel: dict = {"tp": tp, "pp": pp, "cp": cp, "ep": ep, "sp": tp > 1,   # torchtitan TP always shards sequence
                      "zero": 3 if shard != 1 else 0}
    if shard > 0:
        parallel["dp"] = rep * shard
    if rep > 1 and shard != 1:
        hsdp = "parallelism.data_parallel_replicate_degree (HSDP: sharding within a replica group is not modeled; "\
               "simulated as FSDP over all DP ranks)"
    else:
        hsdp = None
    if vpp > 1:
        parallel["vpp"] = vpp
    mb = par.get("pipeline_parallel_microbatch_size", 1) if pp > 1 else local
    ac_mode = str(ac.get("mode", "selective"))
    if ac_mode not in ("none", "selective", "full"):
        raise ConfigError(f"torchtitan [activation_checkpoint] mode = {ac_mode!r} must be none, selective or full")
    precision = "bf16" if str(tr.get("mixed_precision_param", "bfloat16")) == "bfloat16" else "fp16"
    training: dict = {"micro_batch": mb, "global_batch": None, "seq_len": seq, "precision": precision,
                      # torchtitan's selective AC ('op' policy) saves matmul outputs and recomputes the rest:
                      # closest execsim policy is selective (attention core recomputed)
                      "recompute": ac_mode}
    strategy = {"model": TORCHTITAN_FLAVORS[key], "cluster": cl, "parallel": parallel, "schedule": name,
                "training": training, "options": {"overlap_grad_reduce": True, "overlap_param_gather": True,
                                                  "tp_comm_overlap": par.get("enable_async_tensor_parallel") is True},
                "_local_batch": local}
    if tr.get("steps"):
        strategy["_steps"] = tr["steps"]
    flat = _walk(data)
    seen = [k for k in flat if k not in _TT_READ and not k.startswith(_TT_QUIET)]
    if hsdp:
        seen.append(hsdp)
    return Imported(strategy, tuple(seen), "torchtitan")


#: source kind -> importer (text or mapping in, Imported out)
IMPORTERS: dict[str, Callable[..., Imported]] = {"megatron": import_megatron, "nemo": import_nemo,
                                                  "torchtitan": import_torchtitan}


def parse_source(kind: str, text: str) -> Any:
    """The importer's input from file text: the raw text (megatron), YAML (nemo) or TOML (torchtitan)."""
    if kind == "megatron":
        return text
    if kind == "nemo":
        from strategies.documents import parse_document   # duplicate keys, non-finite numbers refused
        return parse_document(text, "nemo recipe")
    import tomllib
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"torchtitan config is not valid TOML: {str(exc)[:200]}") from None


def import_config(kind: str, source: Any, *, cluster: str | None = None, nodes: int | None = None,
                  vocab: int | None = None) -> Imported:
    """Run the importer for ``kind`` on ``source`` (text, or the parsed mapping for nemo/torchtitan)."""
    if kind not in IMPORTERS:
        raise ConfigError(f"import kind {kind!r} is not one of {', '.join(IMPORTERS)}{did_you_mean(kind, IMPORTERS)}")
    if isinstance(source, str) and kind != "megatron":
        source = parse_source(kind, source)
    return IMPORTERS[kind](source, cluster=cluster, nodes=nodes, vocab=vocab)
