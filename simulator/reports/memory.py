"""Will it fit? Per pipeline rank: static model states + the simulated activation peak (from the
schedule: how many microbatches are in flight) + recompute temporaries + a reserve, against the GPU
capacity."""
from __future__ import annotations

from dataclasses import dataclass

from simulator.engine.core import SimResult
from simulator.reports.memory_timeline import curves_and_split
from taskgraph.graph import TaskGraph

#: Memory is reported in GiB (2**30 bytes), the unit nvidia-smi and datasheet "80 GB" capacities use.
GB = float(2**30)


@dataclass(frozen=True)
class StageMemory:
    """One GPU of pipeline rank ``rank`` (bytes)."""

    rank: int
    stages: tuple[int, ...]
    weights: float
    grads: float
    optimizer: float
    activations: float     # saved activations alive at the peak
    temporaries: float     # recompute buffers alive at the peak
    reserve: float
    total: float
    capacity: float
    peak_time_s: float
    alive_microbatches: tuple[tuple[int, int], ...]  # (stage, microbatch) holding activations at the peak
    cuda_graphs: float = 0.0   # per-layer CUDA graphs' static buffers (taskgraph/memory.py cuda_graph_buffer_bytes)

    @property
    def fits(self) -> bool:
        return self.total <= self.capacity

    @property
    def shortfall(self) -> float:
        return max(self.total - self.capacity, 0.0)


@dataclass(frozen=True)
class MemoryReport:
    per_stage: tuple[StageMemory, ...]
    capacity: float

    @property
    def fits(self) -> bool:
        return all(s.fits for s in self.per_stage)

    @property
    def peak(self) -> float:
        return max(s.total for s in self.per_stage)

    def to_json(self) -> dict:
        return {
            "fits": self.fits,
            "capacity_gb": self.capacity / GB,
            "peak_memory_gb": [s.total / GB for s in self.per_stage],
            "memory_per_stage": [{
                "rank": s.rank, "stages": list(s.stages), "weights_gb": s.weights / GB, "grads_gb": s.grads / GB,
                "optimizer_gb": s.optimizer / GB, "activations_gb": s.activations / GB,
                "temporaries_gb": s.temporaries / GB, "reserve_gb": s.reserve / GB, "total_gb": s.total / GB,
                "fits": s.fits, "shortfall_gb": s.shortfall / GB, "peak_time_s": s.peak_time_s,
                "alive_microbatches": [list(x) for x in s.alive_microbatches],
                **({"cuda_graphs_gb": s.cuda_graphs / GB} if s.cuda_graphs else {})} for s in self.per_stage],
        }


def memory_report(plan, graph: TaskGraph, result: SimResult) -> MemoryReport:
    from simulator.reports.training import stages_by_rank
    from taskgraph.memory import cuda_graph_buffer_bytes, static_memory
    static = static_memory(plan)
    curves, split = curves_and_split(graph, result)  # one sort of the events for both
    rank_stages = stages_by_rank(plan.schedule)
    reserve = plan.strategy.options.memory_reserve_gb * GB
    out = []
    for r in range(plan.schedule.pp):
        st = static[r]
        c = curves.get(r)
        peak, when, alive = (c.peak_bytes, c.peak_time, c.alive_at_peak) if c else (0.0, 0.0, ())
        act, tmp = split.get(r, (0.0, 0.0)) if peak > 0 else (0.0, 0.0)
        graphs = cuda_graph_buffer_bytes(plan, alive)
        total = st.total + peak + reserve + graphs
        out.append(StageMemory(r, rank_stages[r], st.weights, st.grads, st.optimizer, act, tmp, reserve, total,
                               plan.cluster.gpu.hbm_capacity, when, alive, graphs))
    return MemoryReport(tuple(out), plan.cluster.gpu.hbm_capacity)


def format_memory_report(mem: MemoryReport, layer_rows: list[dict] | None = None) -> str:
    g = lambda x: f"{x / GB:8.2f}"
    lines = [(f"{'rank':>4} {'stages':>8} {'weights':>8} {'grads':>8} {'optim':>8} {'activ':>8} {'temps':>8} "
             f"{'reserve':>8} {'total':>8} {'capacity':>8}  verdict (GiB)")]
    for s in mem.per_stage:
        verdict = "fits" if s.fits else f"OOM: short by {s.shortfall / GB:.2f} GiB"
        lines.append(f"{s.rank:>4} {','.join(map(str, s.stages)):>8} {g(s.weights)} {g(s.grads)} {g(s.optimizer)} "
                     f"{g(s.activations)} {g(s.temporaries)} {g(s.reserve)} {g(s.total)} {g(s.capacity)}  {verdict}")
    worst = max(mem.per_stage, key=lambda s: s.total)
    lines.append(f"peak {worst.total / GB:.2f} GiB on rank {worst.rank} at t = {worst.peak_time_s:.3f} s with "
                 f"{len(worst.alive_microbatches)} (stage, microbatch) activation sets alive: "
                 + " ".join(f"s{a}mb{b}" for a, b in worst.alive_microbatches[:16])
                 + (" ..." if len(worst.alive_microbatches) > 16 else ""))
    if any(s.cuda_graphs for s in mem.per_stage):
        lines.append("total includes the per-layer CUDA graphs' static buffers: "
                     + " ".join(f"rank {s.rank} {s.cuda_graphs / GB:.2f}" for s in mem.per_stage) + " GiB")
    lines.append("overall: " + ("fits" if mem.fits else "does NOT fit"))
    if layer_rows:
        lines.append("")
        lines.append(f"{'layer':>5} {'stage':>5} {'policy':>9} {'none MB':>9} {'selective MB':>12} {'full MB':>8}  "
                     f"(saved activations per microbatch per GPU)")
        for row in layer_rows:
            lines.append(f"{row['layer']:>5} {row['stage']:>5} {row['policy']:>9} {row['none_bytes'] / 1e6:>9.1f} "
                         f"{row['selective_bytes'] / 1e6:>12.1f} {row['full_bytes'] / 1e6:>8.1f}")
    return "\n".join(lines)
