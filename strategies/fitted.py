"""The constants fitted to measured runs: ``topologies/data/fitted.yaml``, read in one place.

Every constant execsim fitted to measured runs (rather than took from a source) lives in that one
file with its value, its meaning, the rows it was fitted on and how (issue 26, item 7). The GPU
catalog (``topologies/gpus.py``: fields written ``fitted`` in ``gpus.yaml``), the cluster presets
(``topologies/cluster.py``) and the strategy file's defaults (``strategies/strategy_file.py``) read
their fitted values from here, and ``benchmarks/validate.py --cv`` refits them without one source
group at a time. The reader sits on the lowest floor (``strategies/``) because the strategy file's
``p2p_host_gap_us`` default is one of them; it imports nothing above it.

>>> fitted_value("p2p_host_gap_us")
500
>>> sorted(catalog_values()["A100-SXM-80GB"])
['elementwise_efficiency', 'gemm_efficiency_max', 'gemm_tile_n']
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from strategies.errors import ConfigError, brief

FITTED_PATH = Path(__file__).resolve().parent.parent / "topologies" / "data" / "fitted.yaml"
#: Kinds of target a constant sets (``sets: kind:...``).
TARGETS = ("gpu", "option", "cluster", "preset")
OBJECTIVES = ("mean_abs_error", "mean_signed_error", "paired_signed_difference", "plateau")
FIT_KEYS = ("name", "rows", "data", "objective", "pairs", "fallback", "how", "constants")
CONSTANT_KEYS = ("value", "meaning", "sets", "search", "bounds", "tied")


@dataclass(frozen=True)
class Search:
    """The deterministic search ``--cv`` runs for one constant: a grid or a list of values."""

    values: tuple  # every candidate, in increasing order


@dataclass(frozen=True)
class Constant:
    """One fitted constant.

    name: its name in fitted.yaml, e.g. ``"a100.gemm_efficiency_max"``.
    value: the fitted value, in the units of the field it sets.
    meaning: what it is, in words.
    kind: ``gpu`` (an ``efficiency`` field of catalog GPUs), ``option`` (a strategy-file option's
        default), ``cluster`` (a cluster field's default) or ``preset`` (a field of cluster presets).
    names: the catalog GPUs or presets it applies to (empty for ``option`` / ``cluster``).
    field: the field it sets.
    search: candidates for a refit (``None``: not searched: tied, or not refitted by ``--cv``).
    bounds: the source of the search's bounds.
    tied_to, tied_offset: moves with another constant of its fit (value = other + offset).
    """

    name: str
    value: Any
    meaning: str
    kind: str
    names: tuple[str, ...]
    field: str
    search: Search | None = None
    bounds: str = ""
    tied_to: str | None = None
    tied_offset: float = 0.0


@dataclass(frozen=True)
class Fit:
    """One fit: constants fitted together on the same rows with one objective.

    rows: row-id globs of ``benchmarks/validation/published_runs.csv`` (or of ``data``).
    data: the measured table when it is not published_runs.csv (``--cv`` does not refit those).
    pairs: ``(a, b)`` for ``paired_signed_difference``: each fitted row whose id contains ``a`` is
        paired with the row whose id has ``b`` in its place (two runs that differ in one setting).
    fallback_rows / transfer_from / transfer_scale: what ``--cv`` does when the left-out group holds
        every row: fit on other rows, or take another constant times a sourced ratio.
    fallback_objective: the objective on the fallback rows (default: ``objective``).
    """

    name: str
    rows: tuple[str, ...]
    objective: str
    how: str
    constants: tuple[Constant, ...]
    data: str | None = None
    fallback_rows: tuple[str, ...] = ()
    transfer_from: str | None = None
    transfer_scale: float = 1.0
    transfer_source: str = ""
    pairs: tuple[str, str] | None = None
    fallback_objective: str | None = None


def _check_keys(d: Mapping, allowed, where: str) -> None:
    for k in d:
        if k not in allowed:
            raise ConfigError(f"{where}: unknown field {brief(k)}; valid fields are {', '.join(allowed)}")


def _number(v, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ConfigError(f"{where} = {brief(v)} must be a finite number")
    return v


def _search(d: Any, where: str) -> Search:
    if not isinstance(d, Mapping):
        raise ConfigError(f"{where} = {brief(d)} must be {{low, high, step}} or {{values: [...]}}")
    if "values" in d:
        _check_keys(d, ("values",), where)
        vals = d["values"]
        if not isinstance(vals, list) or not vals:
            raise ConfigError(f"{where}.values = {brief(vals)} must be a non-empty list of numbers")
        return Search(tuple(sorted(_number(v, f"{where}.values") for v in vals)))
    _check_keys(d, ("low", "high", "step"), where)
    lo, hi, step = (_number(d.get(k), f"{where}.{k}") for k in ("low", "high", "step"))
    if not (step > 0 and hi >= lo):
        raise ConfigError(f"{where}: needs step > 0 and high >= low, got {brief(dict(d))}")
    n = int(round((hi - lo) / step))
    if n > 1000:
        raise ConfigError(f"{where}: {n + 1} grid points; keep a search to at most 1001")
    # round to the step's decimals so that 0.5 + 30 * 0.01 is 0.8 exactly, as written in the file
    digits = max(0, -math.floor(math.log10(step)) + 2)
    return Search(tuple(round(lo + i * step, digits) for i in range(n + 1)))


def _constant(name: str, d: Any, where: str) -> Constant:
    if not isinstance(d, Mapping):
        raise ConfigError(f"{where}: expected a mapping of {', '.join(CONSTANT_KEYS)}, got {brief(d)}")
    _check_keys(d, CONSTANT_KEYS, where)
    sets = d.get("sets")
    parts = sets.split(":") if isinstance(sets, str) else []
    kind = parts[0] if parts else None
    if kind not in TARGETS or len(parts) != (3 if kind in ("gpu", "preset") else 2):
        raise ConfigError(f"{where}.sets = {brief(sets)} must be gpu:<names>:<field>, preset:<names>:<field>, "
                          f"option:<field> or cluster:<field>")
    names = tuple(parts[1].split(",")) if len(parts) == 3 else ()
    tied = d.get("tied")
    if tied is not None and (not isinstance(tied, Mapping) or set(tied) != {"to", "offset"}):
        raise ConfigError(f"{where}.tied = {brief(tied)} must be {{to: <constant>, offset: <number>}}")
    return Constant(
        name=name, value=_number(d.get("value"), f"{where}.value"), meaning=str(d.get("meaning", "")),
        kind=kind, names=names, field=parts[-1],
        search=None if d.get("search") is None else _search(d["search"], f"{where}.search"),
        bounds=str(d.get("bounds", "")),
        tied_to=None if tied is None else str(tied["to"]),
        tied_offset=0.0 if tied is None else float(_number(tied["offset"], f"{where}.tied.offset")))


def _fit(d: Any, where: str) -> Fit:
    if not isinstance(d, Mapping):
        raise ConfigError(f"{where}: expected a mapping of {', '.join(FIT_KEYS)}, got {brief(d)}")
    _check_keys(d, FIT_KEYS, where)
    name = str(d.get("name", ""))
    where = f"{where} ({name})"
    if d.get("objective") not in OBJECTIVES:
        raise ConfigError(f"{where}.objective = {brief(d.get('objective'))} must be one of {', '.join(OBJECTIVES)}")
    rows = d.get("rows")
    if not isinstance(rows, list) or not rows or not all(isinstance(r, str) for r in rows):
        raise ConfigError(f"{where}.rows = {brief(rows)} must be a non-empty list of row ids")
    consts = d.get("constants")
    if not isinstance(consts, Mapping) or not consts:
        raise ConfigError(f"{where}.constants must be a non-empty mapping of name -> constant")
    pairs = d.get("pairs")
    if (d["objective"] == "paired_signed_difference") != (pairs is not None) or pairs is not None and (
            not isinstance(pairs, Mapping) or set(pairs) != {"a", "b"}
            or not all(isinstance(v, str) and v for v in pairs.values())):
        raise ConfigError(f"{where}.pairs = {brief(pairs)}: objective paired_signed_difference needs "
                          f"pairs: {{a: <id part>, b: <id part>}}, and only it")
    fb = d.get("fallback") or {}
    if (not isinstance(fb, Mapping) or not set(fb) <= {"rows", "transfer", "objective"}
            or len(set(fb) - {"objective"}) > 1 or ("objective" in fb and "rows" not in fb)):
        raise ConfigError(f"{where}.fallback = {brief(fb)} must be {{rows: [...]}} (optionally with objective) "
                          f"or {{transfer: {{from, scale, source}}}}")
    if "objective" in fb and fb["objective"] not in ("mean_abs_error", "mean_signed_error"):
        raise ConfigError(f"{where}.fallback.objective = {brief(fb['objective'])} must be mean_abs_error or mean_signed_error")
    tr = fb.get("transfer") or {}
    if tr:
        _check_keys(tr, ("from", "scale", "source"), f"{where}.fallback.transfer")
    return Fit(name=name, rows=tuple(rows), objective=d["objective"], how=str(d.get("how", "")),
               constants=tuple(_constant(str(k), v, f"{where}.constants.{k}") for k, v in consts.items()),
               data=None if d.get("data") is None else str(d["data"]),
               fallback_rows=tuple(fb.get("rows") or ()),
               transfer_from=None if not tr else str(tr["from"]),
               transfer_scale=1.0 if not tr else float(_number(tr.get("scale"), f"{where}.fallback.transfer.scale")),
               transfer_source=str(tr.get("source", "")),
               pairs=None if pairs is None else (pairs["a"], pairs["b"]),
               fallback_objective=fb.get("objective"))


def load_fits(path: str | Path | None = None) -> tuple[Fit, ...]:
    """Every fit of ``path`` (default: the bundled ``topologies/data/fitted.yaml``), checked."""
    if path is None:
        return _default_fits()
    return _load(Path(path))


def _load(path: Path) -> tuple[Fit, ...]:
    from strategies.documents import check_finite, load_document
    where = f"fitted constants {brief(str(path), 120)}"
    doc = load_document(path, "fitted constants")
    check_finite(doc, where)
    if not isinstance(doc, Mapping) or not isinstance(doc.get("fits"), list):
        raise ConfigError(f"{where}: expected a top-level `fits:` list")
    _check_keys(doc, ("fits",), where)
    fits = tuple(_fit(f, f"{where}: fits[{i}]") for i, f in enumerate(doc["fits"]))
    seen: set[str] = set()
    for c in (c for f in fits for c in f.constants):
        if c.name in seen:
            raise ConfigError(f"{where}: constant {brief(c.name)} is declared twice; keep one")
        seen.add(c.name)
    for f in fits:
        for c in f.constants:
            if c.tied_to is not None and c.tied_to not in {o.name for o in f.constants}:
                raise ConfigError(f"{where}: {c.name}.tied.to = {brief(c.tied_to)} is not a constant of fit {f.name!r}")
        if f.transfer_from is not None and f.transfer_from not in seen:
            raise ConfigError(f"{where}: fit {f.name!r} transfers from {brief(f.transfer_from)}, which is not declared")
    return fits


@lru_cache(maxsize=1)
def _default_fits() -> tuple[Fit, ...]:
    return _load(FITTED_PATH)


def constants(fits: tuple[Fit, ...] | None = None) -> dict[str, Constant]:
    """``{name: Constant}`` over every fit."""
    return {c.name: c for f in (fits or load_fits()) for c in f.constants}


def fitted_value(name: str):
    """The fitted value of constant ``name`` (ConfigError naming the known ones on a miss)."""
    table = constants()
    if name not in table:
        raise ConfigError(f"no fitted constant {brief(name)}; known: {', '.join(sorted(table))}")
    return table[name].value


def catalog_values(kind: str = "gpu", fits: tuple[Fit, ...] | None = None) -> dict[str, dict[str, Any]]:
    """``{catalog name: {field: value}}`` for the constants of ``kind`` gpu (GPU ``efficiency``
    fields) or preset (cluster preset fields)."""
    out: dict[str, dict[str, Any]] = {}
    for c in constants(fits).values():
        if c.kind == kind:
            for n in c.names:
                out.setdefault(n, {})[c.field] = c.value
    return out


def resolve_fitted(entry: Mapping, table: Mapping[str, Any], where: str) -> dict:
    """``entry`` with every field written ``fitted`` replaced by its value from ``table``
    (``{field: value}``); a ``fitted`` field with no fitted value is an error."""
    out = dict(entry)
    for k, v in entry.items():
        if v == "fitted":
            if k not in table:
                raise ConfigError(f"{where}: field {brief(k)} is written `fitted` but topologies/data/fitted.yaml "
                                  f"declares no fitted value for it; give a number")
            out[k] = table[k]
    return out


__all__ = [
    "FITTED_PATH",
    "Constant",
    "Fit",
    "Search",
    "catalog_values",
    "constants",
    "fitted_value",
    "load_fits",
    "resolve_fitted",
]
