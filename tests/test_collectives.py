"""Alpha-beta collective costs: closed forms checked exactly on constructed clusters."""
from __future__ import annotations

import dataclasses

import pytest

from strategies.errors import ConfigError
from topologies.cluster import get_cluster, load_cluster_yaml
from topologies.collectives import (
    COLLECTIVES,
    all_gather,
    all_reduce,
    all_reduce_algorithm,
    all_reduce_costs,
    all_to_all,
    broadcast,
    collective_time,
    group_layout,
    normalize_kind,
    reduce_scatter,
    ring_bandwidth,
    send_recv,
)
from topologies.placement import group_ranks

# Constructed cluster: 4 nodes x 4 GPUs, round numbers after efficiencies.
BNV = 200e9 * 0.5          # nvlink_gbps 200 * nvlink_efficiency 0.5 = 1e11 B/s
BNET = 160e9 / 8 * 0.5     # nic_gbit 160 -> 20 GB/s * nic_efficiency 0.5 = 1e10 B/s
A_NV, A_NET, T0 = 1e-6, 5e-6, 2e-6
S = 1e8


@pytest.fixture
def cl():
    return load_cluster_yaml({
        "name": "toy", "gpu": "h100", "nodes": 4, "gpus_per_node": 4,
        "nvlink_gbps": 200, "nvlink_efficiency": 0.5, "nvlink_latency_us": 1,
        "nic_gbit": 160, "nic_efficiency": 0.5, "nic_latency_us": 5,
        "collective_base_latency_us": 2, "collective_model": "alpha-beta",
    })


def approx(x):
    return pytest.approx(x, rel=1e-12, abs=1e-18)


def test_constructed_cluster_bandwidths(cl):
    assert cl.nvlink_bus_bandwidth == approx(BNV)
    assert cl.nic_bus_bandwidth == approx(BNET)


# --- ring all-reduce ---------------------------------------------------------------------------
def test_ring_all_reduce_within_node(cl):
    n = 4
    want = T0 + 2 * (n - 1) / n * S / BNV + 2 * (n - 1) * A_NV
    assert all_reduce(S, [0, 1, 2, 3], cl, algorithm="ring") == approx(want)
    assert all_reduce(S, [0, 1, 2, 3], cl) == approx(want)  # one node: auto == ring
    assert all_reduce(S, [0, 1, 2, 3], cl, algorithm="hierarchical") == approx(want)


def test_ring_all_reduce_one_gpu_per_node_is_nic_bound(cl):
    n = 4
    ranks = [0, 4, 8, 12]
    assert ring_bandwidth(ranks, cl) == approx(BNET)
    want = T0 + 2 * (n - 1) / n * S / BNET + 2 * (n - 1) * A_NET
    assert all_reduce(S, ranks, cl, algorithm="ring") == approx(want)
    # g = 1: hierarchical is the same ring over the nodes
    assert all_reduce(S, ranks, cl, algorithm="hierarchical") == approx(want)


def test_ring_all_reduce_across_nodes_uses_all_group_nics(cl):
    n, k, g = 8, 2, 4
    ranks = list(range(8))
    b = min(BNV, g * BNET)  # = 4e10, NIC-bound: one ring per NIC
    assert b == 4 * BNET and ring_bandwidth(ranks, cl) == approx(b)
    want = T0 + 2 * (n - 1) / n * S / b + 2 * ((n - k) * A_NV + (k - 1) * A_NET)
    assert all_reduce(S, ranks, cl, algorithm="ring") == approx(want)


def test_nvlink_bound_when_nics_are_fast(cl):
    fast = dataclasses.replace(cl, nic_bandwidth=1e12)  # g * B_net = 4 * 5e11 >> B_nv
    ranks = list(range(8))
    assert ring_bandwidth(ranks, fast) == approx(BNV)
    n, k = 8, 2
    want = T0 + 2 * (n - 1) / n * S / BNV + 2 * ((n - k) * A_NV + (k - 1) * A_NET)
    assert all_reduce(S, ranks, fast, algorithm="ring") == approx(want)
    # and NIC-bound on the original cluster
    assert ring_bandwidth(ranks, cl) == approx(4 * BNET)
    assert 4 * BNET < BNV


def test_uneven_group_is_bound_by_fewest_nics(cl):
    ranks = [0, 1, 2, 4]  # 3 GPUs on node 0, 1 on node 1
    lay = group_layout(ranks, cl)
    assert (lay.n, lay.nodes, lay.g_min, lay.g_max, lay.uniform) == (4, 2, 1, 3, False)
    assert ring_bandwidth(ranks, cl) == approx(min(BNV, 1 * BNET))
    assert set(all_reduce_costs(S, ranks, cl)) == {"ring"}
    assert all_reduce(S, ranks, cl) == all_reduce(S, ranks, cl, algorithm="ring")
    with pytest.raises(ConfigError, match="same number of group GPUs on every node.*algorithm='ring'"):
        all_reduce(S, ranks, cl, algorithm="hierarchical")


