"""Chrome / Perfetto trace (Trace Event Format JSON).

Format: Google, "Trace Event Format" (docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU):
complete events ``ph: "X"`` with ``ts``/``dur`` in microseconds; metadata events ``ph: "M"`` name
processes and threads; flow events ``ph: "s"``/``"f"`` draw arrows between slices; counter events
``ph: "C"``.

Layout: one process per rank (pid = rank), one thread per stream of that rank (compute, send, recv,
tp, dp ...) and one per outgoing network link (``link 0->1``). Devices owned by no rank go to a
``network`` process.

Timestamps are integer nanoseconds: each task's start and end are rounded to the nanosecond
*separately* and the duration is their difference (written as microseconds with exactly three
decimals). Rounding is monotone, so a task that starts at or after the previous task's end on its
device still does after rounding: slices on one thread never overlap (the old writer rounded start
and duration separately and made 24,717 slices of the GPT-3 175B example overlap by 1 ns).

Speed: the JSON text is built directly, one preformatted line per event from numpy arrays (no
per-event dict, no ``json.dump``); keys are written in sorted order, so the bytes equal what
``json.dumps(..., sort_keys=True)`` would give for the same values. ~6x faster than the old writer
on the GPT-3 175B example in the same run (``python -m benchmarks.trace``; docs/performance.md).

Filters: ``ranks`` keeps only the given ranks' processes (and drops the ``network`` process);
``level="stage"`` merges each run of consecutive tasks on one device with the same (category,
stage, chunk, microbatch) into one slice (``args.tasks`` = tasks merged, ``args.busy_us`` = their
summed duration), so a 1,024-GPU operator-level trace becomes a per-stage one; flows are left out
and the memory counter is sampled at the rank's compute-slice boundaries and at the peak inside
each slice (:func:`thin_counter`), so every peak stays visible.

A path ending in ``.gz`` is written gzip-compressed (deterministic: no file name, mtime 0).
"""
from __future__ import annotations

import gzip
import json
import re

import numpy as np

from simulator.engine.core import SimResult
from strategies.errors import ConfigError, brief
from taskgraph.graph import CATEGORIES, TaskGraph

STREAM_ORDER = {"compute": 0, "tp": 1, "cp": 2, "ep": 3, "dp": 4, "send": 5, "recv": 6, "link": 7}
LEVELS = ("operator", "stage")


def to_ns(seconds) -> np.ndarray:
    """Seconds -> integer nanoseconds (round half to even; monotone, so order is kept)."""
    return np.rint(np.asarray(seconds, dtype=np.float64) * 1e9).astype(np.int64)


def _fmt_us(ns: np.ndarray) -> list[str]:
    """Integer nanoseconds -> microsecond strings with exactly three decimals (``12.345``). Exact for
    times below ~50 days: the float ns / 1000 is then within 0.5 ns of the decimal value (2**-52 relative)."""
    return list(map("{:.3f}".format, (np.asarray(ns, dtype=np.int64) / 1000.0).tolist()))


def _js(s: str) -> str:
    """A JSON string literal (quotes included)."""
    return json.dumps(s)


def _layout(graph: TaskGraph):
    """(pid per device, tid per device, {pid: [(tid, label)]}, network pid)."""
    network_pid = max((d.rank for d in graph.devices), default=0) + 1
    dev_pid = [d.rank if d.rank >= 0 else network_pid for d in graph.devices]
    per_pid: dict[int, list] = {}
    for i, d in enumerate(graph.devices):
        per_pid.setdefault(dev_pid[i], []).append((STREAM_ORDER.get(d.stream, 9), d.name, i))
    dev_tid = [0] * len(graph.devices)
    threads: dict[int, list] = {}
    for pid, lst in per_pid.items():
        for tid, (_, name, i) in enumerate(sorted(lst)):
            dev_tid[i] = tid
            threads.setdefault(pid, []).append((tid, name.split("/", 1)[1] if "/" in name else name))
    return np.asarray(dev_pid, dtype=np.int64), np.asarray(dev_tid, dtype=np.int64), threads, network_pid


