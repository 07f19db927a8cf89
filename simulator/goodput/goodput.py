"""A whole training run over days or weeks: failures, checkpoints, restarts and goodput (SimPy).

The iteration simulator predicts one step; a long run also stops. This module replays a run as a
SimPy discrete-event simulation with few events:

* one process per failure component (GPU, HBM, network, NIC, host, software, ...): an independent
  Poisson source with rate ``rate_per_device_hour x devices`` (defaults from the Llama 3 report,
  ``topologies/data/failure_rates.yaml``);
* one repair process per failed node (a node that leaves the job comes back ``repair_hours`` later
  into the spare pool);
* a slow-node source: a node degrades, every synchronous step runs ``slowdown`` x longer until it is
  detected (``detection_hours``) and drained (a planned restart with a spare);
* the job: a process that trains in segments. Inside a segment the checkpoint cycle (``interval_s``
  seconds of training, then a save) is not simulated event by event: how much was trained and which
  checkpoint is the last durable one at any instant follow in closed form from the segment's start,
  so a 54-day run on 16 k GPUs costs a few hundred events, not one per step or checkpoint.

On a failure while training the job loses the work since the last durable checkpoint, stops after
``detection_s`` (a second failure while it is stopping is the same incident), waits for a spare or a
repair (or, ``elastic``, continues on fewer data-parallel replicas with the iteration time re-simulated
for the smaller job: DLRover, torchelastic), restarts (``restart_s``) and loads the checkpoint; a
failure while it restarts or loads makes it start over (Daly 2006's model). Synchronous saves block
for ``bytes / storage bandwidth``; asynchronous saves block only for the device-to-host snapshot and
become durable when the background write ends (MegaScale, Jiang et al. 2024, Section 4; torch.distributed
async_save).

Goodput = tokens trained / (tokens the failure-free job would train in the same wall time): the
"effective training time ratio" of Kokolis et al. 2024 (Section 5). Every lost second is booked to one
mechanism (checkpoint saves, lost work, detection, waiting for repair, restart, load, slower elastic
job, slow node, planned drains / scale-ups), so ``useful + sum(losses) = wall time`` exactly (tested).

Checkpoint-interval closed forms (exponential failures, job MTBF ``M``, blocking save ``C``, restart
``R``): Young 1974 ("A first order approximation to the optimum checkpoint interval", CACM 17(9))
``tau = sqrt(2 C M)``; Daly 2006 ("A higher order estimate of the optimum checkpoint interval for
restart dumps", FGCS 22(3)), Eq. 37: ``tau = sqrt(2 C M) [1 + sqrt(C/(2M))/3 + C/(18 M)] - C`` for
``C < 2M``, else ``M``; expected wall time per unit of work (Daly 2006, Eq. 13):
``T_w / T_s = M e^{R/M} (e^{(tau + C)/M} - 1) / tau``, whose inverse is the closed-form goodput.

Determinism: each (seed, source) pair has its own ``numpy.random.Generator``; SimPy breaks time ties
by insertion order, so the same seeds give byte-identical results.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import numpy as np
import simpy

from strategies.errors import ConfigError
from strategies.goodput_file import GoodputSpec, parse_goodput

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


class _Segment:
    """Training from ``t0`` with the checkpoint cycle (interval compute, then a blocking save).

    Compute time after ``x`` seconds: ``k tau + min(x - k P, tau)`` with ``P = tau + C_block`` and
    ``k = floor(x / P)``; save ``j`` is durable at ``j P + C_commit``. Throughput may change inside a
    segment (slow node): breakpoints ``(compute time, tokens, tokens/s, elastic factor, slow factor)``.
    """

    def __init__(self, t0, tau, cb, cc, speed, e, s):
        self.t0, self.tau, self.cb, self.cc = t0, tau, cb, cc
        self.period = tau + cb
        self.bps = [(0.0, 0.0, speed, e, s)]

    def compute(self, x: float) -> float:
        k = math.floor(x / self.period)
        return k * self.tau + min(x - k * self.period, self.tau)

    def durable(self, x: float) -> int:
        return max(0, math.floor((x - self.cc) / self.period)) if x >= self.cc else 0

    def tokens(self, c: float) -> float:
        b = next(b for b in reversed(self.bps) if b[0] <= c)
        return b[1] + b[2] * (c - b[0])

    def set_speed(self, x: float, speed: float, e: float, s: float) -> None:
        c = self.compute(x)
        self.bps.append((c, self.tokens(c), speed, e, s))

    def degradation(self, c_end: float) -> tuple[float, float]:
        """(elastic, slow) losses in full-job seconds over compute time [0, c_end]."""
        el = sl = 0.0
        for i, (c0, _tok, _v, e, s) in enumerate(self.bps):
            c1 = self.bps[i + 1][0] if i + 1 < len(self.bps) else c_end
            d = max(0.0, min(c1, c_end) - c0)
            el += d * (1.0 - e)
            sl += d * e * (1.0 - 1.0 / s)
        return el, sl

    def wall_for_compute(self, c: float) -> float:
        """Segment time at which compute time ``c`` is reached (saves before it included)."""
        if c <= 0:
            return 0.0
        return c + (math.ceil(c / self.tau - 1e-12) - 1) * self.cb


class _Run:
    def __init__(self, m: RunModel, seed: int, record_checkpoints: bool):
        self.m = m
        self.seed = seed
        self.env = simpy.Environment()
        self.rng_slow = np.random.default_rng([seed, len(m.components)])
        self.spares = m.spare_nodes
        self.missing = 0            # nodes out of the job with no spare to replace them
        self.slow = 0               # slow nodes not yet detected
        self.state = "running"
        self.tokens = 0.0           # durable tokens
        self.useful_s = 0.0
        self.losses = dict.fromkeys(MECHANISMS, 0.0)
        self.by_comp: dict = {c.name: 0.0 for c in m.components}
        self.failures = {c.name: 0 for c in m.components}
        self.interruptions = {c.name: 0 for c in m.components}
        self.checkpoints = 0
        self.finished = False
        self.min_dp = m.dp
        self.dp_now = m.dp
        self.progress = [(0.0, 0.0)]
        self.events: list = []
        self.record_ckpt = record_checkpoints
        self.node_back = self.env.event()
        self._speed_cache: dict = {}
        self.seg = None
        self.job = self.env.process(self._job())
        for i, c in enumerate(m.components):
            if c.rate_per_s > 0:
                self.env.process(self._source(c, np.random.default_rng([seed, i])))
        if m.slow_rate_per_node_hour > 0:
            self.env.process(self._slow_source())

    # -- throughput -------------------------------------------------------------------------------
    def _factors(self, dp: int) -> tuple[float, float]:
        """(elastic factor, slow factor) of the job at data-parallel size ``dp``."""
        if dp not in self._speed_cache:
            if dp == self.m.dp or self.m.iteration_time is None:
                e = dp / self.m.dp
            else:  # tokens per iteration scale with dp; the iteration time is re-simulated
                e = (dp / self.m.dp) * self.m.iteration_time(self.m.dp) / self.m.iteration_time(dp)
            self._speed_cache[dp] = e
        return self._speed_cache[dp], (self.m.slowdown if self.slow else 1.0)

    # -- sources ----------------------------------------------------------------------------------
    def _source(self, comp: Component, rng):
        lam = comp.rate_per_s
        while True:
            yield self.env.timeout(rng.exponential(1.0 / lam))
            self.failures[comp.name] += 1
            if comp.needs_repair:
                self._take_node_out()
            if self.state in ("running", "restarting"):
                self.interruptions[comp.name] += 1
                self.events.append((self.env.now, "failure", comp.name))
                self.job.interrupt(("failure", comp))

    def _take_node_out(self):
        if self.spares > 0:
            self.spares -= 1
        else:
            self.missing += 1
        self.env.process(self._repair())

    def _repair(self):
        yield self.env.timeout(self.m.repair_s)
        if self.missing > 0:
            self.missing -= 1
            if self.state == "waiting" and not self.node_back.triggered:
                self.node_back.succeed()
            elif self.state == "running" and self.dp_now < self.m.dp:
                self.job.interrupt(("scale-up", None))
        else:
            self.spares += 1

    def _slow_source(self):
        lam = self.m.slow_rate_per_node_hour * self.m.num_nodes / HOUR
        while True:
            yield self.env.timeout(self.rng_slow.exponential(1.0 / lam))
            self.slow += 1
            self.events.append((self.env.now, "slow", ""))
            if self.slow == 1 and self.state == "running":
                self.job.interrupt(("speed", None))
            self.env.process(self._drain_after_detection())

    def _drain_after_detection(self):
        yield self.env.timeout(self.m.slow_detection_s)
        self.slow -= 1
        self._take_node_out()  # drained: replaced by a spare, repaired like a failed node
        if self.state == "running":
            self.job.interrupt(("drain", None))

    # -- the job ----------------------------------------------------------------------------------
    def _bank(self, seg: _Segment, kept_c: float, c: float, x: float) -> float:
        """Bank ``kept_c`` seconds of the segment's compute as tokens and useful time; book its
        elastic / slow-node degradation and the ``x - c`` seconds of saves. Returns the tokens."""
        tok = seg.tokens(kept_c)
        self.tokens += tok
        self.useful_s += tok / self.m.full_tokens_per_s
        el, sl = seg.degradation(kept_c)
        self.losses["elastic"] += el
        self.losses["slow_node"] += sl
        self.losses["checkpoint"] += x - c
        return tok

    def _book(self, seg: _Segment, x: float, keep_all: bool, comp=None) -> None:
        """Close segment ``seg`` after ``x`` seconds: bank durable work, book the rest as losses."""
        c = seg.compute(x)
        kept_c = c if keep_all else seg.durable(x) * seg.tau
        kept_c = min(kept_c, c)
        tok = self._bank(seg, kept_c, c, x)
        self.losses["lost_work"] += c - kept_c
        if comp is not None:
            self.by_comp[comp.name] += c - kept_c
        n = seg.durable(x) if not keep_all else math.floor(c / seg.tau + 1e-12)
        self.checkpoints += n
        if self.record_ckpt:
            for j in range(1, n + 1):
                self.events.append((seg.t0 + j * seg.period + seg.cc, "checkpoint", ""))
        self.progress.append((self.env.now, self.tokens - tok + seg.tokens(c)))
        self.progress.append((self.env.now, self.tokens))

    def _job(self):
        m, env = self.m, self.env
        while True:
            # ---- train until a failure, a planned restart, or the token budget ----
            self.state = "running"
            e, s = self._factors(self.dp_now)
            seg = self.seg = _Segment(env.now, m.interval_s, m.save_block_s, m.save_commit_s,
                                      m.full_tokens_per_s * e / s, e, s)
            cause = None
            while cause is None:
                x_now = env.now - seg.t0
                if m.target_tokens is not None:
                    c_now = seg.compute(x_now)
                    need = m.target_tokens - self.tokens - seg.tokens(c_now)
                    c_end = c_now + need / seg.bps[-1][2]
                    wait = seg.wall_for_compute(c_end) + m.save_block_s + m.save_commit_s - x_now
                else:
                    wait = math.inf
                try:
                    yield env.timeout(wait) if wait < math.inf else env.event()
                    # token budget reached: the final save is durable
                    self._bank(seg, c_end, c_end, env.now - seg.t0)
                    self.checkpoints += math.ceil(c_end / seg.tau - 1e-12)
                    self.progress.append((env.now, self.tokens))
                    self.finished = True
                    self.state = "done"
                    return
                except simpy.Interrupt as intr:
                    kind, comp = intr.cause
                    if kind == "speed":
                        e, s = self._factors(self.dp_now)
                        seg.set_speed(env.now - seg.t0, m.full_tokens_per_s * e / s, e, s)
                    else:
                        cause = (kind, comp)
            kind, comp = cause
            x = env.now - seg.t0
            if kind == "failure":
                self._book(seg, x, keep_all=False, comp=comp)
            else:  # planned (drain a slow node, scale up): save now, keep everything
                self._book(seg, x, keep_all=True)
                self.checkpoints += 1
                self.state = "saving"
                yield env.timeout(m.save_block_s + m.save_commit_s)
                self.losses["planned"] += m.save_block_s + m.save_commit_s
            # ---- stop, replace, restart, load (a failure while restarting starts it over) ----
            while True:
                if kind == "failure":
                    self.state = "detecting"
                    yield env.timeout(comp.detection_s)
                    self.losses["detection"] += comp.detection_s
                    self.by_comp[comp.name] += comp.detection_s
                if self.missing > 0 and not (m.elastic and m.dp - self.missing >= 1):
                    self.state = "waiting"
                    t0 = env.now
                    while self.missing > 0:
                        self.node_back = env.event()
                        yield self.node_back
                    self.losses["repair_wait"] += env.now - t0
                    if comp is not None:
                        self.by_comp[comp.name] += env.now - t0
                self.dp_now = m.dp - self.missing
                self.min_dp = min(self.min_dp, self.dp_now)
                self.state = "restarting"
                t0 = env.now
                try:
                    yield env.timeout(m.restart_s)
                    self.losses["restart"] += m.restart_s
                    yield env.timeout(m.load_s)
                    self.losses["load"] += m.load_s
                    if comp is not None:
                        self.by_comp[comp.name] += m.restart_s + m.load_s
                    if self.missing > 0 and not (m.elastic and m.dp - self.missing >= 1):
                        kind, comp = "restart", None  # a node was drained while restarting: wait for it
                        continue
                    self.events.append((env.now, "restart", ""))
                    self.dp_now = m.dp - self.missing  # nodes repaired meanwhile rejoin
                    self.min_dp = min(self.min_dp, self.dp_now)
                    break
                except simpy.Interrupt as intr:
                    done = env.now - t0
                    self.losses["restart"] += min(done, m.restart_s)
                    self.losses["load"] += max(0.0, done - m.restart_s)
                    if comp is not None:
                        self.by_comp[comp.name] += done
                    kind, comp = intr.cause
                    if kind != "failure":  # a repair or drain during a restart: it is taken into account now
                        kind, comp = "restart", None

    def result(self) -> RunResult:
        wall = self.env.now
        return RunResult(self.seed, wall, self.tokens, self.useful_s, dict(self.losses), dict(self.by_comp),
                         dict(self.failures), dict(self.interruptions), self.checkpoints, self.finished,
                         self.min_dp, self.progress, sorted(self.events, key=lambda e: e[0]))


def simulate_run(m: RunModel, seed: int, *, record_checkpoints: bool = False) -> RunResult:
    """Simulate one run of ``m`` with ``seed`` (until ``horizon_s`` or ``target_tokens``)."""
    check_run_model(m)
    run = _Run(m, seed, record_checkpoints)
    if m.target_tokens is not None:
        run.env.run(until=run.job)
    else:
        run.env.run(until=m.horizon_s)
        _close_at_horizon(run)
    return run.result()


def _close_at_horizon(run: _Run) -> None:
    """Book the state at the horizon: work in progress counts as trained (the run goes on); the
    unfinished stop / restart phase is charged for its elapsed part."""
    if run.state == "running":
        run._book(run.seg, run.env.now - run.seg.t0, keep_all=True)
    rest = run.env.now - run.useful_s - sum(run.losses.values())
    if rest <= 1e-9 * max(1.0, run.env.now):
        return
    if run.state == "restarting":
        run.losses["restart"] += min(rest, run.m.restart_s)
        run.losses["load"] += max(0.0, rest - run.m.restart_s)
    else:
        run.losses[{"detecting": "detection", "waiting": "repair_wait", "saving": "planned"}[run.state]] += rest


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


# ---- closed forms ---------------------------------------------------------------------------------

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


# ---- many seeds, interval sweeps -------------------------------------------------------------------

@dataclass
class Summary:
    """Results of one interval over seeds."""

    interval_s: float
    runs: list

    def arr(self, name: str) -> np.ndarray:
        return np.array([getattr(r, name) for r in self.runs], dtype=float)

    @property
    def goodput(self) -> float:
        return float(self.arr("goodput").mean())


def run_seeds(m: RunModel, seeds: list[int], *, record_checkpoints: bool = False) -> Summary:
    return Summary(m.interval_s, [simulate_run(m, s, record_checkpoints=record_checkpoints) for s in seeds])


def best_interval(summaries: list[Summary]) -> float:
    """Interval with the highest mean goodput, refined by a parabola through it and its neighbours in
    log interval (the goodput curve is flat near its maximum, Daly 2006 Fig. 3)."""
    ss = sorted(summaries, key=lambda s: s.interval_s)
    gs = [s.goodput for s in ss]
    i = int(np.argmax(gs))
    if 0 < i < len(ss) - 1:
        x = np.log([ss[i - 1].interval_s, ss[i].interval_s, ss[i + 1].interval_s])
        y = np.array(gs[i - 1:i + 2])
        a, b, _c = np.polyfit(x, y, 2)
        if a < 0:
            return float(np.exp(np.clip(-b / (2 * a), x[0], x[2])))
    return ss[i].interval_s


def sweep_intervals(m: RunModel, intervals, seeds) -> list[Summary]:
    """The same seeds (common random numbers) for every interval."""
    return [run_seeds(replace(m, interval_s=float(t)), seeds) for t in intervals]


# ---- from a strategy file ---------------------------------------------------------------------------

def load_failure_defaults(path=RATES_FILE) -> dict:
    from strategies.config import load_mapping
    data = load_mapping(path, "failure-rate file")
    return data["components"]


def merge_components(spec: GoodputSpec, num_gpus: int, num_nodes: int, defaults: dict | None = None
                     ) -> tuple[Component, ...]:
    """Default components with the file's overrides; a new component must give rate and per."""
    d = {k: dict(v) for k, v in (load_failure_defaults() if defaults is None else defaults).items()}
    for o in spec.failures:
        if o.name not in d:
            if o.rate_per_device_hour is None or o.per is None:
                from strategies.config import did_you_mean
                raise ConfigError(f"goodput.failures.{o.name} is not a default component"
                                  f"{did_you_mean(o.name, d)} (defaults: {', '.join(d)}); a new component needs "
                                  f"rate_per_device_hour and per (gpu or node)")
            d[o.name] = {"detection_s": 60.0, "needs_repair": True, "source": "strategy file"}
        for k in ("rate_per_device_hour", "per", "detection_s", "needs_repair"):
            v = getattr(o, k)
            if v is not None:
                d[o.name][k] = v
                d[o.name]["source"] = "strategy file"
    out = []
    for name, v in d.items():
        count = num_gpus if v["per"] == "gpu" else num_nodes
        out.append(Component(name, float(v["rate_per_device_hour"]), v["per"], count, float(v["detection_s"]),
                             bool(v["needs_repair"]), str(v.get("source", ""))))
    return tuple(out)


