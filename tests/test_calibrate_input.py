"""``execsim calibrate``'s inputs (issue 42): the traces it reads are inputs no output may replace,
odd field types and values in a Kineto trace are one clear error, the folder is bounded and never
blocks, ranks the strategy does not have are refused; ``--trace-dir`` leaves only this run's ranks;
standard output that cannot be written is one line. The Hypothesis property puts a value of every
JSON type in every field a trace reader uses."""
from __future__ import annotations

import contextlib
import io
import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.cli.main import main
from tests.test_profiling import TINY

ADDMM = {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "ts": 0, "dur": 10, "tid": 3,
         "args": {"Input Dims": [[192], [64, 64], [64, 192]]}}
KERNEL = {"ph": "X", "cat": "kernel", "name": "sm90_gemm", "ts": 2, "dur": 5, "tid": 7,
          "args": {"stream": 7, "correlation": 1, "External id": 4}}
LAUNCH = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 1, "dur": 1, "tid": 3,
          "args": {"correlation": 1, "External id": 4}}


def _run(argv, cwd):
    out, err = io.StringIO(), io.StringIO()
    old = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(argv)
    finally:
        os.chdir(old)
    return rc, out.getvalue(), err.getvalue()


def _setup(root: Path, events=None, doc=None, name="rank0.json") -> Path:
    (root / "s.yaml").write_text(TINY)
    (root / "tr").mkdir(exist_ok=True)
    body = doc if doc is not None else {"distributedInfo": {"rank": 0}, "traceEvents": events or [ADDMM]}
    (root / "tr" / name).write_text(json.dumps(body))
    return root


def _one_error(rc, err, *words):
    lines = err.splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("execsim: error: "), err
    assert len(lines[0]) <= 600 and "warning" not in lines[0]
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


# ------------------------------------------------------------------ harm: a trace is an input
def test_output_over_a_trace_it_reads_is_refused(tmp_path):
    _setup(tmp_path)
    before = (tmp_path / "tr" / "rank0.json").read_bytes()
    rc, _, err = _run(["calibrate", "s.yaml", "tr", "-o", "tr/rank0.json", "--no-simulate"], tmp_path)
    _one_error(rc, err, "--output 'tr/rank0.json' is an input file of this run")
    assert (tmp_path / "tr" / "rank0.json").read_bytes() == before


def test_output_through_a_link_to_a_trace_is_refused(tmp_path):
    _setup(tmp_path)
    os.symlink("tr/rank0.json", tmp_path / "out.csv")
    rc, _, err = _run(["calibrate", "s.yaml", "tr", "-o", "out.csv", "--no-simulate"], tmp_path)
    _one_error(rc, err, "is an input file of this run")


def test_a_file_read_after_the_check_is_still_never_replaced(tmp_path):
    # the general rule: write_output refuses any file this process read, even one the command did
    # not list as an input before writing (strategies.documents.files_read)
    from simulator.outputs.files import OutputError, write_output
    from strategies.documents import forget_files_read, load_document
    p = tmp_path / "m.yaml"
    p.write_text("a: 1\n")
    forget_files_read()
    load_document(p)
    with pytest.raises(OutputError, match="is an input file of this run"):
        write_output(str(p), "b: 2\n", "--output")
    assert p.read_text() == "a: 1\n"
    forget_files_read()
    write_output(str(p), "b: 2\n", "--output")
    assert p.read_text() == "b: 2\n"


# ------------------------------------------------------------------ odd types and values
@pytest.mark.parametrize("patch,words", [
    ({"tid": [1]}, ["tid = [1]", "integer or text"]),
    ({"dur": -5}, ["dur = -5", "at least 0"]),
    ({"dur": float("nan")}, ["dur = nan", "finite"]),
    ({"ts": "10"}, ["ts = '10'", "must be a number"]),
    ({"ts": True}, ["ts = True", "must be a number"]),
    ({"args": [1]}, ["args = [1]", "mapping"]),
    ({"args": {"stream": None}}, ["args.stream = None", "integer"]),
    ({"args": {"stream": "7"}}, ["args.stream = '7'", "integer"]),
    ({"args": {"External id": [1]}}, ["args.External id = [1]", "integer"]),
])
def test_odd_event_fields_are_one_error(tmp_path, patch, words):
    _setup(tmp_path, [{**ADDMM, **patch}])
    rc, _out, err = _run(["calibrate", "s.yaml", "tr", "-o", "o.csv", "--no-simulate"], tmp_path)
    _one_error(rc, err, "event 0", *words)
    assert not (tmp_path / "o.csv").exists()


