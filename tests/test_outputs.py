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


def test_writer_error_never_names_the_temporary_file(tmp_path):
    from strategies.errors import ConfigError
    p = tmp_path / "t.parquet"

    def bad(tmp):
        raise ConfigError(f"cannot write {tmp}: pyarrow missing")

    with pytest.raises(ConfigError) as exc:
        write_output(str(p), bad, "--timeline")
    assert str(exc.value) == f"cannot write {p}: pyarrow missing" and ".tmp" not in str(exc.value)
    assert list(tmp_path.iterdir()) == []


def test_links_are_replaced_never_written_through(tmp_path):
    """An existing symbolic or hard link at the output path is replaced by the new file; the file it
    pointed to keeps its bytes (--trace-dir's rank_N.json used to be written through both)."""
    outside, twin = tmp_path / "outside.txt", tmp_path / "twin.txt"
    outside.write_text("keep me\n")
    twin.write_text("keep me too\n")
    d = tmp_path / "d"
    d.mkdir()
    (d / "rank_0.json").symlink_to(outside)
    os.link(twin, d / "rank_1.json")
    for name in ("rank_0.json", "rank_1.json"):
        write_output(str(d / name), "{}\n", "--trace-dir", follow_links=False)
        assert not (d / name).is_symlink() and (d / name).read_text() == "{}\n"
    assert outside.read_text() == "keep me\n" and twin.read_text() == "keep me too\n"
    assert twin.stat().st_nlink == 1


def test_trace_dir_refuses_links_to_inputs(tmp_path):
    """A rank_N.json in the --trace-dir folder that is (a link to) an input of the run is refused
    before any work, by name; nothing is written."""
    from simulator.outputs.files import check_output_dir
    inp = tmp_path / "s.yaml"
    inp.write_text("model: x\n")
    d = tmp_path / "d"
    d.mkdir()
    (d / "rank_0.json").symlink_to(inp)
    with pytest.raises(OutputError, match=r"rank_0\.json' is an input file of this run"):
        check_output_dir(str(d), "--trace-dir", inputs=[str(inp)])
    (d / "rank_0.json").unlink()
    os.link(inp, d / "rank_3.json")
    with pytest.raises(OutputError, match=r"rank_3\.json' is an input file of this run"):
        check_output_dir(str(d), "--trace-dir", inputs=[str(inp)])
    assert inp.read_text() == "model: x\n"
    assert check_output_dir(str(tmp_path / "new"), "--trace-dir", inputs=[str(inp)]) == str(tmp_path / "new")


def test_fifo_input_is_refused_not_waited_for(tmp_path):
    """A FIFO as the strategy or model path is refused at once (it used to block for ever). Run in a
    subprocess whose timeout only guards the suite against a hang; the assertion is on the answer."""
    import subprocess
    import sys
    fifo = tmp_path / "f.yaml"
    os.mkfifo(fifo)
    (tmp_path / "s.yaml").write_text("model: f.yaml\ncluster: dgx-h100\ntraining: {global_batch: 8}\n")
    for target in ("f.yaml", "s.yaml"):
        r = subprocess.run([sys.executable, "-m", "simulator.cli.main", "simulate", target], cwd=tmp_path,
                           capture_output=True, text=True, timeout=300,
                           env={**os.environ, "PYTHONPATH": os.getcwd()})
        assert r.returncode == 2 and "is not a regular file (a FIFO" in r.stderr, r.stderr


_KILL_WRITER = r"""
import sys, time
sys.path.insert(0, sys.argv[1])
from simulator.outputs.files import write_output
def slow(tmp):
    with open(tmp, "w") as fh:
        for i in range(400):
            fh.write("new %d\n" % i)
            fh.flush()
            time.sleep(0.0005)
print("ready", flush=True)
write_output(sys.argv[2], slow, "--trace")
"""


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM", "SIGKILL"])
def test_killed_writer_leaves_the_folder_whole(tmp_path, sig):
    """Kill a writer at random points (seeded) and diff the folder: after SIGINT or SIGTERM it holds
    exactly what it held before or the finished new file, and no temporary file; after SIGKILL at most
    one temporary file, named as such (``.t.json.*.tmp.json``), beside the output."""
    import random
    import signal
    import subprocess
    import sys
    import time
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    new = "".join(f"new {i}\n" for i in range(400))
    rng = random.Random(29 + len(sig))
    for trial in range(6):
        d = tmp_path / f"{sig}-{trial}"
        d.mkdir()
        (d / "t.json").write_text("old\n")
        (d / "other.txt").write_text("untouched\n")
        proc = subprocess.Popen([sys.executable, "-c", _KILL_WRITER, repo, str(d / "t.json")],
                                stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline() == "ready\n"
        time.sleep(rng.uniform(0.0, 0.4))  # a random point of the write (or after it)
        proc.send_signal(getattr(signal, sig))
        proc.wait(timeout=300)
        proc.stdout.close()
        names = sorted(p.name for p in d.iterdir())
        temps = [n for n in names if n.startswith(".t.json.") and n.endswith(".tmp.json")]
        assert set(names) - set(temps) == {"t.json", "other.txt"}, names
        assert (d / "other.txt").read_text() == "untouched\n"
        assert (d / "t.json").read_text() in ("old\n", new)
        assert len(temps) <= (1 if sig == "SIGKILL" else 0), names
        if sig == "SIGTERM" and proc.returncode not in (0, -signal.SIGTERM):
            assert proc.returncode == 143
