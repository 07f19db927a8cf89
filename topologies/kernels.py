"""Kernel benchmarks by shape (``data/kernels.yaml``): what an attention kernel reaches at a sequence
length, head dim and mask, read off the kernels' own papers (FlashAttention-2 / -3, cuDNN) and measured
on an H200 (``benchmarks/kernel_data/h200-2026-11-26``).

Every figure is cited in the YAML. A query between the measured points interpolates: linear in
log2(sequence length) (the figures are taken at powers of two, and a kernel's fixed per-tile costs
amortise over the key loop, whose length doubles from point to point), linear in head dim; outside the
table's range the nearest point's value (512 below, 128k above: below 512 the model is not asked for
training shapes). A row not measured past some length (its trailing nulls), or below some length (its
leading nulls), continues by its kernel's measured ratio (``attention.extend``; a kernel without one
stays flat). A pass without a
causal row takes the non-causal row times the forward's causal / non-causal ratio at the same point (the
YAML's header says why); a GPU with causal rows only takes the unmasked figure from the causal one times
the kernel's unmasked / causal ratio on the next GPU of the architecture's list.

>>> round(attention_fraction("cudnn", "hopper", "fwd", 128, 2048, causal=True), 4)
0.4892
>>> round(attention_fraction("cudnn", "hopper", "fwd", 128, 2896, causal=True), 4)   # between 2k and 4k
0.5064
"""
from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache

from strategies.errors import ConfigError
from topologies.gpus import DATA_DIR, check_keys

KERNELS_PATH = os.path.join(DATA_DIR, "kernels.yaml")
ATTENTION_PASSES = ("fwd", "bwd", "fwd_bwd")


@dataclass(frozen=True)
class AttentionTable:
    """Attention curves: ``curves[(kernel, gpu, pass, head_dim, causal)]`` = fraction of the measuring
    GPU's dense peak at each of ``seq_len`` (leading and trailing nulls already extended); ``arch_gpus``:
    architecture -> its measuring GPUs, in order of preference;
    ``fallback``: architecture -> the architecture whose fractions it takes for a kernel its own GPUs have
    no rows of."""

    seq_len: tuple
    curves: Mapping
    arch_gpus: Mapping
    fallback: Mapping

    def kernels(self) -> tuple[str, ...]:
        return tuple(sorted({k[0] for k in self.curves}))


def _where(path: str) -> str:
    return f"kernel table {os.path.basename(path)!r}"


def attention_table(path: str = KERNELS_PATH) -> AttentionTable:
    """The attention curves of ``path``, checked (one error line naming the row and field)."""
    # one cache entry per file: ``attention_table()`` and ``attention_table(KERNELS_PATH)`` were two
    # (lru_cache keys on the arguments as given), so the table was read twice per process
    return _attention_table(str(path))


