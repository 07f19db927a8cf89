"""torchtitan ``train_configs/*.toml`` jobs -> a strategy mapping (see :mod:`strategies.importers`)."""
from __future__ import annotations

from strategies.config import did_you_mean
from strategies.errors import ConfigError
from strategies.import_common import Imported, _cluster, _walk

# ------------------------------------------------------------------------------------------ torchtitan

#: torchtitan [model] name + flavor -> execsim preset (torchtitan/models/*/__init__.py flavors)
TORCHTITAN_FLAVORS = {("llama3", "8B"): "llama3-8b", ("llama3", "70B"): "llama3-70b", ("llama3", "405B"): "llama3-405b",
                      ("qwen3", "8B"): "qwen3-8b", ("qwen3", "32B"): "qwen3-32b",
                      ("qwen3", "30B-A3B"): "qwen3-30b-a3b", ("qwen3", "235B-A22B"): "qwen3-235b-a22b"}


def _qwen3(name: str, layers: int, dim: int, heads: int, ffn: int, tied: bool) -> dict:
    """A dense Qwen3 flavor of torchtitan/models/qwen3/__init__.py (qwen3_configs / qwen3_args):
    vocab 151936, head_dim 128, 8 KV heads, QK-norm, SwiGLU, RMSNorm, RoPE, no biases."""
    return {"name": name, "layers": layers, "hidden": dim, "heads": heads, "kv_heads": 8, "head_dim": 128, "ffn": ffn,
            "vocab": 151936, "mlp": "swiglu", "norm": "rmsnorm", "position": "rope", "max_seq": 4096, "bias": False,
            "qk_norm": True, "tied_embeddings": tied, "dropout": False}


#: torchtitan flavors without an execsim preset, as model mappings transcribed from torchtitan
#: (pytorch/torchtitan torchtitan/models/qwen3/__init__.py at 9810191^, lines 46-108: dim, n_layers,
#: n_heads, hidden_dim, enable_weight_tying)
TORCHTITAN_MODELS = {("qwen3", "0.6B"): _qwen3("qwen3-0.6b", 28, 1024, 16, 3072, True),
                     ("qwen3", "1.7B"): _qwen3("qwen3-1.7b", 28, 2048, 16, 6144, True),
                     ("qwen3", "4B"): _qwen3("qwen3-4b", 36, 2560, 32, 9728, True),
                     ("qwen3", "14B"): _qwen3("qwen3-14b", 40, 5120, 40, 17408, False)}
def _llama4(name: str, experts: int, moe_every: int, chunk: int = 0) -> dict:
    """A Llama 4 flavor of torchtitan/models/llama4 (__init__.py l. 38-60, model/args.py defaults,
    model/model.py TransformerBlock): dim 5120, 48 layers, 40 heads, 8 KV heads, vocab 202048; dense
    FFN 4h -> 2/3 -> x1.2 -> multiple of 2048 = 16384; MoE layers (every ``moe_every``-th, (i+1) %
    step == 0) with ``experts`` routed experts, top-1, one shared expert, each of the dense width
    / (top_k + shared) = 8192 (auto_scale_hidden_dim)."""
    step = range(moe_every - 1, 48, moe_every)
    return {"name": name, "layers": 48, "hidden": 5120, "heads": 40, "kv_heads": 8, "ffn": 16384, "vocab": 202048,
            "mlp": "swiglu", "norm": "rmsnorm", "position": "rope", "max_seq": 8192, "bias": False,
            "tied_embeddings": False, "dropout": False, "experts": experts, "top_k": 1, "expert_ffn": 8192,
            "shared_experts": 1, "moe_layers": "all" if moe_every == 1 else list(step),
            # the _irope flavors: every_n_layers_nope = 4, layers 0, 4, 8 ... global without RoPE
            # (TransformerBlock: layer_id % every_n_layers_nope == 0), the others attend within blocks
            # of fixed_attn_block_size = 8192 tokens (model/args.py)
            **({"attention_chunk": chunk, "global_attention_every": 4, "global_attention_start": 0} if chunk else {})}


def _deepseek(name: str, layers: int, dim: int, heads: int, ffn: int, expert_ffn: int, experts: int,
              q_lora: int) -> dict:
    """A DeepSeek-V2-style flavor of torchtitan/models/deepseek_v3/__init__.py (l. 78-129): MLA with
    kv_lora_rank 512, qk_nope 128 + qk_rope 64 (head_dim 192), v_head_dim 128; the first layer dense;
    2 shared + ``experts`` routed experts, top-6; vocab 102400; no multi-token prediction."""
    return {"name": name, "layers": layers, "hidden": dim, "heads": heads, "kv_heads": heads, "ffn": ffn,
            "vocab": 102400, "mlp": "swiglu", "norm": "rmsnorm", "position": "rope", "max_seq": 16384,
            "bias": False, "tied_embeddings": False, "dropout": False, "attention": "mla", "head_dim": 192,
            "v_head_dim": 128, "q_lora_rank": q_lora, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
            "experts": experts, "top_k": 6, "expert_ffn": expert_ffn, "shared_experts": 2,
            "moe_layers": list(range(1, layers))}


