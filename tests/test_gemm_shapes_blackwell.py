"""Blackwell's measured GEMM table (topologies/data/gemm_shapes_blackwell.yaml, [XLA-B200]: OpenXLA's
B200 GEMM table, CUPTI kernel times) and how taskgraph/cost.py prices Blackwell GEMMs from it. Hand
values come from benchmarks/kernel_data/xla-b200/gemm_grid.csv (TFLOP/s) over the B200's dense peaks
(2250 bf16, 4500 fp8 TFLOP/s), 4 significant digits as the generator writes them."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from strategies.errors import ConfigError
from topologies.gemm_shapes import (
    GEMM_SHAPES_BLACKWELL_PATH as P,
)
from topologies.gemm_shapes import (
    gemm_shape_table,
    grouped_shape_factor,
    has_grouped,
    shape_factor,
)
from topologies.gpus import get_gpu

#: the plateaus: the median of (4096, 8192, 16384) x 4096 x 4096, i.e. the 8192 one
#: (CSV: b = 2, m = 4096: bf16 1466.618, fp8 3123.542 TFLOP/s)
BF16_PLATEAU = 0.6518   # 1466.618 / 2250
FP8_PLATEAU = 0.6941    # 3123.542 / 4500


def test_table_is_what_the_generator_writes():
    from benchmarks.gemm_table_blackwell import generate
    assert Path(P).read_text() == generate()


def test_plateaus_and_axes():
    t = gemm_shape_table(P)
    assert t.plain["bf16"].plateau == BF16_PLATEAU
    assert t.plain["fp8"].plateau == FP8_PLATEAU
    assert t.plain["bf16"].m == (256, 512, 1024, 2048, 4096, 8192, 16384)
    assert t.plain["bf16"].n == t.plain["bf16"].k == (256, 512, 1024, 2048, 4096)
    assert not has_grouped(P)


def test_exact_entries():
    # bf16 2048 x 4096 x 1024 (b = 1): 911.351 TFLOP/s -> 0.4050
    assert shape_factor(2048, 4096, 1024, "bf16", P) == pytest.approx(0.4050 / BF16_PLATEAU, rel=1e-12)
    # m = 16384 is the b = 4, m = 4096 row: 1670.467 -> 0.7424, above the plateau
    assert shape_factor(16384, 4096, 4096, "bf16", P) == pytest.approx(0.7424 / BF16_PLATEAU, rel=1e-12)
    # fp8 2048 x 4096 x 1024: 1423.943 / 4500 -> 0.3164
    assert shape_factor(2048, 4096, 1024, "fp8", P) == pytest.approx(0.3164 / FP8_PLATEAU, rel=1e-12)
    # fp4 takes the fp8 grid ([FP4EFF]); fp16 the bf16 one
    assert shape_factor(2048, 4096, 1024, "fp4", P) == shape_factor(2048, 4096, 1024, "fp8", P)
    assert shape_factor(2048, 4096, 1024, "fp16", P) == shape_factor(2048, 4096, 1024, "bf16", P)


def test_interpolation_and_clamps():
    # halfway (log2) from k = 1024 to 2048: the mean of 0.4050 and 1172.847 / 2250 -> 0.5213
    assert shape_factor(2048, 4096, 2 ** 10.5, "bf16", P) == pytest.approx((0.4050 + 0.5213) / 2 / BF16_PLATEAU,
                                                                            rel=1e-12)
    # above the grid (beyond_grid: plateau): the edge's fraction, at most the plateau's (S <= 1): the
    # measured 16384 x 4096 x 4096 keeps its S = 0.7424 / 0.6518 = 1.14, a larger GEMM gets 1
    assert shape_factor(16384, 4096, 4096, "bf16", P) > 1.13
    assert shape_factor(65536, 8192, 8192, "bf16", P) == 1.0
    assert shape_factor(16384, 4096, 8192, "bf16", P) == 1.0
    assert shape_factor(65536, 2048, 1024, "bf16", P) == shape_factor(16384, 2048, 1024, "bf16", P) < 1.0
    # below: the edge's time (fraction x size / smallest)
    assert shape_factor(128, 4096, 4096, "bf16", P) == pytest.approx(shape_factor(256, 4096, 4096, "bf16", P) / 2,
                                                                       rel=1e-12)


def test_blackwell_gemms_take_the_table_grouped_ones_their_own_pricing():
    from taskgraph.cost import gemm_efficiency, tile_gemm_efficiency
    for name in ("b200", "gb200", "gb300"):
        g = get_gpu(name)
        for dt in ("bf16", "fp8", "fp4"):
            assert gemm_efficiency(2048, 4096, 1024, 1, g, dt) == \
                pytest.approx(g.gemm_efficiency(dt) * shape_factor(2048, 4096, 1024, dt, P), rel=1e-12)
        # a strided batch: the plain (m x batch, n, k) GEMM
        assert gemm_efficiency(2048, 4096, 4096, 4, g) == \
            pytest.approx(g.gemm_efficiency("bf16") * shape_factor(8192, 4096, 4096, "bf16", P), rel=1e-12)
        # no grouped measurement in the [XLA-B200] table: a grouped launch of experts takes torchao's B200
        # share times Hopper's measured roll-off (tests/test_blackwell_grouped_figures.py); fp4 the tile model
        assert gemm_efficiency(256, 2048, 7168, 8, g, grouped=(256, 2048, 7168)) == \
            pytest.approx(0.5017 * 0.5665 / 0.6448, rel=1e-12)
        assert gemm_efficiency(256, 2048, 7168, 8, g, "fp4", grouped=(256, 2048, 7168)) == \
            tile_gemm_efficiency(256, 2048, 7168, 8, g, "fp4")
    # B200 by hand: 0.63 x 0.4050 / 0.6518 (the tile model gave 0.5449: 256 x 256 tiles, 128 of 148 SMs)
    b200 = get_gpu("b200")
    assert b200.gemm_efficiency("bf16") == 0.63
    assert gemm_efficiency(2048, 4096, 1024, 1, b200) == pytest.approx(0.63 * 0.4050 / 0.6518, rel=1e-12)
    assert math.isclose(tile_gemm_efficiency(2048, 4096, 1024, 1, b200), 0.5448648648648649, rel_tol=1e-12)


def test_beyond_grid_must_be_a_known_choice(tmp_path):
    p = tmp_path / "t.yaml"
    p.write_text(Path(P).read_text().replace("beyond_grid: plateau", "beyond_grid: cap"))
    with pytest.raises(ConfigError, match=r"beyond_grid = 'cap' must be 'edge' .* or 'plateau'"):
        gemm_shape_table(str(p))


def test_table_without_grouped_section(tmp_path):
    p = tmp_path / "t.yaml"
    p.write_text("gpu: X\nsource: test\npeak_tflops: {bf16: 1.0}\nplateau_min: {bf16: 2}\nplain:\n  bf16:\n"
                 "    m: [1, 2]\n    n: [1, 2]\n    k: [1, 2]\n"
                 "    fraction: [[[0.1, 0.2], [0.3, 0.4]], [[0.5, 0.6], [0.7, 0.8]]]\n")
    assert not has_grouped(str(p))
    assert shape_factor(2, 2, 2, "bf16", str(p)) == 1.0
    with pytest.raises(ConfigError, match="has no grouped GEMM measurement"):
        grouped_shape_factor(2, 2, 8, 8, str(p))
