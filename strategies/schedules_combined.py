"""Combined 1F1B: the expert all-to-all of one micro-batch hidden behind another's compute.

Megatron-LM ``--overlap-moe-expert-parallel-comm`` (megatron/core/pipeline_parallel/schedules.py,
combined_1f1b.py at NVIDIA/Megatron-LM main):

* ``get_pp_rank_microbatches``: "When enabling overlap_moe_expert_parallel_comm, we schedule one
  extra micro-batch forward step before the 1f1b stages. This is needed to ensure the forward and
  backward computations are independent in all 1f1b steps": ``num_warmup_microbatches + 1``;
* ``forward_backward_helper_wrapper`` then runs each steady-state step (forward of virtual
  micro-batch ``k + warmup``, backward of ``k``) through ``combined_1f1b_schedule_for_interleaved_
  pipelining`` -> ``combined_forward_backward_step``: one step whose two halves interleave layer by
  layer (``TransformerModelChunkSchedulePlan.run``: forward layer i beside backward layer L-1-i;
  ``TransformerLayerSchedulePlan.run``: each half's dispatch / combine on the communication stream
  while the other half's attention / MLP runs on the compute stream);
* with pp = 1, ``combined_1f1b_schedule_for_no_pipelining``: F0, then (F i+1 ; B i), then the last B --
  the same rule with a warm-up of 0 + 1.

As a schedule transform: each rank keeps its forwards and its backwards in their order; the first
``warmup + 1`` forwards run alone (the forwards before the first backward in the plain order), then forward ``warmup + 1 + k`` and backward ``k`` form one
:class:`~strategies.actions.Overlap` pair, then the remaining backwards. The lowering runs a pair's
halves concurrently (``taskgraph/lower_pipeline.py`` ``concurrent_pairs``), so the overlap emerges
from the engine's streams and dependencies. One more warm-up forward = one more micro-batch's
activations held per rank (the memory events follow from the order).
"""
from __future__ import annotations

from strategies.actions import Action, Overlap, Schedule
from strategies.errors import ScheduleError

#: the schedules Megatron-LM runs combined 1F1B steps in (non-interleaved with pp = 1, interleaved)
COMBINABLE = ("1f1b", "interleaved-1f1b")


def _leading_forwards(order) -> int:
    """Forwards before the rank's first backward: Megatron's ``num_warmup_microbatches`` plus the
    steady state's first forward, i.e. the warm-up with the extra forward combined 1F1B adds."""
    n = 0
    for a in order:
        if a.kind != "F":
            break
        n += 1
    return n


def combined_1f1b(schedule: Schedule) -> Schedule:
    """``schedule``'s steady state as combined forward/backward steps (module doc).

    Examples
    --------
    >>> from strategies.schedules import get_schedule
    >>> print(combined_1f1b(get_schedule("1f1b", 1, 3)).grid())
    rank 0: 0F0 (0F1;0B0)OVERLAP_F_B (0F2;0B1)OVERLAP_F_B 0B2
    >>> print(combined_1f1b(get_schedule("1f1b", 2, 3)).grid())
    rank 0: 0F0 0F1 (0F2;0B0)OVERLAP_F_B 0B1 0B2
    rank 1: 1F0 (1F1;1B0)OVERLAP_F_B (1F2;1B1)OVERLAP_F_B 1B2
    """
    if schedule.name not in COMBINABLE:
        raise ScheduleError(f"combined 1F1B steps apply to {' and '.join(COMBINABLE)} (Megatron-LM "
                            f"--overlap-moe-expert-parallel-comm), not to schedule {schedule.name!r}")
    orders = []
    for order in schedule.orders:
        fs = [a for a in order if a.kind == "F"]
        bs = [a for a in order if a.kind == "B"]
        if len(fs) + len(bs) != len(order) or len(fs) != len(bs):
            raise ScheduleError(f"combined 1F1B needs forward and full-backward actions only, one backward per "
                                f"forward; got {len(fs)} F and {len(bs)} B of {len(order)} actions")
        w = _leading_forwards(order)
        steady = len(fs) - w
        new: list[Action | Overlap] = list(fs[:w])
        new += [Overlap(fs[w + k], bs[k]) for k in range(steady)]
        new += bs[steady:]
        orders.append(tuple(new))
    return Schedule(schedule.name, schedule.pp, schedule.microbatches, schedule.vpp, schedule.stage_to_rank,
                    tuple(orders), {**{k: v for k, v in schedule.meta.items() if not k.startswith("_")},  # no caches
                                    "combined_1f1b": True,
                                    "combined_source": "Megatron-LM schedules.py get_pp_rank_microbatches, "
                                                       "combined_1f1b.py"},
                    segments=schedule.segments)


__all__ = ["COMBINABLE", "combined_1f1b"]
