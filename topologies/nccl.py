r"""NCCL's own cost model and tuner choice (algorithm x protocol) for all-reduce, reduce-scatter,
all-gather and broadcast.

Source: NVIDIA/nccl ``src/graph/tuning.cc`` (commit 5067397, June 2026): ``ncclTopoTuneModel``
fills ``bandwidths[coll][algo][proto]`` and ``latencies[coll][algo][proto]``;
``ncclTopoGetAlgoTime`` predicts ``time = lat + nBytes / bw``; the enqueue path
(``src/enqueue.cc``, ``topoGetAlgoInfo``) takes the (algorithm, protocol) pair with the smallest
predicted time. We reproduce that model with two substitutions, both stated:

* NCCL's per-channel bandwidth ``nChannels * bwIntra|bwInter`` (from the topology search's speed
  arrays, ``src/graph/search.cc``) is replaced by this project's calibrated *Simple-protocol ring
  bus bandwidth* of the group (``topologies.collectives`` module docstring: NVLink for one node,
  ``min(B_nv, g * B_net)`` across nodes, with link sharing from ``topologies.fabric``). NCCL's
  protocol and algorithm factors (LL x0.5 capped at llMaxBw, LL128 x0.92, tree x0.92 and algBw
  = busBw/2, NVLS efficiency 0.85) are applied to it unchanged.
* The hardware latency of a ring or tree step is NCCL's ``hwLatencies`` table (NVLink / NET,
  per algorithm and protocol) and the per-call ``baseLatencies`` (below, microseconds).

The tuner decides; the call then takes what its kernel takes. ``nccl_table(..., execution=True)``
and :func:`nccl_run` time the chosen pair by its execution where we model it: the one-node NVLS
all-reduce as NCCL's three-stage chunk pipeline with NCCL's chunk schedule
(:func:`nvls_pipeline_time`); every other pair as the tuner predicts.

Algorithms (one function each in :data:`ALGORITHMS`): ``ring`` (every collective), ``tree``
(double binary tree, all-reduce only; latency grows with log2 of the nodes), ``nvls`` (NVLink
SHARP inside one NVSwitch domain, Hopper and newer; multicast reduction in the switch),
``nvls_tree`` (NVLS inside nodes + tree across nodes, all-reduce, Hopper and newer) and ``pat``
(Parallel Aggregated Trees, NCCL 2.23+: reduce-scatter and all-gather with one GPU per node, whose
latency grows with log2 of the nodes plus 2.8 us per rank, where the ring's grows by a network step
per rank: at thousands of ranks the tuner takes it for all but the largest messages).
CollNet (IB SHARP) is not modelled (it needs the SHARP plugin).

Latency at thousands of ranks, per call (``tuning.cc`` at 5067397, Simple protocol, one GPU per node,
where the network latency is the tree's 14 us): ring all-reduce ``1.4 x (8.4 + 2(n-1) x 14)`` us
(40 ms at n = 1024), tree all-reduce ``8.4 + 2 log2(n) x 14`` us (0.29 ms), ring reduce-scatter /
all-gather ``8.4 + (n-1) x 14`` us (14 ms), PAT ``8 + log2(n) x 14 / 3.5 + 2.8 n`` us (2.9 ms).
"""
from __future__ import annotations

from collections.abc import Callable

#: ``tuning.cc`` ncclTunerConstantsDefaults.baseLatencies, microseconds, (LL, LL128, Simple).
BASE_LAT_US = {"tree": (6.8, 14.0, 8.4), "ring": (6.6, 14.0, 8.4), "nvls": (0.0, 0.0, 0.0),
               "nvls_tree": (0.0, 0.0, 0.0), "pat": (8.0, 8.0, 8.0)}
#: ``tuning.cc`` hwLatencies[NVLINK] and [NET], microseconds, (LL, LL128, Simple).
HW_LAT_NVLINK_US = {"tree": (0.6, 1.25, 4.0), "ring": (0.6, 1.9, 3.4), "nvls": (0.0, 0.0, 25.0),
                    "nvls_tree": (0.0, 0.0, 25.0)}
