"""``execsim calibrate``: a real run's profiler traces against the simulation of its strategy file.

Per rank: the measured step (median of the kept ``ProfilerStep`` spans) and the time per step of each
kernel class (``kernels.CLASSES``); per operator: the median time of the kernels mapped to each
operator pass (``kernels``), written as profile rows; then the strategy simulated with the cost
model and with those rows, per pipeline rank, beside the measurement. Kernels that map to no
operator are totalled per class and the largest are named.
"""
from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from simulator.profiling.inventory import plan_operators, profile_items
from simulator.profiling.kernels import CLASSES, GEMM_OPS, gemm_key, instances, kernel_class, plan_gemm_index
from simulator.profiling.profile_csv import ProfileRow
from taskgraph.cost import PASSES

#: operator kind -> kernel class (the simulated side of the per-class comparison)
KIND_CLASS = {"gemm": "gemm", "router": "gemm", "attention": "attention"}


@dataclass
class RankFigures:
    rank: int
    device: str
    steps: int
    step_s: float | None
    class_s: dict                 # kernel class -> seconds per step
    pp_rank: int | None = None


@dataclass
class Calibration:
    ranks: list
    rows: list                    # ProfileRow per mapped operator pass
    unmapped: list                # (class, kernel name, seconds per step), largest first
    mapped_s: float = 0.0         # seconds per step (all ranks) of kernels mapped to operators
    total_s: float = 0.0
    simulated: dict = field(default_factory=dict)


def class_totals(kernels) -> dict:
    """Microseconds per kernel class (every kernel counted once: HTA's breakdown, module doc of kernels)."""
    out = {c: 0.0 for c in CLASSES}
    for k in kernels:
        out[kernel_class(k.name)] += k.dur
    return out


def calibrate(plan, traces) -> Calibration:
    """Measured figures of ``traces`` (``kineto.read_trace_dir``) mapped onto ``plan``'s operators."""
    from topologies.placement import coords_of
    ops = plan_operators(plan)
    index = plan_gemm_index(ops)
    attn = sorted({(o.name, s) for o in ops if o.kind == "attention" for s in [_shape(o)]})
    attn_shapes = {s for _, s in attn}
    samples = defaultdict(list)
    unmapped: Counter = Counter()
    ranks, mapped, total = [], 0.0, 0.0
    for rt in traces:
        steps = max(1, len(rt.steps_us))
        totals = class_totals(rt.kernels)
        pp = coords_of(rt.rank, plan.sizes)["pp"] if rt.rank < plan.num_gpus else None
        ranks.append(RankFigures(rt.rank, rt.device, len(rt.steps_us),
                                 statistics.median(rt.steps_us) * 1e-6 if rt.steps_us else None,
                                 {c: v * 1e-6 / steps for c, v in totals.items()}, pp))
        total += sum(totals.values()) * 1e-6 / steps
        for name, cls, op, dims, dur in instances(rt.kernels):
            hits = []
            if cls == "gemm" and op in GEMM_OPS:
                hits = index.get(gemm_key(op, dims), [])
            elif cls == "attention" and len(attn_shapes) == 1:
                p = "bwd_input" if ("bwd" in name.lower() or "backward" in (name + op).lower()) else "fwd"
                hits = [(n, s, p) for n, s in attn]
            if hits:
                mapped += dur * 1e-6 / steps
                for h in hits:
                    samples[h].append(dur * 1e-6)
            else:
                unmapped[(cls, name)] += dur * 1e-6 / steps
    model = {(it.name, it.shape): it for it in profile_items(plan)}
    rows = []
    for (name, shape, p), xs in sorted(samples.items(), key=lambda kv: _order(kv[0], model)):
        it = model[(name, shape)]
        rows.append(ProfileRow(name, shape, p, statistics.median(xs), it.modelled_s[PASSES.index(p)], it.count,
                               f"{len(xs)} calls"))
    top = sorted(((c, n, s) for (c, n), s in unmapped.items()), key=lambda x: (-x[2], x[1]))
    return Calibration(ranks, rows, top, mapped, total)


def _shape(op) -> str:
    from taskgraph.cost import op_shape_key
    return op_shape_key(op)


def _order(key, model) -> tuple:
    names = list(model)
    i = names.index((key[0], key[1])) if (key[0], key[1]) in model else len(names)
    return (i, PASSES.index(key[2]))


def simulated_figures(plan, profile_path: str | None = None, measured_on: str | None = None) -> dict:
    """Iteration time, per pipeline rank busy seconds, and per-class compute seconds of one iteration
    (operator passes x micro-batches, by the class of the operator's kind) from the simulation of
    ``plan``, with the profile CSV at ``profile_path`` applied as measured on ``measured_on``."""
    from dataclasses import replace

    from simulator.simulation.strategy import simulate_strategy
    strat = plan.strategy
    if profile_path:
        strat = replace(strat, options=replace(strat.options, profile=profile_path, profile_gpu=measured_on))
    sim = simulate_strategy(strat)
    from taskgraph.costing import build_work
    work = build_work(sim.plan)
    kinds = {o.name: o.kind for o in plan_operators(plan)}
    per_class: dict = defaultdict(float)
    for st in work.stages[:1]:
        for layer in st.layers:
            for oc in layer.ops:
                cls = KIND_CLASS.get(kinds.get(oc.name, ""), "elementwise")
                per_class[cls] += (oc.fwd + oc.bwd_input + oc.bwd_weight) * plan.microbatches
                comm = sum(c.seconds for c in oc.fwd_pre + oc.fwd_post + oc.bwd_pre + oc.bwd_post)
                per_class["communication"] += comm * plan.microbatches
        per_class["communication"] += sum(b.reduce_s + b.gather_s for b in st.buckets)
    return {"iteration_s": sim.training.iteration_time_s,
            "busy_s": {r.rank: r.busy_s for r in sim.report.per_rank},
            "idle_s": {r.rank: sim.report.makespan_s - r.busy_s for r in sim.report.per_rank},
            "class_s_rank0": dict(per_class)}
