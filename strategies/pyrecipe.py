"""A bounded static reader of Python recipe files (NeMo 2, Megatron-Bridge, torchtitan): it follows a
recipe function's assignments, calls, keyword defaults and attribute assignments with :mod:`ast` and
never imports, compiles or runs the file.

What it evaluates: literals, names, f-strings, dict/list/tuple literals (``**`` spreads included),
arithmetic and comparisons on numbers and strings, ``and``/``or``/``not``, conditional expressions,
subscripts, calls of functions defined in the file (positional, keyword and default arguments,
``*args``/``**kwargs``), ``if`` on conditions it can resolve, ``for`` over known lists, ``return``,
``raise`` (one error), attribute assignment on config objects (``recipe.trainer.strategy.tp = 4``),
``list.append/extend``, ``dict.get/update`` and a few pure ``str`` methods. A call of anything
defined elsewhere (``run.Config(Cls, k=v)``, ``run.Partial(fn, ...)``, ``ConfigContainer(...)``, an
imported helper) makes a :class:`Node`: the callee's name and the arguments, with the defaults a
:class:`Library` supplies (the shipped table of framework defaults, or a module of the same checkout
read the same way). Nothing of the user's file is ever executed: ``__import__``, ``os.system`` or
``eval`` are just names whose call makes an inert node nobody reads.

Anything it cannot know is an :class:`Unknown` carrying the file:line that made it; it becomes an
error only where a value is needed (a condition, a field the importer reads), and that error names
the line and the ``--set KEY=VALUE`` that supplies the value.

Work is bounded before and during evaluation: file size (:data:`MAX_RECIPE_BYTES`), AST nodes
(:data:`MAX_AST_NODES`), call depth (:data:`MAX_DEPTH`), evaluation steps (:data:`MAX_STEPS`), the size
of strings and lists built (:data:`MAX_ITEMS`) and the files read (:data:`MAX_FILES`).

>>> src = '''
... import nemo_run as run
... def trainer(tp: int = 2, nodes: int = 1):
...     return run.Config(Trainer, num_nodes=nodes, strategy=run.Config(Strategy, tensor_model_parallel_size=tp))
... def recipe(num_nodes: int = 4):
...     r = run.Partial(pretrain, trainer=trainer(nodes=num_nodes))
...     r.trainer.strategy.tensor_model_parallel_size *= 4
...     return r
... '''
>>> from strategies.pyrecipe_values import plain
>>> tree = plain(evaluate_recipe(src, "r.py", "recipe"))
>>> tree["trainer"]["num_nodes"], tree["trainer"]["strategy"]["tensor_model_parallel_size"]
(4, 8)
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from strategies.errors import ConfigError
from strategies.pyrecipe_values import (
    BINOPS,
    BUILTINS,
    CMPOPS,
    MAX_DEPTH,
    MAX_FILES,
    MAX_ITEMS,
    MAX_RECIPE_BYTES,
    MAX_STEPS,
    MAX_TOTAL_BYTES,
    BreakSignal,
    ClassInfo,
    ContinueSignal,
    FuncDef,
    Library,
    Module,
    Node,
    Ref,
    ReturnSignal,
    Unknown,
    UnresolvedSignal,
    bounded,
    builtin_method,
    materialise,
    parse_recipe,
    short,
)


class RecipeRaise(ConfigError):
    """A ``raise`` statement of the recipe reached: an error unless a ``try`` of the recipe handles it."""


class Evaluator:
    """Evaluates recipe functions statically (see the module doc). One per import: it counts the
    steps and files of the whole import."""

    def __init__(self, library: Library | None = None, overrides: dict | None = None):
        self.library = library or Library()
        self.overrides = dict(overrides or {})
        self.steps = 0
        self.depth = 0
        self.files: dict[str, Module] = {}
        self.resolved: dict[str, Any] = {}
        self.bytes_read = 0

    # ------------------------------------------------------------------ modules
    def load_module(self, text: str, path: str, source_dir: Path | None = None) -> Module:
        if len(self.files) >= MAX_FILES:
            raise ConfigError(f"{path}: the recipe imports from more than {MAX_FILES} files of its checkout")
        self.bytes_read += len(text)
        if self.bytes_read > MAX_TOTAL_BYTES:
            raise ConfigError(f"{path}: the recipe and the files of its checkout it imports from are over "
                              f"{MAX_TOTAL_BYTES // 2 ** 20} MiB together; give the settings with --set")
        mod = Module(path, parse_recipe(text, path), {}, source_dir)
        self.files[path] = mod
        for st in mod.tree.body:
            self.module_statement(st, mod)
        return mod

    def module_statement(self, st: ast.stmt, mod: Module) -> None:
        """Top level: imports, function definitions and constants; anything else is not run."""
        if isinstance(st, (ast.Import, ast.ImportFrom)):
            self.bind_import(st, mod.scope)
        elif isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
            mod.scope[st.name] = FuncDef(st, mod)
        elif isinstance(st, ast.ClassDef):
            mod.scope[st.name] = ClassInfo(st, mod, st.name)
        elif isinstance(st, (ast.Assign, ast.AnnAssign)) and st.value is not None:
            try:
                value = self.expr(st.value, mod.scope, mod)
            except ConfigError as exc:   # a constant the reader cannot compute: an error only if read
                value = Unknown(f"{ast.unparse(st.value)[:60]} ({exc})"[:200], self.where(st, mod))
            targets = st.targets if isinstance(st, ast.Assign) else [st.target]
            for t in targets:
                if isinstance(t, ast.Name):
                    mod.scope[t.id] = value

    def bind_import(self, st: ast.stmt, scope: dict) -> None:
        if isinstance(st, ast.Import):
            for a in st.names:
                scope[a.asname or a.name.split(".")[0]] = Ref(a.name if a.asname else a.name.split(".")[0])
            return
        base = "." * st.level + (st.module or "")
        for a in st.names:
            if a.name != "*":
                scope[a.asname or a.name] = Ref(f"{base}.{a.name}" if base else a.name)

    def where(self, node: ast.AST, mod: Module) -> str:
        return f"{Path(mod.path).name}:{getattr(node, 'lineno', '?')}"

    def tick(self, node: ast.AST, mod: Module) -> None:
        self.steps += 1
        if self.steps > MAX_STEPS:
            raise ConfigError(f"{self.where(node, mod)}: reading the recipe took more than {MAX_STEPS} steps "
                              f"(a loop or recursion execsim does not follow); give the settings with --set")

    # ------------------------------------------------------------------ calls
    def call_function(self, fn: FuncDef, args: list, kwargs: dict, where: str) -> Any:
        """Run ``fn``'s body statically with the arguments bound (defaults from its signature)."""
        if self.depth >= MAX_DEPTH:
            raise ConfigError(f"{where}: calls nest deeper than {MAX_DEPTH} (recursion?); give the settings with --set")
        scope = dict(fn.module.scope)
        self.bind_arguments(fn, args, kwargs, scope, where)
        self.depth += 1
        try:
            self.block(fn.node.body, scope, fn.module)
        except ReturnSignal as r:
            return r.value
        finally:
            self.depth -= 1
        return None

    def bind_arguments(self, fn: FuncDef, args: list, kwargs: dict, scope: dict, where: str) -> None:
        a, mod = fn.node.args, fn.module
        params = a.posonlyargs + a.args
        defaults = [None] * (len(params) - len(a.defaults)) + list(a.defaults)
        kwargs = dict(kwargs)
        for i, p in enumerate(params):
            if i < len(args):
                scope[p.arg] = args[i]
            elif p.arg in kwargs:
                scope[p.arg] = kwargs.pop(p.arg)
            elif defaults[i] is not None:
                scope[p.arg] = self.expr(defaults[i], fn.module.scope, mod)
            else:
                scope[p.arg] = Unknown(f"argument {p.arg} of {fn.node.name}()", where)
        if a.vararg:
            scope[a.vararg.arg] = tuple(args[len(params):])
        for p, d in zip(a.kwonlyargs, a.kw_defaults):
            if p.arg in kwargs:
                scope[p.arg] = kwargs.pop(p.arg)
            else:
                scope[p.arg] = self.expr(d, fn.module.scope, mod) if d is not None else \
                    Unknown(f"argument {p.arg} of {fn.node.name}()", where)
        if a.kwarg:
            scope[a.kwarg.arg] = kwargs
        elif kwargs:
            raise ConfigError(f"{where}: {fn.node.name}() has no argument {next(iter(kwargs))!r}")

    def call(self, node: ast.Call, scope: dict, mod: Module) -> Any:
        where = self.where(node, mod)
        args: list = []
        for a in node.args:
            if isinstance(a, ast.Starred):
                v = self.expr(a.value, scope, mod)
                args += list(v) if isinstance(v, (list, tuple)) else [Unknown(ast.unparse(a)[:60], where)]
            else:
                args.append(self.expr(a, scope, mod))
        kwargs: dict = {}
        for k in node.keywords:
            v = self.expr(k.value, scope, mod)
            if k.arg is None:
                if isinstance(v, dict):
                    kwargs.update(v)
                elif isinstance(v, Node):
                    kwargs.update({x: v.get(x) for x in list(v.defaults) + list(v.fields)})
            else:
                kwargs[k.arg] = v
        if isinstance(node.func, ast.Attribute):
            obj = self.expr(node.func.value, scope, mod)
            method = builtin_method(obj, node.func.attr, args, kwargs, where)
            if method is not NotImplemented:
                return method
            if isinstance(obj, Node):     # a method of a configuration object: the library says what it gives
                entry = self.library.lookup(f"{short(obj.target)}.{node.func.attr}")
                if entry is not None and entry.get("returns") == "self":
                    return obj
                return Unknown(f"{short(obj.target)}.{node.func.attr}()", where)
            fn = self.attribute(obj, node.func.attr, where)
        else:
            fn = self.expr(node.func, scope, mod)
        return self.apply(fn, args, kwargs, where, node)

    def apply(self, fn: Any, args: list, kwargs: dict, where: str, node: ast.AST | None = None) -> Any:
        if isinstance(fn, FuncDef):
            return self.call_function(fn, args, kwargs, where)
        if isinstance(fn, ClassInfo):
            return self.construct(fn, args, kwargs, where)
        if isinstance(fn, Node):      # a config object called (e.g. a provider's .get_model_config())
            return Unknown(f"a call of {short(fn.target)}", where)
        if callable(fn):
            if any(isinstance(a, (Unknown, Ref, Node)) for a in list(args) + list(kwargs.values())) \
                    and getattr(fn, "__name__", "") not in ("<lambda>",):
                u = next((a for a in list(args) + list(kwargs.values()) if isinstance(a, Unknown)), None)
                return u or Unknown(f"{getattr(fn, '__name__', 'a builtin')}() of a configuration object", where)
            try:
                out = fn(*args, **kwargs)
            except (TypeError, ValueError, ArithmeticError) as exc:
                raise ConfigError(f"{where}: {str(exc)[:160]}") from None
            return bounded(out, where)
        if isinstance(fn, Ref):
            return self.external(fn.name, args, kwargs, where)
        return Unknown(f"a call of {ast.unparse(node.func)[:60] if isinstance(node, ast.Call) else fn!r}", where)

    def external(self, name: str, args: list, kwargs: dict, where: str) -> Any:
        """A call of something defined elsewhere: nemo_run's Config/Partial, a function of the same
        checkout (read the same way), a table entry, or an inert :class:`Node`."""
        if short(name) in ("Config", "Partial") and name.split(".")[0] in ("nemo_run", "run"):
            if not args:
                raise ConfigError(f"{where}: run.{short(name)}() needs the class or function it configures")
            target = args[0]
            if isinstance(target, Ref):
                found = self.resolve_in_checkout(target.name, where)
                target = found if isinstance(found, ClassInfo) else target
            if isinstance(target, ClassInfo):
                return self.construct(target, list(args[1:]), kwargs, where)
            tname = target.name if isinstance(target, Ref) else \
                target.node.name if isinstance(target, FuncDef) else str(target)
            entry = self.library.lookup(tname) or {}
            return Node(tname, dict(kwargs), where, dict(entry.get("fields", {})), tuple(args[1:]),
                        known=bool(entry))
        fn = self.resolve_in_checkout(name, where)
        if isinstance(fn, FuncDef):
            return self.apply(fn, args, kwargs, where)
        if isinstance(fn, ClassInfo):
            return self.construct(fn, args, kwargs, where)
        entry = self.library.lookup(name)
        if entry is not None and "returns" in entry:
            key = entry.get("by_argument")
            if key is not None:      # a factory keyed by its first argument (get_mixed_precision_config("..."))
                choice = args[0] if args else kwargs.get(key)
                table = entry["returns"]
                if isinstance(choice, str) and choice in table:
                    return self.with_base(materialise(table[choice], where), where)
                return Unknown(f"{short(name)}({str(choice)[:60]!r}), which execsim's table of framework "
                               f"defaults does not know", where)
            return self.with_base(materialise(entry["returns"], where), where)
        fields = dict(entry.get("fields", {})) if entry else {}
        # an unknown function's result (lower-case name) is not known, though it may hold what the recipe
        # assigns to it later; an object built by a class (CapWords) is a configuration object
        return Node(name, dict(kwargs), where, fields, tuple(args), known=entry is not None,
                    phantom=entry is None and not short(name)[:1].isupper())

    def resolve_in_checkout(self, name: str, where: str) -> Any:
        """A function or constant ``pkg.mod.name`` defined in a file of the recipe's own checkout (the
        recipe lies inside ``.../pkg/mod.py``'s tree) or of an installed package (a ``sys.path``
        folder): read statically like the recipe, never imported."""
        if name in self.resolved:
            return self.resolved[name]
        self.resolved[name] = None          # a cycle of re-exports resolves to nothing
        out = self.find_in_sources(name, where)
        self.resolved[name] = out
        return out

    def search_dirs(self) -> list:
        first = next(iter(self.files.values()), None)
        dirs = [first.source_dir, *first.source_dir.parents][:12] if first and first.source_dir else []
        import sys
        import sysconfig
        stdlib = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib")}   # never holds a recipe's helpers
        return dirs + [Path(p) for p in sys.path[:64] if p and not p.endswith(".zip") and "lib-dynload" not in p
                       and p not in stdlib]

    def find_in_sources(self, name: str, where: str) -> Any:
        parts = name.lstrip(".").split(".")
        if len(parts) < 2 or not self.files or not all(p.isidentifier() for p in parts):
            return None
        mod_parts, attr = parts[:-1], parts[-1]
        for base in self.search_dirs():
            for cand in (base.joinpath(*mod_parts).with_suffix(".py"), base.joinpath(*mod_parts, "__init__.py")):
                try:
                    if not cand.is_file():
                        continue
                except OSError:       # an unreadable folder on the way: not a source
                    continue
                key = str(cand)
                mod = self.files.get(key)
                if mod is None:
                    from strategies.documents import read_text
                    mod = self.load_module(read_text(cand, f"recipe module {cand.name}", limit=MAX_RECIPE_BYTES),
                                           key, cand.parent)
                v = mod.scope.get(attr)
                if isinstance(v, Ref) and v.name != name:
                    if v.name.startswith("."):      # a relative import inside that package
                        up = len(v.name) - len(v.name.lstrip("."))
                        pkg = mod_parts if cand.name == "__init__.py" else mod_parts[:-1]
                        pkg = pkg[:len(pkg) - (up - 1)] if up > 1 else pkg
                        v = Ref(".".join(pkg + [v.name.lstrip(".")]))
                    return self.resolve_in_checkout(v.name, where)
                return v if isinstance(v, (FuncDef, ClassInfo, int, float, str, bool)) else None
        return None

    def with_base(self, out: Any, where: str) -> Any:
        """A table value whose ``_base_`` names a class: that class's defaults from the checkout beneath it."""
        if isinstance(out, Node) and "_base_" in out.defaults:
            base = self.resolve_in_checkout(str(out.defaults.pop("_base_")), where)
            if isinstance(base, ClassInfo):
                out.defaults = {**self.class_defaults(base, where), **out.defaults}
        return out

    def construct(self, cls: ClassInfo, args: list, kwargs: dict, where: str) -> Node:
        """A configuration object of a class read from source: its dataclass defaults, then the kwargs."""
        return Node(cls.qualname, dict(kwargs), where, self.class_defaults(cls, where), tuple(args), known=True)

    def class_defaults(self, cls: ClassInfo, where: str, _seen: tuple = ()) -> dict:
        """Class-level field defaults of ``cls`` and of the bases the reader can read (later classes in
        the MRO first, so the class's own values win); ``field(default=...)`` and
        ``field(default_factory=lambda: ...)`` included."""
        key = f"{cls.module.path}:{cls.qualname}"
        if key in _seen or len(_seen) > MAX_DEPTH:
            return {}
        out: dict = {}
        for b in reversed(cls.node.bases):
            try:
                base = self.expr(b, cls.module.scope, cls.module)
            except ConfigError:
                continue
            if isinstance(base, Ref):
                base = self.resolve_in_checkout(base.name, where)
            if isinstance(base, ClassInfo):
                out.update(self.class_defaults(base, where, _seen + (key,)))
        for st in cls.node.body:
            target = st.target if isinstance(st, ast.AnnAssign) else st.targets[0] if isinstance(st, ast.Assign) \
                and len(st.targets) == 1 else None
            if not isinstance(target, ast.Name) or st.value is None:
                continue
            value = st.value
            if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "field":
                kw = {k.arg: k.value for k in value.keywords}
                value = kw.get("default") or (kw["default_factory"].body if isinstance(
                    kw.get("default_factory"), ast.Lambda) else None)
                if value is None:
                    continue
            try:
                out[target.id] = self.expr(value, dict(cls.module.scope), cls.module)
            except ConfigError as exc:
                out[target.id] = Unknown(f"{cls.qualname}.{target.id} ({str(exc)[:80]})", self.where(st, cls.module))
        return out

    def resolve_ref(self, ref: Ref, where: str) -> Any:
        """A constant named by an import: from the checkout, else the library's ``value``, else the Ref."""
        v = self.resolve_in_checkout(ref.name, where)
        if v is not None and not isinstance(v, FuncDef):
            return v
        entry = self.library.lookup(ref.name)
        if entry is not None and "value" in entry:
            return entry["value"]
        return ref

    def attribute(self, obj: Any, name: str, where: str) -> Any:
        if isinstance(obj, Node):
            return obj.get(name)
        if isinstance(obj, Ref):
            return Ref(f"{obj.name}.{name}")
        if isinstance(obj, FuncDef):
            return Ref(f"{obj.node.name}.{name}")
        if isinstance(obj, ClassInfo):      # a class attribute or classmethod: by name (the table may know it)
            return Ref(f"{obj.qualname}.{name}")
        if isinstance(obj, Unknown):
            return Unknown(f"{obj.what}.{name}", obj.where)
        return Unknown(f"attribute {name} of a {type(obj).__name__}", where)

    # ------------------------------------------------------------------ statements
    def block(self, body: list, scope: dict, mod: Module) -> None:
        for st in body:
            self.statement(st, scope, mod)

    def statement(self, st: ast.stmt, scope: dict, mod: Module) -> None:
        self.tick(st, mod)
        where = self.where(st, mod)
        if isinstance(st, ast.Expr):
            if not isinstance(st.value, ast.Constant):
                self.expr(st.value, scope, mod)
        elif isinstance(st, ast.Assign):
            value = self.expr(st.value, scope, mod)
            for t in st.targets:
                self.assign(t, value, scope, mod)
        elif isinstance(st, ast.AnnAssign):
            if st.value is not None:
                self.assign(st.target, self.expr(st.value, scope, mod), scope, mod)
        elif isinstance(st, ast.AugAssign):
            cur = self.expr(st.target, scope, mod) if not isinstance(st.target, ast.Name) or st.target.id in scope \
                else Unknown(st.target.id, where)
            self.assign(st.target, self.binop(type(st.op), cur, self.expr(st.value, scope, mod), where), scope, mod)
        elif isinstance(st, ast.If):
            self.block(st.body if self.truth(st.test, scope, mod) else st.orelse, scope, mod)
        elif isinstance(st, ast.Return):
            raise ReturnSignal(None if st.value is None else self.expr(st.value, scope, mod))
        elif isinstance(st, ast.Raise):
            msg = ast.unparse(st.exc)[:200] if st.exc is not None else "raise"
            raise RecipeRaise(f"{where}: the recipe raises {msg} with these settings; change the --set values or "
                              f"--recipe")
        elif isinstance(st, ast.For):
            self.for_loop(st, scope, mod)
        elif isinstance(st, (ast.Import, ast.ImportFrom)):
            self.bind_import(st, scope)
        elif isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
            scope[st.name] = FuncDef(st, Module(mod.path, mod.tree, scope, mod.source_dir))
        elif isinstance(st, ast.Try):
            try:
                self.block(st.body + st.orelse, scope, mod)
            except RecipeRaise:      # the recipe's own raise, caught by its handler (types are not matched)
                if not st.handlers:
                    raise
                self.block(st.handlers[0].body, scope, mod)
            self.block(st.finalbody, scope, mod)
        elif isinstance(st, ast.With):
            self.block(st.body, scope, mod)
        elif isinstance(st, ast.Break):
            raise BreakSignal()
        elif isinstance(st, ast.Continue):
            raise ContinueSignal()
        elif isinstance(st, (ast.Pass, ast.Assert, ast.Delete, ast.Global, ast.Nonlocal, ast.ClassDef)):
            return
        else:
            raise ConfigError(f"{where}: a {type(st).__name__} statement is not something execsim reads in a recipe; "
                              f"give the settings it makes with --set KEY=VALUE")

    def for_loop(self, st: ast.For, scope: dict, mod: Module) -> None:
        seq = self.expr(st.iter, scope, mod)
        if isinstance(seq, dict):
            seq = list(seq)
        if not isinstance(seq, (list, tuple, str)):
            raise ConfigError(f"{self.where(st, mod)}: the loop runs over {ast.unparse(st.iter)[:60]}, which is not "
                              f"known without running the recipe; give what it sets with --set KEY=VALUE")
        for item in list(seq):
            self.assign(st.target, item, scope, mod)
            try:
                self.block(st.body, scope, mod)
            except BreakSignal:
                return
            except ContinueSignal:
                continue
        self.block(st.orelse, scope, mod)

    def assign(self, target: ast.expr, value: Any, scope: dict, mod: Module) -> None:
        where = self.where(target, mod)
        if isinstance(target, ast.Name):
            scope[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            if isinstance(value, (list, tuple)) and len(value) == len(target.elts):
                for t, v in zip(target.elts, value):
                    self.assign(t, v, scope, mod)
            else:
                for i, t in enumerate(target.elts):
                    self.assign(t, Unknown(f"item {i} of {short(getattr(value, 'target', '')) or 'a value'}", where),
                                scope, mod)
        elif isinstance(target, ast.Attribute):
            obj = self.expr(target.value, scope, mod)
            if isinstance(obj, Node):
                obj.fields[target.attr] = value
            elif not isinstance(obj, (Unknown, Ref)):
                raise ConfigError(f"{where}: assigns {target.attr} on a {type(obj).__name__}, which is not a "
                                  f"configuration object")
        elif isinstance(target, ast.Subscript):
            obj, key = self.expr(target.value, scope, mod), self.expr(target.slice, scope, mod)
            if isinstance(obj, dict) and isinstance(key, (str, int, float, bool)) or isinstance(obj, list) and isinstance(key, int) and -len(obj) <= key < len(obj):
                obj[key] = value
        else:
            raise ConfigError(f"{where}: cannot assign to {ast.unparse(target)[:60]} statically")

    def truth(self, test: ast.expr, scope: dict, mod: Module) -> bool:
        v = self.expr(test, scope, mod)
        if isinstance(v, Node) and v.phantom:
            v = Unknown(f"{short(v.target.rsplit('.', 1)[0])}.{short(v.target)}", v.where)
        if isinstance(v, (Unknown, Ref)):
            what = v.what if isinstance(v, Unknown) else v.name
            hint = "; give it with --set " + ", ".join(f"{n.id}=VALUE" for n in ast.walk(test)
                                                        if isinstance(n, ast.Name) and n.id in self.overridable)
            raise ConfigError(f"{self.where(test, mod)}: the condition `{ast.unparse(test)[:80]}` depends on {what[:80]}, "
                              f"which is not known without running the recipe"
                              + (hint if hint != "; give it with --set " else "; give the settings it decides "
                                 "with --set KEY=VALUE"))
        if isinstance(v, Node):
            return True
        return bool(v)

    overridable: tuple = ()

    # ------------------------------------------------------------------ expressions
    def expr(self, node: ast.expr, scope: dict, mod: Module) -> Any:
        self.tick(node, mod)
        if self.depth >= MAX_DEPTH:
            raise ConfigError(f"{self.where(node, mod)}: expressions nest deeper than {MAX_DEPTH}")
        self.depth += 1
        try:
            return self.expr_kind(node, scope, mod)
        finally:
            self.depth -= 1

    def expr_kind(self, node: ast.expr, scope: dict, mod: Module) -> Any:
        where = self.where(node, mod)
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id in scope:
                v = scope[node.id]
                return self.resolve_ref(v, where) if isinstance(v, Ref) else v
            if node.id in ("True", "False", "None"):
                return {"True": True, "False": False, "None": None}[node.id]
            if node.id in BUILTINS:
                return self.builtin(node.id, where)
            return Ref(node.id)
        if isinstance(node, ast.Attribute):
            obj = self.expr(node.value, scope, mod)
            v = self.attribute(obj, node.attr, where)
            return self.resolve_ref(v, where) if isinstance(v, Ref) else v
        if isinstance(node, ast.Call):
            return self.call(node, scope, mod)
        if isinstance(node, ast.BinOp):
            return self.binop(type(node.op), self.expr(node.left, scope, mod), self.expr(node.right, scope, mod), where)
        if isinstance(node, ast.UnaryOp):
            v = self.expr(node.operand, scope, mod)
            if isinstance(v, Node) and v.phantom and not v.fields:
                return Unknown(f"not {short(v.target)}", where)
            if isinstance(node.op, ast.Not):
                return Unknown(f"not {getattr(v, 'what', '?')}", where) if isinstance(v, (Unknown, Ref)) else \
                    (False if isinstance(v, Node) else not v)
            if isinstance(v, (int, float)) and not isinstance(v, bool) or isinstance(v, bool):
                return -v if isinstance(node.op, ast.USub) else +v if isinstance(node.op, ast.UAdd) else ~v
            return Unknown(ast.unparse(node)[:60], where)
        if isinstance(node, ast.BoolOp):
            return self.boolop(node, scope, mod)
        if isinstance(node, ast.Compare):
            return self.compare(node, scope, mod)
        if isinstance(node, ast.IfExp):
            return self.expr(node.body if self.truth(node.test, scope, mod) else node.orelse, scope, mod)
        if isinstance(node, ast.JoinedStr):
            parts = [self.expr(v, scope, mod) for v in node.values]
            if any(isinstance(p, (Unknown, Ref, Node)) for p in parts):
                return Unknown(f"the f-string {ast.unparse(node)[:60]}", where)
            if sum(len(str(p)) if isinstance(p, (str, int, float)) or p is None else MAX_ITEMS
                   for p in parts) > MAX_ITEMS:
                raise ConfigError(f"{where}: the f-string builds more than {MAX_ITEMS} characters")
            return bounded("".join(str(p) for p in parts), where)
        if isinstance(node, ast.FormattedValue):
            v = self.expr(node.value, scope, mod)
            if isinstance(v, (Unknown, Ref, Node)):
                return v
            if not (isinstance(v, (int, float, str)) or v is None):
                return Unknown(f"a {type(v).__name__} in an f-string", where)
            spec = self.expr(node.format_spec, scope, mod) if node.format_spec is not None else ""
            try:
                return format({115: str, 114: repr, 97: ascii}.get(node.conversion, lambda x: x)(v), spec)
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"{where}: {str(exc)[:120]}") from None
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            out: list = []
            for e in node.elts:
                if isinstance(e, ast.Starred):
                    v = self.expr(e.value, scope, mod)
                    out += list(v) if isinstance(v, (list, tuple)) else [Unknown(ast.unparse(e)[:60], where)]
                else:
                    out.append(self.expr(e, scope, mod))
            bounded(out, where)
            return tuple(out) if isinstance(node, ast.Tuple) else out
        if isinstance(node, ast.Dict):
            d: dict = {}
            for k, v in zip(node.keys, node.values):
                val = self.expr(v, scope, mod)
                if k is None:
                    if isinstance(val, dict):
                        d.update(val)
                    continue
                key = self.expr(k, scope, mod)
                if isinstance(key, (str, int, float, bool)) or key is None:
                    d[key] = val
            return bounded(d, where)
        if isinstance(node, ast.Subscript):
            return self.subscript(node, scope, mod)
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            return self.comprehension(node, scope, mod)
        if isinstance(node, ast.Slice):
            parts = [None if p is None else self.expr(p, scope, mod) for p in (node.lower, node.upper, node.step)]
            return slice(*parts) if all(p is None or isinstance(p, int) for p in parts) else Unknown("a slice", where)
        return Unknown(f"`{ast.unparse(node)[:60]}` (a {type(node).__name__}, which execsim does not evaluate)", where)

    def comprehension(self, node: ast.expr, scope: dict, mod: Module) -> Any:
        """``[x for a in seq if c]`` (and set/dict/generator forms) over known sequences, bounded."""
        where = self.where(node, mod)
        inner = dict(scope)
        items: list = []

        def run(gens: list) -> None:
            if not gens:
                items.append((self.expr(node.key, inner, mod), self.expr(node.value, inner, mod))
                             if isinstance(node, ast.DictComp) else self.expr(node.elt, inner, mod))
                bounded(items, where)
                return
            g = gens[0]
            seq = self.expr(g.iter, inner, mod)
            if isinstance(seq, dict):
                seq = list(seq)
            if not isinstance(seq, (list, tuple, str)):
                raise UnresolvedSignal(Unknown(f"the loop over {ast.unparse(g.iter)[:60]}", where))
            for item in list(seq):
                self.assign(g.target, item, inner, mod)
                if all(self.truth(c, inner, mod) for c in g.ifs):
                    run(gens[1:])
        try:
            run(list(node.generators))
        except UnresolvedSignal as u:
            return u.value
        if isinstance(node, ast.DictComp):
            return {k: v for k, v in items if isinstance(k, (str, int, float, bool)) or k is None}
        return items

    def builtin(self, name: str, where: str) -> Any:
        fn = BUILTINS[name]
        if fn is not None:
            return fn
        if name == "range":
            def rng(*a):
                r = range(*a)
                if len(r) > MAX_ITEMS:
                    raise ValueError(f"range of {len(r)} items is over {MAX_ITEMS}")
                return list(r)
            return rng
        if name == "enumerate":
            return lambda seq, start=0: list(enumerate(seq, start))
        if name == "zip":
            return lambda *seqs: list(zip(*seqs))
        if name == "print":
            return lambda *a, **k: None
        if name == "hasattr":
            return lambda obj, attr: (attr in obj.fields or attr in obj.defaults) if isinstance(obj, Node) \
                else obj if isinstance(obj, Unknown) else Unknown(f"hasattr(..., {attr!r})", where)
        if name == "getattr":
            return lambda obj, attr, *d: self.attribute(obj, attr, where) if not d or not isinstance(obj, Node) \
                or attr in obj.fields or attr in obj.defaults else d[0]
        if name == "isinstance":
            return lambda obj, types: self.isinstance_of(obj, types, where)
        return lambda *a: Unknown(f"{name}(...)", where)

    def isinstance_of(self, obj: Any, types: Any, where: str) -> Any:
        """isinstance against builtin types (str, int, float, bool, dict, list, tuple) and classes by name."""
        kinds = [getattr(k, "wrapped", k) for k in (types if isinstance(types, (list, tuple)) else [types])]
        names = {k.__name__ if isinstance(k, type) else short(k.name) if isinstance(k, Ref) else
                 k.qualname if isinstance(k, ClassInfo) else "?" for k in kinds}
        if isinstance(obj, (Unknown, Ref)) or (isinstance(obj, Node) and obj.phantom):
            return Unknown(f"isinstance({getattr(obj, 'what', short(getattr(obj, 'name', getattr(obj, 'target', '?'))))})",
                           where)
        if isinstance(obj, Node):
            return short(obj.target) in names
        return any(isinstance(obj, k) for k in kinds if isinstance(k, type))

    def binop(self, op: type, a: Any, b: Any, where: str) -> Any:
        if any(isinstance(x, (Unknown, Ref, Node)) for x in (a, b)):
            u = a if isinstance(a, Unknown) else b if isinstance(b, Unknown) else None
            return u if u is not None else Unknown("an operation on a configuration object", where)
        if op is ast.Pow and isinstance(b, (int, float)) and abs(b) > 64:
            raise ConfigError(f"{where}: an exponent of {b} is over the 64 a recipe setting needs")
        if op is ast.Mult and isinstance(a, (str, list, tuple)) and isinstance(b, int) or \
                op is ast.Mult and isinstance(b, (str, list, tuple)) and isinstance(a, int):
            seq, n = (a, b) if isinstance(a, (str, list, tuple)) else (b, a)
            if len(seq) * max(n, 0) > MAX_ITEMS:
                raise ConfigError(f"{where}: builds a value of {len(seq) * n} items, over the {MAX_ITEMS} a recipe may")
        if op is ast.BitOr and isinstance(a, dict) and isinstance(b, dict):
            return {**a, **b}
        if op not in BINOPS:
            return Unknown(f"a {op.__name__} operation", where)
        try:
            return bounded(BINOPS[op](a, b), where)
        except (TypeError, ArithmeticError, ValueError) as exc:
            raise ConfigError(f"{where}: {str(exc)[:160]}") from None

    def boolop(self, node: ast.BoolOp, scope: dict, mod: Module) -> Any:
        is_and = isinstance(node.op, ast.And)
        v: Any = None
        for e in node.values:
            v = self.expr(e, scope, mod)
            if isinstance(v, Node) and v.phantom and not v.fields:
                return Unknown(short(v.target), self.where(e, mod))
            if isinstance(v, (Unknown, Ref)):
                return v if isinstance(v, Unknown) else Unknown(v.name, self.where(e, mod))
            truth = True if isinstance(v, Node) else bool(v)
            if truth != is_and:
                return v
        return v

    def compare(self, node: ast.Compare, scope: dict, mod: Module) -> Any:
        where = self.where(node, mod)
        left = self.expr(node.left, scope, mod)
        for op, right_node in zip(node.ops, node.comparators):
            right = self.expr(right_node, scope, mod)
            if isinstance(op, (ast.Is, ast.IsNot)) and (left is None or right is None) \
                    and not isinstance(left, Unknown) and not isinstance(right, Unknown):
                ok = (left is None and right is None) == isinstance(op, ast.Is)
            elif any(isinstance(x, (Unknown, Ref, Node)) for x in (left, right)):
                u = left if isinstance(left, Unknown) else right if isinstance(right, Unknown) else None
                return u or Unknown(f"`{ast.unparse(node)[:60]}`", where)
            else:
                try:
                    ok = bool(CMPOPS[type(op)](left, right))
                except TypeError as exc:
                    raise ConfigError(f"{where}: {str(exc)[:160]}") from None
            if not ok:
                return False
            left = right
        return True

    def subscript(self, node: ast.Subscript, scope: dict, mod: Module) -> Any:
        where = self.where(node, mod)
        obj, key = self.expr(node.value, scope, mod), self.expr(node.slice, scope, mod)
        if isinstance(obj, Ref):    # a type annotation such as Optional[int], or DATASETS["c4"]
            entry = self.library.lookup(obj.name)
            if entry is not None and isinstance(entry.get("items"), dict) and key in entry["items"]:
                return entry["items"][key]
            return Ref(f"{obj.name}[{key!r}]")
        if isinstance(obj, (dict, list, tuple, str)) and isinstance(key, (str, int, slice, float, bool)):
            try:
                return obj[key]
            except (KeyError, IndexError, TypeError):
                return Unknown(f"{ast.unparse(node)[:60]} (no such item)", where)
        return Unknown(ast.unparse(node)[:60], where)


