"""Small helpers for validating user-facing config dicts (YAML/JSON).

Every error names the field (dotted path), the value and how to fix it; unknown keys get a
did-you-mean. Used by the pipeline file, the strategy file, model and topology loaders.
"""
from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Any, Iterable

from strategies.errors import ConfigError


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """``" (did you mean 'pp'?)"`` or ``""``."""
    close = difflib.get_close_matches(str(word), list(candidates), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_keys(d: dict, allowed: Iterable[str], where: str) -> None:
    """Raise on the first key of ``d`` not in ``allowed``."""
    allowed = list(allowed)
    if not isinstance(d, dict):
        raise ConfigError(f"{where or 'file'} must be a mapping of keys to values, got {type(d).__name__} {d!r}")
    for key in d:
        if key not in allowed:
            raise ConfigError(
                f"unknown key {_join(where, key)!r}{did_you_mean(key, allowed)}; "
                f"valid keys{' in ' + where if where else ''}: {', '.join(allowed)}"
            )


def _join(where: str, key: Any) -> str:
    return f"{where}.{key}" if where else str(key)


def get_int(d: dict, key: str, where: str, *, default: Any = ..., minimum: int | None = None) -> int:
    if key not in d:
        if default is ...:
            raise ConfigError(f"missing required field {_join(where, key)!r}: add it (an integer)")
        return default
    v = d[key]
    if isinstance(v, bool) or not isinstance(v, int):
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        else:
            raise ConfigError(f"{_join(where, key)} = {v!r} must be an integer")
    if minimum is not None and v < minimum:
        raise ConfigError(f"{_join(where, key)} = {v} must be >= {minimum}")
    return v


def get_float(d: dict, key: str, where: str, *, default: Any = ..., minimum: float | None = 0.0,
              positive: bool = False) -> float:
    if key not in d:
        if default is ...:
            raise ConfigError(f"missing required field {_join(where, key)!r}: add it (a number)")
        return default
    v = d[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ConfigError(f"{_join(where, key)} = {v!r} must be a number")
    v = float(v)
    if v != v or v in (float("inf"), float("-inf")):
        raise ConfigError(f"{_join(where, key)} = {v!r} must be a finite number")
    if positive and v <= 0:
        raise ConfigError(f"{_join(where, key)} = {v} must be > 0")
    if minimum is not None and v < minimum:
        raise ConfigError(f"{_join(where, key)} = {v} must be >= {minimum}")
    return v


def get_str(d: dict, key: str, where: str, *, default: Any = ..., choices: Iterable[str] | None = None) -> str:
    if key not in d:
        if default is ...:
            raise ConfigError(f"missing required field {_join(where, key)!r}: add it (a string)")
        return default
    v = d[key]
    if not isinstance(v, str):
        raise ConfigError(f"{_join(where, key)} = {v!r} must be a string")
    if choices is not None:
        choices = list(choices)
        if v not in choices:
            raise ConfigError(f"{_join(where, key)} = {v!r} is not one of {', '.join(choices)}{did_you_mean(v, choices)}")
    return v


def get_bool(d: dict, key: str, where: str, *, default: Any = ...) -> bool:
    if key not in d:
        if default is ...:
            raise ConfigError(f"missing required field {_join(where, key)!r}: add it (true or false)")
        return default
    v = d[key]
    if not isinstance(v, bool):
        raise ConfigError(f"{_join(where, key)} = {v!r} must be true or false")
    return v


def load_mapping(path_or_dict: Any, what: str = "file") -> dict:
    """Read a YAML or JSON file (or accept a dict) and return its top-level mapping."""
    if isinstance(path_or_dict, dict):
        return path_or_dict
    path = Path(path_or_dict)
    if not path.exists():
        raise ConfigError(f"{what} {str(path)!r} does not exist: check the path")
    if path.is_dir():
        raise ConfigError(f"{what} {str(path)!r} is a directory, not a file: give the path of a YAML or JSON file")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{what} {str(path)!r} cannot be read ({exc.__class__.__name__}: {exc}); check the path "
                          f"and that it is a text file") from None
    try:
        if path.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            import yaml
            data = yaml.safe_load(text)
    except (json.JSONDecodeError, Exception) as exc:  # yaml.YAMLError and friends
        if isinstance(exc, ConfigError):
            raise
        msg = str(exc).strip().splitlines()
        raise ConfigError(f"{what} {str(path)!r} is not valid {'JSON' if path.suffix == '.json' else 'YAML'}: "
                          f"{' '.join(m.strip() for m in msg[:4])}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{what} {str(path)!r} must contain a mapping at the top level, got {type(data).__name__}")
    return data


def set_dotted(d: dict, dotted: str, value: Any) -> dict:
    """Return a deep copy of ``d`` with ``a.b.c = value`` (for ``--set a.b.c=value``)."""
    import copy
    out = copy.deepcopy(d)
    keys = dotted.split(".")
    cur = out
    for k in keys[:-1]:
        nxt = cur.get(k)
        if nxt is None:
            nxt = cur[k] = {}
        if not isinstance(nxt, dict):
            raise ConfigError(f"--set {dotted}: {k!r} is not a section (it holds {nxt!r})")
        cur = nxt
    cur[keys[-1]] = value
    return out


def parse_set_value(text: str) -> Any:
    """``--set`` values are parsed as YAML scalars: ``16`` -> 16, ``true`` -> True, ``1f1b`` -> '1f1b'."""
    import yaml
    try:
        return yaml.safe_load(text)
    except Exception:
        return text
