"""The values of :mod:`strategies.pyrecipe`'s static reader (what a recipe's expressions evaluate to
besides plain Python data: :class:`Unknown`, :class:`Ref`, :class:`Node`), its bounds, the
:class:`Library` of names defined elsewhere, and the bounded parse of a recipe file."""
from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from strategies.errors import ConfigError


class ReturnSignal(Exception):
    """A ``return`` of the recipe, carrying its value up to the call (the evaluator's control flow)."""

    def __init__(self, value: Any):
        self.value = value


class UnresolvedSignal(Exception):
    """A value the evaluator cannot know at this point, carried up to where it is needed."""

    def __init__(self, value: Any):
        self.value = value


class BreakSignal(Exception):
    """A ``break`` of the recipe's loop."""


class ContinueSignal(Exception):
    """A ``continue`` of the recipe's loop."""

#: Largest recipe file read, bytes (the longest Megatron-Bridge recipe module is ~150 kB).
MAX_RECIPE_BYTES = 2 * 2 ** 20
#: Most AST nodes in one file (llama3.py of Megatron-Bridge: ~25,000).
MAX_AST_NODES = 300_000
#: Deepest chain of calls of recipe functions (and of expression nesting).
MAX_DEPTH = 48
#: Most expressions and statements evaluated for one import.
MAX_STEPS = 500_000
#: Longest string or list the reader builds (repetition, concatenation, range).
MAX_ITEMS = 100_000
#: Most files read (the recipe and the modules of its checkout it imports from).
MAX_FILES = 160
#: Most bytes read over all those files (a Bridge DeepSeek-V3 perf recipe with Megatron-core: 40 files, 0.9 MB).
MAX_TOTAL_BYTES = 24 * 2 ** 20


@dataclass
class Unknown:
    """A value the reader cannot know statically: what it is and the file:line that made it."""

    what: str
    where: str

    def __bool__(self) -> bool:  # pragma: no cover - conditions check for Unknown before truth
        raise ConfigError(f"{self.where}: {self.what} is not known without running the recipe")


@dataclass
class Ref:
    """A name defined outside the file (an import, a module attribute): its qualified name."""

    name: str


@dataclass
class Node:
    """A configuration object: ``run.Config(Cls, k=v)``, a dataclass built by a call, an imported
    helper's result. ``fields`` are the arguments given and attributes assigned later; ``defaults``
    what the library knows of the callee (read when a field is not set)."""

    target: str
    fields: dict
    where: str
    defaults: dict = field(default_factory=dict)
    args: tuple = ()
    known: bool = False
    """The callee is in the library (its defaults are known), or it is a library value."""
    phantom: bool = False
    """Made by reading a field nobody set of an object whose defaults are not known: it holds what
    the recipe assigns to it later, but its own value is unknown."""

    def get(self, name: str) -> Any:
        if name in self.fields:
            return self.fields[name]
        if name in self.defaults:
            v = self.defaults[name]
            v = materialise(v, self.where)
            self.fields[name] = v
            return v
        child = Node(f"{self.target}.{name}", {}, self.where, phantom=True)
        self.fields[name] = child
        return child


def short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def materialise(v: Any, where: str) -> Any:
    """A fresh copy of a library value: nested mappings with ``_target_`` become :class:`Node`s."""
    if isinstance(v, dict):
        if "_target_" in v:
            return Node(str(v["_target_"]), {}, where, {k: x for k, x in v.items() if k != "_target_"}, known=True)
        return {k: materialise(x, where) for k, x in v.items()}
    if isinstance(v, list):
        return [materialise(x, where) for x in v]
    return v


#: Most values :func:`plain` writes out (a recipe may share one list many times over)
MAX_PLAIN_ITEMS = 1_000_000


