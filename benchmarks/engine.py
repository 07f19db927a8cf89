"""Engine throughput benchmark.

    python -m benchmarks.engine [--sizes 1e4,1e5,1e6,3e6] [--quick] [--kinds pipeline,random,fanout,zero,gpt3]
                                [--repeat 3] [--json PATH]

For each graph kind (``benchmarks/graphs.py``) and size: graph build time, ``simulate(graph,
kernel="python")`` time (the pure-Python engine, whatever is installed; median of ``--repeat`` runs;
the call includes every conversion from and to numpy), tasks/s, the
ratio of a minimal reference heap loop's time to the engine's (``>1``: the engine is faster; the
reference is written below, same semantics, simplest code, timed the same way and interleaved with
the engine runs; "cpu x": the same ratio with the process's CPU time, steadier when other jobs
share the machine), whether both give identical timelines, and the peak memory per task of one
engine call and of one reference-loop call, measured with ``tracemalloc`` (Python and numpy
allocations made during the call, its result included, graph arrays excluded; separate, slower
runs). Prints the machine description first.
``--network`` runs ``benchmarks/network.py`` instead: end-to-end time of the GPT-3 175B example with
the network model (NCCL tuner + link sharing) on and switched off, same run.
"""
from __future__ import annotations

import argparse
import gc
import heapq
import json
import os
import platform
import statistics
import sys
import time
import tracemalloc

import numpy as np

from benchmarks.graphs import GENERATORS, strategy_graphs
from simulator.engine.core import simulate


def reference_loop(graph):
    """The minimal heap loop (FlexFlow, Jia et al. 2019, Sec. 5.2): ``(ready, start, end, order)`` lists."""
    n = graph.num_tasks
    dur = graph.duration.tolist()
    dev = graph.device.tolist()
    ptr = graph.succ_ptr.tolist()
    idx = graph.succ_idx.tolist()
    indeg = np.bincount(graph.succ_idx, minlength=n).tolist()
    ready, start, end = [0.0] * n, [0.0] * n, [0.0] * n
    free = [0.0] * max(graph.num_devices, 1)
    order = []
    heap = [(0.0, t) for t in range(n) if indeg[t] == 0]
    while heap:
        r, t = heapq.heappop(heap)
        order.append(t)
        s = free[dev[t]]
        if r > s:
            s = r
        e = s + dur[t]
        free[dev[t]] = e
        start[t] = s
        end[t] = e
        for v in idx[ptr[t]:ptr[t + 1]]:
            if e > ready[v]:
                ready[v] = e
            indeg[v] -= 1
            if indeg[v] == 0:
                heapq.heappush(heap, (ready[v], v))
    return ready, start, end, order


def _has_numba() -> bool:
    try:
        import numba  # noqa: F401
    except ImportError:
        return False
    return True


def machine() -> dict:
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "numpy": np.__version__,
        "cpu_count": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
    }


def _timed(fn):
    gc.collect()
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def _timed_both(fn):
    """(wall seconds, CPU seconds of this process, result): on a shared machine the CPU time of
    the call is less disturbed by other jobs than its wall time (it still includes their cache
    effects)."""
    gc.collect()
    c0, t0 = time.process_time(), time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, time.process_time() - c0, out


def _peak(fn) -> int:
    """tracemalloc peak of one call (Python and numpy allocations made during it, the result included)."""
    gc.collect()
    tracemalloc.start()
    out = fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del out
    return peak


def bench_one(kind: str, build, n_target: int, repeat: int, seed: int = 0) -> dict:
    t_build, graph = _timed(lambda: build(n_target, seed))
    n = graph.num_tasks
    eng_times, ref_times, eng_cpu, ref_cpu = [], [], [], []
    res = ref = None
    for _ in range(repeat):  # interleaved, so drifting machine load hits both alike
        res = ref = None  # free the previous run's results before timing
        dt, dc, res = _timed_both(lambda: simulate(graph, kernel="python"))
        eng_times.append(dt)
        eng_cpu.append(dc)
        dt, dc, ref = _timed_both(lambda: reference_loop(graph))
        ref_times.append(dt)
        ref_cpu.append(dc)
    same = (res.order.tolist() == ref[3] and res.start.tolist() == ref[1]
            and res.end.tolist() == ref[2] and res.ready.tolist() == ref[0])
    numba_times, numba_same = [], None
    if _has_numba():  # the compiled-loop limit: the same loop compiled (simulator/engine/kernels_numba.py)
        simulate(graph, kernel="numba")  # compile (or load the cache) outside the timing
        for _ in range(repeat):
            dt, fast = _timed(lambda: simulate(graph, kernel="numba"))
            numba_times.append(dt)
        numba_same = all(np.array_equal(getattr(fast, f), getattr(res, f))
                         for f in ("ready", "start", "end", "order"))
        fast = None
    res = ref = None
    peak = _peak(lambda: simulate(graph, kernel="python"))
    ref_peak = _peak(lambda: reference_loop(graph))
    t_eng, t_ref = statistics.median(eng_times), statistics.median(ref_times)
    return {
        "kind": kind, "tasks": n, "edges": graph.num_edges, "devices": graph.num_devices,
        "build_s": t_build, "simulate_s": t_eng, "simulate_runs_s": eng_times,
        "tasks_per_s": n / t_eng, "reference_s": t_ref, "reference_runs_s": ref_times,
        "reference_tasks_per_s": n / t_ref, "ratio_vs_reference": t_ref / t_eng,
        "simulate_cpu_runs_s": eng_cpu, "reference_cpu_runs_s": ref_cpu,
        "ratio_vs_reference_cpu": statistics.median(ref_cpu) / statistics.median(eng_cpu),
        "identical_to_reference": same and numba_same is not False, "peak_bytes_per_task": peak / n,
        "reference_peak_bytes_per_task": ref_peak / n,
        "numba_s": statistics.median(numba_times) if numba_times else None,
        "numba_runs_s": numba_times, "numba_identical": numba_same,
        "peak_method": "tracemalloc peak during one simulate(graph) call",
    }


