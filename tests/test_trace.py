import gzip
import itertools
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.engine.core import simulate
from simulator.outputs.trace import chrome_trace, parse_ranks, trace_text, write_chrome_trace
from strategies.actions import Action, Schedule
from strategies.errors import ConfigError
from taskgraph.graph import Device, TaskGraphBuilder
from taskgraph.lower_pipeline import StageCosts, lower_uniform


def simulated_pipeline():
    """A 2-rank 1F1B pipeline of 3 microbatches (1 ms F, 2 ms B, 0.1 ms p2p) and its simulation; the
    trace-export tests use it too."""
    rows = ["0F0 0F1 0B0 0F2 0B1 0B2", "1F0 1B0 1F1 1B1 1F2 1B2"]
    orders = tuple(tuple(Action.parse(x) for x in r.split()) for r in rows)
    g = lower_uniform(Schedule("1f1b", 2, 3, 1, (0, 1), orders), StageCosts.uniform(2, 1e-3, 2e-3, p2p=1e-4))
    return g, simulate(g)


def _chain(durations, device_of=None):
    """A chain of tasks (each depends on the previous) on rank 0's compute stream (or given devices)."""
    b = TaskGraphBuilder()
    devs = [b.add_device(Device("rank0/compute", 0, "compute")), b.add_device(Device("rank0/tp", 0, "tp"))]
    prev = None
    for i, d in enumerate(durations):
        t = b.add_task(d, devs[device_of[i] if device_of else 0], "forward", op=f"op{i % 2}", stage=0, mb=i // 2)
        if prev is not None:
            b.add_edge(prev, t)
        prev = t
    g = b.build()
    return g, simulate(g)


def thread_spans_ns(trace: dict) -> dict:
    """(pid, tid) -> int64 array of (start_ns, end_ns) of the complete events sorted by start then
    end; ts/dur are microseconds, turned into integer nanoseconds (the writer's precision)."""
    xs = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    key = np.array([(e["pid"], e["tid"]) for e in xs], dtype=np.int64).reshape(-1, 2)
    s = np.rint(np.array([e["ts"] for e in xs], dtype=np.float64) * 1000).astype(np.int64)
    e_ = s + np.rint(np.array([e["dur"] for e in xs], dtype=np.float64) * 1000).astype(np.int64)
    order = np.lexsort((e_, s, key[:, 1], key[:, 0]))
    key, s, e_ = key[order], s[order], e_[order]
    cut = np.flatnonzero(np.any(key[1:] != key[:-1], axis=1)) + 1
    bounds = np.r_[0, cut, len(xs)]
    return {tuple(key[a].tolist()): np.stack([s[a:b], e_[a:b]], axis=1) for a, b in itertools.pairwise(bounds) if b > a}


def check_nesting(spans: np.ndarray) -> int:
    """Complete events on one thread must be disjoint or nested (a child lies inside its parent);
    returns how many are nested. Raises AssertionError on a partial overlap."""
    order = np.lexsort((-spans[:, 1], spans[:, 0]))  # by start, longer first
    stack, nested = [], 0
    for s, e in spans[order].tolist():
        while stack and stack[-1] <= s:
            stack.pop()
        if stack:
            assert e <= stack[-1], f"slice [{s}, {e}] ns partly overlaps one ending at {stack[-1]} ns"
            nested += 1
        stack.append(e)
    return nested


def check_trace(trace: dict) -> None:
    """Every complete event has name, ph, ts, dur >= 0, pid, tid, cat; on one thread no two events
    overlap (sorted by start then end, each starts at or after the previous one's end) and nesting
    is proper; every thread is named."""
    evs = trace["traceEvents"]
    xs = [e for e in evs if e["ph"] == "X"]
    assert xs
    for e in xs:
        for k in ("name", "ph", "ts", "dur", "pid", "tid", "cat"):
            assert k in e
        assert e["dur"] >= 0
    spans = thread_spans_ns(trace)
    for sp in spans.values():
        # sorted by (start, end), each starts at or after the previous one's end: no overlap, and
        # so no partial overlap either (nesting proper; check_nesting tests that directly)
        assert np.all(sp[1:, 0] >= sp[:-1, 1]), "two complete events on one thread overlap"
    named = {(e["pid"], e["tid"]) for e in evs if e["ph"] == "M" and e["name"] == "thread_name"}
    assert set(spans) <= named


def test_trace_structure_and_determinism(tmp_path):
    g, r = simulated_pipeline()
    p1, p2 = tmp_path / "a.json", tmp_path / "b.json"
    write_chrome_trace(p1, g, r)
    write_chrome_trace(p2, g, r)
    assert p1.read_bytes() == p2.read_bytes()
    trace = json.loads(p1.read_text())
    check_trace(trace)
    procs = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert procs == {"rank 0", "rank 1"}
    threads = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert threads == {"compute", "link 0->1", "link 1->0"}
    flows = [e for e in trace["traceEvents"] if e["ph"] in ("s", "f")]
    assert len(flows) == 2 * 6  # 6 transfers (link owned by the sender) each cross to the receiver once
    x = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["args"].get("stage") == 1 and e["args"].get("microbatch") == 0]
    assert {"task", "category", "stage", "chunk", "microbatch"} <= set(x[0]["args"])
    # keys are written sorted (as json.dumps(sort_keys=True) would), one event per line

    def sorted_keys(pairs):
        assert [k for k, _ in pairs] == sorted(k for k, _ in pairs)
        return dict(pairs)
    lines = p1.read_text().splitlines()
    assert lines[-1] == "]}" and len(lines) == len(trace["traceEvents"]) + 2
    for line in lines[1:-1]:
        json.loads(line.rstrip(","), object_pairs_hook=sorted_keys)


