"""NVIDIA NeMo AutoModel YAML recipes (``automodel RECIPE.yaml``) -> a strategy mapping (see
:mod:`strategies.importers`); the run is priced with ``options.stack: nemo-automodel``
(``taskgraph/data/stacks.yaml`` [AM]).

Field meanings: NVIDIA-NeMo/Automodel 36044ad (2026-08-22): ``distributed:`` is
``components/distributed/config.py`` (FSDP2Config: sequence_parallel, activation_checkpointing,
reshard_after_forward; MoEParallelizerConfig: reshard_after_forward = False, ignore_router_for_ac,
wrap_outer_model, lm_head_precision) with the mesh sizes dp/dp_replicate/tp/pp/cp/ep of
``components/distributed/mesh.py`` and ``pipeline:`` of ``components/distributed/pipelining/config.py``
(PipelineConfig: pp_schedule, pp_microbatch_size, layers_per_stage, round_virtual_stages_to_pp_multiple;
functional.py calculate_virtual_stages and generate_hf_model_fqn_per_model_part: ceil(layers /
layers_per_stage) stages rounded to a multiple of pp, the first ``layers % stages`` one layer longer);
``step_scheduler:`` is ``components/training/step_scheduler.py`` (global_batch_size: samples per
optimizer step over all GPUs; local_batch_size: samples per forward/backward per GPU); ``model.backend``
is ``components/models/common/utils.py`` BackendConfig (attn, experts, dispatcher, fake_balanced_gate,
te_fp8); ``model.torch_dtype`` (``_transformers/auto_model.py`` from_config: "auto" is bf16) gives
``training.master_weights`` (float32 parameters: true; bf16: the stack's default, no master copy). The recipe is read as data (YAML through the checked reader); its ``_target_`` callables are
never imported or run. Every key the recipe sets that this does not read, outside the sections that
hold no execution settings (logging, checkpointing, data paths, optimizer hyper-parameters), is listed
as not modelled, and so is an ``optimizer:`` that is not the stack's torch foreach Adam without weight decay
(``_optimizer_note``; stacks.yaml [TORCH-ADAM])."""
from __future__ import annotations

import math

from strategies.config import did_you_mean
from strategies.errors import ConfigError
from strategies.import_common import (
    Fields,
    Imported,
    check_expanded_size,
    cluster_mapping,
    foreach_adam_bytes,
    walk_keys,
)
from strategies.import_torchtitan import TORCHTITAN_SCHEDULES
from strategies.limits import MAX_GPUS

W = "automodel recipe: "

#: Hugging Face model ids the recipes name -> (execsim model, node limit of DeepEP's dispatch). The
#: preset's shape is the model's config.json (taskgraph/model.py cites each); AutoModel's DeepSeek-V3
#: (components/models/deepseek_v3/model.py) builds no MTP module, so none is priced. The node limit is
#: what options.moe_max_nodes takes behind DeepEP, as the Megatron importer sets it: the router's group
#: limit (DeepSeek-V3 config.json topk_group 4), else top-k (each token reaches at most k nodes).
AUTOMODEL_MODELS = {
    "deepseek-ai/DeepSeek-V3": ({"preset": "deepseek-v3", "mtp_layers": 0}, 4),
    "deepseek-ai/DeepSeek-V3-Base": ({"preset": "deepseek-v3", "mtp_layers": 0}, 4),
    "Qwen/Qwen3-30B-A3B": ("qwen3-30b-a3b", 8), "Qwen/Qwen3-30B-A3B-Base": ("qwen3-30b-a3b", 8),
    "Qwen/Qwen3-235B-A22B": ("qwen3-235b-a22b", 8), "Qwen/Qwen3-8B": ("qwen3-8b", None),
    "Qwen/Qwen3-32B": ("qwen3-32b", None), "openai/gpt-oss-120b": ("gpt-oss-120b", 4),
    "openai/gpt-oss-20b": ("gpt-oss-20b", 4), "meta-llama/Llama-3.1-8B": ("llama3-8b", None),
    "meta-llama/Meta-Llama-3.1-8B": ("llama3-8b", None), "meta-llama/Llama-3.1-70B": ("llama3-70b", None),
    "meta-llama/Llama-3.3-70B-Instruct": ("llama3-70b", None), "meta-llama/Llama-3.1-405B": ("llama3-405b", None),
    "mistralai/Mixtral-8x7B-v0.1": ("mixtral-8x7b", 2),
}
#: transformer layers of each model above (its preset's; for layers_per_stage)
MODEL_LAYERS = {"deepseek-v3": 61, "qwen3-30b-a3b": 48, "qwen3-235b-a22b": 94, "qwen3-8b": 36, "qwen3-32b": 64,
                "gpt-oss-120b": 36, "gpt-oss-20b": 24, "llama3-8b": 32, "llama3-70b": 80, "llama3-405b": 126,
                "mixtral-8x7b": 32}
