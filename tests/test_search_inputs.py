"""search's inputs and JSON (issue 42): any GPU count simulate takes (a partial GB200 NVL72 rack),
strict JSON (an infinite figure is null), prices and token budgets bounded before the search."""
from __future__ import annotations

import contextlib
import io
import json

import pytest

from simulator.cli.common import print_json
from simulator.cli.main import main
from simulator.search.space import check_gpus, cluster_for, context
from strategies.errors import ConfigError
from strategies.strategy_file import parse_strategy
from taskgraph.plan import resolve, resolve_cluster

GB200 = {"model": {"name": "tiny", "layers": 4, "hidden": 256, "heads": 4, "vocab": 512},
         "cluster": {"preset": "gb200-nvl72", "nodes": 1, "gpus": 64}, "parallel": {"tp": 4, "pp": 2},
         "training": {"micro_batch": 1, "global_batch": 64, "seq_len": 256, "train_tokens": 1e9}}


def test_a_partial_gb200_rack_simulate_accepts_is_searched():
    base = parse_strategy(GB200, ".")
    assert resolve(base).num_gpus == 64                      # simulate's view
    ctx = context(base)
    for n, nodes in ((64, 1), (100, 2), (144, 2), (36, 1)):
        check_gpus(ctx, n)                                   # was: "a partial node must hold a divisor of its 72"
        d = cluster_for(ctx, n)
        assert d["nodes"] == nodes and resolve_cluster(d, ".").num_gpus == n


def test_json_never_prints_infinity():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        print_json({"days_to_train": float("inf"), "cost_usd": float("nan"), "rows": [{"gap": -float("inf")}]})
    assert json.loads(out.getvalue()) == {"days_to_train": None, "cost_usd": None, "rows": [{"gap": None}]}


@pytest.mark.parametrize("flag,value,words", [("--price", "1e300", "at most 10,000"),
                                              ("--train-tokens", "1e300", "over the limit of 1e+18"),
                                              ("--deadline-days", "1e300", "over the limit of 36500")])
def test_extreme_search_values_are_refused_first(tmp_path, flag, value, words):
    import yaml
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(GB200))
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = main(["search", str(tmp_path / "s.yaml"), flag, value])
    assert rc == 2 and err.getvalue().count("\n") == 1 and words in err.getvalue(), err.getvalue()


def test_check_gpus_still_bounds():
    ctx = context(parse_strategy(GB200, "."))
    with pytest.raises(ConfigError, match="must be a positive integer"):
        check_gpus(ctx, 0)
    with pytest.raises(ConfigError, match="over the limit"):
        check_gpus(ctx, 2 ** 21)
