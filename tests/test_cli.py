"""The execsim command line, run in-process (fast) and once as a subprocess."""
import json
import subprocess
import sys

import numpy as np
import pytest

from simulator.cli.main import main

GPT3 = "strategies/examples/gpt3-175b-1024-a100.yaml"
P1F1B = "strategies/examples/pipeline-1f1b.yaml"


def run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_schedule_grid_and_json(capsys):
    rc, out, _ = run(capsys, "schedule", "--schedule", "interleaved-1f1b", "--pp", "4", "--microbatches", "8", "--vpp", "2")
    assert rc == 0
    lines = out.strip().splitlines()
    assert len(lines) == 4 and lines[0].startswith("rank 0: 0F0 0F1 0F2 0F3 4F0")
    rc, out, _ = run(capsys, "schedule", "--schedule", "1f1b", "--pp", "2", "--microbatches", "3", "--json")
    d = json.loads(out)
    assert set(d) == {"pp", "microbatches", "vpp", "stage_to_rank", "orders"}
    assert d["orders"][1][:2] == [{"stage": 1, "mb": 0, "kind": "F"}, {"stage": 1, "mb": 0, "kind": "B"}]


def test_simulate_pipeline_json(capsys):
    rc, out, _ = run(capsys, "simulate", P1F1B, "--json")
    d = json.loads(out)
    assert rc == 0
    assert {"makespan_s", "bubble_fraction", "per_rank", "num_tasks"} <= set(d)
    assert {"rank", "busy_s", "idle_s", "bubble_fraction"} <= set(d["per_rank"][0])


def test_simulate_strategy_json_keys(capsys):
    _rc, out, _ = run(capsys, "simulate", GPT3, "--json", "--fidelity", "coarse")
    d = json.loads(out)
    for k in ("iteration_time_s", "tokens_per_s", "mfu", "hfu", "bubble_fraction", "per_stage", "num_gpus",
              "num_tasks", "sim_wall_s", "peak_memory_gb", "capacity_gb", "fits"):
        assert k in d, k
    assert d["num_gpus"] == 1024 and len(d["per_stage"]) == 8
    assert "peak_memory_gb" in d["per_stage"][0] and 0 < d["mfu"] <= d["hfu"] < 1


def test_simulate_trace_and_text(capsys, tmp_path):
    trace = tmp_path / "t.json"
    rc, out, _ = run(capsys, "simulate", P1F1B, "--trace", str(trace))
    assert rc == 0 and "iteration time" in out and trace.exists()
    json.loads(trace.read_text())


def test_set_override_and_error(capsys):
    rc, out, _ = run(capsys, "simulate", P1F1B, "--json", "--set", "pipeline.microbatches=16")
    assert json.loads(out)["makespan_s"] == pytest.approx((16 + 3) * 3e-3 + 6 * 5e-5, rel=0.05)
    rc, out, err = run(capsys, "simulate", P1F1B, "--set", "pipeline.ppp=2")
    assert rc == 2 and err.startswith("execsim: error:") and "did you mean 'pp'" in err


def test_compare_schedules_table_and_plot(capsys, tmp_path):
    png = tmp_path / "cmp.png"
    rc, out, _ = run(capsys, "compare", P1F1B, "--schedules", "1f1b,interleaved-1f1b,zb-h1,zb-v", "--plot", str(png))
    assert rc == 0 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = out.strip().splitlines()
    assert rows[0].split()[:3] == ["run", "iter", "ms"] and len(rows) == 1 + 4 + 1
    rc, out, _ = run(capsys, "compare", P1F1B, "--schedules", "1f1b,zb-v", "--json")
    d = json.loads(out)
    assert d[0]["speedup"] == 1.0 and d[1]["iteration_time_s"] < d[0]["iteration_time_s"]


def test_memory_command(capsys, tmp_path):
    rc, out, _ = run(capsys, "memory", GPT3, "--fidelity", "coarse", "--json")
    d = json.loads(out)
    assert d["fits"] and len(d["memory_per_stage"]) == 8 and len(d["layers"]) == 96
    rc, out, _ = run(capsys, "memory", GPT3, "--fidelity", "coarse", "--check", "--set", "training.micro_batch=16",
                     "--set", "training.global_batch=1536", "--set", "training.recompute=none")
    assert rc == 1 and "OOM" in out


