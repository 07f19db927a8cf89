"""Measured GEMM throughput by shape: the shape factor taskgraph/cost.py multiplies a GPU's calibrated
large-GEMM efficiency by, one table per architecture (:data:`GEMM_SHAPE_TABLES`): Hopper's
``data/gemm_shapes.yaml`` ([EXECSIM-H200], plain and grouped) and Blackwell's
``data/gemm_shapes_blackwell.yaml`` ([XLA-B200], plain only).

    S(m, n, k)              = measured(m, n, k) / plateau                        (plain GEMMs)
    S_grouped(g, r, n, k)   = measured_grouped(g groups of r rows, n, k) / plateau

``plateau`` is the median measured fraction of the grid shapes with m, n and k all >= the table's
``plateau_min`` (the YAML header gives the values). Between grid points a plain GEMM interpolates
linearly in log2(m), log2(n), log2(k) (the grid is log-spaced: each step doubles a dimension, and a
kernel's fixed per-tile and per-launch costs amortise over the doubled work). Outside the grid it is
clamped: above the largest size the edge's fraction (the plateau holds; a table with ``beyond_grid:
plateau`` -- Blackwell's, whose grid stops below the power-limited sizes -- at most the plateau), below the smallest the edge's
TIME (the fraction scales by size / smallest size: a GEMM narrower than the smallest measured one still
fills a whole tile and pays the same per-call floor -- e.g. a router GEMM of n = 8 experts takes the
time of n = 128). A grouped GEMM interpolates each measured expert shape's grid linearly in
log2(groups) and log2(rows per group), clamped the same way in rows (fewer than 16 rows per group: the
time of 16) and by fraction in groups (fewer than 4 groups: the 4-group fraction), then weights the expert shapes by inverse squared
distance in (log2 n, log2 k) (Shepard 1968, "A two-dimensional interpolation function for irregularly-
spaced data": exact at a measured shape, between the measured values elsewhere) -- the nine measured
(n, k) pairs are not a grid.

>>> round(shape_factor(8192, 8192, 64, "bf16"), 4)        # short K: a quarter of the plateau
0.2612
>>> round(shape_factor(8192, 8192, 90.50966799187809, "bf16"), 4)   # halfway (log2) to k = 128
0.3732
"""
from __future__ import annotations

import math
import os
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache, lru_cache

from strategies.errors import ConfigError
from topologies.gpus import DATA_DIR, check_keys

GEMM_SHAPES_PATH = os.path.join(DATA_DIR, "gemm_shapes.yaml")
GEMM_SHAPES_BLACKWELL_PATH = os.path.join(DATA_DIR, "gemm_shapes_blackwell.yaml")
#: GPU architecture -> the measured table its GEMMs are priced from (taskgraph/cost.py).
#: hopper: measured on an H200 ([EXECSIM-H200]); every Hopper part of the catalog (H100 SXM / PCIe /
#: NVL / HBM2e, H800, H200, H20) has the same SM design (GH100: 4th-generation tensor cores, WGMMA,
#: TMA; NVIDIA Hopper architecture whitepaper). blackwell: OpenXLA's B200 table ([XLA-B200],
#: gemm_shapes_blackwell.yaml); GB200 and GB300 take it too (the same 5th-generation tensor cores,
#: tcgen05; NVIDIA Blackwell / Blackwell Ultra technical briefs). Parts differ in SM count, clocks and
#: memory (docs/cost-model.md says what is assumed). Ampere has no table: the tile/wave model.
GEMM_SHAPE_TABLES = {"hopper": GEMM_SHAPES_PATH, "blackwell": GEMM_SHAPES_BLACKWELL_PATH}
MEASURED_ARCHITECTURES = tuple(GEMM_SHAPE_TABLES)


@dataclass(frozen=True)
class PlainGrid:
    """``fraction[i][j][l]``: measured fraction of dense peak at (m[i], n[j], k[l])."""

    m: tuple
    n: tuple
    k: tuple
    fraction: tuple
    plateau: float
    #: past the grid's largest m, n or k: False = the edge's fraction (Hopper: the grid reaches the
    #: power-limited sizes); True = at most the plateau (Blackwell: the grid stops below them)
    cap_beyond: bool = False


@dataclass(frozen=True)
class GroupedShape:
    """One expert shape (n, k) of the grouped table: ``fraction[g][r]`` at (groups[g], rows[r])."""

    n: int
    k: int
    groups: tuple
    fraction: tuple


@dataclass(frozen=True)
class GemmShapeTable:
    gpu: str
    plain: Mapping          # dtype -> PlainGrid
    rows: tuple             # rows per group of the grouped table
    grouped: tuple          # GroupedShape, bf16
    grouped_plateau: float  # the bf16 plateau


def _where(path: str) -> str:
    return f"GEMM shape table {os.path.basename(path)!r}"


