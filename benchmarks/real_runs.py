"""Real training runs on this machine's CPU, side by side with the simulator's prediction.

A tiny GPT (the operators of ``taskgraph/operators.py`` for a GPT with learned positions, LayerNorm,
GELU, no dropout) trains in PyTorch on CPU, in bf16, one thread per process
(``torch.set_num_threads(1)``: two processes on two cores do not oversubscribe them):

* ``single``: one process, gradient accumulation over the micro-batches, Adam;
* ``dp2``: two processes (gloo), DistributedDataParallel, ``no_sync`` until the last micro-batch;
* ``pp2-1f1b``, ``pp2-gpipe``: two pipeline stages with ``torch.distributed.pipelining``
  (``Schedule1F1B``, ``ScheduleGPipe``).

Each run: warm-up steps, then timed steps (median), and a Kineto trace of two steps per rank.
Then, before the simulator sees any step time: ``execsim profile --device cpu --threads 1`` on the
same model (compute times come from that profile only; the PP layout's profile adds its stages'
optimizer steps), and a gloo sweep on this machine (``simulator/profiling/collectives.py``,
all-reduce and send/recv at 4 KiB..16 MiB) written as the runs' collective profile
(``options.collective_profile``); its all-reduce fit (alpha-beta: per-call latency and bus
bandwidth) prices the link for what the sweep did not measure. The ``cpu`` device preset (``topologies/data/gpus.yaml``) is
fixed in the repository. Each run is simulated and printed beside its measurement.

    python benchmarks/real_runs.py [--out DIR] [--steps 5] [--microbatches 4]

Needs PyTorch (``pip install '.[profile]'``). Takes a few minutes on two cores.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MODEL = {"name": "tiny-gpt", "layers": 4, "hidden": 256, "heads": 4, "kv_heads": 4, "head_dim": 64, "ffn": 1024,
         "vocab": 4096, "mlp": "gelu", "norm": "layernorm", "position": "learned", "max_seq": 256, "bias": True,
         "tied_embeddings": False, "dropout": False}
MICRO_BATCH, SEQ = 2, 256
#: the runs and their process counts
RUNS = {"single": 1, "dp2": 2, "pp2-1f1b": 2, "pp2-gpipe": 2}


def build_model(torch, layers=None):
    """The tiny GPT as a list of blocks (embedding, decoder layers, head) so stages can take slices."""
    nn, F = torch.nn, torch.nn.functional
    m = MODEL

    class Embed(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(m["vocab"], m["hidden"]), nn.Embedding(m["max_seq"], m["hidden"])

        def forward(self, ids):
            return self.wte(ids) + self.wpe(torch.arange(ids.shape[1]))

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            h = m["hidden"]
            self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
            self.qkv, self.out = nn.Linear(h, 3 * h), nn.Linear(h, h)
            self.up, self.down = nn.Linear(h, m["ffn"]), nn.Linear(m["ffn"], h)

        def forward(self, x):
            b, s, h = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, m["heads"], m["head_dim"]).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, h)
            x = x + self.out(a)
            return x + self.down(F.gelu(self.up(self.ln2(x)), approximate="tanh"))

    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln, self.lm = nn.LayerNorm(m["hidden"]), nn.Linear(m["hidden"], m["vocab"], bias=False)

        def forward(self, x):
            return self.lm(self.ln(x))

    torch.manual_seed(0)
    return [Embed()] + [Layer() for _ in range(m["layers"] if layers is None else layers)] + [Head()]


def loss_fn(torch, logits, target):
    return torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), target.flatten())


def _batches(torch, n, seed):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randint(0, MODEL["vocab"], (MICRO_BATCH, SEQ), generator=g),
             torch.randint(0, MODEL["vocab"], (MICRO_BATCH, SEQ), generator=g)) for _ in range(n)]


def _profiler(torch, trace_path, warm, active):
    from torch.profiler import ProfilerActivity, profile, schedule

    def done(p):
        p.export_chrome_trace(str(trace_path))
    return profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                   schedule=schedule(wait=0, warmup=warm, active=active), on_trace_ready=done)


def _worker(rank, world, port, mode, m, steps, out, trace_dir, result_file):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    if world > 1:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=world)
    blocks = build_model(torch)
    if mode.startswith("pp"):
        half = 1 + MODEL["layers"] // 2
        mine = blocks[:half] if rank == 0 else blocks[half:]
        module = torch.nn.Sequential(*mine).to(torch.bfloat16)
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
        stage = PipelineStage(module, rank, world, torch.device("cpu"))
        cls = Schedule1F1B if mode == "pp2-1f1b" else ScheduleGPipe
        sched = cls(stage, m, loss_fn=lambda y, t: loss_fn(torch, y, t))
        params = list(module.parameters())
    else:
        module = torch.nn.Sequential(*blocks).to(torch.bfloat16)
        params = list(module.parameters())
        if world > 1:
            module = torch.nn.parallel.DistributedDataParallel(module, bucket_cap_mb=25)
    opt = torch.optim.Adam(params, lr=1e-4, foreach=True)
    data = _batches(torch, m, seed=rank)

    def step():
        opt.zero_grad(set_to_none=True)
        if mode.startswith("pp"):
            ids = torch.cat([b[0] for b in data])
            tgt = torch.cat([b[1] for b in data])
            if rank == 0:
                sched.step(ids)
            else:
                sched.step(target=tgt)
        else:
            for i, (ids, tgt) in enumerate(data):
                ctx = module.no_sync() if world > 1 and i < m - 1 else _Null()
                with ctx:
                    loss_fn(torch, module(ids), tgt).backward()
        opt.step()

    warm = 2
    for _ in range(warm):
        step()
    times = []
    for _ in range(steps):
        if world > 1:
            dist.barrier()
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    with _profiler(torch, Path(trace_dir) / f"rank{rank}.json", 1, 2) as prof:
        for _ in range(3):
            step()
            prof.step()
    Path(result_file).with_suffix(f".{rank}.json").write_text(json.dumps({"rank": rank, "times": times}))
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()


class _Null:
    def __enter__(self):
        return None

    def __exit__(self, *a):
        return False


def run_real(mode, world, m, steps, out: Path) -> dict:
    import torch.multiprocessing as mp

    from simulator.profiling.collectives import free_port
    trace_dir = out / f"traces-{mode}"
    trace_dir.mkdir(parents=True, exist_ok=True)
    res = out / f"times-{mode}"
    mp.spawn(_worker, args=(world, free_port(), mode, m, steps, out, trace_dir, res), nprocs=world, join=True)
    per_rank = [json.loads(res.with_suffix(f".{r}.json").read_text())["times"] for r in range(world)]
    step_times = [max(ts) for ts in zip(*per_rank)]  # a step ends when its slowest rank does
    return {"mode": mode, "median_s": statistics.median(step_times), "steps": step_times, "trace_dir": str(trace_dir)}


def strategy(mode, m, profile=None, link=None) -> dict:
    dp, pp = (2, 1) if mode == "dp2" else (1, 2) if mode.startswith("pp") else (1, 1)
    alpha, bw = link or (0.0, 1e9)
    cluster = {"gpu": "cpu", "nodes": 1, "gpus_per_node": dp * pp, "nvlink_gbps": bw / 1e9, "nvlink_latency_us": 0.0,
               "nvlink_efficiency": 1.0, "nic_gbit": 1, "nic_latency_us": 0, "nic_efficiency": 1.0,
               "collective_base_latency_us": alpha * 1e6, "collective_model": "alpha-beta", "contention": False,
               # the host is the device: a measured CPU op time already holds its dispatch
               "host_us_per_kernel": 0, "host_us_per_collective": 0,
               # the profile was measured on this very device: no spread over a fleet of GPUs
               "gpu_speed_cv": 0}
    opts = {"fp32_grad_accum": False, "grad_bucket_mb": 25, "overlap_grad_reduce": True, "p2p_overlap": True,
            "p2p_host_gap_us": 0, "flash_attention": True}
    if profile:
        opts.update(profile=str(profile), profile_gpu="cpu")
        coll = Path(profile).parent / "collectives.csv"
        if coll.exists():
            opts.update(collective_profile=str(coll), collective_profile_gpu="cpu")
    return {"model": dict(MODEL), "cluster": cluster,
            "parallel": {"tp": 1, "pp": pp, "dp": dp, "zero": 0},
            "schedule": "gpipe" if mode == "pp2-gpipe" else "1f1b",
            "training": {"micro_batch": MICRO_BATCH, "global_batch": MICRO_BATCH * m * dp, "seq_len": SEQ,
                         "precision": "bf16", "recompute": "none"},
            "options": opts}


def measured_busy(trace_dir) -> dict:
    """Per rank: median step (ms) and busy ms per step = leaf operators other than communication."""
    from simulator.profiling.kernels import kernel_class
    from simulator.profiling.kineto import read_trace_dir
    out = {}
    for rt in read_trace_dir(trace_dir):
        main = max({k.stream for k in rt.kernels}, key=lambda s: sum(k.dur for k in rt.kernels if k.stream == s))
        busy = sum(k.dur for k in rt.kernels if k.stream == main and kernel_class(k.name) != "communication")
        out[rt.rank] = (statistics.median(rt.steps_us) / 1e3, busy / max(1, len(rt.steps_us)) / 1e3)
    return out


#: the step's work by class: trace operator name (regular expression) -> class, first match wins
#: (``trace_account`` adds the classes that need more than a name)
TRACE_CLASSES = (("gemm", r"^aten::(mm|addmm|bmm)$"), ("attention", r"scaled_dot_product"),
                 ("loss", r"log_softmax|nll_loss"), ("norm", r"layer_norm|rms_norm"), ("activation", r"gelu|silu"),
                 ("embedding", r"embedding|index_select"), ("communication", r"^(c10d::|gloo:|nccl:)"),
                 ("bias gradient", r"^aten::sum$"))
#: profile operator -> class (the same classes); GEMM weight gradients carry their accumulation
PROFILE_CLASSES = {"embedding": "embedding", "attn_core": "attention", "loss": "loss", "mlp_act": "activation"}


def _profile_class(op: str) -> str:
    if op in PROFILE_CLASSES:
        return PROFILE_CLASSES[op]
    return "norm" if op.endswith("norm") else "residual" if op.endswith("residual") else "gemm"


def _param_shapes() -> set:
    """Shapes of the tiny GPT's parameters (``build_model``): gradient accumulations have them."""
    m = MODEL
    h, f, v = m["hidden"], m["ffn"], m["vocab"]
    return {(v, h), (m["max_seq"], h), (3 * h, h), (3 * h,), (h, h), (h,), (f, h), (f,), (h, f)}


