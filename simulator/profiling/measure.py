"""``execsim profile``: every distinct operator of a plan timed on this machine (``torch_ops``),
with the name of the device the times belong to (the profile's ``gpu`` column).

The device name: ``cpu`` on the CPU; on CUDA the GPU catalog entry (``topologies/data/gpus.yaml``)
whose family (A100, H100, ...) the device name contains, the capacity closest to the device's memory
breaking ties; a device the catalog lacks keeps its own name. A profile of one device applied to a
cluster of another needs ``options.profile_gpu`` (``ProfileTable.applied_to``).
"""
from __future__ import annotations

from simulator.profiling.inventory import profile_items
from simulator.profiling.profile_csv import ProfileRow
from simulator.profiling.timing import ProfilingError, check_counts, need_torch
from taskgraph.cost import OPTIMIZER_OP, PASSES, optimizer_shape

DEVICES = ("cpu", "cuda")
#: the most one ``execsim profile`` may ask of a device, counted before any work: FLOPs of all passes
#: x (warm-up + repeats), at about 1 TFLOP/s on a CPU core with AMX and 500 TFLOP/s on a GPU (a few
#: minutes each), and bytes of the largest operator's tensors
MAX_PROFILE_FLOP = {"cpu": 2e14, "cuda": 1e17}
MAX_OP_BYTES = {"cpu": 8 * 2**30, "cuda": 64 * 2**30}


def check_work(items, device: str, repeats: int, warmup: int) -> None:
    """Refuse a profile that would run for hours or exhaust memory, before it starts."""
    flop = sum((it.op.fwd_flops + it.op.bwd_input_flops + it.op.bwd_weight_flops) for it in items)
    total = flop * (repeats + warmup)
    if total > MAX_PROFILE_FLOP[device]:
        raise ProfilingError(f"profiling every operator {repeats + warmup} times is {total:.3g} FLOP, over the "
                             f"{MAX_PROFILE_FLOP[device]:.0e} FLOP limit on {device}; lower --repeats, or "
                             f"training.micro_batch / seq_len with --set")
    big = max(items, key=lambda it: it.op.fwd_bytes + it.op.bwd_input_bytes + it.op.bwd_weight_bytes)
    nbytes = big.op.fwd_bytes + big.op.bwd_input_bytes + big.op.bwd_weight_bytes
    if nbytes > MAX_OP_BYTES[device]:
        raise ProfilingError(f"operator {big.name} ({big.shape}) moves {nbytes / 2**30:.1f} GiB, over the "
                             f"{MAX_OP_BYTES[device] / 2**30:.0f} GiB limit on {device}; lower training.micro_batch "
                             f"or seq_len with --set")


def device_name(torch, device: str) -> str:
    """The profile's ``gpu`` column for ``device`` (module docstring)."""
    if device == "cpu":
        return "cpu"
    from topologies.gpus import load_gpu_catalog
    props = torch.cuda.get_device_properties(0)
    name = props.name.upper()
    fits = [g for g in load_gpu_catalog().values() if g.name.split("-")[0].upper() in name.split()
            or g.name.split("-")[0].upper() in name.replace("-", " ").split()]
    if not fits:
        return props.name.replace(" ", "-")
    return min(fits, key=lambda g: (abs(g.hbm_capacity - props.total_memory), g.name)).name


def open_device(device: str, threads: int | None):
    """torch, after checking the device exists and pinning CPU threads when asked."""
    if device not in DEVICES:
        raise ProfilingError(f"--device = {device!r} must be one of {', '.join(DEVICES)}")
    torch = need_torch()
    if device == "cuda" and not torch.cuda.is_available():
        raise ProfilingError("--device cuda but PyTorch sees no CUDA device here (torch.cuda.is_available() is "
                             "False); use --device cpu or run on the GPU machine")
    if threads is not None:
        if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= 1024:
            raise ProfilingError(f"--threads = {threads!r} must be an integer in [1, 1024]")
        torch.set_num_threads(threads)
    return torch


def profile_plan(plan, device: str = "cpu", repeats: int = 10, warmup: int = 3, threads: int | None = None,
                 progress=None) -> tuple[str, list[ProfileRow]]:
    """(device name, one row per operator pass) for every distinct operator of ``plan``;
    ``progress(done, total)`` is called after each operator."""
    check_counts(repeats, warmup)
    items = profile_items(plan)
    if device not in DEVICES:
        raise ProfilingError(f"--device = {device!r} must be one of {', '.join(DEVICES)}")
    check_work(items, device, repeats, warmup)
    torch = open_device(device, threads)
    from simulator.profiling.torch_ops import builder_name, time_item
    torch.manual_seed(0)
    rows = []
    for i, it in enumerate(items):
        measured = time_item(it, plan, device, repeats, warmup)
        how = builder_name(it)
        rows += [ProfileRow(it.name, it.shape, p, m, mod, it.count, how)
                 for p, m, mod in zip(PASSES, measured, it.modelled_s)]
        if device == "cuda":
            torch.cuda.empty_cache()
        if progress is not None:
            progress(i + 1, len(items))
    from simulator.profiling.torch_ops import time_optimizer
    rows += [ProfileRow(OPTIMIZER_OP, optimizer_shape(n), "fwd", time_optimizer(sizes, plan, device, repeats, warmup),
                        modelled, 0, "adam") for n, sizes, modelled in optimizer_items(plan)]
    return device_name(torch, device), rows


def optimizer_items(plan) -> list[tuple]:
    """(parameters, parameters per operator, modelled seconds) of each distinct optimizer step of
    ``plan``'s stages (``taskgraph.costing.optimizer_params``; modelled by ``taskgraph.overheads.adam_step_s``)."""
    from taskgraph.costing import build_work, grad_bytes_per_param, optimizer_params
    from taskgraph.overheads import adam_step_of
    gbp = grad_bytes_per_param(plan)
    out = {}
    for st in build_work(plan, fidelity="operator").stages:
        n = optimizer_params(plan, st.layers)
        total = sum(op.grad_bytes for l in st.layers for op in l.ops) / gbp
        sizes = tuple(max(1, round(op.grad_bytes / gbp * n / total)) for l in st.layers for op in l.ops
                      if op.grad_bytes > 0)
        key = optimizer_shape(n)
        if key not in out:
            out[key] = (n, sizes, adam_step_of(plan, n, gbp))
    return list(out.values())
