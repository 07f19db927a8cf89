"""Validate the collective model against published nccl-tests bus bandwidths.

    python -m benchmarks.nccl_tests [--markdown table.md]

Reads ``benchmarks/validation/nccl_tests.csv`` (figures copied with their sources: size sweeps of
``all_reduce_perf`` and NCCL maintainers' peak figures), times each row's collective with
:func:`topologies.collectives.collective_time` on the row's cluster preset (NCCL's tuner choice,
timed as it executes: ``topologies/nccl.py``, e.g. the NVLS chunk pipeline), converts to nccl-tests bus bandwidth (``topologies.nccl.bus_bandwidth``,
nccl-tests doc/PERFORMANCE.md; a call takes at least the cluster's ``host_us_per_collective``, since
nccl-tests issues calls back to back) and prints predicted vs measured per row, with the mean and max
absolute error per regime: bandwidth-bound (S >= 256 MB), mid (1 MB <= S < 256 MB) and
latency-bound (S < 1 MB). docs/validation.md reports the result.
"""
from __future__ import annotations

import argparse
import csv
from pathlib import Path

from topologies.cluster import get_cluster
from topologies.collectives import collective_time
from topologies.nccl import bus_bandwidth

CSV_PATH = Path(__file__).resolve().parent / "validation" / "nccl_tests.csv"
REGIMES = (("bandwidth (S >= 256 MB)", 256 << 20, float("inf")), ("mid (1 MB <= S < 256 MB)", 1 << 20, 256 << 20),
           ("latency (S < 1 MB)", 0, 1 << 20))


def load_rows(path: Path = CSV_PATH) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def predict(row: dict) -> float:
    """Predicted nccl-tests busbw (GB/s) of one row."""
    cluster = get_cluster(row["preset"], nodes=int(row["nodes"]))
    n, size, coll = int(row["ranks"]), float(row["size_bytes"]), row["collective"]
    opts = {"algorithm": row["algorithm"]} if coll == "all-reduce" else {}
    t = collective_time(coll, size, list(range(n)), cluster, **opts)
    # nccl-tests issues calls back to back: a call takes at least the host's issue cost
    # (cluster.host_us_per_collective, taskgraph/overheads.py)
    t = max(t, cluster.host_us_per_collective * 1e-6)
    return bus_bandwidth(coll, size, t, n) / 1e9


def evaluate(rows: list[dict] | None = None) -> list[dict]:
    out = []
    for row in rows or load_rows():
        pred = predict(row)
        meas = float(row["busbw_gbps"])
        out.append({**row, "predicted_gbps": pred, "error": (pred - meas) / meas})
    return out


def summary(results: list[dict]) -> list[tuple[str, int, float, float]]:
    rows = []
    for name, lo, hi in REGIMES:
        sel = [abs(r["error"]) for r in results if lo <= float(r["size_bytes"]) < hi]
        if sel:
            rows.append((name, len(sel), sum(sel) / len(sel), max(sel)))
    return rows


def sweep_of(row: dict) -> str:
    """The size sweep a row belongs to (``AZ-H200-AR-1024`` -> ``AZ-H200-AR``), or ``peaks`` for the
    single figures (maintainers' statements, issue peaks)."""
    head, _, tail = row["id"].rpartition("-")
    return head if tail.isdigit() and "sweep" in (row.get("notes") or "") else "peaks"


def sweep_summary(results: list[dict]) -> list[tuple[str, str, int, float, float]]:
    """(sweep, regime, rows, mean abs error, max abs error) per sweep and regime."""
    out = []
    for sweep in dict.fromkeys(sweep_of(r) for r in results):
        for name, cnt, mean, mx in summary([r for r in results if sweep_of(r) == sweep]):
            out.append((sweep, name, cnt, mean, mx))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markdown", help="write the per-regime table as markdown")
    args = ap.parse_args(argv)
    res = evaluate()
    print(f"{'id':24s} {'size':>12s} {'measured':>10s} {'predicted':>10s} {'error':>8s}")
    for r in res:
        print(f"{r['id']:24s} {int(float(r['size_bytes'])):12d} {float(r['busbw_gbps']):10.2f} "
              f"{r['predicted_gbps']:10.2f} {r['error']:+8.1%}")
    lines = ["| regime | rows | mean abs error | max abs error |", "|---|---:|---:|---:|"]
    for name, cnt, mean, mx in summary(res):
        print(f"{name:28s} rows {cnt:3d}  mean |error| {mean:.1%}  max {mx:.1%}")
        lines.append(f"| {name} | {cnt} | {mean:.1%} | {mx:.1%} |")
    lines += ["", "| sweep | regime | rows | mean abs error | max abs error |", "|---|---|---:|---:|---:|"]
    for sweep, name, cnt, mean, mx in sweep_summary(res):
        print(f"  {sweep:14s} {name:28s} rows {cnt:3d}  mean |error| {mean:.1%}  max {mx:.1%}")
        lines.append(f"| {sweep} | {name} | {cnt} | {mean:.1%} | {mx:.1%} |")
    if args.markdown:
        Path(args.markdown).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
