"""Reading PyTorch profiler (Kineto) traces: one Chrome-trace JSON per rank in a folder, the layout
Holistic Trace Analysis reads (``distributedInfo.rank``; ``.json`` or ``.json.gz``).

What counts as a device event, and which are kept, follows HTA (``hta/common/trace.py``) so that
totals agree with its kernel breakdown:

* device events: complete events (``ph: X``) with ``args.stream`` (kernels, ``gpu_memcpy``,
  ``gpu_memset``), as HTA's ``trace_df["stream"].ne(-1)``;
* with two or more ``ProfilerStep#N`` annotations, the last step is dropped (the profiler stops
  inside it): a device event is kept when a host event with its ``correlation`` id starts before the
  last step does (HTA ``_filter_irrelevant_gpu_kernels``, ``include_last_profiler_step=False``);
  ``include_last_step`` keeps it (HTA's ``True``: host events up to the last step's end).

A trace without device events (a CPU run) uses its host operators instead: each ``cpu_op`` with its
self time (the operators nested in it subtracted), on the "stream" of its thread. Step times
are the kept ``ProfilerStep#N`` spans (the host's wall clock of each step).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from simulator.profiling.trace_checks import complete_events, list_trace_files, trace_rank
from strategies.documents import load_trace_json
from strategies.errors import ConfigError

_STEP = re.compile(r"^ProfilerStep#(\d+)$")


@dataclass(frozen=True)
class Kernel:
    """One device event (or leaf host operator on a CPU trace), microseconds."""

    name: str
    ts: float
    dur: float
    stream: int
    correlation: int = -1
    #: the innermost host operator that launched it: name and ``Input Dims`` (record_shapes), if known
    op: str = ""
    dims: tuple = ()
    #: the launching host operator's ``External id`` (kernels of one operator call share it); -1 unknown
    ext: int = -1


@dataclass(frozen=True)
class RankTrace:
    rank: int
    path: str
    kernels: tuple
    steps_us: tuple
    device: str   # "gpu" (device events) or "cpu" (leaf host operators)


def trace_files(folder) -> list[Path]:
    """The trace files of ``folder`` (``trace_checks.list_trace_files``: bounded, never blocking)."""
    return list_trace_files(folder)


def read_trace_dir(folder, include_last_step: bool = False) -> list[RankTrace]:
    """Every rank's trace in ``folder``, sorted by rank."""
    out, seen = [], {}
    for i, f in enumerate(trace_files(folder)):
        rt = read_trace(f, i, include_last_step)
        if rt.rank in seen:
            raise ConfigError(f"traces {seen[rt.rank].name} and {f.name} are both rank {rt.rank}; keep one per rank")
        seen[rt.rank] = f
        out.append(rt)
    return sorted(out, key=lambda r: r.rank)


def read_trace(path: Path, index: int = 0, include_last_step: bool = False) -> RankTrace:
    """One rank's trace (module docstring)."""
    doc = load_trace_json(path, "trace")
    host, dev = complete_events(doc, path)   # every field used, of the right type (trace_checks)
    steps = sorted((ts, ts + dur, e.get("name")) for e, _, ts, dur in host if _STEP.match(str(e.get("name", ""))))
    names = {s[2] for s in steps}
    cut = None
    if len(names) >= 2:
        cut = max(s[1] for s in steps) if include_last_step else max(s[0] for s in steps)
    kept_steps = tuple(b - a for a, b, _ in steps if cut is None or (b <= cut if include_last_step else a < cut))
    if dev:
        kernels = _device_kernels(host, dev, cut, include_last_step)
        kind = "gpu"
    else:
        kernels = _leaf_ops(host, cut, include_last_step)
        kind = "cpu"
    return RankTrace(trace_rank(doc, Path(path), index), str(path), tuple(kernels), kept_steps, kind)


def _keep(ts: float, cut, include_last: bool) -> bool:
    return cut is None or (ts <= cut if include_last else ts < cut)


def _device_kernels(host, dev, cut, include_last) -> list[Kernel]:
    launch = {}   # correlation -> the host launch event's start (cuda_runtime / cuda_driver)
    for e, args, ts, _ in host:
        c = args.get("correlation")
        if isinstance(c, int) and _keep(ts, cut, include_last):
            launch[c] = ts
    ops = _ops_by_external_id(host)
    out = []
    for e, args, ts, dur in dev:
        c = args.get("correlation", -1)
        if cut is not None and c not in launch:
            continue
        x = args.get("External id")
        op = ops.get(x, ("", ()))
        out.append(Kernel(str(e.get("name", "")), ts, dur, int(args.get("stream", -1)), c if isinstance(c, int) else -1,
                          op[0], op[1], x if isinstance(x, int) else -1))
    return out


def _ops_by_external_id(host) -> dict:
    """External id -> (name, Input Dims) of the innermost (latest-starting) cpu_op with that id."""
    best: dict = {}
    for e, args, ts, _ in host:
        if e.get("cat") != "cpu_op":
            continue
        x = args.get("External id")
        if x is None:
            continue
        if x not in best or ts >= best[x][0]:
            best[x] = (ts, str(e.get("name", "")), _dims(args))
    return {k: (v[1], v[2]) for k, v in best.items()}


def _dims(args) -> tuple:
    d = args.get("Input Dims")
    if not isinstance(d, list):
        return ()
    return tuple(tuple(int(x) for x in t) if isinstance(t, list) and all(isinstance(x, int) for x in t) else ()
                 for t in d)


def _leaf_ops(host, cut, include_last) -> list[Kernel]:
    """Every cpu_op with its self time (its span less the spans of the cpu_ops directly inside it on
    the same thread: the profiler's "self CPU time"), so that summing them counts each microsecond
    of the thread once and ``aten::addmm`` keeps the GEMM it ran."""
    by_tid: dict = {}
    for e, args, ts, dur in host:
        if e.get("cat") == "cpu_op" and _keep(ts, cut, include_last):
            by_tid.setdefault(e.get("tid"), []).append((ts, -dur, e, args))
    out = []
    for tid, evs in sorted(by_tid.items(), key=lambda kv: str(kv[0])):
        evs.sort(key=lambda x: (x[0], x[1]))
        self_t = [-x[1] for x in evs]
        stack: list = []   # indices of the open enclosing operators
        for i, (ts, ndur, _, _) in enumerate(evs):
            while stack and evs[stack[-1]][0] - evs[stack[-1]][1] <= ts:
                stack.pop()
            if stack:
                self_t[stack[-1]] -= min(-ndur, evs[stack[-1]][0] - evs[stack[-1]][1] - ts)
            stack.append(i)
        for (ts, ndur, e, args), st in zip(evs, self_t):
            out.append(Kernel(str(e.get("name", "")), ts, max(0.0, st), int(tid) if isinstance(tid, int) else 0, -1,
                              str(e.get("name", "")), _dims(args), len(out)))
    return out
