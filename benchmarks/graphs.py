"""Synthetic task graphs for the engine benchmarks, built with vectorized numpy (3e6 tasks in seconds).

* :func:`random_dag` -- a random DAG with edges from lower to higher ids inside a sliding window
  (so the graph has depth, not just a wide frontier), random devices and durations.
* :func:`pipeline_graph` -- a 1F1B-like pipeline workload with the structure the operator-level
  lowering produces (``taskgraph/lower_pipeline.py``): per rank, a program-order chain of
  (pass, microbatch) blocks, each block a chain of operator tasks on the rank's compute device with
  a tensor-parallel collective on the rank's TP device after every ``tp_every`` operators; forward
  activations and backward gradients cross ranks as transfer tasks on ``link a->b`` devices; each
  F(s, m) exit also feeds B(s, m)'s entry. Most tasks have one successor, block exits two.
* :func:`strategy_graphs` -- hook for pipeline graphs lowered from real strategies (empty for now).

The graphs go through :func:`taskgraph.graph.csr_from_edges`, like graphs from the builder.
"""
from __future__ import annotations

import numpy as np

from taskgraph.graph import CAT, Device, TaskGraph, csr_from_edges


def _graph(duration, device, src, dst, devices, *, category=None, op=None, op_names=("op",),
           stage=None, mb=None, rank=None, meta=None) -> TaskGraph:
    n = int(duration.shape[0])
    succ_ptr, succ_idx = csr_from_edges(n, src, dst)
    minus = np.full(n, -1, dtype=np.int32)
    return TaskGraph(
        duration=np.ascontiguousarray(duration, dtype=np.float64),
        device=np.ascontiguousarray(device, dtype=np.int32),
        category=(np.full(n, CAT["other"], dtype=np.int8) if category is None
                  else np.asarray(category, dtype=np.int8)),
        op=np.zeros(n, dtype=np.int32) if op is None else np.asarray(op, dtype=np.int32),
        stage=minus if stage is None else np.asarray(stage, dtype=np.int32),
        chunk=minus,
        mb=minus if mb is None else np.asarray(mb, dtype=np.int32),
        rank=minus if rank is None else np.asarray(rank, dtype=np.int32),
        succ_ptr=succ_ptr, succ_idx=succ_idx,
        devices=tuple(devices), op_names=tuple(op_names), meta=dict(meta or {}),
    )


def random_dag(n: int, devices: int = 16, avg_succ: float = 2.0, seed: int = 0, *, window: int = 256,
               integer_durations: bool = False) -> TaskGraph:
    """A random DAG of ``n`` tasks on ``devices`` devices, about ``avg_succ`` successors per task.

    Task ``u`` draws Poisson(``avg_succ``) successors ``u + 1 + g`` with ``g`` geometric of mean
    ``window``; edges past the last task and duplicates are dropped (so the mean is a bit lower).
    Durations are uniform in [0.5, 1.5) seconds, or integers 1..3 with ``integer_durations`` (ties).
    """
    rng = np.random.default_rng(seed)
    k = rng.poisson(avg_succ, size=n)
    src = np.repeat(np.arange(n, dtype=np.int64), k)
    dst = src + rng.geometric(1.0 / max(window, 1), size=src.size)
    keep = dst < n
    key = src[keep] * n + dst[keep]
    key.sort(kind="stable")  # nearly sorted already (by src): timsort is fast here
    if key.size:
        key = key[np.concatenate(([True], key[1:] != key[:-1]))]  # drop duplicate edges
    src, dst = key // n, key % n
    if integer_durations:
        duration = rng.integers(1, 4, size=n).astype(np.float64)
    else:
        duration = rng.uniform(0.5, 1.5, size=n)
    device = rng.integers(0, devices, size=n)
    devs = [Device(f"dev{d}", -1, "compute") for d in range(devices)]
    return _graph(duration, device, src, dst, devs,
                  meta={"kind": "random", "avg_succ": avg_succ, "window": window, "seed": seed})