def checkpoint_bytes(plan) -> tuple[float, float]:
    """(bytes of one checkpoint, largest bytes one GPU writes): each parameter's 16-bit weight and
    fp32 optimizer states (master weight, momentum, variance; ZeRO Section 3.1, K = 12) once, as a
    sharded (Megatron distributed / torch.distributed.checkpoint) save writes them; gradients are not
    saved. Per GPU from the static memory model (``taskgraph.memory.static_memory``)."""
    from taskgraph.memory import ADAM_STATE_BYTES, params_per_gpu
    s = plan.sizes
    per_param = 2 + ADAM_STATE_BYTES
    # params_per_gpu: the parameters one GPU of each pipeline rank holds before ZeRO-3 partitioning
    # (tp-sharded), i.e. its TP shard of the stage; every such shard is saved once
    held = params_per_gpu(plan)
    total = float(sum(s.tp * n * per_param for n in held.values()))
    # a sharded save spreads each shard's bytes over the dp x cp ranks that hold it
    per_gpu = max(held.values()) * per_param / (s.dp * s.cp)
    return total, per_gpu


@dataclass
class GoodputSetup:
    """A strategy resolved for the run model: the model, the policy, and what it was derived from."""

    model: RunModel
    spec: GoodputSpec
    intervals: tuple          # intervals to simulate (the policy's, or the list)
    policy: str               # 'young', 'daly', 'fixed', 'list'
    iteration_time_s: float
    tokens_per_iteration: float
    num_gpus: int
    checkpoint_bytes: float
    checkpoint_gb_per_gpu: float
    mtbf_s: float
    young_s: float
    daly_s: float
    optimum_closed_form_s: float
    mean_down_s: float


