"""The SimPy replay of one run (see :mod:`simulator.goodput` for the events and the booking of losses):
a segment of training in closed form, the run's processes (failure sources, repairs, slow nodes, the job)
and :func:`simulate_run`.
"""
from __future__ import annotations

import math

import numpy as np
import simpy

from simulator.goodput.model import (
    HOUR,
    MECHANISMS,
    STREAM_LEMON,
    STREAM_RESTART,
    STREAM_SAVE,
    Component,
    RunModel,
    RunResult,
    check_run_model,
)


class Segment:
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


class _VarSegment(Segment):
    """The checkpoint cycle with saves of different lengths (storage contention): save ``j``'s write
    takes ``f_j`` x its nominal time, ``f_j = slowdown`` with probability ``p``, else 1. A synchronous
    save blocks for the write; an asynchronous one blocks for the snapshot, plus the wait for its own
    write when that outlasts the next interval (the write is waited for before the next snapshot,
    booked after this one: the same wall times). Period ``j`` ends at ``E_j`` (cumulative sums, drawn
    lazily in blocks); save ``j`` is durable at ``E_j + min(write_j, tau)`` (asynchronous) or ``E_j``.
    """

    BLOCK = 256

    def __init__(self, t0, tau, snapshot, write, is_async, p, slowdown, rng, speed, e, s):
        super().__init__(t0, tau, snapshot if is_async else write, 0.0, speed, e, s)
        self.snapshot, self.write, self.is_async = snapshot, write, is_async
        self.p, self.slowdown, self.rng = p, slowdown, rng
        self.ends = np.empty(0)
        self.durables = np.empty(0)

    def _grow(self, x: float = -1.0, n: int = 0) -> None:
        while self.ends.size < n or (self.ends.size == 0 or self.ends[-1] <= x):
            f = np.where(self.rng.random(self.BLOCK) < self.p, self.slowdown, 1.0)
            w = self.write * f
            if self.is_async:
                block, lag = self.snapshot + np.maximum(0.0, w - self.tau), np.minimum(w, self.tau)
            else:
                block, lag = w, np.zeros(self.BLOCK)
            start = self.ends[-1] if self.ends.size else 0.0
            ends = start + np.cumsum(self.tau + block)
            self.ends = np.concatenate([self.ends, ends])
            self.durables = np.concatenate([self.durables, ends + lag])

    def compute(self, x: float) -> float:
        self._grow(x)
        k = int(np.searchsorted(self.ends, x, side="right"))
        return k * self.tau + min(x - (self.ends[k - 1] if k else 0.0), self.tau)

    def durable(self, x: float) -> int:
        self._grow(x)
        return int(np.searchsorted(self.durables, x, side="right"))

    def wall_for_compute(self, c: float) -> float:
        if c <= 0:
            return 0.0
        n = math.ceil(c / self.tau - 1e-12) - 1
        if n <= 0:
            return c
        self._grow(n=n)
        return c + float(self.ends[n - 1]) - n * self.tau


