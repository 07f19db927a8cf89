"""Goodput mechanisms of issue 31 (simulator/goodput/): each against its closed form within 3 standard
errors over seeds, exact small cases, invariants with everything on, fleet presets, limits and errors."""
import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.goodput.closed_forms import (
    async_goodput,
    daly_goodput,
    domain_goodput,
    lemon_expected_failures,
    optimal_interval_closed_form,
    weibull_renewal_count,
    weibull_renewal_variance,
)
from simulator.goodput.fleets import cross_fleet, fit_job_level, fleet_components
from simulator.goodput.model import Component, RunModel
from simulator.goodput.replay import simulate_run
from simulator.goodput.setup import extra_components, merge_components, restart_parts
from strategies.errors import ConfigError
from strategies.goodput_file import parse_goodput
from strategies.limits import check_goodput_events

HOUR = 3600.0


def _model(**kw):
    base = dict(components=(), full_tokens_per_s=1.0, interval_s=600.0, save_block_s=1.0, save_commit_s=0.0,
                load_s=0.0, restart_s=60.0, horizon_s=500 * HOUR, num_nodes=8, dp=8, spare_nodes=10 ** 6)
    base.update(kw)
    return RunModel(**base)


def _within_3se(samples, expect):
    x = np.asarray(samples, dtype=float)
    se = x.std(ddof=1) / math.sqrt(x.size)
    assert abs(x.mean() - expect) <= 3 * se, (x.mean(), expect, se)


def test_lemon_population_failure_count_matches_closed_form():
    # 20 bad nodes, each failing once per 100 h until drained at its 3rd failure, over 300 h
    comp = Component("lemon_nodes", 0.01, "lemon", 20, 60.0, False, drain_after=3)
    m = _model(components=(comp,), horizon_s=300 * HOUR, num_nodes=100, dp=100)
    runs = [simulate_run(m, s) for s in range(30)]
    _within_3se([r.failures["lemon_nodes"] for r in runs], lemon_expected_failures(20, 0.01 / HOUR, 3, 300 * HOUR))
    # drained = nodes with >= 3 failures: n P(N >= 3)
    mu = 3.0
    p3 = 1 - math.exp(-mu) * (1 + mu + mu * mu / 2)
    _within_3se([r.drained_lemons for r in runs], 20 * p3)
    assert lemon_expected_failures(20, 0.01 / HOUR, 3, 300 * HOUR) < 20 * 3.0  # draining caps the count


def test_failure_domain_loss_matches_daly_with_the_domain_rate_and_repair():
    # 4 domains of 2 nodes, each failing once per 40 h (job: one per 10 h); no spares: every event
    # waits 1 h for its nodes, then restarts (60 s) and loads (30 s)
    dom = Component("rack", 1 / 40, "domain", 4, 0.0, True, nodes_per_event=2, repair_s=HOUR)
    tau, c = 1200.0, 30.0
    m = _model(components=(dom,), spare_nodes=0, interval_s=tau, save_block_s=c, load_s=30.0, restart_s=60.0,
               horizon_s=3000 * HOUR, repair_s=100 * HOUR)
    runs = [simulate_run(m, s) for s in range(12)]
    _within_3se([r.goodput for r in runs], domain_goodput(tau, c, 4 / 40 / HOUR, HOUR, 60.0, 30.0))
    # every event takes both nodes: the job waits for the domain's repair, not the run's 100 h
    assert all(r.losses["repair_wait"] > 0 for r in runs)
    assert max(r.losses["repair_wait"] for r in runs) < 3000 * HOUR * 0.2


def test_restart_time_is_the_sum_of_its_parts_with_spread():
    spec = parse_goodput({"restart": {"drain_s": 30, "reschedule_s": 120, "process_start_s": 60, "init_s": 20,
                                      "init_s_per_1000_gpus": 5, "cv": 0.5}})
    parts = restart_parts(spec, num_gpus=16384)
    assert dict(parts)["init_s"] == pytest.approx(20 + 5 * 16.384)
    mean = sum(v for _k, v in parts)
    comp = Component("sw", 1 / 50, "job", 1, 0.0, False)
    m = _model(components=(comp,), horizon_s=20000 * HOUR, restart_parts=parts, restart_s=mean, restart_cv=0.5,
               load_s=20.0)
    runs = [simulate_run(m, s) for s in range(10)]
    per_seed = [r.losses["restart"] / sum(1 for e in r.events if e[1] == "restart") for r in runs]
    _within_3se(per_seed, mean)
    _within_3se([r.losses["load"] / sum(1 for e in r.events if e[1] == "restart") for r in runs], 20.0)
    assert len({round(x, 6) for x in per_seed}) == len(per_seed)  # the spread is drawn
    # without spread: exactly the constants
    r0 = simulate_run(replace(m, restart_cv=0.0, horizon_s=500 * HOUR), 0)
    n = sum(1 for e in r0.events if e[1] == "restart")
    assert n > 0 and r0.losses["restart"] == pytest.approx(n * mean, rel=1e-12)


