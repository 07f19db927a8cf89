"""The measured GEMM shape tables (topologies/data/gemm_shapes.yaml, [EXECSIM-H200]) and how
taskgraph/cost.py prices Hopper GEMMs from them."""
from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from strategies.errors import ConfigError
from topologies.gemm_shapes import GEMM_SHAPES_PATH, gemm_shape_table, grouped_shape_factor, shape_factor
from topologies.gpus import get_gpu

DATA = Path(__file__).resolve().parent.parent / "benchmarks" / "kernel_data" / "h200-2026-11-26"
#: the plateaus of the committed table (its header): median of the 27 shapes of {4096..16384}^3,
#: bf16 and fp8
BF16_PLATEAU = 0.6772
FP8_PLATEAU = 0.6225


def test_table_is_what_the_generator_writes():
    """The committed table equals `python -m benchmarks.gemm_table`'s output from the raw CSVs."""
    from benchmarks.gemm_table import generate
    assert Path(GEMM_SHAPES_PATH).read_text() == generate()


def test_plateaus():
    t = gemm_shape_table()
    assert t.plain["bf16"].plateau == BF16_PLATEAU
    assert t.plain["fp8"].plateau == pytest.approx(FP8_PLATEAU, abs=1e-12)
    assert t.grouped_plateau == BF16_PLATEAU


def test_grid_points_and_interpolation_by_hand():
    """At a grid point the factor is the measured fraction over the plateau (gemm_grid.csv
    4096 x 2048 x 4096: 778.722 TFLOP/s / 989.4 = 0.7871); between two k points of 8192 x 8192
    (k 64: 175.073 / 989.4 = 0.1769; k 128: 325.102 / 989.4 = 0.3286) at k = 2^6.5 (halfway in log2)
    the mean of the two."""
    assert shape_factor(4096, 2048, 4096) == pytest.approx(0.7871 / BF16_PLATEAU, rel=1e-12)
    assert shape_factor(8192, 8192, 64) == pytest.approx(0.1769 / BF16_PLATEAU, rel=1e-12)
    assert shape_factor(8192, 8192, 2 ** 6.5) == pytest.approx((0.1769 + 0.3286) / 2 / BF16_PLATEAU, rel=1e-12)
    # a quarter of the way in log2(m) from 4096 to 8192, same n, k: 3/4 and 1/4 of the two points
    lo, hi = shape_factor(4096, 8192, 64), shape_factor(8192, 8192, 64)
    assert shape_factor(2 ** 12.25, 8192, 64) == pytest.approx(0.75 * lo + 0.25 * hi, rel=1e-12)
    # grouped: grouped_grid.csv 8 groups of 64 rows against [2048, 7168]: 0.175 of peak
    assert grouped_shape_factor(8, 64, 2048, 7168) == pytest.approx(0.175 / BF16_PLATEAU, rel=1e-12)


def test_clamped_at_the_grid_edges():
    """Above the grid the edge's fraction; below it the edge's time (the fraction scales by size /
    smallest size: a router GEMM of 8 experts takes the time of n = 128); groups below 4: 4's fraction."""
    assert shape_factor(8192, 65536, 8192) == shape_factor(8192, 16384, 8192)
    assert shape_factor(8192, 8192, 1 << 20) == shape_factor(8192, 8192, 16384)
    assert shape_factor(16, 8192, 8192) == pytest.approx(shape_factor(64, 8192, 8192) * 16 / 64, rel=1e-12)
    assert shape_factor(4096, 8, 4096) == pytest.approx(shape_factor(4096, 128, 4096) * 8 / 128, rel=1e-12)
    assert shape_factor(32, 8, 32) == pytest.approx(shape_factor(64, 128, 64) / 2 / 16 / 2, rel=1e-12)
    assert grouped_shape_factor(256, 4096, 2048, 7168) == grouped_shape_factor(64, 2048, 2048, 7168)
    assert grouped_shape_factor(2, 8, 2048, 7168) == pytest.approx(grouped_shape_factor(4, 16, 2048, 7168) / 2,
                                                                    rel=1e-12)
    # (14336, 4096) was measured up to 32 groups only (the sweep's 4 GiB weight cap): 64 clamps to 32
    assert grouped_shape_factor(64, 512, 14336, 4096) == grouped_shape_factor(32, 512, 14336, 4096)


