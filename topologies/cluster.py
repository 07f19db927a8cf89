"""Cluster model: GPUs per node on an NVLink/NVSwitch fabric, nodes on a NIC network.

A :class:`ClusterSpec` is what the collective cost model (``topologies.collectives``) and the
placement helpers (``topologies.placement``) read. Global rank ``r`` lives on node
``r // gpus_per_node`` at local rank ``r % gpus_per_node`` (the launcher's node-major order).

Presets (``topologies/data/clusters.yaml``) model NVIDIA DGX systems; ``get_cluster`` takes the
node count as a parameter:

>>> get_cluster("dgx-h100", nodes=4).num_gpus
32

Custom clusters come from YAML or a dict through :func:`load_cluster_yaml`.
"""
from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from numbers import Integral
from typing import Any

from strategies.errors import ConfigError, brief
from strategies.fitted import catalog_values, fitted_value, resolve_fitted
from strategies.limits import MAX_GPUS
from topologies.gpus import (
    DATA_DIR,
    GB_PER_S,
    GBIT_PER_S,
    US,
    GPUSpec,
    check_keys,
    did_you_mean,
    get_gpu,
    gpu_from_dict,
    gpu_with_overrides,
    number,
)

CLUSTER_PRESETS_PATH = os.path.join(DATA_DIR, "clusters.yaml")
EXAMPLE_CLUSTER_PATH = os.path.join(DATA_DIR, "example_cluster.yaml")

#: Inter-node network shapes ``to_networkx`` can build.
#: ``rail-optimized``: NIC ``l`` of every node in a scalable unit goes to leaf switch (unit, l)
#: (NVIDIA DGX SuperPOD reference architecture); ``fat-tree``: all NICs of a node go to the leaf
#: of its group of ``nodes_per_leaf`` nodes. Leaves connect through ``spine_switches`` spines.
NETWORK_TOPOLOGIES = ("rail-optimized", "fat-tree")

#: Fields accepted in a cluster YAML / dict (user units).
CLUSTER_FIELDS = (
    "name", "description", "preset", "gpu", "nodes", "gpus_per_node", "nvlink_gbps",
    "nvlink_latency_us", "nvlink_efficiency", "nic_gbit", "nic_latency_us", "nic_efficiency",
    "collective_base_latency_us", "network_topology", "nodes_per_leaf", "spine_switches",
    "oversubscription", "collective_model", "slow", "gpu_speed_cv", "contention", "host_us_per_kernel",
    "host_us_per_collective", "node_gpus", "routing", "switch_radix", "core_oversubscription",
    "qps_per_connection", "gpus", "host_link_gbps", "host_memory_gbps", "p2p_net_channels", "pod_gpus",
)
#: How switches spread flows over equal-cost uplinks (``topologies/fabric.py``): ``adaptive`` = every
#: flow gets its fair share of the pooled uplinks (InfiniBand adaptive routing, per-packet spraying);
#: ``ecmp`` = each flow (queue pair) is pinned to one uplink by a hash of its header, so flows collide
#: (RoCE/Ethernet ECMP: Gangidi et al. SIGCOMM 2024, Qian et al. SIGCOMM 2024).
ROUTINGS = ("adaptive", "ecmp")
#: Host DRAM bandwidth of one node, GB/s: two sockets of 8 DDR5-4800 channels (DGX H100's Xeon 8480C;
#: clusters.yaml header for the sources), the CPU optimizer's memory (options.optimizer_cpu_offload)
DEFAULT_HOST_MEMORY_GBPS = 614.4
#: Host (CPU) dispatch time per kernel when a cluster file does not say (taskgraph/overheads.py).
DEFAULT_HOST_US_PER_KERNEL = 10.0
#: GPU <-> host memory, GB/s per direction: PCIe Gen5 x16 (clusters.yaml header for the sources)
DEFAULT_HOST_LINK_GBPS = 64.0
#: Host issue cost of one NCCL call when a cluster file does not say (taskgraph/overheads.py).
DEFAULT_HOST_US_PER_COLLECTIVE = float(fitted_value("host_us_per_collective"))
#: Per-GPU speed spread (std / mean) when a cluster file does not say: Sinha et al. SC'22 measured an
#: 8% median fastest-to-slowest spread among ~10^4 GPUs of one SKU, 2 sigma E[Z_(N:N)] with
#: E[Z] ~ 3.9 gives sigma ~ 0.01 (topologies/stragglers.py; docs/cost-model.md).
DEFAULT_GPU_SPEED_CV = 0.01
#: Collective cost models: NCCL's tuner model (``topologies/nccl.py``) or the alpha-beta closed forms.
COLLECTIVE_MODELS = ("nccl", "alpha-beta")
_PRESET_ONLY_FIELDS = ("aliases",)