HW_LAT_NET_US = {"tree": (5.0, 8.5, 14.0), "ring": (2.7, 4.0, 14.0), "nvls": (0.0, 0.0, 18.0),
                 "nvls_tree": (0.0, 0.0, 20.9), "pat": (0.0, 0.0, 14.0)}
#: ``tuning.cc`` (5067397) PAT: bus bandwidth x0.75 ("busBw *= .75"), and a latency of
#: ``log2i(nNodes) * interLat / 3.5 + nRanks * 2.8`` us ("Still a linear part") on top of the base.
PAT_BW_FACTOR = 0.75
PAT_LOG_DIVISOR = 3.5
PAT_US_PER_RANK = 2.8
PROTOCOLS = ("LL", "LL128", "Simple")
#: ``tuning.cc`` llMaxBws (GB/s): row by GPU generation for one node, by CPU vendor across nodes;
#: column by node count (1, 2, >2).
LL_MAX_BW_ONE_NODE = {"volta": 39.0, "ampere": 87.7, "hopper": 141.0, "blackwell": 282.0}
LL_MAX_BW_MULTI_NODE = {"intel": (39.0, 20.4), "amd": (22.5, 19.0)}  # (2 nodes, >2 nodes)
#: ``tuning.cc`` nvlsEfficiency by compute capability.
NVLS_EFFICIENCY = {"hopper": 0.85, "blackwell": 0.74}
#: ``tuning.cc`` ncclTopoGetAlgoTime: treeCorrectionFactor[proto][log2(nBytes/64)], 64 B .. 256 MB.
TREE_CORRECTION = {
    "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0),
    "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0),
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9),
}
#: ``tuning.cc`` getNetOverhead: per-step network post overhead (us) by CPU vendor, x3 for Simple.
NET_OVERHEAD_US = {"intel": 1.0, "amd": 2.0}
#: CPU vendor of the host for NCCL's LL bandwidth caps and net overhead: DGX A100 has AMD EPYC 7742,
#: DGX H100/H200/B200 Intel Xeon 8480C (DGX user guides).
CPU_BY_ARCH = {"ampere": "amd", "hopper": "intel", "blackwell": "intel", "volta": "intel"}
US = 1e-6
GB = 1e9

#: NVLS execution (not the tuner): ``src/transport/nvls.cc`` ``NCCL_NVLS_NCHANNELS`` (default 16)
#: and ``NCCL_NVLS_CHUNKSIZE`` (default 128 KiB).
NVLS_CHANNELS = 16
NVLS_MAX_CHUNK = 128 * 1024
#: The one-node NVLS all-reduce kernel (``src/device/all_reduce.h``, ``RunWorkElement<ncclFuncAllReduce,
#: ..., NCCL_ALGO_NVLS, NCCL_PROTO_SIMPLE>``, ``oneNode`` branch) splits its warps into three groups that
#: work on successive chunks through NVLS buffers: scatter (send buffer -> the heads), reduce
#: (multimem load-reduce + multimem store) and gather (-> receive buffer): a three-stage pipeline
#: (the same three groups in 2.18.5, ``src/collectives/device/all_reduce.h``, without the one-node branch).
NVLS_PIPELINE_STAGES = 3


def _log2i(n: int) -> int:
    return max(int(n).bit_length() - 1, 0)


def _nsteps(coll: str, n: int) -> int:
    # tuning.cc: nsteps = 2(n-1) for all-reduce, n-1 for reduce-scatter / all-gather, n otherwise
    return 2 * (n - 1) if coll == "all-reduce" else (n - 1 if coll in ("reduce-scatter", "all-gather") else n)


def _ll_cap(arch: str, nodes: int) -> float:
    if nodes == 1:
        return LL_MAX_BW_ONE_NODE.get(arch, 87.7) * GB
    two, many = LL_MAX_BW_MULTI_NODE[CPU_BY_ARCH.get(arch, "intel")]
    return (two if nodes <= 2 else many) * GB


