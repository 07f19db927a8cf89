import numpy as np

from simulator.engine.core import simulate
from simulator.reports.memory_timeline import memory_curves
from strategies.actions import Action, Schedule
from taskgraph.lower_model import lower_model
from taskgraph.work import IterationWork, LayerWork, OpCost, StageWork


def test_1f1b_peak_holds_min_p_minus_i_m_microbatches():
    # Korthikanti 2022 Section 4.2.3: with 1F1B, stage i holds activations of min(p - i, m) microbatches.
    rows = ["0F0 0F1 0F2 0B0 0F3 0B1 0B2 0B3", "1F0 1F1 1B0 1F2 1B1 1F3 1B2 1B3",
            "2F0 2B0 2F1 2B1 2F2 2B2 2F3 2B3"]
    orders = tuple(tuple(map(Action.parse, r.split())) for r in rows)
    s = Schedule("1f1b", 3, 4, 1, (0, 1, 2), orders)
    st = StageWork((LayerWork("L", (OpCost("a", 1.0, 2.0, 0.0, saved_bytes=10.0),)),))
    g = lower_model(s, IterationWork((st, st, st)))
    r = simulate(g)
    curves = memory_curves(g, r)
    for i in range(3):
        c = curves[i]
        assert c.peak_bytes == 10.0 * min(3 - i, 4)
        assert len(c.alive_at_peak) == min(3 - i, 4)
        assert c.values.min() >= 0.0 and c.values[-1] == 0.0


def test_curves_and_split_is_the_per_rank_computation():
    # the shared sort gives each rank the order of sorting its own events alone, the bytes alive per
    # (stage, microbatch) summed event by event, and the activation / temporary bytes at the peak
    from simulator.reports.memory_timeline import curves_and_split
    from taskgraph.graph import MEM_KINDS

    rows = ["0F0 0F1 0F2 0B0 0F3 0B1 0B2 0B3", "1F0 1F1 1B0 1F2 1B1 1F3 1B2 1B3"]
    orders = tuple(tuple(map(Action.parse, r.split())) for r in rows)
    s = Schedule("1f1b", 2, 4, 1, (0, 1), orders)
    ops = (OpCost("a", 1.0, 2.0, 0.0, saved_bytes=10.0), OpCost("b", 0.5, 1.0, 0.0, saved_bytes=3.0))
    st = StageWork((LayerWork("L", ops, recompute="selective"),))
    g = lower_model(s, IterationWork((st, st)))
    r = simulate(g)
    curves, split = curves_and_split(g, r)
    task = g.mem_task.astype(np.int64)
    t = np.where(g.mem_at_end == 1, r.end[task], r.start[task])
    rank = np.array([d.rank for d in g.devices])[g.device[task]]
    for q in (0, 1):
        sel = np.flatnonzero(rank == q)
        order = sel[np.lexsort((task[sel], g.mem_bytes[sel] > 0, t[sel]))]
        cum = np.cumsum(g.mem_bytes[order])
        k = int(np.argmax(cum))
        alive = {}
        for e in order[: k + 1].tolist():
            key = (int(g.stage[task[e]]), int(g.mb[task[e]]))
            alive[key] = alive.get(key, 0.0) + float(g.mem_bytes[e])
        keys = tuple(sorted(kk for kk, v in alive.items() if v > 1e-9 * max(abs(cum[k]), 1.0)))
        kd, dl = g.mem_kind[order[: k + 1]], g.mem_bytes[order[: k + 1]]
        assert curves[q].peak_bytes == max(cum[k], 0.0) and curves[q].alive_at_peak == keys
        assert np.array_equal(curves[q].values[1:], cum) and len(keys) > 0
        assert split[q] == (float(dl[kd == MEM_KINDS.index("activation")].sum()),
                            float(dl[kd == MEM_KINDS.index("temporary")].sum()))
