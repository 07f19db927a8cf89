"""Vectorized lowering of a schedule with *coarse* cost records (``taskgraph/coarse.py``).

:func:`coarse_layout` + :func:`graph_from_layout` return the same :class:`~taskgraph.graph.TaskGraph`
as ``lower_model(schedule, coarsen(work))`` -- the same task ids, devices, categories, keys, operator
names, successor lists (in the same order), memory events and meta -- built with numpy instead of
one ``TaskGraphBuilder`` call per task. Identical arrays give identical simulations.

How the generic path numbers tasks (``taskgraph/lower_pipeline.py`` + ``lower_model.py``), which is
what this module reproduces:

1. *emission*: ranks in order, each rank's actions in program order (an ``Overlap`` pair expands to
   its forward then its backward half). A coarse stage is one operator, so an action emits
   F -> 1 task; B -> dgrad + wgrad (only one task when the stage has no weight gradient);
   I -> 1; W -> 1 (an ``empty`` task when the stage has no weight gradient); the last backward of a
   stage (with ``overlap_grad_reduce``) is followed by one ``dp-grad-reduce`` task per bucket.
2. *transfers*: actions in the same order; one ``pp-send`` task on link ``a->b`` for every data
   dependency that crosses ranks (links are numbered as they first appear; its time is
   ``work.p2p_pairs[(a, b)]`` when given); with blocking p2p (``work.p2p_overlap`` false) the
   sender's next action also waits for the transfer.
3. *epilogue*, per rank: non-overlapped gradient reductions, the optimizer step, parameter gathers.

The structure depends on the schedule and on a small *shape* of the work (which stages have a weight
gradient, bucket counts, which buckets gather parameters, which stages keep activations, the overlap
and blocking-p2p flags); durations and bytes are looked up per call. Structures are cached on the
schedule object (within a global task budget), so re-lowering a schedule with other costs (a
strategy sweep) only gathers numbers.

Anything this fast path does not cover (operator-level work, malformed schedules: missing or
duplicated actions, actions on the wrong rank, empty ranks, deadlocks) raises :class:`NotCoarse`
from :func:`coarse_layout`. Which lowering runs is decided in one place,
``simulator.engine.dispatch`` (``lower`` / ``run_iteration``): it falls back to the generic
lowering, which produces the usual errors.
"""
from __future__ import annotations

import weakref
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from strategies.actions import Schedule
from taskgraph.graph import CAT, Device, TaskGraph, csr_from_edges, kahn_order
from taskgraph.work import IterationWork

#: action kind codes
F, B, I, W = 0, 1, 2, 3
_KIND = {"F": F, "B": B, "I": I, "W": W}

# task roles: (category, operator-name template) -- "{n}" is the stage operator's "layer.op" name
_ROLES = (
    ("forward", "{n}"),                   # 0 F
    ("backward", "{n}.dgrad"),            # 1 B: input gradient
    ("backward", "{n}.wgrad"),            # 2 B: weight gradient
    ("backward", "{n}"),                  # 3 B of a stage without weight gradient
    ("backward-input", "{n}.dgrad"),      # 4 I
    ("backward-input", "{n}"),            # 5 I of a stage without weight gradient
    ("backward-weight", "{n}.wgrad"),     # 6 W
    ("backward", "empty"),                # 7 W of a stage without weight gradient
    ("dp-comm", "dp-grad-reduce"),        # 8 DP gradient bucket
    ("pp-send", "send-act"),              # 9 activation transfer
    ("pp-send", "send-grad"),             # 10 gradient transfer
    ("optimizer", "optimizer-step"),      # 11
    ("dp-comm", "dp-param-gather"),       # 12
)
R_F, R_BD, R_BW, R_B1, R_ID, R_I1, R_WW, R_WE, R_RED, R_TF, R_TB, R_OPT, R_GAT = range(13)
_ROLE_CAT = np.array([CAT[c] for c, _ in _ROLES], dtype=np.int8)
#: roles that allocate (+1) or free (-1) the stage's activations at their end
_ROLE_MEM = np.array([1, 0, -1, -1, 0, -1, -1, 0, 0, 0, 0, 0, 0], dtype=np.int64)

#: Layouts are cached per schedule (:func:`_cache`); all cached layouts together hold at most this
#: many tasks (about 300 bytes each with the timeline's sweep order), oldest evicted first.
_LAYOUT_TASK_BUDGET = 1_000_000
#: id(schedule) -> that schedule object's cache (action indexes and layouts); keyed by identity, not
#: by the frozen Schedule's value (hashing its orders costs a walk over every action), and an entry
#: leaves when its schedule is collected (weakref.finalize, run before the id can be reused)
_CACHES: dict[int, dict] = {}
_LAYOUTS: deque[tuple[dict, tuple, int]] = deque()  # (schedule cache, key, tasks), oldest first
_layout_tasks = 0


