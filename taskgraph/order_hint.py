"""A guess of the engine's per-device order for a lowered pipeline schedule, known before any run.

The pipeline schedule fixes the order of the actions on each rank (PyTorch pipelining's per-rank
action lists; the lowering turns it into program-order edges, ``taskgraph/lower_pipeline.py``), and
the lowering emits each action's tasks as one contiguous id range, in an order in which every edge
inside the action goes forward. So a topological order of the *actions* (a few thousand, not the
~10^5 tasks), with the tasks of each action in id order, each transfer right after the action whose
task releases it, each rank's epilogue (gradient reduction, optimizer step, parameter gathers) after
every action and the tasks with no predecessor (overlapped parameter gathers, ready at 0) first, is
a topological order of the task graph; restricted to a device it is the guess of that device's FIFO
order. :func:`simulator.engine.resweep.sweep_in_order` times the graph in it and checks the result
against the engine's semantics (Lemma 1 of ``simulator/engine/delta/__init__.py``); a wrong guess
(e.g. two transfers on one link that become ready in the other order) is refused there and the
engine runs. ``lower_model`` makes no guess for concurrent pairs (DualPipe on the DeepSeek-V3
example): their halves interleave on the rank's devices, so the guess would always be refused.
"""
from __future__ import annotations

import numpy as np

from taskgraph.graph import csr_from_edges, kahn_order


def action_order(graph, entries: np.ndarray, n_sched: int) -> np.ndarray | None:
    """The guessed order (module doc) of ``graph``, whose tasks ``[0, n_sched)`` are the schedule's
    actions followed by its transfers (link devices) and whose tasks from ``n_sched`` on are the
    per-rank epilogue; ``entries`` holds each action's first task id. None when the action graph
    has a cycle (then there is nothing to guess from)."""
    n = graph.num_tasks
    entries = np.sort(np.asarray(entries, dtype=np.int64))  # (np.unique would import numpy.ma)
    A = entries.size
    if A == 0 or entries[0] != 0 or n_sched > n or bool(np.any(entries[1:] == entries[:-1])):
        return None
    link = np.array([d.stream == "link" for d in graph.devices], dtype=bool)
    n_act = n_sched - int(np.count_nonzero(link[graph.device[:n_sched]]))
    if n_act <= entries[-1]:
        return None
    src = np.repeat(np.arange(n, dtype=np.int64), np.diff(graph.succ_ptr))
    dst = np.asarray(graph.succ_idx, dtype=np.int64)
    # node of each task: its action; a transfer's is that of the task that releases it (its one
    # predecessor), so transfers released together keep id order; the epilogue's is A + rank
    node = np.empty(n, dtype=np.int64)
    node[:n_act] = np.searchsorted(entries, np.arange(n_act), side="right") - 1
    xfer = (dst >= n_act) & (dst < n_sched)
    node[dst[xfer]] = node[src[xfer]]
    ep = np.arange(n_sched, n)
    node[ep] = A + graph.rank[ep]
    inner = (src < n_sched) & (dst < n_sched)
    nu, nv = node[src[inner]], node[dst[inner]]
    cross = nu != nv
    key = np.sort(nu[cross] * A + nv[cross])
    key = key[np.append(True, key[1:] != key[:-1])] if key.size else key
    topo = kahn_order(A, *csr_from_edges(A, key // A, key % A))
    if len(topo) != A:
        return None
    # segments: each action's id range, each transfer, each epilogue task; sorted by (position of
    # their node, transfers after their action, id), then expanded to task ids
    xs, es = np.arange(n_act, n_sched), ep
    has_pred = np.zeros(n, dtype=bool)
    has_pred[dst] = True
    pos = np.empty(A, dtype=np.int64)
    pos[topo] = np.arange(A)
    ek = A + graph.rank[es].astype(np.int64)
    ek[~has_pred[es]] = -1  # epilogue tasks ready at 0 (overlapped parameter gathers) first
    first = np.concatenate([entries, xs, es])
    length = np.concatenate([np.diff(np.append(entries, n_act)), np.ones(xs.size + es.size, dtype=np.int64)])
    k1 = np.concatenate([pos, pos[node[xs]], ek])
    k2 = np.concatenate([np.zeros(A, dtype=np.int8), np.ones(xs.size, dtype=np.int8), np.zeros(es.size, dtype=np.int8)])
    o = np.lexsort((first, k2, k1))
    first, length = first[o], length[o]
    at = np.cumsum(length) - length  # where each segment starts in the order
    return np.repeat(first - at, length) + np.arange(n, dtype=np.int64)

