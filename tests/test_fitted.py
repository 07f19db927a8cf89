"""The constants fitted to measured runs, declared in one file (topologies/data/fitted.yaml, read by
strategies/fitted.py; issue 26, item 7)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from strategies.errors import ConfigError
from strategies.fitted import FITTED_PATH, catalog_values, constants, fitted_value, load_fits
from topologies.gpus import GPU_CATALOG_PATH, get_gpu, load_gpu_catalog


# ---------------------------------------------------------------------------- the data file
def test_catalog_reads_the_fitted_values():
    a100, h100, h200 = get_gpu("a100"), get_gpu("h100"), get_gpu("h200")
    assert (a100.efficiency.gemm_efficiency_max, a100.efficiency.gemm_tile_n,
            a100.efficiency.elementwise_efficiency) == (0.80, 128, 0.69)
    assert (h100.efficiency.gemm_efficiency_max, h100.efficiency.gemm_efficiency_max_fp8,
            h100.efficiency.attention_fwd_efficiency, h100.efficiency.attention_bwd_efficiency) == (0.65, 0.56, 0.39, 0.29)
    assert h200.efficiency == h100.efficiency
    # sourced values stay in gpus.yaml
    assert (a100.efficiency.attention_fwd_efficiency, a100.efficiency.hbm_efficiency) == (0.55, 0.85)


def test_every_fitted_gpu_field_is_written_fitted_in_gpus_yaml_and_back():
    text = Path(GPU_CATALOG_PATH).read_text(encoding="utf-8")
    written: dict[str, set] = {}
    gpu = None
    for line in text.splitlines():
        m = re.match(r"^  (\S+):\s*$", line)
        if m:
            gpu = m.group(1)
        m = re.match(r"^      (\w+): fitted\b", line)
        if m:
            written.setdefault(gpu, set()).add(m.group(1))
    declared = {g: set(fields) for g, fields in catalog_values("gpu").items()}
    assert written == declared


def test_cluster_and_option_defaults_come_from_the_file():
    from strategies.strategy_file import P2P_HOST_GAP_US
    from topologies.cluster import DEFAULT_HOST_US_PER_COLLECTIVE, get_cluster
    assert (P2P_HOST_GAP_US, DEFAULT_HOST_US_PER_COLLECTIVE) == (500.0, 30.0)
    assert fitted_value("p2p_host_gap_us") == 500
    assert get_cluster("dgx-a100-80g").host_us_per_collective == 45.0
    assert get_cluster("dgx-a100-40g").host_us_per_collective == 45.0
    assert get_cluster("dgx-h100").host_us_per_collective == 30.0


def test_every_fit_names_rows_that_exist():
    from benchmarks.crossval import match  # the matcher --cv uses
    from benchmarks.validate import load_rows
    ids = [r["id"] for r in load_rows()]
    for fit in load_fits():
        if fit.data is None:
            assert match(fit.rows, ids), fit.name
            assert not fit.fallback_rows or match(fit.fallback_rows, ids), fit.name
        for c in fit.constants:  # the declared value is one of its search's candidates
            assert c.search is None or c.value in c.search.values, c.name


def test_grid_values_are_exact():
    c = constants()["a100.gemm_efficiency_max"]
    assert len(c.search.values) == 37 and c.search.values[0] == 0.5 and c.search.values[-1] == 0.86
    assert 0.8 in c.search.values and 0.71 in c.search.values
    assert constants()["a100.gemm_tile_n"].search.values == (128, 256)


def test_fitted_without_a_value_is_one_clear_error(tmp_path):
    p = tmp_path / "gpus.yaml"
    eff = ("{gemm_efficiency_max: fitted, gemm_efficiency_max_fp8: null, gemm_tile_m: 128, gemm_tile_n: 128, "
           "gemm_tile_k: 64, attention_fwd_efficiency: 0.5, attention_bwd_efficiency: 0.4, hbm_efficiency: 0.8, "
           "elementwise_efficiency: 0.7, launch_overhead_us: 3}")
    p.write_text(f"gpus:\n  MyGPU:\n    tflops_bf16: 1\n    tflops_fp16: 1\n    tflops_tf32: 1\n    tflops_fp32: 1\n"
                 f"    hbm_gb: 1\n    hbm_bw_gbps: 1\n    nvlink_gbps: 1\n    sm_count: 1\n    efficiency: {eff}\n")
    with pytest.raises(ConfigError, match=r"gpu 'MyGPU'.efficiency: field 'gemm_efficiency_max' is written `fitted`"):
        load_gpu_catalog(str(p))


def test_bad_fitted_file_errors(tmp_path):
    p = tmp_path / "fitted.yaml"
    p.write_text("fits:\n  - name: x\n    rows: [A]\n    objective: least_squares\n    constants: {c: {value: 1, sets: option:x}}\n")
    with pytest.raises(ConfigError, match=r"objective = 'least_squares' must be one of mean_abs_error"):
        load_fits(p)
    p.write_text("fits:\n  - name: x\n    rows: [A]\n    objective: mean_abs_error\n    constants: {c: {value: 1, sets: gpu:x}}\n")
    with pytest.raises(ConfigError, match=r"sets = 'gpu:x' must be gpu:<names>:<field>"):
        load_fits(p)
    assert str(FITTED_PATH).endswith("topologies/data/fitted.yaml")


@pytest.mark.parametrize("body, msg", [
    ("    objective: paired_signed_difference\n", r"objective paired_signed_difference needs pairs"),
    ("    objective: mean_abs_error\n    pairs: {a: x, b: y}\n", r"pairs = .*and only it"),
    ("    objective: paired_signed_difference\n    pairs: {a: x}\n", r"pairs = \{'a': 'x'\}"),
    ("    objective: mean_abs_error\n    fallback: {objective: mean_abs_error}\n", r"fallback = .*optionally with objective"),
    ("    objective: mean_abs_error\n    fallback: {rows: [B], objective: plateau}\n",
     r"fallback.objective = 'plateau' must be mean_abs_error or mean_signed_error"),
])
def test_paired_objective_and_fallback_objective_are_checked(tmp_path, body, msg):
    p = tmp_path / "fitted.yaml"
    p.write_text("fits:\n  - name: x\n    rows: [A]\n" + body + "    constants: {c: {value: 1, sets: option:x}}\n")
    with pytest.raises(ConfigError, match=msg):
        load_fits(p)
