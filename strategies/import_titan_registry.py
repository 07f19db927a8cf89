"""torchtitan's ``config_registry.py`` (main branch since early 2026: one Python function per job,
returning ``Trainer.Config``), read statically by :mod:`strategies.pyrecipe` and handed to the TOML
importer (:func:`strategies.import_torchtitan.import_torchtitan`) as the TOML sections it reads.

Sources (pytorch/torchtitan at b5bcd76c66d0acb1a08b176d9639425bc55e0b2a): ``torchtitan/trainer.py``
l. 100-115 (``Trainer.Config`` sections; ``activation_checkpoint`` defaults to ``SelectiveAC``),
``torchtitan/config/configs.py`` l. 36-94 (``TrainingConfig``: ``num_tokens_per_microbatch_per_dp_rank``
16384, ``num_tokens_per_train_step`` -1 = local x dp, ``max_context_length`` 2048, ``steps`` 10000,
``mixed_precision_param`` bfloat16) and l. 121-160 (``ParallelismConfig``, the TOML's
``[parallelism]`` names), ``torchtitan/models/llama3/config_registry.py`` (``model_registry("8B",
converters=[...])``: the flavor and the float8 / MX / NVFP4 converters).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from strategies.errors import ConfigError
from strategies.import_common import Imported
from strategies.pyrecipe import Unknown, evaluate_recipe, parse_recipe, recipe_functions, short
from strategies.pyrecipe_values import plain

#: TrainingConfig defaults (configs.py l. 37, 43, 51, 67)
TRAINING_DEFAULTS = {"num_tokens_per_microbatch_per_dp_rank": 16384, "num_tokens_per_train_step": -1,
                     "max_context_length": 2048, "steps": 10000}
#: ParallelismConfig defaults (configs.py l. 121-160): a field left at its default is not "set"
PARALLELISM_DEFAULTS = {"data_parallel_replicate_degree": 1, "data_parallel_shard_degree": -1,
                        "fsdp_reshard_after_forward": "default", "enable_fsdp_symm_mem": False,
                        "tensor_parallel_degree": 1, "enable_sequence_parallel": True, "spmd_backend": "spmd_types",
                        "pipeline_parallel_degree": 1, "module_fqns_per_model_part": None,
                        "pipeline_parallel_first_stage_less_layers": 1, "pipeline_parallel_last_stage_less_layers": 1,
                        "pipeline_parallel_layers_per_stage": None, "pipeline_parallel_schedule": "1F1B",
                        "pipeline_parallel_schedule_csv": "", "num_pp_microbatches": 1, "context_parallel_degree": 1,
                        "context_parallel_load_balancer": "headtail", "context_parallel_ptrr_mask_key": None,
                        "expert_parallel_degree": 1}
#: model_registry's attn_backend default by family where it is not "flex" (torchtitan/models/gpt_oss/__init__.py
#: l. 391 at b5bcd76; llama3, qwen3, qwen3_5, deepseek_v3, kimi_k2_7 default to "flex")
REGISTRY_ATTN_DEFAULT = {"gpt_oss": "varlen"}
#: converter config class -> the TOML's [model] converters name
CONVERTERS = {"Float8LinearConverter": "float8", "MXFP8LinearConverter": "mx"}


def _section(tree: dict, key: str, where: str) -> dict:
    v = tree.get(key)
    if v is None:
        return {}
    if isinstance(v, Unknown):
        raise ConfigError(f"{where}: {key} is not known without running the registry ({v.where}: {v.what[:100]}); "
                          f"give --set {key}.FIELD=VALUE")
    if not isinstance(v, dict):
        raise ConfigError(f"{where}: {key} = {str(v)[:40]!r} is not a configuration section")
    return {k: x for k, x in v.items() if not k.startswith("_")}


def _known(v: Any, key: str, where: str) -> Any:
    if isinstance(v, Unknown):
        raise ConfigError(f"{where}: {key} is not known without running the registry ({v.where}: {v.what[:100]}); "
                          f"give --set {key}=VALUE")
    return v


def registry_to_toml(tree: dict, model_name: str, where: str) -> dict:
    """The TOML sections import_torchtitan reads, from an evaluated ``Trainer.Config`` tree."""
    spec = tree.get("model_spec")
    if not isinstance(spec, dict):
        raise ConfigError(f"{where}: model_spec is not known without running the registry"
                          + (f" ({spec.where}: {spec.what[:100]})" if isinstance(spec, Unknown) else "")
                          + "; give --set model_spec.flavor=NAME")
    flavor = spec.get("flavor") or (spec.get("_args_") or [None])[0]
    if not isinstance(flavor, str):
        raise ConfigError(f"{where}: the model flavor (model_registry's first argument) is not known statically; "
                          f"give --set model_spec.flavor=NAME")
    converters = []
    given = spec.get("converters") or []
    if not isinstance(given, list):
        raise ConfigError(f"{where}: model_spec.converters = {str(given)[:40]!r} must be a list of converter configs")
    for c in given:
        name = short(str(c.get("_target_", "")).replace(".Config", "")) if isinstance(c, dict) else "?"
        if name not in CONVERTERS:
            raise ConfigError(f"{where}: the model converter {name} is not modeled (float8 and MXFP8 linears are); "
                              f"drop it with --set model_spec.converters=[]")
        converters.append(CONVERTERS[name])
    training = {**TRAINING_DEFAULTS, **_section(tree, "training", where)}
    seq = _known(training["max_context_length"], "training.max_context_length", where)
    tokens = _known(training["num_tokens_per_microbatch_per_dp_rank"], "training.num_tokens_per_microbatch_per_dp_rank",
                    where)
    if not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in (seq, tokens)) or tokens % seq:
        raise ConfigError(f"{where}: training.num_tokens_per_microbatch_per_dp_rank = {tokens!r} must be a positive "
                          f"multiple of max_context_length = {seq!r} (the per-rank batch is their ratio)")
    toml_training = {"seq_len": seq, "local_batch_size": tokens // seq,
                     "steps": _known(training["steps"], "training.steps", where)}
    step_tokens = _known(training["num_tokens_per_train_step"], "training.num_tokens_per_train_step", where)
    if isinstance(step_tokens, int) and not isinstance(step_tokens, bool) and step_tokens > 0:
        if step_tokens % seq:
            raise ConfigError(f"{where}: training.num_tokens_per_train_step = {step_tokens} is not a multiple of "
                              f"max_context_length = {seq}")
        toml_training["global_batch_size"] = step_tokens // seq
    for key in ("mixed_precision_param", "compile"):
        if key in training:
            toml_training[key] = _known(training[key], f"training.{key}", where)
    ac = tree.get("activation_checkpoint")
    ac_name = short(str(ac.get("_target_", "")).replace(".Config", "")) if isinstance(ac, dict) else "SelectiveAC"
    mode = {"SelectiveAC": "selective", "FullAC": "full", "NoAC": "none"}.get(ac_name)
    if mode is None:
        raise ConfigError(f"{where}: activation_checkpoint {ac_name} is not one execsim reads (SelectiveAC, FullAC, "
                          f"NoAC)")
    # model_registry's attn_backend (b5bcd76: "flex" by default, gpt_oss "varlen"; import_torchtitan ATTN_BACKENDS)
    backend = spec.get("attn_backend", REGISTRY_ATTN_DEFAULT.get(model_name, "flex"))
    toml = {"model": {"name": model_name, "flavor": flavor, "attn_backend": backend}, "training": toml_training,
            "parallelism": {k: v for k, v in _section(tree, "parallelism", where).items()
                            if k not in PARALLELISM_DEFAULTS or PARALLELISM_DEFAULTS[k] != v},
            # torchtitan's SelectiveAC.Config (config_registry era) has no per-layer option: it is the
            # op-level policy (the default save-ops list), the TOML era's selective_ac_option 'op'
            "activation_checkpoint": {"mode": mode, **({"selective_ac_option": "op"} if mode == "selective" else {})}}
    if converters:
        toml["model"]["converters"] = converters
    for sec, body in toml.items():        # nothing unknown reaches the TOML importer
        for k, v in body.items():
            _known(v, f"{'model_spec' if sec == 'model' else sec}.{k}", where)
    if isinstance(tree.get("hf_assets_path"), str):
        toml["model"]["hf_assets_path"] = tree["hf_assets_path"]
    comp = tree.get("compile")
    if isinstance(comp, dict):     # CompileConfig (configs.py l. 294-301): enable False, components model + loss
        toml["compile"] = {"enable": comp.get("enable", False), "components": comp.get("components", ["model", "loss"])}
        if isinstance(toml["compile"]["components"], Unknown):
            toml["compile"]["components"] = ["model", "loss"]
        if comp.get("enable_async_tensor_parallel") is True:   # async TP moved from [parallelism] to CompileConfig
            toml["parallelism"]["enable_async_tensor_parallel"] = True
    return toml


def import_titan_registry(text: str, *, path: str, config: str | None, cluster: str | None, nodes: int | None,
                          vocab: int | None, sets: dict | None, base_dir: str | None) -> Imported:
    """``execsim import torchtitan config_registry.py --config NAME``."""
    from strategies.import_pyrecipe import apply_sets, split_sets
    from strategies.import_torchtitan import import_torchtitan
    name = Path(path).name
    fns = [f for f in recipe_functions(parse_recipe(text, name)) if not f.startswith("_")]
    if config is None:
        raise ConfigError(f"{name}: which job? give --config NAME (this registry defines: {', '.join(fns)[:400]})")
    args, fields = split_sets(sets)
    read: list = []
    tree = plain(evaluate_recipe(text, name, config, arguments=args,
                                 source_dir=Path(base_dir) if base_dir else None, files_read=read))
    if not isinstance(tree, dict):
        raise ConfigError(f"{name}: {config}() does not return a Trainer.Config execsim can read")
    model_name = fields.pop("model_spec.name", None) or (Path(base_dir).name if base_dir else None)
    if not model_name or model_name in (".", ""):
        raise ConfigError(f"{name}: the model family is the registry's folder (torchtitan/models/NAME/); give "
                          f"--set model_spec.name=NAME")
    apply_sets(tree, fields, name)
    toml = registry_to_toml(tree, str(model_name), f"{name} {config}()")
    imp = import_torchtitan(toml, cluster=cluster, nodes=nodes, vocab=vocab, base_dir=base_dir)
    strategy = dict(imp.strategy)
    strategy["_source"] = {"file": name, "recipe": config}
    strategy["_inputs"] = read
    return Imported(strategy, imp.unmodeled, "torchtitan")
