"""Engine: hand-computed timelines, deadlock errors, and exact agreement with the plain heap loop."""
import heapq

import numpy as np
import pytest

from simulator.engine.core import SimResult, simulate, simulate_arrays
from strategies.errors import SimulationError
from taskgraph.graph import Device, TaskGraphBuilder, csr_from_edges


def run(durations, devices, edges, num_devices=None):
    n = len(durations)
    src = [u for u, _ in edges]
    dst = [v for _, v in edges]
    ptr, idx = csr_from_edges(n, np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int32))
    nd = num_devices if num_devices is not None else (max(devices) + 1 if devices else 1)
    return simulate_arrays(np.asarray(durations, dtype=np.float64), np.asarray(devices, dtype=np.int32),
                           ptr, idx, nd)


def plain_loop(duration, device, succ_ptr, succ_idx, num_devices):
    """The textbook loop (FlexFlow, Jia et al. 2019, Sec. 5.2): the oracle for the optimized engine."""
    n = len(duration)
    dur, dev = list(map(float, duration)), list(map(int, device))
    ptr, idx = list(map(int, succ_ptr)), list(map(int, succ_idx))
    indeg = [0] * n
    for v in idx:
        indeg[v] += 1
    ready, start, end, free, order = [0.0] * n, [0.0] * n, [0.0] * n, [0.0] * max(num_devices, 1), []
    heap = [(0.0, t) for t in range(n) if indeg[t] == 0]
    while heap:
        r, t = heapq.heappop(heap)
        order.append(t)
        s = free[dev[t]]
        if r > s:  # the original engine's formulation (differs from max() only with NaN)
            s = r
        e = s + dur[t]
        free[dev[t]] = e
        start[t], end[t] = s, e
        for v in idx[ptr[t]:ptr[t + 1]]:
            if e > ready[v]:
                ready[v] = e
            indeg[v] -= 1
            if indeg[v] == 0:
                heapq.heappush(heap, (ready[v], v))
    return ready, start, end, order


def assert_same_as_plain(duration, device, ptr, idx, nd):
    # the Python engine (kernel "auto" would take the compiled loop once numba is imported:
    # tests/test_engine_numba.py compares that one)
    res = simulate_arrays(duration, device, ptr, idx, nd, kernel="python")
    ready, start, end, order = plain_loop(duration, device, ptr, idx, nd)
    assert res.order.tolist() == order
    assert res.start.tolist() == start  # exact, not approximate
    assert res.end.tolist() == end
    assert res.ready.tolist() == ready
    assert res.makespan == (max(end) if end else 0.0)
    return res


# --- hand-computed timelines -----------------------------------------------------------------------

def test_two_tasks_one_device_fifo():
    r = run([2.0, 3.0], [0, 0], [])
    assert r.start.tolist() == [0.0, 2.0]
    assert r.end.tolist() == [2.0, 5.0]
    assert r.ready.tolist() == [0.0, 0.0]
    assert r.order.tolist() == [0, 1]
    assert r.makespan == 5.0
    assert r.order.dtype == np.int32 and r.start.dtype == np.float64


def test_chain_across_devices():
    r = run([1.0, 2.0, 3.0], [0, 1, 0], [(0, 1), (1, 2)])
    assert r.start.tolist() == [0.0, 1.0, 3.0]
    assert r.end.tolist() == [1.0, 3.0, 6.0]
    assert r.ready.tolist() == [0.0, 1.0, 3.0]


def test_diamond():
    # a(0) -> b(1), c(2) -> d(3); a, b on device 0; c, d on device 1
    r = run([1.0, 2.0, 3.0, 1.0], [0, 0, 1, 1], [(0, 1), (0, 2), (1, 3), (2, 3)])
    assert r.ready.tolist() == [0.0, 1.0, 1.0, 4.0]
    assert r.start.tolist() == [0.0, 1.0, 1.0, 4.0]
    assert r.end.tolist() == [1.0, 3.0, 4.0, 5.0]
    assert r.order.tolist() == [0, 1, 2, 3]
    assert r.makespan == 5.0


