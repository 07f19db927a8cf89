r"""Alpha-beta cost of NCCL collectives on the actual placement of a group's ranks.

Every function has the signature ``fn(nbytes, ranks, cluster) -> seconds`` and is registered in
:data:`COLLECTIVES`. ``nbytes`` follows the NCCL / nccl-tests conventions
(nccl-tests ``doc/PERFORMANCE.md``):

* all-reduce: the buffer size S (same on every rank);
* all-gather: the total *output* size S (each rank contributes S/n);
* reduce-scatter: the total *input* size S (each rank keeps S/n);
* broadcast: the buffer size S;
* all-to-all: the per-rank *send* buffer size S (S/n to each peer, self included);
* send-recv: the message size S, ``ranks = [src, dst]``.

Notation: n ranks, spanning k nodes with g GPUs of the group per node; B_nv = ``nvlink_bandwidth
* nvlink_efficiency``; B_net = ``nic_bandwidth * nic_efficiency`` (per GPU, one NIC per GPU as in
DGX rail-optimized fabrics); a_nv / a_net = per-step latencies of an NVLink / network step;
t0 = ``collective_base_latency`` (NCCL's per-call baseLat), charged once per call.

Bus bandwidth B of a ring (NCCL builds one ring per channel, each leaving a node through a
different NIC; ring order is NCCL's choice, so the order of ``ranks`` does not matter):

* k = 1: B = B_nv.
* k > 1, g = 1 per node: B = B_net (the ring is one GPU per node, no NVLink hop).
* k > 1, g > 1: B = min(B_nv, g_min * B_net). Derivation: with c = g rings, ring j carries S/c
  and leaves every node once, through NIC j; every ring edge carries 2(n-1)/n of the ring's data,
  so NIC j moves 2(n-1)/n * S/g while each GPU's NVLink moves at most 2(n-1)/n * S; both run
  concurrently, giving t = 2(n-1)/n * S / min(B_nv, g*B_net). The node with the fewest group
  GPUs (g_min) has the fewest NICs and bounds it. This matches nccl-tests multi-node results
  where all-reduce busbw approaches the node's aggregate NIC bandwidth (8 x 50 GB/s on DGX H100),
  not one NIC's. (Per-GPU NIC bandwidth alone would be the bound for all-to-all; see below.)

Latency of a ring collective follows NCCL's tuning model (NCCL ``src/graph/tuning.cc``,
``ncclTopoTuneModel``): of the ring's ``nsteps`` steps, ``nInterSteps`` cross the network and pay
the network latency, the rest pay the NVLink latency. For all-reduce nsteps = 2(n-1) and
nInterSteps = 2(k-1); for reduce-scatter / all-gather (n-1) and (k-1). Inside one node this is
the textbook ``2(n-1)*alpha`` / ``(n-1)*alpha`` (Thakur, Rabenseifner, Gropp 2005).

Closed forms (``alpha_ring = (n-k)*a_nv + (k-1)*a_net``):

* all-reduce, ring (Patarasuk & Yuan 2009, bandwidth-optimal; Thakur et al. 2005;
  NCCL PERFORMANCE.md busBw = algBw * 2(n-1)/n):
  ``t0 + 2(n-1)/n * S/B + 2*alpha_ring``
* all-reduce, hierarchical (intra-node reduce-scatter, inter-node ring all-reduce of the S/g
  shard among the k GPUs with the same local rank -- all g of those rings run at once, each on
  its own NIC/rail -- then intra-node all-gather; phases run back to back):
  ``t0 + 2(g-1)/g * S/B_nv + 2(g-1)*a_nv + 2(k-1)/k * (S/g)/B_net + 2(k-1)*a_net``
  Needs the same g on every node. ``algorithm="auto"`` takes the cheaper of ring and
  hierarchical (ties: ring); the hierarchical form wins on latency (2(g-1) instead of 2(n-k)
  NVLink steps) and on bandwidth when B_nv > n*B_net.
* reduce-scatter / all-gather, ring (Thakur et al. 2005; NCCL busBw factor (n-1)/n):
  ``t0 + (n-1)/n * S/B + alpha_ring``
* broadcast, pipelined ring/chain (NCCL's ring broadcast; busBw factor 1, t = S/B in NCCL
  PERFORMANCE.md; the pipeline fill crosses the n-1 hops of the chain once):
  ``t0 + S/B + alpha_ring``
* all-to-all, pairwise exchange (Thakur et al. 2005; NCCL busBw factor (n-1)/n):
  every rank sends (g-1)/n * S over NVLink and (n-g)/n * S through its *own* NIC (all ranks
  send at once, so NICs cannot be pooled), the two concurrently:
  ``t0 + max((g_max-1)/n * S/B_nv, (n-g_min)/n * S/B_net) + (g_min-1)*a_nv + (n-g_min)*a_net``
  which is ``t0 + (n-1)/n * S/B_nv + (n-1)*a_nv`` inside one node.
* send-recv (point to point; NCCL busBw = algBw): ``t0 + S/B_link + a_link`` with the NVLink
  figures when both ranks share a node, else the network ones, B_net capped at
  ``c * P2P_CHANNEL_NET_BW`` for the c NCCL channels one pair uses across nodes
  (``cluster.p2p_net_channels``; see :data:`P2P_CHANNEL_NET_BW`).

A group of one rank, or nbytes == 0, costs 0.

With ``cluster.collective_model == "nccl"`` (the default of every preset) all-reduce, reduce-scatter,
all-gather and broadcast are timed by NCCL's own tuner model instead (``topologies/nccl.py``:
ring / double-binary tree / NVLS / NVLS-tree x LL / LL128 / Simple, NCCL's latency tables, the
cheapest pair wins, as NCCL's ``topoGetAlgoInfo`` picks it), on the Simple ring bus bandwidth B
above. ``algorithm="ring"|"tree"|"nvls"`` restricts the choice; ``"hierarchical"`` keeps the closed
form above.

Link sharing (``topologies/fabric.py``): options ``axis`` and ``sizes`` say that every group of
that parallel axis runs the same collective at once (by symmetry), ``background`` adds other axes'
traffic; the network bandwidth B_net of the formulas is divided by the resulting max-min fair
slowdown (>= 1); with ``routing: ecmp`` by the expected slowdown of the busiest hashed port. A
send-recv with ``axis: "pp"`` shares the links with every replica's transfer across the same
stage boundary (``fabric.p2p_slowdown``). Without them each group is timed alone on idle links. Not modelled: IB SHARP
(CollNet), topology-aware ring ordering beyond "one NIC per ring".
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from strategies.errors import ConfigError
from topologies.gpus import did_you_mean
from topologies.placement import node_counts

#: all-reduce algorithms accepted by :func:`all_reduce` (tree / nvls need ``collective_model: nccl``).
ALL_REDUCE_ALGORITHMS = ("auto", "ring", "hierarchical", "tree", "nvls")


@dataclass(frozen=True)
class GroupLayout:
    """How a communicator's ranks sit on the cluster.

    n: number of ranks in the group.
    nodes: nodes the group spans (k).
    g_min: fewest group GPUs on one spanned node.
    g_max: most group GPUs on one spanned node.
    """

    n: int
    nodes: int
    g_min: int
    g_max: int

    @property
    def uniform(self) -> bool:
        """True when every spanned node holds the same number of the group's GPUs."""
        return self.g_min == self.g_max


