"""Lower bounds on a candidate's simulated iteration time, for branch and bound (docs/search.md).

The engine runs every device FIFO, one task at a time, and a task starts no earlier than its
predecessors end. So for any device ``d`` and any set ``T`` of its tasks (the one-machine
relaxation with heads and tails; Carlier 1982, "The one-machine sequencing problem", EJOR 11,
the bound behind branch and bound for job shops)::

    makespan >= min_{t in T} head(t) + sum_{t in T} duration(t) + min_{t in T} tail(t)

where ``head(t)`` is the length of a chain of predecessors of ``t`` (their durations and transfers)
and ``tail(t)`` the length of a chain of successors. For a pipeline rank, ``T`` = its compute tasks
(F, B, I, W of every stage it holds, every micro-batch), and the chains come from the lowering's data
edges (``taskgraph/lower_coarse.py``): F(s, m) waits for F(s-1, m) of the same segment, so every task
of stage ``s`` has ``head >= sum of the forwards of the stages before s``; B / I (s, m) feed
B / I (s-1, m), so with a fused backward (no W action on the rank) every task has ``tail >= sum of
the input gradients of the stages before s``; every action precedes the rank's optimizer step
(program order). The bound is the maximum over ranks. With equal stages it is Narayanan 2021's
ideal pipeline time ``(p - 1 + v m) (f + b) / v`` -- the bubble is part of it -- and everything the
simulation adds (exposed communication, DP reductions, waits) only lengthens the timeline.

Two bounds use this formula:

* :func:`records_bound` on the candidate's own cost records (``taskgraph.costing.build_work``,
  coarse) and schedule: per micro-batch a stage takes at least ``fwd + bwd_input + bwd_weight -
  wgrad_overlap`` on its rank (the coarse lowering's task durations), transfers on the chains,
  the optimizer step in the tail;
* :func:`compute_bound`, closed form without costing or schedule generation: the same chains with
  only the compute kernels of each operator (``taskgraph.cost.op_time``, the times costing starts
  from) times the rank's pace (``topologies.stragglers.stage_pace``), and recomputation's forward
  kernels. Costing only adds to these (communication before / after kernels, host-dispatch stretch
  >= 1: ``taskgraph/costing.py``, ``taskgraph/overheads.py``; ``taskgraph/coarse.py`` sums them), so
  it is a bound on the records and hence on the timeline; it costs microseconds per candidate
  (per-layer kernel times memoized), where costing and simulating cost milliseconds.

**Paths.** :func:`path_bound` drops the one-machine relaxation for the schedule itself: the coarse
lowering (``taskgraph/lower_coarse.py``) chains each rank's actions in program order (the previous
action's exit precedes the next one's entry), so every task of the graph starts no earlier than the
longest path of edges into it, in any timeline that respects the edges -- the engine's, whatever its
FIFO order on links and DP streams. The bound is the longest path through the actions (F: forward;
B: dgrad then wgrad less ``wgrad_overlap``; I: dgrad; W: wgrad) over the program-order, data
(with the transfer on a cross-rank edge) and same-stage edges, and with blocking p2p the sender's
next action after the transfer, plus each rank's optimizer step after its last action; the DP
buckets and parameter gathers are left out. Longest paths, unlike FIFO list schedules (Graham
1969), never shrink when durations grow, so the compute slowed beside communication
(``simulator/engine/interference.py``: durations only grow) keeps it a bound. It is the heaviest of
the three (one pass over the actions, ~0.4 us each, after costing) and the tightest: over the 727
simulated candidates of GPT-3 175B / 1024 A100 it is 0.99 of the simulated time at the median (0.90
at worst), the records bound 0.94 (0.46), the compute bound 0.85.

All three are multiplied by ``SLACK`` (1 - 1e-6): the sweep adds durations one by one while the bound
multiplies by the micro-batch count, and the two roundings may differ in the last bits
(tests/test_search_bound.py checks bound <= simulated on every candidate of several spaces).
"""
from __future__ import annotations

from collections.abc import Sequence

# Schedules whose backward is one fused B action per (stage, micro-batch) -- no W action -- so every
# rank's tasks carry the input-gradient chain in their tails (checked in tests/test_search_bound.py),
# and those that split backwards into I and W (the tail then holds only the optimizer step): the
# schedule registry's tables.
from strategies.schedules import FUSED_BACKWARD
from strategies.schedules import SPLIT_BACKWARD as KNOWN_SPLIT

