"""Issue 41: what a new user hits on the first day -- the OOM verdict first, command-line paths
relative to the current folder, suggestions for a mistyped command or GPU, ``compare --schedules`` on
a file with uneven layers per stage. Each test failed before the change it names."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from simulator.cli.main import main
from strategies.errors import ExecsimError

ROOT = Path(__file__).resolve().parent.parent
GPT3 = str(ROOT / "strategies/examples/gpt3-175b-1024-a100.yaml")
DEEPSEEK = str(ROOT / "strategies/examples/deepseek-v3-2048-h800.yaml")


def run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_an_oom_run_says_so_first_and_warns_once_on_stderr(capsys):
    args = ("simulate", GPT3, "--fidelity", "coarse", "--set", "training.micro_batch=16",
            "--set", "training.recompute=none")
    rc, out, err = run(capsys, *args)
    assert rc == 0   # without --check the exit status does not change
    assert out.splitlines()[0].startswith("OOM: ") and "does not fit in memory" in out.splitlines()[0]
    warnings = [line for line in err.splitlines() if line.startswith("execsim: warning:")]
    assert len(warnings) == 1 and "does not fit in memory: peak" in warnings[0]
    rc, out, err = run(capsys, *args, "--check")
    assert rc == 1 and "execsim: warning:" not in err and "check failed" in err


def test_a_run_that_fits_prints_no_oom_line(capsys):
    rc, out, err = run(capsys, "simulate", GPT3, "--fidelity", "coarse")
    assert rc == 0 and not out.startswith("OOM") and "does not fit" not in err


TINY = """model: {name: tiny-gpt, layers: 2, hidden: 64, heads: 2, kv_heads: 2, head_dim: 32, ffn: 256, vocab: 512,
  mlp: gelu, norm: layernorm, position: learned, max_seq: 128, bias: true, tied_embeddings: false, dropout: false}
cluster: {gpu: cpu, nodes: 1, gpus_per_node: 1, nvlink_latency_us: 0, nvlink_efficiency: 1, nic_gbit: 1,
  nic_latency_us: 0, nic_efficiency: 1, host_us_per_kernel: 0, host_us_per_collective: 0, gpu_speed_cv: 0}
