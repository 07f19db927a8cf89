"""Where candidates are simulated: in this process, a local process pool, or Ray tasks.

Every backend evaluates the same function, :func:`evaluate_row` (``simulator.search.evaluate.evaluate`` plus
the money columns), on contiguous chunks of the candidate list, and returns the rows in candidate
order, so the result table does not depend on the backend or the number of workers: the tests
compare the CSV bytes of ``local`` and ``ray`` runs. Wall-clock fields are kept out of the rows.

Chunks are contiguous runs of the sorted candidate list: neighbours share the pipeline schedule
(pp, vpp, micro-batches), the lowering structure cached on it and the costing context, so each
worker's caches (``strategies.schedules``, ``taskgraph.lower_coarse``, ``taskgraph.costing``) are
reused within its chunk -- what makes a sweep's first pass fast (docs/search.md, "Speed").

* ``local``: ``jobs == 1`` (or few candidates) runs in-process; otherwise a
  ``multiprocessing`` pool (fork where available) maps the chunks.
* ``ray``: ``ray.init(address=...)`` joins an existing cluster (``address=None``: ``RAY_ADDRESS``
  or a new local Ray); each chunk is one ``@ray.remote`` task. Install with
  ``pip install 'execsim[ray]'``.
"""
from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from simulator.search.space import CANDIDATE_FIELDS, Candidate, Context, cluster_for, static_bound
from strategies.errors import ConfigError, ExecsimError

#: Columns of a result row after the candidate fields, in order.
METRIC_FIELDS = ("status", "error", "iteration_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "mfu", "hfu",
                 "bubble_fraction", "peak_memory_gb", "memory_headroom_gb", "static_bound_gb", "days_to_train",
                 "gpu_hours", "cost_usd", "tokens_per_dollar", "microbatches", "num_tasks", "timeline")
ROW_FIELDS = CANDIDATE_FIELDS + METRIC_FIELDS
BACKENDS = ("local", "ray")
NAN = float("nan")


@dataclass(frozen=True)
class Job:
    """What every evaluation shares (pickled once per worker chunk).

    ctx: the space context (base strategy, model, cluster); price: USD per GPU-hour or None;
    train_tokens: the token budget the days / GPU-hours / cost columns are for; fidelity: coarse or
    operator.
    """

    ctx: Context
    price: float | None
    train_tokens: float
    fidelity: str = "coarse"


def candidate_strategy(ctx: Context, c: Candidate):
    """The base strategy with candidate ``c`` applied (a :class:`strategies.strategy_file.Strategy`)."""
    from simulator.search.evaluate import vary
    var = c.variation()
    var["cluster"] = cluster_for(ctx, c.gpus)
    return vary(ctx.base, var)


def candidate_cells(c: Candidate) -> dict:
    """The candidate's columns of a table row (per-stage and per-layer lists joined as text)."""
    d = {k: getattr(c, k) for k in CANDIDATE_FIELDS}
    d["layers_per_stage"] = "/".join(map(str, c.layers_per_stage)) if c.layers_per_stage else ""
    d["recompute_layers"] = ",".join(c.recompute_layers) if c.recompute_layers else ""
    return d


def invalid_row(c: Candidate, error: str, static_gb: float = NAN) -> dict:
    """The table row of a candidate the strategy checks reject (``status`` ``invalid``)."""
    row = candidate_cells(c)
    row.update({k: NAN for k in METRIC_FIELDS})
    row.update(status="invalid", error=error, microbatches=0, num_tasks=0, timeline="", static_bound_gb=static_gb)
    return row


