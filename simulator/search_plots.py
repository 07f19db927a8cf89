"""Pareto front of a strategy search: time to train vs cost, coloured by memory headroom."""
from __future__ import annotations

import numpy as np


def pareto_front(time: np.ndarray, cost: np.ndarray) -> np.ndarray:
    """Indices of the points no other point beats on both time and cost (ties: the first), sorted by
    time.

    >>> pareto_front(np.array([1.0, 2.0, 3.0, 2.0]), np.array([3.0, 1.0, 0.5, 2.0])).tolist()
    [0, 1, 2]
    """
    order = np.lexsort((np.arange(time.size), cost, time))
    out, best = [], np.inf
    for i in order:
        if cost[i] < best:
            out.append(int(i))
            best = cost[i]
    return np.array(out, dtype=np.int64)


def plot_pareto(result, path: str, title: str = "") -> int:
    """Write the time-vs-cost scatter of every simulated candidate that fits (colour: memory headroom,
    GiB), the Pareto front and the winner as a PNG. Returns the number of front points."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    df = result.table
    ok = df[df["status"] == "ok"]
    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=110)
    n_front = 0
    if len(ok):
        t = ok["days_to_train"].to_numpy(dtype=float)
        c = ok["cost_usd"].to_numpy(dtype=float)
        if np.all(np.isnan(c)):
            c = ok["gpu_hours"].to_numpy(dtype=float)
        sc = ax.scatter(t, c, c=ok["memory_headroom_gb"].to_numpy(dtype=float), cmap="viridis", s=14, alpha=0.8)
        fig.colorbar(sc, ax=ax, label="memory headroom per GPU (GiB)")
        front = pareto_front(t, c)
        n_front = front.size
        ax.plot(t[front], c[front], "-o", color="crimson", ms=4, lw=1.2, label=f"Pareto front ({front.size})")
        if result.deadline_days is not None:
            ax.axvline(result.deadline_days, color="grey", ls="--", lw=1, label=f"deadline {result.deadline_days:g} d")
        if result.best is not None:
            b = df.iloc[0]
            ax.scatter([b["days_to_train"]], [b["cost_usd"] if not np.isnan(b["cost_usd"]) else b["gpu_hours"]],
                       marker="*", s=220, color="gold", edgecolor="black", zorder=5,
                       label=f"best ({result.objective}): {b['gpus']} GPUs tp{b['tp']} pp{b['pp']} {b['schedule']}")
    ax.set_xlabel(f"days to train {result.train_tokens:.3g} tokens")
    ax.set_ylabel("cost (USD)" if result.price is not None else "GPU-hours")
    ax.set_title(title or f"strategy search ({result.method}, {result.evaluations} simulated)")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return n_front
