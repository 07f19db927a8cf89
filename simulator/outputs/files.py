"""Output files: checked before any simulation, written atomically, OS errors as one line.

Two functions, used for every file the CLI writes (traces, plots, CSVs, JSON)::

    out = check_output(args.trace, "--trace", inputs=[args.file], mkdir=args.mkdir)  # before simulating
    ...
    write_output(out, lambda tmp: write_chrome_trace(tmp, graph, result), "--trace")  # after

``check_output`` refuses, with one :class:`OutputError` naming the flag and the path: an empty path,
a directory, a path whose parent is missing (unless ``mkdir``, which creates it) or is not a
directory, an unwritable directory or a read-only file, and any of the run's input files (so
``--trace strategy.yaml`` cannot overwrite the strategy). It returns the path to pass to
``write_output``.

``write_output`` calls ``write(tmp)`` with a temporary path in the same directory and renames it
over the target (``os.replace``, atomic on POSIX), so a run that fails half-way leaves the old file,
or nothing, never half a file. ``write`` may also be a ``str`` or ``bytes`` (the file's content).
Devices and FIFOs (``/dev/stdout``, ``/dev/null``) are written in place: they cannot be renamed
over. Library code raises; the CLI prints ``execsim: error: ...``.

>>> import tempfile, os
>>> d = tempfile.mkdtemp()
>>> p = check_output(os.path.join(d, "t.json"), "--trace")
>>> write_output(p, '{"ok": true}\\n', "--trace")
>>> open(p).read()
'{"ok": true}\\n'
>>> check_output(d, "--trace")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
simulator.outputs.files.OutputError: --trace '...' is a directory: give a file name inside it, e.g. '.../trace.json'
"""
from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from pathlib import Path

from strategies.errors import ExecsimError, brief

__all__ = ["OutputError", "check_output", "check_output_dir", "check_outputs", "write_output"]

Writer = str | bytes | Callable[[str], None]


class OutputError(ExecsimError):
    """An output path cannot be written (names the flag, the path and the fix)."""


def _same_file(a: Path, b: Path) -> bool:
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
        return os.path.realpath(a) == os.path.realpath(b)
    except (OSError, ValueError):
        return False


def _refuse_input(p: Path, flag: str, name: str, inputs: Iterable = ()) -> None:
    """One :class:`OutputError` when ``p`` is one of ``inputs`` or any file this process has read
    (``strategies.documents.files_read``: files found through folders and through paths inside
    inputs count too), also through a symbolic or hard link."""
    from strategies.documents import files_read
    for src in (*inputs, *files_read()):
        if src is not None and _same_file(p, Path(os.fspath(src))):
            raise OutputError(f"{flag} {name} is an input file of this run; writing it would destroy it: "
                              f"choose another name")


def _path_text(path, flag: str, what: str, when_empty: str, when_nul: str) -> tuple[str, str]:
    """``(text, shown name)`` of an output path given to ``flag``; one error for none, an empty one or
    a NUL byte (``what``: path / folder; the hints say what to give instead)."""
    if path is None:
        raise OutputError(f"{flag}: no {what} given")
    text = os.fspath(path)
    name = brief(text, 120)
    if not text.strip():
        raise OutputError(f"{flag} {name} is empty: give {when_empty}")
    if "\x00" in text:
        raise OutputError(f"{flag} {name} contains a NUL byte: give {when_nul}")
    return text, name