parallel: {tp: 1, pp: 1, dp: 1}
schedule: 1f1b
training: {micro_batch: 1, global_batch: 2, seq_len: 64, precision: bf16}
"""


def test_set_profile_resolves_against_the_current_folder(tmp_path, monkeypatch, capsys):
    from simulator.profiling.inventory import profile_items
    from simulator.profiling.profile_csv import ProfileRow, profile_text
    from strategies.strategy_file import load_strategy
    from taskgraph.cost import PASSES
    from taskgraph.plan import resolve
    (tmp_path / "conf").mkdir()
    strat = tmp_path / "conf" / "s.yaml"
    strat.write_text(TINY)
    rows = [ProfileRow(it.name, it.shape, p, 1e-5, 0.0) for it in profile_items(resolve(load_strategy(strat)))
            for p in PASSES]
    (tmp_path / "prof.csv").write_text(profile_text(rows, "cpu", "bf16"))   # beside the user, not the file
    monkeypatch.chdir(tmp_path)
    rc, out, err = run(capsys, "simulate", "conf/s.yaml", "--set", "options.profile=prof.csv")
    assert rc == 0, err
    assert re.search(r"profile: \d+ operator passes measured \(.*prof\.csv\)", out)


def test_a_mistyped_command_gets_a_suggestion(capsys):
    rc, _, err = run(capsys, "simulat", GPT3)
    assert rc == 2 and "did you mean 'simulate'?" in err
    rc, _, err = run(capsys, "plan-recompte", GPT3)
    assert rc == 2 and "did you mean 'plan-recompute'?" in err


def test_the_set_hint_names_a_strategy_field(capsys):
    rc, _, err = run(capsys, "simulate", GPT3, "--set", "pp")
    assert rc == 2 and "--set parallel.pp=8" in err and "pipeline.pp" not in err


def test_an_unknown_gpu_suggests_a_name_from_the_printed_list():
    from topologies.gpus import get_gpu, list_gpus
    with pytest.raises(ExecsimError) as exc:
        get_gpu("A100-80")
    m = re.search(r"did you mean '([^']+)'\?", str(exc.value))
    assert m and m.group(1) in list_gpus() and m.group(1) == "A100-SXM-80GB"


def test_compare_schedules_regroups_uneven_layers_per_stage(capsys):
    """DeepSeek-V3's file gives 16 DualPipe model stages of 3, 4 x 14, 2 layers; 1F1B (vpp 1, 16
    stages) and ZB-V (vpp 2, 32 stages) refused before (61 layers do not split evenly)."""
    rc, out, err = run(capsys, "compare", DEEPSEEK, "--schedules", "1f1b,zb-v", "--fidelity", "coarse")
    assert rc == 0, err
    assert [line.split()[0] for line in out.splitlines()[1:3]] == ["1f1b", "zb-v"]


def test_the_quick_start_trace_is_ignored_by_git():
    lines = (ROOT / ".gitignore").read_text().splitlines()
    assert "trace.json" in lines


def _strategy_examples():
    from simulator.cli.examples import example_kind
    from strategies.strategy_file import example_names, example_path
    return [n for n in example_names() if example_kind(Path(example_path(n + ".yaml")).read_text()) == "strategy"]


@pytest.mark.parametrize("name", _strategy_examples())
def test_plan_recompute_fits_its_budget_on_every_shipped_strategy_example(name):
    """5 of the 12 refused before ('would build about 18,899,200 tasks'): operator fidelity over the
    task limit now falls back to coarse, and a run still too large gets fewer search steps."""
    from simulator.search.recompute import search_budget
    from strategies.strategy_file import example_path, load_strategy
    from taskgraph.plan import resolve
    strategy = load_strategy(example_path(name + ".yaml"))
    fidelity, steps, note = search_budget(strategy, resolve(strategy).model.layers, None, 40)
    assert steps >= 4 and (fidelity in (None, "coarse"))
    assert (fidelity == "coarse") == ("planned at coarse fidelity" in note)


def test_plan_recompute_on_its_own_help_example_falls_back_and_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    rc, out, err = run(capsys, "plan-recompute", "gpt3-175b-1024-a100")
    assert rc == 0, err
    assert "execsim: note: operator fidelity would build about 472,480 tasks" in err
    assert "planned at coarse fidelity" in err and "plan:" in out


def test_examples_lists_every_shipped_example_one_line_each(capsys):
    from strategies.strategy_file import example_names
    rc, out, _ = run(capsys, "examples")
    lines = out.splitlines()
    assert rc == 0 and [line.split()[0] for line in lines[:-1]] == example_names()
    assert "tiny-gpt-cpu" in example_names()


def test_an_example_runs_by_name_from_any_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    rc, _out, err = run(capsys, "simulate", "pipeline-1f1b", "--json")
    assert rc == 0, err
    rc, _, err = run(capsys, "simulate", "gpt3-175b")
    assert rc == 2 and "did you mean 'gpt3-175b-1024-a100'?" in err and "execsim examples" in err


def test_every_module_that_needs_numba_is_left_out_of_collection_without_it():
    """`pip install '.[test]'` then pytest stopped with 4 collection errors (--doctest-modules imported
    the numba kernels); conftest.py now leaves exactly the modules that import numba at their top out."""
    import ast
    import importlib.util
    spec = importlib.util.spec_from_file_location("root_conftest", ROOT / "conftest.py")
    conf = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conf)
    needs = set()
    for folder in ("simulator", "taskgraph", "topologies", "strategies"):
        for path in (ROOT / folder).rglob("*.py"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in tree.body:   # module level, in a try: or not
                body = node.body if isinstance(node, ast.Try) else [node]
                if any(isinstance(n, ast.Import) and any(a.name == "numba" for a in n.names) for n in body):
                    needs.add(path.relative_to(ROOT).as_posix())
    assert needs == set(conf.NUMBA_MODULES)
