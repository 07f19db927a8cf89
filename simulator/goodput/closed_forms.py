"""Checkpoint-interval closed forms for exponential failures (Young 1974; Daly 2006, Eqs. 13 and 37;
citations in :mod:`simulator.goodput`).
"""
from __future__ import annotations

import math


def young_interval(c: float, mtbf: float) -> float:
    """Young 1974: ``sqrt(2 C M)``.

    >>> round(young_interval(50.0, 3600.0), 3)
    600.0
    """
    return math.sqrt(2.0 * c * mtbf)


def daly_interval(c: float, mtbf: float) -> float:
    """Daly 2006, Eq. 37: ``sqrt(2CM)[1 + sqrt(C/2M)/3 + C/(18M)] - C`` for ``C < 2M``, else ``M``."""
    if c >= 2.0 * mtbf:
        return mtbf
    return math.sqrt(2.0 * c * mtbf) * (1.0 + math.sqrt(c / (2.0 * mtbf)) / 3.0 + c / (18.0 * mtbf)) - c


def daly_goodput(tau: float, c: float, restart: float, mtbf: float) -> float:
    """Daly 2006, Eq. 13 inverted: ``tau / (M e^{R/M} (e^{(tau+C)/M} - 1))`` (exponential failures,
    failures may also strike during saves and restarts)."""
    return tau / (mtbf * math.exp(restart / mtbf) * math.expm1((tau + c) / mtbf))


def optimal_interval_closed_form(c: float, restart: float, mtbf: float) -> float:
    """The interval maximising :func:`daly_goodput` (golden-section search on log tau)."""
    lo, hi = math.log(max(c, 1e-3) * 1e-2 + 1e-9), math.log(50.0 * mtbf)
    g = (math.sqrt(5.0) - 1.0) / 2.0
    f = lambda lt: -daly_goodput(math.exp(lt), c, restart, mtbf)  # noqa: E731
    a, b = lo, hi
    x1, x2 = b - g * (b - a), a + g * (b - a)
    f1, f2 = f(x1), f(x2)
    for _ in range(200):
        if f1 < f2:
            b, x2, f2 = x2, x1, f1
            x1 = b - g * (b - a)
            f1 = f(x1)
        else:
            a, x1, f1 = x1, x2, f2
            x2 = a + g * (b - a)
            f2 = f(x2)
    return math.exp((a + b) / 2.0)
