"""Meta's RoCE fabric (issue 38): pods stated in GPUs (``pod_gpus``), the 1:7 tier between pods, E-ECMP's
16 queue pairs per GPU pair, and the ``meta-roce-h100`` preset's cited values (topologies/data/clusters.yaml
[LLAMA3-NET], [META-ROCE])."""
from __future__ import annotations

import math
import re
from fractions import Fraction

import pytest

from strategies.errors import ConfigError
from topologies.cluster import CLUSTER_PRESETS_PATH, get_cluster, load_cluster_yaml
from topologies.fabric import fabric_of, network_slowdown
from topologies.placement import ParallelSizes, group_ranks


def _tiny(**kw):
    """4 nodes of 2 GPUs, one leaf (rack) per node, so every inter-node hop crosses a leaf bundle."""
    base = {"preset": "meta-roce-h100", "nodes": 4, "gpus_per_node": 2, "nodes_per_leaf": 1,
            "routing": "adaptive", "qps_per_connection": 1, "core_oversubscription": 1, "pod_gpus": 4}
    return load_cluster_yaml({**base, **kw})


def test_pod_gpus_groups_leaves_into_pods_with_the_core_taper():
    c = _tiny(core_oversubscription=4)
    assert (c.num_leaves, c.leaves_per_pod, c.num_pods) == (4, 2, 2)
    fab = fabric_of(c)
    assert fab.pod.tolist() == [0, 0, 1, 1]
    nic = c.nic_bandwidth
    # leaf uplink: its 2 NICs at full bisection; pod core link: 2 leaves x 2 NICs / 4
    assert fab.capacity[fab.up(0)] == 2 * nic and fab.capacity[fab.core_up(0)] == 4 * nic / 4
    assert fab.route(0, 2) == (fab.tx(0), fab.up(0), fab.down(1), fab.rx(2))        # same pod
    assert fab.route(2, 4) == (fab.tx(2), fab.up(1), fab.core_up(0), fab.core_down(1), fab.down(2), fab.rx(4))
    # a job that fits one pod has no core tier
    assert _tiny(nodes=2).num_pods == 1 and fabric_of(_tiny(nodes=2)).pod is None


def test_dp_group_inside_a_pod_is_free_across_pods_pays_the_core_taper_exactly():
    """tp 2 x dp 2 x pp 2 keeps each DP ring in one pod (nodes 0-1 or 2-3): no slowdown. tp 2 x dp 4
    spreads each DP ring over all 4 nodes: the hops 1 -> 2 and 3 -> 0 cross pods, and both rails' rings
    share a pod's core link of 4 NICs / 4 = 1 NIC: two flows on it, each at half a NIC, slowdown 2."""
    c = _tiny(core_oversubscription=4)
    inside = ParallelSizes(tp=2, dp=2, pp=2)
    assert network_slowdown(c, group_ranks("dp", inside, 0), "dp", inside) == 1.0
    across = ParallelSizes(tp=2, dp=4)
    assert network_slowdown(c, group_ranks("dp", across, 0), "dp", across) == pytest.approx(2.0, rel=1e-12)
    # the same job without the core taper, or in one pod (pod_gpus = the job), runs at the NIC rate
    assert network_slowdown(_tiny(), group_ranks("dp", across, 0), "dp", across) == 1.0
    assert network_slowdown(_tiny(core_oversubscription=4, pod_gpus=8), group_ranks("dp", across, 0), "dp",
                            across) == 1.0


def _egf_max_load_cdf(balls: int, bins: int, m: int) -> Fraction:
    """P(busiest of ``bins`` ports holds <= m of ``balls`` uniformly hashed flows), exactly: the count of
    assignments is balls! [x^balls] (sum_{k<=m} x^k / k!)^bins (exponential generating functions), an
    oracle independent of the Poissonization in topologies/fabric.py."""
    poly = [Fraction(1)]
    term = [Fraction(1, math.factorial(k)) for k in range(m + 1)]
    for _ in range(bins):
        out = [Fraction(0)] * (len(poly) + m)
        for i, a in enumerate(poly):
            for k, b in enumerate(term):
                out[i + k] += a * b
        poly = out
    coef = poly[balls] if balls < len(poly) else Fraction(0)
    return coef * math.factorial(balls) / Fraction(bins) ** balls


@pytest.mark.parametrize("qps", [1, 16])
def test_ecmp_busiest_port_with_queue_pairs_exactly(qps):
    """tp 2 x dp 4 in one pod, one leaf per node: each of the 4 ring hops crosses its leaf's uplink and
    the next leaf's downlink, so 8 bundles each carry the two rails' hops, 2 x qps queue pairs hashed
    onto 2 ports (2 NICs per leaf). A pair alone on its NIC runs at nic / qps, so the family's pace is
    E[max(1, M / qps)], M the busiest port over the 8 bundles. qps 1: the two flows of a bundle share a
    port with probability 1/2: 1 + (1 - (1/2)^8). qps 16: 32 pairs on 2 ports; exact by generating
    functions."""
    c = _tiny(routing="ecmp", qps_per_connection=qps, pod_gpus=8)
    s = ParallelSizes(tp=2, dp=4)
    got = network_slowdown(c, group_ranks("dp", s, 0), "dp", s)
    balls, bundles = 2 * qps, 8
    expect = Fraction(0)
    prev = Fraction(0)
    for m in range(balls + 1):
        cdf = _egf_max_load_cdf(balls, 2, m) ** bundles
        expect += (cdf - prev) * max(Fraction(1), Fraction(m, qps))
        prev = cdf
    assert got == pytest.approx(float(expect), rel=1e-9)
    if qps == 1:
        assert float(expect) == 1 + (1 - 0.5 ** 8)
    else:
        assert 1.0 < got < 1 + (1 - 0.5 ** 8)   # 16 queue pairs spread the load


