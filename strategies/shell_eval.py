"""Runs a parsed launch script (:mod:`strategies.shell_parse`) the way bash would, without running
any program: it keeps variables, arrays, positional parameters and functions, and records the words of
every command. What cannot be known (a program's output, the filesystem, a variable the script never
sets) stays a marked placeholder (:class:`Word`), see :mod:`strategies.shell_args`.

Bounds, checked before the work they limit: :data:`MAX_STEPS` commands run (loops, function calls),
:data:`MAX_VALUE_CHARS` characters in one value, :data:`MAX_EXPANDED` characters and words produced by
expansions in all, :data:`MAX_CALL_DEPTH` nested function calls, ``bash -c`` strings and here-documents.
"""
from __future__ import annotations

import re

from strategies.errors import ConfigError, cut
from strategies.shell_arith import Arith as ArithEval
from strategies.shell_arith import ArithError, Unknown, glob_regex
from strategies.shell_parse import DECLARE, AndOr, Arith, Case, Cmd, Func, If, Lexer, Loop, Not, Parser
from strategies.shell_words import DEFAULT_FIELDS, Undecided, Word, eval_test, ifs_split, marked, remark

MAX_STEPS = 500_000
"""Commands a script may run (each loop turn and function call counts); a launch script runs hundreds."""
MAX_VALUE_CHARS = 8 * 2 ** 20
"""Characters in one variable's value or one word (the script itself is at most 8 MiB)."""
MAX_EXPANDED = 24 * 2 ** 20
"""Characters plus words produced by all expansions of a run (bounds time and memory of doubling:
about 8 s on one core at the worst; the 2 MB scripts of benchmarks/shell_args.py use under 7 Mi)."""
MAX_CALL_DEPTH = 32
"""Nested function calls, ``bash -c`` strings and here-documents run as scripts."""
SCRIPT_RUNNERS = ("sbatch", "srun", "bash", "sh")
"""A here-document is a script only when fed to one of these; to anything else (cat, tee) it is data."""


class ScriptExit(Exception):
    pass


class _Return(Exception):
    pass


class _Break(Exception):
    pass


class _Continue(Exception):
    pass


