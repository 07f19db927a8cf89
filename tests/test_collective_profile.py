"""options.collective_profile (topologies/collective_profile.py): reading, interpolation in log size with
exact values, the extrapolation outside the measured range, the device rule, and a DP bucket priced
at the measured time. No PyTorch needed."""
from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator.cli.main import main
from strategies.errors import ConfigError
from strategies.strategy_file import load_strategy
from taskgraph.plan import resolve
from topologies.collective_profile import interpolate, load_collective_profile
from topologies.collectives import collective_time

CSV = """gpu,collective,ranks,bytes,time_us,modelled_us
cpu,all-reduce,2,1000,100,1
cpu,all-reduce,2,100000,300,1
cpu,all_reduce,2,10000000,20300,1
cpu,reduce-scatter,2,1000,,1
"""
TINY = """model: {name: tiny-gpt, layers: 2, hidden: 64, heads: 2, kv_heads: 2, head_dim: 32, ffn: 256, vocab: 512,
  mlp: gelu, norm: layernorm, position: learned, max_seq: 128, bias: true, tied_embeddings: false, dropout: false}
cluster: {gpu: cpu, nodes: 1, gpus_per_node: 2, nvlink_latency_us: 0, nvlink_efficiency: 1, nic_gbit: 1,
  nic_latency_us: 0, nic_efficiency: 1, host_us_per_kernel: 0, host_us_per_collective: 0, gpu_speed_cv: 0,
  collective_model: alpha-beta, contention: false}
parallel: {tp: 1, pp: 1, dp: 2}
schedule: 1f1b
training: {micro_batch: 1, global_batch: 4, seq_len: 64, precision: bf16}
"""


def _csv(tmp_path, text=CSV):
    p = tmp_path / "coll.csv"
    p.write_text(text)
    return p


def test_interpolation_in_log_size_is_exact(tmp_path):
    prof = load_collective_profile(_csv(tmp_path), "cpu")
    t = lambda s: prof.time("all-reduce", s, 2)
    assert t(1000) == pytest.approx(100e-6, rel=1e-12)
    assert t(100000) == pytest.approx(300e-6, rel=1e-12)
    # 10 kB is halfway between 1 kB and 100 kB in log size: halfway between 100 and 300 us
    assert t(10000) == pytest.approx(200e-6, rel=1e-12)
    # 1 MB is halfway between 100 kB and 10 MB in log size: (300 + 20300) / 2 us
    assert t(1e6) == pytest.approx(10300e-6, rel=1e-12)
    # below the smallest size: its time (the latency floor)
    assert t(10) == pytest.approx(100e-6, rel=1e-12)
    # above the largest: the last segment's line, slope (20300 - 300) us / (10 MB - 100 kB)
    assert t(2e7) == pytest.approx(20300e-6 + 1e7 * 20000e-6 / 9.9e6, rel=1e-12)


def test_what_was_not_measured_keeps_the_model(tmp_path):
    prof = load_collective_profile(_csv(tmp_path), "cpu")
    assert prof.time("reduce-scatter", 1000, 2) is None      # empty time_us: the sweep could not run it
    assert prof.time("all-reduce", 1000, 4) is None          # another group size
    assert prof.time("all-gather", 1000, 2) is None


@given(st.lists(st.tuples(st.integers(1, 10**9), st.floats(1e-7, 1.0)), min_size=1, max_size=6,
                unique_by=lambda p: p[0]), st.floats(1, 1e10))
def test_interpolation_stays_within_its_neighbours(points, s):
    pts = sorted(points)
    t = interpolate(pts, s)
    if pts[0][0] <= s <= pts[-1][0]:
        lo = max(p for p in pts if p[0] <= s)
        hi = min(p for p in pts if p[0] >= s)
        assert min(lo[1], hi[1]) - 1e-15 <= t <= max(lo[1], hi[1]) + 1e-15
    elif s < pts[0][0]:
        assert t == pts[0][1]
    assert math.isfinite(t)


