"""An independent SimPy implementation of the engine's semantics, used only by the tests.

It shares no code with :mod:`simulator.engine.core`. Model (shared/notes/engine-measurements.md, "SimPy as a
reference engine"):

* each device is a ``simpy.PriorityResource`` (capacity 1); a waiting request's priority is
  ``(ready_time, task_id)``, so a freed device goes to the waiting task with the smallest key;
* each task is a process: it waits for the completion events of all its predecessors (its ready
  time is then ``env.now``: the latest predecessor end, or 0 for a source), then requests its
  device, holds it for its duration and releases it;
* the request is *deferred*: the process first waits for an event scheduled at the current instant
  with priority ``2 + task_id``. SimPy orders events by ``(time, priority, insertion)`` and its own
  events use priority 0 (urgent) or 1 (normal) (simpy/events.py: ``URGENT = 0``, ``NORMAL = 1``), so
  deferred requests run after every normal event at that instant -- releases included -- one at a
  time in task-id order, and the normal events one request causes (a zero-duration task finishing,
  its successors becoming ready) run before the next deferred request. That reproduces the engine's
  "pop the smallest (ready, id)" order, ties and zero durations included; SimPy's default FIFO
  would break ties by event-processing order instead (same notes file);
* with ``queue="request"`` the devices queue by request order instead of ``(ready, id)``: the only
  difference arises with zero-duration tasks (see :func:`simulate_reference`).

Costs ~1 KB and tens of microseconds per task: for tests on small graphs only.
"""
from __future__ import annotations

import itertools

import numpy as np
import simpy
from simpy.events import NORMAL

#: priorities of deferred requests start here (above SimPy's URGENT = 0 and NORMAL = 1)
_DEFERRED_BASE = NORMAL + 1


class _Deferred(simpy.Event):
    """An event triggered at creation but processed after all normal events at the current instant
    (modelled on simpy.events.Initialize, which schedules itself with URGENT priority)."""

    def __init__(self, env: simpy.Environment, priority: int):
        super().__init__(env)
        self._ok = True
        self._value = None
        env.schedule(self, priority)


def simulate_reference(duration, device, succ_ptr, succ_idx, num_devices: int, *, queue: str = "priority"):
    """Simulate with SimPy; returns ``(start, end)`` float64 arrays indexed by task id.

    queue: how a busy device orders its waiting requests.
      ``"priority"`` -- by ``(ready_time, task_id)``. Equals the engine whenever every duration is
      positive (then requests arrive in increasing (ready, id) order anyway).
      ``"request"`` -- by request order, i.e. the engine's pop order (the deferred requests are made
      in exactly that order). Equals the engine with zero durations too: a zero-duration task can
      make a successor ready at the same instant with a smaller id than a task that already
      requested (was popped); the engine keeps the device order of the pops, a priority queue
      would let the successor jump ahead.

    Raises ``RuntimeError`` when some task never runs (a cycle).
    """
    if queue not in ("priority", "request"):
        raise ValueError(f"queue = {queue!r} must be 'priority' or 'request'")
    duration = [float(x) for x in np.asarray(duration, dtype=np.float64)]
    device = [int(x) for x in np.asarray(device)]
    ptr = [int(x) for x in np.asarray(succ_ptr)]
    idx = [int(x) for x in np.asarray(succ_idx)]
    n = len(duration)
    preds: list[set[int]] = [set() for _ in range(n)]
    for u in range(n):
        for v in idx[ptr[u]:ptr[u + 1]]:
            preds[v].add(u)

    env = simpy.Environment(initial_time=0.0)
    resources = [simpy.PriorityResource(env, capacity=1) for _ in range(max(num_devices, 1))]
    done = [env.event() for _ in range(n)]
    start = [float("nan")] * n
    end = [float("nan")] * n
    requests = itertools.count()  # request sequence numbers for queue="request"

    def task(t: int):
        if preds[t]:
            yield env.all_of([done[u] for u in sorted(preds[t])])
        ready = env.now
        yield _Deferred(env, _DEFERRED_BASE + t)
        key = (ready, t) if queue == "priority" else next(requests)
        with resources[device[t]].request(priority=key) as req:
            yield req
            start[t] = env.now
            yield env.timeout(duration[t])
            end[t] = env.now
        done[t].succeed()

    for t in range(n):
        env.process(task(t))
    env.run()
    if any(x != x for x in end):  # NaN: never finished
        stuck = [t for t in range(n) if end[t] != end[t]]
        raise RuntimeError(f"{len(stuck)} of {n} tasks never ran (a cycle?), first: {stuck[:5]}")
    return np.asarray(start, dtype=np.float64), np.asarray(end, dtype=np.float64)
