"""Software stacks (``options.stack``): the kernels a training framework runs for one operator graph.

The GPU catalog's efficiencies describe Megatron-LM with Transformer Engine (the stack the calibration
rows ran). Another stack differs in two sourced ways (``taskgraph/data/stacks.yaml``): its fused
attention kernel (flash-attn 2's FlashAttention-2 reaches 35 % of an H100's peak where Transformer
Engine's cuDNN reaches more: Shah et al. 2024; torchtitan's SDPA runs the kernel PyTorch selects on the
GPU's architecture, cuDNN under torchtitan's backend order: :func:`attention_kernel`) and how many HBM passes and kernel launches a
memory-bound operator takes when it is not fused (PyTorch's eager RMSNorm is about six elementwise
kernels; ``torch.compile`` fuses them back into one). A stack may also carry its measured host dispatch
cost per kernel (``host_us_per_kernel``), which replaces the cluster's default
(``taskgraph/plan.py`` resolve; a cluster file that sets ``host_us_per_kernel`` keeps its own), and
flags for the framework's own kernels and exchanges, each read from its code: DeepSpeed's unfused fp32
gradient accumulation and serial pipeline exchanges, FSDP2's copy kernels (``taskgraph/stack_costs.py``),
PyTorch's ring attention (``taskgraph/torch_cp.py``).

>>> get_stack("torchtitan").passes["mlp_act"]
2
>>> get_stack("megatron-te").attention
'catalog'
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from functools import cache, lru_cache

from strategies.documents import load_document
from strategies.errors import ConfigError
from taskgraph.cross_entropy import CROSS_ENTROPY
from topologies.kernels import attention_fraction, attention_table

STACKS_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "stacks.yaml")
DEFAULT_STACK = "megatron-te"
#: a stack's attention besides a kernel of the table: the catalog's figure, or what PyTorch's SDPA selects
ATTENTION_CHOICES = ("catalog", "sdpa")


@dataclass(frozen=True)
class Stack:
    """name; attention: 'catalog', 'sdpa' (the kernel PyTorch's SDPA selects on the GPU's architecture,
    :func:`attention_kernel`) or a kernel of the attention table; passes: operator role ->
    HBM passes (and launches) relative to one fused kernel (roles not listed: 1); host_us_per_kernel:
    measured host microseconds per counted kernel, or None (the cluster's figure); zero3_master_copy:
    the Adam step copies fp32 master weights into the model's under ZeRO-3 (False: PyTorch FSDP);
    hp_grad_accum_bytes: HBM bytes per weight-gradient element of the unfused per-micro-batch fp32
    accumulation of a bf16 run without ZeRO-3 (DeepSpeed's BF16_Optimizer.update_hp_grads), 0: the
    catalog's, fused into the weight-gradient GEMM (``taskgraph/cost.py`` op_time); p2p_serial: a
    pipeline boundary's activation and gradient transfers of one step run one after the other, each
    blocking both ranks (DeepSpeed's PipelineEngine), where Megatron batches the pair
    (``taskgraph/costing.py`` build_work); fsdp2_copies: under ZeRO-3 the stack is PyTorch FSDP2, whose
    per-parameter all-gathers and reduce-scatters copy into and out of flat buffers
    (``taskgraph/costing.py`` fsdp2_copy_times); torch_cp: context parallelism is PyTorch's ring attention,
    one SDPA launch per step with fp32 merges (``taskgraph/torch_cp.py``); float8_casts: FP8 linear layers
    are torchao's Float8Linear, whose amax and cast kernels run apart from the GEMMs ('torchao'; with
    torch.compile fusing their first read into the producer: 'torchao-fused'; ``taskgraph/float8_casts.py``),
    '' = Transformer Engine's casts fused into the producing kernels; dtensor_host_factor: (forward,
    backward) multipliers of a layer's kernel host time under tensor parallelism (tp > 1), where every
    op goes through DTensor's dispatch (1.0: none); fsdp2_hook_kernels: (forward, backward) host time
    of FSDP2's per-layer hooks when the parameters are sharded, in the stack's host_us_per_kernel
    (0.0: none); fsdp2_hook_kernels_tp: the same when the sharded parameters are TP's DTensors (tp > 1);
    all three ``taskgraph/overheads.py`` stack_host_terms, stacks.yaml [HOST-DT]; zero3_sync_fetch:
    under ZeRO-3 every parameter tensor is all-gathered on its own behind a device synchronize, with one
    copy kernel per shard rank per gathered tensor and per reduced gradient (DeepSpeed 2021,
    ``taskgraph/zero3_fetch.py``, stacks.yaml [DS-Z3-2021]); cross_entropy: how the vocab-parallel loss
    runs, 'fused' (one kernel per pass) or 'eager-fp32' (Megatron-LM 2021-22's eager ops over an fp32
    copy of the logits; ``taskgraph/cross_entropy.py``, stacks.yaml [MEG-2021]); grad_add_bytes: HBM bytes
    per weight-gradient element of an unfused add of each micro-batch's fresh gradient into the
    accumulated one, one kernel per weight (Megatron-LM before gradient accumulation fusion: 6, read both
    16-bit gradients and write one; ``taskgraph/stack_costs.py`` unfused_grad_accum), 0: fused; adam_bytes_per_param: HBM bytes per parameter
    element of the stack's unfused Adam step, one streaming kernel per tensor operation (Composer's
    DecoupledAdamW, stacks.yaml [COMPOSER-ADAM]); 0: the fused multi-tensor kernel's 28
    (``taskgraph/overheads.py`` adam_step_s); fsdp1_flat: under ZeRO-3 the stack is PyTorch FSDP1 with
    one FlatParameter per unit, whose shard casts, flat-gradient concat, gradient divisions, casts and
    accumulation run around each collective (``taskgraph/fsdp1_flat.py``, stacks.yaml [FSDP1]);
    master_weights: the run's default for ``training.master_weights`` (False: bf16 parameters and Adam
    moments, no fp32 master copy; only with fsdp2_copies; stacks.yaml [AM]); partitioned_pipe: scattered
    pipeline activations are DeepSpeed's PartitionedTensor (a meta send per transfer, clones around it, the
    output re-gathered before its backward; ``taskgraph/pipeline_p2p.py``, stacks.yaml [DS-PIPE]);
    ddp_flatten: Megatron-LM 2021's
    local DDP, which keeps 16-bit gradients in no contiguous buffer (none to zero: the optimizer sets them to
    None) and flattens, divides and copies them back around the all-reduce; fp32 gradients sit in its
    contiguous buffer, zeroed and divided in place (``taskgraph/overheads.py`` grad_buffer_bytes, stacks.yaml
    [MEG-2021]); ddp_bucket_copy: PyTorch DDP's reducer (gradient_as_bucket_view off), which copies each
    gradient into its bucket with the division fused and the reduced bucket back, and zeroes nothing
    (``taskgraph/overheads.py`` grad_buffer_bytes, stacks.yaml [TORCH-DDP])."""

    name: str
    attention: str
    passes: dict = field(default_factory=dict, hash=False, compare=False)
    host_us_per_kernel: float | None = None
    zero3_master_copy: bool = True
    hp_grad_accum_bytes: int = 0
    p2p_serial: bool = False
    fsdp2_copies: bool = False
    torch_cp: bool = False
    float8_casts: str = ""
    dtensor_host_factor: tuple = (1.0, 1.0)
    fsdp2_hook_kernels: tuple = (0.0, 0.0)
    fsdp2_hook_kernels_tp: tuple = (0.0, 0.0)
    zero3_sync_fetch: bool = False
    cross_entropy: str = "fused"
    grad_add_bytes: int = 0
    adam_bytes_per_param: int = 0
    fsdp1_flat: bool = False
    master_weights: bool = True
    partitioned_pipe: bool = False
    ddp_flatten: bool = False
    ddp_bucket_copy: bool = False

    def passes_of(self, op_name: str) -> int:
        """Passes of an operator by its role (the name after a layer prefix, e.g. ``mtp0.final_norm``)."""
        return self.passes.get(op_name.rsplit(".", 1)[-1], 1)


@cache
def load_tables(path: str = STACKS_PATH) -> tuple[dict, dict, dict]:
    data = load_document(path, "stack file") or {}
    known = attention_table().kernels()
    kernels = {}
    ratios = {}
    for k, d in (data.get("attention_kernels") or {}).items():
        fb = (d or {}).get("fallback")
        if (d or {}).get("ratio") is not None:
            ratios[str(k)] = _ratio_table(str(k), d, known, path)
        elif str(k) not in known or (fb is not None and str(fb) not in known):
            raise ConfigError(f"stack file {path!r}: attention kernel {k!r} (fallback {fb!r}) is not a kernel of "
                              f"the kernel table ({', '.join(known)})")
        kernels[str(k)] = None if fb is None else str(fb)
    sdpa = _sdpa_table(data, kernels, path)
    stacks = {}
    for name, d in (data.get("stacks") or {}).items():
        att = str(d.get("attention", "catalog"))
        if att not in ATTENTION_CHOICES and att not in kernels:
            raise ConfigError(f"stack file {path!r}: stack {name!r} attention = {att!r} must be 'catalog', 'sdpa' or a "
                              f"kernel of attention_kernels ({', '.join(sorted(kernels))})")
        if att == "sdpa" and not sdpa:
            raise ConfigError(f"stack file {path!r}: stack {name!r} attention = 'sdpa' needs a sdpa_attention.kernel "
                              f"table (architecture -> kernel)")
        passes = {str(k): int(v) for k, v in (d.get("passes") or {}).items()}
        if any(v < 1 or v > 64 for v in passes.values()):
            raise ConfigError(f"stack file {path!r}: stack {name!r} passes must be integers in [1, 64]")
        host = d.get("host_us_per_kernel")
        if host is not None and (isinstance(host, bool) or not isinstance(host, (int, float))
                                 or not 0 <= host <= 10_000):
            raise ConfigError(f"stack file {path!r}: stack {name!r} host_us_per_kernel = {host!r} must be a number of "
                              f"microseconds in [0, 10000] (or left out: the cluster's figure)")
        copy = d.get("zero3_master_copy", True)
        if not isinstance(copy, bool):
            raise ConfigError(f"stack file {path!r}: stack {name!r} zero3_master_copy = {copy!r} must be true or false")
        acc = d.get("hp_grad_accum_bytes", 0)
        if isinstance(acc, bool) or not isinstance(acc, int) or not 0 <= acc <= 64:
            raise ConfigError(f"stack file {path!r}: stack {name!r} hp_grad_accum_bytes = {acc!r} must be an integer "
                              f"number of bytes per gradient element in [0, 64] (0: fused accumulation)")
        serial = _flag(path, name, d, "p2p_serial")
        fsdp2 = _flag(path, name, d, "fsdp2_copies")
        tcp = _flag(path, name, d, "torch_cp")
        f8 = d.get("float8_casts", "")
        if f8 not in ("", "torchao", "torchao-fused"):
            raise ConfigError(f"stack file {path!r}: stack {name!r} float8_casts = {f8!r} must be 'torchao', "
                              f"'torchao-fused' or left out")
        dt_factor = _pass_pair(path, name, d, "dtensor_host_factor", 1.0, (1.0, 100.0),
                               "multipliers of the kernels' host time")
        hooks = _pass_pair(path, name, d, "fsdp2_hook_kernels", 0.0, (0.0, 1000.0),
                           "host times in the stack's host_us_per_kernel")
        hooks_tp = _pass_pair(path, name, d, "fsdp2_hook_kernels_tp", 0.0, (0.0, 1000.0),
                              "host times in the stack's host_us_per_kernel")
        sync = _flag(path, name, d, "zero3_sync_fetch")
        ce = d.get("cross_entropy", "fused")
        if ce not in CROSS_ENTROPY:
            raise ConfigError(f"stack file {path!r}: stack {name!r} cross_entropy = {ce!r} must be one of "
                              f"{', '.join(CROSS_ENTROPY)} (or left out: fused)")
        add = d.get("grad_add_bytes", 0)
        if isinstance(add, bool) or not isinstance(add, int) or not 0 <= add <= 64:
            raise ConfigError(f"stack file {path!r}: stack {name!r} grad_add_bytes = {add!r} must be an integer "
                              f"number of bytes per gradient element in [0, 64] (0: fused accumulation)")
        adam = d.get("adam_bytes_per_param", 0)
        if isinstance(adam, bool) or not isinstance(adam, int) or not 0 <= adam <= 256:
            raise ConfigError(f"stack file {path!r}: stack {name!r} adam_bytes_per_param = {adam!r} must be an integer "
                              f"number of bytes per parameter in [0, 256] (0: the fused Adam kernel)")
        flat = d.get("fsdp1_flat", False)
        if not isinstance(flat, bool) or (flat and fsdp2):
            raise ConfigError(f"stack file {path!r}: stack {name!r} fsdp1_flat = {flat!r} must be true or false, and "
                              f"not true with fsdp2_copies (a stack runs FSDP1 or FSDP2)")
        master = d.get("master_weights", True)
        if not isinstance(master, bool) or not (master or fsdp2):
            raise ConfigError(f"stack file {path!r}: stack {name!r} master_weights = {master!r} must be true or false, "
                              f"and false only with fsdp2_copies (bf16 parameters without fp32 masters: PyTorch FSDP2)")
        part = _flag(path, name, d, "partitioned_pipe")
        ddp_flat = _flag(path, name, d, "ddp_flatten")
        bucket_copy = d.get("ddp_bucket_copy", False)
        if not isinstance(bucket_copy, bool) or (bucket_copy and ddp_flat):
            raise ConfigError(f"stack file {path!r}: stack {name!r} ddp_bucket_copy = {bucket_copy!r} must be true or "
                              f"false, and not true with ddp_flatten (a stack runs PyTorch's DDP or Megatron's local one)")
        stacks[str(name)] = Stack(str(name), att, passes, None if host is None else float(host), copy, acc, serial,
                                  fsdp2, tcp, f8, dt_factor, hooks, hooks_tp, sync, ce, add, adam, flat, master,
                                  part, ddp_flat, bucket_copy)
    cat = data.get("catalog_attention") or {}
    catalog = {"kernel": {str(a): str(k) for a, k in (cat.get("kernel") or {}).items()},
               "reference": {str(a): (float(r["head_dim"]), float(r["seq_len"]))
                             for a, r in (cat.get("reference") or {}).items()}}
    for a, k in catalog["kernel"].items():
        if k not in kernels or a not in catalog["reference"]:
            raise ConfigError(f"stack file {path!r}: catalog_attention.kernel.{a} = {k!r} needs a kernel of "
                              f"attention_kernels and a catalog_attention.reference.{a}")
    catalog["sdpa"] = sdpa
    catalog["ratio"] = ratios
    return stacks, kernels, catalog


def _ratio_table(name: str, d: dict, known: tuple, path: str) -> dict:
    """``attention_kernels.NAME.ratio`` of a stack file, checked: architecture -> (measured kernel of the
    kernel table, forward ratio, backward ratio): a kernel priced as a published share of a measured
    kernel's rate (FlexAttention, stacks.yaml [FLEX])."""
    table = d.get("ratio")
    if not isinstance(table, dict) or set(d) - {"ratio"}:
        raise ConfigError(f"stack file {path!r}: attention_kernels.{name} must be {{ratio: {{architecture: "
                          f"{{of: KERNEL, fwd: x, bwd: y}}}}}}")
    out = {}
    for a, r in table.items():
        ok = (isinstance(r, dict) and set(r) == {"of", "fwd", "bwd"} and str(r["of"]) in known
              and all(not isinstance(r[p], bool) and isinstance(r[p], (int, float)) and 0 < r[p] <= 4
                      for p in ("fwd", "bwd")))
        if not ok:
            raise ConfigError(f"stack file {path!r}: attention_kernels.{name}.ratio.{a} = {r!r} must be {{of: KERNEL, "
                              f"fwd: x, bwd: y}} with KERNEL one of the kernel table's ({', '.join(known)}) and x, y "
                              f"in (0, 4]")
        out[str(a)] = (str(r["of"]), float(r["fwd"]), float(r["bwd"]))
    return out