def parse_ranks(text: str) -> tuple[int, ...]:
    """``"0,1,8-11"`` -> (0, 1, 8, 9, 10, 11). Raises ConfigError naming the bad item.

    Ranks are below ``strategies.limits.MAX_GPUS`` (no run has more), and overlapping ranges are
    merged before they are listed, so the work is bounded by that limit, not by the numbers given.

    >>> parse_ranks("3,0-1,1-2")
    (0, 1, 2, 3)
    """
    from strategies.limits import MAX_GPUS
    spans: list[tuple[int, int]] = []
    for item in (x.strip() for x in str(text).split(",")):
        if not item:
            continue
        lo, sep, hi = item.partition("-")
        lo, hi = lo.strip(), hi.strip()
        if not (lo.isascii() and lo.isdigit()) or (sep and not (hi.isascii() and hi.isdigit())):
            raise ConfigError(f"--trace-ranks: {brief(item)} is not a rank or a range; write e.g. 0,1,8-15")
        if len(lo) > 12 or len(hi) > 12 or int(lo) >= MAX_GPUS or (sep and int(hi) >= MAX_GPUS):
            raise ConfigError(f"--trace-ranks: {brief(item)} names a rank over the limit of {MAX_GPUS - 1:,} (no run "
                              f"has more than {MAX_GPUS:,} GPUs; docs/strategy-file.md, Limits); give ranks of this run")
        a, b = int(lo), int(hi) if sep else int(lo)
        if b < a:
            raise ConfigError(f"--trace-ranks: range {brief(item)} ends before it starts; write it low-high")
        spans.append((a, b))
    if not spans:
        raise ConfigError(f"--trace-ranks {brief(text)} names no rank; write e.g. 0,1 or 0-7")
    spans.sort()
    merged = [list(spans[0])]
    for a, b in spans[1:]:
        if a <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return tuple(r for a, b in merged for r in range(a, b + 1))


def _selected_tasks(graph: TaskGraph, dev_keep: np.ndarray) -> np.ndarray:
    return np.flatnonzero(dev_keep[graph.device]) if graph.num_tasks else np.zeros(0, np.int64)


def _stage_runs(graph: TaskGraph, result: SimResult, tasks: np.ndarray):
    """Merge runs of consecutive tasks on one device with the same (category, stage, chunk, mb [, op
    when mb < 0]). Returns (first task of each run, run start ns, run end ns, tasks per run, busy ns)."""
    s_ns, e_ns = to_ns(result.start[tasks]), to_ns(result.end[tasks])
    dev = graph.device[tasks].astype(np.int64)
    # per device by start, then end, then id: the engine's FIFO order (a zero-length task that starts
    # when another does ran first, else it would start at that one's end: DualPipe's interleaved pairs)
    order = np.lexsort((tasks, e_ns, s_ns, dev))
    t, s_ns, e_ns, dev = tasks[order], s_ns[order], e_ns[order], dev[order]
    mb = graph.mb[t].astype(np.int64)
    key = np.stack([dev, graph.category[t].astype(np.int64), graph.stage[t].astype(np.int64),
                    graph.chunk[t].astype(np.int64), mb, np.where(mb < 0, graph.op[t], -2).astype(np.int64)])
    new = np.ones(t.size, dtype=bool)
    if t.size > 1:
        new[1:] = np.any(key[:, 1:] != key[:, :-1], axis=0)
    first = np.flatnonzero(new)
    last = np.r_[first[1:], t.size] - 1
    busy = np.add.reduceat(e_ns - s_ns, first) if t.size else np.zeros(0, np.int64)
    return t[first], s_ns[first], np.maximum.reduceat(e_ns, first) if t.size else e_ns, last - first + 1, busy


def thin_counter(times: np.ndarray, values: np.ndarray, starts: np.ndarray, ends: np.ndarray):
    """A step curve (``values[k]`` holds from ``times[k]``, times ascending) sampled at each run's
    start and end plus, inside each run, the sample holding the run's maximum: the curve's value at
    every stage-slice boundary and its peak within each slice are kept exactly, at their own times.
    Returns (times, values) ascending, one sample per time (the curve's value there).

    >>> thin_counter(np.array([0., 1, 2, 3, 4]), np.array([1., 5, 2, 3, 0]), np.array([0.5]), np.array([3.5]))
    (array([0.5, 1. , 3.5]), array([1., 5., 3.]))
    """
    if starts.size == 0:
        return times, values
    b = np.r_[starts, ends]
    at = np.searchsorted(times, b, side="right") - 1
    ok = at >= 0
    pick_t = [b[ok]]
    lo = np.searchsorted(times, starts, side="left")
    hi = np.searchsorted(times, ends, side="left")
    inside = np.flatnonzero(hi > lo)
    if inside.size:  # the sample holding each run's maximum (first one on ties)
        idx = np.array([lo[k] + int(np.argmax(values[lo[k]:hi[k]])) for k in inside.tolist()], dtype=np.int64)
        pick_t.append(times[idx])
    tt = np.unique(np.concatenate(pick_t))  # one sample per time, with the curve's value there
    return tt, values[np.searchsorted(times, tt, side="right") - 1]


