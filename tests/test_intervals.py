"""Prediction intervals (simulator/reports/intervals.py and interval_fields.py, issue 39): the split-conformal quantiles on
tiny hand-computed cases, the interval's invariants (it holds the prediction, widens with the
distance to the nearest measured group and with the level), the shipped calibration rows against
the envelope and docs/validation.md, and every surface that shows a prediction (simulate text and
JSON, compare, search, HTML, the API)."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.cli.main import main
from simulator.reports.envelope import CalibrationGroup, RunFeatures, load_envelope
from simulator.reports.interval_fields import overlaps, ranked_intervals
from simulator.reports.intervals import (
    FIDELITY_WIDENING,
    Calibration,
    CalibrationRow,
    Interval,
    bundled,
    check_level,
    conformal_bounds,
    coverage,
    coverage_table,
    interval_for,
    memory_margin,
)
from strategies.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent
L8B = "strategies/examples/llama3-8b-8-h100.yaml"
PIPE = "strategies/examples/pipeline-1f1b.yaml"
A = CalibrationGroup("A", "megatron", ("A100-SXM-80GB",), ("ampere",), ("dense",), ("bf16",), 8, 64, 3, 2.0, 3.0)
B = CalibrationGroup("B", "fsdp", ("H100-SXM-80GB",), ("hopper",), ("dense",), ("bf16",), 8, 8, 2, 4.0, 5.0)


def feat(**kw) -> RunFeatures:
    d = dict(stack="megatron", gpu="A100-SXM-80GB", architecture="ampere", family="dense", precision="bf16", gpus=8)
    return RunFeatures(**{**d, **kw})


def row(rid, group, source, err, f=None, fidelity="operator", mem=None) -> CalibrationRow:
    return CalibrationRow(rid, source, group, f or feat(), fidelity, err, err, mem)


def tiny() -> Calibration:
    """Three rows of group A (source SA), two of B (SB). A row's distance to the nearest group of the
    other source: A rows to B = stack 1 + GPU 1 = 2; B rows to A = 2 as well."""
    fb = feat(stack="fsdp", gpu="H100-SXM-80GB", architecture="hopper")
    rows = [row("a1", "A", "SA", -3.0), row("a2", "A", "SA", 0.0), row("a3", "A", "SA", 6.0),
            row("b1", "B", "SB", -9.0, fb, mem=-10.0), row("b2", "B", "SB", 12.0, fb, mem=-5.0)]
    return Calibration.build(rows, (A, B))


@pytest.mark.parametrize("n, level, want", [
    (9, 0.8, (1, 9)),     # ceil(10 * 0.9) = 9, floor(10 * 0.1) = 1
    (19, 0.8, (2, 18)),   # floor(2) = 2, ceil(18) = 18
    (3, 0.5, (1, 3)),     # floor(4 * 0.25) = 1, ceil(4 * 0.75) = 3
    (3, 0.99, (1, 3)),    # beyond what 3 rows resolve: the extremes
    (99, 0.5, (25, 75)),
])
def test_conformal_bounds_order_statistics(n, level, want):
    assert conformal_bounds(tuple(range(1, n + 1)), level) == want


def test_scores_are_residuals_over_one_plus_distance():
    cal = tiny()
    # a3: ln(1.06) / (1 + 2); b1: ln(0.91) / 3
    assert cal.scores["a3"] == pytest.approx(math.log(1.06) / 3)
    assert cal.scores["b1"] == pytest.approx(math.log(0.91) / 3)
    assert cal.scores["a2"] == 0.0


def test_interval_inside_hand_computed():
    cal = tiny()
    # 5 rows < MIN_GROUP_ROWS: every row's scores; level 0.5 on n = 5: floor(1.5) = 1st, ceil(4.5) = 5th
    iv = interval_for(feat(), "operator", 0.5, cal)
    s = sorted(cal.scores.values())
    assert iv.distance == 0.0 and iv.widening == 1.0 and iv.note == "" and iv.rows == 5
    assert iv.low_factor == pytest.approx(math.exp(-s[4])) and iv.high_factor == pytest.approx(math.exp(-s[0]))
    assert iv.basis == "all 5 rows (nearest group A has 3)"


def test_outside_the_envelope_is_wider_and_says_why():
    cal = tiny()
    inside = interval_for(feat(), "operator", 0.8, cal)
    outside = interval_for(feat(family="moe", gpus=4096), "operator", 0.8, cal)  # MoE, 64x beyond A's range
    assert outside.distance == pytest.approx(1 + 2.0) and outside.widening == pytest.approx(4.0)
    assert outside.half_width_pct() > inside.half_width_pct()
    assert math.log(outside.high_factor) == pytest.approx(4 * math.log(inside.high_factor))
    assert outside.note.startswith("outside the calibrated envelope: no measured run with MoE at 4096 GPUs")
    assert "widened x4.00 for envelope distance 3.00" in outside.summary()


def test_other_fidelity_is_widened_by_the_agreement_bound():
    cal = tiny()
    op, co = interval_for(feat(), "operator", 0.8, cal), interval_for(feat(), "coarse", 0.8, cal)
    assert math.log(co.high_factor) - math.log(op.high_factor) == pytest.approx(FIDELITY_WIDENING)
    assert math.log(op.low_factor) - math.log(co.low_factor) == pytest.approx(FIDELITY_WIDENING)


def test_bundled_inside_is_narrower_than_outside():
    """A run inside the envelope (the GPT-3 example's features, distance 0) against the same run on
    an MoE model at 8x the GPUs."""
    inside = feat(precision="fp16", gpus=1024)
    outside = feat(precision="fp16", gpus=8 * 3072, family="moe")
    a, b = interval_for(inside), interval_for(outside)
    assert a.distance == 0.0 and a.note == "" and b.distance > 1 and b.note.startswith("outside")
    assert a.half_width_pct() < b.half_width_pct()


FEATURES = st.builds(RunFeatures, st.sampled_from(["megatron", "nemo", "fsdp", "torchtitan", "deepspeed-zero3"]),
                     st.sampled_from(["A100-SXM-80GB", "H100-SXM-80GB", "H800-SXM-80GB", "B200-SXM-180GB"]),
                     st.sampled_from(["ampere", "hopper", "blackwell"]), st.sampled_from(["dense", "moe"]),
                     st.sampled_from(["bf16", "fp16", "fp8"]), st.integers(1, 10**5))
LEVELS = st.floats(0.01, 0.99)


@given(FEATURES, st.sampled_from(["operator", "coarse"]), LEVELS, LEVELS)
@settings(max_examples=200, deadline=None)
def test_interval_holds_the_prediction_and_widens_with_the_level(f, fidelity, l1, l2):
    lo, hi = sorted((l1, l2))
    a, b = interval_for(f, fidelity, lo), interval_for(f, fidelity, hi)
    for iv in (a, b):
        assert 0 < iv.low_factor <= 1.0 <= iv.high_factor and math.isfinite(iv.high_factor)
        t0, t1 = iv.time(7.0)
        assert t0 <= 7.0 <= t1
        r0, r1 = iv.rate(3.0)
        assert r0 <= 3.0 <= r1
    assert b.low_factor <= a.low_factor and a.high_factor <= b.high_factor


@given(st.lists(st.floats(-60, 60), min_size=1, max_size=30), LEVELS, LEVELS)
def test_conformal_bounds_monotone_in_level(errs, l1, l2):
    s = tuple(sorted(errs))
    lo, hi = sorted((l1, l2))
    (a0, a1), (b0, b1) = conformal_bounds(s, lo), conformal_bounds(s, hi)
    assert b0 <= a0 <= a1 <= b1


@pytest.mark.parametrize("bad", ["0", "1", "1.5", "-0.2", "nan", "inf", "abc", ""])
def test_level_is_checked(bad):
    with pytest.raises(ConfigError, match="--interval-level"):
        check_level(bad)
    assert check_level("0.9") == 0.9


def test_memory_margin_hand_computed():
    cal = tiny()
    gib = 2**30
    # errors -10 and -5 %: level 0.5 on n = 2 -> floor(0.75) -> 1st, ceil(2.25) -> 2nd (clipped): -10, -5
    # the upper end of the real peak: 1 GiB reserve + 63 / 0.9; the lower: the prediction (e_hi < 0 -> 0)
    m = memory_margin(64 * gib, 80 * gib, 0.5, 1 * gib, cal)
    assert m["peak_interval_gb"] == pytest.approx([64.0, 1 + 63 / 0.9]) and m["verdict"] == "fits"
    assert memory_margin(75 * gib, 80 * gib, 0.5, 1 * gib, cal)["verdict"] == "too close to call"
    assert memory_margin(81 * gib, 80 * gib, 0.5, 1 * gib, cal)["verdict"] == "does not fit"
    assert "on 2 measured peaks" in m["summary"]


def test_ranked_intervals_mark_overlaps():
    cal_rows = [{"rank": 1, "status": "ok", "gpus": 8, "zero": 1, "iteration_time_s": 10.0, "days_to_train": 10.0},
                {"rank": 2, "status": "ok", "gpus": 8, "zero": 1, "iteration_time_s": 10.1, "days_to_train": 10.1},
                {"rank": 3, "status": "ok", "gpus": 8, "zero": 1, "iteration_time_s": 30.0, "days_to_train": 30.0},
                {"rank": 4, "status": "oom", "gpus": 8, "zero": 1, "iteration_time_s": 5.0, "days_to_train": 5.0}]
    out = ranked_intervals(cal_rows, feat(precision="fp16", gpus=1024), "time", "coarse")
    assert [o["overlaps_ranks"] for o in out] == [[], [1], [], []]
    assert out[3]["objective_interval"] is None
    assert overlaps(out[0]["objective_interval"], out[1]["objective_interval"])


# ----------------------------------------------------------------------------- the shipped rows
def test_shipped_rows_match_the_envelope():
    """intervals.json and envelope.yaml come from one run (python -m benchmarks.validate
    --write-intervals): each envelope group's rows and mean |error| are those of the rows."""
    cal = bundled()
    assert len(cal.rows) >= 90 and len({r.id for r in cal.rows}) == len(cal.rows)
    for g in load_envelope():
        errs = [abs(r.error_pct) for r in cal.rows if r.envelope_group == g.name]
        assert len(errs) == g.rows, g.name
        # the envelope prints one decimal: the rows' mean lies within half a unit of it (rounding it
        # again could land on the other side of a .x5 boundary)
        assert sum(errs) / len(errs) == pytest.approx(g.mean_abs_error_pct, abs=0.05 + 1e-6), g.name
    assert {r.envelope_group for r in cal.rows} == {g.name for g in load_envelope()}


def test_interval_rows_from_validation_results():
    from benchmarks.validate import Result, interval_rows, load_rows
    rows = {r["id"]: r for r in load_rows()}
    res = [Result("NEMO-GPT3-175B-128", "NVIDIA NeMo", "tokens_per_sec_per_gpu", error_pct=-3.0, fidelity="operator"),
           Result("K22-22B-layer-base", "Korthikanti 2022 Table 4 (one layer)", "layer_fwd_bwd_time", error_pct=1.0),
           Result("NEMO-LLAMA2-7B-CP4", "NVIDIA NeMo", "tflops_per_gpu_model", not_expressible="no batch")]
    got = interval_rows([rows[r.id] for r in res], res, {"NEMO-GPT3-175B-128": -4.25, "K22-22B-layer-base": 2.0})
    assert got == [{"id": "NEMO-GPT3-175B-128", "source_group": "NVIDIA NeMo", "envelope_group": "NVIDIA NeMo",
                    "stack": "nemo", "gpu": "H100-SXM-80GB", "architecture": "hopper", "family": "dense",
                    "precision": "fp8", "gpus": 128, "fidelity": "operator", "error_pct": -3.0,
                    "left_out_error_pct": -4.25, "memory_error_pct": None}]


def test_docs_quote_the_coverage_the_command_prints():
    """docs/validation.md holds `python -m benchmarks.validate --interval-coverage --markdown`'s table,
    recomputed here from the shipped rows; the 80 % interval covers 70-90 % of the rows overall."""
    doc = (ROOT / "docs" / "validation.md").read_text(encoding="utf-8")
    assert coverage_table(0.8, markdown=True) in doc
    overall = coverage(0.8)["overall"]
    assert 70.0 <= overall["coverage_pct"] <= 90.0 and overall["rows"] == len(bundled().rows)


# ----------------------------------------------------------------------------- the surfaces
def _cli(capsys, *argv) -> str:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    assert rc == 0, err
    return out


def test_simulate_json_and_text_state_the_interval(capsys):
    d = json.loads(_cli(capsys, "simulate", L8B, "--fidelity", "coarse", "--json"))
    t = d["iteration_time_s"]
    assert d["interval_level"] == 0.8
    lo, hi = d["iteration_time_interval_s"]
    assert lo < t < hi
    f_lo, f_hi = d["interval"]["step_time_factor"]
    assert lo == pytest.approx(t * f_lo) and hi == pytest.approx(t * f_hi)
    assert d["tokens_per_s_interval"] == pytest.approx([d["tokens_per_s"] / f_hi, d["tokens_per_s"] / f_lo])
    assert d["mfu_interval"] == pytest.approx([d["mfu"] / f_hi, d["mfu"] / f_lo])
    assert d["train_days_interval"] == pytest.approx([d["train_days"] * f_lo, d["train_days"] * f_hi])
    assert d["cost_usd_interval"] == pytest.approx([d["cost_usd"] * f_lo, d["cost_usd"] * f_hi])
    assert d["memory_interval"]["verdict"] in ("fits", "too close to call")
    wide = json.loads(_cli(capsys, "simulate", L8B, "--fidelity", "coarse", "--json", "--interval-level", "0.95"))
    w_lo, w_hi = wide["iteration_time_interval_s"]
    assert wide["interval_level"] == 0.95 and w_lo <= lo and hi <= w_hi and (w_hi - w_lo) > (hi - lo)
    out = _cli(capsys, "simulate", L8B, "--fidelity", "coarse")
    assert re.search(r"iteration time \d+\.\d{3} s \(80 %: \d+\.\d{3}–\d+\.\d{3} s\)", out)
    assert re.search(r"^memory \(80 %\): peak .* measured peaks: (fits|too close to call)$", out, re.MULTILINE)


def test_simulate_json_keys_on_a_pipeline_description(capsys):
    d = json.loads(_cli(capsys, "simulate", PIPE, "--json"))
    assert d["interval_level"] == 0.8 and d["iteration_time_interval_s"] is None
    assert "given, not predicted" in d["interval"]["note"]


def test_bad_level_is_one_line(capsys):
    assert main(["simulate", PIPE, "--interval-level", "2"]) == 2
    err = capsys.readouterr().err
    assert "--interval-level = '2'" in err and len(err.strip().splitlines()) == 1


def test_compare_and_html_carry_the_interval(capsys):
    rows = json.loads(_cli(capsys, "compare", L8B, "--schedules", "1f1b,gpipe", "--fidelity", "coarse",
                           "--json"))
    for r in rows:
        lo, hi = r["iteration_time_interval_s"]
        assert lo < r["iteration_time_s"] < hi and r["interval_level"] == 0.8
    out = _cli(capsys, "compare", L8B, "--schedules", "1f1b", "--fidelity", "coarse")
    assert "80 % interval" in out.splitlines()[0]
    from simulator.api import load_strategy, sim_interval, simulate_strategy
    from simulator.outputs.html_report import html_report, report_data
    sim = simulate_strategy(load_strategy(L8B), fidelity="coarse")
    d = report_data(sim, L8B)
    assert d["intervals"]["iteration_time_interval_s"] == pytest.approx(list(sim_interval(sim).time(
        sim.training.iteration_time_s)))
    page = html_report(sim, source=L8B)
    assert "<th>iteration time</th><td>" in page and "(80 %: " in page and "stated interval" in page


def test_interval_text_form():
    iv = Interval(0.8, 0.9, 1.2, "x", 0.0, 1.0, 3, "")
    assert iv.text(19.3, "s") == "19.3 s (80 %: 17.4–23.2 s)"
    assert iv.text(50.0, "%", rate=True) == "50.0% (80 %: 41.7–55.6%)"


def test_search_ranks_carry_intervals_and_overlaps(capsys):
    args = [L8B, "--axis", "tp=1,2", "--axis", "pp=1", "--axis", "vpp=1", "--axis", "cp=1", "--axis", "micro_batch=1",
            "--axis", "zero=1", "--axis", "recompute=none,full", "--jobs", "1", "--no-prune", "--top", "3"]
    out = json.loads(_cli(capsys, "search", *args, "--json"))
    assert out["interval_level"] == 0.8 and len(out["rows"]) >= 2
    seen = []
    for r in out["rows"]:
        if r["status"] != "ok":
            continue
        lo, hi = r["iteration_time_interval_s"]
        assert lo < r["iteration_time_s"] < hi
        olo, ohi = r["objective_interval"]
        assert olo <= r["days_to_train"] <= ohi
        # every rank above whose objective interval meets this one's is named, and only those
        assert r["overlaps_ranks"] == [s["rank"] for s in seen if overlaps(s["objective_interval"], (olo, ohi))]
        seen.append(r)
    assert out["best"]["iteration_time_interval_s"] == out["rows"][0]["iteration_time_interval_s"]
    text = _cli(capsys, "search", *args)
    assert "80 % intervals (days_to_train" in text and re.search(r"^\s+1 iteration [\d.]+–[\d.]+ s", text, re.MULTILINE)


def test_spread_is_estimated_one_point_per_source():
    """Sources SA and SA2 measure the same features (distance 0 to each other); SB is 2 away. Per
    source (mean d, mean |r|): m0 = mean of SA's and SA2's mean |r|; k = (|r|_B - m0) * 2 / (m0 * 2^2)."""
    a2 = CalibrationGroup("A2", "megatron", ("A100-SXM-80GB",), ("ampere",), ("dense",), ("bf16",), 8, 64, 2, 1.0, 1.0)
    fb = feat(stack="fsdp", gpu="H100-SXM-80GB", architecture="hopper")
    rows = [row("a1", "A", "SA", -2.0), row("a2", "A", "SA", 4.0), row("c1", "A2", "SA2", 1.0),
            row("b1", "B", "SB", -20.0, fb), row("b2", "B", "SB", 10.0, fb)]
    cal = Calibration.build(rows, (A, a2, B))
    r = {x.id: abs(x.residual) for x in rows}
    m0 = ((r["a1"] + r["a2"]) / 2 + r["c1"]) / 2
    rb = (r["b1"] + r["b2"]) / 2
    assert cal.spread == pytest.approx((rb - m0) * 2 / (m0 * 4))
    assert cal.scores["b1"] == pytest.approx(math.log(0.8) / (1 + 2 * cal.spread))
    assert cal.scores["a1"] == pytest.approx(math.log(0.98))  # distance 0: not normalized
    iv = interval_for(feat(family="moe"), "operator", 0.8, cal)
    assert iv.widening == pytest.approx(1 + cal.spread)
