"""The timeline: one row per task with its key, device, stream and simulated times."""
from __future__ import annotations

import numpy as np
import pandas as pd

from simulator.engine.core import SimResult
from taskgraph.graph import CATEGORIES, TaskGraph


def timeline(graph: TaskGraph, result: SimResult) -> pd.DataFrame:
    """A DataFrame with columns task, op, category, stage, chunk, mb, rank, device, device_name,
    stream, is_comm, ready, start, end, duration — sorted by task id."""
    cats = np.asarray(CATEGORIES, dtype=object)
    ops = np.asarray(graph.op_names + ("",), dtype=object)  # op -1 -> ""
    dev_names = np.asarray([d.name for d in graph.devices], dtype=object)
    dev_streams = np.asarray([d.stream for d in graph.devices], dtype=object)
    dev_ranks = np.asarray([d.rank for d in graph.devices], dtype=np.int32)
    return pd.DataFrame({
        "task": np.arange(graph.num_tasks, dtype=np.int64),
        "op": ops[graph.op],
        "category": cats[graph.category],
        "stage": graph.stage,
        "chunk": graph.chunk,
        "mb": graph.mb,
        "rank": graph.rank,
        "device": graph.device,
        "device_name": dev_names[graph.device],
        "device_rank": dev_ranks[graph.device],
        "stream": dev_streams[graph.device],
        "is_comm": graph.is_comm(),
        "ready": result.ready,
        "start": result.start,
        "end": result.end,
        "duration": graph.duration,
    })
