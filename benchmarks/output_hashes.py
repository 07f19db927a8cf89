"""Hash every output the ``execsim`` command writes for every shipped example, so a refactor can
show them byte-identical before and after (issue 25: moves never change behaviour).

Each case runs the installed ``execsim`` in a fresh process, in a scratch folder, and hashes what it
printed and every file it wrote: JSON summaries, text reports, Chrome traces, the per-rank HTA
folder, the timeline CSV, the HTML report, plots, imported strategy files, search tables and
goodput summaries. Wall-clock figures are the only thing masked (``*wall*`` JSON keys and the
"in N ms" / "takes N ms" timings of the text reports): everything else must match bit for bit.

    python -m benchmarks.output_hashes -o before.txt          # record
    python -m benchmarks.output_hashes --compare before.txt   # exit 1 and list what differs

Run it with the same installed packages before and after (PNG bytes depend on matplotlib's version);
``--exe`` runs another checkout's command (paths under the checkout are masked as ``<root>``).

Beside the command's outputs, every example's lowered task graph is hashed in this process
(``<example>/task-graph:arrays``, :func:`graph_hash`: every array of the
:class:`taskgraph.graph.TaskGraph` with its dtype and shape, the device and operator names and the
meta), so a move inside the lowering shows before any output does.

The baseline: :data:`BASELINE` (``tests/data/output_hashes.txt``) is this script's manifest of the
committed tree; ``tests/test_output_hashes.py`` recomputes the cheap part of it in-process on every
run (the task-graph hashes and every example's ``simulate --json``), the full run stays here. A
pure move must leave it unchanged. When a change of behaviour is intended, regenerate it in the same
commit and say so in the message (the lead regenerates after merging branches that change outputs):

    python -m benchmarks.output_hashes -o tests/data/output_hashes.txt       # the full baseline
    python -m benchmarks.output_hashes --compare tests/data/output_hashes.txt  # what changed, first
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EX = ROOT / "strategies" / "examples"
#: the committed manifest of the tree (module doc: how to regenerate it)
BASELINE = ROOT / "tests" / "data" / "output_hashes.txt"

# strategy files (model + cluster + strategy) and pipeline-only descriptions; custom-model.yaml and
# custom-cluster.yaml are a model file and a topology file that custom-model-cluster.yaml names
PIPELINES = ["pipeline-1f1b.yaml", "pipeline-interleaved.yaml"]
STRATEGIES = sorted(p.name for p in EX.glob("*.yaml")
                    if p.name not in PIPELINES and p.name not in ("custom-model.yaml", "custom-cluster.yaml"))

_WALL_TEXT = [
    (re.compile(r"(in|takes|took|wall|after) [0-9.,]+ ?(ms|s|µs|us)\b"), r"\1 <wall>"),
    (re.compile(r"[0-9.,]+ ?(candidates|simulations|evaluations|runs)/s\b"), r"<rate> \1/s"),
    (re.compile(r"\b[0-9.]+ s wall\b"), "<wall> s wall"),
    (re.compile(r"\([0-9.,]+/s\)"), "(<rate>/s)"),
    # delta's pace rule gives up on a time budget, so where it gave up depends on the machine's load
    # (the result does not: a fallback runs the full simulation)
    (re.compile(r"time budget spent after [0-9,]+ tasks"), "time budget spent after <n> tasks"),
]


def _mask_json(x):
    if isinstance(x, dict):
        # wall-clock keys: *wall*, and delta's full_simulation_s (the full run it timed for comparison)
        return {k: ("<wall>" if "wall" in k or k == "full_simulation_s" else _mask_json(v)) for k, v in x.items()}
    if isinstance(x, list):
        return [_mask_json(v) for v in x]
    return x


def _mask_text(text: str) -> str:
    for pat, rep in _WALL_TEXT:
        text = pat.sub(rep, text)
    return text


def _normalize(name: str, data: bytes, tmp: str) -> bytes:
    data = data.replace(tmp.encode(), b"<tmp>").replace(str(ROOT).encode(), b"<root>")
    if name.endswith(".json") or name == "stdout.json":
        try:
            obj = json.loads(data)
        except ValueError:
            return data
        return json.dumps(_mask_json(obj), sort_keys=True).encode()
    if name.endswith((".txt", ".csv", ".yaml")) or name == "stdout":
        text = data.decode("utf-8", "replace")
        if name.endswith(".csv"):  # search tables carry a wall column
            lines = text.splitlines()
            if lines and "wall_s" in lines[0].split(","):
                col = lines[0].split(",").index("wall_s")
                lines = [lines[0]] + [",".join("<wall>" if i == col else v for i, v in enumerate(ln.split(",")))
                                      for ln in lines[1:]]
                text = "\n".join(lines) + "\n"
        return _mask_text(text).encode()
    return data


def cases() -> list[tuple[str, list[str]]]:
    """(name, argv after ``execsim``) for every output path of every shipped example."""
    out: list[tuple[str, list[str]]] = []
    for f in PIPELINES + STRATEGIES:
        p = f"ex/{f}"
        stem = f[:-5]
        out.append((f"{stem}/simulate-text", ["simulate", p]))
        out.append((f"{stem}/simulate-json", ["simulate", p, "--json"]))
        out.append((f"{stem}/simulate-files", ["simulate", p, "--trace", "trace.json", "--trace-dir", "hta",
                                               "--trace-ranks", "0-3", "--timeline", "timeline.csv",
                                               "--html", "report.html"]))
        out.append((f"{stem}/trace-stage-gz", ["simulate", p, "--trace", "trace.json.gz", "--trace-level", "stage"]))
        out.append((f"{stem}/what-if", ["simulate", p, "--mode", "delta", "--what-if", "*=1.1",
                                        "--what-if", "forward=0.9"] if f in PIPELINES else
                    ["simulate", p, "--mode", "delta", "--what-if", "*=1.1", "--what-if", "dp-comm=0"]))
        out.append((f"{stem}/report-html", ["report", p, "-o", "report.html"]))
        if f in PIPELINES:
            out.append((f"{stem}/compare", ["compare", p, "--schedules", "gpipe,1f1b,interleaved-1f1b:2,zb-h1,zb-v",
                                            "--json", "--plot", "cmp.png"]))
            continue
        out.append((f"{stem}/operator-json", ["simulate", p, "--json", "--fidelity", "operator"]))
        out.append((f"{stem}/coarse-json", ["simulate", p, "--json", "--fidelity", "coarse"]))
        out.append((f"{stem}/memory", ["memory", p, "--json", "--layers"]))
        out.append((f"{stem}/memory-text", ["memory", p, "--layers", "--plot", "mem.png"]))
        out.append((f"{stem}/compare-files", ["compare", p, p, "--json"]))
    small = "ex/llama3-8b-8-h100.yaml"
    out += [
        ("plan-recompute", ["plan-recompute", "ex/llama3-70b-64-h100.yaml"]),
        ("compare-schedules", ["compare", "ex/llama3-70b-64-h100.yaml", "--schedules",
                               "1f1b,interleaved-1f1b:5", "--json"]),
        ("search-8b", ["search", small, "--csv", "search.csv", "--top", "20", "--jobs", "1"]),
        ("search-gpt3", ["search", "ex/gpt3-175b-1024-a100.yaml", "--json", "--top", "10", "--jobs", "1",
                         "--write-best", "best.yaml", "--plot", "pareto.png"]),
        ("search-mcmc", ["search", "ex/llama3-70b-64-h100.yaml", "--method", "mcmc", "--budget", "40",
                         "--seed", "3", "--json", "--jobs", "1"]),
        ("search-range", ["search", "ex/llama3-70b-64-h100.yaml", "--gpus-range", "64:256",
                          "--deadline-days", "300", "--train-tokens", "1e12", "--axis", "tp=4,8",
                          "--axis", "recompute=none", "--axis", "micro_batch=1", "--json", "--jobs", "1"]),
        ("goodput", ["goodput", "ex/llama3-405b-16k-h100-goodput.yaml", "--seeds", "3", "--json",
                     "--plot", "goodput.png"]),
        ("goodput-text", ["goodput", "ex/llama3-405b-16k-h100-goodput.yaml", "--seeds", "2",
                          "--interval", "young"]),
        ("import-megatron", ["import", "megatron", "ex/sources/train_gpt3_175b_distributed.sh",
                             "--cluster", "dgx-a100-80g", "--nodes", "128", "-o", "out.yaml"]),
        ("import-nemo", ["import", "nemo", "ex/sources/nemo_llama3_8b.yaml", "--cluster", "dgx-h100",
                         "-o", "out.yaml"]),
        ("import-torchtitan", ["import", "torchtitan", "ex/sources/torchtitan_llama3_8b.toml",
                               "--cluster", "dgx-a100-80g", "--nodes", "8", "-o", "out.yaml"]),
        ("bad-input", ["simulate", "ex/custom-model.yaml"]),
    ]
    for name, pp, mb, vpp in [("gpipe", 4, 8, 1), ("1f1b", 4, 8, 1), ("interleaved-1f1b", 4, 8, 2),
                              ("zb-h1", 4, 8, 1), ("zb-v", 4, 8, 2), ("dualpipe-v", 4, 8, 2),
                              ("looped-bfs", 4, 8, 2), ("dualpipe", 4, 8, 2)]:
        for fmt in ("--json", "--csv", None):
            if fmt == "--csv" and name == "dualpipe":
                continue
            argv = ["schedule", "--schedule", name, "--pp", str(pp), "--microbatches", str(mb), "--vpp", str(vpp)]
            out.append((f"schedule-{name}{fmt or ''}", argv + ([fmt] if fmt else [])))
    return out


def graph_hash(graph) -> str:
    """sha256 of a :class:`taskgraph.graph.TaskGraph`: every array field (name, dtype, shape, bytes),
    the devices, the operator names and the meta, in field order."""
    import dataclasses

    import numpy as np
    h = hashlib.sha256()
    for f in dataclasses.fields(graph):
        v = getattr(graph, f.name)
        h.update(f.name.encode() + b"\0")
        if isinstance(v, np.ndarray):
            a = np.ascontiguousarray(v)
            h.update(f"{a.dtype.str}{a.shape}".encode() + a.tobytes())
        elif f.name == "meta":
            h.update(json.dumps(v, sort_keys=True, default=repr).encode())
        else:
            h.update(repr(v).encode())
    return h.hexdigest()


def lowered_graph(example: str):
    """The lowered task graph of a shipped example (a file name in ``strategies/examples``), at the
    fidelity its file asks for: what ``execsim simulate`` lowers before it runs the timeline."""
    path = EX / example
    if example in PIPELINES:
        from simulator.api import load_pipeline, pipeline_schedule
        from taskgraph.lower_pipeline import StageCosts, lower_uniform
        spec = load_pipeline(path)
        costs = StageCosts(spec.forward, spec.backward, spec.backward_input, spec.backward_weight, spec.p2p,
                           spec.activation)
        return lower_uniform(pipeline_schedule(spec), costs, overlap_handoff=spec.overlap_handoff)
    from simulator.api import load_strategy, lower
    from taskgraph.costing import build_work
    from taskgraph.plan import resolve
    strategy = load_strategy(path)
    plan = resolve(strategy)
    work = build_work(plan, fidelity=strategy.options.fidelity, check_profile=True)
    return lower(plan.schedule, work, strategy.options.overlap_handoff, fidelity=strategy.options.fidelity)


def graph_hashes() -> dict[str, str]:
    """{``<example>/task-graph:arrays``: sha256} for every example (strategy files and pipelines)."""
    return {f"{f[:-5]}/task-graph:arrays": graph_hash(lowered_graph(f)) for f in PIPELINES + STRATEGIES}


def run_in_process(argv: list[str]) -> dict[str, str]:
    """The ``stdout``, ``stderr`` and ``rc`` hashes of :func:`run_case` for a case that writes no
    file, from :func:`simulator.cli.main.main` in this process (the unit test's cheap path)."""
    import contextlib
    import io

    from simulator.cli.main import main as cli
    tmp = tempfile.mkdtemp(prefix="execsim-hash-")
    cwd = os.getcwd()
    try:
        shutil.copytree(EX, Path(tmp) / "ex")
        os.chdir(tmp)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = cli(argv)
        got = {"rc": hashlib.sha256(str(rc).encode()).hexdigest()}
        is_json = "--json" in argv
        got["stdout"] = hashlib.sha256(_normalize("stdout.json" if is_json else "stdout", out.getvalue().encode(),
                                                  tmp)).hexdigest()
        got["stderr"] = hashlib.sha256(_normalize("stdout", err.getvalue().encode(), tmp)).hexdigest()
        return got
    finally:
        os.chdir(cwd)
        shutil.rmtree(tmp, ignore_errors=True)


def run_case(exe: str, name: str, argv: list[str]) -> dict[str, str]:
    """{output name: sha256} for one case (stdout, stderr, exit code and every file written)."""
    tmp = tempfile.mkdtemp(prefix="execsim-hash-")
    try:
        # the examples are copied in and named by a relative path, so that no checkout's path reaches
        # an output (plots draw the input's name into their pixels)
        shutil.copytree(EX, Path(tmp) / "ex")
        env = dict(os.environ, PYTHONHASHSEED="0", COLUMNS="120")
        p = subprocess.run([exe] + argv, cwd=tmp, capture_output=True, env=env)
        got = {"rc": hashlib.sha256(str(p.returncode).encode()).hexdigest()}
        is_json = "--json" in argv
        got["stdout"] = hashlib.sha256(_normalize("stdout.json" if is_json else "stdout", p.stdout, tmp)).hexdigest()
        got["stderr"] = hashlib.sha256(_normalize("stdout", p.stderr, tmp)).hexdigest()
        for path in sorted(Path(tmp).rglob("*")):
            if path.is_file() and path.relative_to(tmp).parts[0] != "ex":
                rel = str(path.relative_to(tmp))
                data = path.read_bytes()
                if rel.endswith(".gz"):
                    import gzip
                    data, rel = gzip.decompress(data), rel[:-3]
                got[rel] = hashlib.sha256(_normalize(rel, data, tmp)).hexdigest()
        return got
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--output", help="write the manifest here")
    ap.add_argument("--compare", metavar="MANIFEST", help="compare with a recorded manifest")
    ap.add_argument("--only", help="run only cases whose name contains this")
    ap.add_argument("--jobs", type=int, default=1, choices=range(1, 17), metavar="N",
                    help="cases run at once, 1 to 16 (default 1)")
    ap.add_argument("--exe", default=None, help="the execsim command (default: the one beside this Python)")
    args = ap.parse_args(argv)
    exe = args.exe or str(Path(sys.executable).parent / "execsim")
    exe = os.path.abspath(exe) if os.path.exists(exe) else (shutil.which("execsim") or "execsim")
    todo = [(name, case) for name, case in cases() if not args.only or args.only in name]

    def one(item):
        got = run_case(exe, *item)
        print(f"{item[0]}: done", file=sys.stderr)
        return got

    # each case is its own process: threads only wait on them (the manifest keeps the cases' order)
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(one, todo))
    lines = [f"{name}:{k} {h}" for (name, _), got in zip(todo, results) for k, h in sorted(got.items())]
    for key, h in sorted(graph_hashes().items()):
        if not args.only or args.only in key.split(":")[0]:
            lines.append(f"{key} {h}")
    text = "\n".join(lines) + "\n"
    if args.output:
        Path(args.output).write_text(text)
    rc = 0
    if args.compare:
        old = dict(ln.rsplit(" ", 1) for ln in Path(args.compare).read_text().splitlines() if ln)
        new = dict(ln.rsplit(" ", 1) for ln in lines)
        keys = sorted(set(old) | set(new))
        if args.only:
            keys = [k for k in keys if args.only in k.split(":")[0]]
        diff = [k for k in keys if old.get(k) != new.get(k)]
        for k in diff:
            print(f"DIFFERS {k}: {old.get(k, '-')[:12]} -> {new.get(k, '-')[:12]}")
        print(f"{len(keys) - len(diff)} of {len(keys)} outputs byte-identical")
        rc = 1 if diff else 0
    elif not args.output:
        sys.stdout.write(text)
    return rc


if __name__ == "__main__":
    sys.exit(main())