def group_layout(ranks: Iterable[int], cluster: Any) -> GroupLayout:
    """Validate ``ranks`` against ``cluster`` and summarise their placement."""
    ranks = _as_ranks(ranks)
    counts = node_counts(cluster, ranks)
    return GroupLayout(n=len(ranks), nodes=len(counts), g_min=min(counts.values()),
                       g_max=max(counts.values()))


def _as_ranks(ranks: Iterable[int]) -> list[int]:
    if isinstance(ranks, (str, bytes)) or not hasattr(ranks, "__iter__"):
        raise ConfigError(f"ranks = {ranks!r} must be a list of global ranks, e.g. [0, 1, 2, 3]")
    out = list(ranks)
    if not out:
        raise ConfigError("ranks is empty; a collective needs at least one rank")
    return out


def _check_nbytes(nbytes: Any) -> float:
    if (isinstance(nbytes, bool) or not isinstance(nbytes, (int, float)) or not math.isfinite(nbytes)
            or nbytes < 0):
        raise ConfigError(f"nbytes = {nbytes!r} must be a finite number of bytes >= 0")
    return float(nbytes)


def ring_bandwidth(ranks: Iterable[int], cluster: Any) -> float:
    """Bus bandwidth B (bytes/s) of a ring over ``ranks`` (see the module docstring)."""
    return _ring_bandwidth(group_layout(ranks, cluster), cluster)


