"""Bash arithmetic ``$(( ... ))`` / ``(( ... ))`` and glob patterns, evaluated without running anything.

Arithmetic follows the bash manual's "Shell Arithmetic" section (bash 5.2): 64-bit signed integers that
wrap (bash's ``intmax_t``), C's operators with C's precedence, ``/`` truncating toward zero and ``%``
taking the sign of the dividend (C99 6.5.5), ``**`` power, constants ``0x1F``, ``017`` (octal) and
``BASE#DIGITS`` (2..64), variables by name or ``$NAME`` (an empty value is 0; a value that is itself an
expression is evaluated, as bash does, to a bounded depth), assignments ``= += -= *= /= %= <<= >>= &= ^= |=``,
``++`` / ``--``, ``?:`` and ``,``.

>>> ev = Arith(lambda name: {"TP": "4"}.get(name), lambda name, v: None)
>>> [ev.eval(e) for e in (" 4 * 2 ", "-7 % 3", "-7 / 2", "0x10", "8#17", "2#101", "TP * 2", "2 ** 10")]
[8, -1, -3, 16, 15, 5, 8, 1024]
"""
from __future__ import annotations

import re

MAX_EXPR_CHARS = 10_000
"""The longest arithmetic expression read (a launch script's are a few dozen characters)."""
MAX_DEPTH = 64
"""Nesting of parentheses, and of variables whose value is an expression, before the reader refuses."""

_TOKEN = re.compile(r"\s*(?:(?P<num>[0-9][0-9A-Za-z@_#]*)|(?P<name>\$[0-9#?]|\$\{[0-9#]+\}|\$?\{?[A-Za-z_][A-Za-z0-9_]*\}?)"
                    r"|(?P<op>\*\*=?|<<=|>>=|\+\+|--|&&|\|\||<=|>=|==|!=|<<|>>|[-+*/%&^|]=|[-+*/%<>=!~&^|?:,()]))")
_BINARY = {  # precedence, as in the bash manual (higher binds tighter)
    ",": 1, "||": 4, "&&": 5, "|": 6, "^": 7, "&": 8, "==": 9, "!=": 9, "<": 10, "<=": 10, ">": 10, ">=": 10,
    "<<": 11, ">>": 11, "+": 12, "-": 12, "*": 13, "/": 13, "%": 13, "**": 14}
_ASSIGN_OPS = ("=", "+=", "-=", "*=", "/=", "%=", "<<=", ">>=", "&=", "^=", "|=", "**=")
_MASK = (1 << 64) - 1


class ArithError(ValueError):
    """The expression is not bash arithmetic, or divides by zero; ``str`` says which."""


class Unknown(Exception):
    """A variable in the expression has no known value; ``name`` is the variable."""

    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


def wrap(v: int) -> int:
    """``v`` as a 64-bit two's-complement integer (bash's ``intmax_t`` overflow wraps)."""
    v &= _MASK
    return v - (1 << 64) if v >> 63 else v


def parse_int(text: str) -> int:
    """A bash integer constant: decimal, ``0x..``, ``0..`` octal, ``BASE#DIGITS`` (digits 0-9 a-z A-Z @ _)."""
    t = text
    if "#" in t:
        base_s, _, digits = t.partition("#")
        if not base_s.isdigit() or not 2 <= int(base_s) <= 64 or not digits:
            raise ArithError(f"{text!r}: invalid arithmetic base")
        base = int(base_s)
        value = 0
        for ch in digits:
            d = _digit(ch, base)
            if d >= base:
                raise ArithError(f"{text!r}: value too great for base {base}")
            value = value * base + d
        return wrap(value)
    if t[:2] in ("0x", "0X"):
        try:
            return wrap(int(t, 0))
        except ValueError:
            raise ArithError(f"{text!r}: invalid hexadecimal constant") from None
    if len(t) > 1 and t[0] == "0":
        try:
            return wrap(int(t, 8))
        except ValueError:
            raise ArithError(f"{text!r}: value too great for base 8") from None
    if not t.isdigit():
        raise ArithError(f"{text!r}: not a number")
    return wrap(int(t))


def _digit(ch: str, base: int) -> int:
    if ch.isdigit():
        return ord(ch) - 48
    if "a" <= ch <= "z":
        return ord(ch) - 87
    if "A" <= ch <= "Z":
        return ord(ch) - 29 if base > 36 else ord(ch) - 55
    return {"@": 62, "_": 63}.get(ch, 99)