def _slice_lines(graph: TaskGraph, t, s_ns, e_ns, dev_pid, dev_tid, level, busy_us, n_runs) -> list[str]:
    """The complete events of tasks ``t`` (file order), built with one format string per pattern of
    present keys (stage / chunk / microbatch >= 0) mapped over columns: no per-event dict or branch."""
    n = t.size
    cat_js = np.asarray([_js(c) for c in CATEGORIES], dtype=object)
    ops = np.asarray([_js(o)[1:-1] for o in graph.op_names] + [""], dtype=object)  # op -1 -> ""
    cat, op = graph.category[t], graph.op[t]
    st, ch, mb = graph.stage[t], graph.chunk[t], graph.mb[t]
    cat_plain = np.asarray([_js(c)[1:-1] for c in CATEGORIES], dtype=object)[cat]
    base = np.where(op >= 0, ops[op], cat_plain)  # the operator's name, else the category's
    if level == "stage":
        base = np.where(mb >= 0, cat_plain, base)  # a run of one microbatch is named by its category
    d = graph.device[t]
    cols = {"c": cat_js[cat], "ch": ch, "m": mb, "st": st, "t": t, "dur": np.asarray(_fmt_us(e_ns - s_ns), dtype=object),
            "b": base, "pid": dev_pid[d], "tid": dev_tid[d], "ts": np.asarray(_fmt_us(s_ns), dtype=object)}
    if busy_us is not None:
        cols["bu"], cols["n"] = np.asarray(busy_us, dtype=object), np.asarray(n_runs)
    out = np.empty(n, dtype=object)
    pattern = (st >= 0).astype(np.int8) * 4 + (ch >= 0).astype(np.int8) * 2 + (mb >= 0).astype(np.int8)
    for pat in np.unique(pattern).tolist():
        has_st, has_ch, has_m = bool(pat & 4), bool(pat & 2), bool(pat & 1)
        keys = (["bu"] if busy_us is not None else []) + ["c"] + (["ch"] if has_ch else []) + \
            (["m"] if has_m else []) + (["st"] if has_st else []) + ["t"] + (["n"] if busy_us is not None else [])
        labels = {"bu": "busy_us", "c": "category", "ch": "chunk", "m": "microbatch", "st": "stage", "t": "task",
                  "n": "tasks"}
        name = '%(b)s' + ((' s%(st)s mb%(m)s' if has_st else ' mb%(m)s') if has_m else "")
        fmt = ('{"args":{' + ",".join(f'"{labels[k]}":%({k})s' for k in keys) + '},"cat":%(c)s,"dur":%(dur)s,"name":"'
               + name + '","ph":"X","pid":%(pid)s,"tid":%(tid)s,"ts":%(ts)s}')
        used = re.findall(r"%\((\w+)\)s", fmt)  # the columns in template order
        fmt = re.sub(r"%\(\w+\)s", "%s", fmt)
        sel = np.flatnonzero(pattern == pat)
        columns = [(cols[k] if sel.size == n else cols[k][sel]).tolist() for k in used]
        out[sel] = [fmt % row for row in zip(*columns)]
    return out.tolist()


