"""torchtitan ``train_configs/*.toml`` jobs, and the job config torchtitan logs or saves, -> a strategy
mapping (see :mod:`strategies.importers`).

Field meanings: pytorch/torchtitan ``torchtitan/config/job_config.py`` at 238fa99 (the last TOML-era
commit, 9810191^): converters, fsdp_reshard_after_forward, the [compile] section, activation
checkpointing's ``selective_ac_option`` (``torchtitan/distributed/activation_checkpoint.py``). Every
field is read through :class:`strategies.import_common.Fields`: a value of the wrong type is one
error naming it."""
from __future__ import annotations

import json
import re
import statistics

from strategies.config import did_you_mean
from strategies.errors import ConfigError
from strategies.import_common import Fields, Imported, check_expanded_size, cluster_mapping, foreach_adam_bytes
from strategies.limits import MAX_GPUS

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
#: [training] mixed_precision_param (torch dtype names) -> training.precision: the dtype FSDP2 gathers and
#: computes in; the parameters are built in [training] dtype (train.py: utils.set_default_dtype(training.dtype)
#: around the meta-device model), "float32" by default (fp32 shards: training.master_weights, the stack's
#: default true), "bfloat16" = "all parameters, gradients, and optimizer states in bfloat16, without an extra
#: copy of fp32 weights" (config/job_config.py Training.dtype) = training.master_weights: false
MIXED_PRECISION = {"bfloat16": "bf16", "float16": "fp16"}
TRAINING_DTYPES = {"float32": None, "bfloat16": False}
#: torchtitan pipeline_parallel_schedule (torch.distributed.pipelining names) -> execsim schedule, chunks per rank
TORCHTITAN_SCHEDULES = {"1F1B": ("1f1b", 1), "GPipe": ("gpipe", 1), "Interleaved1F1B": ("interleaved-1f1b", 2),
                        "LoopedBFS": ("looped-bfs", 2), "ZBVZeroBubble": ("zb-v", 2), "DualPipeV": ("dualpipe-v", 2),
                        "InterleavedZeroBubble": ("zb-h1", 1)}
#: [model] converters (torchtitan registers them by name: components/quantization/float8.py, mx.py;
#: 'float8' / 'mx' before the quantize.* names) -> what execsim runs: the dense linears in FP8 with
#: the [float8] recipe, in MXFP8, or None: the MoE experts' grouped GEMMs only (simulated in bf16)
CONVERTERS = {"float8": "float8", "quantize.linear.float8": "float8", "mx": "mx", "quantize.linear.mx": "mx",
              "quantize.grouped_mm.float8": None, "quantize.grouped_mm.mx": None}
#: [parallelism] fsdp_reshard_after_forward -> options.reshard_after_forward (None: torchtitan's
#: default, not resharding under pipeline parallelism, which is the simulator's default too;
#: distributed/fsdp.py get_fsdp_reshard_after_forward_policy)
RESHARD = {"default": None, "always": True, "never": False}
_TT_READ = {"model.name", "model.flavor", "training.local_batch_size", "training.batch_size", "training.global_batch_size",
            "training.seq_len", "training.steps", "training.mixed_precision_param", "parallelism.data_parallel_replicate_degree",
            "parallelism.data_parallel_shard_degree", "parallelism.tensor_parallel_degree",
            "parallelism.pipeline_parallel_degree", "parallelism.context_parallel_degree",
            "parallelism.expert_parallel_degree", "parallelism.pipeline_parallel_schedule",
            "parallelism.pipeline_parallel_microbatch_size", "parallelism.fsdp_reshard_after_forward",
            "parallelism.enable_async_tensor_parallel", "activation_checkpoint.mode",
            "activation_checkpoint.selective_ac_option", "model.hf_assets_path", "hf_assets_path", "model.attn_backend",
            "model.converters", "parallelism.expert_tensor_parallel_degree", "training.compile", "compile.enable",
            "compile.components", "compile", "model_spec.name", "model_spec.flavor",
            "activation_checkpoint.force_recompute_mm_shapes_by_fqns", "debug.moe_force_load_balance", "training.dtype"}
