"""The SimPy replay of one run (see :mod:`simulator.goodput` for the events and the booking of losses):
a segment of training in closed form, the run's processes (failure sources, repairs, slow nodes, the job)
and :func:`simulate_run`.
"""
from __future__ import annotations

import math

import numpy as np
import simpy

from simulator.goodput.model import HOUR, MECHANISMS, Component, RunModel, RunResult, check_run_model


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