def _flag(path: str, name, d: dict, key: str) -> bool:
    """A stack's true / false field; left out: false."""
    v = d.get(key, False)
    if not isinstance(v, bool):
        raise ConfigError(f"stack file {path!r}: stack {name!r} {key} = {v!r} must be true or false")
    return v


def _pass_pair(path: str, name, d: dict, key: str, default: float, bounds: tuple, what: str) -> tuple:
    """A stack's ``{fwd: x, bwd: y}`` field as (x, y), each in ``bounds``; left out: (default, default)."""
    v = d.get(key)
    if v is None:
        return (default, default)
    lo, hi = bounds
    ok = (isinstance(v, dict) and set(v) == {"fwd", "bwd"}
          and all(not isinstance(x, bool) and isinstance(x, (int, float)) and lo <= x <= hi for x in v.values()))
    if not ok:
        raise ConfigError(f"stack file {path!r}: stack {name!r} {key} = {v!r} must be {{fwd: x, bwd: y}}, {what}, "
                          f"each a number in [{lo:g}, {hi:g}] (or left out)")
    return (float(v["fwd"]), float(v["bwd"]))


def _sdpa_table(data: dict, kernels: dict, path: str) -> dict:
    """``sdpa_attention.kernel`` of a stack file, checked: architecture -> the kernel PyTorch's SDPA runs
    there for a stack with ``attention: sdpa`` (stacks.yaml [SDPA-SEL])."""
    sec = data.get("sdpa_attention") or {}
    if not isinstance(sec, dict) or set(sec) - {"kernel"} or not isinstance(sec.get("kernel") or {}, dict):
        raise ConfigError(f"stack file {path!r}: sdpa_attention must be a mapping with one key, kernel: "
                          f"{{architecture: kernel}}")
    table = {str(a): str(k) for a, k in (sec.get("kernel") or {}).items()}
    for a, k in table.items():
        if k not in kernels:
            raise ConfigError(f"stack file {path!r}: sdpa_attention.kernel.{a} = {k!r} is not a kernel of "
                              f"attention_kernels ({', '.join(sorted(kernels))})")
    return table


