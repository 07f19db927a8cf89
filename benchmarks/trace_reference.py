"""REFERENCE ONLY: the Chrome trace writer as it was before issue 15 (per-event dicts + json.dump).

Kept unchanged so benchmarks/trace.py can time the new writer against it in the same run.
Do not use it: it rounds start and duration separately, so slices on one thread can overlap by 1 ns.

Original module doc follows.
Chrome / Perfetto trace (Trace Event Format JSON).

Format: Google, "Trace Event Format" (docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU):
complete events ``ph: "X"`` with ``ts``/``dur`` in microseconds; metadata events ``ph: "M"`` name
processes and threads; flow events ``ph: "s"``/``"f"`` draw arrows between slices.

Layout: one process per rank (pid = rank), one thread per stream of that rank (compute, send, recv,
tp, dp ...) and one per outgoing network link (``link 0->1``). Devices owned by no rank go to a
``network`` process. Output is byte-identical for identical input (fixed event order, sorted keys,
rounded timestamps).
"""
from __future__ import annotations

import json

import numpy as np

from simulator.engine.core import SimResult
from taskgraph.graph import CATEGORIES, TaskGraph

_US = 1e6
_STREAM_ORDER = {"compute": 0, "tp": 1, "cp": 2, "ep": 3, "dp": 4, "send": 5, "recv": 6, "link": 7}


def _us(x: float) -> float:
    return round(float(x) * _US, 3)


def chrome_trace(graph: TaskGraph, result: SimResult, *, flows: bool = True, counters: dict | None = None,
                 max_flows: int = 200_000) -> dict:
    """Build the trace as a dict. ``counters`` maps rank -> (times_s, values) for counter tracks
    (e.g. memory in GB)."""
    events: list[dict] = []
    network_pid = max((d.rank for d in graph.devices), default=0) + 1
    dev_pid, dev_tid = [], []
    tids: dict[int, list] = {}
    for i, d in enumerate(graph.devices):
        pid = d.rank if d.rank >= 0 else network_pid
        dev_pid.append(pid)
        tids.setdefault(pid, []).append((_STREAM_ORDER.get(d.stream, 9), d.name, i))
    tid_of = {}
    for pid, lst in tids.items():
        for tid, (_, name, i) in enumerate(sorted(lst)):
            tid_of[i] = tid
    dev_tid = [tid_of[i] for i in range(len(graph.devices))]

    for pid in sorted(tids):
        pname = f"rank {pid}" if pid != network_pid else "network"
        events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": pname}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}})
        for tid, (_, name, _i) in enumerate(sorted(tids[pid])):
            label = name.split("/", 1)[1] if "/" in name else name
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": label}})
            events.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": tid}})

    start, end = result.start, result.end
    cat = graph.category
    ops = graph.op_names
    order = np.lexsort((np.arange(graph.num_tasks), start))  # by start, ties by id
    for t in order.tolist():
        d = int(graph.device[t])
        op = ops[graph.op[t]] if graph.op[t] >= 0 else CATEGORIES[cat[t]]
        mb, stage, chunk = int(graph.mb[t]), int(graph.stage[t]), int(graph.chunk[t])
        name = op if mb < 0 else f"{op} s{stage} mb{mb}" if stage >= 0 else f"{op} mb{mb}"
        args = {"task": t, "category": CATEGORIES[cat[t]]}
        if stage >= 0:
            args["stage"] = stage
        if chunk >= 0:
            args["chunk"] = chunk
        if mb >= 0:
            args["microbatch"] = mb
        events.append({"ph": "X", "name": name, "cat": CATEGORIES[cat[t]], "pid": dev_pid[d], "tid": dev_tid[d],
                       "ts": _us(start[t]), "dur": _us(end[t] - start[t]), "args": args})

    if flows:
        n_flow = 0
        ptr, idx = graph.succ_ptr, graph.succ_idx
        for u in range(graph.num_tasks):
            pu = dev_pid[graph.device[u]]
            for v in idx[ptr[u]:ptr[u + 1]].tolist():
                pv = dev_pid[graph.device[v]]
                if pu == pv:
                    continue
                if n_flow >= max_flows:
                    break
                fid = n_flow
                n_flow += 1
                events.append({"ph": "s", "name": "dep", "cat": "dependency", "id": fid, "pid": pu,
                               "tid": dev_tid[graph.device[u]], "ts": _us(end[u])})
                events.append({"ph": "f", "bp": "e", "name": "dep", "cat": "dependency", "id": fid, "pid": pv,
                               "tid": dev_tid[graph.device[v]], "ts": _us(start[v])})

    for rank, (times, values) in sorted((counters or {}).items()):
        for ts, val in zip(times, values):
            events.append({"ph": "C", "name": "memory GB", "pid": rank, "tid": 0, "ts": _us(ts),
                           "args": {"GB": round(float(val), 6)}})

    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"generator": "execsim", **{k: str(v) for k, v in sorted(graph.meta.items())}}}


def write_chrome_trace(path, graph: TaskGraph, result: SimResult, **kw) -> None:
    trace = chrome_trace(graph, result, **kw)
    with open(path, "w") as f:
        json.dump(trace, f, sort_keys=True, separators=(",", ":"))
        f.write("\n")
