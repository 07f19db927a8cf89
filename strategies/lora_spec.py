"""``training.lora``: LoRA fine-tuning (Hu et al. 2021, arXiv:2106.09685, Section 4).

The base weights W0 are frozen; every targeted linear layer gains ΔW = B·A with A: r×k, B: d×r,
scaled by alpha / r. What that changes in the step (compute, memory, communication) is priced in
``taskgraph/lora.py``; this module only reads and checks the field.
"""
from __future__ import annotations

from dataclasses import dataclass

from strategies.config import check_keys, did_you_mean, get_float, get_int
from strategies.errors import ConfigError, brief

LORA_KEYS = ("rank", "alpha", "dropout", "targets")
#: Operator roles (taskgraph/operators.py) a LoRA adapter can wrap, with Megatron-Bridge's module names as
#: aliases (src/megatron/bridge/peft/lora.py, LoRA.target_modules: linear_qkv, linear_proj, linear_fc1,
#: linear_fc2; linear_fc1 is mlp_gate_up on a gated MLP, mlp_up otherwise).
LORA_TARGETS = ("qkv", "attn_out", "mlp_up", "mlp_gate_up", "mlp_down")
LORA_ALIASES = {"linear_qkv": "qkv", "linear_proj": "attn_out", "linear_fc1": "mlp_up", "linear_fc2": "mlp_down"}
#: Megatron-Bridge's default target_modules (all four linear layers of a block)
DEFAULT_TARGETS = ("qkv", "attn_out", "mlp_up", "mlp_down")


@dataclass(frozen=True)
class LoraSpec:
    """LoRA adapters on the targeted linear layers; every other weight is frozen."""

    rank: int
    """r: the adapters' inner dimension (Megatron-Bridge ``dim``)."""
    alpha: float = 32.0
    """Scale numerator (output scaled by alpha / rank): changes numerics, not cost."""
    dropout: float = 0.0
    """Dropout on the adapter input ('pre', Megatron-Bridge's default position): a mask and a copy of
    the input kept for the backward when > 0."""
    targets: tuple[str, ...] = DEFAULT_TARGETS
    """Operator roles that get an adapter (``LORA_TARGETS``). ``mlp_up`` also names the fused
    ``mlp_gate_up`` of a gated MLP (Megatron's linear_fc1)."""


def parse_lora(value) -> LoraSpec | None:
    """``training.lora`` as written (a mapping) or None; one ConfigError line for a bad value."""
    if value is None:
        return None
    if isinstance(value, LoraSpec):
        return value
    if not isinstance(value, dict):
        raise ConfigError(f"training.lora = {brief(value)} must be a mapping (keys: {', '.join(LORA_KEYS)}), "
                          f"e.g. {{rank: 16, alpha: 32, targets: [qkv, attn_out]}}")
    check_keys(value, LORA_KEYS, "training.lora")
    rank = get_int(value, "rank", "training.lora", minimum=1)
    alpha = get_float(value, "alpha", "training.lora", default=32.0, positive=True)
    dropout = get_float(value, "dropout", "training.lora", default=0.0)
    if dropout >= 1:
        raise ConfigError(f"training.lora.dropout = {dropout!r} must be in [0, 1)")
    raw = value.get("targets", list(DEFAULT_TARGETS))
    if isinstance(raw, str) or not isinstance(raw, (list, tuple)) or not raw:
        raise ConfigError(f"training.lora.targets = {brief(raw)} must be a non-empty list of operator roles "
                          f"({', '.join(LORA_TARGETS)})")
    targets = []
    for t in raw:
        name = LORA_ALIASES.get(t, t) if isinstance(t, str) else t
        if name not in LORA_TARGETS:
            raise ConfigError(f"training.lora.targets: {brief(t)} is not a LoRA target; choose from "
                              f"{', '.join(LORA_TARGETS)}{did_you_mean(str(t), LORA_TARGETS)}")
        if name not in targets:
            targets.append(name)
    return LoraSpec(rank, float(alpha), float(dropout), tuple(targets))
