"""Every bad input gets one clear error, before the work, and no input file is harmed.

Runs each case of ``tests/error_corpus.py`` in-process (``simulator.cli.main.main``) in a fresh folder
and checks: the exit status; exactly one stderr line, ``execsim: error: ...``, matching the case's
regex and naming its field; no traceback; nothing on stdout; a work bound (tasks built and schedule
actions generated, counted by wrapping the task graph and the schedule generator: an error must come
from the size estimate, not after building); and every file in the folder unchanged (bytes and
mtime), with no file left behind except those a valid control creates.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import stat
from pathlib import Path

import pytest

import strategies.schedules as schedules_mod
import taskgraph.graph as graph_mod
from simulator.cli.main import main
from tests.error_corpus import BASE_FILES, CASES, Case


def _argv(case: Case) -> list[str]:
    return list(case.argv) if isinstance(case.argv, (list, tuple)) else shlex.split(case.argv)


def _write(root: Path, files: dict) -> None:
    for name, data in files.items():
        p = root / name
        if data is None:
            if p.exists():
                p.unlink()
            continue
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, bytes):
            p.write_bytes(data)
        else:
            p.write_bytes(data.encode("utf-8"))


def _snapshot(root: Path) -> dict:
    out = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        key = str(p.relative_to(root))
        out[key] = ("dir",) if stat.S_ISDIR(st.st_mode) else (p.read_bytes(), st.st_mtime_ns, stat.S_IMODE(st.st_mode))
    return out


@pytest.fixture
def work_counter(monkeypatch):
    """Counts tasks in every TaskGraph built and actions in every schedule generated."""
    seen = {"tasks": 0, "actions": 0}
    init = graph_mod.TaskGraph.__init__

    def counting_init(self, *a, **kw):
        init(self, *a, **kw)
        seen["tasks"] += len(self.duration)

    def counting(fn):
        def generate(pp, m, vpp):  # called only when the registry's cache misses
            s = fn(pp, m, vpp)
            seen["actions"] += sum(len(o) for o in s.orders)
            return s
        return generate

    monkeypatch.setattr(graph_mod.TaskGraph, "__init__", counting_init)
    for name, fn in list(schedules_mod.SCHEDULES.items()):
        monkeypatch.setitem(schedules_mod.SCHEDULES, name, counting(fn))
    schedules_mod.clear_schedule_cache()
    yield seen
    schedules_mod.clear_schedule_cache()  # its entries are keyed by the counting wrappers


def test_corpus_size_and_ids():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)), "duplicate case ids"
    assert len([c for c in CASES if c.code != 0]) >= 300
    for c in CASES:
        if c.code:
            assert c.expect and c.field, c.id
            re.compile(c.expect)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_error_case(case: Case, tmp_path, monkeypatch, capsys, work_counter):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("EXECSIM_DEBUG", raising=False)
    _write(tmp_path, BASE_FILES)
    _write(tmp_path, case.files)
    for name in case.readonly:
        os.chmod(tmp_path / name, 0o444)
    before = _snapshot(tmp_path)
    try:
        rc = main(_argv(case))
        after = _snapshot(tmp_path)
    finally:
        for name in case.readonly:
            os.chmod(tmp_path / name, 0o644)
    out, err = capsys.readouterr()

    assert rc == case.code, f"exit {rc}, expected {case.code}; stderr: {err[:500]!r}"
    assert "Traceback" not in err and 'File "' not in err, err[:2000]
    if case.code:
        lines = err.splitlines()
        assert len(lines) == 1, f"expected one error line, got {len(lines)}: {err[:800]!r}"
        msg = lines[0]
        assert msg.startswith("execsim: error: "), msg[:300]
        assert len(msg) <= 700, f"message too long ({len(msg)} chars): {msg[:300]!r}..."
        assert re.search(case.expect, msg), f"{msg!r} does not match {case.expect!r}"
        assert case.field in msg, f"{msg!r} does not name {case.field!r}"
        assert out == "", out[:300]
    else:
        assert err == "", err[:500]
        if "--json" in _argv(case):  # strict JSON: no NaN or Infinity
            json.loads(out, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c} in --json output"))
    assert work_counter["tasks"] <= case.bound, f"built {work_counter['tasks']} tasks (bound {case.bound})"
    assert work_counter["actions"] <= case.bound, f"generated {work_counter['actions']} actions (bound {case.bound})"
    created = {k for k in after if k not in before and after[k] != ("dir",)}
    assert created == set(case.creates) - set(before), f"files created: {sorted(created)}"
    for k, v in before.items():
        if k in case.creates:
            continue
        assert after.get(k) == v, f"input file {k} was changed or removed"
