"""Trace writing benchmark: the new Chrome-trace writer against the old one, in the same run.

    python -m benchmarks.trace [--file strategies/examples/gpt3-175b-1024-a100.yaml] [--repeat 3]
                               [--hta] [--json PATH]

Simulates the file once (as ``execsim simulate FILE --trace`` does, memory counters included), then
times ``benchmarks.trace_reference.write_chrome_trace`` (the writer before issue 15: per-event dicts
+ ``json.dump``) and ``simulator.outputs.trace.write_chrome_trace`` alternately, ``--repeat`` times each,
and reports the best of each and their ratio, with events, bytes and events/s. Then: the new
writer's ``.json.gz``, ``--trace-level stage`` and ``--trace-ranks 0`` sizes and times, and the
number of complete events that overlap the previous one on their thread (integer ns) in the old
and the new file. ``--hta``: also write the per-rank HTA export and compare Holistic Trace
Analysis's idle time per rank with the simulator's (needs ``pip install 'execsim[hta]'``).
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def overlaps(path: Path) -> tuple[int, int]:
    """(complete events, events starting before the previous one on their thread ends), in integer ns."""
    ev = json.loads(Path(path).read_text())["traceEvents"]
    xs = [e for e in ev if e["ph"] == "X"]
    key = np.array([(e["pid"], e["tid"]) for e in xs], dtype=np.int64)
    s = np.rint(np.array([e["ts"] for e in xs]) * 1000).astype(np.int64)
    e_ = s + np.rint(np.array([e["dur"] for e in xs]) * 1000).astype(np.int64)
    o = np.lexsort((e_, s, key[:, 1], key[:, 0]))
    key, s, e_ = key[o], s[o], e_[o]
    same = np.all(key[1:] == key[:-1], axis=1)
    return len(xs), int(np.sum(same & (s[1:] < e_[:-1])))


def _time(fn) -> float:
    gc.collect()
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--file", default="strategies/examples/gpt3-175b-1024-a100.yaml")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--hta", action="store_true")
    ap.add_argument("--json", metavar="PATH")
    a = ap.parse_args(argv)

    from benchmarks.trace_reference import write_chrome_trace as old_write
    from simulator.cli.common import load_input, simulate_one
    from simulator.cli.simulate import memory_counters
    from simulator.outputs.trace import write_chrome_trace as new_write
    from simulator.reports.memory import memory_report

    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cpus, Python "
          f"{sys.version.split()[0]}, numpy {np.__version__}")
    t0 = time.perf_counter()
    kind, spec = load_input(a.file, [])
    sim = simulate_one(kind, spec)
    mem = memory_report(sim.plan, sim.graph, sim.result) if kind == "strategy" else None
    counters = memory_counters(sim, mem)
    sim_s = time.perf_counter() - t0
    g, r = sim.graph, sim.result
    print(f"{a.file}: {g.num_tasks} tasks, {g.num_devices} devices, simulated in {sim_s:.2f} s (load + lower + run)")

    out: dict = {"file": a.file, "tasks": g.num_tasks, "simulate_s": sim_s}
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        old_p, new_p = d / "old.json", d / "new.json"
        old_t, new_t = [], []
        for _ in range(a.repeat):  # alternate so both see the same machine load
            old_t.append(_time(lambda: old_write(old_p, g, r, counters=counters)))
            new_t.append(_time(lambda: new_write(new_p, g, r, counters=counters)))
        n_old, ov_old = overlaps(old_p)
        n_new, ov_new = overlaps(new_p)
        bo, bn = min(old_t), min(new_t)
        ev_new = len(new_p.read_text().splitlines()) - 2
        print(f"old writer  best {bo:6.2f} s of {a.repeat}  {old_p.stat().st_size / 1e6:7.1f} MB  "
              f"{ev_new / bo:10.0f} events/s  overlapping slices {ov_old} of {n_old}")
        print(f"new writer  best {bn:6.2f} s of {a.repeat}  {new_p.stat().st_size / 1e6:7.1f} MB  "
              f"{ev_new / bn:10.0f} events/s  overlapping slices {ov_new} of {n_new}")
        print(f"speedup (old / new, same run): {bo / bn:.1f}x   ({ev_new} events, {g.num_tasks / bn:.0f} tasks/s)")
        out.update(old_s=old_t, new_s=new_t, speedup=bo / bn, events=ev_new, old_bytes=old_p.stat().st_size,
                   new_bytes=new_p.stat().st_size, overlaps_old=ov_old, overlaps_new=ov_new)
        variants = [("json.gz", d / "t.json.gz", {}), ("stage level", d / "s.json", {"level": "stage"}),
                    ("rank 0 only", d / "r.json", {"ranks": (0,)}),
                    ("stage level .gz", d / "s.json.gz", {"level": "stage"})]
        for label, p, kw in variants:
            t = min(_time(lambda: new_write(p, g, r, counters=counters, **kw)) for _ in range(a.repeat))
            print(f"  {label:<16} {t:6.2f} s  {p.stat().st_size / 1e6:7.1f} MB")
            out[label] = {"s": t, "bytes": p.stat().st_size}
        if a.hta:
            from simulator.outputs.trace_hta import COMPUTE_STREAM, idle_within_span_s, write_hta_traces
            hd = d / "hta"
            t = _time(lambda: write_hta_traces(hd, g, r))
            size = sum(p.stat().st_size for p in hd.iterdir())
            print(f"  HTA export       {t:6.2f} s  {size / 1e6:7.1f} MB in {len(list(hd.iterdir()))} files")
            from hta.trace_analysis import TraceAnalysis
            t1 = time.perf_counter()
            ta = TraceAnalysis(trace_dir=str(hd))
            worst = 0.0
            for x in sim.report.per_rank:
                df, _ = ta.get_idle_time_breakdown(ranks=[x.rank], visualize=False)
                hta_us = float(df[df.stream == COMPUTE_STREAM].idle_time.sum())
                ours = idle_within_span_s(g, r, x.idle_s, x.rank) * 1e6
                worst = max(worst, abs(hta_us - ours) / ours if ours else abs(hta_us))
            print(f"  HTA load + idle breakdown {time.perf_counter() - t1:.1f} s; worst relative difference "
                  f"of HTA's compute-stream idle time from the simulator's over {len(sim.report.per_rank)} "
                  f"ranks: {100 * worst:.3f} %")
            out["hta_worst_rel_diff"] = worst
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
