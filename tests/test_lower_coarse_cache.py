"""The coarse lowering's per-schedule cache (taskgraph/lower_coarse.py) lives beside the schedule,
not in the frozen Schedule: the object is not written, a cached index is reused for the same
object, and the entry leaves with its schedule."""
from __future__ import annotations

import dataclasses
import gc

import taskgraph.lower_coarse as lc
from strategies.schedules import get_schedule


def test_action_index_is_cached_per_schedule_object_without_writing_it():
    sched = dataclasses.replace(get_schedule("1f1b", 4, 8))  # a fresh object no one else holds
    sched.chunk_of(0)  # the Schedule's own cached property (its business, not the lowering's)
    before = dict(vars(sched))
    first = lc.action_index(sched)
    assert lc.action_index(sched) is first  # the cached index
    assert vars(sched) == before  # the frozen schedule is not written
    twin = dataclasses.replace(sched)  # equal by value, another object: its own cache
    assert lc.action_index(twin) is not first
    key = id(sched)
    assert key in lc.cached_schedule_ids()
    del sched, first, twin
    gc.collect()
    assert key not in lc.cached_schedule_ids()  # the entry left with its schedule