def test_weibull_gaps_keep_the_mean_and_count_like_a_renewal_process():
    comp = Component("gpu", 0.5, "gpu", 2, 0.0, False, shape=0.7)  # 1 per hour, decreasing hazard
    m = _model(components=(comp,), horizon_s=200 * HOUR)
    counts = np.array([simulate_run(m, s).failures["gpu"] for s in range(100)], dtype=float)
    _within_3se(counts, weibull_renewal_count(1 / HOUR, 0.7, 200 * HOUR))
    # the spread is the Weibull one (about 2.1 x Poisson's): sample variance within 3 of its standard
    # errors (normal approximation, var x sqrt(2 / (n - 1))), and Poisson's variance outside them
    var, want = counts.var(ddof=1), weibull_renewal_variance(1 / HOUR, 0.7, 200 * HOUR)
    se = want * math.sqrt(2 / (counts.size - 1))
    assert abs(var - want) <= 3 * se and abs(var - 200.0) > 3 * se, (var, want, se)
    assert weibull_renewal_count(1.0, 1.0, 7.0) == pytest.approx(7.0)


def test_async_write_longer_than_the_interval_is_waited_for_exactly():
    # 1000 s of training, interval 100 s, snapshot 5 s, write 150 s: each save waits 50 s for the
    # previous write: 9 x (5 + 50) + the last save (5 + 150) = 650 s of saves
    m = _model(horizon_s=None, target_tokens=1000.0, interval_s=100.0, save_block_s=5.0, save_commit_s=150.0)
    r = simulate_run(m, 0)
    assert r.finished and r.wall_s == pytest.approx(1650.0) and r.checkpoints == 10
    assert r.losses["checkpoint"] == pytest.approx(650.0)


def test_async_interval_accounts_for_the_background_write():
    M, b, w, R = HOUR, 1.0, 300.0, 120.0
    assert async_goodput(600.0, b, 0.0, R, M) == pytest.approx(daly_goodput(600.0, b, R, M), rel=1e-12)
    opt = optimal_interval_closed_form(b, R, M, write=w)
    assert opt >= w and async_goodput(opt, b, w, R, M) >= async_goodput(w / 2, b, w, R, M)
    comp = Component("x", 1.0, "gpu", 1, 0.0, False)
    for tau in (150.0, 300.0, 600.0):
        m = _model(components=(comp,), interval_s=tau, save_block_s=b, save_commit_s=w, restart_s=R,
                   horizon_s=1500 * HOUR)
        runs = [simulate_run(m, s) for s in range(6)]
        assert np.mean([r.goodput for r in runs]) == pytest.approx(async_goodput(tau, b, w, R, M), rel=0.03)


def test_failed_saves_roll_back_a_geometric_number_of_intervals():
    # a failure loses on average half an interval, plus tau p / (1 - p) for the failed saves before it
    tau, p = 200.0, 0.5
    comp = Component("x", 0.02, "gpu", 1, 0.0, False)
    m = _model(components=(comp,), interval_s=tau, save_block_s=1e-3, save_failure_p=p, horizon_s=20000 * HOUR)
    runs = [simulate_run(m, s) for s in range(10)]
    _within_3se([r.losses["lost_work"] / r.interruptions["x"] for r in runs], tau / 2 + tau * p / (1 - p))
    assert all(r.failed_saves > 0 for r in runs)


def test_slow_saves_stretch_the_pause_by_the_expected_factor():
    m = _model(horizon_s=None, target_tokens=100 * 1000.0, interval_s=1000.0, save_block_s=10.0,
               save_slow_p=0.25, save_slowdown=5.0)
    runs = [simulate_run(m, s) for s in range(20)]
    _within_3se([r.losses["checkpoint"] / 100 for r in runs], 10.0 * (0.75 + 0.25 * 5.0))


def test_loss_spike_rolls_back_beyond_the_last_checkpoint():
    tau, back = 300.0, 3000.0
    comp = Component("loss_spike", 0.05, "job", 1, 0.0, False, rollback_s=back)
    m = _model(components=(comp,), interval_s=tau, save_block_s=1e-3, horizon_s=20000 * HOUR)
    runs = [simulate_run(m, s) for s in range(10)]
    _within_3se([r.losses["lost_work"] / r.interruptions["loss_spike"] for r in runs], tau / 2 + back)
    assert all(r.useful_s + sum(r.losses.values()) == pytest.approx(r.wall_s, rel=1e-9) for r in runs)