# --- hierarchical all-reduce -------------------------------------------------------------------
def hier(s, g, k):
    return (T0 + 2 * (g - 1) / g * s / BNV + 2 * (g - 1) * A_NV
            + 2 * (k - 1) / k * (s / g) / BNET + 2 * (k - 1) * A_NET)


def ring(s, n, k, b):
    return T0 + 2 * (n - 1) / n * s / b + 2 * ((n - k) * A_NV + (k - 1) * A_NET)


def test_hierarchical_formula(cl):
    ranks = list(range(16))  # g = 4 on each of k = 4 nodes
    assert all_reduce(S, ranks, cl, algorithm="hierarchical") == approx(hier(S, 4, 4))
    costs = all_reduce_costs(S, ranks, cl)
    assert costs["hierarchical"] == approx(hier(S, 4, 4))
    assert costs["ring"] == approx(ring(S, 16, 4, 4 * BNET))


def test_hierarchical_chosen_when_cheaper_bandwidth(cl):
    # B_nv > n * B_net (1e11 > 4 * 1e10): hierarchical saves NIC traffic
    ranks = [0, 1, 4, 5]
    h, r = hier(S, 2, 2), ring(S, 4, 2, 2 * BNET)
    assert h < r
    assert all_reduce_algorithm(S, ranks, cl) == "hierarchical"
    assert all_reduce(S, ranks, cl) == approx(h)
    assert all_reduce(S, ranks, cl, algorithm="ring") == approx(r)


def test_hierarchical_chosen_for_small_messages_ring_for_large():
    c = get_cluster("dgx-h100", nodes=2, collective_model="alpha-beta")
    ranks = list(range(16))
    assert all_reduce_algorithm(1e3, ranks, c) == "hierarchical"  # fewer latency steps
    assert all_reduce_algorithm(1e9, ranks, c) == "ring"  # B_nv < n*B_net: ring pipelines NVLink+NIC
    for s in (1e3, 1e9):
        costs = all_reduce_costs(s, ranks, c)
        assert all_reduce(s, ranks, c) == min(costs.values())


# --- reduce-scatter / all-gather / broadcast ---------------------------------------------------
@pytest.mark.parametrize("fn", [reduce_scatter, all_gather])
def test_rs_ag_within_node(cl, fn):
    n = 4
    assert fn(S, [0, 1, 2, 3], cl) == approx(T0 + (n - 1) / n * S / BNV + (n - 1) * A_NV)


@pytest.mark.parametrize("fn", [reduce_scatter, all_gather])
def test_rs_ag_across_nodes(cl, fn):
    n, k = 8, 2
    want = T0 + (n - 1) / n * S / (4 * BNET) + (n - k) * A_NV + (k - 1) * A_NET
    assert fn(S, list(range(8)), cl) == approx(want)
    want = T0 + 3 / 4 * S / BNET + 3 * A_NET
    assert fn(S, [0, 4, 8, 12], cl) == approx(want)


def test_broadcast(cl):
    assert broadcast(S, [0, 1, 2, 3], cl) == approx(T0 + S / BNV + 3 * A_NV)
    n, k = 8, 2
    assert broadcast(S, list(range(8)), cl) == approx(T0 + S / (4 * BNET) + (n - k) * A_NV + (k - 1) * A_NET)
    assert broadcast(S, [3, 7], cl) == approx(T0 + S / BNET + A_NET)


# --- all-to-all --------------------------------------------------------------------------------
def test_all_to_all_within_node(cl):
    n = 4
    assert all_to_all(S, [0, 1, 2, 3], cl) == approx(T0 + (n - 1) / n * S / BNV + (n - 1) * A_NV)


def test_all_to_all_across_nodes_per_gpu_nic(cl):
    n, g = 8, 4
    want = T0 + max((g - 1) / n * S / BNV, (n - g) / n * S / BNET) + (g - 1) * A_NV + (n - g) * A_NET
    assert all_to_all(S, list(range(8)), cl) == approx(want)
    # inter-node part is bound by each GPU's own NIC (not g NICs as for a ring)
    assert (n - g) / n * S / BNET > (g - 1) / n * S / BNV
    n = 4
    assert all_to_all(S, [0, 4, 8, 12], cl) == approx(T0 + (n - 1) / n * S / BNET + (n - 1) * A_NET)


# --- send/recv ---------------------------------------------------------------------------------
def test_send_recv(cl):
    assert send_recv(S, [0, 3], cl) == approx(T0 + S / BNV + A_NV)
    assert send_recv(S, [3, 4], cl) == approx(T0 + S / BNET + A_NET)
    assert send_recv(S, [3], cl) == 0.0
    with pytest.raises(ConfigError, match=r"ranks = \[src, dst\]"):
        send_recv(S, [0, 1, 2], cl)


