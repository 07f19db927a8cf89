"""The shape a fused attention kernel sees on one GPU (priced by the kernel tables,
``topologies/kernels.py``, through ``taskgraph/stacks.py``), and the HBM traffic of the unfused
attention core's kernels (:func:`unfused_score_bytes`).

>>> kernel_attention_shape(32768, 4, "ring", True, 128, 128)
AttentionShape(head_dim=128.0, seq=8192, causal_share=0.25)
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AttentionShape:
    """The shape a fused attention kernel sees (priced by the kernel tables, topologies/kernels.py)."""

    head_dim: float
    """FLOP-weighted head dim, (d_qk + d_v) / 2 (QK^T runs at d_qk, PV at d_v)."""
    seq: int
    """Key-loop length of one kernel launch: the sequence, a sliding window or attention chunk, or a ring-CP chunk."""
    causal_share: float
    """Share of the FLOPs computed under a causal mask (the rest on unmasked blocks)."""


def kernel_attention_shape(s: int, cp: int, cp_comm: str, causal_halved: bool, d: int, dv: int,
                           window: int = 0) -> AttentionShape:
    """What one fused attention launch sees, by how context parallelism runs it.

    Without CP (and with Ulysses all-to-all, which hands each rank the whole sequence for heads / cp:
    Jacobs 2023, DeepSpeed-Ulysses Section 3) the kernel loops over the full sequence, or over the
    window of a sliding-window layer, or over the block of a chunked-attention layer (``window`` = the
    window or the chunk: a query block's key loop stops at its chunk's start, FlexAttention's block mask). All-gather CP (Dubey 2024, Llama 3 Section 3.3.2) gathers the
    full K and V and runs the local queries against them under the causal mask: the same key loop.
    Ring CP (Liu 2023, Ring Attention Section 3; Transformer Engine's AttnFuncWithCPAndKVP2P) launches
    one kernel per step on the local query chunk against one K/V chunk of s / cp: only the step on the
    rank's own chunk is causal, the other cp - 1 steps are unmasked blocks of equal work (zig-zag load
    balancing gives each the same half of the pairs), so 1 / cp of the FLOPs run masked. A FLOP count
    of the whole square (``causal_halved`` off) is priced as unmasked work."""
    seq = min(s, window) if window else s
    share = 1.0 if causal_halved else 0.0
    if cp > 1 and cp_comm == "ring":
        seq = min(seq, s // cp)
        share /= cp
    return AttentionShape((d + dv) / 2, seq, share)


def unfused_score_bytes(dt: int, dropout: bool, mask_bytes: int = 1, alibi: bool = False) -> tuple[float, float]:
    """HBM bytes per attention-score element (one (query, key) pair of one head) that the unfused
    causal attention core moves, forward and backward, counted kernel by kernel from Megatron-LM
    (``megatron/model/transformer.py`` CoreAttention: ``torch.baddbmm`` QK^T, ``FusedScaleMaskSoftmax``
    with the causal kernel ``megatron/fused_kernels/scaled_upper_triang_masked_softmax.h``, the
    attention ``torch.nn.Dropout``, ``torch.bmm`` PV; their autograd backwards). The causal softmax
    kernels read only the first i + 1 entries of row i (half a row on average: ``local_seq =
    blockIdx.x + 1``) and write the whole row (zeros above the diagonal). ``dt`` bytes per
    activation element, ``mask_bytes`` per dropout-mask element (Korthikanti 2022 Section 4.1).

    forward: QK^T writes the scores (dt); softmax reads half, writes all (1.5 dt); dropout reads,
    writes and writes its mask (2 dt + mask); PV reads the probabilities (dt).
    backward: PV's backward writes dP and reads P for dV (2 dt); dropout's reads dP and the mask and
    writes (2 dt + mask); softmax's reads half of dP and of its output and writes all (2 dt);
    QK^T's reads dS for dQ and again for dK (2 dt).

    ``alibi``: the ALiBi bias enters as the input of QK^T's ``baddbmm`` with ``beta`` != 0
    (bigscience-workshop/Megatron-DeepSpeed 55f8cf8, 2022-06-27, ``megatron/model/transformer.py``
    ParallelAttention.forward: ``matmul_result = alibi[:b * np, :, :sk]``, a [b np, 1, sk] tensor,
    then ``torch.baddbmm(matmul_result, q, k^T, beta=beta, alpha=1 / norm_factor)`` with beta 1, or
    1 / layer_number under query-key layer scaling; HF ``BloomAttention`` likewise). PyTorch expands
    that input and copies it into the [b np, sq, sk] result before the batched GEMM when beta != 0
    (aten/src/ATen/native/LinearAlgebra.cpp ``common_checks_baddbmm_bmm``: ``if (beta != 0.0)
    result.copy_(self)``, pytorch/pytorch b1b76f6), and cuBLAS then reads that C (beta != 0): a write and
    a read of every score, 2 dt more forward. The bias needs no gradient (a buffer), so the backward is
    unchanged.

    >>> unfused_score_bytes(2, True)
    (12.0, 17.0)
    >>> unfused_score_bytes(2, False)
    (7.0, 12.0)
    >>> unfused_score_bytes(2, True, alibi=True)
    (16.0, 17.0)
    """
    drop = 2.0 * dt + mask_bytes if dropout else 0.0
    bias = 2.0 * dt if alibi else 0.0
    return 3.5 * dt + drop + bias, 6.0 * dt + drop


def attention_pairs(s: int, causal_halved: bool, window: int = 0, chunk: int = 0) -> float:
    """(query, key) pairs one head scores over one sequence of ``s`` tokens.

    Causal: s(s+1)/2 executed by a flash kernel (masked half skipped), s^2 otherwise. A sliding
    window w (Beltagy 2020 Longformer; Mistral 7B, Jiang 2023 Section 2) keeps each query's last w
    keys: w s - w(w-1)/2 pairs for s >= w (a flash kernel skips tiles outside the band). Chunked
    attention in blocks of C tokens (Llama 4 iRoPE; ModelSpec.attention_chunk) is causal attention
    within each block: q = s div C full blocks and one of r = s mod C tokens, q C(C+1)/2 + r(r+1)/2
    pairs (q C^2 + r^2 for a kernel that does not skip the masked half; tiles off the block
    diagonal are skipped, FlexAttention's block mask).
    """
    if window and window < s:
        return float(window * s - window * (window - 1) // 2)
    if chunk and chunk < s:
        q, r = divmod(s, chunk)
        return q * attention_pairs(chunk, causal_halved) + attention_pairs(r, causal_halved)
    return s * (s + 1) / 2 if causal_halved else float(s * s)
