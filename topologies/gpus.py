"""GPU catalog: peak rates and cost-model efficiency knobs per GPU model.

The data lives in ``topologies/data/gpus.yaml`` (user-facing, unit-suffixed field names); this
module converts it to SI units (FLOP/s, bytes, bytes/s, seconds) in frozen :class:`GPUSpec`
objects. Every figure in the YAML cites its NVIDIA datasheet/whitepaper source.

>>> get_gpu("h100").name
'H100-SXM-80GB'
>>> get_gpu("H100-SXM-80GB").peak_flops("bf16") / 1e12
989.4
"""
from __future__ import annotations

import itertools
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from functools import lru_cache
from typing import Any

from strategies.errors import ConfigError, brief

DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
GPU_CATALOG_PATH = os.path.join(DATA_DIR, "gpus.yaml")

# Unit conversions (SI inside). NVIDIA quotes bandwidth in decimal units (1 GB/s = 1e9 B/s) and
# HBM capacity in binary units (an "80GB" A100 reports 81920 MiB in nvidia-smi).
TFLOPS = 1e12
GB_PER_S = 1e9
GBIT_PER_S = 1e9 / 8
GIB = 2**30
US = 1e-6

#: dtype name -> GPUSpec attribute holding its dense peak FLOP/s.
DTYPES = {
    "bf16": "peak_flops_bf16",
    "fp16": "peak_flops_fp16",
    "fp8": "peak_flops_fp8",
    "fp4": "peak_flops_fp4",
    "tf32": "peak_flops_tf32",
    "fp32": "peak_flops_fp32",
}
_DTYPE_ALIASES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32",
                  "float": "fp32", "e4m3": "fp8", "e5m2": "fp8", "float8": "fp8",
                 "nvfp4": "fp4", "e2m1": "fp4", "float4": "fp4"}


def did_you_mean(word: str, choices) -> str:
    """A ``" (did you mean 'x'?)"`` suffix for error messages, or ``""`` when nothing is close."""
    import difflib  # only an error needs it: not loaded on the simulate path
    word, choices = str(word), [str(c) for c in choices]
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    if not close and len(word) >= 2:  # an abbreviation such as 'rail' for 'rail-optimized'
        close = [c for c in choices if c.lower().startswith(word.lower())][:1]
    return f" (did you mean {brief(close[0])}?)" if close else ""


def check_keys(data: Mapping, allowed, where: str) -> None:
    """Raise ConfigError naming the first unknown key in ``data``, with a did-you-mean hint."""
    allowed = list(allowed)
    for key in data:
        if key not in allowed:
            raise ConfigError(
                f"{where}: unknown field {brief(key)}{did_you_mean(key, allowed)}; "
                f"valid fields are {', '.join(sorted(allowed))}"
            )


def number(data: Mapping, key: str, where: str, *, minimum: float = 0.0, strict: bool = True,
           maximum: float | None = None, integer: bool = False, optional: bool = False):
    """Read a validated number from ``data[key]`` (``None`` allowed only when ``optional``)."""
    if key not in data or data[key] is None:
        if optional:
            return None
        raise ConfigError(f"{where}: missing required field {brief(key)}; add `{key}: <number>`")
    value = data[key]
    ok_type = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok_type or (isinstance(value, float) and not math.isfinite(value)):
        kind = "an integer" if integer else "a finite number"
        raise ConfigError(f"{where}: field {brief(key)} = {brief(value)} must be {kind}")
    bad_low = value <= minimum if strict else value < minimum
    if bad_low or (maximum is not None and value > maximum):
        rel = ">" if strict else ">="
        rng = f"{rel} {minimum}" + (f" and <= {maximum}" if maximum is not None else "")
        raise ConfigError(f"{where}: field {brief(key)} = {brief(value)} is out of range; it must be {rng}")
    return value


