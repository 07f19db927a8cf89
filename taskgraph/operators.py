"""Operator graph of one decoder layer, plus embedding, final norm, LM head and loss.

Every number is for ONE GPU after sharding by tensor (tp), sequence (sp), context (cp) and
expert (ep) parallelism, for one micro-batch of ``micro_batch`` sequences of ``seq_len`` tokens.

FLOP conventions (see ``model_flops_per_token`` for the MFU conventions):

* A GEMM (m x k) @ (k x n) costs 2mnk FLOPs; its backward is one dgrad and one wgrad GEMM of the
  same size, so ``bwd_input_flops == bwd_weight_flops == fwd_flops`` (Narayanan 2021 Section 5.1;
  kept separate because zero-bubble schedules split them, Qi 2023 Section 2).
* Attention core = QK^T and PV, 4 * b * a * d FLOPs per (query, key) pair (Narayanan 2021 eq. 3
  derivation). By default we report what the kernel EXECUTES: a causal flash kernel skips the
  masked half, so pairs = s(s+1)/2; an unfused (non-flash) kernel computes all s^2 pairs. Pass
  ``causal_halved=False`` for the Megatron MFU convention (full s^2). The whole attention backward
  is input-gradient: 2x forward unfused (4 matmuls), 2.5x forward with FlashAttention (5 matmuls,
  recomputing QK^T; Dao 2022 Section 3.1 / Appendix B.2).
* Norms, activations, residual adds and the loss are memory-bound (Ivanov 2021, "Data Movement Is
  All You Need", Section 3): their FLOPs are rough per-element operation counts given for
  completeness; their bytes are what matter.

Saved activations follow Korthikanti 2022 Section 4 exactly (activations ``dtype_bytes`` each,
dropout masks 1 byte each, LayerNorm statistics ignored), so ``activation_bytes_per_layer``
reproduces their Table 2.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from strategies.config import did_you_mean
from strategies.errors import ConfigError
from strategies.strategy_file import MoeRouting
from taskgraph.attention_shape import AttentionShape, attention_pairs, kernel_attention_shape, unfused_score_bytes
from taskgraph.cross_entropy import cross_entropy_bytes
from taskgraph.lora import apply_lora
from taskgraph.model import ModelSpec
from taskgraph.moe_dispatchers import MOE_DISPATCHERS, MoeDispatchShape
from taskgraph.moe_routing import routed_load
from taskgraph.rope import rope_bytes

if TYPE_CHECKING:
    import networkx as nx

KINDS = ("gemm", "attention", "elementwise", "norm", "embedding", "loss", "router",
         "collective")  # "collective": reserved for passes that turn comms into graph nodes
COLLECTIVE_OPS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all")
RECOMPUTE = ("none", "selective", "full")
#: context-parallel attention variants: 'allgather' K/V before attention (Llama 3, Dubey 2024 Section
#: 3.3.2); 'ring' K/V chunks passed around the CP ring while the current chunk's attention runs (Ring
#: Attention, Liu 2023 Section 3; Megatron-core / Transformer Engine cp_comm_type "p2p"); 'a2a'
#: all-to-all of Q, K, V to heads-split full sequences and of the output back (DeepSpeed-Ulysses,
#: Jacobs 2023 Section 3; Transformer Engine cp_comm_type "a2a").
CP_COMMS = ("allgather", "ring", "a2a")
FLOP_CONVENTIONS = ("megatron", "palm", "kaplan")

MASK_BYTES = 1   # dropout masks are stored as 1 byte per element (Korthikanti 2022 Section 4.1)
LSE_BYTES = 4    # flash-attention log-sum-exp statistics are fp32 (Dao 2022 Algorithm 1)
LOGIT_BYTES = 4  # the cross-entropy keeps fp32 logits/softmax (Korthikanti 2022 Section 4.3)
FLASH_BWD_FACTOR = 2.5  # FlashAttention backward = 5 matmuls vs 2 forward (Dao 2022 Section 3.1)
UNFUSED_BWD_FACTOR = 2.0  # dP, dV, dQ, dK: 4 matmuls vs 2 forward (Narayanan 2021 Section 5.1)

# Rough per-element FLOPs of memory-bound ops (fwd, bwd_input, bwd_weight); Ivanov 2021 Sec. 3.
_EW_FLOPS = {
    "layernorm": (7, 12, 3),   # mean, centre, var, scale, affine; gain+bias grads
    "rmsnorm": (4, 8, 2),      # square-sum, rsqrt scale, gain; gain grad
    "gelu": (8, 12, 0),        # tanh approximation (Hendrycks & Gimpel 2016)
    "swiglu": (5, 8, 0),       # silu(gate) * up, per output element (Shazeer 2020)
    "geglu": (10, 14, 0),      # gelu_tanh(gate) * up, per output element (Shazeer 2020 GEGLU)
    "squared-relu": (2, 3, 0),  # max(x, 0)^2; grad 2 relu(x) * dy (So 2021 "Primer" Section 3)
    "softcap": (3, 3, 0),      # c * tanh(x / c) (Gemma 2 report Section 2)
    "residual": (3, 1, 0),     # bias + dropout scale + add (Megatron bias_dropout_add)
    "loss": (5, 2, 0),         # max, sub, exp, sum, pick; softmax - onehot (per logit)
}


@dataclass(frozen=True)
class GemmShape:
    """One (batched) GEMM C[m, n] = A[m, k] @ B[k, n], for wave/tile quantization."""

    m: int
    """Rows of the output (tokens or queries)."""
    n: int
    """Columns of the output (output features)."""
    k: int
    """Reduction dimension (input features)."""
    batch: int = 1
    """Independent GEMMs of this shape (attention heads x sequences, or local experts)."""

    @property
    def flops(self) -> int:
        """2 m n k per GEMM (multiply + add), times batch."""
        return 2 * self.m * self.n * self.k * self.batch


@dataclass(frozen=True)
class Collective:
    """A collective an operator needs, sized with the nccl-tests convention."""

    group: str
    """Process group: 'tp', 'cp', 'ep', 'etp' or 'etp-ep' (expert TP x EP: taskgraph/moe_dispatchers.py)."""
    op: str
    """'all-reduce', 'all-gather', 'reduce-scatter' or 'all-to-all'."""
    phase: str
    """'fwd' or 'bwd'."""
    where: str
    """'before' or 'after' the operator's compute in that phase."""
    bytes: int
    """Full buffer size in bytes: the reduced tensor (all-reduce), the gathered output
    (all-gather), the unreduced input (reduce-scatter), this GPU's send buffer (all-to-all)."""
    overlaps: str = ""
    """'attn': a ring-attention exchange hidden behind the attention core's chunks (costing folds the
    overlap: exposed = max(0, t_comm - (cp-1)/cp x t_core)).
    'dgrad' / 'wgrad': the backward GEMM this collective can run concurrently with when the
    column-parallel backward is asynchronous (Megatron-LM LinearWithGradAccumulationAndAsyncCommunication:
    the SP all-gather of the saved input overlaps the input-gradient GEMM, the all-reduce or
    reduce-scatter of the input gradient overlaps the weight-gradient GEMM); '' = always blocking."""
    copies: int = 0
    """EP all-to-all only: routed copies of each token in the send buffer (the router's top_k), so a
    node-limited dispatch (``options.moe_max_nodes``, ``topologies/moe_dispatch.py``) can send one
    copy per destination node over the network; 0 = not a token dispatch."""


