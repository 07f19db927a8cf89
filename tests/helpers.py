"""Shared test helpers: invariants every simulated graph must satisfy."""
from __future__ import annotations

import numpy as np


def assert_timeline_invariants(graph, result, eps: float = 1e-12) -> None:
    """No two tasks overlap on one device; no task starts before all its predecessors end;
    every task lasts its duration."""
    start, end = result.start, result.end
    assert np.allclose(end - start, graph.duration, atol=1e-9)
    src = np.repeat(np.arange(graph.num_tasks), np.diff(graph.succ_ptr))
    dst = graph.succ_idx
    if src.size:
        assert np.all(start[dst] >= end[src] - eps), "a task started before a predecessor ended"
    order = np.lexsort((end, start, graph.device))  # ties: a zero-length task first (FIFO order)
    same = graph.device[order][1:] == graph.device[order][:-1]
    gaps = start[order][1:] - end[order][:-1]
    assert np.all(gaps[same] >= -eps), "two tasks overlap on one device"
