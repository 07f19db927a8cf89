"""Per-rank HTA export, timeline export and their CLI options (issue 15)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simulator.api import simulate_pipeline
from simulator.cli.main import main
from simulator.outputs.timeline_export import timeline_table, write_timeline
from simulator.outputs.trace_hta import (
    COMPUTE_STREAM,
    CORRELATION_BASE,
    hta_rank_text,
    idle_within_span_s,
    write_hta_traces,
)
from strategies.errors import ConfigError
from strategies.pipeline_file import load_pipeline
from tests.test_trace import simulated_pipeline

EXAMPLES = Path(__file__).resolve().parent.parent / "strategies" / "examples"
P1F1B = str(EXAMPLES / "pipeline-1f1b.yaml")


def test_hta_layout_exact():
    g, r = simulated_pipeline()  # 2 ranks, 1 ms F, 2 ms B, 0.1 ms p2p on links
    text = hta_rank_text(g, r, 1, 2)
    first = text.splitlines()[0]
    assert re.search(r'"rank":\s+(\d+)', first).group(1) == "1"  # HTA's own regex, on the first line
    t = json.loads(text)
    assert t["distributedInfo"] == {"backend": "nccl", "rank": 1, "world_size": 2}
    k = [e for e in t["traceEvents"] if e.get("cat") == "kernel"]
    assert len(k) == 6 + 3  # 3 F + 3 B on compute, 3 sends on link 1->0
    f0 = next(e for e in k if e["name"] == "F s1 mb0")
    assert (f0["ts"], f0["dur"], f0["args"]["stream"], f0["tid"]) == (1100, 1000, COMPUTE_STREAM, COMPUTE_STREAM)
    assert {e["args"]["stream"] for e in k if e["name"].startswith("ncclDevKernel_")} == {20}
    assert sorted({e["name"] for e in k if e["args"]["stream"] == 20}) == [  # HTA's ^nccl.*Kernel matches
        "ncclDevKernel_SendRecv(send-grad s1 mb0)", "ncclDevKernel_SendRecv(send-grad s1 mb1)",
        "ncclDevKernel_SendRecv(send-grad s1 mb2)"]
    launch = next(e for e in t["traceEvents"] if e.get("cat") == "cuda_runtime"
                  and e["args"]["correlation"] == f0["args"]["correlation"])
    assert launch["ts"] == 1100 and launch["name"] == "cudaLaunchKernel"  # ready when the p2p arrived
    assert f0["args"]["correlation"] == CORRELATION_BASE + f0["args"]["execsim task"]
    flows = [e for e in t["traceEvents"] if e.get("cat") == "ac2g" and e["id"] == f0["args"]["correlation"]]
    assert [(e["ph"], e["ts"]) for e in flows] == [("s", 1100), ("f", 1100)]
    assert all(isinstance(e["ts"], int) for e in t["traceEvents"] if "ts" in e)  # integer us


def test_hta_files_and_rank_filter(tmp_path):
    g, r = simulated_pipeline()
    paths = write_hta_traces(tmp_path / "d", g, r)
    assert [p.name for p in paths] == ["rank_0.json", "rank_1.json"]
    again = write_hta_traces(tmp_path / "e", g, r, ranks=[1])
    assert [p.name for p in again] == ["rank_1.json"] and again[0].read_bytes() == paths[1].read_bytes()


def test_idle_within_span_exact():
    from simulator.reports.report import report
    g, r = simulated_pipeline()
    # rank 0 compute: F0 F1 [0, 2], B0 [4.2, 6.2], F2 B1 [6.2, 9.2], B2 [10.4, 12.4] ms: gaps 2.2 + 1.2
    # rank 1 compute: [1.1, 7.1], [7.3, 10.3]: one 0.2 ms gap; the report's 3.4 ms idle less the
    # 1.1 ms lead-in and the 2.1 ms tail (makespan 12.4)
    got = {x.rank: round(idle_within_span_s(g, r, x.idle_s, x.rank) * 1e3, 9) for x in report(g, r).per_rank}
    assert got == {0: 3.4, 1: 0.2}


def _hta_idle(trace_dir, ranks):
    """HTA's idle time (us) per rank: on the compute stream (idle-time breakdown) and with no kernel
    on any stream (temporal breakdown)."""
    from hta.trace_analysis import TraceAnalysis
    ta = TraceAnalysis(trace_dir=str(trace_dir))
    out = {}
    for rank in ranks:
        df, _ = ta.get_idle_time_breakdown(ranks=[rank], visualize=False)
        out[rank] = float(df[df.stream == COMPUTE_STREAM].idle_time.sum())
    tb = ta.get_temporal_breakdown(visualize=False)
    return out, dict(zip(tb["rank"].tolist(), tb["idle_time(us)"].astype(float).tolist()))


def _idle_any_stream_s(graph, result, rank):
    """Seconds between the rank's first and last task (any stream) with no task running."""
    m = np.isin(graph.device, [i for i, d in enumerate(graph.devices) if d.rank == rank])
    s, e = result.start[m], result.end[m]
    o = np.argsort(s, kind="stable")
    s, e = s[o], np.maximum.accumulate(e[o])
    gaps = s[1:] - e[:-1]
    return float(gaps[gaps > 0].sum())


