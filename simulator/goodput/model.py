"""The run model of :mod:`simulator.goodput`: failure components, one run's parameters and result, the
check of impossible parameters, and the constants (units, loss mechanisms, the default failure-rate file).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from strategies.errors import ConfigError

HOUR = 3600.0
DAY = 86400.0
RATES_FILE = Path(__file__).resolve().parent.parent.parent / "topologies" / "data" / "failure_rates.yaml"
#: loss mechanisms, in report order
MECHANISMS = ("checkpoint", "lost_work", "detection", "repair_wait", "restart", "load", "elastic",
              "slow_node", "planned")


@dataclass(frozen=True)
class Component:
    """One failure source: ``rate_per_s`` failures per device-second over ``count`` devices."""

    name: str
    rate_per_device_hour: float
    per: str
    count: int
    detection_s: float
    needs_repair: bool
    source: str = ""

    @property
    def rate_per_s(self) -> float:
        return self.rate_per_device_hour * self.count / HOUR


@dataclass(frozen=True)
class RunModel:
    """Everything one simulated run needs, in SI units.

    full_tokens_per_s: throughput of the whole job (all dp replicas, no slow node).
    iteration_time: dp -> seconds per iteration at that data-parallel size (elastic); tokens per
        iteration scale with dp / full dp (the per-replica batch stays).
    interval_s: training seconds between checkpoints; save_block_s: the job's pause per save;
    save_commit_s: further seconds until a save is durable (asynchronous write), 0 when synchronous.
    horizon_s / target_tokens: stop at this wall time, or once this many tokens are durable.
    """

    components: tuple[Component, ...]
    full_tokens_per_s: float
    interval_s: float
    save_block_s: float
    save_commit_s: float
    load_s: float
    restart_s: float
    horizon_s: float | None = None
    target_tokens: float | None = None
    dp: int = 1
    num_nodes: int = 1
    spare_nodes: int = 0
    repair_s: float = 24 * HOUR
    elastic: bool = False
    iteration_time: Callable[[int], float] | None = field(default=None, compare=False, repr=False)
    slow_rate_per_node_hour: float = 0.0
    slowdown: float = 1.0
    slow_detection_s: float = 0.0

    @property
    def failure_rate_per_s(self) -> float:
        return sum(c.rate_per_s for c in self.components)


@dataclass
class RunResult:
    """One seed's run. Times in seconds; ``losses`` by mechanism, ``lost_by_component`` by cause."""

    seed: int
    wall_s: float
    tokens: float
    useful_s: float
    losses: dict
    lost_by_component: dict
    failures: dict
    interruptions: dict
    checkpoints: int
    finished: bool
    min_dp: int
    progress: list  # (time s, tokens trained so far) at segment boundaries
    events: list    # (time s, kind, detail): failures, restarts, checkpoints (when few)

    @property
    def goodput(self) -> float:
        return self.useful_s / self.wall_s if self.wall_s > 0 else 0.0


def check_run_model(m: RunModel) -> None:
    """One clear error for impossible run parameters."""
    for name in ("interval_s",):
        v = getattr(m, name)
        if not (v > 0 and math.isfinite(v)):
            raise ConfigError(f"checkpoint interval = {v!r} s must be a positive number of seconds")
    for name in ("save_block_s", "save_commit_s", "load_s", "restart_s", "repair_s", "slow_detection_s"):
        v = getattr(m, name)
        if not (v >= 0 and math.isfinite(v)):
            raise ConfigError(f"{name} = {v!r} must be a finite number of seconds >= 0")
    for c in m.components:
        if not (c.rate_per_device_hour >= 0 and math.isfinite(c.rate_per_device_hour)):
            raise ConfigError(f"goodput.failures.{c.name}.rate_per_device_hour = {c.rate_per_device_hour!r} must be "
                              f"a finite rate >= 0 (failures per device-hour)")
        if not (c.detection_s >= 0 and math.isfinite(c.detection_s)):
            raise ConfigError(f"goodput.failures.{c.name}.detection_s = {c.detection_s!r} must be >= 0 seconds")
    if (m.horizon_s is None) == (m.target_tokens is None):
        raise ConfigError("a run needs exactly one of a horizon (days) and a token budget (train_tokens)")
    if m.horizon_s is not None and not (m.horizon_s > 0 and math.isfinite(m.horizon_s)):
        raise ConfigError(f"run length = {m.horizon_s!r} s must be > 0: give --days D > 0")
    if m.target_tokens is not None and not (m.target_tokens > 0 and math.isfinite(m.target_tokens)):
        raise ConfigError(f"train_tokens = {m.target_tokens!r} must be > 0")
    if not m.full_tokens_per_s > 0:
        raise ConfigError(f"throughput {m.full_tokens_per_s!r} tokens/s must be > 0")
    if m.horizon_s is not None and m.interval_s >= m.horizon_s:
        raise ConfigError(f"checkpoint interval {m.interval_s:g} s is not shorter than the run "
                          f"({m.horizon_s:g} s = {m.horizon_s / DAY:.3g} days): no checkpoint would ever be taken; "
                          f"give a shorter interval or a longer run")
    if m.target_tokens is not None and m.interval_s >= m.target_tokens / m.full_tokens_per_s:
        raise ConfigError(f"checkpoint interval {m.interval_s:g} s is not shorter than the failure-free run "
                          f"({m.target_tokens / m.full_tokens_per_s:g} s): give a shorter interval or more tokens")
    if m.save_commit_s > m.interval_s:
        raise ConfigError(f"asynchronous checkpoint write ({m.save_commit_s:.3g} s) is longer than the interval "
                          f"({m.interval_s:.3g} s): saves would pile up; use a longer interval or faster storage")
    if m.slow_rate_per_node_hour > 0 and m.slowdown < 1:
        raise ConfigError(f"slow_nodes.slowdown = {m.slowdown} must be >= 1")
