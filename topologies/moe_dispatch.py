r"""Node-limited MoE dispatch / combine: DeepSeek-V3's two-hop expert-parallel all-to-all.

DeepSeek-V3 (arXiv:2412.19437) Section 2.1.2 ("Node-Limited Routing") restricts each token to
experts on at most M nodes (M = 4 of the 8 nodes an EP-64 group spans), and Section 3.2.2
("Efficient Implementation of Cross-Node All-to-All Communication") sends each token over
InfiniBand *once per destination node*, to the GPU with the same in-node index there, which
forwards it over NVLink to the GPUs holding its experts; IB sending, IB-to-NVLink forwarding and
NVLink receiving run concurrently (warp-specialized kernels), and the combine mirrors the dispatch
(NVLink reduce inside the node, then one IB transfer per node). DeepEP's ``internode`` normal kernels
implement this scheme (deepseek-ai/DeepEP ``csrc/kernels/internode.cu``: RDMA to the same local
rank of each target node, then NVLink forwarding).

A plain all-to-all (``topologies.collectives.all_to_all``, Megatron's ``alltoall`` token
dispatcher) sends all k routed copies of a token to their experts' GPUs: with n ranks on N nodes of
g GPUs each, (n - g)/n of the S-byte send buffer crosses the network. Here, with the buffer S
holding k copies of each token (S/k bytes per copy):

* IB leg: a token reaches D = min(M, N, k) nodes (the router picks the M nodes with the highest
  affinity and then the top-k experts among them, so each chosen node normally receives at least
  one of the k experts: D is this upper bound), of which (N-1)/N are remote on average (the sender's
  own node is one of the N equally likely ones):
  ``t_ib = D (N-1)/N * (S/k) / B_net``  (B_net divided by the fabric's all-to-all slowdown).
* NVLink leg: every copy ends on the GPU of its expert; the copy arrives on one GPU of the node
  (the sender itself, or the IB receiver), which holds the expert with probability 1/g:
  ``t_nv = (g-1)/g * S / B_nv``.
* The legs overlap (Section 3.2.2): ``t = t0 + max(t_ib, t_nv) + (g-1) a_nv + (N-1) a_net``
  (one NVLink message per local peer, one IB message per remote node's receiving GPU).

Inside one node (N = 1) this is the plain all-to-all's ``t0 + (g-1)/g * S/B_nv + (g-1) a_nv``, and
with D = k it moves the same IB bytes as the plain all-to-all, (N-1)/N * S = (n-g)/n * S.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from strategies.errors import ConfigError
from topologies.collectives import all_to_all, group_layout


def node_limited_all_to_all(nbytes: float, ranks: Iterable[int], cluster: Any, *, copies: int,
                            max_nodes: int, share: dict | None = None) -> float:
    """Seconds for an EP dispatch (or combine) whose S = ``nbytes`` send buffer holds ``copies``
    (top-k) copies of each token, tokens limited to ``max_nodes`` nodes (module docstring).

    >>> from topologies.cluster import get_cluster
    >>> c = get_cluster("h800", nodes=1)
    >>> node_limited_all_to_all(8e6, range(8), c, copies=8, max_nodes=4) == all_to_all(8e6, range(8), c)
    True
    """
    if isinstance(copies, bool) or not isinstance(copies, int) or copies < 1:
        raise ConfigError(f"node-limited all-to-all: copies = {copies!r} must be a positive integer (the router's top_k)")
    if isinstance(max_nodes, bool) or not isinstance(max_nodes, int) or max_nodes < 1:
        raise ConfigError(f"options.moe_max_nodes = {max_nodes!r} must be a positive integer (DeepSeek-V3: 4)")
    ranks = tuple(int(r) for r in ranks)
    lay = group_layout(ranks, cluster)
    if nbytes <= 0 or lay.n <= 1 or lay.nodes == 1:
        return all_to_all(nbytes, ranks, cluster)
    N, g = lay.nodes, lay.g_max
    d = min(max_nodes, N, copies)
    slow = 1.0
    if share:
        from topologies.fabric import all_to_all_slowdown
        slow = all_to_all_slowdown(cluster, tuple(sorted(ranks)))
    t_ib = d * (N - 1) / N * (nbytes / copies) / (cluster.nic_bus_bandwidth / slow)
    t_nv = (g - 1) / g * nbytes / cluster.nvlink_bus_bandwidth
    alpha = (g - 1) * cluster.nvlink_latency + (N - 1) * cluster.nic_latency
    return cluster.collective_base_latency + max(t_ib, t_nv) + alpha


__all__ = ["node_limited_all_to_all"]