#: Relative margin for floating-point rounding (module doc).
SLACK = 1.0 - 1e-6
#: Schedules whose stage placement :func:`stage_ranks` knows: round robin (Narayanan 2021
#: interleaving), or the V of ZB-V / DualPipe-V (stages r and 2pp-1-r on rank r); one segment.
ROUND_ROBIN = frozenset({"1f1b", "gpipe", "zb-h1", "interleaved-1f1b", "looped-bfs"})
V_SHAPED = frozenset({"zb-v", "dualpipe-v"})


def stage_ranks(schedule: str, pp: int, vpp: int) -> list[int] | None:
    """Pipeline rank of each virtual stage for the schedules named above, else None."""
    S = pp * vpp
    if schedule in V_SHAPED and vpp == 2:
        return [s if s < pp else 2 * pp - 1 - s for s in range(S)]
    if schedule in ROUND_ROBIN:
        return [s % pp for s in range(S)]
    return None


def chain_bound(fwd: Sequence[float], busy: Sequence[float], bwd_in: Sequence[float], ranks: Sequence[int],
                first: Sequence[bool], microbatches: int | Sequence[int], fused: Sequence[bool],
                xfer_fwd: Sequence[float] | None = None, xfer_bwd: Sequence[float] | None = None,
                opt: Sequence[float] | None = None) -> float:
    """max over ranks of (head + busy + tail), module doc; per stage ``s``: ``fwd[s]`` (F),
    ``busy[s]`` (all its compute per micro-batch), ``bwd_in[s]`` (its input-gradient link of the
    backward chain), ``ranks[s]``, ``first[s]`` (first stage of its segment), ``xfer_fwd[s]`` /
    ``xfer_bwd[s]``: the transfer between stage s-1 and s (0 on one rank); per rank ``fused[r]``
    (no W action) and ``opt[r]`` (optimizer step); ``microbatches``: through every stage, or per
    stage (DualPipe's two segments each carry half). Not yet multiplied by :data:`SLACK`."""
    mbs = [microbatches] * len(fwd) if isinstance(microbatches, int) else list(microbatches)
    S = len(fwd)
    P = max(ranks) + 1 if S else 0
    head = [0.0] * S
    tail = [0.0] * S
    for s in range(1, S):
        if not first[s]:
            head[s] = head[s - 1] + fwd[s - 1] + (xfer_fwd[s] if xfer_fwd else 0.0)
            tail[s] = tail[s - 1] + bwd_in[s - 1] + (xfer_bwd[s] if xfer_bwd else 0.0)
    h = [float("inf")] * P
    t = [float("inf")] * P
    b = [0.0] * P
    for s in range(S):
        r = ranks[s]
        h[r] = min(h[r], head[s])
        t[r] = min(t[r], tail[s])
        b[r] += mbs[s] * busy[s]
    best = 0.0
    for r in range(P):
        if h[r] == float("inf"):
            continue
        o = opt[r] if opt else 0.0
        tl = max(o, t[r]) if fused[r] else o
        best = max(best, h[r] + b[r] + tl)
    return best


def records_bound(schedule, work) -> float:
    """Lower bound (s) on the makespan of ``schedule`` lowered with coarse records ``work``
    (:class:`taskgraph.work.IterationWork` from ``build_work(..., fidelity="coarse")``); 0.0
    when ``work`` is not coarse (one operator per stage) or its pairs run concurrently."""
    S = schedule.num_stages
    if len(work.stages) != S or work.concurrent_pairs or \
            any(len(st.layers) != 1 or len(st.layers[0].ops) != 1 for st in work.stages):
        return 0.0
    ops = [st.layers[0].ops[0] for st in work.stages]
    s2r = list(schedule.stage_to_rank)
    first = [schedule.is_first_stage(s) for s in range(S)]
    fused = [schedule.name in FUSED_BACKWARD] * schedule.pp
    if not fused[0] and schedule.name not in KNOWN_SPLIT:  # a custom schedule: look at its actions
        fused = [not any(x.kind == "W" for a in order for x in (getattr(a, "sub_actions", None) or (a,)))
                 for order in schedule.orders]
    pairs = getattr(work, "p2p_pairs", None) or {}

    def xfer(a, b, default):
        return 0.0 if a == b else pairs.get((a, b), default)

    xf = [0.0] + [xfer(s2r[s - 1], s2r[s], work.p2p_fwd_s) for s in range(1, S)]
    xb = [0.0] + [xfer(s2r[s], s2r[s - 1], work.p2p_bwd_s) for s in range(1, S)]
    opt = [0.0] * schedule.pp
    for s in range(S):
        opt[s2r[s]] += work.stages[s].optimizer_s
    busy = [o.fwd + o.bwd_input + (o.bwd_weight - o.wgrad_overlap) for o in ops]
    mbs = [len(schedule.stage_microbatches(s)) for s in range(S)]
    return SLACK * chain_bound([o.fwd for o in ops], busy, [o.bwd_input for o in ops], s2r, first,
                               mbs, fused, xf, xb, opt)