_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class Shell:
    """One run of a script: variables, positional parameters, functions, the commands' words."""

    def __init__(self, env: dict):
        # scalars are str (Word), arrays are lists of Word; positional parameters from --env 1=... 2=...
        self.vars: dict = {k: Word(v) for k, v in env.items() if not k.isdigit()}
        n = max((int(k) for k in env if k.isdigit() and k != "0"), default=0)
        self.pos: list = [Word(env[str(i)]) if str(i) in env else None for i in range(1, n + 1)]
        self.readonly: set = set()
        self.funcs: dict = {}
        self.cond: tuple | None = None     # the undecided condition the current branch depends on
        self.launches: list = []
        self.all_words: list = []
        self.steps = self.spent = self.depth = 0
        self.always, self.calls, self.loops = 1, 0, 0     # exit always leaves; return/break need a call/loop
        self.pos_known = False       # positional parameters set by the script (a call, set --), not the user

    # ---- bounds
    def step(self, line: int) -> None:
        self.steps += 1
        if self.steps > MAX_STEPS:
            raise ConfigError(f"megatron script line {line}: the script runs more than {MAX_STEPS:,} commands "
                              f"(a loop or recursion); execsim reads launch scripts, give the launch command")

    def spend(self, n: int, line: int) -> None:
        """Account ``n`` characters/words about to be produced; refuse before producing them."""
        if n > MAX_VALUE_CHARS:
            raise ConfigError(f"megatron script line {line}: a value of {n:,} characters, over the limit of "
                              f"{MAX_VALUE_CHARS:,}; execsim reads launch scripts, not programs that grow strings")
        self.spent += n
        if self.spent > MAX_EXPANDED:
            raise ConfigError(f"megatron script line {line}: the script's expansions produce more than "
                              f"{MAX_EXPANDED:,} characters and words (a value doubled in a loop?); give the "
                              f"launch command")

    # ---- expansion
    def ifs(self) -> str:
        v = self.vars.get("IFS")
        return " \t\n" if v is None or isinstance(v, list) else str(v)

    def lookup(self, name: str):
        if name.isdigit():
            k = int(name)
            return None if k == 0 or k > len(self.pos) else self.pos[k - 1]
        if name == "#":
            return Word(str(len(self.pos)))
        if name == "?":
            return Word("0")
        return self.vars.get(name)

    def _unknown(self, name: str, line: int) -> Word:
        return Word("${" + name + "}", unset=(line, name))

    def param(self, p: tuple, line: int, quoted: bool):
        """Value of a ${...}: a str/Word, a list (array splat) or None (unset)."""
        name, index, op, arg = p
        if name in ("@", "*"):
            return [w if w is not None else self._unknown(str(i + 1), line) for i, w in enumerate(self.pos)]
        if name in ("$", "!", "-"):
            return self._unknown(name, line)
        v = self.lookup(name)
        if op == "!":                              # ${!N}: the variable N names
            if v is None or getattr(v, "unset", None) or isinstance(v, list):
                return self._unknown(name, line) if v is None or isinstance(v, list) else v
            if not _NAME_RE.fullmatch(str(v)) and not str(v).isdigit():
                raise ConfigError(f"megatron script line {line}: ${{!{name}}}: {cut(str(v), 30)!r} is not a "
                                  f"variable name")
            name, op, v = str(v), None, self.lookup(str(v))
        if index is not None:
            v = self._index(v, index, line)
        elif isinstance(v, list):
            v = v[0] if v else Word("")       # $ARR is its first item
        if op == "len":
            if v is None:
                return Word("0")
            return Word(str(len(v)))
        empty = v is None or (isinstance(v, str) and v == "") or (isinstance(v, list) and not v)
        if op in (":-", "-", ":=", "="):
            use_default = v is None if op in ("-", "=") else empty
            if use_default:
                d = self.join(self.expand_parts(arg, line, force_quoted=True), line)
                if op in (":=", "="):
                    self.assign_scalar(name, d, line)
                return d
            return v
        if op in (":+", "+"):
            present = v is not None if op == "+" else not empty
            return self.join(self.expand_parts(arg, line, force_quoted=True), line) if present else Word("")
        if v is None:
            # a positional parameter past the end of a function's (or set --'s) arguments is empty; at
            # the top level it is one the user may pass (--env 1=...)
            return Word("") if name.isdigit() and name != "0" and self.pos_known else self._unknown(name, line)
        if op in (":?", "?") or op is None:
            return v
        return self._operator(name, v, op, arg, line)

    def _index(self, v, index: str, line: int):
        if isinstance(v, list):
            if index in ("@", "*"):
                return list(v)
            k = self.arith(index, line)
            if getattr(k, "unset", None):
                return None
            k = int(k)
            return v[k] if -len(v) <= k < len(v) else None
        if v is not None and index in ("@", "*"):
            return [v]
        if v is not None and index.strip() == "0":
            return v
        return None

    def _operator(self, name: str, v, op: str, arg, line: int):
        """``${X^^}`` ``${X,,}`` case, ``${X#p}`` ``${X%p}`` removal, ``${X/p/r}`` replacement, ``${X:o:l}``."""
        if isinstance(v, list):
            return [self._operator(name, x, op, arg, line) for x in v]
        text, marks = str(v), (getattr(v, "unset", None), getattr(v, "cond", None))
        if marks[0]:
            return v
        if op in ("^^", "^", ",,", ","):
            if arg:
                return Word(text, unset=(line, f"${{{name}{op}PATTERN}}"))
            f = str.upper if op[0] == "^" else str.lower
            return marked(f(text) if len(op) == 2 else f(text[:1]) + text[1:], None, marks[1])
        if op == ":":
            spec = self.join(self.expand_parts(arg, line, force_quoted=True), line)
            off, _, length = str(spec).partition(":")
            o = self.arith(off, line)
            n = self.arith(length, line) if length else Word(str(len(text)))
            if getattr(o, "unset", None) or getattr(n, "unset", None):
                return Word(text, unset=(line, f"${{{name}:...}}"))
            o, n = int(o), int(n)
            start = max(len(text) + o, 0) if o < 0 else o
            end = start + n if n >= 0 else len(text) + n
            return marked(text[start:end], None, marks[1])
        if len(text) > 10_000:      # the glob matcher below is not linear on long values
            return Word(text, unset=(line, f"${{{name}{op}...}} on a long value"))
        pattern, repl = arg, None
        if op[0] == "/":
            pieces = list(arg or ())
            cut_at = next((i for i, p in enumerate(pieces) if p[0] == "lit" and not p[2] and "/" in p[1]), None)
            if cut_at is not None:
                left, _, right = pieces[cut_at][1].partition("/")
                pattern = pieces[:cut_at] + ([("lit", left, False)] if left else [])
                repl = ([("lit", right, False)] if right else []) + pieces[cut_at + 1:]
            repl = str(self.join(self.expand_parts(repl, line, force_quoted=True), line)) if repl else ""
        pieces = self.pattern_pieces(pattern, line)
        if pieces is None:
            return Word(text, unset=(line, f"${{{name}{op}...}}"))
        body = glob_regex(pieces).pattern
        lazy = body.replace(".*", ".*?")
        if op in ("#", "##"):
            m = re.match(f"(?s)(?:{lazy if op == '#' else body})", text)
            out = text[m.end():] if m else text
        elif op in ("%", "%%"):
            m = re.match(f"(?s)(.*{'?' if op == '%%' else ''})(?:{body})$", text)
            out = m.group(1) if m else text
        else:
            rx = re.compile(f"(?s){'^' if op == '/#' else ''}(?:{body}){'$' if op == '/%' else ''}")
            out = rx.sub(lambda _m: repl, text, count=0 if op == "//" else 1)
        return marked(out, None, marks[1])

    def pattern_pieces(self, parts, line: int):
        """``[(text, quoted)]`` of a pattern word (unquoted expansions are patterns too), or None when a
        piece is not known."""
        out = []
        for kind, val, quoted in parts or ():
            if kind == "lit":
                out.append((val, quoted))
                continue
            fields = self.expand_parts([(kind, val, True)], line)
            text = self.join(fields, line)
            if getattr(text, "unset", None):
                return None
            out.append((str(text), quoted))
        return out

    def arith(self, text: str, line: int) -> Word:
        """``$(( text ))``: the value, or a marked placeholder when a variable is not known."""
        def get(name):
            v = self.lookup(name)
            if isinstance(v, list):
                v = v[0] if v else ""
            if v is not None and (getattr(v, "unset", None) or getattr(v, "cond", None)):
                raise Unknown(name)
            return v

        try:
            return Word(str(ArithEval(get, lambda n, v: self.assign_scalar(n, Word(v), line)).eval(text)))
        except Unknown as u:
            v = self.lookup(u.name)
            if getattr(v, "cond", None):
                return Word(f"$(({text}))", cond=v.cond)
            return Word(f"$(({text}))", unset=getattr(v, "unset", None) or (line, u.name))
        except ArithError as e:
            raise ConfigError(f"megatron script line {line}: $(( {cut(text, 40)} )): {e}; fix the expression") \
                from None

    def expand_parts(self, parts, line: int, force_quoted: bool = False) -> list:
        """Expand a word's parts into fields of pieces ``(text, splittable, unset, cond)``."""
        fields: list = [[]]
        for kind, val, quoted in parts or ():
            q = quoted or force_quoted
            if kind == "lit":
                fields[-1].append((val, False, None, None))
            elif kind == "par":
                v = self.param(val, line, q)
                if isinstance(v, list):
                    self.spend(len(v) + sum(map(len, v)), line)
                    if (val[1] == "*" or val[0] == "*") and q:
                        sep = self.ifs()[:1]
                        fields[-1].append((sep.join(v), False, _first(v, "unset"), _first(v, "cond")))
                        continue
                    for j, item in enumerate(v):
                        if j:
                            fields.append([])
                        fields[-1].append((str(item), not q, getattr(item, "unset", None),
                                           getattr(item, "cond", None)))
                else:
                    u = getattr(v, "unset", None)
                    fields[-1].append((str(v), not q and u is None, u, getattr(v, "cond", None)))
            elif kind == "ari":
                w = self.arith(val, line)
                fields[-1].append((str(w), False, getattr(w, "unset", None), getattr(w, "cond", None)))
            else:     # command substitution: its output is not known
                fields[-1].append((f"$({val})", False, (line, f"$({cut(val, 30)})"), None))
        self.spend(sum(len(p[0]) for f in fields for p in f), line)
        return fields

    def join(self, fields: list, line: int = 0) -> Word:
        pieces = [p for f in fields for p in f]
        unset = next((p[2] for p in pieces if p[2] is not None), None)
        cond = next((p[3] for p in pieces if p[3] is not None), None)
        return marked(" ".join("".join(p[0] for p in f) for f in fields), unset, cond)

    def words(self, parts, line: int) -> list:
        """Fields of one word after expansion and word splitting (bash: unquoted expansions split
        on $IFS; a field of nothing but an empty unquoted expansion disappears)."""
        if isinstance(parts, tuple):      # a run of plain words: themselves
            self.spend(len(parts[1]), line)
            return parts[1] if self.cond is None else [remark(w, cond=self.cond) for w in parts[1]]
        if len(parts) == 1 and self.cond is None:
            kind, val, quoted = parts[0]
            if kind == "lit":
                return [val]               # a plain word: itself
            if kind == "par" and val[1] in ("@", "*") and val[2] is None and not (quoted and val[1] == "*") \
                    and isinstance(self.vars.get(val[0]), list) and "IFS" not in self.vars:
                v = self.vars[val[0]]      # ${A[@]}: the items, split when unquoted (C-speed path)
                self.spend(len(v) + sum(map(len, v)), line)
                if quoted:
                    return list(v)
                out: list = []
                for item in v:
                    if type(item) is str:
                        out.extend(DEFAULT_FIELDS(item))
                    else:
                        out.extend(remark(x, item.unset, item.cond) for x in DEFAULT_FIELDS(item))
                return out
        out = []
        ifs = self.ifs()
        for f in self.expand_parts(parts, line):
            cur: list = []
            have, unset, cond = False, None, None

            def flush():
                out.append(marked("".join(cur), unset, cond))
                cur.clear()

            for text, split, u, c in f:
                unset, cond = unset or u, cond or c
                if not split:
                    cur.append(text)
                    have = True
                    continue
                lead, pieces, trail = ifs_split(text, ifs)
                if lead and have:
                    flush()
                    have = False
                for j, piece in enumerate(pieces):
                    if j:
                        flush()
                    cur.append(piece)
                    have = True
                if trail and have:
                    flush()
                    have = False
            if have:
                flush()
        if self.cond is not None:
            out = [remark(w, cond=getattr(w, "cond", None) or self.cond) for w in out]
        return out

    # ---- assignment
    def assign_scalar(self, name: str, v, line: int) -> None:
        if name in self.readonly:
            raise ScriptExit()       # bash: "readonly variable"; a non-interactive shell stops there
        if self.cond is not None:
            v = remark(v, cond=getattr(v, "cond", None) or self.cond)
        self.vars[name] = v

    def assign(self, name: str, append: bool, value, items, line: int) -> None:
        index = None
        if "[" in name:
            name, index = name[:name.index("[")], name[name.index("[") + 1:-1]
        if name in self.readonly:
            raise ScriptExit()       # bash: "readonly variable"; a non-interactive shell stops there
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
            return
        v = self.join(self.expand_parts(value, line, force_quoted=True), line) if value else Word("")
        if self.cond is not None:
            v = remark(v, cond=getattr(v, "cond", None) or self.cond)
        old = self.vars.get(name)
        if index is not None:
            k = self.arith(index, line)
            arr = old if isinstance(old, list) else ([] if old is None else [old])
            self.vars[name] = arr
            if getattr(k, "unset", None):
                arr.append(remark(v, unset=k.unset))
                return
            k = int(k)
            cur = arr[k] if -len(arr) <= k < len(arr) else None
            if append and cur is not None:
                v = marked(str(cur) + str(v), _attr(cur, "unset") or _attr(v, "unset"), _attr(cur, "cond") or _attr(v, "cond"))
            if -len(arr) <= k < len(arr):
                arr[k] = v
            else:                    # bash arrays are sparse; the items keep their order
                arr.append(v)
            return
        if append and old is not None:
            if isinstance(old, list):
                old.append(v)
                return
            self.spend(len(old) + len(v), line)
            v = marked(str(old) + str(v), _attr(old, "unset") or _attr(v, "unset"), _attr(old, "cond") or _attr(v, "cond"))
        self.vars[name] = v

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
        self.step(getattr(cmd, "line", 0))
        if isinstance(cmd, If):
            if cmd.subshell:
                return self.subshell(lambda: self.if_block(cmd))
            return self.if_block(cmd)
        if isinstance(cmd, Not):
            r = self.command(cmd.cmd)
            return None if r is None else not r
        if isinstance(cmd, Arith):
            v = self.arith(cmd.text, cmd.line)
            return None if getattr(v, "unset", None) or getattr(v, "cond", None) else int(v) != 0
        if isinstance(cmd, Loop):
            return self.loop(cmd)
        if isinstance(cmd, Case):
            return self.case(cmd)
        if isinstance(cmd, Func):
            self.funcs[cmd.name] = cmd
            return True
        for name, append, value, items, line in cmd.assigns:
            self.assign(name, append, value, items, line)
        if not cmd.words:
            return True
        return self.simple(cmd)

    def simple(self, cmd: Cmd) -> bool | None:
        head = self.words(*cmd.words[0])
        name = str(head[0]) if head else ""
        if name in ("[[", "[", "test"):
            return self.test(cmd)
        words = list(head)
        for parts, ln in cmd.words[1:]:
            words.extend(self.words(parts, ln))
        builtin = _BUILTINS.get(name)
        if builtin is not None:
            return builtin(self, cmd, words)
        if name in self.funcs:
            return self.call(self.funcs[name], words[1:], cmd.line)
        if self.bash_c(words, cmd.line):      # bash -c "...", also behind a launcher (srun ... bash -c)
            return True
        if name == "eval":                    # its words joined are script text, read in this shell
            self.run_text(" ".join(str(w) for w in words[1:]), cmd.line, self.pos, subshell=False)
            return True
        if cmd.heredocs and any(str(w).rsplit("/", 1)[-1] in SCRIPT_RUNNERS for w in words):
            for doc in cmd.heredocs:
                body = doc["body"] if doc["quoted"] else _unescape_heredoc(doc["body"])
                self.run_text(body, doc["line"], self.pos)
            return True
        if name in ("echo", "printf") or name.endswith("/echo"):
            return True
        self.all_words.append(words)
        if any(_is_script(w) for w in words):
            self.launches.append((words, cmd.line))
        return True

    def bash_c(self, words: list, line: int) -> bool:
        """``bash -c "SCRIPT" [NAME ARGS...]``: run SCRIPT's text as a script (it is data: read, not run)."""
        start = next((k for k, w in enumerate(words) if str(w).rsplit("/", 1)[-1] in ("bash", "sh")), None)
        if start is None:
            return False
        for k in range(start + 1, len(words)):
            w = str(words[k])
            if w.startswith("-") and not w.startswith("--") and w.endswith("c") and k + 1 < len(words):
                self.run_text(str(words[k + 1]), line, list(words[k + 3:]))
                return True
            if not w.startswith("-"):
                return False
        return False

    def run_text(self, text: str, line: int, pos: list, subshell: bool = True) -> None:
        """A nested script (``bash -c`` string, here-document fed to sbatch/srun/bash/sh) in a subshell;
        ``eval``'s text in this shell."""
        self.spend(len(text), line)
        prog = Parser(Lexer(text, line).tokens()).statements()
        if not subshell:
            self.depth += 1
            if self.depth > MAX_CALL_DEPTH:
                raise ConfigError(f"megatron script line {line}: eval nested more than {MAX_CALL_DEPTH} deep; give "
                                  f"the launch command")
            try:
                self.run(prog)
            finally:
                self.depth -= 1
            return

        def body():
            saved = self.pos, self.pos_known
            # bash -c's arguments are the script's own; a here-document's script sees this shell's
            self.pos, self.pos_known = list(pos), self.pos_known or pos is not self.pos
            try:
                self.run(prog)
            finally:
                self.pos, self.pos_known = saved
        self.subshell(body)

    def subshell(self, fn) -> bool:
        """Run ``fn`` in a copy of the variables (a subshell's assignments do not outlive it)."""
        self.depth += 1
        if self.depth > MAX_CALL_DEPTH:
            raise ConfigError(f"megatron script: subshells, bash -c strings and here-documents nested more than "
                              f"{MAX_CALL_DEPTH} deep; give the launch command")
        self.spend(len(self.vars), 0)
        saved = self.vars, set(self.readonly), dict(self.funcs)
        self.vars = {k: (list(v) if isinstance(v, list) else v) for k, v in self.vars.items()}
        try:
            fn()
        except ScriptExit:
            pass
        finally:
            self.vars, self.readonly, self.funcs = saved
            self.depth -= 1
        return True

    def call(self, fn: Func, args: list, line: int) -> bool:
        self.depth += 1
        if self.depth > MAX_CALL_DEPTH:
            raise ConfigError(f"megatron script line {line}: function {fn.name} calls nest more than "
                              f"{MAX_CALL_DEPTH} deep (recursion); give the launch command")
        saved, self.pos = self.pos, list(args)
        saved_known, self.pos_known = self.pos_known, True
        saved_loops, self.loops = self.loops, 0          # break inside a function does not leave the caller's loop
        self.calls += 1
        try:
            self.run(fn.body)
        except _Return:
            pass
        finally:
            self.pos, self.loops, self.pos_known = saved, saved_loops, saved_known
            self.calls -= 1
            self.depth -= 1
        return True

    def loop(self, lp: Loop) -> bool:
        if lp.kind == "for":
            items = list(self.pos) if lp.words is None else \
                [w for parts, ln in lp.words for w in self.words(parts, ln)]
            for item in items:
                self.step(lp.line)
                self.assign_scalar(lp.name, item if item is not None else self._unknown("@", lp.line), lp.line)
                if self._turn(lp.body):
                    break
            return True
        if lp.kind == "cfor":
            init, cond, step = lp.cond
            if getattr(self.arith(init, lp.line), "unset", None):
                return True
            while True:
                self.step(lp.line)
                c = self.arith(cond, lp.line) if cond.strip() else Word("1")
                if getattr(c, "unset", None) or getattr(c, "cond", None) or int(c) == 0:
                    return True
                if self._turn(lp.body):
                    return True
                self.arith(step, lp.line)
        while True:          # while / until: a condition that cannot be decided runs no turn
            self.step(lp.line)
            try:
                c = self.condition(lp.cond)
            except Undecided:
                return True
            if c != (lp.kind == "while"):
                return True
            if self._turn(lp.body):
                return True

    def _turn(self, body: list) -> bool:
        """One turn of a loop body; True when it breaks."""
        self.loops += 1
        try:
            self.run(body)
        except _Break:
            return True
        except _Continue:
            pass
        finally:
            self.loops -= 1
        return False

    def case(self, c: Case) -> bool:
        word = self.join(self.expand_parts(c.word, c.line, force_quoted=True), c.line)
        if getattr(word, "unset", None) or getattr(word, "cond", None):
            why = (c.line, f"${word.unset[1]} is never set") if getattr(word, "unset", None) else word.cond
            return self.undecided_bodies([body for _, body in c.items] + [[]], why)
        for pats, body in c.items:
            for parts, ln in pats:
                pieces = self.pattern_pieces(parts, ln)
                if pieces is None:
                    return self.undecided_bodies([body for _, body in c.items] + [[]], (ln, "a case pattern"))
                if glob_regex(pieces).fullmatch(str(word)):
                    self.run(body)
                    return True
        return True

    def if_block(self, blk: If) -> bool:
        for cond, body in blk.branches:
            if cond is None:
                self.run(body)
                return True
            try:
                taken = self.condition(cond)
            except Undecided as u:
                bodies = [b for _, b in blk.branches]
                if len(blk.branches) == 1 or blk.branches[-1][0] is not None:
                    bodies.append([])               # the implicit empty else
                return self.undecided_bodies(bodies, u.why)
            if taken:
                self.run(body)
                return True
        return True

    def undecided_bodies(self, bodies: list, why: tuple) -> bool:
        """A condition whose value cannot be known: the branch that does not exit is the script's
        success path; with no such branch, every branch runs with its words marked."""
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
        if isinstance(cmd, Not):
            return not self.cond_command(cmd.cmd)
        if isinstance(cmd, Arith):
            r = self.command(cmd)
            if r is None:
                raise Undecided((cmd.line, f"(( {cut(cmd.text, 30)} ))"))
            return r
        if not isinstance(cmd, Cmd) or not cmd.words:
            raise Undecided((getattr(cmd, "line", 0), "a compound condition"))
        head = self.words(*cmd.words[0])
        name = str(head[0]) if head else ""
        if name in ("true", ":"):
            return True
        if name == "false":
            return False
        if name in ("[[", "[", "test"):
            return self.test(cmd, strict=True)
        raise Undecided((cmd.line, f"the command {cut(name, 30)!r}"))

    def test(self, cmd: Cmd, strict: bool = False) -> bool:
        args = []
        double = not isinstance(cmd.words[0][0], tuple) and cmd.words[0][0] == [("lit", "[[", False)]
        for j, (parts, ln) in enumerate(cmd.words[1:]):
            # [[ ]] does not split words; keep each word whole (quoted or not) for comparisons
            if isinstance(parts, tuple):
                args.extend(parts[1])
                continue
            w = self.join(self.expand_parts(parts, ln, force_quoted=True), ln)
            if double and j >= 2 and str(args[-1]) in ("==", "=", "!=") and any(
                    not p[2] and (p[0] == "par" or any(c in p[1] for c in "*?[\\")) for p in parts):
                w = Word(str(w), getattr(w, "unset", None), getattr(w, "cond", None))
                w.pattern = self.pattern_pieces(parts, ln)     # the right side of == is a glob pattern
            args.append(w)
        if args and args[-1] in ("]]", "]"):
            args = args[:-1]
        try:
            return eval_test(args, cmd.line, self)
        except Undecided:
            if strict:
                raise
            return True


