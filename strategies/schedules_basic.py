"""gpipe, 1f1b, interleaved-1f1b (Megatron-LM / PyTorch orders).

Every schedule here is a pure function ``(pp, microbatches, vpp) -> Schedule`` that uses only
forward (F) and full-backward (B) actions.  The per-rank orders reproduce, action for action
(idle slots and send/recv ignored):

* ``gpipe``: PyTorch ``torch.distributed.pipelining.ScheduleGPipe`` (fill-drain).
* ``1f1b``: Megatron-LM ``forward_backward_pipelining_without_interleaving``
  (megatron/core/pipeline_parallel/schedules.py), which is also the compute order of PyTorch
  ``Schedule1F1B._step_microbatches``.
* ``interleaved-1f1b``: Megatron-LM ``forward_backward_pipelining_with_interleaving`` with
  ``microbatch_group_size_per_vp_stage`` = pp wherever Megatron accepts the sizes, and PyTorch
  ``ScheduleInterleaved1F1B`` (its "flex_pp" rounds) where PyTorch accepts more.

>>> from strategies.schedules import get_schedule
>>> print(get_schedule("1f1b", 2, 3).grid())
rank 0: 0F0 0F1 0B0 0F2 0B1 0B2
rank 1: 1F0 1B0 1F1 1B1 1F2 1B2
"""
from __future__ import annotations

from strategies.actions import Action, Schedule, action, loop_placement
from strategies.errors import ScheduleError
from strategies.schedules import register

__all__ = [
    "gpipe",
    "interleaved_1f1b",
    "interleaved_group_size",
    "interleaved_warmup",
    "one_f_one_b",
]


def _require_single_stage(name: str, vpp: int) -> None:
    """Reject vpp > 1 for schedules that place exactly one stage on each rank."""
    if vpp != 1:
        raise ScheduleError(
            f"schedule {name!r} places one pipeline stage per rank, so vpp must be 1, got vpp={vpp}; "
            f"use 'interleaved-1f1b' for vpp > 1 virtual stages per rank"
        )


@register("gpipe")
def gpipe(pp: int, microbatches: int, vpp: int = 1) -> Schedule:
    """GPipe fill-drain: every forward, then every backward, on each rank.

    Source: PyTorch ``ScheduleGPipe._step_microbatches`` runs forwards for microbatches
    0..m-1 and then backwards for microbatches 0..m-1 (ascending).  We pick that ascending
    backward order (GPipe, Huang et al. 2019, Sec. 2.2, fixes only "all forwards, then all
    backwards"; implementations that backpropagate the concatenated batch run the backwards in
    reverse microbatch order instead, which gives the same makespan for uniform stage times).

    Parameters
    ----------
    pp : int
        Pipeline ranks (= stages; stage ``r`` lives on rank ``r``).
    microbatches : int
        Microbatches per iteration.
    vpp : int
        Must be 1.

    Returns
    -------
    Schedule

    Examples
    --------
    >>> print(gpipe(2, 2, 1).grid())
    rank 0: 0F0 0F1 0B0 0B1
    rank 1: 1F0 1F1 1B0 1B1
    """
    _require_single_stage("gpipe", vpp)
    orders = tuple(
        tuple(action(r, "F", i) for i in range(microbatches)) + tuple(action(r, "B", i) for i in range(microbatches))
        for r in range(pp)
    )
    return Schedule("gpipe", pp, microbatches, 1, loop_placement(pp, 1), orders)


def _one_f_one_b_order(pp: int, microbatches: int, rank: int) -> tuple[Action, ...]:
    """Rank ``rank``'s order in Megatron-LM ``forward_backward_pipelining_without_interleaving``.

    Megatron: ``num_warmup_microbatches = min(pp - rank - 1, num_microbatches)``;
    ``num_microbatches_remaining = num_microbatches - num_warmup_microbatches``; the steady
    loop runs one forward then one backward per iteration; cooldown runs the remaining
    ``num_warmup_microbatches`` backwards.
    """
    warmup = min(pp - rank - 1, microbatches)
    remaining = microbatches - warmup
    order = [action(rank, "F", i) for i in range(warmup)]
    for i in range(remaining):
        order.append(action(rank, "F", warmup + i))
        order.append(action(rank, "B", i))
    order.extend(action(rank, "B", i) for i in range(remaining, microbatches))
    return tuple(order)


