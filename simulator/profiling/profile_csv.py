"""A measured profile: its rows, the CSV text ``options.profile`` reads (``taskgraph/cost.py``,
columns ``gpu, dtype, op, pass, shape, time_us``) and the measured-vs-modelled report."""
from __future__ import annotations

import csv
import io
from dataclasses import dataclass

from taskgraph.cost import PASSES

HEADER = ("gpu", "dtype", "op", "pass", "shape", "time_us")


@dataclass(frozen=True)
class ProfileRow:
    """One operator pass: measured and modelled seconds (``how``: what ran, see ``torch_ops``)."""

    op: str
    shape: str
    pass_: str
    measured_s: float
    modelled_s: float
    count: int = 1
    how: str = ""


def profile_text(rows, gpu: str, dtype: str) -> str:
    """The CSV ``options.profile`` reads: one row per operator pass, times in microseconds."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(HEADER)
    for r in rows:
        w.writerow((gpu, dtype, r.op, r.pass_, r.shape, f"{r.measured_s * 1e6:.3f}"))
    return buf.getvalue()


def report_lines(rows, title: str) -> list[str]:
    """Measured vs modelled per operator pass, then the totals of one micro-batch (count-weighted)."""
    out = [title, (f"{'operator':<22} {'pass':<10} {'shape':<28} {'how':<10} {'measured us':>12} "
                  f"{'modelled us':>12} {'ratio':>6}")]
    for r in rows:
        ratio = f"{r.measured_s / r.modelled_s:6.2f}" if r.modelled_s > 0 else "     -"
        out.append(f"{r.op[:22]:<22} {r.pass_:<10} {r.shape[:28]:<28} {r.how[:10]:<10} {r.measured_s * 1e6:12.1f} "
                   f"{r.modelled_s * 1e6:12.1f} {ratio}")
    meas = sum(r.measured_s * r.count for r in rows)
    mod = sum(r.modelled_s * r.count for r in rows)
    out.append(f"one micro-batch, all layers: measured {meas * 1e3:.3f} ms, modelled {mod * 1e3:.3f} ms"
               + (f" (ratio {meas / mod:.2f})" if mod > 0 else ""))
    return out


def rows_json(rows) -> list[dict]:
    return [{"op": r.op, "pass": r.pass_, "shape": r.shape, "how": r.how, "count": r.count,
             "measured_us": r.measured_s * 1e6, "modelled_us": r.modelled_s * 1e6} for r in rows]


__all__ = ["HEADER", "PASSES", "ProfileRow", "profile_text", "report_lines", "rows_json"]
