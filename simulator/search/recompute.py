"""Recompute planner: choose a per-layer recompute policy (none / selective / full) that fits in
memory with the smallest predicted iteration time, using the simulator as the judge (FlexFlow's
"simulator as oracle", Jia et al. 2019 Section 6).

Search: start from no recomputation; while some pipeline rank does not fit, upgrade the layers of
that rank whose upgrade saves the most bytes at the rank's simulated peak per recomputed FLOP
(saved bytes per microbatch x microbatches of that stage alive at the peak), enough to cover the
shortfall, and re-simulate. The schedule decides how many microbatches are alive, so stages and
chunks are treated separately. The result is compared with the uniform policies; if a uniform
policy that fits is faster, it is returned instead.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from simulator.reports.memory import MemoryReport, memory_report
from strategies.strategy_file import Strategy

ORDER = ("none", "selective", "full")


@dataclass(frozen=True)
class Evaluation:
    policies: tuple[str, ...]
    iteration_time_s: float
    peak_bytes: float
    fits: bool
    memory: MemoryReport


@dataclass(frozen=True)
class RecomputePlan:
    best: Evaluation | None          # the chosen plan (None when nothing fits)
    uniform: dict                    # policy -> Evaluation
    steps: int                       # simulations run by the search
    #: why the search ran at another fidelity than asked ("" when it did not): operator fidelity over
    #: the task limit falls back to coarse (issue 41)
    note: str = ""

    def summary(self) -> str:
        return compress(self.best.policies) if self.best else "no plan fits"


def compress(policies) -> str:
    """``layers 0-11: full, 12-95: none``."""
    out, start = [], 0
    for i in range(1, len(policies) + 1):
        if i == len(policies) or policies[i] != policies[start]:
            span = f"{start}" if i - 1 == start else f"{start}-{i - 1}"
            out.append(f"{span}: {policies[start]}")
            start = i
    return "layers " + ", ".join(out)


def evaluate(strategy: Strategy, policies, fidelity=None) -> Evaluation:
    from simulator.simulation.strategy import simulate_strategy
    strat = replace(strategy, training=replace(strategy.training, recompute_layers=tuple(policies)))
    sim = simulate_strategy(strat, fidelity=fidelity)
    mem = memory_report(sim.plan, sim.graph, sim.result)
    return Evaluation(tuple(policies), sim.report.makespan_s, mem.peak, mem.fits, mem)


def _layer_costs(plan):
    """Per layer: saved bytes per microbatch under each policy and recomputed forward FLOPs."""
    from taskgraph.memory import layer_activation_table
    from taskgraph.operators import layer_operators
    from taskgraph.plan import DTYPE_BYTES
    tr, s = plan.strategy.training, plan.sizes
    rows = layer_activation_table(plan)
    flops = {}
    for li in range(plan.model.layers):
        moe = plan.model.layer_kind(li)
        if moe not in flops:
            ops = layer_operators(plan.model, micro_batch=tr.micro_batch, seq_len=tr.seq_len, tp=s.tp, sp=plan.sp,
                                  cp=s.cp, ep=s.ep, etp=s.etp, dtype_bytes=DTYPE_BYTES[tr.precision],
                                  flash_attention=plan.strategy.options.flash_attention, layer_index=li)
            flops[moe] = {"none": 0.0, "selective": sum(o.fwd_flops for o in ops if o.selective_recompute_bytes > 0),
                          "full": sum(o.fwd_flops for o in ops)}
    return rows, [flops[plan.model.layer_kind(li)] for li in range(plan.model.layers)]


def plan_recompute(strategy: Strategy, *, fidelity: str | None = None, max_steps: int = 40,
                   progress: bool | None = None) -> RecomputePlan:
    """``progress``: a bar of simulations on stderr (``None``: only on a terminal; ``simulator.outputs.progress``)."""
    from simulator.outputs.progress import progress_bar
    from taskgraph.plan import resolve
    plan = resolve(strategy)
    fidelity, max_steps, note = search_budget(strategy, plan.model.layers, fidelity, max_steps)
    with progress_bar(None, "plan-recompute", progress, "simulation") as bar:
        return replace(_plan(strategy, plan, plan.model.layers, fidelity, max_steps, bar), note=note)


def search_budget(strategy: Strategy, layers: int, fidelity: str | None, max_steps: int) -> tuple:
    """(fidelity, simulations, note) the search may run within ``MAX_TOTAL_TASKS``: every simulation is
    at most as large as uniform full recomputation. Operator fidelity over the limit falls back to coarse
    (one task per stage pass: memory verdicts unchanged); a run still too large for ``max_steps``
    simulations gets fewer steps (at least the three uniform policies and one planned step); past
    that, the usual refusal. A fidelity asked for (``fidelity`` given: ``--fidelity``) is kept, and
    so are the steps: over the limit, the refusal. ``note`` says what changed ("" when nothing did; issue 41)."""
    from simulator.simulation.estimate import estimate_run_tasks
    from strategies.limits import MAX_TOTAL_TASKS, check_tasks
    full = ("full",) * layers
    runs = max(max_steps, 3)
    per_run = estimate_run_tasks("strategy", strategy, fidelity=fidelity, recompute_layers=full)
    notes = []
    asked = fidelity is not None
    if per_run * runs > MAX_TOTAL_TASKS and not asked and strategy.options.fidelity != "coarse":
        coarse = estimate_run_tasks("strategy", strategy, fidelity="coarse", recompute_layers=full)
        if coarse < per_run:
            notes.append(f"operator fidelity would build about {per_run:,} tasks per simulation ({runs} simulations: "
                         f"over the limit of {MAX_TOTAL_TASKS:,}); planned at coarse fidelity ({coarse:,} tasks each)")
            fidelity, per_run = "coarse", coarse
    if per_run * runs > MAX_TOTAL_TASKS and per_run * 4 <= MAX_TOTAL_TASKS and not asked:
        runs = max_steps = MAX_TOTAL_TASKS // per_run
        notes.append(f"at most {runs} simulations of about {per_run:,} tasks (the limit of {MAX_TOTAL_TASKS:,} tasks)")
    check_tasks(per_run * runs, f"plan-recompute (up to {runs} simulations of about {per_run:,} tasks)",
                MAX_TOTAL_TASKS)
    return fidelity, max_steps, "; ".join(notes)


def _plan(strategy, plan, L, fidelity, max_steps, bar) -> RecomputePlan:
    def evaluate_(policies):
        ev = evaluate(strategy, policies, fidelity)
        bar.update(1)
        return ev
    uniform = {p: evaluate_((p,) * L) for p in ORDER}
    rows, flops = _layer_costs(plan)
    policies = ["none"] * L
    ev = uniform["none"]
    steps = 3
    while not ev.fits and steps < max_steps:
        changed = False
        for st in ev.memory.per_stage:
            if st.fits:
                continue
            alive: dict[int, int] = {}
            for stage, _mb in st.alive_microbatches:
                alive[stage] = alive.get(stage, 0) + 1
            cands = []
            for li in range(L):
                stage = rows[li]["stage"]
                if plan.schedule.stage_to_rank[stage] != st.rank or policies[li] == "full":
                    continue
                cur = policies[li]
                for nxt in ORDER[ORDER.index(cur) + 1:]:
                    saved = (rows[li][f"{cur}_bytes"] - rows[li][f"{nxt}_bytes"]) * max(alive.get(stage, 0), 1)
                    cost = flops[li][nxt] - flops[li][cur]
                    if saved > 0:
                        cands.append((-(saved / max(cost, 1.0)), li, nxt, saved))
            cands.sort()
            need, got, taken = st.shortfall * 1.02, 0.0, set()
            for _, li, nxt, saved in cands:
                if li in taken:
                    continue
                policies[li] = nxt
                taken.add(li)
                changed = True
                got += saved
                if got >= need:
                    break
        if not changed:
            break
        ev = evaluate_(policies)
        steps += 1
    best = ev if ev.fits else None
    for p in ORDER:  # a uniform policy that fits and is faster wins (never worse than uniform full)
        u = uniform[p]
        if u.fits and (best is None or u.iteration_time_s < best.iteration_time_s):
            best = u
    return RecomputePlan(best, uniform, steps)


def format_plan(rp: RecomputePlan) -> str:
    gb = 2**30
    lines = [f"{'policy':<28} {'iter s':>9} {'peak GiB':>9}  fits"]
    for p, ev in rp.uniform.items():
        lines.append(f"{'uniform ' + p:<28} {ev.iteration_time_s:>9.3f} {ev.peak_bytes / gb:>9.2f}  {ev.fits}")
    if rp.best:
        lines.append(f"{'planned':<28} {rp.best.iteration_time_s:>9.3f} {rp.best.peak_bytes / gb:>9.2f}  {rp.best.fits}")
        lines.append(f"plan: {compress(rp.best.policies)}   ({rp.steps} simulations)")
    else:
        lines.append(f"no per-layer plan fits, even full recomputation everywhere ({rp.steps} simulations): "
                     f"reduce micro_batch, raise tp/pp, or use ZeRO")
    return "\n".join(lines)
