"""GPU catalog, cluster presets/YAML, networkx graph, and Megatron rank placement."""
from __future__ import annotations

import dataclasses

import pytest
import yaml

from strategies.errors import ConfigError
from topologies.cluster import (
    EXAMPLE_CLUSTER_PATH,
    ClusterSpec,
    get_cluster,
    list_presets,
    load_cluster_yaml,
)
from topologies.gpus import GIB, GPUSpec, get_gpu, list_gpus, load_gpu_catalog
from topologies.placement import (
    ParallelSizes,
    all_groups,
    check_fits,
    coords_of,
    group_ranks,
    group_span,
    node_counts,
    rank_of,
)

T = 1e12
GB = 1e9


# --- GPU catalog -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, bf16, fp16, fp8, hbm_gb, hbm_bw, sms, nvlink",
    [
        ("A100-SXM-40GB", 312, 312, None, 40, 1555, 108, 300),
        ("A100-SXM-80GB", 312, 312, None, 80, 2039, 108, 300),
        ("H100-SXM-80GB", 989.4, 989.4, 1978.9, 80, 3350, 132, 450),
        ("H200-SXM-141GB", 989.4, 989.4, 1978.9, 141, 4800, 132, 450),
        ("B200-SXM-180GB", 2250, 2250, 4500, 180, 8000, 148, 900),
    ],
)
def test_catalog_values(name, bf16, fp16, fp8, hbm_gb, hbm_bw, sms, nvlink):
    g = get_gpu(name)
    assert isinstance(g, GPUSpec) and g.name == name
    assert g.peak_flops_bf16 == pytest.approx(bf16 * T)
    assert g.peak_flops("fp16") == pytest.approx(fp16 * T)
    assert g.peak_flops_fp8 == (None if fp8 is None else pytest.approx(fp8 * T))
    assert g.hbm_capacity == pytest.approx(hbm_gb * GIB)
    assert g.hbm_bandwidth == pytest.approx(hbm_bw * GB)
    assert g.sm_count == sms
    assert g.nvlink_bandwidth == pytest.approx(nvlink * GB)
    e = g.efficiency
    for frac in (e.gemm_efficiency_max, e.hbm_efficiency, e.attention_fwd_efficiency,
                 e.attention_bwd_efficiency, e.elementwise_efficiency):
        assert 0 < frac <= 1
    assert e.gemm_tile_m > 0 and e.gemm_tile_n > 0 and e.gemm_tile_k > 0
    assert 0 < e.launch_overhead < 1e-4  # seconds


def test_catalog_brief_figures_rounded():
    h100 = get_gpu("h100")
    assert round(h100.peak_flops("bf16") / T) == 989 and round(h100.peak_flops("fp8") / T) == 1979
    assert get_gpu("h200").peak_flops("bf16") == h100.peak_flops("bf16")
    assert get_gpu("h100").efficiency.gemm_tile_n == 256


def test_catalog_lists_all_and_is_frozen():
    assert set(list_gpus()) >= {"A100-SXM-40GB", "A100-SXM-80GB", "H100-SXM-80GB", "H200-SXM-141GB",
                                "B200-SXM-180GB"}
    g = get_gpu("a100")
    with pytest.raises(dataclasses.FrozenInstanceError):
        g.sm_count = 1  # type: ignore[misc]
    assert load_gpu_catalog()["A100-SXM-80GB"] == g


@pytest.mark.parametrize("alias, name", [
    ("a100", "A100-SXM-80GB"), ("A100-80G", "A100-SXM-80GB"), ("a100-40g", "A100-SXM-40GB"),
    ("H100", "H100-SXM-80GB"), ("h100-sxm", "H100-SXM-80GB"), ("h200", "H200-SXM-141GB"),
    ("B200", "B200-SXM-180GB"), ("h100-sxm-80gb", "H100-SXM-80GB"),
])
def test_aliases(alias, name):
    assert get_gpu(alias).name == name


def test_unknown_gpu_did_you_mean():
    with pytest.raises(ConfigError, match=r"did you mean 'H100-SXM-80GB'"):
        get_gpu("h10")
    with pytest.raises(ConfigError, match="known GPUs"):
        get_gpu("tpu-v5")


def test_fp8_on_a100_is_a_clear_error():
    with pytest.raises(ConfigError, match="no fp8"):
        get_gpu("a100").peak_flops("fp8")
    with pytest.raises(ConfigError, match="did you mean 'bf16'"):
        get_gpu("h100").peak_flops("bf61")
    assert get_gpu("h100").peak_flops("bfloat16") == get_gpu("h100").peak_flops_bf16
    assert get_gpu("h100").gemm_efficiency("fp8") == get_gpu("h100").efficiency.gemm_efficiency_max_fp8


