"""zb-h1, zb-v, dualpipe-v, looped-bfs (PyTorch pipelining orders).

Every function here is a pure ``(pp, microbatches, vpp) -> Schedule`` generator registered in
``strategies.schedules.SCHEDULES``. The per-rank orders are the compute actions, in order, of the
corresponding PyTorch ``torch.distributed.pipelining`` schedule class (v2.13) with its idle
``None`` slots and SEND/RECV communication actions removed. Configurations the PyTorch class
rejects raise ``ScheduleError`` naming the accepted range.

========== ======================================= ========= =====================================
name       PyTorch class                           placement accepted sizes
========== ======================================= ========= =====================================
zb-h1      ``ScheduleInterleavedZeroBubble``        loop      ``microbatches < 2*pp`` or
                                                             ``microbatches % (microbatches // pp)
                                                             == 0``; any vpp >= 1
zb-v       ``ScheduleZBVZeroBubble``                V         vpp in {1, 2} (both mean 2 chunks);
                                                             any microbatches >= 1
dualpipe-v ``ScheduleDualPipeV``                    V         vpp in {1, 2}; microbatches >= 2*pp
looped-bfs ``ScheduleLoopedBFS``                    loop      any pp, microbatches, vpp >= 1
========== ======================================= ========= =====================================

``dualpipe-v`` orders contain ``strategies.actions.Overlap`` entries (PyTorch ``OVERLAP_F_B``);
use ``strategies.actions.flatten_order`` to get plain actions.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

from strategies.actions import Action, Overlap, Schedule, action, loop_placement, v_placement
from strategies.errors import ScheduleError
from strategies.schedules import register

__all__ = ["dualpipe_v", "looped_bfs", "zb_h1", "zb_v"]


# --- shared helpers ---------------------------------------------------------------------------

def _check_sizes(name: str, pp: int, microbatches: int, vpp: int) -> None:
    """Reject non-positive or non-integer sizes (``get_schedule`` does too; direct calls need it)."""
    for field, value in (("pp", pp), ("microbatches", microbatches), ("vpp", vpp)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ScheduleError(f"{name}: {field} must be a positive integer (>= 1), got {value!r}")


def _check_v_chunks(name: str, vpp: int) -> None:
    """V-placement schedules hold exactly 2 chunks per rank; ``vpp`` 1 or 2 both mean that."""
    if vpp not in (1, 2):
        raise ScheduleError(
            f"{name}: vpp must be 1 or 2 (V placement always holds 2 chunks per rank: stages r and "
            f"2*pp-1-r), got vpp={vpp}"
        )


def _schedule(name: str, pp: int, microbatches: int, vpp: int, placement: tuple[int, ...],
              orders: list[list], meta: dict) -> Schedule:
    return Schedule(
        name=name,
        pp=pp,
        microbatches=microbatches,
        vpp=vpp,
        stage_to_rank=placement,
        orders=tuple(tuple(o) for o in orders),
        meta=meta,
    )


class _Counter:
    """Next microbatch index per (stage, kind): the ``*_stage_mb_index`` dicts of PyTorch."""

    def __init__(self):
        self._next: dict[tuple[int, str], int] = defaultdict(int)

    def take(self, stage: int, kind: str) -> Action:
        mb = self._next[(stage, kind)]
        self._next[(stage, kind)] = mb + 1
        return action(stage, kind, mb)


# --- zb-h1 (ZB-1P) ----------------------------------------------------------------------------

def _zero_bubble_1f1b_rank(warmup_ops: int, total_mb_ops: int,
                           forward_stage: Callable[[int], int],
                           backward_stage: Callable[[int], int],
                           deferred_w: int) -> list[Action]:
    """One rank's warm-up / 1F1B / cool-down order with split backward (I now, W later).

    Port of PyTorch ``torch.distributed.pipelining.schedules._get_1f1b_rank_ops`` with
    ``enable_zero_bubble=True`` (idle ``None`` padding dropped). ``deferred_w`` is how many
    W passes are held back (the first W follows the ``deferred_w + 1``-th I): the ZB-H1 rule of Qi et al., "Zero Bubble Pipeline
    Parallelism" (arXiv:2401.10241), Section 2.1 / Figure 3 (top): later workers, which have
    fewer warm-up forwards, postpone their W passes to fill the tail bubble.

    Parameters
    ----------
    warmup_ops : int
        Forwards issued before the first backward.
    total_mb_ops : int
        ``vpp * microbatches``: forwards (and backwards) this rank runs.
    forward_stage, backward_stage : callable
        Op index -> virtual stage of the forward / backward issued at that op.
    deferred_w : int
        Number of 1F1B steps whose W is postponed.

    Returns
    -------
    list of Action
    """
    counter = _Counter()
    ops: list[Action] = []
    backward_op_ids: list[int] = []
    weights_done = 0
    # warm-up: ops [0, warmup) are F; 1F1B: [warmup, total) are F then I; cool-down:
    # [total, total + warmup) are I only. W follows I once ``deferred_w`` I passes were issued.
    for op in range(total_mb_ops + warmup_ops):
        if op < total_mb_ops:
            ops.append(counter.take(forward_stage(op), "F"))
        if op >= warmup_ops:
            ops.append(counter.take(backward_stage(op), "I"))
            backward_op_ids.append(op)
            if op - warmup_ops >= deferred_w:
                ops.append(counter.take(backward_stage(backward_op_ids[weights_done]), "W"))
                weights_done += 1
    while weights_done < len(backward_op_ids):
        ops.append(counter.take(backward_stage(backward_op_ids[weights_done]), "W"))
        weights_done += 1
    return ops


def _zb_rounds(pp: int, microbatches: int) -> int:
    """Rounds of the flexible interleaved schedules (PyTorch ``ScheduleInterleavedZeroBubble``)."""
    return max(1, microbatches // pp)


@register("zb-h1")
def zb_h1(pp: int, microbatches: int, vpp: int = 1) -> Schedule:
    """ZB-H1 (vpp == 1) / interleaved ZB-1P (vpp > 1), loop placement, split backward.

    Source: PyTorch ``ScheduleInterleavedZeroBubble`` ("implementing the ZB1P schedule" of
    Qi et al., arXiv:2401.10241). With one chunk per rank this is the paper's handcrafted ZB-H1
    (Section 2.1, Figure 3 top): rank r runs ``pp-1-r`` warm-up forwards, then F/I pairs, and
    postpones its first ``r`` W passes (rank 0 none, the last rank ``pp-1``), which it runs in
    the cool-down. With ``vpp`` chunks, forwards/backwards cycle over the chunks in groups of
    ``microbatches_per_round`` microbatches as in interleaved 1F1B, with warm-up
    ``(vpp-1)*microbatches_per_round + (pp-1-r)`` (PyTorch ``_get_warmup_ops``,
    ``multiply_factor=1``).

    Parameters
    ----------
    pp : int
        Pipeline ranks.
    microbatches : int
        Microbatches per iteration; must be below ``2*pp`` or a multiple of ``microbatches // pp``.
    vpp : int
        Chunks per rank (stage ``s`` on rank ``s % pp``).

    Returns
    -------
    Schedule

    Raises
    ------
    ScheduleError
        If ``microbatches`` is not a multiple of ``max(1, microbatches // pp)``.
    """
    _check_sizes("zb-h1", pp, microbatches, vpp)
    rounds = _zb_rounds(pp, microbatches)
    if microbatches % rounds:
        lower = next(x for x in range(microbatches, 0, -1) if x % _zb_rounds(pp, x) == 0)
        upper = next(x for x in range(microbatches, 4 * microbatches + 2 * pp)
                     if x % _zb_rounds(pp, x) == 0)
        raise ScheduleError(
            f"zb-h1: microbatches={microbatches} is not supported with pp={pp}: microbatches must be "
            f"< 2*pp (= {2 * pp}) or a multiple of its round count microbatches // pp (= {rounds}) "
            f"(PyTorch ScheduleInterleavedZeroBubble); nearest accepted values are {lower} and {upper}"
        )
    per_round = microbatches // rounds
    orders = []
    for rank in range(pp):
        warmup = min((vpp - 1) * per_round + (pp - 1 - rank), microbatches * vpp)

        def fwd_stage(step: int, rank=rank) -> int:
            return ((step // per_round) % vpp) * pp + rank

        def bwd_stage(step: int, rank=rank, warmup=warmup) -> int:
            return (vpp - 1 - ((step - warmup) // per_round) % vpp) * pp + rank

        orders.append(_zero_bubble_1f1b_rank(warmup, vpp * microbatches,
                                             fwd_stage, bwd_stage, deferred_w=rank))
    return _schedule("zb-h1", pp, microbatches, vpp, loop_placement(pp, vpp), orders,
                     {"placement": "loop", "source": "torch ScheduleInterleavedZeroBubble"})


# --- zb-v ---------------------------------------------------------------------------------------

def _zbv_rank(rank: int, pp: int, microbatches: int) -> list[Action]:
    """One rank's ZB-V order.

    Port of PyTorch ``ScheduleZBVZeroBubble._calculate_single_rank_operations`` (ZB-V of Qi et
    al., arXiv:2401.10241, Section 6 / Figure 8): warm-up of chunk-0 forwards, then chunk-1
    F/I/W, a steady F0 I0 W0 F1 I1 W1 phase and a cool-down. It is generated for
    ``max(2*pp-1, microbatches)`` microbatches and actions of the extra microbatches dropped.
    """
    n_micro = max(2 * pp - 1, microbatches)
    s0, s1 = rank, 2 * pp - 1 - rank
    ops: list[Action] = []
    f0 = f1 = b0 = b1 = 0

    def add(stage: int, kind: str, mb: int) -> None:
        ops.append(action(stage, kind, mb))

    for _ in range(2 * (pp - rank) - 1):                      # warm-up 1: chunk-0 forwards
        add(s0, "F", f0); f0 += 1
    for _ in range(rank):                                     # warm-up 2: F1 F0
        add(s1, "F", f1); f1 += 1
        add(s0, "F", f0); f0 += 1
    for _ in range(pp - rank):                                # warm-up 3: F1 I1 W1
        add(s1, "F", f1); f1 += 1
        add(s1, "I", b1); add(s1, "W", b1); b1 += 1
    while f1 < f0 or f0 < n_micro:                            # steady: F0 I0 W0 F1 I1 W1
        if f0 < n_micro:
            add(s0, "F", f0); f0 += 1
        add(s0, "I", b0); add(s0, "W", b0); b0 += 1
        add(s1, "F", f1); f1 += 1
        add(s1, "I", b1); add(s1, "W", b1); b1 += 1
    w0, w1 = b0, b1
    for _ in range(rank):                                     # cool-down 1: I0 I1
        add(s0, "I", b0); b0 += 1
        add(s1, "I", b1); b1 += 1
    for _ in range(pp - rank):                                # cool-down 2: I0 W0
        add(s0, "I", b0); b0 += 1
        add(s0, "W", w0); w0 += 1
    while w1 < b1:                                            # drain chunk-1 W, then chunk-0 W
        add(s1, "W", w1); w1 += 1
    while w0 < b0:
        add(s0, "W", w0); w0 += 1
    return [a for a in ops if a.mb < microbatches]


@register("zb-v")
def zb_v(pp: int, microbatches: int, vpp: int = 2) -> Schedule:
    """ZB-V: zero-bubble schedule on the V placement (rank r holds stages r and 2*pp-1-r).

    Source: PyTorch ``ScheduleZBVZeroBubble``; Qi et al., "Zero Bubble Pipeline Parallelism",
    arXiv:2401.10241, Section 6 / Figure 8. Zero bubble needs ``microbatches >= 2*pp - 1``; fewer
    are accepted (as in PyTorch) and simply leave the actions of missing microbatches out.

    Parameters
    ----------
    pp : int
        Pipeline ranks.
    microbatches : int
        Microbatches per iteration (any >= 1).
    vpp : int
        1 or 2; both mean the V placement's 2 chunks per rank (the result has ``vpp == 2``).

    Returns
    -------
    Schedule

    Raises
    ------
    ScheduleError
        If ``vpp`` is not 1 or 2.
    """
    _check_sizes("zb-v", pp, microbatches, vpp)
    _check_v_chunks("zb-v", vpp)
    orders = [_zbv_rank(rank, pp, microbatches) for rank in range(pp)]
    return _schedule("zb-v", pp, microbatches, 2, v_placement(pp), orders,
                     {"placement": "v", "source": "torch ScheduleZBVZeroBubble"})


# --- dualpipe-v ---------------------------------------------------------------------------------

def _dualpipe_v_rank(rank: int, pp: int, microbatches: int) -> list[Action | Overlap]:
    """One rank's DualPipeV order.

    Port of PyTorch ``ScheduleDualPipeV._calculate_single_rank_operations``, itself based on
    deepseek-ai/DualPipe ``dualpipev.py`` (the "cut-in-half" DualPipe of the DeepSeek-V3 technical
    report, arXiv:2412.19437, Section 3.2.1 / Figure 5). Eight steps: F0 warm-up; F0 F1; I1 W F1
    (zero bubble); the main overlapped (F0;B1)(F1;B0) pairs; B1 (F1;B0); B1 B0 switching to split
    I backward half way; W B0; trailing W. Microbatch indices follow per-(stage, kind) counters
    where a full B advances both the I and W counters and each I queues its W (FIFO).
    """
    s0, s1 = rank, 2 * pp - 1 - rank
    ops: list[Action | Overlap] = []
    counters: dict[tuple[int, str], int] = defaultdict(int)
    weight_queue: list[tuple[int, int]] = []

    def action(stage: int, kind: str) -> Action:
        key = (stage, "I" if kind == "B" else kind)
        mb = counters[key]
        if kind == "B":                         # full backward also consumes the W index
            counters[(stage, "I")] += 1
            counters[(stage, "W")] += 1
        else:
            if kind == "I":
                weight_queue.append((stage, mb))
            counters[key] = mb + 1
        return Action(stage, kind, mb)

    def add(stage: int, kind: str) -> None:
        ops.append(action(stage, kind))

    def add_overlap(forward_stage: int, backward_stage: int) -> None:
        fwd = action(forward_stage, "F")
        ops.append(Overlap(fwd, action(backward_stage, "B")))

    def add_pending_weight() -> None:
        if weight_queue:
            stage, mb = weight_queue.pop(0)
            counters[(stage, "W")] += 1
            ops.append(Action(stage, "W", mb))

    for _ in range(2 * (pp - rank - 1)):                      # step 1: F0
        add(s0, "F")
    for _ in range(rank + 1):                                 # step 2: F0 F1
        add(s0, "F")
        add(s1, "F")
    for _ in range(pp - rank - 1):                            # step 3: I1 W F1
        add(s1, "I")
        add_pending_weight()
        add(s1, "F")
    for i in range(microbatches - 2 * pp + rank + 1):         # step 4: (F0;B1) (F1;B0)
        if i == 0 and rank == pp - 1:
            add(s0, "F")                                      # not overlapped: smaller bubble
            add(s1, "B")
        else:
            add_overlap(s0, s1)
        add_overlap(s1, s0)
    for _ in range(pp - rank - 1):                            # step 5: B1 (F1;B0)
        add(s1, "B")
        add_overlap(s1, s0)
    split = False                                             # step 6: B1 B0, split half way
    steps6 = rank + 1
    for i in range(steps6):
        if i == steps6 // 2 and rank % 2 == 1:
            split = True
        add(s1, "I" if split else "B")
        if i == steps6 // 2 and rank % 2 == 0:
            split = True
        add(s0, "I" if split else "B")
    for _ in range(pp - rank - 1):                            # step 7: W B0
        add_pending_weight()
        add(s0, "I" if split else "B")
    for _ in range(rank + 1):                                 # step 8: W
        add_pending_weight()
    return ops


@register("dualpipe-v")
def dualpipe_v(pp: int, microbatches: int, vpp: int = 2) -> Schedule:
    """DualPipeV: DualPipe folded onto the V placement, with overlapped forward/backward pairs.

    Source: PyTorch ``ScheduleDualPipeV`` (from deepseek-ai/DualPipe ``dualpipev.py``); DualPipe
    is DeepSeek-V3 technical report, arXiv:2412.19437, Section 3.2.1 / Figures 4-5. Orders contain
    ``Overlap`` entries (PyTorch ``OVERLAP_F_B``) whose backward half is a full backward ``B``.

    Parameters
    ----------
    pp : int
        Pipeline ranks.
    microbatches : int
        Microbatches per iteration; at least ``2*pp`` (one per virtual stage).
    vpp : int
        1 or 2; both mean the V placement's 2 chunks per rank (the result has ``vpp == 2``).

    Returns
    -------
    Schedule

    Raises
    ------
    ScheduleError
        If ``vpp`` is not 1 or 2, or ``microbatches < 2*pp``.
    """
    _check_sizes("dualpipe-v", pp, microbatches, vpp)
    _check_v_chunks("dualpipe-v", vpp)
    if microbatches < 2 * pp:
        raise ScheduleError(
            f"dualpipe-v: microbatches must be >= 2*pp (= {2 * pp}, one per virtual stage) for "
            f"pp={pp}, got microbatches={microbatches}"
        )
    orders = [_dualpipe_v_rank(rank, pp, microbatches) for rank in range(pp)]
    return _schedule("dualpipe-v", pp, microbatches, 2, v_placement(pp), orders,
                     {"placement": "v", "source": "torch ScheduleDualPipeV", "overlap": True})


# --- looped-bfs ---------------------------------------------------------------------------------

@register("looped-bfs")
def looped_bfs(pp: int, microbatches: int, vpp: int = 1) -> Schedule:
    """Breadth-first looped schedule: each local chunk runs all forwards, then backwards reversed.

    Source: PyTorch ``ScheduleLoopedBFS``; Lamy-Poirier, "Breadth-First Pipeline Parallelism",
    arXiv:2211.05953, Section 3 (looped placement, breadth-first order). Rank r runs the forwards
    of its stages r, r+pp, ... in stage order (microbatches ascending), then the full backwards of
    its stages in reverse stage order with microbatches descending.

    Parameters
    ----------
    pp : int
        Pipeline ranks.
    microbatches : int
        Microbatches per iteration.
    vpp : int
        Chunks per rank (stage ``s`` on rank ``s % pp``).

    Returns
    -------
    Schedule
    """
    _check_sizes("looped-bfs", pp, microbatches, vpp)
    orders = []
    for rank in range(pp):
        stages = range(rank, pp * vpp, pp)
        ops = [action(s, "F", mb) for s in stages for mb in range(microbatches)]
        ops += [action(s, "B", mb) for s in reversed(stages) for mb in reversed(range(microbatches))]
        orders.append(ops)
    return _schedule("looped-bfs", pp, microbatches, vpp, loop_placement(pp, vpp), orders,
                     {"placement": "loop", "source": "torch ScheduleLoopedBFS"})
