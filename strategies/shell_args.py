"""What bash would pass to ``pretrain_gpt.py``: a small interpreter for Megatron-LM launch scripts.

Launch scripts build the training command from variables, bash arrays and ``if`` blocks
(Megatron-LM ``examples/llama/train_llama3_8b_h100_fp8.sh``: ``TP_SIZE=1``, ``MODEL_ARGS=( ... )``,
``if [[ "$DTYPE" == "fp8" ]]; then DTYPE_ARGS+=("--fp8-format hybrid" ...); fi``, then
``torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py ${MODEL_ARGS[@]} ...``). Reading the text as one
list of words gets them wrong: both branches of an ``if`` are read, a quoted array item
``"--vocab-size 128256"`` stays one word, a flag at the end of an array takes the next line's
``DATA_ARGS=`` as its value. This module runs the part of bash those scripts use and returns the
words bash would hand to the launch command:

* words: unquoted text, ``'...'``, ``"..."`` (with ``$`` expansions inside), backslash escapes and
  line continuations, comments; word splitting of unquoted expansions on blanks (bash's default IFS);
* parameters: ``$X``, ``${X}``, ``${X:-default}`` / ``${X-default}``, ``${X:=default}``, ``${X:+alt}``,
  ``${#X}``, positional ``$1`` ... (unset: the script is run without arguments), arrays
  ``X=( ... )``, ``X+=( ... )``, ``${X[@]}``, ``"${X[@]}"`` (one word per item), ``${X[*]}``,
  ``${X[n]}``; ``$(( ... ))`` integer arithmetic; ``$( ... )`` and backquotes are opaque;
* statements: assignments (``export``/``declare``/``local``/``readonly`` too), ``unset``,
  ``if``/``elif``/``else``/``fi`` decided by ``[[ ... ]]``, ``[ ... ]``, ``test``, ``true``, ``false``
  with ``==``, ``=``, ``!=``, ``-z``, ``-n``, ``-eq`` ... ``-ge``, ``!``, ``&&``, ``||``; ``;``, ``&&``,
  ``||`` lists; functions, loops and ``case`` are skipped (their bodies do not run).

A value the script never sets (an environment variable or a positional argument without a
default) stays a placeholder; it becomes an error naming the line and the variable, with
``--env NAME=VALUE``, only when the importer needs it (a flag it reads, or a condition that decides
which branch runs). A condition that tests the filesystem or a command's output is decided by the
branch that does not ``exit`` (the script's success path); otherwise its branches' words are kept
and marked, so they are harmless unless they set something the importer reads.

Work is linear in the text: one left-to-right scan with compiled patterns, no re-scanning of the
remaining text (a 2 MB line imports in well under a second: benchmarks/).

The launch command is the one whose words include a ``*.py`` script whose name starts with
``pretrain`` (``pretrain_gpt.py``, ``pretrain_mamba.py``...); what precedes it after ``torchrun`` /
``python -m torch.distributed.run`` are the launcher's arguments. Without such a command (pasted
arguments) every word of every command is an argument.

bashlex (the PyPI bash parser) was tried first: it refuses array assignments, ``[[ ... ]]`` and
``$(( ... ))`` (0.18: "unexpected token '('", "arithmetic expansion" not implemented), which every
Megatron-LM example uses, so this module parses the subset itself (shlex alone cannot: it does
not expand ``$`` inside double quotes or keep quoting information for word splitting).

>>> r = launch_words('TP=${TP:-8}\\nA=(--x 1 "--y 2")\\nif [[ $TP == 8 ]]; then A+=(--z); else A+=(--w); fi\\n'
...                  'torchrun --nnodes 2 pretrain_gpt.py ${A[@]} --tp $TP')
>>> [str(w) for w in r.args], [str(w) for w in r.launcher]
(['--x', '1', '--y', '2', '--z', '--tp', '8'], ['--nnodes', '2'])
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from strategies.errors import ConfigError, cut
from strategies.shell_parse import DECLARE, AndOr, Cmd, If, Lexer, Parser

MAX_SCRIPT_BYTES = 8 * 1024 * 1024
"""A launch script is a few kB; the reader's own 8 MiB file limit (docs/strategy-file.md, Limits)."""