def test_tie_broken_by_id_not_edge_order():
    # 0 -> 2 is added before 0 -> 1; both ready at 1.0 on device 1: task 1 (lower id) goes first
    r = run([1.0, 2.0, 1.0], [0, 1, 1], [(0, 2), (0, 1)])
    assert r.start.tolist() == [0.0, 1.0, 3.0]
    assert r.end.tolist() == [1.0, 3.0, 4.0]
    assert r.order.tolist() == [0, 1, 2]


def test_sources_tie_by_id():
    r = run([1.0, 1.0, 1.0], [0, 0, 0], [])
    assert r.start.tolist() == [0.0, 1.0, 2.0]


def test_later_id_ready_earlier_goes_first():
    # task 2 (device 1) is ready at 3, task 3 (device 1) at 1: 3 takes the device, 2 waits for it
    r = run([3.0, 1.0, 4.0, 4.0], [0, 2, 1, 1], [(0, 2), (1, 3)])
    assert r.ready.tolist() == [0.0, 0.0, 3.0, 1.0]
    assert r.start.tolist() == [0.0, 0.0, 5.0, 1.0]
    assert r.end.tolist() == [3.0, 1.0, 9.0, 5.0]
    assert r.order.tolist() == [0, 1, 3, 2]


def test_fifo_not_shortest_first():
    # device 0 is busy until 4; task 1 (ready 1, long) and task 2 (ready 2, short) run in ready order
    r = run([4.0, 5.0, 1.0, 1.0, 2.0], [0, 0, 0, 1, 1], [(3, 1), (4, 2)])
    assert r.start.tolist() == [0.0, 4.0, 9.0, 0.0, 1.0]


def test_zero_duration_successor_with_lower_id_jumps_ahead():
    # 1 (zero duration) -> 0; 2 is a source. Heap: (0,1), (0,2); popping 1 pushes (0,0), which is
    # smaller than (0,2): device 0 runs 1, 0, 2.
    r = run([1.0, 0.0, 1.0], [0, 0, 0], [(1, 0)])
    assert r.order.tolist() == [1, 0, 2]
    assert r.start.tolist() == [0.0, 0.0, 1.0]
    assert r.end.tolist() == [1.0, 0.0, 2.0]
    assert r.ready.tolist() == [0.0, 0.0, 0.0]


def test_zero_duration_successor_after_already_popped_task():
    # sources 0, 2, 3, 4; 3 (zero duration, device 0) -> 1. Task 2 is popped (committed to device 1)
    # before 1 becomes ready at the same instant: device 1 keeps the pop order 0, 2, 1.
    r = run([1.0, 1.0, 1.0, 0.0, 2.0], [1, 1, 1, 0, 0], [(3, 1)])
    assert r.order.tolist() == [0, 2, 3, 1, 4]
    assert r.start.tolist() == [0.0, 2.0, 1.0, 0.0, 0.0]
    assert r.end.tolist() == [1.0, 3.0, 2.0, 0.0, 2.0]


def test_all_zero_durations():
    r = run([0.0, 0.0, 0.0], [0, 0, 1], [(0, 1), (1, 2)])
    assert r.start.tolist() == [0.0, 0.0, 0.0]
    assert r.end.tolist() == [0.0, 0.0, 0.0]
    assert r.order.tolist() == [0, 1, 2]
    assert r.makespan == 0.0


def test_duplicate_edges():
    # the lowering can add a program-order edge and a data edge between the same two tasks
    r = run([1.0, 2.0], [0, 0], [(0, 1), (0, 1)])
    assert r.start.tolist() == [0.0, 1.0]
    assert r.ready.tolist() == [0.0, 1.0]


