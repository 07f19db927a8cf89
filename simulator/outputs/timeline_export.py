"""Export the simulated timeline (one row per task) as CSV, or Parquet when pyarrow is installed.

Columns (times in seconds, SI; the unit is in the column name): task, op, category, stage, chunk,
microbatch, rank (the task's pipeline rank), device, device_name, device_rank, stream, is_comm,
ready_s, start_s, end_s, duration_s. Rows sorted by task id; -1 = not applicable. Same input gives
byte-identical CSV (floats written with Python's shortest round-trip repr).
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from simulator.engine.core import SimResult
from simulator.engine.timeline import timeline
from strategies.errors import ConfigError
from taskgraph.graph import TaskGraph

FORMATS = (".csv", ".parquet")
_RENAME = {"mb": "microbatch", "ready": "ready_s", "start": "start_s", "end": "end_s", "duration": "duration_s"}


def timeline_table(graph: TaskGraph, result: SimResult) -> pd.DataFrame:
    """The timeline with unit-suffixed column names (see the module doc)."""
    return timeline(graph, result).rename(columns=_RENAME)


def timeline_format(path) -> str:
    """``csv`` or ``parquet`` from the file name; ConfigError naming the path otherwise."""
    name = Path(str(path)).name.lower()
    # by the name's end, not Path.suffix: a file named '.csv' has no suffix for Python, but is a CSV
    suffix = next((f for f in FORMATS if name.endswith(f)), Path(name).suffix)
    if suffix not in FORMATS:
        raise ConfigError(f"timeline file {str(path)!r} must end in .csv or .parquet (got {suffix or 'no suffix'!r})")
    return suffix[1:]


def parquet_available() -> bool:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


def write_timeline(path, graph: TaskGraph, result: SimResult) -> None:
    """Write the timeline to ``path`` (.csv always works; .parquet needs pyarrow: pip install 'execsim[parquet]')."""
    fmt = timeline_format(path)
    if fmt == "parquet" and not parquet_available():
        raise ConfigError(f"writing {str(path)!r} needs pyarrow, which is not installed: pip install 'execsim[parquet]' "
                         f"(or write .csv)")
    df = timeline_table(graph, result)
    if fmt == "csv":
        with open(path, "w", newline="") as f:
            df.to_csv(f, index=False, lineterminator="\n")
    else:
        df.to_parquet(path, index=False, engine="pyarrow")
