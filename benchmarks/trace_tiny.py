"""Train the shipped tiny example (``tiny-gpt-cpu``) for a few steps under ``torch.profiler`` and write
the trace ``execsim calibrate`` reads: a real run to calibrate on, on a CPU (no GPU needed).

The model is ``benchmarks/real_runs.py``'s tiny GPT (the example's ``model:`` section, checked equal),
trained as the example says: ``training.micro_batch`` x ``seq_len`` tokens per micro-batch, gradient
accumulation over ``global_batch / micro_batch`` micro-batches, Adam, in ``training.precision``, one
process, ``torch.set_num_threads(--threads)``. The profiler records ``--warmup`` steps unrecorded,
then ``--steps`` steps (``ProfilerStep#N``; ``execsim calibrate`` drops the last, as Holistic Trace
Analysis does), with ``record_shapes`` (GEMMs map to operators by their input shapes). The trace is
written gzip-compressed (``rank0.json.gz``) with two metadata fields, ``execsim_device`` and
``execsim_threads``, that calibrate compares with the strategy's.

    python benchmarks/trace_tiny.py -o trace/ [--steps 4] [--threads 1]
    execsim calibrate tiny-gpt-cpu trace/ -o measured.csv

Needs PyTorch (the CPU wheel: ``pip install torch --index-url https://download.pytorch.org/whl/cpu``).
About 10 s on one core.
"""
from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def trace_tiny(out_dir: Path, steps: int = 4, warmup: int = 2, threads: int = 1, example: str = "tiny-gpt-cpu") -> dict:
    """Train ``example`` under the profiler; write ``out_dir/rank0.json.gz``; return the step times."""
    import torch

    from benchmarks import real_runs
    from strategies.strategy_file import example_path, load_strategy
    from taskgraph.plan import resolve
    plan = resolve(load_strategy(example_path(example + ".yaml")))
    tr = plan.strategy.training
    if plan.model.name != real_runs.MODEL["name"] or plan.model.layers != real_runs.MODEL["layers"] \
            or plan.model.hidden != real_runs.MODEL["hidden"]:
        raise SystemExit(f"{example}: its model is not benchmarks/real_runs.py's tiny GPT")
    if plan.num_gpus != 1:
        raise SystemExit(f"{example}: trace_tiny runs one process; the example has {plan.num_gpus} GPUs")
    torch.set_num_threads(threads)
    dtype = getattr(torch, _DTYPES[tr.precision])
    module = torch.nn.Sequential(*real_runs.build_model(torch)).to(dtype)
    opt = torch.optim.Adam(module.parameters(), lr=1e-4, foreach=True)
    g = torch.Generator().manual_seed(0)
    vocab = real_runs.MODEL["vocab"]
    data = [(torch.randint(0, vocab, (tr.micro_batch, tr.seq_len), generator=g),
             torch.randint(0, vocab, (tr.micro_batch, tr.seq_len), generator=g)) for _ in range(plan.microbatches)]

    def step():
        opt.zero_grad(set_to_none=True)
        for ids, tgt in data:
            real_runs.loss_fn(torch, module(ids), tgt).backward()
        opt.step()

    from torch.profiler import ProfilerActivity, profile, schedule
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "rank0.json"
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                     schedule=schedule(wait=0, warmup=warmup, active=steps),
                     on_trace_ready=lambda p: p.export_chrome_trace(str(raw))) as prof:
            prof.add_metadata("execsim_device", "cpu")
            prof.add_metadata("execsim_threads", str(torch.get_num_threads()))
            for _ in range(warmup + steps):
                t0 = time.perf_counter()
                step()
                times.append(time.perf_counter() - t0)
                prof.step()
        out_dir.mkdir(parents=True, exist_ok=True)
        # mtime=0: the same trace gives the same bytes
        with open(raw, "rb") as src, gzip.GzipFile(out_dir / "rank0.json.gz", "wb", mtime=0) as dst:
            shutil.copyfileobj(src, dst)
    return {"example": example, "threads": threads, "steps_s": times[warmup:], "trace": str(out_dir / "rank0.json.gz")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--out", default="trace", help="folder for rank0.json.gz (default trace/)")
    ap.add_argument("--steps", type=int, default=4, help="profiled steps (the last is dropped by calibrate)")
    ap.add_argument("--warmup", type=int, default=2, help="steps run before the profiled ones")
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    args = ap.parse_args(argv)
    if not 2 <= args.steps <= 20 or not 0 <= args.warmup <= 20 or not 1 <= args.threads <= 256:
        ap.error("--steps in 2..20, --warmup in 0..20, --threads in 1..256")
    res = trace_tiny(Path(args.out), args.steps, args.warmup, args.threads)
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