def _ring_bandwidth(lay: GroupLayout, cluster: Any, slowdown: float = 1.0) -> float:
    if lay.nodes == 1:
        return cluster.nvlink_bus_bandwidth
    if lay.g_max == 1:
        return cluster.nic_bus_bandwidth / slowdown
    # one ring per NIC of the group's GPUs on a node; NCCL tuning.cc/busBw = nChannels * speed
    return min(cluster.nvlink_bus_bandwidth, lay.g_min * cluster.nic_bus_bandwidth / slowdown)


def _slowdown(ranks, lay: GroupLayout | None, cluster: Any, share: dict | None, pattern: str = "ring") -> float:
    """Link-sharing factor of the group's network leg (``topologies.fabric.network_slowdown``)."""
    if lay is None or lay.nodes == 1 or not share:
        return 1.0
    from topologies.fabric import network_slowdown
    return network_slowdown(cluster, tuple(sorted(int(r) for r in ranks)), share.get("axis"),
                            share.get("sizes"), tuple(share.get("background", ())), pattern)


def _nccl(coll: str, s: float, lay: GroupLayout, cluster: Any, slow: float,
          algorithms: tuple[str, ...] | None = None, slow_tree: float | None = None) -> float:
    """Time of the call NCCL makes (``topologies/nccl.py``) on this group's Simple ring bus
    bandwidth: the (algorithm, protocol) its tuner predicts fastest, timed as it executes
    (``nccl_table(execution=True)``: the tuner's time, or the NVLS pipeline where modelled);
    tree-shaped algorithms use the tree's link-sharing factor ``slow_tree`` (default: ``slow``)."""
    from topologies.nccl import ALGORITHMS, nccl_table
    arch, best = cluster.gpu.architecture, None
    algos = algorithms or tuple(ALGORITHMS)
    # PAT exchanges along log-distance trees, so it shares links like the tree
    for sl, group in ((slow, ("ring", "nvls")),
                      (slow if slow_tree is None else slow_tree, ("tree", "nvls_tree", "pat"))):
        use = tuple(a for a in algos if a in group)
        if not use:
            continue
        bus = _ring_bandwidth(lay, cluster, sl)
        net = lay.g_min * cluster.nic_bus_bandwidth / sl
        args = (coll, s, lay.n, lay.nodes, bus, arch, cluster.nvlink_bandwidth,
                min(net, 2 * cluster.nvlink_bus_bandwidth))
        for key, t in nccl_table(*args, algorithms=use).items():  # the choice is the tuner's ...
            if best is None or t < best[0]:
                best = (t, key, args)
    if best is None:
        raise ValueError(f"no NCCL algorithm applies to {coll}")
    _, key, args = best  # ... the time is the chosen pair's execution
    return nccl_table(*args, algorithms=(key[0],), execution=True)[key]


def _ring_alpha(lay: GroupLayout, cluster: Any) -> float:
    # NCCL tuning.cc: latency += (nsteps - nInterSteps) * intraLat + nInterSteps * interLat, with
    # nsteps = n-1, nInterSteps = k-1 per pass (all-reduce makes two passes).
    return (lay.n - lay.nodes) * cluster.nvlink_latency + (lay.nodes - 1) * cluster.nic_latency


def _prologue(nbytes: Any, ranks: Iterable[int], cluster: Any) -> tuple[float, GroupLayout | None]:
    s = _check_nbytes(nbytes)
    lay = group_layout(ranks, cluster)
    if lay.n == 1 or s == 0:
        return s, None
    return s, lay


# --- all-reduce ------------------------------------------------------------------------------
def _all_reduce_ring(s: float, lay: GroupLayout, cluster: Any) -> float:
    # Patarasuk & Yuan 2009; NCCL PERFORMANCE.md: t = S/B * 2(n-1)/n
    n = lay.n
    return (cluster.collective_base_latency + 2 * (n - 1) / n * s / _ring_bandwidth(lay, cluster)
            + 2 * _ring_alpha(lay, cluster))


def _all_reduce_hierarchical(s: float, lay: GroupLayout, cluster: Any) -> float:
    g, k = lay.g_max, lay.nodes
    intra = 2 * (g - 1) / g * s / cluster.nvlink_bus_bandwidth + 2 * (g - 1) * cluster.nvlink_latency
    inter = 2 * (k - 1) / k * (s / g) / cluster.nic_bus_bandwidth + 2 * (k - 1) * cluster.nic_latency
    return cluster.collective_base_latency + intra + inter


