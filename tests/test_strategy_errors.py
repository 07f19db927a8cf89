"""Malformed and infeasible strategy files give one clear ExecsimError, never a raw exception.

Corpus: ``tests/data/bad_strategies/*.yaml``. Each case starts with header comments::

    # expect: <regex the error message must contain (re.search)>
    # field: <text the message must contain: the field, key or file at fault>
    # xfail: <reason>            (optional: a known library bug, xfail(strict=True))

Files next to the cases without an ``# expect:`` first line are helpers they reference (CSV
schedules, ``*.yml`` topology files, Hugging Face ``*.json`` configs).

The command-line corpus (every input class, output paths, limits, work bounds, inputs unchanged) is
the data table ``tests/error_corpus.py``, run by ``tests/test_error_corpus.py``.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from strategies.errors import ExecsimError
from strategies.strategy_file import load_strategy
from taskgraph.plan import resolve

DATA = Path(__file__).parent / "data" / "bad_strategies"
REPO = Path(__file__).resolve().parent.parent

MAX_LINES = 8        # a "short message": a few lines at most (e.g. a deadlock lists blocked ranks)
MAX_CHARS = 1200


def _header(path: Path) -> dict:
    head = {}
    for line in path.read_text().splitlines():
        m = re.match(r"#\s*(expect|field|xfail):\s?(.*)$", line)
        if not m:
            break
        head[m.group(1)] = m.group(2)
    return head


def _corpus() -> list[Path]:
    return sorted(p for p in DATA.glob("*.yaml") if p.read_text().startswith("# expect:"))


CASES = _corpus()


def _params():
    out = []
    for p in CASES:
        h = _header(p)
        marks = [pytest.mark.xfail(strict=True, reason=h["xfail"])] if "xfail" in h else []
        out.append(pytest.param(p, id=p.stem, marks=marks))
    return out


def _error(path: Path) -> ExecsimError:
    """Load and resolve ``path``; return the ExecsimError it raises (fail on anything else)."""
    try:
        resolve(load_strategy(path))
    except ExecsimError as exc:
        return exc
    except Exception as exc:  # noqa: BLE001 -- a raw Python exception is a bug: show it clearly
        pytest.fail(f"{path.name}: raw {type(exc).__name__} instead of an ExecsimError: {exc}")
    pytest.fail(f"{path.name}: no error raised (expected: {_header(path)['expect']})")


def test_corpus_is_large_and_well_formed():
    assert len(CASES) >= 35
    for p in CASES:
        h = _header(p)
        assert h.get("expect") and h.get("field"), f"{p.name}: needs '# expect:' and '# field:' header lines"
        re.compile(h["expect"])
    # every non-case file in the directory is referenced by some case
    texts = "\n".join(p.read_text() for p in CASES)
    helpers = [p for p in DATA.iterdir() if p.is_file() and p not in CASES]
    for h in helpers:
        assert h.name in texts, f"{h.name} is neither a case (no '# expect:' line) nor referenced by one"


@pytest.mark.parametrize("path", _params())
def test_bad_strategy_error(path: Path):
    h = _header(path)
    exc = _error(path)
    msg = str(exc)
    assert re.search(h["expect"], msg), f"{path.name}: message {msg!r} does not match {h['expect']!r}"
    assert h["field"] in msg, f"{path.name}: message {msg!r} does not mention {h['field']!r}"
    assert "Traceback" not in msg and 'File "' not in msg, f"{path.name}: traceback text in {msg!r}"
    assert len(msg.splitlines()) <= MAX_LINES and len(msg) <= MAX_CHARS, f"{path.name}: message too long: {msg!r}"
    assert msg.strip() == msg and msg, f"{path.name}: empty or padded message {msg!r}"


def _cli(*args: str) -> subprocess.CompletedProcess:
    """Run ``execsim ARGS`` in-process from the repository root (``simulator.cli.main.main``, fast)."""
    import contextlib
    import io

    from simulator.cli.main import main
    out, err = io.StringIO(), io.StringIO()
    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(list(args))
    finally:
        os.chdir(cwd)
    return subprocess.CompletedProcess(args, rc, out.getvalue(), err.getvalue())


def _cli_subprocess(*args: str) -> subprocess.CompletedProcess:
    """Run ``execsim ARGS`` as a process (the installed console script; ``python -m simulator.cli.main`` if absent)."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    exe = shutil.which("execsim")
    cmd = [exe] if exe else [sys.executable, "-m", "simulator.cli.main"]
    return subprocess.run([*cmd, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


def test_cli_process_exit_status_and_stderr():
    """Once as a real process: exit status 2, one stderr line, nothing on stdout."""
    proc = _cli_subprocess("simulate", str((DATA / "unknown_top_key.yaml").relative_to(REPO)))
    _check_cli(proc, _header(DATA / "unknown_top_key.yaml")["expect"])
    assert len(proc.stderr.strip().splitlines()) == 1


CLI_CASES = ["unknown_top_key", "tp_string", "malformed_yaml", "tp_exceeds_kv_heads", "custom_csv_mismatch",
             "cluster_yaml_unknown_key", "fp8_on_a100", "world_size_mismatch_dp"]


def _check_cli(proc: subprocess.CompletedProcess, expect: str | None = None) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert proc.stderr.startswith("execsim: error:"), proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout == ""
    if expect:
        assert re.search(expect, proc.stderr), (expect, proc.stderr)


@pytest.mark.parametrize("name", CLI_CASES)
def test_cli_bad_strategy(name: str):
    path = DATA / f"{name}.yaml"
    _check_cli(_cli("simulate", str(path.relative_to(REPO))), _header(path)["expect"])


def test_cli_bad_strategy_json_flag():
    """--json does not change error reporting: still one stderr line, exit code 2."""
    proc = _cli("simulate", "--json", str((DATA / "zero5.yaml").relative_to(REPO)))
    _check_cli(proc, r"parallel\.zero = 5")
    assert len(proc.stderr.strip().splitlines()) == 1


def test_cli_set_override_error():
    """A --set override that makes a valid example infeasible is reported like a file error."""
    proc = _cli("simulate", "strategies/examples/llama3-8b-8-h100.yaml", "--set", "parallel.tp=3")
    _check_cli(proc, r"parallel\.tp = 3 must divide model\.heads = 32")


def test_cli_set_unknown_key():
    proc = _cli("simulate", "strategies/examples/llama3-8b-8-h100.yaml", "--set", "parallel.tpp=2")
    _check_cli(proc, r"unknown key 'parallel\.tpp' \(did you mean 'tp'\?\)")


def test_cli_missing_file():
    proc = _cli("simulate", "tests/data/bad_strategies/does-not-exist.yaml")
    _check_cli(proc, r"does not exist")


def test_cli_model_directory_no_traceback():
    _check_cli(_cli("simulate", str((DATA / "model_is_directory.yaml").relative_to(REPO))))


def test_unknown_key_in_a_long_section_names_the_nearest_keys():
    # a section of more than MAX_LISTED_KEYS keys (options) lists the nearest half of that many, so the
    # one error line stays short; a short section lists all its keys
    from strategies.config import MAX_LISTED_KEYS, check_keys
    from strategies.errors import ConfigError
    keys = [f"key_{i:02d}" for i in range(MAX_LISTED_KEYS + 5)] + ["moe_shared_expert_overlap"]
    with pytest.raises(ConfigError) as e:
        check_keys({"moe_shared_expert_overlp": 1}, keys, "options")
    msg = str(e.value)
    assert "did you mean 'moe_shared_expert_overlap'?" in msg
    assert msg.endswith(f"(the nearest of {len(keys)}; docs/strategy-file.md lists all)")
    assert msg.split("valid keys in options: ")[1].startswith("moe_shared_expert_overlap, ")
    assert msg.count("key_") == MAX_LISTED_KEYS // 2 - 1
    with pytest.raises(ConfigError, match=r"valid keys in s: a, b, c$"):
        check_keys({"d": 1}, ["a", "b", "c"], "s")
