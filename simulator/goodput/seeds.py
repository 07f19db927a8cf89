"""Many seeds and interval sweeps: one interval over seeds (:class:`Summary`), the same seeds for every
interval (common random numbers), the best simulated interval and the default sweep around the optimum.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, replace

import numpy as np

from simulator.goodput.model import RunModel
from simulator.goodput.replay import simulate_run


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
        with warnings.catch_warnings():  # flat curves (an async write longer than the interval) are fine
            warnings.simplefilter("ignore", np.exceptions.RankWarning if hasattr(np, "exceptions") else Warning)
            a, b, _c = np.polyfit(x, y, 2)
        if a < 0:
            return float(np.exp(np.clip(-b / (2 * a), x[0], x[2])))
    return ss[i].interval_s


def sweep_intervals(m: RunModel, intervals, seeds) -> list[Summary]:
    """The same seeds (common random numbers) for every interval."""
    return [run_seeds(replace(m, interval_s=float(t)), seeds) for t in intervals]



def default_sweep(center: float, horizon_s: float | None) -> list[float]:
    """Intervals around the closed-form optimum (factors 1/4 .. 4, denser near 1)."""
    fs = (0.25, 0.4, 0.55, 0.7, 0.85, 1.0, 1.2, 1.45, 1.8, 2.5, 4.0)
    out = [center * f for f in fs]
    if horizon_s is not None:
        out = [t for t in out if t < horizon_s]
    return out