@dataclass(frozen=True)
class GPUEfficiency:
    """Cost-model knobs for one GPU model (placeholders, calibrated in benchmarks/validate.py).

    gemm_efficiency_max: fraction of dense bf16/fp16 peak reached by a large, well-shaped GEMM.
    gemm_efficiency_max_fp8: same for FP8 GEMMs against the FP8 peak; ``None`` when no FP8.
    gemm_tile_m: M extent of the dominant GEMM kernel's CTA tile (for wave quantization).
    gemm_tile_n: N extent of that tile.
    gemm_tile_k: K extent of that tile.
    attention_fwd_efficiency: fraction of dense peak reached by fused (Flash) attention forward.
    attention_bwd_efficiency: fraction of dense peak reached by fused attention backward.
    hbm_efficiency: fraction of peak HBM bandwidth a streaming copy sustains.
    elementwise_efficiency: fraction of peak HBM bandwidth elementwise/norm/softmax kernels reach.
    launch_overhead: fixed per-kernel cost in seconds (launch latency plus tail).
    optimizer_efficiency: fraction of peak HBM bandwidth the fused Adam kernel sustains over the
        bytes it must move (``taskgraph/overheads.py`` adam_step_s); ``None``: hbm_efficiency.
    gemm_epilogue_overlap: GEMM kernels overlap one tile's epilogue (output and accumulation
        traffic) with another tile's math (Hopper warp-specialized kernels); False = the epilogue
        follows the main loop (Ampere), so weight-gradient accumulation adds to the GEMM time.
    gemm_efficiency_max_fp4: same for block-scaled FP4 (NVFP4) GEMMs against the FP4 peak; ``None``:
        the FP8 knob's value (ASSUMED: no published FP4 GEMM-by-shape figures, see gpus.yaml [FP4EFF]).
    """

    gemm_efficiency_max: float
    gemm_efficiency_max_fp8: float | None
    gemm_tile_m: int
    gemm_tile_n: int
    gemm_tile_k: int
    attention_fwd_efficiency: float
    attention_bwd_efficiency: float
    hbm_efficiency: float
    elementwise_efficiency: float
    launch_overhead: float
    gemm_epilogue_overlap: bool = True
    optimizer_efficiency: float | None = None
    gemm_efficiency_max_fp4: float | None = None


#: YAML field names of the ``efficiency`` block.
EFFICIENCY_FIELDS = (
    "gemm_efficiency_max", "gemm_efficiency_max_fp8", "gemm_tile_m", "gemm_tile_n", "gemm_tile_k",
    "attention_fwd_efficiency", "attention_bwd_efficiency", "hbm_efficiency",
    "elementwise_efficiency", "launch_overhead_us", "gemm_epilogue_overlap", "optimizer_efficiency",
    "gemm_efficiency_max_fp4",
)