class NotCoarse(Exception):
    """The vectorized path does not apply (not coarse work, or a schedule the generic lowering
    rejects); use the generic lowering."""


# --------------------------------------------------------------------------------------------------
# Per-schedule action index


@dataclass
class ActionIndex:
    """The schedule's actions in emission order (rank-major, program order) as arrays."""

    stage: np.ndarray
    kind: np.ndarray
    mb: np.ndarray
    rank: np.ndarray
    chunk: np.ndarray
    prev: np.ndarray          # previous action of the same rank (-1 for the first)
    data_src: np.ndarray      # action whose output this one consumes across stages (-1: none)
    data_out: np.ndarray      # action whose exit releases that output (pair-end hand-off), -1: none
    cross: np.ndarray         # the data dependency crosses ranks (a transfer task)
    same_src: np.ndarray      # same-stage predecessor: F(s,m) for B/I, I(s,m) for W; -1: none
    last_bwd: np.ndarray      # per stage: the action after which DP buckets reduce (-1: none)
    first_fwd: np.ndarray     # per stage: first F action (-1: none)
    rank_last: np.ndarray     # per rank: its last action
    topo: np.ndarray          # a topological order of the actions
    num_stages: int
    pp: int


def _build_actions(schedule: Schedule, handoff: str) -> ActionIndex:
    s2r = schedule.stage_to_rank
    S, P = schedule.num_stages, schedule.pp
    if len(schedule.orders) != P:
        raise NotCoarse("orders and pp disagree")
    st: list[int] = []
    kd: list[int] = []
    mbs: list[int] = []
    rk: list[int] = []
    pr: list[int] = []
    npairs = 0
    try:
        for r, order in enumerate(schedule.orders):
            if not order:
                raise NotCoarse(f"rank {r} has no actions")
            for entry in order:
                subs = getattr(entry, "sub_actions", None)
                if subs is None:
                    if s2r[entry.stage] != r:
                        raise NotCoarse("action on the wrong rank")
                    st.append(entry.stage)
                    kd.append(_KIND[entry.kind])
                    mbs.append(entry.mb)
                    rk.append(r)
                    pr.append(-1)
                else:
                    for a in subs:
                        if s2r[a.stage] != r:
                            raise NotCoarse("action on the wrong rank")
                        st.append(a.stage)
                        kd.append(_KIND[a.kind])
                        mbs.append(a.mb)
                        rk.append(r)
                        pr.append(npairs)
                    npairs += 1
    except (IndexError, KeyError, AttributeError, TypeError) as exc:
        raise NotCoarse(str(exc)) from None
    stage = np.asarray(st, dtype=np.int64)
    kind = np.asarray(kd, dtype=np.int64)
    mb = np.asarray(mbs, dtype=np.int64)
    rank = np.asarray(rk, dtype=np.int64)
    pair = np.asarray(pr, dtype=np.int64)
    A = stage.size
    if stage.min() < 0 or mb.min() < 0:
        raise NotCoarse("negative stage or microbatch")
    M = int(mb.max()) + 1
    code = (stage * M + mb) * 4 + kind
    lut = np.full(S * M * 4, -1, dtype=np.int64)
    lut[code] = np.arange(A)
    if np.count_nonzero(lut >= 0) != A:
        raise NotCoarse("an action appears twice")

    def look(s, m, k):
        ok = (s >= 0) & (s < S)
        return np.where(ok, lut[(np.clip(s, 0, S - 1) * M + m) * 4 + k], -1)

    ar = np.arange(A)
    first = np.ones(A, dtype=bool)
    first[1:] = rank[1:] != rank[:-1]
    prev = np.where(first, -1, ar - 1)

    isF, isB, isI, isW = kind == F, kind == B, kind == I, kind == W
    isBI = isB | isI
    data_src = np.full(A, -1, dtype=np.int64)
    # first / last stages of each pipeline segment (Schedule.segments: DualPipe's two directions)
    seg_first = np.array([schedule.is_first_stage(x) for x in range(S)], dtype=bool)
    seg_last = np.array([schedule.is_last_stage(x) for x in range(S)], dtype=bool)
    m = isF & ~seg_first[stage]
    src = look(stage - 1, mb, F)
    if np.any(m & (src < 0)):
        raise NotCoarse("missing forward")
    data_src[m] = src[m]
    m = isBI & ~seg_last[stage]
    sb, si = look(stage + 1, mb, B), look(stage + 1, mb, I)
    src = np.where(sb >= 0, sb, si)
    if np.any(m & (src < 0)):
        raise NotCoarse("missing backward")
    data_src[m] = src[m]
    fsame, isame = look(stage, mb, F), look(stage, mb, I)
    if np.any(isBI & (fsame < 0)) or np.any(isW & (isame < 0)):
        raise NotCoarse("missing same-stage predecessor")
    same_src = np.where(isBI, fsame, np.where(isW, isame, -1))

    out = ar.copy()
    if handoff == "pair-end" and npairs:
        inpair = pair >= 0
        pair_last = np.zeros(npairs, dtype=np.int64)
        np.maximum.at(pair_last, pair[inpair], ar[inpair])
        out[inpair] = pair_last[pair[inpair]]
    has_src = data_src >= 0
    data_out = np.where(has_src, out[np.maximum(data_src, 0)], -1)
    cross = has_src & (rank[np.maximum(data_src, 0)] != rank)

    has_w = np.zeros(S, dtype=bool)
    has_w[stage[isW]] = True
    cand = isB | isW | (isI & ~has_w[stage])
    last_bwd = np.full(S, -1, dtype=np.int64)
    np.maximum.at(last_bwd, stage[cand], ar[cand])
    first_fwd = np.full(S, A, dtype=np.int64)
    np.minimum.at(first_fwd, stage[isF], ar[isF])
    first_fwd[first_fwd == A] = -1
    rank_last = np.full(P, -1, dtype=np.int64)
    np.maximum.at(rank_last, rank, ar)

    topo = topo_order(A, prev, data_out, same_src)
    return ActionIndex(stage, kind, mb, rank, _stage_chunks(schedule)[stage], prev, data_src, data_out, cross, same_src,
                       last_bwd, first_fwd, rank_last, topo, S, P)