#: pp_schedule -> (schedule, chunks per rank by default): torch.distributed.pipelining's names, which
#: get_schedule_class matches case-insensitively (AutoModel's recipes write "interleaved1f1b")
SCHEDULES = {k.lower(): v for k, v in TORCHTITAN_SCHEDULES.items()}
#: backend.attn -> options (the stack's own is TE's DotProductAttention: stacks.yaml [AM])
ATTENTION = {"te": {}, "sdpa": {"attention_kernel": "sdpa"}, "flex": {"attention_kernel": "flex"},
             "cudnn": {"attention_kernel": "cudnn"}, "eager": {"flash_attention": False}}
#: backend.te_fp8.recipe -> options.fp8_recipe (TEFp8Config.build_recipe: Float8CurrentScaling,
#: Float8BlockScaling, MXFP8BlockScaling)
FP8_RECIPES = {"current": "tensorwise", "block": "blockwise", "mxfp8": "mxfp8"}
#: dispatchers that run DeepEP-style node-limited dispatch (GroupedExpertsDeepEP; HybridEP and UCCL-EP
#: are DeepEP's interfaces over other transports)
DEEPEP = ("deepep", "hybridep", "uccl_ep")
_READ = {
    "distributed.strategy", "distributed.dp_size", "distributed.dp_replicate_size", "distributed.tp_size",
    "distributed.pp_size", "distributed.cp_size", "distributed.ep_size", "distributed.sequence_parallel",
    "distributed.activation_checkpointing", "distributed.reshard_after_forward", "distributed.moe.reshard_after_forward",
    "distributed.pipeline.pp_schedule", "distributed.pipeline.pp_microbatch_size", "distributed.pipeline.layers_per_stage",
    "distributed.pipeline.round_virtual_stages_to_pp_multiple", "step_scheduler.global_batch_size",
    "step_scheduler.local_batch_size", "step_scheduler.max_steps", "dataset.seq_len", "dataset.seq_length",
    "model.pretrained_model_name_or_path", "model.config.pretrained_model_name_or_path", "model.backend.attn",
    "model.backend.linear", "model.backend.rms_norm", "model.backend.rope_fusion", "model.backend.experts",
    "model.backend.dispatcher", "model.backend.fake_balanced_gate", "model.backend.te_fp8.recipe",
    "loss_fn.fp32_upcast", "benchmark.num_nodes", "compile.enabled", "model.torch_dtype"}
#: settings that do not change what runs, or only names (read and not reported)
_QUIET_KEYS = {"recipe", "seed", "model._target_", "model.config._target_", "model.trust_remote_code",
               "model.backend._target_", "model.backend.enable_hf_state_dict_adapter", "loss_fn._target_",
               "distributed.pipeline.patch_inner_model", "distributed.pipeline.patch_causal_lm_model",
               "distributed.pipeline.scale_grads_in_schedule", "distributed.moe.wrap_outer_model",
               "distributed.defer_fsdp_grad_sync", "distributed.moe.ignore_router_for_ac"}
