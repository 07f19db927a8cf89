"""How long a GPU waits for the host after a blocking pipeline exchange, from the kernels that follow it.

    python -m benchmarks.host_restart [--rows GLOB] [--markdown out.md]

Megatron-LM's blocking pipeline exchange ends in ``torch.cuda.synchronize()``
(``megatron/core/pipeline_parallel/p2p_communication.py`` ``_communicate``, ``batch_p2p_sync``), so
the GPU's queue is empty when the host returns: the next action (a stage's forward or backward of
one micro-batch) runs only as fast as the host issues its kernels until the host has a lead again.
Launches are asynchronous (CUDA C++ Programming Guide, "Asynchronous Concurrent Execution"; PyTorch
"CUDA semantics": ops are enqueued and return at once), so with kernel j issued at
``I_j = h_1 + ... + h_j`` (host seconds per kernel, ``cluster.host_us_per_kernel``: 5-25 us per
PyTorch eager op, ``taskgraph/overheads.py``) and running for ``d_j`` on an otherwise idle stream,
kernel j ends at ``f_j = max(f_{j-1}, I_j) + d_j`` and the device idles for

    lag = f_n - (d_1 + ... + d_n) = max_j ( I_j - (d_1 + ... + d_{j-1}) )        (restart_lag_s)

(the host-issue deficit: the largest amount by which issuing the first j kernels outruns running the
first j - 1). Large kernels make the maximum the first term (one launch); a run of kernels shorter
than their launch cost makes it grow.

For each iteration row of ``benchmarks/validation/published_runs.csv`` named by ``--rows``
(default: the zero-bubble rows and Korthikanti's 175B rows, the two groups that disagree on
``p2p_host_gap_us``), this simulates the row at operator fidelity with the declared constants,
takes every stage's first-micro-batch forward and backward compute tasks in start order (one kernel
per compute task: a lower bound on launches, so an upper bound on each kernel's device time) and
prints the largest lag at 10 and 25 us per kernel, beside the row's signed error with the fitted gap
at 0, 500 (declared) and 1000 us, and the gap that would zero the row's error (linear between 0 and
1000 us); then, for each interleaved row with a 1F1B row of the same model and batch, the gap that
zeroes the difference of their errors (the pair shares its compute, so only the exchanges remain). docs/changelog-validation.md ("The zero-bubble group and p2p_host_gap_us") reports the result.
"""
from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

DEFAULT_ROWS = "ZB-*,K22-175B-*"
HOST_US = (10.0, 25.0)
GAPS_US = (0.0, 500.0, 1000.0)


def restart_lag_s(host_s: Sequence[float], device_s: Sequence[float]) -> float:
    """Seconds an idle device waits for the host while it issues kernels 1..n (host seconds
    ``host_s[j]`` each) that run ``device_s[j]`` each: ``max_j (sum(host_s[:j+1]) - sum(device_s[:j]))``.

    >>> restart_lag_s([10e-6, 10e-6], [500e-6, 500e-6]) * 1e6   # one launch, then the host leads
    10.0
    >>> round(restart_lag_s([10e-6] * 3, [2e-6] * 3) * 1e6, 6)   # host-bound throughout: 30 - 4
    26.0
    """
    if len(host_s) != len(device_s):
        raise ValueError(f"host_s has {len(host_s)} kernels, device_s {len(device_s)}: pass one of each per kernel")
    lag, issued, ran = 0.0, 0.0, 0.0
    for h, d in zip(host_s, device_s):
        issued += h
        lag = max(lag, issued - ran)
        ran += d
    return lag


def _action_lags(df, host_s: float) -> float:
    """Largest restart lag over every rank's first-micro-batch forward and backward (chunk 0)."""
    c = df[(df["stream"] == "compute") & (df["mb"] == 0) & (df["chunk"] == 0)]
    worst = 0.0
    for (_, fwd), grp in c.groupby([c["rank"], c["category"] == "forward"]):
        grp = grp.sort_values(["start", "task"])
        d = (grp["end"] - grp["start"]).tolist()
        worst = max(worst, restart_lag_s([host_s] * len(d), d))
    return worst


