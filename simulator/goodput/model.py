"""The run model of :mod:`simulator.goodput`: failure components, one run's parameters and result, the
check of impossible parameters, and the constants (units, loss mechanisms, the default failure-rate file).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from strategies.errors import ConfigError

HOUR = 3600.0
DAY = 86400.0
DATA_DIR = Path(__file__).resolve().parent.parent.parent / "topologies" / "data"
RATES_FILE = DATA_DIR / "failure_rates.yaml"
FLEETS_FILE = DATA_DIR / "failure_fleets.yaml"
#: loss mechanisms, in report order
MECHANISMS = ("checkpoint", "lost_work", "detection", "repair_wait", "restart", "load", "elastic",
              "slow_node", "planned", "maintenance")
#: random streams beside the per-component ones ([seed, i] for component i; [seed, len(components)]
#: for slow nodes, kept from before so default runs keep their numbers)
STREAM_RESTART, STREAM_SAVE, STREAM_LEMON, STREAM_MAINT = 1001, 1002, 2000, 1003


@dataclass(frozen=True)
class Component:
    """One failure source: ``rate_per_device_hour`` failures per device-hour over ``count`` devices.

    per: what a device is: ``gpu``, ``node``, ``job`` (a job-level source: ``count`` 1 and the rate
        already scaled to the job's size), ``domain`` (a rack / leaf switch / power domain that takes
        ``nodes_per_event`` nodes down at once) or ``lemon`` (one of ``count`` bad nodes, each a source
        of its own, drained after ``drain_after`` failures).
    shape: Weibull shape of the times between failures (1 = exponential; < 1 = decreasing hazard,
        Schroeder & Gibson 2006); the mean stays ``1 / rate``.
    repair_s: repair time of the nodes it takes out (None = the run's ``repair_s``).
    rollback_s: training seconds undone beyond the last checkpoint (loss-spike rollbacks).
    """

    name: str
    rate_per_device_hour: float
    per: str
    count: int
    detection_s: float
    needs_repair: bool
    source: str = ""
    shape: float = 1.0
    nodes_per_event: int = 1
    repair_s: float | None = None
    drain_after: int = 0
    rollback_s: float = 0.0

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
        A write still in flight when the next save is due is waited for (torchtitan's
        CheckpointManager._async_wait before each async save): the job pauses ``commit - interval``.
    save_failure_p: probability that a save fails (not durable, not retried; the next is on time).
    save_slow_p, save_slowdown: probability that a save's write is ``slowdown`` x slower (storage
        contention); the job's pause (sync) or the write (async) stretches.
    restart_s: mean restart time (the sum of ``restart_parts`` when given); restart_parts:
        ((name, mean seconds), ...) drawn per restart with coefficient of variation ``restart_cv``
        (lognormal, mean kept); the load time is drawn with the same spread.
    horizon_s / target_tokens: stop at this wall time, or once this many tokens are durable
        (token mode stops at ``max_wall_s`` if the budget is not reached).
    maintenance_every_s, maintenance_s: a planned stop every ``maintenance_every_s`` of wall time
        (0 = none) lasting ``maintenance_s``, after a save; skipped when the job is already down.
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
    restart_parts: tuple = ()
    restart_cv: float = 0.0
    save_failure_p: float = 0.0
    save_slow_p: float = 0.0
    save_slowdown: float = 1.0
    maintenance_every_s: float = 0.0
    maintenance_s: float = 0.0
    max_wall_s: float = math.inf

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
    failed_saves: int = 0
    maintenances: int = 0
    drained_lemons: int = 0

    @property
    def goodput(self) -> float:
        return self.useful_s / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def held_s(self) -> float:
        """Wall time the job held its allocation: without waiting for repairs (a queue) and without
        scheduled maintenance (the denominator of ETTR as Kokolis et al. 2024 define it)."""
        return self.wall_s - self.losses["repair_wait"] - self.losses["maintenance"]

    @property
    def ettr_available(self) -> float:
        return self.useful_s / self.held_s if self.held_s > 0 else 0.0


def _seconds(name: str, v) -> None:
    if not (v >= 0 and math.isfinite(v)):
        raise ConfigError(f"{name} = {v!r} must be a finite number of seconds >= 0")


def check_run_model(m: RunModel) -> None:
    """One clear error for impossible run parameters."""
    for name in ("interval_s",):
        v = getattr(m, name)
        if not (v > 0 and math.isfinite(v)):
            raise ConfigError(f"checkpoint interval = {v!r} s must be a positive number of seconds")
    for name in ("save_block_s", "save_commit_s", "load_s", "restart_s", "repair_s", "slow_detection_s",
                 "maintenance_s", "maintenance_every_s"):
        _seconds(name, getattr(m, name))
    if not (m.restart_cv >= 0 and math.isfinite(m.restart_cv)):
        raise ConfigError(f"goodput.restart.cv = {m.restart_cv!r} must be a coefficient of variation >= 0")
    for name, v in m.restart_parts:
        _seconds(f"goodput.restart.{name}", v)
    for name in ("save_failure_p", "save_slow_p"):
        v = getattr(m, name)
        if not 0 <= v < 1:
            raise ConfigError(f"{name} = {v!r} must be a probability in [0, 1)")
    if m.save_slowdown < 1:
        raise ConfigError(f"save slowdown = {m.save_slowdown!r} must be >= 1")
    for c in m.components:
        if not (c.rate_per_device_hour >= 0 and math.isfinite(c.rate_per_device_hour)):
            raise ConfigError(f"goodput.failures.{c.name}.rate_per_device_hour = {c.rate_per_device_hour!r} must be "
                              f"a finite rate >= 0 (failures per device-hour)")
        if not (c.detection_s >= 0 and math.isfinite(c.detection_s)):
            raise ConfigError(f"goodput.failures.{c.name}.detection_s = {c.detection_s!r} must be >= 0 seconds")
        if not (c.shape > 0 and math.isfinite(c.shape)):
            raise ConfigError(f"goodput.failures.{c.name}.shape = {c.shape!r} must be a Weibull shape > 0")
        if c.nodes_per_event > m.num_nodes:
            raise ConfigError(f"goodput.domains.{c.name}.nodes = {c.nodes_per_event} is more than the job's "
                              f"{m.num_nodes} nodes")
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
    if m.slow_rate_per_node_hour > 0 and m.slowdown < 1:
        raise ConfigError(f"slow_nodes.slowdown = {m.slowdown} must be >= 1")
    if m.maintenance_every_s > 0 and m.maintenance_every_s <= m.maintenance_s:
        raise ConfigError(f"maintenance every {m.maintenance_every_s / HOUR:g} h is not longer than its "
                          f"{m.maintenance_s / HOUR:g} h duration: give a longer every_hours")
