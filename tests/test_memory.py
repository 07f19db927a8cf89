"""Memory: closed forms (ZeRO model states, 1F1B and interleaved in-flight activations), the memory
curve's invariants, and the report on a real strategy."""
import glob

import numpy as np
import pytest

from simulator.engine.core import simulate
from simulator.reports.memory_timeline import memory_curves
from strategies.schedules import get_schedule
from taskgraph.lower_model import lower_model
from taskgraph.memory import model_state_bytes
from taskgraph.work import IterationWork, LayerWork, OpCost, StageWork

PSI, N = 1e9, 64


@pytest.mark.parametrize("zero,expected", [
    (0, 16 * PSI), (1, 4 * PSI + 12 * PSI / N), (2, 2 * PSI + 14 * PSI / N), (3, 16 * PSI / N)])
def test_zero_model_states_match_rajbhandari_figure_1(zero, expected):
    assert model_state_bytes(PSI, dp=N, zero=zero).total == pytest.approx(expected)


def test_megatron_distributed_optimizer_bytes_per_param():
    # Megatron-LM docs: bf16 params + fp32 grads, distributed optimizer: 6 + 12/d bytes per parameter
    assert model_state_bytes(PSI, dp=8, zero=1, grad_bytes=4).total == pytest.approx((6 + 12 / 8) * PSI)


def _uniform_work(num_stages, saved=1.0, layers=1):
    op = OpCost("op", 1.0, 1.0, 1.0, saved_bytes=saved)
    return IterationWork(tuple(StageWork(tuple(LayerWork(f"L{i}", (op,)) for i in range(layers)))
                               for _ in range(num_stages)))


@pytest.mark.parametrize("p,m", [(2, 2), (4, 3), (4, 8), (8, 16)])
def test_1f1b_stage_i_holds_min_p_minus_i_m(p, m):
    s = get_schedule("1f1b", p, m)
    g = lower_model(s, _uniform_work(p))
    curves = memory_curves(g, simulate(g))
    for i in range(p):
        assert curves[i].peak_bytes == min(p - i, m)


@pytest.mark.parametrize("p,v", [(2, 2), (4, 2), (4, 4), (8, 2)])
def test_interleaved_first_stage_factor_korthikanti(p, v):
    # Korthikanti 2022 Section 4.2.3: interleaving raises stage 0's activation memory by 1 + (p-1)/(p*v)
    m = 2 * p
    g0 = lower_model(get_schedule("1f1b", p, m), _uniform_work(p, layers=v))
    base = memory_curves(g0, simulate(g0))
    g = lower_model(get_schedule("interleaved-1f1b", p, m, v), _uniform_work(p * v, layers=1))
    inter = memory_curves(g, simulate(g))
    assert inter[0].peak_bytes / base[0].peak_bytes == pytest.approx(1 + (p - 1) / (p * v))


EXAMPLES = sorted(glob.glob("strategies/examples/*.yaml"))


def _strategy_examples():
    import yaml
    out = []
    for path in EXAMPLES:
        with open(path) as f:
            d = yaml.safe_load(f)
        if "model" in d and "cluster" in d:  # strategy files (not pipeline or component files)
            out.append(path)
    return out


@pytest.mark.parametrize("path", _strategy_examples())
def test_memory_curve_never_negative_and_returns_to_static(path):
    from simulator.api import simulate_strategy
    from strategies.strategy_file import load_strategy
    sim = simulate_strategy(load_strategy(path), fidelity="coarse")
    for c in memory_curves(sim.graph, sim.result).values():
        assert c.values.min() >= -1e-6 * max(c.peak_bytes, 1.0)
        assert abs(c.values[-1]) <= 1e-6 * max(c.peak_bytes, 1.0)
    g = lower_model(sim.plan.schedule, __import__("taskgraph.costing", fromlist=["build_work"]).build_work(sim.plan))
    for c in memory_curves(g, simulate(g)).values():
        assert c.values.min() >= -1e-6 * max(c.peak_bytes, 1.0)
        assert abs(c.values[-1]) <= 1e-6 * max(c.peak_bytes, 1.0)


def test_memory_report_on_gpt3_example():
    from simulator.api import simulate_strategy
    from simulator.reports.memory import memory_report
    from strategies.strategy_file import load_strategy
    sim = simulate_strategy(load_strategy("strategies/examples/gpt3-175b-1024-a100.yaml"), fidelity="coarse")
    mem = memory_report(sim.plan, sim.graph, sim.result)
    assert mem.fits
    # stage 0 holds the most activations; interleaved warm-up on rank 0 = 2(p-1) + (v-1)p + 1 = 23
    assert len(mem.per_stage[0].alive_microbatches) == 23
    acts = [s.activations for s in mem.per_stage]
    assert acts == sorted(acts, reverse=True)


def test_gathered_buffers_live_between_gather_and_layer_end():
    from taskgraph.graph import MEM_KINDS
    from taskgraph.work import Comm
    gather = Comm("dp-comm", "zero3-param-gather", 0.5, "dp", mem_bytes=100.0)
    ops = (OpCost("a", 1.0, 1.0, 1.0, fwd_pre=(gather,), saved_bytes=1.0), OpCost("b", 1.0, 1.0, 1.0))
    w = IterationWork((StageWork((LayerWork("L0", ops), LayerWork("L1", ops))),))
    g = lower_model(get_schedule("1f1b", 1, 1), w)
    r = simulate(g)
    c = memory_curves(g, r)[0]
    # L0: gather ends 0.5 (+100), a ends 1.5 (+1), b ends 2.5 (L0's buffer freed); L1: gather ends
    # 3.0 (+100), a ends 4.0 (+1) -> peak 102 = one layer's buffer + both activations, never 200
    assert c.peak_bytes == 102.0 and c.peak_time == 4.0
    assert abs(c.values[-1]) < 1e-9
    par = g.mem_kind == MEM_KINDS.index("parameter")
    assert g.mem_bytes[par].sum() == 0.0 and (g.mem_bytes[par] > 0).sum() == 2


def test_zero3_strategy_memory_includes_gathered_layer():
    from simulator.api import simulate_strategy
    from simulator.reports.memory import memory_report
    from strategies.strategy_file import parse_strategy
    s = parse_strategy({"model": "llama3-8b", "cluster": {"preset": "dgx-h100", "nodes": 1},
                        "parallel": {"zero": 3}, "training": {"micro_batch": 1, "global_batch": 16, "seq_len": 4096}})
    sim = simulate_strategy(s)
    g = sim.graph
    c = memory_curves(g, sim.result)[0]
    assert c.values.min() >= -1e-3 and abs(c.values[-1]) < 1e-3
    from taskgraph.graph import MEM_KINDS
    par = g.mem_bytes[(g.mem_kind == MEM_KINDS.index("parameter")) & (g.mem_bytes > 0)]
    # a bf16 gather per layer in forward and in backward, per microbatch (16 / (1 x dp 8) = 2)
    assert par.size == 32 * 2 * 2
    assert np.allclose(par, 2 * sim.plan.model.layer_params(0))
    assert memory_report(sim.plan, sim.graph, sim.result).fits
