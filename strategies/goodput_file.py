"""The ``goodput:`` section of a strategy file: a whole training run with failures and checkpoints.

Checked here (structure, types, ranges, unknown keys); the failure-rate defaults live in
``topologies/data/failure_rates.yaml`` and are merged by ``simulator.goodput.setup``. Example::

    goodput:
      days: 54                      # wall-clock horizon, or train_tokens (else training.train_tokens)
      seeds: 20
      checkpoint: {interval_s: young, storage_gb_per_s: 2000, async: false}
      restart_s: 300
      spare_nodes: 64
      repair_hours: 24
      elastic: false
      failures: {hbm: {rate_per_device_hour: 5.0e-6}}
      slow_nodes: {rate_per_node_hour: 1.0e-5, slowdown: 1.2, detection_hours: 6}

Imports nothing outside ``strategies/``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from strategies.config import check_keys, get_bool, get_float, get_int
from strategies.errors import ConfigError

GOODPUT_KEYS = ("days", "train_tokens", "seeds", "seed", "checkpoint", "restart_s", "spare_nodes",
                "repair_hours", "elastic", "failures", "slow_nodes", "cost_per_gpu_hour")
CHECKPOINT_KEYS = ("interval_s", "storage_gb_per_s", "load_gb_per_s", "async", "snapshot_gb_per_s")
FAILURE_KEYS = ("rate_per_device_hour", "per", "detection_s", "needs_repair")
SLOW_KEYS = ("rate_per_node_hour", "slowdown", "detection_hours")
PER = ("gpu", "node")
#: named checkpoint-interval policies (closed forms, see simulator.goodput.closed_forms)
POLICIES = ("young", "daly")


@dataclass(frozen=True)
class CheckpointSpec:
    """Checkpoint policy and storage.

    interval_s: seconds of training between checkpoints: a number, a list of numbers (each is
        simulated; the best is reported), or 'young' / 'daly' (the closed-form optimum).
    storage_gb_per_s: aggregate write bandwidth of the checkpoint store, GB/s (1e9 bytes/s).
    load_gb_per_s: aggregate read bandwidth on restart, GB/s; None = storage_gb_per_s.
    async: the job blocks only while each GPU copies its shard to host memory
        (snapshot_gb_per_s per GPU); the write to storage proceeds in the background and the
        checkpoint counts only once it is durable.
    snapshot_gb_per_s: device-to-host copy bandwidth per GPU for asynchronous saves, GB/s.
    """

    interval_s: Any = "young"
    storage_gb_per_s: float = 100.0
    load_gb_per_s: float | None = None
    async_save: bool = False
    snapshot_gb_per_s: float = 25.0


@dataclass(frozen=True)
class FailureOverride:
    """Fields given for one failure component (None = keep the default)."""

    name: str
    rate_per_device_hour: float | None = None
    per: str | None = None
    detection_s: float | None = None
    needs_repair: bool | None = None


@dataclass(frozen=True)
class SlowNodeSpec:
    """Nodes that degrade: rate per node-hour, the slowdown of every synchronous step while one is
    slow (1.2 = 20 % longer), and hours until it is detected and drained (0 rate = off)."""

    rate_per_node_hour: float = 0.0
    slowdown: float = 1.0
    detection_hours: float = 0.0


@dataclass(frozen=True)
class GoodputSpec:
    """The parsed ``goodput:`` section.

    days / train_tokens: run for this many wall-clock days, or until this many tokens are trained
        (None, None = training.train_tokens of the strategy).
    seeds: independent runs; seed: the first seed (runs use seed, seed+1, ...).
    restart_s: seconds to reschedule, relaunch and re-initialise the job after a failure (before
        loading the checkpoint).
    spare_nodes: hot spare nodes; a node that fails with needs_repair is swapped for one.
    repair_hours: hours until a failed node is repaired and returns to the spare pool.
    elastic: without a spare, continue on fewer data-parallel replicas (re-simulated iteration
        time) instead of waiting for a repair.
    cost_per_gpu_hour: price of one GPU-hour (any currency) for the cost of wasted time; None = not
        reported.
    """

    days: float | None = None
    train_tokens: float | None = None
    seeds: int = 20
    seed: int = 0
    checkpoint: CheckpointSpec = CheckpointSpec()
    restart_s: float = 300.0
    spare_nodes: int = 0
    repair_hours: float = 24.0
    elastic: bool = False
    failures: tuple[FailureOverride, ...] = ()
    slow_nodes: SlowNodeSpec = SlowNodeSpec()
    cost_per_gpu_hour: float | None = None


def parse_interval(v: Any, where: str = "goodput.checkpoint.interval_s"):
    """A number > 0, a non-empty list of them, or a policy name."""
    def num(x):
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not x > 0 or x == float("inf"):
            raise ConfigError(f"{where} = {v!r}: {x!r} is not a positive number of seconds; give seconds "
                              f"(e.g. 600), a list of seconds ([300, 600, 1200]) or one of {', '.join(POLICIES)}")
        return float(x)
    if isinstance(v, str):
        if v in POLICIES:
            return v
        try:
            return num(float(v))
        except ValueError:
            items = [s for s in v.split(",") if s.strip()]
            if len(items) > 1:
                return parse_interval([_to_float(s) for s in items], where)
            raise ConfigError(f"{where} = {v!r} must be seconds, a list of seconds or one of "
                              f"{', '.join(POLICIES)}") from None
    if isinstance(v, list):
        if not v:
            raise ConfigError(f"{where} = [] is empty: give at least one interval in seconds")
        return tuple(num(x) for x in v)
    return num(v)


def _to_float(s: str):
    try:
        return float(s)
    except ValueError:
        return s


def parse_goodput(d: Any) -> GoodputSpec:
    """Check a ``goodput:`` mapping (None = all defaults) and return a :class:`GoodputSpec`."""
    if d is None:
        return GoodputSpec()
    check_keys(d, GOODPUT_KEYS, "goodput")
    days = get_float(d, "days", "goodput", default=None, positive=True) if d.get("days") is not None else None
    tt = (get_float(d, "train_tokens", "goodput", default=None, positive=True)
          if d.get("train_tokens") is not None else None)
    if days is not None and tt is not None:
        raise ConfigError("goodput.days and goodput.train_tokens are both set: give one (a wall-clock horizon "
                          "or a token budget)")
    c = d.get("checkpoint") or {}
    check_keys(c, CHECKPOINT_KEYS, "goodput.checkpoint")
    lg = c.get("load_gb_per_s")
    ck = CheckpointSpec(
        interval_s=parse_interval(c.get("interval_s", "young")),
        storage_gb_per_s=get_float(c, "storage_gb_per_s", "goodput.checkpoint", default=100.0, positive=True),
        load_gb_per_s=None if lg is None else get_float(c, "load_gb_per_s", "goodput.checkpoint", positive=True),
        async_save=get_bool(c, "async", "goodput.checkpoint", default=False),
        snapshot_gb_per_s=get_float(c, "snapshot_gb_per_s", "goodput.checkpoint", default=25.0, positive=True),
    )
    f = d.get("failures") or {}
    if not isinstance(f, dict):
        raise ConfigError(f"goodput.failures = {f!r} must be a mapping of component name to fields "
                          f"({', '.join(FAILURE_KEYS)})")
    fails = []
    for name, fd in f.items():
        where = f"goodput.failures.{name}"
        if fd is None:
            fd = {}
        check_keys(fd, FAILURE_KEYS, where)
        per = fd.get("per")
        if per is not None and per not in PER:
            raise ConfigError(f"{where}.per = {per!r} must be one of {', '.join(PER)}")
        fails.append(FailureOverride(
            str(name),
            get_float(fd, "rate_per_device_hour", where, default=None) if "rate_per_device_hour" in fd else None,
            per,
            get_float(fd, "detection_s", where, default=None) if "detection_s" in fd else None,
            get_bool(fd, "needs_repair", where, default=None) if "needs_repair" in fd else None))
    s = d.get("slow_nodes") or {}
    check_keys(s, SLOW_KEYS, "goodput.slow_nodes")
    slow = SlowNodeSpec(
        rate_per_node_hour=get_float(s, "rate_per_node_hour", "goodput.slow_nodes", default=0.0),
        slowdown=get_float(s, "slowdown", "goodput.slow_nodes", default=1.0, minimum=1.0),
        detection_hours=get_float(s, "detection_hours", "goodput.slow_nodes", default=0.0))
    if slow.rate_per_node_hour > 0 and slow.slowdown == 1.0:
        raise ConfigError("goodput.slow_nodes.rate_per_node_hour > 0 needs slowdown > 1 (e.g. 1.2 = steps 20 % "
                          "slower while a node is slow)")
    cost = d.get("cost_per_gpu_hour")
    return GoodputSpec(
        days=days, train_tokens=tt,
        seeds=get_int(d, "seeds", "goodput", default=20, minimum=1),
        seed=get_int(d, "seed", "goodput", default=0, minimum=0),
        checkpoint=ck,
        restart_s=get_float(d, "restart_s", "goodput", default=300.0),
        spare_nodes=get_int(d, "spare_nodes", "goodput", default=0, minimum=0),
        repair_hours=get_float(d, "repair_hours", "goodput", default=24.0),
        elastic=get_bool(d, "elastic", "goodput", default=False),
        failures=tuple(fails),
        slow_nodes=slow,
        cost_per_gpu_hour=None if cost is None else get_float(d, "cost_per_gpu_hour", "goodput"),
    )