def all_reduce_costs(nbytes: float, ranks: Iterable[int], cluster: Any) -> dict[str, float]:
    """Seconds per applicable all-reduce algorithm, e.g. ``{"ring": ..., "hierarchical": ...}``.

    ``hierarchical`` is present only when the group spans several nodes with the same number of
    its GPUs on each.
    """
    s, lay = _prologue(nbytes, ranks, cluster)
    if lay is None:
        return {"ring": 0.0}
    costs = {"ring": _all_reduce_ring(s, lay, cluster)}
    if lay.nodes > 1 and lay.uniform:
        costs["hierarchical"] = _all_reduce_hierarchical(s, lay, cluster)
    return costs


def all_reduce_algorithm(nbytes: float, ranks: Iterable[int], cluster: Any) -> str:
    """The algorithm ``algorithm="auto"`` picks: the cheapest of :func:`all_reduce_costs` (ties: ring)."""
    costs = all_reduce_costs(nbytes, ranks, cluster)
    return min(costs, key=lambda a: (costs[a], a != "ring"))


def all_reduce(nbytes: float, ranks: Iterable[int], cluster: Any, algorithm: str = "auto",
               share: dict | None = None) -> float:
    """All-reduce of an S-byte buffer. Alpha-beta model: ring, hierarchical, or the cheaper of the
    two (``"auto"``); NCCL model: NCCL's tuner choice (``"auto"``) or one algorithm's best protocol."""
    if algorithm not in ALL_REDUCE_ALGORITHMS:
        raise ConfigError(
            f"all-reduce algorithm {algorithm!r} is not one of {', '.join(ALL_REDUCE_ALGORITHMS)}"
            f"{did_you_mean(algorithm, ALL_REDUCE_ALGORITHMS)}"
        )
    nccl = getattr(cluster, "collective_model", "alpha-beta") == "nccl"
    if algorithm in ("tree", "nvls") and not nccl:
        raise ConfigError(f"all-reduce algorithm {algorithm!r} needs collective_model: nccl on the cluster; "
                          f"use 'ring', 'hierarchical' or 'auto'")
    if nccl and algorithm != "hierarchical":
        s, lay = _prologue(nbytes, ranks, cluster)
        if lay is None:
            return 0.0
        algos = None if algorithm == "auto" else (algorithm,)
        if algorithm == "nvls":
            algos = ("nvls", "nvls_tree")
        try:
            return _nccl("all-reduce", s, lay, cluster, _slowdown(ranks, lay, cluster, share), algos,
                         _slowdown(ranks, lay, cluster, share, "tree"))
        except ValueError:
            raise ConfigError(f"all-reduce algorithm {algorithm!r} does not apply to ranks {sorted(_as_ranks(ranks))} "
                              f"on cluster {cluster.name!r} (tree needs several nodes, nvls a Hopper or newer "
                              f"NVSwitch node); use 'auto'") from None
    if share:
        s, lay = _prologue(nbytes, ranks, cluster)
        if lay is None:
            return 0.0
        slow = _slowdown(ranks, lay, cluster, share)
        if slow > 1.0 and algorithm in ("auto", "ring"):
            ring_t = (cluster.collective_base_latency + 2 * (lay.n - 1) / lay.n * s / _ring_bandwidth(lay, cluster, slow)
                      + 2 * _ring_alpha(lay, cluster))
            if algorithm == "ring":
                return ring_t
            return min([ring_t] + [v for k, v in all_reduce_costs(nbytes, ranks, cluster).items() if k != "ring"])
    costs = all_reduce_costs(nbytes, ranks, cluster)
    if algorithm == "auto":
        return min(costs.values())
    if algorithm == "hierarchical" and "hierarchical" not in costs:
        lay = group_layout(ranks, cluster)
        if lay.n == 1 or lay.nodes == 1 or nbytes == 0:
            return costs["ring"]  # inside one node hierarchical degenerates to the ring
        raise ConfigError(
            f"hierarchical all-reduce needs the same number of group GPUs on every node, but ranks "
            f"{sorted(_as_ranks(ranks))} put between {lay.g_min} and {lay.g_max} on each of "
            f"{lay.nodes} nodes; use algorithm='ring' or 'auto'"
        )
    return costs[algorithm]