def path_bound(schedule, work, overlap_handoff: str = "pair-end") -> float:
    """Lower bound (s) on the makespan of ``schedule`` lowered with coarse records ``work``: the
    longest path through the schedule's actions (module doc, "Paths"); 0.0 when the coarse lowering
    does not apply (``taskgraph.lower_coarse.NotCoarse``: the evaluation then lowers per operator)."""
    from taskgraph.lower_coarse import NotCoarse, action_index, work_shape
    if work.concurrent_pairs or len(work.stages) != schedule.num_stages:
        return 0.0
    try:
        work_shape(work)
        ax = action_index(schedule, overlap_handoff)
    except NotCoarse:
        return 0.0
    return SLACK * _longest_path(ax, schedule, work)


def _path_arrays(ax) -> tuple:
    """The action graph as arrays for :func:`_longest_path` (cached on the action index): per action
    in topological order its id, previous action on its rank, the action whose exit releases its
    input, its same-stage predecessor (``A`` = none: a slot that stays 0.0), the action whose
    transfer blocks it (blocking p2p), and per action the (link, direction) of the transfer on its
    data edge and the (stage, kind) slot of its duration."""
    hit = getattr(ax, "_path", None)
    if hit is not None:
        return hit
    import numpy as np
    A = ax.stage.size
    topo = ax.topo
    none = np.int64(A)
    prev = np.where(ax.prev >= 0, ax.prev, none)
    out = np.where(ax.data_out >= 0, ax.data_out, none)
    same = np.where(ax.same_src >= 0, ax.same_src, none)
    src_rank = ax.rank[np.maximum(ax.data_src, 0)]
    # the transfer on the cross-rank data edge: link (sender's rank, this rank), forward (F) or backward
    xslot = np.where(ax.cross, 2 * (src_rank * ax.pp + ax.rank) + (ax.kind != 0), -1)
    # blocking p2p (lower_coarse phase 2): the sender's next action on its rank waits for the transfer
    sender = np.maximum(ax.data_out, 0)
    nxt = np.minimum(sender + 1, A - 1)
    blocked_by = np.full(A, A, dtype=np.int64)   # action -> the cross action whose transfer blocks it
    has_next = ax.cross & (sender + 1 < A) & (ax.rank[nxt] == ax.rank[sender])
    # (a DualPipe pair releases two outputs at its end: one of the two edges is kept, which only
    # leaves a path out, so the bound still holds)
    blocked_by[nxt[has_next]] = np.flatnonzero(has_next)
    hit = (topo, prev[topo], out[topo], same[topo], blocked_by[topo], out, xslot, ax.stage * 4 + ax.kind)
    ax._path = hit
    return hit


def _longest_path(ax, schedule, work) -> float:
    """max over ranks of (longest path to the rank's last action + its optimizer step), unscaled."""
    import numpy as np
    topo, prev, out, same, blocked, out_all, xslot, slot = _path_arrays(ax)
    # per (stage, kind) the action's compute: F fwd; B dgrad then wgrad (less the reduction's overlap);
    # I dgrad; W wgrad (an empty task without weight gradient): the coarse lowering's task durations
    table = []
    for st in work.stages:
        o = st.layers[0].ops[0]
        w = o.bwd_weight > 0
        table += [o.fwd, o.bwd_input + (o.bwd_weight - o.wgrad_overlap if w else 0.0), o.bwd_input,
                  o.bwd_weight if w else 0.0]
    dur = np.asarray(table)[slot]
    # transfer times by (link, direction): work.p2p_pairs[(a, b)] when given, else p2p_fwd_s / p2p_bwd_s
    P = ax.pp
    xt = np.zeros(2 * P * P + 1)
    xt[0::2][:P * P] = work.p2p_fwd_s
    xt[1::2][:P * P] = work.p2p_bwd_s
    for (a, b), t in (getattr(work, "p2p_pairs", None) or {}).items():
        if 0 <= a < P and 0 <= b < P:
            xt[2 * (a * P + b)] = xt[2 * (a * P + b) + 1] = t
    xw = np.where(xslot >= 0, xt[xslot], 0.0)      # per action: its input's transfer (0: same rank)
    A = dur.size
    d_l, x_l = dur[topo].tolist(), xw[topo].tolist()
    if not getattr(work, "p2p_overlap", True):   # blocking: the sender's next action waits for it
        bx = np.append(xw, 0.0)[blocked]
        bu = np.append(out_all, A)[blocked]
        E = [0.0] * (A + 1)          # exit time of each action; E[A] = 0.0 stands for "none"
        for a, p, u, x, q, v, y, d in zip(topo.tolist(), prev.tolist(), out.tolist(), x_l, same.tolist(),
                                          bu.tolist(), bx.tolist(), d_l):
            s = E[p]
            r = E[u] + x
            if r > s:
                s = r
            r = E[q]
            if r > s:
                s = r
            r = E[v] + y
            if r > s:
                s = r
            E[a] = s + d
    else:
        E = [0.0] * (A + 1)
        for a, p, u, x, q, d in zip(topo.tolist(), prev.tolist(), out.tolist(), x_l, same.tolist(), d_l):
            s = E[p]
            r = E[u] + x
            if r > s:
                s = r
            r = E[q]
            if r > s:
                s = r
            E[a] = s + d
    opt = [0.0] * P
    for s_ in range(schedule.num_stages):
        opt[schedule.stage_to_rank[s_]] += work.stages[s_].optimizer_s
    return max(E[int(ax.rank_last[r])] + opt[r] for r in range(P))


