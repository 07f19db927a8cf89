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
      fleet: llama3-405b-h100       # failure-rate preset (topologies/data/failure_fleets.yaml)
      lemons: {fraction: 0.01, rate_per_node_hour: 1.0e-3, drain_after: 3}
      domains: {leaf_switch: {nodes: 16}}
      restart: {cv: 0.3}            # spread of restart_s; or its parts instead of restart_s:
                                    # {drain_s, reschedule_s, process_start_s, init_s, init_s_per_1000_gpus, cv}
      rollbacks: {rate_per_day: 0.2, steps_back: 100}
      maintenance: {every_hours: 168, duration_hours: 2}

Imports nothing outside ``strategies/``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from strategies.config import check_keys, get_bool, get_float, get_int, get_str
from strategies.errors import ConfigError
from strategies.limits import MAX_GOODPUT_DAYS, MAX_GOODPUT_SEEDS

GOODPUT_KEYS = ("days", "train_tokens", "seeds", "seed", "checkpoint", "restart_s", "spare_nodes",
                "repair_hours", "elastic", "failures", "slow_nodes", "cost_per_gpu_hour", "fleet", "lemons",
                "domains", "restart", "rollbacks", "maintenance")
CHECKPOINT_KEYS = ("interval_s", "storage_gb_per_s", "load_gb_per_s", "async", "snapshot_gb_per_s",
                   "failure_probability", "slow_probability", "slowdown")
FAILURE_KEYS = ("rate_per_device_hour", "per", "detection_s", "needs_repair", "rate_per_hour", "ref_gpus",
                "size_exponent", "shape")
SLOW_KEYS = ("rate_per_node_hour", "slowdown", "detection_hours")
LEMON_KEYS = ("fraction", "rate_per_node_hour", "drain_after", "detection_s")
DOMAIN_KEYS = ("nodes", "rate_per_domain_hour", "detection_s", "repair_hours", "shape")
RESTART_KEYS = ("drain_s", "reschedule_s", "process_start_s", "init_s", "init_s_per_1000_gpus", "cv")
ROLLBACK_KEYS = ("rate_per_day", "steps_back", "detection_s")
MAINTENANCE_KEYS = ("every_hours", "duration_hours")
PER = ("gpu", "node", "job")
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
    failure_probability: chance that a save fails (not durable, not retried; the next is on time).
    slow_probability, slowdown: chance that a save's write runs ``slowdown`` x slower (storage
        contention with other jobs).
    """

    interval_s: Any = "young"
    storage_gb_per_s: float = 100.0
    load_gb_per_s: float | None = None
    async_save: bool = False
    snapshot_gb_per_s: float = 25.0
    failure_probability: float = 0.0
    slow_probability: float = 0.0
    slowdown: float = 1.0


@dataclass(frozen=True)
class FailureOverride:
    """Fields given for one failure component (None = keep the default)."""

    name: str
    rate_per_device_hour: float | None = None
    per: str | None = None
    detection_s: float | None = None
    needs_repair: bool | None = None
    rate_per_hour: float | None = None
    ref_gpus: int | None = None
    size_exponent: float | None = None
    shape: float | None = None


@dataclass(frozen=True)
class LemonSpec:
    """Bad nodes: ``fraction`` of the job's nodes fail at ``rate_per_node_hour`` each (on top of the
    fleet's rates) and are drained after ``drain_after`` failures (0 = never); off when fraction is 0."""

    fraction: float = 0.0
    rate_per_node_hour: float = 0.0
    drain_after: int = 3
    detection_s: float = 60.0


@dataclass(frozen=True)
class DomainSpec:
    """A failure domain: ``nodes`` nodes go down together at ``rate_per_domain_hour`` per domain
    (None = the data file's template of the same name), back after ``repair_hours``."""

    name: str
    nodes: int
    rate_per_domain_hour: float | None = None
    detection_s: float | None = None
    repair_hours: float | None = None
    shape: float = 1.0


@dataclass(frozen=True)
class RestartSpec:
    """Restart from its parts (seconds; the checkpoint load and detection are separate). ``parts``
    is True when any part was given (then ``restart_s`` is their sum). ``cv``: coefficient of variation
    of every part and of the load, drawn per restart (lognormal, mean kept); 0 = constants."""

    drain_s: float = 0.0
    reschedule_s: float = 0.0
    process_start_s: float = 0.0
    init_s: float = 0.0
    init_s_per_1000_gpus: float = 0.0
    cv: float = 0.0
    parts: bool = False


