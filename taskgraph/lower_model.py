"""Operator-level lowering of a real model: one task per operator and pass, with TP/CP/EP
collectives, recompute, pipeline transfers, bucketed data-parallel gradient reduction, the
optimizer step and parameter gathers.

Inputs are cost records (:class:`taskgraph.work.StageWork`, the contract between costing and
lowering), so this module does not know how costs are computed (``taskgraph/costing.py`` builds them
from the operator graph, the cost model and the collectives). One :class:`_ActionEmitter` emits the
tasks of one action (a stage's pass on a microbatch), one method per kind of work; the per-rank
epilogue (gradient reduction, optimizer step, parameter gathers) follows the schedule's tasks.

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


def lower_model(schedule: Schedule, work: IterationWork, *, overlap_handoff: str = "pair-end",
                templates: bool = True) -> TaskGraph:
    """Lower ``schedule`` with operator-level tasks from ``work`` into a task graph.

    ``templates`` (default): each (stage, pass kind) is emitted task by task once, recorded as a
    block (:meth:`TaskGraphBuilder.block`) and replicated for the other microbatches with array
    copies (:meth:`TaskGraphBuilder.add_block`) -- every microbatch of a stage runs the same operator
    chain, so the copies are exactly what emitting them again would add (the same arrays, same
    numbering; ``tests/test_lower_templates.py``). ``templates=False`` emits every task through
    ``add_task``: the reference path. The stage's last backward is always emitted (it also carries
    the overlapped gradient-reduction buckets). Invariant the templates rely on:
    :class:`_ActionEmitter` depends on the action only through (stage, kind) -- plus "is it the
    last backward" -- so anything made to vary per microbatch (stragglers, per-microbatch jitter)
    must join the cache key in :meth:`_Lowering.emit_cached` or be applied to the built graph's
    ``duration`` column."""
    if len(work.stages) != schedule.num_stages:
        raise ValueError(f"{len(work.stages)} stage work records for {schedule.num_stages} stages")
    low = _Lowering(schedule, work)
    b, tasks = lower_schedule(schedule, low.emit_cached if templates else low.emit, low.transfer,
                              builder=low.builder, overlap_handoff=overlap_handoff,
                              link_represents=work.represents, p2p_overlap=work.p2p_overlap,
                              concurrent_pairs=work.concurrent_pairs)

    n_sched = b.num_tasks  # the actions' tasks, then the transfers (taskgraph/order_hint.py)
    for r in range(schedule.pp):
        _epilogue(b, low, tasks, r)
    b.meta.update(work.meta)
    b.meta["represents"] = work.represents
    g = b.build()
    # no guess for concurrent pairs: their halves' tasks interleave on the rank's devices, so an
    # action's id order is not its devices' order (the check would refuse it after a wasted sweep)
    if not work.concurrent_pairs:
        g.order_hint = action_order(g, np.array([e for e, _ in tasks.values()], dtype=np.int64), n_sched)
    return g


def _layer_ops_backward(layer: LayerWork):
    return list(enumerate(layer.ops))[::-1]


def _first_and_last_actions(schedule: Schedule) -> tuple[dict[int, Action], dict[int, Action]]:
    """(first forward, last backward-ish action) of every stage on its rank; backward-ish: B or W,
    I when the stage has no W."""
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
    return first_fwd, last_bwd


class _Lowering:
    """What the actions of one lowering share: the builder with every rank's devices, each stage's
    first forward and last backward, the concurrent pairs' halves, the DP reduction tasks per rank
    and the template cache; ``emit`` / ``emit_cached`` / ``transfer`` are what
    :func:`taskgraph.lower_pipeline.lower_schedule` calls."""

    def __init__(self, schedule: Schedule, work: IterationWork):
        self.schedule, self.work = schedule, work
        b = TaskGraphBuilder()
        for r in range(schedule.pp):
            for stream in ("compute", "tp", "dp"):
                b.add_device(Device(f"rank{r}/{stream}", r, stream, work.represents))
        self.builder = b
        self.first_fwd, self.last_bwd = _first_and_last_actions(schedule)
        self.dp_tasks: dict[int, list[int]] = {r: [] for r in range(schedule.pp)}
        # actions that are halves of a concurrent overlapped pair: their compute shares the SMs with the
        # communication kernels (DeepSeek-V3 Section 3.2.1: 20 of 132 SMs), so it runs pair_compute_scale x longer
        self.paired = ({a for order in schedule.orders for e in order for a in getattr(e, "sub_actions", ())}
                       if work.concurrent_pairs else set())
        self.cache: dict[tuple[int, str, bool], tuple] = {}

    def emit(self, bld: TaskGraphBuilder, a: Action, rank: int, chunk: int) -> tuple[int, int]:
        """(entry task, exit task) of action ``a``, emitted task by task."""
        return _ActionEmitter(self, bld, a, rank, chunk).run()

    def emit_cached(self, bld: TaskGraphBuilder, a: Action, rank: int, chunk: int) -> tuple[int, int]:
        """:meth:`emit` through the template cache, keyed by (stage, kind, half of a pair)."""
        if a == self.last_bwd.get(a.stage):
            return self.emit(bld, a, rank, chunk)
        key = (a.stage, a.kind, a in self.paired)
        hit = self.cache.get(key)
        if hit is None:
            start = bld.mark()
            entry, exit_ = self.emit(bld, a, rank, chunk)
            blk = bld.block(start)
            # a block of a few tasks copies no faster than it emits (coarse records): emit those
            self.cache[key] = (blk, entry - start[0], exit_ - start[0]) if blk.num_tasks >= 8 else ()
            return entry, exit_
        if not hit:
            return self.emit(bld, a, rank, chunk)
        blk, rel_entry, rel_exit = hit
        t0 = bld.add_block(blk, a.mb)
        return t0 + rel_entry, t0 + rel_exit

    def transfer(self, src_stage, dst_stage, kind, mb):
        """Seconds of a pipeline transfer: the rank pair's own time, else the direction's."""
        work = self.work
        pair = (self.schedule.stage_to_rank[src_stage], self.schedule.stage_to_rank[dst_stage])
        if pair in work.p2p_pairs:
            return work.p2p_pairs[pair]
        return work.p2p_fwd_s if kind == "F" else work.p2p_bwd_s


class _ActionEmitter:
    """The tasks of one action on its rank: a chain of compute and blocking collectives, the
    asynchronous collectives the next chained task waits for (``waits``), tasks the action's exit
    waits for besides the chain (``comm_tails``: a join), and the layer's gathered parameter buffers
    freed when its pass ends."""

    __slots__ = ("a", "bld", "buckets_here", "cdev", "chain", "chunk", "comm_tails", "dp_tasks",
                 "is_last_bwd", "layer_buffers", "mb", "rank", "scale", "st", "stage", "waits", "work")

    def __init__(self, low: _Lowering, bld: TaskGraphBuilder, a: Action, rank: int, chunk: int):
        work = low.work
        self.work, self.bld, self.a, self.rank, self.chunk = work, bld, a, rank, chunk
        self.stage, self.mb = a.stage, a.mb
        self.st = work.stages[a.stage]
        self.scale = work.pair_compute_scale if a in low.paired else 1.0
        self.cdev = bld.device_index(f"rank{rank}/compute")
        self.chain: list[int] = []
        self.comm_tails: list[int] = []
        self.waits: list[int] = []   # asynchronous collectives the next chained task waits for
        self.layer_buffers: list[float] = []
        self.is_last_bwd = a == low.last_bwd.get(a.stage)
        # the DP buckets run during this action (overlap_grad_reduce on the stage's last backward)
        self.buckets_here = self.is_last_bwd and work.overlap_grad_reduce
        self.dp_tasks = low.dp_tasks[rank]

    def run(self) -> tuple[int, int]:
        """Emit the action; (entry task, exit task)."""
        kind = self.a.kind
        if kind == "F":
            self.forward()
        else:
            self.backward()
        chain = self.chain
        if not chain:  # an empty stage still needs a task to hang edges on
            self.compute(0.0, "forward" if kind == "F" else "backward", "empty")
        exit_ = chain[-1]
        self.comm_tails.extend(self.waits)
        if self.comm_tails:
            bld = self.bld
            j = bld.add_task(0.0, self.cdev, "other", op="join", stage=self.stage, chunk=self.chunk,
                             mb=self.mb, rank=self.rank)
            bld.add_edge(exit_, j)
            for t in self.comm_tails:
                bld.add_edge(t, j)
            exit_ = j
        return chain[0], exit_

    # -- the chain --------------------------------------------------------------------------------

    def after_chain(self, t: int, consume: bool = True):
        """Task ``t`` follows the chain's last task and the pending asynchronous collectives
        (``consume``: they are then no longer pending)."""
        if self.chain:
            self.bld.add_edge(self.chain[-1], t)
        waits = self.waits
        if waits:
            for w in waits:
                self.bld.add_edge(w, t)
            if consume:
                waits.clear()

    def compute(self, dur, cat, op, mem_end=0.0, free=(0.0, 0.0)) -> int:
        """A compute task; ``mem_end`` bytes allocated at its end (activations, or recompute
        temporaries for recompute tasks); ``free`` = (activation, temporary) bytes freed at its end."""
        bld = self.bld
        t = bld.add_task(dur * self.scale, self.cdev, cat, op=op, stage=self.stage, chunk=self.chunk,
                         mb=self.mb, rank=self.rank)
        self.after_chain(t)
        self.chain.append(t)
        if mem_end:
            bld.add_memory(t, mem_end, at_end=True, kind="temporary" if cat == "recompute" else "activation")
        if free[0]:
            bld.add_memory(t, -free[0], at_end=True, kind="activation")
        if free[1]:
            bld.add_memory(t, -free[1], at_end=True, kind="temporary")
        return t

    def comms(self, items, side: bool = False):
        """Collectives in order; ``side``: asynchronous ones, not chained (returned instead)."""
        if not items:
            return ()
        out = []
        if side and not self.chain:  # the action's entry task carries its incoming edges
            self.compute(0.0, "other", "start")
        bld, rank, represents = self.bld, self.rank, self.work.represents
        for c in items:
            dev = bld.add_device(Device(f"rank{rank}/{c.stream}", rank, c.stream, represents))
            t = bld.add_task(c.seconds, dev, c.category, op=c.op, stage=self.stage, chunk=self.chunk,
                             mb=self.mb, rank=rank)
            self.after_chain(t, consume=not side)
            if side:
                out.append(t)
                continue
            if c.mem_bytes:
                bld.add_memory(t, c.mem_bytes, at_end=True, kind="parameter")
                self.layer_buffers.append(c.mem_bytes)
            self.chain.append(t)
        return out

    def end_layer(self):
        """Free the layer's gathered buffers when its pass (last task so far) ends."""
        if self.layer_buffers and self.chain:
            self.bld.add_memory(self.chain[-1], -sum(self.layer_buffers), at_end=True, kind="parameter")
        self.layer_buffers.clear()

    def bucket_after(self, t: int, li: int, oi: int):
        """The DP buckets that close at (layer ``li``, op ``oi``) reduce after task ``t``
        (``overlap_grad_reduce``, on the stage's last backward only)."""
        if not self.buckets_here:
            return
        bld = self.bld
        for bk in self.st.buckets:
            if bk.layer == li and bk.op == oi:
                d = bld.device_index(f"rank{self.rank}/dp")
                x = bld.add_task(bk.reduce_s, d, "dp-comm", op="dp-grad-reduce", stage=self.stage,
                                 chunk=self.chunk, rank=self.rank)
                bld.add_edge(t, x)
                self.dp_tasks.append(x)

    # -- forward ----------------------------------------------------------------------------------

    def forward(self):
        """An F action: every layer's forward, in order."""
        for layer in self.st.layers:
            self.forward_ops(layer, layer.ops, "forward", False)
            self.end_layer()

    def forward_ops(self, layer: LayerWork, ops, cat: str, rec: bool):
        """The forward of ``ops`` of ``layer`` (all of them, or a full recompute's), as ``cat``;
        ``rec``: they keep their recompute bytes, not their saved bytes."""
        pair = shared_pair(layer, self.work.shared_expert_overlap)
        for oi, op in enumerate(ops):
            if pair and oi == pair[1]:
                continue
            if pair and oi == pair[0]:
                self.forward_beside(op, ops[pair[1]], cat, layer.name, rec)
                continue
            self.comms(op.fwd_pre)
            self.compute(op.fwd, cat, f"{layer.name}.{op.name}", mem_end=op.recompute_bytes if rec else op.saved_bytes)
            self.comms(op.fwd_post)

    def forward_beside(self, e: OpCost, sh: OpCost, cat: str, lname: str, rec: bool):
        """The experts' forward with the shared experts beside its all-to-alls (shared_pair):
        fc1 + activation beside the dispatch, fc2 beside the combine; the SP all-gather before
        and the reduce-scatter after run on the shared experts' stream in order (blocking here)."""
        r = self.work.shared_fc1_share
        keep = (lambda o: o.recompute_bytes) if rec else (lambda o: o.saved_bytes)
        self.comms(sh.fwd_pre)
        xs = self.comms(e.fwd_pre[:1], side=True)
        self.compute(sh.fwd * r, cat, f"{lname}.{sh.name}.fc1")
        self.waits.extend(xs)
        self.comms(e.fwd_pre[1:])
        self.compute(e.fwd, cat, f"{lname}.{e.name}", mem_end=keep(e))
        self.comms(e.fwd_post[:-1])
        ys = self.comms(e.fwd_post[-1:], side=True)
        self.compute(sh.fwd * (1.0 - r), cat, f"{lname}.{sh.name}.fc2", mem_end=keep(sh))
        self.waits.extend(ys)
        self.comms(sh.fwd_post)

    # -- backward ---------------------------------------------------------------------------------

    def backward(self):
        """A B, I or W action: every layer in reverse order, each after its recomputation."""
        kind = self.a.kind
        for li in range(len(self.st.layers) - 1, -1, -1):
            layer = self.st.layers[li]
            if kind in ("B", "I") and layer.recompute != "none":
                self.recompute(layer)
            pair = shared_pair(layer, self.work.shared_expert_overlap and kind != "W")
            for oi, op in _layer_ops_backward(layer):
                if pair and oi == pair[1]:
                    continue
                if pair and oi == pair[0]:
                    self.backward_beside(li, pair, layer)
                    continue
                self.backward_op(li, oi, op, layer.name)
            self.end_layer()

    def recompute(self, layer: LayerWork):
        """The layer's recomputation before its backward (``full`` or ``selective`` policy)."""
        ops = [op for op in layer.ops if layer.recompute == "full" or op.selective]
        if not ops:
            return
        if layer.recompute == "full":
            # full recompute re-runs the layer forward, collectives (and overlap) included
            self.forward_ops(layer, ops, "recompute", True)
        else:
            self.compute(sum(op.fwd for op in ops), "recompute", f"{layer.name}.selective",
                         mem_end=sum(op.recompute_bytes for op in ops))

    def backward_op(self, li: int, oi: int, op: OpCost, lname: str):
        """One operator's backward pass (B: dgrad then wgrad; I: dgrad; W: wgrad)."""
        kind = self.a.kind
        with_w = kind == "B"
        name = f"{lname}.{op.name}"
        held = (op.saved_bytes, op.recompute_bytes)
        has_w = op.bwd_weight > 0
        # the task the DP buckets follow carries the coarse record's slowdown by them (OpCost)
        x = op.last_bwd_extra if (op.last_bwd_extra and self.buckets_here) else 0.0
        if kind == "W":
            if has_w:
                t = self.compute(op.bwd_weight + x, "backward-weight", name + ".wgrad", free=held)
                self.bucket_after(t, li, oi)
            return
        # B: dgrad then wgrad, both "backward"; I: dgrad only, W comes later.
        cat, dname = ("backward" if with_w else "backward-input"), name + (".dgrad" if has_w else "")
        pre, early, post, late = _backward_comms(op, with_w, has_w)
        self.comms(pre)
        xs = self.comms(early, side=True)
        t = dgrad = self.compute(op.bwd_input + (0.0 if has_w else x), cat, dname,
                                 free=(0.0, 0.0) if has_w else held)
        self.waits.extend(xs)
        self.comms(post)
        ys = self.comms(late, side=True)
        if with_w and has_w and self.work.delay_wgrad:
            t = self.delayed_wgrad(dgrad, op, name, held, x)
        elif with_w and has_w:
            t = self.compute(op.bwd_weight - op.wgrad_overlap + x, "backward", name + ".wgrad", free=held)
        self.waits.extend(ys)
        if with_w or not has_w:
            self.bucket_after(t, li, oi)

    def delayed_wgrad(self, dgrad: int, op: OpCost, name: str, held: tuple, x: float) -> int:
        """Megatron-LM --delay-wgrad-compute (model_chunk_schedule_plan.py
        TransformerLayerSchedulePlan.run: mlp.backward, then the dispatch backward on the
        communication stream beside mlp.backward_dw): the weight gradient waits for its input
        gradient only, so the collectives after the dgrad start at once, and what follows in the
        chain does not wait for it (the action's exit does: a join)."""
        bld = self.bld
        t = bld.add_task((op.bwd_weight - op.wgrad_overlap + x) * self.scale, self.cdev, "backward",
                         op=name + ".wgrad", stage=self.stage, chunk=self.chunk, mb=self.mb, rank=self.rank)
        bld.add_edge(dgrad, t)
        for m, kind in zip(held, ("activation", "temporary")):
            if m:
                bld.add_memory(t, -m, at_end=True, kind=kind)
        self.comm_tails.append(t)
        return t

    def backward_beside(self, li: int, pair: tuple, layer: LayerWork):
        """The experts' backward with the shared experts beside its all-to-alls, mirroring
        forward_beside: fc2's backward beside the combine's backward all-to-all, fc1's beside the
        dispatch's; the shared experts' TP collectives blocking on their stream (with the overlap
        Megatron-LM turns the linears' own TP communication off, shared_experts.py __init__)."""
        e, sh = layer.ops[pair[0]], layer.ops[pair[1]]
        r, with_w = self.work.shared_fc1_share, self.a.kind == "B"
        cat, name = ("backward" if with_w else "backward-input"), f"{layer.name}.{sh.name}"
        held = (sh.saved_bytes, sh.recompute_bytes)
        self.comms(sh.bwd_pre)
        xs = self.comms(e.bwd_pre[:1], side=True)
        self.compute(sh.bwd_input * (1.0 - r), cat, name + ".fc2.dgrad")
        if with_w:
            self.compute(sh.bwd_weight * (1.0 - r), "backward", name + ".fc2.wgrad")
        self.waits.extend(xs)
        self.backward_op(li, pair[0], replace(e, bwd_pre=e.bwd_pre[1:], bwd_post=e.bwd_post[:-1]), layer.name)
        ys = self.comms(e.bwd_post[-1:], side=True)
        t = self.compute(sh.bwd_input * r, cat, name + ".fc1.dgrad")
        if with_w:
            t = self.compute(sh.bwd_weight * r, "backward", name + ".fc1.wgrad", free=held)
        self.waits.extend(ys)
        self.comms(sh.bwd_post)
        if with_w:
            self.bucket_after(t, li, pair[1])