def test_empty_graph():
    r = simulate_arrays(np.zeros(0), np.zeros(0, dtype=np.int32), np.zeros(1, dtype=np.int64),
                        np.zeros(0, dtype=np.int32), 0)
    assert isinstance(r, SimResult)
    assert r.makespan == 0.0
    assert r.start.shape == r.end.shape == r.ready.shape == r.order.shape == (0,)
    assert r.order.dtype == np.int32


def test_plain_python_sequences_accepted():
    r = simulate_arrays([1.0, 2.0], [0, 0], [0, 1, 1], [1], 1)
    assert r.start.tolist() == [0.0, 1.0]
    r = simulate_arrays([1.0], [0], [0, 0], [], 1)
    assert r.end.tolist() == [1.0]


def test_malformed_csr_rejected():
    with pytest.raises(ValueError, match="succ_idx"):
        simulate_arrays(np.ones(2), np.zeros(2, np.int32), np.array([0, 1, 1]), np.array([5]), 1)
    with pytest.raises(ValueError, match="succ_ptr"):
        simulate_arrays(np.ones(2), np.zeros(2, np.int32), np.array([0, 1]), np.array([1]), 1)


# --- deadlocks -------------------------------------------------------------------------------------

def cycle_graph():
    b = TaskGraphBuilder()
    d0 = b.add_device(Device("rank0/compute", 0, "compute"))
    d1 = b.add_device(Device("rank1/compute", 1, "compute"))
    a0 = b.add_task(1.0, d0, "forward", op="F", stage=0, mb=0, rank=0)
    a1 = b.add_task(1.0, d0, "forward", op="F", stage=0, mb=1, rank=0)
    b0 = b.add_task(1.0, d1, "forward", op="F", stage=1, mb=0, rank=1)
    b1 = b.add_task(1.0, d1, "forward", op="F", stage=1, mb=1, rank=1)
    ok = b.add_task(1.0, d0, "other", op="x")  # an independent task still runs
    # program order a0 -> a1 and b0 -> b1, and cross waits a1 -> b0, b1 -> a0: a deadlock
    for u, v in [(a0, a1), (b0, b1), (a1, b0), (b1, a0)]:
        b.add_edge(u, v)
    return b.build(), ok


def test_deadlock_lists_blocked_head_of_each_device():
    g, _ = cycle_graph()
    with pytest.raises(SimulationError) as exc:
        simulate(g)
    msg = str(exc.value)
    assert "4 of 5 tasks can never start" in msg
    assert "device 0: task 0 [forward F stage=0 mb=0 rank=0] on rank0/compute waits for 1 unfinished" in msg
    assert "device 1: task 2 [forward F stage=1 mb=0 rank=1] on rank1/compute waits for 1 unfinished" in msg
    assert "task 1 [" not in msg and "task 3 [" not in msg  # heads only


def test_cycle_without_describe_and_counts_unfinished_predecessors():
    # 0 -> 1 -> 2 -> 1 (cycle 1 <-> 2), 3 -> 2; all on one device. 0 and 3 run; 1 waits for 2, 2 for 1.
    ptr, idx = csr_from_edges(4, np.array([0, 1, 2, 3]), np.array([1, 2, 1, 2]))
    with pytest.raises(SimulationError) as exc:
        simulate_arrays(np.ones(4), np.zeros(4, np.int32), ptr, idx, 1)
    msg = str(exc.value)
    assert "2 of 4 tasks can never start" in msg
    assert "device 0: task 1 waits for 1 unfinished predecessor(s)" in msg


def test_no_sources_at_all():
    ptr, idx = csr_from_edges(2, np.array([0, 1]), np.array([1, 0]))
    with pytest.raises(SimulationError, match="2 of 2 tasks"):
        simulate_arrays(np.ones(2), np.array([0, 1], np.int32), ptr, idx, 2)


def test_gc_state_restored():
    import gc
    assert gc.isenabled()
    run([1.0], [0], [])
    assert gc.isenabled()
    g, _ = cycle_graph()
    with pytest.raises(SimulationError):
        simulate(g)
    assert gc.isenabled()


