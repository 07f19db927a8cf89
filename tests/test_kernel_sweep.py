"""benchmarks/kernel_sweep.py without a GPU: the shapes it times, its CSV, and its argument checks
(made before torch is imported). The measurements themselves run on a GPU machine."""
from __future__ import annotations

import math

import pytest

from benchmarks import kernel_sweep as K


def test_the_three_passes_of_a_layer_do_the_same_flops():
    shapes = K.gemm_shapes(quick=False)
    layer = [s for s in shapes if s[0] == "layer"]
    by_op: dict = {}
    for _, label, pass_, m, n, k in layer:
        by_op.setdefault((label, m if pass_ != "bwd_weight" else k), {})[pass_] = (m, n, k)
    assert by_op
    for (label, tokens), passes in by_op.items():
        assert set(passes) == {"fwd", "bwd_input", "bwd_weight"}, label
        flops = {p: math.prod(v) for p, v in passes.items()}
        assert len(set(flops.values())) == 1, (label, passes)
        m, n, k = passes["fwd"]
        # input gradient (m, k, n); weight gradient (n, k, m): reduction over the tokens
        assert passes["bwd_input"] == (m, k, n) and passes["bwd_weight"] == (n, k, m)


def test_grid_and_scan_shapes():
    shapes = K.gemm_shapes(quick=False)
    scan = [s for s in shapes if s[0] == "wave_scan"]
    assert [s[4] for s in scan] == list(K.WAVE_SCAN_N) and all(s[3] == s[5] == 4096 for s in scan)
    assert len(K.GRID_M) * len(K.GRID_N) * len(K.GRID_K) == 648


def test_csv_quotes_commas_and_unions_columns():
    text = K.rows_to_csv([{"a": 1, "b": "x,y"}, {"a": 2.5, "c": 3}])
    assert text == 'a,b,c\n1,"x,y",\n2.5,,3\n'
    assert K.rows_to_csv([]) == ""


@pytest.mark.parametrize("argv, msg", [
    (["--out", "x", "--parts", "gemm,nope"], "--parts: nope not known"),
    (["--out", "x", "--budget-s", "0"], "--budget-s = 0.0 must be in"),
])
def test_bad_arguments_are_refused_before_any_work(argv, msg, capsys):
    with pytest.raises(SystemExit) as e:
        K.main(argv)
    assert e.value.code == 2 and msg in capsys.readouterr().err
