"""Catalog entries of issue 26 item 5 (H100 PCIe / NVL, Meta's 96 GB / 500 W H100, H20, presets,
prices) converted to SI exactly, and power caps as clocks (topologies/gpus.py ``power_scale``)."""
from __future__ import annotations

import dataclasses

import pytest

from strategies.errors import ConfigError
from topologies.cluster import cluster_from_dict, get_cluster
from topologies.gpus import get_gpu, gpu_with_overrides, power_scale
from topologies.pricing import price_per_gpu_hour

T, GB, GIB = 1e12, 1e9, 2**30


@pytest.mark.parametrize("alias, name, bf16, fp8, tf32, fp32, hbm_gb, hbm_bw, nvlink, sms, watts", [
    ("h100-pcie", "H100-PCIe-80GB", 756, 1513, 378, 51, 80, 2039, 300, 114, 350),
    ("h100-nvl", "H100-NVL-94GB", 835.5, 1670.5, 417.5, 60, 94, 3900, 300, 132, 400),
    ("h100-96gb", "H100-HBM2e-96GB", 886.8, 1773.7, 443.4, 60.0, 96, 2447, 450, 132, 500),
    ("h20", "H20-96GB", 148, 296, 74, 44, 96, 4000, 450, 78, 400),
])
def test_new_entries_in_si(alias, name, bf16, fp8, tf32, fp32, hbm_gb, hbm_bw, nvlink, sms, watts):
    g = get_gpu(alias)
    assert g.name == name and g.architecture == "hopper"
    assert (g.peak_flops_bf16, g.peak_flops_fp16, g.peak_flops_fp8) == (bf16 * T, bf16 * T, fp8 * T)
    assert (g.peak_flops_tf32, g.peak_flops_fp32) == (tf32 * T, fp32 * T)
    assert (g.hbm_capacity, g.hbm_bandwidth, g.nvlink_bandwidth) == (hbm_gb * GIB, hbm_bw * GB, nvlink * GB)
    assert (g.sm_count, g.power_w) == (sms, watts)
    e = get_gpu("h100").efficiency  # GH100's fitted values (topologies/data/fitted.yaml)
    if name in ("H100-PCIe-80GB", "H100-HBM2e-96GB"):  # HBM2e: the A100 memory figure, not the H200's ([HBM-H200])
        e = dataclasses.replace(e, hbm_efficiency=0.85, optimizer_efficiency=None)
    assert g.efficiency == e


def test_power_cap_scales_every_peak_by_the_curve():
    h100 = get_gpu("h100")
    k = (835.5 + (989.4 - 835.5) * (500 - 400) / (700 - 400)) / 989.4
    assert power_scale(h100, 500) == pytest.approx(k, rel=1e-15) and power_scale(h100, 700) == 1.0
    assert power_scale(h100, 400) == pytest.approx(835.5 / 989.4, rel=1e-15)
    g = gpu_with_overrides("H100-SXM-80GB", {"power_w": 500})
    assert g.peak_flops("bf16") == pytest.approx(886.8 * T, rel=1e-12)
    for dtype in ("fp16", "fp8", "tf32", "fp32"):
        assert g.peak_flops(dtype) == pytest.approx(h100.peak_flops(dtype) * k, rel=1e-12)
    assert (g.hbm_bandwidth, g.hbm_capacity, g.nvlink_bandwidth, g.power_w) == \
        (h100.hbm_bandwidth, h100.hbm_capacity, h100.nvlink_bandwidth, 500.0)
    # Blackwell: HGX B100 (700 W), HGX B200 (1,000 W), GB200 (1,200 W) are points of the curve
    assert gpu_with_overrides("B200-SXM-180GB", {"power_w": 700}).peak_flops("bf16") == pytest.approx(1750 * T)
    assert gpu_with_overrides("B200-SXM-180GB", {"power_w": 1200}).peak_flops("fp8") == pytest.approx(5000 * T)
    assert gpu_with_overrides("GB200-186GB", {"power_w": 1000}).peak_flops("bf16") == pytest.approx(2250 * T)
    # an explicit rate beside power_w wins for that rate
    assert gpu_with_overrides("h100", {"power_w": 500, "tflops_fp8": 1500}).peak_flops("fp8") == 1500 * T


def test_custom_h100_matches_the_curve_at_500_w():
    """gpus.yaml's H100-HBM2e-96GB rates are the SXM5's on the GH100 curve at 500 W, rounded to 0.1."""
    at500, entry = gpu_with_overrides("h100", {"power_w": 500}), get_gpu("h100-96gb")
    for dtype in ("bf16", "fp16", "fp8", "tf32", "fp32"):
        assert abs(at500.peak_flops(dtype) - entry.peak_flops(dtype)) <= 0.05 * T + 1e-3


@pytest.mark.parametrize("base, watts, match", [
    ("h100", 300, r"power_w = 300 is outside the published curve, 400-700 W"),
    ("h100", 750, r"outside the published curve, 400-700 W"),
    ("b200", 1500, r"outside the published curve, 700-1200 W"),
    ("a100", 300, r"gpu 'A100-SXM-80GB': power_w = 300: NVIDIA publishes no figures .* no power curve"),
    ("h20", 300, r"no power curve"),
    ("h100", "500W", r"power_w = '500W' must be a number of watts"),
])
def test_power_cap_errors(base, watts, match):
    with pytest.raises(ConfigError, match=match):
        gpu_with_overrides(base, {"power_w": watts})


def test_power_cap_in_a_cluster_and_new_presets():
    c = cluster_from_dict({"preset": "dgx-h100", "nodes": 1, "gpu": {"base": "H100-SXM-80GB", "power_w": 500}})
    assert c.gpu.peak_flops("bf16") == pytest.approx(886.8 * T, rel=1e-12)
    for preset, gpu in (("grand-teton-h100", "H100-HBM2e-96GB"), ("hgx-h20", "H20-96GB")):
        c = get_cluster(preset, nodes=2)
        assert (c.gpu.name, c.num_gpus, c.nvlink_bandwidth, c.nic_bandwidth) == (gpu, 16, 450 * GB, 400e9 / 8)
    assert price_per_gpu_hour("H100-PCIe-80GB", None) == 2.49
