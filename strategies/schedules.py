"""Schedule registry: every schedule is a pure function ``(pp, microbatches, vpp) -> Schedule``,
looked up by name (a new schedule is one function in this dict)."""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from strategies.actions import Schedule
from strategies.errors import ScheduleError, brief
from strategies.limits import check_actions

ScheduleFn = Callable[[int, int, int], Schedule]
SCHEDULES: dict[str, ScheduleFn] = {}
#: named schedules whose backward is one fused B action per (stage, micro-batch), and those that split
#: it into I and W actions (checked against the orders in tests/test_fidelity_random.py)
FUSED_BACKWARD = frozenset({"1f1b", "gpipe", "interleaved-1f1b", "looped-bfs"})
SPLIT_BACKWARD = frozenset({"zb-h1", "zb-v", "dualpipe-v", "dualpipe"})


def has_split_backward(schedule: Schedule) -> bool:
    """Whether ``schedule`` has W actions (weight gradients apart from input gradients): by name for
    the named families, else from its actions (a custom schedule)."""
    if schedule.name in FUSED_BACKWARD or schedule.name in SPLIT_BACKWARD:
        return schedule.name in SPLIT_BACKWARD
    return any(a.kind == "W" for order in schedule.orders for x in order for a in getattr(x, "sub_actions", (x,)))


def register(name: str):
    """Decorator: add a schedule function to ``SCHEDULES`` under ``name``."""
    def deco(fn: ScheduleFn) -> ScheduleFn:
        if name in SCHEDULES:
            raise ValueError(f"schedule {name!r} registered twice")
        SCHEDULES[name] = fn
        return fn
    return deco


def get_schedule(name: str, pp: int, microbatches: int, vpp: int = 1) -> Schedule:
    """Generate the named schedule; unknown names list the valid ones."""
    from strategies.config import did_you_mean
    fn = SCHEDULES.get(name) if isinstance(name, str) else None
    if fn is None:
        raise ScheduleError(f"unknown schedule {brief(name)}{did_you_mean(name, SCHEDULES)}; valid schedules: "
                            f"{', '.join(sorted(SCHEDULES))}")
    for field, value in (("pp", pp), ("microbatches", microbatches), ("vpp", vpp)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ScheduleError(f"{field} must be a positive integer, got {brief(value)}")
    check_actions(pp, max(vpp, 2) if name in ("zb-v", "dualpipe-v", "dualpipe") else vpp, microbatches, f"schedule {name!r}")
    return _generate(fn, pp, microbatches, vpp)


#: Generated schedules kept, least recently used first: at most this many actions in all (about
#: 150 bytes each); a schedule larger than that is not kept.
_CACHE: OrderedDict[tuple, tuple[Schedule, int]] = OrderedDict()
_CACHE_MAX_ACTIONS = 1_000_000
_cached_actions = 0


def _generate(fn: ScheduleFn, pp: int, microbatches: int, vpp: int) -> Schedule:
    """Schedule functions are pure and schedules immutable, so the same arguments return the same
    :class:`Schedule` object (a strategy sweep regenerates none; the coarse lowering caches its index
    structures on the object). Keyed by the function, so re-registering a name cannot go stale."""
    global _cached_actions
    key = (fn, pp, microbatches, vpp)
    hit = _CACHE.get(key)
    if hit is not None:
        _CACHE.move_to_end(key)
        return hit[0]
    sched = fn(pp, microbatches, vpp)
    size = sum(len(o) for o in sched.orders)
    if size <= _CACHE_MAX_ACTIONS:
        _CACHE[key] = (sched, size)
        _cached_actions += size
        while _cached_actions > _CACHE_MAX_ACTIONS:
            _, (_, n) = _CACHE.popitem(last=False)
            _cached_actions -= n
    return sched


def clear_schedule_cache() -> None:
    """Forget generated schedules."""
    global _cached_actions
    _CACHE.clear()
    _cached_actions = 0


# Schedule families register themselves on import (kept at the bottom: they import ``register``).
from strategies import schedules_basic, schedules_dualpipe, schedules_zb  # noqa: F401
