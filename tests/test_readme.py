"""The README's figures are checked, not remembered: this runs the README's commands and compares
every figure the README quotes, at the rounding it prints.

``FIGURES`` builds, from the commands' own output, the exact text the README must contain for each
figure; ``test_every_figure_in_the_readme_is_checked`` makes sure no number in the checked sections is
left unregistered (numbers in code are commands and inputs). Timings depend on the machine and are
not compared; they are listed in ``TIMINGS``. The Python API example is run from a folder outside the
repository. The searches simulate about 3,200 candidates in all (a few minutes on a 2-core machine).
"""
from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from simulator.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
EX = "strategies/examples"
GPT3 = f"{EX}/gpt3-175b-1024-a100.yaml"
L70 = f"{EX}/llama3-70b-64-h100.yaml"
DEADLINE = ("--gpus-range 64:4096 --deadline-days 30 --train-tokens 1e12 --axis tp=2,4,8 --axis cp=1,2 "
            "--axis recompute=none,selective --axis zero=1 --axis micro_batch=1 --no-prune")
#: README commands that these checks run (each must appear in the README, whitespace-normalised)
COMMANDS = [f"execsim search {GPT3} --write-best best.yaml", "execsim simulate best.yaml",
            f"execsim search {L70} {DEADLINE}"]
#: figures that are timings (machine-dependent): listed, not compared
TIMINGS = ["simulated in 7.6 s on the wall, 13 s of CPU, on a quiet 2-core VM"]