@dataclass(frozen=True)
class Operator:
    """One operator of the training step on one GPU, after sharding."""

    name: str
    """Role in the layer: 'qkv', 'attn_core', 'mlp_down', 'moe_experts', 'lm_head', ..."""
    kind: str
    """One of KINDS: gemm, attention, elementwise, norm, embedding, loss, router, collective."""
    layer: int
    """0-based decoder layer; -1 for embedding ops, -2 for head ops (final norm, LM head, loss)."""
    gemms: tuple = ()
    """GemmShape(s) executed in forward (empty for non-GEMM ops)."""
    fwd_flops: float = 0.0
    """Forward FLOPs on this GPU."""
    bwd_input_flops: float = 0.0
    """Backward FLOPs producing the input gradient (includes flash-attention recompute)."""
    bwd_weight_flops: float = 0.0
    """Backward FLOPs producing the weight gradient."""
    fwd_bytes: int = 0
    """HBM bytes read + written by the forward."""
    bwd_input_bytes: int = 0
    """HBM bytes read + written by the input-gradient backward."""
    bwd_weight_bytes: int = 0
    """HBM bytes read + written by the weight-gradient backward."""
    params: int = 0
    """Parameters held by this GPU for this operator (count, not bytes)."""
    saved_activation_bytes: int = 0
    """Bytes the forward keeps for the backward without recomputation (Korthikanti 2022 Sec. 4)."""
    selective_recompute_bytes: int = 0
    """Part of saved_activation_bytes dropped and recomputed under selective recomputation
    (Korthikanti 2022 Section 5); non-zero only for attn_core. Recompute cost = fwd_flops."""
    comms: tuple = field(default=())
    """Collectives around this operator, in execution order (Korthikanti 2022 Section 4.2.2)."""
    attn_shape: AttentionShape | None = None
    """attn_core only: what the fused attention kernel sees (:func:`kernel_attention_shape`)."""
    copy_bytes: int = 0
    """HBM bytes of the copy kernels a GEMM operator runs around its GEMMs in the forward and input-gradient
    passes (MoE token permutations; QKV's fused RoPE, :func:`rope_bytes`), outside fwd_bytes / bwd_input_bytes:
    priced after the GEMMs (taskgraph/cost.py op_time)."""
    copy_kernels: int = 0  # launches of those kernels per pass
    copy_host_counted: bool = True  # the host counts them (overheads.op_kernels); not RoPE's: in [HOST-TT]'s figures
    profile_shape: str = ""
    """The shape a profile row names this operator by, when not its own (the loss as its implementation
    runs it keeps the built operator's: taskgraph/cross_entropy.py loss_as_run); "": its own."""
    frozen_params: int = 0
    """Part of ``params`` that is frozen (LoRA, taskgraph/lora.py): held, but no gradient, no optimizer state."""

    @property
    def bwd_flops(self) -> float:
        """Input + weight gradient FLOPs."""
        return self.bwd_input_flops + self.bwd_weight_flops

    @property
    def total_flops(self) -> float:
        """Forward + full backward FLOPs."""
        return self.fwd_flops + self.bwd_flops

    @property
    def bwd_bytes(self) -> int:
        """Input + weight gradient HBM bytes."""
        return self.bwd_input_bytes + self.bwd_weight_bytes

    def comm(self, group: str, phase: str | None = None) -> tuple:
        """Collectives of ``group`` ('tp', 'cp', 'ep'), optionally only of ``phase``."""
        return tuple(c for c in self.comms if c.group == group and (phase is None or c.phase == phase))

    @property
    def tp_comm(self) -> tuple:
        """Tensor-parallel collectives (forward and backward)."""
        return self.comm("tp")


# ---------------------------------------------------------------------- sharding context
@dataclass(frozen=True)
class _Ctx:
    """Per-GPU sizes derived from (model, parallelism); see _context for the rules."""

    m: ModelSpec
    b: int
    s: int          # full sequence length
    sq: int         # queries (local sequence) per GPU: s / cp
    T: int          # tokens of the tensor-parallel group per GPU: b * s / cp
    Tsp: int        # tokens in this GPU's residual stream: T / tp with sp, else T
    tp: int
    sp: bool
    cp: int
    ep: int
    dt: int
    flash: bool
    causal_halved: bool
    moe_load: float = 1.0   # busiest EP rank's routed tokens / mean (OptionsSpec.moe_load)
    cp_comm: str = "allgather"  # context-parallel attention: allgather | ring | a2a (CP_COMMS)
    cp_balance: bool = True     # causal load balancing over CP ranks (zig-zag chunks)
    etp: int = 0                # expert tensor parallel (MoE parallel folding); 0 = tp
    moe_dispatcher: str = "alltoall"  # MoE token dispatcher (MOE_DISPATCHERS)


def _choices(n: int, limit: int = 8) -> str:
    ds = [d for d in range(1, n + 1) if n % d == 0]
    return "{" + ",".join(map(str, ds[:limit])) + (",...}" if len(ds) > limit else "}")