@dataclass(frozen=True)
class GPUSpec:
    """One GPU model, SI units throughout.

    name: canonical catalog name, e.g. ``"H100-SXM-80GB"``.
    aliases: other accepted spellings (lower-case), e.g. ``("h100", "h100-sxm")``.
    architecture: NVIDIA architecture family (``"ampere"``, ``"hopper"``, ``"blackwell"``).
    peak_flops_bf16: dense bf16 Tensor-Core peak, FLOP/s (no 2:4 sparsity).
    peak_flops_fp16: dense fp16 Tensor-Core peak, FLOP/s.
    peak_flops_fp8: dense fp8 Tensor-Core peak, FLOP/s; ``None`` when the GPU has no FP8.
    peak_flops_tf32: dense tf32 Tensor-Core peak, FLOP/s.
    peak_flops_fp32: non-tensor FP32 peak, FLOP/s.
    hbm_capacity: HBM capacity in bytes (datasheet GB converted as GiB).
    hbm_bandwidth: peak HBM bandwidth, bytes/s.
    nvlink_bandwidth: native NVLink bandwidth per GPU per direction, bytes/s.
    sm_count: number of streaming multiprocessors.
    efficiency: cost-model efficiency knobs (:class:`GPUEfficiency`).
    source: citation for the figures.
    power_w: board power (W) the peak figures hold at; ``None`` when the catalog does not say.
    power_curve: ``((watts, dense bf16 TFLOP/s), ...)`` of this die at several board powers, from
        NVIDIA's figures for parts that share it (:func:`power_scale`); empty: no published curve.
    power_curve_source: citation for the curve.
    peak_flops_fp4: dense FP4 (NVFP4, block-scaled E2M1) Tensor-Core peak, FLOP/s; ``None`` when the
        GPU has no FP4 Tensor Cores (before Blackwell).
    """

    name: str
    aliases: tuple[str, ...]
    architecture: str
    peak_flops_bf16: float
    peak_flops_fp16: float
    peak_flops_fp8: float | None
    peak_flops_tf32: float
    peak_flops_fp32: float
    hbm_capacity: float
    hbm_bandwidth: float
    nvlink_bandwidth: float
    sm_count: int
    efficiency: GPUEfficiency
    source: str = ""
    power_w: float | None = None
    power_curve: tuple[tuple[float, float], ...] = ()
    power_curve_source: str = ""
    peak_flops_fp4: float | None = None

    def peak_flops(self, dtype: str = "bf16") -> float:
        """Dense peak FLOP/s for ``dtype`` (bf16, fp16, fp8, fp4, tf32, fp32; torch-style aliases ok)."""
        key = _DTYPE_ALIASES.get(str(dtype).lower(), str(dtype).lower())
        if key not in DTYPES:
            raise ConfigError(
                f"dtype {brief(dtype)} is not known{did_you_mean(key, DTYPES)}; "
                f"use one of {', '.join(DTYPES)}"
            )
        value = getattr(self, DTYPES[key])
        if value is None:
            raise ConfigError(
                f"GPU {brief(self.name)} has no {key} Tensor Cores (peak_flops_{key} is None); "
                f"pick dtype bf16/fp16 or a GPU with {key} support (Hopper or newer for fp8, Blackwell for fp4)"
            )
        return value

    def gemm_efficiency(self, dtype: str = "bf16") -> float:
        """The calibrated max GEMM efficiency for ``dtype`` (fp8 uses its own knob; fp4 its own, or fp8's)."""
        key = _DTYPE_ALIASES.get(str(dtype).lower(), str(dtype).lower())
        if key == "fp8":
            self.peak_flops("fp8")  # raises a clear error on GPUs without FP8
            if self.efficiency.gemm_efficiency_max_fp8 is None:
                raise ConfigError(f"GPU {brief(self.name)}: efficiency.gemm_efficiency_max_fp8 is not set")
            return self.efficiency.gemm_efficiency_max_fp8
        if key == "fp4":
            self.peak_flops("fp4")  # raises a clear error on GPUs without FP4
            if self.efficiency.gemm_efficiency_max_fp4 is not None:
                return self.efficiency.gemm_efficiency_max_fp4
            return self.gemm_efficiency("fp8")
        return self.efficiency.gemm_efficiency_max


#: Top-level GPU fields accepted in YAML.
GPU_FIELDS = (
    "aliases", "architecture", "source", "tflops_bf16", "tflops_fp16", "tflops_fp8", "tflops_tf32",
    "tflops_fp32", "hbm_gb", "hbm_bw_gbps", "nvlink_gbps", "sm_count", "efficiency", "power_w", "power_curve",
    "tflops_fp4",
)
#: Peak-rate fields a power cap scales (Tensor Cores and CUDA cores run at the capped clock; HBM,
#: NVLink and capacity do not change).
CLOCKED_FIELDS = ("tflops_bf16", "tflops_fp16", "tflops_fp8", "tflops_tf32", "tflops_fp32", "tflops_fp4")


def _power_curve(data: Any, where: str) -> tuple[tuple[tuple[float, float], ...], str]:
    """``power_curve: {points: [[watts, tflops_bf16], ...], source: "..."}`` -> (points, source)."""
    where = f"{where}.power_curve"
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: expected {{points: [[watts, dense bf16 TFLOP/s], ...], source: ...}}, "
                          f"got {brief(data)}")
    check_keys(data, ("points", "source"), where)
    pts = data.get("points")
    ok = isinstance(pts, list) and len(pts) >= 2 and all(
        isinstance(p, list) and len(p) == 2 and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                                    and math.isfinite(x) and x > 0 for x in p) for p in pts)
    if not ok or [p[0] for p in pts] != sorted({p[0] for p in pts}):
        raise ConfigError(f"{where}.points = {brief(pts)} must be two or more [watts, TFLOP/s] pairs of positive "
                          f"numbers in increasing watts")
    if not str(data.get("source", "")).strip():
        raise ConfigError(f"{where}: add `source:` (where the figures come from)")
    return tuple((float(w), float(t)) for w, t in pts), str(data["source"])


