"""Coarse fidelity for fast strategy search: one compute task per (chunk, microbatch, pass).

Each stage's operators collapse into one operator whose forward time is the sum of the operators'
forward times plus their blocking forward collectives, whose input-gradient time adds the backward
collectives and the recomputation, and whose weight-gradient time sums the weight gradients.
Asynchronous column-parallel collectives (``Comm.overlaps``, ``taskgraph/lower_model.py``) count as
the operator lowering runs them on the TP stream beside the GEMM: dgrad and the all-gather beside it
take bulk(dgrad, all-gather, f) (``taskgraph/overlap.py``: the collective holds a fraction f of the
SMs, the TP stream's ``sm_share``; max(dgrad, all-gather) when f = 0); in a fused backward (B) the
input-gradient reduction beside wgrad takes bulk(wgrad, reduction, f), recorded as ``wgrad_overlap``
= wgrad + reduction - bulk(...) off the wgrad task; a split backward (I) leaves the reduction exposed. DP buckets all close at the end of the chunk's
backward; with ``overlap_grad_reduce`` the chunk's last backward is lengthened by what the buckets
released op by op during it slow it (``bucket_tail``; its W pass when the schedule splits backwards,
``meta["split_backward"]``; the DP stream's SM fraction) and the buckets' durations are scaled so that
they end when the operator lowering's would, so the two fidelities agree by construction, for the
rank's step end and for what that backward sends to the previous stage. Memory keeps the saved activations; the
transient recompute buffers are not modeled at this fidelity.
"""
from __future__ import annotations

from dataclasses import replace

from taskgraph.overlap import bulk
from taskgraph.work import Bucket, IterationWork, LayerWork, OpCost, StageWork, shared_pair


def _shared_beside(e: OpCost, sh: OpCost, r: float, f_ep: float, split_backward: bool) -> tuple:
    """(forward, input-gradient, wgrad_overlap) seconds the shared experts ``sh`` add to their layer
    when they run beside the experts' all-to-alls (taskgraph.work.shared_pair; the all-to-alls themselves
    are counted with the experts ``e``): each half of the shared experts and its all-to-all start
    together and take bulk(half, all-to-all, f_ep) (taskgraph/overlap.py), the TP collectives blocking."""
    a1, a2 = e.fwd_pre[0].seconds, e.fwd_post[-1].seconds       # dispatch, combine
    b1, b2 = e.bwd_pre[0].seconds, e.bwd_post[-1].seconds       # combine's backward, dispatch's
    fwd = sum(c.seconds for c in sh.fwd_pre + sh.fwd_post) + bulk(r * sh.fwd, a1, f_ep) \
        + bulk((1.0 - r) * sh.fwd, a2, f_ep) - a1 - a2
    comm_b = sum(c.seconds for c in sh.bwd_pre + sh.bwd_post)
    if split_backward:   # I beside the all-to-alls, W later on its own
        return fwd, comm_b + bulk((1.0 - r) * sh.bwd_input, b1, f_ep) + bulk(r * sh.bwd_input, b2, f_ep) - b1 - b2, 0.0
    both = sh.bwd_input + sh.bwd_weight
    ov = both + b1 + b2 - bulk((1.0 - r) * both, b1, f_ep) - bulk(r * both, b2, f_ep)
    return fwd, comm_b + sh.bwd_input, ov


