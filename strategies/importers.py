"""Strategy files from the configurations people already have: a Megatron-LM launch script, a NeMo
(1.x / NeMo-Framework-Launcher) YAML recipe, a torchtitan TOML file, a NeMo AutoModel YAML recipe.

Each importer is one function in :data:`IMPORTERS` that maps the source's flags or keys to a strategy
mapping (the schema of :mod:`strategies.strategy_file`) and returns an :class:`Imported` with the
flags/keys it read but does not model (the CLI prints them in one warning line; nothing is dropped
silently). Contradictory settings raise one :class:`ConfigError` naming both. The cluster comes from
the caller (``cluster``, ``nodes``), or from the source where it says (``torchrun --nnodes``, NeMo
``trainer.num_nodes``).

Sources of the flag meanings: Megatron-LM ``megatron/training/arguments.py`` (flag names, defaults
such as ``--ffn-hidden-size`` = 4h, or 8h/3 rounded down to a multiple of 64 with ``--swiglu``;
``--overlap-grad-reduce`` / ``--overlap-param-gather`` off unless given); NeMo 1.x
``examples/nlp/language_modeling/conf/megatron_gpt_config.yaml`` and the NeMo-Framework-Launcher
``conf/training/*`` recipes; torchtitan ``torchtitan/config/job_config.py`` and
``torchtitan/models/llama3/train_configs/*.toml``.

>>> imp = import_config("megatron", "--tensor-model-parallel-size 2 --num-layers 4 --hidden-size 256 "
...     "--num-attention-heads 8 --seq-length 512 --micro-batch-size 1 --global-batch-size 8 --vocab-size 1000 "
...     "--bf16 --lr 3e-4", cluster="dgx-h100", nodes=1)
>>> imp.strategy["parallel"]["tp"], imp.strategy["training"]["precision"], imp.unmodeled
(2, 'bf16', ('--lr',))
"""

from collections.abc import Callable
from typing import Any

from strategies.config import did_you_mean
from strategies.errors import ConfigError
from strategies.import_automodel import import_automodel
from strategies.import_common import TOKENIZER_VOCAB, Imported  # noqa: F401  (re-exported)
from strategies.import_megatron import import_megatron
from strategies.import_nemo import import_nemo
from strategies.import_torchtitan import TORCHTITAN_FLAVORS, TORCHTITAN_SCHEDULES, import_torchtitan  # noqa: F401

#: source kind -> importer (text or mapping in, Imported out)
IMPORTERS: dict[str, Callable[..., Imported]] = {"megatron": import_megatron, "nemo": import_nemo,
                                                  "torchtitan": import_torchtitan, "automodel": import_automodel}
#: every kind ``execsim import`` takes: the importers above, and Megatron-Bridge (Python recipes and
#: saved ConfigContainer YAML, :mod:`strategies.import_pyrecipe`)
IMPORT_KINDS = ("megatron", "nemo", "torchtitan", "bridge", "automodel")


def parse_source(kind: str, text: str) -> Any:
    """The importer's input from file text: the raw text (megatron), YAML (nemo, automodel) or TOML (torchtitan)."""
    if kind == "megatron":
        return text
    if kind == "nemo":
        from strategies.documents import parse_document  # duplicate keys, non-finite numbers refused
        head = text.lstrip()[:4000]
        if head.startswith(("import ", "from ", "def ", "#!/usr/bin/env python")) or "nemo_run" in head \
                or "from nemo.collections.llm" in head:
            raise ConfigError("nemo recipe: this is a NeMo 2 Python recipe (nemo.collections.llm / NeMo-Run); "
                              "execsim reads NeMo 1 / NeMo-Framework-Launcher YAML recipes, because a NeMo 2 "
                              "recipe is a program whose settings exist only when it runs: not supported. Write "
                              "its settings as a strategy file, or use the launcher's YAML")
        return parse_document(text, "nemo recipe")
    if kind == "automodel":   # NeMo AutoModel YAML: read as data, its _target_ callables never run
        from strategies.documents import parse_document
        return parse_document(text, "automodel recipe")
    from strategies.import_torchtitan import parse_torchtitan  # a TOML, or the job config a run logged
    return parse_torchtitan(text)


def is_python(text: str, origin: str | None = None) -> bool:
    """A Python recipe (``.py``, or text that starts as a Python module does)."""
    if origin and str(origin).endswith(".py"):
        return True
    import re
    return re.search(r"^(import [\w.]+|from [\w.]+ import |def \w+\()", text[:20000], re.MULTILINE) is not None