# --------------------------------------------------------------------------------------------------
# Closed form from the compute kernels

_MEMO: dict = {}


def _kernel_times(ctx, c, layer_index: int | None, part: str) -> tuple[float, float, float, float, float]:
    """(forward, input-gradient, weight-gradient, selective-recompute forward, full-recompute
    forward) kernel seconds of one GPU for a layer (``part="layer"``), the embedding or the head,
    unpaced (``taskgraph.cost.op_time`` as costing calls it)."""
    model, tr, opt = ctx.model, ctx.base.training, ctx.base.options
    sp = c.sp and c.tp > 1
    kind = model.layer_kind(layer_index) if part == "layer" else None
    key = (part, kind, model, ctx.cluster.gpu, c.tp, sp, c.cp, c.ep, c.micro_batch, tr.seq_len, tr.precision,
           opt.flash_attention, opt.moe_load, opt.cp_comm, opt.cp_load_balance, opt.profile, opt.fp32_grad_accum,
           opt.fp8_recipe, opt.stack, opt.attention_kernel, opt.moe_dispatcher, opt.cross_entropy, tr.lora)
    hit = _MEMO.get(key)
    if hit is not None:
        return hit
    from taskgraph.cost import DTYPE_BYTES, ProfileTable, op_time
    from taskgraph.operators import embedding_operators, head_operators, layer_operators
    from taskgraph.stacks import run_stack
    stack = run_stack(opt.stack, opt.attention_kernel, opt.cross_entropy)  # as costing prices them
    dt = DTYPE_BYTES[tr.precision]
    kw = dict(micro_batch=c.micro_batch, seq_len=tr.seq_len, tp=c.tp, sp=sp, cp=c.cp, dtype_bytes=dt, lora=tr.lora)
    if part == "layer":
        ops = layer_operators(model, ep=c.ep, flash_attention=opt.flash_attention, layer_index=layer_index,
                              moe_load=opt.moe_load, cp_comm=opt.cp_comm, cp_balance=opt.cp_load_balance,
                              moe_dispatcher=opt.moe_dispatcher, **kw)
    elif part == "embedding":
        ops = embedding_operators(model, **kw)
    else:
        from taskgraph.stack_costs import loss_as_priced  # the loss as costing runs it
        ops = [loss_as_priced(o, stack, tr.precision) if o.kind == "loss" else o for o in
               head_operators(model, ep=c.ep, flash_attention=opt.flash_attention, moe_load=opt.moe_load,
                              moe_dispatcher=opt.moe_dispatcher, **kw)]
    profile = ProfileTable.load(opt.profile) if opt.profile else None
    gacc = 4 if (tr.precision in ("bf16", "fp8", "fp4") and opt.fp32_grad_accum) else 2  # costing.grad_bytes_per_param
    gpu = ctx.cluster.gpu
    f = bi = bw = sel = 0.0
    for o in ops:
        t = [op_time(o, p, gpu, tr.precision, flash=opt.flash_attention, profile=profile, grad_accum_bytes=gacc,
                     fp8_recipe=opt.fp8_recipe, stack=stack) for p in ("fwd", "bwd_input", "bwd_weight")]
        f += t[0]
        bi += t[1]
        bw += t[2]
        if o.selective_recompute_bytes > 0:
            sel += t[0]
    hit = (f, bi, bw, sel, f)
    if len(_MEMO) > 65536:
        _MEMO.clear()
    _MEMO[key] = hit
    return hit