def _backward_comms(op: OpCost, with_w: bool, has_w: bool):
    """(pre, early, post, late) collectives of an operator's backward: blocking before the dgrad,
    beside the dgrad, blocking after it, beside the wgrad. The asynchronous column-parallel
    collectives (module docstring): the all-gather of the saved input beside dgrad; dX's reduction
    beside wgrad (B only)."""
    if has_w and any(c.overlaps for c in op.bwd_pre + op.bwd_post):
        pre = [c for c in op.bwd_pre if c.overlaps != "dgrad"]
        early = [c for c in op.bwd_pre if c.overlaps == "dgrad"]
        post = [c for c in op.bwd_post if not (with_w and c.overlaps == "wgrad")]
        late = [c for c in op.bwd_post if with_w and c.overlaps == "wgrad"]
        return pre, early, post, late
    return op.bwd_pre, (), op.bwd_post, ()


# -- the per-rank epilogue: (non-overlapped) gradient reduction, optimizer step, parameter gather --

def _epilogue(b: TaskGraphBuilder, low: _Lowering, tasks: dict, r: int):
    """Rank ``r``'s work after its last action: the gradient buckets (when not overlapped), the
    optimizer step after them and the rank's last task, then the parameter gathers."""
    schedule, work = low.schedule, low.work
    stages = schedule.rank_stages[r]
    last = _last_task_of_rank(schedule, tasks, r)
    dpdev = b.device_index(f"rank{r}/dp")
    cdev = b.device_index(f"rank{r}/compute")
    dp_tasks = low.dp_tasks[r]
    if not work.overlap_grad_reduce:
        prev = last
        for s in stages:
            for bk in work.stages[s].buckets:
                x = b.add_task(bk.reduce_s, dpdev, "dp-comm", op="dp-grad-reduce", stage=s,
                               chunk=schedule.chunk_of(s), rank=r)
                b.add_edge(prev, x)
                prev = x
                dp_tasks.append(x)
    opt_s = sum(work.stages[s].optimizer_s for s in stages)
    opt = b.add_task(opt_s, cdev, "optimizer", op="optimizer-step", rank=r)
    b.add_edge(last, opt)
    for x in dp_tasks:
        b.add_edge(x, opt)
    _param_gathers(b, low, tasks, r, opt, dpdev)


def _param_gathers(b: TaskGraphBuilder, low: _Lowering, tasks: dict, r: int, opt: int, dpdev: int):
    """Rank ``r``'s parameter all-gathers (distributed optimizer): after the optimizer step, or
    overlapped with the forward -- each chunk's first forward waits for its own gathers."""
    schedule, work = low.schedule, low.work
    stages = schedule.rank_stages[r]
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
            fa = low.first_fwd.get(s)
            for bk in reversed(work.stages[s].buckets):  # forward order = reverse bucket order
                if bk.gather_s <= 0:
                    continue
                x = b.add_task(bk.gather_s, dpdev, "dp-comm", op="dp-param-gather", stage=s,
                               chunk=schedule.chunk_of(s), rank=r)
                if fa is not None and bk is work.stages[s].buckets[-1]:
                    b.add_edge(x, tasks[(fa.stage, fa.mb, "F")][0])


def _last_task_of_rank(schedule: Schedule, tasks: dict, rank: int) -> int:
    order = schedule.orders[rank]
    entry = order[-1]
    a = getattr(entry, "sub_actions", (entry,))[-1]
    return tasks[(a.stage, a.mb, a.kind)][1]