def power_scale(gpu: GPUSpec, power_w: float) -> float:
    """Factor on ``gpu``'s peak rates when its board power is capped at ``power_w`` watts.

    A power cap lowers the sustained clock (DVFS); peak FLOP/s scale with the clock. The curve is
    NVIDIA's own dense BF16 figures for parts sharing the die at different board powers (e.g.
    GH100: H100 NVL 835.5 TFLOP/s at 400 W, H100 SXM 989.4 at 700 W), interpolated linearly in
    watts; the factor is curve(power_w) / curve(gpu.power_w). Outside the curve: one ConfigError.

    >>> round(power_scale(get_gpu("h100"), 500), 6)  # (835.5 + (989.4 - 835.5) / 3) / 989.4
    0.896301
    """
    where = f"gpu {brief(gpu.name)}: power_w = {brief(power_w)}"
    if isinstance(power_w, bool) or not isinstance(power_w, (int, float)) or not math.isfinite(power_w):
        raise ConfigError(f"{where} must be a number of watts")
    pts = gpu.power_curve
    if not pts or gpu.power_w is None:
        raise ConfigError(f"{where}: NVIDIA publishes no figures for this GPU at other board powers, so there is "
                          f"no power curve; remove power_w or give the tflops_* at that power directly")
    lo, hi = pts[0][0], pts[-1][0]
    if not lo <= power_w <= hi:
        raise ConfigError(f"{where} is outside the published curve, {lo:g}-{hi:g} W ({gpu.power_curve_source}); "
                          f"use a value in that range or give the tflops_* directly")

    def at(w: float) -> float:
        for (w0, t0), (w1, t1) in itertools.pairwise(pts):
            if w0 <= w <= w1:
                return t0 + (t1 - t0) * (w - w0) / (w1 - w0)
        raise ConfigError(f"gpu {brief(gpu.name)}: its own power_w {gpu.power_w:g} W is outside its curve")
    return at(float(power_w)) / at(float(gpu.power_w))


def _efficiency_from_dict(data: Any, where: str) -> GPUEfficiency:
    where = f"{where}.efficiency"
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: expected a mapping of {', '.join(EFFICIENCY_FIELDS)}, got {brief(data)}")
    check_keys(data, EFFICIENCY_FIELDS, where)
    frac = dict(minimum=0.0, maximum=1.0)
    return GPUEfficiency(
        gemm_efficiency_max=float(number(data, "gemm_efficiency_max", where, **frac)),
        gemm_efficiency_max_fp8=(None if data.get("gemm_efficiency_max_fp8") is None
                                 else float(number(data, "gemm_efficiency_max_fp8", where, **frac))),
        gemm_tile_m=number(data, "gemm_tile_m", where, integer=True),
        gemm_tile_n=number(data, "gemm_tile_n", where, integer=True),
        gemm_tile_k=number(data, "gemm_tile_k", where, integer=True),
        attention_fwd_efficiency=float(number(data, "attention_fwd_efficiency", where, **frac)),
        attention_bwd_efficiency=float(number(data, "attention_bwd_efficiency", where, **frac)),
        hbm_efficiency=float(number(data, "hbm_efficiency", where, **frac)),
        elementwise_efficiency=float(number(data, "elementwise_efficiency", where, **frac)),
        launch_overhead=float(number(data, "launch_overhead_us", where, strict=False)) * US,
        gemm_epilogue_overlap=_optional_bool(data, "gemm_epilogue_overlap", where, default=True),
        optimizer_efficiency=(None if data.get("optimizer_efficiency") is None
                              else float(number(data, "optimizer_efficiency", where, **frac))),
        gemm_efficiency_max_fp4=(None if data.get("gemm_efficiency_max_fp4") is None
                                 else float(number(data, "gemm_efficiency_max_fp4", where, **frac))),
    )


def _optional_bool(data: Mapping, key: str, where: str, *, default: bool) -> bool:
    value = data.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(f"{where}: field {brief(key)} = {brief(value)} must be true or false")
    return value