def test_exact_timestamps_integer_ns():
    # 1 ms forward on stage 0 starts at 0, p2p 0.1 ms, stage 1 forward starts at 1.1 ms
    t = chrome_trace(*simulated_pipeline())
    fwd = sorted((e["pid"], e["ts"], e["dur"]) for e in t["traceEvents"] if e["ph"] == "X" and e["name"] == "F s1 mb0")
    assert fwd == [(1, 1100.0, 1000.0)]
    text = trace_text(*simulated_pipeline())
    assert '"dur":1000.000,"name":"F s1 mb0","ph":"X","pid":1,"tid":0,"ts":1100.000}' in text


def test_rounding_never_overlaps_where_the_old_writer_did():
    # 0.6 ns tasks: the old writer rounded ts (0.0006 us -> 0.001) and dur (0.0006 -> 0.001)
    # separately, so the second slice ended at 0.002 us after the third started at 0.001 us.
    from benchmarks.trace_reference import chrome_trace as old_chrome_trace
    g, r = _chain([0.6e-9, 0.6e-9, 0.6e-9])
    old = thread_spans_ns(old_chrome_trace(g, r, flows=False))[(0, 0)]
    assert np.any(old[1:, 0] < old[:-1, 1])  # the check catches the old bug
    new = thread_spans_ns(chrome_trace(g, r))[(0, 0)]
    assert new.tolist() == [[0, 1], [1, 1], [1, 2]]  # start and end rounded separately, dur = difference


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(min_value=0.0, max_value=5e-6, allow_nan=False), min_size=2, max_size=25),
       st.lists(st.integers(0, 1), min_size=25, max_size=25))
def test_property_no_overlap_and_ns_precision(durations, devs):
    g, r = _chain(durations, devs)
    t = chrome_trace(g, r)
    check_trace(t)
    for sp in thread_spans_ns(t).values():
        check_nesting(sp)
    for e in (e for e in t["traceEvents"] if e["ph"] == "X"):
        task = e["args"]["task"]
        assert round(e["ts"] * 1000) == round(r.start[task] * 1e9)
        assert round((e["ts"] + e["dur"]) * 1000) == round(r.end[task] * 1e9)


def test_counter_track_in_gib():
    g, r = simulated_pipeline()
    t = chrome_trace(g, r, counters={0: ([0.0, 1e-3], [1.5, 2.5])})
    cs = [e for e in t["traceEvents"] if e["ph"] == "C"]
    assert [(c["name"], c["ts"], c["args"]["GiB"]) for c in cs] == [("memory GiB", 0.0, 1.5), ("memory GiB", 1000.0, 2.5)]


def test_gz_is_compressed_and_deterministic(tmp_path):
    g, r = simulated_pipeline()
    write_chrome_trace(tmp_path / "t.json", g, r)
    write_chrome_trace(tmp_path / "t.json.gz", g, r)
    write_chrome_trace(tmp_path / "u.json.gz", g, r)
    raw = (tmp_path / "t.json.gz").read_bytes()
    assert raw[:2] == b"\x1f\x8b" and raw == (tmp_path / "u.json.gz").read_bytes()
    assert gzip.decompress(raw) == (tmp_path / "t.json").read_bytes()


