"""Property: whatever value lands in whatever field, the CLI answers with a result or one error line.

Hypothesis (derandomized, a few hundred examples) puts hostile values (negative, zero, huge,
non-finite, wrong types, paths of the other input files) into random fields of a small strategy
file and pipeline file and runs ``execsim simulate`` in-process: the exit status is 0 or 2, never
the internal-error 3; an error is exactly one ``execsim: error:`` line; ``--json`` output is strict
JSON; and the input files are unchanged.
"""
from __future__ import annotations

import contextlib
import io
import json

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.cli.main import main
from tests.error_corpus import BASE_FILES

HOSTILE = [-1, 0, 1, 2, 3, 1.5, 2.0, 1e308, -1e308, float("nan"), float("inf"), "x", "", [], {}, None, True,
           2 ** 70, [1, 2], {"a": 1}, "1f1b", "custom", "ok.csv", "adir", "m.yaml", "hf.json", "c.yaml", 10 ** 6]
STRATEGY = {"model": {"name": "m", "layers": 2, "hidden": 64, "heads": 4, "vocab": 128, "kv_heads": 2},
            "cluster": {"preset": "dgx-h100", "nodes": 1},
            "parallel": {"tp": 2, "pp": 2, "vpp": 1, "zero": 1, "sp": True},
            "training": {"micro_batch": 1, "global_batch": 8, "seq_len": 128, "recompute": "selective"},
            "options": {"fidelity": "operator", "grad_bucket_mb": 1, "memory_reserve_gb": 1}}
PIPELINE = {"pipeline": {"schedule": "1f1b", "pp": 2, "vpp": 1, "microbatches": 4, "forward_ms": 1.0,
                         "backward_ms": 2.0, "p2p_ms": 0.1, "activation_mb": 10}}


def _fields(d):
    return [(s, k) for s, sec in d.items() if isinstance(sec, dict) for k in sec] + [(s, None) for s in d]


@settings(max_examples=150, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@given(base=st.sampled_from([STRATEGY, PIPELINE]), data=st.data(), json_flag=st.booleans())
def test_any_value_in_any_field(tmp_path_factory, base, data, json_flag):
    root = tmp_path_factory.mktemp("fuzz")
    for name, text in BASE_FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    doc = json.loads(json.dumps(base))
    for _ in range(data.draw(st.integers(1, 3))):
        sec, key = data.draw(st.sampled_from(_fields(doc)))
        value = data.draw(st.sampled_from(HOSTILE))
        if key is None:
            doc[sec] = value
        elif isinstance(doc.get(sec), dict):
            doc[sec][key] = value
    (root / "f.yaml").write_text(yaml.safe_dump(doc))
    before = {p.name: p.read_bytes() for p in root.iterdir() if p.is_file()}
    out, err = io.StringIO(), io.StringIO()
    import os
    cwd = os.getcwd()
    os.chdir(root)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(["simulate", "f.yaml"] + (["--json"] if json_flag else []))
    finally:
        os.chdir(cwd)
    assert rc in (0, 2), err.getvalue()
    if rc == 2:
        lines = err.getvalue().splitlines()
        assert len(lines) == 1 and lines[0].startswith("execsim: error: "), err.getvalue()[:500]
    elif json_flag:
        json.loads(out.getvalue(), parse_constant=lambda c: (_ for _ in ()).throw(AssertionError(c)))
    assert {p.name: p.read_bytes() for p in root.iterdir() if p.is_file()} == before
