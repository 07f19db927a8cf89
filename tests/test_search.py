"""Fast coarse lowering (taskgraph/lower_coarse.py), the verified static-order timeline and the
search API (simulator/search/evaluate.py): identical graphs and timelines to the generic path, identical
report numbers to simulate_strategy, sweeps, and the caches behind them."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from simulator.api import simulate_strategy
from simulator.engine.core import simulate
from simulator.engine.dispatch import lower, lower_and_simulate
from simulator.engine.static_order import layout_order, simulate_coarse, static_order_timeline
from simulator.reports.memory import GB, memory_report
from simulator.search.evaluate import evaluate, grid, sweep, vary
from strategies.actions import Action, Schedule
from strategies.errors import ConfigError, ScheduleError, SimulationError
from strategies.schedules import SCHEDULES, get_schedule
from strategies.strategy_file import load_strategy
from taskgraph.lower_coarse import NotCoarse, coarse_layout
from taskgraph.lower_model import lower_model
from taskgraph.work import Bucket, Comm, IterationWork, LayerWork, OpCost, StageWork

EXAMPLES = Path(__file__).resolve().parent.parent / "strategies" / "examples"
GPT3 = EXAMPLES / "gpt3-175b-1024-a100.yaml"

GRAPH_ARRAYS = ("duration", "device", "category", "op", "stage", "chunk", "mb", "rank", "succ_ptr", "succ_idx",
                "mem_task", "mem_bytes", "mem_at_end", "mem_kind")


def coarse_work(S, *, nb=3, bw=1.0, gather=True, ogr=True, opg=True, saved=5.0, p2p=(0.05, 0.06),
                p2p_overlap=True, pairs=None, zero_stages=(), wov=0.0):
    """Coarse records (one operator per stage, as taskgraph.coarse.coarsen makes) with distinct
    per-stage times so that a wrong index would show."""
    stages = []
    for s in range(S):
        z = s in zero_stages
        op = OpCost("chunk", 0.0 if z else 1.0 + 0.1 * s, 0.0 if z else 2.0 + 0.05 * s, bw * (0.7 + 0.01 * s),
                    saved_bytes=saved * (s + 1), grad_bytes=10.0, wgrad_overlap=wov * bw * (0.7 + 0.01 * s))
        bks = tuple(Bucket(0, 0, 1.0, 0.3 + 0.01 * j, 0.2 + 0.001 * j if gather else 0.0) for j in range(nb))
        stages.append(StageWork((LayerWork("chunk", (op,)),), bks, 0.5 + 0.01 * s))
    w = IterationWork(tuple(stages), p2p[0], p2p[1], ogr, opg, represents=4, meta={"model": "toy"})
    kw = {}
    if hasattr(w, "p2p_overlap"):
        kw["p2p_overlap"] = p2p_overlap
    if pairs is not None and hasattr(w, "p2p_pairs"):
        kw["p2p_pairs"] = pairs
    return replace(w, **kw) if kw else w


def assert_same_graph(g1, g2):
    for f in GRAPH_ARRAYS:
        a, b = getattr(g1, f), getattr(g2, f)
        assert a.dtype == b.dtype, f
        assert np.array_equal(a, b), f
    assert g1.devices == g2.devices
    assert g1.op_names == g2.op_names
    assert g1.meta == g2.meta and list(g1.meta) == list(g2.meta)


def assert_same_result(r1, r2):
    for f in ("ready", "start", "end", "order"):
        assert np.array_equal(getattr(r1, f), getattr(r2, f)), f
    assert r1.makespan == r2.makespan


SCHEDULE_CASES = [("gpipe", 4, 6, 1), ("1f1b", 4, 8, 1), ("1f1b", 1, 4, 1), ("interleaved-1f1b", 4, 8, 2),
                  ("interleaved-1f1b", 3, 6, 3), ("zb-h1", 4, 8, 1), ("zb-v", 4, 8, 2), ("dualpipe-v", 4, 10, 2),
                  ("dualpipe", 4, 8, 2), ("looped-bfs", 3, 6, 2)]
WORK_CASES = {
    "plain": {}, "no-wgrad": dict(bw=0.0), "no-buckets": dict(nb=0), "no-gather": dict(gather=False),
    "serial-reduce": dict(ogr=False), "serial-gather": dict(opg=False), "no-memory": dict(saved=0.0),
    "blocking-p2p": dict(p2p_overlap=False), "link-times": dict(pairs={(0, 1): 0.125, (1, 0): 0.25}),
    "wgrad-overlap": dict(wov=0.4),
}


def test_every_schedule_is_covered():
    assert {c[0] for c in SCHEDULE_CASES} == set(SCHEDULES)


@pytest.mark.parametrize("case", SCHEDULE_CASES, ids=lambda c: f"{c[0]}-pp{c[1]}-m{c[2]}-v{c[3]}")
@pytest.mark.parametrize("handoff", ["pair-end", "each"])
def test_lower_coarse_equals_lower_model_and_engine(case, handoff):
    sched = get_schedule(*case)
    for name, kw in WORK_CASES.items():
        w = coarse_work(sched.num_stages, **kw)
        coarse_layout(sched, w, handoff)  # the fast path applies (raises NotCoarse otherwise)
        g1 = lower_model(sched, w, overlap_handoff=handoff)
        g2 = lower(sched, w, overlap_handoff=handoff)
        assert_same_graph(g1, g2)
        r1 = simulate(g1)
        lay = coarse_layout(sched, w, handoff)
        assert static_order_timeline(layout_order(lay), g2.duration) is not None, name  # no fallback
        assert_same_result(r1, simulate_coarse(g2, lay))


@pytest.mark.parametrize("case", [("1f1b", 4, 8, 1), ("zb-v", 4, 8, 2), ("dualpipe-v", 4, 10, 2)])
def test_zero_durations_fall_back_to_the_engine_exactly(case):
    """Zero-time transfers tie ready times against task ids (the engine's pop order is then not
    (ready, id)-sorted): the verification refuses the sweep and the engine's result is returned."""
    sched = get_schedule(*case)
    for w in (coarse_work(sched.num_stages, p2p=(0.0, 0.0)), coarse_work(sched.num_stages, zero_stages=(1,)),
              coarse_work(sched.num_stages, p2p=(0.0, 0.0), p2p_overlap=False, nb=0)):
        g = lower(sched, w)
        assert_same_graph(lower_model(sched, w), g)
        assert_same_result(simulate(g), simulate_coarse(g, coarse_layout(sched, w)))


