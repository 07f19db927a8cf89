"""Operator-level lowering of a real model: one task per operator and pass, with TP/CP/EP
collectives, recompute, pipeline transfers, bucketed data-parallel gradient reduction, the
optimizer step and parameter gathers.

Inputs are cost records (:class:`taskgraph.work.StageWork`, the contract between costing and
lowering), so this module does not know how costs are computed (``taskgraph/costing.py`` builds them
from the operator graph, the cost model and the collectives).

Each simulated rank is the representative of a pipeline stage's GPUs (its TP peers and DP replicas
behave identically); its devices are ``rank{r}/compute``, ``rank{r}/tp`` (TP/CP/EP collectives),
``rank{r}/dp`` (data-parallel collectives) and the ``link a->b`` devices between pipeline ranks.

Megatron-LM conventions modeled (Shoeybi 2019 Section 3; Korthikanti 2022 Section 4.2.2;
Narayanan 2021 Section 4):
* TP collectives are blocking: the next operator waits for them (with ``tp_comm_overlap`` the
  sequence-parallel ones are folded into their GEMM by the costing: ``taskgraph/overlap.py``),
  except the column-parallel backward ones marked ``Comm.overlaps`` (Megatron-LM's asynchronous
  TP backward, ``LinearWithGradAccumulationAndAsyncCommunication.backward``): the SP all-gather of
  the saved input runs concurrently with the dgrad GEMM, the all-reduce / reduce-scatter of the input
  gradient with the wgrad GEMM, and the next operator waits for both. A split backward (I without
  W) has no wgrad to hide behind, so there the input-gradient collective stays exposed.
* Gradient reduction of a chunk runs in buckets during the last microbatch's backward of that chunk
  (``overlap_grad_reduce``), else after the rank's last backward; then the optimizer step.
* Distributed optimizer / ZeRO-1: gradients reduce-scattered, parameters all-gathered after the
  step; with ``overlap_param_gather`` the gather overlaps the (next iteration's) forward, modeled as
  each chunk's first forward waiting for its gather at the start of the iteration.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from strategies.actions import Action, Schedule
from taskgraph.graph import Device, TaskGraph, TaskGraphBuilder
from taskgraph.lower_pipeline import lower_schedule
from taskgraph.order_hint import action_order
from taskgraph.work import IterationWork, LayerWork, OpCost, shared_pair


def _layer_ops_backward(layer: LayerWork):
    return list(enumerate(layer.ops))[::-1]


def lower_model(schedule: Schedule, work: IterationWork, *, overlap_handoff: str = "pair-end",
                templates: bool = True) -> TaskGraph:
    """Lower ``schedule`` with operator-level tasks from ``work`` into a task graph.

    ``templates`` (default): each (stage, pass kind) is emitted task by task once, recorded as a
    block (:meth:`TaskGraphBuilder.block`) and replicated for the other microbatches with array
    copies (:meth:`TaskGraphBuilder.add_block`) -- every microbatch of a stage runs the same operator
    chain, so the copies are exactly what emitting them again would add (the same arrays, same
    numbering; ``tests/test_lower_templates.py``). ``templates=False`` emits every task through
    ``add_task``: the reference path. The stage's last backward is always emitted (it also carries
    the overlapped gradient-reduction buckets). Invariant the templates rely on: ``emit`` below
    depends on the action only through (stage, kind) -- plus "is it the last backward" -- so
    anything made to vary per microbatch (stragglers, per-microbatch jitter) must join the cache
    key in ``emit_cached`` or be applied to the built graph's ``duration`` column."""
    if len(work.stages) != schedule.num_stages:
        raise ValueError(f"{len(work.stages)} stage work records for {schedule.num_stages} stages")
    b = TaskGraphBuilder()
    for r in range(schedule.pp):
        for stream in ("compute", "tp", "dp"):
            b.add_device(Device(f"rank{r}/{stream}", r, stream, work.represents))
    # last backward-ish action (B or W; I when the stage has no W) of every stage on its rank
    last_bwd: dict[int, Action] = {}
    first_fwd: dict[int, Action] = {}
    stages_with_w = {a.stage for order in schedule.orders for e in order
                     for a in getattr(e, "sub_actions", (e,)) if a.kind == "W"}
    for order in schedule.orders:
        for entry in order:
            for a in getattr(entry, "sub_actions", (entry,)):
                if a.kind in ("B", "W") or (a.kind == "I" and a.stage not in stages_with_w):
                    last_bwd[a.stage] = a
                if a.kind == "F" and a.stage not in first_fwd:
                    first_fwd[a.stage] = a
    dp_tasks: dict[int, list[int]] = {r: [] for r in range(schedule.pp)}

    # actions that are halves of a concurrent overlapped pair: their compute shares the SMs with the
    # communication kernels (DeepSeek-V3 Section 3.2.1: 20 of 132 SMs), so it runs pair_compute_scale x longer
    paired = ({a for order in schedule.orders for e in order for a in getattr(e, "sub_actions", ())}
              if work.concurrent_pairs else set())

    def emit(bld: TaskGraphBuilder, a: Action, rank: int, chunk: int):
        st = work.stages[a.stage]
        scale = work.pair_compute_scale if a in paired else 1.0
        cdev = bld.device_index(f"rank{rank}/compute")
        chain: list[int] = []
        comm_tails: list[int] = []
        waits: list[int] = []   # asynchronous collectives the next chained task waits for
        layer_buffers: list[float] = []

        def after_chain(t, consume=True):
            if chain:
                bld.add_edge(chain[-1], t)
            if waits:
                for w in waits:
                    bld.add_edge(w, t)
                if consume:
                    waits.clear()

        def comp(dur, cat, op, mem_end=0.0, free=(0.0, 0.0)):
            """A compute task; ``mem_end`` bytes allocated at its end (activations, or recompute
            temporaries for recompute tasks); ``free`` = (activation, temporary) bytes freed at its end."""
            t = bld.add_task(dur * scale, cdev, cat, op=op, stage=a.stage, chunk=chunk, mb=a.mb, rank=rank)
            after_chain(t)
            chain.append(t)
            if mem_end:
                bld.add_memory(t, mem_end, at_end=True, kind="temporary" if cat == "recompute" else "activation")
            if free[0]:
                bld.add_memory(t, -free[0], at_end=True, kind="activation")
            if free[1]:
                bld.add_memory(t, -free[1], at_end=True, kind="temporary")
            return t

        def comms(items, side=False):
            """Collectives in order; ``side``: asynchronous ones, not chained (returned instead)."""
            if not items:
                return ()
            out = []
            if side and not chain:  # the action's entry task carries its incoming edges
                comp(0.0, "other", "start")
            for c in items:
                dev = bld.add_device(Device(f"rank{rank}/{c.stream}", rank, c.stream, work.represents))
                t = bld.add_task(c.seconds, dev, c.category, op=c.op, stage=a.stage, chunk=chunk, mb=a.mb, rank=rank)
                after_chain(t, consume=not side)
                if side:
                    out.append(t)
                    continue
                if c.mem_bytes:
                    bld.add_memory(t, c.mem_bytes, at_end=True, kind="parameter")
                    layer_buffers.append(c.mem_bytes)
                chain.append(t)
            return out

        def end_layer():
            """Free the layer's gathered buffers when its pass (last task so far) ends."""
            if layer_buffers and chain:
                bld.add_memory(chain[-1], -sum(layer_buffers), at_end=True, kind="parameter")
            layer_buffers.clear()

        def bucket_after(t, li, oi):
            if a != last_bwd.get(a.stage) or not work.overlap_grad_reduce:
                return
            for bk in st.buckets:
                if bk.layer == li and bk.op == oi:
                    d = bld.device_index(f"rank{rank}/dp")
                    x = bld.add_task(bk.reduce_s, d, "dp-comm", op="dp-grad-reduce", stage=a.stage, chunk=chunk,
                                     rank=rank)
                    bld.add_edge(t, x)
                    dp_tasks[rank].append(x)

        def forward_beside(e: OpCost, sh: OpCost, cat: str, lname: str, rec: bool):
            """The experts' forward with the shared experts beside its all-to-alls (shared_pair):
            fc1 + activation beside the dispatch, fc2 beside the combine; the SP all-gather before
            and the reduce-scatter after run on the shared experts' stream in order (blocking here)."""
            r = work.shared_fc1_share
            keep = (lambda o: o.recompute_bytes) if rec else (lambda o: o.saved_bytes)
            comms(sh.fwd_pre)
            xs = comms(e.fwd_pre[:1], side=True)
            comp(sh.fwd * r, cat, f"{lname}.{sh.name}.fc1")
            waits.extend(xs)
            comms(e.fwd_pre[1:])
            comp(e.fwd, cat, f"{lname}.{e.name}", mem_end=keep(e))
            comms(e.fwd_post[:-1])
            ys = comms(e.fwd_post[-1:], side=True)
            comp(sh.fwd * (1.0 - r), cat, f"{lname}.{sh.name}.fc2", mem_end=keep(sh))
            waits.extend(ys)
            comms(sh.fwd_post)

        def forward_ops(layer: LayerWork, ops, cat: str, rec: bool):
            pair = shared_pair(layer, work.shared_expert_overlap)
            for oi, op in enumerate(ops):
                if pair and oi == pair[1]:
                    continue
                if pair and oi == pair[0]:
                    forward_beside(op, ops[pair[1]], cat, layer.name, rec)
                    continue
                comms(op.fwd_pre)
                comp(op.fwd, cat, f"{layer.name}.{op.name}", mem_end=op.recompute_bytes if rec else op.saved_bytes)
                comms(op.fwd_post)

        def backward_op(li: int, oi: int, op: OpCost, lname: str):
            """One operator's backward pass (B: dgrad then wgrad; I: dgrad; W: wgrad)."""
            with_w = a.kind == "B"
            name = f"{lname}.{op.name}"
            held = (op.saved_bytes, op.recompute_bytes)
            has_w = op.bwd_weight > 0
            # the task the DP buckets follow carries the coarse record's slowdown by them (OpCost)
            x = op.last_bwd_extra if (op.last_bwd_extra and work.overlap_grad_reduce
                                      and a == last_bwd.get(a.stage)) else 0.0
            if a.kind == "W":
                if has_w:
                    t = comp(op.bwd_weight + x, "backward-weight", name + ".wgrad", free=held)
                    bucket_after(t, li, oi)
                return
            # B: dgrad then wgrad, both "backward"; I: dgrad only, W comes later.
            cat, dname = ("backward" if with_w else "backward-input"), name + (".dgrad" if has_w else "")
            if has_w and any(c.overlaps for c in op.bwd_pre + op.bwd_post):
                # asynchronous column-parallel collectives (module docstring): the all-gather
                # of the saved input beside dgrad; dX's reduction beside wgrad (B only)
                pre = [c for c in op.bwd_pre if c.overlaps != "dgrad"]
                early = [c for c in op.bwd_pre if c.overlaps == "dgrad"]
                post = [c for c in op.bwd_post if not (with_w and c.overlaps == "wgrad")]
                late = [c for c in op.bwd_post if with_w and c.overlaps == "wgrad"]
            else:
                pre, early, post, late = op.bwd_pre, (), op.bwd_post, ()
            comms(pre)
            xs = comms(early, side=True)
            t = dgrad = comp(op.bwd_input + (0.0 if has_w else x), cat, dname, free=(0.0, 0.0) if has_w else held)
            waits.extend(xs)
            comms(post)
            ys = comms(late, side=True)
            if with_w and has_w and work.delay_wgrad:
                # Megatron-LM --delay-wgrad-compute (model_chunk_schedule_plan.py
                # TransformerLayerSchedulePlan.run: mlp.backward, then the dispatch backward on
                # the communication stream beside mlp.backward_dw): the weight gradient waits for
                # its input gradient only, so the collectives after the dgrad start at once, and
                # what follows in the chain does not wait for it (the action's exit does: a join)
                t = bld.add_task((op.bwd_weight - op.wgrad_overlap + x) * scale, cdev, "backward",
                                 op=name + ".wgrad", stage=a.stage, chunk=chunk, mb=a.mb, rank=rank)
                bld.add_edge(dgrad, t)
                for m, kind in zip(held, ("activation", "temporary")):
                    if m:
                        bld.add_memory(t, -m, at_end=True, kind=kind)
                comm_tails.append(t)
            elif with_w and has_w:
                t = comp(op.bwd_weight - op.wgrad_overlap + x, "backward", name + ".wgrad", free=held)
            waits.extend(ys)
            if with_w or not has_w:
                bucket_after(t, li, oi)

        def backward_beside(li: int, pair: tuple, layer: LayerWork):
            """The experts' backward with the shared experts beside its all-to-alls, mirroring
            forward_beside: fc2's backward beside the combine's backward all-to-all, fc1's beside the
            dispatch's; the shared experts' TP collectives blocking on their stream (with the overlap
            Megatron-LM turns the linears' own TP communication off, shared_experts.py __init__)."""
            e, sh = layer.ops[pair[0]], layer.ops[pair[1]]
            r, with_w = work.shared_fc1_share, a.kind == "B"
            cat, name = ("backward" if with_w else "backward-input"), f"{layer.name}.{sh.name}"
            held = (sh.saved_bytes, sh.recompute_bytes)
            comms(sh.bwd_pre)
            xs = comms(e.bwd_pre[:1], side=True)
            comp(sh.bwd_input * (1.0 - r), cat, name + ".fc2.dgrad")
            if with_w:
                comp(sh.bwd_weight * (1.0 - r), "backward", name + ".fc2.wgrad")
            waits.extend(xs)
            backward_op(li, pair[0], replace(e, bwd_pre=e.bwd_pre[1:], bwd_post=e.bwd_post[:-1]), layer.name)
            ys = comms(e.bwd_post[-1:], side=True)
            t = comp(sh.bwd_input * r, cat, name + ".fc1.dgrad")
            if with_w:
                t = comp(sh.bwd_weight * r, "backward", name + ".fc1.wgrad", free=held)
            waits.extend(ys)
            comms(sh.bwd_post)
            if with_w:
                bucket_after(t, li, pair[1])

        if a.kind == "F":
            for li, layer in enumerate(st.layers):
                forward_ops(layer, layer.ops, "forward", False)
                end_layer()
        else:
            for li in range(len(st.layers) - 1, -1, -1):
                layer = st.layers[li]
                if a.kind in ("B", "I") and layer.recompute != "none":
                    ops = [op for op in layer.ops if layer.recompute == "full" or op.selective]
                    if ops:
                        if layer.recompute == "full":
                            # full recompute re-runs the layer forward, collectives (and overlap) included
                            forward_ops(layer, ops, "recompute", True)
                        else:
                            comp(sum(op.fwd for op in ops), "recompute", f"{layer.name}.selective",
                                 mem_end=sum(op.recompute_bytes for op in ops))
                pair = shared_pair(layer, work.shared_expert_overlap and a.kind != "W")
                for oi, op in _layer_ops_backward(layer):
                    if pair and oi == pair[1]:
                        continue
                    if pair and oi == pair[0]:
                        backward_beside(li, pair, layer)
                        continue
                    backward_op(li, oi, op, layer.name)
                end_layer()
        if not chain:  # an empty stage still needs a task to hang edges on
            comp(0.0, "forward" if a.kind == "F" else "backward", "empty")
        exit_ = chain[-1]
        comm_tails.extend(waits)
        if comm_tails:
            j = bld.add_task(0.0, cdev, "other", op="join", stage=a.stage, chunk=chunk, mb=a.mb, rank=rank)
            bld.add_edge(exit_, j)
            for t in comm_tails:
                bld.add_edge(t, j)
            exit_ = j
        return chain[0], exit_

    cache: dict[tuple[int, str, bool], tuple] = {}

    def emit_cached(bld: TaskGraphBuilder, a: Action, rank: int, chunk: int):
        if a == last_bwd.get(a.stage):
            return emit(bld, a, rank, chunk)
        key = (a.stage, a.kind, a in paired)
        hit = cache.get(key)
        if hit is None:
            start = bld.mark()
            entry, exit_ = emit(bld, a, rank, chunk)
            blk = bld.block(start)
            # a block of a few tasks copies no faster than it emits (coarse records): emit those
            cache[key] = (blk, entry - start[0], exit_ - start[0]) if blk.num_tasks >= 8 else ()
            return entry, exit_
        if not hit:
            return emit(bld, a, rank, chunk)
        blk, rel_entry, rel_exit = hit
        t0 = bld.add_block(blk, a.mb)
        return t0 + rel_entry, t0 + rel_exit

    def transfer(src_stage, dst_stage, kind, mb):
        pair = (schedule.stage_to_rank[src_stage], schedule.stage_to_rank[dst_stage])
        if pair in work.p2p_pairs:
            return work.p2p_pairs[pair]
        return work.p2p_fwd_s if kind == "F" else work.p2p_bwd_s

    b, tasks = lower_schedule(schedule, emit_cached if templates else emit, transfer, builder=b, overlap_handoff=overlap_handoff,
                              link_represents=work.represents, p2p_overlap=work.p2p_overlap,
                              concurrent_pairs=work.concurrent_pairs)

    n_sched = b.num_tasks  # the actions' tasks, then the transfers (taskgraph/order_hint.py)
    # Epilogue per rank: (non-overlapped) gradient reduction, optimizer step, parameter gather.
    for r in range(schedule.pp):
        stages = schedule.rank_stages[r]
        last = _last_task_of_rank(schedule, tasks, r)
        dpdev = b.device_index(f"rank{r}/dp")
        cdev = b.device_index(f"rank{r}/compute")
        if not work.overlap_grad_reduce:
            prev = last
            for s in stages:
                for bk in work.stages[s].buckets:
                    x = b.add_task(bk.reduce_s, dpdev, "dp-comm", op="dp-grad-reduce", stage=s,
                                   chunk=schedule.chunk_of(s), rank=r)
                    b.add_edge(prev, x)
                    prev = x
                    dp_tasks[r].append(x)
        opt_s = sum(work.stages[s].optimizer_s for s in stages)
        opt = b.add_task(opt_s, cdev, "optimizer", op="optimizer-step", rank=r)
        b.add_edge(last, opt)
        for x in dp_tasks[r]:
            b.add_edge(x, opt)
        gathers = [(s, bk) for s in stages for bk in work.stages[s].buckets if bk.gather_s > 0]
        if gathers and not work.overlap_param_gather:
            prev = opt
            for s, bk in gathers:
                x = b.add_task(bk.gather_s, dpdev, "dp-comm", op="dp-param-gather", stage=s,
                               chunk=schedule.chunk_of(s), rank=r)
                b.add_edge(prev, x)
                prev = x
        elif gathers:
            # Overlapped with the forward: each chunk's first forward waits for its own gathers.
            for s in stages:
                fa = first_fwd.get(s)
                for bk in reversed(work.stages[s].buckets):  # forward order = reverse bucket order
                    if bk.gather_s <= 0:
                        continue
                    x = b.add_task(bk.gather_s, dpdev, "dp-comm", op="dp-param-gather", stage=s,
                                   chunk=schedule.chunk_of(s), rank=r)
                    if fa is not None and bk is work.stages[s].buckets[-1]:
                        b.add_edge(x, tasks[(fa.stage, fa.mb, "F")][0])
    b.meta.update(work.meta)
    b.meta["represents"] = work.represents
    g = b.build()
    # no guess for concurrent pairs: their halves' tasks interleave on the rank's devices, so an
    # action's id order is not its devices' order (the check would refuse it after a wasted sweep)
    if not work.concurrent_pairs:
        g.order_hint = action_order(g, np.array([e for e, _ in tasks.values()], dtype=np.int64), n_sched)
    return g


def _last_task_of_rank(schedule: Schedule, tasks: dict, rank: int) -> int:
    order = schedule.orders[rank]
    entry = order[-1]
    a = getattr(entry, "sub_actions", (entry,))[-1]
    return tasks[(a.stage, a.mb, a.kind)][1]
