"""Coarse fidelity for fast strategy search: one compute task per (chunk, microbatch, pass).

Each stage's operators collapse into one operator whose forward time is the sum of the operators'
forward times plus their blocking forward collectives, whose input-gradient time adds the backward
collectives and the recomputation, and whose weight-gradient time sums the weight gradients.
Asynchronous column-parallel collectives (``Comm.overlaps``, ``taskgraph/lower_model.py``) count as
the operator lowering runs them on an otherwise idle TP stream: dgrad and the all-gather beside it
take max(dgrad, all-gather); in a fused backward (B) the input-gradient reduction beside wgrad takes
max(wgrad, reduction), recorded as ``wgrad_overlap`` = min(wgrad, reduction) off the wgrad task; a
split backward (I) leaves the reduction exposed. DP buckets all close at the end of the chunk's
backward. Memory keeps the saved activations; the
transient recompute buffers are not modeled at this fidelity.
"""
from __future__ import annotations

from dataclasses import replace

from taskgraph.lower_model import Bucket, IterationWork, LayerWork, OpCost, StageWork


def _stage(st: StageWork) -> StageWork:
    fwd = bi = bw = wov = saved = grad = 0.0
    for layer in st.layers:
        rec = 0.0
        for op in layer.ops:
            f = op.fwd + sum(c.seconds for c in op.fwd_pre + op.fwd_post)
            fwd += f
            has_w = op.bwd_weight > 0
            early = sum(c.seconds for c in op.bwd_pre if has_w and c.overlaps == "dgrad")
            late = sum(c.seconds for c in op.bwd_post if has_w and c.overlaps == "wgrad")
            blocking = sum(c.seconds for c in op.bwd_pre + op.bwd_post) - early - late
            bi += max(op.bwd_input, early) + blocking + late
            bw += op.bwd_weight
            wov += min(op.bwd_weight, late)
            saved += op.saved_bytes
            grad += op.grad_bytes
            if layer.recompute == "full" or (layer.recompute == "selective" and op.selective):
                rec += f if layer.recompute == "full" else op.fwd
        bi += rec
    op = OpCost("chunk", fwd, bi, bw, saved_bytes=saved, grad_bytes=grad, wgrad_overlap=wov)
    buckets = tuple(Bucket(0, 0, b.nbytes, b.reduce_s, b.gather_s) for b in st.buckets)
    return StageWork((LayerWork("chunk", (op,)),), buckets, st.optimizer_s)


def coarsen(work: IterationWork) -> IterationWork:
    """The coarse version of ``work`` (same transfers, DP and optimizer work)."""
    return replace(work, stages=tuple(_stage(s) for s in work.stages),
                   meta={**work.meta, "fidelity": "coarse"})
