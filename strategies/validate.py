"""Static checks of a pipeline ``Schedule``: completeness, placement, order, and deadlock freedom.

``validate_schedule`` mirrors PyTorch ``torch.distributed.pipelining.schedules._validate_schedule``
(every stage runs each microbatch's F once and its backward once, as B or as I then W, F before
B/I, I before W, one rank per stage) and adds per-action placement against
``Schedule.stage_to_rank``.  ``check_deadlock`` plays the per-rank lists against the pipeline
data dependencies, like PyTorch ``_simulate_comms_compute`` ("Schedule is not progressing").

Entries of a rank's order are normally ``Action`` objects.  An entry with a ``sub_actions``
attribute (an overlapped forward/backward pair, as in PyTorch's ``OVERLAP_F_B``) is treated as its
sub-actions in order; ``strategies.actions.flatten_order`` is used for that when it exists.
"""
from __future__ import annotations

from strategies import actions as _actions
from strategies.actions import Action, Schedule
from strategies.errors import ScheduleError

__all__ = ["check_deadlock", "entry_actions", "validate_schedule"]

#: Backward kinds that carry the gradient to the previous stage (PyTorch FULL_BACKWARD / BACKWARD_INPUT).
_GRAD_KINDS = ("B", "I")


def entry_actions(entry) -> tuple[Action, ...]:
    """The actions one order entry stands for, in execution order.

    A plain ``Action`` stands for itself; a pair entry (anything with ``sub_actions``) for its
    sub-actions.  Uses ``strategies.actions.flatten_order`` when that function exists.

    >>> entry_actions(Action(0, "F", 1))
    (Action(stage=0, kind='F', mb=1),)
    """
    flatten = getattr(_actions, "flatten_order", None)
    items = tuple(flatten([entry])) if flatten is not None else (entry,)
    out: list = []
    for item in items:
        subs = getattr(item, "sub_actions", None)
        out.extend(subs if subs is not None else (item,))
    return tuple(out)


def _where(rank: int, pos: int, action) -> str:
    return f"rank {rank}, position {pos} (action {action})"


def _flat(schedule: Schedule) -> list[list[tuple[int, Action]]]:
    """Per rank, ``(position, action)`` for every action; position = index of its entry."""
    out = []
    for r, order in enumerate(schedule.orders):
        acts = []
        for pos, entry in enumerate(order):
            for a in entry_actions(entry):
                if not isinstance(a, Action):
                    raise ScheduleError(
                        f"rank {r}, position {pos}: entry {a!r} is not an Action; "
                        f"build entries with strategies.actions.Action (e.g. Action.parse('0F0'))"
                    )
                acts.append((pos, a))
        out.append(acts)
    return out


