r"""The network as shared links: routes, and max-min fair link sharing of concurrent flows.

The closed forms of ``topologies.collectives`` give a collective's time on idle links. This module
answers the one question they need from the network: *how much slower is the network leg of this
collective, given everything that crosses the same links at the same time?* It is the contention
half of the network seam (ASTRA-sim's lesson: the collective layer asks the network for routes and
link shares through a few calls; the closed form and the contention model sit behind the same
interface):

* :func:`fabric_of` - the directed links of the inter-node network (arrays, built once per cluster);
* :meth:`Fabric.route` - links a transfer from ``src`` to ``dst`` crosses;
* :func:`max_min_rates` - max-min fair rates of flows over links (progressive filling; Bertsekas &
  Gallager, *Data Networks* 1992, Section 6.5.2);
* :func:`network_slowdown` - the factor >= 1 by which the network bandwidth of one group's
  collective is divided, from the flows of *all* groups of the same axis (by symmetry every
  group of an axis runs the same collective at the same moment: Megatron's DP groups all reduce
  gradients together) plus background traffic of other axes sharing the same NICs.

Links (directed; full duplex): ``tx[r]`` GPU r's NIC to its leaf, ``rx[r]`` leaf to GPU r's NIC
(capacity ``nic_bandwidth``), ``up[i]`` leaf i to the spine layer and ``down[i]`` spine layer to leaf
i (capacity ``downlinks(i) * nic_bandwidth / oversubscription``; the spines of a two-tier Clos are
pooled into one aggregate uplink per leaf: ECMP spreading is modelled as perfect, hash collisions
are not). NVLink inside a node is not shared here (the NVSwitch is non-blocking; the per-GPU NVLink
port is accounted for by the collective's own formula).

Ring collectives follow NCCL's rail-aligned rings: ring j of a group visits the group's nodes in
order through the GPUs with the j-th local index of the group on each node (``src/graph/rings.cc``
connects rings NIC to NIC of the same rail; ``NCCL_CROSS_NIC=0`` default on rail-optimized
fabrics), so the inter-node flows of a group are ``(node_i, j) -> (node_{i+1}, j)``.

Background traffic of other axes enters as flows with a *demand* (bytes/s, the average rate that
axis needs over the window: bytes per micro-batch / compute time per micro-batch). A demand-capped
flow takes at most its demand; the rest of the link goes to the collective's flows (max-min
fairness with demands, Bertsekas & Gallager 6.5.2).

>>> import numpy as np
>>> cap = np.array([10.0, 10.0, 4.0])
>>> links = np.array([[0, 2], [1, 2], [1, -1]])   # flows 0,1 share link 2; flow 2 only link 1
>>> max_min_rates(links, cap).tolist()
[2.0, 2.0, 8.0]
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from topologies.placement import all_groups, as_sizes, axis_stride


@dataclass(frozen=True)
class Fabric:
    """Directed links of a cluster's inter-node network (see the module docstring)."""

    num_gpus: int
    gpus_per_node: int
    leaf: np.ndarray  # leaf index of each rank's NIC
    capacity: np.ndarray  # bytes/s per link id
    pod: np.ndarray | None = None  # pod index of each leaf (None: one pod, two tiers)
    port_bandwidth: float = 0.0  # bytes/s of one switch port (the NIC rate): ECMP bins per bundle

    @property
    def num_leaves(self) -> int:
        return len(self.pod) if self.pod is not None else (len(self.capacity) - 2 * self.num_gpus) // 2

    @property
    def num_pods(self) -> int:
        return int(self.pod.max()) + 1 if self.pod is not None and len(self.pod) else 1

    def tx(self, rank):
        return rank

    def rx(self, rank):
        return self.num_gpus + rank

    def up(self, leaf):
        return 2 * self.num_gpus + leaf

    def down(self, leaf):
        return 2 * self.num_gpus + self.num_leaves + leaf

    def core_up(self, pod):
        """Pod ``pod``'s spines to the core tier (aggregate of the pod's core uplinks)."""
        return 2 * self.num_gpus + 2 * self.num_leaves + pod

    def core_down(self, pod):
        return 2 * self.num_gpus + 2 * self.num_leaves + self.num_pods + pod

    def route(self, src: int, dst: int) -> tuple[int, ...]:
        """Link ids a transfer ``src -> dst`` crosses: none inside a node (NVLink), else the two
        NICs, plus the leaf's uplink and the far leaf's downlink when the NICs hang off
        different leaves (then the path goes through a spine), plus the pods' core up/down links
        when the leaves sit in different pods (then it goes through a core switch)."""
        g = self.gpus_per_node
        if src // g == dst // g:
            return ()
        ls, ld = int(self.leaf[src]), int(self.leaf[dst])
        if ls == ld:
            return (self.tx(src), self.rx(dst))
        if self.pod is not None and self.pod[ls] != self.pod[ld]:
            return (self.tx(src), self.up(ls), self.core_up(int(self.pod[ls])),
                    self.core_down(int(self.pod[ld])), self.down(ld), self.rx(dst))
        return (self.tx(src), self.up(ls), self.down(ld), self.rx(dst))

    def routes(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """Vectorised :meth:`route` for inter-node pairs: an (F, 6) array of link ids, -1 padded."""
        src = np.asarray(src, dtype=np.int64)
        dst = np.asarray(dst, dtype=np.int64)
        ls, ld = self.leaf[src], self.leaf[dst]
        cross = ls != ld
        out = np.full((len(src), 6), -1, dtype=np.int64)
        out[:, 0] = self.tx(src)
        out[:, 1] = self.rx(dst)
        out[cross, 2] = self.up(ls[cross])
        out[cross, 3] = self.down(ld[cross])
        if self.pod is not None:
            ps, pd = self.pod[ls], self.pod[ld]
            far = cross & (ps != pd)
            out[far, 4] = self.core_up(ps[far])
            out[far, 5] = self.core_down(pd[far])
        return out

    def bundle_ports(self) -> np.ndarray:
        """Ports (ECMP bins) of every link id: 1 for a NIC, the bundle's capacity in ports for a
        leaf or pod uplink/downlink (each port at the NIC rate, as in DGX SuperPOD fabrics)."""
        ports = np.ones(len(self.capacity), dtype=np.int64)
        if self.port_bandwidth > 0:
            b = slice(2 * self.num_gpus, None)
            ports[b] = np.maximum(1, np.floor(self.capacity[b] / self.port_bandwidth + 1e-9)).astype(np.int64)
        return ports


@lru_cache(maxsize=16)
def fabric_of(cluster: Any) -> Fabric:
    """The :class:`Fabric` of ``cluster`` (cached per cluster; arrays of size ~2 x GPUs)."""
    n, g = cluster.num_gpus, cluster.gpus_per_node
    ranks = np.arange(n)
    if cluster.nodes == 1:
        leaf = np.zeros(n, dtype=np.int64)
        nleaves = 1
    else:
        node, local = ranks // g, ranks % g
        unit = node // cluster.nodes_per_leaf
        leaf = unit * g + local if cluster.network_topology == "rail-optimized" else unit
        nleaves = cluster.num_leaves
    downlinks = np.bincount(leaf, minlength=nleaves).astype(float)
    oversub = float(getattr(cluster, "oversubscription", 1.0) or 1.0)
    uplink = downlinks * cluster.nic_bandwidth / oversub
    parts = [np.full(2 * n, float(cluster.nic_bandwidth)), uplink, uplink]
    pod = None
    per = getattr(cluster, "leaves_per_pod", nleaves) if cluster.nodes > 1 else 1
    if cluster.nodes > 1 and per < nleaves:
        # three tiers: a pod's spines reach the core with the pod's leaf uplink capacity divided by
        # the core taper (Al-Fares et al. 2008 fat-tree; core_oversubscription 1 = full bisection)
        pod = np.arange(nleaves, dtype=np.int64) // per
        core = np.bincount(pod, weights=uplink) / float(getattr(cluster, "core_oversubscription", 1.0) or 1.0)
        parts += [core, core]
    cap = np.concatenate(parts)
    return Fabric(n, g, np.asarray(leaf, dtype=np.int64), cap, pod, float(cluster.nic_bandwidth))


def max_min_rates(links: np.ndarray, capacity: np.ndarray, demand: np.ndarray | None = None,
                  tol: float = 1e-9) -> np.ndarray:
    """Max-min fair rates by progressive filling (Bertsekas & Gallager 1992, Section 6.5.2).

    ``links``: (F, L) int array, the link ids each flow crosses (-1 = none); ``capacity``: per
    link id; ``demand``: optional per-flow cap (inf = elastic). All unfrozen flows grow at the same
    rate until a link saturates (its flows freeze) or a flow reaches its demand (it freezes).
    Two equal flows on one link get half its capacity each; a flow alone gets the whole link.
    """
    links = np.asarray(links, dtype=np.int64)
    nflows = links.shape[0]
    rate = np.zeros(nflows)
    if nflows == 0:
        return rate
    dem = np.full(nflows, np.inf) if demand is None else np.asarray(demand, dtype=float).copy()
    # Fast path (exact): give every flow the most it could get alone, min(demand, its tightest link);
    # if no link is then over capacity, that is the max-min allocation (nothing is shared).
    valid0 = links >= 0
    cap_arr = np.asarray(capacity, dtype=float)
    tight = np.where(valid0, cap_arr[np.where(valid0, links, 0)], np.inf).min(axis=1)
    ub = np.minimum(dem, tight)
    if np.isfinite(ub).all():
        load = np.bincount(links[valid0], weights=np.broadcast_to(ub[:, None], links.shape)[valid0],
                           minlength=len(cap_arr))
        if (load <= cap_arr * (1 + tol)).all():
            return ub
    remaining = np.asarray(capacity, dtype=float).copy()
    active = np.ones(nflows, dtype=bool)
    valid = links >= 0
    flat_flow = np.repeat(np.arange(nflows), links.shape[1])[valid.ravel()]
    flat_link = links.ravel()[valid.ravel()]
    nlinks = len(remaining)
    for _ in range(nflows + nlinks + 1):
        if not active.any():
            break
        on = active[flat_flow]
        count = np.bincount(flat_link[on], minlength=nlinks)
        used = count > 0
        share = np.full(nlinks, np.inf)
        share[used] = remaining[used] / count[used]
        headroom = (dem - rate)[active]
        delta = min(share.min(), headroom.min() if headroom.size else np.inf)
        if not np.isfinite(delta):
            raise ValueError("max_min_rates: a flow crosses no link and has no demand")
        rate[active] += delta
        remaining[used] -= delta * count[used]
        saturated = used & (remaining <= tol * np.maximum(capacity, 1.0))
        frozen = np.zeros(nflows, dtype=bool)
        frozen[flat_flow[on & saturated[flat_link]]] = True
        with np.errstate(invalid="ignore"):
            frozen |= rate >= dem - tol * np.maximum(dem, 1.0)
        active &= ~frozen
    return rate



# --- ECMP: flows pinned to one port of a bundle by a hash ------------------------------------------
@lru_cache(maxsize=1024)
def max_load_cdf(balls: int, bins: int) -> tuple[float, ...]:
    """``P(M <= m)`` for m = 0..balls, M the largest bin load when ``balls`` are thrown independently
    and uniformly into ``bins`` (balls into bins; Raab & Steger 1998, "Balls into bins - a simple
    and tight analysis"): the load of the busiest ECMP port when ``balls`` flows are hashed onto
    ``bins`` equal-cost ports. Exact, by Poissonization (the multinomial loads are independent
    Poisson(F/U) loads conditioned on their sum; Mitzenmacher & Upfal 2005, Section 5.4):
    ``P(M <= m) = P(X <= m)^U * P(Y_1 + ... + Y_U = F) / P(X_1 + ... + X_U = F)`` with X ~ Poisson(F/U)
    and Y ~ X conditioned on X <= m; the U-fold convolution of Y is taken through the FFT.

    >>> [round(x, 4) for x in max_load_cdf(2, 2)]   # two flows, two ports: apart half the time
    [0.0, 0.5, 1.0]
    """
    from math import exp, lgamma, log
    if balls <= 0:
        return (1.0,)
    if bins <= 1:
        return tuple([0.0] * balls + [1.0])
    F, U = int(balls), int(bins)
    lam = F / U
    k = np.arange(F + 1)
    lpois = -lam + k * log(lam) - np.array([lgamma(i + 1.0) for i in range(F + 1)])
    pois = np.exp(lpois)
    # log P(X_1 + ... + X_U = F): the sum is Poisson(F)
    lsum = -F + F * log(F) - lgamma(F + 1.0)
    # union bound P(M > m) <= U P(B > m), B ~ Binomial(F, 1/U) the load of one port: once it is below
    # 1e-16 the CDF is 1 to double precision, and the FFTs of size U*m above it are skipped (they cost
    # seconds for thousands of flows on hundreds of ports, and their rounding never reaches 1 - 1e-15)
    lbin = (np.array([lgamma(F + 1.0) - lgamma(i + 1.0) - lgamma(F - i + 1.0) for i in range(F + 1)])
            + k * log(1.0 / U) + (F - k) * log(1.0 - 1.0 / U))
    tail = np.concatenate([np.cumsum(np.exp(lbin)[::-1])[::-1][1:], [0.0]])   # P(B > m)
    out = []
    for m in range(F + 1):
        if m * U < F:
            out.append(0.0)
            continue
        if (out and out[-1] >= 1.0 - 1e-15) or U * tail[m] < 1e-16:
            out.append(1.0)
            continue
        pm = float(pois[:m + 1].sum())
        y = pois[:m + 1] / pm
        # the U-fold convolution of y (degree U*m) through the FFT, long enough not to wrap around
        n = 1 << int(U * m).bit_length()
        ps = float(np.fft.irfft(np.fft.rfft(y, n) ** U, n)[F])
        val = 0.0 if ps <= 0 else exp(U * log(pm) + log(ps) - lsum)
        out.append(float(min(1.0, max(0.0, val))))
    return tuple(out)


def expected_max_load(balls: int, bins: int, bundles: int = 1) -> float:
    """Expected busiest-port load over ``bundles`` independent bundles of the same shape.

    >>> round(expected_max_load(3, 2), 6)   # 8 equally likely hashings: 6 put 2 on one port, 2 put all 3
    2.25
    """
    return ecmp_expected_slowdown({(balls, bins): bundles}, 0.0, 1.0)


def ecmp_expected_slowdown(shapes: dict, floor: float, per_ball: float) -> float:
    """``E[max(floor, per_ball * M)]`` with M the busiest port's load (in balls) over every bundle,
    ``shapes`` = {(balls, ports): number of bundles of that shape}; bundles hash independently, so
    ``P(M <= m) = prod_b P(M_b <= m)``."""
    top = max((b for b, _ in shapes), default=0)
    if top == 0:
        return max(floor, 0.0)
    cdf = np.ones(top + 1)
    for (balls, ports), count in shapes.items():
        c = np.asarray(max_load_cdf(int(balls), int(ports)))
        full = np.ones(top + 1)
        full[:len(c)] = c
        cdf *= full ** count
    pmf = np.diff(np.concatenate([[0.0], cdf]))
    values = np.maximum(floor, per_ball * np.arange(top + 1))
    return float(np.dot(pmf, values))


def _ecmp(fab: Fabric, links: np.ndarray, floor: float, alone: float, qps: int) -> float:
    """Expected slowdown of the slowest of ``links``' flows (elastic flows of one family) when each
    of a flow's ``qps`` queue pairs is hashed onto one port of every bundle (leaf or pod uplink /
    downlink) it crosses: a queue pair alone on its NIC runs at ``alone / qps``; ``m`` of them on one
    port of rate c get c/m each, so the family's slowest is ``alone * M / (qps * c)`` slower, M the
    busiest port's load. The family synchronises (its collective ends when its slowest group
    does), so M is the maximum over all its bundles. ``floor``: the pooled (adaptive) slowdown."""
    bundle_start = 2 * fab.num_gpus
    flat = links[links >= bundle_start]
    if flat.size == 0:
        return floor
    ids, flows = np.unique(flat, return_counts=True)
    ports = fab.bundle_ports()[ids]
    shapes: dict = {}
    for f, u in zip(flows.tolist(), ports.tolist()):
        if f * qps >= 2:  # one queue pair alone on a bundle cannot collide
            shapes[(f * qps, u)] = shapes.get((f * qps, u), 0) + 1
    if not shapes:
        return floor
    return ecmp_expected_slowdown(shapes, floor, alone / (qps * fab.port_bandwidth))



def _rails(grp, gpus_per_node: int) -> tuple[list, dict, int]:
    """(nodes in ascending order, the group's ranks per node ascending, rail-aligned channels): the
    j-th GPU of the group on each node forms channel j; ``width`` channels exist on every node."""
    by_node: dict[int, list[int]] = {}
    for r in sorted(grp):
        by_node.setdefault(r // gpus_per_node, []).append(r)
    nodes = sorted(by_node)
    return nodes, by_node, min((len(v) for v in by_node.values()), default=0)

def ring_flows(groups: Sequence[Sequence[int]], gpus_per_node: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Inter-node flows of NCCL's rail-aligned rings over every group: (src, dst, group index).

    Ring j of a group goes through the j-th GPU (by local index) of the group on each node, nodes
    in ascending order, wrapping around; hops inside a node use NVLink and are not returned.
    """
    srcs, dsts, gids = [], [], []
    for gi, grp in enumerate(groups):
        nodes, by_node, width = _rails(grp, gpus_per_node)
        k = len(nodes)
        if k < 2:
            continue
        for i in range(k):
            a, b = by_node[nodes[i]], by_node[nodes[(i + 1) % k]]
            for j in range(width):
                srcs.append(a[j])
                dsts.append(b[j])
                gids.append(gi)
    return (np.asarray(srcs, dtype=np.int64), np.asarray(dsts, dtype=np.int64),
            np.asarray(gids, dtype=np.int64))


def _btree(k: int, i: int) -> int:
    """Parent of node index ``i`` in NCCL's binary tree over ``k`` nodes (-1 for the root);
    NCCL ``src/graph/trees.cc`` ncclGetBtree."""
    if i == 0:
        return -1
    bit = 1
    while bit < k and not bit & i:
        bit <<= 1
    up = (i ^ bit) | (bit << 1)
    return up if up < k else i ^ bit


def _dtree_parents(k: int, i: int) -> tuple[int, int]:
    """Parents of node ``i`` in NCCL's two trees (ncclGetDtree: the second tree mirrors the first
    for even k and shifts it by one for odd k)."""
    p0 = _btree(k, i)
    if k % 2:
        u = _btree(k, (i - 1 + k) % k)
        p1 = -1 if u == -1 else (u + 1) % k
    else:
        u = _btree(k, k - 1 - i)
        p1 = -1 if u == -1 else k - 1 - u
    return p0, p1


def tree_flows(groups: Sequence[Sequence[int]], gpus_per_node: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Inter-node flows of NCCL's double binary tree over every group: every tree edge carries data
    up (reduce) and down (broadcast), on each rail-aligned channel (the j-th GPU of the group on
    each node, as for rings)."""
    srcs, dsts, gids = [], [], []
    for gi, grp in enumerate(groups):
        nodes, by_node, width = _rails(grp, gpus_per_node)
        k = len(nodes)
        if k < 2:
            continue
        for i in range(k):
            for p in _dtree_parents(k, i):
                if p < 0:
                    continue
                a, b = by_node[nodes[i]], by_node[nodes[p]]
                for j in range(width):
                    srcs += [a[j], b[j]]
                    dsts += [b[j], a[j]]
                    gids += [gi, gi]
    return (np.asarray(srcs, dtype=np.int64), np.asarray(dsts, dtype=np.int64),
            np.asarray(gids, dtype=np.int64))


#: collective communication pattern -> flow builder.
PATTERNS = {"ring": ring_flows, "tree": tree_flows}


def pp_flows(sizes, gpus_per_node: int) -> tuple[np.ndarray, np.ndarray]:
    """Pipeline neighbour transfers of every rank (both directions), inter-node ones only."""
    s = as_sizes(sizes)
    if s.pp < 2:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    # ranks of pipeline rank p in (p, t, c, d) loop order, as rank_of computes them; inter-node pairs
    # kept in that order, each as (a -> b, b -> a)
    a = np.concatenate([_stage_replicas(s, p) for p in range(s.pp - 1)])
    b = a + axis_stride(s, "pp")
    keep = a // gpus_per_node != b // gpus_per_node
    a, b = a[keep], b[keep]
    return np.stack([a, b], axis=1).ravel(), np.stack([b, a], axis=1).ravel()


def _stage_replicas(s, pp_rank: int) -> np.ndarray:
    """Global ranks of every (tp, cp, dp) replica of pipeline rank ``pp_rank``, in nested loop order
    (tp outermost, dp innermost): ``rank_of(t, c, d, pp_rank, s)`` (placement.py) on a grid, with the
    strides of the layout's rank order."""
    t = np.arange(s.tp, dtype=np.int64)[:, None, None] * axis_stride(s, "tp")
    c = np.arange(s.cp, dtype=np.int64)[None, :, None] * axis_stride(s, "cp")
    d = np.arange(s.dp, dtype=np.int64)[None, None, :] * axis_stride(s, "dp")
    return (t + c + d + pp_rank * axis_stride(s, "pp")).ravel()


def _axis_flows(axis: str, sizes, gpus_per_node: int):
    if axis == "pp":
        s, d = pp_flows(sizes, gpus_per_node)
        return s, d, np.zeros(len(s), dtype=np.int64)
    return ring_flows(all_groups(axis, sizes), gpus_per_node)


@lru_cache(maxsize=64)
def family_flows(axis: str, sizes: Any, gpus_per_node: int, pattern: str):
    """Flows of every group of ``axis`` (cached: a strategy sweep asks for the same family many
    times) and, per global rank, the index of its group."""
    groups = all_groups(axis, sizes)
    src, dst, gid = PATTERNS[pattern](groups, gpus_per_node)
    of_rank = {}
    for i, grp in enumerate(groups):
        for r in grp:
            of_rank[r] = i
    return groups, src, dst, gid, of_rank


@lru_cache(maxsize=64)
def background_flows(axis: str, sizes: Any, gpus_per_node: int):
    """Sources and destinations of every group of ``axis`` (cached like :func:`family_flows`)."""
    return _axis_flows(axis, sizes, gpus_per_node)[:2]


#: Background traffic whose total demand on every NIC is below this fraction of the NIC rate is
#: ignored (bounded effect: the collective's flows keep more than 99% of each NIC).
NEGLIGIBLE = 0.01


def _max_nic_demand(background, sizes, g: int, n: int) -> float:
    """Largest total background demand (bytes/s) on one NIC, either direction."""
    tx = np.zeros(n)
    rx = np.zeros(n)
    for axis, dem in background:
        bs, bd = background_flows(axis, sizes, g)
        np.add.at(tx, bs, dem)
        np.add.at(rx, bd, dem)
    return float(max(tx.max(initial=0.0), rx.max(initial=0.0)))


@lru_cache(maxsize=4096)
def _is_group_of(ranks: tuple[int, ...], axis: str, sizes: Any) -> bool:
    """Whether ``ranks`` is exactly one of the groups of ``axis``."""
    from topologies.placement import group_ranks
    try:
        return sorted(group_ranks(axis, sizes, ranks[0])) == sorted(ranks)
    except Exception:  # noqa: BLE001 - a rank outside the layout: not a group of it
        return False


@lru_cache(maxsize=512)
def network_slowdown(cluster: Any, ranks: tuple[int, ...], axis: str | None = None, sizes: Any = None,
                     background: tuple[tuple[str, float], ...] = (), pattern: str = "ring") -> float:
    """Factor >= 1 dividing the network bandwidth of a ``pattern`` ("ring" or "tree") collective
    over ``ranks``.

    ``axis``/``sizes``: the collective runs at once on every group of that axis (``all_groups``),
    e.g. ``"dp-cp"``; None = this group alone. ``background``: ``(axis, demand bytes/s)`` pairs,
    other axes' inter-node traffic sharing the links at that average rate (``"pp"`` = pipeline
    neighbour transfers). Returns (slowest rate of this group's flows alone on a non-blocking
    fabric) / (slowest rate with everything else on the real one); 1.0 inside one node.
    """
    g = cluster.gpus_per_node
    background = tuple((a, d) for a, d in background if d > 0 and len(background_flows(a, sizes, g)[0]))
    if background and _max_nic_demand(background, sizes, g, cluster.num_gpus) < NEGLIGIBLE * cluster.nic_bandwidth:
        # below 1% of a NIC in total: it can slow the collective's flows by less than 1% (they keep
        # at least the rest of the NIC); skipping it saves a progressive filling per collective
        background = ()
    ecmp = getattr(cluster, "routing", "adaptive") == "ecmp"
    if (not background and not ecmp and float(getattr(cluster, "oversubscription", 1.0) or 1.0) <= 1.0
            and float(getattr(cluster, "core_oversubscription", 1.0) or 1.0) <= 1.0
            and (not axis or _is_group_of(tuple(ranks), axis, sizes))):
        # Exact shortcut: the groups of one axis partition the ranks, so no other group's flow
        # uses this group's NICs, and with full bisection a leaf's uplink (downlinks x NIC rate)
        # can carry everything its NICs send: no link the group crosses can bind harder than alone.
        return 1.0
    fab = fabric_of(cluster)
    s1, d1, _ = PATTERNS[pattern]([tuple(ranks)], g)
    if len(s1) == 0:
        return 1.0
    # reference: the group's own flows on a non-blocking fabric (NIC limits only), which is what the
    # closed forms assume
    nonblocking = fab.capacity.copy()
    nonblocking[2 * fab.num_gpus:] = np.inf
    alone = max_min_rates(fab.routes(s1, d1), nonblocking).min()
    src, dst = s1, d1
    if axis:
        groups, fs, fd, fg, of_rank = family_flows(axis, sizes, g, pattern)
        mine = of_rank.get(ranks[0], -1)
        if mine >= 0 and sorted(groups[mine]) == sorted(ranks):
            keep = fg != mine  # the family minus this group (its flows are s1, d1)
            fs, fd = fs[keep], fd[keep]
        src, dst = np.concatenate([s1, fs]), np.concatenate([d1, fd])
    own = np.zeros(len(src), dtype=bool)
    own[:len(s1)] = True
    n_family = len(src)
    demand = [np.full(len(src), np.inf)]
    for bax, dem in background:
        bs, bd = background_flows(bax, sizes, g)
        if len(bs):
            src, dst = np.concatenate([src, bs]), np.concatenate([dst, bd])
            demand.append(np.full(len(bs), float(dem)))
            own = np.concatenate([own, np.zeros(len(bs), dtype=bool)])
    n_elastic = n_family
    routes = fab.routes(src, dst)
    rates = max_min_rates(routes, fab.capacity, np.concatenate(demand))
    slow = max(1.0, float(alone / rates[own].min()))
    if ecmp:
        slow = _ecmp(fab, routes[:n_elastic], slow, alone, int(getattr(cluster, "qps_per_connection", 1)))
    return max(1.0, slow)


@lru_cache(maxsize=256)
def p2p_slowdown(cluster: Any, src: int, dst: int, sizes: Any) -> float:
    """Factor >= 1 on a pipeline transfer ``src -> dst`` between neighbouring stages: every (tp,
    cp, dp) replica sends across the same stage boundary at once (by symmetry, as for the DP
    family), so their flows share leaf and pod uplinks (oversubscription) and, under ECMP, collide
    on ports. 1.0 inside a node."""
    g = cluster.gpus_per_node
    if src // g == dst // g:
        return 1.0
    from topologies.placement import coords_of
    s = as_sizes(sizes)
    a, b = coords_of(src, s), coords_of(dst, s)
    x, y = _stage_replicas(s, a["pp"]), _stage_replicas(s, b["pp"])
    keep = x // g != y // g
    fab = fabric_of(cluster)
    routes = fab.routes(x[keep], y[keep])
    rates = max_min_rates(routes, fab.capacity)
    alone = float(cluster.nic_bandwidth)
    slow = max(1.0, alone / float(rates.min()))
    if getattr(cluster, "routing", "adaptive") == "ecmp":
        slow = _ecmp(fab, routes, slow, alone, int(getattr(cluster, "qps_per_connection", 1)))
    return slow


@lru_cache(maxsize=256)
def all_to_all_slowdown(cluster: Any, ranks: tuple[int, ...]) -> float:
    """Factor >= 1 on the network leg of a uniform all-to-all over ``ranks`` (every group of the
    axis exchanging at once, by symmetry the same pattern on every leaf): the NIC carries a
    rank's off-node share; the leaf uplink carries the off-leaf share of all its NICs over
    ``downlinks / oversubscription`` of capacity. With PXN on rail-optimized fabrics (NCCL
    ``NCCL_PXN_DISABLE=0`` default, ``src/transport/net.cc``) a transfer first moves over NVLink
    to the GPU on the destination's rail, so only off-unit peers leave the leaf.

    Under ``routing: ecmp`` each pairwise flow (``qps_per_connection`` queue pairs) is hashed onto
    one port of every leaf / pod bundle it crosses, as for rings (:func:`_ecmp`): the exchange ends
    when the busiest port's flows do. Only this group's flows are hashed (the other groups of the
    axis would add collisions on shared bundles), so this part is a lower bound.
    """
    fab = fabric_of(cluster)
    g = cluster.gpus_per_node
    oversub = float(getattr(cluster, "oversubscription", 1.0) or 1.0)
    ranks = sorted(ranks)
    worst = 1.0
    unit = {r: (r // g) // cluster.nodes_per_leaf for r in ranks}
    for r in ranks:
        off_node = sum(1 for q in ranks if q // g != r // g)
        if off_node == 0:
            continue
        if cluster.network_topology == "rail-optimized":
            off_leaf = sum(1 for q in ranks if unit[q] != unit[r])
        else:
            off_leaf = sum(1 for q in ranks if fab.leaf[q] != fab.leaf[r])
        worst = max(worst, oversub * off_leaf / off_node)
    if getattr(cluster, "routing", "adaptive") == "ecmp":
        worst = _all_to_all_ecmp(cluster, fab, ranks, worst)
    return worst


def _all_to_all_ecmp(cluster: Any, fab: Fabric, ranks: list, floor: float) -> float:
    """ECMP part of :func:`all_to_all_slowdown`: every off-node pair of the group is one flow (from
    the sender's node GPU on the receiver's rail with PXN), routed and hashed by :func:`_ecmp`; the
    reference rate is the slowest flow on a non-blocking fabric (its NIC's fair share)."""
    g = cluster.gpus_per_node
    r = np.asarray(ranks, dtype=np.int64)
    src = np.repeat(r, r.size)
    dst = np.tile(r, r.size)
    off = src // g != dst // g
    src, dst = src[off], dst[off]
    if not src.size:
        return floor
    if cluster.network_topology == "rail-optimized":  # PXN: NVLink first, then the destination's rail
        src = (src // g) * g + dst % g
    routes = fab.routes(src, dst)
    nonblocking = fab.capacity.copy()
    nonblocking[2 * fab.num_gpus:] = np.inf
    alone = float(max_min_rates(routes, nonblocking).min())
    return _ecmp(fab, routes, floor, alone, int(getattr(cluster, "qps_per_connection", 1)))


__all__ = [
    "PATTERNS",
    "Fabric",
    "all_to_all_slowdown",
    "ecmp_expected_slowdown",
    "expected_max_load",
    "fabric_of",
    "max_load_cdf",
    "max_min_rates",
    "network_slowdown",
    "p2p_slowdown",
    "ring_flows",
    "tree_flows",
]