#: float8 keys read when a float8 / mx converter is on (otherwise listed as set but not in effect)
_TT_FLOAT8 = {"float8.recipe_name", "float8.enable_fsdp_float8_all_gather", "float8.filter_fqns",
              "quantize.linear.float8.recipe_name", "quantize.linear.float8.enable_fsdp_float8_all_gather",
              "quantize.linear.float8.filter_fqns"}
#: sections that hold no execution settings (logging, checkpoint paths, data): not reported
_TT_QUIET = ("job.", "metrics.", "profiling.", "checkpoint.", "comm.", "validation.", "optimizer.", "lr_scheduler.",
             "model_spec.model.")
W = "torchtitan config: "
_QUANT = re.compile(r"convert|quantiz|float8|mxfp|\.mx\.")


def _set_keys(d: dict, prefix: str = "") -> list:
    """Dotted names of the leaves of ``d`` that set something: not None and not torchtitan's default
    (:data:`strategies.torchtitan_defaults.TORCHTITAN_DEFAULTS`; a logged job config lists every field)."""
    from strategies.torchtitan_defaults import TORCHTITAN_DEFAULTS
    out = []
    for k, v in d.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict):
            out += _set_keys(v, f"{name}.")
            continue
        default = TORCHTITAN_DEFAULTS.get(name, _UNSET)
        same = default is not _UNSET and (isinstance(v, bool) == isinstance(default, bool)) and v == default
        if v is not None and not same:
            out.append(name)
    return out


_UNSET = object()


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


#: the line torchtitan logs at start with job.print_config = true (config/job_config.py maybe_log:
#: ``logger.info(f"Running with configs: {json.dumps(self.to_dict(), indent=2)}")``); the same
#: mapping job.save_config_file writes as JSON
LOG_MARKER = "Running with configs:"
#: prefixes torchrun puts before each line of a rank's output (--tee / --local-ranks-filter)
_RANK_PREFIX = re.compile(r"^\[(?:rank|default)\d+\]:", re.MULTILINE)


#: where parse_torchtitan leaves a log's measured tokens/s per GPU for import_torchtitan (not a job field)
MEASURED_KEY = "_execsim_logged_tps"
#: torchtitan's metrics line (components/metrics.py MetricsProcessor.log): ``step: N ... tps: 1,032``
_STEP_TPS = re.compile(r"\bstep:\s*(\d{1,12})\b[^\n]*?\btps:\s*([\d,]{1,20})")


def logged_tps(text: str, limit: int = 100_000) -> list:
    """The ``tps`` figures a torchtitan log reports, one per logged step, the first logged step
    excluded (it includes compilation and warm-up), at most ``limit`` of them.

    >>> logged_tps("step:  1  loss: 9  tps: 1,032\\nstep: 10  loss: 8  tps: 4,100\\nstep: 20  loss: 7  tps: 4,000")
    [4100, 4000]
    """
    out = []
    for m in _STEP_TPS.finditer(text):
        if int(m.group(1)) > 1 and m.group(2).replace(",", ""):
            out.append(int(m.group(2).replace(",", "")))
            if len(out) >= limit:
                break
    return [t for t in out if t > 0]


def parse_torchtitan(text: str) -> dict:
    """The job mapping from a torchtitan TOML file, from a training log holding the job config
    torchtitan logs at start (``job.print_config``; the first one), or from the JSON file
    ``job.save_config_file`` writes. Never executes anything."""
    import tomllib
    at = text.find(LOG_MARKER)
    if at >= 0 or text.lstrip().startswith("{"):
        body = text if at < 0 else _RANK_PREFIX.sub("", text[at + len(LOG_MARKER):])
        start = body.find("{")
        try:
            data, _ = json.JSONDecoder().raw_decode(body, start) if start >= 0 else (None, 0)
        except (ValueError, RecursionError) as exc:
            raise ConfigError(f"{W}the job config logged after {LOG_MARKER!r} is not valid JSON ({str(exc)[:120]}); "
                              f"give the torchtitan TOML instead") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{W}no job config (a JSON object) follows {LOG_MARKER!r}; give the torchtitan TOML "
                              f"instead")
        if at >= 0:
            tps = logged_tps(body)
            if tps:
                data = {**data, MEASURED_KEY: tps}
        return data
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        if "[titan]" in text or "[rank0]:" in text:
            raise ConfigError(f"{W}this is a torchtitan log without the job config ({LOG_MARKER!r} is logged only "
                              f"with job.print_config = true); give the torchtitan TOML instead") from None
        raise ConfigError(f"torchtitan config is not valid TOML: {str(exc)[:200]}") from None
    except RecursionError:
        raise ConfigError(f"{W}tables or arrays nest too deep; check the file") from None


