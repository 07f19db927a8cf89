"""Lexer and parser of the bash subset that Megatron-LM launch scripts use (see
:mod:`strategies.shell_args`, which runs what this parses).

One left-to-right scan with compiled patterns (``re.match`` at a position, never a slice of the
remaining text), so work is linear in the script's length. Tokens carry their line number for
error messages.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from strategies.errors import ConfigError, cut

# ------------------------------------------------------------------------------------------- lexing

#: one token at a position: blanks, a line continuation, a newline, a comment, an operator, or a word
#: made only of plain characters and ending at a blank, an operator or the end (no quotes, no $)
_SCAN = re.compile(r"[ \t\r]*(?:(?P<cont>\\\n)|(?P<nl>\n)|(?P<comment>#[^\n]*)"
                   r"|\"(?P<dq>[^\"\\\\$`]*)\"(?=[\s;&|<>()]|$)|'(?P<sq>[^']*)'(?=[\s;&|<>()]|$)"
                   r"|(?P<op>&&|\|\||;;|>>|<<|&>|2>|1>|[;&|<>()])"
                   r"|(?P<plain>[^\s'\"\\$`;&|<>()#][^\s'\"\\$`;&|<>()]*)(?=[\s;&|<>()]|$)|(?P<blank>))")
_PLAIN_IN_WORD = re.compile(r"[^\s'\"\\$`;&|<>()]+")     # '#' inside a word is a character
_DQ_TEXT = re.compile(r'[^"\\$`]+')
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SPECIAL = re.compile(r"[0-9@*#?$!-]")
_PLAIN_WORD = r"[^\s'\"\\$`;&|<>()#][^\s'\"\\$`;&|<>()]*(?=[\s;&|<>()]|$)"
#: a run of plain words on one line (split in C: a 2 MB line of arguments is one match)
_RUN = re.compile(r"(?:[ \t\r]*" + _PLAIN_WORD + ")+")
_QWORD_RE = r"\"([^\"\\\\$`]*)\"(?=[\s;&|<>()]|$)|'([^']*)'(?=[\s;&|<>()]|$)"
_QWORD = re.compile(_QWORD_RE)
#: a run of quoted words without expansions ("--vocab-size 128256" "--num-workers 1" ...)
_QRUN = re.compile(r"(?:[ \t\r]*(?:" + _QWORD_RE + "))+")
#: words the parser treats as keywords at the start of a command
RESERVED = frozenset(("if", "then", "else", "elif", "fi", "do", "done", "while", "until", "for", "case", "esac",
                      "in", "{", "}", "!", "function", "select", "time"))
_BRACE_TEXT = re.compile(r"[^}'\"\\$`]+")


class Lexer:
    """Tokens: ``('w', parts, line)``, ``('op', op, line)``, ``('nl', None, line)``.

    A word's parts: ``('lit', text, quoted)``, ``('par', (name, index, op, arg_parts), quoted)``,
    ``('cmd', text, quoted)`` (command substitution), ``('ari', text, quoted)``."""

    def __init__(self, text: str):
        self.s, self.i, self.line = text, 0, 1

    def error(self, msg: str) -> ConfigError:
        return ConfigError(f"megatron script line {self.line}: {msg}")

    def _advance_to(self, j: int) -> None:
        self.line += self.s.count("\n", self.i, j)
        self.i = j

    def tokens(self) -> list:
        s, out = self.s, []
        append = out.append
        n, i, line = len(s), 0, 1
        scan, run = _SCAN.match, _RUN.match
        while i < n:
            m = scan(s, i)
            kind = m.lastgroup
            if kind == "plain":          # the common case: words without quotes or expansions
                r = run(s, i)
                ws = r.group().split()
                # reserved words and the first word of a command stay tokens of their own (the
                # parser looks at them); the other plain words of the line go as one run
                k = 0
                while k < len(ws) - 1 and ws[k] in RESERVED:
                    k += 1
                for w in ws[:k + 1]:
                    append(("w", [("lit", w, False)], line))
                if k + 1 < len(ws):
                    append(("r", ws[k + 1:], line))
                i = r.end()
            elif kind == "blank":        # blanks, then a word that needs the slow path (or the end)
                i = m.end()
                if i < n:
                    self.i, self.line = i, line
                    append(("w", self._word(), line))
                    i, line = self.i, self.line
            elif kind == "dq" or kind == "sq":      # quoted words without expansions: literal words
                r = _QRUN.match(s, i)
                texts = [q.group(1) if q.group(1) is not None else q.group(2) for q in _QWORD.finditer(r.group())]
                append(("q", texts, line))
                line += r.group().count("\n")
                i = r.end()
            elif kind == "cont":
                i, line = m.end(), line + 1
            elif kind == "nl":
                append(("nl", None, line))
                i, line = m.end(), line + 1
            elif kind == "comment":
                i = m.end()
            else:
                append(("op", m.group(kind), line))
                i = m.end()
        self.i, self.line = i, line
        append(("nl", None, line))
        return out

    def _word(self, stop_brace: bool = False) -> list:
        """Parts of one word from ``self.i`` (up to a blank/operator, or an unmatched ``}``)."""
        s, parts = self.s, []
        n = len(s)
        while self.i < n:
            c = s[self.i]
            if c == "'":
                j = s.find("'", self.i + 1)
                if j < 0:
                    raise self.error("a ' quote is not closed; close it")
                parts.append(("lit", s[self.i + 1:j], True))
                self._advance_to(j + 1)
            elif c == '"':
                self._advance_to(self.i + 1)
                parts.extend(self._double_quoted())
            elif c == "\\":
                if self.i + 1 < n and s[self.i + 1] == "\n":
                    self._advance_to(self.i + 2)      # line continuation
                    continue
                parts.append(("lit", s[self.i + 1:self.i + 2], True))
                self._advance_to(self.i + 2)
            elif c == "$":
                parts.append(self._dollar(False))
            elif c == "`":
                parts.append(("cmd", self._backquote(), False))
            elif stop_brace and c == "}":
                break
            elif stop_brace:
                m = _BRACE_TEXT.match(s, self.i)
                if not m:
                    parts.append(("lit", c, False))
                    self._advance_to(self.i + 1)
                    continue
                parts.append(("lit", m.group(), False))
                self._advance_to(m.end())
            else:
                m = _PLAIN_IN_WORD.match(s, self.i)
                if not m:
                    break
                parts.append(("lit", m.group(), False))
                self._advance_to(m.end())
        return parts

    def _double_quoted(self) -> list:
        s, parts = self.s, []
        n = len(s)
        while self.i < n:
            c = s[self.i]
            if c == '"':
                self._advance_to(self.i + 1)
                if not parts:
                    parts.append(("lit", "", True))
                return parts
            if c == "\\":
                nxt = s[self.i + 1:self.i + 2]
                if nxt == "\n":
                    self._advance_to(self.i + 2)
                elif nxt in ('"', "\\", "$", "`"):
                    parts.append(("lit", nxt, True))
                    self._advance_to(self.i + 2)
                else:
                    parts.append(("lit", "\\", True))
                    self._advance_to(self.i + 1)
            elif c == "$":
                parts.append(self._dollar(True))
            elif c == "`":
                parts.append(("cmd", self._backquote(), True))
            else:
                m = _DQ_TEXT.match(s, self.i)
                parts.append(("lit", m.group(), True))
                self._advance_to(m.end())
        raise self.error('a " quote is not closed; close it')

    def _backquote(self) -> str:
        j = self.s.find("`", self.i + 1)
        if j < 0:
            raise self.error("a ` command substitution is not closed; close it")
        text = self.s[self.i + 1:j]
        self._advance_to(j + 1)
        return text

    def _matching_paren(self, start: int, depth: int) -> int:
        """Index after the ``)`` closing ``depth`` open parentheses from ``start`` (quotes skipped)."""
        s, i, n = self.s, start, len(self.s)
        while i < n:
            c = s[i]
            if c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
                if depth == 0:
                    return i + 1
            elif c in "'\"":
                j = s.find(c, i + 1)
                if j < 0:
                    break
                i = j
            elif c == "\\":
                i += 1
            i += 1
        raise self.error("a $( ... ) is not closed; close it")

    def _dollar(self, quoted: bool) -> tuple:
        s, i = self.s, self.i + 1
        if s.startswith("((", i):
            j = self._matching_paren(i, 0)
            text = s[i + 2:j - 2]
            self._advance_to(j)
            return ("ari", text, quoted)
        if s.startswith("(", i):
            j = self._matching_paren(i, 0)
            text = s[i + 1:j - 1]
            self._advance_to(j)
            return ("cmd", text, quoted)
        if s.startswith("{", i):
            return self._braced(quoted)
        m = _NAME.match(s, i) or _SPECIAL.match(s, i)
        if not m:
            self._advance_to(i)
            return ("lit", "$", quoted)
        self._advance_to(m.end())
        return ("par", (m.group(), None, None, None), quoted)

    def _braced(self, quoted: bool) -> tuple:
        s = self.s
        i = self.i + 2
        length = s.startswith("#", i) and (_NAME.match(s, i + 1) or _SPECIAL.match(s, i + 1))
        if length:
            i += 1
        m = _NAME.match(s, i) or _SPECIAL.match(s, i)
        if not m:
            raise self.error(f"bad parameter expansion {cut(s[self.i:self.i + 30], 30)!r}; write ${{NAME}}")
        name, i = m.group(), m.end()
        index = None
        if s.startswith("[", i):
            j = s.find("]", i)
            if j < 0:
                raise self.error(f"${{{name}[ ... is not closed with ]")
            index, i = s[i + 1:j], j + 1
        if length:
            if not s.startswith("}", i):
                raise self.error(f"${{#{name} ... must end with }}")
            self._advance_to(i + 1)
            return ("par", (name, index, "#", None), quoted)
        om = re.compile(r":?[-=+?]|#{1,2}|%{1,2}|/{1,2}|:").match(s, i)
        op, arg = None, None
        if om:
            op = om.group()
            self._advance_to(om.end())
            arg = self._word(stop_brace=True)
            i = self.i
        if not s.startswith("}", i):
            raise self.error(f"${{{name} ... is not closed with }}")
        self._advance_to(i + 1)
        return ("par", (name, index, op, arg), quoted)


# ------------------------------------------------------------------------------------------ parsing

@dataclass
class Cmd:
    words: list        # [(parts, line)]
    assigns: list      # [(name, append, value_parts | None, array_items | None, line)]
    line: int


@dataclass
class If:
    branches: list     # [(condition list, body list)]; a None condition = else
    line: int


@dataclass
class AndOr:
    items: list        # [(op, pipeline)]: op in (None, '&&', '||')


_ASSIGN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\+?)=")
SKIP_BLOCKS = {"for": "done", "while": "done", "until": "done", "case": "esac", "select": "done"}
DECLARE = ("export", "declare", "local", "readonly", "typeset")


class Parser:
    def __init__(self, toks: list):
        self.t, self.k = toks, 0

    def peek(self):
        return self.t[self.k]

    def word_text(self, tok) -> str | None:
        if tok[0] == "r" or tok[0] == "q":
            return None
        """The literal text of an unquoted plain word (a keyword candidate), else None."""
        if tok[0] != "w" or len(tok[1]) != 1 or tok[1][0][0] != "lit" or tok[1][0][2]:
            return None
        return tok[1][0][1]

    def skip_nl(self):
        while self.peek()[0] == "nl" or (self.peek()[0] == "op" and self.peek()[1] in (";", "&")):
            if self.k == len(self.t) - 1:
                return
            self.k += 1

    def at_end(self) -> bool:
        return self.k >= len(self.t) - 1

    def statements(self, stop: tuple = ()) -> list:
        out = []
        while True:
            self.skip_nl()
            if self.at_end():
                return out
            kw = self.word_text(self.peek())
            if kw in stop:
                return out
            out.append(self.and_or())

    def and_or(self) -> AndOr:
        items = [(None, self.pipeline())]
        while self.peek()[0] == "op" and self.peek()[1] in ("&&", "||"):
            op = self.peek()[1]
            self.k += 1
            while self.peek()[0] == "nl":
                self.k += 1
            items.append((op, self.pipeline()))
        return AndOr(items)

    def pipeline(self):
        first = self.command()
        while self.peek()[0] == "op" and self.peek()[1] == "|":
            self.k += 1
            self.command()            # later stages of a pipe (``| tee log``) pass no arguments
        return first

    def expect_kw(self, kw: str, line: int):
        self.skip_nl()
        if self.word_text(self.peek()) != kw:
            raise ConfigError(f"megatron script line {line}: the block is missing its '{kw}'; close it")
        self.k += 1

    def command(self):
        tok = self.peek()
        kw = self.word_text(tok)
        line = tok[2]
        if kw == "if":
            return self.if_block(line)
        if kw in SKIP_BLOCKS:
            return self.skip_block(kw, SKIP_BLOCKS[kw], line)
        if kw in ("{",):
            self.k += 1
            body = self.statements(("}",))
            self.expect_kw("}", line)
            return If([(None, body)], line)
        if tok[0] == "op" and tok[1] == "(":          # subshell: its commands run
            self.k += 1
            body = self.statements()
            return If([(None, body)], line)
        # function definition: NAME () { ... } or function NAME { ... }
        nxt = self.t[self.k + 1] if self.k + 1 < len(self.t) else None
        if kw == "function" or (kw and "=" not in kw and nxt and nxt[0] == "op" and nxt[1] == "(" and self.k + 2 < len(self.t)
                                and self.t[self.k + 2][0] == "op" and self.t[self.k + 2][1] == ")"):
            return self.skip_function(line)
        return self.simple()

    def skip_block(self, start: str, end: str, line: int):
        depth = 0
        while not self.at_end():
            w = self.word_text(self.peek())
            if w in SKIP_BLOCKS:
                depth += 1
            elif w in ("done", "esac"):
                depth -= 1
                if depth == 0:
                    self.k += 1
                    return Cmd([], [], line)
            self.k += 1
        raise ConfigError(f"megatron script line {line}: '{start}' is not closed by '{end}'; close it")

    def skip_function(self, line: int):
        while not self.at_end() and self.word_text(self.peek()) != "{":
            self.k += 1
        depth = 0
        while not self.at_end():
            w = self.word_text(self.peek())
            depth += (w == "{") - (w == "}")
            self.k += 1
            if depth == 0:
                return Cmd([], [], line)
        raise ConfigError(f"megatron script line {line}: a function body is not closed by '}}'; close it")

    def if_block(self, line: int) -> If:
        branches = []
        self.k += 1
        cond = self.statements(("then",))
        self.expect_kw("then", line)
        body = self.statements(("elif", "else", "fi"))
        branches.append((cond, body))
        while True:
            self.skip_nl()
            kw = self.word_text(self.peek())
            if kw == "elif":
                self.k += 1
                cond = self.statements(("then",))
                self.expect_kw("then", line)
                branches.append((cond, self.statements(("elif", "else", "fi"))))
            elif kw == "else":
                self.k += 1
                branches.append((None, self.statements(("fi",))))
            elif kw == "fi":
                self.k += 1
                return If(branches, line)
            else:
                raise ConfigError(f"megatron script line {line}: 'if' is not closed by 'fi'; close it")

    def simple(self) -> Cmd:
        words, assigns = [], []
        line = self.peek()[2]
        toks = self.t
        while True:
            tok = toks[self.k]
            if tok[0] == "r" or tok[0] == "q":      # a run of plain (or quoted) literal words
                ws, j = tok[1], 0
                self.k += 1
                if tok[0] == "r" and self._assigning(words):
                    while j < len(ws) and _ASSIGN.match(ws[j]):
                        self._assign([("lit", ws[j], False)], tok[2], assigns, j == len(ws) - 1)
                        j += 1
                if j < len(ws):
                    words.append((("run", ws[j:]), tok[2]))
                continue
            if tok[0] == "op" and tok[1] in ("<", ">", ">>", "&>", "2>", "1>", "<<"):
                self.k += 1
                if self.peek()[0] == "w":
                    self.k += 1              # the redirection's target
                elif self.peek()[0] == "op" and self.peek()[1] == "&":
                    self.k += 2              # 2>&1
                continue
            if tok[0] != "w":
                break
            parts = tok[1]
            first = parts[0]
            self.k += 1
            if first[0] == "lit" and not first[2] and _ASSIGN.match(first[1]) and self._assigning(words):
                self._assign(parts, tok[2], assigns)
                continue
            words.append((parts, tok[2]))
        return Cmd(words, assigns, line)

    def _assigning(self, words: list) -> bool:
        """Words here are assignments: at the start of a command, or after export/declare/..."""
        return not words or (not isinstance(words[0][0], tuple) and self.word_text(("w", words[0][0], 0)) in DECLARE)

    def _assign(self, parts: list, line: int, assigns: list, maybe_array: bool = True) -> None:
        """``NAME=value`` / ``NAME+=value`` (parts of the word, already consumed), or an array
        ``NAME=( ... )`` when the word is ``NAME=`` and ``(`` follows."""
        first = parts[0]
        m = _ASSIGN.match(first[1])
        name, append = m.group(1), bool(m.group(2))
        rest = ([("lit", first[1][m.end():], False)] if first[1][m.end():] else []) + list(parts[1:])
        nxt = self.peek()
        if rest or not maybe_array or not (nxt[0] == "op" and nxt[1] == "("):
            assigns.append((name, append, rest, None, line))
            return
        self.k += 1
        items = []
        while True:
            t = self.peek()
            if t[0] == "nl":
                if self.at_end():
                    raise ConfigError(f"megatron script line {line}: the array {name}=( is not closed with ); close it")
                self.k += 1
                continue
            if t[0] == "op" and t[1] == ")":
                self.k += 1
                break
            if t[0] == "r" or t[0] == "q":
                items.append((("run", t[1]), t[2]))
            elif t[0] == "w":
                items.append((t[1], t[2]))
            else:
                raise ConfigError(f"megatron script line {t[2]}: unexpected {t[1]!r} inside the array {name}=( ... ); "
                                  f"quote it")
            self.k += 1
        assigns.append((name, append, None, items, line))
