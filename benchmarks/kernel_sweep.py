"""Kernel benchmark sweep: what the kernels a training step calls reach on this GPU, by shape.

    python -m benchmarks.kernel_sweep --out DIR [--parts gemm,fp8,grouped,attention,membound,host]
                                       [--device cuda|cpu] [--budget-s 300] [--quick]

Writes one CSV per part under DIR (``gemm.csv``, ``attention.csv``, ``membound.csv``, ``host.csv``)
and ``meta.json`` (GPU, SMs, driver, torch and CUDA versions). These are kernel-level INPUTS of the
cost model (issue 26: "GEMM efficiency as a function of (M, N, K) ... attention by sequence length ...
memory-bound ops by how many HBM passes they make"), measured on kernels alone, never on a training
run; ``topologies/data/kernels.yaml`` cites the rows it keeps as [EXECSIM-H100].

Method (each the practice of the kernel libraries' own benchmarks):
* timing: CUDA events around a loop of calls after warm-up calls (PyTorch docs, "CUDA semantics:
  asynchronous execution"; ``torch.utils.benchmark`` and Triton's ``do_bench``); the loop is sized
  to at least ``MIN_LOOP_S`` of device time and timed ``TRIALS`` times, the median kept;
* operands are random normal data (zeros let the tensor cores draw less power and boost higher:
  8192^3 bf16 ran at 788 vs 894 TFLOP/s on an H200 here, /work/.library/device/KINDS.md);
* GEMM layouts are those of a linear layer's three passes (``torch.nn.functional.linear``:
  y = x W^T; dx = dy W; dW = dy^T x, weights stored [out, in]), so the forward is cuBLAS's "TN",
  the input gradient "NN" and the weight gradient "NT" (column-major names);
* FLOP conventions: GEMM 2 m n k per group; attention forward 4 b s^2 h d, halved with a causal mask,
  backward 2.5 x forward (flash-attention benchmarks/benchmark_flash_attention.py, ``flops``; the
  convention of topologies/data/kernels.yaml).

Library code elsewhere does not print; this is a benchmark script: it prints one line per part.
Every size it runs is fixed here and bounded (the largest operand is 2 GiB); ``--budget-s`` stops a
part that runs over its share, and what was measured is still written.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

PARTS = ("gemm", "fp8", "grouped", "attention", "membound", "host", "grid", "grouped_grid", "fp8_grid", "gqa", "host_llama")
MIN_LOOP_S = 0.02
TRIALS = 3
MAX_LOOP = 200

# ---- shapes --------------------------------------------------------------------------------------
#: (name, hidden, q+k+v output width, ffn width, gated, tp): the linear layers of real models, per
#: tensor-parallel rank (Megatron column / row parallel split: qkv and fc1 split their outputs, proj
#: and fc2 their inputs). Widths from each model's config.
LAYER_MODELS = (
    ("gpt-1.5b", 2048, 3 * 2048, 8192, False, 1),
    ("zb-6.2b", 4096, 3 * 4096, 16384, False, 1),
    ("zb-14.6b", 5120, 3 * 5120, 20480, False, 1),
    ("zb-28.3b", 6144, 3 * 6144, 24576, False, 1),
    ("llama3-8b", 4096, 6144, 14336, True, 1),
    ("llama3-8b-tp2", 4096, 6144, 14336, True, 2),
    ("llama3-70b-tp8", 8192, 10240, 28672, True, 8),
    ("gpt3-175b-tp8", 12288, 3 * 12288, 49152, False, 8),
)
TOKENS = (2048, 8192)
TOKENS_SCAN = (512, 1024, 4096, 16384)          # llama3-8b only: the M dependence
SQUARES = (256, 512, 1024, 2048, 3072, 4096, 6144, 8192, 12288, 16384)
SHORT_K = (64, 128, 256, 512, 1024, 2048)        # m = n = 8192
SKINNY_N = (128, 256, 512, 768, 1024, 1536, 2048, 3072)  # m = 8192, k = 4096
WAVE_SCAN_N = tuple(range(256, 8448 + 1, 256))   # m = 4096, k = 4096: wave quantization over the SMs
#: MoE experts (hidden, expert width, gated): DeepSeek-V3 / Kimi K2 (7168, 2048), Qwen3-235B-A22B
#: (4096, 1536), Qwen3-30B-A3B (2048, 768), GPT-OSS-120B (2880, 2880), Mixtral 8x7B (4096, 14336)
EXPERTS = (("dsv3", 7168, 2048), ("qwen3-235b", 4096, 1536), ("qwen3-30b", 2048, 768),
           ("gpt-oss", 2880, 2880), ("mixtral", 4096, 14336))
EXPERT_GROUPS = (8, 32)
TOKENS_PER_EXPERT = (64, 128, 256, 512, 1024, 2048)
ATTN_SEQ = (512, 1024, 2048, 4096, 8192, 16384)   # batch x seq = 16k tokens, hidden 2048 ([FA3-F5] setup)
ATTN_LONG = (32768, 65536, 131072)                 # batch 1, 8 heads of 128
ATTN_BACKENDS = ("flash", "cudnn", "efficient")
#: the interpolation grid of the GEMM tables (forward layout, log-spaced): every m x n x k
GRID_M = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
GRID_N = (128, 256, 512, 1024, 2048, 4096, 8192, 16384)
GRID_K = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
#: grouped GEMMs: groups x rows per group x (n, k)
GGRID_G = (4, 8, 16, 32, 64)
GGRID_M = (16, 32, 64, 128, 256, 512, 1024, 2048)
GGRID_NK = ((512, 2048), (768, 2048), (2048, 768), (1536, 4096), (4096, 1536), (2048, 7168), (7168, 2048),
            (4096, 4096), (14336, 4096))
FP8_GRID = (128, 256, 512, 1024, 2048, 4096, 8192, 16384)


def rows_to_csv(rows: list[dict]) -> str:
    if not rows:
        return ""
    cols = list(rows[0])
    for r in rows[1:]:
        cols += [c for c in r if c not in cols]
    out = [",".join(cols)]
    for r in rows:
        out.append(",".join(_cell(r.get(c, "")) for c in cols))
    return "\n".join(out) + "\n"


def _cell(v) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    s = str(v)
    return f'"{s}"' if "," in s else s


class Timer:
    """Device seconds per call of ``fn`` (module docstring: events, sized loop, median of trials)."""

    def __init__(self, torch, device: str):
        self.torch, self.device = torch, device

    def sync(self):
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def __call__(self, fn, warmup: int = 2) -> float:
        torch = self.torch
        for _ in range(warmup):
            fn()
        self.sync()
        t0 = time.perf_counter()
        fn()
        self.sync()
        one = max(time.perf_counter() - t0, 1e-6)
        n = max(1, min(MAX_LOOP, math.ceil(MIN_LOOP_S / one)))
        trials = []
        for _ in range(TRIALS):
            if self.device == "cuda":
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                for _ in range(n):
                    fn()
                b.record()
                torch.cuda.synchronize()
                trials.append(a.elapsed_time(b) * 1e-3 / n)
            else:
                t0 = time.perf_counter()
                for _ in range(n):
                    fn()
                trials.append((time.perf_counter() - t0) / n)
        return statistics.median(trials)


def gemm_shapes(quick: bool) -> list[tuple]:
    """(family, label, pass, m, n, k) where (m, n, k) is the executed GEMM: out [m, n], reduction k."""
    out = []
    models = LAYER_MODELS[:2] if quick else LAYER_MODELS
    for name, h, qkv, ffn, gated, tp in models:
        ops = (("qkv", qkv // tp, h), ("proj", h, h // tp), ("fc1", (2 if gated else 1) * ffn // tp, h),
               ("fc2", h, ffn // tp))
        toks = TOKENS + (TOKENS_SCAN if name == "llama3-8b" and not quick else ())
        for m in toks:
            for op, n, k in ops:
                # forward (m, n, k); input gradient (m, k, n); weight gradient (n, k, m) [out, in] = dy^T x
                out += [("layer", f"{name}.{op}", "fwd", m, n, k), ("layer", f"{name}.{op}", "bwd_input", m, k, n),
                        ("layer", f"{name}.{op}", "bwd_weight", n, k, m)]
    sq = SQUARES[:4] if quick else SQUARES
    out += [("square", f"sq{s}", "fwd", s, s, s) for s in sq]
    out += [("short_k", f"k{k}", "fwd", 8192, 8192, k) for k in (SHORT_K[:2] if quick else SHORT_K)]
    out += [("skinny_n", f"n{n}", "fwd", 8192, n, 4096) for n in (SKINNY_N[:2] if quick else SKINNY_N)]
    out += [("wave_scan", f"n{n}", "fwd", 4096, n, 4096) for n in (WAVE_SCAN_N[:3] if quick else WAVE_SCAN_N)]
    return out


def _gemm_call(torch, dev, dtype, pass_, m, n, k):
    """A callable running the GEMM of ``pass_`` with the layout a linear layer uses for it."""
    g = torch.Generator(device=dev).manual_seed(m * 31 + n * 7 + k)
    r = lambda *s: torch.randn(*s, device=dev, dtype=dtype, generator=g)
    if pass_ == "fwd":          # y[m, n] = x[m, k] @ W[n, k]^T
        x, w = r(m, k), r(n, k)
        return lambda: torch.mm(x, w.t())
    if pass_ == "bwd_input":    # dx[m, n] = dy[m, k] @ W[k, n]   (here W [out=k, in=n])
        dy, w = r(m, k), r(k, n)
        return lambda: torch.mm(dy, w)
    dy, x = r(k, m), r(k, n)    # dW[m, n] = dy[k, m]^T @ x[k, n]   (reduction over k tokens)
    return lambda: torch.mm(dy.t(), x)


def run_gemm(torch, dev, timer, quick, deadline) -> list[dict]:
    rows = []
    for fam, label, pass_, m, n, k in gemm_shapes(quick):
        if time.perf_counter() > deadline:
            break
        f = _gemm_call(torch, dev, torch.bfloat16, pass_, m, n, k)
        t = timer(f)
        rows.append(dict(family=fam, label=label, dtype="bf16", kernel="torch.mm", pass_=pass_, m=m, n=n, k=k,
                         groups=1, time_us=t * 1e6, tflops=2.0 * m * n * k / t / 1e12))
        del f
    return [{("pass" if c == "pass_" else c): v for c, v in r.items()} for r in rows]


def run_fp8(torch, dev, timer, quick, deadline) -> list[dict]:
    if dev != "cuda" or not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
        return []
    rows = []
    shapes = [(s, s, s) for s in ((4096, 8192) if quick else (2048, 4096, 8192, 16384))]
    shapes += [(m, n, k) for _, label, p, m, n, k in gemm_shapes(quick) if p == "fwd" and "." in label
               and m in (2048, 8192)][: (4 if quick else 64)]
    one = torch.ones((), device=dev, dtype=torch.float32)
    for m, n, k in shapes:
        if time.perf_counter() > deadline:
            break
        a = torch.randn(m, k, device=dev).to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device=dev).to(torch.float8_e4m3fn).t()   # column-major [k, n]: cuBLASLt's TN
        f = lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        try:
            t = timer(f)
        except RuntimeError as e:   # a shape the fp8 kernels refuse (alignment): recorded, not fatal
            rows.append(dict(family="fp8", label=f"{m}x{n}x{k}", dtype="fp8", kernel="torch._scaled_mm",
                             m=m, n=n, k=k, groups=1, time_us="", tflops="", error=str(e).splitlines()[0][:80]))
            continue
        rows.append(dict(family="fp8", label=f"{m}x{n}x{k}", dtype="fp8", kernel="torch._scaled_mm", **{"pass": "fwd"},
                         m=m, n=n, k=k, groups=1, time_us=t * 1e6, tflops=2.0 * m * n * k / t / 1e12))
    return rows


def run_grouped(torch, dev, timer, quick, deadline) -> list[dict]:
    """MoE expert GEMMs: ``torch._grouped_mm`` (the kernel torchtitan's MoE calls) where present, and
    a loop of ``torch.mm`` over the experts (what an unfused implementation launches) beside it."""
    rows = []
    have = dev == "cuda" and hasattr(torch, "_grouped_mm")
    experts = EXPERTS[:2] if quick else EXPERTS
    for name, h, w, in experts:
        for groups in EXPERT_GROUPS:
            for tpe in (TOKENS_PER_EXPERT[:2] if quick else TOKENS_PER_EXPERT):
                if time.perf_counter() > deadline:
                    return rows
                for what, m, n, k in (("up", tpe, w, h), ("down", tpe, h, w)):   # per expert: out [tpe, n]
                    if groups * n * k * 2 > 2 * 2**30:
                        continue
                    x = torch.randn(groups * m, k, device=dev, dtype=torch.bfloat16)
                    wt = torch.randn(groups, n, k, device=dev, dtype=torch.bfloat16)
                    flop = 2.0 * groups * m * n * k
                    base = dict(family="grouped", label=f"{name}.{what}", dtype="bf16", **{"pass": "fwd"},
                                m=m, n=n, k=k, groups=groups)
                    if have:
                        offs = torch.arange(1, groups + 1, device=dev, dtype=torch.int32) * m
                        f = lambda: torch._grouped_mm(x, wt.transpose(-2, -1), offs=offs)
                        try:
                            t = timer(f)
                            rows.append(dict(base, kernel="torch._grouped_mm", time_us=t * 1e6, tflops=flop / t / 1e12))
                        except RuntimeError as e:
                            rows.append(dict(base, kernel="torch._grouped_mm", time_us="", tflops="",
                                             error=str(e).splitlines()[0][:80]))
                    if groups <= 8 or quick:
                        xs = x.view(groups, m, k)
                        f = lambda: [torch.mm(xs[i], wt[i].t()) for i in range(groups)]
                        t = timer(f)
                        rows.append(dict(base, kernel="loop torch.mm", time_us=t * 1e6, tflops=flop / t / 1e12))
                    del x, wt
    return rows


def _time_sdpa(torch, timer, be, q, k, v, causal: bool, fwd_flop: float, base: dict, **kw) -> list[dict]:
    """Forward and backward rows of one ``scaled_dot_product_attention`` on backend ``be`` (an error row
    when the backend refuses the inputs): backward as ``autograd.grad`` of a retained forward."""
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel
    try:
        with sdpa_kernel([be]):
            fw = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, **kw)
            t_f = timer(fw, warmup=1)
            out = fw()
            dout = torch.randn_like(out)
            bw = lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
            t_b = timer(bw, warmup=1)
    except RuntimeError as e:
        return [dict(base, **{"pass": "fwd"}, time_us="", tflops="", error=str(e).splitlines()[0][:80])]
    return [dict(base, **{"pass": "fwd"}, time_us=t_f * 1e6, tflops=fwd_flop / t_f / 1e12),
            dict(base, **{"pass": "bwd"}, time_us=t_b * 1e6, tflops=2.5 * fwd_flop / t_b / 1e12)]


def run_attention(torch, dev, timer, quick, deadline) -> list[dict]:
    """``scaled_dot_product_attention`` per backend (PyTorch's FlashAttention-2, cuDNN, memory-efficient)."""
    try:
        from torch.nn.attention import SDPBackend
    except ImportError:
        return []
    backends = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": getattr(SDPBackend, "CUDNN_ATTENTION", None),
                "efficient": SDPBackend.EFFICIENT_ATTENTION}
    configs = []
    for d in (64, 128):
        for s in (ATTN_SEQ[:2] if quick else ATTN_SEQ):
            for causal in (False, True):
                configs.append((16384 // s, 2048 // d, s, d, causal, "fa3-setup"))
    if not quick:
        configs += [(1, 8, s, 128, True, "long") for s in ATTN_LONG]
    if dev == "cpu":
        configs = [(1, 2, 256, 64, True, "cpu")]
    rows = []
    for b, h, s, d, causal, setup in configs:
        for bname in ATTN_BACKENDS:
            if time.perf_counter() > deadline:
                return rows
            be = backends.get(bname)
            if be is None or (dev == "cpu" and bname == "cudnn"):
                continue
            g = torch.Generator(device=dev).manual_seed(s + d)
            q, k, v = (torch.randn(b, h, s, d, device=dev, dtype=torch.bfloat16, generator=g).requires_grad_()
                       for _ in range(3))
            fwd_flop = 4.0 * b * s * s * h * d / (2 if causal else 1)
            base = dict(setup=setup, backend=bname, batch=b, heads=h, seq=s, head_dim=d, causal=causal)
            rows += _time_sdpa(torch, timer, be, q, k, v, causal, fwd_flop, base)
            del q, k, v
    return rows


def run_membound(torch, dev, timer, quick, deadline) -> list[dict]:
    """Memory-bound kernels of a step, as GB/s of the bytes each must move (reads + writes)."""
    import torch.nn.functional as F
    n = (1 << 24) if (quick or dev == "cpu") else (1 << 28)        # elements: 256 Mi = 512 MiB in bf16
    a = torch.randn(n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, device=dev, dtype=torch.bfloat16)
    t2 = (n // 4096, 4096)
    x2 = a.view(t2)
    w = torch.ones(4096, device=dev, dtype=torch.bfloat16)
    gate = b.view(t2)
    cases = [
        ("copy bf16", lambda: a.clone(), 4 * n),
        ("add bf16", lambda: a + b, 6 * n),
        ("cast bf16->fp32", lambda: a.float(), 6 * n),
        ("rms_norm fwd [t,4096]", lambda: F.rms_norm(x2, (4096,), w) if hasattr(F, "rms_norm") else None, 4 * n),
        ("layer_norm fwd [t,4096]", lambda: F.layer_norm(x2, (4096,), w), 4 * n),
        ("softmax fp32 out [t,4096]", lambda: torch.softmax(x2, -1, dtype=torch.float32), 6 * n),
        ("silu*mul (swiglu) [t,4096]", lambda: F.silu(x2) * gate, 6 * n),
    ]
    rows = []
    for name, f, nbytes in cases:
        if time.perf_counter() > deadline:
            break
        t = timer(f)
        rows.append(dict(kernel=name, elements=n, bytes=nbytes, time_us=t * 1e6, gbps=nbytes / t / 1e9))
    del a, b, x2, gate
    # fused AdamW over fp32 master weights, fp32 gradients (torch.optim.AdamW(fused=True), the
    # multi-tensor kernel): reads p, g, m, v and writes p, m, v = 28 bytes per parameter
    p_n = (1 << 22) if (quick or dev == "cpu") else (1 << 27)
    params = [torch.nn.Parameter(torch.randn(p_n // 8, device=dev)) for _ in range(8)]
    for p in params:
        p.grad = torch.randn_like(p)
    try:
        opt = torch.optim.AdamW(params, lr=1e-4, fused=(dev == "cuda"))
    except (RuntimeError, TypeError):
        opt = torch.optim.AdamW(params, lr=1e-4)
    t = timer(opt.step)
    rows.append(dict(kernel="AdamW fused step fp32", elements=p_n, bytes=28 * p_n, time_us=t * 1e6,
                     gbps=28 * p_n / t / 1e9))
    return rows


def run_host(torch, dev, timer, quick, deadline) -> list[dict]:
    """Host-side costs of eager PyTorch: per-launch issue time, the restart after a synchronize, and
    a transformer block's host issue time beside its device time."""
    rows = []
    tiny = torch.ones(1, device=dev)
    n = 2000
    timer.sync()
    t0 = time.perf_counter()
    for _ in range(n):
        tiny.add_(1)
    host = (time.perf_counter() - t0) / n
    timer.sync()
    dev_t = timer(lambda: [tiny.add_(1) for _ in range(100)]) / 100
    rows.append(dict(what="launch: host issue per tiny kernel (add_)", value_us=host * 1e6))
    rows.append(dict(what="launch: device time per tiny kernel, back to back", value_us=dev_t * 1e6))
    if dev == "cuda":
        big = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
        gaps = []
        for _ in range(20):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.mm(big, big)
            e0.record()
            torch.cuda.synchronize()
            tiny.add_(1)
            e1.record()
            torch.cuda.synchronize()
            gaps.append(e0.elapsed_time(e1) * 1e3)
        rows.append(dict(what="restart: event before synchronize -> event after the next kernel (median)",
                         value_us=statistics.median(gaps)))
        del big
    # a pre-norm GPT block in eager PyTorch (what torchtitan runs without torch.compile)
    for hdim in ((512,) if (quick or dev == "cpu") else (1024, 2048, 4096)):
        if time.perf_counter() > deadline:
            break
        s_len = 256 if dev == "cpu" else 2048
        blk = torch.nn.TransformerEncoderLayer(hdim, max(1, hdim // 128), 4 * hdim, dropout=0.0, batch_first=True,
                                               norm_first=True, device=dev, dtype=torch.bfloat16)
        x = torch.randn(1, s_len, hdim, device=dev, dtype=torch.bfloat16, requires_grad=True)
        mask = torch.nn.Transformer.generate_square_subsequent_mask(s_len, device=dev, dtype=torch.bfloat16)
        fw = lambda: blk(x, src_mask=mask, is_causal=True)
        for _ in range(3):
            fw().sum().backward()
        timer.sync()
        t0 = time.perf_counter()
        y = fw()
        host_f = time.perf_counter() - t0
        loss = y.sum()
        timer.sync()
        t0 = time.perf_counter()
        loss.backward()
        host_b = time.perf_counter() - t0
        timer.sync()
        dev_f = timer(fw, warmup=1)
        dev_fb = timer(lambda: fw().sum().backward(), warmup=1)
        rows += [dict(what=f"block h={hdim} s={s_len}: forward host issue", value_us=host_f * 1e6),
                 dict(what=f"block h={hdim} s={s_len}: forward device", value_us=dev_f * 1e6),
                 dict(what=f"block h={hdim} s={s_len}: backward host issue", value_us=host_b * 1e6),
                 dict(what=f"block h={hdim} s={s_len}: forward+backward device", value_us=dev_fb * 1e6)]
        del blk, x
    return rows


def run_grid(torch, dev, timer, quick, deadline) -> list[dict]:
    """Every (m, n, k) of GRID_M x GRID_N x GRID_K in the forward layout (the table cost models interpolate)."""
    rows = []
    gm, gn, gk = (GRID_M[:2], GRID_N[:2], GRID_K[:2]) if quick else (GRID_M, GRID_N, GRID_K)
    for m in gm:
        for n in gn:
            for k in gk:
                if time.perf_counter() > deadline:
                    return rows
                f = _gemm_call(torch, dev, torch.bfloat16, "fwd", m, n, k)
                t = timer(f)
                rows.append(dict(family="grid", label="", dtype="bf16", kernel="torch.mm", **{"pass": "fwd"}, m=m, n=n,
                                 k=k, groups=1, time_us=t * 1e6, tflops=2.0 * m * n * k / t / 1e12))
                del f
    return rows


def run_grouped_grid(torch, dev, timer, quick, deadline) -> list[dict]:
    """``torch._grouped_mm`` over GGRID_G x GGRID_M x GGRID_NK (forward layout, equal groups)."""
    if dev != "cuda" or not hasattr(torch, "_grouped_mm"):
        return []
    rows = []
    for n, k in (GGRID_NK[:1] if quick else GGRID_NK):
        for groups in (GGRID_G[:1] if quick else GGRID_G):
            if groups * n * k * 2 > 4 * 2**30:
                continue
            wt = torch.randn(groups, n, k, device=dev, dtype=torch.bfloat16)
            for m in (GGRID_M[:2] if quick else GGRID_M):
                if time.perf_counter() > deadline:
                    return rows
                x = torch.randn(groups * m, k, device=dev, dtype=torch.bfloat16)
                offs = torch.arange(1, groups + 1, device=dev, dtype=torch.int32) * m
                f = lambda: torch._grouped_mm(x, wt.transpose(-2, -1), offs=offs)
                base = dict(family="grouped_grid", label="", dtype="bf16", kernel="torch._grouped_mm",
                            **{"pass": "fwd"}, m=m, n=n, k=k, groups=groups)
                try:
                    t = timer(f)
                    rows.append(dict(base, time_us=t * 1e6, tflops=2.0 * groups * m * n * k / t / 1e12))
                except RuntimeError as e:
                    rows.append(dict(base, time_us="", tflops="", error=str(e).splitlines()[0][:80]))
                del x
            del wt
    return rows


def run_fp8_grid(torch, dev, timer, quick, deadline) -> list[dict]:
    """``torch._scaled_mm`` (cuBLASLt FP8, per-tensor scales) over FP8_GRID^3."""
    if dev != "cuda" or not hasattr(torch, "_scaled_mm"):
        return []
    rows = []
    one = torch.ones((), device=dev, dtype=torch.float32)
    g = FP8_GRID[:2] if quick else FP8_GRID
    for m in g:
        for n in g:
            for k in g:
                if time.perf_counter() > deadline:
                    return rows
                a = torch.randn(m, k, device=dev).to(torch.float8_e4m3fn)
                b = torch.randn(n, k, device=dev).to(torch.float8_e4m3fn).t()
                f = lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
                t = timer(f)
                rows.append(dict(family="fp8_grid", label="", dtype="fp8", kernel="torch._scaled_mm", **{"pass": "fwd"},
                                 m=m, n=n, k=k, groups=1, time_us=t * 1e6, tflops=2.0 * m * n * k / t / 1e12))
    return rows


def run_gqa(torch, dev, timer, quick, deadline) -> list[dict]:
    """Grouped-query attention (32 query heads, 8 KV heads, head dim 128, causal), SDPA with
    ``enable_gqa`` and with the KV heads expanded, per backend; and the context-parallel block shape
    (queries of s/2 against keys of s, no mask) the profile builder times."""
    from torch.nn.attention import SDPBackend
    backends = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                "efficient": SDPBackend.EFFICIENT_ATTENTION}
    rows = []
    for s in ((2048,) if quick else (2048, 4096, 8192, 16384)):
        for bname, be in backends.items():
            for mode in ("gqa", "expanded", "cp-block"):
                if time.perf_counter() > deadline:
                    return rows
                sq = s // 2 if mode == "cp-block" else s
                q = torch.randn(1, 32, sq, 128, device=dev, dtype=torch.bfloat16, requires_grad=True)
                hk = 8 if mode == "gqa" else 32
                k = torch.randn(1, hk, s, 128, device=dev, dtype=torch.bfloat16, requires_grad=True)
                v = torch.randn(1, hk, s, 128, device=dev, dtype=torch.bfloat16, requires_grad=True)
                causal = mode != "cp-block"
                kw = {"enable_gqa": True} if mode == "gqa" else {}
                flop = 4.0 * sq * s * 32 * 128 / (2 if causal else 1)
                base = dict(setup=mode, backend=bname, batch=1, heads=32, seq=s, head_dim=128, causal=causal)
                rows += _time_sdpa(torch, timer, be, q, k, v, causal, flop, base, **kw)
                del q, k, v
    return rows


def _llama_block(torch, h: int, heads: int, kv_heads: int, ffn: int, dev, dtype):
    """A Llama block as torchtitan writes it in eager PyTorch (torchtitan/models/llama3/model.py:
    nn.RMSNorm, separate wq/wk/wv/wo, rotary embedding through complex multiplication, repeat_kv by
    expand, F.scaled_dot_product_attention(is_causal=True), SwiGLU as w2(silu(w1 x) * w3 x))."""
    nn, F = torch.nn, torch.nn.functional
    hd = h // heads

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attention_norm, self.ffn_norm = nn.RMSNorm(h), nn.RMSNorm(h)
            self.wq, self.wk = nn.Linear(h, heads * hd, bias=False), nn.Linear(h, kv_heads * hd, bias=False)
            self.wv, self.wo = nn.Linear(h, kv_heads * hd, bias=False), nn.Linear(heads * hd, h, bias=False)
            self.w1, self.w3 = nn.Linear(h, ffn, bias=False), nn.Linear(h, ffn, bias=False)
            self.w2 = nn.Linear(ffn, h, bias=False)

        def rope(self, x, freqs):
            xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
            return torch.view_as_real(xc * freqs).flatten(3).type_as(x)

        def forward(self, x, freqs):
            b, s, _ = x.shape
            y = self.attention_norm(x)
            q = self.wq(y).view(b, s, heads, hd)
            k = self.wk(y).view(b, s, kv_heads, hd)
            v = self.wv(y).view(b, s, kv_heads, hd)
            q, k = self.rope(q, freqs), self.rope(k, freqs)
            r = heads // kv_heads
            k = k[:, :, :, None, :].expand(b, s, kv_heads, r, hd).reshape(b, s, heads, hd)
            v = v[:, :, :, None, :].expand(b, s, kv_heads, r, hd).reshape(b, s, heads, hd)
            o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
            x = x + self.wo(o.transpose(1, 2).reshape(b, s, h))
            y = self.ffn_norm(x)
            return x + self.w2(F.silu(self.w1(y)) * self.w3(y))

    return Block().to(device=dev, dtype=dtype)


def _kernel_count(torch, fn) -> int:
    """Device kernels one call of ``fn`` launches (torch.profiler, CUDA activity)."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)


def run_host_llama(torch, dev, timer, quick, deadline) -> list[dict]:
    """Host issue time and kernel count of a torchtitan-style Llama block, eager and torch.compile'd,
    forward and backward, beside its device time: where eager small layers are host-bound."""
    rows = []
    shapes = ((512, 4, 4, 1536, 256),) if (quick or dev == "cpu") else (
        (1024, 8, 8, 2816, 2048), (2048, 16, 8, 5632, 2048), (2048, 16, 8, 5632, 8192),
        (4096, 32, 8, 14336, 2048), (4096, 32, 8, 14336, 8192))
    modes = ("eager",) if dev == "cpu" else ("eager", "compile")
    for h, heads, kvh, ffn, s in shapes:
        for mode in modes:
            if time.perf_counter() > deadline or (mode == "compile" and s != 2048):
                continue
            blk = _llama_block(torch, h, heads, kvh, ffn, dev, torch.bfloat16)
            fwd_mod = torch.compile(blk) if mode == "compile" else blk
            x = torch.randn(1, s, h, device=dev, dtype=torch.bfloat16, requires_grad=True)
            hd = h // heads
            ang = torch.outer(torch.arange(s, device=dev, dtype=torch.float32),
                              1.0 / (10000 ** (torch.arange(0, hd, 2, device=dev, dtype=torch.float32) / hd)))
            freqs = torch.polar(torch.ones_like(ang), ang)[None, :, None, :]
            fw = lambda: fwd_mod(x, freqs)
            for _ in range(3):
                fw().sum().backward()
            timer.sync()
            host = {"fwd": [], "bwd": []}
            for _ in range(5):
                t0 = time.perf_counter()
                y = fw()
                host["fwd"].append(time.perf_counter() - t0)
                loss = y.sum()
                timer.sync()
                t0 = time.perf_counter()
                loss.backward()
                host["bwd"].append(time.perf_counter() - t0)
                timer.sync()
            dev_f = timer(fw, warmup=1)
            dev_fb = timer(lambda: fw().sum().backward(), warmup=1)
            kf = _kernel_count(torch, fw) if dev == "cuda" else 0
            kfb = _kernel_count(torch, lambda: fw().sum().backward()) if dev == "cuda" else 0
            base = dict(mode=mode, hidden=h, heads=heads, kv_heads=kvh, ffn=ffn, seq=s)
            rows.append(dict(base, what="forward", kernels=kf, host_us=statistics.median(host["fwd"]) * 1e6,
                             loop_us=dev_f * 1e6))
            rows.append(dict(base, what="forward+sum+backward", kernels=kfb,
                             host_us=(statistics.median(host["fwd"]) + statistics.median(host["bwd"])) * 1e6,
                             loop_us=dev_fb * 1e6))
            del blk, fwd_mod, x
    return rows


RUNNERS = {"gemm": run_gemm, "fp8": run_fp8, "grouped": run_grouped, "attention": run_attention,
           "membound": run_membound, "host": run_host, "grid": run_grid, "grouped_grid": run_grouped_grid,
           "fp8_grid": run_fp8_grid, "gqa": run_gqa, "host_llama": run_host_llama}
FILES = {"gemm": "gemm.csv", "fp8": "gemm_fp8.csv", "grouped": "grouped.csv", "attention": "attention.csv",
         "membound": "membound.csv", "host": "host.csv", "grid": "gemm_grid.csv", "grouped_grid": "grouped_grid.csv",
         "fp8_grid": "gemm_fp8_grid.csv", "gqa": "attention_gqa.csv", "host_llama": "host_llama.csv"}


def meta(torch, dev) -> dict:
    m = {"torch": torch.__version__, "cuda": getattr(torch.version, "cuda", None), "device": dev,
         "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime())}
    if dev == "cuda":
        p = torch.cuda.get_device_properties(0)
        m.update(gpu=p.name, sms=p.multi_processor_count, memory_bytes=p.total_memory,
                 l2_bytes=getattr(p, "L2_cache_size", None), cc=f"{p.major}.{p.minor}",
                 cublas=getattr(torch.backends.cuda, "preferred_blas_library", lambda: None)().__str__())
    return m


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="directory for the CSVs (created)")
    ap.add_argument("--parts", default=",".join(PARTS[:6]), help=f"comma-separated subset of {','.join(PARTS)}")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--budget-s", type=float, default=300.0, help="total seconds, shared by the parts (<= 3600)")
    ap.add_argument("--quick", action="store_true", help="a few shapes of each part (a smoke test)")
    a = ap.parse_args(argv)
    parts = [p for p in a.parts.split(",") if p]
    bad = [p for p in parts if p not in RUNNERS]
    if bad:
        ap.error(f"--parts: {', '.join(bad)} not known; choose from {', '.join(PARTS)}")
    if not 1 <= a.budget_s <= 3600:
        ap.error(f"--budget-s = {a.budget_s} must be in [1, 3600]")
    import torch
    if a.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda but torch sees no CUDA device")
    from simulator.outputs.files import write_output
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    timer = Timer(torch, a.device)
    info = meta(torch, a.device)
    write_output(out / "meta.json", json.dumps(info, indent=1) + "\n", "--out")
    start = time.perf_counter()
    for i, part in enumerate(parts):
        share = (a.budget_s - (time.perf_counter() - start)) / (len(parts) - i)
        t0 = time.perf_counter()
        try:
            rows = RUNNERS[part](torch, a.device, timer, a.quick, t0 + share)
        except Exception as e:  # noqa: BLE001 -- a part that fails must not lose the others' data
            print(f"{part}: FAILED {type(e).__name__}: {e}", file=sys.stderr, flush=True)
            continue
        finally:
            if a.device == "cuda":
                torch.cuda.empty_cache()
        write_output(out / FILES[part], rows_to_csv(rows), "--out")
        print(f"{part}: {len(rows)} rows in {time.perf_counter() - t0:.1f} s -> {out / FILES[part]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
