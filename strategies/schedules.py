"""Schedule registry: every schedule is a pure function ``(pp, microbatches, vpp) -> Schedule``,
looked up by name (a new schedule is one function in this dict)."""
from __future__ import annotations

from typing import Callable

from strategies.actions import Schedule
from strategies.errors import ScheduleError

ScheduleFn = Callable[[int, int, int], Schedule]
SCHEDULES: dict[str, ScheduleFn] = {}


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
    fn = SCHEDULES.get(name)
    if fn is None:
        raise ScheduleError(f"unknown schedule {name!r}; valid schedules: {', '.join(sorted(SCHEDULES))}")
    for field, value in (("pp", pp), ("microbatches", microbatches), ("vpp", vpp)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ScheduleError(f"{field} must be a positive integer, got {value!r}")
    return fn(pp, microbatches, vpp)


# Schedule families register themselves on import (kept at the bottom: they import ``register``).
from strategies import schedules_basic, schedules_zb  # noqa: E402,F401