@pytest.mark.filterwarnings("ignore::Warning:hta.*")  # HTA 0.5.0's own pandas deprecations
@pytest.mark.parametrize("name", ["pipeline-1f1b.yaml", "pipeline-interleaved.yaml"])
def test_hta_idle_time_matches_simulator(tmp_path, name, hta_in_process):
    """HTA (optional test extra: pip install 'execsim[hta]') loads the per-rank export and finds the
    simulator's idle time on every rank's compute stream (idle-time breakdown) and with no stream
    busy (temporal breakdown, all streams incl. the p2p links) within 1 %."""
    pytest.importorskip("hta", reason="Holistic Trace Analysis is not installed (pip install 'execsim[hta]')")
    sim = simulate_pipeline(load_pipeline(EXAMPLES / name))
    write_hta_traces(tmp_path, sim.graph, sim.result)
    got, temporal = _hta_idle(tmp_path, [x.rank for x in sim.report.per_rank])
    for x in sim.report.per_rank:
        ours_us = idle_within_span_s(sim.graph, sim.result, x.idle_s, x.rank) * 1e6
        assert got[x.rank] == pytest.approx(ours_us, rel=0.01, abs=1.0), (x.rank, got[x.rank], ours_us)
        any_us = _idle_any_stream_s(sim.graph, sim.result, x.rank) * 1e6
        assert temporal[x.rank] == pytest.approx(any_us, rel=0.01, abs=1.0), (x.rank, temporal[x.rank], any_us)
    assert sum(got.values()) > 0


def _union_us(s_us: np.ndarray, e_us: np.ndarray) -> int:
    """Length of the union of integer intervals [s, e)."""
    o = np.argsort(s_us, kind="stable")
    total, cur_s, cur_e = 0, None, None
    for a, b in zip(s_us[o].tolist(), e_us[o].tolist()):
        if cur_e is None or a > cur_e:
            total += 0 if cur_e is None else cur_e - cur_s
            cur_s, cur_e = a, b
        else:
            cur_e = max(cur_e, b)
    return total + (0 if cur_e is None else cur_e - cur_s)


@pytest.mark.filterwarnings("ignore::Warning:hta.*")
def test_hta_overlap_and_breakdowns_match_simulator(tmp_path, hta_in_process):
    """On a strategy with TP, DP and pipeline communication, HTA's communication/computation overlap,
    its temporal breakdown (compute, non-compute, idle) and its kernel-type breakdown equal ours on
    every rank (to the export's integer microseconds): the kernels are named as NCCL names them, so HTA
    sees the communication (its overlap was NaN with ``nccl:`` names)."""
    pytest.importorskip("hta", reason="Holistic Trace Analysis is not installed (pip install 'execsim[hta]')")
    from hta.trace_analysis import TraceAnalysis

    from simulator.api import simulate_strategy
    from simulator.outputs.trace_hta import to_us
    from strategies.strategy_file import load_strategy
    from taskgraph.graph import IS_COMM_CODE
    f = tmp_path / "s.yaml"
    f.write_text("model: {preset: llama3-8b, layers: 4}\ncluster: {preset: dgx-h100, nodes: 1}\n"
                 "parallel: {tp: 2, pp: 2, dp: 2}\ntraining: {micro_batch: 1, global_batch: 8, seq_len: 2048}\n"
                 "options: {overlap_grad_reduce: true}\n")
    sim = simulate_strategy(load_strategy(f))
    g, r = sim.graph, sim.result
    d = tmp_path / "hta"
    write_hta_traces(d, g, r)
    ta = TraceAnalysis(trace_dir=str(d))
    overlap = dict(zip(*ta.get_comm_comp_overlap(visualize=False)[["rank", "comp_comm_overlap_pctg"]].T.values))
    tb = ta.get_temporal_breakdown(visualize=False).set_index("rank")
    kinds, _ = ta.get_gpu_kernel_breakdown(visualize=False)
    comm_code = IS_COMM_CODE[g.category]
    for x in sim.report.per_rank:
        devs = [i for i, dv in enumerate(g.devices) if dv.rank == x.rank]
        mine = np.isin(g.device, devs)
        s_us, e_us = to_us(r.start), to_us(r.end)
        comm = mine & comm_code
        comp = mine & ~comm_code
        m_us = _union_us(s_us[comm], e_us[comm])
        assert m_us > 0
        both = _union_us(np.r_[s_us[comm], s_us[comp]], np.r_[e_us[comm], e_us[comp]])
        overlap_us = m_us + _union_us(s_us[comp], e_us[comp]) - both
        # HTA: overlap / communication time; ours: communication not exposed / communication time
        assert overlap[x.rank] == pytest.approx(round(100 * overlap_us / m_us, 2), abs=0.011)
        assert overlap[x.rank] == pytest.approx(100 * (1 - x.exposed_comm_s * 1e6 / m_us), abs=0.5)
        row = tb.loc[x.rank]
        assert row["compute_time(us)"] == pytest.approx(x.busy_s * 1e6, rel=1e-3, abs=2)
        assert row["non_compute_time(us)"] == pytest.approx(x.exposed_comm_s * 1e6, rel=1e-3, abs=2)
        assert row["idle_time(us)"] == pytest.approx(_idle_any_stream_s(g, r, x.rank) * 1e6, rel=1e-3, abs=2)
    # kernel-type breakdown (HTA splits the merged intervals of all ranks by which kinds run): communication
    # alone = our exposed communication, computation alone = compute less its overlap with communication
    got = dict(zip(kinds["kernel_type"], kinds["sum"]))
    exposed_us = sum(x.exposed_comm_s for x in sim.report.per_rank) * 1e6
    assert got["COMMUNICATION"] == pytest.approx(exposed_us, rel=1e-3, abs=10)
    overlap_key = next(k for k in got if "overlapping" in k)
    compute_us = sum(x.busy_s for x in sim.report.per_rank) * 1e6
    assert got["COMPUTATION"] + got[overlap_key] == pytest.approx(compute_us, rel=1e-3, abs=10)
    assert got[overlap_key] > 0