# --- degenerate cases --------------------------------------------------------------------------
@pytest.mark.parametrize("kind", list(COLLECTIVES))
def test_single_rank_and_empty_message_cost_zero(cl, kind):
    assert collective_time(kind, S, [5], cl) == 0.0
    assert collective_time(kind, 0, [0, 4], cl) == 0.0


@pytest.mark.parametrize("kind", list(COLLECTIVES))
def test_monotone_in_size(cl, kind):
    ranks = [0, 4] if kind == "send-recv" else list(range(8))
    times = [collective_time(kind, s, ranks, cl) for s in (1, 1e3, 1e6, 1e9)]
    assert times == sorted(times) and times[0] > 0


def test_bus_bandwidth_matches_nccl_definitions(cl):
    """Zero latency: S/t * factor == B (nccl-tests PERFORMANCE.md busBw factors)."""
    z = dataclasses.replace(cl, nvlink_latency=0.0, nic_latency=0.0, collective_base_latency=0.0)
    ranks, n = [0, 1, 2, 3], 4
    assert S / all_reduce(S, ranks, z) * 2 * (n - 1) / n == approx(BNV)
    assert S / reduce_scatter(S, ranks, z) * (n - 1) / n == approx(BNV)
    assert S / all_gather(S, ranks, z) * (n - 1) / n == approx(BNV)
    assert S / broadcast(S, ranks, z) * 1 == approx(BNV)
    assert S / all_to_all(S, ranks, z) * (n - 1) / n == approx(BNV)
    assert S / send_recv(S, [0, 1], z) == approx(BNV)


# --- lookup and errors -------------------------------------------------------------------------
def test_collective_time_dispatch(cl):
    ranks = list(range(8))
    for kind, fn in COLLECTIVES.items():
        r = [0, 4] if kind == "send-recv" else ranks
        assert collective_time(kind, S, r, cl) == fn(S, r, cl)
    assert collective_time("all_reduce", S, ranks, cl, algorithm="ring") == all_reduce(S, ranks, cl, "ring")
    for alias, kind in [("AllReduce", "all-reduce"), ("allgather", "all-gather"), ("p2p", "send-recv"),
                        ("reduce_scatter", "reduce-scatter"), ("alltoall", "all-to-all")]:
        assert normalize_kind(alias) == kind
    assert set(COLLECTIVES) == {"all-reduce", "reduce-scatter", "all-gather", "broadcast", "all-to-all",
                                "send-recv"}


def test_collective_time_errors(cl):
    with pytest.raises(ConfigError, match=r"unknown collective kind 'all-reduse' \(did you mean 'all-reduce'\?\)"
                                          r".*valid kinds: all-reduce, reduce-scatter, all-gather"):
        collective_time("all-reduse", S, [0, 1], cl)
    with pytest.raises(ConfigError, match="takes no algorithm option"):
        collective_time("all-gather", S, [0, 1], cl, algorithm="ring")
    with pytest.raises(ConfigError, match=r"did you mean 'algorithm'"):
        collective_time("all-reduce", S, [0, 1], cl, algoritm="ring")
    with pytest.raises(ConfigError, match=r"did you mean 'hierarchical'"):
        all_reduce(S, [0, 1], cl, algorithm="hierarchal")


@pytest.mark.parametrize("nbytes, ranks, pattern", [
    (-1, [0, 1], "nbytes = -1 must be"),
    (float("nan"), [0, 1], "nbytes = nan"),
    (True, [0, 1], "nbytes = True"),
    (S, [], "ranks is empty"),
    (S, [0, 16], r"rank 16 is not a GPU of cluster 'toy' \(ranks 0..15\)"),
    (S, [1, 1], "repeat"),
    (S, 3, "must be a list of global ranks"),
])
def test_input_errors(cl, nbytes, ranks, pattern):
    with pytest.raises(ConfigError, match=pattern):
        all_reduce(nbytes, ranks, cl)


def test_megatron_groups_on_dgx_h100():
    c = get_cluster("dgx-h100", nodes=2, collective_model="alpha-beta")
    sizes = dict(tp=8, dp=2, pp=1)
    tp_group, dp_group = group_ranks("tp", sizes, 0), group_ranks("dp", sizes, 0)
    assert ring_bandwidth(tp_group, c) == approx(c.nvlink_bus_bandwidth)
    assert ring_bandwidth(dp_group, c) == approx(c.nic_bus_bandwidth)
    # a 1 GB gradient all-reduce over the 2-node dp group is NIC-bound: 2*(1/2)*S/B_net + ...
    want = c.collective_base_latency + 1e9 / c.nic_bus_bandwidth + 2 * c.nic_latency
    assert all_reduce(1e9, dp_group, c) == approx(want)


def test_numpy_ranks_accepted(cl):
    np = pytest.importorskip("numpy")
    assert all_reduce(S, np.arange(8), cl) == all_reduce(S, list(range(8)), cl)
    assert send_recv(S, np.array([3, 4]), cl) == send_recv(S, [3, 4], cl)
