"""Small helpers for validating user-facing config dicts (YAML/JSON).

Every error names the field (dotted path), the value and how to fix it; unknown keys get a
did-you-mean. Used by the pipeline file, the strategy file, model and topology loaders.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from strategies.errors import ConfigError, brief
from strategies.limits import MAX_INT


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """``" (did you mean 'pp'?)"`` or ``""``."""
    import difflib  # only an error needs it: not loaded on the simulate path
    word = str(word)[:100] if isinstance(word, str) else brief(word, 100)
    close = difflib.get_close_matches(word, [str(c) for c in candidates], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


#: a section with more keys than this names only the nearest half of them in an unknown-key error
MAX_LISTED_KEYS = 30


def check_keys(d: dict, allowed: Iterable[str], where: str) -> None:
    """Raise on the first key of ``d`` not in ``allowed``."""
    allowed = list(allowed)
    if not isinstance(d, dict):
        raise ConfigError(f"{where or 'file'} must be a mapping of keys to values, got {type(d).__name__} {brief(d)}")
    for key in d:
        if key not in allowed:
            listed = ', '.join(allowed)
            if len(allowed) > MAX_LISTED_KEYS:   # one line stays readable: the nearest names, and where the rest are
                import difflib
                near = difflib.get_close_matches(str(key)[:100], allowed, n=MAX_LISTED_KEYS // 2, cutoff=0.0)
                listed = f"{', '.join(near)} (the nearest of {len(allowed)}; docs/strategy-file.md lists all)"
            raise ConfigError(
                f"unknown key {brief(_join(where, key))}{did_you_mean(key, allowed)}; "
                f"valid keys{' in ' + where if where else ''}: {listed}"
            )


def _join(where: str, key: Any) -> str:
    return f"{where}.{key}" if where else str(key)


def check_int(v: Any, name: str, *, minimum: int | None = None, maximum: int | None = MAX_INT,
              why: str = "") -> int:
    """``v`` if it is an integer in ``[minimum, maximum]``, else one ConfigError naming ``name``.

    A float is refused even when integral (``2.0e+30`` is not a count); ``why`` explains the maximum.

    >>> check_int(2.0, "parallel.tp")
    Traceback (most recent call last):
    ...
    strategies.errors.ConfigError: parallel.tp = 2.0 must be an integer (write it without a decimal point or exponent)
    """
    if isinstance(v, bool) or not isinstance(v, int):
        hint = (" (write it without a decimal point or exponent)" if isinstance(v, float) else
                " (it was read as text: write plain digits such as 128, without quotes, '_' or ':')"
                if isinstance(v, str) else "")
        raise ConfigError(f"{name} = {brief(v)} must be an integer{hint}")
    if minimum is not None and v < minimum:
        raise ConfigError(f"{name} = {brief(v)} must be >= {minimum}")
    if maximum is not None and v > maximum:
        raise ConfigError(f"{name} = {brief(v)} is over the limit of {maximum:,}{why}")
    return v


def check_number(v: Any, name: str, *, minimum: float | None = 0.0, positive: bool = False,
                 maximum: float | None = None) -> float:
    """``float(v)`` if ``v`` is a finite number in range, else one ConfigError naming ``name``."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        hint = (" (it was read as text: write a plain number such as 300e9 or 1.5, without quotes or '_')"
                if isinstance(v, str) else "")
        raise ConfigError(f"{name} = {brief(v)} must be a number{hint}")
    try:
        f = float(v)
    except OverflowError:
        raise ConfigError(f"{name} = {brief(v)} is too large: give a finite number") from None
    if f != f or f in (float("inf"), float("-inf")):
        raise ConfigError(f"{name} = {brief(v)} must be a finite number")
    if positive and f <= 0:
        raise ConfigError(f"{name} = {brief(v)} must be > 0")
    if minimum is not None and f < minimum:
        raise ConfigError(f"{name} = {brief(v)} must be >= {minimum}")
    if maximum is not None and f > maximum:
        raise ConfigError(f"{name} = {brief(v)} must be <= {maximum}")
    return f


