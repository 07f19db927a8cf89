"""Limits, bounded messages and the one place for field checks (exact values on small cases)."""
from __future__ import annotations

import pytest

from simulator.search.evaluate import vary
from strategies.config import check_int, divisors
from strategies.errors import ConfigError, brief
from strategies.limits import MAX_ACTIONS, check_actions
from strategies.schedules import get_schedule
from strategies.strategy_file import load_strategy, parse_strategy
from taskgraph.costing import build_work
from taskgraph.estimate import estimate_tasks
from taskgraph.lower_model import lower_model
from taskgraph.plan import resolve

EXAMPLE = "strategies/examples/llama3-8b-8-h100.yaml"


def test_vary_uses_the_strategy_file_checks():
    s = load_strategy(EXAMPLE)
    for change, msg in [({"grad_bucket_mb": float("nan")}, "options.grad_bucket_mb = nan must be a finite number"),
                        ({"memory_reserve_gb": -1}, "options.memory_reserve_gb = -1 must be >= 0.0"),
                        ({"seq_len": 2 ** 30}, "training.seq_len = 1073741824 is over the limit of 16,777,216")]:
        with pytest.raises(ConfigError) as exc:
            vary(s, change)
        assert str(exc.value).startswith(msg)
    assert vary(s, {"tp": 2}).parallel.tp == 2


def test_file_and_vary_agree_on_messages():
    s = load_strategy(EXAMPLE)
    data = dict(s.raw, options={**s.raw["options"], "grad_bucket_mb": float("inf")})
    with pytest.raises(ConfigError) as a:
        parse_strategy(data)
    with pytest.raises(ConfigError) as b:
        vary(s, {"grad_bucket_mb": float("inf")})
    assert str(a.value) == str(b.value) == "options.grad_bucket_mb = inf must be a finite number"


def test_bounded_helpers():
    assert divisors(12) == [1, 2, 3, 4, 6, 12]
    assert divisors(2 ** 53 - 1, limit=4) == [1, 6361, 1416003655831, 9007199254740991]  # 6361 * 69431 * 20394401
    assert brief(list(range(10 ** 6))) == "[0, 1, 2, 3, ...]"
    with pytest.raises(ConfigError, match=r"^x = 2.0 must be an integer"):
        check_int(2.0, "x")
    with pytest.raises(ConfigError, match=r"^x = 10 is over the limit of 9"):
        check_int(10, "x", maximum=9)


def test_action_limit_is_checked_before_generating():
    check_actions(1, 1, MAX_ACTIONS // 3)
    with pytest.raises(ConfigError, match="exceeds the limit"):
        check_actions(1, 1, MAX_ACTIONS // 3 + 1)
    with pytest.raises(ConfigError, match="exceeds the limit"):
        get_schedule("1f1b", 10 ** 9, 10 ** 9)  # would take hours to generate


def test_estimate_is_an_upper_bound_close_to_the_built_count():
    plan = resolve(load_strategy(EXAMPLE))
    work = build_work(plan)
    built = lower_model(plan.schedule, work, overlap_handoff=plan.strategy.options.overlap_handoff).num_tasks
    est = estimate_tasks(plan.schedule, work)
    assert built <= est <= 1.2 * built