def coarse_stage_work(st: StageWork, f_tp: float = 0.0, f_dp: float = 0.0, overlap_grad_reduce: bool = False,
           split_backward: bool = False, shared: tuple = (False, 0.5, 0.0), g_dp: float = 0.0) -> StageWork:
    fwd = bi = bw = wov = saved = grad = 0.0
    steps = []  # the backward in execution order: (layer, op, seconds), recomputation as op -1
    for li, layer in enumerate(st.layers):
        rec = 0.0
        per_op = []
        pair = shared_pair(layer, shared[0])
        for oi, op in enumerate(layer.ops):
            f = op.fwd + sum(c.seconds for c in op.fwd_pre + op.fwd_post)
            has_w = op.bwd_weight > 0
            early = sum(c.seconds for c in op.bwd_pre if has_w and c.overlaps == "dgrad")
            late = sum(c.seconds for c in op.bwd_post if has_w and c.overlaps == "wgrad")
            blocking = sum(c.seconds for c in op.bwd_pre + op.bwd_post) - early - late
            # an asynchronous collective beside its GEMM holds f_tp of the SMs (taskgraph/overlap.py):
            # the pair takes bulk(gemm, comm, f_tp), the operator lowering's fixed point for it
            b_in = bulk(op.bwd_input, early, f_tp) + blocking + late
            ov = op.bwd_weight + late - bulk(op.bwd_weight, late, f_tp) if late > 0 else 0.0
            if pair and oi == pair[1]:
                f, b_in, ov = _shared_beside(layer.ops[pair[0]], op, shared[1], shared[2], split_backward)
            fwd += f
            bi += b_in
            bw += op.bwd_weight
            wov += ov
            # a split backward (zero bubble) releases the buckets during its W pass: weight gradients only
            per_op.append((li, oi, op.bwd_weight if split_backward else b_in + op.bwd_weight - ov))
            saved += op.saved_bytes
            grad += op.grad_bytes
            if layer.recompute == "full" or (layer.recompute == "selective" and op.selective):
                rec += f if layer.recompute == "full" else op.fwd
        bi += rec
        steps.append(([] if split_backward else [(li, -1, rec)]) + per_op[::-1])
    reduce = [b.reduce_s for b in st.buckets]
    slow = 0.0
    if overlap_grad_reduce and st.buckets:
        slow, tail = bucket_tail([x for layer in steps[::-1] for x in layer], st.buckets, f_dp, g_dp)
        total = sum(reduce)
        reduce = [r * tail / total for r in reduce] if total > 0 else reduce
    op = OpCost("chunk", fwd, bi, bw, saved_bytes=saved, grad_bytes=grad, wgrad_overlap=wov, last_bwd_extra=slow)
    buckets = tuple(Bucket(0, 0, b.nbytes, r, b.gather_s) for b, r in zip(st.buckets, reduce))
    return StageWork((LayerWork("chunk", (op,)),), buckets, st.optimizer_s)


def bucket_tail(steps, buckets, f_dp: float, g_dp: float = 0.0) -> tuple[float, float]:
    """(slowdown, tail) of a stage's last backward and its gradient buckets, as the operator lowering
    runs them: each bucket released when the backward passes its closing operator, the DP stream
    taking them in order, the compute slowed to ``1 - f_dp`` while the stream is busy and the stream
    to ``1 - g_dp`` while the compute is (taskgraph/overlap.py ``hbm_loss``). ``slowdown``: seconds the
    backward takes beyond its plain length (the SMs the buckets held); ``tail``: seconds the buckets
    run after it ends. A coarse chunk lengthens its last backward by the first (``OpCost.last_bwd_extra``:
    what it sends to the previous stage then leaves when the operator lowering's would) and releases its
    buckets at its end, their durations scaled to the second."""
    closing = {}
    for j, b in enumerate(buckets):
        closing.setdefault((b.layer, b.op), []).append(b.reduce_s)
    t = r = plain = 0.0   # compute clock, the DP stream's work left at t (seconds alone), the plain backward
    for li, oi, w in steps:
        plain += w
        if r > 0.0:   # both busy: compute at 1 - f_dp, the DP stream at 1 - g_dp, until one is done
            c_end, d_end = w / (1.0 - f_dp), r / (1.0 - g_dp)
            if c_end <= d_end:
                t, r = t + c_end, r - c_end * (1.0 - g_dp)
            else:
                t, r = t + d_end + (w - d_end * (1.0 - f_dp)), 0.0
        else:
            t += w
        for d in closing.get((li, oi), ()):
            r += d
    return t - plain, r


def coarsen(work: IterationWork) -> IterationWork:
    """The coarse version of ``work`` (same transfers, DP and optimizer work)."""
    share = work.meta.get("sm_share", {})
    f_tp, f_dp = share.get("tp", 0.0), share.get("dp", 0.0)
    g_dp = work.meta.get("hbm_loss", {}).get("dp", 0.0)
    split = bool(work.meta.get("split_backward", False))
    shared = (work.shared_expert_overlap, work.shared_fc1_share, share.get("ep", 0.0))
    return replace(work, stages=tuple(coarse_stage_work(s, f_tp, f_dp, work.overlap_grad_reduce, split, shared, g_dp)
                                      for s in work.stages),
                   meta={**work.meta, "fidelity": "coarse"})