def test_plan_recompute_command(capsys):
    rc, out, _ = run(capsys, "plan-recompute", GPT3, "--fidelity", "coarse", "--json")
    d = json.loads(out)
    assert rc == 0 and set(d["uniform"]) == {"none", "selective", "full"} and d["plan"]["fits"]


def test_delta_what_if_equals_full_resimulation(capsys):
    from simulator.api import simulate_pipeline, what_if
    from simulator.engine.core import simulate
    from strategies.pipeline_file import load_pipeline
    sim = simulate_pipeline(load_pipeline(P1F1B))
    base, outs = what_if(sim.graph, ["F=1.5", "pp-send=0"])
    g = sim.graph
    dur = g.duration.copy()
    dur[np.array(g.op_names)[g.op] == "F"] *= 1.5
    dur[g.category == 5] = 0.0  # pp-send
    assert outs[-1].iteration_time_s == simulate(g.with_durations(dur)).makespan
    assert base == sim.report.makespan_s
    rc, out, _ = run(capsys, "simulate", P1F1B, "--mode", "delta", "--what-if", "B=1.1", "--json")
    d = json.loads(out)["delta"][0]
    assert d["tasks"] == 32 and d["retimed"] >= 1
    rc, _, err = run(capsys, "simulate", P1F1B, "--mode", "delta", "--what-if", "nothing=2")
    assert rc == 2 and "no task matches" in err


def test_console_script_no_traceback(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("pipeline: {pp: 0, microbatches: 2, forward_ms: 1, backward_ms: 2}\n")
    p = subprocess.run([sys.executable, "-m", "simulator.cli.main", "simulate", str(bad)], capture_output=True, text=True)
    assert p.returncode == 2 and "pipeline.pp = 0 must be >= 1" in p.stderr and "Traceback" not in p.stderr


def test_custom_schedule_csv_round_trip(capsys, tmp_path):
    rc, csv, _ = run(capsys, "schedule", "--schedule", "zb-h1", "--pp", "4", "--microbatches", "8", "--csv")
    (tmp_path / "zb.csv").write_text(csv)
    (tmp_path / "p.yaml").write_text("pipeline: {schedule: custom, schedule_csv: zb.csv, pp: 4, microbatches: 8, "
                                     "forward_ms: 1, backward_ms: 2, backward_input_ms: 1, backward_weight_ms: 1}\n")
    rc, out, _ = run(capsys, "simulate", str(tmp_path / "p.yaml"), "--json")
    assert rc == 0 and json.loads(out)["makespan_s"] == pytest.approx((3 * 8 + 3) * 1e-3)  # ZB-H1: 3m + p - 1
    (tmp_path / "bad.csv").write_text("0F0,0B0\n1B0,1F0\n")
    (tmp_path / "b.yaml").write_text("pipeline: {schedule: custom, schedule_csv: bad.csv, pp: 2, microbatches: 1, "
                                     "forward_ms: 1, backward_ms: 2}\n")
    rc, _, err = run(capsys, "simulate", str(tmp_path / "b.yaml"))
    assert rc == 2 and "pipeline.schedule_csv" in err and "rank 1, position 0" in err


def test_building_the_parser_loads_no_numpy():
    """Every command module is imported to build the parser (`execsim --help`), so they keep their
    numpy-backed imports inside the functions that use them (simulator/cli/simulate.py says so)."""
    code = ("import sys; from simulator.cli.main import build_parser; build_parser(); "
            "print('numpy' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.stdout.split() == ["False"], p.stderr


def test_command_starts_openblas_with_one_thread_unless_set():
    """The CLI sets OPENBLAS_NUM_THREADS=1 before numpy loads (simulator/cli/__init__.py); a value the
    user set is kept."""
    import os
    code = "import simulator.cli, os, sys; print(os.environ.get('OPENBLAS_NUM_THREADS'), 'numpy' in sys.modules)"
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert p.stdout.split() == ["1", "False"]  # set before anything of the command has loaded numpy
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**env, "OPENBLAS_NUM_THREADS": "3"})
    assert p.stdout.split() == ["3", "False"]
