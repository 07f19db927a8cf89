"""``execsim import``: a strategy file from a Megatron-LM script, a NeMo recipe, a torchtitan TOML or a NeMo
AutoModel recipe."""
from __future__ import annotations

import sys
from pathlib import Path

from simulator.cli.common import add_command, check_command_outputs, import_source
from strategies.errors import ExecsimError, brief


def add_parser(sub) -> None:
    s = add_command(sub, "import", "write a strategy file from a Megatron-LM launch script, a NeMo recipe, a torchtitan TOML "
                "or a NeMo AutoModel recipe",
             ["execsim import megatron train_gpt3_175b_distributed.sh --cluster dgx-a100-80g --nodes 128 -o gpt3.yaml",
              "execsim import nemo nemo_llama3_8b.yaml --cluster dgx-h100 -o s.yaml",
              "execsim import torchtitan torchtitan_llama3_8b.toml --cluster dgx-h100 --nodes 1",
              "execsim import automodel automodel_qwen3_moe_30b_te_deepep.yaml --cluster dgx-h100"])
    s.add_argument("kind", choices=("megatron", "nemo", "torchtitan", "bridge", "automodel"),
                   help="what SOURCE is (nemo: a launcher YAML or a NeMo 2 recipe .py; bridge: a Megatron-Bridge "
                        "recipe .py or its saved run_config.yaml; automodel: a NeMo AutoModel YAML recipe)")
    s.add_argument("source", type=import_source,
                   help="the file (or the name of a shipped source, strategies/examples/sources/), or - for "
                        "standard input (megatron: a launch script, the "
                   "pretrain_gpt.py arguments, or a training log with its argument dump)")
    s.add_argument("-o", "--output", metavar="OUT.yaml", help="write the strategy here (default: standard output)")
    s.add_argument("--cluster", metavar="PRESET", help="cluster preset, e.g. dgx-h100 or dgx-a100-80g (required: "
                   "launch scripts and recipes do not name the hardware)")
    s.add_argument("--nodes", type=int, help="number of nodes (default: from the source where it says)")
    s.add_argument("--vocab", type=int, help="vocabulary size when the source's tokenizer does not tell it")
    s.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                   help="megatron: a shell variable the script leaves to the environment (or a positional "
                        "argument: --env 1=VALUE); repeatable")
    s.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="sets",
                   help="a value the source leaves open or that you change: a Python recipe function's argument "
                        "(--set num_nodes=4) or a dotted field of the configuration (--set "
                        "model.num_layers=80, trainer.strategy.tensor_model_parallel_size=8); repeatable")
    s.add_argument("--recipe", "--config", metavar="FUNCTION", dest="recipe",
                   help="nemo/bridge Python recipe: the function to read (default: pretrain_recipe, or the file's "
                        "only pretraining *_config function); torchtitan config_registry.py: the job (--config NAME)")
    s.set_defaults(func=_import_cmd)



def _import_cmd(args) -> int:
    from simulator.simulation.importing import import_strategy, summary
    if args.source == "-":
        text, origin = sys.stdin.read(), "standard input"
    else:
        from strategies.documents import read_text
        path = Path(args.source)
        if not path.is_file():
            raise ExecsimError(f"import source {brief(args.source)} is not a file: give the path of the "
                               f"{args.kind} configuration, or - for standard input")
        text = read_text(path, f"import source {path.name}")
        origin = path.name
    env = {}
    for item in args.env:
        name, eq, value = item.partition("=")
        if not eq or not (name.isidentifier() or name.isdigit()):
            raise ExecsimError(f"--env {brief(item)} must be NAME=VALUE (a shell variable name or a positional "
                               f"argument number), e.g. --env TP=8")
        env[name] = value
    sets = {}
    for item in args.sets:
        key, eq, value = item.partition("=")
        if not eq or not key or not all(p.isidentifier() for p in key.split(".")):
            raise ExecsimError(f"--set {brief(item)} must be KEY=VALUE (a recipe argument or a dotted field), "
                               f"e.g. --set num_nodes=4 or --set train.global_batch_size=256")
        if key in sets:
            raise ExecsimError(f"--set {key} is given twice; keep one")
        from strategies.config import parse_set_value  # non-finite numbers refused, as simulate's --set
        sets[key] = parse_set_value(value, key)
    outs = check_command_outputs(args, [] if args.source == "-" else [args.source], output=args.output)
    out, imp = import_strategy(args.kind, text, origin=origin, cluster=args.cluster, nodes=args.nodes,
                               vocab=args.vocab, env=env, sets=sets, recipe=args.recipe,
                               base_dir=None if args.source == "-" else str(Path(args.source).parent))
    # files the source points to (torchtitan's hf_assets_path) or that a recipe's checkout gave on the way
    extra = list(imp.inputs) + list(imp.strategy.get("_inputs") or ())
    if extra:
        outs = check_command_outputs(args, ([] if args.source == "-" else [args.source]) + extra, output=args.output)
    if imp.unmodeled:
        print(f"execsim: warning: {summary(imp)}", file=sys.stderr)
    from simulator.simulation.importing import measured_vs_simulated
    measured = measured_vs_simulated(out, imp)     # a Megatron log reporting its iteration times
    if outs.get("--output"):
        from simulator.outputs.files import write_output
        write_output(outs["--output"], out, "--output")
        print(f"strategy written to {args.output} (execsim simulate {args.output})")
        if measured:
            print(measured)
    else:
        sys.stdout.write(out if not measured else out + f"# {measured}\n")
    return 0