def _model_section(data: dict) -> Fields:
    """[model], or the logged config's model_spec (name, flavor) with the top-level hf_assets_path of
    torchtitan's config-registry era (trainer.py Trainer.Config.to_dict)."""
    top = Fields(data, W)
    if "model_spec" in data and "model" not in data:
        spec = top.section("model_spec")
        return Fields({"name": spec.get("name"), "flavor": spec.get("flavor"),
                       "hf_assets_path": data.get("hf_assets_path")}, W, "model_spec.")
    return top.section("model")


def _model(mdl: Fields, base_dir: str | None, inputs: list) -> object:
    """The model: the Hugging Face config.json behind ``hf_assets_path`` when it is there (relative to
    the TOML's folder, or to the current directory as torchtitan reads it), else the flavor's preset
    or transcribed mapping."""
    from pathlib import Path
    key = (mdl.text("name", ""), mdl.text("flavor", ""))
    assets = mdl.get("hf_assets_path")
    if assets is not None and not isinstance(assets, str):
        raise mdl.fail("hf_assets_path", assets, "must be a folder path (text)")
    if assets:
        # torchtitan resolves it from the directory it runs in (the repository root); a copy next to
        # the TOML is looked for first
        for root in ([Path(base_dir)] if base_dir is not None else []) + [Path.cwd()]:
            try:
                cfg = root / assets / "config.json"
                if cfg.is_file():
                    inputs.append(str(cfg.resolve()))
                    return str(cfg.resolve())
            except (OSError, ValueError):
                continue
    if key in TORCHTITAN_FLAVORS:
        return TORCHTITAN_FLAVORS[key]
    if key in TORCHTITAN_MODELS:
        return dict(TORCHTITAN_MODELS[key])
    known = list(TORCHTITAN_FLAVORS) + list(TORCHTITAN_MODELS)
    raise ConfigError(f"torchtitan [model] name = {key[0][:40]!r} flavor = {key[1][:40]!r} is not known to execsim"
                      f"{did_you_mean(key[1], [f for n, f in known if n == key[0]])}; known: "
                      f"{', '.join(f'{n} {f}' for n, f in known)}; or put the model's config.json at "
                      f"hf_assets_path (read as a Hugging Face config)")


#: the attention a torchtitan config selects -> options.attention_kernel (taskgraph/data/stacks.yaml
#: [SDPA], [FLEX], [VARLEN]). TOML era (pytorch/torchtitan 238fa99, torchtitan/models/llama3/__init__.py
#: llama3_args): flavors "8B_flex" / "debugmodel_flex_attn" set attn_type "flex", "8B_varlen" "varlen"
#: (attn_mask_type "block_causal"); every other flavor keeps model/args.py's attn_type "sdpa".
#: Registry era (b5bcd76, torchtitan/models/common/config_utils.py get_attention_config): model_registry's
#: attn_backend "flex", "flex_flash" (FlexAttention's FlashAttention-4 backend on Hopper / Blackwell:
#: no figure of its own, priced as the FA3 / FA4 kernels of varlen), "varlen"; "sdpa" is refused there.
ATTN_BACKENDS = {"sdpa": "sdpa", "flex": "flex", "flex_flash": "varlen", "varlen": "varlen"}
#: TOML-era flavor suffix -> attn_type
ATTN_FLAVOR_SUFFIX = {"_flex_attn": "flex", "_flex": "flex", "_varlen_attn": "varlen", "_varlen": "varlen"}


def _attention(mdl: Fields, registry: bool) -> tuple:
    """(the flavor without its attention suffix, options.attention_kernel, note or None): the TOML era's
    flavor suffix, or the registry era's model.attn_backend (handed over by import_titan_registry)."""
    flavor = mdl.text("flavor", "")
    if registry:
        backend = mdl.choice("attn_backend", "flex", tuple(ATTN_BACKENDS))
        note = ("model_spec.attn_backend flex_flash (FlexAttention's FlashAttention-4 backend, priced as "
                "FA3 on Hopper / cuDNN's rows on Blackwell)") if backend == "flex_flash" else None
        return flavor, ATTN_BACKENDS[backend], note
    for suffix, kind in ATTN_FLAVOR_SUFFIX.items():
        if flavor.endswith(suffix):
            return flavor[:-len(suffix)], kind, None
    return flavor, "sdpa", None