def trace_lines(graph: TaskGraph, result: SimResult, *, flows: bool = True, counters: dict | None = None,
                max_flows: int = 200_000, ranks=None, level: str = "operator") -> list[str]:
    """The trace's events, one JSON object per string, in file order (metadata, slices by start then
    task id, flows, counters). ``counters`` maps rank -> (times_s, values_gib) for the memory track."""
    if level not in LEVELS:
        raise ConfigError(f"trace level {level!r} is not one of: {', '.join(LEVELS)}")
    dev_pid, dev_tid, threads, network_pid = _layout(graph)
    keep_pid = set(threads) if ranks is None else {int(r) for r in ranks} & set(threads)
    if not keep_pid and threads:
        have = sorted(p for p in threads if p != network_pid)
        span = f"ranks {have[0]}-{have[-1]}" if have else "no ranks"
        raise ConfigError(f"--trace-ranks {brief(sorted(ranks))} select no simulated rank; this run has {span}")
    dev_keep = np.asarray([int(p) in keep_pid for p in dev_pid.tolist()], dtype=bool)
    lines: list[str] = []
    for pid in sorted(keep_pid):
        pname = _js(f"rank {pid}" if pid != network_pid else "network")
        lines.append(f'{{"args":{{"name":{pname}}},"name":"process_name","ph":"M","pid":{pid},"tid":0}}')
        lines.append(f'{{"args":{{"sort_index":{pid}}},"name":"process_sort_index","ph":"M","pid":{pid},"tid":0}}')
        for tid, label in threads[pid]:
            lines.append(f'{{"args":{{"name":{_js(label)}}},"name":"thread_name","ph":"M","pid":{pid},"tid":{tid}}}')
            lines.append(f'{{"args":{{"sort_index":{tid}}},"name":"thread_sort_index","ph":"M","pid":{pid},"tid":{tid}}}')

    tasks = _selected_tasks(graph, dev_keep)
    if level == "stage":
        t, s_ns, e_ns, n_in, busy = _stage_runs(graph, result, tasks)
        order = np.lexsort((t, e_ns, s_ns))
        t, s_ns, e_ns, n_in, busy = t[order], s_ns[order], e_ns[order], n_in[order], busy[order]
        busy_us, n_runs = _fmt_us(busy), n_in.tolist()
    else:
        s_all, e_all = to_ns(result.start[tasks]), to_ns(result.end[tasks])
        order = np.lexsort((tasks, e_all, s_all))  # by start, then end (zero-length first), then id
        t, s_ns, e_ns = tasks[order], s_all[order], e_all[order]
        busy_us = n_runs = None
    lines.extend(_slice_lines(graph, t, s_ns, e_ns, dev_pid, dev_tid, level, busy_us, n_runs))

    if flows and level == "operator" and graph.num_tasks:
        ptr, idx = graph.succ_ptr, graph.succ_idx.astype(np.int64)
        src = np.repeat(np.arange(graph.num_tasks, dtype=np.int64), np.diff(ptr))
        pu, pv = dev_pid[graph.device[src]], dev_pid[graph.device[idx]]
        m = (pu != pv) & dev_keep[graph.device[src]] & dev_keep[graph.device[idx]]
        src, dst = src[m][:max_flows], idx[m][:max_flows]  # CSR order: by source task, then successor
        us, uf = _fmt_us(to_ns(result.end[src])), _fmt_us(to_ns(result.start[dst]))
        ps, ts_, pf, tf = (dev_pid[graph.device[src]].tolist(), dev_tid[graph.device[src]].tolist(),
                           dev_pid[graph.device[dst]].tolist(), dev_tid[graph.device[dst]].tolist())
        sf = ('{"cat":"dependency","id":%d,"name":"dep","ph":"s","pid":%d,"tid":%d,"ts":%s}\0'
              '{"bp":"e","cat":"dependency","id":%d,"name":"dep","ph":"f","pid":%d,"tid":%d,"ts":%s}')
        ids = range(src.size)
        for pair in (sf % row for row in zip(ids, ps, ts_, us, ids, pf, tf, uf)):
            lines.extend(pair.split("\0"))

    for rank, (times, values) in sorted((counters or {}).items()):
        if int(rank) not in keep_pid:
            continue
        tns, values = to_ns(times), np.asarray(values, dtype=np.float64)
        if level == "stage" and tns.size:  # sampled at the rank's compute-slice boundaries and peaks
            cdev = [i for i, d in enumerate(graph.devices) if d.rank == int(rank) and d.stream == "compute"]
            keep = np.isin(graph.device[t], cdev)
            tns, values = thin_counter(tns, values, s_ns[keep], e_ns[keep])
        tss = _fmt_us(tns)
        vals = map("{:.6f}".format, np.asarray(values, dtype=np.float64).tolist())  # GiB to the kB
        cf = '{"args":{"GiB":%s},"name":"memory GiB","ph":"C","pid":' + str(int(rank)) + ',"tid":0,"ts":%s}'
        lines.extend([cf % row for row in zip(vals, tss)])
    return lines


def trace_text(graph: TaskGraph, result: SimResult, **kw) -> str:
    """The whole trace file as text (one event per line)."""
    other = {"generator": "execsim", "time_unit": "us, integer ns precision",
             **{k: str(v) for k, v in sorted(graph.meta.items())}}
    head = ('{"displayTimeUnit":"ms","otherData":' + json.dumps(other, sort_keys=True, separators=(",", ":"))
            + ',"traceEvents":[\n')
    return head + ",\n".join(trace_lines(graph, result, **kw)) + "\n]}\n"


def chrome_trace(graph: TaskGraph, result: SimResult, **kw) -> dict:
    """The trace as a dict (parsed back from :func:`trace_text`; for tests and small graphs)."""
    return json.loads(trace_text(graph, result, **kw))


def write_text(path, text: str) -> None:
    """Write ``text`` to ``path``; gzip-compressed (no name, mtime 0: byte-identical) when it ends in .gz.
    The one place trace files are written (so callers can re-route output writing)."""
    data = text.encode("utf-8")
    if str(path).endswith(".gz"):
        with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0,
                                                    compresslevel=6) as f:
            f.write(data)
    else:
        with open(path, "wb") as f:
            f.write(data)


def write_chrome_trace(path, graph: TaskGraph, result: SimResult, **kw) -> None:
    """Write the Chrome/Perfetto trace (see the module doc for ``ranks``, ``level`` and ``.gz``)."""
    write_text(path, trace_text(graph, result, **kw))
