"""dualpipe: DeepSeek-V3's bidirectional DualPipe schedule (the full one, besides ``dualpipe-v``).

Source: DeepSeek-V3 technical report (arXiv:2412.19437) Section 3.2.1, Figure 5 and Table 2, and the
reference implementation deepseek-ai/DualPipe ``dualpipe/dualpipe.py`` (``DualPipe.step``), whose
eight steps this module transcribes call for call.

Two pipelines share the ranks. The model is cut into P = pp stages; direction 0 feeds microbatches
0 .. m/2-1 in at rank 0 (model stage s on rank s), direction 1 feeds m/2 .. m-1 in at rank P-1
(model stage s on rank P-1-s). Rank i therefore holds model stages i and P-1-i, each as its own
parameter copy (Table 2: 2x parameters). As a :class:`~strategies.actions.Schedule`: 2P virtual
stages on the V placement (stage r and 2P-1-r on rank r), split into two segments
``((0, 0), (P, m/2))``: virtual stage s < P is direction 0's model stage s, virtual stage P + s is
direction 1's model stage s (on rank P-1-s). No data flows between the segments.

``DualPipe.step`` per rank (``half_rank = min(rank, P-1-rank)``, phases swapped on the second half of
the ranks, ``phase ^= is_in_second_half``; actual phase 0 = direction 0, 1 = direction 1):

1. ``(P/2 - half_rank - 1) * 2`` forwards of phase 0;
2. ``half_rank + 1`` times: F phase 0, F phase 1;
3. ``P/2 - half_rank - 1`` times: I phase 1 (zero-bubble split backward), W, F phase 1;
4. ``m/2 - P + half_rank + 1`` times: (F0;B1) then (F1;B0) overlapped pairs; on the two middle ranks
   the first (F0;B1) runs as F0 then B1, not overlapped ("to further reduce bubble size");
5. ``P/2 - half_rank - 1`` times: B phase 1, (F1;B0);
6. ``half_rank + 1`` times: B1 then B0, switching to split I backwards half way (before B1 on odd
   half ranks, after it on even ones);
7. ``P/2 - half_rank - 1`` times: W, I phase 0;
8. ``half_rank + 1`` times: W.

W runs the oldest queued weight gradient (``WeightGradStore``, FIFO). The reference needs an even
``pp`` and an even number of microbatches >= 2 pp (its assertions); so does this function.
"""
from __future__ import annotations

from collections import deque

from strategies.actions import Action, Overlap, Schedule, v_placement
from strategies.errors import ScheduleError
from strategies.schedules import register