class Word(str):
    """A word bash would produce, with where it came from.

    ``unset``: ``(line, NAME)`` when the word holds the value of a variable the script never sets;
    ``cond``: ``(line, text)`` when the word was added by a branch whose condition could not be decided."""

    unset: tuple | None = None
    cond: tuple | None = None

    def __new__(cls, text: str, unset: tuple | None = None, cond: tuple | None = None):
        w = super().__new__(cls, text)
        w.unset, w.cond = unset, cond
        return w


def _w(text: str, unset: tuple | None = None, cond: tuple | None = None) -> str:
    """A plain ``str`` for an ordinary word (cheap), a :class:`Word` when it carries a mark."""
    return text if unset is None and cond is None else Word(text, unset, cond)


def _mark(w: str, unset=None, cond=None) -> str:
    u = unset if unset is not None else getattr(w, "unset", None)
    c = cond if cond is not None else getattr(w, "cond", None)
    return _w(str(w), u, c)


@dataclass
class LaunchWords:
    """The launch command's words: ``args`` for the training script, ``launcher`` before it."""

    args: list
    launcher: list
    script: str | None
    notes: list = field(default_factory=list)


# ---------------------------------------------------------------------------------------- evaluation

class _Unknown(Exception):
    """A condition's value cannot be known (filesystem, a command's output, an unset variable)."""

    def __init__(self, why: tuple):
        self.why = why


class _Exit(Exception):
    pass


_ARITH_OK = re.compile(r"[0-9+\-*/%() <>=!&|]*")


