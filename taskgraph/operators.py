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

import math
from dataclasses import dataclass, field

from strategies.config import did_you_mean
from strategies.errors import ConfigError
from taskgraph.model import ModelSpec

KINDS = ("gemm", "attention", "elementwise", "norm", "embedding", "loss", "router",
         "collective")  # "collective": reserved for passes that turn comms into graph nodes
COLLECTIVE_OPS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all")
RECOMPUTE = ("none", "selective", "full")
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
    """Process group: 'tp', 'cp' or 'ep'."""
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
    """'dgrad' / 'wgrad': the backward GEMM this collective can run concurrently with when the
    column-parallel backward is asynchronous (Megatron-LM LinearWithGradAccumulationAndAsyncCommunication:
    the SP all-gather of the saved input overlaps the input-gradient GEMM, the all-reduce or
    reduce-scatter of the input gradient overlaps the weight-gradient GEMM); '' = always blocking."""


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


def _choices(n: int, limit: int = 8) -> str:
    ds = [d for d in range(1, n + 1) if n % d == 0]
    return "{" + ",".join(map(str, ds[:limit])) + (",...}" if len(ds) > limit else "}")


def _context(model: ModelSpec, micro_batch: int, seq_len: int, tp: int, sp: bool, cp: int, ep: int,
             dtype_bytes: int, flash_attention: bool, causal_halved: bool | None) -> _Ctx:
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
    return _Ctx(model, micro_batch, seq_len, sq, T, T // tp if sp else T, tp, sp, cp, ep,
                dtype_bytes, flash_attention, flash_attention if causal_halved is None else causal_halved)


