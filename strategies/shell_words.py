"""Words of the bash subset (:mod:`strategies.shell_eval`): marked words, word splitting on ``$IFS``,
and the ``[[ ... ]]`` / ``[ ... ]`` test expressions."""
from __future__ import annotations

import re

from strategies.errors import cut
from strategies.shell_arith import glob_regex


class Word(str):
    """A word bash would produce, with where it came from.

    ``unset``: ``(line, NAME)`` when the word holds the value of a variable the script never sets;
    ``cond``: ``(line, text)`` when the word was added by a branch whose condition could not be decided.
    The text of an unknown value is its source (``${NAME}``, ``$(cmd)``), so that a ``bash -c`` string
    built from it reads the same way again."""

    unset: tuple | None = None
    cond: tuple | None = None

    def __new__(cls, text: str, unset: tuple | None = None, cond: tuple | None = None):
        w = super().__new__(cls, text)
        w.unset, w.cond = unset, cond
        return w


def marked(text: str, unset: tuple | None = None, cond: tuple | None = None) -> str:
    """A plain ``str`` for an ordinary word (cheap), a :class:`Word` when it carries a mark."""
    return text if unset is None and cond is None else Word(text, unset, cond)


def remark(w: str, unset=None, cond=None) -> str:
    u = unset if unset is not None else getattr(w, "unset", None)
    c = cond if cond is not None else getattr(w, "cond", None)
    return marked(str(w), u, c)


class Undecided(Exception):
    """A condition's value cannot be known (filesystem, a command's output, an unset variable)."""

    def __init__(self, why: tuple):
        self.why = why


DEFAULT_FIELDS = re.compile(r"[^ \t\n]+").findall
def ifs_split(text: str, ifs: str) -> tuple:
    """bash word splitting of one unquoted expansion (the manual, "Word Splitting"):
    ``(starts with a delimiter, fields, ends with a delimiter)``.

    >>> ifs_split(" a  b ", " \\t\\n"), ifs_split("a,,b,", ","), ifs_split(",a", ",")
    ((True, ['a', 'b'], True), (False, ['a', '', 'b'], True), (False, ['', 'a'], False))
    """
    if not ifs:
        return False, [text] if text else [], False
    ws = "".join(c for c in " \t\n" if c in ifs)
    nws = "".join(c for c in ifs if c not in " \t\n")
    stripped = text.strip(ws) if ws else text
    lead = bool(ws) and text[:1] in ws and text != ""
    trail = bool(ws) and text[-1:] in ws and text != ""
    if not stripped:
        return lead or trail, [], False
    if not nws:
        return lead, DEFAULT_FIELDS(stripped) if ws == " \t\n" else re.split(f"[{re.escape(ws)}]+", stripped), trail
    around = f"[{re.escape(ws)}]*" if ws else ""
    delim = f"{around}[{re.escape(nws)}]{around}" + (f"|[{re.escape(ws)}]+" if ws else "")
    fields = re.split(delim, stripped)
    if len(fields) > 1 and fields[-1] == "" and stripped[-1] in nws:
        fields.pop()
        trail = True
    return lead, fields, trail


def need(w, line: int) -> str:
    if getattr(w, "unset", None):
        ln, name = w.unset
        raise Undecided((ln, f"${name} is never set" if name.isidentifier() or name.isdigit() else name))
    if getattr(w, "cond", None):
        raise Undecided(w.cond)
    return str(w)


def eval_test(args: list, line: int, sh) -> bool:
    """``[[ ... ]]`` / ``[ ... ]``: ``!``, ``&&``/``-a``, ``||``/``-o``, unary and binary tests."""
    for i, a in enumerate(args):
        if a in ("||", "-o") and 0 < i < len(args) - 1:
            return eval_test(args[:i], line, sh) or eval_test(args[i + 1:], line, sh)
    for i, a in enumerate(args):
        if a in ("&&", "-a") and 0 < i < len(args) - 1:
            return eval_test(args[:i], line, sh) and eval_test(args[i + 1:], line, sh)
    if args and args[0] == "!":
        return not eval_test(args[1:], line, sh)
    if len(args) >= 2 and args[0] == "(" and args[-1] == ")":
        return eval_test(args[1:-1], line, sh)
    if len(args) == 1:
        return need(args[0], line) != ""
    if len(args) == 2:
        op, v = args
        if op == "-z":
            return need(v, line) == ""
        if op == "-n":
            return need(v, line) != ""
        if op == "-v":
            return sh.lookup(need(v, line)) is not None
        raise Undecided((line, f"the test {op} {cut(str(v), 30)}"))
    if len(args) == 3:
        a, op, b = args
        if op in ("==", "=", "!="):
            pattern = getattr(b, "pattern", None)
            if pattern is not None:
                need(b, line)
                eq = bool(glob_regex(pattern).fullmatch(need(a, line)))
            else:
                eq = need(a, line) == need(b, line)
            return eq if op != "!=" else not eq
        if op in ("<", ">"):
            x, y = need(a, line), need(b, line)
            return x < y if op == "<" else x > y
        if op in ("-eq", "-ne", "-lt", "-le", "-gt", "-ge"):
            x, y = sh.arith(need(a, line), line), sh.arith(need(b, line), line)
            if getattr(x, "unset", None) or getattr(y, "unset", None):
                raise Undecided((line, f"{a} {op} {b} (not integers)"))
            x, y = int(x), int(y)
            return {"-eq": x == y, "-ne": x != y, "-lt": x < y, "-le": x <= y, "-gt": x > y, "-ge": x >= y}[op]
    raise Undecided((line, f"the test {cut(' '.join(map(str, args)), 40)}"))