def test_operator_level_work_falls_back_to_lower_model():
    sched = get_schedule("1f1b", 2, 3)
    tp = Comm("tp-comm", "tp-allreduce", 0.5)
    ops = (OpCost("a", 1.0, 1.0, 2.0, fwd_post=(tp,), saved_bytes=8.0), OpCost("b", 2.0, 3.0, 0.0))
    w = IterationWork((StageWork((LayerWork("L0", ops),)),) * 2, 0.1, 0.1)
    with pytest.raises(NotCoarse):
        coarse_layout(sched, w)
    assert_same_graph(lower_model(sched, w), lower(sched, w))
    _, r = lower_and_simulate(sched, w)
    assert_same_result(simulate(lower_model(sched, w)), r)


def _bad(orders, s2r=(0, 1)):
    return Schedule("hand", 2, 2, 1, s2r, tuple(tuple(Action.parse(a) for a in o.split()) for o in orders))


@pytest.mark.parametrize("orders", [
    ("0F0 0F1 0B0 0B1", "1F0 1B0 1F1"),            # 1B1 missing
    ("0F0 0F1 0B0 0B1 0B1", "1F0 1B0 1F1 1B1"),    # duplicate
    ("0F0 0F1 0B0 0B1 1F0", "1B0 1F1 1B1"),        # action on the wrong rank
])
def test_malformed_schedules_raise_the_generic_errors(orders):
    sched = _bad(orders)
    w = coarse_work(2)
    with pytest.raises(ScheduleError) as generic:
        lower_model(sched, w)
    with pytest.raises(ScheduleError) as fast:
        lower(sched, w)
    assert str(fast.value) == str(generic.value)


