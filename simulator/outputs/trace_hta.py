"""Per-rank traces in the layout Holistic Trace Analysis (HTA) reads.

HTA (github.com/facebookresearch/HolisticTraceAnalysis) loads a directory of PyTorch-profiler (Kineto)
traces, one file per rank. What it needs, read from its source (hta/common/trace_file.py,
trace_parser.py, trace.py, analyzers/breakdown_analysis.py, v0.5.0):

- each file names its rank in ``"distributedInfo": {"rank": N}``, found by the regex
  ``"rank":\\s+(\\d+)`` on the file's lines, so the header is on its own line with a space after the
  colon (trace_file.create_rank_to_trace_dict);
- GPU work is complete events (``ph: "X"``) with ``cat: "kernel"`` and an integer ``args.stream``
  (events without a stream are CPU events); communication kernels are told apart by the regex
  ``^nccl.*Kernel`` on the name (utils.is_comm_kernel / get_kernel_type), everything else but memory
  copies is computation;
- a kernel is tied to its CPU launch (``cat: "cuda_runtime"``, ``cudaLaunchKernel``) by equal
  ``args.correlation``; Kineto also draws the pair as an ``ac2g`` flow with the same id;
- timestamps in microseconds; float timestamps are rounded inward (start up, end down) by HTA's
  parser, integer ones are kept, so this export writes integer microseconds with start and end
  rounded separately (monotone: slices on one stream never overlap, and back-to-back kernels keep
  no gap between them).

Mapping: one file ``rank_<r>.json`` per simulated rank (each simulated rank stands for its pipeline
rank's GPUs); every device of the rank (compute, tp, dp, send/recv, outgoing links) is one stream:
compute is stream 7 (PyTorch's default stream), the others 20, 21, ... in the Chrome trace's
order. Each task is one kernel named like the Chrome trace's slice; communication kernels are
named as NCCL names its kernels (``ncclDevKernel_AllGather(tp-all-gather s0 mb1)``, see
``nccl_kernel_name``), so HTA counts them as communication; its launch is a zero-length
``cudaLaunchKernel`` on the host thread at the time the
task became ready (its inputs were available). HTA's idle-time breakdown therefore counts a gap
whose next kernel was not yet ready as "host wait" (here: waiting on dependencies: pipeline bubble
and exposed communication) and the rest as "kernel wait"/"other". Devices owned by no rank are left
out.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from simulator.engine.core import SimResult
from simulator.outputs.trace import STREAM_ORDER
from strategies.errors import brief
from taskgraph.graph import CATEGORIES, IS_COMM_CODE, TaskGraph

COMPUTE_STREAM = 7  # PyTorch's default CUDA stream id in Kineto traces
FIRST_OTHER_STREAM = 20
#: correlation id of task t is CORRELATION_BASE + t. HTA 0.5.0 downcasts the correlation column to the
#: smallest integer type and then stores row indices into a column of that type; under pandas >= 3
#: that raises when the ids fit int8/int16 but the row indices do not. Ids >= 2**16 keep it int32.
CORRELATION_BASE = 1 << 16


def to_us(seconds) -> np.ndarray:
    """Seconds -> integer microseconds (round half to even; monotone)."""
    return np.rint(np.asarray(seconds, dtype=np.float64) * 1e6).astype(np.int64)


def rank_streams(graph: TaskGraph, rank: int) -> list[tuple[int, int, str]]:
    """(device index, stream id, label) of every device of ``rank``; compute first as stream 7."""
    devs = sorted((STREAM_ORDER.get(d.stream, 9), d.name, i) for i, d in enumerate(graph.devices) if d.rank == rank)
    out, nxt = [], FIRST_OTHER_STREAM
    for _, name, i in devs:
        label = name.split("/", 1)[1] if "/" in name else name
        if graph.devices[i].stream == "compute" and not any(s == COMPUTE_STREAM for _, s, _ in out):
            out.append((i, COMPUTE_STREAM, label))
        else:
            out.append((i, nxt, label))
            nxt += 1
    return out


def hta_rank_text(graph: TaskGraph, result: SimResult, rank: int, world_size: int) -> str:
    """One rank's trace file as text (Kineto-like JSON, one event per line)."""
    streams = rank_streams(graph, rank)
    stream_of = np.full(len(graph.devices), -1, dtype=np.int64)
    for i, s, _ in streams:
        stream_of[i] = s
    gpu_pid, host_pid, host_tid = rank, 1_000_000 + rank, 1
    lines = [f'{{"args":{{"name":"GPU {rank} (simulated rank {rank})"}},"name":"process_name","ph":"M","pid":{gpu_pid},"tid":0}}',
             f'{{"args":{{"name":"host of rank {rank}"}},"name":"process_name","ph":"M","pid":{host_pid},"tid":0}}',
             f'{{"args":{{"name":"launch (task ready)"}},"name":"thread_name","ph":"M","pid":{host_pid},"tid":{host_tid}}}']
    for _, s, label in streams:
        lines.append(f'{{"args":{{"name":{json.dumps(f"stream {s} {label}")}}},"name":"thread_name","ph":"M",'
                     f'"pid":{gpu_pid},"tid":{s}}}')
    mask = stream_of[graph.device] >= 0
    t = np.flatnonzero(mask)
    s_us, e_us, r_us = to_us(result.start[t]), to_us(result.end[t]), to_us(result.ready[t])
    order = np.lexsort((t, e_us, s_us))  # by start, then end (a zero-length task first: FIFO order), then id
    t, s_us, e_us, r_us = t[order], s_us[order], e_us[order], r_us[order]
    ops = [json.dumps(o)[1:-1] for o in graph.op_names]
    cats = list(CATEGORIES)
    comm = IS_COMM_CODE[graph.category[t]].tolist()
    cat, op, st, mb = (graph.category[t].tolist(), graph.op[t].tolist(), graph.stage[t].tolist(), graph.mb[t].tolist())
    strm = stream_of[graph.device[t]].tolist()
    s_l, d_l, r_l = s_us.tolist(), (e_us - s_us).tolist(), r_us.tolist()
    for k, task in enumerate(t.tolist()):
        base = ops[op[k]] if op[k] >= 0 else cats[cat[k]]
        name = base if mb[k] < 0 else f"{base} s{st[k]} mb{mb[k]}" if st[k] >= 0 else f"{base} mb{mb[k]}"
        if comm[k]:
            name = nccl_kernel_name(base, name)
        cid = CORRELATION_BASE + task
        lines.append(f'{{"args":{{"correlation":{cid},"device":{rank},"execsim category":"{cats[cat[k]]}",'
                     f'"execsim task":{task},"stream":{strm[k]}}},"cat":"kernel","dur":{d_l[k]},"name":"{name}",'
                     f'"ph":"X","pid":{gpu_pid},"tid":{strm[k]},"ts":{s_l[k]}}}')
        lines.append(f'{{"args":{{"correlation":{cid}}},"cat":"cuda_runtime","dur":0,"name":"cudaLaunchKernel",'
                     f'"ph":"X","pid":{host_pid},"tid":{host_tid},"ts":{r_l[k]}}}')
        lines.append(f'{{"cat":"ac2g","id":{cid},"name":"ac2g","ph":"s","pid":{host_pid},"tid":{host_tid},"ts":{r_l[k]}}}')
        lines.append(f'{{"bp":"e","cat":"ac2g","id":{cid},"name":"ac2g","ph":"f","pid":{gpu_pid},"tid":{strm[k]},'
                     f'"ts":{s_l[k]}}}')
    head = (f'{{"distributedInfo": {{"backend": "nccl", "rank": {int(rank)}, "world_size": {int(world_size)}}},\n'
            '"schemaVersion": 1, "displayTimeUnit": "ms", "otherData": {"generator": "execsim", '
            '"time_unit": "integer us"},\n"traceEvents": [\n')
    return head + ",\n".join(lines) + "\n]}\n"