def _axis(v, w: str) -> tuple:
    if not isinstance(v, list) or len(v) < 2 or any(isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in v) \
            or sorted(set(v)) != v:
        raise ConfigError(f"{w} = {v!r} must list at least two increasing positive integers")
    return tuple(v)


def _fractions(v, shape: tuple, w: str):
    """A nested list of ``shape`` of fractions in (0, 1.5], as tuples."""
    if len(shape) == 0:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1.5:
            raise ConfigError(f"{w} = {v!r} must be a fraction of the dense peak in (0, 1.5]; regenerate the "
                              f"table with `python -m benchmarks.gemm_table`")
        return float(v)
    if not isinstance(v, list) or len(v) != shape[0]:
        raise ConfigError(f"{w} must be a list of {shape[0]} entries (one per grid point); regenerate the "
                          f"table with `python -m benchmarks.gemm_table`")
    return tuple(_fractions(x, shape[1:], f"{w}[{i}]") for i, x in enumerate(v))


def _plateau(m: tuple, n: tuple, k: tuple, frac: tuple, lo: int) -> float:
    """Median fraction of the grid shapes with m, n and k all >= ``lo`` (0 when there is none)."""
    vals = [frac[i][j][l] for i, a in enumerate(m) for j, b in enumerate(n) for l, c in enumerate(k)
            if min(a, b, c) >= lo]
    return statistics.median(vals) if vals else 0.0


def gemm_shape_table(path: str = GEMM_SHAPES_PATH) -> GemmShapeTable:
    """The table of ``path``, checked (one error line naming the field, the value and the fix)."""
    return _load(str(path))


@cache
def _load(path: str) -> GemmShapeTable:
    from strategies.documents import check_finite, load_document
    where = _where(path)
    doc = load_document(path, "GEMM shape table")
    check_finite(doc, where)
    if not isinstance(doc, Mapping):
        raise ConfigError(f"{where}: expected a mapping with gpu, peak_tflops, plateau_min, plain and grouped")
    check_keys(doc, ("gpu", "source", "peak_tflops", "plateau_min", "beyond_grid", "plain", "grouped"), where)
    beyond = doc.get("beyond_grid", "edge")
    if beyond not in ("edge", "plateau"):
        raise ConfigError(f"{where}: beyond_grid = {beyond!r} must be 'edge' (the edge's fraction past the grid) "
                          f"or 'plateau' (at most the plateau there)")
    if not doc.get("source"):
        raise ConfigError(f"{where}: source is empty; the table names where it was measured")
    plain, pmin = doc.get("plain"), doc.get("plateau_min")
    if not isinstance(plain, Mapping) or "bf16" not in plain or not isinstance(pmin, Mapping):
        raise ConfigError(f"{where}: plain must map dtypes (bf16 at least) to grids, plateau_min dtypes to sizes")
    grids = {}
    for dtype, t in plain.items():
        w = f"{where}: plain.{dtype}"
        if not isinstance(t, Mapping):
            raise ConfigError(f"{w} must be a mapping of m, n, k and fraction")
        check_keys(t, ("m", "n", "k", "fraction"), w)
        m, n, k = (_axis(t.get(a), f"{w}.{a}") for a in ("m", "n", "k"))
        frac = _fractions(t.get("fraction"), (len(m), len(n), len(k)), f"{w}.fraction")
        lo = pmin.get(dtype)
        if isinstance(lo, bool) or not isinstance(lo, int) or lo < 1:
            raise ConfigError(f"{where}: plateau_min.{dtype} = {lo!r} must be a positive integer")
        plateau = _plateau(m, n, k, frac, lo)
        if plateau <= 0:
            raise ConfigError(f"{where}: plateau_min.{dtype} = {lo} leaves no grid shape with m, n and k all "
                              f">= it; lower it to at most {min(m[-1], n[-1], k[-1])}")
        grids[str(dtype)] = PlainGrid(m, n, k, frac, plateau, beyond == "plateau")
    if "grouped" not in doc:   # no grouped measurement (Blackwell): grouped launches keep the tile model
        return GemmShapeTable(str(doc.get("gpu")), grids, (), (), grids["bf16"].plateau)
    grouped = (doc.get("grouped") or {}).get("bf16") if isinstance(doc.get("grouped"), Mapping) else None
    if not isinstance(grouped, Mapping):
        raise ConfigError(f"{where}: grouped.bf16 must be a mapping of rows and shapes (or leave grouped out)")
    check_keys(grouped, ("rows", "shapes"), f"{where}: grouped.bf16")
    rows = _axis(grouped.get("rows"), f"{where}: grouped.bf16.rows")
    shapes, seen = [], set()
    for i, s in enumerate(grouped.get("shapes") or []):
        w = f"{where}: grouped.bf16.shapes[{i}]"
        if not isinstance(s, Mapping):
            raise ConfigError(f"{w} must be a mapping of n, k, groups and fraction")
        check_keys(s, ("n", "k", "groups", "fraction"), w)
        for a in ("n", "k"):
            v = s.get(a)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"{w}.{a} = {v!r} must be a positive integer")
        if (s["n"], s["k"]) in seen:
            raise ConfigError(f"{w} repeats n = {s['n']}, k = {s['k']}; keep one")
        seen.add((s["n"], s["k"]))
        gs = _axis(s.get("groups"), f"{w}.groups")
        shapes.append(GroupedShape(s["n"], s["k"], gs, _fractions(s.get("fraction"), (len(gs), len(rows)),
                                                                   f"{w}.fraction")))
    if not shapes:
        raise ConfigError(f"{where}: grouped.bf16.shapes is empty; regenerate with `python -m benchmarks.gemm_table`")
    return GemmShapeTable(str(doc.get("gpu")), grids, rows, tuple(shapes), grids["bf16"].plateau)


