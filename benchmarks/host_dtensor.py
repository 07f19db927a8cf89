"""Host (CPU) cost of torchtitan's tensor parallelism (DTensor) and of FSDP2's per-layer hooks.

    python -m benchmarks.host_dtensor --out DIR [--reps 60] [--layers 1,4]

Run it with a PyTorch that has torch.distributed (a CPU build is enough); it writes ``host_dtensor.csv``
and ``meta.json`` (torch version, CPU model) under DIR. The costs it measures are host work, so a CPU
measures them: on tiny shapes (hidden 64, 16 tokens) the kernels' own arithmetic is a few microseconds
and the host time is the dispatch.

What runs (the block of ``benchmarks/kernel_sweep.py`` run_host_llama, with torchtitan's module
structure so that torchtitan's plan applies; pytorch/torchtitan 8a6c9fe6e, 2025-08-28,
torchtitan/models/llama3/model/model.py: TransformerBlock, Attention with wq/wk/wv/wo and
``view(bs, seqlen, -1, head_dim)`` for the local heads, complex RoPE, repeat_kv by expand, SDPA,
FeedForward w2(silu(w1 x) * w3 x), nn.RMSNorm), bf16 compute, batch 1:

* ``plain``: the block as it is (its host time is run_host_llama's block's at the same shape: 1,330
  against 1,362 us forward + backward, least of 6 rounds of 60 steps, on the CPU of the rows);
* ``tp``: parallelize_module with torchtitan's per-block plan (torchtitan/models/llama3/infra/
  parallelize.py apply_tp at 8a6c9fe6e: attention_norm / ffn_norm SequenceParallel; attention and
  feed_forward PrepareModuleInput(Shard(1) -> Replicate()); wq, wk, wv, w1, w3 ColwiseParallel;
  wo, w2 RowwiseParallel(output_layouts=Shard(1))), the block's input the local Shard(1) sequence slice;
* ``fsdp``: fully_shard on every block and on the root, MixedPrecisionPolicy(param_dtype=bf16,
  reduce_dtype=fp32) as apply_fsdp does (the sharded parameters fp32); reshard_after_forward=True
  (torchtitan's default without pipeline parallelism);
* ``tp+fsdp``: both, on a 2-D mesh (dp, tp), as parallelize_llama applies them (TP first).

The process group is PyTorch's ``fake`` backend (torch.testing._internal.distributed.fake_pg, what
PyTorch's own DTensor and FSDP tests use to run large world sizes in one process): DTensor and FSDP2
take their real multi-rank paths (at world size 1 both take short cuts: DTensor's redistribute skips
a mesh dimension of size 1, FSDP2's unshard skips the all-gather and its copy-in/copy-out), and every
collective returns at once, so the backend's own cost (NCCL's enqueue and launch, priced by
``cluster.host_us_per_collective``) is left out while the Python and c10d calls that issue it stay
in. World size 1 runs too (``fake`` with one rank, which takes the same short cuts as gloo).

Host time is that of run_host_llama: the median over ``--reps`` repetitions of the forward, plus the
median of the backward of ``y.sum()`` (the sum not timed), after 5 warm-up steps; one thread
(``torch.set_num_threads(1)``; on CPU tensors autograd runs the backward on the calling thread). It
is taken as the thread's CPU time (``time.thread_time``; dispatch is CPU-bound work, and a machine
shared with other processes takes the core away at times, which wall time would count); the wall
times are written beside it. Each configuration is run ``--rounds`` times, interleaved. Python's
automatic garbage collection is off, as torchtitan's trainer turns it off (torchtitan/tools/utils.py
GarbageCollection: ``gc.disable()``, a generation-1 collection every ``gc_freq`` steps); here the
collection runs between steps, untimed. Each configuration runs with ``--layers`` blocks in sequence; the
per-layer cost is the difference between two layer counts divided by their difference, which
removes what runs once per step (the root module's hooks, FSDP2's final backward callback). A tiny
op (``add_`` on a one-element tensor, as run_host) is timed in the same run.

This is a benchmark script: it prints one line per configuration. Its sizes are fixed here and tiny.
"""
from __future__ import annotations

import argparse
import functools
import gc
import json
import platform
import statistics
import sys
import time
from pathlib import Path

#: hidden, heads, kv_heads, ffn, seq: tiny, and divisible by every TP degree run (heads, kv_heads, seq)
SHAPE = (64, 8, 8, 128, 16)
#: (variant, tp, dp): the configurations run
CONFIGS = (("plain", 1, 1), ("tp", 1, 1), ("tp", 2, 1), ("tp", 8, 1), ("fsdp", 1, 1), ("fsdp", 1, 2),
           ("fsdp", 1, 8), ("tp+fsdp", 8, 2))