@register("1f1b")
def one_f_one_b(pp: int, microbatches: int, vpp: int = 1) -> Schedule:
    """Non-interleaved 1F1B (PipeDream-Flush), Megatron-LM's default pipeline schedule.

    Source: Megatron-LM ``forward_backward_pipelining_without_interleaving`` (warm-up of
    ``min(pp - rank - 1, m)`` forwards, steady 1F1B, cooldown backwards).  Megatron accepts any
    ``microbatches >= 1``; PyTorch ``Schedule1F1B`` additionally requires ``m >= pp`` but runs the
    same compute order where it accepts the sizes.

    Examples
    --------
    >>> print(one_f_one_b(3, 3, 1).grid())
    rank 0: 0F0 0F1 0F2 0B0 0B1 0B2
    rank 1: 1F0 1F1 1B0 1F2 1B1 1B2
    rank 2: 2F0 2B0 2F1 2B1 2F2 2B2
    """
    _require_single_stage("1f1b", vpp)
    orders = tuple(_one_f_one_b_order(pp, microbatches, r) for r in range(pp))
    return Schedule("1f1b", pp, microbatches, 1, loop_placement(pp, 1), orders)


def _nearest_valid_interleaved(pp: int, microbatches: int) -> tuple[int | None, int]:
    """Closest microbatch counts below and above ``microbatches`` that interleaved-1f1b accepts."""
    def ok(m: int) -> bool:
        return m % max(1, m // pp) == 0

    below = next((m for m in range(microbatches - 1, 0, -1) if ok(m)), None)
    above = next(m for m in range(microbatches + 1, microbatches + pp + 2) if ok(m))
    return below, above


def interleaved_group_size(pp: int, microbatches: int) -> int:
    """Microbatches per round (Megatron's ``microbatch_group_size_per_vp_stage``).

    Source: PyTorch ``ScheduleInterleaved1F1B.__init__``: ``number_of_rounds = max(1, m // pp)``,
    ``microbatches_per_round = m // number_of_rounds`` and ``m % number_of_rounds`` must be 0.
    When ``m % pp == 0`` this is exactly ``pp``, Megatron-LM's default group size
    (``ModelParallelConfig.microbatch_group_size_per_vp_stage`` defaults to pp).

    Raises
    ------
    ScheduleError
        If ``microbatches`` does not split into equal rounds.

    Examples
    --------
    >>> interleaved_group_size(4, 8), interleaved_group_size(4, 10), interleaved_group_size(4, 3)
    (4, 5, 3)
    """
    rounds = max(1, microbatches // pp)
    if microbatches % rounds != 0:
        below, above = _nearest_valid_interleaved(pp, microbatches)
        near = f"{below} or {above}" if below is not None else f"{above}"
        raise ScheduleError(
            f"interleaved-1f1b cannot use microbatches={microbatches} with pp={pp}: microbatches are "
            f"split into max(1, microbatches // pp) = {rounds} rounds of equal size, so microbatches must "
            f"be a multiple of {rounds} (PyTorch ScheduleInterleaved1F1B rule; Megatron-LM needs a multiple "
            f"of pp={pp}); use microbatches={near}, any multiple of pp, or any value below {2 * pp}"
        )
    return microbatches // rounds


def interleaved_warmup(pp: int, microbatches: int, vpp: int, rank: int) -> int:
    """Number of warm-up forwards on ``rank`` in interleaved 1F1B.

    Source: Megatron-LM ``get_pp_rank_microbatches`` (interleaved branch):
    ``(pp - rank - 1) * 2 + (vpp - 1) * microbatch_group_size_per_vp_stage``, capped at the
    ``m * vpp`` forwards the rank has; identical to PyTorch ``_get_warmup_ops`` with
    ``multiply_factor=2``.  (Megatron releases before the group-size option instead made every
    forward a warm-up forward when ``m == pp``; current Megatron and PyTorch do not.)

    Examples
    --------
    >>> [interleaved_warmup(4, 8, 2, r) for r in range(4)]
    [10, 8, 6, 4]
    """
    group = interleaved_group_size(pp, microbatches)
    return min((pp - rank - 1) * 2 + (vpp - 1) * group, microbatches * vpp)


@register("interleaved-1f1b")
def interleaved_1f1b(pp: int, microbatches: int, vpp: int = 1) -> Schedule:
    """Interleaved (virtual-stage) 1F1B of Narayanan et al. 2021, Sec. 2.2.

    Stage ``s`` lives on rank ``s % pp`` (``loop_placement``); rank ``r`` holds chunks
    ``0..vpp-1`` = stages ``chunk * pp + r``.  With group size ``g`` (see
    ``interleaved_group_size``; ``g = pp`` when ``pp`` divides ``m``), the k-th forward on every
    rank runs chunk ``(k mod g*vpp) div g`` on microbatch ``(k div g*vpp)*g + k mod g``
    (Megatron-LM ``get_schedule_table`` / ``get_model_chunk_id``); the k-th backward uses the same
    table with the chunk reversed (``vpp - 1 - chunk``).  Each rank runs ``interleaved_warmup``
    forwards, then forward/backward pairs, then the remaining backwards (Megatron-LM
    ``forward_backward_pipelining_with_interleaving``; PyTorch ``ScheduleInterleaved1F1B``).

    ``vpp == 1`` returns the 1F1B orders, as Megatron-LM ``get_forward_backward_func``
    dispatches to ``forward_backward_pipelining_without_interleaving`` without virtual stages.

    Accepted sizes: any ``pp``, ``vpp >= 1``; for ``vpp > 1`` ``microbatches`` must be a multiple
    of ``max(1, microbatches // pp)`` (PyTorch).  Megatron-LM with its default group size accepts
    only multiples of ``pp``; there both agree.

    Examples
    --------
    >>> print(interleaved_1f1b(2, 2, 2).grid())
    rank 0: 0F0 0F1 2F0 2F1 2B0 2B1 0B0 0B1
    rank 1: 1F0 1F1 3F0 3B0 3F1 3B1 1B0 1B1
    """
    if vpp == 1:
        base = one_f_one_b(pp, microbatches, 1)
        return Schedule("interleaved-1f1b", pp, microbatches, 1, base.stage_to_rank, base.orders)
    group = interleaved_group_size(pp, microbatches)
    total = microbatches * vpp

    # Megatron-LM get_schedule_table: (chunk, microbatch) of the k-th step of a rank (the same on
    # every rank; the k-th backward reverses the chunk, get_model_chunk_id(forward=False))
    table = [((k % (group * vpp)) // group, (k // (group * vpp)) * group + k % group) for k in range(total)]
    orders = []
    for r in range(pp):
        fwd = [action(chunk * pp + r, "F", mb) for chunk, mb in table]
        bwd = [action((vpp - 1 - chunk) * pp + r, "B", mb) for chunk, mb in table]
        warmup = interleaved_warmup(pp, microbatches, vpp, r)
        steady = total - warmup
        pairs: list = [None] * (2 * steady)  # forward warmup + i, then backward i
        pairs[0::2], pairs[1::2] = fwd[warmup:], bwd[:steady]
        orders.append(tuple(fwd[:warmup] + pairs + bwd[steady:]))
    return Schedule(
        "interleaved-1f1b", pp, microbatches, vpp, loop_placement(pp, vpp), tuple(orders),
        meta={"microbatch_group_size": group},
    )
