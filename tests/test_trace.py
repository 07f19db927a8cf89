import json

from simulator.engine import simulate
from simulator.trace import chrome_trace, write_chrome_trace
from strategies.actions import Action, Schedule
from taskgraph.lower_pipeline import StageCosts, lower_uniform


def _graph():
    rows = ["0F0 0F1 0B0 0F2 0B1 0B2", "1F0 1B0 1F1 1B1 1F2 1B2"]
    orders = tuple(tuple(Action.parse(x) for x in r.split()) for r in rows)
    g = lower_uniform(Schedule("1f1b", 2, 3, 1, (0, 1), orders), StageCosts.uniform(2, 1e-3, 2e-3, p2p=1e-4))
    return g, simulate(g)


def check_trace(trace: dict) -> None:
    """Every complete event has name, ph, ts, dur >= 0, pid, tid; events on one thread never overlap."""
    evs = trace["traceEvents"]
    xs = [e for e in evs if e["ph"] == "X"]
    assert xs
    by_thread = {}
    for e in xs:
        for k in ("name", "ph", "ts", "dur", "pid", "tid"):
            assert k in e
        assert e["dur"] >= 0
        by_thread.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in by_thread.values():
        spans.sort()
        for (s0, e0), (s1, e1) in zip(spans, spans[1:]):
            assert s1 >= e0 - 1e-6
    named = {(e["pid"], e["tid"]) for e in evs if e["ph"] == "M" and e["name"] == "thread_name"}
    assert set(by_thread) <= named


def test_trace_structure_and_determinism(tmp_path):
    g, r = _graph()
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


def test_trace_counter_tracks():
    g, r = _graph()
    t = chrome_trace(g, r, counters={0: ([0.0, 1e-3], [1.5, 2.5])})
    cs = [e for e in t["traceEvents"] if e["ph"] == "C"]
    assert [c["args"]["GB"] for c in cs] == [1.5, 2.5]
