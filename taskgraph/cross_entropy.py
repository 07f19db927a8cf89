"""HBM traffic of the vocab-parallel cross-entropy as each implementation runs it (the loss operator of
``taskgraph/operators.py`` head_operators; a stack's ``cross_entropy``, ``taskgraph/data/stacks.yaml``,
or a run's ``options.cross_entropy``)."""
from __future__ import annotations

from strategies.config import did_you_mean
from strategies.errors import ConfigError

#: implementations: 'fused' (one kernel per pass, fp32 softmax kept), 'eager-fp32' (Megatron's eager ops
#: over an fp32 copy), 'native' (Megatron-core --cross-entropy-fusion-impl native), 'te' (Transformer
#: Engine's Triton kernels, --cross-entropy-fusion-impl te)
CROSS_ENTROPY = ("fused", "eager-fp32", "native", "te")
FP32 = 4  # bytes of the fp32 logits / softmax the loss computes in (Korthikanti 2022 Section 4.3)


def cross_entropy_bytes(dt: int, impl: str = "fused") -> tuple[int, int]:
    """HBM bytes per logit (forward, backward) of the vocab-parallel cross-entropy, for ``dt``-byte
    logits from the LM head.

    'fused': one kernel per pass over fp32 math: read the logits (dt), write and keep the fp32 softmax
    (4); the backward reads it (4) and writes the logits' gradient (dt) (Korthikanti 2022 Section 4.3
    keeps 4sbv/t).
    'eager-fp32': Megatron-LM's eager ``_VocabParallelCrossEntropy`` over an fp32 copy, the same ops in
    every version read: 2021-22 (megatron/mpu/cross_entropy.py with megatron/model/gpt_model.py
    post_language_model_processing's default ``output.float()``: cdde433, 2021-04-09, and 2755bcb,
    2022-06-24), Megatron-core before 7b4a6d7 (2024-06-14: language_module.py
    compute_language_model_loss passes ``logits.float()``) and after it (d98e8a6:
    megatron/core/tensor_parallel/cross_entropy.py ``VocabParallelCrossEntropy.calculate_logits_max``
    casts inside the autograd Function, whose fp32 gradient the autograd engine casts back to the
    input's dtype): eager PyTorch ops over [s, b, v/t]: the cast to fp32 (dt + 4), torch.max (4),
    sub_ (4 + 4), torch.exp out= (4 + 4), sum (4), div_ (4 + 4) in the forward; in the backward mul_
    by the loss gradient (4 + 4) and the cast back (4 + dt) (the index update of the target logits
    touches [s, b] only): six kernels over the logits forward and two backward where the fused loss
    runs one each (their launches are not priced apart: the operator keeps one per pass).
    'native': Megatron-core's ``--cross-entropy-loss-fusion`` (--cross-entropy-fusion-impl native,
    the default impl), megatron/core/fusions/fused_cross_entropy.py at d98e8a6: the same
    VocabParallelCrossEntropy steps in three ``jit_fuser`` (torch.compile from torch 2.2,
    megatron/core/jit.py) regions, each one fused pass: calculate_logits_max reads the logits and
    writes their fp32 copy with the max (dt + 4); calculate_predicted_logits reads it and writes
    exp(x - max) back in place with its sum (4 + 4); calculate_cross_entropy_loss's div_ (4 + 4); the
    backward's calculate_gradients reads the saved softmax, writes the in-place mul_ back into it (a
    mutated input of the compiled region) and the bf16 gradient (4 + 4 + dt).
    'te': Transformer Engine's parallel_cross_entropy (transformer_engine/pytorch/triton/
    cross_entropy.py, 8ca2caf 2025-02-25 to 01bbe3e^ 2026-07-09, Megatron-core's
    te_parallel_cross_entropy): online_softmax_kernel reads the logits (dt), cross_entropy_kernel
    reads them again and writes the gradient in place of them (dt + dt); the backward's
    element_mul_kernel scales that gradient in place (dt + dt). (TE 01bbe3e keeps an fp32 gradient
    instead; Megatron-LM 168cb15, 2026-06-03, refuses the 'te' impl.) Its all-gather of three fp32 per
    token replaces the three all-reduces; the loss operator's comms are the same in all four.

    >>> cross_entropy_bytes(2), cross_entropy_bytes(2, "eager-fp32")
    ((10, 6), (38, 14))
    >>> cross_entropy_bytes(2, "native"), cross_entropy_bytes(2, "te")
    ((22, 10), (6, 4))
    """
    f = FP32
    if impl == "fused":
        return dt + 2 * f, f + dt
    if impl == "eager-fp32":
        return (dt + f) + f + 2 * f + 2 * f + f + 2 * f, 2 * f + (f + dt)
    if impl == "native":
        return (dt + f) + 2 * f + 2 * f, 2 * f + dt
    if impl == "te":
        return dt + 2 * dt, 2 * dt
    raise ConfigError(f"cross_entropy = {impl!r} is not one of {', '.join(CROSS_ENTROPY)}"
                      f"{did_you_mean(str(impl), CROSS_ENTROPY)}")