@cache
def _attention_table(path: str) -> AttentionTable:
    from strategies.documents import check_finite, load_document
    where = _where(path)
    doc = load_document(path, "kernel table")
    check_finite(doc, where)
    if not isinstance(doc, Mapping) or not isinstance(doc.get("attention"), Mapping):
        raise ConfigError(f"{where}: expected a top-level `attention:` mapping")
    check_keys(doc, ("attention", "gemm"), where)
    att = doc["attention"]
    check_keys(att, ("seq_len", "gpus", "arch_gpus", "fallback", "extend", "curves"), where + " attention")
    seq = att.get("seq_len")
    if not isinstance(seq, list) or len(seq) < 2 or any(not isinstance(s, int) or s < 1 for s in seq) \
            or sorted(set(seq)) != seq:
        raise ConfigError(f"{where}: attention.seq_len = {seq!r} must be increasing positive integers")
    gpus = att.get("gpus") or {}
    peaks = {}
    for g, d in gpus.items():
        p = (d or {}).get("peak_tflops")
        if isinstance(p, bool) or not isinstance(p, (int, float)) or p <= 0:
            raise ConfigError(f"{where}: attention.gpus.{g}.peak_tflops = {p!r} must be a positive number")
        peaks[str(g)] = float(p)
    curves = {}
    for i, row in enumerate(att.get("curves") or []):
        w = f"{where}: attention.curves[{i}]"
        if not isinstance(row, Mapping):
            raise ConfigError(f"{w} must be a mapping")
        check_keys(row, ("kernel", "gpu", "pass", "head_dim", "causal", "tflops", "source"), w)
        if str(row.get("gpu")) not in peaks:
            raise ConfigError(f"{w}: gpu = {row.get('gpu')!r} is not in attention.gpus ({', '.join(peaks)})")
        if row.get("pass") not in ATTENTION_PASSES:
            raise ConfigError(f"{w}: pass = {row.get('pass')!r} must be one of {', '.join(ATTENTION_PASSES)}")
        hd, causal, tf = row.get("head_dim"), row.get("causal"), row.get("tflops")
        if isinstance(hd, bool) or not isinstance(hd, int) or hd < 1:
            raise ConfigError(f"{w}: head_dim = {hd!r} must be a positive integer")
        if not isinstance(causal, bool):
            raise ConfigError(f"{w}: causal = {causal!r} must be true or false")
        if not isinstance(tf, list) or len(tf) != len(seq) or all(v is None for v in tf) or \
                any(v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0) for v in tf):
            raise ConfigError(f"{w}: tflops must list {len(seq)} positive numbers (null before the first or past "
                              f"the last measured length), one per attention.seq_len")
        first = next(i for i, v in enumerate(tf) if v is not None)
        n = tf.index(None, first) if None in tf[first:] else len(tf)
        if any(v is not None for v in tf[n:]):
            raise ConfigError(f"{w}: tflops = {tf!r} has a null between two numbers; only leading and trailing "
                              f"nulls (lengths outside the measured ones) are allowed")
        if not row.get("source"):
            raise ConfigError(f"{w}: source is empty; every figure names where it comes from")
        key = (str(row["kernel"]), str(row["gpu"]), row["pass"], hd, causal)
        if key in curves:
            raise ConfigError(f"{w} repeats kernel {key[0]}, gpu {key[1]}, pass {key[2]}, head_dim {hd}, "
                              f"causal {causal}; keep one")
        peak = peaks[key[1]]
        curves[key] = tuple(None if v is None else float(v) * 1e12 / (peak * 1e12) for v in tf)
    curves = _extended(curves, att.get("extend") or {}, peaks, where)
    arch_gpus = {}
    for a, g in (att.get("arch_gpus") or {}).items():
        gs = tuple(str(x) for x in (g if isinstance(g, list) else [g]))
        if not gs or any(x not in peaks for x in gs):
            raise ConfigError(f"{where}: attention.arch_gpus.{a} = {g!r} must name GPUs of attention.gpus "
                              f"({', '.join(peaks)})")
        arch_gpus[str(a)] = gs
    fallback = {str(a): str(b) for a, b in (att.get("fallback") or {}).items()}
    for a, b in fallback.items():
        if b not in arch_gpus:
            raise ConfigError(f"{where}: attention.fallback.{a} = {b!r} is not in attention.arch_gpus")
    return AttentionTable(tuple(seq), curves, arch_gpus, fallback)


def _combined(f: float, b: float) -> float:
    """Forward + backward throughput of the benchmark's FLOP weights (1 + 2.5 = 3.5 x forward)."""
    return 3.5 / (1.0 / f + 2.5 / b)