def trace_account(trace_file) -> dict:
    """Self milliseconds per step of each class of the step's work over the kept steps of one rank's
    Kineto trace: ``TRACE_CLASSES`` by name; operators inside ``Optimizer.step`` are ``optimizer``;
    ``add_`` into a parameter-shaped gradient (``AccumulateGrad``) goes with ``gemm`` (a CPU profile's
    weight gradient includes it); logit-sized casts and fills with ``loss``; other adds are
    ``residual`` (residual adds and autograd's sums of gradients); other casts, copies and fills
    ``copy/fill``; the rest (views, autograd nodes, allocation) ``framework``."""
    import re

    from simulator.profiling.kineto import leaf_ops
    from strategies.documents import load_trace_json
    doc = load_trace_json(Path(trace_file), "trace")
    host = [(e, e.get("args") or {}, float(e["ts"]), float(e.get("dur", 0.0))) for e in doc["traceEvents"]
            if isinstance(e, dict) and e.get("ph") == "X" and "ts" in e]
    steps = sorted((ts, ts + dur) for e, _, ts, dur in host if str(e.get("name", "")).startswith("ProfilerStep#"))
    steps = steps[:-1] if len(steps) > 1 else steps        # the last step is cut short (HTA's rule)
    optim = [(ts, ts + dur) for e, _, ts, dur in host if str(e.get("name", "")).startswith("Optimizer.step")]
    within = lambda spans, t: any(a <= t < b for a, b in spans)
    logits, params = MICRO_BATCH * SEQ * MODEL["vocab"], _param_shapes()
    out: dict = {}
    for k in leaf_ops(host, None, False):
        if not within(steps, k.ts):
            continue
        n, first = k.name, (k.dims[0] if k.dims else ())
        cls = "optimizer" if within(optim, k.ts) else next((c for c, rx in TRACE_CLASSES if re.search(rx, n)), None)
        if cls is None:
            cls = ("gemm" if n == "aten::add_" and first in params else
                   "loss" if n in ("aten::copy_", "aten::fill_") and math.prod(first or (0,)) == logits else
                   "residual" if n in ("aten::add", "aten::add_") else
                   "copy/fill" if n in ("aten::copy_", "aten::fill_", "aten::zero_", "aten::clone") else "framework")
        out[cls] = out.get(cls, 0.0) + k.dur / 1e3 / len(steps)
    return out


