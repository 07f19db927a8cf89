"""Per-GPU throughput from hundreds to >10k GPUs on one model: which mechanisms make it fall.

    python -m benchmarks.weak_scaling [--gpus 256,3072,12288] [--preset dgx-a100-80g] [--markdown out.md]

GPT-3 175B (Brown et al. 2020), tp 8, pp 8, interleaved 1F1B with vpp 6, sequence parallelism,
ZeRO-1 (distributed optimizer), micro-batch 1, global batch 6,144 sequences of 2,048 tokens,
selective recompute, bf16: the shape of the Megatron-LM runs in MegaScale (Jiang et al., NSDI
2024, Table 2: 175B on 256 to 12,288 GPUs, batch 6,144). The data-parallel size grows with the GPU
count at fixed batch, so each pipeline has fewer micro-batches and each DP group more ranks.
Coarse fidelity, the preset's cluster at ``GPUs / 8`` nodes.

Configurations (all on the same preset):
* ``off``: closed-form collectives on idle links, no stragglers, two network tiers
  (``collective_model: alpha-beta, contention: false, gpu_speed_cv: 0, switch_radix: null``);
* ``on``: the preset's defaults (NCCL model, link sharing, core tier, adaptive routing,
  stragglers at ``gpu_speed_cv`` 0.01);
* ``ecmp``: ``on`` with ``routing: ecmp`` (an Ethernet/RoCE fabric: flows hashed onto ports);
* ``on, no overlap``: ``on`` with ``overlap_grad_reduce: false`` (Megatron-LM's default before
  ``--overlap-grad-reduce``: the DP reduction after the last backward).

Prints MFU, iteration time, the bubble share and the exposed communication of the first stage per
size, and the fall in MFU points from the smallest to the largest size. Nothing here is a
validation row: it shows what each mechanism contributes (docs/validation.md, "Scale mechanisms").
"""
from __future__ import annotations

import argparse
import copy
from pathlib import Path

from benchmarks.network import OFF  # the network model switched off, as benchmarks/network.py times it
from simulator.api import simulate_strategy
from strategies.strategy_file import parse_strategy

BASE = {"model": "gpt3-175b",
        "parallel": {"tp": 8, "pp": 8, "vpp": 6, "sp": True, "zero": 1},
        "schedule": "interleaved-1f1b",
        "training": {"micro_batch": 1, "global_batch": 6144, "seq_len": 2048, "precision": "bf16",
                     "recompute": "selective"},
        "options": {"overlap_grad_reduce": True, "overlap_param_gather": True, "flash_attention": True}}
#: name -> (cluster overrides, options overrides)
CONFIGS = {"off": (OFF, {}), "on": ({}, {}), "ecmp": ({"routing": "ecmp"}, {}),
           "on, no overlap": ({}, {"overlap_grad_reduce": False})}


def strategy_doc(gpus: int, preset: str, cluster: dict, options: dict) -> dict:
    d = copy.deepcopy(BASE)
    d["cluster"] = {"preset": preset, "nodes": gpus // 8, **cluster}
    d["options"].update(options)
    return d


def run(gpus_list: list[int], preset: str) -> list[dict]:
    rows = []
    for name, (cluster, options) in CONFIGS.items():
        for gpus in gpus_list:
            sim = simulate_strategy(parse_strategy(strategy_doc(gpus, preset, cluster, options)), fidelity="coarse")
            st = sim.training.per_stage[0]
            rows.append({"config": name, "gpus": gpus, "mfu": sim.training.mfu,
                         "iteration_s": sim.training.iteration_time_s,
                         "microbatches": sim.training.microbatches,
                         "bubble": sim.report.bubble_fraction,
                         "exposed_comm_s": st.exposed_comm_s})
    return rows


def format_rows(rows: list[dict]) -> list[str]:
    lines = ["| config | GPUs | micro-batches / pipeline | iteration s | bubble | exposed comm s (stage 0) | MFU |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['config']} | {r['gpus']:,} | {r['microbatches']} | {r['iteration_s']:.3f} | "
                     f"{r['bubble']:.1%} | {r['exposed_comm_s']:.3f} | {r['mfu']:.1%} |")
    lines += ["", "| config | MFU fall, smallest -> largest (points) |", "|---|---:|"]
    for name in CONFIGS:
        sel = [r for r in rows if r["config"] == name]
        lines.append(f"| {name} | {100 * (sel[0]['mfu'] - sel[-1]['mfu']):.1f} |")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.weak_scaling", description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", default="256,3072,12288", help="comma-separated GPU counts (multiples of 64)")
    ap.add_argument("--preset", default="dgx-a100-80g")
    ap.add_argument("--markdown", help="also write the tables to this file")
    args = ap.parse_args(argv)
    gpus = [int(x) for x in args.gpus.split(",")]
    lines = format_rows(run(gpus, args.preset))
    print("\n".join(lines))
    if args.markdown:
        Path(args.markdown).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