TORCHTITAN_MODELS.update({
    ("llama4", "17bx16e"): _llama4("llama4-scout-17bx16e", 16, 1),
    ("llama4", "17bx128e"): _llama4("llama4-maverick-17bx128e", 128, 2),
    ("llama4", "17bx16e_irope"): _llama4("llama4-scout-17bx16e-irope", 16, 1, chunk=8192),
    ("llama4", "17bx128e_irope"): _llama4("llama4-maverick-17bx128e-irope", 128, 2, chunk=8192),
    # torchtitan's DeepSeek-V3 has no multi-token-prediction module (the preset has DeepSeek's one)
    ("deepseek_v3", "671B"): {"preset": "deepseek-v3", "mtp_layers": 0},
    ("deepseek_v3", "16B"): _deepseek("deepseek-v2-lite-16b", 27, 2048, 16, 10944, 1408, 64, 0),
    ("deepseek_v3", "236B"): _deepseek("deepseek-v2-236b", 60, 5120, 128, 12288, 1536, 160, 1536),
})
#: torchtitan [float8] recipe_name (torchao Float8LinearRecipeName) -> options.fp8_recipe
FLOAT8_RECIPES = {"tensorwise": "tensorwise", "rowwise": "rowwise", "rowwise_with_gw_hp": "rowwise"}
#: [training] mixed_precision_param (torch dtype names) -> training.precision
MIXED_PRECISION = {"bfloat16": "bf16", "float16": "fp16"}
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
            "parallelism.enable_async_tensor_parallel", "activation_checkpoint.mode", "model.hf_assets_path",
            "model.converters", "parallelism.expert_tensor_parallel_degree", "training.compile", "compile.enable",
            "compile.components"}
#: float8 keys read when a float8 / mx converter is on (otherwise listed as set but not in effect)
_TT_FLOAT8 = {"float8.recipe_name", "float8.enable_fsdp_float8_all_gather", "float8.filter_fqns",
              "quantize.linear.float8.recipe_name", "quantize.linear.float8.enable_fsdp_float8_all_gather",
              "quantize.linear.float8.filter_fqns"}
#: sections that hold no execution settings (logging, checkpoint paths, data): not reported
_TT_QUIET = ("job.", "metrics.", "profiling.", "checkpoint.", "comm.", "validation.", "optimizer.", "lr_scheduler.")


def _no_datetimes(d: dict, prefix: str = "") -> None:
    """TOML has date/time values; no torchtitan setting is one, so one is a mistake (an unquoted
    date, e.g. ``dump_folder = 2025-01-01``): one error naming the key."""
    import datetime
    for k, v in d.items():
        if isinstance(v, dict):
            _no_datetimes(v, f"{prefix}{k}.")
        elif isinstance(v, (datetime.date, datetime.time)):
            raise ConfigError(f"torchtitan config: {prefix}{k} = {v.isoformat()} is a TOML date/time, which no "
                              f"torchtitan setting takes; quote it if it is a name")


def _model(mdl: dict, key: tuple, base_dir: str | None, notes: list) -> object:
    """The model: the Hugging Face config.json behind ``hf_assets_path`` when it is there (relative to
    the TOML's folder, or to the current directory as torchtitan reads it), else the flavor's preset
    or transcribed mapping."""
    from pathlib import Path
    assets = mdl.get("hf_assets_path")
    if isinstance(assets, str) and assets:
        # torchtitan resolves it from the directory it runs in (the repository root); a copy next to
        # the TOML is looked for first
        for root in ([Path(base_dir)] if base_dir is not None else []) + [Path.cwd()]:
            try:
                cfg = root / assets / "config.json"
                if cfg.is_file():
                    return str(cfg.resolve())
            except (OSError, ValueError):
                continue
    if key in TORCHTITAN_FLAVORS:
        return TORCHTITAN_FLAVORS[key]
    if key in TORCHTITAN_MODELS:
        return dict(TORCHTITAN_MODELS[key])
    known = list(TORCHTITAN_FLAVORS) + list(TORCHTITAN_MODELS)
    raise ConfigError(f"torchtitan [model] name = {key[0]!r} flavor = {key[1]!r} is not known to execsim"
                      f"{did_you_mean(key[1], [f for n, f in known if n == key[0]])}; known: "
                      f"{', '.join(f'{n} {f}' for n, f in known)}; or put the model's config.json at "
                      f"hf_assets_path (read as a Hugging Face config)")