def _context(model: ModelSpec, micro_batch: int, seq_len: int, tp: int, sp: bool, cp: int, ep: int,
             dtype_bytes: int, flash_attention: bool, causal_halved: bool | None, moe_load: float | MoeRouting = 1.0,
             cp_comm: str = "allgather", cp_balance: bool = True, etp: int | None = None,
             moe_dispatcher: str = "alltoall") -> _Ctx:
    for name, v in (("micro_batch", micro_batch), ("seq_len", seq_len), ("parallel.tp", tp),
                    ("parallel.cp", cp), ("parallel.ep", ep), ("dtype_bytes", dtype_bytes)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ConfigError(f"{name} = {v!r} must be a positive integer")
    # Megatron column/row-parallel layers split heads, kv groups and ffn over tp (Shoeybi 2019 Sec. 3).
    g = math.gcd(math.gcd(model.heads, model.kv_heads), model.ffn)
    if model.experts:
        g = math.gcd(g, model.expert_ffn)
    for field_, n in (("heads", model.heads), ("kv_heads", model.kv_heads), ("ffn", model.ffn)) + (
            (("expert_ffn", model.expert_ffn),) if model.experts else ()):
        if n % tp:
            raise ConfigError(f"model.{field_}={n} is not divisible by parallel.tp={tp}; "
                              f"choose tp in {_choices(g)}")
    if seq_len % cp:
        raise ConfigError(f"seq_len={seq_len} is not divisible by parallel.cp={cp}; "
                          f"choose cp in {_choices(seq_len)}")
    if sp and (seq_len // cp) % tp:
        raise ConfigError(f"seq_len/cp={seq_len // cp} is not divisible by parallel.tp={tp} as sequence "
                          f"parallelism needs; choose seq_len a multiple of {tp * cp} or sp: false")
    if ep > 1:
        if not model.experts:
            raise ConfigError(f"parallel.ep={ep} but model {model.name!r} has no experts; set ep: 1")
        if model.experts % ep:
            raise ConfigError(f"model.experts={model.experts} is not divisible by parallel.ep={ep}; "
                              f"choose ep in {_choices(model.experts)}")
    if model.experts and tp > 1 and not sp:
        # Megatron-LM arguments.py asserts sequence parallelism for MoE with tensor parallelism.
        raise ConfigError(f"model {model.name!r} is MoE and parallel.tp={tp} > 1 but sp is off; "
                          f"set parallel.sp: true (Megatron requires it) or tp: 1")
    sq = seq_len // cp
    T = micro_batch * sq
    if isinstance(moe_load, MoeRouting):
        moe_load = routed_load(model, moe_load, tokens=(T // tp if sp else T), tp=etp or tp, ep=ep)
    if isinstance(moe_load, bool) or not isinstance(moe_load, (int, float)) or not 1.0 <= moe_load < float("inf"):
        raise ConfigError(f"options.moe_imbalance = {moe_load!r} must be a finite number >= 1 (1 = balanced)")
    if moe_dispatcher not in MOE_DISPATCHERS:
        raise ConfigError(f"options.moe_dispatcher = {str(moe_dispatcher)[:40]!r} is not one of "
                          f"{', '.join(MOE_DISPATCHERS)}{did_you_mean(str(moe_dispatcher), MOE_DISPATCHERS)}")
    if cp_comm not in CP_COMMS:
        raise ConfigError(f"options.cp_comm = {str(cp_comm)[:40]!r} is not one of {', '.join(CP_COMMS)}"
                          f"{did_you_mean(str(cp_comm), CP_COMMS)}")
    if cp > 1 and cp_comm == "a2a" and ((model.heads // tp) % cp or (model.kv_heads // tp) % cp):
        raise ConfigError(f"options.cp_comm = 'a2a' (Ulysses) splits heads over cp: heads/tp = {model.heads // tp} and "
                          f"kv_heads/tp = {model.kv_heads // tp} must both be divisible by parallel.cp = {cp}; "
                          f"use cp_comm: ring or allgather, or a cp dividing both")
    return _Ctx(model, micro_batch, seq_len, sq, T, T // tp if sp else T, tp, sp, cp, ep,
                dtype_bytes, flash_attention, flash_attention if causal_halved is None else causal_halved,
                float(moe_load), cp_comm, bool(cp_balance), etp or 0, moe_dispatcher)


# ---------------------------------------------------------------------- operator builders
def gemm_operator(name: str, layer: int, m: int, n: int, k: int, dt: int, *, params: int, saved: int,
          comms: tuple = (), kind: str = "gemm") -> Operator:
    """Dense GEMM: 2mnk forward; dgrad and wgrad each 2mnk (Narayanan 2021 Section 5.1)."""
    f = 2.0 * m * n * k
    io = dt * (m * k + k * n + m * n)  # fwd: read X, W, write Y; dgrad: dY, W -> dX; wgrad: X, dY -> dW
    return Operator(name, kind, layer, (GemmShape(m, n, k),), f, f, f, io, io, io, params, saved,
                    comms=comms)


def _elementwise(name: str, kind: str, layer: int, elems: int, flops_key: str, *, reads: int,
                 writes: int, bwd_reads: int, bwd_writes: int, dt: int, saved: int = 0,
                 params: int = 0, extra_fwd_bytes: int = 0, extra_bwd_bytes: int = 0,
                 comms: tuple = ()) -> Operator:
    """Memory-bound op over ``elems`` elements; reads/writes count tensors of that size."""
    ff, fb, fw = _EW_FLOPS[flops_key]
    wbytes = 2 * elems * dt if fw else 0  # weight grad re-reads input and output grad
    return Operator(name, kind, layer, (), float(ff * elems), float(fb * elems), float(fw * elems),
                    (reads + writes) * elems * dt + extra_fwd_bytes,
                    (bwd_reads + bwd_writes) * elems * dt + extra_bwd_bytes, wbytes, params, saved,
                    comms=comms)


def _norm(c: _Ctx, name: str, layer: int) -> Operator:
    """LayerNorm/RMSNorm on the (sequence-parallel) residual stream; saves its input 2sbh
    (Korthikanti 2022 Section 4.1), divided by t with sp (Section 4.2.2)."""
    e = c.Tsp * c.m.hidden
    return _elementwise(name, "norm", layer, e, c.m.norm, reads=1, writes=1, bwd_reads=2, bwd_writes=1,
                        dt=c.dt, saved=c.dt * e, params=c.m.norm_params())


def _residual(c: _Ctx, name: str, layer: int) -> Operator:
    """Bias + dropout + residual add; saves the 1-byte dropout mask sbh (Korthikanti 2022 4.1)."""
    e = c.Tsp * c.m.hidden
    mask = MASK_BYTES * e if c.m.dropout else 0
    return _elementwise(name, "elementwise", layer, e, "residual", reads=2, writes=1, bwd_reads=1,
                        bwd_writes=1, dt=c.dt, saved=mask, extra_fwd_bytes=mask, extra_bwd_bytes=mask)


def _column_comms(c: _Ctx, tokens: int) -> tuple:
    """Column-parallel GEMM (qkv, mlp_up, lm_head): Megatron 'f' operator (Shoeybi 2019 Fig. 3):
    fwd identity, bwd all-reduce of the input grad. With sp (Korthikanti 2022 Section 4.2.2):
    fwd all-gather before, bwd all-gather of the saved sharded input + reduce-scatter of dX.
    The backward ones may overlap the dgrad / wgrad GEMMs (``Collective.overlaps``)."""
    if c.tp == 1:
        return ()
    nbytes = c.dt * tokens * c.m.hidden
    if c.sp:
        return (Collective("tp", "all-gather", "fwd", "before", nbytes),
                Collective("tp", "all-gather", "bwd", "before", nbytes, overlaps="dgrad"),
                Collective("tp", "reduce-scatter", "bwd", "after", nbytes, overlaps="wgrad"))
    return (Collective("tp", "all-reduce", "bwd", "after", nbytes, overlaps="wgrad"),)


def _row_comms(c: _Ctx, tokens: int) -> tuple:
    """Row-parallel GEMM (attn_out, mlp_down): Megatron 'g' operator: fwd all-reduce of the
    output, bwd identity. With sp: fwd reduce-scatter after, bwd all-gather of dY before."""
    if c.tp == 1:
        return ()
    nbytes = c.dt * tokens * c.m.hidden
    if c.sp:
        return (Collective("tp", "reduce-scatter", "fwd", "after", nbytes),
                Collective("tp", "all-gather", "bwd", "before", nbytes))
    return (Collective("tp", "all-reduce", "fwd", "after", nbytes),)


def _qk_projections(c: _Ctx, layer: int) -> tuple:
    """Q/K/V projection operators, their column-parallel output width per GPU, and the bytes of
    Q, K and V the attention core reads and saves. Standard: one fused column-parallel GEMM.
    MLA (DeepSeek-V2 Section 2.1, DeepSeek-V3 inference/model.py): the down-projections W^DQ,
    W^DKV are replicated on every TP rank (plain Linear), the up-projections W^UQ, W^UKV are
    column-parallel over heads; the latents pass an RMSNorm (folded into the up-projection)."""
    m, dt, tp = c.m, c.dt, c.tp
    h, d, dv = m.hidden, m.head_dim, m.v_head_dim
    at, gt = m.heads // tp, m.kv_heads // tp
    qkn = 2 * d if m.qk_norm else 0
    if m.attention != "mla":
        qkv_n = (at + 2 * gt) * d
        qkv = gemm_operator("qkv", layer, c.T, qkv_n, h, dt,
                    params=h * qkv_n + (qkv_n if m.qkv_bias else 0) + qkn,
                    saved=dt * c.Tsp * h,  # input 2sbh, sharded with sp (Korthikanti 2022 Sec. 4.2.2)
                    comms=_column_comms(c, c.T))
        if m.position == "rope" and (not m.attention_chunk or m.is_local_attention_layer(layer)):
            qkv = dataclasses.replace(qkv, copy_bytes=rope_bytes(c.T, at, gt, d, c.sq, dt), copy_kernels=2,
                                      copy_host_counted=False)  # host: see Operator.copy_host_counted
        return [qkv], dt * c.T * qkv_n, dt * c.b * c.s * 2 * gt * d
    qr, kr, rope = m.q_lora_rank, m.kv_lora_rank, m.qk_rope_head_dim
    ops = []
    gather = _column_comms(c, c.T)
    # the sequence-parallel input is gathered once and feeds both down-projections; their input
    # gradients are complete on every rank (replicated weights), so no reduce-scatter follows
    fwd_gather = tuple(x for x in gather if x.phase == "fwd")
    bwd_gather = tuple(x for x in gather if x.phase == "bwd" and x.op == "all-gather")
    latent_ar = ((Collective("tp", "all-reduce", "bwd", "after", dt * c.T * ((qr or 0) + kr), overlaps="wgrad"),)
                 if tp > 1 else ())  # column-parallel up-projections: dgrad partial sums over tp
    q_bytes = dt * c.T * at * d
    k_bytes = dt * c.T * at * d                           # per-head keys: nope part + shared rope part
    v_bytes = dt * c.T * at * dv
    kv_down = gemm_operator("kv_down", layer, c.T, kr + rope, h, dt, params=h * (kr + rope),
                    saved=dt * c.Tsp * h, comms=fwd_gather + bwd_gather)
    ops.append(kv_down)
    # The Q, K, V the attention core keeps are the up-projections' outputs: counted on those ops, so
    # that selective recomputation drops them and re-runs the up-projections before the backward
    # (DeepSeek-V3 Section 3.2.3: "recompute ... MLA up-projections during back-propagation")
    up = lambda o, out: dataclasses.replace(o, saved_activation_bytes=o.saved_activation_bytes + out,
                                             selective_recompute_bytes=out)
    if qr:
        ops.append(gemm_operator("q_down", layer, c.T, qr, h, dt, params=h * qr, saved=0))
        ops.append(up(gemm_operator("q_up", layer, c.T, at * d, qr, dt, params=qr * at * d + qr + qkn // 2,
                            saved=dt * c.T * qr), q_bytes))
    else:
        ops.append(up(gemm_operator("q_proj", layer, c.T, at * d, h, dt, params=h * at * d + qkn // 2, saved=0),
                      q_bytes))
    ops.append(up(gemm_operator("kv_up", layer, c.T, at * (d - rope + dv), kr, dt,
                        params=kr * at * (d - rope + dv) + kr + qkn // 2, saved=dt * c.T * kr, comms=latent_ar),
                  k_bytes + v_bytes))
    kv_full = dt * c.b * c.s * at * (d + dv)
    return ops, q_bytes + k_bytes + v_bytes, kv_full


def _attention_ops(c: _Ctx, layer: int) -> list:
    m, dt, tp = c.m, c.dt, c.tp
    h, d, dv = m.hidden, m.head_dim, m.v_head_dim
    at = m.heads // tp
    proj, qkv_bytes, kv_full = _qk_projections(c, layer)
    mla = m.attention == "mla"
    # Attention core. pairs = (query, key) dot products per (sequence, head) on this GPU; with cp
    # the causal work is load-balanced over ranks (Megatron CP zig-zag split: each rank holds chunks
    # i and 2cp-1-i), so total / cp. Without balancing the CP rank holding the last s/cp queries
    # scores the most pairs and sets the pace (Brandon 2023 Striped Attention Section 3: (2cp-1)/cp x).
    local = m.is_local_attention_layer(layer)
    window = m.sliding_window if local else 0
    chunk = m.attention_chunk if local else 0
    pairs = attention_pairs(c.s, c.causal_halved, window, chunk) / c.cp
    if c.cp > 1 and not c.cp_balance and c.causal_halved:
        q = c.s // c.cp
        pairs = attention_pairs(c.s, True, window, chunk) - attention_pairs(c.s - q, True, window, chunk)
    fwd = 2.0 * c.b * at * (d + dv) * pairs               # QK^T + PV (Narayanan 2021 eq. 3: 4 b a d)
    bwd = (FLASH_BWD_FACTOR if c.flash else UNFUSED_BWD_FACTOR) * fwd
    # qkv_bytes: Q, K, V 4sbh/t + 2sbh/t with MHA (Korthikanti 4.1); kv_full: K and V of the whole
    # sequence (cp gather)
    o_bytes = dt * c.T * at * dv
    if c.flash:
        internals = LSE_BYTES * c.b * at * c.sq           # softmax stats replace the s^2 tensors
        score_io_f = score_io_b = 0
    else:
        A = c.b * at * c.sq * c.s                         # attention scores on this GPU
        # softmax output 2as^2b + dropout mask as^2b + dropout output 2as^2b (Korthikanti 4.1)
        internals = (dt + (dt + MASK_BYTES) if m.dropout else dt) * A
        # kernel by kernel (Megatron-LM's causal fused softmax, dropout, QK^T / PV GEMMs; ALiBi's bias
        # copied into the scores as baddbmm's input)
        per_f, per_b = unfused_score_bytes(dt, m.dropout, MASK_BYTES, alibi=m.position == "alibi")
        score_io_f, score_io_b = A * per_f, A * per_b
    if c.cp == 1:
        cp_comms = ()
    elif c.cp_comm == "a2a":
        # Ulysses: Q, K, V (this rank's sequence shard, all its heads) -> full sequence, heads / cp;
        # the output back; the backward mirrors both. Send buffer = the local tensor.
        kv_full = kv_full // c.cp
        cp_comms = (Collective("cp", "all-to-all", "fwd", "before", qkv_bytes),
                    Collective("cp", "all-to-all", "fwd", "after", o_bytes),
                    Collective("cp", "all-to-all", "bwd", "before", o_bytes),
                    Collective("cp", "all-to-all", "bwd", "after", qkv_bytes))
    else:
        # all-gather K, V (and again in backward), reduce-scatter dK, dV to their owners; 'ring' moves
        # the same bytes in cp-1 p2p steps that overlap the attention of the chunk at hand
        ov = "attn" if c.cp_comm == "ring" else ""
        cp_comms = (Collective("cp", "all-gather", "fwd", "before", kv_full, overlaps=ov),
                    Collective("cp", "all-gather", "bwd", "before", kv_full, overlaps=ov),
                    Collective("cp", "reduce-scatter", "bwd", "after", kv_full, overlaps=ov))
    core = Operator(
        "attn_core", "attention", layer,
        (GemmShape(c.sq, c.s, d, c.b * at), GemmShape(c.sq, dv, c.s, c.b * at)),
        fwd, bwd, 0.0,
        fwd_bytes=dt * c.T * at * d + kv_full + o_bytes + (LSE_BYTES * c.b * at * c.sq if c.flash else 0)
        + score_io_f,
        bwd_input_bytes=2 * (dt * c.T * at * d + kv_full + o_bytes) + score_io_b,
        # MLA: Q, K, V are saved by the up-projections (_qk_projections); with FlashAttention the core
        # keeps only its softmax statistics and selective recomputation leaves it alone
        saved_activation_bytes=(0 if mla else qkv_bytes) + internals,
        selective_recompute_bytes=0 if (mla and c.flash) else internals,
        comms=cp_comms, attn_shape=kernel_attention_shape(c.s, c.cp, c.cp_comm, c.causal_halved, d, dv, window or chunk))
    out = gemm_operator("attn_out", layer, c.T, h, at * dv, dt,
                params=at * dv * h + (h if m.bias else 0),
                saved=o_bytes,                            # its input, 2sbh/t (Korthikanti 4.1)
                comms=_row_comms(c, c.T))
    return proj + [core, out]


def _dense_mlp_ops(c: _Ctx, layer: int) -> list:
    m, dt = c.m, c.dt
    h, ft = m.hidden, m.ffn // c.tp
    gated = m.gated_mlp
    n_up = 2 * ft if gated else ft                        # SwiGLU/GEGLU: gate and up fused (Shazeer 2020)
    up = gemm_operator("mlp_gate_up" if gated else "mlp_up", layer, c.T, n_up, h, dt,
               params=h * n_up + (n_up if m.bias else 0),
               saved=dt * c.Tsp * h,                      # input 2sbh (Korthikanti 2022 4.1)
               comms=_column_comms(c, c.T))
    e = c.T * ft                                          # activation output elements
    act = _elementwise("mlp_act", "elementwise", layer, e, m.mlp, reads=2 if gated else 1, writes=1,
                       bwd_reads=3 if gated else 2, bwd_writes=2 if gated else 1, dt=dt,
                       saved=dt * c.T * n_up)             # GeLU input 8sbh/t (Korthikanti 4.1)
    down = gemm_operator("mlp_down", layer, c.T, h, ft, dt,
                 params=ft * h + (h if m.bias else 0),
                 saved=dt * e,                            # input 8sbh/t (Korthikanti 2022 4.1)
                 comms=_row_comms(c, c.T))
    return [up, act, down]


def _moe_ops(c: _Ctx, layer: int) -> list:
    """Router + routed experts (+ shared experts). Balanced routing: each GPU's E/ep local experts
    receive T * top_k tokens in expectation (Lepikhin 2020 GShard Sec. 2; Fedus 2021 Switch). With
    ``moe_load`` > 1 these are the numbers of the busiest expert-parallel rank, which receives
    moe_load x the mean: its expert GEMMs, permutations, saved activations and the all-to-all volume
    it receives scale by moe_load; the all-to-all and the next layer wait for it (GShard Sec. 2.2)."""
    m, dt = c.m, c.dt
    # expert tensor parallel: tp (Megatron-core default) or etp with parallel folding, whose group
    # ('etp') all-gathers the tokens its ranks received (MoEAlltoAllTokenDispatcher) before the experts
    tp, tgrp = (c.etp, "etp") if c.etp else (c.tp, "tp")
    h, E, k = m.hidden, m.experts, m.top_k
    mats = 3 if m.gated_mlp else 2
    fe = m.expert_ffn // tp
    e_loc = E // c.ep
    router = gemm_operator("moe_router", layer, c.Tsp, E, h, dt, kind="router", params=m.router_params(),
                   saved=dt * c.Tsp * h + 4 * c.Tsp * E)  # input + fp32 routing probabilities
    Te = math.ceil(c.Tsp * tp * k * c.moe_load)           # token copies processed by local experts
    per_expert = math.ceil(Te / e_loc)
    up = GemmShape(per_expert, (mats - 1) * fe, h, e_loc)
    down = GemmShape(per_expert, h, fe, e_loc)
    f = 2.0 * Te * h * fe * mats                          # top_k x expert FFN per token, /tp
    act_f, act_b, _ = _EW_FLOPS[m.mlp]
    gemm_io = dt * Te * (h + (mats - 1) * fe) + dt * e_loc * h * (mats - 1) * fe \
        + dt * Te * (fe + h) + dt * e_loc * fe * h
    act_io = dt * Te * fe * mats
    # the token dispatcher's collectives and permutations (options.moe_dispatcher: taskgraph/moe_dispatchers.py)
    disp = MOE_DISPATCHERS[c.moe_dispatcher](MoeDispatchShape(
        c.Tsp, Te, math.ceil(c.Tsp * k * c.moe_load), h, E, k, dt, tp, tgrp, c.ep, e_loc))
    bias = ((mats - 1) * fe + h) if m.bias else 0
    experts = Operator(
        "moe_experts", "gemm", layer, (up, down),
        f + act_f * Te * fe, f + act_b * Te * fe, f,
        fwd_bytes=gemm_io + act_io, bwd_input_bytes=gemm_io + act_io,
        bwd_weight_bytes=gemm_io, copy_bytes=disp.copy_bytes, copy_kernels=disp.copy_kernels,
        params=e_loc * (mats * h * fe + bias),
        # permuted input + activation input(s) + down-proj input (Korthikanti 4.1, per token copy)
        saved_activation_bytes=dt * Te * (h + mats * fe), comms=tuple(Collective(*r[:5], copies=r[5]) for r in disp.comms))
    ops = [router, experts]
    if m.shared_experts:    # shared experts are dense MLPs: the attention TP group splits them
        fs = m.shared_experts * (m.expert_ffn // c.tp)
        sf = 2.0 * c.T * h * fs * mats
        io = dt * c.T * (h + mats * fs) + dt * mats * h * fs + dt * c.T * h
        ops.append(Operator(
            "moe_shared_experts", "gemm", layer,
            (GemmShape(c.T, (mats - 1) * fs, h), GemmShape(c.T, h, fs)),
            sf + act_f * c.T * fs, sf + act_b * c.T * fs, sf, io, io, io,
            params=m.shared_experts * (mats * h * (m.expert_ffn // c.tp) + bias),
            saved_activation_bytes=dt * c.Tsp * h + dt * c.T * mats * fs,
            comms=_column_comms(c, c.T) + _row_comms(c, c.T)))
    return ops


# ---------------------------------------------------------------------- public API
def layer_operators(model: ModelSpec, *, micro_batch: int, seq_len: int, tp: int = 1,
                    sp: bool = False, cp: int = 1, ep: int = 1, dtype_bytes: int = 2,
                    flash_attention: bool = True, layer_index: int = 0,
                    causal_halved: bool | None = None, moe_load: float | MoeRouting = 1.0, cp_comm: str = "allgather",
                    cp_balance: bool = True, etp: int | None = None, moe_dispatcher: str = "alltoall",
                    lora=None) -> list:
    """Operators of decoder layer ``layer_index`` on one GPU, in forward order (``lora``: a
    strategies.lora_spec.LoraSpec, taskgraph/lora.py).

    ``causal_halved``: count only the unmasked s(s+1)/2 attention pairs; default (None) = what
    the kernel executes: True with flash attention, False for the unfused kernel.
    ``moe_load``: routed tokens of the busiest expert-parallel rank over the mean (MoE layers), or a
    :class:`MoeRouting` whose expected load :func:`routed_load` derives.
    """
    c = _context(model, micro_batch, seq_len, tp, sp, cp, ep, dtype_bytes, flash_attention,
                 causal_halved, moe_load, cp_comm, cp_balance, etp, moe_dispatcher)
    return _lora(c, _layer_ops(c, layer_index), lora)


def _lora(c: _Ctx, ops: list, lora) -> list:
    return apply_lora(ops, lora, flash=c.flash, tokens=c.T, tokens_sp=c.Tsp, tp=c.tp, sp=c.sp, dt=c.dt,
                      operator=Operator, gemm=GemmShape, coll=Collective)


def _layer_ops(c: _Ctx, layer_index: int, prefix: str = "", layer: int | None = None) -> list:
    """Ops of decoder layer ``layer_index`` (``prefix``/``layer`` relabel an MTP module's layer)."""
    model = c.m
    li = layer_index
    ops = [_norm(c, "input_norm", li)]
    attn = _attention_ops(c, li)
    if model.qk_norm:  # RMSNorm over head_dim on Q and K (Qwen3 / Gemma 3): read + write both
        at, gt = model.heads // c.tp, model.kv_heads // c.tp
        e = c.T * (at + gt) * model.head_dim
        attn.insert(len(attn) - 2, _elementwise("qk_norm", "norm", li, e, "rmsnorm", reads=1, writes=1,
                                                bwd_reads=2, bwd_writes=1, dt=c.dt, saved=c.dt * e))
    ops += attn
    if model.sandwich_norm:  # Gemma 2/3 post-attention norm before the residual add
        ops.append(_norm(c, "post_attn_out_norm", li))
    ops += [_residual(c, "attn_residual", li), _norm(c, "post_attn_norm", li)]
    ops += _moe_ops(c, li) if model.is_moe_layer(li) else _dense_mlp_ops(c, li)
    if model.sandwich_norm:
        ops.append(_norm(c, "post_mlp_norm", li))
    ops.append(_residual(c, "mlp_residual", li))
    if prefix or layer is not None:
        ops = [dataclasses.replace(o, name=prefix + o.name, layer=li if layer is None else layer) for o in ops]
    return ops


def embedding_operators(model: ModelSpec, *, micro_batch: int, seq_len: int, tp: int = 1,
                        sp: bool = False, cp: int = 1, dtype_bytes: int = 2, lora=None) -> list:
    """Vocab-parallel word embedding (+ learned positions, dropout) and BLOOM's embedding norm."""
    if model.position == "learned" and seq_len > model.max_seq:
        raise ConfigError(f"seq_len={seq_len} exceeds model.max_seq={model.max_seq} (learned position "
                          f"embeddings); use seq_len <= {model.max_seq} or raise model.max_seq")
    c = _context(model, micro_batch, seq_len, tp, sp, cp, 1, dtype_bytes, True, None)
    h, dt = model.hidden, dtype_bytes
    vt = math.ceil(model.vocab / tp)          # Megatron pads V to a multiple of 128*tp
    e, esp = c.T * h, c.Tsp * h
    mask = MASK_BYTES * esp if model.dropout else 0  # embedding dropout mask (Korthikanti 2022 4.3)
    comms: tuple = ()
    if tp > 1:  # VocabParallelEmbedding: partial lookups summed over tp (Shoeybi 2019 Section 3)
        comms = ((Collective("tp", "reduce-scatter", "fwd", "after", dt * e),
                  Collective("tp", "all-gather", "bwd", "before", dt * e)) if sp
                 else (Collective("tp", "all-reduce", "fwd", "after", dt * e),))
    pos = model.position == "learned"
    emb = Operator(
        "embedding", "embedding", -1, (), float(e * (2 if pos else 1)), 0.0, float(e * (2 if pos else 1)),
        fwd_bytes=dt * e * (3 if pos else 2) + mask, bwd_input_bytes=0,
        bwd_weight_bytes=dt * e * (3 if pos else 2),  # read dY, read-modify-write gradient rows
        params=vt * h + (model.max_seq * h if pos else 0), saved_activation_bytes=mask, comms=comms)
    ops = [emb]
    if model.embedding_norm:
        ops.append(_norm(c, "embedding_norm", -1))
    return _lora(c, ops, lora)


def head_operators(model: ModelSpec, *, micro_batch: int, seq_len: int, tp: int = 1,
                   sp: bool = False, cp: int = 1, dtype_bytes: int = 2, ep: int = 1,
                   flash_attention: bool = True, moe_load: float | MoeRouting = 1.0, cp_comm: str = "allgather",
                   cp_balance: bool = True, etp: int | None = None, moe_dispatcher: str = "alltoall",
                   lora=None) -> list:
    """Final norm, vocab-parallel LM head (+ Gemma's logit soft-capping) and vocab-parallel
    cross-entropy loss, then the multi-token-prediction modules (DeepSeek-V3 Section 2.2) if any,
    parallelized like the decoder layers (``cp_comm``, ``cp_balance``, ``etp``: see layer_operators)."""
    c = _context(model, micro_batch, seq_len, tp, sp, cp, 1, dtype_bytes, True, None)
    ops = _lm_head_ops(c, "")
    for k in range(model.mtp_layers):
        ops += _mtp_ops(model, k, micro_batch=micro_batch, seq_len=seq_len, tp=tp, sp=sp, cp=cp,
                        dtype_bytes=dtype_bytes, ep=ep, flash_attention=flash_attention, moe_load=moe_load,
                        cp_comm=cp_comm, cp_balance=cp_balance, etp=etp, moe_dispatcher=moe_dispatcher)
    return _lora(c, ops, lora)


def _mtp_ops(model: ModelSpec, k: int, *, ep: int, flash_attention: bool, moe_load: float | MoeRouting = 1.0,
             cp_comm: str = "allgather", cp_balance: bool = True, etp: int | None = None, **kw) -> list:
    """MTP module k (DeepSeek-V3 Section 2.2, eqs. 21-23): RMSNorm of the previous depth's hidden
    state and of the shifted token embedding (the embedding lookup is shared: its cost is one more
    gather, folded in here as the norm's traffic), the h x 2h projection M_k (replicated over tp like
    a column-parallel GEMM with its sequence-parallel gather), one transformer layer like the main
    model's last -- its experts on the same expert-TP group and its attention under the same CP
    exchange (Megatron-LM builds the MTP block from the decoder's layer spec:
    megatron/core/transformer/multi_token_prediction.py, MultiTokenPredictionLayer) -- and the shared
    output head and loss of depth k + 1."""
    c = _context(model, kw["micro_batch"], kw["seq_len"], kw["tp"], kw["sp"], kw["cp"], ep,
                 kw["dtype_bytes"], flash_attention, None, moe_load, cp_comm, cp_balance, etp,
                 kw.get("moe_dispatcher", "alltoall"))
    p = f"mtp{k}_"
    h, dt = model.hidden, c.dt
    ops = [_norm(c, p + "hnorm", -2), _norm(c, p + "enorm", -2)]
    proj = gemm_operator(p + "eh_proj", -2, c.T, h // c.tp, 2 * h, dt, params=2 * h * h // c.tp,
                 saved=2 * dt * c.Tsp * h, comms=_column_comms(c, c.T) + _row_comms(c, c.T))
    ops.append(dataclasses.replace(proj, comms=tuple(x for x in proj.comms if x.op != "all-reduce")))
    ops += _layer_ops(c, model.layers - 1, prefix=p, layer=-2)
    return ops + _lm_head_ops(c, p, shared=True)


def _lm_head_ops(c: _Ctx, prefix: str, shared: bool = False) -> list:
    model, tp = c.m, c.tp
    h, dt = model.hidden, c.dt
    vt = math.ceil(model.vocab / tp)
    # With tied embeddings the weight lives in the embedding (a PP last stage keeps a copy).
    lm = gemm_operator(prefix + "lm_head", -2, c.T, vt, h, dt, params=0 if model.tied_embeddings or shared else vt * h,
               saved=dt * c.Tsp * h,            # input 2sbh/t with sp (Korthikanti 2022 Sec. 4.3)
               comms=_column_comms(c, c.T))
    logits = c.T * vt
    loss_comms = tuple(Collective("tp", "all-reduce", "fwd", "after", 4 * c.T)
                       for _ in range(3)) if tp > 1 else ()  # max, target logit, sum-exp (Megatron)
    ce_fwd, ce_bwd = cross_entropy_bytes(dt)   # fused (a stack's own: taskgraph/stack_costs.py op_as_run)
    loss = _elementwise(prefix + "loss", "loss", -2, logits, "loss", reads=0, writes=0, bwd_reads=0,
                        bwd_writes=0, dt=dt, saved=LOGIT_BYTES * logits,  # 4sbv/t (Korthikanti 4.3)
                        extra_fwd_bytes=logits * ce_fwd, extra_bwd_bytes=logits * ce_bwd, comms=loss_comms)
    ops = [_norm(c, prefix + "final_norm", -2), lm]
    if model.logit_softcap:  # c tanh(x / c) over the logits: one more read + write (Gemma 2 Section 2)
        ops.append(_elementwise(prefix + "logit_softcap", "elementwise", -2, logits, "softcap", reads=1, writes=1,
                                bwd_reads=2, bwd_writes=1, dt=dt, saved=dt * logits))
    return ops + [loss]


def model_operators(model: ModelSpec, *, micro_batch: int, seq_len: int, tp: int = 1, sp: bool = False,
                    cp: int = 1, ep: int = 1, dtype_bytes: int = 2, flash_attention: bool = True,
                    causal_halved: bool | None = None) -> list:
    """Embedding + every decoder layer + head, for one micro-batch on one GPU (all layers)."""
    common = dict(micro_batch=micro_batch, seq_len=seq_len, tp=tp, sp=sp, cp=cp, dtype_bytes=dtype_bytes)
    ops = embedding_operators(model, **common)
    for i in range(model.layers):
        ops += layer_operators(model, **common, ep=ep, flash_attention=flash_attention,
                               causal_halved=causal_halved, layer_index=i)
    return ops + head_operators(model, **common)


_LAYER_EDGES = [("input_norm", "qkv"), ("qkv", "attn_core"), ("attn_core", "attn_out"),
                ("attn_out", "attn_residual"), ("attn_residual", "post_attn_norm"),
                ("attn_residual", "mlp_residual")]  # residual skip connection


def operator_graph(model: ModelSpec, *, micro_batch: int, seq_len: int, tp: int = 1, sp: bool = False,
                   cp: int = 1, ep: int = 1, dtype_bytes: int = 2, flash_attention: bool = True,
                   layer_index: int = 0, causal_halved: bool | None = None,
                   include_embedding: bool = False, include_head: bool = False) -> nx.DiGraph:
    """Data-flow DiGraph of one layer (arguments as layer_operators); node = op name, attr 'op'.

    The layer input feeds input_norm and attn_residual (skip); optionally prepend the embedding
    and append the head so the graph is a whole single-layer model.
    """
    common = dict(micro_batch=micro_batch, seq_len=seq_len, tp=tp, sp=sp, cp=cp, dtype_bytes=dtype_bytes)
    ops = layer_operators(model, **common, ep=ep, flash_attention=flash_attention,
                          layer_index=layer_index, causal_halved=causal_halved)
    names = {o.name for o in ops}
    edges = list(_LAYER_EDGES)
    if "moe_experts" in names:
        edges += [("post_attn_norm", "moe_router"), ("post_attn_norm", "moe_experts"),
                  ("moe_router", "moe_experts"), ("moe_experts", "mlp_residual")]
        if "moe_shared_experts" in names:
            edges += [("post_attn_norm", "moe_shared_experts"), ("moe_shared_experts", "mlp_residual")]
    else:
        up = "mlp_gate_up" if "mlp_gate_up" in names else "mlp_up"
        edges += [("post_attn_norm", up), (up, "mlp_act"), ("mlp_act", "mlp_down"),
                  ("mlp_down", "mlp_residual")]
    if include_embedding:
        emb = embedding_operators(model, **common)
        ops = emb + ops
        edges += [(a.name, b.name) for a, b in itertools.pairwise(emb)]
        edges += [(emb[-1].name, "input_norm"), (emb[-1].name, "attn_residual")]
    if include_head:
        head = head_operators(model, **common)
        ops = ops + head
        edges += [("mlp_residual", "final_norm"), ("final_norm", "lm_head"), ("lm_head", "loss")]
    import networkx as nx  # lazily: only the operator-graph view needs it, not the simulate path
    g = nx.DiGraph(model=model.name, layer=layer_index)
    for o in ops:
        g.add_node(o.name, op=o)
    g.add_edges_from(edges)
    return g


def activation_bytes_per_layer(model: ModelSpec, micro_batch: int, seq_len: int, tp: int = 1,
                               sp: bool = False, recompute: str = "none", flash_attention: bool = True,
                               *, cp: int = 1, ep: int = 1, dtype_bytes: int = 2,
                               layer_index: int = 0, moe_load: float | MoeRouting = 1.0, cp_comm: str = "allgather",
                               etp: int | None = None, lora=None) -> int:
    """Bytes one layer keeps for backward per micro-batch on one GPU (Korthikanti 2022 Table 2).

    'none': sum of saved_activation_bytes; 'selective': minus the attention-core internals
    (Section 5); 'full': only the layer input 2sbh (divided by t with sp).
    """
    if recompute not in RECOMPUTE:
        raise ConfigError(f"recompute = {recompute!r} is not one of {', '.join(RECOMPUTE)}"
                          f"{did_you_mean(recompute, RECOMPUTE)}")
    ops = layer_operators(model, micro_batch=micro_batch, seq_len=seq_len, tp=tp, sp=sp, cp=cp, ep=ep,
                          dtype_bytes=dtype_bytes, flash_attention=flash_attention,
                          layer_index=layer_index, moe_load=moe_load, cp_comm=cp_comm, etp=etp, lora=lora)
    if recompute == "full":
        return dtype_bytes * micro_batch * (seq_len // cp) * model.hidden // (tp if sp else 1)
    drop = recompute == "selective"
    return sum(o.saved_activation_bytes - (o.selective_recompute_bytes if drop else 0) for o in ops)


def model_flops_per_token(model: ModelSpec, seq_len: int, convention: str = "megatron") -> float:
    """Training (fwd + bwd) model FLOPs per token, for MFU; attention counted without recompute.

    'megatron': 6 x (active matmul weights, LM head included) + 12 l s (a d): reduces to
        72 l h^2 (1 + s/(6h) + V/(12 l h)) per token for GPT (Narayanan 2021 eq. 3 without
        recomputation, as used by Korthikanti 2022 Section 6); GQA/SwiGLU/MoE generalised as in
        Megatron-LM num_floating_point_operations. Full (non-causal) s^2 attention.
    'palm': 6 N + 12 l (a d) s with N = all active parameters (PaLM, Chowdhery 2022 Appendix B).
    'kaplan': 6 N_nonembedding + 6 l s (a d): Kaplan 2020 Table 1 (C_fwd = 2N + 2 l n_ctx d_attn,
        causal average context), training = 3 x forward (Kaplan 2020 Section 2.1).
    """
    if convention not in FLOP_CONVENTIONS:
        raise ConfigError(f"convention = {convention!r} is not one of {', '.join(FLOP_CONVENTIONS)}"
                          f"{did_you_mean(convention, FLOP_CONVENTIONS)}")
    m = model
    mats = 3 if m.gated_mlp else 2
    h, a, d, dv = m.hidden, m.heads, m.head_dim, m.v_head_dim
    if m.attention == "mla":  # DeepSeek-V2 Section 2.1: down/up projections of queries and keys/values
        qr, kr, rope = m.q_lora_rank, m.kv_lora_rank, m.qk_rope_head_dim
        attn_w = ((h * qr + qr * a * d) if qr else h * a * d) + h * (kr + rope) + kr * a * (d - rope + dv)
    else:
        attn_w = h * (a + 2 * m.kv_heads) * d
    attn_w += a * dv * h
    layer_w = 0
    ctx = 0.0   # sum over layers of the attended context length (full mask for local layers: window)
    for i in range(m.layers):
        w = attn_w
        if m.is_moe_layer(i):
            w += h * m.experts + (m.top_k + m.shared_experts) * mats * h * m.expert_ffn  # router + experts
        else:
            w += mats * h * m.ffn
        layer_w += w
        ctx += min(seq_len, m.sliding_window or m.attention_chunk) if m.is_local_attention_layer(i) else seq_len
    # 12 l s (a d) = 6 l s a (d_qk + d_v) when d_qk = d_v
    attn = 6.0 * ctx * a * (d + dv)
    if convention == "megatron":
        return 6.0 * (layer_w + m.vocab * h) + attn
    if convention == "palm":
        return 6.0 * m.active_param_count() + attn
    return 6.0 * layer_w + attn / 2
