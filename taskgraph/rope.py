"""Rotary position embedding (RoPE) kernels: the bytes of Transformer Engine's fused RoPE on Q and K."""
from __future__ import annotations


def rope_bytes(tokens: int, q_heads: int, kv_heads: int, d: int, positions: int, dt: int) -> int:
    """HBM bytes of the fused rotary-embedding kernels of one pass (forward, or the input gradient's):
    Megatron-core applies RoPE to the query and to the key after the QKV projection (core_r0.8.0
    transformer/attention.py, ``apply_rotary_pos_emb`` twice), with ``apply_rope_fusion`` (the NeMo
    launcher's Llama configs set it) as Transformer Engine's ``FusedRoPEFunc`` (TE v1.8 attention.py:
    ``tex.fused_rope_forward`` / ``fused_rope_backward``): read and write every Q and K element, and
    read the fp32 angle table of this rank's ``positions`` x d once per call (two calls).
    Llama 4's NoPE layers (global ones of a chunked model) have none (the caller skips them).

    >>> rope_bytes(4, 2, 1, 8, 4, 2)   # Q 64 + K 32 elements x (2 + 2) B, + 2 x 4 x 8 x 4 B
    640
    """
    return 2 * dt * tokens * (q_heads + kv_heads) * d + 2 * positions * d * 4