def import_torchtitan(data: dict, *, cluster: str | None = None, nodes: int | None = None,
                      vocab: int | None = None, base_dir: str | None = None) -> Imported:
    """Map a torchtitan ``train_configs/*.toml`` job to a strategy (FSDP = ZeRO-3 over the shard group)."""
    _no_datetimes(data)
    sec = lambda name: data.get(name) or {}  # noqa: E731
    mdl, tr, par, ac = sec("model"), sec("training"), sec("parallelism"), sec("activation_checkpoint")
    key = (str(mdl.get("name", "")), str(mdl.get("flavor", "")))
    notes: list = []
    model = _model(mdl, key, base_dir, notes)
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
    etp = deg("expert_tensor_parallel_degree", tp)
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
    if ep > 1 and etp != tp:     # torchtitan ETP: experts' own TP degree (parallel folding)
        parallel["etp"] = etp
    mb = par.get("pipeline_parallel_microbatch_size", 1) if pp > 1 else local
    ac_mode = str(ac.get("mode", "selective"))
    if ac_mode not in ("none", "selective", "full"):
        raise ConfigError(f"torchtitan [activation_checkpoint] mode = {ac_mode!r} must be none, selective or full")
    mp = str(tr.get("mixed_precision_param", "bfloat16"))
    if mp not in MIXED_PRECISION:
        raise ConfigError(f"torchtitan [training] mixed_precision_param = {mp[:40]!r}: execsim models bf16 and fp16 "
                          f"mixed precision ({', '.join(MIXED_PRECISION)}); "
                          + ("FP32 training is not modeled" if mp == "float32" else "use one of them"))
    precision = MIXED_PRECISION[mp]
    # the software stack (taskgraph/data/stacks.yaml): torchtitan runs PyTorch eager unless torch.compile is on
    # ([training] compile = true in older configs, [compile] enable = true with components since 2025)
    comp = data.get("compile") or {}
    compiled = tr.get("compile") is True or (comp.get("enable") is True and "model" in (comp.get("components") or ["model"]))
    options: dict = {"overlap_grad_reduce": True, "overlap_param_gather": True,
                     "tp_comm_overlap": par.get("enable_async_tensor_parallel") is True,
                     "stack": "torchtitan-compile" if compiled else "torchtitan"}
    # float8 (torchao): [model] converters = ["float8"] (or ["mx"]) with [float8] (or, in newer
    # torchtitan, [quantize.linear.float8]) recipe_name and enable_fsdp_float8_all_gather
    converters = mdl.get("converters") or []
    f8 = data.get("float8") or (data.get("quantize") or {}).get("linear", {}).get("float8") or {}
    if not isinstance(converters, list):
        raise ConfigError(f"torchtitan [model] converters = {str(converters)[:40]!r} must be a list of names")
    if "float8" in converters or "mx" in converters:
        precision = "fp8"
        if "mx" in converters:
            options["fp8_recipe"] = "mxfp8"
        else:
            rname = str(f8.get("recipe_name") or "tensorwise")
            if rname not in FLOAT8_RECIPES:
                raise ConfigError(f"torchtitan float8 recipe_name = {rname[:40]!r} is not modeled; one of "
                                  f"{', '.join(FLOAT8_RECIPES)}")
            options["fp8_recipe"] = FLOAT8_RECIPES[rname]
            if rname == "rowwise_with_gw_hp":
                notes.append("float8.recipe_name rowwise_with_gw_hp (the weight-gradient GEMM in high precision "
                             "is simulated in FP8 like rowwise)")
        if f8.get("enable_fsdp_float8_all_gather") is True:
            options["fp8_param_gather"] = True
    training: dict = {"micro_batch": mb, "global_batch": None, "seq_len": seq, "precision": precision,
                      # torchtitan's selective AC ('op' policy) saves matmul outputs and recomputes the rest:
                      # closest execsim policy is selective (attention core recomputed)
                      "recompute": ac_mode}
    strategy = {"model": model, "cluster": cl, "parallel": parallel, "schedule": name,
                "training": training, "options": options,
                "_local_batch": local}
    if tr.get("steps"):
        strategy["_steps"] = tr["steps"]
    flat = _walk(data)
    on = "float8" in converters or "mx" in converters
    seen = [k for k in flat if k not in _TT_READ and not (on and k in _TT_FLOAT8) and not k.startswith(_TT_QUIET)]
    if hsdp:
        seen.append(hsdp)
    seen += notes
    return Imported(strategy, tuple(seen), "torchtitan")
