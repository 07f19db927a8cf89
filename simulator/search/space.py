"""The strategy search space: candidates, their validity in closed form, and the static memory bound
that prunes candidates before any simulation (docs/search.md).

A :class:`Candidate` fixes everything the search varies -- GPU count, tp, pp, dp, cp, ep, vpp and
schedule, sp, ZeRO stage, recompute (uniform or per layer), micro-batch, layers per stage -- and
keeps the rest of the strategy file (model, cluster type, global batch, sequence length, precision,
options). :func:`enumerate_space` lists the uniform grid (even layers per stage, one recompute
policy) with the checks of :func:`taskgraph.plan.resolve` that need no schedule, done on integers:

* ``heads % tp == 0`` and ``kv_heads % tp == 0`` (KV heads are not replicated);
* ``gpus % (tp*pp*cp) == 0`` (dp is derived), ``global_batch % (micro_batch*dp) == 0``;
* ``layers % (pp*vpp) == 0``, vpp > 1 only with pp > 1, the schedule's chunks per rank (one for
  1f1b / gpipe / zb-h1, two for the V schedules, >= 2 for interleaved-1f1b);
* ``seq_len % cp == 0`` with an even share per CP rank; ``experts % ep == 0`` and ``dp % ep == 0``;
* ZeRO-3 only with pp = 1; sp only when tp > 1 (it is a no-op otherwise), and always with tp > 1
  on MoE models (Megatron requires it).

What these checks do not catch (a schedule's micro-batch rule, say) :func:`taskgraph.plan.resolve`
still raises when the candidate is evaluated; the row then carries that error.

**Static memory bound** (:func:`static_bound`): a lower bound on the peak memory of one GPU of
pipeline rank 0 that every schedule reaches -- model states (weights, gradients, optimizer states by
precision and ZeRO stage; :func:`taskgraph.memory.model_state_bytes`, Rajbhandari 2020 Section 3.1)
of the rank's layers and the embedding, plus ``options.memory_reserve_gb``, plus ONE micro-batch's
saved activations of the rank's layers (Korthikanti 2022 Table 2 per policy). Every schedule runs a
micro-batch's forward through all stages before its first backward, so when rank 0 starts the first
backward, micro-batch 0's activations of all its stages are alive. Rank 0 always holds stage 0 (and
with it the embedding) and, with even layers, layers/pp layers. A candidate whose bound exceeds the
GPU's memory cannot fit and is pruned without simulation; the tests check bound <= simulated peak.
Tighter, when the schedule is known: rank 0's action order gives the most chunk forwards in flight
(forward done, backward not yet), each holding at least the smallest chunk's activations
(:func:`inflight_chunks`; Narayanan 2021 Section 2.2: 1F1B keeps at most pp micro-batches in flight
on the first rank); the bound takes the larger of the two.
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, fields, replace

from strategies.errors import ConfigError

#: Schedules the default space tries, by chunks per rank (Narayanan 2021 interleaving for vpp > 2;
#: zero-bubble ZB-H1, Qi 2024; V schedules ZB-V and DualPipe-V hold exactly two chunks).
SINGLE_CHUNK = ("1f1b", "zb-h1")
V_SCHEDULES = ("zb-v", "dualpipe-v")
RECOMPUTE = ("none", "selective", "full")


@dataclass(frozen=True)
class Candidate:
    """One point of the search space.

    gpus: world size; tp, pp, dp, cp, ep: parallel sizes (tp*pp*cp*dp = gpus); vpp: chunks per
    pipeline rank; schedule: pipeline schedule name; sp: sequence parallelism; zero: ZeRO stage;
    recompute: uniform recompute policy; micro_batch: sequences per micro-batch;
    layers_per_stage: explicit layers per virtual stage (None = even); recompute_layers: one policy
    per layer (None = ``recompute`` everywhere).
    """

    gpus: int
    tp: int
    pp: int
    dp: int
    cp: int
    ep: int
    vpp: int
    schedule: str
    sp: bool
    zero: int
    recompute: str
    micro_batch: int
    layers_per_stage: tuple[int, ...] | None = None
    recompute_layers: tuple[str, ...] | None = None

    def variation(self) -> dict:
        """The strategy fields this candidate sets (for :func:`simulator.search.evaluate.vary`)."""
        return dict(tp=self.tp, pp=self.pp, dp=self.dp, cp=self.cp, ep=self.ep, vpp=self.vpp, sp=self.sp,
                    zero=self.zero, recompute=self.recompute, micro_batch=self.micro_batch,
                    schedule=self.schedule, layers_per_stage=self.layers_per_stage,
                    recompute_layers=self.recompute_layers)

    def sort_key(self) -> tuple:
        """A total order (ties in the ranking are broken by it: deterministic tables)."""
        return (self.gpus, self.tp, self.pp, self.dp, self.cp, self.ep, self.vpp, self.schedule, self.sp,
                self.zero, self.recompute, self.micro_batch, self.layers_per_stage or (),
                self.recompute_layers or ())

    def label(self) -> str:
        """``tp8 pp8 dp16 vpp2 interleaved-1f1b mb1 selective zero1 sp``."""
        parts = [f"tp{self.tp}", f"pp{self.pp}", f"dp{self.dp}"]
        parts += [f"cp{self.cp}"] if self.cp > 1 else []
        parts += [f"ep{self.ep}"] if self.ep > 1 else []
        parts += [f"vpp{self.vpp}", self.schedule, f"mb{self.micro_batch}",
                  "per-layer-recompute" if self.recompute_layers else self.recompute, f"zero{self.zero}"]
        parts += ["sp"] if self.sp else []
        parts += ["layers=" + "/".join(map(str, self.layers_per_stage))] if self.layers_per_stage else []
        return " ".join(parts)


#: Candidate fields, in table column order.
CANDIDATE_FIELDS = tuple(f.name for f in fields(Candidate))


@dataclass(frozen=True)
class SearchSpace:
    """Values tried for each axis; ``None`` = the default derived from the model and cluster.

    Defaults: tp in the divisors of gcd(heads, kv_heads) up to the GPUs of a node (Megatron keeps
    TP inside NVLink); pp in the divisors of the layer count; vpp 1..6; cp 1, or powers of two up
    to 8 that leave >= 2048 tokens per CP rank; ep the divisors of the expert count up to a node
    (1 without experts); schedules 1f1b and zb-h1 at vpp 1, interleaved-1f1b, zb-v and dualpipe-v at
    vpp 2, interleaved-1f1b above; sp on when tp > 1; zero 0 and 1 (and 3 when pp = 1); recompute
    none, selective, full; micro_batch 1, 2, 4.
    """

    tp: tuple[int, ...] | None = None
    pp: tuple[int, ...] | None = None
    vpp: tuple[int, ...] | None = None
    cp: tuple[int, ...] | None = None
    ep: tuple[int, ...] | None = None
    schedule: tuple[str, ...] | None = None
    sp: tuple[bool, ...] | None = None
    zero: tuple[int, ...] | None = None
    recompute: tuple[str, ...] | None = None
    micro_batch: tuple[int, ...] | None = None


#: Axis names a user may restrict (CLI ``--axis tp=4,8``).
AXES = tuple(f.name for f in fields(SearchSpace))


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def parse_axis(item: str) -> tuple[str, tuple]:
    """``"tp=4,8"`` -> ``("tp", (4, 8))``; one clear error naming the axis otherwise. Every value is
    checked here, before any work: sizes are whole numbers in 1..2^20 (the GPU limit), zero in 0..3,
    schedules and recompute policies known names; at most ``MAX_AXIS_VALUES`` values, none twice.

    >>> parse_axis("zero=0,1")
    ('zero', (0, 1))
    """
    from strategies.config import did_you_mean
    from strategies.errors import brief
    from strategies.limits import MAX_AXIS_VALUES, MAX_GPUS
    from strategies.schedules import SCHEDULES
    name, eq, vals = item.partition("=")
    name = name.strip()
    if not eq or not vals.strip():
        raise ConfigError(f"--axis {brief(item)} must look like NAME=V1,V2 (e.g. tp=4,8); axes: {', '.join(AXES)}")
    if name not in AXES:
        raise ConfigError(f"--axis {brief(name)} is not a search axis{did_you_mean(name, AXES)}; axes: {', '.join(AXES)}")
    items = [x.strip() for x in vals.split(",", MAX_AXIS_VALUES + 1) if x.strip()]
    if len(items) > MAX_AXIS_VALUES:
        raise ConfigError(f"--axis {name} lists more than {MAX_AXIS_VALUES} values; give at most {MAX_AXIS_VALUES} "
                          f"(the grid multiplies every axis)")
    out = []
    for v in items:
        if name in ("schedule", "recompute"):
            valid = RECOMPUTE if name == "recompute" else sorted(SCHEDULES)
            if v not in valid:
                raise ConfigError(f"--axis {name} value {brief(v)} is not one of {', '.join(valid)}"
                                  f"{did_you_mean(v, valid)}")
            out.append(v)
        elif name == "sp":
            if v.lower() not in ("true", "false", "1", "0"):
                raise ConfigError(f"--axis sp value {brief(v)} must be true or false")
            out.append(v.lower() in ("true", "1"))
        elif name == "zero":
            if v not in ("0", "1", "2", "3"):
                raise ConfigError(f"--axis zero value {brief(v)} must be a ZeRO stage: 0, 1, 2 or 3")
            out.append(int(v))
        else:
            if not (v.isascii() and v.isdigit()) or len(v) > 8 or not 1 <= int(v) <= MAX_GPUS:
                raise ConfigError(f"--axis {name} value {brief(v)} must be a whole number in 1..{MAX_GPUS:,}")
            out.append(int(v))
    if not out:
        raise ConfigError(f"--axis {brief(item)} lists no values")
    if len(set(out)) != len(out):
        twice = next(v for v in out if out.count(v) > 1)
        raise ConfigError(f"--axis {name} lists {twice} twice; give each value once")
    return name, tuple(out)


@dataclass(frozen=True)
class Context:
    """What the space needs from the strategy file: the resolved model and cluster and the fixed
    training settings."""

    base: object  # strategies.strategy_file.Strategy
    model: object  # taskgraph.model.ModelSpec
    cluster: object  # topologies.cluster.ClusterSpec (as in the file)

    @property
    def gpus_per_node(self) -> int:
        return self.cluster.gpus_per_node


def context(base) -> Context:
    from taskgraph.plan import resolve_cluster, resolve_model
    return Context(base, resolve_model(base.model, base.base_dir), resolve_cluster(base.cluster, base.base_dir))


def check_gpus(ctx: Context, gpus: int) -> None:
    """One clear error when the cluster type cannot have ``gpus`` GPUs."""
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise ConfigError(f"--gpus {gpus!r} must be a positive integer")
    if gpus > 2 ** 20:
        raise ConfigError(f"--gpus {gpus} is over the limit of 1,048,576 GPUs (docs/strategy-file.md, Limits)")
    # any other count is a cluster simulate accepts: whole nodes and a partial last one (cluster_for)


def gpu_counts(ctx: Context, lo: int, hi: int) -> list[int]:
    """World sizes in ``[lo, hi]`` worth searching: whole nodes times 2^a 3^b (the sizes a 2^k/3*2^k
    parallel layout divides), plus partial nodes that divide a node."""
    if lo < 1 or hi < lo:
        raise ConfigError(f"--gpus-range {lo}:{hi} must be A:B with 1 <= A <= B")
    g = ctx.gpus_per_node
    out = [n for n in _divisors(g) if lo <= n <= hi and n < g]
    k = 1
    smooth = []
    while k * g <= hi:
        smooth.append(k)
        k += 1
    for k in smooth:
        x = k
        for p in (2, 3):
            while x % p == 0:
                x //= p
        if x == 1 and lo <= k * g <= hi:
            out.append(k * g)
    if not out:
        raise ConfigError(f"--gpus-range {lo}:{hi} holds no usable GPU count on {ctx.cluster.name} ({g} GPUs per node): "
                          f"use whole nodes (multiples of {g}) or a divisor of {g}")
    return sorted(out)


def cluster_for(ctx: Context, gpus: int):
    """The strategy's cluster value with ``gpus`` GPUs (nodes of the same type)."""
    import os
    c = ctx.base.cluster
    g = ctx.gpus_per_node
    if isinstance(c, dict):
        d = dict(c)
    elif isinstance(c, str) and os.path.exists(c if os.path.isabs(c) else os.path.join(ctx.base.base_dir, c)):
        from strategies.config import load_mapping
        d = dict(load_mapping(c if os.path.isabs(c) else os.path.join(ctx.base.base_dir, c), "cluster file"))
    else:
        d = {"preset": c}
    d.pop("gpus", None)
    if gpus % g == 0:
        d["nodes"] = gpus // g
    elif gpus < g and g % gpus == 0:
        d["nodes"], d["gpus_per_node"] = 1, gpus
    else:   # a partial last node, as simulate takes it (cluster.gpus: a 100-GPU job on NVL72 racks is 72 + 28)
        d["nodes"], d["gpus"] = -(-gpus // g), gpus
    return d


def _axis(space: SearchSpace, name: str, default):
    v = getattr(space, name)
    return tuple(default) if v is None else tuple(v)


def default_axes(ctx: Context, space: SearchSpace, gpus: int) -> dict:
    m, tr = ctx.model, ctx.base.training
    g = min(ctx.gpus_per_node, gpus)
    tp_def = [d for d in _divisors(math.gcd(m.heads, m.kv_heads)) if d <= g]
    cp_def = [c for c in (1, 2, 4, 8) if c == 1 or tr.seq_len // c >= 2048]
    ep_def = [e for e in _divisors(m.experts) if e <= ctx.gpus_per_node] if getattr(m, "experts", 0) else [1]
    return dict(tp=_axis(space, "tp", tp_def), pp=_axis(space, "pp", _divisors(m.layers)),
                vpp=_axis(space, "vpp", range(1, 7)), cp=_axis(space, "cp", cp_def), ep=_axis(space, "ep", ep_def),
                schedule=space.schedule, sp=space.sp, zero=space.zero,
                recompute=_axis(space, "recompute", RECOMPUTE), micro_batch=_axis(space, "micro_batch", (1, 2, 4)))


def _schedules(space_sched, pp: int, vpp: int) -> tuple[str, ...]:
    if pp == 1:
        names = ("1f1b",) if vpp == 1 else ()
    elif vpp == 1:
        names = SINGLE_CHUNK
    elif vpp == 2:
        names = ("interleaved-1f1b",) + V_SCHEDULES
    else:
        names = ("interleaved-1f1b",)
    if space_sched is None:
        return names
    ok = []
    for s in space_sched:
        chunks_ok = (s in ("1f1b", "gpipe", "zb-h1") and vpp == 1) or (s in V_SCHEDULES and vpp == 2 and pp > 1) \
            or (s in ("interleaved-1f1b", "looped-bfs") and vpp >= 2 and pp > 1)
        if chunks_ok:
            ok.append(s)
    return tuple(ok)


@dataclass
class SpaceStats:
    """How many grid points each filter removed (for the CLI summary and the no-answer message)."""

    invalid: int = 0
    pruned_memory: int = 0
    kept: int = 0
    pruned: list = field(default_factory=list)  # Candidates, for "closest candidates" (their bounds then)


def enumerate_space(ctx: Context, space: SearchSpace, gpus_list: Iterable[int], *,
                    prune: bool = True) -> tuple[list[Candidate], SpaceStats]:
    """The valid uniform candidates (sorted by :meth:`Candidate.sort_key`) and what was removed.
    With ``prune``, candidates whose :func:`static_bound` exceeds the GPU memory are left out."""
    from strategies.schedules import SCHEDULES
    for s in space.schedule or ():
        if s not in SCHEDULES:
            from strategies.config import did_you_mean
            raise ConfigError(f"--axis schedule value {s!r} is not a schedule{did_you_mean(s, SCHEDULES)}; valid: "
                              f"{', '.join(sorted(SCHEDULES))}")
    stats = SpaceStats()
    out: list[Candidate] = []
    cap = ctx.cluster.gpu.hbm_capacity
    for gpus in gpus_list:
        check_gpus(ctx, gpus)
        ax = default_axes(ctx, space, gpus)
        for tp in ax["tp"]:
            for cp in ax["cp"]:
                for pp in ax["pp"]:
                    for vpp in ax["vpp"]:
                        for sched in _schedules(ax["schedule"], pp, vpp):
                            for ep in ax["ep"]:
                                for mb in ax["micro_batch"]:
                                    for zero in ax["zero"] or ((0, 1, 3) if pp == 1 else (0, 1)):
                                        for rec in ax["recompute"]:
                                            for sp in ax["sp"] or ((tp > 1),):
                                                c = _make(ctx, gpus, tp, cp, pp, vpp, sched, ep, mb, zero, rec, sp)
                                                if c is None:
                                                    stats.invalid += 1
                                                    continue
                                                if prune:
                                                    try:
                                                        over = exceeds_memory(ctx, c, cap)
                                                    except ConfigError:  # a rule the checks above miss
                                                        stats.invalid += 1
                                                        continue
                                                    if over:
                                                        stats.pruned_memory += 1
                                                        stats.pruned.append(c)
                                                        continue
                                                out.append(c)
    out.sort(key=Candidate.sort_key)
    stats.kept = len(out)
    return out, stats


def _make(ctx: Context, gpus, tp, cp, pp, vpp, sched, ep, mb, zero, rec, sp) -> Candidate | None:
    m, tr = ctx.model, ctx.base.training
    if m.heads % tp or m.kv_heads % tp:
        return None
    if gpus % (tp * pp * cp):
        return None
    dp = gpus // (tp * pp * cp)
    if tr.global_batch % (mb * dp):
        return None
    if m.layers % (pp * vpp) or (vpp > 1 and pp == 1):
        return None
    if tr.seq_len % cp or (cp > 1 and (tr.seq_len // cp) % 2):
        return None
    experts = getattr(m, "experts", 0) or 0
    if ep > 1 and (not experts or experts % ep or dp % ep):
        return None
    if zero == 3 and pp > 1:
        return None
    if sp and tp == 1:
        return None
    if experts and tp > 1 and not sp:  # Megatron: MoE with tensor parallelism needs sequence parallelism
        return None
    return Candidate(gpus, tp, pp, dp, cp, ep, vpp, sched, bool(sp), zero, rec, mb)


def valid_variant(ctx: Context, c: Candidate) -> bool:
    """Closed-form validity of any candidate, including non-uniform ones (explicit layers per stage:
    the uniform rules without layer divisibility, counts that add up; per-layer recompute: one
    policy per layer)."""
    m = ctx.model
    if c.layers_per_stage is None:
        ok = _make(ctx, c.gpus, c.tp, c.cp, c.pp, c.vpp, c.schedule, c.ep, c.micro_batch, c.zero, c.recompute,
                   c.sp) is not None
    else:
        lps = c.layers_per_stage
        ok = len(lps) == c.pp * c.vpp and sum(lps) == m.layers and min(lps) >= 0 and _ok_except_layers(ctx, c)
    if c.recompute_layers is not None and len(c.recompute_layers) != m.layers:
        return False
    return ok


def _ok_except_layers(ctx: Context, c: Candidate) -> bool:
    """The uniform checks with the layer count made divisible (explicit layers per stage)."""
    fake = replace(ctx, model=replace(ctx.model, layers=c.pp * c.vpp))
    return _make(fake, c.gpus, c.tp, c.cp, c.pp, c.vpp, c.schedule, c.ep, c.micro_batch, c.zero, c.recompute,
                 c.sp) is not None


# --------------------------------------------------------------------------------------------------
# Static memory bound

_BOUND_MEMO: dict = {}


def clear_bound_memo() -> None:
    """Forget the memoized per-layer numbers of the static memory bound (tests measuring it cold)."""
    _BOUND_MEMO.clear()


def _layer_numbers(ctx: Context, c: Candidate, moe: bool, layer_index: int) -> tuple[float, dict, float]:
    """(parameters of one layer on one GPU, saved activation bytes per micro-batch by policy, the
    parameters of those that are frozen: ``training.lora``)."""
    from taskgraph.cost import DTYPE_BYTES
    from taskgraph.operators import activation_bytes_per_layer, layer_operators
    tr, opt = ctx.base.training, ctx.base.options
    sp = c.sp and c.tp > 1
    key = ("layer", ctx.model, c.tp, c.cp, c.ep, sp, c.micro_batch, tr.seq_len, tr.precision, opt.flash_attention, moe,
           tr.lora)
    hit = _BOUND_MEMO.get(key)
    if hit is None:
        dt = DTYPE_BYTES[tr.precision]
        ops = layer_operators(ctx.model, micro_batch=c.micro_batch, seq_len=tr.seq_len, tp=c.tp, sp=sp, cp=c.cp,
                              ep=c.ep, dtype_bytes=dt, flash_attention=opt.flash_attention, layer_index=layer_index,
                              lora=tr.lora)
        acts = {pol: activation_bytes_per_layer(ctx.model, c.micro_batch, tr.seq_len, c.tp, sp, pol,
                                                opt.flash_attention, cp=c.cp, ep=c.ep, dtype_bytes=dt,
                                                layer_index=layer_index, lora=tr.lora) for pol in RECOMPUTE}
        hit = _BOUND_MEMO[key] = (float(sum(o.params for o in ops)), acts, float(sum(o.frozen_params for o in ops)))
    return hit


def _embedding_params(ctx: Context, c: Candidate) -> tuple[float, float]:
    """(parameters of the embedding on one GPU, the frozen ones among them)."""
    from taskgraph.operators import embedding_operators
    tr = ctx.base.training
    sp = c.sp and c.tp > 1
    key = ("emb", ctx.model, c.tp, sp, c.cp, tr.seq_len, tr.lora)
    hit = _BOUND_MEMO.get(key)
    if hit is None:
        ops = embedding_operators(ctx.model, micro_batch=1, seq_len=tr.seq_len, tp=c.tp, sp=sp, cp=c.cp, lora=tr.lora)
        hit = _BOUND_MEMO[key] = (float(sum(o.params for o in ops)), float(sum(o.frozen_params for o in ops)))
    return hit


def static_bound(ctx: Context, c: Candidate) -> float:
    """Lower bound, bytes, on the peak memory of one GPU of pipeline rank 0 (module docstring)."""
    fixed, chunk_acts, m = _bound_parts(ctx, c)
    return fixed + max(sum(chunk_acts), inflight_chunks(c.schedule, c.pp, m, c.vpp) * min(chunk_acts, default=0.0))


def exceeds_memory(ctx: Context, c: Candidate, cap: float) -> bool:
    """``static_bound(ctx, c) > cap``, without generating the schedule where the answer does not
    depend on it: the in-flight count lies between 1 and every forward of rank 0 (m per chunk), so
    a bound with all chunks' activations already over ``cap``, or one with every forward in flight
    still under it, decides alone."""
    fixed, chunk_acts, m = _bound_parts(ctx, c)
    low = min(chunk_acts, default=0.0)
    if fixed + sum(chunk_acts) > cap:
        return True
    if fixed + max(sum(chunk_acts), m * len(chunk_acts) * low) <= cap:
        return False
    return fixed + max(sum(chunk_acts), inflight_chunks(c.schedule, c.pp, m, c.vpp) * low) > cap


def _bound_parts(ctx: Context, c: Candidate) -> tuple[float, list, int]:
    """(model states + reserve bytes, activation bytes per chunk of rank 0, micro-batches)."""
    from taskgraph.memory import model_state_bytes, optimizer_state_bytes
    from taskgraph.overheads import keeps_master_weights
    tr, opt = ctx.base.training, ctx.base.options
    if len(_BOUND_MEMO) > 65536:
        _BOUND_MEMO.clear()
    stages = c.pp * c.vpp
    lps = c.layers_per_stage or (ctx.model.layers // stages,) * stages
    starts = [sum(lps[:s]) for s in range(stages)]
    params, frozen = _embedding_params(ctx, c)
    chunk_acts = []
    numbers: dict = {}  # is_moe -> (params, activations): one memo lookup per kind, not per layer
    for s in (s for s in range(stages) if _rank_of_stage(c, s) == 0):
        act = 0.0
        for li in range(starts[s], starts[s] + lps[s]):
            moe = ctx.model.is_moe_layer(li)
            hit = numbers.get(moe)
            if hit is None:
                hit = numbers[moe] = _layer_numbers(ctx, c, moe, li)
            p, acts, fz = hit
            params += p
            frozen += fz
            act += acts[c.recompute_layers[li] if c.recompute_layers else c.recompute]
        chunk_acts.append(act)
    gacc = 4 if (tr.precision in ("bf16", "fp8", "fp4") and opt.fp32_grad_accum) else 2  # costing.grad_bytes_per_param
    # without master weights: bf16 gradients and moments; the precision-aware optimizer's dtypes
    # (taskgraph/memory.py static_memory)
    states = model_state_bytes(params - frozen, dp=c.dp * c.cp, zero=c.zero, weight_bytes=2,
                               grad_bytes=gacc if keeps_master_weights(ctx.base) else 2,
                               optimizer_bytes=optimizer_state_bytes(ctx.base))
    held = model_state_bytes(frozen, dp=c.dp * c.cp, zero=c.zero, weight_bytes=2).weights   # LoRA: frozen weights
    m = tr.global_batch // (c.micro_batch * c.dp)
    return states.total + held + opt.memory_reserve_gb * 2**30, chunk_acts, m


def _inflight_interleaved(pp: int, m: int, vpp: int) -> int | None:
    # Megatron-LM pipeline_parallel/schedules.py forward_backward_pipelining_with_interleaving:
    # rank r runs (pp - r - 1) * 2 + (vpp - 1) * pp warm-up forwards, then one more before its first
    # backward; all m * vpp when that is more. Only where its micro-batch groups are full (m % pp == 0)
    return min(m * vpp, 2 * (pp - 1) + (vpp - 1) * pp + 1) if vpp >= 2 and m % pp == 0 else None


#: schedule -> (pp, m, vpp) -> rank 0's in-flight count in closed form (None: generate the schedule);
#: tests/test_strategy_search.py checks each against the generated order on a grid
INFLIGHT_CLOSED_FORM = {
    "1f1b": lambda pp, m, vpp: min(pp, m) if vpp == 1 else None,   # Narayanan 2021 Section 2.2: pp warm-up
    "gpipe": lambda pp, m, vpp: m if vpp == 1 else None,           # Huang 2019: every forward, then backwards
    # Qi et al. 2024 (Zero Bubble Pipeline Parallelism, ICLR) Section 3.1: ZB-H1 keeps 1F1B's warm-up
    # and in-flight micro-batches ("the same peak memory"), moving only the W passes; where its rounds
    # of pp micro-batches are full (else the generator refuses the sizes: generate and count 1)
    "zb-h1": lambda pp, m, vpp: min(pp, m) if vpp == 1 and m % max(1, m // pp) == 0 else None,
    "looped-bfs": lambda pp, m, vpp: m * vpp,   # PyTorch ScheduleLoopedBFS (Lamy-Poirier 2023): every forward first
    "interleaved-1f1b": _inflight_interleaved,
}


def inflight_chunks(schedule: str, pp: int, microbatches: int, vpp: int) -> int:
    """Most (chunk, micro-batch) forwards whose backward has not run yet at any point of rank 0's
    order: each holds a chunk's saved activations (allocated by its forward, released by its B or I
    action at the latest), so in-flight x the smallest chunk's activations bounds the peak from
    below. 1 when the schedule rejects these sizes (the candidate then fails at evaluation)."""
    key = ("inflight", schedule, pp, microbatches, vpp)
    hit = _BOUND_MEMO.get(key)
    if hit is None and microbatches >= 1:
        closed = INFLIGHT_CLOSED_FORM.get(schedule)
        hit = closed(pp, microbatches, vpp) if closed is not None else None
        if hit is not None:
            _BOUND_MEMO[key] = hit
    if hit is None:
        from strategies.errors import ScheduleError
        from strategies.schedules import get_schedule
        hit = 1
        try:
            order = get_schedule(schedule, pp, microbatches, vpp).orders[0] if microbatches >= 1 else ()
        except ScheduleError:
            order = ()
        cur = 0
        # an overlapped F&B pair (DualPipe) counts its backward's release first: still a lower bound
        flat = [x for a in order for x in ((a.backward, a.forward) if hasattr(a, "backward") else (a,))]
        for a in flat:
            if a.kind == "F":
                cur += 1
                hit = max(hit, cur)
            elif a.kind in ("B", "I"):
                cur -= 1
        _BOUND_MEMO[key] = hit
    return hit


def _rank_of_stage(c: Candidate, s: int) -> int:
    """Stage -> pipeline rank: V placement for zb-v / dualpipe-v (stages r and 2pp-1-r), round robin
    otherwise (Narayanan 2021 interleaving)."""
    if c.schedule in V_SCHEDULES:
        return s if s < c.pp else 2 * c.pp - 1 - s
    return s % c.pp


__all__ = [
    "AXES",
    "CANDIDATE_FIELDS",
    "Candidate",
    "Context",
    "SearchSpace",
    "SpaceStats",
    "check_gpus",
    "cluster_for",
    "context",
    "enumerate_space",
    "exceeds_memory",
    "gpu_counts",
    "parse_axis",
    "static_bound",
    "valid_variant",
]


def grid_points(ctx: Context, space: SearchSpace, gpus_list: Iterable[int]) -> int:
    """How many grid points :func:`enumerate_space` visits (each costs the closed-form checks and, when
    they pass, the static memory bound): the product of the axes per GPU count, with the schedules
    each (pp, vpp) admits, counted from the axis lengths without visiting the points."""
    total = 0
    for gpus in gpus_list:
        ax = default_axes(ctx, space, gpus)
        per = (len(ax["tp"]) * len(ax["cp"]) * len(ax["ep"]) * len(ax["micro_batch"]) * len(ax["recompute"])
               * (len(ax["sp"]) if ax["sp"] else 1))
        pv = 0
        for pp in ax["pp"]:
            zeros = len(ax["zero"]) if ax["zero"] else (3 if pp == 1 else 2)
            pv += zeros * sum(len(_schedules(ax["schedule"], pp, vpp)) for vpp in ax["vpp"])
        total += per * pv
    return total