#: sections that hold no execution settings (logging, checkpoints, data, optimizer hyper-parameters)
_QUIET = ("benchmark.", "dist_env.", "checkpoint.", "dataloader.", "validation_dataloader.", "validation_dataset.",
          "dataset.", "optimizer.", "lr_scheduler.", "wandb.", "mlflow.", "ci.", "clip_grad_norm.", "rng.",
          "step_scheduler.", "tokenizer.")


def _model(top: Fields, notes: list) -> tuple:
    """(model mapping or preset, DeepEP node limit, MoE?) of ``model.pretrained_model_name_or_path`` (or
    ``model.config.pretrained_model_name_or_path``, the config-only form of from_config)."""
    mdl = top.section("model")
    key = "pretrained_model_name_or_path"
    name, where = mdl.get(key), mdl
    if name is None:
        where = mdl.section("config")
        name = where.get(key)
    if name is None:
        raise ConfigError(f"{W}model.{key} (or model.config.{key}) is not set: the recipe names no model; give "
                          f"--set model.{key}=ID (one of {', '.join(AUTOMODEL_MODELS)})")
    if not isinstance(name, str) or name not in AUTOMODEL_MODELS:
        raise where.fail(key, name, f"is not a model execsim knows{did_you_mean(str(name), AUTOMODEL_MODELS)}; known: "
                                    f"{', '.join(AUTOMODEL_MODELS)}; or write the strategy file's model: by hand")
    model, limit = AUTOMODEL_MODELS[name]
    return (dict(model) if isinstance(model, dict) else model), limit, limit is not None


def virtual_stages(layers: int, pp: int, per: int | None, rounding: str | None, default_vpp: int) -> int:
    """Virtual pipeline stages AutoModel cuts ``layers`` into (pipelining/functional.py
    calculate_virtual_stages): ceil(layers / ``per``) rounded ``up`` or ``down`` to a multiple of ``pp``
    (None: as is), or ``pp`` x ``default_vpp`` without layers_per_stage.

    >>> virtual_stages(61, 4, 2, "down", 2), virtual_stages(61, 4, 2, "up", 2), virtual_stages(61, 4, None, None, 2)
    (28, 32, 8)
    """
    if per is None:
        return pp * default_vpp
    stages = math.ceil(layers / per)
    if rounding == "up":
        return stages + (-stages) % pp
    return stages - stages % pp if rounding == "down" else stages


def split_layers(layers: int, stages: int) -> list[int]:
    """Layers of each virtual stage: the first ``layers % stages`` one longer (pipelining/functional.py
    generate_hf_model_fqn_per_model_part).

    >>> split_layers(61, 28)[:6]
    [3, 3, 3, 3, 3, 2]
    """
    base, extra = divmod(layers, stages)
    return [base + (1 if i < extra else 0) for i in range(stages)]


