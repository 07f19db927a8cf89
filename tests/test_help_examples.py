"""Issue 41: every example that ``execsim --help`` and ``execsim COMMAND --help`` print runs after a
plain install from any folder (a temporary one here): examples are named, not repo-relative paths.
To stay fast, commands that take ``--fidelity`` run at coarse fidelity; the ``profile`` examples need
PyTorch (the CUDA ones a GPU) and skip with the reason otherwise; a line's ``# exit N`` comment is its
expected exit status."""
from __future__ import annotations

import argparse
import re
import shlex

import pytest

from simulator.cli.main import build_parser, main


def help_examples() -> list[tuple[str, str]]:
    """(command, example line) of every --help epilog, the main parser's last."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out = []
    for name, p in list(sub.choices.items()) + [("execsim", parser)]:
        for line in (p.epilog or "").splitlines()[1:]:
            line = re.split(r"\s{2,}\(", line.strip())[0]   # "execsim examples   (what it does)"
            if line.startswith("execsim ") and "<command>" not in line:
                out.append((name, line))
    return out


EXAMPLES = help_examples()


def _argv(line: str) -> tuple[list[str], int]:
    code = re.search(r"#\s*exit (\d+)", line)
    argv = shlex.split(line.split("#")[0].split(">")[0])[1:]
    return argv, int(code.group(1)) if code else 0


def test_every_command_shows_examples():
    assert {name for name, _ in EXAMPLES} >= {"simulate", "report", "memory", "plan-recompute", "compare", "search",
                                             "goodput", "profile", "calibrate", "examples", "schedule"}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("anywhere")


@pytest.mark.parametrize("line", [line for _, line in EXAMPLES], ids=range(len(EXAMPLES)))
def test_a_help_example_runs_from_any_folder(line, folder, monkeypatch, capsys):
    argv, expect = _argv(line)
    if argv[0] == "profile" or (argv[0] == "simulate" and "options.profile=cpu.csv" in line):
        torch = pytest.importorskip("torch", reason="PyTorch is not installed: execsim profile needs it")
        if "cuda" in argv and not torch.cuda.is_available():
            pytest.skip("no CUDA device")
        argv += ["--repeats", "2"] if argv[0] == "profile" and "--repeats" not in argv else []
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    options = {o for a in sub.choices[argv[0]]._actions for o in a.option_strings}
    pipeline = any(a.startswith("pipeline-") for a in argv)   # a pipeline description: no fidelity
    if "--fidelity" in options and "--fidelity" not in argv and argv[0] != "plan-recompute" and not pipeline:
        argv += ["--fidelity", "coarse"]
    if argv[0] == "goodput":   # a few seeds: the line's flags are what is checked
        argv = argv[:argv.index("--seeds")] + argv[argv.index("--seeds") + 2:] if "--seeds" in argv else argv
        argv += ["--seeds", "3"]
    if "--budget" in argv:   # MCMC: a few simulations
        argv[argv.index("--budget") + 1] = "10"
    monkeypatch.chdir(folder)
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == expect, f"{line}: exit {rc}: {err[-500:]}"