def evaluate_row(job: Job, c: Candidate, prepared: tuple | None = None) -> dict:
    """Simulate candidate ``c`` and return its table row (``ROW_FIELDS``). ``status``: ``ok``,
    ``oom`` (simulated peak over the GPU memory), ``invalid`` (the strategy is rejected; ``error``
    says why). ``prepared``: ``(plan, work, fidelity)`` of ``c`` already computed
    (:func:`simulator.search.evaluate.prepare`; the same row)."""
    from simulator.search.evaluate import evaluate_prepared, prepare
    from topologies.pricing import training_cost
    row = invalid_row(c, "")
    try:
        row["static_bound_gb"] = static_bound(job.ctx, c) / 2**30
        if prepared is None:
            prepared = prepare(candidate_strategy(job.ctx, c), job.fidelity)
        ev = evaluate_prepared(*prepared)
    except ExecsimError as exc:
        row["error"] = str(exc)
        return row
    peak = ev.max_memory_gb
    row.update(status="ok" if ev.fits else "oom", iteration_time_s=ev.iteration_time_s, tokens_per_s=ev.tokens_per_s,
               tokens_per_s_per_gpu=ev.tokens_per_s_per_gpu, mfu=ev.mfu, hfu=ev.hfu,
               bubble_fraction=ev.bubble_fraction, peak_memory_gb=peak, memory_headroom_gb=ev.capacity_gb - peak,
               microbatches=ev.microbatches, num_tasks=ev.num_tasks, timeline=ev.timeline)
    if not ev.fits:
        row["error"] = f"out of memory: simulated peak {peak:.2f} GiB > {ev.capacity_gb:.2f} GiB"
    row.update(training_cost(ev.tokens_per_s, ev.num_gpus, job.train_tokens, job.price))
    return row


class gc_paused:
    """Context manager: Python's cyclic garbage collector off inside (restored after). Schedule
    generation and lowering allocate millions of short-lived objects that reference counting frees;
    the collector's generation-2 passes over the cached schedules cost ~10% of a first pass on
    GPT-3 and free nothing. Results do not depend on it."""

    def __enter__(self):
        import gc
        self._was = gc.isenabled()
        gc.disable()
        return self

    def __exit__(self, *exc):
        import gc
        if self._was:
            gc.enable()
        return False


def _chunk_rows(job: Job, chunk: Sequence[Candidate]) -> list[dict]:
    with gc_paused():  # one chunk at a time: the collector runs between chunks
        return [evaluate_row(job, c) for c in chunk]


def _chunks(cands: Sequence[Candidate], n: int) -> list[list[Candidate]]:
    size = max(1, math.ceil(len(cands) / n))
    return [list(cands[i:i + size]) for i in range(0, len(cands), size)]


