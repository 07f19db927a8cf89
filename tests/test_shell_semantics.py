"""The bash-subset interpreter (strategies/shell_*.py) against bash's own semantics, and its bounds.

Each case here failed before issue 42 (a hang, a traceback or a silent misread): exact expected words
on tiny scripts, written from what bash 5 prints for them. ``test_against_bash`` runs /bin/bash itself
on generated scripts that only assign and print (never a file of the user's), with a time limit.
"""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strategies.errors import ConfigError
from strategies.shell_eval import MAX_EXPANDED, MAX_STEPS, ScriptExit, Shell
from strategies.shell_parse import Lexer, Parser


def printed(text: str, env: dict | None = None) -> list:
    """What ``p ARGS`` prints for each call of ``p`` in ``text`` (p: print each argument in <>)."""
    sh = Shell(env or {})
    try:
        sh.run(Parser(Lexer(text).tokens()).statements())
    except ScriptExit:
        pass
    return ["".join(f"<{w}>" for w in ws[1:]) for ws in sh.all_words if str(ws[0]) == "p"]


@pytest.mark.parametrize("script,want", [
    # parentheses the old parser did not consume (each looped for ever, growing memory)
    ("> out (x)", []),
    ("(x=1; p $x); p ${x-u}", ["<1>", "<u>"]),
    ("case 80 in 8*) p a;; *) p b;; esac", ["<a>"]),
    ("x=2; case $x in 1|2) p one;; esac", ["<one>"]),
    ("p <(a) x", ["<$(a)><x>"]),
    ("(( x = 4 * 2 )); p $x", ["<8>"]),
    ("declare -a A=(1 2); p \"${A[@]}\"", ["<1><2>"]),
    # whitespace bash does not split on is part of the word
    ("p a\u00a0b", ["<a\u00a0b>"]), ("p a\vb c", ["<a\vb><c>"]), ("p a\fb", ["<a\fb>"]),
    # arithmetic: spaces, C's sign of %, truncating /, bases
    ("X=$(( 4 * 2 )); p $X $((-7 % 3)) $((7 % -3)) $((-7 / 2)) $((0x10)) $((010)) $((2#101)) $((2**3**2))",
     ["<8><-1><1><-3><16><8><5><512>"]),
    # assignments bash makes
    (": ${TP:=2}; p $TP", ["<2>"]), ("declare -g G=1; p $G", ["<1>"]),
    ("A=(1 2 3); A[1]=4; p \"${A[@]}\"", ["<1><4><3>"]),
    ("set -- a b c; shift; p \"$@\" $#", ["<b><c><2>"]),
    ("IFS=,; X=a,b,,c; p $X", ["<a><b><><c>"]),
    ("M=80; [[ $M == 8* ]] && p y || p n; [[ $M == \"8*\" ]] && p y || p n", ["<y>", "<n>"]),
    ("readonly R=1; R=2; p $R", []),                     # bash stops at the failed assignment
    ("f() { p in \"$@\"; }; f 1 \"2 3\"", ["<in><1><2 3>"]),
    ("for i in a b; do p $i; done", ["<a>", "<b>"]),
    ("for ((i=0;i<3;i++)); do p $i; done", ["<0>", "<1>", "<2>"]),
    ("D=abc; N=D; p ${D^^} ${D^} ${!N} ${#D}", ["<ABC><Abc><abc><3>"]),
    ("X=abc.def; p ${X%.*} ${X#*.} ${X/b/B} ${X:1:3}", ["<abc><def><aBc.def><bc.>"]),
    ("cat <<EOF\np inside\nEOF\np after", ["<after>"]),     # a heredoc fed to cat is data
    ("bash <<EOF\np inside\nEOF", ["<inside>"]),           # ... fed to bash it is a script
    ("bash -c 'p 1 \"2 3\"'", ["<1><2 3>"]),
    ("p \"$@\"", [""]),
    ("A=\"p 1 2\"; eval \"$A\"; eval X=3; p $X", ["<1><2>", "<3>"]),     # eval's text is read, in this shell
])
def test_bash_semantics(script, want):
    assert printed(script) == want


def test_positional_parameter_given_empty():
    assert printed('p "$@" x', {"1": ""}) == ["<><x>"]