def topo_order(A: int, *preds: np.ndarray) -> np.ndarray:
    """Kahn's algorithm over the action graph (program order, data and same-stage edges)."""
    src = np.concatenate([p[p >= 0] for p in preds])
    dst = np.concatenate([np.flatnonzero(p >= 0) for p in preds])
    ptr, succ = csr_from_edges(A, src, dst)
    from taskgraph.compiled import compiled_kernel
    kahn = compiled_kernel("kahn_order", work=A * 0.5e-6)  # ~0.5 us per action in the Python loop
    if kahn is not None:  # the same loop compiled (optional extra ``fast``): the same order
        order = kahn(ptr, succ, np.bincount(dst, minlength=A))
    else:
        order = np.asarray(kahn_order(A, ptr, succ), dtype=np.int64)
    if order.size != A:
        raise NotCoarse("the schedule deadlocks")
    return order


def cached_schedule_ids() -> frozenset[int]:
    """``id()`` of every schedule object holding a cache now (an entry leaves with its schedule)."""
    return frozenset(_CACHES)


def _cache(schedule: Schedule) -> dict:
    """The cache of this schedule object (:data:`_CACHES`); the frozen Schedule itself is not written."""
    key = id(schedule)
    c = _CACHES.get(key)
    if c is None:
        c = _CACHES[key] = {}
        weakref.finalize(schedule, _CACHES.pop, key, None)
    return c


def action_index(schedule: Schedule, overlap_handoff: str = "pair-end") -> ActionIndex:
    """The (cached) :class:`ActionIndex` of ``schedule``; raises :class:`NotCoarse`."""
    c = _cache(schedule)
    key = ("actions", overlap_handoff)
    idx = c.get(key)
    if idx is None:
        idx = c[key] = _build_actions(schedule, overlap_handoff)
    return idx


# --------------------------------------------------------------------------------------------------
# Work shape and per-shape layout


def work_shape(work: IterationWork) -> tuple:
    """What of ``work`` changes the graph's structure; raises :class:`NotCoarse` for work that is not
    one operator per stage without collectives (i.e. not ``coarsen``'s output)."""
    names = None
    has_w, nb, gat, memf = [], [], [], []
    for st in work.stages:
        if len(st.layers) != 1 or len(st.layers[0].ops) != 1:
            raise NotCoarse("not one operator per stage")
        layer = st.layers[0]
        op = layer.ops[0]
        if layer.recompute != "none" or op.fwd_pre or op.fwd_post or op.bwd_pre or op.bwd_post or op.recompute_bytes:
            raise NotCoarse("operator with collectives or recompute")
        n = f"{layer.name}.{op.name}"
        if names is None:
            names = n
        elif n != names:
            raise NotCoarse("stage operators named differently")
        for bk in st.buckets:
            if bk.layer != 0 or bk.op != 0:
                raise NotCoarse("bucket not at the stage operator")
        has_w.append(op.bwd_weight > 0)
        nb.append(len(st.buckets))
        gat.append(tuple(bk.gather_s > 0 for bk in st.buckets))
        memf.append(bool(op.saved_bytes))
    return (names, tuple(has_w), tuple(nb), tuple(gat), tuple(memf), bool(work.overlap_grad_reduce),
            bool(work.overlap_param_gather), bool(getattr(work, "p2p_overlap", True)))