def _extended(curves: dict, extend: Mapping, peaks: Mapping, where: str) -> dict:
    """``curves`` with each row's leading and trailing nulls filled: value(E) x ref(s) / ref(E), E the
    row's nearest measured length and ref the kernel's ``extend`` row at the same pass (fwd_bwd: its fwd
    and bwd combined); flat without one (the YAML's header)."""
    refs = {}
    for kernel, spec in extend.items():
        w = f"{where}: attention.extend.{kernel}"
        if not isinstance(spec, Mapping):
            raise ConfigError(f"{w} must be a mapping of gpu, head_dim and causal")
        check_keys(spec, ("gpu", "head_dim", "causal"), w)
        gpu, hd, causal = str(spec.get("gpu")), spec.get("head_dim"), spec.get("causal")
        rows = {p: curves.get((str(kernel), gpu, p, hd, causal)) for p in ("fwd", "bwd")}
        if gpu not in peaks or any(r is None or None in r for r in rows.values()):
            raise ConfigError(f"{w} = {dict(spec)!r} must name a GPU whose fwd and bwd rows of kernel "
                              f"{kernel} at that head_dim and causal are measured at every seq_len")
        rows["fwd_bwd"] = tuple(_combined(f, b) for f, b in zip(rows["fwd"], rows["bwd"]))
        refs[str(kernel)] = rows
    out = {}
    for key, vals in curves.items():
        if None not in vals:
            out[key] = vals
            continue
        out[key] = _filled(vals, refs.get(key[0], {}).get(key[2]))
    return out


def _filled(vals: tuple, ref) -> tuple:
    """``vals`` with each null replaced by the nearest measured value (the first for a leading null, the
    last for a trailing one) times ``ref``'s ratio between the two lengths (flat when ``ref`` is None)."""
    measured = [i for i, v in enumerate(vals) if v is not None]
    out = []
    for i, v in enumerate(vals):
        if v is None:
            e = measured[0] if i < measured[0] else measured[-1]
            v = vals[e] * (ref[i] / ref[e] if ref else 1.0)
        out.append(v)
    return tuple(out)


def _interp(xs, ys, x: float) -> float:
    """Piecewise-linear ys(x) over increasing xs, the end values outside."""
    if x <= xs[0]:
        return ys[0]
    if x >= xs[-1]:
        return ys[-1]
    for i in range(1, len(xs)):
        if x <= xs[i]:
            t = (x - xs[i - 1]) / (xs[i] - xs[i - 1])
            return ys[i - 1] + t * (ys[i] - ys[i - 1])
    return ys[-1]   # pragma: no cover  (x < xs[-1] ends the loop above)


def _curve_at(table: AttentionTable, kernel: str, gpu: str, pass_: str, causal: bool, head_dim: float,
              seq: float) -> float | None:
    """Fraction of peak of one (kernel, gpu, pass, causal) family at (head_dim, seq), or None."""
    dims = sorted(k[3] for k in table.curves if k[:3] == (kernel, gpu, pass_) and k[4] == causal)
    if not dims:
        return None
    logs = [math.log2(s) for s in table.seq_len]
    x = math.log2(max(seq, 1.0))
    per_dim = [_interp(logs, table.curves[(kernel, gpu, pass_, d, causal)], x) for d in dims]
    return _interp(dims, per_dim, head_dim)


def _pass_at(table: AttentionTable, kernel: str, gpu: str, pass_: str, causal: bool, head_dim: float,
             seq: float) -> float | None:
    """``pass_``'s own rows, else the combined fwd_bwd ones; a missing causal row from the non-causal
    one times the forward's causal / non-causal ratio (module docstring)."""
    for p in (pass_, "fwd_bwd"):
        v = _curve_at(table, kernel, gpu, p, causal, head_dim, seq)
        if v is not None:
            return v
        if causal:
            nc = _curve_at(table, kernel, gpu, p, False, head_dim, seq)
            if nc is not None:
                fc = _pass_at(table, kernel, gpu, "fwd", True, head_dim, seq)
                fn = _pass_at(table, kernel, gpu, "fwd", False, head_dim, seq)
                if fc is not None and fn:
                    return nc * fc / fn
                return nc
    return None


