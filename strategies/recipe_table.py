"""The shipped table of framework defaults Python recipes leave out (``strategies/data/recipe_defaults.yaml``):
model config classes, helper functions and constants of NeMo 2 and Megatron-Bridge, each citing its
repository file, line and commit. Read once; :func:`recipe_library` gives the evaluator's view."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from strategies.errors import ConfigError
from strategies.pyrecipe import Library

TABLE_PATH = Path(__file__).parent / "data" / "recipe_defaults.yaml"


@lru_cache(maxsize=1)
def recipe_table() -> dict:
    """The table as a mapping: ``version``, ``sources`` (name -> repository, commit), ``entries``."""
    import yaml
    data = yaml.safe_load(TABLE_PATH.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or data.get("version") != 1 or not isinstance(data.get("entries"), dict):
        raise ConfigError(f"{TABLE_PATH.name}: not a version-1 recipe defaults table (reinstall execsim)")
    for name, entry in data["entries"].items():
        if entry.get("source") not in data["sources"] or not entry.get("cite"):
            raise ConfigError(f"{TABLE_PATH.name}: entry {name} must name a source and cite its file and line")
    return data


def recipe_library() -> Library:
    return Library(recipe_table()["entries"])


def framework_commit(framework: str) -> str:
    """'repository@commit' of the table's values for ``framework`` ('nemo' or 'bridge')."""
    src = recipe_table()["sources"][framework]
    return f"{src['repository']}@{src['commit'][:12]}"
