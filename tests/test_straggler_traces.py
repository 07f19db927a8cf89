"""benchmarks/straggler_traces.py: the per-GPU, per-step spread estimators on hand-computed traces."""
from __future__ import annotations

import math

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.straggler_traces import main, rank_step_spread


def _trace(logs: dict, extra: list = ()) -> pd.DataFrame:
    """logs: (step, stage, rank) -> log of the worker's compute time in the step, split evenly between a
    forward and a backward op; extra rows are appended as they are."""
    rows = []
    for (step, stage, rank), lg in logs.items():
        for op in ("forward-compute", "backward-compute"):
            rows.append({"step": step, "stage": stage, "rank": rank, "dp_rank": rank, "optype": op,
                         "duration": math.exp(lg) / 2})
    return pd.DataFrame(rows + list(extra))


A, B = 0.02, 0.01
# Two DP ranks of one stage over two steps: log times rank 0 (a + b, a - b), rank 1 (-a - b, -a + b).
LOGS = {(0, 0, 0): A + B, (1, 0, 0): A - B, (0, 0, 1): -A - B, (1, 0, 1): -A + B}


def test_two_ranks_two_steps_by_hand():
    # The stage's mean log is 0 in both steps; the deviations are scaled by sqrt(2 / 1):
    # x = sqrt(2) (a + b), sqrt(2) (a - b) for rank 0 and their negatives for rank 1.
    # transient: within-rank variance (ddof 1) = 2 (sqrt(2) b)^2 = 4 b^2 -> sd 2 b = 0.02
    # persistent: variance of the rank means (+-sqrt(2) a, ddof 1) = 4 a^2, less 4 b^2 / 2 steps
    #   -> sqrt(4 a^2 - 2 b^2) = sqrt(0.0014)
    # total: sum x^2 = 4 (a^2 + b^2) = 0.004 over 3 -> sd sqrt(0.004 / 3); z^2 = 1.35 and 0.15 twice each
    #   -> excess kurtosis (1.35^2 + 0.15^2) / 2 - 3 = -2.0775, max sqrt(1.35), skew 0
    s = rank_step_spread(_trace(LOGS))
    assert (s.samples, s.workers, s.steps) == (4, 2, 2)
    assert s.sd_transient == pytest.approx(0.02, rel=1e-9)
    assert s.sd_persistent == pytest.approx(math.sqrt(0.0014), rel=1e-9)
    assert s.sd_total == pytest.approx(math.sqrt(0.004 / 3), rel=1e-9)
    assert s.excess_kurtosis == pytest.approx(-2.0775, rel=1e-9)
    assert s.max_sd == pytest.approx(math.sqrt(1.35), rel=1e-9)
    assert s.skew == pytest.approx(0.0, abs=1e-12)
    assert (s.over_2sd, s.over_3sd) == (0.0, 0.0)


def test_other_ops_excluded_ranks_and_lone_workers_do_not_count():
    noise = [{"step": 0, "stage": 0, "rank": 0, "dp_rank": 0, "optype": "gc", "duration": 50.0},
             {"step": 1, "stage": 0, "rank": 1, "dp_rank": 1, "optype": "forward-send", "duration": 9.0}]
    logs = dict(LOGS)
    logs.update({(0, 0, 2): 1.0, (1, 0, 2): 1.0,        # a slowed worker, left out by name
                 (0, 1, 3): 0.3, (1, 1, 3): -0.4})      # stage 1 has a single worker: no peers
    got = rank_step_spread(_trace(logs, noise), exclude=(2,))
    assert got == rank_step_spread(_trace(LOGS))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-0.5, 0.5), min_size=2, max_size=2), st.floats(-1.0, 1.0))
def test_a_step_wide_or_stage_wide_slowdown_is_no_per_gpu_spread(shift, rank_shift):
    # Scaling every worker of a (step, stage) by one factor (a slow step, a longer stage) leaves the
    # spread unchanged; so does the order of the rows.
    base = rank_step_spread(_trace(LOGS))
    moved = {k: v + shift[k[0]] for k, v in LOGS.items()}
    got = rank_step_spread(_trace(moved).sample(frac=1.0, random_state=1))
    assert got.sd_total == pytest.approx(base.sd_total, rel=1e-6)
    assert got.sd_persistent == pytest.approx(base.sd_persistent, rel=1e-6)
    assert got.sd_transient == pytest.approx(base.sd_transient, rel=1e-6)
    # A worker slower in every step by the same factor moves only the persistent part.
    slow = {k: v + (rank_shift if k[2] == 0 else 0.0) for k, v in LOGS.items()}
    got = rank_step_spread(_trace(slow))
    assert got.sd_transient == pytest.approx(base.sd_transient, rel=1e-6)


def test_missing_trace_is_one_clear_error(tmp_path):
    with pytest.raises(SystemExit, match="no trace-ST.parquet there; fetch data/trace-ST.parquet"):
        main(["--traces", str(tmp_path)])