@dataclass(frozen=True)
class RollbackSpec:
    """Loss spikes: at ``rate_per_day`` while training, roll back ``steps_back`` iterations before the
    last checkpoint, after ``detection_s`` to notice; 0 = off."""

    rate_per_day: float = 0.0
    steps_back: int = 0
    detection_s: float = 600.0


@dataclass(frozen=True)
class MaintenanceSpec:
    """Planned maintenance: every ``every_hours`` of wall time, save and stop for
    ``duration_hours``; 0 = off."""

    every_hours: float = 0.0
    duration_hours: float = 0.0


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
    fleet: failure-rate preset (topologies/data/failure_fleets.yaml); ``failures`` overrides it.
    lemons, domains, restart, rollbacks, maintenance: see their classes (all off by default).
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
    fleet: str = "llama3-405b-h100"
    lemons: LemonSpec = LemonSpec()
    domains: tuple[DomainSpec, ...] = ()
    restart: RestartSpec = RestartSpec()
    rollbacks: RollbackSpec = RollbackSpec()
    maintenance: MaintenanceSpec = MaintenanceSpec()


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
    if days is not None:
        check_days(days, "goodput.days")
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
        failure_probability=_probability(c, "failure_probability", "goodput.checkpoint"),
        slow_probability=_probability(c, "slow_probability", "goodput.checkpoint"),
        slowdown=get_float(c, "slowdown", "goodput.checkpoint", default=1.0, minimum=1.0),
    )
    if ck.slow_probability > 0 and ck.slowdown == 1.0:
        raise ConfigError("goodput.checkpoint.slow_probability > 0 needs slowdown > 1 (e.g. 3 = a contended save "
                          "writes 3 x slower)")
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
        opt = lambda k, get=get_float, **kw: get(fd, k, where, default=None, **kw) if k in fd else None
        o = FailureOverride(str(name), opt("rate_per_device_hour"), per, opt("detection_s"),
                            opt("needs_repair", get_bool), opt("rate_per_hour"), opt("ref_gpus", get_int, minimum=1),
                            opt("size_exponent"), opt("shape", positive=True))
        if per == "job" and o.rate_per_device_hour is not None:
            raise ConfigError(f"{where}: per: job takes rate_per_hour (failures per job-hour at ref_gpus), not "
                              f"rate_per_device_hour")
        if per in ("gpu", "node") and o.rate_per_hour is not None:
            raise ConfigError(f"{where}: rate_per_hour is for per: job; per: {per} takes rate_per_device_hour")
        fails.append(o)
    s = d.get("slow_nodes") or {}
    check_keys(s, SLOW_KEYS, "goodput.slow_nodes")
    slow = SlowNodeSpec(
        rate_per_node_hour=get_float(s, "rate_per_node_hour", "goodput.slow_nodes", default=0.0),
        slowdown=get_float(s, "slowdown", "goodput.slow_nodes", default=1.0, minimum=1.0),
        detection_hours=get_float(s, "detection_hours", "goodput.slow_nodes", default=0.0))
    if slow.rate_per_node_hour > 0 and slow.slowdown == 1.0:
        raise ConfigError("goodput.slow_nodes.rate_per_node_hour > 0 needs slowdown > 1 (e.g. 1.2 = steps 20 % "
                          "slower while a node is slow)")
    if "restart_s" in d and d.get("restart") and any(k != "cv" for k in d["restart"]):
        raise ConfigError("goodput.restart_s and goodput.restart's parts are both set: give the parts (their sum is "
                          "the restart time) or restart_s, not both")
    cost = d.get("cost_per_gpu_hour")
    return GoodputSpec(
        days=days, train_tokens=tt,
        seeds=get_int(d, "seeds", "goodput", default=20, minimum=1, maximum=MAX_GOODPUT_SEEDS,
                      why=" runs (each a whole simulated training run); use fewer seeds"),
        seed=get_int(d, "seed", "goodput", default=0, minimum=0),
        checkpoint=ck,
        restart_s=get_float(d, "restart_s", "goodput", default=300.0),
        spare_nodes=get_int(d, "spare_nodes", "goodput", default=0, minimum=0),
        repair_hours=get_float(d, "repair_hours", "goodput", default=24.0),
        elastic=get_bool(d, "elastic", "goodput", default=False),
        failures=tuple(fails),
        slow_nodes=slow,
        cost_per_gpu_hour=None if cost is None else get_float(d, "cost_per_gpu_hour", "goodput"),
        fleet=get_str(d, "fleet", "goodput", default="llama3-405b-h100"),
        lemons=_lemons(d.get("lemons")),
        domains=_domains(d.get("domains")),
        restart=_restart(d.get("restart")),
        rollbacks=_rollbacks(d.get("rollbacks")),
        maintenance=_maintenance(d.get("maintenance")),
    )