def test_grouped_between_expert_shapes_stays_between_them():
    """Shepard weighting: an unmeasured (n, k) lies within the measured shapes' values."""
    t = gemm_shape_table()
    for g, r in ((8, 64), (32, 256), (16, 1000)):
        vals = [grouped_shape_factor(g, r, s.n, s.k) for s in t.grouped]
        v = grouped_shape_factor(g, r, 2880, 5760)
        assert min(vals) <= v <= max(vals)


def test_hopper_prices_from_the_table_other_gpus_from_the_tile_model():
    from taskgraph.cost import gemm_efficiency
    for name in ("h100", "h200", "h800", "h20", "h100-pcie"):
        g = get_gpu(name)
        assert gemm_efficiency(2048, 6144, 4096, 1, g) == \
            pytest.approx(g.gemm_efficiency("bf16") * shape_factor(2048, 6144, 4096), rel=1e-12)
        assert gemm_efficiency(2048, 6144, 4096, 1, g, "fp8") == \
            pytest.approx(g.gemm_efficiency("fp8") * shape_factor(2048, 6144, 4096, "fp8"), rel=1e-12)
    h100 = get_gpu("h100")
    # experts: the grouped table at the forward layout's shape; a strided batch: plain at (m x batch, n, k)
    assert gemm_efficiency(256, 2048, 7168, 8, h100, grouped=(256, 2048, 7168)) == \
        pytest.approx(0.65 * grouped_shape_factor(8, 256, 2048, 7168), rel=1e-12)
    assert gemm_efficiency(2048, 2048, 128, 32, h100) == pytest.approx(0.65 * shape_factor(65536, 2048, 128), rel=1e-12)
    # Ampere keeps the tile/wave model: pinned values (computed on main before this change;
    # A100 4096^3: 0.80 x 1024 tiles of 128 x 128 over 10 waves of 108 SMs). Blackwell has its own
    # measured table since issue 38 (tests/test_gemm_shapes_blackwell.py).
    a100 = get_gpu("a100")
    assert gemm_efficiency(4096, 4096, 4096, 1, a100) == 0.7585185185185186 == 0.8 * 1024 / 1080
    assert gemm_efficiency(100, 768, 2048, 8, a100, grouped=(100, 768, 2048)) == 0.37037037037037035
    assert gemm_efficiency(2048, 4608, 12288, 1, a100) == 0.7111111111111111


def _rows(name: str):
    with open(DATA / name, newline="") as f:
        return [r for r in csv.DictReader(f) if r.get("tflops")]


def test_layer_shapes_reproduce_measured_relative_efficiency():
    """The 297 shapes of gemm.csv (layer shapes in all three pass layouts, squares, short K, skinny N,
    the wave scan; a separate run from the grid), each measured TFLOP/s over the bf16 plateau, against
    the shape factor: mean |error| 4.9 % (max 32 %, the 64-row-k end of the wave scan), about the
    run-to-run noise (gemm_repeat.csv vs gemm.csv: mean |diff| 1.7 %, max 11 %). The old tile/wave
    model (taskgraph.cost.tile_gemm_efficiency / gemm_efficiency_max on the H200) on the same rows:
    mean |error| 13.9 %, max 1087 % (squares 174 %, short K 68 %, the wave scan 10.7 %)."""
    from taskgraph.cost import tile_gemm_efficiency
    h200 = get_gpu("h200")
    plateau = BF16_PLATEAU * 989.4
    rows = _rows("gemm.csv")
    assert len(rows) == 297
    new, old = [], []
    for r in rows:
        m, n, k = int(r["m"]), int(r["n"]), int(r["k"])
        measured = float(r["tflops"]) / plateau
        new.append(abs(shape_factor(m, n, k) / measured - 1))
        old.append(abs(tile_gemm_efficiency(m, n, k, 1, h200) / h200.gemm_efficiency("bf16") / measured - 1))
    assert sum(new) / len(new) == pytest.approx(0.0491, abs=0.0005)
    assert sum(new) / len(new) < 0.06 < sum(old) / len(old)
    assert sum(old) / len(old) == pytest.approx(0.1388, abs=0.0005)