# --- other collectives -----------------------------------------------------------------------
def _ring_one_pass(nbytes: float, ranks: Iterable[int], cluster: Any, coll: str = "reduce-scatter",
                   share: dict | None = None) -> float:
    """One ring pass moving (n-1)/n of S: reduce-scatter and all-gather cost the same.
    Thakur et al. 2005; NCCL PERFORMANCE.md: t = S/B * (n-1)/n."""
    s, lay = _prologue(nbytes, ranks, cluster)
    if lay is None:
        return 0.0
    slow = _slowdown(ranks, lay, cluster, share)
    if getattr(cluster, "collective_model", "alpha-beta") == "nccl":
        return _nccl(coll, s, lay, cluster, slow)
    n = lay.n
    return (cluster.collective_base_latency + (n - 1) / n * s / _ring_bandwidth(lay, cluster, slow)
            + _ring_alpha(lay, cluster))


def reduce_scatter(nbytes: float, ranks: Iterable[int], cluster: Any, share: dict | None = None) -> float:
    """Reduce-scatter of an S-byte total input (S/n kept per rank), ring algorithm."""
    return _ring_one_pass(nbytes, ranks, cluster, "reduce-scatter", share)


def all_gather(nbytes: float, ranks: Iterable[int], cluster: Any, share: dict | None = None) -> float:
    """All-gather into an S-byte total output (S/n contributed per rank), ring algorithm."""
    return _ring_one_pass(nbytes, ranks, cluster, "all-gather", share)


def broadcast(nbytes: float, ranks: Iterable[int], cluster: Any, share: dict | None = None) -> float:
    """Broadcast of an S-byte buffer from one root, pipelined ring (chain)."""
    s, lay = _prologue(nbytes, ranks, cluster)
    if lay is None:
        return 0.0
    slow = _slowdown(ranks, lay, cluster, share)
    if getattr(cluster, "collective_model", "alpha-beta") == "nccl":
        return _nccl("broadcast", s, lay, cluster, slow, ("ring",))
    # NCCL PERFORMANCE.md: broadcast t = S/B (busBw factor 1); pipeline fill over n-1 hops.
    return cluster.collective_base_latency + s / _ring_bandwidth(lay, cluster, slow) + _ring_alpha(lay, cluster)


def all_to_all(nbytes: float, ranks: Iterable[int], cluster: Any, share: dict | None = None) -> float:
    """All-to-all with an S-byte send buffer per rank (S/n to each peer), pairwise exchange."""
    s, lay = _prologue(nbytes, ranks, cluster)
    if lay is None:
        return 0.0
    n = lay.n
    slow = 1.0
    if share and lay.nodes > 1:
        from topologies.fabric import all_to_all_slowdown
        slow = all_to_all_slowdown(cluster, tuple(sorted(int(r) for r in ranks)))
    # Thakur et al. 2005 pairwise exchange; NCCL PERFORMANCE.md alltoall busBw factor (n-1)/n.
    t_nv = (lay.g_max - 1) / n * s / cluster.nvlink_bus_bandwidth
    t_net = (n - lay.g_min) / n * s / (cluster.nic_bus_bandwidth / slow)
    alpha = (lay.g_min - 1) * cluster.nvlink_latency + (n - lay.g_min) * cluster.nic_latency
    return cluster.collective_base_latency + max(t_nv, t_net) + alpha


#: Network bandwidth one NCCL channel of a send/recv pair drives, bytes/s: NCCL 2.29.2's
#: ``NCCL_P2P_PER_CHANNEL_NET_BW`` default of 14 GB/s, from which it sizes channels per network peer
#: as max(NICs, ceil(NIC GB/s / 14)) ("Improves the default number of channels per net peer for
#: all-to-all, send, and recv", release notes; src commit ebd1e929). Before: one channel per remote
#: peer (NCCL 2.7.8-2.11.4, src/graph/paths.cc ncclTopoGetNchannels: "Remote rank, use network",
#: nChannels = 1), then NCCL_NCHANNELS_PER_NET_PEER = 2 (2.12-2.28). A single channel reaching ~14 GB/s
#: agrees with Narayanan 2021 Figure 18 (44 MB per message over HDR: ~15 GB/s, docs/validation.md).
P2P_CHANNEL_NET_BW = 14e9