def check_output(path, flag: str, *, inputs: Iterable = (), mkdir: bool = False, default_name: str = "trace.json") -> str:
    """Check that ``path`` can be written by ``flag`` before any work is done; return it as a str.

    ``inputs``: paths the run reads (never overwritten). ``mkdir``: create a missing parent folder.
    """
    text, name = _path_text(path, flag, "path", f"a file name, e.g. {flag} {default_name}", "a file name")
    p = Path(text)
    try:
        if p.is_dir():
            raise OutputError(f"{flag} {name} is a directory: give a file name inside it, e.g. "
                              f"{brief(str(p / default_name), 120)}")
        _refuse_input(p, flag, name, inputs)
        parent = p.parent
        if not parent.exists():
            if parent.is_symlink() or not mkdir:
                raise OutputError(f"{flag} {name}: folder {brief(str(parent), 120)} does not exist; create it or "
                                  f"pass --mkdir")
            try:
                parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise OutputError(f"{flag} {name}: cannot create folder {brief(str(parent), 120)} "
                                  f"({exc.strerror or type(exc).__name__})") from None
        if not parent.is_dir():
            raise OutputError(f"{flag} {name}: {brief(str(parent), 120)} is not a folder (it is a file); give a "
                              f"path in a folder")
        if p.exists():
            st = p.stat()
            if stat.S_ISREG(st.st_mode) and (not os.access(p, os.W_OK) or not st.st_mode & 0o222):
                raise OutputError(f"{flag} {name} is read-only: make it writable or choose another name")
            if not stat.S_ISREG(st.st_mode) and not (stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode)):
                raise OutputError(f"{flag} {name} exists and is not a regular file: choose another name")
        if (not p.exists() or stat.S_ISREG(p.stat().st_mode)) and (not os.access(parent, os.W_OK | os.X_OK)
                                                                   or not parent.stat().st_mode & 0o222):
            raise OutputError(f"{flag} {name}: folder {brief(str(parent), 120)} is not writable; choose another "
                              f"folder")
    except OSError as exc:
        raise OutputError(f"{flag} {name} cannot be used ({exc.strerror or type(exc).__name__}); choose another "
                          f"path") from None
    return text


def check_output_dir(path, flag: str, *, inputs: Iterable = (), mkdir: bool = False,
                     pattern: str = r"rank_\d+\.json", others: dict | None = None) -> str:
    """Check a folder that ``flag`` fills with files named like ``pattern`` (``--trace-dir``), before any
    work; return it as a str. Refused with one :class:`OutputError`: an empty path, a file, a missing
    folder whose parent is missing (unless ``mkdir``), a folder that cannot be written (no write
    permission, or no write bit at all: root ignores permissions), and any existing entry matching
    ``pattern`` that :func:`check_output` refuses (an input of the run, also through a symbolic or hard
    link, a folder, a read-only file), and another output of the run (``others``: ``{flag: path}``)
    named like ``pattern`` in the folder, which this one would overwrite. The folder itself is created
    when the files are written."""
    import re
    text, name = _path_text(path, flag, "folder", f"a folder for the files, e.g. {flag} out/", "a folder name")
    d = Path(text)
    for other, op in (others or {}).items():
        if op is not None and re.fullmatch(pattern, Path(op).name) and _same_file(Path(op).parent, d):
            raise OutputError(f"{other} {brief(str(op), 120)} is a file {flag} {name} writes: give them different "
                              f"files")
    try:
        if d.exists() and not d.is_dir():
            raise OutputError(f"{flag} {name} is a file, not a folder: give a folder (it is created if missing)")
        if not d.exists():
            if not d.parent.exists() and not mkdir:
                raise OutputError(f"{flag} {name}: folder {brief(str(d.parent), 120)} does not exist; create it or "
                                  f"pass --mkdir")
            return text
        st = d.stat()
        if not os.access(d, os.W_OK | os.X_OK) or not st.st_mode & 0o222:
            raise OutputError(f"{flag} {name}: the folder is not writable; choose another folder or make it "
                              f"writable")
        inputs = [i for i in inputs if i is not None]
        rx = re.compile(pattern)
        with os.scandir(d) as entries:
            for e in entries:
                if rx.fullmatch(e.name):
                    check_output(os.path.join(text, e.name), flag, inputs=inputs)
    except OSError as exc:
        raise OutputError(f"{flag} {name} cannot be used ({exc.strerror or type(exc).__name__}); choose another "
                          f"folder") from None
    return text


def check_outputs(outputs: dict, *, inputs: Iterable = (), mkdir: bool = False) -> dict:
    """``check_output`` for each ``{flag: path}`` (None skipped); two flags naming one file is an error.

    Returns ``{flag: checked path}`` for the given ones."""
    inputs = [i for i in inputs if i is not None]
    done: dict = {}
    for flag, path in outputs.items():
        if path is None:
            continue
        out = check_output(path, flag, inputs=inputs, mkdir=mkdir)
        for other, op in done.items():
            if _same_file(Path(op), Path(out)):
                raise OutputError(f"{flag} and {other} both name {brief(out, 120)}: give them different files")
        done[flag] = out
    return done