#: the configurations run with ``--compile`` (FSDP2's hooks stay outside the compiled blocks)
CONFIGS_COMPILE = (("plain", 1, 1), ("tp", 8, 1))
WARMUP = 5


def titan_block(torch, h: int, heads: int, kv_heads: int, ffn: int):
    """torchtitan's TransformerBlock (module docstring), bf16 compute with parameters left to the caller."""
    return _block_class(torch, h, heads, kv_heads, ffn)()


@functools.cache
def _block_class(torch, h: int, heads: int, kv_heads: int, ffn: int):
    """The block's class, made once per shape (torch.compile guards on a module's type)."""
    nn, F = torch.nn, torch.nn.functional
    hd = h // heads

    def rope(x, freqs):
        xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
        return torch.view_as_real(xc * freqs[: x.shape[1]].view(1, x.shape[1], 1, -1)).flatten(3).type_as(x)

    def repeat_kv(x, n):
        b, s, k, d = x.shape
        return x if n == 1 else x[:, :, :, None, :].expand(b, s, k, n, d).reshape(b, s, k * n, d)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.wq, self.wk = nn.Linear(h, heads * hd, bias=False), nn.Linear(h, kv_heads * hd, bias=False)
            self.wv, self.wo = nn.Linear(h, kv_heads * hd, bias=False), nn.Linear(heads * hd, h, bias=False)

        def forward(self, x, freqs):
            b, s, _ = x.shape
            q = self.wq(x).view(b, s, -1, hd)
            k = self.wk(x).view(b, s, -1, hd)
            v = self.wv(x).view(b, s, -1, hd)
            q, k = rope(q, freqs), rope(k, freqs)
            k, v = repeat_kv(k, heads // kv_heads), repeat_kv(v, heads // kv_heads)
            o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
            return self.wo(o.transpose(1, 2).contiguous().view(b, s, -1))

    class FeedForward(nn.Module):
        def __init__(self):
            super().__init__()
            self.w1, self.w2, self.w3 = nn.Linear(h, ffn, bias=False), nn.Linear(ffn, h, bias=False), nn.Linear(h, ffn, bias=False)

        def forward(self, x):
            return self.w2(F.silu(self.w1(x)) * self.w3(x))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attention, self.feed_forward = Attention(), FeedForward()
            self.attention_norm, self.ffn_norm = nn.RMSNorm(h), nn.RMSNorm(h)

        def forward(self, x, freqs):
            x = x + self.attention(self.attention_norm(x), freqs)
            return x + self.feed_forward(self.ffn_norm(x))

    return Block


def titan_tp_plan():
    """torchtitan's per-block TP plan (apply_tp, 8a6c9fe6e; module docstring)."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, PrepareModuleInput, RowwiseParallel, SequenceParallel
    return {
        "attention_norm": SequenceParallel(),
        "attention": PrepareModuleInput(input_layouts=(Shard(1), None), desired_input_layouts=(Replicate(), None)),
        "attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(), "attention.wv": ColwiseParallel(),
        "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
        "ffn_norm": SequenceParallel(),
        "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
        "feed_forward.w1": ColwiseParallel(), "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
        "feed_forward.w3": ColwiseParallel(),
    }


def build(torch, variant: str, tp: int, dp: int, layers: int, compile_blocks: bool = False):
    """(model, local input, freqs) of one configuration; the fake process group holds tp * dp ranks.
    ``compile_blocks``: each block torch.compile'd after TP and before FSDP2, as torchtitan's
    apply_compile (``torch.compile(transformer_block, fullgraph=True)``, 8a6c9fe6e)."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore
    h, heads, kvh, ffn, s = SHAPE
    nn = torch.nn

    class Stack(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(titan_block(torch, h, heads, kvh, ffn) for _ in range(layers))

        def forward(self, x, freqs):
            for blk in self.layers:
                x = blk(x, freqs)
            return x

    torch.manual_seed(0)
    model = Stack()
    if dist.is_initialized():
        dist.destroy_process_group()
    if variant == "plain":
        model = model.to(torch.bfloat16)
        if compile_blocks:
            for i, blk in enumerate(model.layers):
                model.layers[i] = torch.compile(blk, fullgraph=True)
    else:
        from torch.distributed.device_mesh import init_device_mesh
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=tp * dp)
        mesh = init_device_mesh("cpu", (dp, tp), mesh_dim_names=("dp", "tp"))
        if "tp" in variant:
            from torch.distributed.tensor.parallel import parallelize_module
            for blk in model.layers:
                parallelize_module(blk, mesh["tp"], titan_tp_plan())
        if compile_blocks:
            for i, blk in enumerate(model.layers):
                model.layers[i] = torch.compile(blk, fullgraph=True)
        if "fsdp" in variant:
            from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
            mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
            for blk in model.layers:
                fully_shard(blk, mesh=mesh["dp"], mp_policy=mp, reshard_after_forward=True)
            fully_shard(model, mesh=mesh["dp"], mp_policy=mp)
        else:
            model = model.to(torch.bfloat16)
    hd = h // heads
    ang = torch.outer(torch.arange(s, dtype=torch.float32), 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd)))
    freqs = torch.polar(torch.ones_like(ang), ang)
    x = torch.randn(1, s // tp if "tp" in variant else s, h, dtype=torch.bfloat16, requires_grad=True)
    return model, x, freqs


def host_times(torch, model, x, freqs, reps: int) -> tuple[float, float, float, float]:
    """(forward, backward) medians in seconds of the thread's CPU time, then of wall time (module
    docstring): the CPU time leaves out the time other processes of a shared machine take the core."""
    for _ in range(WARMUP):
        model(x, freqs).sum().backward()
    fwd, bwd, fwd_w, bwd_w = [], [], [], []
    gc.collect()
    for _ in range(reps):
        c0, t0 = time.thread_time(), time.perf_counter()
        y = model(x, freqs)
        c1, t1 = time.thread_time(), time.perf_counter()
        fwd.append(c1 - c0)
        fwd_w.append(t1 - t0)
        loss = y.sum()
        c0, t0 = time.thread_time(), time.perf_counter()
        loss.backward()
        c1, t1 = time.thread_time(), time.perf_counter()
        bwd.append(c1 - c0)
        bwd_w.append(t1 - t0)
        gc.collect(1)   # between steps, untimed (torchtitan's GarbageCollection collects generation 1)
    return statistics.median(fwd), statistics.median(bwd), statistics.median(fwd_w), statistics.median(bwd_w)


def tiny_op_s(torch, n: int = 20000) -> float:
    """Host (thread CPU) seconds per ``add_`` on a one-element tensor (benchmarks/kernel_sweep.py run_host)."""
    tiny = torch.ones(1)
    for _ in range(1000):
        tiny.add_(1)
    t0 = time.thread_time()
    for _ in range(n):
        tiny.add_(1)
    return (time.thread_time() - t0) / n


def per_layer_us(rows) -> dict:
    """(forward, backward) host microseconds per layer of each configuration (variant, tp, dp) of the
    CSV's rows: for each layer count the least over the rounds of the round's median (the round least
    disturbed by other work on the machine), then the difference between the two layer counts divided
    by theirs (what runs once per step cancels)."""
    best: dict = {}
    for r in rows:
        key = (r["variant"], int(r["tp"]), int(r["dp"]), int(r["layers"]))
        f, b = float(r["fwd_us"]), float(r["bwd_us"])
        old = best.get(key)
        best[key] = (f, b) if old is None else (min(old[0], f), min(old[1], b))
    out = {}
    for (v, tp, dp, n), (f, b) in best.items():
        others = [(m, fb) for (v2, tp2, dp2, m), fb in best.items() if (v2, tp2, dp2) == (v, tp, dp) and m > n]
        for m, (f2, b2) in others:
            out[(v, tp, dp)] = ((f2 - f) / (m - n), (b2 - b) / (m - n))
    return out


def derive(rows, counted_kernels: int) -> dict:
    """The stack figures of taskgraph/data/stacks.yaml [HOST-DT] from the CSV's rows.

    ``dtensor_host_factor``: per pass, the TP block's host time per layer over the plain block's, the
    mean over the TP degrees > 1 run. ``fsdp2_hook_kernels``: per pass, the FSDP2 block's host time per
    layer less the plain block's, the mean over the data-parallel degrees > 1 run, in units of the plain
    block's host time per counted kernel (its forward + backward host time over ``counted_kernels``,
    the kernels the model counts for the block: what the stack's host_us_per_kernel is, [HOST-TT]).
    ``fsdp2_hook_kernels_tp``: the same for FSDP2 over TP's DTensor parameters (2-D mesh): the TP + FSDP2
    block's host time per layer less the TP block's of the same degree.
    Both are ratios to the plain block measured in the same run, taken to hold on another CPU."""
    per = per_layer_us(rows)
    plain = per[("plain", 1, 1)]
    tps = [v for k, v in per.items() if k[0] == "tp" and k[1] > 1]
    dps = [v for k, v in per.items() if k[0] == "fsdp" and k[2] > 1]
    unit = (plain[0] + plain[1]) / counted_kernels
    out = {"plain_us_per_kernel": unit, "per_layer_us": per}
    if tps:
        out["dtensor_host_factor"] = tuple(sum(v[i] for v in tps) / len(tps) / plain[i] for i in (0, 1))
    if dps:
        out["fsdp2_hook_kernels"] = tuple(sum(v[i] - plain[i] for v in dps) / len(dps) / unit for i in (0, 1))
    both = [(v, per[("tp", k[1], 1)]) for k, v in per.items() if k[0] == "tp+fsdp" and ("tp", k[1], 1) in per]
    if both:
        out["fsdp2_hook_kernels_tp"] = tuple(sum(v[i] - t[i] for v, t in both) / len(both) / unit for i in (0, 1))
    return out


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="directory for host_dtensor.csv and meta.json (created)")
    ap.add_argument("--reps", type=int, default=60, help="timed repetitions per configuration (5-1000)")
    ap.add_argument("--layers", default="1,4", help="two layer counts, comma-separated (1-16 each)")
    ap.add_argument("--compile", action="store_true",
                    help="run CONFIGS_COMPILE with every block torch.compile'd; writes host_dtensor_compile.csv")
    ap.add_argument("--rounds", type=int, default=3, help="times the whole set of configurations is run (1-10)")
    a = ap.parse_args(argv)
    if not 5 <= a.reps <= 1000:
        ap.error(f"--reps = {a.reps} must be in [5, 1000]")
    if not 1 <= a.rounds <= 10:
        ap.error(f"--rounds = {a.rounds} must be in [1, 10]")
    try:
        layer_counts = tuple(int(v) for v in a.layers.split(","))
    except ValueError:
        ap.error(f"--layers = {a.layers!r} must be two integers, e.g. 1,4")
    if len(layer_counts) != 2 or not all(1 <= v <= 16 for v in layer_counts) or layer_counts[0] == layer_counts[1]:
        ap.error(f"--layers = {a.layers!r} must be two different layer counts in [1, 16], e.g. 1,4")
    import torch
    torch.set_num_threads(1)
    gc.disable()   # as torchtitan's trainer (torchtitan/tools/utils.py GarbageCollection)
    from simulator.outputs.files import write_output
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    info = {"torch": torch.__version__, "cpu": cpu_model(), "threads": torch.get_num_threads(),
            "python": platform.python_version(), "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
            "shape": dict(zip(("hidden", "heads", "kv_heads", "ffn", "seq"), SHAPE)), "reps": a.reps,
            "backend": "fake (torch.testing._internal.distributed.fake_pg)",
            "compile": "torch.compile(block, fullgraph=True), Inductor" if a.compile else "eager"}
    write_output(out / ("meta_compile.json" if a.compile else "meta.json"), json.dumps(info, indent=1) + "\n", "--out")
    h, heads, kvh, ffn, s = SHAPE
    lines = ["round,variant,tp,dp,layers,hidden,heads,kv_heads,ffn,seq,fwd_us,bwd_us,host_us,wall_fwd_us,wall_bwd_us,tiny_op_us"]
    for rnd in range(a.rounds):
        for variant, tp, dp in (CONFIGS_COMPILE if a.compile else CONFIGS):
            for n in layer_counts:
                model, x, freqs = build(torch, variant, tp, dp, n, a.compile)
                f, b, fw, bw = host_times(torch, model, x, freqs, a.reps)
                tiny = tiny_op_s(torch)
                lines.append(f"{rnd},{variant},{tp},{dp},{n},{h},{heads},{kvh},{ffn},{s},{f * 1e6:.2f},{b * 1e6:.2f},"
                             f"{(f + b) * 1e6:.2f},{fw * 1e6:.2f},{bw * 1e6:.2f},{tiny * 1e6:.3f}")
                print(f"round {rnd} {variant} tp {tp} dp {dp} layers {n}: forward {f * 1e6:.0f} us, "
                      f"backward {b * 1e6:.0f} us, tiny op {tiny * 1e6:.2f} us", flush=True)
    write_output(out / ("host_dtensor_compile.csv" if a.compile else "host_dtensor.csv"), "\n".join(lines) + "\n",
                 "--out")
    return 0


if __name__ == "__main__":
    sys.exit(main())