# ---------------------------------------------------------------------- operator builders
def _gemm(name: str, layer: int, m: int, n: int, k: int, dt: int, *, params: int, saved: int,
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


def _attention_ops(c: _Ctx, layer: int) -> list:
    m, dt, tp = c.m, c.dt, c.tp
    h, d = m.hidden, m.head_dim
    at, gt = m.heads // tp, m.kv_heads // tp
    qkv_n = (at + 2 * gt) * d
    qkv = _gemm("qkv", layer, c.T, qkv_n, h, dt,
                params=h * qkv_n + (qkv_n if m.qkv_bias else 0),
                saved=dt * c.Tsp * h,  # input 2sbh, sharded with sp (Korthikanti 2022 Sec. 4.2.2)
                comms=_column_comms(c, c.T))
    # Attention core. pairs = (query, key) dot products per (sequence, head) on this GPU; with cp
    # the causal work is load-balanced over ranks (Megatron CP zig-zag split), so total / cp.
    pairs = (c.s * (c.s + 1) / 2 if c.causal_halved else float(c.s * c.s)) / c.cp
    fwd = 4.0 * c.b * at * d * pairs                      # QK^T + PV (Narayanan 2021 eq. 3)
    bwd = (FLASH_BWD_FACTOR if c.flash else UNFUSED_BWD_FACTOR) * fwd
    qkv_bytes = dt * c.T * qkv_n                          # Q, K, V: 4sbh/t + 2sbh/t (Korthikanti 4.1)
    kv_full = dt * c.b * c.s * 2 * gt * d                 # K and V of the whole sequence (cp gather)
    o_bytes = dt * c.T * at * d
    if c.flash:
        internals = LSE_BYTES * c.b * at * c.sq           # softmax stats replace the s^2 tensors
        score_io_f = score_io_b = 0
    else:
        A = c.b * at * c.sq * c.s                         # attention scores on this GPU
        # softmax output 2as^2b + dropout mask as^2b + dropout output 2as^2b (Korthikanti 4.1)
        internals = (dt + (dt + MASK_BYTES) if m.dropout else dt) * A
        # scores written, softmax r/w, dropout r/w + mask, PV read; backward ~2x (approximate)
        score_io_f = A * (4 * dt + ((2 * dt + MASK_BYTES) if m.dropout else 0))
        score_io_b = 2 * score_io_f
    cp_comms = () if c.cp == 1 else (
        Collective("cp", "all-gather", "fwd", "before", kv_full),     # KV all-gather / ring passes
        Collective("cp", "all-gather", "bwd", "before", kv_full),
        Collective("cp", "reduce-scatter", "bwd", "after", kv_full))  # dK, dV back to their owners
    core = Operator(
        "attn_core", "attention", layer,
        (GemmShape(c.sq, c.s, d, c.b * at), GemmShape(c.sq, d, c.s, c.b * at)),
        fwd, bwd, 0.0,
        fwd_bytes=dt * c.T * at * d + kv_full + o_bytes + (LSE_BYTES * c.b * at * c.sq if c.flash else 0)
        + score_io_f,
        bwd_input_bytes=2 * (dt * c.T * at * d + kv_full + o_bytes) + score_io_b,
        saved_activation_bytes=qkv_bytes + internals, selective_recompute_bytes=internals,
        comms=cp_comms)
    out = _gemm("attn_out", layer, c.T, h, at * d, dt,
                params=at * d * h + (h if m.bias else 0),
                saved=o_bytes,                            # its input, 2sbh/t (Korthikanti 4.1)
                comms=_row_comms(c, c.T))
    return [qkv, core, out]


def _dense_mlp_ops(c: _Ctx, layer: int) -> list:
    m, dt = c.m, c.dt
    h, ft = m.hidden, m.ffn // c.tp
    gated = m.mlp == "swiglu"
    n_up = 2 * ft if gated else ft                        # SwiGLU: gate and up fused (Shazeer 2020)
    up = _gemm("mlp_gate_up" if gated else "mlp_up", layer, c.T, n_up, h, dt,
               params=h * n_up + (n_up if m.bias else 0),
               saved=dt * c.Tsp * h,                      # input 2sbh (Korthikanti 2022 4.1)
               comms=_column_comms(c, c.T))
    e = c.T * ft                                          # activation output elements
    act = _elementwise("mlp_act", "elementwise", layer, e, m.mlp, reads=2 if gated else 1, writes=1,
                       bwd_reads=3 if gated else 2, bwd_writes=2 if gated else 1, dt=dt,
                       saved=dt * c.T * n_up)             # GeLU input 8sbh/t (Korthikanti 4.1)
    down = _gemm("mlp_down", layer, c.T, h, ft, dt,
                 params=ft * h + (h if m.bias else 0),
                 saved=dt * e,                            # input 8sbh/t (Korthikanti 2022 4.1)
                 comms=_row_comms(c, c.T))
    return [up, act, down]


def _moe_ops(c: _Ctx, layer: int) -> list:
    """Router + routed experts (+ shared experts). Balanced routing: each GPU's E/ep local experts
    receive T * top_k tokens in expectation (Lepikhin 2020 GShard Sec. 2; Fedus 2021 Switch)."""
    m, dt, tp = c.m, c.dt, c.tp
    h, E, k = m.hidden, m.experts, m.top_k
    mats = 3 if m.mlp == "swiglu" else 2
    fe = m.expert_ffn // tp                               # expert tensor parallel = tp (Megatron-core)
    e_loc = E // c.ep
    router = _gemm("moe_router", layer, c.Tsp, E, h, dt, kind="router", params=h * E,
                   saved=dt * c.Tsp * h + 4 * c.Tsp * E)  # input + fp32 routing probabilities
    Te = c.T * k                                          # token copies processed by local experts
    per_expert = math.ceil(Te / e_loc)
    up = GemmShape(per_expert, (mats - 1) * fe, h, e_loc)
    down = GemmShape(per_expert, h, fe, e_loc)
    f = 2.0 * Te * h * fe * mats                          # top_k x expert FFN per token, /tp
    act_f, act_b, _ = _EW_FLOPS[m.mlp]
    gemm_io = dt * Te * (h + (mats - 1) * fe) + dt * e_loc * h * (mats - 1) * fe \
        + dt * Te * (fe + h) + dt * e_loc * fe * h
    permute_io = 4 * dt * Te * h                          # permute + unpermute copies
    act_io = dt * Te * fe * mats
    comms: list = []
    a2a = dt * c.Tsp * k * h                              # dispatch / combine send buffer
    ag = dt * Te * h
    if c.ep > 1:
        comms.append(Collective("ep", "all-to-all", "fwd", "before", a2a))
    if tp > 1:
        comms += [Collective("tp", "all-gather", "fwd", "before", ag),
                  Collective("tp", "reduce-scatter", "fwd", "after", ag)]
    if c.ep > 1:
        comms += [Collective("ep", "all-to-all", "fwd", "after", a2a),
                  Collective("ep", "all-to-all", "bwd", "before", a2a)]
    if tp > 1:
        comms += [Collective("tp", "all-gather", "bwd", "before", ag),
                  Collective("tp", "reduce-scatter", "bwd", "after", ag)]
    if c.ep > 1:
        comms.append(Collective("ep", "all-to-all", "bwd", "after", a2a))
    bias = ((mats - 1) * fe + h) if m.bias else 0
    experts = Operator(
        "moe_experts", "gemm", layer, (up, down),
        f + act_f * Te * fe, f + act_b * Te * fe, f,
        fwd_bytes=gemm_io + permute_io + act_io, bwd_input_bytes=gemm_io + permute_io + act_io,
        bwd_weight_bytes=gemm_io,
        params=e_loc * (mats * h * fe + bias),
        # permuted input + activation input(s) + down-proj input (Korthikanti 4.1, per token copy)
        saved_activation_bytes=dt * Te * (h + mats * fe), comms=tuple(comms))
    ops = [router, experts]
    if m.shared_experts:
        fs = m.shared_experts * fe
        sf = 2.0 * c.T * h * fs * mats
        io = dt * c.T * (h + mats * fs) + dt * mats * h * fs + dt * c.T * h
        ops.append(Operator(
            "moe_shared_experts", "gemm", layer,
            (GemmShape(c.T, (mats - 1) * fs, h), GemmShape(c.T, h, fs)),
            sf + act_f * c.T * fs, sf + act_b * c.T * fs, sf, io, io, io,
            params=m.shared_experts * (mats * h * fe + bias),
            saved_activation_bytes=dt * c.Tsp * h + dt * c.T * mats * fs,
            comms=_column_comms(c, c.T) + _row_comms(c, c.T)))
    return ops


# ---------------------------------------------------------------------- public API
def layer_operators(model: ModelSpec, *, micro_batch: int, seq_len: int, tp: int = 1,
                    sp: bool = False, cp: int = 1, ep: int = 1, dtype_bytes: int = 2,
                    flash_attention: bool = True, layer_index: int = 0,
                    causal_halved: bool | None = None) -> list:
    """Operators of decoder layer ``layer_index`` on one GPU, in forward order.

    ``causal_halved``: count only the unmasked s(s+1)/2 attention pairs; default (None) = what
    the kernel executes: True with flash attention, False for the unfused kernel.
    """
    c = _context(model, micro_batch, seq_len, tp, sp, cp, ep, dtype_bytes, flash_attention,
                 causal_halved)
    ops = [_norm(c, "input_norm", layer_index)]
    ops += _attention_ops(c, layer_index)
    ops += [_residual(c, "attn_residual", layer_index), _norm(c, "post_attn_norm", layer_index)]
    ops += _moe_ops(c, layer_index) if model.is_moe_layer(layer_index) else _dense_mlp_ops(c, layer_index)
    ops.append(_residual(c, "mlp_residual", layer_index))
    return ops


def embedding_operators(model: ModelSpec, *, micro_batch: int, seq_len: int, tp: int = 1,
                        sp: bool = False, cp: int = 1, dtype_bytes: int = 2) -> list:
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
    return ops


def head_operators(model: ModelSpec, *, micro_batch: int, seq_len: int, tp: int = 1,
                   sp: bool = False, cp: int = 1, dtype_bytes: int = 2) -> list:
    """Final norm, vocab-parallel LM head and vocab-parallel cross-entropy loss."""
    c = _context(model, micro_batch, seq_len, tp, sp, cp, 1, dtype_bytes, True, None)
    h, dt = model.hidden, dtype_bytes
    vt = math.ceil(model.vocab / tp)
    # With tied embeddings the weight lives in the embedding (a PP last stage keeps a copy).
    lm = _gemm("lm_head", -2, c.T, vt, h, dt, params=0 if model.tied_embeddings else vt * h,
               saved=dt * c.Tsp * h,            # input 2sbh/t with sp (Korthikanti 2022 Sec. 4.3)
               comms=_column_comms(c, c.T))
    logits = c.T * vt
    loss_comms = tuple(Collective("tp", "all-reduce", "fwd", "after", 4 * c.T)
                       for _ in range(3)) if tp > 1 else ()  # max, target logit, sum-exp (Megatron)
    loss = _elementwise("loss", "loss", -2, logits, "loss", reads=0, writes=0, bwd_reads=0,
                        bwd_writes=0, dt=dt, saved=LOGIT_BYTES * logits,  # 4sbv/t (Korthikanti 4.3)
                        extra_fwd_bytes=logits * (dt + 2 * LOGIT_BYTES),
                        extra_bwd_bytes=logits * (LOGIT_BYTES + dt), comms=loss_comms)
    return [_norm(c, "final_norm", -2), lm, loss]


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
                   include_embedding: bool = False, include_head: bool = False) -> "nx.DiGraph":
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
        edges += [(a.name, b.name) for a, b in zip(emb, emb[1:])]
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
                               layer_index: int = 0) -> int:
    """Bytes one layer keeps for backward per micro-batch on one GPU (Korthikanti 2022 Table 2).

    'none': sum of saved_activation_bytes; 'selective': minus the attention-core internals
    (Section 5); 'full': only the layer input 2sbh (divided by t with sp).
    """
    if recompute not in RECOMPUTE:
        raise ConfigError(f"recompute = {recompute!r} is not one of {', '.join(RECOMPUTE)}"
                          f"{did_you_mean(recompute, RECOMPUTE)}")
    ops = layer_operators(model, micro_batch=micro_batch, seq_len=seq_len, tp=tp, sp=sp, cp=cp, ep=ep,
                          dtype_bytes=dtype_bytes, flash_attention=flash_attention,
                          layer_index=layer_index)
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
    ad = m.heads * m.head_dim
    mats = 3 if m.mlp == "swiglu" else 2
    layer_w = 0
    for i in range(m.layers):
        w = m.hidden * (m.heads + 2 * m.kv_heads) * m.head_dim + ad * m.hidden
        if m.is_moe_layer(i):
            w += m.router_params() + (m.top_k + m.shared_experts) * mats * m.hidden * m.expert_ffn
        else:
            w += mats * m.hidden * m.ffn
        layer_w += w
    if convention == "megatron":
        return 6.0 * (layer_w + m.vocab * m.hidden) + 12.0 * m.layers * seq_len * ad
    if convention == "palm":
        return 6.0 * m.active_param_count() + 12.0 * m.layers * ad * seq_len
    return 6.0 * layer_w + 6.0 * m.layers * seq_len * ad