def test_deadlocking_schedule_still_raises_simulation_error():
    w = coarse_work(2)
    sched = _bad(("0B0 0F0 0F1 0B1", "1F0 1B0 1F1 1B1"))  # B before its own F: a cycle
    with pytest.raises(NotCoarse):
        coarse_layout(sched, w)
    g = lower(sched, w)
    with pytest.raises(SimulationError):
        simulate(g)


def test_layout_is_cached_on_the_schedule_and_shared_by_equal_shapes():
    sched = get_schedule("interleaved-1f1b", 4, 8, 2)
    assert get_schedule("interleaved-1f1b", 4, 8, 2) is sched  # schedules are memoized
    w1 = coarse_work(8)
    w2 = coarse_work(8, p2p=(0.5, 0.7))  # other times, same structure
    assert coarse_layout(sched, w1) is coarse_layout(sched, w2)
    assert coarse_layout(sched, w1) is not coarse_layout(sched, coarse_work(8, nb=2))
    g = lower(sched, w1)
    g.device[:] = 0  # graphs own their arrays: the cache is not affected
    assert_same_graph(lower_model(sched, w2), lower(sched, w2))


def test_get_schedule_cache_keeps_validation():
    with pytest.raises(ScheduleError):
        get_schedule("1f1b", 0, 4)
    with pytest.raises(ScheduleError):
        get_schedule("no-such", 2, 4)


# --------------------------------------------------------------------------------------------------
# The real-model path


@pytest.fixture(scope="module")
def gpt3():
    return load_strategy(GPT3)


def test_simulate_strategy_coarse_uses_identical_graph_and_timeline(gpt3):
    from taskgraph.costing import build_work
    from taskgraph.plan import resolve
    sim = simulate_strategy(gpt3, fidelity="coarse")
    plan = resolve(gpt3)
    work = build_work(plan, fidelity="coarse")
    g = lower_model(plan.schedule, work, overlap_handoff=gpt3.options.overlap_handoff)
    # the generic path with the same slowed-compute fixed point (simulator/engine/interference.py)
    from simulator.engine.interference import with_interference
    ref, rounds = with_interference(g, simulate)
    assert rounds > 1  # the example's DP buckets and TP collectives run beside compute
    assert_same_graph(g, sim.graph)
    assert_same_result(ref, sim.result)


def _assert_evaluation_matches(ev, sim):
    tr, rep = sim.training, sim.report
    mem = memory_report(sim.plan, sim.graph, sim.result)
    assert ev.iteration_time_s == tr.iteration_time_s == rep.makespan_s
    assert ev.tokens_per_s == tr.tokens_per_s
    assert ev.tokens_per_s_per_gpu == tr.tokens_per_s_per_gpu
    assert ev.mfu == tr.mfu and ev.hfu == tr.hfu
    assert ev.bubble_fraction == rep.bubble_fraction
    assert ev.idle_fraction == rep.idle_fraction
    assert ev.imbalance == rep.imbalance
    assert ev.peak_memory_gb == tuple(s.total / GB for s in mem.per_stage)
    assert ev.fits == mem.fits
    assert ev.num_tasks == sim.graph.num_tasks
    assert ev.microbatches == tr.microbatches and ev.num_gpus == tr.num_gpus


def test_evaluate_matches_simulate_strategy_on_gpt3(gpt3):
    ev = evaluate(gpt3)
    assert ev.timeline == "static-order" and ev.fidelity == "coarse"
    _assert_evaluation_matches(ev, simulate_strategy(gpt3, fidelity="coarse"))
    again = evaluate(gpt3)  # warm caches give the same numbers
    assert again.iteration_time_s == ev.iteration_time_s and again.peak_memory_gb == ev.peak_memory_gb


@pytest.mark.parametrize("name", ["llama3-8b-8-h100.yaml", "mixtral-8x7b-64-h100.yaml",
                                  "custom-model-cluster.yaml", "llama2-70b-lora-8-h100.yaml"])
def test_evaluate_matches_simulate_strategy_on_examples(name):
    s = load_strategy(EXAMPLES / name)
    for fid in ("coarse", "operator"):
        _assert_evaluation_matches(evaluate(s, fid), simulate_strategy(s, fidelity=fid))


