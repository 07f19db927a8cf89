"""Calibration on a CPU trace: the profile rows that reproduce the traced step.

On a CPU trace every operator runs on the host thread and nests (``aten::linear`` holds
``aten::addmm``; ``aten::scaled_dot_product_attention`` holds the flash kernel), so the time is the
operators' self times (``kineto.leaf_ops``), each tagged with the part of the step it ran in
(forward, backward, optimizer: ``kineto.PHASES``). The rows describe ONE step, the median of the kept
``ProfilerStep`` spans (HTA drops the last; ``calibrate --include-last-step`` keeps it), so that the
simulation of the traced strategy with them gives that step back:

* GEMM calls map by shape (``kernels.gemm_key``) to the plan's operator passes of their part (forward
  calls to ``fwd``, backward calls to ``bwd_input``/``bwd_weight``); a call that fits several passes
  is shared evenly among them. A row is the time mapped to its pass divided by the calls the step
  runs (count per micro-batch x micro-batches);
* attention (the flash kernels' self time, not their thin wrappers) goes to the attention operators'
  ``fwd`` and ``bwd_input`` rows, in proportion to their modelled times;
* the rest of a part (norms, activations, residuals, embedding, loss, the eager framework's small
  operators) and its share of the time between operators (the step's span less its operators' self
  times, shared by the parts in proportion to their self time) is spread over the part's operator
  passes that no GEMM or attention call reached, in proportion to their modelled times;
* the optimizer part (Adam's step and zero_grad) is the optimizer row, less what the simulation adds
  to it from the cost model (gradient norm, gradient zeroing: ``taskgraph.costing``).

Communication operators (``c10d::``, ``gloo:``) are left to the collective model. Pipeline-parallel
traces (a rank runs only its stages) are not handled here: ``calibrate`` keeps its per-call medians
for them.
"""
from __future__ import annotations

from collections import defaultdict

from simulator.profiling.kernels import gemm_key, kernel_class, plan_gemm_index
from simulator.profiling.profile_csv import ProfileRow
from taskgraph.cost import PASSES

#: the passes each part of the step runs
PART_PASSES = {"fwd": ("fwd",), "bwd": ("bwd_input", "bwd_weight")}


