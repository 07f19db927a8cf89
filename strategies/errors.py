"""Exception tree shared by every execsim package (NetworkX-style: shallow, domain names).

``ExecsimError`` is the base; the CLI catches it and prints its message (no traceback).
Messages name the field, the offending value and how to fix it.
"""


class ExecsimError(Exception):
    """Base class of every error execsim raises on purpose."""


class ConfigError(ExecsimError, ValueError):
    """An input file or argument is malformed or infeasible (names field, value and fix)."""


class ScheduleError(ExecsimError, ValueError):
    """A pipeline schedule is malformed, incomplete, or not supported for the given sizes."""


class SimulationError(ExecsimError, RuntimeError):
    """The engine cannot finish: a cycle in the task graph or a deadlocked device order."""


def brief(value, limit: int = 60) -> str:
    """``repr(value)`` cut to at most ``limit`` characters, in time independent of the value's size.

    Error messages print user values; a YAML alias bomb (a few lines that expand to 10^9 items
    when printed) or a 100 MB string must not make the message itself the problem. Nested
    containers are shown a few levels and items deep (``reprlib``), then cut with ``...``.

    >>> brief("x" * 10**6, 20)
    "'xxxxxxx...xxxxxxxx'"
    >>> brief([[1, 2, 3, 4, 5, 6]] * 10**6, 30)
    '[[1, 2, 3, 4, ...], [1, 2, 3, 4, ...], [1,...'
    """
    import reprlib
    r = reprlib.Repr()
    r.maxlevel, r.maxtuple, r.maxlist, r.maxdict, r.maxset = 3, 4, 4, 4, 4
    r.maxstring, r.maxother, r.maxlong = max(limit, 8), max(limit, 8), max(limit, 8)
    try:
        text = r.repr(value)
    except Exception:  # noqa: BLE001 -- e.g. an int beyond Python's int-to-str digit limit
        return f"<{type(value).__name__} too large to print>"
    if len(text) > 1.5 * limit:
        text = text[:int(1.5 * limit) - 3] + "..."
    return text


def cut(text: str, limit: int = 120) -> str:
    """``text`` (no quotes added) cut to ``limit`` characters with ``...``.

    >>> cut("abcdef", 5)
    'ab...'
    """
    text = str(text)
    return text if len(text) <= limit else text[:max(limit - 3, 0)] + "..."