def gpu_from_dict(name: str, data: Mapping, where: str | None = None) -> GPUSpec:
    """Build a :class:`GPUSpec` from one YAML entry (user units: TFLOP/s, GB, GB/s, us).

    Raises ConfigError naming the field, the value and the fix on malformed input; ``where`` names
    the entry in errors (default ``gpu '<name>'``; a strategy file's inline GPU: ``cluster.gpu``).
    """
    where = where or f"gpu {brief(name)}"
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: expected a mapping of GPU fields, got {type(data).__name__}")
    check_keys(data, GPU_FIELDS, where)
    aliases = data.get("aliases") or ()
    if not isinstance(aliases, (list, tuple)) or not all(isinstance(a, str) for a in aliases):
        raise ConfigError(f"{where}: field 'aliases' = {brief(aliases)} must be a list of strings")
    tflops_fp8 = number(data, "tflops_fp8", where, optional=True)
    tflops_fp4 = number(data, "tflops_fp4", where, optional=True)
    power_w = number(data, "power_w", where, optional=True)
    curve, curve_src = _power_curve(data["power_curve"], where) if data.get("power_curve") is not None else ((), "")
    if curve and power_w is None:
        raise ConfigError(f"{where}: a power_curve needs `power_w:` (the board power the tflops_* figures hold at)")
    if "efficiency" not in data:
        raise ConfigError(f"{where}: missing required field 'efficiency' (a mapping of "
                          f"{', '.join(EFFICIENCY_FIELDS)})")
    return GPUSpec(
        name=str(name),
        aliases=tuple(a.lower() for a in aliases),
        architecture=str(data.get("architecture", "unknown")),
        peak_flops_bf16=float(number(data, "tflops_bf16", where)) * TFLOPS,
        peak_flops_fp16=float(number(data, "tflops_fp16", where)) * TFLOPS,
        peak_flops_fp8=None if tflops_fp8 is None else float(tflops_fp8) * TFLOPS,
        peak_flops_tf32=float(number(data, "tflops_tf32", where)) * TFLOPS,
        peak_flops_fp32=float(number(data, "tflops_fp32", where)) * TFLOPS,
        hbm_capacity=float(number(data, "hbm_gb", where)) * GIB,
        hbm_bandwidth=float(number(data, "hbm_bw_gbps", where)) * GB_PER_S,
        nvlink_bandwidth=float(number(data, "nvlink_gbps", where)) * GB_PER_S,
        sm_count=number(data, "sm_count", where, integer=True),
        efficiency=_efficiency_from_dict(data["efficiency"], where),
        source=str(data.get("source", "")),
        power_w=None if power_w is None else float(power_w),
        power_curve=curve,
        power_curve_source=curve_src,
        peak_flops_fp4=None if tflops_fp4 is None else float(tflops_fp4) * TFLOPS,
    )


def gpu_to_dict(gpu: GPUSpec) -> dict:
    """Inverse of :func:`gpu_from_dict` (user units), e.g. to override a few fields."""
    e = gpu.efficiency
    return {
        "aliases": list(gpu.aliases),
        "architecture": gpu.architecture,
        "source": gpu.source,
        "tflops_bf16": gpu.peak_flops_bf16 / TFLOPS,
        "tflops_fp16": gpu.peak_flops_fp16 / TFLOPS,
        "tflops_fp8": None if gpu.peak_flops_fp8 is None else gpu.peak_flops_fp8 / TFLOPS,
        "tflops_fp4": None if gpu.peak_flops_fp4 is None else gpu.peak_flops_fp4 / TFLOPS,
        "tflops_tf32": gpu.peak_flops_tf32 / TFLOPS,
        "tflops_fp32": gpu.peak_flops_fp32 / TFLOPS,
        "hbm_gb": gpu.hbm_capacity / GIB,
        "hbm_bw_gbps": gpu.hbm_bandwidth / GB_PER_S,
        "nvlink_gbps": gpu.nvlink_bandwidth / GB_PER_S,
        "sm_count": gpu.sm_count,
        "efficiency": {
            **{f.name: getattr(e, f.name) for f in fields(e) if f.name != "launch_overhead"},
            "launch_overhead_us": e.launch_overhead / US,
        },
        "power_w": gpu.power_w,
        "power_curve": ({"points": [list(p) for p in gpu.power_curve], "source": gpu.power_curve_source}
                        if gpu.power_curve else None),
    }


def load_gpu_catalog(path: str | None = None) -> dict[str, GPUSpec]:
    """Load a GPU catalog YAML (default: the bundled one) into ``{name: GPUSpec}``."""
    if path is None:
        return dict(_default_catalog())
    return _load_catalog(path)