def test_planned_maintenance_exact():
    m = _model(horizon_s=100 * HOUR, maintenance_every_s=24 * HOUR, maintenance_s=2 * HOUR)
    r = simulate_run(m, 0)
    assert r.maintenances == 4 and r.losses["maintenance"] == pytest.approx(8 * HOUR)
    assert r.ettr_available == pytest.approx(r.useful_s / (r.wall_s - 8 * HOUR))
    assert r.goodput < r.ettr_available


def test_token_budget_never_reached_stops_at_the_cap_unfinished():
    hw = Component("hw", 1.0, "node", 1, 0.0, True)  # a node lost every hour, repairs take 100 h, no spare
    m = _model(components=(hw,), spare_nodes=0, repair_s=100 * HOUR, horizon_s=None, target_tokens=1e9,
               max_wall_s=50 * HOUR)
    r = simulate_run(m, 0)
    assert not r.finished and r.wall_s == pytest.approx(50 * HOUR)
    assert r.useful_s + sum(r.losses.values()) == pytest.approx(r.wall_s, rel=1e-9)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10 ** 6), p=st.floats(0, 0.5), slow=st.floats(0, 0.5), cv=st.floats(0, 1),
       write=st.sampled_from([0.0, 50.0, 900.0]), elastic=st.booleans())
def test_losses_add_up_with_every_mechanism_on(seed, p, slow, cv, write, elastic):
    comps = (Component("hw", 0.02, "node", 4, 30.0, True), Component("sw", 0.05, "job", 1, 600.0, False, shape=0.8),
             Component("lemon_nodes", 0.05, "lemon", 2, 60.0, False, drain_after=2),
             Component("rack", 0.01, "domain", 2, 60.0, True, nodes_per_event=2, repair_s=3 * HOUR),
             Component("loss_spike", 0.01, "job", 1, 300.0, False, rollback_s=2000.0))
    m = _model(components=comps, horizon_s=200 * HOUR, dp=4, num_nodes=4, spare_nodes=1, repair_s=5 * HOUR,
               elastic=elastic, iteration_time=lambda dp: 1.0 + 0.01 * dp, save_commit_s=write, save_failure_p=p,
               save_slow_p=slow, save_slowdown=3.0, restart_parts=(("a", 30.0), ("b", 90.0)), restart_s=120.0,
               restart_cv=cv, load_s=10.0, maintenance_every_s=50 * HOUR, maintenance_s=HOUR,
               slow_rate_per_node_hour=0.01, slowdown=1.5, slow_detection_s=HOUR)
    r = simulate_run(m, seed)
    assert r.useful_s + sum(r.losses.values()) == pytest.approx(r.wall_s, rel=1e-9)
    assert r.tokens >= 0 and all(v >= -1e-6 for v in r.losses.values())
    again = simulate_run(m, seed)
    assert again.progress == r.progress and again.losses == r.losses and again.events == r.events


def test_fleet_presets_fit_and_cross_fleet_errors():
    # Kokolis et al. 2024: hardware 6.50 / 1000 node-days; measured MTTF 47.7 d at 8 GPUs, 7.9 h at 1,024
    rsc1 = fleet_components("meta-rsc1-a100")
    assert rsc1["hardware"]["rate_per_device_hour"] == pytest.approx(6.5 / 1000 / 24)
    jl = rsc1["job_level"]
    assert (jl["ref_gpus"], jl["size_exponent"]) == (8, 1.036)
    rows = {(r["fit"], r["target"], r["figure"], r["gpus"]): r for r in cross_fleet()}
    assert rows[("meta-rsc1-a100", "meta-rsc1-a100", "mttf_hours", 1024)]["predicted"] == pytest.approx(7.9, rel=1e-3)
    assert rows[("llama3-405b-h100", "llama3-405b-h100", "interruptions", 16384)]["predicted"] == pytest.approx(
        419, rel=1e-4)
    # fit on one fleet, predict another (docs/validation.md)
    for key, err in {("meta-rsc1-a100", "llama3-405b-h100", "interruptions", 16384): 5.739,
                     ("meta-rsc2-a100", "llama3-405b-h100", "interruptions", 16384): -0.382,
                     ("bloom-176b-a100", "llama3-405b-h100", "interruptions", 16384): 0.178,
                     ("llama3-405b-h100", "meta-rsc1-a100", "hardware_failures", 8): -0.505,
                     ("llama3-405b-h100", "meta-rsc1-a100", "mttf_hours", 1024): 5.265}.items():
        assert rows[key]["error"] == pytest.approx(err, abs=1e-3), key
    assert fit_job_level([(8, 10.0)], 0.0) == (0.1, 8, 1.0)
    with pytest.raises(ConfigError, match="not shorter than the hardware rate"):
        fit_job_level([(8, 1000.0)], 1e-3)


