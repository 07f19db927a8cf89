"""Per-GPU, per-step compute-time spread in published production traces (the straggler model's sigma).

    python -m benchmarks.straggler_traces --traces DIR

DIR holds the three sample traces of the artifact of Lin et al., "Understanding Stragglers in Large
Model Training Using What-if Analysis" (OSDI 2025, arXiv:2505.05713): github.com/ByteDance-Seed/
StragglerAnalysis, Apache-2.0, ``data/trace-{ST,AR,SE}.parquet`` at commit 8efcd7f37f15 (fetch them
there; they are not shipped here). Reading them needs pyarrow (``pip install 'execsim[parquet]'``).
Each row is one recorded op of one worker (``rank``, ``dp_rank``, ``stage`` = PP rank, ``step``,
``optype``, ``duration`` in s); the artifact's readme names the traces by root cause: ``ST`` stage
partitioning imbalance (dp 2, pp 4, 8 GPUs), ``AR`` an individual worker slowed artificially
(dp 4, pp 4, tp 4, 64 GPUs, one rank per TP group traced), ``SE`` sequence-length imbalance
(dp 32, pp 2, 128 GPUs).

What is measured (:func:`rank_step_spread`): a worker's compute time in a step is the sum of its
``forward-compute`` and ``backward-compute`` ops. The DP ranks of one pipeline stage run the same
layers on the same shapes, so within each (step, stage) the log of that time minus its mean over the
stage's DP ranks is the worker's deviation from its peers in that step, scaled by sqrt(n / (n - 1))
for a group of n (the deviation from a group's own mean has variance sigma^2 (1 - 1/n)). The
deviations split into a **persistent** part (a worker's mean over the steps: the chip, its clocks,
its node) and a **transient** part (the rest: this step's jitter); their standard deviations are
estimated without bias (the within-worker variance over steps for the transient part; the variance
of the worker means less the transient part's share sigma_t^2 / steps for the persistent part). The
shape of the tail is read from the pooled deviations: skew, excess kurtosis (0 for a normal) and the
fraction beyond 2 and 3 standard deviations (a normal: 2.28 % and 0.135 %).

The AR trace's rank 0 is left out (:data:`INJECTED`): it is the worker the artifact slowed on
purpose (its compute runs 2.26-2.50x its peers'). SE's spread comes from the data (sequence lengths
differ between the micro-batches of a step), not from the GPUs; it is printed apart. The result is
quoted in docs/cost-model.md ("Stragglers"); this script only prints.
"""
from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

#: Ranks left out of a trace, with the reason: the artifact's readme says trace AR is an "artificial
#: individual worker slowdown" with one worker highlighted; in the trace that is rank 0.
INJECTED = {"AR": (0,)}
COMPUTE_OPS = ("forward-compute", "backward-compute")
TRACES = ("ST", "AR", "SE")


@dataclass(frozen=True)
class Spread:
    """Spread of per-worker, per-step compute time around the worker's DP peers (log scale, so 0.005 is
    about 0.5 %)."""
    samples: int            #: (worker, step) pairs
    workers: int
    steps: int
    sd_total: float         #: standard deviation of a worker's deviation in one step
    sd_persistent: float    #: of the per-worker mean deviation (the chip), transient noise removed
    sd_transient: float     #: of a step's deviation around the worker's mean (this step's jitter)
    skew: float
    excess_kurtosis: float  #: 0 for a normal
    over_2sd: float         #: fraction of deviations beyond +2 sd (normal: 0.0228)
    over_3sd: float         #: fraction beyond +3 sd (normal: 0.00135)
    max_sd: float           #: the largest deviation, in sd


def step_deviations(trace: pd.DataFrame, exclude: tuple = ()) -> pd.DataFrame:
    """One row per (step, stage, worker): ``x``, the log of the worker's compute time in the step less
    the mean log over the stage's DP ranks in that step, scaled by sqrt(n / (n - 1)) (n the DP ranks
    present); groups of one worker carry no information and are dropped."""
    ops = trace[trace["optype"].isin(COMPUTE_OPS) & ~trace["rank"].isin(exclude)]
    per = ops.groupby(["step", "stage", "rank"], as_index=False)["duration"].sum()
    per["logt"] = per["duration"].map(math.log)
    grp = per.groupby(["step", "stage"])["logt"]
    n = grp.transform("size")
    per = per.assign(n=n, x=(per["logt"] - grp.transform("mean")))
    per = per[per["n"] > 1]
    return per.assign(x=per["x"] * (per["n"] / (per["n"] - 1)) ** 0.5)


def rank_step_spread(trace: pd.DataFrame, exclude: tuple = ()) -> Spread:
    """:class:`Spread` of one trace (see the module docstring for the estimators)."""
    dev = step_deviations(trace, exclude)
    x = dev["x"]
    by_rank = dev.groupby("rank")["x"]
    steps = dev["step"].nunique()
    var_t = float(by_rank.var(ddof=1).mean())
    var_p = max(float(by_rank.mean().var(ddof=1)) - var_t / steps, 0.0)
    sd = float(x.std(ddof=1))
    z = (x - x.mean()) / sd
    return Spread(samples=len(dev), workers=int(dev["rank"].nunique()), steps=int(steps), sd_total=sd,
                  sd_persistent=math.sqrt(var_p), sd_transient=math.sqrt(var_t),
                  skew=float((z ** 3).mean()), excess_kurtosis=float((z ** 4).mean() - 3.0),
                  over_2sd=float((z > 2).mean()), over_3sd=float((z > 3).mean()), max_sd=float(z.max()))


def read_trace(folder: Path, name: str) -> pd.DataFrame:
    path = folder / f"trace-{name}.parquet"
    if not path.is_file():
        raise SystemExit(f"--traces {str(folder)!r}: no {path.name} there; fetch data/{path.name} from "
                         "github.com/ByteDance-Seed/StragglerAnalysis")
    try:
        return pd.read_parquet(path)
    except ImportError as exc:
        raise SystemExit(f"reading {path.name} needs pyarrow: pip install 'execsim[parquet]' ({exc})") from None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", required=True, help="folder holding trace-ST/AR/SE.parquet of the artifact")
    args = ap.parse_args(argv)
    folder = Path(args.traces)
    print(f"{'trace':6s} {'pairs':>6s} {'workers':>7s} {'steps':>5s} {'sd':>7s} {'persist':>7s} {'transient':>9s} "
          f"{'skew':>6s} {'ex.kurt':>7s} {'>2sd':>6s} {'>3sd':>6s} {'max':>5s}")
    for name in TRACES:
        s = rank_step_spread(read_trace(folder, name), INJECTED.get(name, ()))
        note = "  (sequence lengths: data, not GPUs)" if name == "SE" else ""
        print(f"{name:6s} {s.samples:6d} {s.workers:7d} {s.steps:5d} {s.sd_total:7.4f} {s.sd_persistent:7.4f} "
              f"{s.sd_transient:9.4f} {s.skew:6.2f} {s.excess_kurtosis:7.2f} {s.over_2sd:6.3f} {s.over_3sd:6.3f} "
              f"{s.max_sd:5.2f}{note}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
