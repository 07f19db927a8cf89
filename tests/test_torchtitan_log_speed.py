"""A torchtitan training log's measured speed beside the simulated step (issue 40, item 2: "where the
log also reports measured time per iteration, print measured beside simulated; the same for
torchtitan"). torchtitan logs ``tps``, tokens per second per GPU: a rank's tokens over the time and
tp x pp x cp (components/metrics.py MetricsProcessor.log, ParallelDims.non_data_parallel_size), so a
step of G sequences of s tokens on N GPUs took G s / (tps N)."""
from __future__ import annotations

from pathlib import Path

import yaml

from simulator.cli.main import main
from strategies.import_torchtitan import logged_tps

LOG = Path(__file__).resolve().parent / "data" / "torchtitan" / "llama3_8b_train.log"
STEP = ("[rank0]:[titan] 2025-10-22 09:14:{s:02d},771 - root - INFO - step: {n:2d}  loss: 9.2401  grad_norm:  2.0172  "
        "memory: 42.63GiB(44.87%)  tps: {tps}  tflops: 350.1  mfu: 35.4%")


def test_logged_tps_skips_the_first_step():
    text = "\n".join(STEP.format(s=i, n=n, tps=t) for i, (n, t) in enumerate([(1, "1,032"), (10, "6,100"),
                                                                            (20, "6,000"), (30, "5,900")]))
    assert logged_tps(text) == [6100, 6000, 5900]
    assert logged_tps(STEP.format(s=0, n=1, tps="1,032")) == []


def test_measured_step_printed_beside_the_simulated(tmp_path, capsys):
    log = tmp_path / "train.log"
    log.write_text(LOG.read_text(encoding="utf-8") + "\n".join(
        STEP.format(s=10 + i, n=n, tps=t) for i, (n, t) in enumerate([(10, "6,100"), (20, "6,000")])) + "\n")
    out = tmp_path / "s.yaml"
    assert main(["import", "torchtitan", str(log), "--cluster", "dgx-h100", "--nodes", "1", "-o", str(out)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("iteration time: measured"))
    s = yaml.safe_load(out.read_text())
    gpus = 8   # one dgx-h100 node
    want_ms = s["training"]["global_batch"] * s["training"]["seq_len"] / (6050 * gpus) * 1e3   # median tps 6,050
    assert f"measured {want_ms:,.1f} ms (from the median logged tps 6,050 per GPU" in line


def test_a_log_without_speed_lines_prints_no_measurement(tmp_path, capsys):
    out = tmp_path / "s.yaml"
    assert main(["import", "torchtitan", str(LOG), "--cluster", "dgx-h100", "--nodes", "1", "-o", str(out)]) == 0
    assert "measured" not in capsys.readouterr().out