def test_job_level_component_scales_with_size_and_strategy_overrides():
    spec = parse_goodput({"fleet": "meta-rsc2-a100",
                          "failures": {"infra": {"per": "job", "rate_per_hour": 0.01, "ref_gpus": 8,
                                                 "size_exponent": 1.5}}})
    comps = {c.name: c for c in merge_components(spec, num_gpus=8 * 64, num_nodes=64)}
    assert comps["infra"].count == 1 and comps["infra"].rate_per_device_hour == pytest.approx(0.01 * 64 ** 1.5)
    assert comps["hardware"].count == 64
    extra = extra_components(parse_goodput({"lemons": {"fraction": 0.1, "rate_per_node_hour": 0.01},
                                            "domains": {"leaf_switch": {"nodes": 16}},
                                            "rollbacks": {"rate_per_day": 0.5, "steps_back": 100}}),
                             num_nodes=64, iteration_s=8.0)
    by = {c.name: c for c in extra}
    assert by["lemon_nodes"].count == 6 and by["lemon_nodes"].drain_after == 3
    assert by["leaf_switch"].count == 4 and by["leaf_switch"].nodes_per_event == 16
    assert by["leaf_switch"].rate_per_device_hour == pytest.approx(9.22e-6)
    assert by["loss_spike"].rollback_s == 800.0


@pytest.mark.parametrize("data, field", [
    ({"days": 1e9}, "over the limit of 3,650 days"),
    ({"seeds": 10 ** 9}, "goodput.seeds"),
    ({"lemons": {"fraction": 2, "rate_per_node_hour": 1e-3}}, "goodput.lemons.fraction"),
    ({"lemons": {"fraction": 0.1}}, "rate_per_node_hour"),
    ({"domains": {"rack": {"rate_per_domain_hour": 1e-5}}}, "goodput.domains.rack.nodes"),
    ({"domains": {"rack": {"nodes": 4, "size": 3}}}, "goodput.domains.rack.size"),
    ({"restart": {"cv": -1}}, "goodput.restart.cv"),
    ({"restart_s": 300, "restart": {"init_s": 30}}, "goodput.restart_s"),
    ({"rollbacks": {"rate_per_day": 1}}, "steps_back"),
    ({"maintenance": {"every_hours": 2, "duration_hours": 3}}, "goodput.maintenance.duration_hours"),
    ({"checkpoint": {"failure_probability": 1.0}}, "goodput.checkpoint.failure_probability"),
    ({"checkpoint": {"slow_probability": 0.2}}, "slowdown"),
    ({"failures": {"x": {"per": "job", "rate_per_device_hour": 1e-6}}}, "rate_per_hour"),
    ({"failures": {"gpu": {"shape": 0}}}, "goodput.failures.gpu.shape"),
])
def test_bad_new_fields_one_error(data, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        parse_goodput(data)


def test_unknown_fleet_and_domain_without_rate():
    with pytest.raises(ConfigError, match="goodput.fleet = 'meta-rsc3' is not a preset.*did you mean"):
        merge_components(parse_goodput({"fleet": "meta-rsc3"}), 8, 1)
    with pytest.raises(ConfigError, match="goodput.domains.rack has no rate"):
        extra_components(parse_goodput({"domains": {"rack": {"nodes": 2}}}), 8, 1.0)


def test_event_limit_is_checked_before_running():
    check_goodput_events(20, 12, 1000.0)
    with pytest.raises(ConfigError, match="exceeds the limit of 20,000,000"):
        check_goodput_events(10_000, 12, 1000.0)


def test_cli_reports_mttf_causes_percentiles_and_refuses_unbounded_runs(tmp_path, capsys):
    import json

    from simulator.cli.main import main
    from tests.test_goodput import GOODPUT_FILE
    f = tmp_path / "run.yaml"
    f.write_text(GOODPUT_FILE + "  maintenance: {every_hours: 168, duration_hours: 2}\n"
                 "  lemons: {fraction: 1.0, rate_per_node_hour: 1.0e-3, drain_after: 2}\n")
    assert main(["goodput", str(f), "--json", "--no-sweep"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["wall_days"]["p10"] <= d["wall_days"]["p50"] <= d["wall_days"]["p90"]
    assert 3.0 <= d["interruptions_by_cause"]["maintenance"] <= 4.0 and "lemon_nodes" in d["interruptions_by_cause"]
    assert d["ettr_available"]["mean"] > d["goodput"]["mean"] and d["job_mttf_hours"] > 0
    assert d["fleet"] == "llama3-405b-h100"
    for argv, msg in ((["--days", "1e9"], "over the limit of 3,650 days"),
                      (["--train-tokens", "1e20"], "over the limit of 3,650 days"),
                      (["--seeds", "1e9"], "over the limit of 10,000 runs"),
                      (["--days", "3000", "--seeds", "10000"], "exceeds the limit of 20,000,000")):
        assert main(["goodput", str(f), *argv]) == 2
        err = capsys.readouterr().err
        assert msg in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
