"""Whole-run goodput model (simulator/goodput/): closed forms, exact small cases, invariants, errors."""
import json
import math

import pytest

from simulator.cli.main import main
from simulator.goodput.closed_forms import daly_goodput, daly_interval, optimal_interval_closed_form, young_interval
from simulator.goodput.model import Component, RunModel
from simulator.goodput.replay import Segment, simulate_run
from simulator.goodput.seeds import best_interval, sweep_intervals
from simulator.goodput.setup import merge_components
from strategies.errors import ConfigError
from strategies.goodput_file import parse_goodput

HOUR = 3600.0


def _model(**kw):
    comp = Component("x", 1.0, "gpu", 1, 0.0, False)  # one failure per hour
    base = dict(components=(comp,), full_tokens_per_s=1.0, interval_s=600.0, save_block_s=60.0, save_commit_s=0.0,
                load_s=0.0, restart_s=120.0, horizon_s=500 * HOUR)
    base.update(kw)
    return RunModel(**base)


def test_goodput_and_optimal_interval_match_daly_closed_form():
    # exponential failures, nothing else: Daly 2006 Eq. 13 and the interval that maximises it
    M, C, R = HOUR, 60.0, 120.0
    m = _model(horizon_s=1000 * HOUR)
    opt = optimal_interval_closed_form(C, R, M)
    assert opt == pytest.approx(daly_interval(C, M), rel=0.01)
    grid = [opt * f for f in (0.6, 0.75, 0.9, 1.0, 1.1, 1.25, 1.45)]
    sw = sweep_intervals(m, grid, seeds=[0, 1, 2, 3])
    for s in sw:
        assert s.goodput == pytest.approx(daly_goodput(s.interval_s, C, R, M), rel=0.05)
    best = best_interval(sw)
    assert best == pytest.approx(opt, rel=0.05)
    # C << M: Young's first-order interval is the same optimum
    assert young_interval(1.0, 10 * HOUR) == pytest.approx(optimal_interval_closed_form(1.0, 0.0, 10 * HOUR), rel=0.05)


def test_expected_failures_equal_rate_times_time():
    comps = (Component("a", 2e-3, "gpu", 100, 0.0, False), Component("b", 1e-2, "node", 10, 30.0, False))
    m = _model(components=comps, horizon_s=200 * HOUR)
    lam = 0.2 + 0.1  # per hour
    n = [sum(simulate_run(m, s).failures.values()) for s in range(10)]
    mean = sum(n) / len(n)
    assert mean == pytest.approx(lam * 200, rel=3 / math.sqrt(lam * 200 * len(n)))


def test_no_failures_exact_wall_time():
    # 1000 tokens at 1 token/s, a 10 s save after every 300 s of training and a final one: 4 saves
    m = _model(components=(), horizon_s=None, target_tokens=1000.0, interval_s=300.0, save_block_s=10.0)
    r = simulate_run(m, 0)
    assert r.finished and r.wall_s == pytest.approx(1040.0) and r.tokens == pytest.approx(1000.0)
    assert r.checkpoints == 4 and r.losses["checkpoint"] == pytest.approx(40.0)


def test_async_checkpoint_is_durable_only_after_the_write():
    seg = Segment(0.0, 100.0, 5.0, 20.0, 1.0, 1.0, 1.0)
    assert seg.compute(104.0) == 100.0 and seg.compute(110.0) == 105.0
    assert seg.durable(124.9) == 0 and seg.durable(125.0) == 1  # save 1 blocks 100..105, durable at 125


@pytest.mark.parametrize("elastic", [False, True])
def test_losses_add_up_to_wall_time_with_everything_on(elastic):
    comps = (Component("hw", 0.02, "node", 4, 30.0, True), Component("sw", 0.05, "gpu", 1, 600.0, False))
    calls = []

    def it(dp):
        calls.append(dp)
        return 1.0 + 0.01 * dp

    m = _model(components=comps, horizon_s=300 * HOUR, dp=4, num_nodes=4, spare_nodes=1, repair_s=5 * HOUR,
               elastic=elastic, iteration_time=it, save_commit_s=30.0, slow_rate_per_node_hour=0.05, slowdown=1.5,
               slow_detection_s=2 * HOUR)
    r = simulate_run(m, 3)
    assert r.useful_s + sum(r.losses.values()) == pytest.approx(r.wall_s, rel=1e-9)
    assert r.losses["slow_node"] > 0 and r.losses["planned"] > 0
    if elastic:
        assert r.min_dp < 4 and r.losses["elastic"] > 0 and calls
    else:
        assert r.min_dp == 4 and r.losses["repair_wait"] > 0 and r.losses["elastic"] == 0


def test_slow_node_cost_matches_rate_times_detection_delay():
    # rare slow nodes, no failures: each costs detection x (1 - 1/slowdown) of training, plus one drain
    m = _model(components=(), horizon_s=2000 * HOUR, num_nodes=10, spare_nodes=10**6, slow_rate_per_node_hour=1e-3,
               slowdown=1.25, slow_detection_s=HOUR, save_block_s=1.0)
    runs = [simulate_run(m, s) for s in range(5)]
    expect = 1e-3 * 10 * 2000 * HOUR * (1 - 1 / 1.25)  # events x slowed seconds
    got = sum(r.losses["slow_node"] for r in runs) / len(runs)
    assert got == pytest.approx(expect, rel=0.25)


