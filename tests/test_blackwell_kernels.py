"""Blackwell attention and memory-bound efficiencies re-derived from the transcribed cuDNN 9.19.1
figures (benchmarks/kernel_data/cudnn-frontend, NVIDIA/cudnn-frontend's benchmarks on GB200, GB300 and
H200): kernels.yaml's GB200 cuDNN rows, fitted.yaml's Blackwell attention / elementwise ties and
gpus.yaml's Blackwell hbm_efficiency ([CUDNN-SDPA], [CUDNN-NORM] in gpus.yaml)."""
from __future__ import annotations

import csv
import statistics
from pathlib import Path

import pytest

from strategies.documents import load_document
from topologies.gpus import get_gpu
from topologies.kernels import KERNELS_PATH

DATA = Path(__file__).resolve().parent.parent / "benchmarks" / "kernel_data" / "cudnn-frontend"
PEAK_BF16 = {"GB200": 2500.0, "GB300": 2500.0, "H200": 989.4}     # dense TFLOP/s, gpus.yaml
PEAK_HBM = {"GB200": 8000.0, "GB300": 8000.0, "H200": 4800.0}     # GB/s, gpus.yaml
SEQ = (2048, 4096, 8192, 16384, 32768)


def _sdpa() -> list[dict]:
    with open(DATA / "sdpa_llama31.csv", newline="") as f:
        return list(csv.DictReader(f))


def _sdpa_at(gpu: str, seq: int, mask: str, pass_: str) -> float:
    (row,) = [r for r in _sdpa() if r["gpu"] == gpu and int(r["seqlen"]) == seq and r["attn_mask"] == mask]
    return float(row[f"{pass_}_tflops"])


def test_sdpa_figures_follow_the_tables_flop_convention():
    """forward 4 b s^2 h d (halved under the causal mask), backward 2.5 x: the printed TFLOP/s within
    the rounding of the printed milliseconds (a few tenths of a percent at 2k)."""
    for r in _sdpa():
        b, s, h, d = int(r["batch_size"]), int(r["seqlen"]), int(r["num_q_heads"]), int(r["head_dim"])
        fwd = 4 * b * s * s * h * d / (2 if r["attn_mask"] == "top_left" else 1)
        assert fwd / (float(r["fwd_ms"]) * 1e-3) / 1e12 == pytest.approx(float(r["fwd_tflops"]), rel=0.01)
        assert 2.5 * fwd / (float(r["bwd_ms"]) * 1e-3) / 1e12 == pytest.approx(float(r["bwd_tflops"]), rel=0.01)


def test_kernel_table_gb200_rows_are_the_transcribed_figures():
    rows = [r for r in load_document(KERNELS_PATH, "kernel table")["attention"]["curves"]
            if r["gpu"] == "GB200-186GB" and r["kernel"] == "cudnn"]
    assert len(rows) == 4
    for r in rows:
        mask = "top_left" if r["causal"] else "no_mask"
        assert (r["kernel"], r["head_dim"]) == ("cudnn", 128)
        assert r["tflops"] == [None, None] + [_sdpa_at("GB200", s, mask, r["pass"]) for s in SEQ] + [None, None]


@pytest.mark.parametrize("gpu, name, h100, expect", [
    ("GB200", "b200", 0.39, 0.35), ("GB300", "gb300", 0.39, 0.44)])
def test_attention_forward_tie(gpu, name, h100, expect):
    # H100's fitted value x (the GPU's share of peak / H200's) at head dim 128, 4k, causal
    share = _sdpa_at(gpu, 4096, "top_left", "fwd") / PEAK_BF16[gpu]
    ratio = share / (_sdpa_at("H200", 4096, "top_left", "fwd") / PEAK_BF16["H200"])
    assert round(h100 * ratio, 2) == expect
    assert get_gpu(name).efficiency.attention_fwd_efficiency == expect


@pytest.mark.parametrize("gpu, name, expect", [("GB200", "b200", 0.27), ("GB200", "gb200", 0.27), ("GB300", "gb300", 0.29)])
def test_attention_backward_tie(gpu, name, expect):
    share = _sdpa_at(gpu, 4096, "top_left", "bwd") / PEAK_BF16[gpu]
    ratio = share / (_sdpa_at("H200", 4096, "top_left", "bwd") / PEAK_BF16["H200"])
    assert round(0.29 * ratio, 2) == expect
    assert get_gpu(name).efficiency.attention_bwd_efficiency == expect


def _norm_ratio(gpu: str, passes=("fwd", "bwd")) -> float:
    """Median over the (shape, pass) figures both GPUs have of (gpu's share of peak HBM) / H200's."""
    with open(DATA / "norms.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    share = {(r["gpu"], r["norm_name"], r["pass"]): float(r["gbps"]) / PEAK_HBM[r["gpu"]] for r in rows}
    keys = sorted(k[1:] for k in share if k[0] == "H200" and k[2] in passes and (gpu,) + k[1:] in share)
    return statistics.median(share[(gpu,) + k] / share[("H200",) + k] for k in keys)


def test_norm_ratios_exact():
    with open(DATA / "norms.csv", newline="") as f:
        assert len(list(csv.DictReader(f))) == 90    # 15 shapes x 2 passes x 3 GPUs
    assert round(_norm_ratio("GB200"), 3) == 0.841 and round(_norm_ratio("GB300"), 3) == 0.857
    assert round(_norm_ratio("GB200", ("fwd",)), 3) == 0.925 and round(_norm_ratio("GB300", ("fwd",)), 3) == 0.945


@pytest.mark.parametrize("gpu, names, elementwise, hbm", [
    ("GB200", ("b200", "gb200"), 0.58, 0.80), ("GB300", ("gb300",), 0.59, 0.82)])
def test_memory_bound_efficiencies(gpu, names, elementwise, hbm):
    # elementwise: the A100/H100 fit's 0.69 x the median norm ratio; hbm: the H200's measured copy 0.87 x
    # the forward norms' ratio (gpus.yaml [HBM-H200], [CUDNN-NORM])
    assert round(0.69 * _norm_ratio(gpu), 2) == elementwise
    assert round(0.87 * _norm_ratio(gpu, ("fwd",)), 2) == hbm
    for n in names:
        e = get_gpu(n).efficiency
        assert (e.elementwise_efficiency, e.hbm_efficiency) == (elementwise, hbm)
