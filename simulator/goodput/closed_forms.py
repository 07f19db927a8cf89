"""Closed forms: checkpoint intervals for exponential failures (Young 1974; Daly 2006, Eqs. 13 and 37;
citations in :mod:`simulator.goodput`), asynchronous saves, and the oracles the replay is tested
against for each failure mechanism (bad nodes, Weibull lifetimes, failure domains, restart parts).
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
    return _daly_ratio(tau, tau + c, restart, mtbf)


def _daly_ratio(tau: float, period: float, restart: float, mtbf: float) -> float:
    """``tau / (M e^{R/M} (e^{P/M} - 1))`` computed in logs, so that extreme restarts, saves or
    failure rates (``R/M`` or ``P/M`` past 709, where ``math.exp`` overflows) give a goodput near 0
    instead of an OverflowError: ``log(e^y - 1) = y + log(1 - e^-y)``."""
    y = period / mtbf
    if not (tau > 0 and y > 0):
        return 0.0
    log_expm1 = math.log(math.expm1(y)) if y < 30.0 else y + math.log1p(-math.exp(-y))
    log_g = math.log(tau) - math.log(mtbf) - restart / mtbf - log_expm1
    return math.exp(min(log_g, 700.0)) if log_g == log_g else 0.0


def async_goodput(tau: float, block: float, write: float, restart: float, mtbf: float) -> float:
    """Daly's goodput with an asynchronous save: the job pauses ``block`` (the snapshot) per save and
    the write runs ``write`` seconds in the background; a write still running when the next save is
    due is waited for (torchtitan's CheckpointManager), so the pause per period is
    ``C(tau) = block + max(0, write - tau)``; a failure loses, besides the work since the last
    snapshot, the ``min(write, tau)`` seconds its checkpoint was not yet durable (first order: added to
    the restart). With ``write = 0`` this is :func:`daly_goodput`. For ``tau < write`` the goodput grows
    with ``tau`` (each period costs ``block + write`` whatever ``tau``), so the optimum is at least
    ``write``: Young's ``sqrt(2 block M)`` when that is longer.

    >>> round(async_goodput(600.0, 1.0, 0.0, 60.0, 3600.0), 6) == round(daly_goodput(600.0, 1.0, 60.0, 3600.0), 6)
    True
    """
    lag = min(write, tau)
    c = block + max(0.0, write - tau)
    return _daly_ratio(tau, tau + c, restart + lag, mtbf)


def optimal_interval_closed_form(c: float, restart: float, mtbf: float, write: float = 0.0) -> float:
    """The interval maximising :func:`daly_goodput` (:func:`async_goodput` with a background
    ``write``), by golden-section search on log tau."""
    lo, hi = math.log(max(c, 1e-3) * 1e-2 + 1e-9), math.log(50.0 * mtbf + write)
    g = (math.sqrt(5.0) - 1.0) / 2.0
    if write > 0:
        f = lambda lt: -async_goodput(math.exp(lt), c, write, restart, mtbf)
    else:
        f = lambda lt: -daly_goodput(math.exp(lt), c, restart, mtbf)
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


def lemon_expected_failures(n_lemons: int, rate_per_s: float, drain_after: int, t: float) -> float:
    """Expected failures of ``n_lemons`` bad nodes over ``t`` seconds when each fails as a Poisson
    process of rate ``rate_per_s`` and is drained at its ``drain_after``-th failure (0 = never):
    ``n E[min(N, k)]``, ``N ~ Poisson(rate t)``, ``E[min(N, k)] = sum_{j=1..k} P(N >= j)``.

    >>> lemon_expected_failures(10, 1.0, 0, 5.0)
    50.0
    >>> round(lemon_expected_failures(1, 1.0, 1, 1.0), 6)  # P(N >= 1) = 1 - e^-1
    0.632121
    """
    mu = rate_per_s * t
    if drain_after == 0:
        return n_lemons * mu
    p_i, cdf, total = math.exp(-mu), 0.0, 0.0
    for j in range(1, drain_after + 1):
        cdf += p_i                      # P(N <= j - 1)
        total += 1.0 - cdf              # P(N >= j)
        p_i *= mu / j
    return n_lemons * total


def weibull_renewal_count(rate_per_s: float, shape: float, t: float) -> float:
    """Expected failures by ``t`` of a renewal process with Weibull gaps of mean ``1 / rate`` and
    ``shape`` (started new at 0): ``t / mu + (cv^2 - 1) / 2`` (the second-order renewal theorem, Cox
    1962, "Renewal Theory", Sec. 4.5), ``cv^2 = Gamma(1 + 2/k) / Gamma(1 + 1/k)^2 - 1``; exact for
    ``shape = 1`` (Poisson), asymptotic for ``t >> mu`` otherwise."""
    return rate_per_s * t + (weibull_cv2(shape) - 1.0) / 2.0


def weibull_cv2(shape: float) -> float:
    """``Gamma(1 + 2/k) / Gamma(1 + 1/k)^2 - 1``, the squared coefficient of variation of Weibull gaps
    of shape ``k`` (computed with log-gamma: ``Gamma`` overflows a float past 171, i.e. ``k < 0.012``;
    infinite when the ratio does, which the event bound then refuses)."""
    log_ratio = math.lgamma(1.0 + 2.0 / shape) - 2.0 * math.lgamma(1.0 + 1.0 / shape)
    return math.exp(log_ratio) - 1.0 if log_ratio < 700.0 else math.inf


def weibull_renewal_variance(rate_per_s: float, shape: float, t: float) -> float:
    """Variance of that count for ``t >> mu``: ``cv^2 t / mu`` (Cox 1962, Sec. 6.3; Poisson: ``t / mu``):
    a decreasing hazard (``shape < 1``) clusters failures, so runs spread more than with exponential gaps."""
    return weibull_cv2(shape) * rate_per_s * t


def domain_goodput(tau: float, c: float, domain_rate_per_s: float, repair_s: float, restart: float,
                   load: float) -> float:
    """Goodput when failure domains are the only failures and no spare is free: every event stops the
    job until its nodes are back (``repair_s``), then restart and load; a second event while it is
    down makes it wait ``repair_s`` from that event, as a failure during a restart starts Daly's
    restart over. So Daly's Eq. 13 holds with ``M = 1 / (rate x domains)`` and
    ``R = repair + restart + load`` (detection 0)."""
    return daly_goodput(tau, c, repair_s + restart + load, 1.0 / domain_rate_per_s)
