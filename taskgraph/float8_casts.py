"""torchao Float8Linear's scaling and casting kernels (torchtitan's FP8 training), per GEMM pass.

torchao quantizes each operand of a linear layer's three GEMMs with separate memory-bound kernels
around ``torch._scaled_mm``, which torchao's own kernel-level roofline counts tensor by tensor
(pytorch/ao ``torchao/testing/float8/roofline_utils.py`` ``get_tensor_memory_traffic_ovhd_s``, the
model behind the speedup table of ``torchao/float8/README.md``). For the forward GEMM
Y[M,N] = X[M,K] W[K,N] (input X, weight W, output gradient dY[M,N]), bytes per element:

* ``tensorwise`` (dynamic per-tensor scales): X and dY each take an amax reduction (read 2; a second
  tiny stage) and one cast writing both layouts (read 2, write 1 + 1), 6 bytes; W an amax (2) and a
  cast per pass (read 2, write 1 in forward and again in backward), 8 bytes. The dim-1 copies serve
  the weight gradient, which casts nothing.
* ``rowwise`` (per-row scales): X and dY a cast that also writes the transposed bf16 copy (read 2,
  write 1 + 2) and a cast of that copy (read 2, write 1), 8 bytes, the second before the weight
  gradient; W a cast in forward (3), then in backward a transpose (read 2, write 2) and its cast (3),
  10 bytes.
* With torch.compile (``fuse_with_prev``, the roofline's ``enable_fusion_modeling``) Inductor fuses
  the first read of X and dY into the kernel producing them: 2 bytes less each; W is never fused.

* rowwise's backward GEMMs run without fast accumulation, and torchao then calls the tensor-wise cuBLAS
  kernel and rescales its output by the outer product of the row scales in a separate pass
  (``torchao/float8/float8_python_api.py`` addmm_float8_unwrapped: "The rowwise CUTLASS-based kernel
  is so slow without fast-accum that we'd rather use the tensorwise cuBLAS-based kernel and do the
  scaling manually afterwards"; pytorch/ao#1325): read 2 and write 2 bytes per element of dX (M x K)
  and of dW (K x N), one launch each. The forward's fast-accumulating row-wise CUTLASS kernel is priced
  at the tensor-wise rate: pytorch/pytorch#147971 measures most shapes at 90-100 % of it, with a tail
  to 50 %, too spread for one factor.

Which pass pays what (the kernels run where their GEMM needs their output): forward X's amax and
casts and W's first cast; input gradient dY's and W's backward casts; weight gradient rowwise's
second casts of X and dY. Kernels: one launch per kernel listed (the amax's second stage included).
"""
from __future__ import annotations

#: recipe -> pass -> ((X bytes, dY bytes, W bytes) per element unfused, kernels (X, dY, W))
TORCHAO_CASTS = {
    "tensorwise": {"fwd": ((6, 0, 5), (3, 0, 3)), "bwd_input": ((0, 6, 3), (0, 3, 1)),
                   "bwd_weight": ((0, 0, 0), (0, 0, 0))},
    "rowwise": {"fwd": ((5, 0, 3), (1, 0, 1)), "bwd_input": ((4, 5, 7), (1, 1, 2)),
                "bwd_weight": ((3, 3, 4), (1, 1, 1))},
}
#: bytes and launches Inductor's fusion saves on X's and dY's first read (the amax pass for tensorwise)
FUSED_SAVING = {"tensorwise": (2, 1), "rowwise": (2, 0)}


def torchao_cast_cost(gemms, pass_: str, recipe: str, fused: bool) -> tuple[float, int]:
    """(HBM bytes, kernel launches) of torchao's casts before ``pass_`` of a linear layer whose forward
    GEMMs are ``gemms`` (GemmShape m, n, k, batch), for ``recipe`` (module docstring).

    >>> from taskgraph.operators import GemmShape
    >>> torchao_cast_cost([GemmShape(4, 8, 2)], "fwd", "rowwise", False)   # X 4x2 at 5 B, W 2x8 at 3 B
    (88.0, 2)
    """
    (bx, bdy, bw), (kx, kdy, kw) = TORCHAO_CASTS[recipe][pass_]
    save_b, save_k = FUSED_SAVING[recipe] if fused else (0, 0)
    total, kernels = 0.0, 0
    for g in gemms:
        x, dy, w = g.m * g.k * g.batch, g.m * g.n * g.batch, g.k * g.n * g.batch
        if bx:
            total += (bx - (save_b if pass_ == "fwd" else 0)) * x
            kernels += kx - (save_k if pass_ == "fwd" else 0)
        if bdy:
            total += (bdy - (save_b if pass_ == "bwd_input" else 0)) * dy
            kernels += kdy - (save_k if pass_ == "bwd_input" else 0)
        total += bw * w
        kernels += kw
    return float(total), kernels
