"""Each operator of the graph built with PyTorch at its per-GPU shape, its three passes timed.

What each pass runs (the kernels a PyTorch / Megatron-LM training step launches for it):

* GEMM operators (``op.gemms``: qkv, attn_out, mlp_*, lm_head, experts, MLA projections, router):
  ``nn.Linear``'s layouts, weight W[n, k]: forward ``X @ W^T``, input gradient ``dY @ W``, weight
  gradient ``dY^T @ X`` (``torch.nn.functional.linear`` and its autograd formula,
  tools/autograd/derivatives.yaml ``addmm``/``mm``); batched shapes (local experts) with ``bmm``.
  FP8 runs through ``torch._scaled_mm`` (e4m3 operands, per-tensor scales, the Transformer Engine
  tensorwise recipe) where the device has it; elsewhere the command stops with that message.
* Attention core: ``torch.nn.functional.scaled_dot_product_attention`` (the backend PyTorch picks) on
  the launches one rank runs for the operator's work (:func:`attention_launches`: with context
  parallelism Transformer Engine's causal load-balanced chunks, not one unmasked queries x keys block);
  input gradient = their whole backward (dQ, dK, dV); no weights.
* Norms: ``F.layer_norm`` / ``F.rms_norm`` (model.norm); input and weight gradient taken apart with
  ``torch.autograd.grad`` (the backward kernel then computes only the asked-for outputs).
* Activations (gelu, swiglu, geglu), residual adds (dropout + add when the model has dropout),
  logit soft-capping, the embedding lookup (weight gradient = its scatter-add) and the
  vocabulary cross-entropy (fp32 logits, Megatron's vocab-parallel loss): autograd of the op.
* Anything else without GEMMs: a bandwidth proxy, one elementwise add moving the operator's forward
  bytes (reported as ``proxy``).

A pass the operator does not have (no weight gradient of an activation, say) is 0 by definition.

On the CPU each pass is timed in the state a training step runs it in, not the state a loop of
isolated calls leaves behind (the gap measured in docs/validation.md, CPU real runs): caches cold
before each call except for the operand the previous operator of the step has just written (the
activation going forward, the output gradient going backward: ``HOT``; ``timing.median_seconds``); a weight gradient followed by its accumulation into the
parameter's gradient (``_accumulating``); and the loss writing memory never touched before: its fp32
tensors (tokens x vocabulary x 4 bytes: the cast logits, the log-softmax, the gradient's zeros and
the log-softmax gradient) are the largest a step allocates, and glibc's malloc hands such blocks out
as new mappings (mallopt(3), M_MMAP_THRESHOLD: the threshold rises to the largest freed mapping, and
the heap above M_TRIM_THRESHOLD is returned to the kernel), so every call takes one page fault per
4 KiB written. Counted in the real single-process run: 16-34 k minor faults per step, against
4 tensors x 2048 pages x 4 micro-batches = 32 k for those tensors alone.
"""
from __future__ import annotations

import math

from simulator.profiling.inventory import ProfileItem
from simulator.profiling.timing import ProfilingError, median_seconds
from taskgraph.cost import PASSES, pass_shape

#: key of a builder's passes dict: pass -> the tensors a step has in cache when the pass starts
HOT = "hot"
TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp8": "bfloat16"}
#: _EW_FLOPS forward FLOPs per element (taskgraph/operators.py) to recover element counts
_ACT_FLOPS = {"gelu": 8, "swiglu": 5, "geglu": 10, "squared-relu": 2}


def _rand(torch, shape, dtype, device, grad=False):
    t = torch.randn(*shape, dtype=dtype, device=device) * 0.02
    return t.requires_grad_(grad)


