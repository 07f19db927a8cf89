"""Expected load of the busiest expert-parallel rank under real (learned) MoE routing.

A synchronous MoE layer runs at the pace of its busiest expert-parallel (EP) rank: that rank's
grouped GEMMs hold the most token copies and its all-to-all receives the most (GShard, Lepikhin 2020
Section 2.2). ``busiest_rank_load`` returns the expected value of that rank's routed token copies
over the mean, a deterministic closed form from two published sources of imbalance:

1. **Learned expert popularity.** A trained router sends more tokens to some experts than to others.
   Wang et al. 2024, "Auxiliary-Loss-Free Load Balancing Strategy for Mixture-of-Experts"
   (arXiv:2408.15664), Table 2, measure MaxVio_global = max_i load_i / mean - 1 over the 64 routed
   experts of their 3B DeepSeekMoE model: 0.52 with the auxiliary-loss-controlled baseline
   (GShard / Switch style, Megatron ``--moe-router-load-balancing-type aux_loss``) and 0.04 with
   the auxiliary-loss-free expert bias (DeepSeek-V3 Section 2.1.2, Megatron
   ``--moe-router-enable-expert-bias``). We read each expert's load share as normal with coefficient
   of variation sigma_e; the expected maximum of 64 of them is 1 + sigma_e * z(64), hence
   sigma_e = MaxVio / z(64) (z(n): expected maximum of n standard normals,
   ``topologies.stragglers.expected_max_std_normal``, the order statistic the straggler model uses).
   An EP rank holds E/ep consecutive experts whose popularities are independent, so its share has
   coefficient of variation sigma_e / sqrt(E/ep).
2. **Finite tokens per micro-batch.** Even a router with no preference (Megatron's
   ``--moe-router-force-load-balancing``: random logits, router.py ``apply_random_logits``) draws
   each token's top-k experts at random: the copies a rank receives are a sum of hypergeometric
   counts (k experts of E without replacement, E/ep of them on the rank), so with mu copies per rank
   on average the relative variance is (1 - 1/ep)(E - k)/((E - 1) mu).

The busiest of ep ranks then expects 1 + z(ep) * sqrt(sigma_e^2 ep/E + (1 - 1/ep)(E - k)/((E - 1) mu))
times the mean (normal approximation of the rank loads; exact for the first source as modelled,
good for the second at the thousands of copies per rank of training micro-batches). ``balanced``
(torchtitan ``debug.moe_force_load_balance``: tokens dealt round-robin to experts, moe/moe.py) is 1
exactly. The figures are per-layer expected maxima; batch-to-batch shifts of popularity (a data
mixture's domains) are not in them, so learned routing here is a floor for a real run.
"""
from __future__ import annotations

import math

from strategies.strategy_file import MoeRouting
from taskgraph.model import ModelSpec
from topologies.stragglers import expected_max_std_normal

#: routing name -> MaxVio_global over ``MAXVIO_EXPERTS`` routed experts (Wang et al. 2024,
#: arXiv:2408.15664, Table 2, the 3B model); None = no learned popularity, only the token draw.
MAXVIO_GLOBAL = {"aux_loss": 0.52, "aux_loss_free": 0.04, "random": 0.0}
#: routed experts of the model MAXVIO_GLOBAL was measured on (Wang 2024 Section 4.1: 64 routed experts)
MAXVIO_EXPERTS = 64


def busiest_rank_load(routing: str, experts: int, top_k: int, ep: int, copies_per_rank: float) -> float:
    """Expected routed token copies of the busiest of ``ep`` expert-parallel ranks over the mean, for
    ``experts`` routed experts, top-``top_k`` routing and ``copies_per_rank`` mean copies per rank
    and micro-batch (module docstring).

    >>> busiest_rank_load("balanced", 8, 2, 8, 8192)
    1.0
    >>> busiest_rank_load("aux_loss", 8, 2, 1, 8192)   # one rank holds every expert
    1.0
    """
    if routing == "balanced" or ep == 1:
        return 1.0
    if routing not in MAXVIO_GLOBAL:
        raise ValueError(f"routing {routing!r} is not one of balanced, {', '.join(MAXVIO_GLOBAL)}")
    sigma_e = MAXVIO_GLOBAL[routing] / expected_max_std_normal(MAXVIO_EXPERTS)
    popularity = sigma_e * sigma_e * ep / experts
    draw = (1 - 1 / ep) * (experts - top_k) / ((experts - 1) * copies_per_rank) if experts > 1 else 0.0
    return 1.0 + expected_max_std_normal(ep) * math.sqrt(popularity + draw)


def routed_load(model: ModelSpec, routing: MoeRouting, *, tokens: int, tp: int, ep: int) -> float:
    """The busiest expert-parallel rank's expected load for ``routing`` (module docstring):
    each GPU routes ``tokens`` tokens per micro-batch and its experts receive those of its expert-TP
    group (``tp`` ranks), top_k copies each, so mu = tokens * tp * top_k copies per rank on average;
    then capped at the capacity factor (tokens past capacity are dropped, Fedus 2021 Section 2.2).
    'learned' is the model's router: DeepSeek-V3's expert bias when it has one, else an auxiliary loss."""
    if not model.experts:
        return 1.0
    name = routing.routing
    if name == "learned":
        name = "aux_loss_free" if model.router_bias else "aux_loss"
    load = busiest_rank_load(name, model.experts, model.top_k, ep, tokens * tp * model.top_k)
    return load if routing.capacity_factor is None else min(load, routing.capacity_factor)
