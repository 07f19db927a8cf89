"""``execsim examples``: the shipped example files, one line each; any command takes a name in place
of a path (``execsim simulate gpt3-175b-1024-a100``, :func:`simulator.cli.common.input_file`)."""
from __future__ import annotations

from simulator.cli.common import add_command, print_json


def add_parser(sub) -> None:
    s = add_command(sub, "examples", "list the shipped examples; every command takes a name in place of a file path",
             ["execsim examples", "execsim examples --json", "execsim simulate gpt3-175b-1024-a100 --fidelity coarse"])
    s.add_argument("--json", action="store_true", help="machine-readable output (name, kind, path, summary)")
    s.set_defaults(func=_examples_cmd)


def example_kind(text: str) -> str:
    """What an example file is: a pipeline description, a strategy file, or a part another file names.

    >>> example_kind("pipeline:\\n  pp: 4")
    'pipeline'
    >>> example_kind("model: x\\nparallel: {tp: 1}")
    'strategy'
    >>> example_kind("layers: 2")
    'part'
    """
    import yaml
    data = yaml.safe_load(text)
    if isinstance(data, dict) and "pipeline" in data:
        return "pipeline"
    if isinstance(data, dict) and ("parallel" in data or "training" in data):
        return "strategy"
    return "part"


def _examples_cmd(args) -> int:
    from pathlib import Path

    from strategies.strategy_file import example_names, example_path, example_summary
    rows = []
    for name in example_names():
        path = example_path(name + ".yaml")
        rows.append({"name": name, "kind": example_kind(Path(path).read_text(encoding="utf-8")), "path": path,
                     "summary": example_summary(name)})
    if args.json:
        print_json(rows)
        return 0
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        kind = {"part": "(named by another file)", "pipeline": "(pipeline)", "strategy": ""}[r["kind"]]
        print(f"{r['name']:<{width}}  {r['summary']}{' ' + kind if kind else ''}")
    print("run one by name from any folder, e.g. execsim simulate gpt3-175b-1024-a100")
    return 0
