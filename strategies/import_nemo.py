"""NeMo 1.x / NeMo-Framework-Launcher training recipes -> a strategy mapping (see :mod:`strategies.importers`)."""
from __future__ import annotations

import re
from typing import Any

from strategies.errors import ConfigError
from strategies.import_common import Imported, _capacity, _cluster, _recompute, _tokenizer_vocab, _walk, moe_dispatch_options

# ------------------------------------------------------------------------------------------------ NeMo

#: Lightning trainer.precision spellings (lightning.fabric.connector _PRECISION_INPUT) -> training.precision;
#: None = FP32 (not modeled)
NEMO_PRECISION = {"bf16": "bf16", "bf16-mixed": "bf16", "16": "fp16", "16-mixed": "fp16", "fp16": "fp16",
                  "32": None, "32-true": None, "fp32": None, "64": None, "64-true": None}
_REF = re.compile(r"\$\{([^${}]*)\}")


def _or(x: Any, default: Any) -> Any:
    return default if x is None else x


def resolve_interpolations(data: dict) -> dict:
    """A copy of ``data`` with OmegaConf interpolations resolved as NeMo does: ``${a.b}`` (from the
    top, or from the launcher's ``training.`` root, where the launcher mounts the recipe), ``${.x}``
    relative to the key's mapping, and NeMo's ``${multiply:a,b}`` resolver; nested ones inside out.
    A reference that names nothing (``${data_dir}``, set by the launcher) stays as written: the
    importer reports it only if it reads that key. Work is bounded: at most 64 substitutions per value.

    OmegaConf itself would do this, but it is a dependency for ~30 lines and NeMo's ``multiply`` would
    have to be registered in its process-wide resolver table."""
    def lookup(path: str, here: tuple):
        if path.startswith("."):
            up = len(path) - len(path.lstrip("."))
            node, keys = here[:len(here) - (up - 1)] if up > 1 else here, path.lstrip(".").split(".")
            keys = list(node) + keys
        else:
            keys = path.split(".")
            if keys[0] == "training" and "training" not in data:
                keys = keys[1:]
        v: Any = data
        for k in keys:
            if not isinstance(v, dict) or k not in v:
                raise KeyError(path)
            v = v[k]
        return v

    def value(v: Any, here: tuple, depth: int = 0) -> Any:
        if not isinstance(v, str) or "${" not in v or depth > 8:
            return v
        whole = _REF.fullmatch(v)
        if whole:                        # the value is one reference: its typed value
            out = one(whole.group(1).strip(), here, depth)
            return v if out is None else out
        for _ in range(8):               # inner references first, then the ones around them
            new = _REF.sub(lambda m: str(_or(one(m.group(1).strip(), here, depth), m.group(0))), v)
            if new == v:
                return v
            v = new
            if _REF.fullmatch(v):
                return value(v, here, depth + 1)
        return v

    def one(expr: str, here: tuple, depth: int) -> Any:
        """The value of one ``${...}`` body, or None when it names nothing known."""
        try:
            if expr.startswith("multiply:"):
                out: Any = 1
                for a in expr[len("multiply:"):].split(","):
                    a = a.strip()
                    x = int(a) if a.lstrip("-").isdigit() else value(a, here, depth + 1)
                    if isinstance(x, bool) or not isinstance(x, (int, float)):
                        return None
                    out *= x
                return out
            out = value(lookup(expr, here), here, depth + 1)
            return None if isinstance(out, str) and "${" in out else out
        except (KeyError, TypeError):
            return None

    def walk(d: Any, here: tuple) -> Any:
        if isinstance(d, dict):
            return {k: walk(x, here + (k,)) if isinstance(x, (dict, list)) else value(x, here) for k, x in d.items()}
        if isinstance(d, list):
            return [walk(x, here) for x in d]
        return value(d, here)
    return walk(data, ())


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
    "model.batch_p2p_comm", "model.gradient_accumulation_fusion", "model.cpu_offloading",
    "model.cpu_offloading_num_layers", "model.moe_expert_capacity_factor", "model.moe_pad_expert_input_to_capacity",
    "model.moe_token_dispatcher_type", "model.optim.grad_sync_dtype", "model.overlap_moe_expert_parallel_comm",
    "model.delay_wgrad_compute", "model.moe_enable_deepep", "model.moe_flex_dispatcher_backend",
    "model.moe_flex_dispatcher_num_sms", "model.moe_deepep_num_sms", "model.moe_router_group_topk",
    "model.moe_shared_expert_intermediate_size", "model.moe_shared_expert_overlap",
}