def test_timeline_csv_exact(tmp_path):
    g, r = simulated_pipeline()
    p = tmp_path / "t.csv"
    write_timeline(p, g, r)
    df = pd.read_csv(p)
    assert list(df.columns) == ["task", "op", "category", "stage", "chunk", "microbatch", "rank", "device",
                                "device_name", "device_rank", "stream", "is_comm", "ready_s", "start_s", "end_s",
                                "duration_s"]
    row = df[df.task == 6].iloc[0]
    assert (row.op, row.category, row.stage, row.microbatch, row.device_name) == ("F", "forward", 1, 0, "rank1/compute")
    assert (row.start_s, row.end_s, row.duration_s) == (r.start[6], r.end[6], g.duration[6])
    q = tmp_path / "u.csv"
    write_timeline(q, g, r)
    assert p.read_bytes() == q.read_bytes()
    with pytest.raises(ConfigError, match=r"must end in \.csv or \.parquet"):
        write_timeline(tmp_path / "t.xlsx", g, r)


def test_timeline_parquet_roundtrip(tmp_path):
    pytest.importorskip("pyarrow", reason="pyarrow is not installed (pip install 'execsim[parquet]')")
    g, r = simulated_pipeline()
    write_timeline(tmp_path / "t.parquet", g, r)
    back = pd.read_parquet(tmp_path / "t.parquet")
    pd.testing.assert_frame_equal(back, timeline_table(g, r), check_dtype=False)


def test_timeline_parquet_without_pyarrow_is_one_clear_error(tmp_path, monkeypatch):
    import simulator.outputs.timeline_export as te
    monkeypatch.setattr(te, "parquet_available", lambda: False)
    g, r = simulated_pipeline()
    with pytest.raises(ConfigError, match=r"needs pyarrow.*execsim\[parquet\].*or write \.csv"):
        te.write_timeline(tmp_path / "t.parquet", g, r)


def run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_cli_trace_outputs(capsys, tmp_path):
    gz, d, csv = tmp_path / "t.json.gz", tmp_path / "hta", tmp_path / "t.csv"
    rc, out, _ = run(capsys, "simulate", P1F1B, "--trace", str(gz), "--trace-dir", str(d), "--timeline", str(csv),
                     "--trace-ranks", "0-1", "--trace-level", "stage")
    assert rc == 0
    assert gz.read_bytes()[:2] == b"\x1f\x8b"
    import gzip
    t = json.loads(gzip.decompress(gz.read_bytes()))
    assert {e["pid"] for e in t["traceEvents"]} == {0, 1}
    assert sorted(p.name for p in d.iterdir()) == ["rank_0.json", "rank_1.json"]
    assert len(pd.read_csv(csv)) > 0
    assert "2 per-rank traces written to" in out and "timeline (" in out and "trace written to" in out


@pytest.mark.parametrize("args, msg", [
    (["--trace", "x.json", "--trace-ranks", "a-b"], "--trace-ranks: 'a-b' is not a rank or a range"),
    (["--trace", "x.json", "--trace-ranks", "40-41"], "names rank 41 but this run simulates ranks 0-3"),
    (["--timeline", "x.txt"], "must end in .csv or .parquet"),
    (["--trace-ranks", "0"], "--trace-ranks selects ranks of --trace or --trace-dir"),
    (["--trace-dir", "x.d", "--trace-level", "stage"], "--trace-level applies to the Chrome trace"),
])
def test_cli_trace_option_errors(capsys, tmp_path, args, msg):
    args = [a if not a.startswith("x.") else str(tmp_path / a) for a in args]
    rc, _, err = run(capsys, "simulate", P1F1B, *args)
    assert rc == 2 and msg in err and "Traceback" not in err