# --- exact agreement with the plain loop (chain edges, lazy sources, push-pop fast paths) ----------

def random_graph(rng, n, num_devices, avg_succ, durations):
    m = rng.poisson(avg_succ * n)
    a, b = rng.integers(0, n, m), rng.integers(0, n, m)
    perm = rng.permutation(n)  # ids not in topological order
    keep = a < b
    ptr, idx = csr_from_edges(n, perm[a[keep]], perm[b[keep]])
    dur = {"int": lambda: rng.integers(1, 4, n).astype(float),
           "zero": lambda: rng.integers(0, 3, n).astype(float),
           "float": lambda: rng.uniform(0.1, 2.0, n),
           "negative": lambda: rng.integers(-1, 3, n).astype(float)}[durations]()
    return dur, rng.integers(0, num_devices, n).astype(np.int32), ptr, idx


@pytest.mark.parametrize("durations", ["int", "zero", "float", "negative"])
@pytest.mark.parametrize("avg_succ", [0.5, 1.0, 2.5, 12.0])  # 12: >= 4 edges per task, shared ids
def test_matches_plain_loop_on_random_graphs(durations, avg_succ):
    rng = np.random.default_rng(hash((durations, avg_succ)) % 2**32)
    for _ in range(30):
        n = int(rng.integers(1, 200))
        nd = int(rng.integers(1, 6))
        assert_same_as_plain(*random_graph(rng, n, nd, avg_succ, durations), nd)


def test_matches_plain_loop_on_chains():
    # long single-successor chains (the chain-edge fast path) interleaved across devices
    n = 3000
    src = np.arange(n - 3)
    ptr, idx = csr_from_edges(n, src, src + 3)
    rng = np.random.default_rng(0)
    for dur in (rng.integers(1, 3, n).astype(float), rng.uniform(0.5, 1.0, n), np.zeros(n)):
        assert_same_as_plain(dur, (np.arange(n) % 4).astype(np.int32), ptr, idx, 4)


def test_matches_plain_loop_on_pipeline_benchmark_graph():
    from benchmarks.graphs import pipeline_graph, random_dag
    for g in (pipeline_graph(5000, seed=1), random_dag(5000, 8, 2.0, seed=2),
              random_dag(3000, 4, 1.5, seed=3, integer_durations=True)):
        res = assert_same_as_plain(g.duration, g.device, g.succ_ptr, g.succ_idx, g.num_devices)
        sim = simulate(g)
        assert np.array_equal(sim.start, res.start) and np.array_equal(sim.order, res.order)


def test_nan_duration_falls_back_to_plain_semantics():
    dur = np.array([1.0, np.nan, 2.0, 1.0])
    ptr, idx = csr_from_edges(4, np.array([0, 1, 2]), np.array([1, 2, 3]))
    res = simulate_arrays(dur, np.zeros(4, np.int32), ptr, idx, 1)
    ready, start, _end, order = plain_loop(dur, np.zeros(4, np.int32), ptr, idx, 1)
    assert res.order.tolist() == order
    np.testing.assert_array_equal(res.start, np.asarray(start))
    np.testing.assert_array_equal(res.ready, np.asarray(ready))


def test_deterministic():
    rng = np.random.default_rng(5)
    args = random_graph(rng, 500, 3, 2.0, "int")
    a, b = simulate_arrays(*args, 3), simulate_arrays(*args, 3)
    for x, y in zip((a.ready, a.start, a.end, a.order), (b.ready, b.start, b.end, b.order)):
        assert np.array_equal(x, y)


# --- benchmark graph generators and the benchmark script (smoke) -----------------------------------

def test_one_f_one_b_order():
    from benchmarks.graphs import one_f_one_b_order
    assert one_f_one_b_order(2, 3, 0) == [(0, 0), (0, 1), (1, 0), (0, 2), (1, 1), (1, 2)]
    assert one_f_one_b_order(2, 3, 1) == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)]


