"""The verified re-sweep (simulator/engine/resweep.py): whenever it returns a timeline, that timeline is
the engine's, array for array; it refuses when a device's order changes; and the interference fixed
point gives the same graph and result with it as with the engine alone."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.engine.core import simulate
from simulator.engine.interference import with_interference
from simulator.engine.resweep import resweep, sweep_in_order
from taskgraph.graph import Device, TaskGraph, TaskGraphBuilder

FIELDS = ("ready", "start", "end", "order")


def _python(g):
    return simulate(g, kernel="python")


def _same(a, b) -> bool:
    return all(np.array_equal(getattr(a, k), getattr(b, k)) for k in FIELDS) and a.makespan == b.makespan


def _graph(n, device, src, dst, duration, num_devices) -> TaskGraph:
    b = TaskGraphBuilder()
    for d in range(num_devices):
        b.add_device(Device(f"d{d}", 0, "compute"))
    for t in range(n):
        b.add_task(float(duration[t]), int(device[t]), "forward")
    for u, v in zip(src, dst):
        b.add_edge(int(u), int(v))
    return b.build()


def _random_dag(seed, n, nd, avg, zeros):
    """(rng, graph, durations, perm): a random DAG whose edges go up in ``perm`` rank."""
    rng = np.random.default_rng(seed)
    m = rng.poisson(avg * n)
    a, b = rng.integers(0, n, m), rng.integers(0, n, m)
    perm = rng.permutation(n)
    keep = a < b
    dur = rng.integers(0, 3, n).astype(float) if zeros else rng.uniform(0.1, 2.0, n)
    return rng, _graph(n, rng.integers(0, nd, n), perm[a[keep]], perm[b[keep]], dur, nd), dur, perm


def test_two_devices_by_hand():
    # d0: a (2 s) then c (1 s); d1: b (3 s) after a; c waits for b: a 0-2, b 2-5, c 5-6.
    # Durations 1, 1, 1 keep every order: a 0-1, b 1-2, c 2-3 (c is ready when b ends)
    g = _graph(3, [0, 1, 0], [0, 1], [1, 2], [2.0, 3.0, 1.0], 2)
    prev = _python(g)
    g.duration[:] = [1.0, 1.0, 1.0]
    res = resweep(g, prev)
    assert res is not None
    assert res.start.tolist() == [0.0, 1.0, 2.0] and res.end.tolist() == [1.0, 2.0, 3.0]
    assert res.ready.tolist() == [0.0, 1.0, 2.0] and res.order.tolist() == [0, 1, 2]
    assert _same(res, _python(g))


def test_refuses_when_a_device_reorders():
    # x (d2) releases b (d1), a (d0) releases c (d1): with x = 0.5 s and a = 1 s, d1 runs b then c;
    # with x = 2 s, c is ready first and the engine runs it first: the old order is refused
    g = _graph(4, [0, 1, 1, 2], [3, 0], [1, 2], [1.0, 1.0, 1.0, 0.5], 3)
    prev = _python(g)
    g.duration[:] = [1.0, 1.0, 1.0, 2.0]
    assert resweep(g, prev) is None
    assert not np.array_equal(_python(g).order, prev.order)


def test_refuses_negative_and_nan_durations():
    g = _graph(2, [0, 0], [0], [1], [1.0, 1.0], 1)
    prev = _python(g)
    for bad in (-1.0, float("nan")):
        g.duration[:] = [1.0, bad]
        assert resweep(g, prev) is None


def test_several_cross_device_predecessors_fold_exactly():
    # c (d0) waits for four tasks on four other devices; only the latest end counts
    n = 6
    g = _graph(n, [0, 1, 2, 3, 4, 0], [0, 1, 2, 3, 4, 0], [5, 5, 5, 5, 5, 1], [0.3, 0.7, 0.2, 0.9, 0.4, 1.0], 5)
    prev = _python(g)
    g.duration[:] = [0.3, 0.8, 0.2, 0.9, 1.4, 1.0]
    res = resweep(g, prev)
    assert res is not None and _same(res, _python(g))
    assert res.start[5] == 1.4


@settings(max_examples=120, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 120), nd=st.integers(1, 5),
       avg=st.sampled_from([0.5, 1.0, 2.5]), zeros=st.booleans(), scale=st.floats(0.5, 1.5))
def test_whenever_it_answers_it_is_the_engine(seed, n, nd, avg, zeros, scale):
    rng, g, dur, _perm = _random_dag(seed, n, nd, avg, zeros)
    prev = _python(g)
    g.duration[:] = dur * np.where(rng.random(n) < 0.3, scale, 1.0)
    res = resweep(g, prev)
    if res is not None:
        assert _same(res, _python(g))
    g.duration[:] = dur  # the same durations: the previous order is the engine's, always accepted
    same = resweep(g, prev)
    assert (same is not None and _same(same, prev)) or zeros  # ties of zero durations may refuse


def test_long_chains_across_devices_match():
    n = 3000
    src = np.arange(n - 3)
    rng = np.random.default_rng(0)
    g = _graph(n, np.arange(n) % 4, src, src + 3, rng.uniform(0.5, 1.0, n), 4)
    prev = _python(g)
    g.duration[:] = g.duration * rng.uniform(0.9, 1.1, n)
    res = resweep(g, prev)
    assert res is not None and _same(res, _python(g))


@pytest.mark.parametrize("example", ["mixtral-8x7b-64-h100", "custom-model-cluster"])
def test_interference_fixed_point_same_with_and_without_resweep(example, monkeypatch):
    # the Python engine, as in a fresh process (with numba already loaded the compiled engine runs
    # every round: it is faster than the sweep)
    monkeypatch.setenv("EXECSIM_KERNEL", "python")
    from pathlib import Path

    from strategies.strategy_file import load_strategy
    from taskgraph.costing import build_work
    from taskgraph.lower_model import lower_model
    from taskgraph.plan import resolve

    root = Path(__file__).resolve().parent.parent
    st_ = load_strategy(root / "strategies" / "examples" / f"{example}.yaml")
    plan = resolve(st_)
    work = build_work(plan, fidelity="operator")
    out, calls = [], []

    def engine(g):
        calls.append(g.num_tasks)
        return _python(g)

    for flag in (False, True):
        g = lower_model(plan.schedule, work, overlap_handoff=st_.options.overlap_handoff)
        calls.clear()
        res, rounds = with_interference(g, engine, resweep=flag)
        out.append((g.duration.copy(), res, rounds, dict(g.meta), len(calls)))
    (d0, r0, k0, m0, e0), (d1, r1, k1, m1, e1) = out
    assert k0 == k1 > 1 and np.array_equal(d0, d1) and _same(r0, r1)
    # with the sweeps the engine never ran: the first round swept the lowering's order_hint, every
    # later round the previous round's order
    assert (e0, e1) == (k0, 0)
    assert m0.get("interference_s") == m1.get("interference_s")


def test_search_evaluation_at_operator_fidelity_matches_simulate(monkeypatch):
    """The search's operator-fidelity evaluation (simulator/search/evaluate.py) sweeps the fixed
    point's rounds like ``simulate_strategy``: the same iteration time, bit for
    bit, on an example whose overlapped collectives slow the compute beside them."""
    monkeypatch.setenv("EXECSIM_KERNEL", "python")
    from pathlib import Path

    from simulator.search.evaluate import evaluate
    from simulator.simulation.strategy import simulate_strategy
    from strategies.strategy_file import load_strategy

    root = Path(__file__).resolve().parent.parent
    st_ = load_strategy(root / "strategies" / "examples" / "mixtral-8x7b-64-h100.yaml")
    ev = evaluate(st_, "operator")
    res = simulate_strategy(st_, fidelity="operator")
    assert res.graph.meta.get("interference_rounds", 1) > 1, "no interference on this example"
    assert ev.iteration_time_s == res.training.iteration_time_s


# --- the first run: a guessed order (sweep_in_order, the lowering's order_hint) ---------------------


def test_guessed_order_by_hand():
    # d0: a (2 s) then c (1 s); d1: b (3 s) after a; c waits for b: a 0-2, b 2-5, c 5-6
    g = _graph(3, [0, 1, 0], [0, 1], [1, 2], [2.0, 3.0, 1.0], 2)
    res = sweep_in_order(g, [0, 1, 2])
    assert res is not None
    assert res.start.tolist() == [0.0, 2.0, 5.0] and res.end.tolist() == [2.0, 5.0, 6.0]
    assert res.ready.tolist() == [0.0, 2.0, 5.0] and res.order.tolist() == [0, 1, 2]
    assert _same(res, _python(g))


def test_wrong_guess_is_refused_and_the_engine_runs():
    # b (d1, 0.5 s) releases y (d0, ready at 0.5); x (d0) is ready at 0: the engine runs x then y on
    # d0. The guess "y before x" is topological but not the engine's order: refused
    g = _graph(3, [0, 0, 1], [2], [1], [1.0, 1.0, 0.5], 2)
    assert sweep_in_order(g, [2, 1, 0]) is None
    assert sweep_in_order(g, [2, 0, 1]) is not None  # the right guess is accepted
    assert _python(g).order.tolist() == [0, 2, 1]
    # with_interference falls back to the engine: same arrays, the engine called once
    calls = []

    def engine(x):
        calls.append(1)
        return _python(x)

    g.order_hint = np.array([2, 1, 0])
    res, _ = with_interference(g, engine, resweep=True)
    assert calls == [1] and _same(res, _python(g))


@pytest.mark.parametrize("pi", [[0, 1], [0, 1, 1], [2, 1, 0], [0, 0, 2], [-1, 0, 1], [0, 1, 3]])
def test_guess_not_a_topological_permutation_is_refused(pi):
    # a -> b -> c on one device: the only topological order is 0, 1, 2
    g = _graph(3, [0, 0, 0], [0, 1], [1, 2], [1.0, 1.0, 1.0], 1)
    assert sweep_in_order(g, pi) is None
    assert _same(sweep_in_order(g, [0, 1, 2]), _python(g))


@settings(max_examples=120, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 120), nd=st.integers(1, 5),
       avg=st.sampled_from([0.5, 1.0, 2.5]), zeros=st.booleans())
def test_whenever_a_guess_is_accepted_it_is_the_engine(seed, n, nd, avg, zeros):
    _rng, g, _dur, perm = _random_dag(seed, n, nd, avg, zeros)
    ref = _python(g)
    guess = np.argsort(perm)  # a topological order (edges go up in perm rank), rarely the engine's
    res = sweep_in_order(g, guess)
    if res is not None:
        assert _same(res, ref)
    res = sweep_in_order(g, ref.order)  # the engine's own pop order: always accepted, same arrays
    assert (res is not None and _same(res, ref)) or zeros  # ties of zero durations may refuse


@pytest.mark.parametrize("example", ["gpt3-175b-1024-a100", "mixtral-8x7b-64-h100", "custom-model-cluster"])
def test_lowering_order_hint_is_the_engines_order(example):
    from pathlib import Path

    from strategies.strategy_file import load_strategy
    from taskgraph.costing import build_work
    from taskgraph.lower_model import lower_model
    from taskgraph.plan import resolve

    root = Path(__file__).resolve().parent.parent
    st_ = load_strategy(root / "strategies" / "examples" / f"{example}.yaml")
    plan = resolve(st_)
    g = lower_model(plan.schedule, build_work(plan, fidelity="operator"),
                    overlap_handoff=st_.options.overlap_handoff)
    assert g.order_hint is not None and sorted(g.order_hint.tolist()) == list(range(g.num_tasks))
    res = sweep_in_order(g, g.order_hint)
    assert res is not None and _same(res, _python(g))


def test_no_guess_for_concurrent_pairs():
    # DualPipe's concurrent halves interleave on a rank's devices: no id-order guess is made
    from strategies.actions import Action, Schedule
    from taskgraph.lower_model import lower_model
    from taskgraph.work import IterationWork, LayerWork, OpCost, StageWork

    rows = ["0F0 0F1 0B0 0B1", "1F0 1B0 1F1 1B1"]
    s = Schedule("1f1b", 2, 2, 1, (0, 1), tuple(tuple(map(Action.parse, r.split())) for r in rows))
    st_ = StageWork((LayerWork("L", (OpCost("a", 1.0, 2.0, 0.0),)),))
    assert lower_model(s, IterationWork((st_, st_), concurrent_pairs=True)).order_hint is None
    assert lower_model(s, IterationWork((st_, st_))).order_hint is not None


def test_fixed_point_plan_kept_while_accepted_and_dropped_when_refused(monkeypatch):
    monkeypatch.setenv("EXECSIM_KERNEL", "python")  # with numba loaded the compiled engine runs instead
    # the interference loop keeps the accepted sweep's plan and re-runs it with the new durations;
    # when the new durations reorder a device the plan is refused, dropped, and the engine runs
    from simulator.engine.interference import resweep_round

    g = _graph(4, [0, 1, 1, 2], [3, 0], [1, 2], [1.0, 1.0, 1.0, 0.5], 3)
    g.order_hint = np.array([0, 3, 1, 2])  # d1 runs b (released by x at 0.5) before c (at 1.0)
    plans = []
    res = resweep_round(g, None, plans)
    assert res is not None and _same(res, _python(g)) and len(plans) == 1
    g.duration[:] = [1.0, 1.0, 1.0, 0.25]  # same device orders: the kept plan answers
    res = resweep_round(g, res, plans)
    assert res is not None and _same(res, _python(g)) and len(plans) == 1
    g.duration[:] = [1.0, 1.0, 1.0, 2.0]  # c is ready first now: refused, the plan dropped
    assert resweep_round(g, res, plans) is None and plans == []


def test_guess_not_topological_refused_by_the_sweep_on_both_cases():
    # plan_for_guess checks only that the guess is a permutation (its docstring: the sweep refuses
    # the rest). Cross-device edge a (d0) -> b (d1), b guessed first: the loop reads a's slot ahead
    g = _graph(2, [0, 1], [0], [1], [1.0, 1.0], 2)
    assert sweep_in_order(g, [1, 0]) is None
    # several cross-device predecessors (b's helpers read ahead): a (d0), c (d2) -> b (d1)
    g = _graph(3, [0, 1, 2], [0, 2], [1, 1], [1.0, 2.0, 0.0], 3)
    assert sweep_in_order(g, [1, 0, 2]) is None and sweep_in_order(g, [0, 1, 2]) is None
    assert _same(sweep_in_order(g, [0, 2, 1]), _python(g))
    # same device, zero durations (every ready time 0): the device and edge checks contradict
    g = _graph(2, [0, 0], [0], [1], [0.0, 0.0], 1)
    assert sweep_in_order(g, [1, 0]) is None
    assert _same(sweep_in_order(g, [0, 1]), _python(g))


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 60), nd=st.integers(1, 4), zeros=st.booleans())
def test_any_permutation_guess_is_refused_or_the_engine(seed, n, nd, zeros):
    # guesses that need not be topological (plan_for_guess does not check): refused, or the engine's
    rng = np.random.default_rng(seed)
    m = rng.poisson(1.5 * n)
    a, b = rng.integers(0, n, m), rng.integers(0, n, m)
    keep = a < b
    dur = rng.integers(0, 3, n).astype(float) if zeros else rng.uniform(0.1, 2.0, n)
    g = _graph(n, rng.integers(0, nd, n), a[keep], b[keep], dur, nd)
    ref = _python(g)
    guess = rng.permutation(n)
    if rng.random() < 0.5:  # half: the engine's order with one adjacent swap (often an edge reversed)
        guess = ref.order.astype(np.int64).copy()
        if n > 1:
            i = int(rng.integers(0, n - 1))
            guess[i], guess[i + 1] = guess[i + 1], guess[i]
    res = sweep_in_order(g, guess)
    assert res is None or _same(res, ref)
    pos = np.empty(n, dtype=np.int64)
    pos[guess] = np.arange(n)
    if bool(np.any(pos[a[keep]] > pos[b[keep]])):  # not a topological order: always refused
        assert res is None


def test_kahn_order_sources_by_index_then_fifo_and_cycles_come_out_short():
    # the one Kahn's algorithm of the lowering (taskgraph/graph.py; order_hint and lower_coarse use
    # it): 3 -> 1, 0 -> 2, 2 -> 1; sources 0 and 3 in index order, then 2 (released by 0), then 1
    from taskgraph.graph import csr_from_edges, kahn_order
    ptr, succ = csr_from_edges(4, np.array([3, 0, 2]), np.array([1, 2, 1]))
    assert kahn_order(4, ptr, succ) == [0, 3, 2, 1]
    # successors in edge order: 0 -> 2 before 0 -> 1
    ptr, succ = csr_from_edges(3, np.array([0, 0]), np.array([2, 1]))
    assert kahn_order(3, ptr, succ) == [0, 2, 1]
    # a cycle 1 -> 2 -> 1 behind source 0: only 0 comes out
    ptr, succ = csr_from_edges(3, np.array([0, 1, 2]), np.array([1, 2, 1]))
    assert kahn_order(3, ptr, succ) == [0]
