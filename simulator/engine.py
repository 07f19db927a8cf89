"""Full-mode event engine: FlexFlow's execution-simulator loop over flat arrays.

Semantics (Jia et al. 2019, "Beyond Data and Model Parallelism for DNNs", Section 5.2, Algorithm 1):
a global priority queue holds the tasks whose predecessors have all finished, keyed by
``(ready_time, task_id)``. Pop the smallest; it starts at ``max(ready_time, device_free[device])``,
ends ``duration`` later, and the device is busy until then. A successor's ready time is the latest
end of its predecessors; it enters the queue when its last predecessor finishes.

Consequences: each device runs its tasks FIFO in (ready_time, task_id) order, and ties are broken by
task id, so identical inputs give identical timelines. Zero-duration tasks are allowed: their
successors become ready at the same instant and enter the queue keyed by (that instant, id), i.e. the
rule is always "pop order of the (ready, id) heap".

The engine knows nothing about pipelines: any per-device order a schedule wants is expressed by the
task graph's program-order edges.
"""
from __future__ import annotations

import gc
import heapq
from dataclasses import dataclass

import numpy as np

from strategies.errors import SimulationError


@dataclass
class SimResult:
    """Per-task times (seconds) and the global pop order of one simulation.

    ready, start, end: float64 arrays indexed by task id.
    order: task ids in the order the engine popped them (int32).
    makespan: latest end time (0.0 for an empty graph).
    """

    ready: np.ndarray
    start: np.ndarray
    end: np.ndarray
    order: np.ndarray
    makespan: float


def simulate_arrays(duration, device, succ_ptr, succ_idx, num_devices: int, describe=None) -> SimResult:
    """Run the FIFO engine on raw arrays. ``describe(t)`` names a task in deadlock errors."""
    n = len(duration)
    dur = duration.tolist() if isinstance(duration, np.ndarray) else list(duration)
    dev = device.tolist() if isinstance(device, np.ndarray) else list(device)
    ptr = succ_ptr.tolist() if isinstance(succ_ptr, np.ndarray) else list(succ_ptr)
    idx = succ_idx.tolist() if isinstance(succ_idx, np.ndarray) else list(succ_idx)
    indeg = np.bincount(np.asarray(succ_idx, dtype=np.int64), minlength=n).tolist() if n else []
    ready = [0.0] * n
    start = [0.0] * n
    end = [0.0] * n
    free = [0.0] * max(num_devices, 1)
    order: list[int] = []
    append = order.append
    heap = [(0.0, t) for t in range(n) if indeg[t] == 0]  # already sorted: a valid heap
    pop, push = heapq.heappop, heapq.heappush

    gc_was_enabled = gc.isenabled()
    gc.disable()  # measured 0-90 % faster with many live objects (shared/notes/engine-measurements.md)
    try:
        while heap:
            r, t = pop(heap)
            append(t)
            d = dev[t]
            s = free[d]
            if r > s:
                s = r
            e = s + dur[t]
            free[d] = e
            start[t] = s
            end[t] = e
            for v in idx[ptr[t]:ptr[t + 1]]:
                if e > ready[v]:
                    ready[v] = e
                c = indeg[v] - 1
                indeg[v] = c
                if c == 0:
                    push(heap, (ready[v], v))
    finally:
        if gc_was_enabled:
            gc.enable()

    if len(order) < n:
        raise SimulationError(_deadlock_message(n, order, indeg, dev, num_devices, describe))
    return SimResult(
        ready=np.asarray(ready, dtype=np.float64),
        start=np.asarray(start, dtype=np.float64),
        end=np.asarray(end, dtype=np.float64),
        order=np.asarray(order, dtype=np.int32),
        makespan=max(end) if n else 0.0,
    )


def simulate(graph) -> SimResult:
    """Simulate a :class:`taskgraph.graph.TaskGraph` in full mode."""
    return simulate_arrays(graph.duration, graph.device, graph.succ_ptr, graph.succ_idx,
                           graph.num_devices, describe=graph.describe)


def _deadlock_message(n, order, indeg, dev, num_devices, describe) -> str:
    done = np.zeros(n, dtype=bool)
    done[np.asarray(order, dtype=np.int64)] = True
    stuck = np.flatnonzero(~done)
    name = describe or (lambda t: f"task {t}")
    heads = {}
    for t in stuck.tolist():  # lowest unfinished id per device = its blocked head in program order
        heads.setdefault(dev[t], t)
    lines = [f"simulation stuck: {len(stuck)} of {n} tasks can never start (a cycle in the task graph "
             f"or a schedule whose per-device order deadlocks). Blocked head task of each device:"]
    for d in sorted(heads):
        t = heads[d]
        lines.append(f"  device {d}: {name(t)} waits for {indeg[t]} unfinished predecessor(s)")
    return "\n".join(lines)
