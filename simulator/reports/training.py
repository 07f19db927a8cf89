"""Training-level reports for a real-model simulation: throughput, MFU/HFU, per-stage compute,
exposed communication and bubble, time and GPU-hours to train a token budget.

MFU = model FLOPs per second / (GPUs x peak), model FLOPs = forward + backward with no
recomputation (Chowdhery et al. 2022, PaLM, Appendix B; Korthikanti 2022 Section 6.3); HFU adds the
recomputed forward FLOPs (Korthikanti 2022 Section 6.3). Model FLOPs per token follow Narayanan
2021 eq. 3 generalised to GQA/SwiGLU/MoE (``taskgraph.operators.model_flops_per_token``). The peak
is the dense bf16 peak of the GPU for bf16/fp16 runs and for fp8 runs too (NVIDIA NeMo reports fp8
MFU against the bf16 peak; ``mfu_fp8_peak`` uses the fp8 peak).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.engine.core import SimResult
from simulator.reports.report import Report, format_bubble, format_split
from taskgraph.graph import TaskGraph


@dataclass(frozen=True)
class StageReport:
    """One pipeline rank (standing for ``gpus`` GPUs) over the iteration, seconds."""

    rank: int
    stages: tuple[int, ...]
    layers: int
    gpus: int
    compute_s: float
    exposed_comm_s: float   # communication running while compute is idle
    bubble_s: float         # pipeline bubble: idle waiting on a cross-stage dependency
    bubble_fraction: float  # bubble / compute (Narayanan 2021 t_pb / t_id)
    other_idle_s: float = 0.0  # idle for any other reason (simulator.reports.breakdown)


@dataclass(frozen=True)
class TrainingReport:
    iteration_time_s: float
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    mfu: float
    hfu: float
    mfu_fp8_peak: float | None
    model_flops_per_iteration: float
    hardware_flops_per_iteration: float
    num_gpus: int
    gpus_per_simulated_rank: int
    microbatches: int
    per_stage: tuple[StageReport, ...]
    train_days: float | None
    train_gpu_hours: float | None
    pace: str = ""  # which slow node / GPU spread sets the pace (topologies/stragglers.py), '' if none

    def to_json(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k != "per_stage"}
        d["per_stage"] = [s.__dict__.copy() for s in self.per_stage]
        for s in d["per_stage"]:
            s["stages"] = list(s["stages"])
        return d


def interval_union(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Merged, sorted intervals as an (k, 2) array."""
    if starts.size == 0:
        return np.zeros((0, 2))
    o = np.argsort(starts, kind="stable")
    s, e = starts[o], ends[o]
    emax = np.maximum.accumulate(e)
    new = np.ones(s.size, dtype=bool)
    new[1:] = s[1:] > emax[:-1]
    idx = np.flatnonzero(new)
    return np.stack([s[idx], np.append(emax[idx[1:] - 1], emax[-1])], axis=1)


def measure_minus(a: np.ndarray, b: np.ndarray) -> float:
    """Length of union(a) minus union(b) (both merged interval arrays)."""
    total = float((a[:, 1] - a[:, 0]).sum()) if a.size else 0.0
    if not a.size or not b.size:
        return total
    # overlap of two sorted disjoint interval lists: the b intervals meeting a[i] are a contiguous
    # run (end > a's start, start < a's end); the pieces, in position order, are summed one by one
    # in that order, so the float result is that of the two-pointer merge this replaces
    lo_j = np.searchsorted(b[:, 1], a[:, 0], side="right")
    hi_j = np.searchsorted(b[:, 0], a[:, 1], side="left")
    cnt = np.maximum(hi_j - lo_j, 0)
    ai = np.repeat(np.arange(len(a)), cnt)
    first = np.repeat(np.cumsum(cnt) - cnt, cnt)
    bj = np.repeat(lo_j, cnt) + (np.arange(ai.size) - first)
    lo = np.maximum(a[ai, 0], b[bj, 0])
    hi = np.minimum(a[ai, 1], b[bj, 1])
    ov = 0.0
    for piece in (hi - lo)[hi > lo].tolist():
        ov += piece
    return total - ov


