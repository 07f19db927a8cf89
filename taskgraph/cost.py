"""Compute-time cost model: a roofline with shape-dependent GEMM efficiency, plus a measured
profile table that overrides it.

time(op, pass) = max(FLOPs / (peak x efficiency), bytes / (HBM bandwidth x efficiency)) + launch
(Williams, Waterman, Patterson 2009, "Roofline", eq. 1). The constants live in the GPU catalog
(``topologies/data/gpus.yaml``, ``efficiency`` block), not here.

Weight-gradient GEMMs accumulate into the persistent main-gradient buffer, reading and writing it once
per micro-batch (Megatron-LM gradient_accumulation_fusion: the wgrad GEMM runs with beta = 1 into
``weight.main_grad``, megatron/core/tensor_parallel/layers.py,
LinearWithGradAccumulationAndAsyncCommunication.backward). That traffic sits in the GEMM epilogue
and scales with the weight size, not with the micro-batch's tokens. On GPUs whose GEMM kernels run the
epilogue after the main loop (Ampere sm80 CUTLASS 2.x-style kernels: NVIDIA CUTLASS
media/docs/efficient_gemm.md, "Epilogue") it adds to the main loop's time; Hopper's warp-specialized
persistent ping-pong kernels overlap one tile's epilogue with another's math (same document,
"Warp-Specialized Persistent Ping-Pong kernel design"), so there it only enters the roofline's
memory term. ``efficiency.gemm_epilogue_overlap`` selects the case per GPU. Forward and
input-gradient epilogues write activation-sized outputs after a hidden-sized reduction loop; their
share (~2%) stays folded into the calibrated ``gemm_efficiency_max``.

GEMM efficiency on Hopper GPUs (architecture ``hopper``) = gemm_efficiency_max x S(m, n, k), the
MEASURED shape factor of ``topologies/data/gemm_shapes.yaml`` ([EXECSIM-H200]: cuBLAS on an H200,
throughput at the shape / throughput of the grid's large shapes; grouped GEMMs of MoE experts from the
``torch._grouped_mm`` grid; topologies/gemm_shapes.py). On Blackwell GPUs (B200, GB200, GB300) the same
with ``topologies/data/gemm_shapes_blackwell.yaml`` ([XLA-B200]: OpenXLA's B200 GEMM table, CUPTI kernel
times; plain GEMMs only); Blackwell grouped expert GEMMs take torchao's measured B200 plateau times
Hopper's measured roll-off by rows per group (:func:`blackwell_grouped_efficiency`). Elsewhere (Ampere,
and NVFP4 grouped expert GEMMs on Blackwell, not measured), GEMM efficiency = gemm_efficiency_max x
tile quantization x wave quantization (NVIDIA Deep Learning Performance Guide, "Matrix Multiplication
Background": tile quantization = useful fraction of the output tiles; wave quantization = useful
fraction of the last wave of tiles over the SMs):
    tiles      = ceil(m / Tm) * ceil(n / Tn) * batch
    tile_util  = m * n * batch / (tiles * Tm * Tn)
    wave_util  = tiles / (ceil(tiles / SMs) * SMs)
For the backward passes of ``C[m,n] = A[m,k] B[k,n]``: input gradient dA[m,k] = dC[m,n] B^T is an
(m, k, n) GEMM and weight gradient dB[k,n] = A^T dC is a (k, n, m) GEMM.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path

from strategies.errors import ConfigError, brief
from taskgraph.float8_casts import TORCHAO_CASTS, torchao_cast_cost
from taskgraph.lora import ADAPTER_SUFFIX
from taskgraph.stacks import attention_efficiency, get_stack
from topologies.gemm_shapes import GEMM_SHAPE_TABLES, gemm_shape_table, grouped_shape_factor, has_grouped, shape_factor
from topologies.kernels import gemm_kernel as get_gemm_kernel

PASSES = ("fwd", "bwd_input", "bwd_weight")

#: bytes per activation / GEMM-output element in each training precision: fp8 recipes keep 16-bit
#: I/O (Transformer Engine casts to fp8 inside the GEMM and writes bf16); NVFP4 likewise (TE's NVFP4
#: GEMMs take quantized operands and write bf16 outputs)
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp8": 2, "fp4": 2}


def pass_shape(g, pass_: str) -> tuple[int, int, int, int]:
    """(m, n, k, batch) of the GEMM executed in ``pass_`` for forward GEMM ``g``."""
    if pass_ == "fwd":
        return g.m, g.n, g.k, g.batch
    if pass_ == "bwd_input":
        return g.m, g.k, g.n, g.batch
    return g.k, g.n, g.m, g.batch


#: CTA tiles cuBLAS chooses among besides a GPU's representative one (NVIDIA Deep Learning Performance
#: Guide, "Matrix Multiplication Background" 2.3: "256x128, 128x256, 128x128, 128x64, 64x64 ..."; its
#: heuristics pick the tile per shape). The smaller ones matter where the representative tile leaves
#: most SMs idle (a GEMM of a few tiles: chunks of a decomposed GEMM, narrow experts, small batches).
#: A smaller tile reuses each loaded operand for fewer FLOPs (the same guide, 2.3: "larger tiles ...
#: have more data reuse"; a Tm x Tn tile does 2 Tm Tn FLOPs per (Tm + Tn) operand elements loaded per
#: k step), so it is priced at the ratio of its reuse to the representative tile's: the representative
#: tile is taken to be just fast enough to feed the tensor cores, a smaller one proportionally starved.
SMALLER_TILES = ((128, 128), (128, 64), (64, 128), (64, 64))


def _reuse(tm: int, tn: int) -> float:
    return tm * tn / (tm + tn)


def tile_utilization(m: int, n: int, batch: int, tm: int, tn: int, sms: int) -> float:
    """Useful fraction of a tiling: tile quantization x wave quantization (module docstring)."""
    tiles = math.ceil(m / tm) * math.ceil(n / tn) * batch
    tile_util = (m * n * batch) / (tiles * tm * tn)
    waves = math.ceil(tiles / sms)
    return tile_util * tiles / (waves * sms)


def serial_epilogue_efficiency(m: int, n: int, k: int, batch: int, gpu, dtype: str, kernel) -> float:
    """Fraction of dense peak of a persistent kernel whose tile epilogue is serial with its main loop
    (``kernel.epilogue == 'serial'``: DeepGEMM, kernels.yaml [DGEMM-K]).

    The kernel picks its tile as DeepGEMM's ``get_best_configs`` does: BLOCK_M the smallest candidate
    >= m (else the largest), BLOCK_N the candidate with the fewest waves, then the fullest last wave,
    then the larger. Each of the ``waves`` waves puts one tile on every SM and takes
        t_tile = 2 Tm Tn k / (peak x eff / SMs)  +  Tm Tn b_out / (B_hbm x hbm_eff / SMs)
    -- the main loop at the GPU's calibrated large-GEMM rate, then the epilogue writing the tile's
    b_out-byte outputs at the SM's share of the HBM bandwidth (every SM's epilogue runs at once). So a
    reduction of k elements keeps k / (k + k_epi) of the main-loop rate, with
        k_epi = b_out x peak x eff / (2 x B_hbm x hbm_eff)
    (H800 FP8 at eff 0.70: 2 x 1979 x 0.70 / (2 x 3350 x 0.85) = 486 elements): the short-K loss of
    DeepGEMM's k = 512 / 1536 / 2048 rows (tests/test_kernel_tables.py). Tiles of a grouped launch
    (``batch`` groups of m rows, the contiguous layout aligning each group to BLOCK_M) are counted per
    group and share the waves."""
    sms = gpu.sm_count
    bm = next((b for b in kernel.block_m if b >= m), kernel.block_m[-1])
    best = None
    for bn in kernel.block_n:
        tiles = math.ceil(m / bm) * math.ceil(n / bn) * batch
        waves = math.ceil(tiles / sms)
        last = tiles - (waves - 1) * sms
        key = (waves, -last, -bn)
        if best is None or key < best[0]:
            best = (key, bn, waves)
    _, bn, waves = best
    eff = gpu.efficiency
    per_sm_flops = gpu.peak_flops(dtype) * gpu.gemm_efficiency(dtype) / sms
    per_sm_bw = gpu.hbm_bandwidth * eff.hbm_efficiency / sms
    t = waves * (2.0 * bm * bn * k / per_sm_flops + bm * bn * DTYPE_BYTES[dtype] / per_sm_bw)
    return 2.0 * m * n * k * batch / (t * gpu.peak_flops(dtype))


def gemm_efficiency(m: int, n: int, k: int, batch: int, gpu, dtype: str = "bf16", kernel=None,
                    grouped: tuple | None = None) -> float:
    """Achieved fraction of dense peak for one (batched) GEMM (see module docstring). ``kernel`` (a
    ``topologies.kernels.GemmKernel``; None: the catalog's overlapped-epilogue cuBLAS / CUTLASS kernels)
    with a serial epilogue: :func:`serial_epilogue_efficiency`. Otherwise, on a GPU whose architecture
    has a measured table (Hopper, Blackwell) the measured shape factor (:func:`measured_gemm_efficiency`;
    a grouped launch only where the table measured grouped GEMMs; on Blackwell
    :func:`blackwell_grouped_efficiency`), elsewhere :func:`tile_gemm_efficiency`.
    ``grouped``: the ``batch`` GEMMs are one grouped launch of MoE experts, each against its own
    weight (``torch._grouped_mm``, Megatron's grouped GEMM), and this is the forward layout's
    (rows per group, n, k) of that launch; None: a strided batched GEMM (the QK^T and PV of unfused
    attention) or a plain one."""
    if kernel is not None and kernel.epilogue == "serial":
        return serial_epilogue_efficiency(m, n, k, batch, gpu, dtype, kernel)
    path = GEMM_SHAPE_TABLES.get(gpu.architecture)
    if path is not None and (grouped is None or batch <= 1 or has_grouped(path)):
        return measured_gemm_efficiency(m, n, k, batch, gpu, dtype, grouped, path)
    if grouped is not None and batch > 1 and gpu.architecture == "blackwell" and dtype in BLACKWELL_GROUPED_SHARE:
        return blackwell_grouped_efficiency(batch, *grouped, dtype)
    return tile_gemm_efficiency(m, n, k, batch, gpu, dtype)


#: Share of the dense peak a Blackwell grouped expert GEMM reaches at large rows per group: torchao's
#: published B200 one-launch figures (pytorch/ao torchao/prototype/moe_training/README.md at 36027d8;
#: benchmarks/kernel_data/torchao-b200/grouped.csv, 8 groups of 16,384 rows, DeepSeek-V3's 2048 x 7168
#: and Llama 4's 8192 x 5120 experts). bf16: the median of the four ``torch._grouped_mm`` rows read off
#: the roofline plots (forward and weight gradient, 0.479 / 0.486 / 0.517 / 0.540 of 2,250 TFLOP/s);
#: fp16 runs on the same tensor cores at the same rate. fp8: the median of the three MXFP8
#: ``torch._scaled_grouped_mm`` rows (0.407 / 0.508 / 0.512 of 4,500 TFLOP/s), taken for every FP8
#: recipe's grouped GEMM (per-tensor FP8 has no published Blackwell grouped figure). NVFP4 has none:
#: fp4 grouped GEMMs keep the tile/wave model. tests/test_blackwell_grouped_figures.py re-derives both.
BLACKWELL_GROUPED_SHARE = {"bf16": 0.5017, "fp16": 0.5017, "fp8": 0.5080}


def blackwell_grouped_efficiency(groups: int, rows: int, n: int, k: int, dtype: str = "bf16") -> float:
    """Fraction of dense peak of a grouped expert GEMM on Blackwell (B200; GB200 and GB300 take B200's
    figure, as for plain GEMMs): ``groups`` groups of ``rows`` rows (the forward layout), experts [n, k].

        eff = BLACKWELL_GROUPED_SHARE[dtype] x S_H(groups, rows, n, k) / S_H(groups, R, n, k)

    The first factor is MEASURED on B200, at the large-row plateau only (torchao, above). The second,
    the roll-off at few rows per group, is Hopper's measured grouped table ([EXECSIM-H200]
    grouped_grid.csv, ``torch._grouped_mm`` on an H200) at the same groups and expert shape, divided by
    its value at R = the table's largest rows per group (2,048, where it has levelled off) -- ASSUMED to
    transfer: the roll-off is the per-expert weight read (2 n k bytes for 2 rows n k FLOPs), and the
    roofline ridge where it stops binding is alike (B200 2,250 TFLOP/s / 8 TB/s = 281 FLOP/B; H100 / H200
    989 / 3.35-4.8 = 206-295), with the same CUTLASS grouped kernel family behind ``torch._grouped_mm`` on
    both (Transformer Engine's grouped GEMM of Megatron stacks is assumed to run alike). Unlike the
    Hopper path (gemm_efficiency_max x S_H) no calibrated gemm_efficiency_max enters: the share is
    already of peak. At rows >= R the ratio is exactly 1 (the table clamps), so eff = the share."""
    hopper = GEMM_SHAPE_TABLES["hopper"]
    plateau_rows = gemm_shape_table(hopper).rows[-1]
    rolloff = grouped_shape_factor(groups, rows, n, k, hopper) / grouped_shape_factor(groups, plateau_rows, n, k, hopper)
    return BLACKWELL_GROUPED_SHARE[dtype] * rolloff


def measured_gemm_efficiency(m: int, n: int, k: int, batch: int, gpu, dtype: str = "bf16",
                             grouped: tuple | None = None, path: str = GEMM_SHAPE_TABLES["hopper"]) -> float:
    """gemm_efficiency_max(dtype) x the measured shape factor of the table at ``path`` ([EXECSIM-H200]
    for Hopper, [XLA-B200] for Blackwell; topologies/gemm_shapes.py). fp8 takes the table's fp8 grid,
    fp4 too (gpus.yaml [FP4EFF]: the FP8 share is assumed), the others its bf16 grid.

    A grouped launch of ``batch`` > 1 experts takes the grouped table at (batch groups, and the forward
    layout's ``grouped`` = (rows per group, n, k)) in every pass: only the forward layout was measured,
    and the weight gradient, whose reduction runs over each expert's few tokens, is assumed to keep the
    forward's rate (both are held back by the per-expert weight traffic when the groups are small).
    FP8 expert GEMMs take it too (no FP8 grouped measurement: the bf16 shape factor is assumed).
    A strided batched GEMM runs ``batch`` independent (m, n, k) problems in one launch whose tiles share
    the SMs (cuBLAS gemmStridedBatched: the batch is one more grid dimension), priced as the plain
    (m x batch, n, k) GEMM: the same tiles and the same reduction length, the per-problem tile
    quantization of m ignored (m is a sequence length there, a multiple of the tile). Every pass uses
    the forward-layout table: the measured pass layouts differ by a few % (gemm.csv), inside the noise
    of its use (docs/cost-model.md)."""
    if grouped is not None and batch > 1:
        s = grouped_shape_factor(batch, *grouped, path)
    else:
        s = shape_factor(m * batch, n, k, dtype if dtype in ("fp8", "fp4") else "bf16", path)
    return gpu.gemm_efficiency(dtype) * s


def tile_gemm_efficiency(m: int, n: int, k: int, batch: int, gpu, dtype: str = "bf16") -> float:
    """The tile/wave-quantization model (module docstring): the GPU's representative tile, or a smaller
    one from :data:`SMALLER_TILES` (at its lower operand reuse) where it wastes less."""
    eff = gpu.efficiency
    tm, tn = eff.gemm_tile_m, eff.gemm_tile_n
    best = tile_utilization(m, n, batch, tm, tn, gpu.sm_count)
    for a, b in SMALLER_TILES:
        if a <= tm and b <= tn and (a, b) != (tm, tn):
            best = max(best, tile_utilization(m, n, batch, a, b, gpu.sm_count) * _reuse(a, b) / _reuse(tm, tn))
    # a short reduction dimension cannot amortize the prologue/epilogue of a tile (k < tile_k)
    k_util = min(1.0, k / eff.gemm_tile_k)
    return gpu.gemm_efficiency(dtype) * best * k_util


def _gemm_time(shape, gpu, dtype, peak, kernel=None, grouped: tuple | None = None) -> float:
    m, n, k, batch = shape
    flops = 2.0 * m * n * k * batch
    return flops / (peak * gemm_efficiency(m, n, k, batch, gpu, dtype, kernel, grouped))


@dataclass(frozen=True)
class ProfileTable:
    """Measured operator times that override the roofline.

    CSV columns: ``gpu, dtype, op, pass, shape, time_us`` where ``op`` is the operator name
    (``qkv``, ``attn_core``, ``mlp_down`` ...), ``pass`` one of fwd/bwd_input/bwd_weight, and
    ``shape`` the canonical shape string of :func:`op_shape_key` (e.g. ``8192x1152x6144x1``).
    """

    entries: dict
    #: key -> CSV line number; ``used``: keys some operator looked up (``unused_rows``)
    lines: dict = field(default_factory=dict, compare=False)
    used: set = field(default_factory=set, compare=False)
    path: str = ""
    _seen: set = field(default_factory=set, compare=False, repr=False)
    #: GPU name the rows are looked up under (``options.profile_gpu``); "" = the cluster's own GPU
    measured_on: str = ""

    @classmethod
    def load(cls, path) -> ProfileTable:
        from strategies.documents import csv_rows, read_csv_text
        p = Path(path)
        name = brief(str(p), 120)
        need = ("gpu", "dtype", "op", "pass", "shape", "time_us")
        entries, lines = {}, {}
        text = read_csv_text(p, "options.profile")
        for i, row in csv_rows(text, need, f"profile {name}"):
            if row["pass"] not in PASSES:
                raise ConfigError(f"profile {name} line {i}: pass = {brief(row['pass'])} must be one of "
                                  f"{', '.join(PASSES)}")
            try:
                t = float(row["time_us"]) * 1e-6
            except ValueError:
                comma = "; write the decimal point as '.' (12.5, not 12,5)" if "," in row["time_us"] else ""
                raise ConfigError(f"profile {name} line {i}: time_us = {brief(row['time_us'])} is not a "
                                  f"number{comma}") from None
            if not math.isfinite(t) or t < 0 or t > 1e6:
                raise ConfigError(f"profile {name} line {i}: time_us = {brief(row['time_us'])} must be a finite "
                                  f"number of microseconds in [0, 1e12]")
            key = (row["gpu"].lower(), row["dtype"].lower(), row["op"], row["pass"], row["shape"])
            if key in entries:
                raise ConfigError(f"profile {name} line {i} repeats line {lines[key]} (same gpu, dtype, op, pass "
                                  f"and shape); keep one")
            entries[key], lines[key] = t, i
        return cls(entries, lines, set(), str(p))

    def gpus(self) -> list[str]:
        """The GPU names of the rows (lower case, sorted)."""
        return sorted({k[0] for k in self.entries})

    def applied_to(self, gpu_name: str, measured_on: str | None = None) -> ProfileTable:
        """This table for a cluster of ``gpu_name``. A profile measured on another GPU (or on the CPU)
        applies only when the user says so (``measured_on``: ``options.profile_gpu``, the ``gpu`` of
        the rows to use, times not rescaled); otherwise one error names both."""
        have = self.gpus()
        name = brief(self.path, 120)
        if measured_on:
            if measured_on.lower() not in have:
                raise ConfigError(f"options.profile_gpu = {brief(measured_on)} but profile {name} has rows for "
                                  f"{', '.join(have[:5]) or 'no GPU'}; set profile_gpu to one of them")
            return replace(self, measured_on=measured_on.lower())
        if have and gpu_name.lower() not in have:
            raise ConfigError(f"profile {name} was measured on {', '.join(have[:3])} but the cluster's GPU is "
                              f"{gpu_name}; profile this GPU, or set options.profile_gpu: {have[0]} to apply "
                              f"those times to it unchanged")
        return self

    def lookup(self, gpu, dtype: str, op, pass_: str) -> float | None:
        return self.lookup_named(gpu, dtype, op.name, pass_, op_shape_key(op))

    def lookup_named(self, gpu, dtype: str, name: str, pass_: str, shape: str) -> float | None:
        """The measured seconds of row (``name``, ``pass_``, ``shape``), or None; for work that is not
        an operator of the graph (the optimizer step: :data:`OPTIMIZER_OP`)."""
        key = (self.measured_on or gpu.name.lower(), dtype.lower(), name, pass_, shape)
        t = self.entries.get(key)
        if t is not None:
            self.used.add(key)
        elif len(self._seen) < 10_000:
            self._seen.add(key)
        return t

    def lookup_scaled(self, gpu, dtype: str, name: str, pass_: str, count: float) -> float | None:
        """The measured seconds of the row (``name``, ``pass_``, ``params=N``) whose N is nearest to
        ``count`` (ratio, ties to the smaller N), scaled by ``count / N``; None when ``name`` has no row.
        For work linear in a count that depends on the scale (the optimizer step: the parameters a rank
        updates shrink as 1/dp under ZeRO; ``overheads.adam_step_s`` is linear in them, a fixed number of
        bytes per parameter). Every such row counts as used: a profile taken at one node count serves
        another (issue 41)."""
        gname = self.measured_on or gpu.name.lower()
        exact = self.lookup_named(gpu, dtype, name, pass_, optimizer_shape(count))
        if exact is not None or count <= 0:
            return exact
        rows = []
        for key, t in self.entries.items():
            if key[:4] == (gname, dtype.lower(), name, pass_) and key[4].startswith("params="):
                try:
                    n = int(key[4][len("params="):])
                except ValueError:
                    continue
                if n > 0:
                    rows.append((abs(math.log(n / count)), n, key, t))
        if not rows:
            return None
        self.used.update(r[2] for r in rows)
        _, n, _, t = min(rows)
        return t * count / n

    def check_all_used(self) -> None:
        """Raise on the first row no operator looked up (a typo in gpu, dtype, op or shape would
        otherwise silently leave the roofline time in place), with the shapes the run does use."""
        unused = [k for k in self.entries if k not in self.used]
        if not unused:
            return
        k = min(unused, key=lambda x: self.lines[x])
        same_op = sorted({u[4] for u in self.used | self._seen if u[2] == k[2]})
        hint = f"; this run's {k[2]!r} shapes: {', '.join(same_op[:3])}" if same_op else ""
        raise ConfigError(f"profile {brief(self.path, 120)} line {self.lines[k]} (gpu {k[0]}, dtype {k[1]}, op "
                          f"{brief(k[2])}, pass {k[3]}, shape {brief(k[4])}) matches no operator of this run "
                          f"({len(unused)} of {len(self.entries)} rows unused){hint}; fix the row or remove it")


#: the profile row of a stage's optimizer step: op ``optimizer``, pass ``fwd``, shape ``params=N``
#: (N = the parameters the rank updates, ``optimizer_shape``); written by ``execsim profile``
OPTIMIZER_OP = "optimizer"


def optimizer_shape(params: float) -> str:
    return f"params={round(params)}"


def op_shape_key(op) -> str:
    """Canonical shape string: the forward GEMM shapes ``MxNxKxB`` joined by ``+``, or ``bytes=N``."""
    if op.profile_shape:
        return op.profile_shape
    if op.gemms:
        return "+".join(f"{g.m}x{g.n}x{g.k}x{g.batch}" for g in op.gemms)
    return f"bytes={int(op.fwd_bytes)}"


def dense_embedding_grad_bytes(op, elem: int, grad_accum_bytes: int) -> float:
    """HBM bytes an embedding's weight gradient moves beyond its token rows in one micro-batch's backward:
    PyTorch's ``F.embedding`` (sparse=False; Megatron-core's VocabParallelEmbedding, core_r0.8.0
    tensor_parallel/layers.py) returns a dense gradient, ``embedding_dense_backward_cuda`` allocating it as
    ``at::zeros({num_weights, hidden})`` (aten/src/ATen/native/cuda/Embedding.cu: write ``elem`` B per
    parameter), and since no GEMM accumulates it, the main-gradient hook adds it into the
    ``grad_accum_bytes``-byte buffer (distributed_data_parallel.py ``_make_param_hook``:
    ``param.main_grad.add_(param.grad.data)``: read elem + grad_accum_bytes, write grad_accum_bytes).
    ``op.params``: the embedding's local parameters (vocab / tp x hidden, learned positions too), less
    the frozen ones (LoRA: no gradient).

    >>> from taskgraph.operators import Operator
    >>> dense_embedding_grad_bytes(Operator("embedding", "embedding", -1, (), 0, 0, 0, params=10), 2, 4)
    120.0
    """
    return float(op.params - op.frozen_params) * (elem + (elem + 2 * grad_accum_bytes if grad_accum_bytes > 0 else 0))


def grad_accumulate_bytes(op, grad_accum_bytes: int) -> float:
    """HBM bytes one micro-batch's weight-gradient GEMMs move to accumulate into the main-gradient
    buffer of ``grad_accum_bytes``-byte elements: read it and write it back (module docstring)."""
    return sum(2.0 * grad_accum_bytes * g.k * g.n * g.batch for g in op.gemms)


#: kernels per weight of an unfused fp32 gradient accumulation: the cast of the fresh bf16 gradient to
#: fp32 and the in-place add (deepspeed/runtime/bf16_optimizer.py update_hp_grads, 56c5223, 2022:
#: ``hp_grad.data.add_(lp.grad.data.to(hp_grad.dtype))``)
HP_GRAD_ACCUM_KERNELS = 2

#: block-wise scaling tile: 1 x 128 activation tiles, 128 x 128 weight blocks, one fp32 scale each
#: (DeepSeek-V3 Section 3.3.2, Figure 7a)
FP8_TILE = 128
#: HBM bytes per element of an online quantization kernel: read bf16 (2), write fp8 (1) and one fp32
#: scale per 1 x 128 tile (4/128). DeepSeek-V3 Section 3.5.1 describes this round trip ("read 128 BF16
#: activation values ... the quantized FP8 values are written back to HBM, only to be read again for MMA").
FP8_QUANT_BYTES = 2 + 1 + 4 / FP8_TILE
#: OCP Microscaling Formats (MX) v1.0 Section 5: MXFP8 blocks of 32 elements share one 8-bit E8M0 scale
MX_BLOCK = 32
#: Per recipe: (HBM bytes per quantized element, which GEMM operands are quantized online per pass).
#: tensorwise / delayed (Transformer Engine per-tensor scaling, one fp32 scale per tensor): no pass here;
#: TE's cast / cast-transpose / amax kernels where they are not fused into the producing kernel, and the
#: amax all-reduces, are priced by taskgraph/te_scaling.py (torchao's under the torchtitan stacks by
#: taskgraph/float8_casts.py).
#: rowwise (torchao Float8Linear, recipe "rowwise"): dynamic per-row scales computed by a separate amax
#: reduction and cast of both operands of every GEMM, weights included (not cached across passes):
#: read 2 (amax) + read 2 + write 1 bytes per element + a 4-byte scale per row (amortized, ignored).
#: blockwise (DeepSeek-V3 Section 3.3): FP8_QUANT_BYTES, activations online, weights once per step.
#: mxfp8 (TE MXFP8BlockScaling on Blackwell): read 2, write the row-wise and the column-wise FP8 copies
#: (2 x 1) and their E8M0 scales (2 x 1/32); the column-wise copies serve wgrad, so wgrad quantizes
#: nothing; weights once per step.
FP8_RECIPE_COSTS = {"tensorwise": (0.0, ""), "delayed": (0.0, ""), "rowwise": (5.0, "both"),
                    "blockwise": (FP8_QUANT_BYTES, "act"), "mxfp8": (2 + 2 + 2 / MX_BLOCK, "act-once"),
                    "nvfp4": (0.0, "act-once")}   # nvfp4's bytes: NVFP4_QUANT_BYTES below
#: NVFP4 (arXiv 2509.25149 Section 2; Transformer Engine recipe NVFP4BlockScaling,
#: transformer_engine/common/recipe/__init__.py): E2M1 elements (half a byte) in blocks of 16 sharing one
#: E4M3 scale (1 byte), and one FP32 scale per tensor from the tensor's amax.
NVFP4_BLOCK = 16
NVFP4_ELEMENT_BYTES = 0.5 + 1 / NVFP4_BLOCK
#: HBM bytes per element of the NVFP4 quantization of a GEMM input (activation in forward, output
#: gradient in backward), as Transformer Engine runs it (transformer_engine/pytorch/csrc/quantizer.cpp,
#: NVFP4Quantizer::quantize_impl, commit d0067d0): one kernel reads the bf16 tensor for the two
#: per-tensor amaxes (nvte_hadamard_transform_amax: of the input, and of its 16x16 random Hadamard
#: transform for the column-wise copy), then one fused kernel (nvte_quantize_with_hadamard_transform)
#: reads it again and writes the row-wise copy (for fprop / dgrad) and the Hadamard-transformed
#: column-wise copy (for wgrad), each E2M1 with E4M3 block scales. The RHT is a 16x16 matmul per block
#: (32 FLOP per element, far under Blackwell's ridge) and the stochastic rounding of gradients is the
#: conversion instruction's own (cvt.rs), so neither adds bytes. Weights (2D 16x16 blocks, no RHT) are
#: quantized once per step, as mxfp8's, and not charged per micro-batch. Wgrad reads the cached
#: column-wise copies: it quantizes nothing.
NVFP4_QUANT_BYTES = 2 + 2 + 2 * NVFP4_ELEMENT_BYTES
#: kernels per quantized tensor where a recipe launches more than one (NVFP4: amax, then the fused cast)
QUANT_KERNELS = {"nvfp4": 2}
#: The GEMM kernel family (kernels.yaml ``gemm.kernels``) a recipe's GEMMs run; not listed: the catalog's
#: cuBLAS / CUTLASS kernels (overlapped epilogue). blockwise = DeepSeek-V3 Section 3.3's recipe, whose
#: published kernel is DeepGEMM ("FP8 GEMMs with fine-grained scaling, as proposed in DeepSeek-V3",
#: deepseek-ai/DeepGEMM README): a serial tile epilogue ([DGEMM-K]).
RECIPE_GEMM_KERNELS = {"blockwise": "deepgemm"}


def fp8_quantize_elements(op, pass_: str, recipe: str = "blockwise") -> float:
    """Elements ``recipe`` quantizes online before ``op``'s GEMMs in ``pass_``. For the executed GEMM
    C[m,n] = A[m,k] B[k,n] (forward A = X, dgrad A = dY; B the weight): 'act' (DeepSeek-V3 Section 3.3:
    Fprop, Dgrad and Wgrad all in FP8) quantizes A in forward and dgrad and both operands in wgrad
    (cached activations re-tiled from 1 x 128 to 128 x 1, Section 3.3.3); 'both' quantizes A and B in
    every pass; 'act-once' quantizes A in forward and dgrad only (both layouts written at once)."""
    mode = FP8_RECIPE_COSTS[recipe][1]
    total = 0.0
    for g in op.gemms:
        m, n, k, batch = pass_shape(g, pass_)
        if mode == "both" or (mode == "act" and pass_ == "bwd_weight"):
            total += (m * k + k * n) * batch
        elif mode == "act" or (mode == "act-once" and pass_ != "bwd_weight"):
            total += m * k * batch
    return float(total)


def op_time(op, pass_: str, gpu, dtype: str = "bf16", *, flash: bool = True, profile: ProfileTable | None = None,
            grad_accum_bytes: int = 0, fp8_recipe: str = "tensorwise", stack=None, gemm_kernel: str | None = None,
            grad_accum_unfused_bytes: int = 0, grad_accum_unfused_kernels: int = HP_GRAD_ACCUM_KERNELS,
            quantize: bool = True) -> float:
    """Seconds for one pass of one operator on one GPU.

    ``grad_accum_bytes``: element size of the main-gradient buffer weight-gradient GEMMs accumulate
    into (4: fp32, 2: fp16/bf16); 0 = the gradient is written once and not accumulated.
    ``grad_accum_unfused_bytes`` (> 0 replaces the fused accumulation): the weight-gradient GEMM writes a
    fresh gradient, then separate streaming kernels move this many bytes per gradient element to add it
    to the fp32 one (``grad_accum_unfused_kernels`` launches per GEMM; ``stack_costs.unfused_grad_accum``).
    ``fp8_recipe`` (with dtype fp8): ``blockwise`` = DeepSeek-V3 Section 3.3: the output head stays
    in BF16 (Section 3.3.1 keeps the embedding, output head, gating, norms and attention in higher
    precision); every other GEMM runs at the FP8 rate after memory-bound quantization kernels over
    its online-quantized operands (:func:`fp8_quantize_elements`, FP8_QUANT_BYTES per element). The
    accumulation promoted to FP32 CUDA cores every N_C = 128 elements (Section 3.3.2) overlaps the
    other warpgroup's MMA there, so it adds no term: the GEMM efficiency is the GPU's fp8 one.
    ``gemm_kernel``: the GEMM kernel family of kernels.yaml (None: the catalog's); a recipe of
    :data:`RECIPE_GEMM_KERNELS` sets it. ``dtype`` fp4: NVIDIA's NVFP4 recipe (:func:`_nvfp4_time`);
    ``quantize=False``: the GEMMs alone at the dtype's rate, without a recipe's quantization passes."""
    if op.kind == "gemm" and (dtype == "fp8" and op.name.endswith("lm_head")
                              or dtype in ("fp8", "fp4") and op.name.endswith(ADAPTER_SUFFIX)):
        # every FP8 recipe keeps the output head in BF16: Megatron's is a tensor_parallel.ColumnParallelLinear outside TE
        # (gpt_model.py GPTModel.__init__, d98e8a6; TE only with opt-in fp8_output_proj under mxfp8), torchtitan skips it
        # (filter_fqns), DeepSeek-V3 3.3.1; LoRA adapters are megatron-core linears outside TE's autocast (lora.py)
        dtype = "bf16"
    if dtype == "fp4" and quantize and op.kind == "gemm" and op.gemms:
        return _nvfp4_time(op, pass_, gpu, flash=flash, profile=profile, grad_accum_bytes=grad_accum_bytes,
                           stack=stack, gemm_kernel=gemm_kernel)
    if dtype == "fp8" and quantize and stack is not None and stack.float8_casts and fp8_recipe in TORCHAO_CASTS and \
            op.kind == "gemm" and op.gemms and not op.name.endswith(("lm_head", "moe_router", "moe_experts")):
        # torchao Float8Linear (torchtitan): its amax / cast kernels (taskgraph/float8_casts.py); the output
        # head stays bf16 (torchtitan filter_fqns), the experts are not nn.Linear modules
        base = op_time(op, pass_, gpu, dtype, flash=flash, profile=profile, grad_accum_bytes=grad_accum_bytes,
                       stack=stack, gemm_kernel=gemm_kernel, grad_accum_unfused_bytes=grad_accum_unfused_bytes,
                       grad_accum_unfused_kernels=grad_accum_unfused_kernels, quantize=False)
        if profile is not None and profile.lookup(gpu, dtype, op, pass_) is not None:
            return base   # a measured time includes whatever the kernels did
        nbytes, kernels = torchao_cast_cost(op.gemms, pass_, fp8_recipe, stack.float8_casts == "torchao-fused")
        eff = gpu.efficiency
        return base + nbytes / (gpu.hbm_bandwidth * eff.elementwise_efficiency) + kernels * eff.launch_overhead
    if dtype == "fp8" and FP8_RECIPE_COSTS.get(fp8_recipe, (0.0,))[0] and op.kind == "gemm" and op.gemms:
        base = op_time(op, pass_, gpu, dtype, flash=flash, profile=profile, grad_accum_bytes=grad_accum_bytes,
                       stack=stack, gemm_kernel=RECIPE_GEMM_KERNELS.get(fp8_recipe, gemm_kernel),
                       grad_accum_unfused_bytes=grad_accum_unfused_bytes, grad_accum_unfused_kernels=grad_accum_unfused_kernels)
        if profile is not None and profile.lookup(gpu, dtype, op, pass_) is not None:
            return base   # a measured time includes whatever the kernels did
        q = fp8_quantize_elements(op, pass_, fp8_recipe)
        if q <= 0:
            return base
        eff = gpu.efficiency
        kernels = 2 if (pass_ == "bwd_weight" or FP8_RECIPE_COSTS[fp8_recipe][1] == "both") else 1
        return base + q * FP8_RECIPE_COSTS[fp8_recipe][0] / (gpu.hbm_bandwidth * eff.elementwise_efficiency) \
            + kernels * len(op.gemms) * eff.launch_overhead
    if profile is not None:
        t = profile.lookup(gpu, dtype, op, pass_)
        if t is not None:
            return t
    flops = {"fwd": op.fwd_flops, "bwd_input": op.bwd_input_flops, "bwd_weight": op.bwd_weight_flops}[pass_]
    nbytes = {"fwd": op.fwd_bytes, "bwd_input": op.bwd_input_bytes, "bwd_weight": op.bwd_weight_bytes}[pass_]
    if flops <= 0 and nbytes <= 0:
        return 0.0
    eff = gpu.efficiency
    launch = eff.launch_overhead
    mem_t = nbytes / (gpu.hbm_bandwidth * eff.hbm_efficiency)
    if op.kind == "gemm" and op.gemms:
        peak = gpu.peak_flops(dtype)
        kernel = get_gemm_kernel(gemm_kernel) if gemm_kernel else None
        # a GEMM operator's batch is its local experts: one grouped launch (taskgraph/operators.py _moe_ops)
        comp = sum(_gemm_time(pass_shape(g, pass_), gpu, dtype, peak, kernel,
                              grouped=(g.m, g.n, g.k) if g.batch > 1 else None) for g in op.gemms)
        # gemm FLOPs may exceed the listed shapes' (e.g. fused bias); scale to the op's count
        listed = sum(2.0 * g.m * g.n * g.k * g.batch for g in op.gemms)
        if listed > 0:
            comp *= flops / listed
        launches = launch * len(op.gemms)
        if op.copy_bytes and pass_ != "bwd_weight":
            # separate copy kernels around the GEMMs (MoE token permutations, operators.py _moe_ops):
            # streaming copies after the GEMMs, not hidden under them
            return max(comp, mem_t) + launches + op.copy_bytes / (gpu.hbm_bandwidth * eff.hbm_efficiency) \
                + launch * op.copy_kernels
        if pass_ == "bwd_weight" and grad_accum_unfused_bytes > 0:
            # the GEMM writes a fresh gradient (the plain write in the operator's bytes); the fp32 copy is
            # updated by separate kernels after the backward (DeepSpeed BF16_Optimizer.update_hp_grads:
            # taskgraph/data/stacks.yaml [DS-BF16]), streaming copies priced at hbm_efficiency
            grads = sum(float(g.k * g.n * g.batch) for g in op.gemms)
            acc_t = grad_accum_unfused_bytes * grads / (gpu.hbm_bandwidth * eff.hbm_efficiency)
            return max(comp, mem_t) + acc_t + launches * (1 + grad_accum_unfused_kernels)
        if pass_ == "bwd_weight" and grad_accum_bytes > 0:
            bw = gpu.hbm_bandwidth * eff.hbm_efficiency
            # the plain gradient write counted in the operator's bytes becomes the accumulation
            plain = sum(float(g.k * g.n * g.batch) for g in op.gemms) * DTYPE_BYTES[dtype]
            acc_t = grad_accumulate_bytes(op, grad_accum_bytes) / bw
            rest_t = max(0.0, nbytes - plain) / bw
            if eff.gemm_epilogue_overlap:
                return max(comp, rest_t + acc_t) + launches
            return max(comp, rest_t) + acc_t + launches
        return max(comp, mem_t) + launches
    if op.kind == "attention":
        # attention math runs in bf16/fp16 even in fp8 / fp4 recipes (Transformer Engine keeps DPA in bf16;
        # NVFP4BlockScaling sets fp8_dpa = fp8_mha = False)
        peak = gpu.peak_flops("bf16")
        if flash:
            # the stack's fused attention kernel at the shape it sees (taskgraph/stacks.py and the kernel
            # tables, topologies/kernels.py; without a stack the default, the catalog's)
            e = attention_efficiency(stack if stack is not None else get_stack(None), gpu, pass_,
                                     getattr(op, "attn_shape", None))
            return max(flops / (peak * e), mem_t) + launch
        # unfused: batched GEMMs for QK^T and PV plus separate softmax / dropout / mask kernels
        gemm_flops = sum(2.0 * g.m * g.n * g.k * g.batch for g in op.gemms) or flops
        per_flop = sum(_gemm_time(pass_shape(g, "fwd"), gpu, "bf16", peak) for g in op.gemms) / gemm_flops \
            if op.gemms else 1.0 / (peak * eff.gemm_efficiency_max)
        ew_t = nbytes / (gpu.hbm_bandwidth * eff.elementwise_efficiency)
        return flops * per_flop + ew_t + launch * 4
    return _membound_time(op, pass_, gpu, dtype, flops, nbytes, stack, grad_accum_bytes)


def _membound_time(op, pass_: str, gpu, dtype: str, flops: float, nbytes: float, stack, grad_accum_bytes: int) -> float:
    """Memory-bound kinds: elementwise, norm, embedding, loss, router (fp32 math peak is ample); a stack
    that does not fuse the operator makes several passes over its tensors (taskgraph/stacks.py). The
    embedding's weight gradient adds its dense gradient's zero fill and main-gradient add
    (:func:`dense_embedding_grad_bytes`), streaming kernels."""
    eff = gpu.efficiency
    passes = stack.passes_of(op.name) if stack is not None else 1
    ew_t = passes * nbytes / (gpu.hbm_bandwidth * eff.elementwise_efficiency)
    comp = flops / gpu.peak_flops("fp32") if flops > 0 else 0.0
    t = max(ew_t, comp) + eff.launch_overhead * passes
    if op.kind == "embedding" and pass_ == "bwd_weight" and op.params > op.frozen_params:
        dense = dense_embedding_grad_bytes(op, DTYPE_BYTES[dtype], grad_accum_bytes)
        t += dense / (gpu.hbm_bandwidth * eff.hbm_efficiency) + eff.launch_overhead * (2 if grad_accum_bytes > 0 else 1)
    return t


def _nvfp4_time(op, pass_: str, gpu, *, flash: bool, profile, grad_accum_bytes: int, stack, gemm_kernel) -> float:
    """One pass of a GEMM operator under NVIDIA's NVFP4 training recipe (arXiv 2509.25149 Section 4;
    Transformer Engine NVFP4BlockScaling): Fprop, Dgrad and Wgrad GEMMs all at the FP4 rate, after the
    memory-bound quantization of the pass's input (:data:`NVFP4_QUANT_BYTES` per element of what
    :func:`fp8_quantize_elements` counts for 'act-once', :data:`QUANT_KERNELS` launches per GEMM).
    The output head stays BF16 (the paper keeps embeddings and the output projection in BF16); the
    layers the recipe keeps in BF16 are costed as bf16 by the caller (taskgraph/costing.py)."""
    if op.name.endswith("lm_head"):
        return op_time(op, pass_, gpu, "bf16", flash=flash, profile=profile, grad_accum_bytes=grad_accum_bytes,
                       stack=stack)
    measured = profile.lookup(gpu, "fp4", op, pass_) if profile is not None else None
    if measured is not None:
        return measured   # a measured time includes whatever the kernels did
    base = op_time(op, pass_, gpu, "fp4", flash=flash, profile=None, grad_accum_bytes=grad_accum_bytes,
                   stack=stack, gemm_kernel=gemm_kernel, quantize=False)
    q = fp8_quantize_elements(op, pass_, "nvfp4")
    if q <= 0:
        return base
    eff = gpu.efficiency
    return base + q * NVFP4_QUANT_BYTES / (gpu.hbm_bandwidth * eff.elementwise_efficiency) \
        + QUANT_KERNELS["nvfp4"] * len(op.gemms) * eff.launch_overhead