#: NCCL's device kernel per collective (NCCL >= 2.19 names them ``ncclDevKernel_<Coll>_<ALGO>_<PROTO>``,
#: e.g. ``ncclDevKernel_AllGather_RING_LL``; send/recv, and all-to-all, which NCCL runs as grouped
#: send/recv, are ``ncclDevKernel_SendRecv``). HTA tells communication kernels by the regex
#: ``^nccl.*Kernel`` (hta/utils/utils.py ``is_comm_kernel``); a name without "Kernel" counts as
#: computation, which made its communication/computation overlap NaN (no communication) before.
#: Matched on our operator names in order; the algorithm and protocol are not part of a task, so the
#: names stop at the collective.
_NCCL_KERNELS = (("all-to-all", "SendRecv"), ("send", "SendRecv"), ("recv", "SendRecv"), ("ring", "SendRecv"),
                 ("reduce-scatter", "ReduceScatter"), ("all-gather", "AllGather"), ("param-gather", "AllGather"),
                 ("all-reduce", "AllReduce"), ("grad-reduce", "AllReduce"))


def nccl_kernel_name(op: str, label: str) -> str:
    """A communication task's kernel name as NCCL writes it, with execsim's label in parentheses where
    NCCL has its argument type: ``ncclDevKernel_AllGather(tp-all-gather s0 mb1)``. Collectives we cannot
    name map to NCCL's generic kernel (``ncclDevKernel_Generic``).

    >>> nccl_kernel_name("send-act", "send-act s0 mb3")
    'ncclDevKernel_SendRecv(send-act s0 mb3)'
    """
    coll = next((c for key, c in _NCCL_KERNELS if key in op), "Generic")
    return f"ncclDevKernel_{coll}({label})"


