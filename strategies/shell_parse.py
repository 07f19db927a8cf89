"""Lexer and parser of the bash subset that Megatron-LM launch scripts use (see
:mod:`strategies.shell_args`, which runs what this parses).

One left-to-right scan with compiled patterns (``re.match`` at a position, never a slice of the
remaining text), so work is linear in the script's length. Tokens carry their line number for
error messages.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from strategies.errors import ConfigError, cut

# ------------------------------------------------------------------------------------------- lexing

#: one token at a position: blanks, a line continuation, a newline, a comment, an operator, or a word
#: made only of plain characters and ending at a blank, an operator or the end (no quotes, no $)
_SCAN = re.compile(r"[ \t\r]*(?:(?P<cont>\\\n)|(?P<nl>\n)|(?P<comment>#[^\n]*)"
                   r"|\"(?P<dq>[^\"\\\\$`]*)\"(?=[ \t\r\n;&|<>()]|$)|'(?P<sq>[^']*)'(?=[ \t\r\n;&|<>()]|$)"
                   r"|(?P<procsub>[<>]\()|(?P<arith>\(\()|(?P<heredoc><<-?)(?!<)"
                   r"|(?P<op>&&|\|\||;;&|;;|;&|>>|<<<|&>>|&>|[0-9]?>&|[0-9]?<&|[0-9]?>>|[0-9]?>\||[0-9]?>|[0-9]?<|[;&|()])"
                   r"|(?P<plain>(?![0-9]+[<>])[^ \t\r\n'\"\\$`;&|<>()#][^ \t\r\n'\"\\$`;&|<>()]*)(?=[ \t\r\n;&|<>()]|$)|(?P<blank>))")
#: bash's metacharacters end words: space, tab, newline, | & ; ( ) < > (the manual, Definitions); \r too, so
#: that a file with CRLF line ends reads; any other character (NBSP, \v, \f) is part of a word, as in bash
_PLAIN_IN_WORD = re.compile(r"[^ \t\r\n'\"\\$`;&|<>()]+")     # '#' inside a word is a character
_DQ_TEXT = re.compile(r'[^"\\$`]+')
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SPECIAL = re.compile(r"[0-9@*#?$!-]")
_PLAIN_WORD = r"[^ \t\r\n'\"\\$`;&|<>()#][^ \t\r\n'\"\\$`;&|<>()]*(?=[ \t\r\n;&|<>()]|$)"
#: a run of plain words on one line (split in C: a 2 MB line of arguments is one match)
_RUN = re.compile(r"(?:[ \t\r]*(?![0-9]+[<>])" + _PLAIN_WORD + ")+")   # 2>&1 is a redirection
_QWORD_RE = r"\"([^\"\\\\$`]*)\"(?=[ \t\r\n;&|<>()]|$)|'([^']*)'(?=[ \t\r\n;&|<>()]|$)"
_QWORD = re.compile(_QWORD_RE)
#: a run of quoted words without expansions ("--vocab-size 128256" "--num-workers 1" ...)
_BLANK_SPLIT = re.compile(r"[^ \t\r]+").findall
_QRUN = re.compile(r"(?:[ \t\r]*(?:" + _QWORD_RE + "))+")
#: words the parser treats as keywords at the start of a command
RESERVED = frozenset(("if", "then", "else", "elif", "fi", "do", "done", "while", "until", "for", "case", "esac",
                      "in", "{", "}", "!", "function", "select", "time", "[["))
_BRACE_TEXT = re.compile(r"[^}'\"\\$`]+")


class Lexer:
    """Tokens: ``('w', parts, line)``, ``('op', op, line)``, ``('nl', None, line)``.

    A word's parts: ``('lit', text, quoted)``, ``('par', (name, index, op, arg_parts), quoted)``,
    ``('cmd', text, quoted)`` (command substitution), ``('ari', text, quoted)``."""

    def __init__(self, text: str, line: int = 1):
        self.s, self.i, self.line = text, 0, line

    def error(self, msg: str) -> ConfigError:
        return ConfigError(f"megatron script line {self.line}: {msg}")

    def _advance_to(self, j: int) -> None:
        self.line += self.s.count("\n", self.i, j)
        self.i = j

    def tokens(self) -> list:
        """The script's tokens; every step consumes at least one character or raises (never loops)."""
        s, out = self.s, []
        append = out.append
        n, i, line = len(s), 0, self.line
        scan, run = _SCAN.match, _RUN.match
        pending: list = []           # here-documents whose bodies start after the current line
        while i < n:
            m = scan(s, i)
            kind = m.lastgroup
            if kind == "plain":          # the common case: words without quotes or expansions
                r = run(s, i)
                ws = _BLANK_SPLIT(r.group())
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
                    parts = self._word()
                    if self.i == i:      # cannot happen by the patterns; a guard against looping
                        raise self.error(f"unexpected character {s[i]!r}; quote it")
                    append(("w", parts, line))
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
                if pending:
                    i, line = self._heredoc_bodies(pending, i, line)
                    pending = []
            elif kind == "comment":
                i = m.end()
            elif kind == "procsub":      # <( ... ) / >( ... ): a file name from a command, not run
                self.line = line
                j = self._matching_paren(m.end() - 1, 0)
                append(("w", [("cmd", s[m.end():j - 1], False)], line))
                line += s.count("\n", i, j)
                i = j
            elif kind == "arith":        # (( ... )): an arithmetic command
                self.line = line
                j = self._matching_paren(m.end() - 2, 0)
                text = s[m.end():j - 1]
                if not text.endswith(")"):
                    raise self.error("a (( ... )) is not closed by '))'; close it")
                append(("ari", text[:-1], line))
                line += s.count("\n", i, j)
                i = j
            elif kind == "heredoc":
                i = self._heredoc_start(m, pending, out, line)
            else:
                append(("op", m.group(kind), line))
                i = m.end()
        if pending:
            self._heredoc_bodies(pending, i, line)
        self.i, self.line = i, line
        append(("nl", None, line))
        return out

    def _heredoc_start(self, m, pending: list, out: list, line: int) -> int:
        """``<<WORD`` / ``<<-WORD``: a ``('hd', box, line)`` token whose box gets the body at the next newline."""
        s, i = self.s, m.end()
        while i < len(s) and s[i] in " \t":
            i += 1
        self.i, self.line = i, line
        parts = self._word()
        if not parts:
            raise self.error("a << here-document has no delimiter word; write <<EOF")
        delim = "".join(p[1] for p in parts if p[0] == "lit")
        quoted = any(p[2] for p in parts)
        box = {"delim": delim, "quoted": quoted, "strip": m.group().endswith("-"), "body": "", "line": line + 1}
        pending.append(box)
        out.append(("hd", box, line))
        return self.i

    def _heredoc_bodies(self, pending: list, i: int, line: int) -> tuple:
        """Read the bodies of ``pending`` here-documents from ``i`` (each up to its delimiter line, or the end)."""
        s = self.s
        for box in pending:
            body, box["line"] = [], line
            while i < len(s):
                j = s.find("\n", i)
                j = len(s) if j < 0 else j
                text = s[i:j]
                i, line = j + 1, line + 1
                if (text.lstrip("\t") if box["strip"] else text).rstrip("\r") == box["delim"]:
                    break
                body.append(text.lstrip("\t") if box["strip"] else text)
            box["body"] = "\n".join(body) + "\n"
        return min(i, len(s)), line

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
        if not quoted and s.startswith("'", i):        # $'...': ANSI-C quoting (the bash manual)
            j = i + 1
            while j < len(s) and s[j] != "'":
                j += 2 if s[j] == "\\" else 1
            if j >= len(s):
                raise self.error("a $' quote is not closed; close it")
            text = re.sub(r"\\(.)", lambda m: _ANSI_C.get(m.group(1), "\\" + m.group(1)), s[i + 1:j])
            self._advance_to(j + 1)
            return ("lit", text, True)
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
        indirect = s.startswith("!", i) and bool(_NAME.match(s, i + 1) or _SPECIAL.match(s, i + 1))
        if length or indirect:
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
        if indirect and (s.startswith(("*}", "@}"), i) or index in ("@", "*")):
            raise self.error(f"${{!{name}{s[i] if index is None else '[' + index + ']'}}} (the names or keys of "
                             f"variables) is not read by execsim; write the words themselves")
        if length:
            if not s.startswith("}", i):
                raise self.error(f"${{#{name} ... must end with }}")
            self._advance_to(i + 1)
            return ("par", (name, index, "len", None), quoted)
        om = _BRACE_OP.match(s, i)
        op, arg = ("!" if indirect else None), None
        if om:
            if indirect:
                raise self.error(f"${{!{name}{om.group()}...}} (an operator on an indirect expansion) is not read "
                                 f"by execsim; write the value")
            op = om.group()
            if op.startswith("@"):
                raise self.error(f"${{{name}{cut(s[i:i + 3], 3)}...}} (a @ transformation) is not read by execsim; "
                                 f"write the value")
            self._advance_to(om.end())
            arg = self._word(stop_brace=True)
            i = self.i
        if not s.startswith("}", i):
            raise self.error(f"${{{name} ... is not closed with }}")
        self._advance_to(i + 1)
        return ("par", (name, index, op, arg), quoted)