def plain(v: Any, _depth: int = 0, _budget: list | None = None) -> Any:
    """``v`` as plain data: a Node becomes a dict of its fields and defaults with ``_target_``
    (as Megatron-Bridge saves a ConfigContainer), ``_args_`` (positional arguments), ``_known_``
    (the library knows the callee) and ``_opaque_`` (the file:line of an unknown function's result,
    whose unset fields are unknown); Unknown and Ref stay as they are."""
    budget = _budget if _budget is not None else [MAX_PLAIN_ITEMS]
    budget[0] -= 1
    if _depth > MAX_DEPTH or budget[0] < 0:
        raise ConfigError(f"recipe: the configuration nests deeper than {MAX_DEPTH} levels or holds more than "
                          f"{MAX_PLAIN_ITEMS} values")
    if isinstance(v, Node):
        if v.phantom and not v.fields and not v.args:
            return Unknown(f"{short(v.target.rsplit('.', 1)[0])}.{short(v.target)}", v.where)
        out: dict = {"_target_": v.target}
        if v.args:
            out["_args_"] = plain(list(v.args), _depth + 1, budget)
        if v.known:
            out["_known_"] = True
        if v.phantom:
            out["_opaque_"] = v.where
        for k in list(v.defaults) + [k for k in v.fields if k not in v.defaults]:
            out[k] = plain(v.get(k), _depth + 1, budget)
        return out
    if isinstance(v, dict):
        return {k: plain(x, _depth + 1, budget) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [plain(x, _depth + 1, budget) for x in v]
    return v


class Library:
    """What the reader knows of names defined elsewhere: ``lookup(qualified name)`` gives a table
    entry (a mapping: ``returns`` for a function's result, ``fields`` for a class's defaults,
    ``value`` for a constant) or None."""

    def __init__(self, table: dict | None = None):
        self.table = table or {}

    def lookup(self, name: str) -> dict | None:
        if name in self.table:
            return self.table[name]
        two = ".".join(name.split(".")[-2:])
        return self.table.get(two) if two in self.table else self.table.get(short(name))


def parse_recipe(text: str, path: str) -> ast.Module:
    """The AST of ``text``, refused when the file or its tree is over the bounds."""
    if len(text.encode("utf-8", "replace")) > MAX_RECIPE_BYTES:
        raise ConfigError(f"{path}: {len(text)} characters is over the {MAX_RECIPE_BYTES // 2 ** 20} MiB a recipe "
                          f"file may have; give the recipe's own file")
    if text.count("(") + text.count("[") + text.count("{") > MAX_AST_NODES:
        raise ConfigError(f"{path}: more than {MAX_AST_NODES} brackets: not a recipe execsim reads")
    try:
        depth = 0
        for ch in text:          # the parser recurses on nesting: bound it before parsing
            if ch in "([{":
                depth += 1
                if depth > 2 * MAX_DEPTH:
                    raise ConfigError(f"{path}: brackets nest deeper than {2 * MAX_DEPTH} levels: not a recipe "
                                      f"execsim reads")
            elif ch in ")]}":
                depth = max(0, depth - 1)
        tree = ast.parse(text, filename=path)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        line = getattr(exc, "lineno", None)
        raise ConfigError(f"{path}{':' + str(line) if line else ''}: not valid Python "
                          f"({str(getattr(exc, 'msg', exc))[:120]}); give the recipe's .py file") from None
    n = sum(1 for _ in ast.walk(tree))
    if n > MAX_AST_NODES:
        raise ConfigError(f"{path}: {n} syntax nodes is over the {MAX_AST_NODES} a recipe file may have")
    return tree


# ------------------------------------------------------------------ what the reader applies
BINOPS: dict[type, Callable] = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
                                 ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
                                 ast.Pow: operator.pow}
CMPOPS: dict[type, Callable] = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt,
                                 ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
                                 ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
                                 ast.Is: lambda a, b: a is b, ast.IsNot: lambda a, b: a is not b}
#: pure str methods the reader applies
STR_METHODS = ("lower", "upper", "strip", "lstrip", "rstrip", "startswith", "endswith", "split", "title",
                "isdigit", "join")