def fanout_dag(n: int, devices: int = 16, width: int = 64, seed: int = 0) -> TaskGraph:
    """Wide fan-in / fan-out: layers of ``width`` tasks; every task of a layer feeds 16 random tasks of
    the next (so each task also has ~16 predecessors): heap-heavy, no chain edges."""
    rng = np.random.default_rng(seed)
    layers = max(n // width, 1)
    n = layers * width
    src = np.repeat(np.arange(n - width, dtype=np.int64), 16)
    base = (src // width + 1) * width
    dst = base + rng.integers(0, width, size=src.size)
    key = np.unique(src * n + dst)
    src, dst = key // n, key % n
    duration = rng.uniform(0.5, 1.5, size=n)
    device = rng.integers(0, devices, size=n)
    devs = [Device(f"dev{d}", -1, "compute") for d in range(devices)]
    return _graph(duration, device, src, dst, devs, meta={"kind": "fanout", "width": width, "seed": seed})


def zero_dag(n: int, devices: int = 16, seed: int = 0) -> TaskGraph:
    """A random DAG (:func:`random_dag`) where half of the durations are 0 (zero-duration ties)."""
    g = random_dag(n, devices, 2.0, seed)
    rng = np.random.default_rng(seed + 1)
    dur = np.where(rng.random(g.num_tasks) < 0.5, 0.0, g.duration)
    src = np.repeat(np.arange(g.num_tasks, dtype=np.int64), np.diff(g.succ_ptr))
    devs = [Device(f"dev{d}", -1, "compute") for d in range(devices)]
    return _graph(dur, g.device, src, np.asarray(g.succ_idx, dtype=np.int64), devs,
                  meta={"kind": "zero", "seed": seed})


def one_f_one_b_order(ranks: int, microbatches: int, rank: int) -> list[tuple[int, int]]:
    """1F1B order of one rank as (pass, mb) with pass 0 = forward, 1 = backward."""
    warm = min(ranks - rank - 1, microbatches)
    order = [(0, m) for m in range(warm)]
    for i in range(microbatches - warm):
        order += [(0, warm + i), (1, i)]
    order += [(1, m) for m in range(microbatches - warm, microbatches)]
    return order


def pipeline_graph(n_target: int, seed: int = 0, *, ranks: int = 8, ops: int = 96, tp_every: int = 4,
                   microbatches: int | None = None) -> TaskGraph:
    """A 1F1B pipeline of about ``n_target`` tasks (see the module docstring).

    ``ranks`` stages, one per rank; each (stage, mb, pass) block has ``ops`` operator tasks plus
    ``ops // tp_every`` TP collectives; the number of microbatches is chosen to reach ``n_target``
    unless given. Task ids follow the builder's order: rank 0's blocks in program order, then rank
    1's, ..., then the transfers. Durations: a per-operator base cost (backward 2x forward) times a
    log-normal jitter per task, so ties are rare.
    """
    P = int(ranks)
    n_tp = ops // tp_every if tp_every > 0 else 0
    B = ops + n_tp  # tasks per block
    if microbatches is None:
        per_mb = 2 * P * B + 2 * (P - 1)
        microbatches = max(1, int(round(n_target / per_mb)))
    M = int(microbatches)
    rng = np.random.default_rng(seed)

    # blocks: (rank, pass, mb) in program order, rank-major
    blk_rank, blk_pass, blk_mb = [], [], []
    for r in range(P):
        for p, m in one_f_one_b_order(P, M, r):
            blk_rank.append(r)
            blk_pass.append(p)
            blk_mb.append(m)
    blk_rank = np.asarray(blk_rank, dtype=np.int64)
    blk_pass = np.asarray(blk_pass, dtype=np.int64)
    blk_mb = np.asarray(blk_mb, dtype=np.int64)
    nb = blk_rank.size
    base = np.arange(nb, dtype=np.int64) * B  # first task id of each block
    n_blk_tasks = nb * B

    # pattern inside a block: op j, then a TP collective after every tp_every-th op
    is_tp = np.zeros(B, dtype=bool)
    op_of = np.empty(B, dtype=np.int64)
    pos, j = 0, 0
    for j in range(ops):
        op_of[pos] = j
        pos += 1
        if tp_every > 0 and (j + 1) % tp_every == 0 and pos < B:
            is_tp[pos] = True
            op_of[pos] = ops  # "tp" op name
            pos += 1
    op_cost = rng.uniform(0.5e-4, 2.0e-4, size=ops + 1)  # seconds, per operator (last: TP collective)

    tile_tp = np.tile(is_tp, nb)
    tile_op = np.tile(op_of, nb)
    t_rank = np.repeat(blk_rank, B)
    t_pass = np.repeat(blk_pass, B)
    device = np.where(tile_tp, 2 * t_rank + 1, 2 * t_rank)
    dur = op_cost[tile_op] * np.where(t_pass == 1, 2.0, 1.0) * rng.lognormal(0.0, 0.05, size=n_blk_tasks)
    category = np.where(tile_tp, CAT["tp-comm"], np.where(t_pass == 1, CAT["backward"], CAT["forward"]))

    entry = base
    exit_ = base + B - 1
    # 1. chains inside blocks
    chain_src = np.arange(n_blk_tasks, dtype=np.int64).reshape(nb, B)[:, :-1].ravel()
    chain_dst = chain_src + 1
    # 2. program order between consecutive blocks of a rank
    same_rank = blk_rank[1:] == blk_rank[:-1]
    po_src, po_dst = exit_[:-1][same_rank], entry[1:][same_rank]
    # index blocks by (rank, pass, mb)
    where = np.empty((P, 2, M), dtype=np.int64)
    where[blk_rank, blk_pass, blk_mb] = np.arange(nb)
    # 3. F(s, m) -> B(s, m) on the same rank
    fb_src, fb_dst = exit_[where[:, 0, :].ravel()], entry[where[:, 1, :].ravel()]
    # 4. transfers: forward s -> s+1, backward s+1 -> s
    n_x = 2 * (P - 1) * M
    x_ids = n_blk_tasks + np.arange(n_x, dtype=np.int64)
    xf, xb = x_ids[: n_x // 2].reshape(P - 1, M), x_ids[n_x // 2:].reshape(P - 1, M)
    f_from, f_to = exit_[where[:-1, 0, :]], entry[where[1:, 0, :]]
    b_from, b_to = exit_[where[1:, 1, :]], entry[where[:-1, 1, :]]
    x_src = np.concatenate([f_from.ravel(), xf.ravel(), b_from.ravel(), xb.ravel()])
    x_dst = np.concatenate([xf.ravel(), f_to.ravel(), xb.ravel(), b_to.ravel()])
    link_f = 2 * P + np.repeat(np.arange(P - 1), M)            # link s->s+1
    link_b = 2 * P + (P - 1) + np.repeat(np.arange(P - 1), M)  # link s+1->s
    x_dev = np.concatenate([link_f, link_b])
    x_dur = rng.uniform(0.5e-4, 1.5e-4, size=n_x)
    x_rank = np.concatenate([np.repeat(np.arange(P - 1), M), np.repeat(np.arange(1, P), M)])
    x_mb = np.tile(np.arange(M), 2 * (P - 1))

    src = np.concatenate([chain_src, po_src, fb_src, x_src])
    dst = np.concatenate([chain_dst, po_dst, fb_dst, x_dst])
    devices = ([d for r in range(P) for d in (Device(f"rank{r}/compute", r, "compute"),
                                               Device(f"rank{r}/tp", r, "tp"))]
               + [Device(f"link {s}->{s + 1}", s, "link") for s in range(P - 1)]
               + [Device(f"link {s + 1}->{s}", s + 1, "link") for s in range(P - 1)])
    op_names = tuple(f"op{j}" for j in range(ops)) + ("tp", "send-act", "send-grad")
    x_op = np.concatenate([np.full(n_x // 2, ops + 1), np.full(n_x // 2, ops + 2)])
    return _graph(
        np.concatenate([dur, x_dur]), np.concatenate([device, x_dev]), src, dst, devices,
        category=np.concatenate([category, np.full(n_x, CAT["pp-send"])]),
        op=np.concatenate([tile_op, x_op]), op_names=op_names,
        stage=np.concatenate([t_rank, x_rank]), mb=np.concatenate([np.repeat(blk_mb, B), x_mb]),
        rank=np.concatenate([t_rank, x_rank]),
        meta={"kind": "pipeline", "schedule": "1f1b", "pp": P, "microbatches": M, "ops": ops,
              "tp_every": tp_every, "seed": seed},
    )


_LOWERED: dict = {}


def lowered_gpt3(n_target: int = 0, seed: int = 0) -> TaskGraph:
    """The real lowered task graph of strategies/examples/gpt3-175b-1024-a100.yaml (operator fidelity,
    ~346 k tasks whatever ``n_target``; built once per process)."""
    if "gpt3" not in _LOWERED:
        from pathlib import Path

        from strategies.strategy_file import load_strategy
        from taskgraph.costing import build_work
        from taskgraph.lower_model import lower_model
        from taskgraph.plan import resolve

        path = Path(__file__).resolve().parent.parent / "strategies/examples/gpt3-175b-1024-a100.yaml"
        strategy = load_strategy(path)
        plan = resolve(strategy)
        work = build_work(plan)
        _LOWERED["gpt3"] = lower_model(plan.schedule, work, overlap_handoff=strategy.options.overlap_handoff)
    return _LOWERED["gpt3"]


def strategy_graphs() -> list:
    """Graphs lowered from real strategies: ``(kind, build)`` pairs with ``build(n_target, seed) ->
    TaskGraph`` (fixed size: ``n_target`` is ignored). Run with ``--kinds gpt3``."""
    return [("gpt3", lowered_gpt3)]


#: graph kinds the benchmark runs by default: name -> build(n_target, seed)
GENERATORS = {
    "pipeline": lambda n, seed=0: pipeline_graph(n, seed),
    "random": lambda n, seed=0: random_dag(n, 16, 2.0, seed),
    "fanout": lambda n, seed=0: fanout_dag(n, 16, 64, seed),
    "zero": lambda n, seed=0: zero_dag(n, 16, seed),
}
