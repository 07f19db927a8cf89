"""Transformer Engine's ring context parallelism (``options.cp_comm: ring``, TE's ``cp_comm_type="p2p"``; in
TE 1.7-1.9 the only CP there is): the attention core runs one fused-attention launch per ring step on
chunks, which the kernel tables already price (``attention_shape.kernel_attention_shape``), and around
them memory-bound kernels a single launch does not have: the K/V ring buffers, the half-K/V copies of
the unmasked steps, the per-step output / softmax-statistics corrections in the forward, and the dQ / dK-dV
copies, concatenations and accumulations in the backward. This module prices those bytes.

Source: NVIDIA/TransformerEngine v1.8 (3ec998e, the TE of NeMo 24.07 with Megatron-core 0.8),
``transformer_engine/pytorch/attention.py`` ``AttnFuncWithCP`` (``flash_attn_fwd_out_correction``,
``flash_attn_fwd_softmax_lse_correction``), causal mask, ``sbhd`` layout (Megatron-core's), load-balanced
chunks (each rank holds chunks r and 2cp - 1 - r). Counted for rank cp - 1, whose every step touches the
whole local query and output (steps i <= rank run all of Q against the first half of a K/V chunk pair),
so it does the most of these kernels and sets the ring's pace. With e the bytes of a 16-bit element, Q /
O the local query / output elements, KV the local K plus V elements, L = heads x local tokens the
softmax statistics:

* **Forward.** ``torch.cat((k, v))`` into the first ring buffer (read + write KV e); per step i = 1 ..
  cp - 1 the first K/V chunk's ``kv[:, 0].contiguous()`` (KV / 2 read + written: KV e); ``out =
  empty_like(q).zero_()`` (O e); the statistics cloned and cast to double (4 + 4 + 4 + 8 = 20 B per L),
  corrected per later step in float64 (read 8 + 4, write 8: 20 B), cast back to float (8 + 4 = 12 B);
  one output correction per step, ``out += out_per_step * exp(lse_step - lse)`` (read 2 e + 8, write
  e: 3 O e + 8 L). In all: KV e (cp + 1) + O e (3 cp + 1) + L (28 cp + 12) bytes, 3 cp + 3 kernels.
* **Backward.** The half statistics' ``.contiguous()`` (4 B per L); ``p2p_comm_buffers[0][0].copy_(kv)``
  (2 KV e); per step i = 0 .. cp - 2 the half-K/V ``.contiguous()`` (KV e) and ``torch.cat((dk, dv))``
  of that half (KV e), on the last (causal) step the whole one (2 KV e); dQ copied on step 0 (2 Q e) and
  added on every later one (3 Q e); dK/dV copied into the first half on step 0 (KV e), added into it on
  steps 1 .. cp - 2 (1.5 KV e), added whole on the last (3 KV e). In all: 4 L + KV e (3.5 cp + 3) + Q e
  (3 cp - 1) bytes, 4 cp + 1 kernels.

Each is a streaming kernel, priced at ``hbm_efficiency`` plus a launch, as PyTorch's ring attention's
merges are (``taskgraph/torch_cp.py``). Not modelled: the forward's second stream, on which TE runs every
other step's attention "to resolve wave quantization" (the steps may overlap; the model serializes them),
and the p2p exchange's own SMs beside the attention kernel.
"""
from __future__ import annotations

#: forward / backward kernels of AttnFuncWithCP beside its attention launches: (per step, fixed)
FWD_KERNELS, BWD_KERNELS = (3, 3), (4, 1)


def te_ring_bytes(op, cp: int, kv_ratio: float, elem: int) -> tuple[float, float]:
    """(forward, backward) HBM bytes of TE's ring-CP kernels around one attention core (module docstring).
    ``op``: the attention core (QK^T (s/cp) x s x d over b x heads, PV (s/cp) x dv x s); ``kv_ratio``: K/V
    heads per query head; ``elem``: bytes of Q, K, V, O and their gradients (2: bf16 / fp16).

    >>> from taskgraph.operators import GemmShape, Operator
    >>> op = Operator("attn_core", "attention", 0, (GemmShape(4, 8, 2, 1), GemmShape(4, 2, 8, 1)), 0, 0, 0)
    >>> te_ring_bytes(op, 2, 1.0, 2)   # Q = O = 8, KV = 16, L = 4: 96 + 112 + 272; 16 + 320 + 80
    (480.0, 416.0)
    """
    qk, pv = op.gemms[0], op.gemms[1]
    q = float(qk.m * qk.k * qk.batch)
    out = float(pv.m * pv.n * pv.batch)
    kv = (q + out) * kv_ratio
    lse = float(qk.m * qk.batch)
    fwd = kv * elem * (cp + 1) + out * elem * (3 * cp + 1) + lse * (28 * cp + 12)
    bwd = 4 * lse + kv * elem * (3.5 * cp + 3) + q * elem * (3 * cp - 1)
    return fwd, bwd


def te_ring_attention(plan, stack, op, elem: int) -> tuple[float, float]:
    """(forward seconds, backward seconds) of TE's ring-CP kernels for the attention core ``op`` of a plan
    with cp > 1, ``options.cp_comm: ring`` and a fused kernel, on a stack whose CP is Transformer Engine's
    (every stack without ``torch_cp``); (0, 0) otherwise."""
    cp = plan.sizes.cp
    if op.kind != "attention" or cp < 2 or plan.strategy.options.cp_comm != "ring" or len(op.gemms) != 2 \
            or not plan.strategy.options.flash_attention or (stack is not None and stack.torch_cp):
        return 0.0, 0.0
    eff = plan.cluster.gpu.efficiency
    bw = plan.cluster.gpu.hbm_bandwidth * eff.hbm_efficiency
    fb, bb = te_ring_bytes(op, cp, plan.model.kv_heads / plan.model.heads, elem)
    return fb / bw + (FWD_KERNELS[0] * cp + FWD_KERNELS[1]) * eff.launch_overhead, \
        bb / bw + (BWD_KERNELS[0] * cp + BWD_KERNELS[1]) * eff.launch_overhead
