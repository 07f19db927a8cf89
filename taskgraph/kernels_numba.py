"""Compiled helpers that lowering needs (optional extra ``fast``: numba), below the engine.

:func:`kahn_order` is :func:`taskgraph.graph.kahn_order` compiled; the lowering
uses it through :func:`taskgraph.compiled.compiled_kernel` when numba is installed and gets the same
order (tests/test_engine_numba.py).
"""
from __future__ import annotations

import numpy as np

try:
    import numba
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("the compiled lowering helpers need numba: install the optional extra, pip install 'execsim[fast]'") \
        from exc


@numba.njit(cache=True)
def _kahn(ptr, succ, indeg):
    n = indeg.shape[0]
    order = np.empty(n, dtype=np.int64)
    head = 0
    tail = 0
    for a in range(n):
        if indeg[a] == 0:
            order[tail] = a
            tail += 1
    while head < tail:
        a = order[head]
        head += 1
        for k in range(ptr[a], ptr[a + 1]):
            v = succ[k]
            indeg[v] -= 1
            if indeg[v] == 0:
                order[tail] = v
                tail += 1
    return order[:tail]


def kahn_order(ptr, succ, indeg) -> np.ndarray:
    """Kahn's algorithm with a FIFO queue seeded in id order -- the order of
    :func:`taskgraph.graph.kahn_order`, element for element (tests/test_engine_numba.py);
    shorter than the task count when the graph has a cycle."""
    return _kahn(np.asarray(ptr, dtype=np.int64), np.asarray(succ, dtype=np.int64),
                 np.array(indeg, dtype=np.int64))