def _builtin_declare(sh: Shell, cmd: Cmd, words: list) -> bool:
    opts = "".join(str(w)[1:] for w in words[1:] if str(w).startswith("-"))
    for o, what in (("A", "associative arrays"), ("n", "name references")):
        if o in opts:
            raise ConfigError(f"megatron script line {cmd.line}: {words[0]} -{o} ({what}) is not read by execsim; "
                              f"write the values as plain variables or arrays")
    if str(words[0]) == "readonly" or "r" in opts:
        sh.readonly.update(a[0].split("[")[0] for a in cmd.assigns)
        sh.readonly.update(str(w) for w in words[1:] if _NAME_RE.fullmatch(str(w)))
    return True


def _builtin_set(sh: Shell, cmd: Cmd, words: list) -> bool:
    args = words[1:]
    if "--" in [str(a) for a in args]:
        sh.pos, sh.pos_known = list(args[[str(a) for a in args].index("--") + 1:]), True
    elif args and not str(args[0]).startswith(("-", "+")):
        sh.pos, sh.pos_known = list(args), True
    return True


def _builtin_shift(sh: Shell, cmd: Cmd, words: list) -> bool:
    n = 1
    if len(words) > 1:
        v = sh.arith(str(words[1]), cmd.line)
        if getattr(v, "unset", None):
            return None
        n = int(v)
    if n < 0 or n > len(sh.pos):
        return False
    sh.pos = sh.pos[n:]
    return True