def profile_account(profile_csv, plan) -> dict:
    """Milliseconds per step of each class from the profile (each operator pass x its count x
    micro-batches), and ``optimizer``: the simulator's optimizer step of the first stage."""
    import csv

    from simulator.profiling.inventory import profile_items
    from taskgraph.costing import build_work
    count = {(it.name, it.shape): it.count for it in profile_items(plan)}
    out: dict = {}
    with open(profile_csv, newline="") as f:
        for r in csv.DictReader(f):
            if (r["op"], r["shape"]) not in count:
                continue   # the optimizer rows: the simulated optimizer step comes from build_work below
            c = _profile_class(r["op"])
            out[c] = out.get(c, 0.0) + float(r["time_us"]) / 1e3 * count[(r["op"], r["shape"])] * plan.microbatches
    out["optimizer"] = build_work(plan).stages[0].optimizer_s * 1e3
    return out


def account_lines(measured: dict, simulated: dict) -> list[str]:
    """The per-class table: in the step (trace) vs profiled / simulated, largest first, and totals."""
    lines = [f"    {'class':<16} {'in the step ms':>14} {'profile/sim ms':>14}"]
    for c in sorted(set(measured) | set(simulated), key=lambda c: -measured.get(c, 0.0)):
        lines.append(f"    {c:<16} {measured.get(c, 0.0):14.1f} {simulated.get(c, 0.0):14.1f}")
    lines.append(f"    {'total':<16} {sum(measured.values()):14.1f} {sum(simulated.values()):14.1f}")
    return lines