#: builtins the reader applies (all pure and bounded)
def scalar_builtin(fn: Callable) -> Callable:
    """``fn`` on numbers and strings only (``str`` of a nested list could be any size)."""
    def call(*a):
        if not all(isinstance(x, (int, float, str, bool)) or x is None for x in a):
            raise TypeError(f"{fn.__name__}() of a {type(a[0]).__name__} is not evaluated statically")
        return fn(*a)
    call.wrapped = fn  # type: ignore[attr-defined]
    return call


def numbers_sum(seq, start=0):
    if not all(isinstance(x, (int, float)) for x in list(seq) + [start]):
        raise TypeError("sum() of anything but numbers is not evaluated statically")
    return sum(seq, start)


BUILTINS: dict[str, Callable] = {"int": scalar_builtin(int), "float": scalar_builtin(float), "str": scalar_builtin(str),
                                  "bool": bool, "abs": abs, "min": min,
                                  "max": max, "round": round, "len": len, "sum": numbers_sum, "list": list, "tuple": tuple,
                                  "dict": dict, "sorted": sorted, "isinstance": None, "type": None, "hasattr": None,
                                  "getattr": None, "range": None, "print": None, "enumerate": None, "zip": None}


def bounded(v: Any, where: str) -> Any:
    if isinstance(v, (str, list, tuple, dict)) and len(v) > MAX_ITEMS:
        raise ConfigError(f"{where}: builds a value of {len(v)} items, over the {MAX_ITEMS} a recipe may; "
                          f"give the setting with --set")
    if isinstance(v, int) and not isinstance(v, bool) and abs(v) > 2 ** 63:
        raise ConfigError(f"{where}: an integer over 2^63: not a setting execsim reads")
    return v


def builtin_method(obj: Any, name: str, args: list, kwargs: dict, where: str) -> Any:
    """list/dict/str methods the reader applies; NotImplemented for anything else."""
    if isinstance(obj, list) and name in ("append", "extend", "insert") and not kwargs:
        if name == "append" and len(args) == 1:
            obj.append(args[0])
        elif name == "extend" and len(args) == 1 and isinstance(args[0], (list, tuple)):
            obj.extend(args[0])
        elif name == "insert" and len(args) == 2 and isinstance(args[0], int):
            obj.insert(args[0], args[1])
        else:
            return Unknown(f"list.{name}", where)
        bounded(obj, where)
        return None
    if isinstance(obj, dict) and name in ("get", "update", "setdefault", "pop", "copy", "keys", "values", "items"):
        if name == "update" and len(args) <= 1:
            obj.update(args[0] if args else {}, **kwargs)
            return None
        if name in ("keys", "values", "items", "copy"):
            return list(getattr(obj, name)()) if name != "copy" else dict(obj)
        if args and isinstance(args[0], (str, int, float, bool, type(None))):
            return getattr(obj, name)(*args[:2])
        return Unknown(f"dict.{name}", where)
    if isinstance(obj, str) and name in STR_METHODS:
        if any(isinstance(a, (Unknown, Ref, Node)) for a in list(args) + list(kwargs.values())):
            return Unknown(f"str.{name}", where)
        if name == "join" and (len(args) != 1 or not isinstance(args[0], (list, tuple)) or not all(
                isinstance(x, str) for x in args[0]) or sum(map(len, args[0])) + len(obj) * len(args[0]) > MAX_ITEMS):
            return Unknown("str.join of values that are not short strings", where)
        try:
            return bounded(getattr(obj, name)(*args, **kwargs), where)
        except (TypeError, ValueError, IndexError, KeyError) as exc:
            raise ConfigError(f"{where}: {str(exc)[:160]}") from None
    return NotImplemented


# the reader's records of what it has read (strategies/pyrecipe.py evaluates with them)
@dataclass
class FuncDef:
    node: ast.FunctionDef
    module: Module


@dataclass
class ClassInfo:
    """A class defined in a file the reader has read (its dataclass field defaults are read from it)."""

    node: ast.ClassDef
    module: Module
    qualname: str


@dataclass
class Module:
    path: str
    tree: ast.Module
    scope: dict
    source_dir: Path | None
