"""Software stacks (``options.stack``): the kernels a training framework runs for one operator graph.

The GPU catalog's efficiencies describe Megatron-LM with Transformer Engine (the stack the calibration
rows ran). Another stack differs in two sourced ways (``taskgraph/data/stacks.yaml``): its fused
attention kernel (PyTorch's SDPA runs FlashAttention-2, which reaches 35 % of an H100's peak where
Transformer Engine's reaches more: Shah et al. 2024) and how many HBM passes and kernel launches a
memory-bound operator takes when it is not fused (PyTorch's eager RMSNorm is about six elementwise
kernels; ``torch.compile`` fuses them back into one).

>>> get_stack("torchtitan").passes["mlp_act"]
2
>>> get_stack("megatron-te").attention
'catalog'
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import lru_cache

import yaml

from strategies.errors import ConfigError

STACKS_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "stacks.yaml")
DEFAULT_STACK = "megatron-te"


@dataclass(frozen=True)
class Stack:
    """name; attention: 'catalog' or a kernel of the attention table; passes: operator role ->
    HBM passes (and launches) relative to one fused kernel (roles not listed: 1)."""

    name: str
    attention: str
    passes: dict = field(default_factory=dict, hash=False, compare=False)

    def passes_of(self, op_name: str) -> int:
        """Passes of an operator by its role (the name after a layer prefix, e.g. ``mtp0.final_norm``)."""
        return self.passes.get(op_name.rsplit(".", 1)[-1], 1)


@lru_cache(maxsize=None)
def _table(path: str = STACKS_PATH) -> tuple[dict, dict]:
    with open(path, encoding="utf-8") as f:
        data = yaml.safe_load(f) or {}
    kernels = {str(k): {str(a): (float(v["fwd"]), float(v["bwd"])) for a, v in (arch or {}).items()}
               for k, arch in (data.get("attention_kernels") or {}).items()}
    stacks = {}
    for name, d in (data.get("stacks") or {}).items():
        att = str(d.get("attention", "catalog"))
        if att != "catalog" and att not in kernels:
            raise ConfigError(f"stack file {path!r}: stack {name!r} names attention kernel {att!r}, not in "
                              f"attention_kernels ({', '.join(sorted(kernels))})")
        passes = {str(k): int(v) for k, v in (d.get("passes") or {}).items()}
        if any(v < 1 or v > 64 for v in passes.values()):
            raise ConfigError(f"stack file {path!r}: stack {name!r} passes must be integers in [1, 64]")
        stacks[str(name)] = Stack(str(name), att, passes)
    return stacks, kernels


def stack_names() -> tuple[str, ...]:
    return tuple(sorted(_table()[0]))


def get_stack(name: str | None) -> Stack:
    """The stack called ``name`` (None: the default, Megatron-LM + Transformer Engine)."""
    stacks = _table()[0]
    key = DEFAULT_STACK if name is None else name
    if key not in stacks:
        raise ConfigError(f"options.stack = {key!r} is not a known stack; valid: {', '.join(sorted(stacks))}")
    return stacks[key]


def attention_efficiency(stack: Stack, gpu, pass_: str) -> float:
    """Fraction of the bf16 peak the stack's fused attention reaches on ``gpu`` in ``pass_`` (fwd or
    a backward pass): the catalog's for 'catalog', else the kernel's figure for the GPU's
    architecture (FlashAttention-3 off Hopper falls back to FlashAttention-2)."""
    eff = gpu.efficiency
    if stack.attention == "catalog":
        return eff.attention_fwd_efficiency if pass_ == "fwd" else eff.attention_bwd_efficiency
    kernels = _table()[1]
    per_arch = kernels[stack.attention]
    fig = per_arch.get(gpu.architecture) or kernels.get("fa2", {}).get(gpu.architecture)
    if fig is None:  # an architecture the table does not know: the catalog's
        return eff.attention_fwd_efficiency if pass_ == "fwd" else eff.attention_bwd_efficiency
    return fig[0] if pass_ == "fwd" else fig[1]