def import_config(kind: str, source: Any, *, cluster: str | None = None, nodes: int | None = None,
                  vocab: int | None = None, env: dict | None = None, base_dir: str | None = None,
                  sets: dict | None = None, recipe: str | None = None, origin: str | None = None) -> Imported:
    """Run the importer for ``kind`` on ``source`` (text, or the parsed mapping for nemo/torchtitan).

    ``env``: values for variables a Megatron script leaves to the environment (``--env NAME=VALUE``).
    ``base_dir``: the source's folder, where torchtitan's ``hf_assets_path`` is looked up and a Python
    recipe's imports of its own checkout are read. ``sets``: ``--set KEY=VALUE`` (a recipe argument or
    a dotted field; for YAML/TOML/scripts a dotted key of the parsed source). ``recipe``: the Python
    recipe function (``--recipe``). ``origin``: the file name."""
    if kind == "bridge" or (kind == "nemo" and isinstance(source, str) and is_python(source, origin)):
        return import_recipe_source(kind, source, cluster=cluster, nodes=nodes, vocab=vocab, env=env,
                                    base_dir=base_dir, sets=sets, recipe=recipe, origin=origin)
    if kind == "torchtitan" and isinstance(source, str) and is_python(source, origin):
        from strategies.import_titan_registry import import_titan_registry
        if env:
            raise ConfigError("--env sets shell variables of a Megatron launch script; a torchtitan registry has "
                              "none: use --set KEY=VALUE")
        return import_titan_registry(source, path=origin or "config_registry.py", config=recipe, cluster=cluster,
                                     nodes=nodes, vocab=vocab, sets=sets, base_dir=base_dir)
    if recipe is not None:
        raise ConfigError(f"--recipe names a function of a Python recipe; a {kind} source has none: drop it")
    if sets and kind in ("nemo", "torchtitan", "automodel"):
        from strategies.import_pyrecipe import apply_sets
        source = parse_source(kind, source) if isinstance(source, str) else dict(source)
        apply_sets(source, dotted_sets(sets, kind), origin or kind)
    elif sets:
        raise ConfigError("--set sets fields of a configuration file or Python recipe; a Megatron launch script's "
                          "values are its flags and variables: use --env NAME=VALUE")
    if kind not in IMPORTERS:
        raise ConfigError(f"import kind {kind!r} is not one of {', '.join(IMPORTERS)}{did_you_mean(kind, IMPORTERS)}")
    if env and kind != "megatron":
        raise ConfigError(f"--env sets shell variables of a Megatron launch script; a {kind} source has none: drop it")
    if isinstance(source, str) and kind != "megatron":
        source = parse_source(kind, source)
    if kind == "megatron":
        return import_megatron(source, cluster=cluster, nodes=nodes, vocab=vocab, env=env)
    if kind == "torchtitan":
        return import_torchtitan(source, cluster=cluster, nodes=nodes, vocab=vocab, base_dir=base_dir)
    return IMPORTERS[kind](source, cluster=cluster, nodes=nodes, vocab=vocab)


def dotted_sets(sets: dict, kind: str) -> dict:
    bad = [k for k in sets if "." not in k]
    if bad:
        raise ConfigError(f"--set {bad[0]}: a {kind} file is set by dotted key (e.g. --set "
                          f"{'model.micro_batch_size' if kind == 'nemo' else 'training.local_batch_size'}=2)")
    return sets


def import_recipe_source(kind: str, source: Any, *, cluster, nodes, vocab, env, base_dir, sets, recipe,
                         origin) -> Imported:
    """NeMo 2 / Megatron-Bridge Python recipes and Bridge's saved ConfigContainer YAML."""
    from strategies.import_pyrecipe import import_bridge_yaml, import_python_recipe
    if env:
        raise ConfigError(f"--env sets shell variables of a Megatron launch script; a {kind} recipe has none: "
                          f"use --set KEY=VALUE")
    if isinstance(source, str) and is_python(source, origin):
        return import_python_recipe(kind, source, path=origin or f"{kind} recipe", function=recipe, cluster=cluster,
                                    nodes=nodes, vocab=vocab, sets=sets, source_dir=base_dir)
    if recipe is not None:
        raise ConfigError("--recipe names a function of a Python recipe; a saved ConfigContainer YAML has none: drop it")
    if isinstance(source, str):
        from strategies.documents import parse_document
        source = parse_document(source, origin or "bridge config")
    return import_bridge_yaml(source, path=origin or "run_config.yaml", cluster=cluster, nodes=nodes, vocab=vocab,
                              sets=sets)