def median_span(spans) -> tuple | None:
    """The kept step whose length is the median (the lower middle of an even count), or None.

    >>> median_span([(0, 3), (5, 6), (7, 9)])
    (7, 9)
    """
    if not spans:
        return None
    order = sorted(spans, key=lambda s: (s[1] - s[0], s[0]))
    return order[(len(order) - 1) // 2]


def step_parts(trace, span) -> tuple[dict, dict]:
    """(seconds per part, gemm/attention operator calls per part) of the step ``span`` of ``trace``:
    each part's self time plus its share of the time between operators (module docstring)."""
    lo, hi = span
    busy: dict = defaultdict(float)
    calls: dict = defaultdict(list)
    for k in trace.kernels:
        if not lo <= k.ts < hi:
            continue
        cls = kernel_class(k.name)
        if cls == "communication":
            continue
        busy[k.phase or "fwd"] += k.dur
        if cls in ("gemm", "attention"):
            calls[k.phase or "fwd"].append((cls, k))
    total = sum(busy.values())
    gap = max(0.0, (hi - lo) - total)
    return {p: (v + gap * v / total) * 1e-6 for p, v in busy.items()} if total > 0 else {}, dict(calls)


def calibrate_cpu(plan, traces) -> tuple[list, list]:
    """(profile rows, notes) that reproduce the median step of ``traces`` (module docstring); rows of
    several ranks (data parallel) are averaged."""
    from simulator.profiling.inventory import plan_operators, profile_items
    items = profile_items(plan)
    index = plan_gemm_index(plan_operators(plan))
    mb = plan.microbatches
    per_rank, notes = [], []
    for rt in traces:
        span = median_span(rt.step_spans)
        if span is None:
            notes.append(f"rank {rt.rank}: no ProfilerStep kept; nothing to calibrate on")
            continue
        parts, calls = step_parts(rt, span)
        per_rank.append(_rows_of_step(plan, items, index, mb, parts, calls))
    if not per_rank:
        return [], notes
    merged: dict = defaultdict(list)
    for rows in per_rank:
        for key, row in rows.items():
            merged[key].append(row)
    out = []
    for key in sorted(merged, key=lambda k: _order(k, items)):
        rows = merged[key]
        first = rows[0]
        out.append(ProfileRow(first.op, first.shape, first.pass_, sum(r.measured_s for r in rows) / len(rows),
                              first.modelled_s, first.count, first.how))
    return out, notes


def _rows_of_step(plan, items, index, mb, parts, calls) -> dict:
    """Rows (keyed (op, shape, pass)) of one rank's median step."""
    mapped: dict = defaultdict(float)   # (name, shape, pass) -> seconds in the step
    how: dict = {}
    by_item = {(it.name, it.shape): it for it in items}
    for part, passes in PART_PASSES.items():
        attn = 0.0
        for cls, k in calls.get(part, ()):
            if cls == "attention":
                attn += k.dur * 1e-6
                continue
            hits = index.get(gemm_key(k.op, k.dims), [])   # None (not a GEMM call's shapes): none
            hits = [h for h in hits if h[2] in passes]
            for h in hits:
                mapped[h] += k.dur * 1e-6 / len(hits)
                how[h] = "gemm calls"
        attn_items = [(it, p) for it in items if it.op.kind == "attention" for p in passes
                      if it.modelled_s[PASSES.index(p)] > 0]
        weight = sum(it.modelled_s[PASSES.index(p)] * it.count for it, p in attn_items)
        if attn > 0 and weight > 0:
            for it, p in attn_items:
                mapped[(it.name, it.shape, p)] += attn * it.modelled_s[PASSES.index(p)] * it.count / weight
                how[(it.name, it.shape, p)] = "attention"
        rest = max(0.0, parts.get(part, 0.0) - sum(v for h, v in mapped.items() if h[2] in passes))
        pool = [(it, p) for it in items for p in passes
                if (it.name, it.shape, p) not in mapped and it.modelled_s[PASSES.index(p)] > 0]
        weight = sum(it.modelled_s[PASSES.index(p)] * it.count for it, p in pool)
        for it, p in pool:
            mapped[(it.name, it.shape, p)] = rest * it.modelled_s[PASSES.index(p)] * it.count / weight if weight else 0.0
            how[(it.name, it.shape, p)] = "rest of part"
    rows = {}
    for (name, shape, p), seconds in mapped.items():
        it = by_item[(name, shape)]
        rows[(name, shape, p)] = ProfileRow(name, shape, p, seconds / (it.count * mb), it.modelled_s[PASSES.index(p)],
                                            it.count, how[(name, shape, p)])
    opt = _optimizer_row(plan, parts.get("optimizer", 0.0))
    if opt is not None:
        rows[(opt.op, opt.shape, opt.pass_)] = opt
    return rows


def trace_warnings(plan, traces) -> list[str]:
    """One line per way the traces' device or thread count differs from the strategy's: a CPU trace
    for a GPU cluster (or the reverse), or a CPU trace of more than one thread for the ``cpu`` device
    (one core: ``topologies/data/gpus.yaml``)."""
    gpu = plan.cluster.gpu
    on_cpu = getattr(gpu, "architecture", "") == "cpu" or gpu.name.lower() == "cpu"
    out = []
    devices = sorted({t.device for t in traces})
    if devices and devices != (["cpu"] if on_cpu else ["gpu"]):
        out.append(f"the traces ran on {'/'.join(devices)} but the strategy's device is {gpu.name}: the rows "
                   f"apply as measured on {'cpu' if 'cpu' in devices else 'the GPU'} (options.profile_gpu)")
    threads = sorted({t.threads for t in traces if t.device == "cpu" and t.threads is not None})
    if on_cpu and threads and threads != [1]:
        out.append(f"the traces ran {'/'.join(map(str, threads))} threads but the cpu device is one core "
                   f"(torch.set_num_threads(1)); the times describe {threads[-1]} threads")
    return out


def _optimizer_row(plan, seconds: float) -> ProfileRow | None:
    """The optimizer row of a single-stage plan: the optimizer part less the cost model's additions."""
    from simulator.profiling.measure import optimizer_items
    from taskgraph.cost import OPTIMIZER_OP, optimizer_shape
    from taskgraph.costing import build_work
    found = optimizer_items(plan)
    if len(found) != 1 or seconds <= 0:
        return None
    n, _sizes, adam = found[0]
    extras = build_work(plan).stages[0].optimizer_s - adam
    return ProfileRow(OPTIMIZER_OP, optimizer_shape(n), "fwd", max(0.0, seconds - extras), adam, 0, "optimizer part")


def _order(key, items) -> tuple:
    names = [(it.name, it.shape) for it in items]
    i = names.index((key[0], key[1])) if (key[0], key[1]) in names else len(names)
    return (i, PASSES.index(key[2]))