class _Shell:
    def __init__(self, env: dict):
        # scalars are str (Word), arrays are lists of Word
        self.vars: dict = {k: Word(v) for k, v in env.items()}
        self.cond: tuple | None = None     # the undecided condition the current branch depends on
        self.launches: list = []
        self.all_words: list = []

    # ---- expansion
    def lookup(self, name: str, line: int):
        if name in self.vars:
            return self.vars[name]
        return None

    def param(self, p: tuple, line: int, quoted: bool):
        """Value of a ${...}: a str/Word, a list (array splat) or None (unset)."""
        name, index, op, arg = p
        v = self.lookup(name, line)
        if name in ("@", "*"):
            return [] if index is None else None
        if index is not None:
            if isinstance(v, list):
                if index in ("@", "*"):
                    v = list(v)
                elif index.isdigit():
                    v = v[int(index)] if int(index) < len(v) else None
                else:
                    v = None
            elif v is not None and index in ("@", "*", "0"):
                v = [v] if index in ("@", "*") else v
        elif isinstance(v, list):
            v = v[0] if v else Word("")       # $ARR is its first item
        if op == "#":
            if v is None:
                return Word("0")
            return Word(str(len(v)))
        empty = v is None or (isinstance(v, str) and v == "") or (isinstance(v, list) and not v)
        if op in (":-", "-", ":=", "="):
            use_default = v is None if op in ("-", "=") else empty
            if use_default:
                d = self.join(self.expand_parts(arg, line, force_quoted=True))
                if op in (":=", "="):
                    self.vars[name] = d
                return d
            return v
        if op in (":+", "+"):
            present = v is not None if op == "+" else not empty
            return self.join(self.expand_parts(arg, line, force_quoted=True)) if present else Word("")
        if op == ":?" or op == "?":
            if v is None:
                return Word(f"<{name}>", unset=(line, name))
            return v
        if op is not None:      # ${X#pat}, ${X%pat}, ${X/a/b}, ${X:off}: not evaluated
            if v is None:
                return Word(f"<{name}>", unset=(line, name))
            return Word(str(v) if not isinstance(v, list) else " ".join(v), unset=(line, f"{name}{op}..."))
        if v is None:
            return Word(f"<{name}>", unset=(line, name))
        return v

    def arith(self, text: str, line: int) -> Word:
        bad = None

        def sub(m):
            nonlocal bad
            name = m.group(1) or m.group(2) or m.group(3)
            v = self.lookup(name, line)
            if isinstance(v, list):
                v = v[0] if v else ""
            if v is None or not str(v).strip().lstrip("-").isdigit():
                if bad is None:
                    bad = (line, name)
                return "0"
            return str(int(v))
        expr = re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)|([A-Za-z_][A-Za-z0-9_]*)", sub, text)
        if bad is not None:
            return Word("<arith>", unset=bad)
        if not _ARITH_OK.fullmatch(expr) or len(expr) > 200:
            return Word("<arith>", unset=(line, f"$(( {cut(text, 30)} ))"))
        try:
            import ast
            tree = ast.parse(expr.replace("/", "//").replace("&&", " and ").replace("||", " or "), mode="eval")
            value = _eval_int(tree.body)
        except (SyntaxError, ValueError, ZeroDivisionError, RecursionError):
            return Word("<arith>", unset=(line, f"$(( {cut(text, 30)} ))"))
        return Word(str(int(value)))

    def expand_parts(self, parts, line: int, force_quoted: bool = False) -> list:
        """Expand a word's parts into fields ``[(text, splittable, unset)]`` pieces joined per field."""
        fields: list = [[]]
        for kind, val, quoted in parts or ():
            q = quoted or force_quoted
            if kind == "lit":
                fields[-1].append((val, False, None))
            elif kind == "par":
                v = self.param(val, line, q)
                if isinstance(v, list):
                    if val[1] == "*" and q:
                        fields[-1].append((" ".join(v), False, _first_unset(v)))
                        continue
                    for j, item in enumerate(v):
                        if j:
                            fields.append([])
                        fields[-1].append((str(item), not q, getattr(item, "unset", None), getattr(item, "cond", None)))
                    if not v and q and val[1] == "@":
                        fields[-1].append(("", False, None))
                else:
                    fields[-1].append((str(v), not q and getattr(v, "unset", None) is None, getattr(v, "unset", None),
                                       getattr(v, "cond", None)))
            elif kind == "ari":
                w = self.arith(val, line)
                fields[-1].append((str(w), False, getattr(w, "unset", None)))
            else:     # command substitution: its output is not known
                fields[-1].append((f"<$({cut(val, 20)})>", False, (line, f"$({cut(val, 30)})")))
        return fields

    def join(self, fields: list) -> Word:
        pieces = [p for f in fields for p in f]
        unset = next((p[2] for p in pieces if p[2] is not None), None)
        cond = next((p[3] for p in pieces if len(p) > 3 and p[3] is not None), None)
        return _w(" ".join("".join(p[0] for p in f) for f in fields), unset, cond)

    def words(self, parts, line: int) -> list:
        """Fields of one word after expansion and word splitting (bash: unquoted expansions split
        on blanks; a field of nothing but an empty unquoted expansion disappears)."""
        if isinstance(parts, tuple):      # a run of plain words: themselves
            return parts[1] if self.cond is None else [_mark(w, cond=self.cond) for w in parts[1]]
        if len(parts) == 1 and self.cond is None:
            kind, val, quoted = parts[0]
            if kind == "lit":
                return [val]               # a plain word: itself
            if kind == "par" and val[1] in ("@", "*") and val[2] is None and not (quoted and val[1] == "*"):
                v = self.vars.get(val[0])
                if isinstance(v, list):    # ${A[@]}: the items, split when unquoted (C-speed path)
                    if quoted:
                        return list(v)
                    out: list = []
                    for item in v:
                        if type(item) is str:
                            out.extend(item.split())
                        else:
                            out.extend(_mark(x, item.unset, item.cond) for x in item.split())
                    return out
        out = []
        for f in self.expand_parts(parts, line):
            cur: list = []
            have, unset, cond, quoted_empty = False, None, None, False
            for piece in f:
                text, split, u = piece[0], piece[1], piece[2]
                c = piece[3] if len(piece) > 3 else None
                unset = unset or u
                cond = cond or c
                if not split:
                    cur.append(text)
                    have = True
                    quoted_empty = quoted_empty or text == ""
                    continue
                chunks = text.split()
                if not chunks:
                    if text and cur:      # blanks only: ends the current field
                        out.append(_w("".join(cur), unset, cond))
                        cur, have = [], False
                    continue
                if text[:1].isspace() and cur:
                    out.append(_w("".join(cur), unset, cond))
                    cur = []
                cur.append(chunks[0])
                have = True
                for ch in chunks[1:]:
                    out.append(_w("".join(cur), unset, cond))
                    cur = [ch]
                if text[-1:].isspace():
                    out.append(_w("".join(cur), unset, cond))
                    cur, have = [], False
            if cur or (have and quoted_empty):
                out.append(_w("".join(cur), unset, cond))
        if self.cond is not None:
            out = [_mark(w, cond=getattr(w, "cond", None) or self.cond) for w in out]
        return out

    # ---- statements
    def run(self, stmts: list) -> None:
        for st in stmts:
            self.and_or(st)

    def and_or(self, st: AndOr) -> bool:
        ok = self.command(st.items[0][1])
        for op, cmd in st.items[1:]:
            if ok is None:      # undecided: the rest is conditional on it
                continue
            if (op == "&&" and ok) or (op == "||" and not ok):
                ok = self.command(cmd)
        return bool(ok) if ok is not None else True

    def command(self, cmd) -> bool | None:
        if isinstance(cmd, If):
            return self.if_block(cmd)
        for name, append, value, items, line in cmd.assigns:
            if items is not None:
                vals = [w for parts, ln in items for w in self.words(parts, ln)]
                old = self.vars.get(name)
                if append:      # in place: every array value is a list of its own (no aliasing)
                    if isinstance(old, list):
                        old.extend(vals)
                    else:
                        self.vars[name] = ([] if old is None else [old]) + vals
                else:
                    self.vars[name] = vals
            else:
                v = self.join(self.expand_parts(value, line, force_quoted=True)) if value else Word("")
                if self.cond is not None:
                    v = _mark(v, cond=getattr(v, "cond", None) or self.cond)
                old = self.vars.get(name)
                if append and old is not None:
                    if isinstance(old, list):
                        old.append(v)
                        continue
                    v = _w(str(old) + str(v), _attr(old, "unset") or _attr(v, "unset"), _attr(old, "cond") or _attr(v, "cond"))
                self.vars[name] = v
        if not cmd.words:
            return True
        head = self.words(*cmd.words[0])
        name = str(head[0]) if head else ""
        if name in DECLARE or name == "set" or name == "shift":
            return True
        if name == "unset":
            for parts, ln in cmd.words[1:]:
                for w in self.words(parts, ln):
                    self.vars.pop(str(w), None)
            return True
        if name == "exit":
            raise _Exit()
        if name in ("true", ":"):
            return True
        if name == "false":
            return False
        if name in ("[[", "[", "test"):
            return self.test(cmd)
        words = list(head)
        for parts, ln in cmd.words[1:]:
            words.extend(self.words(parts, ln))
        self.all_words.append(words)
        if any(_is_script(w) for w in words):
            self.launches.append((words, cmd.line))
        return True

    def if_block(self, blk: If) -> bool:
        for cond, body in blk.branches:
            if cond is None:
                self.run(body)
                return True
            try:
                taken = self.condition(cond)
            except _Unknown as u:
                return self.undecided(blk, u.why)
            if taken:
                self.run(body)
                return True
        return True

    def undecided(self, blk: If, why: tuple) -> bool:
        """A condition whose value cannot be known: the branch that does not exit is the script's
        success path; with no such branch, every branch runs with its words marked."""
        bodies = [body for _, body in blk.branches]
        if len(blk.branches) == 1 or blk.branches[-1][0] is not None:
            bodies.append([])               # the implicit empty else
        live = [b for b in bodies if not _exits(b)]
        if len(live) == 1:
            self.run(live[0])
            return True
        saved = self.cond
        self.cond = saved or why
        try:
            for b in live:
                self.run(b)
        finally:
            self.cond = saved
        return True

    def condition(self, stmts: list) -> bool:
        ok = True
        for st in stmts:
            ok = self.cond_and_or(st)
        return ok

    def cond_and_or(self, st: AndOr) -> bool:
        ok = self.cond_command(st.items[0][1])
        for op, cmd in st.items[1:]:
            if (op == "&&" and ok) or (op == "||" and not ok):
                ok = self.cond_command(cmd)
        return ok

    def cond_command(self, cmd) -> bool:
        if isinstance(cmd, If) or not cmd.words:
            raise _Unknown((cmd.line, "a compound condition"))
        head = self.words(*cmd.words[0])
        name = str(head[0]) if head else ""
        if name in ("true", ":"):
            return True
        if name == "false":
            return False
        if name in ("[[", "[", "test"):
            return self.test(cmd, strict=True)
        raise _Unknown((cmd.line, f"the command {cut(name, 30)!r}"))

    def test(self, cmd: Cmd, strict: bool = False) -> bool:
        args = []
        for parts, ln in cmd.words[1:]:
            # [[ ]] does not split words; keep each word whole (quoted or not) for comparisons
            if isinstance(parts, tuple):
                args.extend(parts[1])
            else:
                args.append(self.join(self.expand_parts(parts, ln, force_quoted=True)))
        if args and args[-1] in ("]]", "]"):
            args = args[:-1]
        try:
            return _test_expr(args, cmd.line)
        except _Unknown:
            if strict:
                raise
            return True