def trace_ranks(graph: TaskGraph) -> list[int]:
    """The simulated ranks (owners of at least one device)."""
    return sorted({d.rank for d in graph.devices if d.rank >= 0})


def write_hta_traces(directory, graph: TaskGraph, result: SimResult, ranks=None, *, inputs=(),
                     flag: str = "--trace-dir") -> list[Path]:
    """Write ``rank_<r>.json`` for each simulated rank (or those in ``ranks``) into ``directory``
    (created if missing), each through the checked atomic writer (:mod:`simulator.outputs.files`):
    never over one of ``inputs``, never through a symbolic or hard link. Returns the paths written."""
    from simulator.outputs.files import OutputError, check_output, write_output
    d = Path(directory)
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{flag} {brief(str(d), 120)}: cannot create the folder ({exc.strerror or type(exc).__name__})"
                          f"; choose another folder") from None
    all_ranks = trace_ranks(graph)
    chosen = all_ranks if ranks is None else [r for r in all_ranks if r in set(ranks)]
    names = {f"rank_{r}.json" for r in chosen}
    stale = stale_rank_files(d, names, flag, inputs=inputs)   # checked before anything is written
    paths = []
    for r in chosen:
        p = d / f"rank_{r}.json"
        check_output(p, flag, inputs=inputs)
        write_output(p, hta_rank_text(graph, result, r, len(all_ranks)), flag, follow_links=False)
        paths.append(p)
    try:
        for p in stale:
            p.unlink()
    except OSError as exc:
        raise OutputError(f"{flag} {brief(str(d), 120)}: cannot remove {p.name} of an earlier run "
                          f"({exc.strerror or type(exc).__name__}); empty the folder or choose another") from None
    return paths


def stale_rank_files(directory: Path, kept: set, flag: str = "--trace-dir", *, inputs=()) -> list[Path]:
    """The ``rank_<N>.json`` entries of ``directory`` whose names are not in ``kept``: files an
    earlier run with more (or other) ranks left, which HTA would read as ranks of this run, so
    ``write_hta_traces`` removes them once the new files are written. Only names execsim itself
    gives count (other files stay); each must pass ``check_output`` (never an input of the run,
    never a folder or a read-only file); a symbolic link is removed, not what it points to."""
    import os
    import re

    from simulator.outputs.files import OutputError, check_output
    rx = re.compile(r"rank_\d+\.json")
    try:
        if not directory.is_dir():
            return []
        with os.scandir(directory) as entries:
            stale = sorted(e.name for e in entries if rx.fullmatch(e.name) and e.name not in kept)
    except OSError as exc:
        raise OutputError(f"{flag} {brief(str(directory), 120)} cannot be listed ({exc.strerror or type(exc).__name__})"
                          f"; choose another folder") from None
    out = []
    for name in stale:
        p = directory / name
        if not p.is_symlink():
            check_output(p, flag, inputs=inputs)
        out.append(p)
    return out


def idle_within_span_s(graph: TaskGraph, result: SimResult, rank_idle_s: float, rank: int) -> float:
    """What HTA's idle-time breakdown should find on ``rank``'s compute stream, in seconds: the
    report's idle time (``RankReport.idle_s``, over [0, makespan]) minus the lead-in before the
    rank's first compute task and the tail after its last one (HTA measures between its first and
    last kernel)."""
    dev = [i for i, d in enumerate(graph.devices) if d.rank == rank and d.stream == "compute"]
    m = np.isin(graph.device, dev)
    if not m.any():
        return 0.0
    return float(rank_idle_s - result.start[m].min() - (result.makespan - result.end[m].max()))
