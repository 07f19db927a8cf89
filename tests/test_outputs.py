"""simulator/outputs/files.py: checks before the run, atomic writes, one-line OS errors."""
from __future__ import annotations

import os

import pytest

from simulator.outputs.files import OutputError, check_output, check_outputs, write_output


def test_failed_writer_leaves_old_file_and_no_temp(tmp_path):
    p = tmp_path / "t.json"
    p.write_text("old\n")

    def half(tmp):
        with open(tmp, "w") as fh:
            fh.write("half")
        raise RuntimeError("simulated crash mid-write")

    with pytest.raises(RuntimeError):
        write_output(str(p), half, "--trace")
    assert p.read_text() == "old\n"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["t.json"]


def test_write_replaces_and_keeps_mode(tmp_path):
    p = tmp_path / "t.json"
    p.write_text("old\n")
    os.chmod(p, 0o640)
    write_output(str(p), b"new\n", "--trace")
    assert p.read_bytes() == b"new\n" and (p.stat().st_mode & 0o777) == 0o640
    q = tmp_path / "fresh.csv"
    write_output(str(q), "a,b\n", "-o")
    assert q.read_text() == "a,b\n" and (q.stat().st_mode & 0o777) == 0o666 & ~_umask()


def _umask():
    old = os.umask(0o022)
    os.umask(old)
    return old


def test_os_error_is_one_line(tmp_path):
    with pytest.raises(OutputError, match=r"^cannot write --trace '/dev/full' \(No space left on device\)"):
        write_output("/dev/full", "x" * 100, "--trace")
    write_output("/dev/null", "discarded", "--trace")  # devices are written in place, not replaced
    assert os.path.exists("/dev/null") and not os.path.isfile("/dev/null")


def test_checks(tmp_path):
    inp = tmp_path / "in.yaml"
    inp.write_text("a: 1\n")
    with pytest.raises(OutputError, match="is an input file"):
        check_output(str(inp), "--trace", inputs=[str(inp)])
    with pytest.raises(OutputError, match="pass --mkdir"):
        check_output(str(tmp_path / "a" / "b.json"), "--trace")
    out = check_output(str(tmp_path / "a" / "b.json"), "--trace", mkdir=True)
    assert (tmp_path / "a").is_dir() and out.endswith("b.json")
    with pytest.raises(OutputError, match="--plot and --trace both name"):
        check_outputs({"--trace": str(tmp_path / "x"), "--plot": str(tmp_path / "." / "x")})
    assert check_outputs({"--trace": None}) == {}
