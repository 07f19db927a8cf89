"""What the ``execsim`` commands share: loading an input with ``--set``, checking output flags,
printing strict JSON, the subcommand parser with examples, and the help texts of common flags."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from strategies.errors import ExecsimError, brief

EXIT_USAGE = 2


EXIT_INTERNAL = 3


def _json_safe(x):
    """``x`` with non-finite floats replaced by None (JSON has no NaN or Infinity)."""
    import math
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    if hasattr(x, "item") and not isinstance(x, (str, bytes)):  # numpy scalars
        return _json_safe(x.item())
    return x


def print_json(obj) -> None:
    """Print ``obj`` as strict JSON (``allow_nan=False`` after replacing non-finite numbers by null:
    JSON has no ``Infinity`` or ``NaN``, and strict readers refuse them)."""
    print(json.dumps(_json_safe(obj), sort_keys=True, allow_nan=False))




def input_files(path: str, kind: str, spec) -> list[str]:
    """Every file a run reads: the input file and the files it names (never overwritten)."""
    files = [path]
    base = Path(path).parent
    if kind == "pipeline":
        files.append(spec.schedule_csv)
    else:
        for ref in (spec.model, spec.cluster):
            if isinstance(ref, str):
                files += [ref, str(base / ref), str(base / ref / "config.json")]
        files += [spec.schedule_csv, spec.options.profile, spec.options.collective_profile]
    return [f for f in files if f]


def check_command_outputs(args, inputs, **outputs) -> dict:
    """Check every output flag of this command before any simulation (``simulator.outputs.files``)."""
    from simulator.outputs.files import check_outputs
    return check_outputs({f"--{k.replace('_', '-')}": v for k, v in outputs.items()}, inputs=inputs,
                         mkdir=getattr(args, "mkdir", False))


#: ``--set`` keys whose value is a file path: resolved against the current folder (a file's own paths
#: resolve against the file's folder; issue 41)
CWD_PATH_KEYS = frozenset({"options.profile", "options.collective_profile", "schedule.csv",
                           "pipeline.schedule_csv"})


def load_input(path: str, sets: list[str]):
    """Load a simulation input: a pipeline description (``pipeline:`` section) or a strategy file."""
    from strategies.config import load_mapping, parse_set_value, set_dotted
    data = load_mapping(path, "input file")
    for item in sets or []:
        if "=" not in item:
            raise ExecsimError(f"--set {item!r} must look like section.key=value, e.g. --set parallel.pp=8")
        k, v = item.split("=", 1)
        if not k.strip() or any(not part for part in k.strip().split(".")):
            raise ExecsimError(f"--set {brief(item)}: the key before '=' must be a dotted field name such as "
                               f"parallel.pp")
        value = parse_set_value(v.strip(), k.strip())
        if k.strip() in CWD_PATH_KEYS and isinstance(value, str) and value and not Path(value).is_absolute():
            value = str(Path.cwd() / value)   # typed on the command line: relative to where it was typed
        data = set_dotted(data, k.strip(), value)
    if "pipeline" in data:
        from strategies.pipeline_file import parse_pipeline
        return "pipeline", parse_pipeline(data, Path(path).parent)
    from strategies.strategy_file import parse_strategy
    return "strategy", parse_strategy(data, Path(path).parent)


def pipeline_flags(args, kind: str, file=None) -> None:
    """Flags that need a model and a cluster: refused on a pipeline description (nothing to apply them to)."""
    if kind != "pipeline":
        return
    for flag, value in (("--price", getattr(args, "price", None)), ("--fidelity", getattr(args, "fidelity", None))):
        if value is not None:
            raise ExecsimError(f"{flag} {value} applies to strategy files (model + cluster); {brief(file or args.file)} is a "
                               f"pipeline description with given stage times: drop {flag}")


def simulate_one(kind, spec, schedule=None, fidelity=None, vpp=None):
    if kind == "pipeline":
        from simulator.simulation.pipeline import simulate_pipeline
        return simulate_pipeline(spec, schedule=schedule, vpp=vpp)
    from simulator.simulation.strategy import simulate_strategy
    return simulate_strategy(spec, schedule=schedule, fidelity=fidelity, vpp=vpp)


def load_strategy_arg(args, command: str):
    """``load_input`` for the commands that need a strategy file (model + cluster), not a pipeline file."""
    kind, spec = load_input(args.file, args.set)
    if kind != "strategy":
        raise ExecsimError(f"{args.file} is a pipeline description; 'execsim {command}' needs a strategy file "
                           f"(model + cluster + parallel + training)")
    return kind, spec


MKDIR_HELP = "create the output file's folder if it does not exist"


EXAMPLES_HEADING = "examples:\n  "


def add_command(sub, name: str, help: str, examples: list[str]):
    """A subcommand whose --help ends with runnable examples."""
    return sub.add_parser(name, help=help, description=help[0].upper() + help[1:] + ".",
                          epilog=EXAMPLES_HEADING + "\n  ".join(examples), formatter_class=argparse.RawDescriptionHelpFormatter)


SET_HELP = "override a field of the file, e.g. parallel.pp=16 or training.micro_batch=2 (repeatable)"


FID_HELP = "override options.fidelity: operator (one task per operator pass) or coarse (one per stage pass, fast)"


EXAMPLE_NAME = "gpt3-175b-1024-a100"


def input_file(text: str) -> str:
    """argparse ``type`` of a FILE argument: a path as given when it exists; else the name of a shipped
    example (``gpt3-175b-1024-a100``, with or without ``.yaml``; ``execsim examples`` lists them), so
    the help's examples run after a plain install from any folder (issue 41)."""
    from strategies.strategy_file import EXAMPLES_DIR, example_names
    if Path(text).exists() or "/" in text or "\\" in text:
        return text
    for name in (text, text + ".yaml"):
        if (EXAMPLES_DIR / name).is_file():
            return str(EXAMPLES_DIR / name)
    from strategies.config import did_you_mean
    hint = did_you_mean(text, example_names())
    if hint:
        raise ExecsimError(f"no file {brief(text)}, and no shipped example of that name{hint}; 'execsim examples' "
                           f"lists them")
    return text


def import_source(text: str) -> str:
    """argparse ``type`` of ``execsim import``'s SOURCE: ``-`` or a path as given when it exists; else the
    name of a shipped source file (``strategies/examples/sources/``: the scripts and recipes the
    imported examples came from), so the help's import examples run after a plain install (issue 41)."""
    from strategies.strategy_file import EXAMPLES_DIR
    src = EXAMPLES_DIR / "sources" / text
    if text == "-" or Path(text).exists() or "/" in text or "\\" in text or not src.is_file():
        return text
    return str(src)


def trace_folder(text: str) -> str:
    """argparse ``type`` of a TRACE_DIR argument: a folder as given when it exists, else the name of a
    shipped example trace (``strategies/examples/traces/``: ``tiny-gpt-cpu-trace``, written by
    benchmarks/trace_tiny.py)."""
    from strategies.strategy_file import EXAMPLES_DIR
    if Path(text).exists() or "/" in text or "\\" in text or not (EXAMPLES_DIR / "traces" / text).is_dir():
        return text
    return str(EXAMPLES_DIR / "traces" / text)