def _layer_kinds(model) -> tuple:
    """``model.layer_kind(i)`` of every layer (memoized per model)."""
    key = ("kinds", model)
    hit = _MEMO.get(key)
    if hit is None:
        hit = _MEMO[key] = tuple(model.layer_kind(i) for i in range(model.layers))
    return hit


def _paces(c, cluster) -> tuple:
    """``topologies.stragglers.stage_pace`` of each pipeline rank of ``c`` (memoized)."""
    from topologies.placement import ParallelSizes
    from topologies.stragglers import stage_pace
    key = ("pace", cluster, c.tp, c.pp, c.dp, c.cp, c.ep)
    hit = _MEMO.get(key)
    if hit is None:
        sizes = ParallelSizes(tp=c.tp, cp=c.cp, dp=c.dp, pp=c.pp, ep=c.ep)
        hit = _MEMO[key] = tuple(stage_pace(cluster, sizes, r) for r in range(c.pp))
    return hit


def compute_bound(ctx, c, cluster=None) -> float:
    """Lower bound (s) on the coarse simulated iteration time of candidate ``c``
    (:class:`simulator.search.space.Candidate`) from compute kernels alone (module doc);
    ``cluster``: the resolved cluster of ``c.gpus`` GPUs (default ``ctx.cluster``). 0.0 when the
    bound does not apply (concurrent DualPipe pairs or combined 1F1B steps, an unknown placement is bounded by the average
    rank instead)."""
    base = ctx.base
    if base.options.pair_overlap == "concurrent" or base.options.overlap_moe_expert_parallel_comm:
        return 0.0   # concurrent pairs (DualPipe's, Megatron's combined 1F1B steps) reorder the work
    cluster = cluster or ctx.cluster
    model, tr = ctx.model, base.training
    S = c.pp * c.vpp
    m = tr.global_batch // (c.micro_batch * c.dp)
    if m < 1 or model.layers < S and c.layers_per_stage is None:
        return 0.0
    lps = c.layers_per_stage or (model.layers // S,) * S
    ranks = stage_ranks(c.schedule, c.pp, c.vpp)
    fwd, busy, bwd_in = [], [], []
    kinds = _layer_kinds(model)
    per_kind: dict = {}  # (part, layer kind, policy) -> (fwd, bwd_in, busy) of one layer
    paces = _paces(c, cluster)
    pols = c.recompute_layers
    li = 0
    for s in range(S):
        # (part, kind, policy) -> [first layer index, count]; equal layers add count x one layer's
        # times (the float rounding differs from adding them one by one by far less than SLACK)
        runs: dict = {("embedding", None, "none"): [None, 1]} if s == 0 else {}
        seg = kinds[li:li + lps[s]]
        if pols is None:
            for k in dict.fromkeys(seg):
                runs[("layer", k, c.recompute)] = [li + seg.index(k), seg.count(k)]
        else:
            for i in range(li, li + lps[s]):
                r = runs.setdefault(("layer", kinds[i], pols[i]), [i, 0])
                r[1] += 1
        if s == S - 1:
            runs[("head", None, "none")] = [None, 1]
        li += lps[s]
        f = b = bi = 0.0
        for key, (i, n) in runs.items():
            x = per_kind.get(key)
            if x is None:
                pol = key[2]
                kf, kbi, kbw, ksel, kfull = _kernel_times(ctx, c, i, key[0])
                rec = kfull if pol == "full" else ksel if pol == "selective" else 0.0
                x = per_kind[key] = (kf, kbi + rec, kf + kbi + kbw + rec)
            f += n * x[0]
            bi += n * x[1]
            b += n * x[2]
        pace = paces[ranks[s] if ranks is not None else 0]
        fwd.append(f * pace)
        bwd_in.append(bi * pace)
        busy.append(b * pace)
    if ranks is None:  # unknown placement: some rank holds at least the average of the compute
        return SLACK * m * sum(x / paces[0] for x in busy) * min(paces) / c.pp
    first = [s == 0 for s in range(S)]
    fused = [c.schedule in FUSED_BACKWARD] * c.pp
    return SLACK * chain_bound(fwd, busy, bwd_in, ranks, first, m, fused)


__all__ = ["FUSED_BACKWARD", "SLACK", "chain_bound", "compute_bound", "path_bound", "records_bound", "stage_ranks"]