def _parallel(par: Fields) -> tuple:
    def deg(name: str, default: int = 1) -> int:
        extra = (-1,) if name.endswith("shard_degree") else ()
        return par.integer(name, default, hi=MAX_GPUS, extra=extra)

    tp, pp, cp = deg("tensor_parallel_degree"), deg("pipeline_parallel_degree"), deg("context_parallel_degree")
    rep, shard = deg("data_parallel_replicate_degree"), deg("data_parallel_shard_degree", -1)
    ep = deg("expert_parallel_degree")
    etp = deg("expert_tensor_parallel_degree", tp)
    name, vpp = "1f1b", 1
    if pp > 1:
        sname = par.get("pipeline_parallel_schedule", "1F1B")
        if sname not in TORCHTITAN_SCHEDULES:
            raise par.fail("pipeline_parallel_schedule", sname, f"is not modeled"
                           f"{did_you_mean(str(sname), TORCHTITAN_SCHEDULES)}; use one of "
                           f"{', '.join(TORCHTITAN_SCHEDULES)}")
        name, vpp = TORCHTITAN_SCHEDULES[sname]
    parallel: dict = {"tp": tp, "pp": pp, "cp": cp, "ep": ep, "sp": tp > 1,   # torchtitan TP always shards sequence
                      "zero": 3 if shard != 1 else 0}
    if shard > 0:
        parallel["dp"] = rep * shard
    if vpp > 1:
        parallel["vpp"] = vpp
    if ep > 1 and etp != tp:     # torchtitan ETP: experts' own TP degree (parallel folding)
        parallel["etp"] = etp
    notes = []
    if rep > 1 and shard != 1:
        notes.append("parallelism.data_parallel_replicate_degree (HSDP: sharding within a replica group is not "
                     "modeled; simulated as FSDP over all DP ranks)")
    return parallel, name, notes


def _registry_recompute(data: dict) -> tuple:
    """Activation checkpointing in a job config logged by torchtitan's config-registry era (trainer.py
    Trainer.Config.to_dict, after 9810191): the policy is the config's class, told by its fields
    (distributed/activation_checkpoint.py: None, FullAC.Config, SelectiveAC.Config with
    force_recompute_mm_shapes_by_fqns (op-level), MemoryBudgetAC.Config with memory_budget)."""
    ac = data.get("activation_checkpoint")
    if ac is None:
        return "none", 0
    if not isinstance(ac, dict):
        raise Fields(data, W).fail("activation_checkpoint", ac, "must be a section (a mapping of keys) or null")
    if "memory_budget" in ac:
        raise ConfigError(f"{W}activation_checkpoint (MemoryBudgetAC, torch.compile's min-cut) is not modeled; use "
                          f"none, selective or full")
    return ("selective", 0) if "force_recompute_mm_shapes_by_fqns" in ac else ("full", 0)


def _recompute(ac: Fields) -> tuple:
    """[activation_checkpoint]: mode none / full, or selective with ``selective_ac_option`` 'op'
    (torchtitan's op policy saves matmul outputs and recomputes the rest: execsim's selective,
    which recomputes the attention core, is the closest) or N (every N-th layer checkpointed whole,
    the others kept: ``_layer_sac_count % N == 0``, 0 = every layer; activation_checkpoint.py),
    which needs the model's layer count: ``_recompute_every`` is expanded by the import's finish."""
    mode = ac.choice("mode", "selective", ("none", "selective", "full", "memory_budget"))
    if mode == "memory_budget":
        raise ConfigError(f"{W}activation_checkpoint.mode = 'memory_budget' (torch.compile's min-cut, "
                          f"activation_memory_budget) is not modeled; use none, selective or full")
    if mode != "selective":
        return mode, 0
    opt = ac.get("selective_ac_option", "2")
    if isinstance(opt, bool) or not isinstance(opt, (str, int)) or not (opt == "op" or str(opt).isdigit()):
        raise ac.fail("selective_ac_option", opt, "must be 'op' or a non-negative integer (checkpoint every N-th "
                                                  "layer)")
    if opt == "op":
        return "selective", 0
    every = int(str(opt)[:12])
    return ("full", 0) if every <= 1 else ("none", every)