def measure(row: dict) -> dict:
    """Restart lags (us) at each HOST_US and the signed errors (%) at each GAPS_US of one row."""
    from benchmarks.validate import measured_seconds, strategy_for
    from simulator.api import simulate_strategy
    from simulator.engine.timeline import timeline
    from strategies.strategy_file import parse_strategy
    meas = measured_seconds(row)
    out = {"id": row["id"], "errors": {}}
    for gap in GAPS_US:
        d, _ = strategy_for(row)
        d.setdefault("options", {})["p2p_host_gap_us"] = gap
        sim = simulate_strategy(parse_strategy(d), fidelity="operator")
        out["errors"][gap] = 100.0 * (sim.training.iteration_time_s - meas) / meas
        if gap == GAPS_US[1]:
            df = timeline(sim.graph, sim.result)
            out["lags"] = {h: 1e6 * _action_lags(df, h * 1e-6) for h in HOST_US}
    e0, e1 = out["errors"][GAPS_US[0]], out["errors"][GAPS_US[-1]]
    slope = (e1 - e0) / (GAPS_US[-1] - GAPS_US[0])
    out["zero_gap_us"] = GAPS_US[0] - e0 / slope if slope > 0 else float("nan")
    return out


def format_table(results: list[dict]) -> str:
    head = ("| row | restart lag, 10 us/kernel | 25 us/kernel | error, gap 0 | gap 500 | gap 1000 "
            "| gap that zeroes the error |\n|---|---:|---:|---:|---:|---:|---:|")
    lines = [head]
    for r in results:
        e = r["errors"]
        lines.append(f"| {r['id']} | {r['lags'][HOST_US[0]]:.0f} us | {r['lags'][HOST_US[1]]:.0f} us "
                     f"| {e[0.0]:+.1f}% | {e[500.0]:+.1f}% | {e[1000.0]:+.1f}% | {r['zero_gap_us']:.0f} us |")
    return "\n".join(lines)


def pair_gaps(results: list[dict], a: str = "-int-", b: str = "-1f1b-") -> dict[str, float]:
    """The gap (us) that zeroes err(a row) - err(its b partner), linear between the end gaps: the
    per-exchange cost with what the pair shares (the compute rate) cancelled (fitted.yaml
    ``paired_signed_difference``)."""
    by_id = {r["id"]: r["errors"] for r in results}
    lo, hi = GAPS_US[0], GAPS_US[-1]
    out = {}
    for rid, e in by_id.items():
        p = by_id.get(rid.replace(a, b)) if a in rid else None
        if p is not None:
            d0, d1 = e[lo] - p[lo], e[hi] - p[hi]
            out[rid] = lo - d0 * (hi - lo) / (d1 - d0) if d1 != d0 else float("nan")
    return out


def main(argv: list[str] | None = None) -> int:
    from benchmarks.validate import load_rows, select
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default=DEFAULT_ROWS, help=f"comma-separated globs of row ids (default {DEFAULT_ROWS})")
    ap.add_argument("--markdown", help="also write the table here")
    args = ap.parse_args(argv)
    rows = [r for pat in args.rows.split(",") for r in select(load_rows(), pat)
            if r["metric"] != "layer_fwd_bwd_time"]
    results = [measure(r) for r in rows]
    table = format_table(results)
    pairs = pair_gaps(results)
    if pairs:
        table += ("\n\n| interleaved row - its 1F1B row | gap that zeroes the difference |\n|---|---:|\n"
                  + "\n".join(f"| {k} | {v:.0f} us |" for k, v in pairs.items())
                  + f"\n| mean of {len(pairs)} | {sum(pairs.values()) / len(pairs):.0f} us |")
    print(table)
    if args.markdown:
        Path(args.markdown).write_text(table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