@pytest.mark.parametrize("script,match", [
    ("p ${D^^x}", None),
    ("p ${!A[@]}", r"\$\{!A\[@\]\} \(the names or keys of variables\) is not read"),
    ("p ${!P*}", r"is not read by execsim"),
    ("p ${X@Q}", r"a @ transformation\) is not read"),
    ("declare -A M=([a]=1)", r"declare -A \(associative arrays\) is not read"),
    ("f() { local -n R=X; }; f", r"local -n \(name references\) is not read"),
    ("p $((1 / 0))", r"division by 0"),
    ("p )", r"unexpected '\)'"),
    ("case x in a) p;", r"'case' is not closed by 'esac'"),
    ("(p x", r"a \( subshell is not closed"),
    ("f() { f; }; f", r"nest more than 32 deep"),
    ("while true; do :; done", r"runs more than"),
    ("X=x; for i in $(seq 40); do X=$X$X; done", None),
    ("X=xxxxxxxxxx; while true; do X=$X$X; done", r"a value of .* characters, over the limit"),
    ("A=(x); while true; do A=(\"${A[@]}\" \"${A[@]}\"); done", r"expansions produce more than|a value of"),
    ("( " * 150 + ")" * 150, r"nested more than 100 deep"),
    ("(" * 150 + ")" * 150, r"expression nested too deeply"),
])
def test_bounded_and_named(script, match):
    """Loops, recursion and doubling stop at their bounds; unsupported expansions are refused by name."""
    if match is None:
        printed(script)
        return
    with pytest.raises(ConfigError, match=match):
        printed(script)
    assert MAX_STEPS and MAX_EXPANDED


# ------------------------------------------------------------------------------- against bash itself
_NAMES = st.sampled_from(["A", "B", "C"])
_TEXT = st.text(alphabet="ab ,*.:-", max_size=6)


def _value() -> st.SearchStrategy:
    lit = _TEXT.map(lambda t: "'" + t + "'")
    ref = st.builds(lambda n, q: f'"${n}"' if q else f"${n}", _NAMES, st.booleans())
    op = st.builds(lambda n, op, t: '"${' + n + op + t.replace("'", "") + '}"',
                   _NAMES, st.sampled_from([":-", "-", ":+", "#", "%", "##", "%%"]), st.text(alphabet="ab*.", max_size=3))
    ari = st.builds(lambda a, o, b: f"$(( {a} {o} {b} ))", st.integers(-20, 20), st.sampled_from(["+", "-", "*", "/", "%"]),
                    st.integers(1, 9))
    return st.lists(st.one_of(lit, ref, op, ari), min_size=1, max_size=3).map("".join)


_STATEMENT = st.one_of(
    st.builds(lambda n, v: f"{n}={v}", _NAMES, _value()),
    st.builds(lambda n, v: f"{n}+={v}", _NAMES, _value()),
    st.builds(lambda v: f"IFS={v}", st.sampled_from(["' '", "','", "', '", "''", "':'"])),
    st.builds(lambda vs: "p " + " ".join(vs), st.lists(_value(), min_size=1, max_size=3)),
    st.builds(lambda n, vs: f"{n}=(" + " ".join(vs) + f'); p "${{{n}[@]}}" ${{{n}[*]}} ${{#{n}[@]}}', _NAMES,
              st.lists(_value(), max_size=3)),
    st.builds(lambda n, v, a, b: f'case {v} in {a}) p x;; {b}) p y;; esac', _NAMES, _value(),
              st.sampled_from(["a*", "*b", "'a'", "?"]), st.sampled_from(["*", "b"])),
    st.builds(lambda v, n: f'for x in {v}; do p "$x" $x; {n}=$x; done', _value(), _NAMES),
    st.builds(lambda v: f'f() {{ p "$@" $# "$1"; shift; p "$*"; }}; f {v}', _value()),
    st.builds(lambda v, pat, q: f'[[ {v} == {pat} ]] && p y || p n' if not q else f'[[ "{v}" != "{pat}" ]] && p y',
              _value(), st.sampled_from(["a*", "*b*", "?", "[ab]*", "*,*"]), st.booleans()),
    st.builds(lambda a, o, b: f"N=$(( N {o} {a} )); (( N {o}= {b} )); p $N $(( N > {a} ? 1 : 0 ))",
              st.integers(-9, 9), st.sampled_from(["+", "-", "*"]), st.integers(-9, 9)),
    st.builds(lambda v: f"set -- {v}; p $# \"$@\"; shift; p $#", _value()),
)


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
@settings(max_examples=int(os.environ.get('EXECSIM_BASH_EXAMPLES', '150')), derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_STATEMENT, min_size=1, max_size=6))
def test_against_bash(statements):
    """Generated scripts that only assign and print: our words equal bash's, line for line (bash runs with
    ``set -f``: execsim never expands file names, it does not read the filesystem)."""
    script = "A='a b'; B=''; C='x,*y'; N=3\n" + "\n".join(statements) + "\n"   # set: unset ones are --env's
    ours = printed(script)
    r = subprocess.run(["bash", "--norc", "--noprofile", "-c", "ulimit -v 1048576; set -f\np() { for a in \"$@\"; do printf '<%s>' \"$a\"; done; echo; }\n" + script],
                       capture_output=True, text=True, timeout=10, env={"PATH": "/usr/bin:/bin"})
    assert r.stdout.splitlines() == ours, script
