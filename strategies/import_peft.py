"""NeMo 1.x PEFT keys, and Megatron-Bridge / NeMo 2 ``peft`` configs, -> ``training.lora``
(strategies/lora_spec.py).

NeMo 1's fine-tuning recipes (examples/nlp/language_modeling/tuning/conf/megatron_gpt_finetuning_config.yaml)
write ``model.peft.peft_scheme`` and, for LoRA, ``model.peft.lora_tuning``; NeMo reads them in
nemo/collections/nlp/parts/peft_config.py (LoraPEFTConfig, get_target_modules, PEFT_MODULE_MAP):
``adapter_dim`` (the rank), ``alpha`` (default adapter_dim), ``adapter_dropout``, ``target_modules``
(default ['attention_qkv']; 'attention', 'mlp' and 'all' expand to their linear layers).
"""
from __future__ import annotations

from strategies.errors import ConfigError
from strategies.import_common import Fields

#: NeMo 1's target_modules names (peft_config.py PEFT_MODULE_MAP) -> operator roles (LORA_TARGETS)
NEMO_TARGETS = {"attention_qkv": ("qkv",), "attention_dense": ("attn_out",), "mlp_fc1": ("mlp_up",),
                "mlp_fc2": ("mlp_down",), "attention": ("qkv", "attn_out"), "mlp": ("mlp_up", "mlp_down"),
                "all": ("qkv", "attn_out", "mlp_up", "mlp_down")}
NEMO_SCHEMES = ("lora", "adapter", "ia3", "ptuning", "selective", "sdlora", "none")
#: keys read here (or that change no cost: initialisation, checkpoint paths)
PEFT_READ = {"model.peft.peft_scheme", "model.peft.restore_from_path"} | {
    f"model.peft.lora_tuning.{k}" for k in ("adapter_dim", "alpha", "adapter_dropout", "target_modules",
                                            "column_init_method", "row_init_method", "weight_tying",
                                            "dropout_position", "variant")}


def nemo_lora(m: Fields, notes: list) -> dict | None:
    """``training.lora`` of a NeMo 1 recipe's ``model`` section, or None without a PEFT scheme; one
    ConfigError line for a scheme execsim does not model or a target it does not know."""
    peft = m.section("peft")
    scheme = peft.choice("peft_scheme", "none", NEMO_SCHEMES)
    if scheme == "none":
        return None
    if scheme != "lora":
        raise peft.fail("peft_scheme", scheme, "is not modelled: execsim prices LoRA (training.lora); use "
                                               "peft_scheme: lora or write the strategy by hand")
    lt = peft.section("lora_tuning")
    rank = lt.integer("adapter_dim", 32)    # the launcher configs' default
    raw = lt.get("target_modules", ["attention_qkv"])
    if isinstance(raw, str) or not isinstance(raw, list):
        raise lt.fail("target_modules", raw, f"must be a list of {', '.join(NEMO_TARGETS)}")
    targets: list = []
    for t in raw:
        if t not in NEMO_TARGETS:
            raise lt.fail("target_modules", t, f"is not one of {', '.join(NEMO_TARGETS)}")
        targets += [x for x in NEMO_TARGETS[t] if x not in targets]
    if lt.flag("weight_tying", False):
        notes.append("model.peft.lora_tuning.weight_tying (priced as one adapter per layer)")
    if lt.get("variant", "nemo") == "canonical":
        notes.append("model.peft.lora_tuning.variant canonical (priced as the fused QKV adapter)")
    return {"rank": rank, "alpha": float(lt.number("alpha", rank)),
            "dropout": float(lt.number("adapter_dropout", 0.0, hi=0.999)), "targets": targets}


#: Megatron-Bridge / NeMo 2 ``LoRA.target_modules`` names (megatron/bridge/peft/lora.py) -> operator roles
MCORE_TARGETS = {"linear_qkv": "qkv", "linear_proj": "attn_out", "linear_fc1": "mlp_up", "linear_fc2": "mlp_down"}


def tree_lora(t, notes: list) -> dict | None:
    """``training.lora`` of a Megatron-Bridge ``ConfigContainer.peft`` / NeMo 2 ``recipe.peft`` (``t``: the
    recipe tree's reader, strategies/import_pyrecipe.py Tree), or None when the recipe sets none. The
    dataclass defaults are Megatron-Bridge's ``LoRA`` (src/megatron/bridge/peft/lora.py): dim 32, alpha 32,
    dropout 0.0, target_modules linear_qkv, linear_proj, linear_fc1, linear_fc2 (NeMo 2's
    nemo/collections/llm/peft/lora.py ``LoRA`` has the same)."""
    node = t.get("peft", None, None)
    if node is None:
        return None
    target = str(node.get("_target_", "")).rsplit(".", 1)[-1] if isinstance(node, dict) else ""
    if target != "LoRA":
        what = f"{target}({', '.join(map(repr, node.get('_args_', [])))})" if target else repr(node)[:60]
        raise ConfigError(f"{t.where}: peft = {what} is not modelled or not known without running the recipe "
                          f"(execsim prices LoRA: training.lora); give --set peft._target_=LoRA --set peft.dim=N "
                          f"--set peft.target_modules=[linear_qkv,linear_proj], or import without peft")

    def get(key: str, kind, default):   # a LoRA() defined in another file: unset fields are its defaults
        return t.get(f"peft.{key}", kind, default) if key in node else default
    if get("exclude_modules", None, None):
        raise ConfigError(f"{t.where}: peft.exclude_modules is not modelled; list the adapted layers in "
                          f"peft.target_modules ({', '.join(MCORE_TARGETS)}) instead")
    raw = get("target_modules", None, list(MCORE_TARGETS))
    if not isinstance(raw, list) or not raw or any(x not in MCORE_TARGETS for x in raw):
        raise ConfigError(f"{t.where}: peft.target_modules = {str(raw)[:80]} must list some of "
                          f"{', '.join(MCORE_TARGETS)} (wildcard layer patterns are not modelled)")
    if get("dropout_position", str, "pre") == "post":
        notes.append("peft.dropout_position post (priced as pre: the mask on the adapter input)")
    return {"rank": get("dim", int, 32), "alpha": float(get("alpha", float, 32)),
            "dropout": float(get("dropout", float, 0.0)), "targets": [MCORE_TARGETS[x] for x in raw]}
