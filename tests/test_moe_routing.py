"""The busiest expert-parallel rank's expected load under real routing (taskgraph/moe_routing.py,
options.moe_routing): closed forms on tiny cases, invariants, and what the strategy file accepts."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strategies.errors import ConfigError
from strategies.strategy_file import MoeRouting, parse_strategy
from taskgraph.model import get_model
from taskgraph.moe_routing import MAXVIO_GLOBAL, busiest_rank_load, routed_load
from taskgraph.operators import layer_operators
from topologies.stragglers import expected_max_std_normal as expected_max_normal


def test_expected_max_of_normals_closed_forms():
    # E[max of 2] = 1/sqrt(pi), E[max of 3] = 3/(2 sqrt(pi)) (David & Nagaraja, Order Statistics, 3.2)
    assert expected_max_normal(1) == 0.0
    assert expected_max_normal(2) == pytest.approx(1 / math.sqrt(math.pi), abs=1e-9)
    assert expected_max_normal(3) == pytest.approx(3 / (2 * math.sqrt(math.pi)), abs=1e-9)
    # tabulated (Harter 1961): n = 8 -> 1.42360, n = 64 -> 2.34373
    assert expected_max_normal(8) == pytest.approx(1.42360, abs=1e-5)
    assert expected_max_normal(64) == pytest.approx(2.34373, abs=1e-5)


def test_random_routing_hand_computed():
    # Mixtral's 8 experts, top-2, one per rank (ep 8), 8,192 copies per rank: each token's pair of
    # experts is drawn without replacement, so a rank's count has variance mu (1 - 1/8)(8 - 2)/(8 - 1)
    # = 0.75 mu, and the busiest of 8 expects 1 + 1.42360 sqrt(0.75 / 8192)
    assert busiest_rank_load("random", 8, 2, 8, 8192) == pytest.approx(1 + 1.4236003 * math.sqrt(0.75 / 8192))


def test_aux_loss_hand_computed():
    # sigma_e = 0.52 / z(64); one expert per rank adds sigma_e^2 to the draw's relative variance
    sigma = 0.52 / 2.3437335
    want = 1 + 1.4236003 * math.sqrt(sigma ** 2 + 0.75 / 8192)
    assert busiest_rank_load("aux_loss", 8, 2, 8, 8192) == pytest.approx(want, rel=1e-6)
    # 4 experts per rank average their popularity: sigma_e^2 / 4
    want4 = 1 + 1.4236003 * math.sqrt(sigma ** 2 / 4 + (7 / 8) * (32 - 2) / (31 * 8192))
    assert busiest_rank_load("aux_loss", 32, 2, 8, 8192) == pytest.approx(want4, rel=1e-6)


def test_balanced_and_single_rank_are_exactly_the_mean():
    assert busiest_rank_load("balanced", 256, 8, 64, 100) == 1.0
    for r in MAXVIO_GLOBAL:
        assert busiest_rank_load(r, 8, 2, 1, 10) == 1.0


@settings(max_examples=60, deadline=None)
@given(ep_exp=st.integers(1, 6), per_rank=st.integers(1, 8), k=st.integers(1, 8),
       copies=st.integers(64, 1 << 20))
def test_routing_order_and_more_tokens_balance_better(ep_exp, per_rank, k, copies):
    ep = 2 ** ep_exp
    experts = ep * per_rank
    k = min(k, experts)
    loads = [busiest_rank_load(r, experts, k, ep, copies) for r in ("balanced", "random", "aux_loss_free", "aux_loss")]
    assert loads == sorted(loads) and loads[0] == 1.0
    assert busiest_rank_load("random", experts, k, ep, 2 * copies) <= loads[1]


def test_operator_builder_resolves_the_routing():
    m = get_model("mixtral-8x7b")
    kw = dict(micro_batch=1, seq_len=2048, ep=8)
    load = busiest_rank_load("aux_loss", 8, 2, 8, 2048 * 2)
    assert routed_load(m, MoeRouting("learned"), tokens=2048, tp=1, ep=8) == load   # no router bias: aux loss
    assert routed_load(m, MoeRouting("aux_loss", 1.25), tokens=2048, tp=1, ep=8) == 1.25  # capacity caps it
    real = {o.name: o for o in layer_operators(m, **kw, moe_load=MoeRouting("learned"))}
    fixed = {o.name: o for o in layer_operators(m, **kw, moe_load=load)}
    assert real["moe_experts"] == fixed["moe_experts"]
    ds = get_model("deepseek-v3")   # router bias: DeepSeek-V3's auxiliary-loss-free balancing
    assert routed_load(ds, MoeRouting("learned"), tokens=4096, tp=1, ep=64) == \
        busiest_rank_load("aux_loss_free", 256, 8, 64, 4096 * 8)


def _mixtral(**options):
    return parse_strategy({"model": {"preset": "mixtral-8x7b", "layers": 4}, "cluster": {"preset": "dgx-h100", "nodes": 2},
                           "parallel": {"tp": 1, "pp": 2, "ep": 8}, "schedule": "1f1b",
                           "training": {"micro_batch": 1, "global_batch": 16, "seq_len": 2048},
                           "options": options}, ".")


def test_strategy_default_is_learned_routing_and_slower_than_forced_balance():
    from simulator.api import simulate_strategy
    learned = simulate_strategy(_mixtral()).result.makespan
    assert learned == simulate_strategy(_mixtral(moe_routing="aux_loss")).result.makespan
    balanced = simulate_strategy(_mixtral(moe_routing="balanced")).result.makespan
    assert balanced == simulate_strategy(_mixtral(moe_imbalance=1.0)).result.makespan
    assert balanced < simulate_strategy(_mixtral(moe_routing="random")).result.makespan < learned


def test_strategy_refuses_bad_routing_values():
    with pytest.raises(ConfigError, match="options.moe_routing") as e:
        _mixtral(moe_routing="even")
    assert "balanced" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="keep one of the two"):
        _mixtral(moe_routing="random", moe_imbalance=1.2)
    from taskgraph.plan import resolve
    dense = parse_strategy({"model": "llama3-8b", "cluster": {"preset": "dgx-h100", "nodes": 1},
                            "parallel": {"tp": 1, "pp": 1}, "training": {"micro_batch": 1, "global_batch": 8,
                                                                         "seq_len": 2048},
                            "options": {"moe_routing": "random"}}, ".")
    with pytest.raises(ConfigError, match="applies to MoE models"):
        resolve(dense)


@pytest.mark.parametrize("extra,want", [
    ("", None),                                                       # the model's learned routing
    ("--moe-router-force-load-balancing", "random"),                  # router.py apply_random_logits
    ("--moe-router-enable-expert-bias", "aux_loss_free"),
    ("--moe-router-force-load-balancing --moe-expert-capacity-factor 1.5 --moe-pad-expert-input-to-capacity", None),
])
def test_megatron_routing_flags(extra, want):
    from strategies.importers import import_config
    base = ("torchrun pretrain_gpt.py --num-layers 8 --hidden-size 256 --num-attention-heads 8 --seq-length 512 "
            "--micro-batch-size 1 --global-batch-size 8 --vocab-size 1000 --bf16 --num-experts 8 "
            "--expert-model-parallel-size 2 --moe-token-dispatcher-type alltoall ")
    imp = import_config("megatron", base + extra, cluster="dgx-h100", nodes=1)
    assert imp.strategy["options"].get("moe_routing") == want
    assert not imp.unmodeled
