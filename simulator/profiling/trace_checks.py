"""What ``execsim calibrate`` accepts from a trace folder, checked before the traces are used.

The folder: listed once (an unreadable folder, a FIFO or a device in it never blocks: only regular
files named ``*.json`` / ``*.json.gz`` are traces), at most ``MAX_TRACE_FILES`` of them and at most
``MAX_TRACE_TOTAL_BYTES`` in all (sizes on disk, a gzip file's declared decompressed size, before
any is read).

Each trace: a Chrome-trace object (``{"traceEvents": [...]}``) or a bare event array (the Chrome
trace format allows both). Each complete event (``ph: X``) must hold what the reader uses with the
type the PyTorch profiler writes: ``ts`` and ``dur`` finite numbers with ``dur >= 0`` (a negative
or NaN duration is refused, never turned into 0 us), ``args`` a mapping, ``args.stream`` an integer,
``tid`` an integer or text, ``args.correlation`` and ``args["External id"]`` integers. Anything
else is one :class:`ConfigError` naming the file, the event, the field, the value and what to give.

The rank: ``distributedInfo.rank`` (an integer, not a bool) or the number in the file name, at most
``MAX_GPUS - 1``; ``check_ranks`` refuses, after reading, a rank the strategy does not have.
"""
from __future__ import annotations

import math
import os
import re
import stat
from pathlib import Path

from strategies.errors import ConfigError, brief
from strategies.limits import MAX_GPUS, MAX_TRACE_FILES, MAX_TRACE_TOTAL_BYTES

__all__ = ["check_ranks", "complete_events", "list_trace_files", "trace_rank"]

_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)


def list_trace_files(folder) -> list[Path]:
    """The trace files of ``folder``, sorted by name (module docstring)."""
    p = Path(folder)
    name = brief(str(p), 120)
    try:
        if not p.is_dir():
            raise ConfigError(f"TRACE_DIR {name} is not a folder: give the folder holding one profiler JSON per rank")
        files, total = [], 0
        with os.scandir(p) as entries:
            for e in entries:
                if not (e.name.endswith(".json") or e.name.endswith(".json.gz")):
                    continue
                st = os.stat(e.path)          # follows a link; never opens the file (a FIFO cannot block)
                if not stat.S_ISREG(st.st_mode):
                    continue
                files.append(Path(e.path))
                total += max(st.st_size, _gzip_size(e.path)) if e.name.endswith(".gz") else st.st_size
                if len(files) > MAX_TRACE_FILES:
                    raise ConfigError(f"TRACE_DIR {name} holds over {MAX_TRACE_FILES} traces, the limit; keep a "
                                      f"few ranks in the folder")
    except OSError as exc:
        raise ConfigError(f"TRACE_DIR {name} cannot be read ({exc.strerror or type(exc).__name__}); check the path "
                          f"and its permissions") from None
    if not files:
        raise ConfigError(f"TRACE_DIR {name} holds no .json or .json.gz trace")
    if total > MAX_TRACE_TOTAL_BYTES:
        raise ConfigError(f"TRACE_DIR {name}: its {len(files)} traces hold {total:,} bytes, over the limit of "
                          f"{MAX_TRACE_TOTAL_BYTES:,} in all; keep fewer ranks or trace fewer steps")
    return sorted(files)


def _gzip_size(path: str) -> int:
    """The decompressed size a gzip file declares (its last 4 bytes, ISIZE: RFC 1952 section 2.3.1,
    the size modulo 2^32 of its last member); the reader caps each file at ``MAX_TRACE_BYTES`` anyway."""
    with open(path, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        if fh.tell() < 18:
            return 0
        fh.seek(-4, os.SEEK_END)
        return int.from_bytes(fh.read(4), "little")


def _refuse(path, i: int, e: dict, field: str, value, fix: str):
    raise ConfigError(f"trace {brief(str(path), 100)}: event {i} ({brief(e.get('name', ''), 40)}) {field} = "
                      f"{brief(value, 40)} {fix}; is it a PyTorch profiler trace?")


def _number(path, i, e, field, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        _refuse(path, i, e, field, value, "must be a number (microseconds)")
    x = float(value)
    if not math.isfinite(x) or (field == "dur" and x < 0):
        _refuse(path, i, e, field, value, "must be a finite number of microseconds, at least 0")
    return x


def _integer(path, i, e, field, value, allow_text: bool = False) -> None:
    if isinstance(value, bool) or not (isinstance(value, int) or (allow_text and isinstance(value, str))):
        _refuse(path, i, e, field, value, "must be an integer" + (" or text" if allow_text else ""))


def complete_events(doc, path) -> tuple[list, list]:
    """``(host, device)``: the complete events of trace ``doc`` read from ``path``, each as
    ``(event, args, ts, dur)``; a device event has ``args.stream`` (HTA's rule). Every field the
    reader uses is checked (module docstring)."""
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise ConfigError(f"trace {brief(str(path), 120)} has no traceEvents list: is it a PyTorch profiler trace?")
    host, dev = [], []
    for i, e in enumerate(events):
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        if "ts" not in e:
            _refuse(path, i, e, "ts", None, "is missing: a complete event needs its start")
        ts = _number(path, i, e, "ts", e["ts"])
        dur = _number(path, i, e, "dur", e.get("dur", 0.0))
        args = e.get("args", {})
        if not isinstance(args, dict):
            _refuse(path, i, e, "args", args, "must be a mapping")
        if "tid" in e:
            _integer(path, i, e, "tid", e["tid"], allow_text=True)
        for key in ("stream", "correlation", "External id"):
            if key in args:
                _integer(path, i, e, f"args.{key}", args[key])
        (dev if "stream" in args else host).append((e, args, ts, dur))
    return host, dev


def trace_rank(doc, path: Path, index: int) -> int:
    """The rank of a trace: ``distributedInfo.rank``, else the number in the file name
    (``rank3.json``, ``rank_3``), else ``index`` (its place in the folder)."""
    info = doc.get("distributedInfo") if isinstance(doc, dict) else None
    if isinstance(info, dict) and "rank" in info:
        r = info["rank"]
        where = "distributedInfo.rank"
    else:
        m = _RANK_IN_NAME.search(path.name)
        if not m:
            return index
        r = int(m.group(1)) if len(m.group(1)) <= 12 else m.group(1)
        where = "the rank in the file name"
    if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < MAX_GPUS:
        raise ConfigError(f"trace {brief(str(path), 120)}: {where} = {brief(r, 40)} must be an integer in "
                          f"[0, {MAX_GPUS - 1:,}]; give the rank that wrote the trace")
    return r


def check_ranks(traces, num_gpus: int, strategy: str = "the strategy") -> None:
    """Refuse a trace whose rank the strategy does not have (``rank >= num_gpus``)."""
    for t in traces:
        if t.rank >= num_gpus:
            raise ConfigError(f"trace {brief(t.path, 120)} is rank {t.rank:,} but {brief(strategy, 80)} has ranks "
                              f"0-{num_gpus - 1}; give the traces of this run (or the strategy file of the traced run)")