def test_evaluate_variants_match(gpt3):
    """Schedules with split backward, V placement, overlapped pairs; serial DP; schedule override."""
    base = vary(gpt3, dict(pp=4, tp=8, global_batch=256))
    for var, kw in ((dict(), dict(schedule="zb-v", vpp=2)), (dict(), dict(schedule="dualpipe-v", vpp=2)),
                    (dict(overlap_handoff="each"), dict(schedule="dualpipe-v", vpp=2)),
                    (dict(overlap_grad_reduce=False, overlap_param_gather=False), dict(schedule="zb-h1", vpp=1)),
                    (dict(recompute="full", zero=0), dict(schedule="1f1b", vpp=1))):
        s = vary(base, var)
        ev = evaluate(s, **kw)
        _assert_evaluation_matches(ev, simulate_strategy(s, fidelity="coarse", **kw))


def test_evaluate_raises_config_errors(gpt3):
    with pytest.raises(ConfigError, match="heads"):
        evaluate(vary(gpt3, dict(tp=7)))


def test_build_work_memo_gives_the_uncached_records(gpt3, monkeypatch):
    from taskgraph import costing
    from taskgraph.plan import resolve
    plans = [resolve(vary(gpt3, v)) for v in (dict(), dict(recompute="full"), dict(pp=16, vpp=1, tp=4))]
    cached = [(costing.build_work(p, fidelity=f), p, f) for p in plans for f in ("coarse", "operator")]
    monkeypatch.setattr(costing, "context_id", lambda plan: None)  # the original, unmemoized path
    for w, p, f in cached:
        fresh = costing.build_work(p, fidelity=f)
        assert fresh == w and list(fresh.meta) == list(w.meta)


# --------------------------------------------------------------------------------------------------
# Sweeps


def test_vary_rules(gpt3):
    s = vary(gpt3, {"tp": 4, "parallel.pp": 16, "micro_batch": 2, "recompute": "full"})
    assert (s.parallel.tp, s.parallel.pp, s.parallel.dp, s.parallel.layers_per_stage) == (4, 16, None, None)
    assert (s.training.micro_batch, s.training.recompute) == (2, "full")
    assert vary(gpt3, {"schedule": "1f1b", "vpp": 1}).schedule == "1f1b"
    with pytest.raises(ConfigError, match="micro_batch"):
        vary(gpt3, {"micro_bach": 2})
    with pytest.raises(ConfigError, match="positive integer"):
        vary(gpt3, {"tp": 0})
    with pytest.raises(ConfigError, match="recompute"):
        vary(gpt3, {"recompute": "some"})
    with pytest.raises(ConfigError, match="true or false"):
        vary(gpt3, {"sp": "yes"})
    assert grid(tp=[1, 2], pp=[3]) == [{"tp": 1, "pp": 3}, {"tp": 2, "pp": 3}]


def test_sweep_sorts_and_rejects(gpt3):
    df = sweep(gpt3, [dict(tp=8, pp=8, vpp=2), dict(tp=8, pp=8, vpp=1), dict(tp=7), dict(tp=4, pp=4, vpp=3),
                      dict(tp=8, pp=16, vpp=1, micro_batch=2)])
    assert len(df) == 5
    ok = df[df["feasible"]]
    assert list(ok["iteration_time_s"]) == sorted(ok["iteration_time_s"])
    assert list(df["feasible"]) == sorted(df["feasible"], reverse=True)  # feasible rows first
    bad = df[df["tp"] == 7].iloc[0]
    assert not bad["feasible"] and "heads" in bad["error"] and np.isnan(bad["iteration_time_s"])
    oom = df[(df["tp"] == 4) & (df["pp"] == 4)].iloc[0]
    assert not oom["feasible"] and oom["error"].startswith("out of memory") and oom["iteration_time_s"] > 0
    assert df.index[df["tp"] == 7][0] == len(df) - 1  # errors after out-of-memory rows
    row = df[(df["tp"] == 8) & (df["pp"] == 8) & (df["vpp"] == 2)].iloc[0]
    ev = evaluate(gpt3)
    assert row["iteration_time_s"] == ev.iteration_time_s and row["peak_memory_gb"] == ev.max_memory_gb
    grid_df = sweep(gpt3, {"vpp": [1, 2], "micro_batch": [1]})
    assert len(grid_df) == 2 and set(grid_df["vpp"]) == {1, 2}
