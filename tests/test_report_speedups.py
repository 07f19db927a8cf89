"""The vectorized report helpers equal the loops they replaced (kept here as oracles), bit for bit:
``training_report.measure_minus`` (two-pointer interval merge) and ``reports.critical_path``
(step-by-step walk back, a running total per category)."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as hs

from simulator.engine.core import simulate
from simulator.reports.report import critical_path, prev_on_device
from simulator.reports.training import interval_union, measure_minus
from taskgraph.graph import CATEGORIES, Device, TaskGraphBuilder


def measure_minus_loop(a, b):
    total = float((a[:, 1] - a[:, 0]).sum()) if a.size else 0.0
    if not a.size or not b.size:
        return total
    i = j = 0
    ov = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i, 0], b[j, 0]), min(a[i, 1], b[j, 1])
        if hi > lo:
            ov += hi - lo
        if a[i, 1] < b[j, 1]:
            i += 1
        else:
            j += 1
    return total - ov


intervals = hs.lists(hs.tuples(hs.floats(0, 50, allow_nan=False), hs.floats(0, 5, allow_nan=False)), max_size=25)


@settings(max_examples=200, deadline=None)
@given(x=intervals, y=intervals)
def test_measure_minus_equals_two_pointer_merge(x, y):
    def u(iv):
        s = np.array([p[0] for p in iv], dtype=np.float64)
        return interval_union(s, s + np.array([p[1] for p in iv], dtype=np.float64))
    a, b = u(x), u(y)
    assert measure_minus(a, b) == measure_minus_loop(a, b)


def test_measure_minus_exact_small_case():
    a = np.array([[0.0, 4.0], [6.0, 10.0]])
    b = np.array([[1.0, 2.0], [3.0, 7.0], [9.0, 12.0]])
    assert measure_minus(a, b) == 8.0 - (1.0 + 1.0 + 1.0 + 1.0)


def walk_loop(graph, result):
    start, end, ready = result.start, result.end, result.ready
    pred_ptr, pred_idx = graph.predecessors_csr()
    prev = prev_on_device(graph, result)
    t = int(np.flatnonzero(end == end.max())[0])
    path = [t]
    while True:
        if start[t] > ready[t] and prev[t] >= 0:
            t = int(prev[t])
        else:
            preds = pred_idx[pred_ptr[t]:pred_ptr[t + 1]]
            if preds.size == 0 or ready[t] <= 0.0:
                break
            cand = preds[end[preds] == ready[t]]
            if cand.size == 0:
                break
            t = int(cand.min())
        path.append(t)
    return path[::-1]


@settings(max_examples=60, deadline=None)
@given(data=hs.data(), n=hs.integers(1, 40), ndev=hs.integers(1, 4))
def test_critical_path_equals_step_by_step_walk(data, n, ndev):
    b = TaskGraphBuilder()
    devs = [b.add_device(Device(f"d{i}", i, "compute")) for i in range(ndev)]
    for t in range(n):
        dur = data.draw(hs.sampled_from([0.0, 1.0, 2.0, 0.5, 0.1, 0.3]))
        cat = CATEGORIES[data.draw(hs.integers(0, len(CATEGORIES) - 1))]
        b.add_task(dur, devs[data.draw(hs.integers(0, ndev - 1))], cat)
        for p in data.draw(hs.sets(hs.integers(0, t - 1), max_size=3)) if t else ():
            b.add_edge(p, t)
    g = b.build()
    r = simulate(g)
    cp = critical_path(g, r)
    assert list(cp.tasks) == walk_loop(g, r)
    # seconds per category: a running total per category in path order, sorted by time (stable)
    by_cat = {}
    for t in cp.tasks:
        by_cat[CATEGORIES[g.category[t]]] = by_cat.get(CATEGORIES[g.category[t]], 0.0) + float(g.duration[t])
    assert list(cp.by_category.items()) == sorted(by_cat.items(), key=lambda kv: -kv[1])