def exposed_comm(graph: TaskGraph, result: SimResult, rank: int) -> float:
    """Seconds during which rank's communication (its comm streams and outgoing links) runs while
    its compute stream is idle (``simulator.reports.breakdown``'s exposed communication)."""
    dev_rank = np.array([d.rank for d in graph.devices])
    dev_compute = np.array([d.stream == "compute" for d in graph.devices])
    on_rank = dev_rank[graph.device] == rank
    comp = on_rank & dev_compute[graph.device]
    comm = on_rank & ~dev_compute[graph.device] & (graph.duration > 0)
    return measure_minus(interval_union(result.start[comm], result.end[comm]),
                         interval_union(result.start[comp], result.end[comp]))


def recompute_flops_per_microbatch(plan) -> float:
    """Recomputed forward FLOPs per microbatch on one GPU, summed over all layers (HFU numerator
    extra; Korthikanti 2022 Section 6.3): attention core under selective, whole layer under full."""
    from taskgraph.operators import layer_operators
    tr, s = plan.strategy.training, plan.sizes
    kw = dict(micro_batch=tr.micro_batch, seq_len=tr.seq_len, tp=s.tp, sp=plan.sp, cp=s.cp, ep=s.ep, etp=s.etp,
              flash_attention=plan.strategy.options.flash_attention, lora=tr.lora)   # adapters recompute too
    total, cache = 0.0, {}
    for li in range(plan.model.layers):
        policy = tr.recompute_layers[li] if tr.recompute_layers else tr.recompute
        if policy == "none":
            continue
        key = (policy, plan.model.layer_kind(li))
        if key not in cache:
            ops = layer_operators(plan.model, layer_index=li, **kw)
            cache[key] = sum(o.fwd_flops for o in ops if policy == "full" or o.selective_recompute_bytes > 0)
        total += cache[key]
    return total


def training_report(plan, work, graph: TaskGraph, result: SimResult, rep: Report) -> TrainingReport:
    from taskgraph.lora_flops import lora_flops_per_token
    from taskgraph.operators import model_flops_per_token
    from topologies.stragglers import pace_summary
    tr = plan.strategy.training
    s = plan.sizes
    it = rep.makespan_s
    tokens = plan.tokens_per_iteration
    per_token = model_flops_per_token(plan.model, tr.seq_len, "megatron") if tr.lora is None else \
        lora_flops_per_token(plan.model, tr.seq_len, tr.lora)   # LoRA: no frozen-weight wgrad (taskgraph/lora.py)
    model_flops = per_token * tokens
    # Recomputed forward FLOPs (HFU): per layer per microbatch per GPU, times all GPUs and microbatches.
    recompute = recompute_flops_per_microbatch(plan)
    recompute *= s.tp * s.cp * s.dp * plan.microbatches
    peak = plan.cluster.gpu.peak_flops("bf16")
    n = plan.num_gpus
    mfu = model_flops / (it * n * peak) if it > 0 else 0.0
    hfu = (model_flops + recompute) / (it * n * peak) if it > 0 else 0.0
    fp8 = plan.cluster.gpu.peak_flops_fp8
    per_stage = []
    busy = {r.rank: r for r in rep.per_rank}  # the split of simulator.reports.breakdown.time_breakdown
    rank_stages = stages_by_rank(plan.schedule)
    for r in range(plan.schedule.pp):
        stages = rank_stages[r]
        rr = busy.get(r)
        comp = rr.busy_s if rr else 0.0
        exp = rr.exposed_comm_s if rr else 0.0
        bubble = rr.pipeline_bubble_s if rr else 0.0
        per_stage.append(StageReport(r, stages, sum(plan.layers_per_stage[st] for st in stages), s.tp * s.cp * s.dp,
                                     comp, exp, bubble, bubble / comp if comp > 0 else 0.0,
                                     rr.other_idle_s if rr else 0.0))
    tps = tokens / it if it > 0 else 0.0
    days = gpu_hours = None
    if tr.train_tokens and tps > 0:
        days = tr.train_tokens / tps / 86400.0
        gpu_hours = days * 24.0 * n
    return TrainingReport(
        iteration_time_s=it, tokens_per_s=tps, tokens_per_s_per_gpu=tps / n, mfu=mfu, hfu=hfu,
        mfu_fp8_peak=(model_flops / (it * n * fp8)) if (fp8 and tr.precision == "fp8" and it > 0) else None,
        model_flops_per_iteration=model_flops, hardware_flops_per_iteration=model_flops + recompute,
        num_gpus=n, gpus_per_simulated_rank=s.tp * s.cp * s.dp, microbatches=plan.microbatches,
        per_stage=tuple(per_stage), train_days=days, train_gpu_hours=gpu_hours,
        pace=pace_summary(plan.cluster, plan.sizes),
    )