def get_int(d: dict, key: str, where: str, *, default: Any = ..., minimum: int | None = None,
            maximum: int | None = MAX_INT, why: str = "") -> int:
    if key not in d:
        if default is ...:
            raise ConfigError(f"missing required field {_join(where, key)!r}: add it (an integer)")
        return default
    return check_int(d[key], _join(where, key), minimum=minimum, maximum=maximum, why=why)


def get_float(d: dict, key: str, where: str, *, default: Any = ..., minimum: float | None = 0.0,
              positive: bool = False) -> float:
    if key not in d:
        if default is ...:
            raise ConfigError(f"missing required field {_join(where, key)!r}: add it (a number)")
        return default
    return check_number(d[key], _join(where, key), minimum=minimum, positive=positive)


def get_str(d: dict, key: str, where: str, *, default: Any = ..., choices: Iterable[str] | None = None) -> str:
    if key not in d:
        if default is ...:
            raise ConfigError(f"missing required field {_join(where, key)!r}: add it (a string)")
        return default
    v = d[key]
    if not isinstance(v, str):
        raise ConfigError(f"{_join(where, key)} = {brief(v)} must be a string")
    if choices is not None:
        choices = list(choices)
        if v not in choices:
            raise ConfigError(f"{_join(where, key)} = {brief(v)} is not one of {', '.join(choices)}{did_you_mean(v, choices)}")
    return v


def get_bool(d: dict, key: str, where: str, *, default: Any = ...) -> bool:
    if key not in d:
        if default is ...:
            raise ConfigError(f"missing required field {_join(where, key)!r}: add it (true or false)")
        return default
    v = d[key]
    if not isinstance(v, bool):
        hint = (" (without quotes)" if isinstance(v, str) and v.lower() in ("true", "false") else
                " (YAML 1.2, as read here, takes yes/no/on/off as text)" if isinstance(v, str)
                and v.lower() in ("yes", "no", "on", "off", "y", "n") else "")
        raise ConfigError(f"{_join(where, key)} = {brief(v)} must be true or false{hint}")
    return v


def load_mapping(path_or_dict: Any, what: str = "file") -> dict:
    """Read a YAML or JSON file (or accept a dict) and return its top-level mapping.

    Reading goes through :mod:`strategies.documents` (UTF-8, size limit, duplicate keys refused);
    a non-finite number anywhere in the file is refused here, naming its dotted path.
    """
    from strategies.documents import check_finite, load_document
    if isinstance(path_or_dict, dict):
        return path_or_dict
    name = f"{what} {brief(str(path_or_dict), 120)}"
    data = load_document(path_or_dict, what)
    if not isinstance(data, dict):
        raise ConfigError(f"{name} must contain a mapping at the top level, got {type(data).__name__}")
    check_finite(data, name)
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
            raise ConfigError(f"--set {brief(dotted)}: {brief(k)} is not a section (it holds {brief(nxt)})")
        cur = nxt
    cur[keys[-1]] = value
    return out


def parse_set_value(text: str, key: str = "") -> Any:
    """``--set`` values are parsed as YAML scalars: ``16`` -> 16, ``true`` -> True, ``1f1b`` -> '1f1b'.

    Non-finite numbers (``.inf``, ``.nan``) are refused like in a file, naming ``key``."""
    from strategies.documents import check_finite, parse_scalar
    v = parse_scalar(text)
    check_finite(v, "--set", brief(key, 80)[1:-1] if key else "")
    return v


def divisors(n: int, limit: int = 24) -> list[int]:
    """Divisors of ``n`` for an error message: at most ``limit`` of them (smallest and largest
    kept), found in at most 10^5 steps whatever ``n`` is (trial division up to sqrt(n), capped).

    >>> divisors(96)
    [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 96]
    >>> divisors(10000000001 * 2, limit=6)
    [1, 2, 101, 198019802, 10000000001, 20000000002]
    """
    import math
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        return []
    small, large = [], []
    for d in range(1, min(math.isqrt(n), 100_000) + 1):
        if n % d == 0:
            small.append(d)
            if d != n // d:
                large.append(n // d)
    out = small + large[::-1]
    if len(out) > limit:
        out = out[:limit // 2] + out[-(limit - limit // 2):]
    return out