def structure_key(job: Job, c: Candidate) -> tuple:
    """Candidates with equal keys share the pipeline schedule (name, pp, vpp, micro-batches) and,
    mostly, the coarse lowering's task structure and sweep order (ZeRO stage: buckets and gathers);
    the candidate's own sort key breaks ties."""
    gb = job.ctx.base.training.global_batch
    return (c.gpus, c.pp, c.vpp, c.schedule, gb // max(c.micro_batch * c.dp, 1), c.zero) + c.sort_key()


def evaluation_order(job: Job, cands: Sequence[Candidate]) -> list[int]:
    """The order candidates are simulated in: grouped by :func:`structure_key`, so that each
    schedule and lowering structure is built once and used by all its candidates while it is in
    the caches (the sorted candidate list revisits a schedule under another tp or dp, after the
    bounded caches may have dropped it). Rows are returned in candidate order whatever this order
    (every evaluation is independent of what the caches hold)."""
    return sorted(range(len(cands)), key=lambda i: structure_key(job, cands[i]))


def default_jobs() -> int:
    """Worker processes for the local backend: the CPUs this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def evaluate_rows(job: Job, cands: Sequence[Candidate], *, backend: str = "local", jobs: int | None = None,
                  chunk: int = 16, progress: Callable[[list[dict]], None] | None = None,
                  ray_address: str | None = None) -> list[dict]:
    """Rows of every candidate, in ``cands`` order, on ``backend``. ``progress`` is called with each
    finished chunk's rows (in completion order; the returned list is in candidate order)."""
    if backend not in BACKENDS:
        from strategies.config import did_you_mean
        raise ConfigError(f"--backend {backend!r} is not known{did_you_mean(backend, BACKENDS)}; use local or ray")
    cands = list(cands)
    if not cands:
        return []
    jobs = default_jobs() if jobs is None else jobs
    if jobs < 1:
        raise ConfigError(f"--jobs {jobs} must be >= 1")
    perm = evaluation_order(job, cands)
    rows = _rows(job, [cands[i] for i in perm], backend, jobs, chunk, progress, ray_address)
    out: list = [None] * len(cands)
    for i, row in zip(perm, rows):
        out[i] = row
    return out


def _rows(job: Job, cands: list[Candidate], backend: str, jobs: int, chunk: int, progress, ray_address) -> list[dict]:
    if backend == "ray":
        return _ray_rows(job, cands, jobs, chunk, progress, ray_address)
    if jobs == 1 or len(cands) <= chunk:
        out = []
        for ch in _chunks(cands, max(1, math.ceil(len(cands) / chunk))):
            rows = _chunk_rows(job, ch)
            out.extend(rows)
            if progress:
                progress(rows)
        return out
    import multiprocessing as mp
    ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else mp.get_context()
    # contiguous chunks, a few per worker (structure sharing inside a chunk, balance across them)
    chunks = _chunks(cands, max(jobs * 8, math.ceil(len(cands) / (chunk * 8))))
    submit = _largest_first(job, chunks)
    results: list = [None] * len(chunks)
    with ctx.Pool(jobs, initializer=_init_worker) as pool:
        pending = {i: pool.apply_async(_chunk_rows, (job, chunks[i])) for i in submit}
        for i in submit:
            results[i] = pending[i].get()
            if progress:
                progress(results[i])
    return [r for rows in results for r in rows]


def _largest_first(job: Job, chunks: list[list[Candidate]]) -> list[int]:
    """Chunk indices, largest estimated work first (longest-processing-time-first list scheduling,
    Graham 1969): the candidates sorted last tend to be the largest task graphs, and a big chunk at
    the end would leave the other workers idle. Rows are put back in candidate order by the caller."""
    size = [sum(_work_estimate(job, c) for c in ch) for ch in chunks]
    return sorted(range(len(chunks)), key=lambda i: (-size[i], i))


def _work_estimate(job: Job, c: Candidate) -> int:
    """Relative cost of evaluating ``c``: its coarse task count, ~ stages x micro-batches."""
    gb = job.ctx.base.training.global_batch
    return c.pp * c.vpp * max(gb // max(c.micro_batch * c.dp, 1), 1)


def _init_worker() -> None:
    import signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the parent, which ends the pool


def ray_available() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


def _ray_rows(job: Job, cands, jobs, chunk, progress, address) -> list[dict]:
    try:
        import ray
    except ImportError:
        raise ConfigError("--backend ray needs Ray: pip install 'execsim[ray]' (or pip install ray), then start or "
                          "join a cluster (ray start --head; RAY_ADDRESS=...)") from None
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": os.environ.get("PYTHONPATH", "")}}
                 if os.environ.get("PYTHONPATH") else None)
    remote = ray.remote(_chunk_rows)
    job_ref = ray.put(job)
    n = max(int(ray.available_resources().get("CPU", jobs)), 1) * 8
    chunks = _chunks(cands, max(n, math.ceil(len(cands) / (chunk * 8))))
    refs = {i: remote.remote(job_ref, chunks[i]) for i in _largest_first(job, chunks)}
    index = {r: i for i, r in refs.items()}
    results: list = [None] * len(chunks)
    waiting = list(refs.values())
    while waiting:
        done, waiting = ray.wait(waiting, num_returns=1)
        i = index[done[0]]
        results[i] = ray.get(done[0])
        if progress:
            progress(results[i])
    return [r for rows in results for r in rows]


__all__ = [
    "BACKENDS",
    "METRIC_FIELDS",
    "ROW_FIELDS",
    "Job",
    "candidate_strategy",
    "default_jobs",
    "evaluate_row",
    "evaluate_rows",
    "ray_available",
]