def _builtin_unset(sh: Shell, cmd: Cmd, words: list) -> bool:
    for w in words[1:]:
        if not str(w).startswith("-") and str(w) not in sh.readonly:
            sh.vars.pop(str(w), None)
            sh.funcs.pop(str(w), None)
    return True


def _raise(exc, where: str):
    """``return`` / ``break`` / ``continue``: leave the function or loop; outside one, bash reports an
    error and goes on (the statement does nothing)."""
    def builtin(sh, cmd, words):
        if getattr(sh, where) > 0:
            raise exc()
        return False
    return builtin


#: builtins that change the shell (their words are no command's arguments)
_BUILTINS = {**{d: _builtin_declare for d in DECLARE}, "set": _builtin_set, "shift": _builtin_shift,
             "unset": _builtin_unset, "exit": _raise(ScriptExit, "always"), "return": _raise(_Return, "calls"),
             "break": _raise(_Break, "loops"), "continue": _raise(_Continue, "loops"), "true": lambda *a: True,
             ":": lambda *a: True, "false": lambda *a: False}


def _unescape_heredoc(body: str) -> str:
    r"""An unquoted here-document's body as its reader receives it: ``\$``, ``\```, ``\\`` lose the backslash."""
    return re.sub(r"\\([$`\\])", r"\1", body)


def _attr(w, name: str):
    return getattr(w, name, None)


def _first(items, attr: str):
    return next((getattr(w, attr, None) for w in items if getattr(w, attr, None)), None)


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


def is_script(w: str) -> bool:
    """Whether ``w`` names a Megatron-LM training script (``pretrain_gpt.py``, ``pretrain_mamba.py`` ...)."""
    return _is_script(w)
