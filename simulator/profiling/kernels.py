"""Kernel classes and the mapping of trace kernels to the simulator's operators.

Classes (by kernel name, first match wins):

* ``communication``: HTA's communication kernels (``^nccl.*Kernel``, ``hta/utils/utils.py``
  ``is_comm_kernel``), and on CPU traces the ``c10d::`` / ``gloo:`` operators;
* ``memcpy``: HTA's memory kernels (``^Memcpy``, ``^Memset``, ``^dma``);
* ``other``: what HTA counts neither as computation nor as the two above (names containing
  ``Memcpy``/``Sync`` or ``nccl`` without ``Kernel``: ``NCCL_COMPUTE_KERNEL_RE``);
* ``attention``: flash / fused / memory-efficient attention and SDPA kernels;
* ``gemm``: cuBLAS / CUTLASS / nvJet GEMMs, and ``aten::mm|addmm|bmm|baddbmm`` on CPU;
* ``elementwise``: the rest of HTA's computation (norms, activations, reductions, optimizer ...).

So ``gemm + attention + elementwise`` is HTA's COMPUTATION, ``communication`` its COMMUNICATION and
``memcpy`` its MEMORY, kernel for kernel.

Mapping to operators: a GEMM kernel maps through its launching operator's ``Input Dims``
(``record_shapes=True``): ``aten::mm [[m,k],[k,n]]``, ``aten::addmm [[n],[m,k],[k,n]]`` (bias
first), ``aten::bmm [[b,m,k],[b,k,n]]``, matched to the (output rows x columns, reduction, batch) of
every operator pass of the plan (``taskgraph.cost.pass_shape``; the output may be transposed, as a
weight gradient dW^T = dY^T X is). Attention kernels map to the plan's attention operator when it
has one shape (``bwd``/``backward`` in the name = input gradient). Everything else is reported per
class and named as not mapped; the cost model keeps those operators.
"""
from __future__ import annotations

import re
from collections import defaultdict

from taskgraph.cost import PASSES, op_shape_key, pass_shape

CLASSES = ("gemm", "attention", "elementwise", "communication", "memcpy", "other")
_COMM = re.compile(r"^nccl.*Kernel")
_MEM = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
_NOT_COMPUTE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")
_CPU_COMM = re.compile(r"^(c10d::|gloo:|nccl:)")
_ATTN = re.compile(r"flash|fmha|attention|sdpa|scaled_dot_product|_attn_|attn_fwd|attn_bwd", re.IGNORECASE)
_GEMM = re.compile(r"gemm|cublas|nvjet|xmma|s1688|s884|h884|h1688|wgmma|matmul|^aten::(mm|addmm|bmm|baddbmm|_addmm_activation)$",
                   re.IGNORECASE)
#: the aten operators that run one GEMM (the calibration matches them to the plan's GEMMs)
GEMM_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_addmm_activation"}


def kernel_class(name: str) -> str:
    """One of :data:`CLASSES` for a kernel (or CPU leaf operator) name (module docstring)."""
    if _COMM.match(name) or _CPU_COMM.match(name):
        return "communication"
    if _MEM.match(name):
        return "memcpy"
    if _NOT_COMPUTE.match(name):
        return "other"
    if _ATTN.search(name):
        return "attention"
    if _GEMM.search(name.replace("fbgemm", "")):   # fbgemm_gpu:: is a namespace, not a GEMM
        return "gemm"
    return "elementwise"


def gemm_key(op: str, dims: tuple):
    """(smaller output dim, larger output dim, reduction, batch) of a GEMM call from its Input Dims."""
    d = [t for t in dims if t]
    try:
        if op in ("aten::mm",) and len(d) >= 2:
            (m, k), (_, n) = d[0], d[1]
            b = 1
        elif op in ("aten::addmm", "aten::_addmm_activation") and len(dims) >= 3:
            (m, k), (_, n) = dims[1], dims[2]
            b = 1
        elif op == "aten::bmm" and len(d) >= 2:
            (b, m, k), (_, _, n) = d[0], d[1]
        elif op == "aten::baddbmm" and len(dims) >= 3:
            (b, m, k), (_, _, n) = dims[1], dims[2]
        else:
            return None
    except (ValueError, TypeError):
        return None
    return (min(m, n), max(m, n), k, b)


def plan_gemm_index(ops) -> dict:
    """gemm_key -> [(operator name, shape key, pass)] over the plan's GEMM operators with one GEMM."""
    index = defaultdict(list)
    for op in ops:
        if len(op.gemms) != 1 or op.kind == "attention":
            continue
        for p in PASSES:
            m, n, k, b = pass_shape(op.gemms[0], p)
            entry = (op.name, op_shape_key(op), p)
            key = (min(m, n), max(m, n), k, b)
            if entry not in index[key]:
                index[key].append(entry)
    return dict(index)


def instances(kernels) -> list[tuple]:
    """Kernels grouped per launching operator call (same ``ext``): (name of the first, class,
    launching op, dims, summed duration us)."""
    groups: dict = {}
    order = []
    for i, k in enumerate(kernels):
        key = ("x", k.ext) if k.ext >= 0 else ("i", i)
        if key not in groups:
            groups[key] = [k.name, kernel_class(k.name), k.op, k.dims, 0.0]
            order.append(key)
        groups[key][4] += k.dur
    return [tuple(groups[k]) for k in order]