def attention_fraction(kernel: str, architecture: str, pass_: str, head_dim: float, seq: float, *,
                       causal: bool, path: str = KERNELS_PATH) -> float | None:
    """Fraction of the dense bf16 peak ``kernel`` reaches on an ``architecture`` GPU in ``pass_`` ('fwd'
    or 'bwd') at ``head_dim`` and sequence length ``seq`` (its key-loop length), with or without a causal
    mask; None when the table has nothing for the kernel on that architecture (or its fallback)."""
    table = attention_table(path)
    # the architecture's own measuring GPUs first, then its fallback's (a kernel measured on Hopper only,
    # e.g. FlashAttention-3, keeps Hopper's fractions on Blackwell)
    gpus = table.arch_gpus.get(architecture, ()) + table.arch_gpus.get(table.fallback.get(architecture, ""), ())
    p, hd, s = "fwd" if pass_ == "fwd" else "bwd", float(head_dim), float(seq)
    for i, gpu in enumerate(gpus):
        v = _pass_at(table, kernel, gpu, p, causal, hd, s)
        if v is not None:
            return v
        if not causal:
            v = _pass_at(table, kernel, gpu, p, True, hd, s)
            if v is not None:
                return v * _unmasked_ratio(table, kernel, gpus[i + 1:], p, hd, s)
    return None


def _unmasked_ratio(table: AttentionTable, kernel: str, gpus: tuple, pass_: str, head_dim: float,
                    seq: float) -> float:
    """Unmasked / causal fraction of ``kernel`` at the point on the first of ``gpus`` that has both: what
    a GPU measured under the causal mask only takes for unmasked blocks (kernels.yaml header; GB200's
    FlashAttention-2 rows take H100's ratio); 1 without one."""
    for gpu in gpus:
        n = _pass_at(table, kernel, gpu, pass_, False, head_dim, seq)
        c = _pass_at(table, kernel, gpu, pass_, True, head_dim, seq)
        if n is not None and c:
            return n / c
    return 1.0


@cache
def _gemm_section(path: str) -> Mapping | None:
    """The checked document's ``gemm`` mapping (None when absent), read once per path."""
    from strategies.documents import check_finite, load_document
    doc = load_document(path, "kernel table")
    check_finite(doc, _where(path))
    gemm = doc.get("gemm") if isinstance(doc, Mapping) else None
    if gemm is not None and not isinstance(gemm, Mapping):
        raise ConfigError(f"{_where(path)}: gemm must be a mapping of kernels, rows and max_achievable")
    if gemm is not None:
        check_keys(gemm, ("kernels", "rows", "max_achievable"), _where(path) + " gemm")
    return gemm


@dataclass(frozen=True)
class GemmFigure:
    """One published GEMM figure: ``groups`` GEMMs of (m, n, k) in ``dtype`` at ``flops`` FLOP/s."""

    gpu: str
    dtype: str
    m: int
    n: int
    k: int
    groups: int
    flops: float
    source: str


@cache
def gemm_figures(path: str = KERNELS_PATH) -> tuple[GemmFigure, ...]:
    """The ``gemm.rows`` of ``path`` (published GEMM throughput by shape), checked."""
    where = _where(path)
    gemm = _gemm_section(path)
    if gemm is None:
        return ()
    out = []
    for i, row in enumerate(gemm.get("rows") or []):
        w = f"{where}: gemm.rows[{i}]"
        check_keys(row, ("gpu", "dtype", "m", "n", "k", "groups", "tflops", "source"), w)
        for key in ("m", "n", "k", "groups"):
            v = row.get(key)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"{w}: {key} = {v!r} must be a positive integer")
        tf = row.get("tflops")
        if isinstance(tf, bool) or not isinstance(tf, (int, float)) or tf <= 0 or not row.get("source"):
            raise ConfigError(f"{w}: tflops = {tf!r} must be a positive number and source must name where it comes from")
        out.append(GemmFigure(str(row["gpu"]), str(row["dtype"]), row["m"], row["n"], row["k"], row["groups"],
                              float(tf) * 1e12, str(row["source"])))
    return tuple(out)