def test_pipeline_graph_structure():
    from benchmarks.graphs import pipeline_graph
    g = pipeline_graph(20_000, seed=3, ranks=4, ops=16, tp_every=4)
    P, M = 4, g.meta["microbatches"]
    assert abs(g.num_tasks - 20_000) / 20_000 < 0.1
    assert g.num_tasks == 2 * P * M * 20 + 2 * (P - 1) * M
    assert g.num_devices == 2 * P + 2 * (P - 1)
    out = np.diff(g.succ_ptr)
    assert out.max() <= 3 and np.mean(out) < 1.1  # mostly operator chains
    res = simulate(g)  # a DAG: everything runs
    assert np.all(res.end > 0)
    # per rank, compute blocks run in 1F1B order: forward of mb 0 on the last stage before its backward
    last = P - 1
    fwd = (g.rank == last) & (g.mb == 0) & (g.category == 0)
    bwd = (g.rank == last) & (g.mb == 0) & (g.category == 1)
    assert res.end[fwd].max() <= res.start[bwd].min()


def test_random_dag_generator():
    from benchmarks.graphs import random_dag, strategy_graphs
    g = random_dag(2000, devices=5, avg_succ=2.0, seed=4, integer_durations=True)
    src = np.repeat(np.arange(g.num_tasks), np.diff(g.succ_ptr))
    assert np.all(g.succ_idx > src)  # edges go to higher ids: a DAG
    pairs = src * g.num_tasks + g.succ_idx
    assert np.unique(pairs).size == pairs.size  # no duplicate edges
    assert set(np.unique(g.duration).tolist()) <= {1.0, 2.0, 3.0}
    assert g.device.max() < 5
    assert [k for k, _ in strategy_graphs()] == ["gpt3"]  # real lowered graph, on request


def test_benchmark_script_smoke(tmp_path, capsys):
    import json

    from benchmarks.engine import main
    out = tmp_path / "bench.json"
    assert main(["--sizes", "500", "--repeat", "1", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert {r["kind"] for r in data["results"]} == {"pipeline", "random", "fanout", "zero"}
    assert all(r["identical_to_reference"] for r in data["results"])
    assert "python" in data["machine"] and "cpu_count" in data["machine"]
    assert "tasks/s" in capsys.readouterr().out


def test_regression_start_before_ready_case():
    # Found by the delta-mode fuzzer against an intermediate engine edit: task 2 started before it was ready.
    import numpy as np

    from simulator.engine.core import simulate_arrays
    dur = np.array([1.02515665, 0.69150387, 1.1015235, 1.15739764, 1.0167961])
    dev = np.array([0, 1, 1, 0, 1], dtype=np.int32)
    ptr = np.array([0, 3, 3, 3, 4, 7], dtype=np.int64)
    idx = np.array([1, 3, 2, 2, 1, 3, 2], dtype=np.int32)
    r = simulate_arrays(dur, dev, ptr, idx, 2)
    assert np.all(r.start >= r.ready)
    src = np.repeat(np.arange(5), np.diff(ptr))
    assert np.all(r.start[idx] >= r.end[src])


def test_both_python_loops_are_exercised_and_exact():
    # few chain edges -> the list loop (_run_general); mostly chains -> the chain-edge loop (_run)
    from benchmarks.graphs import GENERATORS
    from simulator.engine.core import as_index_array, successor_plan

    for kind, general in (("random", True), ("fanout", True), ("zero", True), ("pipeline", False)):
        g = GENERATORS[kind](2000, 3)
        plan = successor_plan(np.asarray(g.duration, dtype=np.float64), as_index_array(g.succ_ptr),
                     as_index_array(g.succ_idx))
        assert plan.general is general, kind
        assert_same_as_plain(g.duration, g.device, g.succ_ptr, g.succ_idx, g.num_devices)