def write_output(path, write: Writer, flag: str, *, follow_links: bool = True) -> None:
    """Write ``path`` atomically: ``write(tmp_path)`` (or the given str/bytes) into a temporary file
    in the same folder, then rename it over ``path``. Any OSError becomes one :class:`OutputError`.

    The temporary file is ``.<name>.<random>.tmp<suffix>`` beside the output. It is removed when the
    write fails, on Ctrl-C (SIGINT) and on SIGTERM (the signal is turned into ``SystemExit(143)`` while
    the file exists, then the previous handler is restored); only SIGKILL can leave it behind. The
    rename replaces the directory entry, so an existing symbolic or hard link at ``path`` is replaced,
    never written through. ``follow_links=False`` also replaces a device, a FIFO or a symbolic link to
    one by a new file (for names execsim makes up itself, e.g. ``--trace-dir``'s ``rank_N.json``: a
    FIFO left there must not block the run waiting for a reader). ``path`` is checked once more
    against the files this process has read (``check_output``'s input check), so a file read after
    ``check_output`` ran is never replaced either."""
    text = os.fspath(path)
    p = Path(text)
    name = brief(text, 120)

    def emit(target: str) -> None:
        if isinstance(write, (str, bytes)):
            with open(target, "wb") as fh:
                fh.write(write.encode() if isinstance(write, str) else write)
        else:
            write(target)

    _refuse_input(p, flag, name)   # read since check_output ran (e.g. calibrate's traces)
    try:
        if not follow_links:
            st = p.lstat() if os.path.lexists(p) else None
        else:
            st = p.stat() if p.exists() else None
        if st is not None and follow_links and (stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode)):
            emit(text)  # a device or FIFO (/dev/stdout, /dev/null): written in place, it cannot be renamed over
            return
        mode = st.st_mode & 0o777 if st is not None and stat.S_ISREG(st.st_mode) else 0o666 & ~_umask()
        with _temporary_file(p) as tmp:
            try:
                emit(tmp)
            except ExecsimError as exc:  # a writer's own error must not name the temporary file
                raise type(exc)(str(exc).replace(tmp, text)) from None
            os.chmod(tmp, mode)
            os.replace(tmp, text)
    except OSError as exc:
        raise OutputError(f"cannot write {flag} {name} ({exc.strerror or type(exc).__name__}); check the path, "
                          f"free space and permissions") from None


@contextmanager
def _temporary_file(p: Path):
    """A new temporary file beside ``p`` (``.<name>.<random>.tmp<suffix>``), removed when the block
    ends, whether it renamed the file away or failed, was interrupted (SIGINT) or terminated
    (SIGTERM: ``SystemExit(143)``, 128 + 15 as the shell reports it). SIGINT and SIGTERM are blocked
    while the file is created and its name kept, so no signal falls between the two; handlers can
    only be set in the main thread, elsewhere the default applies."""
    import signal
    import tempfile  # only a write needs it: not loaded on the simulate path without outputs
    import threading
    main = threading.current_thread() is threading.main_thread()
    old = signal.signal(signal.SIGTERM, _terminate) if main else None
    tmp = None
    try:
        if main:
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
        try:
            # the output's suffix, also for a name that is only one ('.csv': Path.suffix is empty), so a
            # writer that dispatches on it (the timeline: .csv / .parquet) sees the same one
            suffix = p.suffix or (p.name if p.name.count(".") == 1 and p.name.startswith(".") else "")
            fd, tmp = tempfile.mkstemp(dir=str(p.parent), prefix=f".{p.name[:80]}.", suffix=f".tmp{suffix[:16]}")
            os.close(fd)
        finally:
            if main:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
        yield tmp
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        if main:
            signal.signal(signal.SIGTERM, old if old is not None else signal.SIG_DFL)


def _terminate(signum, frame):
    raise SystemExit(128 + signum)


def _umask() -> int:
    old = os.umask(0o022)
    os.umask(old)
    return old