def test_same_seed_same_result_and_different_seed_differs():
    m = _model(horizon_s=100 * HOUR)
    a, b, c = simulate_run(m, 7), simulate_run(m, 7), simulate_run(m, 8)
    assert a.progress == b.progress and a.losses == b.losses
    assert a.progress != c.progress


def test_defaults_and_overrides():
    spec = parse_goodput({"failures": {"hbm": {"rate_per_device_hour": 0.0}, "psu": {"rate_per_device_hour": 1e-6,
                                                                                     "per": "node"}}})
    comps = {c.name: c for c in merge_components(spec, num_gpus=16384, num_nodes=2048)}
    assert comps["hbm"].rate_per_s == 0 and comps["psu"].count == 2048
    total = sum(c.rate_per_s for n, c in comps.items() if n not in ("hbm", "psu")) * 54 * 24 * HOUR
    assert total == pytest.approx(419 - 72, rel=1e-3)  # Llama 3 Table 5 without the HBM row


@pytest.mark.parametrize("data, field", [
    ({"restart_s": -5}, "goodput.restart_s"),
    ({"checkpoint": {"interval_s": -1}}, "interval_s"),
    ({"checkpoint": {"interval_s": "often"}}, "interval_s"),
    ({"failures": {"gpu": {"rate_per_device_hour": -1e-6}}}, "goodput.failures.gpu.rate_per_device_hour"),
    ({"failures": {"gpu": {"rate": 1e-6}}}, "goodput.failures.gpu.rate"),
    ({"restrat_s": 5}, "did you mean 'restart_s'"),
    ({"days": 3, "train_tokens": 1e9}, "goodput.days"),
])
def test_bad_goodput_section_one_error(data, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        parse_goodput(data)


def test_interval_longer_than_run_and_unknown_component():
    from simulator.goodput.model import check_run_model
    with pytest.raises(ConfigError, match="not shorter than the run"):
        check_run_model(_model(interval_s=10 * HOUR, horizon_s=5 * HOUR))
    with pytest.raises(ConfigError, match="not a component of fleet"):
        merge_components(parse_goodput({"failures": {"gpuu": {"detection_s": 5}}}), 8, 1)


GOODPUT_FILE = """
model: llama3-8b
cluster: {preset: dgx-h100, nodes: 1}
parallel: {tp: 1, pp: 1, cp: 2, zero: 1}
training: {micro_batch: 1, global_batch: 8, seq_len: 8192, recompute: full}
options: {fidelity: coarse}
goodput:
  days: 30
  seeds: 2
  checkpoint: {interval_s: [1800, 3600], storage_gb_per_s: 5}
  failures: {gpu: {rate_per_device_hour: 2.0e-3}}
"""


def test_cli_goodput_json_deterministic_and_errors(tmp_path, capsys):
    f = tmp_path / "run.yaml"
    f.write_text(GOODPUT_FILE)
    outs = []
    for _ in range(2):
        assert main(["goodput", str(f), "--json", "--no-sweep"]) == 0
        outs.append(capsys.readouterr().out)
    assert outs[0] == outs[1]
    d = json.loads(outs[0])
    for k in ("wall_days", "goodput", "interruptions", "lost_hours_by_mechanism", "lost_hours_by_component",
              "gpu_hours_wasted", "closed_form", "intervals", "interval_s", "expected_failures"):
        assert k in d, k
    assert d["policy"] == "list" and len(d["intervals"]) == 2 and 0 < d["goodput"]["mean"] < 1
    assert d["wall_days"]["mean"] == pytest.approx(30.0)
    png = tmp_path / "run.png"
    assert main(["goodput", str(f), "--days", "5", "--seeds", "2", "--interval", "young", "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "goodput" in out and png.stat().st_size > 0
    # errors: one line, exit code 2, no traceback
    for argv, msg in ((["--days", "0.01"], "not shorter than the run"),
                      (["--set", "goodput.restart_s=-3"], "goodput.restart_s"),
                      (["--set", "goodput.failures.gpu.rate_per_device_hour=-1"], "rate_per_device_hour")):
        assert main(["goodput", str(f), *argv]) == 2
        err = capsys.readouterr().err
        assert msg in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_llama3_405b_example_lands_in_the_published_range():
    # Llama 3 report Sec. 3.3.4: 419 unexpected interruptions in 54 days on 16,384 H100, > 90 % effective
    # training time. 419 +- 2 sqrt(419) is the Poisson band of the count.
    from simulator.goodput.report import goodput_report
    from simulator.goodput.setup import setup_from_strategy
    from strategies.strategy_file import load_strategy
    st = load_strategy("strategies/examples/llama3-405b-16k-h100-goodput.yaml")
    rep = goodput_report(setup_from_strategy(st), 5, sweep=False)
    assert 419 - 2 * 419 ** 0.5 <= rep["interruptions"]["mean"] <= 419 + 2 * 419 ** 0.5
    assert 0.90 < rep["goodput"]["mean"] < 1.0
    assert rep["expected_failures"] == pytest.approx(419, rel=1e-3)