def setup_from_strategy(strategy, spec: GoodputSpec | None = None, *, days: float | None = None,
                        train_tokens: float | None = None, interval=None, sim=None) -> GoodputSetup:
    """Simulate one iteration of ``strategy`` and build the run model from its ``goodput`` section."""
    from simulator.simulation.strategy import simulate_strategy
    from strategies.goodput_file import parse_interval
    spec = spec if spec is not None else parse_goodput(strategy.raw.get("goodput"))
    if days is not None and train_tokens is not None:
        raise ConfigError("--days and --train-tokens are both given: give one")
    if days is not None:
        if not days > 0:
            raise ConfigError(f"--days = {days!r} must be > 0")
        spec = replace(spec, days=days, train_tokens=None)
    if train_tokens is not None:
        if not train_tokens > 0:
            raise ConfigError(f"--train-tokens = {train_tokens!r} must be > 0")
        spec = replace(spec, train_tokens=train_tokens, days=None)
    if interval is not None:
        spec = replace(spec, checkpoint=replace(spec.checkpoint, interval_s=parse_interval(interval, "--interval")))
    if spec.days is None and spec.train_tokens is None:
        tt = strategy.training.train_tokens
        if tt is None:
            raise ConfigError("the run has no length: set goodput.days or goodput.train_tokens (or "
                              "training.train_tokens), or pass --days D / --train-tokens T")
        spec = replace(spec, train_tokens=tt)
    sim = sim if sim is not None else simulate_strategy(strategy)
    plan = sim.plan
    if spec.cost_per_gpu_hour is None:   # the catalog's price of the GPU (topologies/data/prices.yaml)
        from topologies.pricing import plan_price
        spec = replace(spec, cost_per_gpu_hour=plan_price(plan))
    it = sim.report.makespan_s
    tpi = float(plan.tokens_per_iteration)
    n_gpus = plan.num_gpus
    n_nodes = plan.cluster.nodes
    comps = merge_components(spec, n_gpus, n_nodes)
    ck = spec.checkpoint
    total_b, per_gpu_b = checkpoint_bytes(plan)
    write_s = total_b / (ck.storage_gb_per_s * 1e9)
    load_s = total_b / ((ck.load_gb_per_s or ck.storage_gb_per_s) * 1e9)
    if ck.async_save:
        block = per_gpu_b / (ck.snapshot_gb_per_s * 1e9)
        commit = write_s
    else:
        block, commit = write_s, 0.0
    cache = {plan.sizes.dp: it}

    def iteration_time(dp: int) -> float:
        if dp not in cache:
            cache[dp] = _elastic_iteration_time(strategy, plan, dp)
        return cache[dp]

    lam = sum(c.rate_per_s for c in comps)
    mtbf = 1.0 / lam if lam > 0 else math.inf
    down = (sum(c.rate_per_s * c.detection_s for c in comps) / lam if lam > 0 else 0.0) + spec.restart_s + load_s
    c_eff = block + commit  # an unfinished asynchronous save is as good as none
    young = young_interval(block, mtbf) if lam > 0 else math.inf
    daly = daly_interval(block, mtbf) if lam > 0 else math.inf
    opt = optimal_interval_closed_form(c_eff, down, mtbf) if lam > 0 else math.inf
    pol = ck.interval_s
    if pol == "young":
        intervals, policy = (young,), "young"
    elif pol == "daly":
        intervals, policy = (daly,), "daly"
    elif isinstance(pol, tuple):
        intervals, policy = pol, "list"
    else:
        intervals, policy = (float(pol),), "fixed"
    if not all(math.isfinite(t) for t in intervals):
        raise ConfigError("checkpoint.interval_s = young/daly needs failures (all failure rates are 0); give the "
                          "interval in seconds")
    m = RunModel(
        components=comps, full_tokens_per_s=tpi / it, interval_s=float(intervals[0]),
        save_block_s=block, save_commit_s=commit, load_s=load_s, restart_s=spec.restart_s,
        horizon_s=spec.days * DAY if spec.days is not None else None, target_tokens=spec.train_tokens,
        dp=plan.sizes.dp, num_nodes=n_nodes, spare_nodes=spec.spare_nodes, repair_s=spec.repair_hours * HOUR,
        elastic=spec.elastic, iteration_time=iteration_time,
        slow_rate_per_node_hour=spec.slow_nodes.rate_per_node_hour, slowdown=spec.slow_nodes.slowdown,
        slow_detection_s=spec.slow_nodes.detection_hours * HOUR)
    for t in intervals:
        check_run_model(replace(m, interval_s=float(t)))
    return GoodputSetup(m, spec, tuple(float(t) for t in intervals), policy, it, tpi, n_gpus, total_b,
                        per_gpu_b / 1e9, mtbf, young, daly, opt, down)


