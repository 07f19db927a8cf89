"""Goodput-file values at the edges of the float range (issue 42): extreme rates, size exponents,
Weibull shapes and throughputs are one clear error before any closed form or replay (no overflow in
``math.exp``, ``(gpus / ref) ** exponent`` or ``Gamma(1 + 1/shape)``); the property puts a value of
every YAML type in every goodput field."""
from __future__ import annotations

import contextlib
import io
import math
import os

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.cli.main import main
from simulator.goodput.closed_forms import daly_goodput, weibull_cv2

BASE = {"model": {"name": "tiny", "layers": 2, "hidden": 64, "heads": 4, "vocab": 128},
        "cluster": {"preset": "dgx-h100", "nodes": 2}, "parallel": {"tp": 2, "pp": 2},
        "training": {"micro_batch": 1, "global_batch": 8, "seq_len": 128},
        "goodput": {"days": 1, "seeds": 2}}


def _run(root, doc, *extra):
    (root / "g.yaml").write_text(yaml.safe_dump(doc))
    out, err = io.StringIO(), io.StringIO()
    old = os.getcwd()
    os.chdir(root)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(["goodput", "g.yaml", "--no-sweep", *extra])
    finally:
        os.chdir(old)
    return rc, out.getvalue(), err.getvalue()


def _doc(**goodput):
    d = yaml.safe_load(yaml.safe_dump(BASE))
    d["goodput"].update(goodput)
    return d


@pytest.mark.parametrize("goodput,words", [
    ({"failures": {"gpu": {"shape": 0.01}}}, "goodput.failures.gpu.shape = 0.01 is under 0.1"),
    ({"failures": {"gpu": {"shape": 1e-300}}}, "goodput.failures.gpu.shape = 1e-300"),
    ({"failures": {"gpu": {"rate_per_device_hour": 1e300}}}, "goodput.failures.gpu: 1.6e+301 failures per hour"),
    ({"failures": {"j": {"per": "job", "rate_per_hour": 0.01, "ref_gpus": 2, "size_exponent": 1e6}}},
     "goodput.failures.j: inf failures per hour"),
    ({"failures": {"j": {"per": "job", "rate_per_hour": 1e308, "ref_gpus": 2}}}, "goodput.failures.j: inf"),
    ({"domains": {"r": {"nodes": 1, "rate_per_domain_hour": 1, "shape": 0.001}}}, "goodput.domains.r.shape = 0.001"),
    ({"checkpoint": {"storage_gb_per_s": 1e-320}}, "goodput.checkpoint.storage_gb_per_s: a"),
])
def test_extreme_goodput_values_are_one_error(tmp_path, goodput, words):
    rc, _, err = _run(tmp_path, _doc(**goodput))
    assert rc == 2 and err.count("\n") == 1 and err.startswith("execsim: error: ") and words in err, err


def test_closed_forms_do_not_overflow():
    assert daly_goodput(600.0, 10.0, 1e300, 3600.0) == 0.0          # exp(R/M) past the float range
    assert daly_goodput(600.0, 1e300, 60.0, 1.0) == 0.0
    assert 0.0 < daly_goodput(600.0, 10.0, 60.0, 3600.0) < 1.0
    assert weibull_cv2(1.0) == pytest.approx(1.0) and weibull_cv2(1e-300) == math.inf


VALUES = [None, True, 0, -1, 1, 0.5, 1e308, -1e308, 1e-320, float("nan"), float("inf"), "", "x", "young", [], [1],
          {}, {"a": 1}, 2 ** 70]
FIELDS = [("goodput", k) for k in ("days", "seeds", "restart_s", "repair_hours", "spare_nodes", "fleet",
                                   "cost_per_gpu_hour", "train_tokens")] + \
         [("failures.gpu", k) for k in ("rate_per_device_hour", "shape", "detection_s", "per", "needs_repair")] + \
         [("failures.j", k) for k in ("rate_per_hour", "ref_gpus", "size_exponent", "shape")] + \
         [("checkpoint", k) for k in ("interval_s", "storage_gb_per_s", "async", "slowdown", "failure_probability")] + \
         [("domains.r", k) for k in ("nodes", "rate_per_domain_hour", "shape")] + \
         [("lemons", k) for k in ("fraction", "rate_per_node_hour", "drain_after")] + \
         [("slow_nodes", k) for k in ("rate_per_node_hour", "slowdown")] + [("goodput", None)]


@settings(max_examples=40, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_any_value_in_any_goodput_field(tmp_path_factory, data):
    root = tmp_path_factory.mktemp("gp")
    doc = _doc(failures={"j": {"per": "job", "rate_per_hour": 0.01, "ref_gpus": 2}},
               domains={"r": {"nodes": 1, "rate_per_domain_hour": 0.001}})
    for _ in range(data.draw(st.integers(1, 2))):
        sec, key = data.draw(st.sampled_from(FIELDS))
        value = data.draw(st.sampled_from(VALUES))
        if key is None:
            doc["goodput"] = value
            break
        node = doc["goodput"]
        for part in ([] if sec == "goodput" else sec.split(".")):
            node = node.setdefault(part, {}) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node[key] = value
    rc, _out, err = _run(root, doc)
    assert rc in (0, 2), err
    if rc == 2:
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("execsim: error: ") and len(lines[0]) <= 600, err