@dataclass(frozen=True)
class ClusterSpec:
    """A homogeneous GPU cluster, SI units throughout.

    name: cluster name (preset name or the YAML's ``name``).
    gpu: the GPU model in every slot.
    nodes: number of nodes (servers).
    gpus_per_node: GPUs per node, all on one NVLink/NVSwitch domain (a GB200 NVL72 rack is one node
        of 72: its 18 trays share the NVLink switch trays; a multi-node NVLink domain spanning racks is
        one node of the domain's size).
    gpus: GPUs the job uses when it does not fill every node: ranks 0..gpus-1 fill the nodes in rank
        order and the last node holds the rest (a 100-GPU job on NVL72 racks: 72 + 28); None = all.
    host_link_bandwidth: GPU <-> host memory bandwidth per GPU per direction, bytes/s (PCIe or
        NVLink-C2C), for CPU activation offload.
    host_memory_bandwidth: host DRAM bandwidth of one node, bytes/s (all its CPU sockets), shared by
        its GPUs' CPU optimizer steps (options.optimizer_cpu_offload).
    nvlink_bandwidth: NVLink bandwidth per GPU per direction, bytes/s (through the NVSwitch).
    nvlink_latency: per-step latency alpha of an intra-node ring step, seconds.
    nvlink_efficiency: fraction of ``nvlink_bandwidth`` NCCL reaches as bus bandwidth.
    nic_bandwidth: network bandwidth per GPU per direction, bytes/s (one NIC per GPU, rail style).
    nic_latency: per-step latency alpha of an inter-node step, seconds.
    nic_efficiency: fraction of ``nic_bandwidth`` NCCL reaches as bus bandwidth.
    collective_base_latency: fixed cost of one collective call (NCCL baseLat), seconds.
    network_topology: one of ``NETWORK_TOPOLOGIES`` (only shapes ``to_networkx``).
    nodes_per_leaf: nodes under one leaf switch (rail-optimized: nodes per scalable unit).
    spine_switches: spine switch count; ``None`` = automatic (0 with one leaf, else gpus_per_node).
    description: free text.
    oversubscription: leaf down:up bandwidth ratio (1.0 = full bisection; 2.0 = 2:1 taper), >= 1.
    collective_model: ``"nccl"`` (NCCL tuner: ring/tree/NVLS x LL/LL128/Simple, ``topologies/nccl.py``)
        or ``"alpha-beta"`` (the closed forms of ``topologies/collectives.py`` alone).
    slow: ``((node, speed), ...)`` named slow nodes, speed a fraction of nominal in (0, 1]
        (``cluster.slow: {17: 0.8}`` in YAML); see ``topologies/stragglers.py``.
    gpu_speed_cv: coefficient of variation of per-GPU compute speed (std / mean), >= 0; the
        expected slowest of N GPUs sets a synchronous step's pace (``topologies/stragglers.py``).
    contention: share links between concurrent flows (``topologies/fabric.py``); False times every
        collective alone on idle links (the closed forms only).
    host_us_per_kernel: host CPU time to dispatch one kernel (PyTorch eager), microseconds; the GPU
        waits when a layer's dispatch outlasts its kernels (``taskgraph/overheads.py``). 0 = off.
    node_gpus: ``((node, GPUSpec), ...)`` nodes holding another GPU model than ``gpu`` (mixed node
        groups; ``node_gpus: {0: A100-SXM-40GB}`` in YAML); they pace their pipeline rank like slow
        nodes, at the ratio of dense bf16 peaks (``topologies/stragglers.py``).
    host_us_per_collective: host cost of issuing one NCCL collective (enqueue, launch, completion as
        nccl-tests measures back-to-back calls), microseconds; counted like host_us_per_kernel.
    routing: one of ``ROUTINGS``: ``adaptive`` (pooled uplinks, perfect spreading) or ``ecmp``
        (per-flow hash onto one uplink; the busiest uplink sets the pace, ``topologies/fabric.py``).
    switch_radix: ports per switch; a two-tier leaf/spine pod holds at most radix^2 / 2 NICs, above
        that a third (core) tier joins pods of radix^2 / 4 NICs (Al-Fares et al. SIGCOMM 2008).
        None = no limit (two tiers at any size).
    core_oversubscription: spine down:up bandwidth ratio towards the core tier (>= 1).
    pod_gpus: GPUs under one spine layer (a pod) when the operator states it rather than the radix
        rule: a job of more GPUs spans pods joined by the core tier (Meta's RoCE cluster: pods of 3,072
        GPUs, Dubey et al. 2024 Section 3.3.1); a multiple of the GPUs of one leaf group
        (``nodes_per_leaf`` x ``gpus_per_node``). None = the ``switch_radix`` rule.
    qps_per_connection: flows (queue pairs) each NCCL connection is split over (NCCL
        ``NCCL_IB_QPS_PER_CONNECTION``, default 1); more flows = more hash entropy under ECMP.
    p2p_net_channels: NCCL channels one send/recv pair uses across nodes, each driving
        ``topologies.collectives.P2P_CHANNEL_NET_BW`` at most; None = NCCL 2.29's rule (enough channels
        for the NIC: no cap). 1 for NCCL 2.7-2.11, 2 for 2.12-2.28 (``NCCL_NCHANNELS_PER_NET_PEER``).
    """

    name: str
    gpu: GPUSpec
    nodes: int
    gpus_per_node: int
    nvlink_bandwidth: float
    nvlink_latency: float
    nvlink_efficiency: float
    nic_bandwidth: float
    nic_latency: float
    nic_efficiency: float
    collective_base_latency: float = 0.0
    network_topology: str = "rail-optimized"
    nodes_per_leaf: int = 32
    spine_switches: int | None = None
    description: str = field(default="", compare=False)
    oversubscription: float = 1.0
    collective_model: str = "nccl"
    slow: tuple = ()
    gpu_speed_cv: float = 0.0
    contention: bool = True
    host_us_per_kernel: float = 0.0
    host_us_per_collective: float = 0.0
    #: the cluster file (or preset) set host_us_per_kernel itself: it then wins over a software stack's
    #: measured figure (taskgraph/stacks.py); False = DEFAULT_HOST_US_PER_KERNEL, which a stack replaces
    host_us_per_kernel_given: bool = field(default=False, compare=False, repr=False)
    node_gpus: tuple = ()
    routing: str = "adaptive"
    switch_radix: int | None = None
    core_oversubscription: float = 1.0
    qps_per_connection: int = 1
    pod_gpus: int | None = None
    p2p_net_channels: int | None = None
    gpus: int | None = None
    host_link_bandwidth: float = 64e9
    host_memory_bandwidth: float = 614.4e9
    #: measured collective times inside a node (``topologies/collective_profile.py``), set from
    #: ``options.collective_profile`` by ``taskgraph.plan.resolve``; None = the model alone
    collective_profile: object = None

    def __post_init__(self):
        where = f"cluster {brief(self.name)}"
        if not isinstance(self.gpu, GPUSpec):
            raise ConfigError(f"{where}: gpu must be a GPUSpec (use topologies.gpus.get_gpu), got {brief(self.gpu)}")
        for key in ("nodes", "gpus_per_node", "nodes_per_leaf"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{where}: {key} = {brief(value)} must be an integer >= 1")
        for key in ("nvlink_bandwidth", "nic_bandwidth"):
            value = getattr(self, key)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ConfigError(f"{where}: {key} = {brief(value)} must be a positive number of bytes/s")
        for key in ("nvlink_efficiency", "nic_efficiency"):
            value = getattr(self, key)
            if not (isinstance(value, (int, float)) and 0 < value <= 1):
                raise ConfigError(f"{where}: {key} = {brief(value)} must be in (0, 1]")
        for key in ("nvlink_latency", "nic_latency", "collective_base_latency"):
            value = getattr(self, key)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ConfigError(f"{where}: {key} = {brief(value)} must be a number of seconds >= 0")
        if self.nodes * self.gpus_per_node > MAX_GPUS:
            raise ConfigError(f"{where}: nodes * gpus_per_node = {self.nodes} * {self.gpus_per_node} = "
                              f"{self.nodes * self.gpus_per_node:,} GPUs is over the limit of {MAX_GPUS:,} "
                              f"(docs/strategy-file.md, Limits); is nodes right?")
        if self.gpus is not None:
            g = self.gpus
            if isinstance(g, bool) or not isinstance(g, int) or not (self.nodes - 1) * self.gpus_per_node < g <= \
                    self.nodes * self.gpus_per_node:
                raise ConfigError(f"{where}: gpus = {brief(g)} must be an integer the {self.nodes} nodes of "
                                  f"{self.gpus_per_node} GPUs hold with the last one in use: "
                                  f"{(self.nodes - 1) * self.gpus_per_node + 1}..{self.nodes * self.gpus_per_node}; "
                                  f"or drop nodes and give gpus alone")
        if self.network_topology not in NETWORK_TOPOLOGIES:
            raise ConfigError(
                f"{where}: network_topology = {brief(self.network_topology)} is not one of "
                f"{', '.join(NETWORK_TOPOLOGIES)}{did_you_mean(self.network_topology, NETWORK_TOPOLOGIES)}"
            )
        ov = self.oversubscription
        if isinstance(ov, bool) or not isinstance(ov, (int, float)) or not math.isfinite(ov) or ov < 1:
            raise ConfigError(f"{where}: oversubscription = {ov!r} must be a number >= 1 (1 = full bisection, "
                              f"2 = 2:1 leaf taper)")
        if self.routing not in ROUTINGS:
            raise ConfigError(f"{where}: routing = {brief(self.routing)} is not one of {', '.join(ROUTINGS)}"
                              f"{did_you_mean(str(self.routing), ROUTINGS)} (adaptive = InfiniBand adaptive "
                              f"routing, ecmp = per-flow hashing on Ethernet/RoCE)")
        r = self.switch_radix
        if r is not None and (isinstance(r, bool) or not isinstance(r, int) or r < 4 or r % 2):
            raise ConfigError(f"{where}: switch_radix = {brief(r)} must be an even integer >= 4 (ports per "
                              f"switch, e.g. 40 for HDR QM8700, 64 for NDR QM9700) or null for no limit")
        cov = self.core_oversubscription
        if isinstance(cov, bool) or not isinstance(cov, (int, float)) or not math.isfinite(cov) or cov < 1:
            raise ConfigError(f"{where}: core_oversubscription = {cov!r} must be a number >= 1 (1 = full "
                              f"bisection between pods, 2 = 2:1 spine-to-core taper)")
        self._check_pod_gpus(where)
        q = self.qps_per_connection
        if isinstance(q, bool) or not isinstance(q, int) or not 1 <= q <= 64:
            raise ConfigError(f"{where}: qps_per_connection = {brief(q)} must be an integer in 1..64 "
                              f"(NCCL_IB_QPS_PER_CONNECTION; 1 is NCCL's default)")
        c = self.p2p_net_channels
        if c is not None and (isinstance(c, bool) or not isinstance(c, int) or not 1 <= c <= 64):
            raise ConfigError(f"{where}: p2p_net_channels = {brief(c)} must be an integer in 1..64 (NCCL channels "
                              f"per send/recv peer across nodes: 1 for NCCL 2.7-2.11, 2 for 2.12-2.28) or null "
                              f"for NCCL 2.29's automatic choice")
        if self.collective_model not in COLLECTIVE_MODELS:
            raise ConfigError(
                f"{where}: collective_model = {self.collective_model!r} is not one of "
                f"{', '.join(COLLECTIVE_MODELS)}{did_you_mean(str(self.collective_model), COLLECTIVE_MODELS)}")
        for key in ("host_us_per_kernel", "host_us_per_collective"):
            h = getattr(self, key)
            if isinstance(h, bool) or not isinstance(h, (int, float)) or not math.isfinite(h) or h < 0:
                raise ConfigError(f"{where}: {key} = {h!r} must be a number of microseconds >= 0")
        if not isinstance(self.contention, bool):
            raise ConfigError(f"{where}: contention = {self.contention!r} must be true or false")
        cv = self.gpu_speed_cv
        if isinstance(cv, bool) or not isinstance(cv, (int, float)) or not math.isfinite(cv) or not 0 <= cv < 1:
            raise ConfigError(f"{where}: gpu_speed_cv = {cv!r} must be a number in [0, 1) (e.g. 0.02 for 2% "
                              f"spread of per-GPU speed)")
        for item in self.node_gpus:
            node, g = item
            if isinstance(node, bool) or not isinstance(node, Integral) or not 0 <= node < self.nodes:
                raise ConfigError(f"{where}: node_gpus node {node!r} is not a node of this cluster "
                                  f"(0..{self.nodes - 1}); write `node_gpus: {{3: A100-SXM-40GB}}`")
            if not isinstance(g, GPUSpec):
                raise ConfigError(f"{where}: node_gpus[{node}] must be a GPUSpec (use topologies.gpus.get_gpu)")
        for item in self.slow:
            node, speed = item
            if isinstance(node, bool) or not isinstance(node, Integral) or not 0 <= node < self.nodes:
                raise ConfigError(f"{where}: slow node {node!r} is not a node of this cluster (0..{self.nodes - 1}); "
                                  f"write `slow: {{17: 0.8}}` with a node index")
            if isinstance(speed, bool) or not isinstance(speed, (int, float)) or not 0 < speed <= 1:
                raise ConfigError(f"{where}: slow node {node} speed = {speed!r} must be in (0, 1] (a fraction of "
                                  f"nominal speed, e.g. 0.8)")
        s = self.spine_switches
        if s is not None and (isinstance(s, bool) or not isinstance(s, int) or s < 0):
            raise ConfigError(f"{where}: spine_switches = {brief(s)} must be an integer >= 0 (or null for auto)")
        if self.num_leaves > 1 and self.num_spines == 0:
            raise ConfigError(
                f"{where}: spine_switches = 0 but the network has {self.num_leaves} leaf switches, "
                f"which leaves them disconnected; set spine_switches >= 1 or null (auto)"
            )

    # --- sizes -------------------------------------------------------------------------------
    @property
    def num_gpus(self) -> int:
        """GPUs of the job: ``gpus``, or ``nodes * gpus_per_node``."""
        return self.gpus if self.gpus is not None else self.nodes * self.gpus_per_node

    def node_of(self, rank: int) -> int:
        """Node index of global rank ``rank`` (node-major rank order)."""
        self._check_rank(rank)
        return int(rank) // self.gpus_per_node

    def local_rank(self, rank: int) -> int:
        """Index of global rank ``rank`` inside its node (also its NIC rail)."""
        self._check_rank(rank)
        return int(rank) % self.gpus_per_node

    def _check_rank(self, rank) -> None:
        if isinstance(rank, bool) or not isinstance(rank, Integral) or not 0 <= rank < self.num_gpus:
            raise ConfigError(
                f"rank {brief(rank)} is not a GPU of cluster {brief(self.name)}, which has ranks 0..{self.num_gpus - 1} "
                f"({self.nodes} nodes x {self.gpus_per_node} GPUs); use more nodes or a smaller layout"
            )

    def _check_pod_gpus(self, where: str) -> None:
        p = self.pod_gpus
        if p is None:
            return
        group = self.nodes_per_leaf * self.gpus_per_node
        if isinstance(p, bool) or not isinstance(p, int) or p < group or p % group:
            raise ConfigError(f"{where}: pod_gpus = {brief(p)} must be a positive multiple of the GPUs under one "
                              f"leaf group, nodes_per_leaf x gpus_per_node = {self.nodes_per_leaf} x "
                              f"{self.gpus_per_node} = {group} (e.g. {group * max(1, 3072 // group)}), or null "
                              f"for the switch_radix rule")

    # --- achievable bandwidths ----------------------------------------------------------------
    @property
    def nvlink_bus_bandwidth(self) -> float:
        """Achievable NVLink bus bandwidth per GPU per direction: nvlink_bandwidth * nvlink_efficiency."""
        return self.nvlink_bandwidth * self.nvlink_efficiency

    @property
    def nic_bus_bandwidth(self) -> float:
        """Achievable network bus bandwidth per GPU per direction: nic_bandwidth * nic_efficiency."""
        return self.nic_bandwidth * self.nic_efficiency

    # --- network shape ------------------------------------------------------------------------
    @property
    def num_leaves(self) -> int:
        """Leaf switches of the inter-node network (0 for a single node)."""
        if self.nodes == 1:
            return 0
        groups = math.ceil(self.nodes / self.nodes_per_leaf)
        return groups * self.gpus_per_node if self.network_topology == "rail-optimized" else groups

    @property
    def num_spines(self) -> int:
        """Spine switches: ``spine_switches`` or, when None, 0 for <= 1 leaf else gpus_per_node."""
        if self.spine_switches is not None:
            return self.spine_switches if self.num_leaves > 1 else 0
        return 0 if self.num_leaves <= 1 else self.gpus_per_node

    @property
    def leaves_per_pod(self) -> int:
        """Leaves under one spine layer (a pod). With ``pod_gpus`` P: all leaves while the job fits one
        pod, else the leaves of P / (nodes_per_leaf x gpus_per_node) leaf groups (a rail-optimized
        unit is ``gpus_per_node`` leaves). Else with ``switch_radix`` R: all leaves while the NICs fit
        one two-tier Clos (R^2 / 2 NICs: R/2 down and R/2 up per leaf, R leaves per spine), else R/2
        leaves per pod, whose spines give R/2 ports down and R/2 up to a core tier (the k-ary
        fat-tree of Al-Fares et al., SIGCOMM 2008, Section 3: pods of k^2/4 hosts, k^3/4 in all).
        Rail-optimized leaves are grouped by whole scalable units (all rails of a unit in one pod)."""
        n = self.num_leaves
        if self.pod_gpus is not None:
            if n <= 1 or self.num_gpus <= self.pod_gpus:
                return max(n, 1)
            units = self.pod_gpus // (self.nodes_per_leaf * self.gpus_per_node)
            return min(n, units * (self.gpus_per_node if self.network_topology == "rail-optimized" else 1))
        r = self.switch_radix
        if n <= 1 or r is None or self.num_gpus <= r * r // 2:
            return max(n, 1)
        per = max(1, r // 2)
        if self.network_topology == "rail-optimized":
            per = max(1, per // self.gpus_per_node) * self.gpus_per_node
        return min(per, n)

    @property
    def num_pods(self) -> int:
        """Pods of the network (1 = two tiers, more = a core tier joins them)."""
        return max(1, math.ceil(self.num_leaves / self.leaves_per_pod)) if self.num_leaves else 1

    def leaf_of(self, rank: int) -> int:
        """Index of the leaf switch rank ``rank``'s NIC is cabled to (needs nodes > 1)."""
        node, local = self.node_of(rank), self.local_rank(rank)
        unit = node // self.nodes_per_leaf
        return unit * self.gpus_per_node + local if self.network_topology == "rail-optimized" else unit

    def to_networkx(self):
        """The cluster as an undirected ``networkx.Graph``.

        Nodes: ``gpu{r}`` (kind="gpu", rank, node, local_rank), one ``nvswitch{n}`` per node
        (kind="nvswitch"; the physical 6/4/2 NVSwitch chips of a DGX act as one crossbar), and for
        ``nodes > 1`` leaf switches ``leaf{i}`` (kind="leaf", rail or None) and spines ``spine{j}``
        (kind="spine"). Edges carry ``kind`` ("nvlink", "nic", "uplink"), ``bandwidth`` (bytes/s
        per direction, full duplex) and ``latency`` (seconds). A GPU-switch-GPU path sums to the
        per-step latency of its fabric (each access edge holds half); switch-to-switch hops are
        folded into ``nic_latency`` (uplinks have latency 0). Uplinks are sized for full bisection:
        each leaf's downlink bandwidth split evenly over the spines.
        """
        import networkx as nx

        g = nx.Graph(name=self.name, num_gpus=self.num_gpus, nodes=self.nodes,
                     gpus_per_node=self.gpus_per_node, network_topology=self.network_topology)
        for node in range(self.nodes):
            sw = f"nvswitch{node}"
            g.add_node(sw, kind="nvswitch", node=node)
            for local in range(self.gpus_per_node):
                rank = node * self.gpus_per_node + local
                g.add_node(f"gpu{rank}", kind="gpu", rank=rank, node=node, local_rank=local)
                g.add_edge(f"gpu{rank}", sw, kind="nvlink", bandwidth=self.nvlink_bandwidth,
                           latency=self.nvlink_latency / 2)
        if self.nodes == 1:
            return g
        rail = self.network_topology == "rail-optimized"
        down = [0] * self.num_leaves
        for i in range(self.num_leaves):
            g.add_node(f"leaf{i}", kind="leaf", rail=(i % self.gpus_per_node) if rail else None)
        for rank in range(self.num_gpus):
            leaf = self.leaf_of(rank)
            down[leaf] += 1
            g.add_edge(f"gpu{rank}", f"leaf{leaf}", kind="nic", bandwidth=self.nic_bandwidth,
                       latency=self.nic_latency / 2)
        spines = self.num_spines
        for j in range(spines):
            g.add_node(f"spine{j}", kind="spine")
            for i in range(self.num_leaves):
                g.add_edge(f"leaf{i}", f"spine{j}", kind="uplink",
                           bandwidth=down[i] * self.nic_bandwidth / spines, latency=0.0)
        return g


# --- loading --------------------------------------------------------------------------------
def _read_yaml(path: str) -> Any:
    """One reader for every input file (``strategies.documents``: UTF-8, size limit, duplicate keys
    refused); a non-finite number anywhere is refused too."""
    from strategies.documents import check_finite, load_document
    doc = load_document(path, "cluster file")
    check_finite(doc, f"cluster file {brief(str(path), 120)}")
    return doc


@lru_cache(maxsize=1)
def _presets() -> dict[str, dict]:
    doc = _read_yaml(CLUSTER_PRESETS_PATH)
    if not isinstance(doc, Mapping) or not isinstance(doc.get("presets"), Mapping):
        raise ConfigError(f"{brief(CLUSTER_PRESETS_PATH)}: expected a top-level `presets:` mapping")
    return {str(k): dict(v) for k, v in doc["presets"].items()}


def list_presets() -> tuple[str, ...]:
    """Names of the bundled cluster presets."""
    return tuple(_presets())


def _preset_dict(name: str) -> dict:
    presets = _presets()
    table = {}
    for key, entry in presets.items():
        table[key.lower()] = key
        for alias in entry.get("aliases", ()) or ():
            table[str(alias).lower()] = key
    key = str(name).strip().lower()
    if key not in table:
        raise ConfigError(
            f"unknown cluster preset {brief(name)}{did_you_mean(key, table)}; "
            f"known presets: {', '.join(presets)} (or load a custom cluster YAML)"
        )
    entry = presets[table[key]]
    check_keys(entry, tuple(f for f in CLUSTER_FIELDS if f not in ("preset", "nodes")) + _PRESET_ONLY_FIELDS,
               f"{CLUSTER_PRESETS_PATH} preset {brief(table[key])}")
    data = {k: v for k, v in entry.items() if k not in _PRESET_ONLY_FIELDS}
    # fields written `fitted` take their value from topologies/data/fitted.yaml
    data = resolve_fitted(data, catalog_values("preset").get(table[key], {}),
                          f"{CLUSTER_PRESETS_PATH} preset {brief(table[key])}")
    data.setdefault("name", table[key])
    return data


def _gpu_field(value: Any, where: str) -> GPUSpec:
    if isinstance(value, GPUSpec):
        return value
    if isinstance(value, str):
        return get_gpu(value)
    if isinstance(value, Mapping):
        value = dict(value)
        base = value.pop("base", None)
        name = value.pop("name", None)
        if base is not None:
            return gpu_with_overrides(base, value, name=name, where=f"{where}.gpu")
        return gpu_from_dict(name or "custom-gpu", value, f"{where}.gpu")
    raise ConfigError(
        f"{where}: field 'gpu' = {brief(value)} must be a catalog GPU name (e.g. 'H100-SXM-80GB') or a "
        f"mapping of GPU fields (optionally with `base: <catalog name>`)"
    )


def cluster_from_dict(data: Mapping, *, where: str = "cluster") -> ClusterSpec:
    """Validate a cluster dict (user units, see ``CLUSTER_FIELDS``) and build a :class:`ClusterSpec`.

    ``preset: <name>`` starts from that preset; every other key overrides it.
    """
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: expected a mapping of cluster fields, got {type(data).__name__}")
    if set(data) == {"cluster"} and isinstance(data["cluster"], Mapping):
        data = data["cluster"]
    check_keys(data, CLUSTER_FIELDS, where)
    merged: dict = {}
    if data.get("preset") is not None:
        preset = _preset_dict(data["preset"])
        merged.update(preset)
        if data.get("name") is not None and "description" not in data:
            merged["description"] = f"based on preset {preset['name']}: {preset.get('description', '')}"
    merged.update({k: v for k, v in data.items() if k != "preset"})
    if "gpu" not in merged:
        raise ConfigError(f"{where}: missing required field 'gpu'; add `gpu: H100-SXM-80GB` "
                          f"(or `preset: dgx-h100`)")
    gpu = _gpu_field(merged["gpu"], where)
    if merged.get("nvlink_gbps") is None:
        merged["nvlink_gbps"] = gpu.nvlink_bandwidth / GB_PER_S
    if merged.get("gpus") is not None and data.get("nodes") is None and merged.get("gpus_per_node"):
        # a job of `gpus` GPUs fills whole NVLink domains (nodes) in rank order, the last one partly
        g = number(merged, "gpus", where, integer=True)
        merged["nodes"] = -(-g // number(merged, "gpus_per_node", where, integer=True))
    need = [k for k in ("nodes", "gpus_per_node", "nvlink_latency_us", "nvlink_efficiency",
                        "nic_gbit", "nic_latency_us", "nic_efficiency") if merged.get(k) is None]
    if need:
        raise ConfigError(
            f"{where}: missing required field(s) {', '.join(need)}; set them or start from a preset "
            f"(`preset: {', '.join(list_presets())}`)"
        )
    frac = dict(minimum=0.0, maximum=1.0)
    topo = merged.get("network_topology", "rail-optimized")
    if topo not in NETWORK_TOPOLOGIES:
        raise ConfigError(f"{where}: field 'network_topology' = {brief(topo)} is not one of "
                          f"{', '.join(NETWORK_TOPOLOGIES)}{did_you_mean(topo, NETWORK_TOPOLOGIES)}")
    model = merged.get("collective_model", "nccl")
    if model not in COLLECTIVE_MODELS:
        raise ConfigError(f"{where}: field 'collective_model' = {model!r} is not one of "
                          f"{', '.join(COLLECTIVE_MODELS)}{did_you_mean(str(model), COLLECTIVE_MODELS)}")
    node_gpus = merged.get("node_gpus") or {}
    if not isinstance(node_gpus, Mapping):
        raise ConfigError(f"{where}: field 'node_gpus' = {node_gpus!r} must map node index to a GPU name, e.g. "
                          f"`node_gpus: {{3: A100-SXM-40GB}}`")
    node_gpus = tuple(sorted(((k, _gpu_field(v, f"{where}: node_gpus[{k}]")) for k, v in node_gpus.items()),
                             key=lambda kv: str(kv[0])))
    routing = merged.get("routing", "adaptive")
    if routing not in ROUTINGS:
        raise ConfigError(f"{where}: field 'routing' = {routing!r} is not one of {', '.join(ROUTINGS)}"
                          f"{did_you_mean(str(routing), ROUTINGS)} (adaptive = InfiniBand adaptive routing, "
                          f"ecmp = per-flow hashing on Ethernet/RoCE)")
    radix = merged.get("switch_radix")
    if radix is not None:
        radix = number(merged, "switch_radix", where, integer=True, strict=False)
    slow = merged.get("slow") or {}
    if not isinstance(slow, Mapping):
        raise ConfigError(f"{where}: field 'slow' = {slow!r} must map node index to speed, e.g. `slow: {{17: 0.8}}`")
    spines = merged.get("spine_switches")
    if spines is not None:
        spines = number(merged, "spine_switches", where, integer=True, strict=False)
    return ClusterSpec(
        name=str(merged.get("name", "custom")),
        gpu=gpu,
        nodes=number(merged, "nodes", where, integer=True),
        gpus_per_node=number(merged, "gpus_per_node", where, integer=True),
        nvlink_bandwidth=float(number(merged, "nvlink_gbps", where)) * GB_PER_S,
        nvlink_latency=float(number(merged, "nvlink_latency_us", where, strict=False)) * US,
        nvlink_efficiency=float(number(merged, "nvlink_efficiency", where, **frac)),
        nic_bandwidth=float(number(merged, "nic_gbit", where)) * GBIT_PER_S,
        nic_latency=float(number(merged, "nic_latency_us", where, strict=False)) * US,
        nic_efficiency=float(number(merged, "nic_efficiency", where, **frac)),
        collective_base_latency=float(number(merged, "collective_base_latency_us", where, strict=False,
                                             optional=True) or 0.0) * US,
        network_topology=topo,
        nodes_per_leaf=(number(merged, "nodes_per_leaf", where, integer=True)
                        if merged.get("nodes_per_leaf") is not None else 32),
        spine_switches=spines,
        description=str(merged.get("description", "")),
        oversubscription=(float(number(merged, "oversubscription", where, minimum=1.0, strict=False))
                          if merged.get("oversubscription") is not None else 1.0),
        collective_model=model,
        contention=merged.get("contention", True),
        host_us_per_kernel=(float(number(merged, "host_us_per_kernel", where, strict=False))
                            if merged.get("host_us_per_kernel") is not None else DEFAULT_HOST_US_PER_KERNEL),
        host_us_per_kernel_given=merged.get("host_us_per_kernel") is not None,
        host_us_per_collective=(float(number(merged, "host_us_per_collective", where, strict=False))
                                if merged.get("host_us_per_collective") is not None
                                else DEFAULT_HOST_US_PER_COLLECTIVE),
        slow=tuple(sorted(slow.items(), key=lambda kv: str(kv[0]))),
        node_gpus=node_gpus,
        gpu_speed_cv=(float(number(merged, "gpu_speed_cv", where, strict=False, minimum=0.0, maximum=0.999))
                      if merged.get("gpu_speed_cv") is not None else DEFAULT_GPU_SPEED_CV),
        routing=routing,
        switch_radix=radix,
        core_oversubscription=(float(number(merged, "core_oversubscription", where, minimum=1.0, strict=False))
                               if merged.get("core_oversubscription") is not None else 1.0),
        qps_per_connection=(number(merged, "qps_per_connection", where, integer=True, strict=False)
                            if merged.get("qps_per_connection") is not None else 1),
        p2p_net_channels=(number(merged, "p2p_net_channels", where, integer=True, strict=False)
                          if merged.get("p2p_net_channels") is not None else None),
        pod_gpus=(number(merged, "pod_gpus", where, integer=True, strict=False)
                  if merged.get("pod_gpus") is not None else None),
        gpus=number(merged, "gpus", where, integer=True) if merged.get("gpus") is not None else None,
        host_link_bandwidth=(float(number(merged, "host_link_gbps", where)) * GB_PER_S
                             if merged.get("host_link_gbps") is not None else DEFAULT_HOST_LINK_GBPS * GB_PER_S),
        host_memory_bandwidth=float(number(merged, "host_memory_gbps", where)
                                    if merged.get("host_memory_gbps") is not None else DEFAULT_HOST_MEMORY_GBPS) * GB_PER_S,
    )


def load_cluster_yaml(path_or_dict: str | os.PathLike | Mapping) -> ClusterSpec:
    """Load a custom cluster from a YAML file path or an already-parsed dict.

    Unknown keys raise ConfigError with a did-you-mean; see ``data/example_cluster.yaml``.
    """
    if isinstance(path_or_dict, Mapping):
        return cluster_from_dict(path_or_dict)
    if isinstance(path_or_dict, (str, os.PathLike)):
        path = os.fspath(path_or_dict)
        return cluster_from_dict(_read_yaml(path), where=f"cluster file {brief(path)}")
    raise ConfigError(f"load_cluster_yaml expects a file path or a dict, got {type(path_or_dict).__name__}")


def get_cluster(name: str | ClusterSpec, nodes: int = 1, **overrides) -> ClusterSpec:
    """A preset cluster with ``nodes`` nodes; ``overrides`` use YAML field names (user units).

    >>> c = get_cluster("dgx-a100-80g", nodes=2, nic_efficiency=0.8)
    >>> (c.num_gpus, c.gpu.name, c.nic_bandwidth)
    (16, 'A100-SXM-80GB', 25000000000.0)
    """
    if isinstance(name, ClusterSpec):
        if overrides or nodes != 1:
            raise ConfigError("get_cluster: pass a preset name to apply nodes/overrides, not a ClusterSpec "
                              "(use dataclasses.replace on a ClusterSpec)")
        return name
    data = {"preset": name, "nodes": nodes, **overrides}
    return cluster_from_dict(data, where=f"cluster preset {brief(name)}")


__all__ = [
    "CLUSTER_FIELDS",
    "CLUSTER_PRESETS_PATH",
    "EXAMPLE_CLUSTER_PATH",
    "NETWORK_TOPOLOGIES",
    "ROUTINGS",
    "ClusterSpec",
    "cluster_from_dict",
    "get_cluster",
    "list_presets",
    "load_cluster_yaml",
]
