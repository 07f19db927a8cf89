"""Overlap that costs something: the SMs communication kernels take from the compute beside them,
and the chunking that overlapping a collective with its own GEMM pays.

One rule for every stream (TP, CP, EP, DP, ZeRO-3): a communication kernel that holds ``s`` of the
GPU's ``S`` SMs (``topologies/comm_kernels.py``: NCCL one SM per channel, Transformer Engine
userbuffers and DeepEP their configured SMs) leaves the compute running beside it ``(S - s) / S``
of the SMs, so compute that overlaps it for ``o`` seconds takes ``f o`` longer, ``f = s / S``
(DeepSeek-V3, arXiv:2412.19437, Section 3.2.1 makes the same argument for its 20 of 132 SMs).
Where it applies:

* work that runs on its own stream beside the compute (the DP gradient buckets and parameter
  gathers, Megatron's asynchronous column-parallel backward collectives): the lowering marks each
  stream's SM fraction (``IterationWork.meta["sm_share"]``) and ``simulator/engine/interference.py``
  finds the timeline in which every compute task is longer by ``f x`` its overlap with such work
  (a fixed point over engine runs; both fidelities);
* a collective overlapped with one GEMM, as one block (:func:`bulk`): the coarse records and the
  ZeRO-3 prefetch fold it in closed form, which is the fixed point's answer for an isolated pair;
* Transformer Engine's userbuffer overlap (``options.tp_comm_overlap``): the GEMM is cut into chunks
  that alternate with the collective's chunks (Wang et al. 2023, "Overlap Communication with
  Dependent Computation via Decomposition in Large Deep Learning Models", ASPLOS'23, Section 4;
  TE's ``ring_exchange`` all-gather + GEMM in TP chunks, its ``pipeline`` GEMM + reduce-scatter in
  ``num_splits`` chunks on the SMs left after the communication's): :func:`ring_exchange`,
  :func:`pipelined`. A chunk is a smaller GEMM, priced by the cost model at its own shape (its tile
  and wave quantization), so the chunking is paid where the shapes say it is.

The communication kernel is not slowed by the SMs the compute holds (its CTAs stay resident on its
channels' SMs), but it shares HBM with it (:func:`hbm_loss`): the DP stream's collectives lose the
fraction ``g = u / (1 + u)`` of their rate while their rank computes, ``u`` their own HBM demand.
"""
from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

from topologies.collectives import collective_time
from topologies.comm_kernels import comm_kernels, nccl_channels

#: at most this fraction of a GPU's SMs is ever taken from compute (a safeguard for tiny GPUs)
MAX_FRACTION = 0.5


def sm_fraction(sms: float, sm_count: int) -> float:
    """``s / S`` of a kernel holding ``sms`` of ``sm_count`` SMs, at most :data:`MAX_FRACTION`."""
    if sm_count <= 0 or sms <= 0:
        return 0.0
    return min(float(sms) / float(sm_count), MAX_FRACTION)


def bulk(compute: float, comm: float, f: float, g: float = 0.0) -> float:
    """Seconds for a compute block and a collective started together, the compute running at
    ``1 - f`` of its rate while the collective runs and the collective at ``1 - g`` of its rate while
    the compute runs (module doc, :func:`hbm_loss`): the collective plus ``g`` x the compute's
    slowed length when the compute finishes first (``comm / (1 - g) >= compute / (1 - f)``), else
    ``compute + f comm / (1 - g)``. With ``g = 0``: ``comm``, else ``compute + f comm``."""
    if comm <= 0.0:
        return compute
    if f <= 0.0 and g <= 0.0:
        return max(compute, comm)
    t_comp, t_comm = compute / (1.0 - f), comm / (1.0 - g)
    return comm + g * t_comp if t_comm >= t_comp else compute + f * t_comm


