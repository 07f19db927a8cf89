import numpy as np

from simulator.engine.core import simulate
from simulator.reports.memory_timeline import memory_curves
from strategies.actions import Action, Schedule
from taskgraph.lower_model import IterationWork, LayerWork, OpCost, StageWork, lower_model


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
