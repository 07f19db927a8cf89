"""Leave-one-group-out cross-validation of the fitted constants (benchmarks/crossval.py, issue 26
item 7): the refit machinery on hand-made rows whose errors are known closed forms."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.crossval import Evaluator, argmin_unimodal, cross_validate, patch_strategy, refit
from strategies.fitted import constants, load_fits

SYNTHETIC = """
fits:
  - name: fx
    rows: [a*]
    objective: mean_abs_error
    fallback: {rows: [b1]}
    constants:
      x: {value: 0.60, sets: "gpu:G1:gemm_efficiency_max", search: {low: 0.50, high: 0.90, step: 0.01}}
  - name: fy
    rows: [b2]
    objective: mean_signed_error
    constants:
      y: {value: 0.40, sets: "option:p2p_host_gap_us", search: {low: 0.10, high: 0.90, step: 0.05}}
  - name: fw
    rows: [c1]
    objective: mean_abs_error
    fallback: {transfer: {from: x, scale: 0.5, source: test}}
    constants:
      w: {value: 0.30, sets: "gpu:G1:attention_fwd_efficiency", search: {low: 0.20, high: 0.50, step: 0.01}}
      v: {value: 0.20, sets: "gpu:G1:attention_bwd_efficiency", tied: {to: w, offset: -0.1}}
  - name: fz
    data: microbenchmarks.csv
    rows: [plateau]
    objective: plateau
    constants:
      z: {value: 30, sets: "cluster:host_us_per_collective"}
"""
GROUPS = {"a1": "A", "a2": "A", "b1": "B", "b2": "B", "c1": "C"}


def _error(rid: str, v: dict) -> float:
    """Hand-made rows: a* want x = 0.60, b1 wants x = 0.70, b2 wants y = 0.40, c1 wants w = 0.35."""
    return {"a1": 100 * (v["x"] - 0.60), "a2": 50 * (v["x"] - 0.60), "b1": 100 * (v["x"] - 0.70),
            "b2": 100 * (v["y"] - 0.40), "c1": 100 * (v["w"] - 0.35) + 10 * (v["v"] - 0.25)}[rid]


@pytest.fixture()
def fits(tmp_path):
    p = tmp_path / "fitted.yaml"
    p.write_text(SYNTHETIC)
    return load_fits(p)


def test_refit_on_all_rows_gives_each_rows_optimum(fits):
    declared = {c.name: c.value for c in constants(fits).values()}
    r = refit(fits, GROUPS, declared, _error)
    assert r.values == {"x": 0.6, "y": 0.4, "w": 0.35, "v": 0.25, "z": 30}
    assert r.how["fz"] == "not refitted (fitted on microbenchmarks.csv)"


def test_leaving_out_the_group_that_determines_a_constant_changes_it(fits):
    declared = {c.name: c.value for c in constants(fits).values()}
    r = refit(fits, GROUPS, declared, _error, left_out="A")
    assert r.values["x"] == 0.7 and r.how["fx"] == "fallback rows (1)"  # b1 decides now
    assert (r.values["y"], r.values["z"]) == (0.4, 30)  # fitted elsewhere / not fitted: untouched
    r = refit(fits, GROUPS, declared, _error, left_out="B")
    assert (r.values["x"], r.values["y"]) == (0.6, 0.4) and r.how["fy"] == "no rows left: kept"
    r = refit(fits, GROUPS, declared, _error, left_out="C")  # transfer: w = x * 0.5, v tied to w
    assert (r.values["w"], r.values["v"]) == (0.3, 0.2) and r.how["fw"] == "transfer from x x 0.5"


def test_cross_validate_reports_in_sample_and_left_out(fits):
    full, rows = cross_validate(fits, GROUPS, _error)
    got = {g.group: (g.n, round(g.in_sample_mae, 6), round(g.refit_all_mae, 6), round(g.left_out_mae, 6))
           for g in rows}
    # declared values: a* 0, b1 10 (x 0.60 vs 0.70), b2 0, c1 |100 * -0.05 + 10 * -0.05|; refit on all
    # rows: c1 0 (w 0.35); left out: A with x 0.70 (b1's), C with w = 0.6 * 0.5
    assert got == {"A": (2, 0.0, 0.0, 7.5), "B": (2, 5.0, 5.0, 5.0), "C": (1, 5.5, 0.0, 5.5)}
    assert full.values["w"] == 0.35


def test_evaluator_simulates_only_what_changed():
    from strategies.fitted import load_fits as lf
    consts = constants(lf())
    rows = {"r1": {"id": "r1", "gpu": "A100-SXM-80GB"}, "r2": {"id": "r2", "gpu": "H100-SXM-80GB"}}
    calls = []
    ev = Evaluator(rows, consts, {"r1": 1.0, "r2": 2.0}, lambda row, v: calls.append((row["id"], v)) or -1.0)
    declared = {n: c.value for n, c in consts.items()}
    assert ev("r1", declared) == 1.0 and ev("r2", {**declared, "a100.gemm_efficiency_max": 0.7}) == 2.0
    assert ev("r1", {**declared, "a100.gemm_efficiency_max": 0.7}) == -1.0
    assert ev("r1", {**declared, "a100.gemm_efficiency_max": 0.7}) == -1.0  # cached
    assert calls == [("r1", {"a100.gemm_efficiency_max": 0.7})]


def test_patch_strategy_writes_only_what_reaches_the_row():
    consts = constants()
    declared = {n: c.value for n, c in consts.items()}
    vals = {**declared, "a100.gemm_efficiency_max": 0.7, "h100.gemm_efficiency_max": 0.6, "p2p_host_gap_us": 300}
    d = {"cluster": {"preset": "dgx-a100-80g", "nodes": 1}, "options": {}}
    patch_strategy(d, {"gpu": "A100-SXM-80GB"}, vals, consts)
    assert d == {"cluster": {"preset": "dgx-a100-80g", "nodes": 1,
                             "gpu": {"base": "A100-SXM-80GB", "efficiency": {"gemm_efficiency_max": 0.7}}},
                 "options": {"p2p_host_gap_us": 300}}


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 300), data=st.data())
def test_golden_section_finds_the_minimum_of_a_v(n, data):
    k = data.draw(st.integers(0, n - 1))
    a, b = data.draw(st.floats(0.1, 10)), data.draw(st.floats(0.1, 10))
    assert argmin_unimodal(lambda i: a * (k - i) if i < k else b * (i - k), n) == k


PAIRED = """
fits:
  - name: gap
    rows: [m*-i-*, m*-p-*]
    objective: paired_signed_difference
    pairs: {a: "-i-", b: "-p-"}
    fallback: {rows: [k1], objective: mean_signed_error}
    constants:
      g: {value: 500, sets: "option:p2p_host_gap_us", search: {low: 0, high: 1000, step: 100}}