def test_bad_catalog_file(tmp_path):
    p = tmp_path / "gpus.yaml"
    p.write_text(yaml.safe_dump({"gpus": {"X": {"tflops_bf16": 1, "tflop_fp16": 1}}}))
    with pytest.raises(ConfigError, match=r"unknown field 'tflop_fp16' \(did you mean 'tflops_fp16'\?\)"):
        load_gpu_catalog(str(p))
    with pytest.raises(ConfigError, match="GPU catalog .*missing.yaml. does not exist"):
        load_gpu_catalog(str(tmp_path / "missing.yaml"))


# --- cluster presets ---------------------------------------------------------------------------
def test_preset_dgx_h100_4_nodes():
    c = get_cluster("dgx-h100", nodes=4)
    assert isinstance(c, ClusterSpec)
    assert c.num_gpus == 32 and c.nodes == 4 and c.gpus_per_node == 8
    assert c.gpu.name == "H100-SXM-80GB"
    assert c.nvlink_bandwidth == pytest.approx(450 * GB)  # NVLink4, per direction
    assert c.nic_bandwidth == pytest.approx(400e9 / 8)  # NDR 400 Gb/s per GPU
    assert c.nvlink_bus_bandwidth == pytest.approx(c.nvlink_bandwidth * c.nvlink_efficiency)
    assert c.nic_bus_bandwidth == pytest.approx(c.nic_bandwidth * c.nic_efficiency)


@pytest.mark.parametrize("preset, gpu, nvlink, nic_gbit", [
    ("dgx-a100-80g", "A100-SXM-80GB", 300, 200),
    ("dgx-a100-40g", "A100-SXM-40GB", 300, 200),
    ("dgx-h100", "H100-SXM-80GB", 450, 400),
    ("dgx-h200", "H200-SXM-141GB", 450, 400),
    ("dgx-b200", "B200-SXM-180GB", 900, 400),
])
def test_presets(preset, gpu, nvlink, nic_gbit):
    c = get_cluster(preset, nodes=2)
    assert preset in list_presets()
    assert c.gpu.name == gpu and c.num_gpus == 16
    assert c.nvlink_bandwidth == pytest.approx(nvlink * GB)
    assert c.nic_bandwidth == pytest.approx(nic_gbit * 1e9 / 8)
    assert 0 < c.nvlink_efficiency <= 1 and 0 < c.nic_efficiency <= 1


def test_preset_alias_overrides_and_errors():
    assert get_cluster("DGX-A100", nodes=3).gpu.name == "A100-SXM-80GB"
    c = get_cluster("dgx-h100", nodes=2, nic_gbit=800, nic_efficiency=0.5)
    assert c.nic_bandwidth == pytest.approx(100e9) and c.nic_efficiency == 0.5
    with pytest.raises(ConfigError, match=r"did you mean 'dgx-h100'"):
        get_cluster("dgx-h10", nodes=2)
    with pytest.raises(ConfigError, match=r"'nodes' = 0"):
        get_cluster("dgx-h100", nodes=0)
    with pytest.raises(ConfigError, match=r"did you mean 'nic_gbit'"):
        get_cluster("dgx-h100", nodes=2, nic_gbps=400)


def test_rank_to_node():
    c = get_cluster("dgx-h100", nodes=2)
    assert [c.node_of(r) for r in (0, 7, 8, 15)] == [0, 0, 1, 1]
    assert [c.local_rank(r) for r in (0, 7, 8, 15)] == [0, 7, 0, 7]
    with pytest.raises(ConfigError, match="ranks 0..15"):
        c.node_of(16)


# --- cluster YAML ------------------------------------------------------------------------------
def _full():
    return {
        "name": "tiny", "gpu": "a100", "nodes": 2, "gpus_per_node": 4, "nvlink_gbps": 300,
        "nvlink_latency_us": 1, "nvlink_efficiency": 0.8, "nic_gbit": 200, "nic_latency_us": 3,
        "nic_efficiency": 0.9,
    }