def _rank_order(rank: int, pp: int, microbatches: int) -> list:
    half = pp // 2
    half_rank = min(rank, pp - 1 - rank)
    second = 1 if rank >= half else 0
    middle = rank in (half - 1, half)
    n_half = microbatches // 2
    stage = (rank, 2 * pp - 1 - rank)               # actual phase 0 (direction 0), 1 (direction 1)
    first_mb = (0, n_half)
    f_id, b_id = [0, 0], [0, 0]
    wq: deque = deque()
    ops: list = []

    def fwd(phase: int) -> Action:
        a = phase ^ second
        mb = first_mb[a] + f_id[a]
        f_id[a] += 1
        return Action(stage[a], "F", mb)

    def bwd(phase: int, zb: bool = False) -> Action:
        a = phase ^ second
        mb = first_mb[a] + b_id[a]
        b_id[a] += 1
        if zb:
            wq.append((stage[a], mb))
            return Action(stage[a], "I", mb)
        return Action(stage[a], "B", mb)

    def weight() -> None:
        if not wq:
            raise ScheduleError(f"dualpipe: rank {rank} runs a weight step with no queued input gradient")
        s, mb = wq.popleft()
        ops.append(Action(s, "W", mb))

    for _ in range((half - half_rank - 1) * 2):                 # step 1: nF0
        ops.append(fwd(0))
    for _ in range(half_rank + 1):                              # step 2: nF0F1
        ops.append(fwd(0))
        ops.append(fwd(1))
    for _ in range(half - half_rank - 1):                       # step 3: nB1W1F1 (zero bubble)
        ops.append(bwd(1, zb=True))
        weight()
        ops.append(fwd(1))
    for i in range(n_half - pp + half_rank + 1):                # step 4: nF0B1F1B0 (main step)
        if i == 0 and middle:
            ops.append(fwd(0))                                  # not overlapped on the middle ranks
            ops.append(bwd(1))
        else:
            f = fwd(0)
            ops.append(Overlap(f, bwd(1)))
        f = fwd(1)
        ops.append(Overlap(f, bwd(0)))
    for _ in range(half - half_rank - 1):                       # step 5: nB1F1B0
        ops.append(bwd(1))
        f = fwd(1)
        ops.append(Overlap(f, bwd(0)))
    zb = False                                                  # step 6: nB1B0, zero bubble half way
    steps6 = half_rank + 1
    for i in range(steps6):
        if i == steps6 // 2 and half_rank % 2 == 1:
            zb = True
        ops.append(bwd(1, zb))
        if i == steps6 // 2 and half_rank % 2 == 0:
            zb = True
        ops.append(bwd(0, zb))
    for _ in range(half - half_rank - 1):                       # step 7: nWB0 (zero bubble)
        weight()
        ops.append(bwd(0, True))
    for _ in range(half_rank + 1):                              # step 8: nW
        weight()
    if wq:
        raise ScheduleError(f"dualpipe: rank {rank} ends with {len(wq)} queued weight gradients")
    return ops


@register("dualpipe")
def dualpipe(pp: int, microbatches: int, vpp: int = 2) -> Schedule:
    """Bidirectional DualPipe (DeepSeek-V3 Section 3.2.1; deepseek-ai/DualPipe ``dualpipe.py``).

    Parameters
    ----------
    pp : int
        Pipeline ranks P (even); the model is cut into P stages, each rank holds two of them.
    microbatches : int
        Microbatches per iteration (even, >= 2 pp); half go each way.
    vpp : int
        1 or 2: chunks per rank are always 2 (one per direction).

    Examples
    --------
    >>> s = dualpipe(2, 4)
    >>> print(s.grid())
    rank 0: 0F0 3F2 0F1 3B2 (3F3;0B0)OVERLAP_F_B 3B3 0I1 0W1
    rank 1: 2F2 1F0 2F3 1B0 (1F1;2B2)OVERLAP_F_B 1B1 2I3 2W3
    >>> s.segments
    ((0, 0), (2, 2))
    """
    for field, value in (("pp", pp), ("microbatches", microbatches), ("vpp", vpp)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ScheduleError(f"dualpipe: {field} must be a positive integer (>= 1), got {value!r}")
    if vpp not in (1, 2):
        raise ScheduleError(f"dualpipe: vpp must be 1 or 2 (each rank holds 2 chunks: one stage per direction), "
                            f"got vpp={vpp}")
    if pp % 2 or pp < 2:
        raise ScheduleError(f"dualpipe: pp must be even (the two directions meet in the middle), got pp={pp}")
    if microbatches % 2 or microbatches < 2 * pp:
        raise ScheduleError(f"dualpipe: microbatches must be even and >= 2*pp = {2 * pp} (half go each way; "
                            f"DualPipe.step asserts it), got {microbatches}")
    orders = tuple(tuple(_rank_order(r, pp, microbatches)) for r in range(pp))
    return Schedule("dualpipe", pp, microbatches, 2, v_placement(pp), orders,
                    {"placement": "v", "source": "deepseek-ai/DualPipe dualpipe.py DualPipe.step",
                     "directions": 2},
                    segments=((0, 0), (pp, microbatches // 2)))


__all__ = ["dualpipe"]