def _proto_bus_bw(algo: str, proto: str, coll: str, bus: float, arch: str, nodes: int) -> float:
    """tuning.cc "Various model refinements": protocol factors on the Simple bus bandwidth."""
    if algo == "ring" and proto == "LL":
        return min(_ll_cap(arch, nodes), bus * 0.5)
    if algo == "ring" and proto == "LL128":
        return bus * 0.92  # 120/128 payload per 128-byte line
    if algo == "tree":
        if coll == "all-reduce":
            bus *= 0.92
        if proto == "LL":
            return min(bus / 3.8, _ll_cap(arch, nodes))
        if proto == "LL128":
            return bus * (7.0 / 9.0 if nodes == 1 else 120.0 / 128.0)
    return bus


# --- algorithms: fn(coll, nbytes, n, nodes, bus, arch) -> {proto: (lat_s, algbw) } ----------------
def _ring(coll, n, nodes, bus, arch, nvlink_raw):
    out = {}
    nsteps = _nsteps(coll, n)
    ppn = n / nodes
    for i, p in enumerate(PROTOCOLS):
        bw = _proto_bus_bw("ring", p, coll, bus, arch, nodes) * n / nsteps  # busBw -> algBw
        lat = BASE_LAT_US["ring"][i]
        intra = HW_LAT_NVLINK_US["ring"][i]
        hw = intra if nodes == 1 else HW_LAT_NET_US["ring"][i]
        if coll == "broadcast":
            lat += hw  # sameChannels: one step latency for the pipelined chain
        else:
            inter = HW_LAT_NET_US["tree" if ppn == 1 else "ring"][i]
            if nodes > 1:
                ovh = NET_OVERHEAD_US[CPU_BY_ARCH.get(arch, "intel")] * (3 if p == "Simple" else 1)
                intra = max(intra, ovh)
            n_inter = 0 if nodes == 1 else (2 * (nodes - 1) if coll == "all-reduce" else nodes - 1)
            lat += (nsteps - n_inter) * intra + n_inter * inter
        out[p] = (lat * US, bw)
    return out


def _tree(coll, n, nodes, bus, arch, nvlink_raw):
    if coll != "all-reduce":
        return {}
    ppn = n // nodes
    out = {}
    for i, p in enumerate(PROTOCOLS):
        bw = _proto_bus_bw("tree", p, coll, bus, arch, nodes) * 0.5  # tree busBw -> algBw
        lat = BASE_LAT_US["tree"][i] + 2 * ((ppn - 1) * HW_LAT_NVLINK_US["tree"][i]
                                            + _log2i(nodes) * HW_LAT_NET_US["tree"][i])
        out[p] = (lat * US, bw)
    return out


def _nvls(coll, n, nodes, bus, arch, nvlink_raw):
    # NVLink SHARP inside one node (multi-node NVLS needs CollNet: disabled without it).
    eff = NVLS_EFFICIENCY.get(arch)
    if eff is None or nodes > 1 or nvlink_raw is None or n < 2:
        return {}
    if coll == "all-reduce":
        intra = nvlink_raw * eff * 2.0  # "AllReduce pipelines two operations"
    elif coll in ("reduce-scatter", "all-gather"):
        intra = nvlink_raw * eff * (n - 1) / n
    else:
        return {}
    busbw = min(intra, nvlink_raw)  # bounded by the per-channel NVLink speed (bwInter = bwIntra)
    return {"Simple": (HW_LAT_NVLINK_US["nvls"][2] * US, busbw * n / _nsteps(coll, n))}


def _nvls_tree(coll, n, nodes, bus_net, arch, nvlink_raw):
    eff = NVLS_EFFICIENCY.get(arch)
    # NVLS needs several GPUs of the communicator in one NVLink domain (src/transport/nvls.cc
    # ncclNvlsInit: no NVLS when the local topology has gpuCount < 2)
    if eff is None or nodes == 1 or coll != "all-reduce" or nvlink_raw is None or n // nodes < 2:
        return {}
    intra = nvlink_raw * eff * 2.0
    inter = bus_net * (2 if nodes <= 2 else 1)  # "Handle 2 node case of NVLSTree"
    busbw = min(intra, inter)
    lat = HW_LAT_NVLINK_US["nvls_tree"][2] + 2 * _log2i(nodes) * HW_LAT_NET_US["nvls_tree"][2]
    return {"Simple": (lat * US, busbw * n / _nsteps(coll, n))}


