"""Measured collective times (``options.collective_profile``) that override the model inside a node.

The CSV is what ``execsim profile --collectives`` writes (``simulator/profiling/collectives.py``):
columns ``gpu, collective, ranks, bytes, time_us`` (more columns, such as ``modelled_us``, are
allowed and not read); sizes follow the nccl-tests conventions of :mod:`topologies.collectives`.
A row with an empty ``time_us`` is a case the sweep could not run (gloo without reduce-scatter, say):
it is read as "not measured", and that (collective, ranks) keeps the model.

Which calls it prices: a collective of a kind and group size the profile has rows for, on a group of
ranks inside one node (the sweep ran on one node; groups that cross nodes keep the model, whose
network leg the profile did not see).

Between measured sizes the time is interpolated linearly in log size: for S0 <= S <= S1,
``t = t0 + (t1 - t0) * ln(S / S0) / ln(S1 / S0)``. Below the smallest measured size the smallest's
time is taken (a call costs at least its latency: nccl-tests' small-message plateau); above the
largest the time grows linearly in bytes along the last measured segment, ``t = t1 + (S - S1) *
(t1 - t0) / (S1 - S0)`` (the alpha-beta model, Hockney 1994: t = alpha + S / B, of the two largest
points; with one point, its time scaled by S / S1, i.e. pure bandwidth).

A profile measured on one device applies to a cluster of another only with
``options.collective_profile_gpu`` naming the profile's device (issue 28 item 5, the rule of the
operator profile); otherwise one error names both.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from pathlib import Path

from strategies.errors import ConfigError, brief

COLUMNS = ("gpu", "collective", "ranks", "bytes", "time_us")


@dataclass(frozen=True)
class CollectiveProfile:
    """Measured points per (collective, ranks): ``points`` = ((kind, ranks, ((bytes, seconds), ...)), ...),
    sizes ascending; ``gpu`` the device they were measured on; ``path`` for messages."""

    points: tuple
    gpu: str
    path: str = ""

    def curve(self, kind: str, ranks: int):
        """The ((bytes, seconds), ...) of ``kind`` on ``ranks`` ranks, or None when not measured."""
        for k, n, pts in self.points:
            if k == kind and n == ranks:
                return pts
        return None

    def time(self, kind: str, nbytes: float, ranks: int) -> float | None:
        """Seconds of one ``kind`` call of ``nbytes`` over ``ranks`` ranks (module docstring), or None."""
        pts = self.curve(kind, ranks)
        return None if pts is None else interpolate(pts, float(nbytes))


def interpolate(pts, s: float) -> float:
    """The time at size ``s`` from ascending (bytes, seconds) points (module docstring)."""
    if s <= pts[0][0]:
        return pts[0][1]
    if s >= pts[-1][0]:
        s1, t1 = pts[-1]
        if len(pts) == 1:
            return t1 * s / s1
        s0, t0 = pts[-2]
        return t1 + (s - s1) * (t1 - t0) / (s1 - s0)
    for (s0, t0), (s1, t1) in itertools.pairwise(pts):
        if s0 <= s <= s1:
            return t0 + (t1 - t0) * math.log(s / s0) / math.log(s1 / s0)
    raise AssertionError("unreachable: s lies inside the measured range")


def load_collective_profile(path, cluster_gpu: str, measured_on: str | None = None) -> CollectiveProfile:
    """Read and check the CSV at ``path`` for a cluster of ``cluster_gpu`` (module docstring)."""
    from strategies.documents import csv_rows, read_csv_text
    from topologies.collectives import normalize_kind
    name = brief(str(path), 120)
    text = read_csv_text(Path(path), "options.collective_profile")
    curves: dict = {}
    gpus: set = set()
    for i, row in csv_rows(text, COLUMNS, f"collective profile {name}"):
        gpus.add(row["gpu"].strip().lower())
        try:
            kind = normalize_kind(row["collective"])
        except ConfigError as exc:
            raise ConfigError(f"collective profile {name} line {i}: {exc}") from None
        ranks = _number(row["ranks"], "ranks", name, i, integer=True, low=2)
        nbytes = _number(row["bytes"], "bytes", name, i, integer=True, low=1)
        if row["time_us"].strip() == "":
            continue   # a case the sweep could not run: the model keeps it (module docstring)
        t = _number(row["time_us"], "time_us", name, i, low=0) * 1e-6
        key = (row["gpu"].strip().lower(), kind, ranks)
        pts = curves.setdefault(key, {})
        if nbytes in pts:
            raise ConfigError(f"collective profile {name} line {i} repeats {kind} on {ranks} ranks at {nbytes} "
                              f"bytes (line {pts[nbytes][1]}); keep one")
        pts[nbytes] = (t, i)
    have = sorted(gpus)
    if measured_on:
        use = measured_on.lower()
        if use not in have:
            raise ConfigError(f"options.collective_profile_gpu = {brief(measured_on)} but collective profile {name} "
                              f"has rows for {', '.join(have[:5]) or 'no device'}; set it to one of them")
    else:
        use = cluster_gpu.lower()
        if have and use not in have:
            raise ConfigError(f"collective profile {name} was measured on {', '.join(have[:3])} but the cluster's GPU "
                              f"is {cluster_gpu}; measure this GPU, or set options.collective_profile_gpu: {have[0]} "
                              f"to apply those times to it unchanged")
    points = tuple((kind, n, tuple((s, pts[s][0]) for s in sorted(pts)))
                   for (g, kind, n), pts in sorted(curves.items()) if g == use)
    return CollectiveProfile(points, use, str(path))


def _number(text: str, col: str, name: str, line: int, integer: bool = False, low: float = 0.0):
    try:
        v = float(text)
    except ValueError:
        raise ConfigError(f"collective profile {name} line {line}: {col} = {brief(text)} is not a number") from None
    if not math.isfinite(v) or v < low or v > 1e15 or (integer and v != int(v)):
        kind = "an integer" if integer else "a finite number"
        raise ConfigError(f"collective profile {name} line {line}: {col} = {brief(text)} must be {kind} in "
                          f"[{low:g}, 1e15]")
    return int(v) if integer else v