class Arith:
    """Evaluates one expression; ``get(name)`` gives a variable's text (None: unknown, raises
    :class:`Unknown`), ``put(name, value)`` records an assignment."""

    def __init__(self, get, put, depth: int = 0):
        self.get, self.put, self.depth = get, put, depth

    def eval(self, text: str) -> int:
        if len(text) > MAX_EXPR_CHARS:
            raise ArithError(f"expression of {len(text):,} characters, over {MAX_EXPR_CHARS:,}")
        self.toks = self._lex(text)
        self.k = 0
        if not self.toks:
            return 0
        v = self._expr(0, 0)
        if self.k != len(self.toks):
            raise ArithError(f"syntax error near {self.toks[self.k][1]!r}")
        return self._value(v)

    @staticmethod
    def _lex(text: str) -> list:
        toks, i, n = [], 0, len(text)
        while True:
            while i < n and text[i] in " \t\n\r":
                i += 1
            if i >= n:
                return toks
            m = _TOKEN.match(text, i)
            if not m or m.end() == i:
                raise ArithError(f"syntax error near {text[i:i + 10]!r}")
            kind = m.lastgroup
            val = m.group(kind)
            if kind == "name":
                if val.startswith("${") != val.endswith("}") or val.startswith("{"):
                    raise ArithError(f"syntax error near {val!r}")
                val = val[2:-1] if val.startswith("${") else val.lstrip("$")
            toks.append((kind, val))
            i = m.end()

    def _peek(self):
        return self.toks[self.k] if self.k < len(self.toks) else (None, None)

    def _value(self, v) -> int:
        """An operand's integer: a number, or a variable read now."""
        if isinstance(v, int):
            return v
        text = self.get(v)
        if text is None:
            raise Unknown(v)
        text = str(text).strip()
        if not text:
            return 0
        if re.fullmatch(r"-?[0-9][0-9A-Za-z@_#]*", text):
            return -parse_int(text[1:]) if text[0] == "-" else parse_int(text)
        if self.depth >= MAX_DEPTH:
            raise ArithError(f"{v}: expression recursion level exceeded")
        return Arith(self.get, self.put, self.depth + 1).eval(text)

    def _expr(self, min_prec: int, depth: int):
        if depth > MAX_DEPTH:
            raise ArithError("expression nested too deeply")
        left = self._unary(depth)
        while True:
            kind, op = self._peek()
            if kind != "op":
                return left
            if op in _ASSIGN_OPS and min_prec <= 2:
                if isinstance(left, int):
                    raise ArithError("attempted assignment to non-variable")
                self.k += 1
                right = self._value(self._expr(2, depth + 1))
                value = right if op == "=" else self._binary(op[:-1], self._value(left), right)
                self.put(left, str(value))
                left = value
                continue
            if op == "?" and min_prec <= 3:
                self.k += 1
                cond = self._value(left)
                a = self._expr(1, depth + 1)
                if self._peek() != ("op", ":"):
                    raise ArithError("`:' expected for conditional expression")
                self.k += 1
                b = self._expr(3, depth + 1)
                left = self._value(a) if cond else self._value(b)
                continue
            prec = _BINARY.get(op)
            if prec is None or prec < min_prec:
                return left
            self.k += 1
            if op in ("&&", "||"):
                lv = self._value(left)
                right = self._expr(prec + 1, depth + 1)
                if (op == "&&" and not lv) or (op == "||" and lv):
                    left = int(bool(lv))
                else:
                    left = int(bool(self._value(right)))
                continue
            right = self._expr(prec if op == "**" else prec + 1, depth + 1)   # ** is right-associative
            left = right if op == "," else self._binary(op, self._value(left), self._value(right))

    def _unary(self, depth: int):
        kind, tok = self._peek()
        if kind is None:
            raise ArithError("operand expected")
        self.k += 1
        if kind == "num":
            return parse_int(tok)
        if kind == "name":
            nk, nt = self._peek()
            if nk == "op" and nt in ("++", "--"):       # post-increment
                self.k += 1
                v = self._value(tok)
                self.put(tok, str(wrap(v + (1 if nt == "++" else -1))))
                return v
            return tok
        if tok == "(":
            v = self._value(self._expr(0, depth + 1))
            if self._peek() != ("op", ")"):
                raise ArithError("missing `)'")
            self.k += 1
            return v
        if tok in ("++", "--"):
            nk, name = self._peek()
            if nk != "name":
                raise ArithError(f"{tok} needs a variable")
            self.k += 1
            v = wrap(self._value(name) + (1 if tok == "++" else -1))
            self.put(name, str(v))
            return v
        if tok in ("-", "+", "!", "~"):
            v = self._value(self._unary(depth + 1))     # unary minus binds tighter than ** (bash manual)
            return {"-": wrap(-v), "+": v, "!": int(not v), "~": wrap(~v)}[tok]
        raise ArithError(f"syntax error: operand expected (error token is {tok!r})")

    @staticmethod
    def _binary(op: str, a: int, b: int) -> int:
        if op in ("/", "%"):
            if b == 0:
                raise ArithError("division by 0")
            q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)   # C99 6.5.5: truncation toward zero
            return wrap(q) if op == "/" else wrap(a - q * b)
        if op == "**":
            if b < 0:
                raise ArithError("exponent less than 0")
            return wrap(pow(a, b, 1 << 64))
        if op in ("<<", ">>"):
            b &= 63
            return wrap(a << b) if op == "<<" else a >> b
        return wrap({"+": a + b, "-": a - b, "*": a * b, "&": a & b, "^": a ^ b, "|": a | b}.get(op, 0)) \
            if op in "+-*&^|" else int({"==": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b,
                                         ">=": a >= b}[op])


def glob_regex(pieces) -> re.Pattern:
    """A bash pattern (``*``, ``?``, ``[...]``; quoted text literal) as a compiled regex matching the
    whole string. ``pieces``: ``[(text, quoted)]``.

    >>> bool(glob_regex([("8*", False)]).fullmatch("80")), bool(glob_regex([("8*", True)]).fullmatch("80"))
    (True, False)
    """
    out = []
    for text, quoted in pieces:
        if quoted:
            out.append(re.escape(text))
            continue
        i, n = 0, len(text)
        while i < n:
            c = text[i]
            if c == "*":
                out.append(".*")
            elif c == "?":
                out.append(".")
            elif c == "\\" and i + 1 < n:
                out.append(re.escape(text[i + 1]))
                i += 1
            elif c == "[":
                j = i + 1
                if j < n and text[j] in "!^":
                    j += 1
                if j < n and text[j] == "]":
                    j += 1
                j = text.find("]", j)
                if j < 0:
                    out.append(re.escape(c))
                else:
                    body = text[i + 1:j]
                    neg = body[:1] in ("!", "^")
                    body = body[1:] if neg else body
                    out.append("[" + ("^" if neg else "") + body.replace("\\", "\\\\").replace("[", "\\[") + "]")
                    i = j
            else:
                out.append(re.escape(c))
            i += 1
    return re.compile("".join(out), re.DOTALL)