def _pat(coll, n, nodes, bus, arch, nvlink_raw):
    # tuning.cc ncclPatEnable: one GPU per node only (nNodes == nRanks), SM60+, host network (no device
    # offload); reduce-scatter / all-gather only, Simple only. With ppn = 1 the network latency is the
    # tree's ("With ppn=1 latencies are fully exposed, use the Tree network latency"). RS / AG on
    # non-ring algorithms keep busBw as algBw (no nRanks / nsteps conversion).
    if coll not in ("reduce-scatter", "all-gather") or nodes != n or n < 2:
        return {}
    inter = HW_LAT_NET_US["tree"][2]
    lat = BASE_LAT_US["pat"][2] + _log2i(nodes) * inter / PAT_LOG_DIVISOR + n * PAT_US_PER_RANK
    return {"Simple": (lat * US, bus * PAT_BW_FACTOR)}


def nvls_chunk_size(nbytes: float, concurrent_ops: int) -> int:
    """NCCL's NVLS chunk schedule (``src/enqueue.cc``, the ``NCCL_ALGO_NVLS`` branch of the chunk-size
    computation; unchanged from 2.18.5 to 2.30.7): 128 KiB, halved to 64 / 32 / 16 KiB when the message
    is below 64 / 8 / 2 times ``concurrent_ops`` (= channels x heads) chunks."""
    c = NVLS_MAX_CHUNK
    if nbytes < 64 * concurrent_ops * c and c > 65536:
        c = 65536
    if nbytes < 8 * concurrent_ops * c and c > 32768:
        c = 32768
    if nbytes < 2 * concurrent_ops * c and c > 16384:
        c = 16384
    return c


