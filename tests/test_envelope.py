"""The calibration envelope (simulator/reports/envelope.py, issue 26 item 8): the distance of a run to
each measured group, hand-computed; the nearest group and the inside/outside verdict; the bundled
file; and that every report (simulate text and JSON, the HTML summary) carries it."""
from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator.cli.main import main
from simulator.reports.envelope import (
    NEAR,
    STACK_FAMILIES,
    CalibrationGroup,
    RunFeatures,
    assess,
    distance,
    load_envelope,
)

NEMO = CalibrationGroup("NeMo", "nemo", ("H100-SXM-80GB",), ("hopper",), ("dense",), ("fp8",), 8, 512, 5, 4.0, 13.3)
ZB = CalibrationGroup("ZB", "megatron", ("A100-SXM-80GB",), ("ampere",), ("dense",), ("fp16",), 8, 32, 36, 2.7, 6.6)
GPT3 = "strategies/examples/gpt3-175b-1024-a100.yaml"
L8B = "strategies/examples/llama3-8b-8-h100.yaml"


def run(**kw) -> RunFeatures:
    d = dict(stack="nemo", gpu="H100-SXM-80GB", architecture="hopper", family="dense", precision="fp8", gpus=64)
    return RunFeatures(**{**d, **kw})


@pytest.mark.parametrize("kw, terms", [
    ({}, {}),
    ({"stack": "megatron"}, {"stack": 0.5}),  # the Megatron family
    ({"stack": "fsdp"}, {"stack": 1.0}),
    ({"gpu": "H800-SXM-80GB"}, {"gpu": 0.25}),  # same generation
    ({"gpu": "B200-SXM-180GB", "architecture": "blackwell"}, {"gpu": 1.0}),
    ({"family": "moe"}, {"family": 1.0}),
    ({"precision": "bf16"}, {"precision": 0.5}),
    ({"gpus": 4096}, {"scale": 1.0}),  # 8x beyond 512
    ({"gpus": 4}, {"scale": 1 / 3}),  # 2x below 8
])
def test_distance_terms(kw, terms):
    d, t = distance(run(**kw), NEMO)
    assert t == pytest.approx(terms) and d == pytest.approx(sum(terms.values()))


def test_bf16_and_fp16_are_one_precision_class():
    assert distance(run(stack="megatron", gpu="A100-SXM-80GB", architecture="ampere", precision="bf16", gpus=16), ZB) \
        == (0.0, {})


def test_nearest_inside_and_outside():
    e = assess(run(gpus=128), (ZB, NEMO))
    assert e.inside and e.nearest is NEMO and e.distance == 0.0
    assert e.summary() == ("calibration: nearest measured group NeMo (nemo, H100-SXM-80GB, fp8, dense, 8-512 GPUs): "
                           "4.0% mean error over 5 runs (max 13.3%; distance 0.00)")
    e = assess(run(stack="megatron", family="moe", gpu="H800-SXM-80GB", gpus=1024), (ZB, NEMO))
    assert not e.inside and e.nearest is NEMO and e.distance == pytest.approx(0.5 + 0.25 + 1 + 1 / 3)
    assert e.summary().startswith("outside the calibrated envelope: no measured run with MoE on H800-SXM-80GB "
                                  "at 1024 GPUs; nearest: NeMo (")
    assert e.absent == ("gpu", "family", "scale")  # megatron is measured (ZB), 1024 GPUs is not
    assert "differs in stack, GPU, model family, scale), 4.0% mean error over 5 runs" in e.summary()
    e = assess(run(gpus=1024), (ZB, NEMO))  # 2x beyond the range alone: distance 1/3, still inside
    assert e.inside and e.distance == pytest.approx(1 / 3) and e.distance <= NEAR
    assert not assess(run(), ()).inside and "no measured group" in assess(run(), ()).summary()


def test_ties_go_to_the_group_with_more_rows():
    # an H100 bf16 Megatron run: 1.0 from ZB (other generation) and 0.5 + 0.5 from NeMo (stack, precision)
    e = assess(run(stack="megatron", precision="bf16", gpus=16), (NEMO, ZB))
    assert e.distance == 1.0 and e.nearest is ZB and e.absent == ()
    assert e.summary().startswith("outside the calibrated envelope: no measured run combines megatron, "
                                  "H100-SXM-80GB, bf16, dense and 16 GPUs; nearest: ZB (")


@given(st.sampled_from(["megatron", "nemo", "fsdp", "deepspeed-zero3", "megatron-deepspeed"]),
       st.sampled_from([("H100-SXM-80GB", "hopper"), ("A100-SXM-80GB", "ampere"), ("B200-SXM-180GB", "blackwell")]),
       st.sampled_from(["dense", "moe"]), st.sampled_from(["bf16", "fp16", "fp8"]), st.integers(1, 10**5))