@dataclass
class Layout:
    """Task-level structure of one (schedule, hand-off, work shape): every array of the TaskGraph
    except durations and memory bytes, plus how to gather those from a work record."""

    n: int
    device: np.ndarray
    category: np.ndarray
    op: np.ndarray
    stage: np.ndarray
    chunk: np.ndarray
    mb: np.ndarray
    rank: np.ndarray
    src: np.ndarray             # edges in insertion order
    dst: np.ndarray
    succ_ptr: np.ndarray
    succ_idx: np.ndarray
    op_names: tuple
    links: tuple                # (a, b) of link devices in device order
    vidx: np.ndarray            # per task: index into the value table (see values())
    mem_task: np.ndarray
    mem_sign: np.ndarray        # +1 allocate, -1 free
    mem_stage: np.ndarray
    num_stages: int
    pp: int
    nbuckets: int
    schedule_meta: dict
    extra: dict = field(default_factory=dict)   # lazily built helpers (devices, solver order ...)

    def values(self, work: IterationWork) -> np.ndarray:
        """The value table durations index: F, I, W and B's wgrad (W less ``wgrad_overlap``) times
        per stage, 0, per stage the task its DP buckets follow in its last backward (its value plus
        ``last_bwd_extra``), bucket reduce times, bucket gather times (flattened per stage), optimizer time
        per rank, then per link the activation and the gradient transfer times (``work.p2p_pairs[(a, b)]`` when given, else
        ``p2p_fwd_s`` / ``p2p_bwd_s``, as ``lower_model``'s transfer function)."""
        S = self.num_stages
        ops = [st.layers[0].ops[0] for st in work.stages]
        vals = [o.fwd for o in ops]
        vals += [o.bwd_input for o in ops]
        vals += [o.bwd_weight for o in ops]
        vals += [o.bwd_weight - o.wgrad_overlap for o in ops]
        vals.append(0.0)
        # the stage's last backward-ish task before its DP buckets: its own value plus the slowdown by
        # them (OpCost.last_bwd_extra; lower_model adds it to the same task)
        src = self.extra["last_bwd_value"]
        vals += [vals[int(src[i])] + (o.last_bwd_extra if self.extra["ogr"] else 0.0) for i, o in enumerate(ops)]
        vals += [bk.reduce_s for st in work.stages for bk in st.buckets]
        vals += [bk.gather_s for st in work.stages for bk in st.buckets]
        s2r = self.extra["stage_to_rank"]
        for r in range(self.pp):
            vals.append(sum(work.stages[s].optimizer_s for s in range(S) if s2r[s] == r))
        pairs = getattr(work, "p2p_pairs", None) or {}
        for link in self.links:
            t = pairs.get(link)
            vals += [work.p2p_fwd_s, work.p2p_bwd_s] if t is None else [t, t]
        return np.asarray(vals, dtype=np.float64)

    def durations(self, work: IterationWork) -> np.ndarray:
        return self.values(work)[self.vidx]

    def memory_bytes(self, work: IterationWork) -> np.ndarray:
        saved = np.asarray([float(st.layers[0].ops[0].saved_bytes) for st in work.stages], dtype=np.float64)
        return np.where(self.mem_sign > 0, saved[self.mem_stage], -saved[self.mem_stage])

    def devices(self, represents: int) -> tuple[Device, ...]:
        key = ("devices", represents)
        d = self.extra.get(key)
        if d is None:
            d = tuple(Device(f"rank{r}/{s}", r, s, represents) for r in range(self.pp) for s in ("compute", "tp", "dp"))
            d += tuple(Device(f"link {a}->{b}", a, "link", represents) for a, b in self.links)
            self.extra[key] = d
        return d


def coarse_layout(schedule: Schedule, work: IterationWork, overlap_handoff: str = "pair-end") -> Layout:
    """The (cached) :class:`Layout` of ``schedule`` with coarse ``work``; raises :class:`NotCoarse`."""
    if overlap_handoff not in ("pair-end", "each"):
        raise NotCoarse("unknown hand-off")
    if len(work.stages) != schedule.num_stages:
        raise NotCoarse("stage count mismatch")
    if work.concurrent_pairs:  # concurrent F&B halves: lower_model's per-task path (join tasks)
        raise NotCoarse("concurrent pairs")
    shape = work_shape(work)
    c = _cache(schedule)
    key = ("layout", overlap_handoff, shape)
    lay = c.get(key)
    if lay is None:
        lay = _build_layout(schedule, action_index(schedule, overlap_handoff), shape)
        _remember(c, key, lay)
    return lay


def _remember(c: dict, key: tuple, lay: Layout) -> None:
    global _layout_tasks
    c[key] = lay
    _LAYOUTS.append((c, key, lay.n))
    _layout_tasks += lay.n
    while _layout_tasks > _LAYOUT_TASK_BUDGET and len(_LAYOUTS) > 1:
        oc, ok, n = _LAYOUTS.popleft()
        _layout_tasks -= n
        oc.pop(ok, None)


def clear_layout_cache() -> None:
    """Drop every cached layout (their schedules keep only the small action indexes)."""
    global _layout_tasks
    while _LAYOUTS:
        oc, ok, _ = _LAYOUTS.popleft()
        oc.pop(ok, None)
    _layout_tasks = 0


