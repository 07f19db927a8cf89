"""Pipeline transfers (taskgraph/pipeline_p2p.py): what each TP rank sends with and without
sequence parallelism and Megatron-LM 2021-22's scatter/gather, and the receiving TP group's
all-gather, checked against the collective model by hand."""
from __future__ import annotations

import pytest

from strategies.errors import ConfigError
from strategies.strategy_file import parse_strategy
from taskgraph.pipeline_p2p import activation_bytes, boundary_times, receiver_times
from taskgraph.plan import resolve
from topologies.collectives import collective_time
from topologies.placement import group_ranks, rank_of

# one activation: 2 bytes x micro-batch 1 x 2048 tokens x hidden 4096 = 16 MiB
FULL = 2 * 1 * 2048 * 4096


def _plan(sp: bool, scatter_gather: bool | None, tp: int = 8, stack: str | None = None):
    options = {} if scatter_gather is None else {"pipeline_scatter_gather": scatter_gather}
    if stack is not None:
        options["stack"] = stack
    return resolve(parse_strategy({
        "model": {"preset": "llama3-8b", "layers": 4},
        "cluster": {"preset": "dgx-a100", "nodes": 2},
        "parallel": {"tp": tp, "pp": 2, "dp": 8 // tp, "sp": sp},
        "schedule": "1f1b",
        "training": {"micro_batch": 1, "global_batch": 4 * (8 // tp), "seq_len": 2048, "precision": "bf16"},
        "options": options}, "."))


def _times(plan):
    return boundary_times(plan, lambda cluster, kind, nbytes, ranks, share: collective_time(kind, nbytes, ranks, cluster))


def test_bytes_per_rank():
    assert activation_bytes(_plan(sp=False, scatter_gather=None)) == FULL          # Megatron-core: whole activation
    assert activation_bytes(_plan(sp=False, scatter_gather=True)) == FULL / 8      # scatter/gather: 1/tp
    assert activation_bytes(_plan(sp=True, scatter_gather=None)) == FULL / 8       # sp: already split
    assert activation_bytes(_plan(sp=False, scatter_gather=False, tp=1)) == FULL


def test_scatter_gather_where_it_does_nothing_is_refused():
    # sp already splits each send; tp 1 has no TP group to scatter over; pp 1 sends nothing (issue 42)
    with pytest.raises(ConfigError, match="pipeline_scatter_gather = true .* parallel.sp = true already sends"):
        _plan(sp=True, scatter_gather=True)
    with pytest.raises(ConfigError, match="pipeline_scatter_gather = true .* parallel.tp = 1 leaves nothing"):
        _plan(sp=False, scatter_gather=True, tp=1)


def test_the_receiving_tp_group_all_gathers_a_scattered_activation():
    plan = _plan(sp=False, scatter_gather=True)
    s, c = plan.sizes, plan.cluster
    times = _times(plan)
    assert set(times) == {(0, 1), (1, 0)}
    for x, y in times:
        rx, ry = rank_of(0, 0, 0, x, s), rank_of(0, 0, 0, y, s)
        send = collective_time("send-recv", FULL / 8, (rx, ry), c)
        gather = collective_time("all-gather", FULL, tuple(group_ranks("tp", s, ry)), c)
        assert gather > 0 and times[(x, y)] == pytest.approx(send + gather, rel=1e-12)
    # stages on two nodes: the transfer crosses the NIC, the all-gather stays on the node's NVLink
    assert rank_of(0, 0, 0, 1, s) // 8 != rank_of(0, 0, 0, 0, s) // 8


def test_without_the_option_or_with_sp_nothing_is_gathered():
    for sp, sg, nbytes in ((False, False, FULL), (True, False, FULL / 8)):
        plan = _plan(sp=sp, scatter_gather=sg)
        s, c = plan.sizes, plan.cluster
        for (x, y), t in _times(plan).items():
            ranks = (rank_of(0, 0, 0, x, s), rank_of(0, 0, 0, y, s))
            assert t == collective_time("send-recv", nbytes, ranks, c)


def test_scatter_gather_is_cheaper_than_whole_activations_across_nodes():
    # 1/8 on the NIC plus an NVLink all-gather beats the whole activation on the NIC (Narayanan 2021 §4.1)
    split = max(_times(_plan(sp=False, scatter_gather=True)).values())
    whole = max(_times(_plan(sp=False, scatter_gather=False)).values())
    assert split < whole


def test_the_option_is_checked():
    with pytest.raises(ConfigError, match="pipeline_scatter_gather"):
        _plan(sp=False, scatter_gather="sometimes")


def _cluster(preset: str, channels=None):
    from dataclasses import replace

    from topologies.cluster import get_cluster
    return replace(get_cluster(preset, nodes=2), p2p_net_channels=channels)


def test_nccl_channels_cap_a_send_recv_across_nodes():
    from topologies.collectives import P2P_CHANNEL_NET_BW
    S, pair = 50e6, (0, 8)            # ranks 0 and 8: two nodes of 8
    for preset in ("dgx-a100", "dgx-h100"):
        auto = _cluster(preset)
        base = auto.collective_base_latency + auto.nic_latency
        assert collective_time("send-recv", S, pair, auto) == pytest.approx(base + S / auto.nic_bus_bandwidth)
        # one channel (NCCL 2.7-2.11): 14 GB/s whatever the NIC
        one = _cluster(preset, 1)
        assert P2P_CHANNEL_NET_BW == 14e9
        assert collective_time("send-recv", S, pair, one) == pytest.approx(base + S / 14e9, rel=1e-12)
    # two channels (NCCL 2.12-2.28): 28 GB/s caps NDR's 0.9 x 50 GB/s but not HDR's 0.9 x 25
    a2, h2 = _cluster("dgx-a100", 2), _cluster("dgx-h100", 2)
    assert collective_time("send-recv", S, pair, a2) == collective_time("send-recv", S, pair, _cluster("dgx-a100"))
    assert h2.nic_bus_bandwidth > 28e9
    assert collective_time("send-recv", S, pair, h2) == pytest.approx(
        h2.collective_base_latency + h2.nic_latency + S / 28e9, rel=1e-12)
    # inside a node the channels do not matter
    assert collective_time("send-recv", S, (0, 1), one) == collective_time("send-recv", S, (0, 1), _cluster("dgx-h100"))


@pytest.mark.parametrize("bad", [0, 1.5, "two", True])
def test_p2p_net_channels_is_checked(bad):
    from topologies.cluster import load_cluster_yaml
    with pytest.raises(ConfigError, match="p2p_net_channels"):
        load_cluster_yaml({"preset": "dgx-h100", "nodes": 2, "p2p_net_channels": bad})


def test_deepspeed_partitioned_tensor_meta_copies_and_output_regather():
    # [DS-PIPE] partitioned_pipe: each transfer also sends the meta LongTensor (8 x (1 + 3 + 2 + tp + 1) B);
    # the receiver's PartitionedTensor.full() and the clones move (5 + 8/tp) x the activation's bytes
    # (activation) or (10 + 6/tp) x (gradient, whose receiver also all-gathers its own output again)
    plan = _plan(sp=False, scatter_gather=True, stack="deepspeed")
    s, c, g = plan.sizes, plan.cluster, plan.cluster.gpu
    times, after = _times(plan), receiver_times(plan, lambda cl, k, n, r, sh: collective_time(k, n, r, cl))
    hbm = g.hbm_bandwidth * g.efficiency.hbm_efficiency
    for (x, y), copies in (((0, 1), FULL * (5 + 8 / 8)), ((1, 0), FULL * (10 + 6 / 8))):
        rx, ry = rank_of(0, 0, 0, x, s), rank_of(0, 0, 0, y, s)
        wire = collective_time("send-recv", FULL / 8, (rx, ry), c) + collective_time("send-recv", 8 * 15, (rx, ry), c)
        gathers = (2 if x == 1 else 1) * collective_time("all-gather", FULL, tuple(group_ranks("tp", s, ry)), c)
        assert after[(x, y)] == pytest.approx(gathers + copies / hbm, rel=1e-12)
        assert times[(x, y)] == pytest.approx(wire + gathers + copies / hbm, rel=1e-12)
    assert copies == FULL * 10.75 == 180_355_072      # the gradient's copies, bytes
    # Megatron's gather (the default stack) has none of these
    mt = _plan(sp=False, scatter_gather=True)
    assert _times(mt)[(1, 0)] < times[(1, 0)] and _times(mt)[(0, 1)] < times[(0, 1)]


def test_serial_exchange_keeps_the_receivers_work_out_of_the_partners_wait(tmp_path):
    # the wire of both directions blocks both ranks (p2p_serial); a receiver's re-assembly only itself
    from taskgraph.costing import build_work
    plan = _plan(sp=False, scatter_gather=True, stack="deepspeed")
    times, after = _times(plan), receiver_times(plan, lambda cl, k, n, r, sh: collective_time(k, n, r, cl))
    pairs = build_work(plan).p2p_pairs
    gap = plan.strategy.options.p2p_host_gap_us * 1e-6
    for a, b in ((0, 1), (1, 0)):
        assert pairs[(a, b)] == pytest.approx(times[(a, b)] + times[(b, a)] - after[(b, a)] + 2 * gap, rel=1e-12)