def test_the_override_applies_inside_one_node_only(tmp_path):
    base = resolve(load_strategy(_write(tmp_path, TINY))).cluster
    prof = load_collective_profile(_csv(tmp_path), "cpu")
    from dataclasses import replace
    c = replace(base, collective_profile=prof)
    assert collective_time("all-reduce", 10000, (0, 1), c) == pytest.approx(200e-6, rel=1e-12)
    assert collective_time("all-gather", 10000, (0, 1), c) == collective_time("all-gather", 10000, (0, 1), base)
    two_nodes = replace(base, nodes=2, gpus_per_node=1, collective_profile=prof)
    assert collective_time("all-reduce", 10000, (0, 1), two_nodes) == \
        collective_time("all-reduce", 10000, (0, 1), replace(two_nodes, collective_profile=None))


def _write(tmp_path, text, name="s.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_a_dp_bucket_takes_the_measured_time(tmp_path):
    from taskgraph.costing import build_work
    _csv(tmp_path)
    plan = resolve(load_strategy(_write(tmp_path, TINY + "options: {collective_profile: coll.csv, grad_bucket_mb: 1000}\n")))
    (bucket,) = build_work(plan).stages[0].buckets
    assert bucket.reduce_s == pytest.approx(plan.cluster.collective_profile.time("all-reduce", bucket.nbytes, 2),
                                            rel=1e-12)
    plain = resolve(load_strategy(_write(tmp_path, TINY + "options: {grad_bucket_mb: 1000}\n", "p.yaml")))
    assert build_work(plain).stages[0].buckets[0].reduce_s != bucket.reduce_s


def test_another_device_needs_collective_profile_gpu(tmp_path, capsys):
    _csv(tmp_path, CSV.replace("cpu,", "H100-SXM-80GB,"))
    s = _write(tmp_path, TINY + "options: {collective_profile: coll.csv}\n")
    assert main(["simulate", str(s)]) == 2
    err = capsys.readouterr().err
    assert "collective profile" in err and "was measured on h100-sxm-80gb but the cluster's GPU is cpu" in err
    assert "collective_profile_gpu" in err and err.count("\n") == 1
    ok = _write(tmp_path, TINY + "options: {collective_profile: coll.csv, collective_profile_gpu: H100-SXM-80GB}\n")
    assert main(["simulate", str(ok)]) == 0
    capsys.readouterr()
    bad = _write(tmp_path, TINY + "options: {collective_profile: coll.csv, collective_profile_gpu: a100}\n")
    assert main(["simulate", str(bad)]) == 2
    assert "options.collective_profile_gpu = 'a100'" in capsys.readouterr().err


@pytest.mark.parametrize("text, words", [
    ("gpu,collective,ranks,bytes\ncpu,all-reduce,2,10\n", "lacks column(s) time_us"),
    ("gpu,collective,ranks,bytes,time_us\ncpu,allreduce3,2,10,5\n", "line 2: unknown collective kind"),
    ("gpu,collective,ranks,bytes,time_us\ncpu,all-reduce,1,10,5\n", "ranks = '1' must be an integer in [2, 1e15]"),
    ("gpu,collective,ranks,bytes,time_us\ncpu,all-reduce,2,1.5,5\n", "bytes = '1.5' must be an integer"),
    ("gpu,collective,ranks,bytes,time_us\ncpu,all-reduce,2,10,nan\n", "time_us = 'nan' must be a finite number"),
    ("gpu,collective,ranks,bytes,time_us\ncpu,all-reduce,2,10,x\n", "time_us = 'x' is not a number"),
    ("gpu,collective,ranks,bytes,time_us\ncpu,all-reduce,2,10,5\ncpu,all-reduce,2,10,6\n",
     "line 3 repeats all-reduce on 2 ranks at 10 bytes (line 2)"),
])
def test_bad_rows_name_line_field_and_value(tmp_path, text, words):
    with pytest.raises(ConfigError) as e:
        load_collective_profile(_csv(tmp_path, text), "cpu")
    assert words in str(e.value)


def test_the_path_must_be_a_string(tmp_path, capsys):
    s = _write(tmp_path, TINY + "options: {collective_profile: 3}\n")
    assert main(["simulate", str(s)]) == 2
    assert "options.collective_profile = 3 must be the path of a collective profile CSV" in capsys.readouterr().err