def _bracket(xs: tuple, x: float) -> tuple[int, float]:
    """(i, t): x lies t of the way from xs[i] to xs[i + 1] in log2, clamped to the ends."""
    lx = math.log2(max(x, 1e-300))
    if lx <= math.log2(xs[0]):
        return 0, 0.0
    for i in range(1, len(xs)):
        hi = math.log2(xs[i])
        if lx <= hi:
            lo = math.log2(xs[i - 1])
            return i - 1, (lx - lo) / (hi - lo)
    return len(xs) - 2, 1.0


def _below(xs: tuple, x: float) -> float:
    """The fraction's scale below the grid's smallest size: the edge's time, so size / smallest size."""
    return min(1.0, x / xs[0])


def _plain_fraction(grid: PlainGrid, m: float, n: float, k: float) -> float:
    (i, a), (j, b), (l, c) = _bracket(grid.m, m), _bracket(grid.n, n), _bracket(grid.k, k)
    f = grid.fraction
    total = 0.0
    for di, wa in ((0, 1.0 - a), (1, a)):
        for dj, wb in ((0, 1.0 - b), (1, b)):
            for dl, wc in ((0, 1.0 - c), (1, c)):
                w = wa * wb * wc
                if w:
                    total += w * f[i + di][j + dj][l + dl]
    return total * _below(grid.m, m) * _below(grid.n, n) * _below(grid.k, k)


def _grouped_fraction(s: GroupedShape, rows: tuple, groups: float, r: float) -> float:
    (i, a), (j, b) = _bracket(s.groups, groups), _bracket(rows, r)
    f = s.fraction
    return ((1 - a) * ((1 - b) * f[i][j] + b * f[i][j + 1])
            + a * ((1 - b) * f[i + 1][j] + b * f[i + 1][j + 1])) * _below(rows, r)


@lru_cache(maxsize=65536)
def shape_factor(m: float, n: float, k: float, dtype: str = "bf16", path: str = GEMM_SHAPES_PATH) -> float:
    """Measured throughput of an (m, n, k) GEMM relative to the table's large-shape plateau (module
    docstring). ``dtype`` without a grid of its own takes bf16's (fp16: the same tensor-core rate),
    except fp4, which takes fp8's where there is one (gpus.yaml [FP4EFF]: NVFP4 GEMMs are assumed to
    reach the FP8 share of their peak; no per-shape FP4 figure was found)."""
    table = _load(path)
    grid = table.plain.get(dtype) or (table.plain.get("fp8") if dtype == "fp4" else None) or table.plain["bf16"]
    s = _plain_fraction(grid, m, n, k) / grid.plateau
    if grid.cap_beyond and (m > grid.m[-1] or n > grid.n[-1] or k > grid.k[-1]):
        return min(s, 1.0)
    return s


def has_grouped(path: str = GEMM_SHAPES_PATH) -> bool:
    """Whether the table of ``path`` measured grouped GEMMs (Blackwell's does not)."""
    return bool(_load(path).grouped)


@lru_cache(maxsize=65536)
def grouped_shape_factor(groups: float, rows: float, n: float, k: float, path: str = GEMM_SHAPES_PATH) -> float:
    """Measured throughput of a grouped GEMM (``groups`` groups of ``rows`` rows, each against its own
    [n, k] weight) relative to the bf16 plateau (module docstring). Only for a table with grouped
    shapes (:func:`has_grouped`)."""
    table = _load(path)
    if not table.grouped:
        raise ConfigError(f"{_where(path)} has no grouped GEMM measurement; price grouped launches otherwise")
    ln, lk = math.log2(n), math.log2(k)
    num = den = 0.0
    for s in table.grouped:
        v = _grouped_fraction(s, table.rows, groups, rows)
        d2 = (math.log2(s.n) - ln) ** 2 + (math.log2(s.k) - lk) ** 2
        if d2 == 0.0:
            return v / table.grouped_plateau
        num += v / d2
        den += 1.0 / d2
    return num / den / table.grouped_plateau