def test_a_bare_event_array_is_a_trace(tmp_path):
    # read as a CPU trace (no kernels); without a ProfilerStep there is no step to reproduce, which
    # calibrate says instead of refusing the file (simulator/profiling/calibrate_cpu.py)
    _setup(tmp_path, doc=[ADDMM, {**ADDMM, "ts": 20}])
    rc, out, err = _run(["calibrate", "s.yaml", "tr", "-o", "o.csv", "--no-simulate"], tmp_path)
    assert rc == 0, err
    assert "0.020 of 0.020 ms" in out and "profile written to o.csv" in out
    assert "no ProfilerStep kept" in out + err


@pytest.mark.parametrize("rank,words", [(10 ** 23, ["distributedInfo.rank = 100000000000000000000000"]),
                                        (-1, ["distributedInfo.rank = -1"]), (True, ["distributedInfo.rank = True"]),
                                        (1, ["is rank 1", "has ranks 0-0"])])
def test_ranks_the_strategy_does_not_have_are_refused(tmp_path, rank, words):
    _setup(tmp_path, doc={"distributedInfo": {"rank": rank}, "traceEvents": [ADDMM]})
    rc, _, err = _run(["calibrate", "s.yaml", "tr", "-o", "o.csv", "--no-simulate"], tmp_path)
    _one_error(rc, err, *words)


def test_a_huge_rank_in_a_file_name_is_refused(tmp_path):
    _setup(tmp_path, doc={"traceEvents": [ADDMM]}, name="rank" + "9" * 23 + ".json")
    rc, _, err = _run(["calibrate", "s.yaml", "tr", "-o", "o.csv", "--no-simulate"], tmp_path)
    _one_error(rc, err, "the rank in the file name")


def test_fifo_in_the_trace_folder_does_not_block(tmp_path):
    _setup(tmp_path)
    os.mkfifo(tmp_path / "tr" / "rank1.json")
    rc, out, err = _run(["calibrate", "s.yaml", "tr", "-o", "o.csv", "--no-simulate"], tmp_path)
    assert rc == 0 and "1 rank trace(s)" in out, err


def test_unreadable_trace_folder_is_one_error(tmp_path, monkeypatch):
    _setup(tmp_path)

    def denied(path):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(os, "scandir", denied)   # tests run as root: a mode of 000 would not stop it
    rc, _, err = _run(["calibrate", "s.yaml", "tr", "-o", "o.csv", "--no-simulate"], tmp_path)
    _one_error(rc, err, "TRACE_DIR 'tr' cannot be read (Permission denied)")


def test_trace_folder_bounds_are_checked_before_reading(tmp_path, monkeypatch):
    import simulator.profiling.trace_checks as tc
    _setup(tmp_path)
    for r in range(1, 4):
        (tmp_path / "tr" / f"rank{r}.json").write_text("not json")
    monkeypatch.setattr(tc, "MAX_TRACE_FILES", 3)
    rc, _, err = _run(["calibrate", "s.yaml", "tr", "-o", "o.csv", "--no-simulate"], tmp_path)
    _one_error(rc, err, "over 3 traces")   # not "is not valid JSON": refused before any file is read
    monkeypatch.setattr(tc, "MAX_TRACE_FILES", 10)
    monkeypatch.setattr(tc, "MAX_TRACE_TOTAL_BYTES", 100)
    rc, _, err = _run(["calibrate", "s.yaml", "tr", "-o", "o.csv", "--no-simulate"], tmp_path)
    _one_error(rc, err, "over the limit of 100 in all")


# ------------------------------------------------------------------ --trace-dir: only this run's ranks
def test_trace_dir_removes_stale_ranks_of_an_earlier_run(tmp_path):
    (tmp_path / "p.yaml").write_text("pipeline: {schedule: 1f1b, pp: 2, microbatches: 4, forward_ms: 1.0, "
                                     "backward_ms: 2.0, p2p_ms: 0.1}\n")
    d = tmp_path / "d"
    d.mkdir()
    for name in ("rank_0.json", "rank_7.json", "notes.json"):
        (d / name).write_text("old\n")
    os.mkfifo(d / "rank_1.json")     # a FIFO left there: replaced, never waited on
    rc, _out, err = _run(["simulate", "p.yaml", "--trace-dir", "d"], tmp_path)
    assert rc == 0, err
    assert sorted(p.name for p in d.iterdir()) == ["notes.json", "rank_0.json", "rank_1.json"]
    assert (d / "notes.json").read_text() == "old\n" and (d / "rank_1.json").is_file()
    assert json.loads((d / "rank_0.json").read_text())["distributedInfo"]["rank"] == 0