def test_grouped_shapes_reproduce_measured_relative_efficiency():
    """grouped.csv's 108 torch._grouped_mm rows (DeepSeek-V3, Qwen3, GPT-OSS, Mixtral experts at 8 and
    32 groups of 64..2048 rows; a separate run from the grid) against the grouped shape factor: mean
    |error| 5.3 % (max 36 %: Qwen3-30B's 768-wide experts at 64-128 rows, on the ~20 us per-call floor,
    where the two runs differ). The old tile/wave model with the experts as the batch: mean |error|
    35.2 %, max 315 % (fine-grained experts priced far too fast)."""
    from taskgraph.cost import tile_gemm_efficiency
    h200 = get_gpu("h200")
    plateau = BF16_PLATEAU * 989.4
    rows = [r for r in _rows("grouped.csv") if r["kernel"] == "torch._grouped_mm"]
    assert len(rows) == 108
    new, old = [], []
    for r in rows:
        g, m, n, k = int(r["groups"]), int(r["m"]), int(r["n"]), int(r["k"])
        measured = float(r["tflops"]) / plateau
        new.append(abs(grouped_shape_factor(g, m, n, k) / measured - 1))
        old.append(abs(tile_gemm_efficiency(m, n, k, g, h200) / h200.gemm_efficiency("bf16") / measured - 1))
    assert sum(new) / len(new) == pytest.approx(0.0529, abs=0.0005)
    assert sum(new) / len(new) < 0.10 < sum(old) / len(old)
    assert sum(old) / len(old) == pytest.approx(0.3515, abs=0.0005)


def test_fp8_layer_shapes():
    """gemm_fp8.csv's 68 FP8 layer shapes against the FP8 grid of {128, 256, ..., 16384}^3: mean |error|
    7.5 % (the tile/wave model: 9.9 %; the coarser {128, 512, 2048, 8192}^3 grid of run 2 gave 11.2 %,
    its interior priced too fast). Small FP8 GEMMs are host-bound in eager PyTorch (a 2048^3 call is
    ~17 us of math), so shapes below ~4096 scatter between runs (docs/cost-model.md)."""
    from taskgraph.cost import tile_gemm_efficiency
    h200 = get_gpu("h200")
    plateau = FP8_PLATEAU * 1978.9
    rows = _rows("gemm_fp8.csv")
    errs, old = [], []
    for r in rows:
        m, n, k = int(r["m"]), int(r["n"]), int(r["k"])
        measured = float(r["tflops"]) / plateau
        errs.append(shape_factor(m, n, k, "fp8") / measured - 1)
        old.append(abs(tile_gemm_efficiency(m, n, k, 1, h200, "fp8") / h200.gemm_efficiency("fp8") / measured - 1))
    assert sum(abs(e) for e in errs) / len(errs) == pytest.approx(0.0754, abs=0.0005)
    assert sum(old) / len(old) == pytest.approx(0.0990, abs=0.0005)
    assert sum(abs(e) for e in errs) / len(errs) < sum(old) / len(old)
    assert max(abs(e) for e in errs) < 0.35


def _write(tmp_path, text: str) -> str:
    p = tmp_path / "gemm_shapes.yaml"
    p.write_text(text)
    return str(p)


_GOOD = """\
gpu: X
source: test
peak_tflops: {bf16: 1.0}
plateau_min: {bf16: 2}
plain:
  bf16:
    m: [1, 2]
    n: [1, 2]
    k: [1, 2]
    fraction: [[[0.1, 0.2], [0.3, 0.4]], [[0.5, 0.6], [0.7, 0.8]]]
grouped:
  bf16:
    rows: [1, 2]
    shapes:
      - {n: 4, k: 4, groups: [1, 2], fraction: [[0.1, 0.2], [0.3, 0.4]]}
"""


def test_small_table_by_hand(tmp_path):
    p = _write(tmp_path, _GOOD)
    assert gemm_shape_table(p).plain["bf16"].plateau == 0.8
    assert shape_factor(2, 2, 2, "bf16", p) == 1.0
    assert shape_factor(math.sqrt(2), 1, 1, "bf16", p) == pytest.approx(0.3 / 0.8, rel=1e-12)
    assert grouped_shape_factor(2, 2, 8, 8, p) == pytest.approx(0.4 / 0.8, rel=1e-12)