def format_table(rows: list[dict]) -> str:
    head = (f"{'graph':<10} {'tasks':>9} {'edges':>9} {'build s':>8} {'sim s':>7} {'tasks/s':>10} "
            f"{'ref s':>7} {'ref tasks/s':>11} {'x ref':>6} {'cpu x':>6} {'same':>5} {'B/task':>7} {'ref B':>6} {'numba/s':>10} "
            f"{'py/numba':>8}")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['kind']:<10} {r['tasks']:>9,} {r['edges']:>9,} {r['build_s']:>8.3f} "
                     f"{r['simulate_s']:>7.3f} {r['tasks_per_s'] / 1e6:>8.3f} M {r['reference_s']:>7.3f} "
                     f"{r['reference_tasks_per_s'] / 1e6:>9.3f} M {r['ratio_vs_reference']:>6.2f} "
                     f"{r['ratio_vs_reference_cpu']:>6.2f} "
                     f"{'yes' if r['identical_to_reference'] else 'NO':>5} {r['peak_bytes_per_task']:>7.0f} "
                     f"{r['reference_peak_bytes_per_task']:>6.0f}"
                     + (f" {r['tasks'] / r['numba_s'] / 1e6:>8.2f} M {r['numba_s'] / r['simulate_s']:>8.3f}"
                        if r.get("numba_s") else f" {'-':>10} {'-':>8}"))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.engine", description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default=None, help="comma-separated task counts (default 1e4,1e5,1e6)")
    ap.add_argument("--quick", action="store_true", help="sizes 1e4,1e5 unless --sizes is given")
    ap.add_argument("--kinds", default=None, help="graph kinds (default: all of " +
                    ", ".join(GENERATORS) + "; real lowered graphs on request: " +
                    ", ".join(k for k, _ in strategy_graphs()) + ", run once at a fixed size)")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per engine (median reported)")
    ap.add_argument("--json", default=None, help="also write the results as JSON to this path")
    ap.add_argument("--network", action="store_true",
                    help="instead: cost of the network model on vs off, same run (benchmarks/network.py)")
    args = ap.parse_args(argv)
    if args.network:
        from benchmarks.network import main as network_main
        return network_main(["--repeat", str(args.repeat), "--scale"])
    sizes_arg = args.sizes or ("1e4,1e5" if args.quick else "1e4,1e5,1e6")
    sizes = [int(float(s)) for s in sizes_arg.split(",") if s.strip()]
    kinds = dict(GENERATORS)
    fixed = dict(strategy_graphs())
    kinds.update(fixed)
    if not args.kinds:
        kinds = dict(GENERATORS)
    else:
        wanted = [k.strip() for k in args.kinds.split(",") if k.strip()]
        unknown = [k for k in wanted if k not in kinds]
        if unknown:
            ap.error(f"unknown graph kind(s) {unknown}; choose from {sorted(kinds)}")
        kinds = {k: kinds[k] for k in wanted}

    info = machine()
    print("machine: " + ", ".join(f"{k}={v}" for k, v in info.items()))
    print(f"simulate = median of {args.repeat} runs of simulate(graph, kernel='python'); x ref = reference "
          f"loop time / engine time (wall; cpu x: the same with the process's CPU time); B/task, ref B = tracemalloc peak of one engine / reference-loop call "
          f"/ tasks; numba/s = the compiled "
          f"kernel (optional extra 'fast'); py/numba = pure-Python engine speed / compiled-loop limit")
    rows = []
    for i, n in enumerate(sizes):
        for kind, build in kinds.items():
            if kind in fixed and i:
                continue  # a fixed-size graph: once
            rows.append(bench_one(kind, build, n, args.repeat))
            print(format_table(rows[-1:]).splitlines()[-1] if len(rows) > 1 else format_table(rows),
                  flush=True)
    print()
    print(format_table(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": info, "argv": sys.argv[1:], "repeat": args.repeat, "results": rows}, f,
                      indent=2)
    return 0 if all(r["identical_to_reference"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