def _load_catalog(path: str) -> dict[str, GPUSpec]:
    from strategies.documents import check_finite, load_document
    doc = load_document(path, "GPU catalog")
    check_finite(doc, f"GPU catalog {brief(str(path), 120)}")
    if not isinstance(doc, Mapping) or not isinstance(doc.get("gpus"), Mapping):
        raise ConfigError(f"GPU catalog {brief(path)}: expected a top-level `gpus:` mapping of name -> fields")
    catalog = {str(name): gpu_from_dict(str(name), _with_fitted(str(name), entry))
               for name, entry in doc["gpus"].items()}
    seen: dict[str, str] = {}
    for gpu in catalog.values():
        for key in (gpu.name.lower(), *gpu.aliases):
            if key in seen and seen[key] != gpu.name:
                raise ConfigError(f"GPU catalog {brief(path)}: alias {brief(key)} is used by both "
                                  f"{brief(seen[key])} and {brief(gpu.name)}; make aliases unique")
            seen[key] = gpu.name
    return catalog


def _with_fitted(name: str, entry: Any) -> Any:
    """A catalog entry whose ``efficiency`` fields written ``fitted`` take their value from
    ``topologies/data/fitted.yaml`` (the constants fitted to measured runs, declared in one place)."""
    if not isinstance(entry, Mapping) or not isinstance(entry.get("efficiency"), Mapping):
        return entry
    from strategies.fitted import catalog_values, resolve_fitted
    eff = resolve_fitted(entry["efficiency"], catalog_values("gpu").get(name, {}), f"gpu {brief(name)}.efficiency")
    return {**entry, "efficiency": eff}


@lru_cache(maxsize=1)
def _default_catalog() -> dict[str, GPUSpec]:
    return _load_catalog(GPU_CATALOG_PATH)


def _lookup_table(catalog: Mapping[str, GPUSpec]) -> dict[str, GPUSpec]:
    table = {}
    for gpu in catalog.values():
        table[gpu.name.lower()] = gpu
        for alias in gpu.aliases:
            table[alias] = gpu
    return table


def list_gpus() -> tuple[str, ...]:
    """Canonical names of the bundled GPUs."""
    return tuple(_default_catalog())


def get_gpu(name: str | GPUSpec, catalog: Mapping[str, GPUSpec] | None = None) -> GPUSpec:
    """Look a GPU up by canonical name or alias (case-insensitive); did-you-mean on a miss.

    >>> get_gpu("a100").hbm_bandwidth / 1e9
    2039.0
    """
    if isinstance(name, GPUSpec):
        return name
    catalog = _default_catalog() if catalog is None else catalog
    table = _lookup_table(catalog)
    key = str(name).strip().lower()
    if key in table:
        return table[key]
    # suggest the canonical name of the closest name or alias: a name the list below prints (issue 41)
    import difflib
    close = difflib.get_close_matches(key, list(table), n=1, cutoff=0.6)
    hint = f" (did you mean {brief(table[close[0]].name)}?)" if close else did_you_mean(key, list(catalog))
    raise ConfigError(
        f"unknown GPU {brief(name)}{hint}; known GPUs: {', '.join(catalog)} "
        f"(or define one inline in the cluster YAML under `gpu:`)"
    )


def gpu_with_overrides(base: str | GPUSpec, overrides: Mapping, name: str | None = None,
                       where: str | None = None) -> GPUSpec:
    """A catalog GPU with some user-unit fields replaced (``efficiency`` merges key by key).

    ``power_w`` caps the board power: every peak rate scales by :func:`power_scale` (unless the
    override gives that rate itself); HBM, NVLink and capacity stay.
    """
    gpu = get_gpu(base)
    data = gpu_to_dict(gpu)
    if overrides.get("power_w") is not None and overrides["power_w"] != gpu.power_w:
        k = power_scale(gpu, overrides["power_w"])
        for f in CLOCKED_FIELDS:
            if data[f] is not None and f not in overrides:
                data[f] = data[f] * k
    if overrides:
        data["aliases"] = []  # a modified part is not the catalog part any more
        data["source"] = f"{gpu.source}; overridden: {', '.join(sorted(overrides))}"
        name = name or f"{gpu.name}-custom"
    for key, value in overrides.items():
        if key == "efficiency" and isinstance(value, Mapping):
            data["efficiency"] = {**data["efficiency"], **value}
        else:
            data[key] = value
    return gpu_from_dict(name or gpu.name, data, where)


__all__ = [
    "DTYPES",
    "GPU_CATALOG_PATH",
    "GPUEfficiency",
    "GPUSpec",
    "get_gpu",
    "gpu_from_dict",
    "gpu_to_dict",
    "gpu_with_overrides",
    "list_gpus",
    "load_gpu_catalog",
    "power_scale",
]