def read_stack_file(path: str) -> dict:
    """The stacks of a stack file (checked as ``taskgraph/data/stacks.yaml`` is): name -> :class:`Stack`."""
    return dict(load_tables(path)[0])


def stack_names() -> tuple[str, ...]:
    return tuple(sorted(load_tables()[0]))


def get_stack(name: str | None) -> Stack:
    """The stack called ``name`` (None: the default, Megatron-LM + Transformer Engine)."""
    stacks = load_tables()[0]
    key = DEFAULT_STACK if name is None else name
    if key not in stacks:
        raise ConfigError(f"options.stack = {key!r} is not a known stack; valid: {', '.join(sorted(stacks))}")
    return stacks[key]


def attention_kernel_choices() -> tuple[str, ...]:
    """What ``options.attention_kernel`` may name: the stack file's attention kernels, 'sdpa', 'catalog'."""
    return tuple(sorted(load_tables()[1])) + ATTENTION_CHOICES[::-1]


@lru_cache(maxsize=64)   # read per operator through CostContext.stack: one Stack object per choice
def run_stack(name: str | None, attention_kernel: str | None = None, cross_entropy: str | None = None) -> Stack | None:
    """The stack a run is priced with: ``options.stack`` with ``options.attention_kernel`` and
    ``options.cross_entropy`` (when given) in place of its own; None for the default stack without an
    override (the catalog's figures). One error line for an unknown kernel or loss, naming the field,
    the value and the choices."""
    if attention_kernel is None and cross_entropy is None:
        return None if name in (None, DEFAULT_STACK) else get_stack(name)
    stack = get_stack(name)
    if cross_entropy is not None:
        if cross_entropy not in CROSS_ENTROPY:
            raise ConfigError(f"options.cross_entropy = {cross_entropy!r} is not a cross-entropy implementation; use "
                              f"one of {', '.join(CROSS_ENTROPY)} (or leave it out: the stack's own)")
        stack = replace(stack, cross_entropy=cross_entropy)
    return stack if attention_kernel is None else with_attention(stack, attention_kernel)


