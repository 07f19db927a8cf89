"""HBM traffic of the vocab-parallel cross-entropy as each implementation runs it (the loss operator of
``taskgraph/operators.py`` head_operators; a stack's ``cross_entropy``, ``taskgraph/data/stacks.yaml``)."""
from __future__ import annotations

from strategies.config import did_you_mean
from strategies.errors import ConfigError

#: implementations: 'fused' (one kernel per pass), 'eager-fp32' (Megatron-LM 2021-22's eager ops)
CROSS_ENTROPY = ("fused", "eager-fp32")
FP32 = 4  # bytes of the fp32 logits / softmax the loss computes in (Korthikanti 2022 Section 4.3)


def cross_entropy_bytes(dt: int, impl: str = "fused") -> tuple[int, int]:
    """HBM bytes per logit (forward, backward) of the vocab-parallel cross-entropy, for ``dt``-byte
    logits from the LM head.

    'fused': one kernel per pass over fp32 math: read the logits (dt), write and keep the fp32 softmax
    (4); the backward reads it (4) and writes the logits' gradient (dt) (Korthikanti 2022 Section 4.3
    keeps 4sbv/t; Megatron-core's fused vocab-parallel cross entropy and Transformer Engine's).
    'eager-fp32': Megatron-LM 2021-22 (megatron/mpu/cross_entropy.py _VocabParallelCrossEntropy with
    megatron/model/gpt_model.py post_language_model_processing's default ``output.float()``: the same
    code at cdde433, 2021-04-09, and 2755bcb, 2022-06-24), eager PyTorch ops over [s, b, v/t]: the cast
    to fp32 (dt + 4), torch.max (4), sub_ (4 + 4), torch.exp out= (4 + 4), sum (4), div_ (4 + 4) in the
    forward; in the backward mul_ by the loss gradient (4 + 4) and the cast back of ``.float()``'s
    gradient (4 + dt) (the index update of the target logits touches [s, b] only): six kernels over
    the logits forward and two backward where the fused loss runs one each (their launches are not
    priced apart: the operator keeps one per pass). Its three TP all-reduces of [s, b] fp32 (max,
    target logit, sum of exponentials) are the loss operator's comms in both.

    >>> cross_entropy_bytes(2), cross_entropy_bytes(2, "eager-fp32")
    ((10, 6), (38, 14))
    """
    if impl == "fused":
        return dt + 2 * FP32, FP32 + dt
    if impl == "eager-fp32":
        f = FP32
        return (dt + f) + f + 2 * f + 2 * f + f + 2 * f, 2 * f + (f + dt)
    raise ConfigError(f"cross_entropy = {impl!r} is not one of {', '.join(CROSS_ENTROPY)}"
                      f"{did_you_mean(str(impl), CROSS_ENTROPY)}")