_ANSI_C = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"', "a": "\a", "b": "\b",
           "e": "\x1b", "f": "\f", "v": "\v"}
#: operators inside ${NAME...}: defaults, removals, replacements, substrings, case changes, transformations
_BRACE_OP = re.compile(r":?[-=+?]|#{1,2}|%{1,2}|/[/#%]?|:|\^\^|\^|,,|,|@")


# ------------------------------------------------------------------------------------------ parsing

@dataclass
class Cmd:
    words: list        # [(parts, line)]
    assigns: list      # [(name, append, value_parts | None, array_items | None, line)]; name may be NAME[index]
    line: int
    heredocs: list = field(default_factory=list)    # here-document boxes (see Lexer._heredoc_start)


@dataclass
class If:
    branches: list     # [(condition list, body list)]; a None condition = else
    line: int
    subshell: bool = False   # ( ... ): a one-branch If whose assignments do not outlive it


@dataclass
class AndOr:
    items: list        # [(op, pipeline)]: op in (None, '&&', '||')


@dataclass
class Arith:
    text: str          # (( text ))
    line: int


@dataclass
class Loop:
    kind: str          # 'for' (name over words), 'cfor' (init; cond; step), 'while', 'until'
    name: str | None
    words: list | None  # for: [(parts, line)] (None: "$@")
    cond: list          # while/until: condition statements; cfor: [init, cond, step] texts
    body: list
    line: int


