"""PyTorch's context parallelism (``torch.distributed.tensor.experimental.context_parallel``, the CP of
torchtitan): the attention core runs as one SDPA kernel per ring step on chunks, and merges the steps'
partial results in fp32 with separate elementwise kernels.

Source: ``torch/distributed/tensor/experimental/_attention.py`` (PyTorch 2.5-2.7; the same algorithm in
``_context_parallel/_attention.py`` later), ``_templated_ring_attention`` and its backward, with
``_cp_options.convert_to_f32 = True`` and round-robin load balancing (both the defaults):

* **Kernels per step.** For i in 0 .. cp-1 the local queries (s/cp tokens, two round-robin chunks) meet
  one rank's K/V: step 0 is causal on the local chunk, steps i > 0 are unmasked on half a square (the
  queries against the first K/V chunk, or the second query chunk against both). Whichever rotater moves
  K/V (``allgather``, torchtitan's default ``context_parallel_rotate_method``, or ``alltoall``), each
  step is its own SDPA launch whose key loop is at most s/cp long: priced at the kernel tables' figure
  for that shape (``attention_shape.kernel_attention_shape`` with the ring's chunks), where a fused
  all-gather CP kernel would loop over the whole sequence.
* **Forward merge** (``_SDPAMerger.step``): every step casts its output to fp32 (read 2, write 4 B per
  output element); every step after the first merges it, ``out - sigmoid(block_lse - lse) * (out -
  block_out)`` (a subtraction, a multiply and a subtraction over fp32 tensors: 3 x (4 + 4 + 4) - 8 =
  28 B, the sigmoid's operand reused from cache counted once); ``results()`` casts back (read 4, write
  2). Per output element: 6 cp + 28 (cp - 1) + 6 bytes.
* **Backward accumulation**: dQ, dK, dV start as fp32 zeros (write 4 B per element), every step adds
  its bf16 gradients into them (read 4 + 2, write 4: 10 B), and concatenates dK, dV for the next rank
  (``torch.cat``: read 4, write 4) every step; the end casts dQ and dK/dV back (read 4, write 2). Per
  element of Q, K and V: 4 + 10 cp + 6 bytes, plus 8 cp per element of K and V.

Not modelled: the ``_partial_update`` concatenations of the ranks whose later steps touch half their
queries (rank-dependent, at most 8 B per output element per step), the dK/dV rotation's extra bytes
(fp32, one all-to-all per step) over the reduce-scatter the CP collectives price.
"""
from __future__ import annotations

from dataclasses import replace

#: HBM bytes per output element of the forward merge: cast per step, merge per later step, final cast
MERGE_CAST, MERGE_STEP, MERGE_FINAL = 6, 28, 6
#: HBM bytes per Q/K/V gradient element: fp32 zeros, accumulate per step, final cast; dK/dV concat per step
ACC_ZERO, ACC_STEP, ACC_FINAL, ACC_CAT = 4, 10, 6, 8
#: kernel launches: forward cast per step + merge per later step (sub, sigmoid, mul, sub, lse update) + final
#: cast; backward 3 zero fills, 3 adds and a concat per step, 3 final casts
FWD_STEP_KERNELS, BWD_STEP_KERNELS = 5, 4


def ring_step_shape(shape, s: int, cp: int):
    """The kernel shape of one ring step: key loop at most s / cp, 1 / cp of the causal FLOPs masked
    (as ``attention_shape.kernel_attention_shape`` prices ring CP)."""
    return replace(shape, seq=min(shape.seq, s // cp), causal_share=shape.causal_share / cp)


def merge_bytes(op, cp: int, kv_ratio: float) -> tuple[float, float]:
    """(forward, backward) HBM bytes of the fp32 merge and accumulation kernels of one attention core
    (module docstring). ``op``: the attention core (its first GEMM QK^T is (s/cp) x s x d over b x heads,
    its second PV (s/cp) x dv x s); ``kv_ratio``: K/V heads per query head (GQA).

    >>> from taskgraph.operators import GemmShape, Operator
    >>> op = Operator("attn_core", "attention", 0, (GemmShape(4, 8, 2, 1), GemmShape(4, 2, 8, 1)), 0, 0, 0)
    >>> merge_bytes(op, 2, 1.0)   # q = out = 8, k + v = 16 elements: 8 x 46, 24 x 30 + 16 x 16
    (368.0, 976.0)
    """
    qk, pv = op.gemms[0], op.gemms[1]
    q = float(qk.m * qk.k * qk.batch)
    out = float(pv.m * pv.n * pv.batch)
    kv = (q + out) * kv_ratio
    fwd = out * (MERGE_CAST * cp + MERGE_STEP * (cp - 1) + MERGE_FINAL)
    bwd = (q + kv) * (ACC_ZERO + ACC_STEP * cp + ACC_FINAL) + kv * ACC_CAT * cp
    return fwd, bwd


def ring_attention_costs(op, s: int, cp: int, kv_ratio: float, gpu, rechunk: bool) -> tuple:
    """(the core with its per-step kernel shape, forward seconds, backward seconds) of PyTorch's ring
    attention's merge kernels on ``gpu`` (streaming passes at ``hbm_efficiency``); ``rechunk``: the
    operator was shaped for one kernel over the whole sequence (all-gather CP)."""
    eff = gpu.efficiency
    bw = gpu.hbm_bandwidth * eff.hbm_efficiency
    fb, bb = merge_bytes(op, cp, kv_ratio)
    if rechunk and op.attn_shape is not None:
        op = replace(op, attn_shape=ring_step_shape(op.attn_shape, s, cp))
    return op, fb / bw + FWD_STEP_KERNELS * cp * eff.launch_overhead, \
        bb / bw + BWD_STEP_KERNELS * cp * eff.launch_overhead


def torch_ring_attention(plan, stack, op) -> tuple:
    """(operator, forward seconds, backward seconds) to add: PyTorch's ring attention for the attention
    core of a plan whose stack runs it (``Stack.torch_cp``) with cp > 1 and a fused kernel (SDPA);
    otherwise the operator unchanged and no time. Ulysses (``cp_comm: a2a``) is not PyTorch's CP."""
    cp, cp_comm = plan.sizes.cp, plan.strategy.options.cp_comm
    if op.kind != "attention" or cp < 2 or cp_comm == "a2a" or stack is None or not stack.torch_cp \
            or not plan.strategy.options.flash_attention or len(op.gemms) != 2:
        return op, 0.0, 0.0
    return ring_attention_costs(op, plan.strategy.training.seq_len, cp, plan.model.kv_heads / plan.model.heads,
                                plan.cluster.gpu, cp_comm == "allgather")