def import_nemo(data: dict, *, cluster: str | None = None, nodes: int | None = None,
                vocab: int | None = None) -> Imported:
    """Map a NeMo 1.x / NeMo-Framework-Launcher training recipe (``trainer:`` + ``model:``) to a strategy."""
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        raise ConfigError("nemo recipe: expected a mapping with a 'model:' section (NeMo 1.x megatron_gpt_config.yaml "
                          "or a NeMo-Framework-Launcher conf/training recipe)")
    data = resolve_interpolations(data)
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
        # TransformerConfig.moe_shared_expert_intermediate_size: num_shared_experts x each one's size
        # (the experts' size here: model.ffn_hidden_size, moe_ffn_hidden_size not being read)
        shared = g("moe_shared_expert_intermediate_size", 0) or 0
        if shared:
            if shared % model["ffn"]:
                raise ConfigError(f"nemo recipe: model.moe_shared_expert_intermediate_size = {shared} is not a multiple "
                                  f"of the expert size {model['ffn']}")
            model["shared_experts"] = shared // model["ffn"]
    optim = m.get("optim") or {}
    # the distributed optimizer: Apex distributed_fused_adam, or Megatron-core's
    # (mcore_distributed_optim, NeMo nlp/parts/megatron_trainer_builder / MegatronGPTModel.setup_optimization)
    dist = str(optim.get("name", "")).startswith(("distributed_fused_adam", "mcore_distributed_optim"))
    parallel = {"tp": tp, "pp": pp, "cp": g("context_parallel_size", 1), "ep": g("expert_model_parallel_size", 1),
                "sp": g("sequence_parallel", False, bool) and tp > 1, "zero": 1 if dist else 0}
    if vpp > 1:
        parallel["vpp"] = vpp
    prec = str(tr.get("precision", "bf16"))
    if prec not in NEMO_PRECISION:
        raise ConfigError(f"nemo recipe: trainer.precision = {prec[:40]!r} is not a Lightning precision execsim "
                          f"models; use one of {', '.join(k for k, v in NEMO_PRECISION.items() if v)}")
    if NEMO_PRECISION[prec] is None:
        raise ConfigError(f"nemo recipe: trainer.precision = {prec!r} trains in FP32, which execsim does not model "
                          f"(bf16, fp16 and fp8 mixed precision); use bf16-mixed")
    precision = "fp8" if m.get("fp8") is True else NEMO_PRECISION[prec]
    training = {"micro_batch": g("micro_batch_size", 1), "global_batch": g("global_batch_size"), "seq_len": seq,
                "precision": precision}
    training.update(_recompute(m.get("activations_checkpoint_granularity"), m.get("activations_checkpoint_method"),
                               m.get("activations_checkpoint_num_layers"), layers, pp * vpp, "nemo recipe: model.activations_checkpoint"))
    steps = tr.get("max_steps")
    if steps is not None and steps != -1:   # Lightning: -1 = no step limit (train on max_epochs/max_time)
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ConfigError(f"nemo recipe: trainer.max_steps = {str(steps)[:40]!r} must be a positive integer or -1")
        training["train_tokens"] = float(steps) * training["global_batch"] * seq
    extra: list = []
    options = {"overlap_grad_reduce": bool(optim.get("overlap_grad_sync", dist)),
               "overlap_param_gather": bool(optim.get("overlap_param_sync", dist)),
               "tp_comm_overlap": m.get("ub_tp_comm_overlap") is True,
               "p2p_overlap": m.get("overlap_p2p_comm") is True,
               "flash_attention": m.get("use_flash_attention", True) is not False}
    if g("num_moe_experts", 0):
        cf = m.get("moe_expert_capacity_factor")
        if cf is not None and (isinstance(cf, bool) or not isinstance(cf, (int, float))):
            raise ConfigError(f"nemo recipe: model.moe_expert_capacity_factor = {str(cf)[:40]!r} must be a number")
        _capacity(options, cf, m.get("moe_pad_expert_input_to_capacity") is True)
        disp = str(m.get("moe_token_dispatcher_type", "allgather"))
        if g("expert_model_parallel_size", 1) > 1 and disp not in ("alltoall", "flex"):
            extra.append(f"model.moe_token_dispatcher_type {disp} (simulated as the all-to-all dispatcher)")
    # NeMo 1 hands model.* keys that name TransformerConfig fields to Megatron-core unchanged
    # (MegatronBaseModel.build_transformer_config), so Megatron's MoE overlap fields read the same
    moe_dispatch_options(m.get, lambda k: f"model.{k}", options, extra,
                         bool(g("num_moe_experts", 0)) and g("expert_model_parallel_size", 1) > 1, "nemo recipe: ",
                         shared=bool(model.get("shared_experts")))
    # NeMo mcore optimizer: grad_reduce_in_fp32 = (optim.grad_sync_dtype == fp32), fp32 by default
    gsd = str(optim.get("grad_sync_dtype", "fp32"))
    if gsd in ("bf16", "fp16"):
        options["fp32_grad_accum"] = False
    if m.get("cpu_offloading") is True and g("cpu_offloading_num_layers", 0):
        options["activation_offload_layers"] = g("cpu_offloading_num_layers")
    n = nodes if nodes is not None else tr.get("num_nodes")
    strategy = {"model": model, "cluster": _cluster(cluster, n, "nemo recipe"), "parallel": parallel,
                "schedule": "interleaved-1f1b" if vpp > 1 else "1f1b", "training": training, "options": options}
    if tr.get("devices") is not None:
        strategy["_gpus_per_node"] = tr.get("devices")
    seen = [k for k in _walk({"trainer": tr, "model": m}) if k not in _NEMO_READ] + extra
    return Imported(strategy, tuple(seen), "nemo")