@dataclass
class Case:
    word: list         # parts
    items: list        # [(patterns [(parts, line)], body)]
    line: int


@dataclass
class Func:
    name: str
    body: list
    line: int


@dataclass
class Not:
    cmd: object


_ASSIGN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\[[^\]]*\])?(\+?)=")
DECLARE = ("export", "declare", "local", "readonly", "typeset")
MAX_NESTING = 100
"""Blocks nested deeper than this are refused (a launch script nests a few levels)."""
_REDIRECTS = ("<", ">", ">>", "&>", "&>>", "<<<", ">|", ">&", "<&")


def _is_redirect(op: str) -> bool:
    return op.lstrip("0123456789") in _REDIRECTS


class Parser:
    def __init__(self, toks: list):
        self.t, self.k, self.depth = toks, 0, 0

    def error(self, line: int, msg: str) -> ConfigError:
        return ConfigError(f"megatron script line {line}: {msg}")

    def peek(self):
        return self.t[self.k] if self.k < len(self.t) else self.t[-1]

    def word_text(self, tok) -> str | None:
        """The literal text of an unquoted plain word (a keyword candidate), else None."""
        if tok[0] != "w" or len(tok[1]) != 1 or tok[1][0][0] != "lit" or tok[1][0][2]:
            return None
        return tok[1][0][1]

    def is_op(self, *ops) -> bool:
        t = self.peek()
        return t[0] == "op" and t[1] in ops

    def skip_nl(self):
        while self.peek()[0] == "nl" or (self.peek()[0] == "op" and self.peek()[1] in (";", "&")):
            if self.k == len(self.t) - 1:
                return
            self.k += 1

    def at_end(self) -> bool:
        return self.k >= len(self.t) - 1

    def statements(self, stop: tuple = (), stop_ops: tuple = ()) -> list:
        """Statements up to a keyword in ``stop``, an operator in ``stop_ops`` or the end; a token that
        starts no statement is one error (every turn of the loop consumes a token or stops)."""
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise self.error(self.peek()[2], f"blocks nested more than {MAX_NESTING} deep; flatten the script")
        out = []
        while True:
            self.skip_nl()
            if self.at_end():
                break
            tok = self.peek()
            if self.word_text(tok) in stop or (tok[0] == "op" and tok[1] in stop_ops):
                break
            k0 = self.k
            out.append(self.and_or())
            if self.k == k0:
                what = tok[1] if tok[0] == "op" else self.word_text(tok) or tok[0]
                raise self.error(tok[2], f"unexpected {what!r}; execsim reads launch scripts, and this is not "
                                         f"where bash allows it")
        self.depth -= 1
        return out

    def and_or(self) -> AndOr:
        items = [(None, self.pipeline())]
        while self.peek()[0] == "op" and self.peek()[1] in ("&&", "||"):
            op = self.peek()[1]
            self.k += 1
            while self.peek()[0] == "nl" and not self.at_end():
                self.k += 1
            items.append((op, self.pipeline()))
        return AndOr(items)

    def pipeline(self):
        neg = False
        while self.word_text(self.peek()) in ("!", "time"):
            neg ^= self.word_text(self.peek()) == "!"
            self.k += 1
        first = self.command()
        while self.peek()[0] == "op" and self.peek()[1] in ("|", "|&"):
            self.k += 1
            while self.peek()[0] == "nl" and not self.at_end():
                self.k += 1
            k0 = self.k
            self.command()            # later stages of a pipe (``| tee log``) pass no arguments
            if self.k == k0:
                raise self.error(self.peek()[2], "a | has no command after it; complete the pipe")
        return Not(first) if neg else first

    def expect_kw(self, kw: str, line: int, what: str = "the block"):
        self.skip_nl()
        if self.word_text(self.peek()) != kw:
            raise self.error(line, f"{what} is missing its '{kw}'; close it")
        self.k += 1

    def command(self):
        tok = self.peek()
        kw = self.word_text(tok)
        line = tok[2]
        if kw == "if":
            node = self.if_block(line)
        elif kw in ("for", "select"):
            node = self.for_loop(line)
        elif kw in ("while", "until"):
            self.k += 1
            cond = self.statements(("do",))
            self.expect_kw("do", line, f"'{kw}'")
            body = self.statements(("done",))
            self.expect_kw("done", line, f"'{kw}'")
            node = Loop(kw, None, None, cond, body, line)
        elif kw == "case":
            node = self.case_block(line)
        elif kw == "{":
            self.k += 1
            body = self.statements(("}",))
            self.expect_kw("}", line, "a { group")
            node = If([(None, body)], line)
        elif tok[0] == "op" and tok[1] == "(":          # subshell: its commands run
            self.k += 1
            body = self.statements(stop_ops=(")",))
            if not self.is_op(")"):
                raise self.error(line, "a ( subshell is not closed by ')'; close it")
            self.k += 1
            node = If([(None, body)], line, subshell=True)
        elif tok[0] == "ari":
            self.k += 1
            node = Arith(tok[1], line)
        elif kw == "function" or (kw and "=" not in kw and self.k + 2 < len(self.t) and self.t[self.k + 1][:2] == ("op", "(")
                                  and self.t[self.k + 2][:2] == ("op", ")")):
            return self.function(line)
        else:
            return self.simple()
        self.redirects()
        return node

    def redirects(self) -> list:
        """Redirections after a command (their targets are file names: skipped); here-document boxes."""
        docs = []
        while True:
            tok = self.peek()
            if tok[0] == "hd":
                docs.append(tok[1])
                self.k += 1
            elif tok[0] == "op" and _is_redirect(tok[1]):
                self.k += 1
                if self.peek()[0] in ("w", "q", "r"):
                    self.take_word()         # the redirection's target
                elif self.is_op("&"):        # 2> &1 written apart
                    self.k += 1
                    if self.peek()[0] in ("w", "q", "r"):
                        self.take_word()
            else:
                return docs

    def take_word(self) -> str | None:
        """Consume one word; a run of plain words gives up its first (each run is split at most once per
        call site, so the work stays linear). The word's literal text, or None when it has expansions."""
        t = self.peek()
        if t[0] in ("r", "q"):
            if len(t[1]) > 1:
                self.t[self.k] = (t[0], t[1][1:], t[2])
            else:
                self.k += 1
            return t[1][0]
        self.k += 1
        return self.word_text(t)

    def function(self, line: int) -> Func:
        if self.word_text(self.peek()) == "function":
            self.k += 1
        name = self.word_text(self.peek())
        if not name:
            raise self.error(line, "a function needs a name")
        self.k += 1
        if self.is_op("("):
            self.k += 1
            if not self.is_op(")"):
                raise self.error(line, f"function {name}( must be followed by ')'")
            self.k += 1
        self.skip_nl()
        k0 = self.k
        body = self.command()
        if self.k == k0:
            raise self.error(line, f"function {name} has no body; write {name}() {{ ...; }}")
        return Func(name, [AndOr([(None, body)])], line)

    def for_loop(self, line: int) -> Loop:
        kw = self.word_text(self.peek())
        self.k += 1
        if self.peek()[0] == "ari" and kw == "for":      # for (( init; cond; step ))
            parts = self.peek()[1].split(";")
            if len(parts) != 3:
                raise self.error(line, "for (( ... )) needs three parts separated by ';'")
            self.k += 1
            self.skip_nl()
            words, name, cond = None, None, parts
        else:
            name = self.word_text(self.peek())
            if not name or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise self.error(line, f"'{kw}' needs a variable name")
            self.k += 1
            cond, words = [], None
            self.skip_nl()
            t = self.peek()
            if self.word_text(t) == "in" or (t[0] == "r" and t[1][0] == "in"):
                self.take_word()
                words = []
                while self.peek()[0] in ("w", "q", "r"):
                    t = self.peek()
                    words.append(((t[0] == "w" and t[1]) or ("run", t[1]), t[2]))
                    self.k += 1
        self.skip_nl()
        self.expect_kw("do", line, f"'{kw}'")
        body = self.statements(("done",))
        self.expect_kw("done", line, f"'{kw}'")
        return Loop("cfor" if name is None else "for", name, words, cond, body, line)

    def case_block(self, line: int) -> Case:
        self.k += 1
        t = self.peek()
        if t[0] not in ("w", "q", "r"):
            raise self.error(line, "'case' needs a word to match")
        word = t[1] if t[0] == "w" else [("lit", t[1][0], t[0] == "q")]
        self.take_word()
        self.skip_nl()
        t = self.peek()
        if not (self.word_text(t) == "in" or (t[0] == "r" and t[1][0] == "in")):
            raise self.error(line, "'case' is missing its 'in'; write case WORD in")
        self.take_word()
        items = []
        while True:
            self.skip_nl()
            if self.word_text(self.peek()) == "esac":
                self.k += 1
                return Case(word, items, line)
            if self.at_end():
                raise self.error(line, "'case' is not closed by 'esac'; close it")
            if self.is_op("("):
                self.k += 1
            pats = []
            while True:
                t = self.peek()
                if t[0] == "w":
                    pats.append((t[1], t[2]))
                elif t[0] in ("q", "r"):
                    pats.extend(([("lit", x, t[0] == "q")], t[2]) for x in t[1])
                else:
                    raise self.error(t[2], "a 'case' pattern must end with ')'")
                self.k += 1
                if self.is_op("|"):
                    self.k += 1
                    continue
                if self.is_op(")"):
                    self.k += 1
                    break
                raise self.error(t[2], "a 'case' pattern must end with ')'")
            body = self.statements(("esac",), (";;", ";&", ";;&"))
            if self.is_op(";&", ";;&"):
                raise self.error(self.peek()[2], f"the case fall-through {self.peek()[1]!r} is not read by execsim; "
                                                 f"end the branch with ;;")
            if self.is_op(";;"):
                self.k += 1
            items.append((pats, body))

    def if_block(self, line: int) -> If:
        branches = []
        self.k += 1
        cond = self.statements(("then",))
        self.expect_kw("then", line, "'if'")
        body = self.statements(("elif", "else", "fi"))
        branches.append((cond, body))
        while True:
            self.skip_nl()
            kw = self.word_text(self.peek())
            if kw == "elif":
                self.k += 1
                cond = self.statements(("then",))
                self.expect_kw("then", line, "'elif'")
                branches.append((cond, self.statements(("elif", "else", "fi"))))
            elif kw == "else":
                self.k += 1
                branches.append((None, self.statements(("fi",))))
            elif kw == "fi":
                self.k += 1
                return If(branches, line)
            else:
                raise self.error(line, "'if' is not closed by 'fi'; close it")

    def simple(self) -> Cmd:
        words, assigns, docs = [], [], []
        line = self.peek()[2]
        if self.word_text(self.peek()) == "[[":
            return self.double_bracket(line)
        while True:
            tok = self.peek()
            if tok[0] == "r" or tok[0] == "q":      # a run of plain (or quoted) literal words
                ws, j = tok[1], 0
                self.k += 1
                if tok[0] == "r" and self._assigning(words):
                    while j < len(ws) and (_ASSIGN.match(ws[j]) or (words and ws[j][:1] in "-+")):
                        if _ASSIGN.match(ws[j]):
                            self._assign([("lit", ws[j], False)], tok[2], assigns, j == len(ws) - 1)
                        else:
                            words.append(([("lit", ws[j], False)], tok[2]))     # declare -a / -g / -x
                        j += 1
                if j < len(ws):
                    words.append((("run", ws[j:]), tok[2]))
                continue
            if tok[0] == "hd" or (tok[0] == "op" and _is_redirect(tok[1])):
                docs.extend(self.redirects())
                continue
            if tok[0] != "w":
                if (words or assigns) and tok[0] in ("op", "ari") and tok[1][:1] == "(" or tok[0] == "ari" and words:
                    raise self.error(tok[2], "unexpected '(' after a command's words (bash: syntax error); quote "
                                             "it (e.g. --window-size \"(4096,0)\")")
                break
            parts = tok[1]
            first = parts[0]
            self.k += 1
            if first[0] == "lit" and not first[2] and _ASSIGN.match(first[1]) and self._assigning(words):
                self._assign(parts, tok[2], assigns)
                continue
            words.append((parts, tok[2]))
        return Cmd(words, assigns, line, docs)

    def double_bracket(self, line: int) -> Cmd:
        """``[[ ... ]]``: its operators (``&&``, ``||``, ``(``, ``<``) are words of the test."""
        words = []
        while True:
            tok = self.peek()
            if tok[0] == "nl" and self.at_end():
                raise self.error(line, "a [[ test is not closed by ']]'; close it")
            self.k += 1
            if tok[0] == "op":
                words.append(([("lit", tok[1], False)], tok[2]))
            elif tok[0] == "w":
                words.append((tok[1], tok[2]))
            elif tok[0] in ("r", "q"):
                words.extend(([("lit", x, tok[0] == "q")], tok[2]) for x in tok[1])
            elif tok[0] == "nl":
                continue
            else:
                raise self.error(line, "unexpected text inside [[ ... ]]")
            if words[-1][0] == [("lit", "]]", False)]:
                return Cmd(words, [], line)

    def _assigning(self, words: list) -> bool:
        """Words here are assignments: at the start of a command, or after export/declare/..."""
        return not words or (not isinstance(words[0][0], tuple) and self.word_text(("w", words[0][0], 0)) in DECLARE)

    def _assign(self, parts: list, line: int, assigns: list, maybe_array: bool = True) -> None:
        """``NAME=value`` / ``NAME+=value`` / ``NAME[i]=value`` (parts of the word, already consumed), or an
        array ``NAME=( ... )`` when the word is ``NAME=`` and ``(`` follows."""
        first = parts[0]
        m = _ASSIGN.match(first[1])
        name, append = m.group(1) + (m.group(2) or ""), bool(m.group(3))
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
                    raise self.error(line, f"the array {name}=( is not closed with ); close it")
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
                raise self.error(t[2], f"unexpected {t[1]!r} inside the array {name}=( ... ); quote it")
            self.k += 1
        assigns.append((name, append, None, items, line))
