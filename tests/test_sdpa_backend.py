"""FlashAttention-2 on Blackwell (kernels.yaml [CUDNN-FA2]): the GB200 fa2 rows re-derived from the
transcribed cudnn-frontend figures (benchmarks/kernel_data/cudnn-frontend/sdpa_fa2_blackwell.csv), their
FLOP convention, the B200 cross-check, and the unmasked figure a causal-only GPU takes."""
from __future__ import annotations

import csv
from pathlib import Path

import pytest

from strategies.documents import load_document
from topologies.kernels import KERNELS_PATH, attention_fraction

DATA = Path(__file__).resolve().parent.parent / "benchmarks" / "kernel_data" / "cudnn-frontend"
PEAK = {"GB200": 2500.0, "B200": 2250.0, "H100": 989.4}   # dense bf16 TFLOP/s, gpus.yaml
SEQ = (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)


def _fa2(gpu: str) -> dict:
    with open(DATA / "sdpa_fa2_blackwell.csv", newline="") as f:
        return {int(r["seqlen"]): r for r in csv.DictReader(f) if r["gpu"] == gpu}


def test_fa2_figures_follow_the_tables_flop_convention():
    """forward 4 b s^2 h d / 2 (causal), backward 2.5 x: the printed TFLOP/s within the rounding of the
    printed milliseconds."""
    for gpu in ("GB200", "B200"):
        for s, r in _fa2(gpu).items():
            assert r["is_causal"] == "True" and r["backend"] == "pyt_flash_attention"
            fwd = 4 * int(r["batch_size"]) * s * s * int(r["num_q_heads"]) * int(r["head_dim"]) / 2
            assert fwd / (float(r["fwd_ms"]) * 1e-3) / 1e12 == pytest.approx(float(r["fwd_tflops"]), rel=0.02)
            assert 2.5 * fwd / (float(r["bwd_ms"]) * 1e-3) / 1e12 == pytest.approx(float(r["bwd_tflops"]), rel=0.02)


def test_kernel_table_gb200_fa2_rows_are_the_transcribed_figures():
    rows = [r for r in load_document(KERNELS_PATH, "kernel table")["attention"]["curves"]
            if r["gpu"] == "GB200-186GB" and r["kernel"] == "fa2"]
    fig = _fa2("GB200")
    assert sorted(r["pass"] for r in rows) == ["bwd", "fwd"]
    for r in rows:
        assert (r["head_dim"], r["causal"]) == (128, True)
        assert r["tflops"] == [float(fig[s][f"{r['pass']}_tflops"]) for s in SEQ]
    # what the model reads: a fraction of GB200's 2.5 PFLOP/s, e.g. 387 / 2,500 = 15.5 % at 4k
    assert attention_fraction("fa2", "blackwell", "fwd", 128, 4096, causal=True) == pytest.approx(387 / 2500)
    assert attention_fraction("fa2", "blackwell", "bwd", 128, 32768, causal=True) == pytest.approx(360 / 2500)


def test_b200_figures_agree_with_gb200_from_4k():
    """The older B200 run (torch 2.9) reaches GB200's share of its own peak within 10 % from 4k on (4k
    forward 324.9 / 2,250 = 14.4 % vs 387 / 2,500 = 15.5 %, backward 11.4 % vs 12.4 %); below 4k its
    launches cost more (2k forward 10.8 % vs 13.4 %)."""
    gb, b = _fa2("GB200"), _fa2("B200")
    for s in SEQ[3:]:
        for p in ("fwd", "bwd"):
            share_b = float(b[s][f"{p}_tflops"]) / PEAK["B200"]
            share_gb = float(gb[s][f"{p}_tflops"]) / PEAK["GB200"]
            assert share_b == pytest.approx(share_gb, rel=0.10)


def test_causal_only_gpu_takes_h100s_unmasked_ratio():
    # GB200 fa2 at 4k: causal 387 (fwd) / 311 (bwd); H100 fa2 head dim 128 at 4k: unmasked 368, causal 319
    # forward ([FA3-F5] (c), (d)); the backward's causal row is itself the unmasked 310 x 319 / 368, so
    # its unmasked / causal ratio is the forward's
    assert attention_fraction("fa2", "blackwell", "fwd", 128, 4096, causal=False) == \
        pytest.approx(387 / 2500 * 368 / 319)
    assert attention_fraction("fa2", "blackwell", "bwd", 128, 4096, causal=False) == \
        pytest.approx(311 / 2500 * 368 / 319)
    # a GPU with both rows keeps its own: Hopper's unmasked forward at 4k is 368
    assert attention_fraction("fa2", "hopper", "fwd", 128, 4096, causal=False) == pytest.approx(368 / PEAK["H100"])