@pytest.mark.parametrize("old, new, expect", [
    ("[[0.5, 0.6], [0.7, 0.8]]]", "[[0.5, 0.6], [0.7, 1.8]]]", (r"plain.bf16.fraction\[1\]\[1\]\[1\] = 1.8 must be a "
                                                                r"fraction of the dense peak in \(0, 1.5\]")),
    ("[[0.5, 0.6], [0.7, 0.8]]]", "[[0.5, 0.6], [0.7]]]", r"plain.bf16.fraction\[1\]\[1\] must be a list of 2 entries"),
    ("    m: [1, 2]", "    m: [2, 1]", r"plain.bf16.m = \[2, 1\] must list at least two increasing positive integers"),
    ("plateau_min: {bf16: 2}", "plateau_min: {bf16: 4}", r"plateau_min.bf16 = 4 leaves no grid shape .* lower it"),
    ("groups: [1, 2]", "groups: [1, 2], extra: 1", r"shapes\[0\]: unknown field 'extra'"),
    ("source: test", "source: ''", r"source is empty"),
    ("    rows: [1, 2]", "    rows: [1, 2.5]", r"grouped.bf16.rows = \[1, 2.5\] must list"),
])
def test_bad_table_gives_one_clear_error(tmp_path, old, new, expect):
    assert old in _GOOD
    with pytest.raises(ConfigError, match=expect):
        gemm_shape_table(_write(tmp_path, _GOOD.replace(old, new)))


def test_moe_expert_operator_takes_the_grouped_table_in_every_pass():
    """Qwen3-30B-A3B on ep 8 at 512 tokens per rank on H100: 16 local experts of m_e = 256 rows;
    up [256, 1536, 2048] and down [256, 2048, 768]. Each pass's compute is the GEMM FLOPs at
    0.65 x the grouped factor of the FORWARD layout's (16 groups, 256 rows, n, k), scaled to the
    operator's FLOPs; the roofline then takes the max with its bytes and adds one launch per GEMM;
    forward and input-gradient passes add the token permutations' copy kernels."""
    from taskgraph.cost import op_time
    from taskgraph.model import get_model
    from taskgraph.operators import layer_operators
    h100 = get_gpu("h100")
    ops = layer_operators(get_model("qwen3-30b-a3b"), ep=8, dtype_bytes=2, flash_attention=True, layer_index=0,
                          micro_batch=1, seq_len=512, tp=1, sp=False)
    experts = {o.name: o for o in ops}["moe_experts"]
    up, down = experts.gemms
    assert (up.m, up.n, up.k, up.batch, down.n, down.k) == (256, 1536, 2048, 16, 2048, 768)
    eff = h100.efficiency
    listed = sum(g.flops for g in experts.gemms)
    per_flop = sum(g.flops / (h100.peak_flops("bf16") * 0.65 * grouped_shape_factor(16, 256, g.n, g.k))
                   for g in experts.gemms) / listed
    for pass_, flops, nbytes in (("fwd", experts.fwd_flops, experts.fwd_bytes),
                                 ("bwd_input", experts.bwd_input_flops, experts.bwd_input_bytes),
                                 ("bwd_weight", experts.bwd_weight_flops, experts.bwd_weight_bytes)):
        expect = max(flops * per_flop, nbytes / (h100.hbm_bandwidth * eff.hbm_efficiency)) + 2 * eff.launch_overhead
        if pass_ != "bwd_weight":   # the token permutations' copy kernels after the GEMMs (issue 38)
            expect += experts.copy_bytes / (h100.hbm_bandwidth * eff.hbm_efficiency) + \
                experts.copy_kernels * eff.launch_overhead
        assert op_time(experts, pass_, h100) == pytest.approx(expect, rel=1e-12), pass_


from hypothesis import given, settings
from hypothesis import strategies as st


@settings(max_examples=60, deadline=None)
@given(st.floats(4, 16), st.floats(6, 15), st.floats(5, 15))
def test_interpolation_stays_between_the_bracketing_grid_points(lm, ln, lk):
    """Linear interpolation in log2: the factor lies between the smallest and largest of the (up to 8)
    grid points around (2^lm, 2^ln, 2^lk), clamped ones included."""
    grid = gemm_shape_table().plain["bf16"]

    def around(axis, lx):
        xs = [math.log2(v) for v in axis]
        lo = max([i for i, x in enumerate(xs) if x <= lx], default=0)
        hi = min([i for i, x in enumerate(xs) if x >= lx], default=len(xs) - 1)
        return {lo, hi}
    corners = [grid.fraction[i][j][l] for i in around(grid.m, lm) for j in around(grid.n, ln)
               for l in around(grid.k, lk)]
    below = min(1, 2 ** lm / 64) * min(1, 2 ** ln / 128) * min(1, 2 ** lk / 64)   # the edge's time below
    v = shape_factor(2 ** lm, 2 ** ln, 2 ** lk) * grid.plateau / below
    assert min(corners) - 1e-12 <= v <= max(corners) + 1e-12