def _eval_int(node):
    import ast
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd, ast.Not)):
        v = _eval_int(node.operand)
        return -v if isinstance(node.op, ast.USub) else (int(not v) if isinstance(node.op, ast.Not) else v)
    if isinstance(node, ast.BinOp):
        a, b = _eval_int(node.left), _eval_int(node.right)
        ops = {ast.Add: lambda: a + b, ast.Sub: lambda: a - b, ast.Mult: lambda: a * b,
               ast.FloorDiv: lambda: int(a / b), ast.Mod: lambda: a % b}
        if type(node.op) in ops and abs(a) < 2 ** 62 and abs(b) < 2 ** 62:
            return ops[type(node.op)]()
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        a, b = _eval_int(node.left), _eval_int(node.comparators[0])
        cmp = {ast.Lt: a < b, ast.LtE: a <= b, ast.Gt: a > b, ast.GtE: a >= b, ast.Eq: a == b, ast.NotEq: a != b}
        if type(node.ops[0]) in cmp:
            return int(cmp[type(node.ops[0])])
    if isinstance(node, ast.BoolOp):
        vals = [_eval_int(v) for v in node.values]
        return int(all(vals)) if isinstance(node.op, ast.And) else int(any(vals))
    raise ValueError("not integer arithmetic")


def _attr(w, name: str):
    return getattr(w, name, None)