def with_attention(stack: Stack, attention_kernel: str) -> Stack:
    """``stack`` running ``options.attention_kernel`` (checked: one error line naming the field, the value
    and the choices)."""
    choices = attention_kernel_choices()
    if attention_kernel not in choices:
        raise ConfigError(f"options.attention_kernel = {attention_kernel!r} is not an attention kernel; use one of "
                          f"{', '.join(choices)} (or leave it out: the stack's own)")
    return replace(stack, attention=attention_kernel)


@lru_cache(maxsize=4096)
def _kernel_fraction(kernel: str, architecture: str, pass_: str, shape) -> float | None:
    """The kernel table's fraction of peak at ``shape`` (time-weighted over its masked and unmasked
    FLOPs: 1/e = c/e_causal + (1-c)/e_unmasked), trying the kernel's fallback off its architectures.
    A ratio kernel (``attention_kernels.NAME.ratio``) is its measured kernel's fraction times the
    published share for the pass; None on an architecture it has no ratio for."""
    _, kernels, catalog = load_tables()
    ratio = catalog["ratio"].get(kernel)
    if ratio is not None:
        r = ratio.get(architecture)
        if r is None:
            return None
        f = _kernel_fraction(r[0], architecture, pass_, shape)
        return None if f is None else min(1.0, f * (r[1] if pass_ == "fwd" else r[2]))
    while kernel is not None:
        c = shape.causal_share
        parts = [(c, True), (1.0 - c, False)]
        fr = [(w, attention_fraction(kernel, architecture, pass_, shape.head_dim, shape.seq, causal=m))
              for w, m in parts if w > 0]
        if fr and all(f is not None for _, f in fr):
            return 1.0 / sum(w / f for w, f in fr)
        kernel = kernels.get(kernel)
    return None