def stages_by_rank(schedule) -> list[tuple[int, ...]]:
    """The stages of each pipeline rank, in one pass over the stages (not one per rank)."""
    out: list[list[int]] = [[] for _ in range(schedule.pp)]
    for st, r in enumerate(schedule.stage_to_rank):
        out[r].append(st)
    return [tuple(x) for x in out]


def format_mfu(mfu: float, hfu: float, mfu_fp8_peak: float | None, sep: str = ", ") -> str:
    """``MFU 52.4%   HFU 60.1%``; an FP8 run says which peak each figure is against, and gives the MFU
    against the FP8 peak too (the BF16 figure alone reads as if FP8 ran at that share of its own peak).

    >>> format_mfu(0.842, 0.85, 0.421)
    'MFU 84.2% of the BF16 peak (42.1% of the FP8 peak), HFU 85.0% of the BF16 peak'
    """
    if mfu_fp8_peak is None:
        return f"MFU {100 * mfu:.1f}%{sep}HFU {100 * hfu:.1f}%"
    return (f"MFU {100 * mfu:.1f}% of the BF16 peak ({100 * mfu_fp8_peak:.1f}% of the FP8 peak){sep}"
            f"HFU {100 * hfu:.1f}% of the BF16 peak")


def format_training_report(tr: TrainingReport, rep: Report, title: str = "", interval=None) -> str:
    """The text report; ``interval`` (:class:`simulator.reports.intervals.Interval`) adds the stated
    interval to the iteration time, tokens/s, MFU and time to train."""
    lines = [title] if title else []
    if interval is None:
        mfu = format_mfu(tr.mfu, tr.hfu, tr.mfu_fp8_peak, "   ")
        lines.append(f"iteration time {tr.iteration_time_s:.3f} s   tokens/s {tr.tokens_per_s:,.0f}   "
                     f"tokens/s/GPU {tr.tokens_per_s_per_gpu:,.1f}   {mfu}")
    else:
        lines.append(f"iteration time {interval.text(tr.iteration_time_s, 's', fmt='{:.3f}')}   tokens/s "
                     f"{interval.text(tr.tokens_per_s, '', rate=True, fmt='{:,.0f}')}   "
                     f"tokens/s/GPU {tr.tokens_per_s_per_gpu:,.1f}")
        lo, hi = interval.rate(100 * tr.mfu)
        lines.append(f"{format_mfu(tr.mfu, tr.hfu, tr.mfu_fp8_peak, '   ')}   MFU {100 * interval.level:g} % interval "
                     f"{lo:.1f}–{hi:.1f}%")
    lines.append(f"GPUs {tr.num_gpus} (each simulated rank stands for {tr.gpus_per_simulated_rank} GPUs: its TP, CP "
                 f"and DP peers)   microbatches {tr.microbatches}   imbalance {rep.imbalance:.3f}   "
                 f"tasks {rep.num_tasks}")
    lines.append(f"{format_bubble(rep)}   {format_split(rep)}")
    lines.append(f"{'rank':>4} {'stages':>10} {'layers':>6} {'compute s':>10} {'exposed comm s':>15} {'bubble s':>9} "
                 f"{'other idle s':>12} {'bubble':>7}")
    for s in tr.per_stage:
        st = ",".join(map(str, s.stages))
        lines.append(f"{s.rank:>4} {st:>10} {s.layers:>6} {s.compute_s:>10.3f} {s.exposed_comm_s:>15.3f} "
                     f"{s.bubble_s:>9.3f} {s.other_idle_s:>12.3f} {s.bubble_fraction:>7.3f}")
    cp = rep.critical_path
    total = cp.length_s or 1.0
    parts = ", ".join(f"{k} {v:.3f} s ({100 * v / total:.0f}%)" for k, v in list(cp.by_category.items())[:6])
    lines.append(f"critical path: {parts}")
    if tr.pace:
        lines.append(f"pace: {tr.pace}")
    if tr.train_days is not None and interval is None:
        lines.append(f"time to train: {tr.train_days:.1f} days, {tr.train_gpu_hours:,.0f} GPU-hours")
    elif tr.train_days is not None:
        lines.append(f"time to train: {interval.text(tr.train_days, 'days')}, "
                     f"{interval.text(tr.train_gpu_hours, 'GPU-hours', fmt='{:,.0f}')}")
    if interval is not None:
        lines.append(interval.summary())
    return "\n".join(lines)
