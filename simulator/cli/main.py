"""The ``execsim`` command line: the main parser and error handling; each command is one module of
this room (``add_parser`` + the command function). Library code raises; only this room prints and exits.

Commands, in the order ``--help`` lists them: ``schedule`` (:mod:`simulator.cli.schedule`),
``simulate`` (:mod:`simulator.cli.simulate`), ``report`` (:mod:`simulator.cli.report`), ``memory``
(:mod:`simulator.cli.memory`), ``plan-recompute`` (:mod:`simulator.cli.plan_recompute`), ``compare``
(:mod:`simulator.cli.compare`), ``import`` (:mod:`simulator.cli.import_cmd`), ``search``
(:mod:`simulator.cli.search`), ``goodput`` (:mod:`simulator.cli.goodput`), ``profile``
(:mod:`simulator.cli.profile`), ``calibrate`` (:mod:`simulator.cli.calibrate`), ``examples``
(:mod:`simulator.cli.examples`).
"""
from __future__ import annotations

import argparse
import io
import sys

from simulator.cli import (
    calibrate,
    compare,
    examples,
    goodput,
    import_cmd,
    memory,
    plan_recompute,
    profile,
    report,
    schedule,
    search,
    simulate,
)
from simulator.cli.common import EXAMPLE_NAME, EXAMPLES_HEADING, EXIT_INTERNAL, EXIT_USAGE
from strategies.errors import ExecsimError, cut


class _UsageError(ExecsimError):
    """A command-line argument argparse refused."""


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad argument is one ``execsim: error:`` line (like every other error)."""

    def error(self, message):
        raise _UsageError(f"{self.prog}: {cut(message, 200)}{did_you_mean(message)} (see '{self.prog} --help')")


def did_you_mean(message: str) -> str:
    """``"; did you mean 'simulate'?"`` for argparse's ``invalid choice: 'simulat' (choose from ...)``
    when one choice is close (difflib's ratio >= 0.6), else "".

    >>> did_you_mean("argument COMMAND: invalid choice: 'simulat' (choose from 'schedule', 'simulate')")
    "; did you mean 'simulate'?"
    >>> did_you_mean("argument COMMAND: invalid choice: 'xyz' (choose from 'schedule', 'simulate')")
    ''
    """
    import difflib
    import re
    m = re.search(r"invalid choice: '?([^' ]*)'? \(choose from (.*)\)", message)
    if not m:
        return ""
    choices = re.findall(r"'([^']*)'", m.group(2)) or [c.strip() for c in m.group(2).split(",")]
    close = difflib.get_close_matches(m.group(1), choices, n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def build_parser() -> argparse.ArgumentParser:
    from simulator import __version__
    p = _Parser(
        prog="execsim", description="Discrete-event execution simulator for distributed LLM training.",
        epilog=EXAMPLES_HEADING + "\n  ".join([f"execsim simulate {EXAMPLE_NAME}",
                                   f"execsim simulate {EXAMPLE_NAME} --json --check",
                                   f"execsim simulate {EXAMPLE_NAME} --html report.html",
                                   f"execsim compare {EXAMPLE_NAME} --schedules 1f1b,interleaved-1f1b --plot cmp.png",
                                   "execsim examples            (the shipped examples, runnable by name from any folder)",
                                   "execsim <command> --help   (options and examples of one command)"]),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"execsim {__version__}",
                   help="print the version and exit")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    schedule.add_parser(sub)
    simulate.add_parser(sub)
    report.add_parser(sub)
    memory.add_parser(sub)
    plan_recompute.add_parser(sub)
    compare.add_parser(sub)
    import_cmd.add_parser(sub)
    search.add_parser(sub)
    goodput.add_parser(sub)
    profile.add_parser(sub)
    calibrate.add_parser(sub)
    examples.add_parser(sub)
    return p


def _one_line(text: str) -> str:
    """An error message as printed: its lines joined (one ``execsim: error:`` line per error)."""
    return " | ".join(line.strip() for line in str(text).strip().splitlines() if line.strip())


def main(argv: list[str] | None = None) -> int:
    """Run the CLI. Every refused input prints one ``execsim: error: ...`` line and returns 2; an
    unexpected exception prints one ``execsim: internal error`` line and returns 3 (set
    ``EXECSIM_DEBUG=1`` for the traceback)."""

    from strategies.documents import forget_files_read
    forget_files_read()   # the inputs no output of this command may replace (simulator.outputs.files)
    stdout = sys.stdout
    sys.stdout = _CheckedStdout(stdout)
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        code = args.func(args)
        sys.stdout.flush()
        return code
    except _StdoutError as exc:
        _silence(stdout)
        print(f"execsim: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ExecsimError as exc:
        print(f"execsim: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        print("execsim: interrupted", file=sys.stderr)
        return 130
    except (MemoryError, RecursionError) as exc:
        print(f"execsim: error: out of {'memory' if isinstance(exc, MemoryError) else 'stack'}: the input is too "
              f"large for this machine; reduce its sizes (docs/strategy-file.md, Limits)", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:  # noqa: BLE001 -- the CLI's last resort: one line naming the bug, no traceback
        return _internal(exc)
    finally:
        sys.stdout = stdout


def _internal(exc: Exception) -> int:
    """A bug: one line, not a traceback, unless ``EXECSIM_DEBUG`` asks for it."""
    import os
    if os.environ.get("EXECSIM_DEBUG"):
        raise exc
    print(f"execsim: internal error: {type(exc).__name__}: {cut(str(exc), 200)} (a bug: please report "
          f"it with the input; EXECSIM_DEBUG=1 shows the traceback)", file=sys.stderr)
    return EXIT_INTERNAL


class _StdoutError(ExecsimError):
    """Standard output cannot be written (``> /dev/full``, an I/O error)."""


class _CheckedStdout:
    """Standard output for one command: a write or flush that fails with an OSError (other than a
    closed pipe, which ends the command quietly) becomes one :class:`_StdoutError` line, not an
    internal error. Everything else is the wrapped stream's."""

    def __init__(self, stream):
        self._stream = stream

    def _call(self, name, *a):
        try:
            return getattr(self._stream, name)(*a)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise _StdoutError(f"cannot write to standard output ({exc.strerror or type(exc).__name__}): redirect "
                               f"it to a file on a disk with free space") from None

    def write(self, text):
        return self._call("write", text)

    def flush(self):
        return self._call("flush")

    def __getattr__(self, name):
        return getattr(self._stream, name)


def _silence(stream) -> None:
    """Point ``stream``'s file descriptor at the null device, so that the interpreter's own flush at
    exit does not report the failed write a second time (Python docs, "Note on SIGPIPE")."""
    import os
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        pass


def run() -> int:
    """The ``execsim`` console command: :func:`main`, then ``gc.freeze()`` before the process exits,
    so the interpreter's final collection does not walk every object the run left in its caches
    (schedules, cost records, lowering structures: 0.15-0.3 s after a search on the project machine;
    Python docs, ``gc.freeze``: frozen objects are ignored by all future collections). Tests and the
    API call :func:`main`, which keeps the collector as it was."""
    code = main()
    import gc
    gc.freeze()
    return code


if __name__ == "__main__":
    sys.exit(run())
