"""Blackwell NVLink 5 bus bandwidth from OpenXLA's measured collective tables ([XLA-COLL] in
topologies/data/clusters.yaml): each Blackwell preset's nvlink_efficiency is the median ring bus
bandwidth / 900 GB/s of the all-gather and reduce-scatter rows of groups of >= 8 GPUs
(benchmarks/kernel_data/xla-b200/collectives_ring.csv; busBw = throughput x (n - 1) / n,
nccl-tests PERFORMANCE.md)."""
from __future__ import annotations

import csv
import statistics
from pathlib import Path

import pytest

from topologies.cluster import get_cluster

CSV = Path(__file__).resolve().parent.parent / "benchmarks" / "kernel_data" / "xla-b200" / "collectives_ring.csv"


def _median_share(gpu: str) -> float:
    with open(CSV, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["gpu"] == gpu and int(r["devices_per_group"]) >= 8]
    shares = [float(r["throughput_gbps"]) * (int(r["devices_per_group"]) - 1) / int(r["devices_per_group"]) / 900
              for r in rows]
    return statistics.median(shares)


@pytest.mark.parametrize("preset, gpu, expect", [("dgx-b200", "B200", 0.70), ("gb200-nvl72", "GB200", 0.77),
                                                 ("gb300-nvl72", "GB300", 0.76)])
def test_blackwell_nvlink_efficiency_is_the_measured_ring_share(preset, gpu, expect):
    assert round(_median_share(gpu), 2) == expect
    c = get_cluster(preset)
    assert c.nvlink_efficiency == expect
    assert c.nvlink_bus_bandwidth == pytest.approx(900e9 * expect, rel=1e-12)


def test_b200_by_hand():
    # DGX B200, 8 GPUs: all-gather 704.5 GB/s x 7/8 = 616.4, reduce-scatter 733.5 x 7/8 = 641.8 of 900
    assert _median_share("B200") == pytest.approx((704.5 + 733.5) / 2 * 7 / 8 / 900, rel=1e-3)
