"""Every example in strategies/examples/ simulates and satisfies the timeline invariants.

Three kinds of YAML live there: pipeline descriptions (a ``pipeline:`` section), strategy files
(model + cluster + parallel ...) and the model / topology YAML files a strategy references by a
relative path. Each strategy file is simulated once (module cache) and checked for: iteration time
> 0, tasks ending at or after their start, no overlap on a device, no task before its
predecessors, 0 < MFU < 1, memory events summing to zero on every device, and peak memory within
the GPU's capacity (the examples are meant to be runnable layouts).
"""
from __future__ import annotations

import time
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from simulator.api import simulate_pipeline, simulate_strategy
from strategies.config import load_mapping
from strategies.pipeline_file import load_pipeline
from strategies.strategy_file import is_strategy, load_strategy
from tests.helpers import assert_timeline_invariants

EXAMPLES = Path(__file__).resolve().parent.parent / "strategies" / "examples"
FILES = sorted(EXAMPLES.glob("*.yaml"))

#: Strategy files simulated at coarse fidelity (a task per chunk, microbatch and pass) to keep the
#: suite fast; everything else runs at operator fidelity.
COARSE = {"gpt3-175b-1024-a100.yaml"}


def _kind(path: Path) -> str:
    data = load_mapping(path)
    if "pipeline" in data:
        return "pipeline"
    if is_strategy(data):
        return "strategy"
    return "component"


PIPELINES = [p for p in FILES if _kind(p) == "pipeline"]
STRATEGIES = [p for p in FILES if _kind(p) == "strategy"]
COMPONENTS = [p for p in FILES if _kind(p) == "component"]


@cache
def _simulate(path: Path):
    t0 = time.perf_counter()
    if _kind(path) == "pipeline":
        sim = simulate_pipeline(load_pipeline(path))
    else:
        sim = simulate_strategy(load_strategy(path), fidelity="coarse" if path.name in COARSE else None)
    return sim, time.perf_counter() - t0


def _ids(paths):
    return [p.name for p in paths]


def test_examples_present():
    names = {p.name for p in FILES}
    for want in ("llama3-70b-64-h100.yaml", "llama3-8b-8-h100.yaml", "korthikanti-175b.yaml",
                 "mixtral-8x7b-64-h100.yaml", "custom-model.yaml", "custom-cluster.yaml",
                 "custom-model-cluster.yaml"):
        assert want in names
    readme = (EXAMPLES / "README.md").read_text()
    for p in FILES:
        assert p.name in readme, f"{p.name} has no line in strategies/examples/README.md"


@pytest.mark.parametrize("path", PIPELINES + STRATEGIES, ids=_ids(PIPELINES + STRATEGIES))
def test_example_timeline(path: Path):
    sim, _ = _simulate(path)
    g, r = sim.graph, sim.result
    assert g.num_tasks > 0
    assert sim.report.makespan_s > 0 and r.makespan > 0
    assert np.all(g.duration >= 0)
    assert np.all(r.end >= r.start), "a task ends before it starts"
    assert np.all(r.start >= 0)
    assert np.isclose(r.end.max(), r.makespan)
    assert_timeline_invariants(g, r)


@pytest.mark.parametrize("path", PIPELINES + STRATEGIES, ids=_ids(PIPELINES + STRATEGIES))
def test_example_trace_well_formed(path: Path):
    """The example's Chrome trace (operator and stage level) parses; no two complete events on one
    thread overlap, nesting is proper, every thread is named (issue 15). Operator level of the
    examples with > 100k tasks: their first and last rank only (every thread of those ranks), to
    keep the suite fast; ``python -m benchmarks.trace`` checks the whole GPT-3 175B trace."""
    import json

    from simulator.outputs.trace import trace_text
    from tests.test_trace import check_trace
    sim, _ = _simulate(path)
    g = sim.graph
    ranks = sorted({d.rank for d in g.devices if d.rank >= 0})
    for level in ("operator", "stage"):
        sub = (ranks[0], ranks[-1]) if level == "operator" and g.num_tasks > 100_000 else None
        trace = json.loads(trace_text(g, sim.result, level=level, ranks=sub))
        check_trace(trace)
        xs = sum(e["ph"] == "X" for e in trace["traceEvents"])
        kept = g.num_tasks if sub is None else int(np.isin(g.device, [i for i, d in enumerate(g.devices)
                                                                        if d.rank in sub]).sum())
        assert (xs == kept) if level == "operator" else (0 < xs <= g.num_tasks)


@pytest.mark.parametrize("path", STRATEGIES, ids=_ids(STRATEGIES))
def test_example_strategy_metrics(path: Path):
    sim, _ = _simulate(path)
    tr = sim.training
    assert tr.iteration_time_s > 0
    assert 0 < tr.mfu < 1, f"MFU {tr.mfu}"
    assert tr.mfu <= tr.hfu + 1e-12 < 1
    assert tr.tokens_per_s > 0


