"""The delta simulator's named state (simulator/engine/delta/state.py): allocation and growth."""
from __future__ import annotations

import math

from simulator.engine.delta.state import DeltaState


def test_allocate_then_grow_gives_new_ids_no_times_no_queue_entry_and_clear_scratch():
    s = DeltaState()
    s.allocate(2, count_changed=False)
    assert list(s.ready_time) == [0.0, 0.0] and list(s.queue_device) == [0, 0]
    s.ready_time[1] = 5.0
    s.allocate(2, count_changed=True)  # same size: kept as it is
    assert s.ready_time[1] == 5.0
    s.grow(2)
    assert s.ready_time[1] == 5.0 and all(math.isnan(v) for v in s.ready_time[2:])
    assert all(math.isnan(v) for arr in (s.start_time, s.end_time, s.queue_key) for v in arr[2:])
    assert list(s.queue_device) == [0, 0, -1, -1]
    for arr in (s.sweep_status, s.pending_preds, s.new_ready, s.old_start, s.old_end):
        assert len(arr) == 4 and list(arr[2:]) == [0, 0]


def test_allocate_counting_changes_starts_from_unknown_times():
    s = DeltaState()
    s.allocate(3, count_changed=True)
    assert all(math.isnan(v) for arr in (s.ready_time, s.start_time, s.end_time) for v in arr)
    assert list(s.queue_key) == [0.0, 0.0, 0.0]  # keys are written by the run, never compared