def _check_shape(schedule: Schedule) -> None:
    pp, vpp, m = schedule.pp, schedule.vpp, schedule.microbatches
    for field, value in (("pp", pp), ("vpp", vpp), ("microbatches", m)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ScheduleError(f"schedule {schedule.name!r}: {field} must be a positive integer, got {value!r}")
    if len(schedule.orders) != pp:
        raise ScheduleError(
            f"schedule {schedule.name!r} has {len(schedule.orders)} rank orders but pp={pp}; "
            f"give exactly one action list per pipeline rank"
        )
    if len(schedule.stage_to_rank) != pp * vpp:
        raise ScheduleError(
            f"schedule {schedule.name!r}: stage_to_rank has {len(schedule.stage_to_rank)} entries but "
            f"pp*vpp = {pp}*{vpp} = {pp * vpp} stages; give one owning rank per virtual stage"
        )
    for s, r in enumerate(schedule.stage_to_rank):
        if not isinstance(r, int) or not 0 <= r < pp:
            raise ScheduleError(
                f"schedule {schedule.name!r}: stage_to_rank[{s}] = {r!r} is not a rank in 0..{pp - 1}"
            )


def validate_schedule(schedule: Schedule) -> None:
    """Raise ``ScheduleError`` unless ``schedule`` is complete and well ordered.

    Checks, in this order: ``len(orders) == pp`` and ``len(stage_to_rank) == pp * vpp``; every
    action's stage is in ``0..pp*vpp-1`` and microbatch in ``0..microbatches-1``; every action
    sits on the rank that owns its stage; no action appears twice; no (stage, microbatch) mixes
    B with I/W; on its rank, F comes before B or I and I comes before W; finally every
    (stage, microbatch) has one F and one backward (B, or I and W).

    Errors name the rank and position (index in the rank's list) of the offending action.
    Source: PyTorch ``_validate_schedule`` (same completeness and ordering rules).

    Examples
    --------
    >>> from strategies.actions import loop_placement
    >>> ok = Schedule("t", 1, 1, 1, loop_placement(1, 1), ((Action(0, "F", 0), Action(0, "B", 0)),))
    >>> validate_schedule(ok)
    >>> bad = Schedule("t", 1, 1, 1, loop_placement(1, 1), ((Action(0, "B", 0), Action(0, "F", 0)),))
    >>> validate_schedule(bad)
    Traceback (most recent call last):
    ...
    strategies.errors.ScheduleError: rank 0, position 0 (action 0B0): runs before its forward 0F0 at position 1; move 0F0 earlier on rank 0
    """
    _check_shape(schedule)
    n_stages, m = schedule.num_stages, schedule.microbatches
    flat = _flat(schedule)

    seen: dict[tuple[int, str, int], tuple[int, int, int]] = {}  # action key -> (rank, pos, seq)
    for r, acts in enumerate(flat):
        for seq, (pos, a) in enumerate(acts):
            where = _where(r, pos, a)
            if a.stage >= n_stages:
                raise ScheduleError(
                    f"{where}: stage {a.stage} is out of range; this schedule has stages 0..{n_stages - 1} "
                    f"(pp={schedule.pp} x vpp={schedule.vpp})"
                )
            if a.mb >= m:
                raise ScheduleError(
                    f"{where}: microbatch {a.mb} is out of range; microbatches={m} allows 0..{m - 1}"
                )
            if schedule.segments and a.mb not in schedule.stage_microbatches(a.stage):
                mbs = schedule.stage_microbatches(a.stage)
                raise ScheduleError(
                    f"{where}: stage {a.stage} runs microbatches {mbs.start}..{mbs.stop - 1} only (its pipeline "
                    f"segment); move {a} to the segment of microbatch {a.mb}"
                )
            owner = schedule.stage_to_rank[a.stage]
            if owner != r:
                raise ScheduleError(
                    f"{where}: stage {a.stage} belongs to rank {owner} (stage_to_rank), not rank {r}; "
                    f"move {a} to rank {owner}'s list"
                )
            key = (a.stage, a.kind, a.mb)
            if key in seen:
                pr, ppos, _ = seen[key]
                raise ScheduleError(f"{where}: duplicate of the same action at rank {pr}, position {ppos}; remove one")
            seen[key] = (r, pos, seq)

    for (s, kind, mb), (r, pos, seq) in seen.items():
        a = Action(s, kind, mb)
        where = _where(r, pos, a)
        if kind in ("I", "W") and (s, "B", mb) in seen:
            br, bpos, _ = seen[(s, "B", mb)]
            raise ScheduleError(
                f"{where}: stage {s} microbatch {mb} already has a full backward {s}B{mb} at rank {br}, "
                f"position {bpos}; use either B or the split pair I+W, not both"
            )
        if kind in _GRAD_KINDS:
            f = seen.get((s, "F", mb))
            if f is not None and f[2] > seq:
                raise ScheduleError(
                    f"{where}: runs before its forward {s}F{mb} at position {f[1]}; move {s}F{mb} earlier on rank {r}"
                )
        if kind == "W":
            i = seen.get((s, "I", mb))
            if i is not None and i[2] > seq:
                raise ScheduleError(
                    f"{where}: runs before its input-gradient backward {s}I{mb} at position {i[1]}; "
                    f"move {s}I{mb} earlier on rank {r}"
                )

    for s in range(n_stages):
        owner = schedule.stage_to_rank[s]
        for mb in schedule.stage_microbatches(s):
            if (s, "F", mb) not in seen:
                raise ScheduleError(
                    f"stage {s} microbatch {mb} has no forward: add {s}F{mb} to rank {owner}'s list"
                )
            has_b, has_i, has_w = ((s, k, mb) in seen for k in ("B", "I", "W"))
            if has_w and not has_i:
                r, pos, _ = seen[(s, "W", mb)]
                raise ScheduleError(
                    f"{_where(r, pos, Action(s, 'W', mb))}: weight-gradient backward without its "
                    f"input-gradient backward {s}I{mb}; add {s}I{mb} before it on rank {owner}"
                )
            if has_i and not has_w:
                r, pos, _ = seen[(s, "I", mb)]
                raise ScheduleError(
                    f"{_where(r, pos, Action(s, 'I', mb))}: input-gradient backward without its "
                    f"weight-gradient backward {s}W{mb}; add {s}W{mb} after it on rank {owner}"
                )
            if not (has_b or has_i):
                raise ScheduleError(
                    f"stage {s} microbatch {mb} has no backward: add {s}B{mb} (or {s}I{mb} then {s}W{mb}) "
                    f"to rank {owner}'s list after {s}F{mb}"
                )


def _dependencies(a: Action, schedule: Schedule) -> list[tuple[tuple[int, str, int], ...]]:
    """What ``a`` waits for: a list of alternatives-groups, each satisfied by any one key.

    Pipeline data dependencies (PyTorch ``_simulate_comms_compute._ready_to_schedule``):
    F(s,m) needs F(s-1,m); B/I(s,m) needs F(s,m) and B or I of (s+1,m) (the last stage's
    backward needs only its own forward); W(s,m) needs I(s,m). Stages at a pipeline segment's
    edge (``Schedule.segments``, DualPipe's two directions) are first / last stages.
    """
    s, mb = a.stage, a.mb
    if a.kind == "F":
        return [((s - 1, "F", mb),)] if not schedule.is_first_stage(s) else []
    if a.kind in _GRAD_KINDS:
        deps = [((s, "F", mb),)]
        if not schedule.is_last_stage(s):
            deps.append(((s + 1, "B", mb), (s + 1, "I", mb)))
        return deps
    return [((s, "I", mb),)]  # W


def check_deadlock(schedule: Schedule) -> None:
    """Raise ``ScheduleError`` if the per-rank orders cannot all run to completion.

    Each rank executes its list strictly in order; an action runs once its data dependencies
    (see ``_dependencies``) have run on any rank.  If no rank can move, the error lists every
    unfinished rank's blocked head action and what it waits for (PyTorch
    ``_simulate_comms_compute`` raises "Schedule is not progressing" in the same situation).
    Pair entries are played as their sub-actions in order.

    Examples
    --------
    >>> from strategies.actions import loop_placement
    >>> orders = ((Action(0, "F", 0), Action(0, "B", 0)), (Action(1, "B", 0), Action(1, "F", 0)))
    >>> check_deadlock(Schedule("t", 2, 1, 1, loop_placement(2, 1), orders))
    Traceback (most recent call last):
    ...
    strategies.errors.ScheduleError: schedule 't' deadlocks: no rank can run its next action.
      rank 0, position 1 (action 0B0): waits for 1B0 or 1I0 (stage 1, rank 1)
      rank 1, position 0 (action 1B0): waits for 1F0 (stage 1, rank 1)
    """
    if len(schedule.orders) != schedule.pp:
        raise ScheduleError(
            f"schedule {schedule.name!r} has {len(schedule.orders)} rank orders but pp={schedule.pp}"
        )
    flat = _flat(schedule)
    done: set[tuple[int, str, int]] = set()
    scheduled = {(a.stage, a.kind, a.mb) for acts in flat for _, a in acts}
    heads = [0] * len(flat)

    def ready(a: Action) -> bool:
        return all(any(k in done for k in group) for group in _dependencies(a, schedule))

    progress = True
    while progress:
        progress = False
        for r, acts in enumerate(flat):
            # Run as many actions of rank r as are ready (in order).
            while heads[r] < len(acts) and ready(acts[heads[r]][1]):
                a = acts[heads[r]][1]
                done.add((a.stage, a.kind, a.mb))
                heads[r] += 1
                progress = True

    blocked = [r for r, acts in enumerate(flat) if heads[r] < len(acts)]
    if not blocked:
        return
    lines = [f"schedule {schedule.name!r} deadlocks: no rank can run its next action."]
    for r in blocked:
        pos, a = flat[r][heads[r]]
        waits = []
        for group in _dependencies(a, schedule):
            if any(k in done for k in group):
                continue
            names = " or ".join(f"{s}{k}{mb}" for s, k, mb in group)
            s = group[0][0]
            owner = schedule.stage_to_rank[s] if 0 <= s < len(schedule.stage_to_rank) else "none"
            note = "" if any(k in scheduled for k in group) else ", scheduled on no rank"
            waits.append(f"{names} (stage {s}, rank {owner}{note})")
        lines.append(f"  {_where(r, pos, a)}: waits for " + " and ".join(waits))
    raise ScheduleError("\n".join(lines))
