"""A sweep of the collectives a strategy uses, run on this node with ``torch.distributed`` (NCCL on
CUDA, gloo on CPU), at the sizes the simulation asks for: the TP/CP/EP collectives around each
operator, the data-parallel gradient buckets and the pipeline send/recv.

Each case runs in ``world`` processes started with ``torch.multiprocessing.spawn`` on 127.0.0.1;
groups of n ranks are ranks 0..n-1 (``dist.new_group``). Per call: a barrier, then ``repeats`` timed
calls (``perf_counter`` around the call, after ``torch.cuda.synchronize()`` on CUDA), the median on
rank 0, as nccl-tests reports one rank's time (nccl-tests doc/PERFORMANCE.md). Send/recv is a
ping-pong between ranks 0 and 1, half the round trip. gloo has no reduce-scatter or all-to-all
for CPU tensors in every PyTorch version; such cases are skipped and named.

:func:`fit_alpha_beta` turns a sweep into the per-call latency and bus bandwidth of the alpha-beta
model (Hockney 1994: t = alpha + S / B; bus bytes per nccl-tests PERFORMANCE.md), which is how the
``cpu`` cluster of ``benchmarks/real_runs.py`` gets gloo's transfer rate.
"""
from __future__ import annotations

import csv
import io
import os
import socket
import statistics
import time
from typing import NamedTuple

from simulator.profiling.timing import ProfilingError, check_counts

#: nccl-tests bus-bandwidth factor per collective (doc/PERFORMANCE.md): bus bytes = factor(n) x S
BUS_FACTOR = {"all-reduce": lambda n: 2 * (n - 1) / n, "all-gather": lambda n: (n - 1) / n,
              "reduce-scatter": lambda n: (n - 1) / n, "all-to-all": lambda n: (n - 1) / n,
              "send-recv": lambda n: 1.0}
MAX_CASES = 256
MAX_CASE_BYTES = 4 * 2**30


class CollectiveRow(NamedTuple):
    collective: str
    ranks: int
    bytes: int
    time_s: float
    modelled_s: float = 0.0