def attention_efficiency(stack: Stack, gpu, pass_: str, shape=None) -> float:
    """Fraction of the bf16 peak the stack's fused attention reaches on ``gpu`` in ``pass_`` (fwd or
    a backward pass) at ``shape`` (an ``operators.AttentionShape``; None: the catalog's reference shape).

    A kernel stack takes the kernel table's figure for the GPU's architecture at the shape (a kernel
    with no rows there: its fallback; none at all: the catalog's figure). 'catalog' takes the GPU's
    attention_*_efficiency scaled by its kernel's curve relative to the reference shape
    (``catalog_attention`` in stacks.yaml)."""
    eff = gpu.efficiency
    const = eff.attention_fwd_efficiency if pass_ == "fwd" else eff.attention_bwd_efficiency
    _, _, catalog = load_tables()
    arch = gpu.architecture
    if stack.attention != "catalog":
        kernel = attention_kernel(stack, arch)
        if kernel is None:
            return const
        if shape is None:
            ref = catalog["reference"].get(arch) or catalog["reference"]["hopper"]
            shape = _Ref(ref[0], ref[1], 1.0)
        f = _kernel_fraction(kernel, arch, "fwd" if pass_ == "fwd" else "bwd", shape)
        return const if f is None else f
    kernel, ref = catalog["kernel"].get(arch), catalog["reference"].get(arch)
    if shape is None or kernel is None:
        return const
    p = "fwd" if pass_ == "fwd" else "bwd"
    at = _kernel_fraction(kernel, arch, p, shape)
    base = _kernel_fraction(kernel, arch, p, _Ref(ref[0], ref[1], 1.0))
    if at is None or not base:
        return const
    return min(1.0, const * at / base)


def attention_kernel(stack: Stack, architecture: str) -> str | None:
    """The attention kernel ``stack`` runs on an ``architecture`` GPU: its named kernel; for 'sdpa' the
    kernel PyTorch's scaled_dot_product_attention selects there (``sdpa_attention`` in stacks.yaml; None
    for an architecture the table does not list: the GPU's catalog figure); None for 'catalog'."""
    if stack.attention == "catalog":
        return None
    if stack.attention == "sdpa":
        return load_tables()[2]["sdpa"].get(architecture)
    return stack.attention


@dataclass(frozen=True)
class _Ref:
    """A reference attention shape (the fields of ``operators.AttentionShape``)."""

    head_dim: float
    seq: float
    causal_share: float