def test_rank_filter():
    g, r = simulated_pipeline()
    t = chrome_trace(g, r, ranks=(1,), counters={0: ([0.0], [1.0]), 1: ([0.0], [2.0])})
    evs = t["traceEvents"]
    assert {e["pid"] for e in evs} == {1}
    assert not [e for e in evs if e["ph"] in ("s", "f")]  # every flow crosses to rank 0, which is gone
    assert len([e for e in evs if e["ph"] == "X"]) == 6 + 3  # rank 1: 3 F + 3 B, 3 sends on link 1->0
    with pytest.raises(ConfigError, match="select no simulated rank; this run has ranks 0-1"):
        chrome_trace(g, r, ranks=(7,))


def test_stage_level_merges_runs_of_one_microbatch():
    # op0 mb0, op1 mb0 | op0 mb1, op1 mb1 | op0 mb2 : on compute -> 3 slices (2, 2, 1 tasks)
    g, r = _chain([1e-6, 2e-6, 3e-6, 4e-6, 5e-6])
    t = chrome_trace(g, r, level="stage")
    check_trace(t)
    xs = [(e["name"], e["ts"], e["dur"], e["args"]["tasks"], e["args"]["busy_us"], e["args"]["task"])
          for e in t["traceEvents"] if e["ph"] == "X"]
    assert xs == [("forward s0 mb0", 0.0, 3.0, 2, 3.0, 0), ("forward s0 mb1", 3.0, 7.0, 2, 7.0, 2),
                  ("forward s0 mb2", 10.0, 5.0, 1, 5.0, 4)]
    # a run is cut where another key runs in between on the same device: no merged slice overlaps
    g, r = _chain([1e-6, 1e-6, 1e-6, 1e-6], device_of=[0, 1, 0, 1])
    check_trace(chrome_trace(g, r, level="stage"))
    with pytest.raises(ConfigError, match="trace level 'kernel' is not one of: operator, stage"):
        chrome_trace(g, r, level="kernel")


def test_zero_length_task_sorts_before_the_task_it_ties_with():
    """A zero-length task that starts when another task of its device does ran first in the FIFO
    (else it would start at that task's end), whatever the ids: DualPipe's interleaved F&B pairs put
    an embedding dgrad (0 s) of mb 1 at the start of a forward of mb 0 (issue 38's merge). Sorting
    by id put the forward first, so the stage-level slices overlapped."""
    from tests.helpers import assert_timeline_invariants
    b = TaskGraphBuilder()
    dev = b.add_device(Device("rank0/compute", 0, "compute"))
    late = b.add_task(1e-6, dev, "forward", op="op0", stage=0, mb=0)   # id 0, runs second
    zero = b.add_task(0.0, dev, "backward", op="op1", stage=0, mb=1)   # id 1, runs first
    b.add_edge(zero, late)
    g = b.build()
    r = simulate(g)
    assert r.start[zero] == r.end[zero] == r.start[late] == 0.0
    assert_timeline_invariants(g, r)
    for level, first in (("operator", "op1 s0 mb1"), ("stage", "backward s0 mb1")):
        t = chrome_trace(g, r, level=level)
        check_trace(t)
        assert next(e["name"] for e in t["traceEvents"] if e["ph"] == "X") == first


def test_stage_level_thins_memory_counter_keeping_boundaries_and_peak():
    g, r = _chain([1e-6, 2e-6, 3e-6, 4e-6, 5e-6])  # runs [0, 3], [3, 10], [10, 15] us
    times = np.arange(16) * 1e-6
    values = np.array([0, 1, 9, 2, 3, 3, 4, 8, 5, 5, 6, 6, 7, 7, 7, 0], dtype=float)
    t = chrome_trace(g, r, level="stage", counters={0: (times, values)})
    got = [(e["ts"], e["args"]["GiB"]) for e in t["traceEvents"] if e["ph"] == "C"]
    assert got == [(0.0, 0.0), (2.0, 9.0), (3.0, 2.0), (7.0, 8.0), (10.0, 6.0), (12.0, 7.0), (15.0, 0.0)]
    full = [e for e in chrome_trace(g, r, counters={0: (times, values)})["traceEvents"] if e["ph"] == "C"]
    assert len(full) == 16


def test_nesting_check_catches_partial_overlap():
    assert check_nesting(np.array([[0, 10], [2, 5], [5, 10], [10, 12]])) == 2
    with pytest.raises(AssertionError, match="partly overlaps"):
        check_nesting(np.array([[0, 10], [5, 11]]))


def test_parse_ranks():
    assert parse_ranks("0,1, 8-10,1") == (0, 1, 8, 9, 10)
    for bad, msg in (("a", "'a' is not a rank"), ("3-1", "ends before it starts"), (",", "names no rank"),
                     ("1-", "'1-' is not a rank")):
        with pytest.raises(ConfigError, match=msg):
            parse_ranks(bad)
