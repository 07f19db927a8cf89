"""Progress bars for work that can take more than a couple of seconds (sweeps, compare,
plan-recompute): a tqdm bar on stderr, silent when stderr is not a terminal (pipes, CI, tests).

``enabled``: ``None`` = only on a terminal (tqdm's ``disable=None``), ``True`` = always, ``False`` =
never. Results never go through the bar; it only writes to stderr.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")


class _Quiet:
    """The part of tqdm's interface execsim uses, doing nothing."""

    def update(self, n: int = 1) -> None:
        pass

    def set_postfix_str(self, s: str) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass


def progress_bar(total: int | None = None, desc: str = "", enabled: bool | None = None, unit: str = "run"):
    """A tqdm bar (``update(n)``, ``set_postfix_str``, ``close``, context manager) or a silent stand-in."""
    if enabled is False:
        return _Quiet()
    try:
        from tqdm.auto import tqdm
    except ImportError:  # tqdm is a core dependency; stay usable without it
        return _Quiet()
    return tqdm(total=total, desc=desc, unit=unit, disable=None if enabled is None else False, leave=False,
                dynamic_ncols=True)


def progress(items: Iterable[T], total: int | None = None, desc: str = "", enabled: bool | None = None,
             unit: str = "run") -> Iterator[T]:
    """Iterate ``items`` while advancing a bar (see :func:`progress_bar`).

    >>> list(progress([1, 2, 3], desc="demo", enabled=False))
    [1, 2, 3]
    """
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with progress_bar(total, desc, enabled, unit) as bar:
        for x in items:
            yield x
            bar.update(1)