def plan_cases(plan) -> list[tuple[str, int, int]]:
    """(collective, group size, bytes) of every distinct collective a simulation of ``plan`` times."""
    from simulator.profiling.inventory import plan_operators
    from taskgraph.costing import build_work
    s = plan.sizes
    size = {"tp": s.tp, "cp": s.cp, "ep": s.ep}
    cases = set()
    for op in plan_operators(plan):
        for c in op.comms:
            if size.get(c.group, 1) > 1:
                cases.add((c.op, size[c.group], int(c.bytes)))
    work = build_work(plan)
    dp = s.dp * s.cp
    if dp > 1:
        for st in work.stages:
            for b in st.buckets:
                cases.add(("all-reduce" if plan.zero == 0 else "reduce-scatter", dp, int(b.bytes)))
    if s.pp > 1:
        from taskgraph.plan import DTYPE_BYTES
        tr = plan.strategy.training
        cases.add(("send-recv", 2, int(DTYPE_BYTES[tr.precision] * tr.micro_batch * tr.seq_len // s.cp
                                       * plan.model.hidden // s.tp)))
    return sorted(cases)


def free_port() -> int:
    """A free TCP port on 127.0.0.1 for a local process group's rendezvous."""
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        return so.getsockname()[1]


def _worker(rank, world, port, backend, cases, repeats, warmup, out):
    import torch
    import torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group(backend, rank=rank, world_size=world)
    dev = "cuda" if backend == "nccl" else "cpu"
    if dev == "cuda":
        torch.cuda.set_device(rank)
    groups = {n: dist.new_group(list(range(n))) for n in sorted({c[1] for c in cases})}
    res = []
    for kind, n, nbytes in cases:
        elems = max(n, nbytes // 4 // n * n)
        t = torch.ones(elems, dtype=torch.float32, device=dev)
        g = groups[n]
        if kind == "all-reduce":
            call = lambda: dist.all_reduce(t, group=g)
        elif kind == "all-gather":
            parts = [torch.empty(elems // n, device=dev) for _ in range(n)]
            call = lambda: dist.all_gather(parts, t[: elems // n], group=g)
        elif kind == "reduce-scatter":
            o = torch.empty(elems // n, device=dev)
            call = lambda: dist.reduce_scatter_tensor(o, t, group=g)
        elif kind == "all-to-all":
            o = torch.empty_like(t)
            call = lambda: dist.all_to_all_single(o, t, group=g)
        else:  # send-recv ping-pong between ranks 0 and 1; half the round trip
            def call():
                if rank == 0:
                    dist.send(t, 1)
                    dist.recv(t, 1)
                elif rank == 1:
                    dist.recv(t, 0)
                    dist.send(t, 0)
        times = []
        ok = True
        for i in range(warmup + repeats):
            dist.barrier()
            t0 = time.perf_counter()
            if rank < n:
                try:
                    call()
                except (RuntimeError, NotImplementedError):
                    ok = False
                if dev == "cuda":
                    torch.cuda.synchronize()
            if i >= warmup:
                times.append(time.perf_counter() - t0)
        sec = statistics.median(times) / (2 if kind == "send-recv" else 1)
        res.append((kind, n, elems * 4, sec if ok else float("nan")))
    if rank == 0:
        out.extend(res)
    dist.barrier()
    dist.destroy_process_group()


def sweep(cases, backend: str = "gloo", world: int | None = None, repeats: int = 10, warmup: int = 3) -> list:
    """(collective, ranks, bytes, seconds) of each case (module docstring); NaN = not supported."""
    check_counts(repeats, warmup)
    cases = list(cases)
    if len(cases) > MAX_CASES or any(c[2] > MAX_CASE_BYTES for c in cases):
        raise ProfilingError(f"a collective sweep takes at most {MAX_CASES} cases of at most "
                             f"{MAX_CASE_BYTES / 2**30:.0f} GiB each; this one has {len(cases)}")
    if not cases:
        return []
    import torch.multiprocessing as mp
    world = world or max(c[1] for c in cases)
    with mp.Manager() as man:
        out = man.list()
        mp.spawn(_worker, args=(world, free_port(), backend, cases, repeats, warmup, out), nprocs=world, join=True)
        return list(out)


def sweep_plan(plan, device: str, repeats: int, warmup: int) -> list[CollectiveRow]:
    """The plan's collectives that fit on this node, measured, beside the simulator's time for them."""
    from simulator.profiling.measure import open_device
    from topologies.collectives import collective_time
    torch = open_device(device, None)
    local = torch.cuda.device_count() if device == "cuda" else (os.cpu_count() or 1)
    cases = [c for c in plan_cases(plan) if c[1] <= local]
    rows = []
    for kind, n, nbytes, sec in sweep(cases, "nccl" if device == "cuda" else "gloo", None, repeats, warmup):
        model = collective_time(kind, nbytes, tuple(range(n)), plan.cluster)
        rows.append(CollectiveRow(kind, n, nbytes, sec, model))
    return rows


def fit_alpha_beta(rows) -> tuple[float, float]:
    """(alpha seconds, bus bandwidth bytes/s) by least squares of t = alpha + bus_bytes / B over the
    rows with a time (Hockney 1994 alpha-beta model)."""
    pts = [(BUS_FACTOR[r[0]](r[1]) * r[2], r[3]) for r in rows if r[3] == r[3]]
    if len(pts) < 2:
        raise ProfilingError("fitting a transfer rate needs at least two measured sizes")
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    slope = sum((p[0] - mx) * (p[1] - my) for p in pts) / sxx
    return max(0.0, my - slope * mx), 1.0 / slope


def collective_text(rows, gpu: str) -> str:
    """The collective profile CSV: gpu, collective, ranks, bytes, time_us (and the model's time)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(("gpu", "collective", "ranks", "bytes", "time_us", "modelled_us"))
    for r in rows:
        w.writerow((gpu, r.collective, r.ranks, r.bytes, "" if r.time_s != r.time_s else f"{r.time_s * 1e6:.3f}",
                    f"{r.modelled_s * 1e6:.3f}"))
    return buf.getvalue()