def _segments(counts: np.ndarray):
    """(owner, local index, offsets) of a concatenation of ``counts[i]`` items per owner i."""
    off = np.zeros(counts.size, dtype=np.int64)
    if counts.size > 1:
        np.cumsum(counts[:-1], out=off[1:])
    total = int(counts.sum())
    owner = np.repeat(np.arange(counts.size), counts)
    local = np.arange(total) - off[owner]
    return owner, local, off


@dataclass(frozen=True)
class _Slots:
    """Where each value sits in :meth:`Layout.values`' table (S stages, P ranks, NB buckets): F at
    ``[0, S)``, then I, W and B's wgrad per stage, one 0, the last backward's own slot per stage, the
    buckets' reduce and gather times, the optimizer per rank, two per link."""

    bwd_input: int              # I, and B's dgrad
    bwd_weight: int             # W's wgrad
    bwd_wgrad: int              # B's wgrad (W's less OpCost.wgrad_overlap)
    zero: int                   # the empty W of a stage without weight gradient
    last_bwd: int               # per stage: its last backward task before its DP buckets
    reduce: int                 # per bucket
    gather: int                 # per bucket
    optimizer: int              # per rank
    link: int                   # per link: activation, gradient
    bucket_offset: np.ndarray   # per stage: its first bucket among all stages' buckets
    nbuckets: int

    @staticmethod
    def of(S: int, P: int, nb_s: np.ndarray) -> _Slots:
        boff = np.zeros(S, dtype=np.int64)
        np.cumsum(nb_s[:-1], out=boff[1:])
        NB = int(nb_s.sum())
        ORED = 5 * S + 1
        return _Slots(S, 2 * S, 3 * S, 4 * S, 4 * S + 1, ORED, ORED + NB, ORED + 2 * NB, ORED + 2 * NB + P, boff, NB)


def _stage_chunks(schedule: Schedule) -> np.ndarray:
    """Per stage: its chunk on its rank (:meth:`strategies.actions.Schedule.chunk_of`)."""
    return np.asarray([schedule.chunk_of(s) for s in range(schedule.num_stages)], dtype=np.int64)


def _build_layout(schedule: Schedule, ax: ActionIndex, shape: tuple) -> Layout:
    """The :class:`Layout` of ``ax`` (the schedule's actions) for a work ``shape`` (:func:`work_shape`):
    the three phases of the module doc, then the task arrays, edges and memory events."""
    names, has_w_t, nb_t, gat_t, memf_t, ogr, opg, p2p_overlap = shape
    S, P = ax.num_stages, ax.pp
    chunk_of = _stage_chunks(schedule)
    nb_s = np.asarray(nb_t, dtype=np.int64)
    slots = _Slots.of(S, P, nb_s)
    em = _emission(ax, np.asarray(has_w_t, dtype=bool), nb_s, ogr, slots)
    xf = _transfers(ax, em.n)
    ep = _Epilogue(em.n + xf.dst_action.size, chunk_of, slots)
    _epilogue(ep, schedule, ax, em, (nb_t, gat_t, ogr, opg))
    n = ep.next_id
    src1, dst1 = _action_edges(ax, em)
    src2, dst2 = _data_edges(ax, em, xf, p2p_overlap)
    src = np.concatenate([src1, src2, np.asarray(ep.src, dtype=np.int64)])
    dst = np.concatenate([dst1, dst2, np.asarray(ep.dst, dtype=np.int64)])
    succ_ptr, succ_idx = csr_from_edges(n, src, dst)
    roles = np.concatenate([em.role, np.where(xf.fwd, R_TF, R_TB), np.asarray(ep.role, dtype=np.int64)])
    op, op_names = _op_codes(roles, names)
    # memory events (emission order): F allocates the stage's activations, the task that ends its backward frees them
    sign1 = _ROLE_MEM[em.role]
    mem_task = np.flatnonzero((sign1 != 0) & np.asarray(memf_t, dtype=bool)[em.stage])
    lay = Layout(n=n, device=_tasks(em.device, xf.device(P), ep.device).astype(np.int32),
                 category=_ROLE_CAT[roles], op=op,
                 stage=_tasks(em.stage, ax.stage[xf.src_action], ep.stage).astype(np.int32),
                 chunk=_tasks(chunk_of[em.stage], chunk_of[ax.stage[xf.src_action]], ep.chunk).astype(np.int32),
                 mb=np.concatenate([em.mb, ax.mb[xf.dst_action], np.full(n - ep.first_id, -1, dtype=np.int64)]
                                   ).astype(np.int32),
                 rank=_tasks(ax.rank[em.action], xf.src_rank, ep.rank).astype(np.int32),
                 src=src, dst=dst, succ_ptr=succ_ptr, succ_idx=succ_idx, op_names=op_names, links=xf.links,
                 vidx=_tasks(em.vidx, slots.link + 2 * xf.link + np.where(xf.fwd, 0, 1), ep.vidx),
                 mem_task=mem_task.astype(np.int32), mem_sign=sign1[mem_task], mem_stage=em.stage[mem_task],
                 num_stages=S, pp=P, nbuckets=slots.nbuckets,
                 schedule_meta=dict(schedule=schedule.name, pp=schedule.pp, vpp=schedule.vpp,
                                    microbatches=schedule.microbatches, num_stages=S))
    lay.extra.update(stage_to_rank=tuple(schedule.stage_to_rank), last_bwd_value=em.last_bwd_value, ogr=ogr,
                     entry=em.entry, exit=em.exit, actions=ax, n_phase1=em.n, phase1_action=em.action,
                     transfer_dst=xf.dst_action, roles=roles, overlap_param_gather=opg)
    return lay