def test_meta_roce_preset_loads_with_its_cited_values():
    c = get_cluster("meta-roce-h100", nodes=2048)
    assert c.gpu.name == "H100-SXM-80GB" and c.gpus_per_node == 8 and c.nic_bandwidth == 50e9
    assert (c.network_topology, c.nodes_per_leaf, c.pod_gpus) == ("fat-tree", 2, 3072)
    assert (c.oversubscription, c.core_oversubscription) == (1.0, 7.0)
    assert (c.routing, c.qps_per_connection) == ("ecmp", 16)
    # 16,384 GPUs = 1,024 racks: five pods of 192 racks and a sixth of 64
    assert (c.num_leaves, c.leaves_per_pod, c.num_pods) == (1024, 192, 6)
    fab = fabric_of(c)
    assert fab.capacity[fab.core_up(0)] == pytest.approx(3072 * 50e9 / 7)
    assert fab.bundle_ports()[fab.up(0)] == 16
    assert get_cluster("meta-roce-h100", nodes=384).num_pods == 1   # one pod of 3,072
    # every field of the preset carries its source in a comment (clusters.yaml header style)
    with open(CLUSTER_PRESETS_PATH, encoding="utf-8") as f:
        text = f.read()
    block = text.split("\n  meta-roce-h100:\n", 1)[1].split("\n  hgx-h20:", 1)[0]
    for line in block.splitlines():
        if re.match(r"\s+(aliases|description):", line):
            continue
        assert "#" in line, f"uncited field: {line.strip()}"


@pytest.mark.parametrize("value", [100, 0, 8, True, "3072"])
def test_bad_pod_gpus_is_one_clear_error(value):
    with pytest.raises(ConfigError, match=r"pod_gpus'? = .*(multiple of the GPUs under one leaf group|integer|range)"):
        get_cluster("meta-roce-h100", nodes=8, pod_gpus=value)


# --- rank order: Llama 3's [TP, CP, PP, DP] (Dubey et al. 2024, Section 3.3.2) ------------------------------
def test_rank_order_strides_and_inverse():
    from topologies.placement import coords_of, rank_of
    llama = ParallelSizes(tp=2, cp=2, dp=3, pp=2, order=("tp", "cp", "pp", "dp"))
    # rank = tp + 2 (cp + 2 (pp + 2 dp))
    assert rank_of(1, 1, 2, 1, llama) == 1 + 2 * (1 + 2 * (1 + 2 * 2))
    assert group_ranks("dp", llama, 0) == (0, 8, 16) and group_ranks("pp", llama, 0) == (0, 4)
    for r in range(llama.world_size):
        c = coords_of(r, llama)
        assert rank_of(c["tp"], c["cp"], c["dp"], c["pp"], llama) == r
    # Megatron's order is the default and unchanged
    assert group_ranks("dp", ParallelSizes(tp=2, cp=2, dp=3, pp=2), 0) == (0, 4, 8)


def test_pipeline_flows_follow_the_rank_order():
    from topologies.fabric import pp_flows
    from topologies.placement import rank_of
    s = ParallelSizes(tp=2, cp=1, dp=3, pp=3, order=("tp", "cp", "pp", "dp"))
    src, dst = [], []
    for p in range(2):
        for t in range(2):
            for d in range(3):
                a, b = rank_of(t, 0, d, p, s), rank_of(t, 0, d, p + 1, s)
                if a // 2 != b // 2:
                    src += [a, b]
                    dst += [b, a]
    got = pp_flows(s, 2)
    assert got[0].tolist() == src and got[1].tolist() == dst


def test_llama3_dp_groups_cross_pods_megatrons_do_not():
    """16,384 GPUs on meta-roce-h100 (6 pods): tp 8 x pp 16 x dp 128. Megatron's order keeps a DP group on
    128 consecutive nodes (one pod); Llama 3's puts DP outermost: one node in every 16, over all pods."""
    c = get_cluster("meta-roce-h100", nodes=2048)

    def pods(ranks):
        return sorted({int(fabric_of(c).pod[fabric_of(c).leaf[r]]) for r in ranks})
    meg = ParallelSizes(tp=8, dp=128, pp=16)
    llama = ParallelSizes(tp=8, dp=128, pp=16, order=("tp", "cp", "pp", "dp"))
    assert pods(group_ranks("dp", meg, 0)) == [0]
    assert pods(group_ranks("dp", llama, 0)) == [0, 1, 2, 3, 4, 5]
    assert pods(group_ranks("pp", llama, 0)) == [0]


@pytest.mark.parametrize("value, pattern", [("tp-pp-dp", "must name tp, cp, dp and pp once each"),
                                            ("tp-cp-dp-dp", "must name tp, cp, dp and pp once each"),
                                            (7, "must name tp, cp, dp and pp once each")])
def test_bad_rank_order_is_one_clear_error(value, pattern):
    from strategies.strategy_file import parse_strategy
    with pytest.raises(ConfigError, match=pattern):
        parse_strategy({"model": "llama3-8b", "cluster": {"preset": "dgx-h100", "nodes": 1},
                        "parallel": {"tp": 2, "order": value}, "training": {"global_batch": 8, "seq_len": 1024}})
    with pytest.raises(ConfigError, match="expert layouts follow Megatron's order"):
        ParallelSizes(tp=1, dp=8, ep=8, order=("tp", "cp", "pp", "dp"))