def _run(argv: list[str]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(argv)
    assert rc == 0, (argv, out.getvalue()[-2000:])
    return out.getvalue()


def _label(r) -> str:
    """A ranked row as the README writes a strategy."""
    parts = [f"tp {r['tp']}", f"pp {r['pp']}"] + ([f"cp {r['cp']}"] if r["cp"] > 1 else []) + [f"dp {r['dp']}"]
    parts.append(r["schedule"] + (f" (vpp {r['vpp']})" if r["vpp"] > 1 else ""))
    parts += [f"micro-batch {r['micro_batch']}",
              "no recompute" if r["recompute"] == "none" else f"{r['recompute']} recompute", f"ZeRO-{r['zero']}"]
    return ", ".join(parts + (["sp"] if r["sp"] else []))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every README command, run once: the two searches of the table (best strategies written), the
    examples' own strategies and the best files at both fidelities, and the deadline search."""
    d = tmp_path_factory.mktemp("readme")
    out: dict = {}
    for key, ex in (("gpt3", GPT3), ("l70", L70)):
        best = d / f"best-{key}.yaml"
        out[key] = json.loads(_run(["search", str(ROOT / ex), "--write-best", str(best), "--json", "--top", "1"]))
        out[key + "-file"] = json.loads(_run(["simulate", str(ROOT / ex), "--fidelity", "coarse", "--json"]))
        out[key + "-best"] = json.loads(_run(["simulate", str(best), "--json"]))
        out[key + "-best-op"] = json.loads(_run(["simulate", str(best), "--fidelity", "operator", "--json"]))
    csv = d / "deadline.csv"
    out["deadline"] = json.loads(_run(["search", str(ROOT / L70), *DEADLINE.split(), "--csv", str(csv), "--json"]))
    out["deadline-rows"] = pd.read_csv(csv)
    return out


def figures(runs) -> dict[str, str]:
    """Figure name -> the exact text the README must hold for it."""
    f: dict[str, str] = {}
    for key, name in (("gpt3", "GPT-3 175B"), ("l70", "Llama-3 70B")):
        s, b = runs[key], runs[key]["best"]
        valid = s["space"]["kept"] + s["space"]["pruned_memory"]
        skipped = s["space"].get("skipped_by_time_bound", 0)
        f[f"{key} simulated"] = (f"{s['simulated']} simulated ({skipped} ruled out by the time bound) of {valid} valid"
                                 if key == "gpt3" else f"{s['simulated']} simulated ({skipped} ruled out by the time bound)")
        f[f"{key} price"] = f"${s['price_per_gpu_hour_usd']:.2f}/GPU-h"
        f[f"{key} best"] = f"| {_label(b)} |"
        f[f"{key} iteration"] = (f"{b['iteration_time_s']:.2f} s ({b['tokens_per_s'] / 1e3:.{0 if key == 'gpt3' else 1}f}k "
                                 f"tokens/s, MFU {100 * b['mfu']:.1f}%)")
        f[f"{key} memory"] = f"{b['peak_memory_gb']:.1f} GiB of 80"
        f[f"{key} train"] = (f"{b['days_to_train']:.1f} days, {b['gpu_hours'] / 1e3:.0f}k GPU-hours" if key == "gpt3"
                             else f"{b['days_to_train']:.0f} days, {b['gpu_hours'] / 1e6:.2f}M GPU-hours")
        f[f"{key} cost"] = f"${b['cost_usd'] / 1e6:.{2 if key == 'gpt3' else 1}f}M |"
        f[f"{key} file"] = f"{runs[key + '-file']['iteration_time_s']:.2f} s ({name}"
        f[f"{key} best operator"] = f"{runs[key + '-best-op']['iteration_time_s']:.2f} s ({name} best at operator"
    behind = runs["l70-file"]["iteration_time_s"] / runs["l70"]["best"]["iteration_time_s"] - 1
    f["l70 file behind"] = f"{100 * behind:.1f}% behind the winner"
    s, b = runs["deadline"], runs["deadline"]["best"]
    rows = runs["deadline-rows"]
    ok = rows[rows.status == "ok"]
    f["deadline counts"] = f"{len(s['gpus'])} GPU counts, {s['simulated']} candidates"
    f["deadline best"] = (f"{b['gpus']} GPUs: {_label(b)}, {b['iteration_time_s']:.2f} s per iteration, "
                          f"{b['peak_memory_gb']:.1f} GiB peak, {b['days_to_train']:.1f} days, ${b['cost_usd'] / 1e6:.2f}M")
    fewer = ok[ok.gpus < b["gpus"]]
    g = int(fewer.gpus.max())
    fast = fewer[fewer.gpus == g].sort_values("days_to_train").iloc[0]
    f["deadline fewer"] = f"{g}: {fast.days_to_train:.1f} days at best, ${fast.cost_usd / 1e6:.2f}M"
    more = ok[(ok.gpus > b["gpus"]) & ok.meets].sort_values(["cost_usd", "days_to_train"])
    m = more.iloc[0]
    f["deadline more"] = f"{int(m.gpus)} GPUs would finish in {m.days_to_train:.1f} days for ${m.cost_usd / 1e6:.2f}M"
    f["deadline only counts"] = "only " + ", ".join(str(x) for x in sorted(set(ok.gpus.tolist()))) + " GPUs admit"
    return f


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def _section(title: str, end: str) -> str:
    return README[README.index(title):README.index(end)]


CHECKED = _section("## Search: which strategy", "## Python API")


def test_readme_quotes_the_commands_it_checks():
    text = _norm(README)
    for c in COMMANDS:
        assert _norm(c) in text, c


def test_readme_figures_match_the_commands(runs):
    text = _norm(CHECKED)
    want = figures(runs)
    wrong = {k: v for k, v in want.items() if _norm(v) not in text}
    assert not wrong, "README figures that differ from what the commands print now:\n" + "\n".join(
        f"  {k}: expected {v!r}" for k, v in wrong.items())
    # the README's reproduction claim: simulating the written best file prints the search's numbers
    for key in ("gpt3", "l70"):
        b, again = runs[key]["best"], runs[key + "-best"]
        assert round(again["iteration_time_s"], 2) == round(b["iteration_time_s"], 2)
        assert round(max(again["peak_memory_gb"]), 1) == round(b["peak_memory_gb"], 1)
        assert round(again["cost_usd"] / 1e6, 2) == round(b["cost_usd"] / 1e6, 2)


def test_every_figure_in_the_readme_is_checked(runs):
    """Every number in the checked sections (outside code) is part of a registered figure, a timing
    or an input the figures' sentences repeat; a new figure must be registered to be quoted."""
    prose = re.sub(r"`[^`]*`", " ", re.sub(r"```.*?```", " ", CHECKED, flags=re.DOTALL))
    known = set(_numbers(" ".join(figures(runs).values()) + " " + " ".join(TIMINGS)))
    inputs = {"175B", "1024", "300B", "70B", "64", "8K", "15T", "1T", "30", "80", "128", "3"}
    for tok, where in zip(_numbers(prose), re.finditer(NUMBER, prose)):
        assert tok in known or tok in inputs, (f"README figure {tok!r} (...{prose[max(0, where.start() - 40):where.end() + 20]!r}"
                                               f"...) is not checked: register it in figures() or TIMINGS")


NUMBER = r"(?<![A-Za-z\d.])\$?\d[\d.,]*[kMBTK%]?"


def _numbers(text: str) -> list[str]:
    """The numbers of ``text`` as printed (units k, M, B, T, K, % kept; not those inside names such as
    A100-80GB, H100, ZeRO-1 is kept as 1)."""
    return [m.group(0).rstrip(".,") for m in re.finditer(NUMBER, text)]


def test_python_api_example_runs_from_any_folder(tmp_path):
    """The README's Python API block, run as is from a folder outside the repository."""
    block = re.search(r"## Python API\s+```python\n(.*?)```", README, re.DOTALL).group(1)
    p = subprocess.run([sys.executable, "-c", block], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert p.returncode == 0, p.stderr[-2000:]
    assert "s/iteration" in p.stdout and "pipeline bubble" in p.stdout


def test_the_cpu_chain_runs_as_the_readme_writes_it(tmp_path, monkeypatch, capsys):
    """The README's no-GPU chain (issue 41), command by command from an empty folder: profile the tiny
    example on the CPU, simulate it at two other node counts, trace a real run with the shipped script,
    calibrate, simulate; the last simulation gives the traced median step back within 10 %."""
    pytest.importorskip("torch", reason="PyTorch is not installed (pip install torch --index-url "
                                        "https://download.pytorch.org/whl/cpu): the README's CPU chain needs it")
    import shlex
    block = re.search(r"## No GPU:.*?```bash\n.*?```.*?```bash\n(.*?)```", README, re.DOTALL).group(1)
    lines = [line.split("#")[0].strip() for line in block.strip().splitlines()]
    assert len(lines) == 6
    monkeypatch.chdir(tmp_path)
    out = ""
    for line in lines:
        argv = shlex.split(line)
        if argv[0] == "python":
            subprocess.run([sys.executable, str(ROOT / argv[1]), *argv[2:]], check=True, capture_output=True,
                           timeout=900)
            continue
        assert main(argv[1:]) == 0, line
        out = capsys.readouterr().out
    assert main(["calibrate", "tiny-gpt-cpu", "trace/", "-o", str(tmp_path / "again.csv"), "--json",
                 "--no-simulate"]) == 0
    step = json.loads(capsys.readouterr().out)["ranks"][0]["step_s"]
    simulated = float(re.search(r"iteration time ([\d.]+) s", out).group(1))
    assert abs(simulated / step - 1) < 0.10