def _tasks(phase1: np.ndarray, transfers: np.ndarray, epilogue: list) -> np.ndarray:
    """One per-task array: the three phases' values in task order."""
    return np.concatenate([phase1, transfers, np.asarray(epilogue, dtype=np.int64)])


@dataclass(frozen=True)
class _Emission:
    """Phase 1 (module doc): per action its compute tasks then (``overlap_grad_reduce``) its DP
    buckets; per task the action, role, value slot, device, stage and microbatch."""

    n: int                      # phase-1 tasks
    action: np.ndarray          # per task: its action
    local: np.ndarray           # per task: its index among its action's tasks
    role: np.ndarray
    vidx: np.ndarray
    device: np.ndarray
    stage: np.ndarray
    mb: np.ndarray
    base: np.ndarray            # per action: compute tasks (2 for a B split into dgrad -> wgrad)
    buckets: np.ndarray         # per action: DP bucket tasks after it
    split: np.ndarray           # per action: a B split into dgrad -> wgrad
    entry: np.ndarray           # per action: its first task
    exit: np.ndarray            # per action: its last compute task
    last_bwd_value: np.ndarray  # per stage: the value slot its last backward task adds last_bwd_extra to


def _emission(ax: ActionIndex, hw_s: np.ndarray, nb_s: np.ndarray, ogr: bool, slots: _Slots) -> _Emission:
    st, kd = ax.stage, ax.kind
    A = st.size
    hw = hw_s[st]
    isB = kd == B
    split = isB & hw
    base = np.where(split, 2, 1)
    called = isB | ((kd == I) & ~hw) | ((kd == W) & hw)
    is_lb = np.zeros(A, dtype=bool)
    is_lb[ax.last_bwd[ax.last_bwd >= 0]] = True
    bk = np.where(is_lb & called, nb_s[st], 0) if ogr else np.zeros(A, dtype=np.int64)
    cnt = base + bk
    aid, local, off = _segments(cnt)
    a_st = st[aid]
    is_comp = local < base[aid]
    role = _phase1_roles(kd[aid], hw[aid], is_comp, local)
    vtab = np.array([0, slots.bwd_input, slots.bwd_wgrad, slots.bwd_input, slots.bwd_input, slots.bwd_input,
                     slots.bwd_weight, slots.zero], dtype=np.int64)
    vidx = np.where(is_comp, vtab[np.minimum(role, 7)] + np.where(role == R_WE, 0, a_st),
                    slots.reduce + slots.bucket_offset[a_st] + (local - base[aid]))
    # the last compute task of each stage's last backward-ish action (what its buckets follow,
    # lower_model's bucket_after) reads its own slot: its plain value + OpCost.last_bwd_extra
    lb_task = is_comp & is_lb[aid] & called[aid] & (local == base[aid] - 1)
    last_bwd_value = np.full(ax.num_stages, slots.zero, dtype=np.int64)
    last_bwd_value[a_st[lb_task]] = vidx[lb_task]
    vidx = np.where(lb_task, slots.last_bwd + a_st, vidx)
    return _Emission(n=int(cnt.sum()), action=aid, local=local, role=role, vidx=vidx,
                     device=3 * ax.rank[aid] + np.where(is_comp, 0, 2), stage=a_st,
                     mb=np.where(is_comp, ax.mb[aid], -1), base=base, buckets=bk, split=split, entry=off,
                     exit=off + split, last_bwd_value=last_bwd_value)


def _phase1_roles(a_kd: np.ndarray, a_hw: np.ndarray, is_comp: np.ndarray, local: np.ndarray) -> np.ndarray:
    """Per phase-1 task its role (``_ROLES``) from its action's kind, whether the stage has a weight
    gradient, and the task's place in its action (compute tasks first, then buckets)."""
    role = np.full(local.size, R_RED, dtype=np.int64)
    role = np.where(is_comp & (a_kd == F), R_F, role)
    role = np.where(is_comp & (a_kd == B) & a_hw, np.where(local == 0, R_BD, R_BW), role)
    role = np.where(is_comp & (a_kd == B) & ~a_hw, R_B1, role)
    role = np.where(is_comp & (a_kd == I), np.where(a_hw, R_ID, R_I1), role)
    return np.where(is_comp & (a_kd == W), np.where(a_hw, R_WW, R_WE), role)


