"""What-if changes (``PATTERN=FACTOR``) applied one after another with delta simulation."""
from __future__ import annotations

from dataclasses import dataclass

from strategies.errors import ConfigError, brief
from taskgraph.graph import TaskGraph


@dataclass(frozen=True)
class WhatIf:
    """One delta-mode change and its outcome.

    change: ``PATTERN=FACTOR`` as given; tasks: how many tasks matched; iteration_time_s: after the
    change; retimed: tasks the delta simulation re-timed; fallback: whether it fell back to a full
    run (and why); wall_s: seconds the delta call took.
    """

    change: str
    tasks: int
    iteration_time_s: float
    retimed: int
    changed: int
    fallback: bool
    reason: str
    wall_s: float


def parse_what_if(text: str) -> tuple[str, float]:
    import math
    pattern, sep, factor = text.rpartition("=")
    try:
        f = float(factor)
    except ValueError:
        f = -1.0
    if not sep or not pattern or not math.isfinite(f) or f < 0 or f > 1e6:
        raise ConfigError(f"--what-if {brief(text)} must look like PATTERN=FACTOR with a finite FACTOR in [0, 1e6], e.g. "
                          f"'layer3.*=1.5' (operator names), 'dp-comm=0' (a category) or '*=1.1'")
    return pattern, f


def what_if(graph: TaskGraph, changes: list[str], *, budget: float | str | None = "auto") -> tuple[float, list[WhatIf]]:
    """Apply ``PATTERN=FACTOR`` changes one after another with delta simulation.

    A pattern matches a task's operator name (``layer3.mlp_up.wgrad``, ``F``, ``send-act`` ...) or its
    category (``dp-comm``, ``recompute`` ...), shell-style (``fnmatch``). Returns the base iteration
    time and one :class:`WhatIf` per change (changes accumulate).
    """
    import fnmatch

    import numpy as np

    from simulator.engine.delta.simulator import DeltaSimulator
    from taskgraph.graph import CATEGORIES
    ds = DeltaSimulator(graph, budget=budget)
    base = ds.makespan
    names = list(graph.op_names) + [""]
    ops = np.array(names, dtype=object)[graph.op]
    cats = np.array(CATEGORIES, dtype=object)[graph.category]
    dur = graph.duration.copy()
    out = []
    for text in changes:
        pattern, factor = parse_what_if(text)
        # match each distinct operator name once, then index by task (work per name, not per task)
        name_hit = np.array([fnmatch.fnmatchcase(o, pattern) for o in names], dtype=bool)
        op_hit = name_hit[graph.op] if ops.size else np.zeros(0, dtype=bool)
        hit = np.flatnonzero(op_hit | (cats == pattern))
        if hit.size == 0:
            raise ConfigError(f"--what-if {brief(text)}: no task matches {brief(pattern)}; patterns match "
                              f"operator names such as {', '.join(sorted(set(names) - {''})[:5])} or categories such as "
                              f"{', '.join(sorted(set(cats.tolist()))[:5])}")
        dur[hit] = dur[hit] * factor
        st = ds.set_durations(hit, dur[hit])
        out.append(WhatIf(text, int(hit.size), ds.makespan, st.retimed, st.changed, st.fallback, st.reason, st.wall_s))
    return base, out