def _profile_csv(out: Path, mode: str) -> Path:
    """The profile of ``mode``'s layout: one process and DP 2 share one, the two PP runs the other."""
    return out / ("profile-pp2.csv" if mode.startswith("pp") else "profile-single.csv")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="/tmp/execsim-real-runs", help="folder for traces, profile and files")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--microbatches", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=10, help="execsim profile --repeats")
    ap.add_argument("--runs", default=",".join(RUNS), help=f"which runs, comma-separated (default all: {','.join(RUNS)})")
    a = ap.parse_args(argv)
    import yaml
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    m = a.microbatches
    # 1. fixed before any step is measured: the profile (compute) and the gloo sweep (link)
    t0 = time.perf_counter()
    for layout in ("single", "pp2-1f1b"):
        base = out / f"profile-{layout}.yaml"
        base.write_text(yaml.safe_dump(strategy(layout, m)))
        with open(out / f"profile-{layout}.txt", "w") as log:
            subprocess.run([sys.executable, "-m", "simulator.cli.main", "profile", str(base), "--device", "cpu",
                            "--threads", "1", "--repeats", str(a.repeats), "-o", str(_profile_csv(out, layout))],
                           check=True, cwd=ROOT, stdout=log)
    # every run takes the same operator times (the single layout's); the PP layout adds its stages'
    # optimizer steps (other parameter counts)
    one, pp = (_profile_csv(out, x).read_text().splitlines() for x in ("single", "pp2"))
    _profile_csv(out, "pp2").write_text("\n".join([r for r in one if ",optimizer," not in r]
                                                  + [r for r in pp if ",optimizer," in r]) + "\n")
    from simulator.profiling.collectives import CollectiveRow, collective_text, fit_alpha_beta, sweep
    sizes = [2 ** k for k in range(12, 25, 2)]
    rows = sweep([(kind, 2, s) for kind in ("all-reduce", "send-recv") for s in sizes], "gloo", 2, a.repeats, 3)
    link = fit_alpha_beta([r for r in rows if r[0] == "all-reduce"])
    # the sweep as a collective profile: the simulation takes gloo's measured times at these sizes
    (out / "collectives.csv").write_text(collective_text([CollectiveRow(*r) for r in rows], "cpu"))
    print(f"profile + gloo sweep: {time.perf_counter() - t0:.0f} s; gloo all-reduce alpha {link[0] * 1e6:.0f} us, "
          f"bus bandwidth {link[1] / 1e9:.2f} GB/s")
    # 2. the real runs
    from simulator.simulation.strategy import simulate_strategy
    from strategies.strategy_file import parse_strategy
    table = []
    for mode in a.runs.split(","):
        world = RUNS[mode]
        real = run_real(mode, world, m, a.steps, out)
        doc = strategy(mode, m, _profile_csv(out, mode), link)
        (out / f"{mode}.yaml").write_text(yaml.safe_dump(doc))
        sim = simulate_strategy(parse_strategy(doc, out))
        busy = measured_busy(real["trace_dir"])
        sim_busy = {r.rank: (r.busy_s * 1e3, (sim.report.makespan_s - r.busy_s) * 1e3) for r in sim.report.per_rank}
        err = sim.training.iteration_time_s / real["median_s"] - 1
        table.append((mode, real["median_s"], sim.training.iteration_time_s, err, busy, sim_busy))
        print(f"{mode:<10} measured {real['median_s'] * 1e3:8.1f} ms (steps {', '.join(f'{t * 1e3:.0f}' for t in real['steps'])})"
              f"  simulated {sim.training.iteration_time_s * 1e3:8.1f} ms  ({err:+.1%})")
        if mode == "single":
            acct = trace_account(Path(real["trace_dir"]) / "rank0.json")
            print("\n".join(account_lines(acct, profile_account(_profile_csv(out, mode), sim.plan))))
        for r, (step, b) in sorted(busy.items()):
            sb = sim_busy.get(r if mode.startswith("pp") else 0, (float("nan"), float("nan")))
            print(f"    rank {r}: measured busy {b:7.1f} idle {step - b:7.1f} ms | simulated busy {sb[0]:7.1f} "
                  f"idle {sb[1]:7.1f} ms")
    (out / "results.json").write_text(json.dumps({"link": link, "table": [t[:4] for t in table]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