def ring_exchange(chunk_compute: float, chunk_comm: float, chunks: int, f: float) -> float:
    """All-gather + GEMM in ``chunks`` steps (TE ``ring_exchange``, Wang et al. 2023 Section 4.1): the
    GEMM on the local chunk starts at once; each of the other ``chunks - 1`` steps computes one chunk
    while the next arrives (:func:`bulk` of one chunk and one chunk transfer). Also the reverse
    (GEMM + reduce-scatter sending each finished chunk), which has the same length."""
    n = max(int(chunks), 1)
    return chunk_compute + (n - 1) * bulk(chunk_compute, chunk_comm, f)


def pipelined(chunk_compute_margin: float, chunk_comm: float, splits: int) -> float:
    """GEMM + reduce-scatter in ``splits`` chunks (TE ``pipeline`` with ``set_sm_margin``): every
    GEMM chunk runs on the SMs the communication leaves (``chunk_compute_margin`` is already priced
    at that rate); chunk i's reduce-scatter overlaps chunk i+1's GEMM; the last one is exposed."""
    k = max(int(splits), 1)
    return chunk_compute_margin + (k - 1) * max(chunk_compute_margin, chunk_comm) + chunk_comm


def chunk_op(op, chunks: int):
    """``op`` with its GEMMs' token dimension ``m`` cut into ``chunks`` parts (one part), its FLOPs and
    bytes likewise: what one chunk of a decomposed GEMM runs."""
    n = max(int(chunks), 1)
    if n == 1:
        return op
    return replace(op, gemms=tuple(replace(g, m=max(1, -(-g.m // n))) for g in op.gemms),
                   fwd_flops=op.fwd_flops / n, bwd_input_flops=op.bwd_input_flops / n,
                   bwd_weight_flops=op.bwd_weight_flops / n, fwd_bytes=op.fwd_bytes // n,
                   bwd_input_bytes=op.bwd_input_bytes // n, bwd_weight_bytes=op.bwd_weight_bytes // n,
                   copy_bytes=op.copy_bytes // n)


#: HBM bytes a ring collective step moves on one GPU per byte it receives: the peer's write into the
#: receive FIFO, the kernel's read of it, and one more local access -- the read of the local input
#: chunk it reduces with (reduce-scatter, ``recvReduceSend``) or the write of the output buffer
#: (all-gather, ``recvCopySend``); the send to the next peer writes the peer's memory, not this one's
#: (NCCL ``src/device/all_reduce.h`` / ``reduce_scatter.h`` / ``all_gather.h`` ring loops on
#: ``prims_simple.h``; Pati et al. ASPLOS'24 "T3", Section 3.2: a ring reduce-scatter step reads two
#: buffers and writes one)
RING_HBM_PER_WIRE_BYTE = 3.0


def hbm_loss(bus_bandwidth: float, hbm_bandwidth: float, compute_demand: float = 1.0) -> float:
    """Fraction of its rate a ring collective loses while compute runs beside it on the same GPU,
    HBM shared in proportion to demand (Pati et al. ASPLOS'24 "T3", Section 3.2: concurrent GEMMs and
    collectives contend for memory bandwidth; Agrawal et al. 2024, arXiv:2412.14335, Section III:
    concurrent compute and communication interfere through HBM as well as compute units).

    The collective demands ``u = RING_HBM_PER_WIRE_BYTE x bus_bandwidth / hbm_bandwidth`` of the
    HBM (``bus_bandwidth``: bytes per second each rank receives, nccl-tests' busBw), the compute
    ``c = compute_demand``; when ``u + c > 1`` each gets ``1 / (u + c)`` of its demand, so the
    collective runs at ``1 / (u + c)`` of its rate and loses ``g = 1 - 1 / (u + c)``. The compute
    beside it is taken as memory-bound (``c = 1``: an upper bound for the collective, since only the
    memory-bound kernels saturate HBM; the compute's own loss is not charged, its SM share is).

    >>> round(hbm_loss(50e9, 3.35e12), 4)   # an H100's 400 Gb/s NIC ring: u = 0.0448
    0.0429
    """
    if bus_bandwidth <= 0 or hbm_bandwidth <= 0:
        return 0.0
    u = RING_HBM_PER_WIRE_BYTE * bus_bandwidth / hbm_bandwidth
    total = u + compute_demand
    return 0.0 if total <= 1.0 else 1.0 - 1.0 / total


@lru_cache(maxsize=1024)
def ring_hbm_loss(cluster, ranks: tuple) -> float:
    """:func:`hbm_loss` of a collective on ``ranks``: its bus bandwidth that of a 1 GiB
    reduce-scatter there as the collective model times it (nccl-tests busBw = (n - 1) / n x size /
    time); 0 for a single rank."""
    n, size = len(ranks), float(1 << 30)
    t = collective_time("reduce-scatter", size, tuple(ranks), cluster) if n > 1 else 0.0
    return hbm_loss((n - 1) / n * size / t, cluster.gpu.hbm_bandwidth) if t > 0 else 0.0


def spans_nodes(ranks, gpus_per_node: int) -> bool:
    return len({r // max(gpus_per_node, 1) for r in ranks}) > 1


def stream_shares(plan, groups: dict) -> dict:
    """SM fraction of the work on each side stream of a rank (module doc), for
    ``IterationWork.meta["sm_share"]``: ``dp``: NCCL's channels for the DP group (2 per NIC when it
    leaves the node); ``tp``: the asynchronous column-parallel collectives on the TP group (NCCL
    channels, or TE's bulk userbuffer SMs with ``tp_comm_overlap``); ``ep``: the expert dispatch /
    combine SMs with ``overlap_moe_expert_parallel_comm`` (their own stream then). Empty when
    ``options.overlap_interference`` is off; concurrent DualPipe pairs already price their
    communication SMs (``pair_comm_sms``), so their TP stream takes none here."""
    opt = plan.strategy.options
    if not getattr(opt, "overlap_interference", True):
        return {}
    gpu, cluster = plan.cluster.gpu, plan.cluster
    S = gpu.sm_count
    g = cluster.gpus_per_node
    out = {}
    dp = groups.get("dp", ())
    if len(dp) > 1:
        out["dp"] = sm_fraction(nccl_channels(gpu.architecture, spans_nodes=spans_nodes(dp, g), nics_per_node=g), S)
    tp = groups.get("tp", ())
    if len(tp) > 1 and opt.pair_overlap != "concurrent":
        sms = comm_kernels().ub_bulk_sms if opt.tp_comm_overlap else \
            nccl_channels(gpu.architecture, spans_nodes=spans_nodes(tp, g), nics_per_node=g)
        out["tp"] = sm_fraction(sms, S)
    ep = groups.get("ep", ())
    if opt.moe_shared_expert_overlap and not opt.overlap_moe_expert_parallel_comm and len(ep) > 1 \
            and opt.pair_overlap != "concurrent":
        # the dispatcher's all-to-all (NCCL all_to_all_single, MoEAlltoAllTokenDispatcher) beside the
        # shared experts holds NCCL's channels for the EP group, one SM each, as the DP stream's do
        # (concurrent DualPipe pairs price their communication SMs already: pair_comm_sms)
        out["ep"] = sm_fraction(nccl_channels(gpu.architecture, spans_nodes=spans_nodes(ep, g), nics_per_node=g), S)
    if opt.overlap_moe_expert_parallel_comm and len(ep) > 1:
        # the expert dispatch / combine kernels beside the other micro-batch's compute in a combined
        # 1F1B step hold moe_flex_dispatcher_num_sms SMs (Megatron-LM transformer_config.py
        # moe_flex_dispatcher_num_sms; unset: DeepEP's own setting, data/comm_kernels.yaml [DEEPEP])
        sms = opt.moe_flex_dispatcher_num_sms
        out["ep"] = sm_fraction(comm_kernels().deepep_sms if sms is None else sms, S)
    return {k: v for k, v in out.items() if v > 0}