def test_load_example_yaml():
    c = load_cluster_yaml(EXAMPLE_CLUSTER_PATH)
    assert c.name == "h100-roce-16n" and c.num_gpus == 128
    assert c.gpu.name == "H100-SXM-94GB"
    assert c.gpu.hbm_capacity == pytest.approx(94 * GIB)
    assert c.gpu.efficiency.gemm_efficiency_max == 0.72
    assert c.gpu.efficiency.hbm_efficiency == get_gpu("h100").efficiency.hbm_efficiency  # merged
    assert c.nvlink_bandwidth == pytest.approx(450 * GB)  # inherited from the preset
    assert c.nic_latency == pytest.approx(5e-6) and c.network_topology == "fat-tree"


def test_load_from_dict_and_wrapper():
    c = load_cluster_yaml(_full())
    assert c.num_gpus == 8 and c.nvlink_latency == pytest.approx(1e-6)
    assert c.collective_base_latency == 0.0
    assert load_cluster_yaml({"cluster": _full()}) == c


def test_load_yaml_file_roundtrip(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(_full()))
    assert load_cluster_yaml(str(p)) == load_cluster_yaml(_full())
    assert load_cluster_yaml(p) == load_cluster_yaml(_full())  # PathLike


def test_nvlink_defaults_to_gpu():
    d = _full()
    del d["nvlink_gbps"]
    d["gpu"] = "b200"
    assert load_cluster_yaml(d).nvlink_bandwidth == pytest.approx(900 * GB)


def test_custom_inline_gpu():
    d = _full()
    d["gpu"] = {"name": "X1", "tflops_bf16": 100, "tflops_fp16": 100, "tflops_fp8": None,
                "tflops_tf32": 50, "tflops_fp32": 10, "hbm_gb": 16, "hbm_bw_gbps": 1000,
                "nvlink_gbps": 100, "sm_count": 10,
                "efficiency": dict(gemm_efficiency_max=0.5, gemm_efficiency_max_fp8=None, gemm_tile_m=64,
                                   gemm_tile_n=64, gemm_tile_k=32, attention_fwd_efficiency=0.4,
                                   attention_bwd_efficiency=0.3, hbm_efficiency=0.8,
                                   elementwise_efficiency=0.7, launch_overhead_us=5)}
    c = load_cluster_yaml(d)
    assert c.gpu.name == "X1" and c.gpu.peak_flops() == pytest.approx(100 * T)
    assert c.gpu.efficiency.launch_overhead == pytest.approx(5e-6)


@pytest.mark.parametrize("patch, pattern", [
    ({"nic_gbps": 1}, r"unknown field 'nic_gbps' \(did you mean 'nic_gbit'\?\)"),
    ({"gpus_per_nod": 8}, r"did you mean 'gpus_per_node'"),
    ({"nodes": -1}, r"'nodes' = -1 is out of range"),
    ({"nodes": 1.5}, r"'nodes' = 1.5 must be an integer"),
    ({"nvlink_efficiency": 1.5}, r"'nvlink_efficiency' = 1.5 is out of range"),
    ({"nic_gbit": "fast"}, r"'nic_gbit' = 'fast' must be a finite number"),
    ({"gpu": "h1000"}, r"unknown GPU 'h1000' \(did you mean"),
    ({"gpu": 5}, r"field 'gpu' = 5 must be a catalog GPU name"),
    ({"network_topology": "rail"}, r"network_topology.*did you mean 'rail-optimized'"),
    ({"preset": "dgx-h1000"}, r"unknown cluster preset 'dgx-h1000' \(did you mean"),
    ({"nodes_per_leaf": 1, "spine_switches": 0, "network_topology": "fat-tree"}, r"spine_switches = 0"),
])
def test_yaml_errors(patch, pattern):
    d = {**_full(), **patch}
    with pytest.raises(ConfigError, match=pattern):
        load_cluster_yaml(d)


def test_yaml_missing_fields():
    d = _full()
    del d["nic_efficiency"], d["nic_latency_us"]
    with pytest.raises(ConfigError, match=r"missing required field\(s\) nic_latency_us, nic_efficiency"):
        load_cluster_yaml(d)
    with pytest.raises(ConfigError, match="missing required field 'gpu'"):
        load_cluster_yaml({"nodes": 1})