def _converters(mdl: Fields, data: dict, options: dict, notes: list) -> bool:
    """Float8 / MX (torchao) from [model] converters (a list, or the comma-separated text older
    torchtitan accepts) with [float8] (or, in newer torchtitan, [quantize.linear.float8]) recipe_name
    and enable_fsdp_float8_all_gather; True when the linears run in FP8."""
    conv = mdl.get("converters", [])
    if isinstance(conv, str):
        conv = [c.strip() for c in conv.split(",") if c.strip()]
    if not isinstance(conv, list) or not all(isinstance(c, str) for c in conv):
        raise mdl.fail("converters", conv, "must be a list of converter names, e.g. [\"float8\"]")
    for c in conv:
        if c not in CONVERTERS:
            raise mdl.fail("converters", c, f"is not a converter execsim models{did_you_mean(c, CONVERTERS)}; "
                                            f"known: {', '.join(CONVERTERS)}")
    kinds = {CONVERTERS[c] for c in conv}
    for c in conv:
        if CONVERTERS[c] is None:
            notes.append(f"model.converters {c} (the experts' grouped GEMMs are simulated in bf16)")
    if not kinds & {"float8", "mx"}:
        return False
    top = Fields(data, W)
    f8 = top.section("float8") if "float8" in data else \
        top.section("quantize").section("linear").section("float8")
    if "mx" in kinds:
        options["fp8_recipe"] = "mxfp8"
    else:
        rname = f8.choice("recipe_name", "tensorwise", tuple(FLOAT8_RECIPES))
        options["fp8_recipe"] = FLOAT8_RECIPES[rname]
        if rname == "rowwise_with_gw_hp":
            notes.append("float8.recipe_name rowwise_with_gw_hp (the weight-gradient GEMM in high precision "
                         "is simulated in FP8 like rowwise)")
    if f8.flag("enable_fsdp_float8_all_gather", False):
        options["fp8_param_gather"] = True
    return True


def _compiled(data: dict, tr: Fields) -> bool:
    """torch.compile of the model: [training] compile = true in older configs, [compile] enable with
    'model' in components since 2025 (a bare ``compile = true`` read as enable)."""
    if tr.flag("compile", False):
        return True
    comp = data.get("compile")
    if isinstance(comp, bool):
        return comp
    c = Fields(data, W).section("compile")
    parts = c.get("components", ["model"])
    if not isinstance(parts, list) or not all(isinstance(x, str) for x in parts):
        raise c.fail("components", parts, "must be a list of names, e.g. [\"model\", \"loss\"]")
    return bool(c.flag("enable", False)) and "model" in parts