def _first_unset(items):
    return next((getattr(w, "unset", None) for w in items if getattr(w, "unset", None)), None)


def _need(w, line: int) -> str:
    if getattr(w, "unset", None):
        ln, name = w.unset
        raise _Unknown((ln, f"${name} is never set" if name.isidentifier() or name.isdigit() else name))
    if getattr(w, "cond", None):
        raise _Unknown(w.cond)
    return str(w)


def _test_expr(args: list, line: int) -> bool:
    """``[[ ... ]]`` / ``[ ... ]``: ``!``, ``&&``/``-a``, ``||``/``-o``, unary and binary tests."""
    for i, a in enumerate(args):
        if a in ("||", "-o"):
            return _test_expr(args[:i], line) or _test_expr(args[i + 1:], line)
    for i, a in enumerate(args):
        if a in ("&&", "-a") and 0 < i < len(args) - 1:
            return _test_expr(args[:i], line) and _test_expr(args[i + 1:], line)
    if args and args[0] == "!":
        return not _test_expr(args[1:], line)
    if len(args) >= 2 and args[0] == "(" and args[-1] == ")":
        return _test_expr(args[1:-1], line)
    if len(args) == 1:
        return _need(args[0], line) != ""
    if len(args) == 2:
        op, v = args
        if op == "-z":
            return _need(v, line) == ""
        if op == "-n":
            return _need(v, line) != ""
        raise _Unknown((line, f"the test {op} {cut(str(v), 30)}"))
    if len(args) == 3:
        a, op, b = args
        if op in ("==", "=", "!="):
            eq = _need(a, line) == _need(b, line)
            return eq if op != "!=" else not eq
        if op in ("-eq", "-ne", "-lt", "-le", "-gt", "-ge"):
            x, y = _need(a, line), _need(b, line)
            try:
                x, y = int(x), int(y)
            except ValueError:
                raise _Unknown((line, f"{x} {op} {y} (not integers)")) from None
            return {"-eq": x == y, "-ne": x != y, "-lt": x < y, "-le": x <= y, "-gt": x > y, "-ge": x >= y}[op]
    raise _Unknown((line, f"the test {cut(' '.join(map(str, args)), 40)}"))