def test_yaml_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="cluster file .*nope.yaml. does not exist"):
        load_cluster_yaml(str(tmp_path / "nope.yaml"))
    p = tmp_path / "bad.yaml"
    p.write_text("nodes: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_cluster_yaml(str(p))
    p.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_cluster_yaml(str(p))
    with pytest.raises(ConfigError, match="file path or a dict"):
        load_cluster_yaml(42)


def test_gpu_override_typo_in_efficiency():
    d = _full()
    d["gpu"] = {"base": "h100", "efficiency": {"gemm_eficiency_max": 0.5}}
    with pytest.raises(ConfigError, match=r"did you mean 'gemm_efficiency_max'"):
        load_cluster_yaml(d)


# --- networkx graph ----------------------------------------------------------------------------
def test_graph_single_node():
    g = get_cluster("dgx-h100", nodes=1).to_networkx()
    assert g.number_of_nodes() == 8 + 1
    assert g.number_of_edges() == 8
    assert {d["kind"] for _, d in g.nodes(data=True)} == {"gpu", "nvswitch"}


def test_graph_dgx_h100_4_nodes_rail_optimized():
    c = get_cluster("dgx-h100", nodes=4)
    g = c.to_networkx()
    kinds = [d["kind"] for _, d in g.nodes(data=True)]
    assert kinds.count("gpu") == 32 and kinds.count("nvswitch") == 4
    assert kinds.count("leaf") == 8  # one rail leaf per local rank (4 nodes < 32-node unit)
    assert kinds.count("spine") == 8
    assert g.number_of_nodes() == 32 + 4 + 8 + 8
    # each GPU: one NVLink edge + one NIC edge; each leaf: one uplink per spine
    assert g.number_of_edges() == 32 + 32 + 8 * 8
    # rail optimized: GPU with local rank 3 on every node shares leaf3
    assert {n for n in g.neighbors("leaf3") if n.startswith("gpu")} == {"gpu3", "gpu11", "gpu19", "gpu27"}
    e = g.edges["gpu0", "nvswitch0"]
    assert e["kind"] == "nvlink" and e["bandwidth"] == pytest.approx(450 * GB)
    assert e["latency"] == pytest.approx(c.nvlink_latency / 2)
    e = g.edges["gpu0", "leaf0"]
    assert e["kind"] == "nic" and e["bandwidth"] == pytest.approx(50 * GB)
    # full-bisection uplinks: 4 NICs per leaf spread over 8 spines
    assert g.edges["leaf0", "spine0"]["bandwidth"] == pytest.approx(4 * 50 * GB / 8)
    import networkx as nx
    assert nx.is_connected(g)
    assert g.nodes["gpu9"] == {"kind": "gpu", "rank": 9, "node": 1, "local_rank": 1}


def test_graph_multiple_units_and_fat_tree():
    c = get_cluster("dgx-a100-80g", nodes=40)  # 20-node scalable units -> 2 units x 8 rails
    assert c.num_leaves == 16 and c.num_spines == 8
    assert c.to_networkx().number_of_nodes() == 320 + 40 + 16 + 8
    c = load_cluster_yaml(EXAMPLE_CLUSTER_PATH)  # 16 nodes, fat-tree, 4 nodes per leaf, 8 spines
    g = c.to_networkx()
    assert c.num_leaves == 4
    assert g.number_of_nodes() == 128 + 16 + 4 + 8
    assert {n for n in g.neighbors("leaf1") if n.startswith("gpu")} == {f"gpu{r}" for r in range(32, 64)}


# --- placement ---------------------------------------------------------------------------------
def test_rank_order_tp2_cp1_dp2_pp2():
    sizes = {"tp": 2, "cp": 1, "dp": 2, "pp": 2}
    table = {r: coords_of(r, sizes) for r in range(8)}
    got = [(c["tp"], c["dp"], c["pp"]) for c in table.values()]
    # tp fastest, then dp, then pp (Megatron "tp-cp-ep-dp-pp")
    assert got == [(0, 0, 0), (1, 0, 0), (0, 1, 0), (1, 1, 0), (0, 0, 1), (1, 0, 1), (0, 1, 1), (1, 1, 1)]
    for r, c in table.items():
        assert rank_of(c["tp"], c["cp"], c["dp"], c["pp"], sizes) == r
    assert all_groups("tp", sizes) == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert all_groups("dp", sizes) == [(0, 2), (1, 3), (4, 6), (5, 7)]
    assert all_groups("pp", sizes) == [(0, 4), (1, 5), (2, 6), (3, 7)]
    assert group_ranks("cp", sizes, 5) == (5,)


def test_rank_order_with_cp():
    sizes = ParallelSizes(tp=2, cp=2, dp=2, pp=1)
    assert rank_of(1, 0, 0, 0, sizes) == 1
    assert rank_of(0, 1, 0, 0, sizes) == 2
    assert rank_of(0, 0, 1, 0, sizes) == 4
    assert group_ranks("cp", sizes, 0) == (0, 2)
    assert group_ranks("dp", sizes, 0) == (0, 4)
    assert group_ranks("dp-cp", sizes, 1) == (1, 3, 5, 7)  # Megatron dp-with-cp gradient group
    assert group_ranks("tp-cp", sizes, 4) == (4, 5, 6, 7)


def test_expert_parallel_is_sub_axis_of_dp():
    sizes = dict(tp=2, dp=8, pp=1, ep=4)
    # dp_rank = ep_rank + ep * edp_rank -> ep groups are runs of 4 consecutive dp indices
    assert group_ranks("ep", sizes, 0) == (0, 2, 4, 6)
    assert group_ranks("ep", sizes, 9) == (9, 11, 13, 15)
    assert group_ranks("edp", sizes, 0) == (0, 8)
    assert group_ranks("dp", sizes, 0) == tuple(range(0, 16, 2))
    c = coords_of(10, sizes)
    assert (c["dp"], c["ep"], c["edp"]) == (5, 1, 1)


def test_placement_errors():
    with pytest.raises(ConfigError, match="ep = 3 must divide dp = 8"):
        ParallelSizes(dp=8, ep=3)
    with pytest.raises(ConfigError, match=r"unknown parallel axis 'tpp' \(did you mean 'tp'\?\)"):
        group_ranks("tpp", {"tp": 2}, 0)
    with pytest.raises(ConfigError, match=r"unknown axis 'dpp'"):
        rank_of(0, 0, 0, 0, {"tp": 2, "dpp": 2})
    with pytest.raises(ConfigError, match=r"tp_rank = 2 is out of range"):
        rank_of(2, 0, 0, 0, {"tp": 2})
    with pytest.raises(ConfigError, match="rank = 8 is out of range"):
        group_ranks("tp", {"tp": 2, "dp": 4}, 8)
    with pytest.raises(ConfigError, match="twice"):
        group_ranks("dp-ep", {"dp": 4, "ep": 2}, 0)


def test_sizes_from_object():
    class Cfg:
        tp, dp, pp = 4, 2, 2
    assert group_ranks("dp", Cfg(), 0) == (0, 4)
    assert group_ranks("pp", Cfg(), 1) == (1, 9)


def test_group_span():
    c = get_cluster("dgx-h100", nodes=4)
    sizes = dict(tp=8, dp=2, pp=2)
    assert group_span(c, group_ranks("tp", sizes, 0)) == (1, 8)
    assert group_span(c, group_ranks("dp", sizes, 0)) == (2, 1)  # ranks 0 and 8
    assert group_span(c, group_ranks("pp", sizes, 3)) == (2, 1)
    assert group_span(c, [0, 1, 8, 9, 10]) == (2, 3)
    assert node_counts(c, [0, 1, 8, 9, 10]) == {0: 2, 1: 3}
    with pytest.raises(ConfigError, match="ranks 0..31"):
        group_span(c, [0, 32])
    with pytest.raises(ConfigError, match="repeat"):
        group_span(c, [0, 0])
    with pytest.raises(ConfigError, match="empty"):
        group_span(c, [])


def test_check_fits():
    c = get_cluster("dgx-h100", nodes=2)
    assert check_fits(dict(tp=8, dp=2), c).world_size == 16
    with pytest.raises(ConfigError, match="needs 32 GPUs.*at least 4 nodes"):
        check_fits(dict(tp=8, dp=2, pp=2), c)


def test_gb200_job_of_any_size_fills_racks_in_order():
    """A 100-GPU job on GB200 NVL72 racks (one NVLink domain of 72 = one node): ranks 0..71 on rack 0,
    72..99 on rack 1; tp 4 x dp 25: the dp group of rank 0 holds ranks 0, 4, ..., 96 = 18 + 7."""
    from topologies.cluster import cluster_from_dict
    from topologies.placement import group_ranks, node_counts
    cl = cluster_from_dict({"preset": "gb200-nvl72", "gpus": 100})
    assert (cl.nodes, cl.gpus_per_node, cl.num_gpus) == (2, 72, 100)
    dp = group_ranks("dp", {"tp": 4, "dp": 25}, 0)
    assert node_counts(cl, dp) == {0: 18, 1: 7}
    with pytest.raises(ConfigError, match=r"gpus = 100 must be an integer the 1 nodes of 72 GPUs hold"):
        cluster_from_dict({"preset": "gb200-nvl72", "nodes": 1, "gpus": 100})