def recipe_functions(tree: ast.Module) -> list[str]:
    """Names of the top-level functions of a recipe module, in file order."""
    return [st.name for st in tree.body if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef))]


def evaluate_recipe(text: str, path: str, function: str, *, library: Library | None = None,
                    arguments: dict | None = None, source_dir: Path | None = None,
                    files_read: list | None = None) -> Any:
    """The value ``function()`` of the recipe in ``text`` returns, read statically.

    ``arguments``: values for the function's own parameters (``--set num_nodes=4``); ``source_dir``:
    the file's folder, where modules of the same checkout are looked up (None: none are read);
    ``files_read``: a list the paths of the other files read are appended to."""
    ev = Evaluator(library)
    mod = ev.load_module(text, path, source_dir)
    fn = mod.scope.get(function)
    if not isinstance(fn, FuncDef):
        names = recipe_functions(mod.tree)
        from strategies.config import did_you_mean
        raise ConfigError(f"{path}: no function {function!r} in the recipe{did_you_mean(function, names)}; "
                          f"its functions: {', '.join(names[:20]) or 'none'}")
    a = fn.node.args
    params = [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]
    ev.overridable = tuple(params)
    args = dict(arguments or {})
    bad = [k for k in args if k not in params]
    if bad:
        raise ConfigError(f"--set {bad[0]}: {function}() has no argument {bad[0]!r} (its arguments: "
                          f"{', '.join(params) or 'none'}); a dotted KEY sets a field of the configuration")
    try:
        return ev.call_function(fn, [], args, f"{Path(path).name}:{fn.node.lineno}")
    finally:
        if files_read is not None:      # the other files of the checkout read (inputs no output may replace)
            files_read.extend(list(ev.files)[1:])
