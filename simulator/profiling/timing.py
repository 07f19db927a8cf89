"""Timing one callable the way kernel benchmarks do: warm-up calls, then N timed calls, the median.

CUDA: a pair of ``torch.cuda.Event(enable_timing=True)`` around each call, read after one
``torch.cuda.synchronize()`` (PyTorch docs, "CUDA semantics: asynchronous execution"; the method of
``torch.utils.benchmark`` and Triton's ``do_bench``). CPU: ``time.perf_counter`` around each call
(operators run synchronously on the calling thread, dispatch included). The median resists the
outliers a shared machine adds (another process taking the core for a few milliseconds).
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from strategies.errors import ExecsimError

#: limits on the repeats a user asks for (each one runs every pass of every operator once)
MAX_REPEATS = 1000
MAX_WARMUP = 100
#: bytes written between two timed CPU calls to evict the caches: 32 x a server core's 2 MB L2,
#: and more than the operands of any one operator of the real runs (docs/validation.md)
FLUSH_BYTES = 64 * 2**20


class ProfilingError(ExecsimError):
    """Profiling cannot run here (no PyTorch, no CUDA device, an unsupported precision ...)."""


def need_torch():
    """The ``torch`` module, or one clear error saying how to install it."""
    try:
        import torch
    except ImportError:
        raise ProfilingError("PyTorch is not installed: pip install 'execsim[profile]' (or any torch >= 2.1 "
                             "build for this machine), then run the command again") from None
    return torch


def check_counts(repeats: int, warmup: int) -> None:
    """Refuse counts that would run for ever, before any work (``--repeats``, ``--warmup``)."""
    if isinstance(repeats, bool) or not isinstance(repeats, int) or not 1 <= repeats <= MAX_REPEATS:
        raise ProfilingError(f"--repeats = {repeats!r} must be an integer in [1, {MAX_REPEATS}]")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or not 0 <= warmup <= MAX_WARMUP:
        raise ProfilingError(f"--warmup = {warmup!r} must be an integer in [0, {MAX_WARMUP}]")


def median_seconds(fn: Callable[[], object], device: str, repeats: int, warmup: int, fresh: bool = False,
                   hot=()) -> float:
    """Median seconds of ``fn()`` over ``repeats`` calls after ``warmup`` untimed ones.

    On the CPU each call starts with cold caches, as inside a training step, where the layers'
    weights and activations stream through the caches between one use of an operand and the next:
    before every call (untimed) a buffer of ``FLUSH_BYTES`` is written, evicting what the previous
    call left (Triton's ``do_bench`` clears the GPU's L2 the same way, writing a 256 MB buffer before
    each timed call); then the tensors in ``hot`` are read (untimed), as the operator that produced
    them in the step has just written them. ``fresh``: every call's outputs stay alive until the end, so each call writes
    memory the process has not touched yet and pays its first-touch page faults (``torch_ops``
    says which operators a step runs that way).
    """
    if device == "cuda":
        import torch
        for _ in range(warmup):
            fn()
        pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                 for _ in range(repeats)]
        for start, end in pairs:
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) for s, e in pairs) * 1e-3
    import torch
    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8)
    keep = []
    times = []
    for i in range(warmup + repeats):
        flush.fill_(i & 0xFF)
        for t in hot:
            t.detach().sum()
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
        if fresh:
            keep.append(out)
    return statistics.median(times[warmup:])
