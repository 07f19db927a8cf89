"""The committed output baseline (``tests/data/output_hashes.txt``, ``benchmarks/output_hashes.py``)
holds for the cheap part of it: every shipped example's lowered task graph and its ``simulate --json``
output (wall-clock keys masked), recomputed in this process. A pure move leaves them unchanged; a
change of behaviour regenerates the baseline in its own commit (the script's doc says how)."""
from __future__ import annotations

import numpy as np
import pytest

from benchmarks import output_hashes as oh


def _baseline() -> dict[str, str]:
    text = oh.BASELINE.read_text()
    return dict(ln.rsplit(" ", 1) for ln in text.splitlines() if ln)


def test_the_baseline_covers_every_example():
    base = _baseline()
    for f in oh.PIPELINES + oh.STRATEGIES:
        assert f"{f[:-5]}/task-graph:arrays" in base, f"{f}: no task-graph hash in {oh.BASELINE.name}"
        assert f"{f[:-5]}/simulate-json:stdout" in base, f"{f}: no simulate-json hash in {oh.BASELINE.name}"


def test_graph_hash_sees_one_changed_bit():
    g = oh.lowered_graph("pipeline-1f1b.yaml")
    before = oh.graph_hash(g)
    g.duration[3] = np.nextafter(g.duration[3], np.inf)  # one ulp
    assert oh.graph_hash(g) != before


def test_lowered_task_graphs_match_the_baseline():
    base = _baseline()
    got = oh.graph_hashes()
    differ = sorted(k for k in got if base.get(k) != got[k])
    assert not differ, f"lowered task graphs differ from {oh.BASELINE.name} (module doc: regenerate if intended): {differ}"


@pytest.mark.parametrize("example", oh.PIPELINES + oh.STRATEGIES)
def test_simulate_json_matches_the_baseline(example):
    base = _baseline()
    name = f"{example[:-5]}/simulate-json"
    got = oh.run_in_process(["simulate", f"ex/{example}", "--json"])
    differ = sorted(k for k in got if base.get(f"{name}:{k}") != got[k])
    assert not differ, f"{name}: {differ} differ from {oh.BASELINE.name} (module doc: regenerate if intended)"