def _stage_layers(pipe: Fields, layers: int, pp: int, vpp_default: int) -> tuple:
    """(chunks per rank, layers per virtual stage or None when even) of pipeline.layers_per_stage, with
    AutoModel's checks (calculate_virtual_stages: a multiple of pp, at least two stages per rank for a
    multi-stage schedule, one for a single-stage one)."""
    per = pipe.integer("layers_per_stage", None, hi=layers)
    rounding = pipe.choice("round_virtual_stages_to_pp_multiple", None, ("up", "down"))
    stages = virtual_stages(layers, pp, per, rounding, vpp_default)
    if stages % pp:
        raise pipe.fail("layers_per_stage", per, f"gives {stages} stages, not a multiple of pp_size {pp} "
                                                 f"(AutoModel refuses it too); set round_virtual_stages_to_pp_multiple")
    if not pp <= stages <= layers or (stages // pp > 1) != (vpp_default > 1):
        need = "one stage per rank" if vpp_default == 1 else "at least two stages per rank"
        raise pipe.fail("layers_per_stage", per, f"gives {stages} stages for {layers} layers over pp_size {pp}; "
                                                 f"the schedule runs {need} (AutoModel refuses it too)")
    counts = split_layers(layers, stages)
    return stages // pp, (counts if len(set(counts)) > 1 else None)


def _parallel(top: Fields, model, notes: list) -> tuple:
    """(parallel mapping, schedule, zero) of ``distributed:``."""
    d = top.section("distributed")
    strategy = d.choice("strategy", "fsdp2", ("fsdp2", "megatron_fsdp", "ddp"))
    deg = {k: d.integer(f"{k}_size", 1, hi=MAX_GPUS) for k in ("tp", "pp", "cp", "ep")}
    par: dict = {**deg, "sp": d.flag("sequence_parallel", False) and deg["tp"] > 1}
    dp = d.integer("dp_size", None, hi=MAX_GPUS)
    if dp is not None:
        par["dp"] = dp
    if d.integer("dp_replicate_size", 1, hi=MAX_GPUS) > 1:
        notes.append("distributed.dp_replicate_size (HSDP: simulated as FSDP over all data-parallel ranks)")
    if strategy == "megatron_fsdp":
        notes.append("distributed.strategy megatron_fsdp (priced as FSDP2)")
    zero = 0 if strategy == "ddp" else 3
    par["zero"] = zero
    name = "1f1b"
    if deg["pp"] > 1:
        pipe = d.section("pipeline")
        sname = str(pipe.get("pp_schedule", "1f1b"))
        if sname.lower() not in SCHEDULES:
            raise pipe.fail("pp_schedule", sname, f"is not modelled{did_you_mean(sname.lower(), SCHEDULES)}; use one "
                                                  f"of {', '.join(SCHEDULES)}")
        name, vpp = SCHEDULES[sname.lower()]
        preset = model["preset"] if isinstance(model, dict) else model
        vpp, counts = _stage_layers(pipe, MODEL_LAYERS[preset], deg["pp"], vpp)
        if vpp > 1:
            par["vpp"] = vpp
        if counts is not None:
            par["layers_per_stage"] = counts
    return par, name, zero


def _backend(top: Fields, options: dict, notes: list, limit, moe: bool, ep: int, tp: int = 1) -> str:
    """Options of ``model.backend`` (BackendConfig); returns the training precision."""
    be = top.section("model").section("backend")
    attn = be.choice("attn", "te", tuple(ATTENTION) + ("tilelang",))
    if attn == "tilelang":
        raise be.fail("attn", attn, "(DeepSeek V4 / GLM sparse attention kernels) is not modelled; use te, sdpa, "
                                    "flex, cudnn or eager")
    options.update(ATTENTION[attn])
    if be.choice("rms_norm", "torch_fp32", ("torch", "torch_fp32", "te", "quack")) == "torch":
        notes.append("model.backend.rms_norm torch (eager nn.RMSNorm: priced as one fused kernel)")
    be.choice("linear", "te", ("torch", "te", "quack"))
    be.flag("rope_fusion", False)   # forced off by BackendConfig.__post_init__ (#3027)
    experts = be.choice("experts", "torch_mm", ("torch", "te", "gmm", "torch_mm", "torch_mm_mxfp8"))
    # the default of an install with DeepEP (BackendConfig: deepep when deep_ep imports, else uccl_ep, else torch)
    dispatcher = be.choice("dispatcher", "deepep", (*DEEPEP, "torch", "mok"))
    if moe and experts == "torch":
        notes.append("model.backend.experts torch (a loop over the experts: priced as one grouped GEMM)")
    if moe and experts == "torch_mm_mxfp8":
        notes.append("model.backend.experts torch_mm_mxfp8 (torchao MXFP8 grouped GEMMs: priced in bf16)")
    if experts in ("te", "gmm") and dispatcher not in (*DEEPEP, "mok"):
        dispatcher = "torch"   # BackendConfig.__post_init__: te / gmm experts need DeepEP, else torch + torch_mm
    if moe and ep > 1 and dispatcher in DEEPEP:
        options["moe_max_nodes"] = limit     # DeepEP's node-limited dispatch (stacks.yaml [AM])
    elif moe and ep > 1 and dispatcher == "torch" and tp == 1:
        # experts.py GroupedExperts: all-gather over the 1-D EP mesh, fp32 all-reduce of the output
        options["moe_dispatcher"] = "allgather_allreduce"
    elif moe and ep > 1:
        notes.append(f"model.backend.dispatcher {dispatcher} ("
                     + ("an all-gather of the EP group's tokens and an all-reduce of the output, with tp > 1"
                        if dispatcher == "torch" else "Mixture-of-Kittens' fused megakernel") + ": priced as the all-to-all)")
    if be.flag("fake_balanced_gate", False) and moe:
        options["moe_routing"] = "balanced"   # FakeBalancedGate: tokens dealt evenly to the experts
        if be.number("fake_gate_noise", 0.0, hi=1.0) > 0:
            notes.append("model.backend.fake_gate_noise (priced as exactly balanced routing)")
    fp8 = be.section("te_fp8")
    if be.has("te_fp8"):
        recipe = fp8.choice("recipe", "current", tuple(FP8_RECIPES))
        options["fp8_recipe"] = FP8_RECIPES[recipe]
        return "fp8"
    return "bf16"


#: model.torch_dtype (shared/utils.py dtype_from_str: lower-cased, "torch." optional; "auto" -> bf16 in
#: _transformers/auto_model.py from_config) -> training.master_weights: fp32 parameters are their own
#: master copy (True); bf16 ones have none (None: the nemo-automodel stack's default, stacks.yaml [AM])
TORCH_DTYPES = {"auto": None, "bf16": None, "bfloat16": None, "float": True, "float32": True}


def _master_weights(top: Fields):
    """training.master_weights from the recipe's ``model.torch_dtype`` (None: not written)."""
    raw = top.section("model").get("torch_dtype", "auto")
    val = str(raw).lower().removeprefix("torch.")
    if val in ("float16", "half"):
        raise top.section("model").fail("torch_dtype", raw, "(fp16 parameters without an fp32 master copy) is not "
                                        "modelled: the loss scaler needs fp32 masters; use bf16 or float32")
    if val not in TORCH_DTYPES:
        raise top.section("model").fail("torch_dtype", raw, "must be auto, bf16 / bfloat16 or float32 (torch.float32)")
    return TORCH_DTYPES[val]


#: the optimizers stack nemo-automodel's Adam step describes: torch's Adam / AdamW without fused=True, which torch
#: runs as its foreach passes (72 B per fp32 parameter element, stacks.yaml [TORCH-ADAM]), and their default
#: weight decay (torch.optim.Adam 0, AdamW 0.01; AutoModel's factory path passes the recipe's kwargs to torch)
TORCH_ADAMS = {"torch.optim.Adam": 0.0, "torch.optim.AdamW": 0.01}


def _optimizer_note(top: Fields) -> str | None:
    """What the recipe's ``optimizer:`` runs that the stack's foreach Adam ([TORCH-ADAM]) does not price, as a
    not-modelled note: another optimizer (TE's FusedAdam, ...), torch's fused kernel, or a weight decay's pass."""
    opt = top.section("optimizer")
    target = opt.get("_target_")
    if target is None:
        return None
    if target not in TORCH_ADAMS:
        return f"optimizer._target_ {target} (priced as torch's foreach Adam, 72 B per fp32 parameter)"
    if opt.get("fused") is True:
        return "optimizer.fused true (torch's fused Adam, 28 B per fp32 parameter: priced as the foreach path's 72)"
    wd = opt.get("weight_decay", TORCH_ADAMS[target])
    if isinstance(wd, (int, float)) and not isinstance(wd, bool) and wd != 0:
        nbytes = foreach_adam_bytes(target == "torch.optim.AdamW", wd)
        return f"optimizer.weight_decay {wd:g} (one more foreach pass, {nbytes} B per fp32 parameter: priced without it, 72)"
    return None


def _seq_len(top: Fields) -> int:
    ds = top.section("dataset")
    for key in ("seq_len", "seq_length"):
        v = ds.integer(key, None, hi=2 ** 24)
        if v is not None:
            return v
    raise ConfigError(f"{W}the sequence length is not in the recipe (dataset.seq_len or dataset.seq_length; a "
                      f"fine-tuning set pads each batch to its longest sample); give --set dataset.seq_len=N")


def import_automodel(data: dict, *, cluster: str | None = None, nodes: int | None = None,
                     vocab: int | None = None) -> Imported:
    """Map a NeMo AutoModel recipe (parsed YAML) to a strategy: FSDP2 = ZeRO-3 over the data-parallel
    ranks, the ``nemo-automodel`` stack, DeepEP dispatch as node-limited routing."""
    if not isinstance(data, dict):
        raise ConfigError(f"{W}expected a mapping of sections (model, distributed, step_scheduler, dataset ...)")
    check_expanded_size(data, "automodel recipe")
    top = Fields(data, W)
    notes: list = []
    model, limit, moe = _model(top, notes)
    if vocab is not None:
        raise ConfigError("--vocab: an AutoModel recipe names its model (and so its vocabulary); drop --vocab")
    bench = top.section("benchmark")
    cl = cluster_mapping(cluster, nodes if nodes is not None else bench.integer("num_nodes", None, hi=MAX_GPUS),
                         "automodel recipe")
    parallel, name, zero = _parallel(top, model, notes)
    options: dict = {"stack": "nemo-automodel", "overlap_grad_reduce": True, "overlap_param_gather": zero > 0}
    precision = _backend(top, options, notes, limit, moe, parallel["ep"], parallel["tp"])
    d = top.section("distributed")
    if parallel["cp"] > 1:
        options["cp_comm"] = "ring"   # TE's context parallelism, cp_comm_type "p2p" (moe/parallelizer.py apply_cp)
    # MoE models: MoEParallelizerConfig.reshard_after_forward (False); dense: FSDP2Config's (None = the
    # simulator's default, which is AutoModel's: reshard but under pipeline parallelism)
    reshard = d.section("moe").flag("reshard_after_forward", False) if moe else d.flag("reshard_after_forward", None)
    if reshard is not None and zero == 3:
        options["reshard_after_forward"] = reshard
    ac = d.get("activation_checkpointing", False)
    if ac not in (True, False, "full", "selective"):
        raise d.fail("activation_checkpointing", ac, "must be true, false, full or selective")
    recompute = "selective" if ac == "selective" else ("full" if ac else "none")
    step = top.section("step_scheduler")
    glob = step.integer("global_batch_size", None, hi=2 ** 40)
    local = step.integer("local_batch_size", None, hi=2 ** 26)
    if glob is None or local is None:
        missing = "global_batch_size" if glob is None else "local_batch_size"
        raise ConfigError(f"{W}step_scheduler.{missing} is not set (StepScheduler requires it); give --set "
                          f"step_scheduler.{missing}=N")
    mb = d.section("pipeline").integer("pp_microbatch_size", 1, hi=2 ** 26) if parallel["pp"] > 1 else local
    if parallel["pp"] > 1 and local % mb:
        raise d.section("pipeline").fail("pp_microbatch_size", mb, f"must divide step_scheduler.local_batch_size {local}")
    training: dict = {"micro_batch": mb, "global_batch": glob, "seq_len": _seq_len(top), "precision": precision,
                      "recompute": recompute}
    master = _master_weights(top)
    if master is not None:
        training["master_weights"] = master
    if top.section("compile").flag("enabled", False):
        notes.append("compile.enabled (torch.compile of the model: priced eager)")
    if top.section("loss_fn").flag("fp32_upcast", True) is False:
        notes.append("loss_fn.fp32_upcast false (one pass over the logits fewer: priced with the fp32 copy)")
    opt_note = _optimizer_note(top)
    if opt_note:
        notes.append(opt_note)
    strategy: dict = {"model": model, "cluster": cl, "parallel": parallel, "schedule": name,
                      "training": training, "options": options}
    steps = step.integer("max_steps", None, hi=2 ** 40)
    if steps:
        strategy["_steps"] = steps
    seen = [k for k in walk_keys(data) if k not in _READ and k not in _QUIET_KEYS and not k.startswith(_QUIET)
            and not (k.startswith("model.backend.te_fp8.") and precision == "fp8")]
    return Imported(strategy, tuple(seen + notes), "automodel")