def send_recv(nbytes: float, ranks: Iterable[int], cluster: Any, share: dict | None = None) -> float:
    """Point-to-point transfer of S bytes between ``ranks = [src, dst]``."""
    ranks = _as_ranks(ranks)
    if len(ranks) > 2:
        raise ConfigError(f"send-recv takes ranks = [src, dst], got {len(ranks)} ranks {ranks!r}")
    s, lay = _prologue(nbytes, ranks, cluster)
    if lay is None:
        return 0.0
    if lay.nodes == 1:  # NCCL PERFORMANCE.md: for send/recv busBw = algBw = S/t
        bw, alpha = cluster.nvlink_bus_bandwidth, cluster.nvlink_latency
    else:
        bw, alpha = cluster.nic_bus_bandwidth, cluster.nic_latency
        channels = getattr(cluster, "p2p_net_channels", None)
        if channels is not None:   # None: NCCL 2.29 sizes the channels to the NIC (no cap)
            bw = min(bw, channels * P2P_CHANNEL_NET_BW)
        if share and share.get("axis") == "pp" and share.get("sizes") is not None and len(ranks) == 2:
            # every replica crosses the same stage boundary at once (topologies/fabric.p2p_slowdown)
            from topologies.fabric import p2p_slowdown
            bw /= p2p_slowdown(cluster, int(ranks[0]), int(ranks[1]), share["sizes"])
    return cluster.collective_base_latency + s / bw + alpha


#: kind -> cost function ``fn(nbytes, ranks, cluster) -> seconds``.
COLLECTIVES: dict[str, Callable[..., float]] = {
    "all-reduce": all_reduce,
    "reduce-scatter": reduce_scatter,
    "all-gather": all_gather,
    "broadcast": broadcast,
    "all-to-all": all_to_all,
    "send-recv": send_recv,
}

_KIND_ALIASES = {
    "allreduce": "all-reduce", "reducescatter": "reduce-scatter", "allgather": "all-gather",
    "alltoall": "all-to-all", "sendrecv": "send-recv", "p2p": "send-recv", "send": "send-recv",
    "recv": "send-recv", "bcast": "broadcast",
}


def normalize_kind(kind: str) -> str:
    """Canonical collective name for ``kind`` (accepts ``all_reduce``, ``AllReduce``, ``p2p`` ...)."""
    raw = str(kind)
    key = raw.strip().lower().replace("_", "-").replace(" ", "-")
    if key in COLLECTIVES:
        return key
    squashed = key.replace("-", "")
    if squashed in _KIND_ALIASES:
        return _KIND_ALIASES[squashed]
    raise ConfigError(
        f"unknown collective kind {raw!r}{did_you_mean(key, COLLECTIVES)}; "
        f"valid kinds: {', '.join(COLLECTIVES)}"
    )


def collective_time(kind: str, nbytes: float, ranks: Iterable[int], cluster: Any, **options) -> float:
    """Seconds for collective ``kind`` (a key of :data:`COLLECTIVES`) of ``nbytes`` over ``ranks``.

    ``options`` go to the cost function: ``algorithm`` (all-reduce only) and ``share`` (every kind:
    ``{"axis": "dp-cp", "sizes": ParallelSizes, "background": (("pp", bytes_per_s), ...)}``, the link
    sharing of ``topologies.fabric``).
    """
    name = normalize_kind(kind)
    if "algorithm" in options and name != "all-reduce":
        raise ConfigError(f"collective {name!r} takes no algorithm option (only all-reduce does)")
    known = ("algorithm", "share") if name == "all-reduce" else ("share",)
    unknown = [k for k in options if k not in known]
    if unknown:
        raise ConfigError(f"{name} option {unknown[0]!r} is not known{did_you_mean(unknown[0], known)}; "
                          f"options: {', '.join(known)} (algorithm={'|'.join(ALL_REDUCE_ALGORITHMS)})")
    prof = getattr(cluster, "collective_profile", None)
    if prof is not None:
        t = _measured(prof, name, nbytes, ranks, cluster)
        if t is not None:
            return t
    return COLLECTIVES[name](nbytes, ranks, cluster, **options)


def _measured(prof, name: str, nbytes, ranks, cluster) -> float | None:
    """The collective profile's time for this call: a kind and group size it measured, on a group
    inside one node (``topologies/collective_profile.py``); None = the model prices it."""
    ranks = _as_ranks(ranks)
    if len(ranks) < 2 or prof.curve(name, len(ranks)) is None or group_layout(ranks, cluster).nodes != 1:
        return None
    return prof.time(name, _check_nbytes(nbytes), len(ranks))


__all__ = [
    "ALL_REDUCE_ALGORITHMS",
    "COLLECTIVES",
    "GroupLayout",
    "all_gather",
    "all_reduce",
    "all_reduce_algorithm",
    "all_reduce_costs",
    "all_to_all",
    "broadcast",
    "collective_time",
    "group_layout",
    "normalize_kind",
    "reduce_scatter",
    "ring_bandwidth",
    "send_recv",
]
