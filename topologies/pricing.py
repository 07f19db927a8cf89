"""GPU rental prices: US dollars per GPU-hour for each catalog GPU (``data/prices.yaml``).

Money in execsim is one formula (docs/search.md, "Cost model")::

    hours to train = train_tokens / tokens_per_s / 3600
    GPU-hours      = hours to train x GPUs
    cost (USD)     = GPU-hours x price per GPU-hour

The price comes from, in order: an explicit override (``--price``), the strategy file's
``options.price_per_gpu_hour_usd``, this catalog. Defaults are public on-demand list prices with
their source and date in the YAML; they are meant to be overridden.

>>> price_per_gpu_hour("H100-SXM-80GB")
2.99
>>> price_per_gpu_hour("H100-SXM-80GB", override=2.0)
2.0
"""
from __future__ import annotations

import math
import os
from functools import cache

from strategies.documents import load_document
from strategies.errors import ConfigError
from topologies.gpus import DATA_DIR, check_keys

PRICES_PATH = os.path.join(DATA_DIR, "prices.yaml")


@cache
def price_table(path: str = PRICES_PATH) -> dict[str, float]:
    """GPU name -> US dollars per GPU-hour, checked (positive finite numbers, known fields)."""
    return {name: price for name, (price, _source) in _price_entries(path).items()}


@cache
def _price_entries(path: str = PRICES_PATH) -> dict[str, tuple[float, str]]:
    """GPU name -> (US dollars per GPU-hour, the entry's source citation)."""
    data = load_document(path, "price file") or {}
    check_keys(data, ("prices",), f"price file {path!r}")
    out = {}
    for name, entry in (data.get("prices") or {}).items():
        where = f"price file {path!r} entry {name!r}"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: expected a mapping with price_per_gpu_hour_usd and source")
        check_keys(entry, ("price_per_gpu_hour_usd", "source"), where)
        out[str(name)] = (check_price(entry.get("price_per_gpu_hour_usd"), f"{where}: price_per_gpu_hour_usd"),
                          str(entry.get("source", "")))
    return out


def check_price(value, where: str) -> float:
    """``value`` as a positive finite float, or ConfigError naming ``where``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0 \
            or value > MAX_PRICE_PER_GPU_HOUR:
        raise ConfigError(f"{where} = {value!r} must be a positive number of US dollars per GPU-hour, at most "
                          f"{MAX_PRICE_PER_GPU_HOUR:,} (e.g. 2.5)")
    return float(value)


#: the most a GPU-hour may cost: 1,000x the catalog's dearest rental (topologies/data/prices.yaml,
#: a few dollars), so that costs stay readable figures, not 300-digit numbers
MAX_PRICE_PER_GPU_HOUR = 10_000


def price_per_gpu_hour(gpu_name: str, override: float | None = None) -> float | None:
    """Dollars per GPU-hour of ``gpu_name``: ``override`` when given, else the catalog's, else None
    (a custom GPU without a price)."""
    if override is not None:
        return check_price(override, "price per GPU-hour")
    return price_table().get(gpu_name)


def plan_price(plan, override: float | None = None) -> float | None:
    """The price for a resolved plan: ``override``, else ``options.price_per_gpu_hour_usd`` when the
    strategy sets it, else the catalog price of the cluster's GPU."""
    if override is None:
        override = getattr(plan.strategy.options, "price_per_gpu_hour_usd", None)
    return price_per_gpu_hour(plan.cluster.gpu.name, override)


def plan_price_origin(plan, override: float | None = None) -> tuple[float | None, str]:
    """:func:`plan_price` and where the price came from, for the cost line: ``--price``, the strategy
    file's ``options.price_per_gpu_hour_usd``, or the catalog entry with its source; for a GPU the
    catalog has no price, ``(None, why)``.

    >>> plan_price_origin(type("P", (), {"strategy": None, "cluster": None})(), 2.5)
    (2.5, '--price')
    """
    if override is not None:
        return check_price(override, "--price"), "--price"
    opt = getattr(plan.strategy.options, "price_per_gpu_hour_usd", None)
    if opt is not None:
        return check_price(opt, "options.price_per_gpu_hour_usd"), "options.price_per_gpu_hour_usd"
    name = plan.cluster.gpu.name
    entry = _price_entries().get(name)
    if entry is None:
        return None, (f"topologies/data/prices.yaml has no price for {name}; pass --price or set "
                      f"options.price_per_gpu_hour_usd")
    return entry[0], f"topologies/data/prices.yaml: {entry[1]}" if entry[1] else "topologies/data/prices.yaml"


def training_cost(tokens_per_s: float, num_gpus: int, train_tokens: float, price: float | None) -> dict:
    """Days, GPU-hours and dollars to train ``train_tokens`` at ``tokens_per_s`` on ``num_gpus``
    GPUs (``cost_usd`` and ``tokens_per_dollar`` NaN without a price).

    >>> training_cost(1e6, 1000, 3.6e9 * 24, 2.0)["cost_usd"]
    48000.0
    """
    nan = float("nan")
    if tokens_per_s <= 0:
        return dict(days_to_train=nan, gpu_hours=nan, cost_usd=nan, tokens_per_dollar=nan)
    hours = train_tokens / tokens_per_s / 3600.0
    gpu_hours = hours * num_gpus
    cost = gpu_hours * price if price is not None else nan
    return dict(days_to_train=hours / 24.0, gpu_hours=gpu_hours, cost_usd=cost,
                tokens_per_dollar=train_tokens / cost if price is not None else nan)
