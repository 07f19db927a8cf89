"""Cost of the network model: end-to-end simulate time with it on vs switched off, same run.

    python -m benchmarks.network [--repeat 3] [--example strategies/examples/gpt3-175b-1024-a100.yaml]
                                 [--scale]

"on": the presets' defaults (NCCL tuner model ``topologies/nccl.py``, link sharing by symmetry
``topologies/fabric.py``, the core tier above radix²/2 NICs, adaptive routing, stragglers at
``gpu_speed_cv`` 0.01); "ecmp": the same with ``routing: ecmp`` (the busiest hashed port,
``topologies/fabric.py``); "off": ``collective_model: alpha-beta, contention: false,
gpu_speed_cv: 0, switch_radix: null`` (the closed forms alone, two tiers, no stragglers). Each configuration is simulated ``--repeat`` times with the cost caches cleared
before every run (cold: what a user's first ``execsim simulate`` pays), interleaved, best time
kept (runs alternate order; garbage collected between runs). Prints task counts, tasks/s, the predicted iteration time of each and the ratio.
``--scale`` also times costing alone for the same model shape from 256 to 16,384 GPUs (where the
flow enumeration of ``network_slowdown`` grows with the GPU count).
"""
from __future__ import annotations

import argparse
import copy
import gc
import time

import yaml

from simulator.api import simulate_strategy
from strategies.strategy_file import parse_strategy
from taskgraph.costing import build_work, clear_cost_cache
from taskgraph.plan import resolve

OFF = {"collective_model": "alpha-beta", "contention": False, "gpu_speed_cv": 0.0, "switch_radix": None}
CONFIGS = (("off", OFF), ("on", {}), ("ecmp", {"routing": "ecmp"}))


def _clear():
    from topologies import fabric
    clear_cost_cache()
    for fn in (fabric.network_slowdown, fabric.fabric_of, fabric.family_flows, fabric.background_flows):
        fn.cache_clear()


def run_once(doc: dict, extra: dict) -> tuple[float, object]:
    d = copy.deepcopy(doc)
    d["cluster"] = {**d["cluster"], **extra}
    strat = parse_strategy(d)
    _clear()
    t0 = time.perf_counter()
    sim = simulate_strategy(strat)
    return time.perf_counter() - t0, sim


def compare(path: str, repeat: int) -> dict:
    with open(path, encoding="utf-8") as fh:
        doc = yaml.safe_load(fh)
    best = {name: float("inf") for name, _ in CONFIGS}
    sims = {}
    for i in range(repeat):
        for name, extra in (CONFIGS if i % 2 == 0 else CONFIGS[::-1]):
            gc.collect()
            t, sim = run_once(doc, extra)
            best[name] = min(best[name], t)
            sims[name] = sim
    out = {"example": path}
    for name, _ in CONFIGS:
        n = sims[name].report.num_tasks
        out[name] = {"wall_s": best[name], "tasks": n, "tasks_per_s": n / best[name],
                     "iteration_s": sims[name].report.makespan_s}
    out["ratio_on_off"] = best["on"] / best["off"]
    out["ratio_ecmp_off"] = best["ecmp"] / best["off"]
    return out


def scale(repeat: int) -> list[dict]:
    rows = []
    base = {"model": "gpt3-175b", "parallel": {"tp": 8, "pp": 8, "zero": 1}, "schedule": "1f1b",
            "training": {"micro_batch": 1, "seq_len": 2048, "precision": "bf16", "recompute": "selective"},
            "options": {"overlap_grad_reduce": True, "flash_attention": True}}
    for gpus in (256, 1024, 4096, 16384):
        d = copy.deepcopy(base)
        d["cluster"] = {"preset": "dgx-a100-80g", "nodes": gpus // 8}
        d["training"]["global_batch"] = gpus  # 1 sequence per GPU: weak scaling
        res = {}
        for name, extra in CONFIGS:
            dd = copy.deepcopy(d)
            dd["cluster"].update(extra)
            plan = resolve(parse_strategy(dd))
            tbest = float("inf")
            for _ in range(repeat):
                _clear()
                t0 = time.perf_counter()
                build_work(plan, fidelity="coarse")
                tbest = min(tbest, time.perf_counter() - t0)
            res[name] = tbest
        rows.append({"gpus": gpus, **{f"costing_{k}_s": v for k, v in res.items()}})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.network", description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--example", default="strategies/examples/gpt3-175b-1024-a100.yaml")
    ap.add_argument("--scale", action="store_true", help="also time costing from 256 to 16,384 GPUs")
    args = ap.parse_args(argv)
    r = compare(args.example, args.repeat)
    print(f"{r['example']}  (best of {args.repeat}, cold caches)")
    for name, _ in CONFIGS:
        x = r[name]
        print(f"  network model {name:4s}: {x['wall_s']:.2f} s end-to-end, {x['tasks']} tasks, "
              f"{x['tasks_per_s']:,.0f} tasks/s, predicted iteration {x['iteration_s']:.3f} s")
    print(f"  wall time on / off: {r['ratio_on_off']:.2f}, ecmp / off: {r['ratio_ecmp_off']:.2f}")
    if args.scale:
        print("costing only (coarse), GPT-3 175B tp8 pp8, 1 sequence per GPU:")
        for row in scale(args.repeat):
            print(f"  {row['gpus']:6d} GPUs: off {row['costing_off_s']:.3f} s, on {row['costing_on_s']:.3f} s, "
                  f"ecmp {row['costing_ecmp_s']:.3f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