def nvls_pipeline_time(nbytes: float, heads: int, lat: float, algbw: float) -> float:
    """Execution time of a one-node NVLS all-reduce: NCCL's latency ``lat`` plus a three-stage chunk
    pipeline (:data:`NVLS_PIPELINE_STAGES`) on each of ``NVLS_CHANNELS x heads`` concurrent streams,
    each moving its share of the message in chunks of :func:`nvls_chunk_size` at ``algbw / streams``:
    ``lat + (ceil(s / c) + stages - 1) * min(c, s) * streams / algbw`` with ``s = S / streams``.

    For large messages this is ``lat + S / algbw`` plus the fill of two chunks per stream; since the
    chunk shrinks with the message, the fill is a large share of mid-size messages (why nccl-tests
    measures NVLS at 8 MB at ~40 % of its peak bus bandwidth while NCCL's tuner, which has no fill
    term, predicts ~55 %; docs/validation.md). No fitted constant: ``lat`` is NCCL's NVLS latency
    and ``algbw`` the preset's NVLS bandwidth, as in the tuner entry."""
    streams = NVLS_CHANNELS * max(int(heads), 1)
    c = nvls_chunk_size(nbytes, streams)
    share = nbytes / streams
    chunks = max(1, -(-share // c))
    return lat + (chunks + NVLS_PIPELINE_STAGES - 1) * min(c, share) * streams / algbw


#: algorithm name -> fn(coll, n, nodes, simple_ring_bus_bw, arch, nvlink_raw) -> {proto: (lat, algbw)}
ALGORITHMS: dict[str, Callable[..., dict]] = {"ring": _ring, "tree": _tree, "nvls": _nvls,
                                              "nvls_tree": _nvls_tree, "pat": _pat}


def nccl_table(coll: str, nbytes: float, n: int, nodes: int, bus: float, arch: str,
               nvlink_raw: float | None = None, net_bus: float | None = None,
               algorithms: tuple[str, ...] | None = None, execution: bool = False) -> dict[tuple[str, str], float]:
    """Predicted seconds for every enabled (algorithm, protocol) of ``coll`` on ``n`` ranks over
    ``nodes`` nodes. ``bus``: Simple ring bus bandwidth of the group (bytes/s); ``nvlink_raw``:
    the NVLink line rate per GPU per direction (NVLS); ``net_bus``: per-node network bus bandwidth
    (NVLS tree's inter-node leg; defaults to ``bus``).

    ``time = lat + S / algBw`` (``ncclTopoGetAlgoTime``), with the tree correction factor for
    tree all-reduce and the ring "plateau" latency x1.4 of multi-node Simple all-reduce: the
    tuner's view, which decides the choice. ``execution=True`` gives the time the call takes where
    this project models the execution beyond the tuner: the one-node NVLS all-reduce pipeline
    (:func:`nvls_pipeline_time`); every other entry is the tuner's time.
    """
    out = {}
    for name in algorithms or tuple(ALGORITHMS):
        fn = ALGORITHMS[name]
        entries = fn(coll, n, nodes, net_bus if (name == "nvls_tree" and net_bus) else bus, arch, nvlink_raw)
        for proto, (lat, bw) in entries.items():
            if bw <= 0:
                continue
            if name == "tree":
                log_size = _log2i(int(nbytes) >> 6) if nbytes >= 64 else -1
                if 0 <= log_size < 23:
                    bw *= TREE_CORRECTION[proto][log_size]
            if (name == "ring" and proto == "Simple" and nodes > 1 and coll == "all-reduce"):
                lat *= 1.4  # "Plateau effect of ring" (sm80+)
            if execution and name == "nvls" and coll == "all-reduce":
                out[(name, proto)] = nvls_pipeline_time(nbytes, n // max(nodes, 1), lat, bw)
            else:
                out[(name, proto)] = lat + nbytes / bw
    return out


def nccl_choice(coll: str, nbytes: float, n: int, nodes: int, bus: float, arch: str,
                nvlink_raw: float | None = None, net_bus: float | None = None,
                algorithms: tuple[str, ...] | None = None) -> tuple[tuple[str, str], float]:
    """NCCL's tuner choice: the (algorithm, protocol) with the smallest predicted time, and that time.
    Ties go to the earlier entry of :data:`ALGORITHMS` x :data:`PROTOCOLS` (deterministic)."""
    table = nccl_table(coll, nbytes, n, nodes, bus, arch, nvlink_raw, net_bus, algorithms)
    if not table:
        raise ValueError(f"no NCCL algorithm applies to {coll} on {n} ranks")
    key = min(table, key=lambda k: table[k])
    return key, table[key]


def nccl_run(coll: str, nbytes: float, n: int, nodes: int, bus: float, arch: str,
             nvlink_raw: float | None = None, net_bus: float | None = None,
             algorithms: tuple[str, ...] | None = None) -> tuple[tuple[str, str], float]:
    """What a call does: NCCL's tuner choice (:func:`nccl_choice`) and the time that choice takes
    when it runs (``nccl_table(..., execution=True)``)."""
    key, _ = nccl_choice(coll, nbytes, n, nodes, bus, arch, nvlink_raw, net_bus, algorithms)
    run = nccl_table(coll, nbytes, n, nodes, bus, arch, nvlink_raw, net_bus, (key[0],), execution=True)
    return key, run[key]


def bus_bandwidth(coll: str, nbytes: float, seconds: float, n: int) -> float:
    """nccl-tests busbw (doc/PERFORMANCE.md): algbw = S/t times 2(n-1)/n (all-reduce),
    (n-1)/n (reduce-scatter, all-gather, all-to-all) or 1 (broadcast, send-recv)."""
    factor = {"all-reduce": 2 * (n - 1) / n, "reduce-scatter": (n - 1) / n,
              "all-gather": (n - 1) / n}.get(coll, 1.0)
    return nbytes / seconds * factor


__all__ = [
    "ALGORITHMS",
    "PROTOCOLS",
    "bus_bandwidth",
    "nccl_choice",
    "nccl_run",
    "nccl_table",
    "nvls_chunk_size",
    "nvls_pipeline_time",
]
