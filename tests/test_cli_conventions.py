"""CLI conventions: --version, simulate --check / fits / oom, help text and examples on every
option, progress bars silent off a terminal, and the README's Python API example runs."""
import json
import re
from pathlib import Path

import pytest

from simulator.cli.main import build_parser, main

GPT3 = "strategies/examples/gpt3-175b-1024-a100.yaml"
P1F1B = "strategies/examples/pipeline-1f1b.yaml"
OOM = ["--set", "training.micro_batch=16", "--set", "training.global_batch=1536", "--set", "training.recompute=none"]


def run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_version(capsys):
    from simulator import __version__
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"execsim {__version__}"


def test_simulate_check_and_json_fits(capsys):
    rc, out, _ = run(capsys, "simulate", GPT3, "--fidelity", "coarse", "--json", "--check")
    d = json.loads(out)
    assert rc == 0 and d["fits"] is True and d["oom"] is False
    rc, out, err = run(capsys, "simulate", GPT3, "--fidelity", "coarse", "--json", "--check", *OOM)
    d = json.loads(out)
    assert rc == 1 and d["fits"] is False and d["oom"] is True and "does not fit" in err
    rc, out, _ = run(capsys, "simulate", GPT3, "--fidelity", "coarse", "--json", *OOM)
    assert rc == 0 and json.loads(out)["oom"] is True  # without --check an OOM run still exits 0
    rc, out, _ = run(capsys, "simulate", P1F1B, "--json")
    d = json.loads(out)
    assert d["fits"] is None and d["oom"] is None  # a pipeline description has no memory capacity
    rc, _, err = run(capsys, "simulate", P1F1B, "--check")
    assert rc == 2 and "--check needs a strategy file" in err


def test_every_option_has_help_and_every_command_examples():
    p = build_parser()
    sub = next(a for a in p._actions if a.__class__.__name__ == "_SubParsersAction")
    assert "examples:" in p.epilog
    for name, sp in sub.choices.items():
        assert sp.epilog and sp.epilog.startswith("examples:") and f"execsim {name}" in sp.epilog, name
        for a in sp._actions:
            if a.dest == "help":
                continue
            assert a.help, f"{name} {a.option_strings or a.dest} has no help text"
        help_text = sp.format_help()
        assert "examples:" in help_text


def test_progress_is_silent_when_stderr_is_not_a_terminal(capsys):
    from simulator.outputs.progress import progress
    assert list(progress(range(3), desc="x")) == [0, 1, 2]
    rc, _out, err = run(capsys, "compare", P1F1B, "--schedules", "1f1b,zb-h1", "--json")
    assert rc == 0 and err == ""  # pytest's captured stderr is not a TTY


def test_progress_shows_when_forced(capsys):
    from simulator.outputs.progress import progress
    assert list(progress([1, 2], desc="demo-bar", enabled=True)) == [1, 2]
    assert "demo-bar" in capsys.readouterr().err


def test_readme_python_api_example_runs():
    text = Path("README.md").read_text(encoding="utf-8")
    m = re.search(r"## Python API.*?```python\n(.*?)```", text, re.DOTALL)
    assert m, "README has a '## Python API' section with a python block"
    code = m.group(1)
    assert len(code.strip().splitlines()) <= 12
    ns: dict = {}
    exec(compile(code, "README.md", "exec"), ns)  # noqa: S102 -- the project's own README example; the example asserts its own results