def test_distance_is_zero_exactly_when_every_feature_matches(stack, gpu, family, precision, gpus):
    r = RunFeatures(stack, gpu[0], gpu[1], family, precision, gpus)
    for g in (NEMO, ZB):
        d, terms = distance(r, g)
        match = (stack == g.stack and gpu[0] in g.gpus and family in g.families
                 and (precision == "fp8") == ("fp8" in g.precisions) and g.min_gpus <= gpus <= g.max_gpus)
        assert d >= 0 and math.isfinite(d) and (d == 0) == match and all(v > 0 for v in terms.values())


def test_bundled_envelope_is_well_formed():
    from topologies.gpus import get_gpu
    groups = load_envelope()
    assert len(groups) >= 8 and len({g.name for g in groups}) == len(groups)
    stacks = set().union(*STACK_FAMILIES)
    for g in groups:
        assert g.stack in stacks and g.min_gpus <= g.max_gpus and g.rows >= 1
        assert {get_gpu(x).architecture for x in g.gpus} == set(g.architectures)
        assert 0 <= g.mean_abs_error_pct <= g.max_abs_error_pct


def test_envelope_groups_from_validation_results():
    from benchmarks.validate import Result, envelope_groups, load_rows
    rows = {r["id"]: r for r in load_rows()}
    res = [Result("NEMO-GPT3-175B-128", "NVIDIA NeMo", "tokens_per_sec_per_gpu", error_pct=-3.0),
           Result("NEMO-LLAMA3-8B-8", "NVIDIA NeMo", "tokens_per_sec_per_gpu", error_pct=-13.0),
           Result("MPT-7B-h100", "MosaicML llm-foundry", "tokens_per_sec_per_gpu", error_pct=-10.0),
           Result("MPT-7B-a100", "MosaicML llm-foundry", "tokens_per_sec_per_gpu", error_pct=6.0),
           Result("K22-22B-layer-base", "Korthikanti 2022 Table 4 (one layer)", "layer_fwd_bwd_time", error_pct=1.0),
           Result("NEMO-LLAMA2-7B-CP4", "NVIDIA NeMo", "tflops_per_gpu_model", not_expressible="no batch")]
    got = envelope_groups([rows[r.id] for r in res], res)
    assert got == [
        {"name": "NVIDIA NeMo", "stack": "nemo", "gpus": ["H100-SXM-80GB"], "architectures": ["hopper"],
         "families": ["dense"], "precisions": ["fp8"], "min_gpus": 8, "max_gpus": 128, "rows": 2,
         "mean_abs_error_pct": 8.0, "max_abs_error_pct": 13.0},
        {"name": "MosaicML llm-foundry (hopper)", "stack": "fsdp", "gpus": ["H100-SXM-80GB"], "architectures": ["hopper"],
         "families": ["dense"], "precisions": ["bf16"], "min_gpus": 8, "max_gpus": 8, "rows": 1,
         "mean_abs_error_pct": 10.0, "max_abs_error_pct": 10.0},
        {"name": "MosaicML llm-foundry (ampere)", "stack": "fsdp", "gpus": ["A100-SXM-80GB"], "architectures": ["ampere"],
         "families": ["dense"], "precisions": ["bf16"], "min_gpus": 8, "max_gpus": 8, "rows": 1,
         "mean_abs_error_pct": 6.0, "max_abs_error_pct": 6.0}]


def _cli(capsys, *argv):
    rc = main(list(argv))
    out, _ = capsys.readouterr()
    assert rc == 0
    return out


def test_simulate_text_and_json_name_the_nearest_group(capsys):
    out = _cli(capsys, "simulate", GPT3, "--fidelity", "coarse")
    assert out.splitlines()[-1].startswith("calibration: nearest measured group ")
    d = json.loads(_cli(capsys, "simulate", L8B, "--fidelity", "coarse", "--json"))["calibration"]
    assert d["inside"] is False and d["summary"].startswith("outside the calibrated envelope: no measured run "
                                                            "combines megatron, H100-SXM-80GB, bf16, dense and 8 GPUs")
    assert d["never_measured"] == []
    assert d["run"] == {"stack": "megatron", "gpu": "H100-SXM-80GB", "architecture": "hopper", "family": "dense",
                        "precision": "bf16", "gpus": 8}
    assert set(d["nearest_group"]) >= {"name", "mean_abs_error_pct", "rows"} and d["distance"] == 1.0


def test_html_summary_names_the_nearest_group():
    from simulator.api import simulate_strategy
    from simulator.outputs.html_report import html_report, report_data
    from strategies.strategy_file import load_strategy
    sim = simulate_strategy(load_strategy(L8B), fidelity="coarse")
    d = report_data(sim, L8B)
    assert d["calibration"]["summary"].startswith("outside the calibrated envelope")
    assert "<th>calibration</th><td>outside the calibrated envelope" in html_report(sim, source=L8B)