GEMM_EPILOGUES = ("overlapped", "serial")


@dataclass(frozen=True)
class GemmKernel:
    """A GEMM kernel family (``gemm.kernels`` of kernels.yaml): ``epilogue`` 'overlapped' (the output
    write only enters the roofline's memory term; tiles: the GPU's catalog ones) or 'serial' (each wave
    of tiles writes its outputs after its main loop); ``block_m`` / ``block_n``: the kernel's own tile
    candidates (empty for 'overlapped')."""

    name: str
    epilogue: str
    block_m: tuple = ()
    block_n: tuple = ()
    source: str = ""


def _int_list(v, w: str, key: str) -> tuple:
    if not isinstance(v, list) or not v or any(isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in v):
        raise ConfigError(f"{w}: {key} = {v!r} must be a list of positive integers")
    return tuple(v)


@cache
def gemm_kernels(path: str = KERNELS_PATH) -> Mapping:
    """The ``gemm.kernels`` of ``path``: name -> :class:`GemmKernel`, checked. ``block_n`` is written
    ``[low, high, step]`` (every multiple of step from low to high)."""
    where = _where(path)
    gemm = _gemm_section(path)
    out = {}
    for name, row in ((gemm or {}).get("kernels") or {}).items():
        w = f"{where}: gemm.kernels.{name}"
        if not isinstance(row, Mapping):
            raise ConfigError(f"{w} must be a mapping")
        check_keys(row, ("epilogue", "block_m", "block_n", "source"), w)
        if row.get("epilogue") not in GEMM_EPILOGUES:
            raise ConfigError(f"{w}: epilogue = {row.get('epilogue')!r} must be one of {', '.join(GEMM_EPILOGUES)}")
        if not row.get("source"):
            raise ConfigError(f"{w}: source is empty; every figure names where it comes from")
        bm = bn = ()
        if row["epilogue"] == "serial":
            bm = tuple(sorted(_int_list(row.get("block_m"), w, "block_m")))
            lo_hi_step = _int_list(row.get("block_n"), w, "block_n")
            if len(lo_hi_step) != 3 or lo_hi_step[0] > lo_hi_step[1]:
                raise ConfigError(f"{w}: block_n = {row.get('block_n')!r} must be [low, high, step] with low <= high")
            bn = tuple(range(lo_hi_step[0], lo_hi_step[1] + 1, lo_hi_step[2]))
        out[str(name)] = GemmKernel(str(name), row["epilogue"], bm, bn, str(row["source"]))
    return out


def gemm_kernel(name: str, path: str = KERNELS_PATH) -> GemmKernel:
    """The kernel family ``name`` of ``gemm.kernels`` (one error line listing the known ones)."""
    kernels = gemm_kernels(path)
    if name not in kernels:
        raise ConfigError(f"GEMM kernel {name!r} is not in {_where(path)} gemm.kernels; known: "
                          f"{', '.join(sorted(kernels))}")
    return kernels[name]


@cache
def gemm_ceilings(path: str = KERNELS_PATH) -> Mapping:
    """``gemm.max_achievable`` of ``path``: (gpu, dtype) -> FLOP/s of the best shape of a search."""
    where = _where(path)
    gemm = _gemm_section(path)
    out = {}
    for i, row in enumerate((gemm or {}).get("max_achievable") or []):
        w = f"{where}: gemm.max_achievable[{i}]"
        check_keys(row, ("gpu", "dtype", "tflops", "source"), w)
        tf = row.get("tflops")
        if isinstance(tf, bool) or not isinstance(tf, (int, float)) or tf <= 0 or not row.get("source"):
            raise ConfigError(f"{w}: tflops = {tf!r} must be a positive number and source must name where it comes from")
        out[(str(row["gpu"]), str(row["dtype"]))] = float(tf) * 1e12
    return out