"""
PAIRED_GROUPS = {"m1-i-1": "Z", "m1-p-1": "Z", "m2-i-1": "Z", "m2-p-1": "Z", "k1": "K"}


def _paired_error(rid: str, v: dict) -> float:
    """Each model m has a compute miss c_m shared by its two rows; the interleaved row (-i-) has 4x
    the exchanges of its partner (-p-); the true gap is 400. k1 alone wants 0."""
    c = {"m1": -1.0, "m2": -6.0}[rid[:2]] if rid != "k1" else 0.0
    n = {"i": 0.04, "p": 0.01}.get(rid.split("-")[1] if "-" in rid else "", 0.0)
    return c + n * (v["g"] - 400) if rid != "k1" else 0.01 * v["g"]


def test_paired_objective_cancels_what_the_pair_shares(tmp_path):
    from benchmarks.crossval import paired_objective
    p = tmp_path / "fitted.yaml"
    p.write_text(PAIRED)
    fits = load_fits(p)
    declared = {"g": 500}
    r = refit(fits, PAIRED_GROUPS, declared, _paired_error)
    # the -p- rows alone (mean signed error) would want g = 400 + 350 = 750 (m1: 500, m2: 1000): the
    # difference sees only the exchanges
    assert r.values["g"] == 400 and r.how["gap"] == "its rows (4)"
    r = refit(fits, PAIRED_GROUPS, declared, _paired_error, left_out="Z")
    assert r.values["g"] == 0 and r.how["gap"] == "fallback rows (1)"   # mean signed error on k1
    assert paired_objective(("-i-", "-p-"), {"m1-i-1": 1.0, "m1-p-1": 3.0}) == 2.0
    with pytest.raises(ValueError, match=r"no row pairs '-i-' / '-p-'"):
        paired_objective(("-i-", "-p-"), {"k1": 1.0})
