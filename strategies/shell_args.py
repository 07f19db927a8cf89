"""What bash would pass to ``pretrain_gpt.py``: a small interpreter for Megatron-LM launch scripts.

Launch scripts build the training command from variables, bash arrays and ``if`` blocks
(Megatron-LM ``examples/llama/train_llama3_8b_h100_fp8.sh``: ``TP_SIZE=1``, ``MODEL_ARGS=( ... )``,
``if [[ "$DTYPE" == "fp8" ]]; then DTYPE_ARGS+=("--fp8-format hybrid" ...); fi``, then
``torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py ${MODEL_ARGS[@]} ...``). Reading the text as one
list of words gets them wrong: both branches of an ``if`` are read, a quoted array item
``"--vocab-size 128256"`` stays one word, a flag at the end of an array takes the next line's
``DATA_ARGS=`` as its value. This module runs the part of bash those scripts use and returns the
words bash would hand to the launch command:

* words: unquoted text, ``'...'``, ``"..."`` (with ``$`` expansions inside), ``$'...'``, backslash
  escapes and line continuations, comments; word splitting of unquoted expansions on ``$IFS``
  (:func:`strategies.shell_words.ifs_split`); file names are never expanded;
* parameters: ``$X``, ``${X}``, ``${X:-default}`` / ``${X-default}``, ``${X:=default}``, ``${X:+alt}``,
  ``${#X}``, ``${X#p}`` ``${X%p}`` ``${X/p/r}`` ``${X:o:l}`` ``${X^^}`` ``${X,,}`` ``${!N}``, positional
  ``$1`` ... ``$@`` ``$#`` (unset: the script is run without arguments), arrays ``X=( ... )``,
  ``X+=( ... )``, ``X[i]=v``, ``${X[@]}``, ``"${X[@]}"`` (one word per item), ``${X[*]}``, ``${X[n]}``;
  ``$(( ... ))`` bash arithmetic (:mod:`strategies.shell_arith`); ``$( ... )``, backquotes and
  ``<( ... )`` are opaque;
* statements: assignments (``export``/``declare``/``local``/``readonly`` too), ``unset``, ``set --``,
  ``shift``, ``if``/``elif``/``else``/``fi`` decided by ``[[ ... ]]`` (``==`` a glob pattern),
  ``[ ... ]``, ``test``, ``(( ... ))``, ``true``, ``false``; ``case``; ``for`` / ``for (( ))`` /
  ``while`` / ``until`` loops; functions; subshells; ``;``, ``&&``, ``||`` lists; ``eval``'s text,
  the string of ``bash -c``, and a here-document fed to ``sbatch``/``srun``/``bash``/``sh`` are read
  as scripts (a here-document fed to anything else is data). Nothing is ever executed
  (:mod:`strategies.shell_eval`, whose bounds stop loops, recursion and doubling before the work).

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
tree-sitter-bash 0.25 (PyPI wheels) parses all of these, but its tree keeps the operators of
``${D^^}`` / ``${X%p}`` as unnamed text and recovers from errors with ERROR nodes where one refusal
line is wanted; the evaluator, the larger part, would be rewritten around it for no gain.

>>> r = launch_words('TP=${TP:-8}\\nA=(--x 1 "--y 2")\\nif [[ $TP == 8 ]]; then A+=(--z); else A+=(--w); fi\\n'
...                  'torchrun --nnodes 2 pretrain_gpt.py ${A[@]} --tp $TP')
>>> [str(w) for w in r.args], [str(w) for w in r.launcher]
(['--x', '1', '--y', '2', '--z', '--tp', '8'], ['--nnodes', '2'])
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from strategies.errors import ConfigError
from strategies.shell_eval import ScriptExit, Shell, is_script
from strategies.shell_parse import Lexer, Parser
from strategies.shell_words import Word

__all__ = ["MAX_SCRIPT_BYTES", "LaunchWords", "Word", "launch_words", "unset_error"]

MAX_SCRIPT_BYTES = 8 * 1024 * 1024
"""A launch script is a few kB; the reader's own 8 MiB file limit (docs/strategy-file.md, Limits)."""


@dataclass
class LaunchWords:
    """The launch command's words: ``args`` for the training script, ``launcher`` before it."""

    args: list
    launcher: list
    script: str | None
    notes: list = field(default_factory=list)
    other_program: str | None = None
    """Without a launch command: the last ``*.py`` another command runs (``train.py``, ``tools/...``)."""


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
        sh = Shell(env or {})
        try:
            sh.run(prog)
        except ScriptExit:
            pass
    finally:
        if paused:
            gc.enable()
    if sh.launches:
        words, _ = sh.launches[-1]
        k = next(i for i, w in enumerate(words) if is_script(w))
        return LaunchWords(list(words[k + 1:]), _launcher_args(words[:k]), str(words[k]))
    # no launch command: pasted arguments are commands whose first word is a flag; a command running
    # another Python program is named, so that the importer can say what the script launches
    args = [w for words in sh.all_words if words and str(words[0]).startswith("--") for w in words]
    other = next((_program(words) for words in reversed(sh.all_words) if _program(words)), None)
    return LaunchWords(args, [], None, other_program=other)


def _program(words: list) -> str | None:
    """The Python program or shell script a command runs (``x.py``, ``-m pkg.mod``, ``job.sh``), if any."""
    for i, w in enumerate(words):
        t = str(w)
        if t.endswith((".py", ".sh")):
            return t
        if t == "-m" and i + 1 < len(words) and not str(words[i + 1]).startswith("torch.distributed."):
            return "-m " + str(words[i + 1])
    return None


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
        if name.startswith(("$(", "${")):
            return ConfigError(f"megatron script line {line}: {flag} takes its value from {name}, which is not "
                               f"evaluated; write the value in the script")
        hint = f"--env {name}=VALUE" if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*|[0-9]+", name) else "a literal value"
        return ConfigError(f"megatron script line {line}: {flag} takes its value from ${name}, which the script "
                           f"never sets; give {hint}")
    line, why = w.cond
    return ConfigError(f"megatron script line {line}: {flag} is set in a branch whose condition cannot be decided "
                       f"({why}); give the variable with --env NAME=VALUE or edit the script")