def _exits(body: list) -> bool:
    for st in body:
        for _, cmd in st.items:
            if isinstance(cmd, Cmd) and cmd.words and not isinstance(cmd.words[0][0], tuple):
                parts = cmd.words[0][0]
                if len(parts) == 1 and parts[0][0] == "lit" and parts[0][1] == "exit":
                    return True
    return False


_SCRIPT = re.compile(r"(?:^|/)pretrain[A-Za-z0-9_]*\.py$")


def _is_script(w: str) -> bool:
    return bool(_SCRIPT.search(str(w)))


def launch_words(text: str, env: dict | None = None) -> LaunchWords:
    """The words bash would pass to the launch command of ``text`` (see the module doc).

    ``env``: values for variables the script does not set (``--env NAME=VALUE``; ``1``, ``2`` ...
    for positional arguments)."""
    if len(text) > MAX_SCRIPT_BYTES:
        raise ConfigError(f"megatron script is {len(text):,} characters, over the limit of {MAX_SCRIPT_BYTES:,}; "
                          f"give the launch script itself")
    import gc
    paused = gc.isenabled()
    gc.disable()    # tokens and nodes are acyclic; the collector would rescan the growing lists
    try:
        toks = Lexer(text).tokens()
        prog = Parser(toks).statements()
        sh = _Shell(env or {})
        try:
            sh.run(prog)
        except _Exit:
            pass
    finally:
        if paused:
            gc.enable()
    if sh.launches:
        words, _ = sh.launches[-1]
        k = next(i for i, w in enumerate(words) if _is_script(w))
        return LaunchWords(list(words[k + 1:]), _launcher_args(words[:k]), str(words[k]))
    args = [w for words in sh.all_words for w in words]
    return LaunchWords(args, [], None)


def _launcher_args(words: list) -> list:
    """torchrun / ``python -m torch.distributed.run`` arguments before the script."""
    for i, w in enumerate(words):
        if str(w).endswith("torchrun") or str(w) in ("torch.distributed.run", "torch.distributed.launch"):
            return list(words[i + 1:])
    return [w for w in words if str(w).startswith("--")]


def unset_error(w, flag: str) -> ConfigError:
    """The one error for a flag whose value the script leaves to the environment or a condition."""
    if getattr(w, "unset", None):
        line, name = w.unset
        if name.startswith("$(") or name.startswith("$(("):
            return ConfigError(f"megatron script line {line}: {flag} takes its value from {name}, which is not "
                               f"evaluated; write the value in the script")
        hint = f"--env {name}=VALUE" if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*|[0-9]+", name) else "a literal value"
        return ConfigError(f"megatron script line {line}: {flag} takes its value from ${name}, which the script "
                           f"never sets; give {hint}")
    line, why = w.cond
    return ConfigError(f"megatron script line {line}: {flag} is set in a branch whose condition cannot be decided "
                       f"({why}); give the variable with --env NAME=VALUE or edit the script")