def _lognormal(rng, mean: float, cv: float) -> float:
    """A draw with this mean and coefficient of variation (lognormal: sigma^2 = ln(1 + cv^2),
    mu = ln(mean) - sigma^2 / 2); the mean itself when ``cv`` or ``mean`` is 0."""
    if cv <= 0 or mean <= 0:
        return mean
    s2 = math.log1p(cv * cv)
    return float(rng.lognormal(math.log(mean) - s2 / 2.0, math.sqrt(s2)))


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
        self.failed_saves = 0
        self.maintenances = 0
        self.drained_lemons = 0
        self.rng_restart = np.random.default_rng([seed, STREAM_RESTART])
        self.rng_save = np.random.default_rng([seed, STREAM_SAVE])
        self.cur_restart, self.cur_load = m.restart_s, m.load_s
        # an asynchronous write still in flight when the next save is due is waited for: the job
        # pauses max(0, write - interval) more per save and a save is durable min(write, interval)
        # after its snapshot (torchtitan CheckpointManager: _async_wait() before each async_save)
        self.cb = m.save_block_s + max(0.0, m.save_commit_s - m.interval_s)
        self.cc = min(m.save_commit_s, m.interval_s)
        self.job = self.env.process(self._job())
        lemon = 0
        for i, c in enumerate(m.components):
            if c.rate_per_s <= 0:
                continue
            if c.per == "lemon":  # one source per bad node
                for _ in range(c.count):
                    self.env.process(self._lemon(c, np.random.default_rng([seed, STREAM_LEMON + lemon])))
                    lemon += 1
            else:
                self.env.process(self._source(c, np.random.default_rng([seed, i])))
        if m.slow_rate_per_node_hour > 0:
            self.env.process(self._slow_source())
        if m.maintenance_every_s > 0:
            self.env.process(self._maintenance())

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
    @staticmethod
    def _gap(rng, lam: float, shape: float) -> float:
        """Time to the next failure: exponential, or Weibull with the same mean ``1 / lam``
        (scale = mean / Gamma(1 + 1/shape))."""
        if shape == 1.0:
            return rng.exponential(1.0 / lam)
        return rng.weibull(shape) / (lam * math.gamma(1.0 + 1.0 / shape))

    def _source(self, comp: Component, rng):
        lam = comp.rate_per_s
        while True:
            yield self.env.timeout(self._gap(rng, lam, comp.shape))
            if comp.rollback_s > 0 and self.state != "running":
                continue  # a loss spike needs training
            self.failures[comp.name] += 1
            if comp.needs_repair:
                for _ in range(comp.nodes_per_event):  # a failure domain takes its nodes together
                    self._take_node_out(comp.repair_s)
            self._interrupt(comp)

    def _interrupt(self, comp: Component) -> None:
        if self.state in ("running", "restarting"):
            self.interruptions[comp.name] += 1
            self.events.append((self.env.now, "failure", comp.name))
            self.job.interrupt(("failure", comp))

    def _lemon(self, comp: Component, rng):
        """One bad node: fails at its own rate, restarts in place (it passes the health checks) and
        is drained after its ``drain_after``-th failure (replaced by a spare, never back)."""
        lam = comp.rate_per_device_hour / HOUR
        k = 0
        while comp.drain_after == 0 or k < comp.drain_after:
            yield self.env.timeout(self._gap(rng, lam, comp.shape))
            k += 1
            self.failures[comp.name] += 1
            if k == comp.drain_after:
                self.drained_lemons += 1
                self._take_node_out()
            self._interrupt(comp)

    def _maintenance(self):
        while True:
            yield self.env.timeout(self.m.maintenance_every_s)
            if self.state == "running":
                self.job.interrupt(("maintenance", None))

    def _take_node_out(self, repair_s: float | None = None):
        if self.spares > 0:
            self.spares -= 1
        else:
            self.missing += 1
        self.env.process(self._repair(self.m.repair_s if repair_s is None else repair_s))

    def _repair(self, repair_s: float):
        yield self.env.timeout(repair_s)
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
    def _bank(self, seg: Segment, kept_c: float, c: float, x: float) -> float:
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

    def _book(self, seg: Segment, x: float, keep_all: bool, comp=None) -> None:
        """Close segment ``seg`` after ``x`` seconds: bank durable work, book the rest as losses."""
        c = seg.compute(x)
        n = seg.durable(x) if not keep_all else math.floor(c / seg.tau + 1e-12)
        failed = back = 0
        p = self.m.save_failure_p
        if p > 0 and n > 0:
            if not keep_all:  # saves fail independently: the last good one is a geometric count back
                back = min(n, int(self.rng_save.geometric(1.0 - p)) - 1)
                failed = back + (int(self.rng_save.binomial(n - back - 1, p)) if n - back > 1 else 0)
            else:
                failed = int(self.rng_save.binomial(n, p))
        self.failed_saves += failed
        kept_c = c if keep_all else (n - back) * seg.tau
        roll = comp.rollback_s if comp is not None else 0.0
        undo = max(0.0, roll - kept_c)  # a rollback past this segment's start undoes banked work
        kept_c = min(max(0.0, kept_c - roll), c)
        if undo > 0:
            tok_undo = min(self.tokens, undo * self.m.full_tokens_per_s)
            self.tokens -= tok_undo
            self.useful_s -= tok_undo / self.m.full_tokens_per_s
            self.losses["lost_work"] += tok_undo / self.m.full_tokens_per_s
            self.by_comp[comp.name] += tok_undo / self.m.full_tokens_per_s
        tok = self._bank(seg, kept_c, c, x)
        self.losses["lost_work"] += c - kept_c
        if comp is not None:
            self.by_comp[comp.name] += c - kept_c
        n -= failed
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
            if m.save_slow_p > 0:
                is_async = m.save_commit_s > 0
                seg = self.seg = _VarSegment(env.now, m.interval_s, m.save_block_s,
                                             m.save_commit_s if is_async else m.save_block_s, is_async,
                                             m.save_slow_p, m.save_slowdown, self.rng_save,
                                             m.full_tokens_per_s * e / s, e, s)
            else:
                seg = self.seg = Segment(env.now, m.interval_s, self.cb, self.cc, m.full_tokens_per_s * e / s, e, s)
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
                    n_saves = math.ceil(c_end / seg.tau - 1e-12)
                    n_failed = int(self.rng_save.binomial(n_saves - 1, m.save_failure_p)) if (
                        m.save_failure_p > 0 and n_saves > 1) else 0
                    self.failed_saves += n_failed
                    self.checkpoints += n_saves - n_failed
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
            else:  # planned (drain a slow node, scale up, maintenance): save now, keep everything
                self._book(seg, x, keep_all=True)
                self.checkpoints += 1
                self.state = "saving"
                yield env.timeout(m.save_block_s + m.save_commit_s)
                self.losses["planned"] += m.save_block_s + m.save_commit_s
                if kind == "maintenance":
                    self.maintenances += 1
                    self.events.append((env.now, "maintenance", ""))
                    self.state = "maintenance"
                    yield env.timeout(m.maintenance_s)
                    self.losses["maintenance"] += m.maintenance_s
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
                rs, ls = self.cur_restart, self.cur_load = self._restart_times()
                booked = False
                try:
                    yield env.timeout(rs)
                    self.losses["restart"] += rs
                    booked = True
                    yield env.timeout(ls)
                    self.losses["load"] += ls
                    if comp is not None:
                        self.by_comp[comp.name] += rs + ls
                    if self.missing > 0 and not (m.elastic and m.dp - self.missing >= 1):
                        kind, comp = "restart", None  # a node was drained while restarting: wait for it
                        continue
                    self.events.append((env.now, "restart", ""))
                    self.dp_now = m.dp - self.missing  # nodes repaired meanwhile rejoin
                    self.min_dp = min(self.min_dp, self.dp_now)
                    break
                except simpy.Interrupt as intr:
                    done = env.now - t0
                    if not booked:  # interrupted while loading: the restart is booked already
                        self.losses["restart"] += min(done, rs)
                    self.losses["load"] += max(0.0, done - rs)
                    if comp is not None:
                        self.by_comp[comp.name] += done
                    kind, comp = intr.cause
                    if kind != "failure":  # a repair or drain during a restart: it is taken into account now
                        kind, comp = "restart", None

    def _restart_times(self) -> tuple[float, float]:
        """(restart, load) seconds of one restart: the parts (detection is booked before) drawn with
        the run's spread, or the constants."""
        m = self.m
        if m.restart_cv <= 0:
            return m.restart_s, m.load_s
        rng = self.rng_restart
        parts = m.restart_parts or (("restart", m.restart_s),)
        rs = sum(_lognormal(rng, v, m.restart_cv) for _name, v in parts)
        return rs, _lognormal(rng, m.load_s, m.restart_cv)

    def result(self) -> RunResult:
        wall = self.env.now
        return RunResult(self.seed, wall, self.tokens, self.useful_s, dict(self.losses), dict(self.by_comp),
                         dict(self.failures), dict(self.interruptions), self.checkpoints, self.finished,
                         self.min_dp, self.progress, sorted(self.events, key=lambda e: e[0]),
                         self.failed_saves, self.maintenances, self.drained_lemons)


def simulate_run(m: RunModel, seed: int, *, record_checkpoints: bool = False) -> RunResult:
    """Simulate one run of ``m`` with ``seed`` (until ``horizon_s`` or ``target_tokens``)."""
    check_run_model(m)
    run = _Run(m, seed, record_checkpoints)
    if m.target_tokens is not None:
        if math.isfinite(m.max_wall_s):  # a budget that is never reached stops at the cap, unfinished
            run.env.run(until=run.env.any_of([run.job, run.env.timeout(m.max_wall_s)]))
            if not run.finished:
                _close_at_horizon(run)
        else:
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
        run.losses["restart"] += min(rest, run.cur_restart)
        run.losses["load"] += max(0.0, rest - run.cur_restart)
    else:
        run.losses[{"detecting": "detection", "waiting": "repair_wait", "saving": "planned",
                    "maintenance": "maintenance"}[run.state]] += rest
