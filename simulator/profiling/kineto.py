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

A kernel's launching operator is the innermost ``cpu_op`` around the runtime call with the kernel's
``correlation`` (every kernel of a CUDA graph has its ``cudaGraphLaunch``'s), else the ``cpu_op`` with
the kernel's ``External id``.

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
    #: on CPU traces, the part of the step it ran in (:data:`PHASES`, from the operators around it)
    phase: str = ""


@dataclass(frozen=True)
class RankTrace:
    rank: int
    path: str
    kernels: tuple
    steps_us: tuple
    device: str   # "gpu" (device events) or "cpu" (leaf host operators)
    #: (start, end) us of each kept ProfilerStep, in the order of ``steps_us``
    step_spans: tuple = ()
    #: intra-op threads of the traced process: the trace's ``execsim_threads`` metadata
    #: (benchmarks/trace_tiny.py writes it), else the threads that ran operators; None when unknown
    threads: int | None = None


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
    spans = tuple((a, b) for a, b, _ in steps if cut is None or (b <= cut if include_last_step else a < cut))
    kept_steps = tuple(b - a for a, b in spans)
    if dev:
        kernels = _device_kernels(host, dev, cut, include_last_step)
        kind = "gpu"
    else:
        kernels = leaf_ops(host, cut, include_last_step)
        kind = "cpu"
    return RankTrace(trace_rank(doc, Path(path), index), str(path), tuple(kernels), kept_steps, kind, spans,
                     _threads(doc, host))


def _threads(doc, host) -> int | None:
    """The ``execsim_threads`` metadata when present (a positive integer), else the number of threads
    that ran ``cpu_op`` events (the main thread and the autograd engine's, at least), else None."""
    meta = doc.get("execsim_threads") if isinstance(doc, dict) else None
    try:
        n = int(meta) if meta is not None and not isinstance(meta, bool) else None
    except (TypeError, ValueError):
        n = None
    if n is not None and 1 <= n <= 1 << 16:
        return n
    tids = {e.get("tid") for e, _, _, _ in host if e.get("cat") == "cpu_op"}
    return len(tids) or None


#: parts of a training step on a CPU trace, by the operators around an operator: the optimizer's
#: step and zero_grad (``Optimizer.step#Adam.step``, ``Optimizer.zero_grad#...``: torch/optim/optimizer.py
#: profiles both under these names), the autograd engine's backward nodes
#: (``autograd::engine::evaluate_function: XBackward0``), and the rest (forward and loss)
PHASES = ("fwd", "bwd", "optimizer")


def _own_phase(name: str) -> str:
    if name.startswith("Optimizer."):
        return "optimizer"
    if name.startswith("autograd::engine::evaluate_function"):
        return "bwd"
    return ""


def _keep(ts: float, cut, include_last: bool) -> bool:
    return cut is None or (ts <= cut if include_last else ts < cut)


def _device_kernels(host, dev, cut, include_last) -> list[Kernel]:
    launch = {}   # correlation -> the host launch event's start (cuda_runtime / cuda_driver)
    for e, args, ts, _ in host:
        c = args.get("correlation")
        if isinstance(c, int) and _keep(ts, cut, include_last):
            launch[c] = ts
    ops = _ops_by_external_id(host)
    by_corr = _ops_by_correlation(host)
    out = []
    for e, args, ts, dur in dev:
        c = args.get("correlation", -1)
        if cut is not None and c not in launch:
            continue
        x = args.get("External id")
        if isinstance(c, int) and c in by_corr:   # the operator around the launch (CUDA graphs included)
            name, dims, x = by_corr[c]
            op = (name, dims)
        else:
            op = ops.get(x, ("", ()))
        out.append(Kernel(str(e.get("name", "")), ts, dur, int(args.get("stream", -1)), c if isinstance(c, int) else -1,
                          op[0], op[1], x if isinstance(x, int) else -1))
    return out


def _ops_by_correlation(host) -> dict:
    """correlation -> (name, Input Dims, External id) of the innermost ``cpu_op`` around the runtime call
    that has that correlation (``cudaLaunchKernel``, ``cudaMemcpyAsync``, ``cudaGraphLaunch`` ...: Kineto
    gives a kernel the correlation of the call that launched it, and every kernel of a CUDA graph the
    correlation of its ``cudaGraphLaunch``), on the same process and thread. A graph's kernels get
    External id -1: each is its own call (``kernels.instances``), not one summed instance. Holistic
    Trace Analysis finds a kernel's operator the same way (its call stack: the runtime event's parent
    on the CPU, ``hta/common/call_stack.py``)."""
    per_thread: dict = {}
    for e, args, ts, dur in host:
        c = args.get("correlation")
        if e.get("cat") == "cpu_op":
            per_thread.setdefault((e.get("pid"), e.get("tid")), []).append((ts, 0, -dur, e, args))
        elif isinstance(c, int) and not isinstance(c, bool):
            per_thread.setdefault((e.get("pid"), e.get("tid")), []).append((ts, 1, -dur, e, args))
    out = {}
    for evs in per_thread.values():
        evs.sort(key=lambda x: (x[0], x[1], x[2]))
        stack: list = []   # open cpu_ops: (end, event, args)
        for ts, kind, ndur, e, args in evs:
            while stack and stack[-1][0] <= ts:
                stack.pop()
            if kind == 0:
                stack.append((ts - ndur, e, args))
            elif stack:
                _, op, op_args = stack[-1]
                graph = "GraphLaunch" in str(e.get("name", ""))
                x = op_args.get("External id")
                out[args["correlation"]] = (str(op.get("name", "")), _dims(op_args),
                                            -1 if graph or not isinstance(x, int) else x)
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


def leaf_ops(host, cut, include_last) -> list[Kernel]:
    """Every cpu_op with its self time (its span less the spans of the cpu_ops directly inside it on
    the same thread: the profiler's "self CPU time"), so that summing them counts each microsecond
    of the thread once and ``aten::addmm`` keeps the GEMM it ran."""
    by_tid: dict = {}
    for e, args, ts, dur in host:
        # user annotations (Optimizer.step#..., record_function) carry the phase, not time of their own
        if e.get("cat") in ("cpu_op", "user_annotation") and _keep(ts, cut, include_last) \
                and not _STEP.match(str(e.get("name", ""))):
            by_tid.setdefault(e.get("tid"), []).append((ts, -dur, e, args))
    out = []
    for tid, evs in sorted(by_tid.items(), key=lambda kv: str(kv[0])):
        evs.sort(key=lambda x: (x[0], x[1]))
        self_t = [-x[1] for x in evs]
        phase = [""] * len(evs)
        stack: list = []   # indices of the open enclosing operators
        for i, (ts, ndur, e, _) in enumerate(evs):
            while stack and evs[stack[-1]][0] - evs[stack[-1]][1] <= ts:
                stack.pop()
            if stack:
                self_t[stack[-1]] -= min(-ndur, evs[stack[-1]][0] - evs[stack[-1]][1] - ts)
            inherited = phase[stack[-1]] if stack else "fwd"
            phase[i] = inherited if inherited != "fwd" else (_own_phase(str(e.get("name", ""))) or "fwd")
            stack.append(i)
        for (ts, ndur, e, args), st, ph in zip(evs, self_t, phase):
            if e.get("cat") != "cpu_op":   # an annotation's self time is Python around its operators: a gap
                st = 0.0
            out.append(Kernel(str(e.get("name", "")), ts, max(0.0, st), int(tid) if isinstance(tid, int) else 0, -1,
                              str(e.get("name", "")), _dims(args), len(out), ph))
    return out