def _elastic_iteration_time(strategy, plan, dp: int) -> float:
    """Iteration time of the same job on ``dp`` data-parallel replicas: same per-replica batch,
    ``nodes * dp / full dp`` nodes, re-simulated (simulator.simulation.strategy.simulate_strategy)."""
    from simulator.simulation.strategy import simulate_strategy
    full = plan.sizes.dp
    gb = strategy.training.global_batch
    if gb % full:
        raise ConfigError(f"elastic: training.global_batch {gb} is not a multiple of dp {full}")
    nodes = plan.cluster.nodes
    if (nodes * dp) % full:
        raise ConfigError(f"elastic: {nodes} nodes over dp {full} is not a whole number of nodes per replica; "
                          f"elastic training drops whole replicas (set goodput.elastic: false)")
    cl = strategy.cluster
    if isinstance(cl, dict) and "nodes" in cl:
        cl = {**cl, "nodes": nodes * dp // full}
    elif isinstance(cl, str):
        cl = {"preset": cl, "nodes": nodes * dp // full}
    else:
        raise ConfigError("elastic: the cluster must be a preset mapping ({preset: NAME, nodes: N}) so the smaller "
                          "job can be re-simulated; set goodput.elastic: false or write the cluster that way")
    s2 = replace(strategy, cluster=cl, parallel=replace(strategy.parallel, dp=dp),
                 training=replace(strategy.training, global_batch=gb // full * dp))
    return simulate_strategy(s2).report.makespan_s


# ---- the report -------------------------------------------------------------------------------------

def default_sweep(center: float, horizon_s: float | None) -> list[float]:
    """Intervals around the closed-form optimum (factors 1/4 .. 4, denser near 1)."""
    fs = (0.25, 0.4, 0.55, 0.7, 0.85, 1.0, 1.2, 1.45, 1.8, 2.5, 4.0)
    out = [center * f for f in fs]
    if horizon_s is not None:
        out = [t for t in out if t < horizon_s]
    return out


def _stats(x: np.ndarray) -> dict:
    n = x.size
    mean = float(x.mean())
    se = float(x.std(ddof=1) / math.sqrt(n)) if n > 1 else 0.0
    return {"mean": mean, "ci95": [mean - 1.96 * se, mean + 1.96 * se], "min": float(x.min()), "max": float(x.max())}


def goodput_report(setup: GoodputSetup, seeds: int | None = None, *, sweep: bool = True) -> dict:
    """Run the policy over seeds (and the interval sweep) and return the JSON-ready report."""
    m = setup.model
    n = seeds if seeds is not None else setup.spec.seeds
    if n < 1:
        raise ConfigError(f"--seeds = {n} must be >= 1")
    seed_list = [setup.spec.seed + i for i in range(n)]
    runs = sweep_intervals(m, setup.intervals, seed_list)
    best_listed = max(runs, key=lambda s: (s.goodput, -s.interval_s))
    main = best_listed
    out: dict = {}
    sw = []
    if sweep and math.isfinite(setup.optimum_closed_form_s):
        cand = sorted(set(default_sweep(setup.optimum_closed_form_s, m.horizon_s)) | set(setup.intervals))
        sweep_runs = [r for r in runs] + [s for s in sweep_intervals(m, [t for t in cand if t not in setup.intervals],
                                                                    seed_list)]
        sw = sorted(sweep_runs, key=lambda s: s.interval_s)
    rs = main.runs
    wall = np.array([r.wall_s for r in rs])
    gp = np.array([r.goodput for r in rs])
    tokens = np.array([r.tokens for r in rs])
    inter = np.array([sum(r.interruptions.values()) for r in rs], dtype=float)
    fails = np.array([sum(r.failures.values()) for r in rs], dtype=float)
    losses = {k: float(np.mean([r.losses[k] for r in rs])) / HOUR for k in MECHANISMS}
    by_comp = {k: float(np.mean([r.lost_by_component[k] for r in rs])) / HOUR for k in rs[0].lost_by_component}
    gpu_h_wasted = float(np.mean([(r.wall_s - r.useful_s) for r in rs])) / HOUR * setup.num_gpus
    out.update({
        "policy": setup.policy,
        "interval_s": main.interval_s,
        "seeds": n,
        "mode": "days" if m.horizon_s is not None else "train_tokens",
        "iteration_time_s": setup.iteration_time_s,
        "tokens_per_iteration": setup.tokens_per_iteration,
        "num_gpus": setup.num_gpus,
        "checkpoint_gb": setup.checkpoint_bytes / 1e9,
        "checkpoint_gb_per_gpu": setup.checkpoint_gb_per_gpu,
        "save_blocking_s": m.save_block_s,
        "save_durable_after_s": m.save_block_s + m.save_commit_s,
        "load_s": m.load_s,
        "restart_s": m.restart_s,
        "failure_rate_per_day": m.failure_rate_per_s * DAY,
        "mtbf_hours": setup.mtbf_s / HOUR,
        "wall_days": _stats(wall / DAY),
        "goodput": _stats(gp),
        "tokens": _stats(tokens),
        "interruptions": _stats(inter),
        "failures": _stats(fails),
        "expected_failures": m.failure_rate_per_s * float(wall.mean()),
        "interruptions_by_component": {c.name: float(np.mean([r.interruptions[c.name] for r in rs]))
                                       for c in m.components},
        "lost_hours_by_mechanism": losses,
        "lost_hours_by_component": by_comp,
        "gpu_hours": float(wall.mean()) / HOUR * setup.num_gpus,
        "gpu_hours_wasted": gpu_h_wasted,
        "checkpoints": float(np.mean([r.checkpoints for r in rs])),
        "min_dp": int(min(r.min_dp for r in rs)),
        "finished": all(r.finished for r in rs) if m.target_tokens is not None else None,
        "closed_form": {"young_s": setup.young_s, "daly_s": setup.daly_s,
                        "optimum_s": setup.optimum_closed_form_s,
                        "goodput_at_optimum": (daly_goodput(setup.optimum_closed_form_s, m.save_block_s + m.save_commit_s,
                                                            setup.mean_down_s, setup.mtbf_s)
                                               if math.isfinite(setup.mtbf_s) else 1.0),
                        "mean_down_s": setup.mean_down_s},
    })
    if setup.spec.cost_per_gpu_hour is not None:
        out["cost"] = out["gpu_hours"] * setup.spec.cost_per_gpu_hour
        out["cost_wasted"] = gpu_h_wasted * setup.spec.cost_per_gpu_hour
    if len(runs) > 1:
        out["intervals"] = [{"interval_s": s.interval_s, "goodput": s.goodput,
                             "wall_days": float(s.arr("wall_s").mean() / DAY)} for s in runs]
    if sw:
        out["sweep"] = [{"interval_s": s.interval_s, "goodput": s.goodput} for s in sw]
        out["best_interval_s"] = best_interval(sw)
    return out


def format_goodput(rep: dict, title: str) -> str:
    def ci(d, k=1.0, fmt=".2f"):
        return f"{d['mean'] * k:{fmt}} (95% CI {d['ci95'][0] * k:{fmt}} .. {d['ci95'][1] * k:{fmt}})"
    lines = [title,
             f"iteration {rep['iteration_time_s']:.3f} s on {rep['num_gpus']} GPUs; checkpoint "
             f"{rep['checkpoint_gb']:.0f} GB ({rep['checkpoint_gb_per_gpu']:.2f} GB/GPU): job pauses "
             f"{rep['save_blocking_s']:.1f} s per save, durable after {rep['save_durable_after_s']:.1f} s; "
             f"restart {rep['restart_s']:.0f} s + load {rep['load_s']:.1f} s",
             f"failures {rep['failure_rate_per_day']:.2f}/day (job MTBF {rep['mtbf_hours']:.2f} h); "
             f"checkpoint every {rep['interval_s']:.0f} s ({rep['policy']}); {rep['seeds']} seeds",
             f"wall-clock days   {ci(rep['wall_days'])}",
             f"goodput           {ci(rep['goodput'], 100, '.1f')} %",
             f"tokens trained    {rep['tokens']['mean']:.4g}",
             f"interruptions     {ci(rep['interruptions'], 1, '.1f')}   (failures {rep['failures']['mean']:.1f}, "
             f"expected rate x time {rep['expected_failures']:.1f})",
             "lost hours by mechanism: " + ", ".join(f"{k} {v:.1f}" for k, v in rep["lost_hours_by_mechanism"].items()
                                                     if v > 0),
             "lost hours by cause:     " + ", ".join(f"{k} {v:.1f}" for k, v in
                                                     sorted(rep["lost_hours_by_component"].items(),
                                                            key=lambda kv: -kv[1]) if v > 0),
             f"GPU-hours {rep['gpu_hours']:.4g}, wasted {rep['gpu_hours_wasted']:.4g}"
             + (f"; cost {rep['cost']:.4g}, wasted {rep['cost_wasted']:.4g}" if "cost" in rep else "")]
    if rep.get("min_dp") is not None and rep["min_dp"] < 0:
        pass
    cf = rep["closed_form"]
    if "best_interval_s" in rep:
        lines.append(f"best interval (simulated) {rep['best_interval_s']:.0f} s; closed form: optimum "
                     f"{cf['optimum_s']:.0f} s (goodput {100 * cf['goodput_at_optimum']:.1f} %), Young "
                     f"{cf['young_s']:.0f} s, Daly {cf['daly_s']:.0f} s")
    for row in rep.get("intervals", []):
        lines.append(f"  interval {row['interval_s']:>8.0f} s: goodput {100 * row['goodput']:.2f} %, "
                     f"{row['wall_days']:.2f} days")
    return "\n".join(lines)
