"""Lower a pipeline schedule into a task graph.

The skeleton is shared by every fidelity: for each rank, walk its action list in order; an *emitter*
adds the tasks of one action (one task in the coarse lowering, an operator chain with TP collectives
in the operator-level lowering) and returns its entry and exit tasks. The skeleton then adds

* program-order edges: exit of a rank's previous action -> entry of its next action (the schedule's
  per-rank order becomes data; the engine stays generic);
* data edges between stages: F(s-1, m) -> F(s, m); B/I(s+1, m) -> B/I(s, m); F(s, m) -> B/I(s, m);
  I(s, m) -> W(s, m). When the two stages live on different ranks, the activation (forward) or
  gradient (backward) crosses the network as a communication task on the link device
  ``link a->b`` (FIFO, so transfers on one link serialize but overlap compute);
* for overlapped F&B pairs (DualPipe), serial halves or concurrent ones (``concurrent_pairs``: both
  chains start together and a join closes the pair; the engine interleaves their tasks on the rank's
  compute and communication devices, so one half's all-to-all runs while the other computes), and
  the hand-off rule: ``"pair-end"`` (both halves' outputs leave
  when the pair finishes, as PyTorch's lowering does) or ``"each"`` (each half's output leaves as soon
  as that half finishes).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from strategies.actions import Action, Schedule
from strategies.errors import ScheduleError
from taskgraph.graph import Device, TaskGraph, TaskGraphBuilder

#: category of each action kind's compute task
KIND_CATEGORY = {"F": "forward", "B": "backward", "I": "backward-input", "W": "backward-weight"}


@dataclass(frozen=True)
class StageCosts:
    """Per-virtual-stage compute times (seconds) and the point-to-point transfer time.

    forward, backward: per stage, F and full-B times.
    backward_input, backward_weight: per stage, I and W times (split backward); B = I + W is not
        enforced (a fused backward can be cheaper than its halves).
    p2p: seconds per activation or gradient transfer between two ranks (0 = instantaneous).
    activation: per stage, bytes one microbatch's forward keeps until its backward (allocated at F's
        end, freed at B's end, or at W's end when the backward is split: W still needs the layer
        inputs, Qi et al. 2024 Section 2.1); empty = memory not modeled.
    """

    forward: tuple[float, ...]
    backward: tuple[float, ...]
    backward_input: tuple[float, ...]
    backward_weight: tuple[float, ...]
    p2p: float = 0.0
    activation: tuple[float, ...] = ()

    @classmethod
    def uniform(cls, num_stages: int, tf: float, tb: float, p2p: float = 0.0,
                ti: float | None = None, tw: float | None = None) -> StageCosts:
        """Same cost on every stage; I and W default to half of B each."""
        ti = tb / 2 if ti is None else ti
        tw = tb - ti if tw is None else tw
        return cls((tf,) * num_stages, (tb,) * num_stages, (ti,) * num_stages, (tw,) * num_stages, p2p)

    def time(self, action: Action) -> float:
        table = {"F": self.forward, "B": self.backward, "I": self.backward_input, "W": self.backward_weight}
        return table[action.kind][action.stage]


#: emitter(builder, action, rank, chunk) -> (entry task, exit task)
Emitter = Callable[[TaskGraphBuilder, Action, int, int], tuple[int, int]]
#: transfer(src_stage, dst_stage, kind "F"|"B", mb) -> seconds
TransferTime = Callable[[int, int, str, int], float]


def lower_schedule(schedule: Schedule, emit: Emitter, transfer: TransferTime, *,
                   builder: TaskGraphBuilder | None = None, overlap_handoff: str = "pair-end",
                   link_represents: int = 1, p2p_overlap: bool = True,
                   concurrent_pairs: bool = False) -> tuple[TaskGraphBuilder, dict]:
    """Add the tasks of ``schedule`` to ``builder`` (a new one by default).

    ``p2p_overlap``: transfers overlap the sender's next compute (True), or the sender's next action
    waits until its send has finished (False: Megatron-LM's default blocking
    ``send_forward_recv_backward`` style p2p, ``overlap_p2p_comm=False``).

    ``concurrent_pairs``: the two halves of an overlapped F&B pair both start after the rank's
    previous action and the next action waits for both (a zero-time ``pair-join`` task), so their
    tasks interleave on the rank's devices (DeepSeek-V3 Section 3.2.1); False: the halves run one
    after the other (PyTorch's lowering of ``OVERLAP_F_B`` without a custom callback).

    Returns the builder and a dict ``(stage, mb, kind) -> (entry, exit)`` for later passes
    (memory events, data-parallel epilogue).
    """
    if overlap_handoff not in ("pair-end", "each"):
        raise ScheduleError(f"overlap_handoff = {overlap_handoff!r} must be 'pair-end' or 'each'")
    b = builder or TaskGraphBuilder()
    for r in range(schedule.pp):
        b.add_device(Device(f"rank{r}/compute", r, "compute"))
    walk = _program_order(b, schedule, emit, concurrent_pairs)
    _stage_edges(b, schedule, walk, transfer, overlap_handoff, link_represents, p2p_overlap)
    b.meta.update(schedule=schedule.name, pp=schedule.pp, vpp=schedule.vpp, microbatches=schedule.microbatches,
                  num_stages=schedule.num_stages)
    return b, walk.tasks


@dataclass(frozen=True)
class _OrderWalk:
    """What walking the rank orders leaves for the data edges between stages.

    tasks: ``(stage, mb, kind) -> (entry, exit)`` of every action.
    next_entry: action -> entry task of its rank's next action.
    pair_exit: ``(rank, pair-id) ->`` exit of the pair's last action (the join when concurrent).
    pair_of: action -> ``(rank, pair-id)`` of the overlapped pair it belongs to.
    pair_last: ``(rank, pair-id) ->`` its last action.
    """

    tasks: dict
    next_entry: dict
    pair_exit: dict
    pair_of: dict
    pair_last: dict


def _program_order(b: TaskGraphBuilder, schedule: Schedule, emit: Emitter, concurrent_pairs: bool) -> _OrderWalk:
    """Emit each rank's actions in its order and add the program-order edges between them."""
    s2r = schedule.stage_to_rank
    tasks: dict[tuple[int, int, str], tuple[int, int]] = {}
    next_entry: dict[tuple[int, int, str], int] = {}  # action -> entry task of its rank's next action
    pair_exit: dict[tuple[int, int], int] = {}  # (rank, pair-id) -> exit of the pair's last action
    pair_of: dict[tuple[int, int, str], tuple[int, int]] = {}
    pair_last: dict[tuple[int, int], tuple[int, int, str]] = {}  # (rank, pair-id) -> its last action

    def add(r, action):
        if s2r[action.stage] != r:
            raise ScheduleError(f"rank {r} holds action {action} but stage {action.stage} lives on "
                                f"rank {s2r[action.stage]}")
        key = (action.stage, action.mb, action.kind)
        if key in tasks:
            raise ScheduleError(f"action {action} appears twice (rank {r})")
        tasks[key] = emit(b, action, r, schedule.chunk_of(action.stage))
        return key

    for r, order in enumerate(schedule.orders):
        prev_exit = -1
        pending: list = []  # actions whose rank-next entry is the next one added
        for i, entry in enumerate(order):
            subs = getattr(entry, "sub_actions", None)
            if subs is not None and concurrent_pairs:
                # DeepSeek-V3 Section 3.2.1: the two halves of an overlapped pair run together; both
                # start after the rank's previous action, and the next action waits for both (a join)
                keys = [add(r, a) for a in subs]
                for key in keys:
                    if prev_exit >= 0:
                        b.add_edge(prev_exit, tasks[key][0])
                for k0 in pending:
                    next_entry[k0] = tasks[keys[0]][0]
                j = b.add_task(0.0, b.device_index(f"rank{r}/compute"), "other", op="pair-join", stage=subs[-1].stage,
                               chunk=schedule.chunk_of(subs[-1].stage), mb=subs[-1].mb, rank=r)
                for key in keys:
                    b.add_edge(tasks[key][1], j)
                    pair_of[key] = (r, i)
                pair_exit[(r, i)] = j
                pair_last[(r, i)] = keys[-1]
                prev_exit, pending = j, keys
                continue
            for action in (subs if subs is not None else (entry,)):
                key = add(r, action)
                entry_t, exit_ = tasks[key]
                if prev_exit >= 0:
                    b.add_edge(prev_exit, entry_t)  # program order
                for k0 in pending:
                    next_entry[k0] = entry_t
                prev_exit, pending = exit_, [key]
                if subs is not None:
                    pair_exit[(r, i)] = exit_
                    pair_of[key] = (r, i)
                    pair_last[(r, i)] = key

    return _OrderWalk(tasks, next_entry, pair_exit, pair_of, pair_last)


def _stage_edges(b: TaskGraphBuilder, schedule: Schedule, walk: _OrderWalk, transfer: TransferTime,
                 overlap_handoff: str, link_represents: int, p2p_overlap: bool) -> None:
    """The data edges between stages, through a transfer task on a link when the stages' ranks differ."""
    s2r = schedule.stage_to_rank
    tasks, next_entry, pair_exit, pair_of, pair_last = (walk.tasks, walk.next_entry, walk.pair_exit, walk.pair_of,
                                                        walk.pair_last)

    def out_task(key):  # the task whose end releases this action's output
        if overlap_handoff == "pair-end" and key in pair_of:
            return pair_exit[pair_of[key]]
        return tasks[key][1]

    def need(key, what):
        if key not in tasks:
            s, m, k = key
            raise ScheduleError(f"schedule has no {k} action for stage {s} microbatch {m}, needed by {what}")
        return tasks[key]

    def connect(src_key, dst_key, kind):
        src_stage, dst_stage = src_key[0], dst_key[0]
        u = out_task(src_key)
        v = tasks[dst_key][0]
        ra, rb = s2r[src_stage], s2r[dst_stage]
        if ra == rb:
            b.add_edge(u, v)
            return
        dev = b.add_device(Device(f"link {ra}->{rb}", ra, "link", link_represents))
        t = b.add_task(transfer(src_stage, dst_stage, kind, dst_key[1]), dev, "pp-send",
                       op="send-act" if kind == "F" else "send-grad",
                       stage=src_stage, chunk=schedule.chunk_of(src_stage), mb=dst_key[1], rank=ra)
        b.add_edge(u, t)
        b.add_edge(t, v)
        if not p2p_overlap:  # blocking send: the sender's next action waits for the transfer
            nxt = next_entry.get(_sender_key(src_key))
            if nxt is not None:
                b.add_edge(t, nxt)

    def _sender_key(src_key):
        # with pair-end hand-off the transfer leaves at the pair's end: block after the pair
        if overlap_handoff == "pair-end" and src_key in pair_of:
            return pair_last[pair_of[src_key]]
        return src_key

    for (s, m, k) in list(tasks):
        key = (s, m, k)
        if k == "F":
            if not schedule.is_first_stage(s):
                src = (s - 1, m, "F")
                need(src, f"{s}F{m}")
                connect(src, key, "F")
        elif k in ("B", "I"):
            fkey = (s, m, "F")
            need(fkey, f"{s}{k}{m}")
            b.add_edge(tasks[fkey][1], tasks[key][0])
            if not schedule.is_last_stage(s):
                src = (s + 1, m, "B") if (s + 1, m, "B") in tasks else (s + 1, m, "I")
                need(src, f"{s}{k}{m}")
                connect(src, key, "B")
        elif k == "W":
            ikey = (s, m, "I")
            need(ikey, f"{s}W{m}")
            b.add_edge(tasks[ikey][1], tasks[key][0])


def lower_uniform(schedule: Schedule, costs: StageCosts, *, overlap_handoff: str = "pair-end") -> TaskGraph:
    """Coarse lowering: one compute task per action with the costs in ``costs``.

    >>> from strategies.schedules import get_schedule
    >>> g = lower_uniform(get_schedule("gpipe", 2, 2), StageCosts.uniform(2, 1.0, 2.0))
    >>> g.num_tasks  # 8 compute tasks + 4 transfers (zero-time)
    12
    """
    split = {(a.stage, a.mb) for order in schedule.orders for e in order
             for a in getattr(e, "sub_actions", (e,)) if a.kind == "W"}

    def emit(b: TaskGraphBuilder, a: Action, rank: int, chunk: int):
        t = b.add_task(costs.time(a), b.device_index(f"rank{rank}/compute"), KIND_CATEGORY[a.kind],
                       op=a.kind, stage=a.stage, chunk=chunk, mb=a.mb, rank=rank)
        if costs.activation:
            act = costs.activation[a.stage]
            if a.kind == "F":
                b.add_memory(t, act, at_end=True)
            elif a.kind == "B" or (a.kind == "W" and (a.stage, a.mb) in split):
                b.add_memory(t, -act, at_end=True)
        return t, t

    b, _ = lower_schedule(schedule, emit, lambda s, d, k, m: costs.p2p, overlap_handoff=overlap_handoff)
    return b.build()


def per_stage(values: Sequence[float] | float, num_stages: int, field: str) -> tuple[float, ...]:
    """Broadcast a scalar to every stage or check a per-stage list's length."""
    if isinstance(values, (int, float)):
        return (float(values),) * num_stages
    values = tuple(float(v) for v in values)
    if len(values) != num_stages:
        raise ScheduleError(f"{field} has {len(values)} values but there are {num_stages} stages; "
                            f"give one value or one per stage")
    return values
