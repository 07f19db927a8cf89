"""Closed-form makespans of pipeline schedules (uniform costs, zero communication).

GPipe / 1F1B: (m + p - 1)(tf + tb); interleaved with per-chunk costs tf/v, tb/v:
(v*m + p - 1)(tf + tb)/v, i.e. bubble fraction (p-1)/(v*m) (Narayanan et al. 2021, Section 2.2).
Zero bubble (Qi et al. 2024, Section 2): F = I = W = 1, B = 2: zb-h1 with v chunks 3vm + p - 1;
zb-v 6m + p - 1 (m >= 2p - 1); dualpipe-v 6m + 2(p-1) with pair-end hand-off, 6m + p - 1 with each
half handing over as soon as it finishes (m >= 2p).
"""
import pytest

from simulator.engine.core import simulate
from simulator.reports.report import report
from strategies.schedules import get_schedule
from taskgraph.lower_pipeline import StageCosts, lower_uniform
from tests.helpers import assert_timeline_invariants

TF, TB = 1.0, 2.0
CASES = [(p, m) for p in (2, 4, 8) for m in range(p, 4 * p + 1)]


def run(name, p, m, v=1, tf=TF, tb=TB, ti=None, tw=None, handoff="pair-end"):
    s = get_schedule(name, p, m, v)
    g = lower_uniform(s, StageCosts.uniform(s.num_stages, tf, tb, ti=ti, tw=tw), overlap_handoff=handoff)
    r = simulate(g)
    assert_timeline_invariants(g, r)
    return g, r


@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
@pytest.mark.parametrize("p,m", CASES)
def test_gpipe_and_1f1b(name, p, m):
    g, r = run(name, p, m)
    assert r.makespan == (m + p - 1) * (TF + TB)
    assert report(g, r).bubble_fraction == pytest.approx((p - 1) / m)


@pytest.mark.parametrize("v", [1, 2, 4])
@pytest.mark.parametrize("p,m", [(p, m) for p, m in CASES if m % p == 0])
def test_interleaved(p, m, v):
    g, r = run("interleaved-1f1b", p, m, v, tf=TF / v, tb=TB / v)
    assert r.makespan == pytest.approx((v * m + p - 1) * (TF + TB) / v, rel=1e-12)
    assert report(g, r).bubble_fraction == pytest.approx((p - 1) / (v * m))


@pytest.mark.parametrize("v", [1, 2, 3])
@pytest.mark.parametrize("p,m", [(2, 2), (2, 6), (4, 4), (4, 10), (4, 16), (8, 8), (8, 24)])
def test_zb_h1(p, m, v):
    _, r = run("zb-h1", p, m, v, tf=1.0, tb=2.0, ti=1.0, tw=1.0)
    assert r.makespan == 3 * v * m + (p - 1)


@pytest.mark.parametrize("p,m", [(2, 3), (2, 8), (4, 7), (4, 12), (8, 15), (8, 20)])
def test_zb_v(p, m):
    _, r = run("zb-v", p, m, 2, tf=1.0, tb=2.0, ti=1.0, tw=1.0)
    assert r.makespan == 6 * m + (p - 1)


@pytest.mark.parametrize("p,m", [(2, 4), (2, 9), (4, 8), (4, 13), (8, 16)])
def test_dualpipe_v_both_handoffs(p, m):
    _, r = run("dualpipe-v", p, m, 2, tf=1.0, tb=2.0, ti=1.0, tw=1.0, handoff="pair-end")
    assert r.makespan == 6 * m + 2 * (p - 1)
    _, r = run("dualpipe-v", p, m, 2, tf=1.0, tb=2.0, ti=1.0, tw=1.0, handoff="each")
    assert r.makespan == 6 * m + (p - 1)
