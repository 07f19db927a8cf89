"""The MFU numerator of a LoRA step (taskgraph/lora.py): what the step computes, not 6N."""
from __future__ import annotations

from strategies.lora_spec import LoraSpec
from taskgraph.operators import embedding_operators, head_operators, layer_operators, model_flops_per_token


def lora_flops_per_token(model, seq_len: int, lora: LoraSpec, convention: str = "megatron") -> float:
    """Model FLOPs per token of a LoRA step, the MFU numerator: the full-training convention's
    (``operators.model_flops_per_token``) less the frozen weights' weight-gradient GEMMs (2 FLOPs per
    weight per token) plus the adapters' forward, dgrad and wgrad GEMMs, i.e. about 4N + 6N_adapter
    instead of 6N: counting 6N would credit the GPUs with weight-gradient GEMMs a LoRA step never runs
    (Hu 2021 Section 4.2; the operator FLOPs of :func:`apply_lora`, unsharded, one sequence)."""
    kw = dict(micro_batch=1, seq_len=seq_len)
    full = model_flops_per_token(model, seq_len, convention)
    delta, cache = 0.0, {}
    for li in range(model.layers):
        key = model.layer_kind(li)
        if key not in cache:
            base = layer_operators(model, layer_index=li, **kw)
            tuned = layer_operators(model, layer_index=li, lora=lora, **kw)
            cache[key] = sum(o.total_flops for o in tuned) - sum(o.total_flops for o in base)
        delta += cache[key]
    for build in (embedding_operators, head_operators):
        delta += sum(o.total_flops for o in build(model, lora=lora, **kw)) - sum(o.total_flops for o in build(model, **kw))
    return full + delta / seq_len