def _gemm_passes(torch, item: ProfileItem, dtype, device, fp8: bool) -> dict:
    """Closures for the three passes of a GEMM operator (module docstring)."""
    calls = {p: [] for p in PASSES}
    hot = {p: [] for p in PASSES}
    for g in item.op.gemms:
        for p in PASSES:
            m, n, k, b = pass_shape(g, p)
            fn, operands = _one_gemm(torch, m, n, k, b, dtype, device, fp8)
            calls[p].append(fn)
            # the operand the previous operator of the step has just written: the activation X in
            # forward, the output gradient dY in both backward passes (second operand of dW = dY^T X)
            hot[p] += operands[1:] if p == "bwd_weight" else operands[:1]
    return {**{p: (lambda fs=fs: [f() for f in fs]) for p, fs in calls.items()}, HOT: hot}


def _one_gemm(torch, m, n, k, b, dtype, device, fp8: bool):
    """(the call, its operands (x, w)) of ``x @ w^T`` with x [b, m, k] and w [b, n, k]."""
    if fp8:
        return _fp8_gemm(torch, m, n, k, b, device), ()
    if b == 1:
        x, w = _rand(torch, (m, k), dtype, device), _rand(torch, (n, k), dtype, device)
        return (lambda: torch.mm(x, w.t())), (x, w)
    x, w = _rand(torch, (b, m, k), dtype, device), _rand(torch, (b, n, k), dtype, device)
    return (lambda: torch.bmm(x, w.transpose(1, 2))), (x, w)