def import_torchtitan(data: dict, *, cluster: str | None = None, nodes: int | None = None,
                      vocab: int | None = None, base_dir: str | None = None) -> Imported:
    """Map a torchtitan job (TOML, or its logged / saved job config) to a strategy (FSDP = ZeRO-3 over
    the shard group)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{W}expected a mapping of sections ([model], [training], [parallelism] ...)")
    measured_tps = data.get(MEASURED_KEY)
    data = {k: v for k, v in data.items() if k != MEASURED_KEY}
    check_expanded_size(data, "torchtitan config")
    _no_datetimes(data)
    top = Fields(data, W)
    mdl = _model_section(data)
    tr, par, ac = top.section("training"), top.section("parallelism"), top.section("activation_checkpoint")
    notes: list = []
    inputs: list = []
    flavor, attention, attn_note = _attention(mdl, "attn_backend" in mdl.data or "model_spec" in data)
    if flavor != mdl.text("flavor", ""):
        mdl = Fields({**mdl.data, "flavor": flavor}, W, mdl.prefix)
    model = _model(mdl, base_dir, inputs)
    cl = cluster_mapping(cluster, nodes, "torchtitan config")
    parallel, name, hsdp = _parallel(par)
    local = tr.integer("local_batch_size", tr.integer("batch_size", 8, hi=2 ** 26), hi=2 ** 26)
    seq = tr.integer("seq_len", 2048, hi=2 ** 24)
    glob = tr.integer("global_batch_size", -1, hi=2 ** 40, extra=(-1,))
    mb = par.integer("pipeline_parallel_microbatch_size", 1, hi=2 ** 26) if parallel["pp"] > 1 else local
    mp = tr.choice("mixed_precision_param", "bfloat16", tuple(MIXED_PRECISION) + ("float32",))
    if mp == "float32":
        raise ConfigError(f"{W}[training] mixed_precision_param = 'float32': execsim models bf16 and fp16 mixed "
                          f"precision ({', '.join(MIXED_PRECISION)}); FP32 training is not modeled")
    # FSDP2 prefetches its parameter all-gathers; without sharding (zero 0) there is nothing to gather
    options: dict = {"overlap_grad_reduce": True, "overlap_param_gather": parallel["zero"] > 0,
                     "tp_comm_overlap": par.flag("enable_async_tensor_parallel", False),
                     # the software stack (taskgraph/data/stacks.yaml): PyTorch eager unless torch.compile is on
                     "stack": "torchtitan-compile" if _compiled(data, tr) else "torchtitan",
                     # the attention the config selects (the stacks' default is FlexAttention, stacks.yaml [SDPA])
                     "attention_kernel": attention}
    fp8 = _converters(mdl, data, options, notes)
    if attn_note:
        notes.append(attn_note)
    if "debug" in data and Fields(data, W).section("debug").flag("moe_force_load_balance", False):
        options["moe_routing"] = "balanced"   # moe/moe.py: tokens dealt round-robin to the experts
    reshard = RESHARD[par.choice("fsdp_reshard_after_forward", "default", tuple(RESHARD))]
    if reshard is not None:
        if parallel["zero"] == 3:
            options["reshard_after_forward"] = reshard
        else:
            notes.append(f"parallelism.fsdp_reshard_after_forward {par.get('fsdp_reshard_after_forward')} (no effect: "
                         f"data_parallel_shard_degree 1, no FSDP)")
    opt = top.section("optimizer")   # components/optimizer.py build_optimizers: fused = implementation == "fused"
    impl = opt.choice("implementation", "fused", ("fused", "foreach", "for-loop"))
    if impl != "fused":   # the stacks price the fused kernel (stacks.yaml [TORCH-ADAM])
        nbytes = foreach_adam_bytes(opt.get("name", "AdamW") == "AdamW", opt.number("weight_decay", 0.1))
        notes.append(f"optimizer.implementation {impl} (torch's {impl} Adam, {nbytes} B per fp32 parameter: priced as "
                     f"the fused kernel's 28)")
    recompute, every = _registry_recompute(data) if "model_spec" in data else _recompute(ac)
    training: dict = {"micro_batch": mb, "global_batch": None, "seq_len": seq,
                      "precision": "fp8" if fp8 else MIXED_PRECISION[mp], "recompute": recompute}
    master = TRAINING_DTYPES[tr.choice("dtype", "float32", tuple(TRAINING_DTYPES))]
    if master is not None:
        training["master_weights"] = master
    strategy: dict = {"model": model, "cluster": cl, "parallel": parallel, "schedule": name,
                      "training": training, "options": options}
    if every:
        strategy["_recompute_every"] = every
    if glob > 0:     # gradient accumulation: global_batch_size / (local_batch_size x dp) steps (train.py)
        training["global_batch"] = glob
    else:
        strategy["_local_batch"] = local
    steps = tr.integer("steps", None, hi=2 ** 40)
    if steps:
        strategy["_steps"] = steps
    on = fp8
    # the registry era's model_spec.model holds the flavor's shape (read from the flavor), and its
    # converters, which are listed (not read from there)
    seen = [k for k in _set_keys(data) if k not in _TT_READ and not (on and k in _TT_FLOAT8)
            and not (k.startswith(_TT_QUIET) and not _QUANT.search(k))]
    seen += hsdp + notes
    if measured_tps:
        strategy["_measured_tps"] = statistics.median(measured_tps)
    return Imported(strategy, tuple(seen), "torchtitan", tuple(inputs))