@dataclass(frozen=True)
class _Transfers:
    """Phase 2 (module doc): one transfer task per data dependency that crosses ranks, in action
    order, on the link of its (sender, receiver) ranks (links numbered as they first appear)."""

    dst_action: np.ndarray      # per transfer: the action that receives it
    src_action: np.ndarray      # per transfer: the action whose output it carries
    src_rank: np.ndarray
    link: np.ndarray            # per transfer: its link's number
    links: tuple                # (a, b) per link number
    fwd: np.ndarray             # per transfer: an activation (else a gradient)
    task_of_action: np.ndarray  # per action: the task id of the transfer it receives, -1: none

    def device(self, P: int) -> np.ndarray:
        return 3 * P + self.link


def _transfers(ax: ActionIndex, first_id: int) -> _Transfers:
    P = ax.pp
    X = np.flatnonzero(ax.cross)
    xsrc = ax.data_src[X]
    ra, rb = ax.rank[xsrc], ax.rank[X]
    lkey = ra * P + rb
    uk, first_i = np.unique(lkey, return_index=True)
    lorder = np.argsort(first_i, kind="stable")
    link_num = np.empty(uk.size, dtype=np.int64)
    link_num[lorder] = np.arange(uk.size)
    xfer_of = np.full(ax.stage.size, -1, dtype=np.int64)
    xfer_of[X] = first_id + np.arange(X.size)
    return _Transfers(dst_action=X, src_action=xsrc, src_rank=ra, link=link_num[np.searchsorted(uk, lkey)],
                      links=tuple((int(uk[i] // P), int(uk[i] % P)) for i in lorder), fwd=ax.kind[X] == F,
                      task_of_action=xfer_of)


class _Epilogue:
    """Phase 3 (module doc): tasks appended one by one (ids from ``first_id``) with their edges."""

    def __init__(self, first_id: int, chunk_of: np.ndarray, slots: _Slots):
        self.first_id = self.next_id = first_id
        self.chunk_of, self.slots = chunk_of, slots
        self.role, self.vidx, self.device, self.stage, self.chunk, self.rank = [], [], [], [], [], []
        self.src, self.dst = [], []

    def add(self, role: int, vidx: int, device: int, stage: int, chunk: int, rank: int) -> int:
        self.role.append(role)
        self.vidx.append(vidx)
        self.device.append(device)
        self.stage.append(stage)
        self.chunk.append(chunk)
        self.rank.append(rank)
        self.next_id += 1
        return self.next_id - 1

    def add_bucket(self, role: int, first_slot: int, stage: int, j: int, rank: int) -> int:
        """A reduce (``first_slot`` = slots.reduce) or gather of bucket ``j`` of ``stage`` on the
        rank's DP stream."""
        return self.add(role, first_slot + int(self.slots.bucket_offset[stage]) + j, 3 * rank + 2, stage,
                        int(self.chunk_of[stage]), rank)

    def edge(self, u: int, v: int) -> None:
        self.src.append(u)
        self.dst.append(v)


def _epilogue(ep: _Epilogue, schedule: Schedule, ax: ActionIndex, em: _Emission, flags: tuple) -> None:
    """Per rank (plain Python: a few hundred tasks): the DP gradient reductions chained after its last
    action (unless they overlapped the backward), the optimizer step after them, then the parameter
    gathers (chained after the step, or, overlapped, each stage's gathers last bucket first, the last
    bucket's before the stage's first forward)."""
    nb_t, gat_t, ogr, opg = flags
    slots = ep.slots
    bucket_tasks = np.flatnonzero(em.role == R_RED)
    bucket_rank = ax.rank[em.action[bucket_tasks]]
    for r in range(ax.pp):
        stages = schedule.rank_stages[r]
        last = int(em.exit[ax.rank_last[r]])
        if ogr:
            dp_tasks = bucket_tasks[bucket_rank == r].tolist()
        else:
            dp_tasks, prev = [], last
            for s in stages:
                for j in range(nb_t[s]):
                    x = ep.add_bucket(R_RED, slots.reduce, s, j, r)
                    ep.edge(prev, x)
                    prev = x
                    dp_tasks.append(x)
        opt = ep.add(R_OPT, slots.optimizer + r, 3 * r, -1, -1, r)
        for x in [last, *dp_tasks]:
            ep.edge(x, opt)
        if not opg:
            prev = opt
            for s in stages:
                for j in range(nb_t[s]):
                    if gat_t[s][j]:
                        x = ep.add_bucket(R_GAT, slots.gather, s, j, r)
                        ep.edge(prev, x)
                        prev = x
        else:
            for s in stages:
                fa = int(ax.first_fwd[s])
                for j in range(nb_t[s] - 1, -1, -1):
                    if gat_t[s][j]:
                        x = ep.add_bucket(R_GAT, slots.gather, s, j, r)
                        if fa >= 0 and j == nb_t[s] - 1:
                            ep.edge(x, int(em.entry[fa]))


def _op_codes(roles: np.ndarray, names: str) -> tuple[np.ndarray, tuple]:
    """Per task its operator-name code, names numbered as they first appear (``TaskGraphBuilder``'s
    op_code), and the names."""
    role_names = [t.format(n=names) for _, t in _ROLES]
    uniq_names: dict[str, int] = {}
    role_code = np.array([uniq_names.setdefault(nm, len(uniq_names)) for nm in role_names], dtype=np.int64)
    name_code = role_code[roles]
    used, first_at = np.unique(name_code, return_index=True)
    by_first = used[np.argsort(first_at, kind="stable")]
    remap = np.full(len(uniq_names), -1, dtype=np.int64)
    remap[by_first] = np.arange(by_first.size)
    inv_names = {v: k for k, v in uniq_names.items()}
    return remap[name_code].astype(np.int32), tuple(inv_names[int(c)] for c in by_first)


def _action_edges(ax: ActionIndex, em: _Emission) -> tuple[np.ndarray, np.ndarray]:
    """Phase-1 edges in insertion order, per action: dgrad -> wgrad, exit -> its bucket tasks, the
    previous action's exit -> its entry."""
    has_chain = em.split.astype(np.int64)
    has_prev = (ax.prev >= 0).astype(np.int64)
    bk = em.buckets
    eo, el, _ = _segments(has_chain + bk + has_prev)
    is_chain_e = (has_chain[eo] == 1) & (el == 0)
    bj = el - has_chain[eo]
    is_bucket_e = ~is_chain_e & (bj < bk[eo])
    entry, exit_ = em.entry, em.exit
    prev_exit = exit_[np.maximum(ax.prev[eo], 0)]
    src = np.where(is_chain_e, entry[eo], np.where(is_bucket_e, exit_[eo], prev_exit))
    dst = np.where(is_chain_e, entry[eo] + 1, np.where(is_bucket_e, entry[eo] + em.base[eo] + bj, entry[eo]))
    return src, dst


def _data_edges(ax: ActionIndex, em: _Emission, xf: _Transfers, p2p_overlap: bool) -> tuple[np.ndarray, np.ndarray]:
    """Phase-2 edges in insertion order, per action: the same-stage edge (B/I: F's exit, W: I's
    exit), then the data connection: exit -> entry on one rank, else exit -> transfer -> entry, plus
    (blocking p2p) transfer -> the entry of the sender's next action."""
    A = ax.stage.size
    rk = ax.rank
    entry, exit_ = em.entry, em.exit
    has_same = (ax.same_src >= 0).astype(np.int64)
    has_data = (ax.data_src >= 0).astype(np.int64)
    crs = ax.cross.astype(np.int64)
    sender = np.maximum(ax.data_out, 0)
    nxt_a = np.minimum(sender + 1, A - 1)
    has_next = (sender + 1 < A) & (rk[nxt_a] == rk[sender])
    blocks = (crs == 1) & has_next & (not p2p_overlap)
    eo, el, _ = _segments(has_same + has_data * (1 + crs + blocks))
    is_same_e = (has_same[eo] == 1) & (el == 0)
    k = el - has_same[eo]
    u = exit_[sender[eo]]
    t = xf.task_of_action[eo]
    v = entry[eo]
    c_ = crs[eo] == 1
    src = np.where(is_same_e, exit_[np.maximum(ax.same_src[eo], 0)], np.where(c_ & (k >= 1), t, u))
    dst = np.where(is_same_e, v, np.where(c_ & (k == 0), t, np.where(c_ & (k == 2), entry[nxt_a[eo]], v)))
    return src, dst


# --------------------------------------------------------------------------------------------------
# The graph


def graph_from_layout(lay: Layout, work: IterationWork) -> TaskGraph:
    """The TaskGraph of ``lay`` with ``work``'s durations and bytes (arrays copied from the cache, so
    callers may modify them)."""
    meta = dict(lay.schedule_meta)
    meta.update(work.meta)
    meta["represents"] = work.represents
    nm = lay.mem_task.size
    return TaskGraph(
        duration=lay.durations(work), device=lay.device.copy(), category=lay.category.copy(), op=lay.op.copy(),
        stage=lay.stage.copy(), chunk=lay.chunk.copy(), mb=lay.mb.copy(), rank=lay.rank.copy(),
        succ_ptr=lay.succ_ptr.copy(), succ_idx=lay.succ_idx.copy(), devices=lay.devices(work.represents),
        op_names=lay.op_names, mem_task=lay.mem_task.copy(), mem_bytes=lay.memory_bytes(work),
        mem_at_end=np.ones(nm, dtype=np.int8), mem_kind=np.zeros(nm, dtype=np.int8), meta=meta,
    )