def _fp8_gemm(torch, m, n, k, b, device):
    """One e4m3 GEMM with per-tensor scales (Transformer Engine's tensorwise recipe)."""
    if device != "cuda" or not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
        raise ProfilingError(f"fp8 GEMMs need torch._scaled_mm on a CUDA GPU with FP8 tensor cores (this is "
                             f"{device}, torch {torch.__version__}); profile with --set training.precision=bf16")
    if m % 16 or n % 16 or k % 16:
        raise ProfilingError(f"torch._scaled_mm needs GEMM sizes divisible by 16, not {m}x{n}x{k}; profile with "
                             f"--set training.precision=bf16")
    x = torch.randn(m, k, device=device).to(torch.float8_e4m3fn)
    w = torch.randn(n, k, device=device).to(torch.float8_e4m3fn)
    one = torch.ones((), device=device)

    def run():
        for _ in range(b):
            torch._scaled_mm(x, w.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    try:
        run()
    except RuntimeError as exc:
        raise ProfilingError(f"torch._scaled_mm is not available on this GPU ({str(exc)[:80]}); profile with "
                             f"--set training.precision=bf16") from None
    return run


def _autograd_passes(torch, fwd, inputs, weights) -> dict:
    """fwd(): the output; passes: forward, gradient w.r.t. ``inputs``, gradient w.r.t. ``weights``."""
    out = fwd()
    dy = torch.randn_like(out)
    passes = {"fwd": fwd}
    passes["bwd_input"] = (lambda: torch.autograd.grad(out, inputs, dy, retain_graph=True)) if inputs else None
    passes["bwd_weight"] = (lambda: torch.autograd.grad(out, weights, dy, retain_graph=True)) if weights else None
    # what the previous operator of the step has just written: the input going forward, the
    # output gradient going backward
    passes[HOT] = {"fwd": list(inputs), "bwd_input": [dy], "bwd_weight": [dy]}
    return passes


def attention_launches(sq: int, skv: int, heads: int, *, causal: bool, cp: int = 1, cp_comm: str = "allgather",
                       balanced: bool = True) -> tuple:
    """The attention kernel launches one rank runs for an attention core of ``sq`` local queries
    against ``skv`` keys (``heads`` = batch x heads of the operator): tuples (queries, keys, heads,
    mask), mask 'causal' (aligned to the bottom right, FlashAttention >= 2.1's and cuDNN's
    ``causal_bottom_right``: query i of q sees keys up to k - q + i) or 'none'. Their (query, key)
    pairs are those the cost model prices (taskgraph/operators.py ``_attention_ops``:
    ``attention_pairs(s) / cp`` with load balancing, the last rank's pairs without), so the profile
    times the operator's work, not an unmasked ``sq x skv`` block (twice the work with cp = 2).

    Without CP: one launch, causal or not. With CP (c = sq / 2, the two zig-zag chunks a rank holds:
    chunks r and 2cp-1-r of 2cp; Transformer Engine
    transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py), rank 0's launches
    (every rank runs the same pairs):

    * 'allgather' (``AttnFuncWithCPAndKVAllGather``): each local chunk against the gathered keys up
      to its own end, causal -- (c, c) and (c, skv);
    * 'ring' (``AttnFuncWithCPAndKVP2P``): step 0 the local queries against the local keys, causal
      (sq, sq); each of the cp - 1 other steps the second-half queries against the sender's keys,
      unmasked (c, sq) (a rank below the sender; above it, all queries against the first half: the
      same pairs);
    * 'a2a' (Ulysses, ``AttnFuncWithCPAndQKVOA2A``): the whole sequence for heads / cp, causal;
    * without load balancing the last rank's queries against all keys, causal (sq, skv) -- also with
      'a2a', where the cost model prices that imbalance too (taskgraph/operators.py).

    A model the cost model prices unmasked (``causal_halved`` off: flash_attention false) runs the
    full square, unmasked.

    >>> attention_launches(4096, 8192, 32, causal=True, cp=2)
    ((2048, 2048, 32, 'causal'), (2048, 8192, 32, 'causal'))
    >>> attention_launches(4096, 8192, 32, causal=True, cp=2, cp_comm="ring")
    ((4096, 4096, 32, 'causal'), (2048, 4096, 32, 'none'))
    """
    mask = "causal" if causal else "none"
    if cp <= 1:
        return ((sq, skv, heads, mask),)
    if causal and not balanced:
        return ((sq, skv, heads, "causal"),)
    if cp_comm == "a2a":
        return ((skv, skv, heads // cp, mask),)
    if not causal:
        return ((sq, skv, heads, "none"),)
    c = sq // 2
    if cp_comm == "ring":
        return ((sq, sq, heads, "causal"),) + ((c, sq, heads, "none"),) * (cp - 1)
    return ((c, c, heads, "causal"), (c, skv, heads, "causal"))


def launch_pairs(launches) -> float:
    """(query, key) pairs x heads the launches score (a causal launch of q queries against k keys
    skips the q(q-1)/2 pairs above its diagonal: bottom-right aligned, or top-left with q = k)."""
    return float(sum(h * (q * k - (q * (q - 1) // 2 if m == "causal" else 0)) for q, k, h, m in launches))


def sdpa_calls(launches) -> tuple:
    """The ``scaled_dot_product_attention`` calls that time ``launches``: (queries, keys, heads,
    is_causal). SDPA's ``is_causal`` aligns the mask to the top left (query i sees keys up to i), so a
    bottom-right causal launch of q queries against k > q keys runs as the unmasked (q, k - q) block
    of the keys every query sees and the causal (q, q) square on the diagonal: the same pairs, on the
    backend PyTorch picks for plain calls (an ``attn_mask`` such as ``causal_lower_right`` would send it
    to FlashAttention-2 only, half cuDNN's speed on an H200: [EXECSIM-H200] in kernels.yaml).

    >>> sdpa_calls(((2048, 8192, 32, "causal"),))
    ((2048, 6144, 32, False), (2048, 2048, 32, True))
    """
    out = []
    for q, k, h, mask in launches:
        if mask == "causal" and k > q:
            out += [(q, k - q, h, False), (q, q, h, True)]
        else:
            out.append((q, k, h, mask == "causal"))
    return tuple(out)


def build_attention(torch, item, plan, dtype, device) -> dict:
    F = torch.nn.functional
    g0, g1 = item.op.gemms[0], item.op.gemms[1]
    sq, skv, d, bh, dv = g0.m, g0.n, g0.k, g0.batch, g1.n
    opt = plan.strategy.options
    launches = attention_launches(sq, skv, bh, causal=opt.flash_attention, cp=plan.sizes.cp,
                                  cp_comm=opt.cp_comm, balanced=opt.cp_load_balance)
    calls, inputs = [], []
    for nq, nk, h, causal in sdpa_calls(launches):
        q = _rand(torch, (1, h, nq, d), dtype, device, True)
        k = _rand(torch, (1, h, nk, d), dtype, device, True)
        v = _rand(torch, (1, h, nk, dv), dtype, device, True)
        calls.append(lambda q=q, k=k, v=v, c=causal: F.scaled_dot_product_attention(q, k, v, is_causal=c))
        inputs += [q, k, v]
    outs = [f() for f in calls]
    dys = [torch.randn_like(o) for o in outs]
    return {"fwd": lambda: [f() for f in calls],
            "bwd_input": lambda: torch.autograd.grad(outs, inputs, dys, retain_graph=True),
            "bwd_weight": None,
            # what the previous operator of the step has just written: the inputs going forward, the
            # output gradients going backward
            HOT: {"fwd": list(inputs), "bwd_input": dys, "bwd_weight": dys}}


def _norm(torch, item, plan, dtype, device) -> dict:
    F = torch.nn.functional
    m, op = plan.model, item.op
    elems = op.fwd_bytes // (2 * _dtype_bytes(plan))
    width = m.hidden if elems % m.hidden == 0 else m.head_dim
    x = _rand(torch, (elems // width, width), dtype, device, True)
    w = torch.ones(width, dtype=dtype, device=device, requires_grad=True)
    if m.norm == "rmsnorm":
        if not hasattr(F, "rms_norm"):
            raise ProfilingError(f"RMSNorm needs torch >= 2.4 (this is {torch.__version__})")
        return _autograd_passes(torch, lambda: F.rms_norm(x, (width,), w, 1e-5), [x], [w])
    b = torch.zeros(width, dtype=dtype, device=device, requires_grad=True)
    return _autograd_passes(torch, lambda: F.layer_norm(x, (width,), w, b, 1e-5), [x], [w, b])


def _activation(torch, item, plan, dtype, device) -> dict:
    F = torch.nn.functional
    kind = plan.model.mlp
    elems = int(item.op.fwd_flops // _ACT_FLOPS.get(kind, 8))
    if kind in ("swiglu", "geglu"):
        x = _rand(torch, (elems * 2,), dtype, device, True)
        act = F.silu if kind == "swiglu" else (lambda t: F.gelu(t, approximate="tanh"))
        return _autograd_passes(torch, lambda: act(x[:elems]) * x[elems:], [x], [])
    x = _rand(torch, (elems,), dtype, device, True)
    fn = {"relu": F.relu, "squared-relu": lambda t: F.relu(t) * F.relu(t)}.get(
        kind, lambda t: F.gelu(t, approximate="tanh"))
    return _autograd_passes(torch, lambda: fn(x), [x], [])


def _residual(torch, item, plan, dtype, device) -> dict:
    F = torch.nn.functional
    elems = int(item.op.fwd_flops // 3)
    x = _rand(torch, (elems,), dtype, device, True)
    r = _rand(torch, (elems,), dtype, device)
    p = 0.1 if plan.model.dropout else 0.0
    return _autograd_passes(torch, (lambda: F.dropout(x, p, True) + r) if p else (lambda: x + r), [x], [])


def _softcap(torch, item, plan, dtype, device) -> dict:
    elems = int(item.op.fwd_flops // 3)
    x = _rand(torch, (elems,), dtype, device, True)
    c = float(plan.model.logit_softcap or 30.0)
    return _autograd_passes(torch, lambda: c * torch.tanh(x / c), [x], [])


def _tokens(plan) -> int:
    tr, s = plan.strategy.training, plan.sizes
    return tr.micro_batch * tr.seq_len // s.cp


def _loss(torch, item, plan, dtype, device) -> dict:
    F = torch.nn.functional
    t = _tokens(plan)
    vt = int(item.op.fwd_flops // 5) // t
    logits = _rand(torch, (t, vt), dtype, device, True)
    target = torch.randint(0, vt, (t,), device=device)
    return _autograd_passes(torch, lambda: F.cross_entropy(logits.float(), target), [logits], [])


def _embedding(torch, item, plan, dtype, device) -> dict:
    F = torch.nn.functional
    m, t = plan.model, _tokens(plan)
    vt = math.ceil(m.vocab / plan.sizes.tp)
    w = _rand(torch, (vt, m.hidden), dtype, device, True)
    ids = torch.randint(0, vt, (t,), device=device)
    return _autograd_passes(torch, lambda: F.embedding(ids, w), [], [w])


def _proxy(torch, item, plan, dtype, device) -> dict:
    n = max(1, int(item.op.fwd_bytes // (3 * _dtype_bytes(plan))))
    a, b = _rand(torch, (n,), dtype, device), _rand(torch, (n,), dtype, device)
    return {"fwd": lambda: a + b, "bwd_input": None, "bwd_weight": None, HOT: {"fwd": [a, b]}}


def _dtype_bytes(plan) -> int:
    from taskgraph.plan import DTYPE_BYTES
    return DTYPE_BYTES[plan.strategy.training.precision]


def builder_name(item: ProfileItem) -> str:
    """Which builder times ``item`` (the report's ``how`` column)."""
    op = item.op
    if op.kind == "attention" and len(op.gemms) >= 2:
        return "sdpa"
    if op.gemms:
        return "gemm"
    base = op.name.split("_", 1)[1] if op.name.startswith("mtp") else op.name
    if op.kind == "norm":
        return "norm"
    if op.kind == "embedding":
        return "embedding"
    if op.kind == "loss":
        return "loss"
    if base.endswith("residual"):
        return "residual"
    if base == "mlp_act":
        return "activation"
    if base == "logit_softcap":
        return "softcap"
    return "proxy"


_BUILDERS = {"sdpa": build_attention, "norm": _norm, "embedding": _embedding, "loss": _loss,
             "residual": _residual, "activation": _activation, "softcap": _softcap, "proxy": _proxy}


def time_item(item: ProfileItem, plan, device: str, repeats: int, warmup: int) -> tuple:
    """Median seconds of (fwd, bwd_input, bwd_weight) of one operator on ``device``. A pass whose
    FLOPs and bytes the cost model counts as 0 is 0 (nothing runs)."""
    import torch
    precision = plan.strategy.training.precision
    dtype = getattr(torch, TORCH_DTYPES[precision])
    how = builder_name(item)
    passes = (_gemm_passes(torch, item, dtype, device, precision == "fp8") if how == "gemm"
              else _BUILDERS[how](torch, item, plan, dtype, device))
    op = item.op
    work = {"fwd": op.fwd_flops + op.fwd_bytes, "bwd_input": op.bwd_input_flops + op.bwd_input_bytes,
            "bwd_weight": op.bwd_weight_flops + op.bwd_weight_bytes}
    hot = passes.get(HOT, {})
    out = []
    for p in PASSES:
        fn = passes.get(p)
        if fn is not None and p == "bwd_weight" and device == "cpu":
            fn = _accumulating(torch, fn)
        out.append(0.0 if fn is None or work[p] <= 0 else
                   median_seconds(fn, device, repeats, warmup, fresh=device == "cpu" and how == "loss",
                                  hot=hot.get(p, ())))
    return tuple(out)


def _accumulating(torch, fn):
    """``fn`` (a weight-gradient pass) followed by what autograd does with its result in every
    micro-batch but the first: ``param.grad += new_grad`` (AccumulateGrad,
    torch/csrc/autograd/functions/accumulate_grad.h), one ``add_`` per weight into a persistent
    gradient. On the CPU nothing fuses it into the GEMM (Megatron-LM's gradient_accumulation_fusion
    needs its CUDA extension), so a CPU profile's weight gradient carries it."""
    acc = []

    def run():
        res = fn()
        res = [res] if torch.is_tensor(res) else [r for r in res if r is not None]
        if not acc:
            acc.extend(torch.zeros_like(r) for r in res)
        for a, r in zip(acc, res):
            a.add_(r)
        return res
    return run



def time_optimizer(sizes, plan, device: str, repeats: int, warmup: int) -> float:
    """Median seconds of one optimizer step over a stage's parameters (one tensor per operator with
    parameters, ``sizes``), the kernels the modelled step prices (``taskgraph/overheads.py``
    adam_step_s). On CUDA: ``torch.optim.Adam(fused=True)`` (one multi-tensor kernel, the design of the
    Transformer Engine / apex ``FusedAdam`` Megatron-LM steps with) over fp32 master weights, moments and
    gradients (Micikevicius et al. 2018, Section 3.1), then, for Megatron's mixed-precision optimizers
    and DeepSpeed (all but PyTorch FSDP: ``overheads.master_copy``), the master-to-model copy into the training dtype (distrib_optimizer.py
    ``_copy_main_params_to_model_params``: ``shard_model_param.data.copy_(shard_main_param)``) and, with
    gradients not kept in fp32, their cast to fp32 first (``main_param.grad = model_grad.float()``).
    The multi-tensor ``foreach`` Adam this timed before makes seven passes (lerp, mul, addcmul, sqrt,
    div, add, addcdiv: 72 bytes per parameter against the fused kernel's 28; torch/optim/adam.py
    ``_multi_tensor_adam``), about 2.5 times the fused step: 19.7 ms for 1.0 G parameters on an H200
    (benchmarks/kernel_data/h200-2026-11-26/prof-llama3-8b-8-h100.csv) against 28 bytes at the measured
    fused-AdamW rate (membound.csv) of 8.2 ms. On the CPU parameters, gradients and moments are in the
    training dtype, as PyTorch steps a model cast to that dtype (the real runs), with ``foreach``."""
    import torch
    if device == "cpu":
        dtype = getattr(torch, TORCH_DTYPES[plan.strategy.training.precision])
        params = [torch.zeros(n, dtype=dtype, device=device, requires_grad=True) for n in sizes]
        for p in params:
            p.grad = torch.randn(p.shape, dtype=dtype, device=device) * 1e-3
        opt = torch.optim.Adam(params, lr=1e-4, foreach=True)
        return median_seconds(opt.step, device, repeats, warmup)
    from taskgraph.costing import grad_bytes_per_param
    from taskgraph.overheads import master_copy, master_weights
    low = getattr(torch, TORCH_DTYPES[plan.strategy.training.precision])   # fp8 keeps bf16 weights
    # without master weights the optimizer steps the bf16 parameters with bf16 gradients (overheads.py)
    pdtype = torch.float32 if master_weights(plan) else torch.bfloat16
    master = [torch.zeros(n, dtype=pdtype, device=device, requires_grad=True) for n in sizes]
    copy = master_copy(plan)
    fp32_grads = grad_bytes_per_param(plan) >= 4 or not copy
    grads = [torch.randn(n, dtype=pdtype if fp32_grads else low, device=device) * 1e-3 for n in sizes]
    model = [torch.zeros(n, dtype=low, device=device) for n in sizes] if copy else []
    for p, g in zip(master, grads):
        p.grad = g if fp32_grads else g.float()
    opt = torch.optim.Adam(master, lr=1e-4, fused=True)

    def step():
        if not fp32_grads:
            for p, g in zip(master, grads):
                p.grad = g.float()
        opt.step()
        for m, p in zip(model, master):
            m.copy_(p.detach())
    return median_seconds(step, device, repeats, warmup)