@pytest.mark.parametrize("path", PIPELINES + STRATEGIES, ids=_ids(PIPELINES + STRATEGIES))
def test_example_memory_balances(path: Path):
    """Every allocation is freed by the end of the iteration, on every GPU (a buffer may be allocated by
    a task on one stream and freed by one on another stream of the same GPU: ZeRO-3 gathers on the dp
    stream, freed at the end of the layer's pass on the compute stream)."""
    g = _simulate(path)[0].graph
    if g.mem_bytes.size == 0:
        return
    scale = max(1.0, float(np.abs(g.mem_bytes).sum()))
    assert abs(float(g.mem_bytes.sum())) <= 1e-9 * scale
    rank_of_device = np.array([d.rank for d in g.devices])
    per_rank = np.bincount(rank_of_device[g.device[g.mem_task]], weights=g.mem_bytes)
    assert np.all(np.abs(per_rank) <= 1e-9 * scale)


@pytest.mark.parametrize("path", STRATEGIES, ids=_ids(STRATEGIES))
def test_example_fits_in_memory(path: Path):
    from simulator.reports.memory import memory_report
    sim, _ = _simulate(path)
    mem = memory_report(sim.plan, sim.graph, sim.result)
    assert mem.fits, f"{path.name}: an example layout that does not fit in GPU memory"


def test_korthikanti_175b_layout():
    """The Korthikanti 2022 run: 64 A100s, tp 8, pp 8, 3 chunks of 4 layers per rank, dp 1, 64 microbatches."""
    sim, _ = _simulate(EXAMPLES / "korthikanti-175b.yaml")
    p = sim.plan
    assert (p.num_gpus, p.sizes.tp, p.sizes.pp, p.sizes.dp, p.vpp, p.microbatches) == (64, 8, 8, 1, 3, 64)
    assert p.layers_per_stage == (4,) * 24
    assert p.sp and p.strategy.training.recompute == "selective"
    assert p.strategy.options.flash_attention is False
    # Korthikanti 2022 Table 5: 13.75 s per iteration with selective recompute + sp; stay in range.
    assert 7.0 < sim.training.iteration_time_s < 28.0


def test_custom_model_and_cluster_are_used():
    sim, _ = _simulate(EXAMPLES / "custom-model-cluster.yaml")
    p = sim.plan
    assert p.model.name == "llama3.2-3b" and p.model.tied_embeddings and p.model.kv_heads == 8
    assert p.cluster.name == "hgx-h100-roce-4n" and p.cluster.num_gpus == 32
    assert p.cluster.network_topology == "fat-tree"
    assert p.layers_per_stage == (15, 13)


@pytest.mark.parametrize("path", COMPONENTS, ids=_ids(COMPONENTS))
def test_component_files_load_and_are_referenced(path: Path):
    """Model / topology YAML files load on their own and some strategy example uses them."""
    from taskgraph.model import load_model_yaml
    from topologies.cluster import load_cluster_yaml
    users = [s for s in STRATEGIES if path.name in (str(load_mapping(s).get("model")),
                                                     str(load_mapping(s).get("cluster")))]
    assert users, f"{path.name} is referenced by no strategy example"
    data = load_mapping(users[0])
    if data.get("model") == path.name:
        assert load_model_yaml(path).param_count() > 0
    else:
        assert load_cluster_yaml(path).num_gpus > 0


@pytest.mark.parametrize("path", PIPELINES + STRATEGIES, ids=_ids(PIPELINES + STRATEGIES))
def test_example_states_its_interval(path: Path):
    """The interval keys of ``simulate --json`` (built by ``simulation_fields``, issue 39) exist for
    every example; a strategy's hold its point predictions."""
    from simulator.reports.interval_fields import TRAINING_INTERVALS, simulation_fields
    from simulator.reports.memory import memory_report
    sim, _ = _simulate(path)
    strategy = _kind(path) == "strategy"
    mem = memory_report(sim.plan, sim.graph, sim.result) if strategy else None
    d = simulation_fields(sim, mem, 1000.0 if strategy else None, 0.8)
    assert set(TRAINING_INTERVALS) | {"interval_level", "cost_usd_interval", "interval"} <= set(d)
    assert d["interval_level"] == 0.8
    if not strategy:
        assert d["iteration_time_interval_s"] is None
        return
    for key, (name, _kind_) in TRAINING_INTERVALS.items():
        x = getattr(sim.training, name)
        assert (d[key] is None) == (x is None), key
        if x is not None:
            assert d[key][0] <= x <= d[key][1], key
    assert d["cost_usd_interval"][0] <= 1000.0 <= d["cost_usd_interval"][1]
    assert d["memory_interval"]["verdict"] in ("fits", "too close to call", "does not fit")