def test_trace_dir_never_removes_an_input(tmp_path):
    (tmp_path / "rank_5.json").write_text(json.dumps({"pipeline": {
        "schedule": "1f1b", "pp": 2, "microbatches": 4, "forward_ms": 1.0, "backward_ms": 2.0, "p2p_ms": 0.1}}))
    rc, _, err = _run(["simulate", "rank_5.json", "--trace-dir", "."], tmp_path)
    _one_error(rc, err, "rank_5.json' is an input file of this run")
    assert (tmp_path / "rank_5.json").exists() and not (tmp_path / "rank_0.json").exists()


# ------------------------------------------------------------------ stdout that cannot be written
def test_stdout_that_cannot_be_written_is_one_line():
    import subprocess
    import sys
    root = Path(__file__).resolve().parent.parent
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "simulator.cli.main", "simulate",
                            "strategies/examples/pipeline-1f1b.yaml"], cwd=root, stdout=full,
                           stderr=subprocess.PIPE, text=True)
    assert r.returncode == 2
    assert r.stderr.splitlines() == [("execsim: error: cannot write to standard output (No space left on device): "
                                     "redirect it to a file on a disk with free space")]


# ------------------------------------------------------------------ property: any JSON value anywhere
VALUES = [None, True, False, 0, -1, 1, 2 ** 70, -(2 ** 70), 1.5, -1.5, float("nan"), float("inf"), float("-inf"),
          "", "x", "7", [], [1], [[1]], {}, {"a": 1}, {"rank": 0}]
FIELDS = [("event", "ph"), ("event", "ts"), ("event", "dur"), ("event", "tid"), ("event", "name"), ("event", "cat"),
          ("event", "args"), ("args", "stream"), ("args", "correlation"), ("args", "External id"),
          ("args", "Input Dims"), ("doc", "traceEvents"), ("doc", "distributedInfo"), ("info", "rank"),
          ("doc", None)]


@settings(max_examples=120, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), gpu=st.booleans())
def test_any_json_value_in_any_trace_field(tmp_path_factory, data, gpu):
    root = tmp_path_factory.mktemp("cal")
    events = [json.loads(json.dumps(e)) for e in ([LAUNCH, KERNEL] if gpu else [ADDMM, {**ADDMM, "ts": 20}])]
    doc = {"distributedInfo": {"rank": 0}, "traceEvents": events}
    for _ in range(data.draw(st.integers(1, 3))):
        where, key = data.draw(st.sampled_from(FIELDS))
        value = data.draw(st.sampled_from(VALUES))
        ev = events[data.draw(st.integers(0, len(events) - 1))]
        if where == "event":
            ev[key] = value
        elif where == "args" and isinstance(ev.get("args"), dict):
            ev["args"][key] = value
        elif where == "info" and isinstance(doc, dict) and isinstance(doc.get("distributedInfo"), dict):
            doc["distributedInfo"][key] = value
        elif where == "doc" and key is None:
            doc = value
        elif where == "doc" and isinstance(doc, dict):
            doc[key] = value
    (root / "s.yaml").write_text(TINY)
    (root / "tr").mkdir()
    (root / "tr" / "rank0.json").write_text(json.dumps(doc))
    before = (root / "tr" / "rank0.json").read_bytes()
    rc, out, err = _run(["calibrate", "s.yaml", "tr", "-o", "o.csv", "--no-simulate", "--json"], root)
    assert rc in (0, 2), err
    if rc == 2:
        line = _one_error(rc, err)
        assert "trace" in line or "TRACE_DIR" in line, line
    else:
        json.loads(out, parse_constant=lambda c: (_ for _ in ()).throw(AssertionError(c)))
        assert (root / "o.csv").read_text().startswith("gpu,dtype,op,pass,shape,time_us\n")
    assert (root / "tr" / "rank0.json").read_bytes() == before