def check_seeds(n: int, where: str = "goodput.seeds") -> None:
    """A number of runs in ``[1, MAX_GOODPUT_SEEDS]``."""
    if n < 1:
        raise ConfigError(f"{where} = {n} must be >= 1")
    if n > MAX_GOODPUT_SEEDS:
        raise ConfigError(f"{where} = {n:,} is over the limit of {MAX_GOODPUT_SEEDS:,} runs (each a whole simulated "
                          f"training run); use fewer seeds")


def check_days(days: float, where: str) -> None:
    """A horizon (or a token budget in failure-free days) within ``MAX_GOODPUT_DAYS``."""
    if days > MAX_GOODPUT_DAYS:
        raise ConfigError(f"{where} = {days:g} days is over the limit of {MAX_GOODPUT_DAYS:,} days (ten years of "
                          f"simulated training); give a shorter run")


def _probability(d: dict, key: str, where: str) -> float:
    v = get_float(d, key, where, default=0.0)
    if v >= 1.0:
        raise ConfigError(f"{where}.{key} = {v!r} must be a probability below 1")
    return v


def _section(v: Any, keys, where: str) -> dict:
    v = {} if v is None else v
    check_keys(v, keys, where)
    return v


def _lemons(v: Any) -> LemonSpec:
    w = "goodput.lemons"
    v = _section(v, LEMON_KEYS, w)
    out = LemonSpec(fraction=get_float(v, "fraction", w, default=0.0),
                    rate_per_node_hour=get_float(v, "rate_per_node_hour", w, default=0.0),
                    drain_after=get_int(v, "drain_after", w, default=3, minimum=0, maximum=10_000,
                                        why=" failures; 0 = never drained"),
                    detection_s=get_float(v, "detection_s", w, default=60.0))
    if out.fraction > 1:
        raise ConfigError(f"{w}.fraction = {out.fraction!r} must be in [0, 1] (the share of the job's nodes that are bad)")
    if out.fraction > 0 and out.rate_per_node_hour == 0:
        raise ConfigError(f"{w}.fraction > 0 needs rate_per_node_hour > 0 (how often a bad node fails)")
    return out


def _domains(v: Any) -> tuple[DomainSpec, ...]:
    if v is None:
        return ()
    if not isinstance(v, dict):
        raise ConfigError(f"goodput.domains = {v!r} must be a mapping of domain name to fields ({', '.join(DOMAIN_KEYS)})")
    out = []
    for name, fd in v.items():
        w = f"goodput.domains.{name}"
        fd = _section(fd, DOMAIN_KEYS, w)
        if "nodes" not in fd:
            raise ConfigError(f"missing required field '{w}.nodes': add it (the nodes one event takes down)")
        opt = lambda k: get_float(fd, k, w, default=None) if k in fd else None
        out.append(DomainSpec(str(name), get_int(fd, "nodes", w, minimum=1), opt("rate_per_domain_hour"),
                              opt("detection_s"), opt("repair_hours"),
                              get_float(fd, "shape", w, default=1.0, positive=True)))
    return tuple(out)


def _restart(v: Any) -> RestartSpec:
    w = "goodput.restart"
    v = _section(v, RESTART_KEYS, w)
    return RestartSpec(**{k: get_float(v, k, w, default=0.0) for k in RESTART_KEYS},
                       parts=any(k != "cv" for k in v))


def _rollbacks(v: Any) -> RollbackSpec:
    w = "goodput.rollbacks"
    v = _section(v, ROLLBACK_KEYS, w)
    out = RollbackSpec(rate_per_day=get_float(v, "rate_per_day", w, default=0.0),
                       steps_back=get_int(v, "steps_back", w, default=0, minimum=0),
                       detection_s=get_float(v, "detection_s", w, default=600.0))
    if out.rate_per_day > 0 and out.steps_back == 0 and "steps_back" not in v:
        raise ConfigError(f"{w}.rate_per_day > 0 needs steps_back (iterations rolled back before the last "
                          f"checkpoint; 0 = back to the last checkpoint only)")
    return out


def _maintenance(v: Any) -> MaintenanceSpec:
    w = "goodput.maintenance"
    v = _section(v, MAINTENANCE_KEYS, w)
    out = MaintenanceSpec(every_hours=get_float(v, "every_hours", w, default=0.0),
                          duration_hours=get_float(v, "duration_hours", w, default=0.0))
    if out.every_hours > 0 and not 0 < out.duration_hours < out.every_hours:
        raise ConfigError(f"{w}.duration_hours = {out.duration_hours:g} must be > 0 and shorter than every_hours "
                          f"({out.every_hours:g})")
    return out
