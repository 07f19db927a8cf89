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
    """Write two panels as a PNG: time to train vs cost (colour: memory headroom) and time vs memory
    headroom (colour: GPU count), each with its Pareto front, the winner starred, each colour with its
    colour bar. Returns the number of time-cost front points (one when every candidate has the same GPU
    count: cost is then proportional to time)."""
    import matplotlib.pyplot as plt
    fig, n_front = pareto_figure(result, title)
    fig.savefig(path)
    plt.close(fig)
    return n_front


def pareto_figure(result, title: str = ""):
    """The figure :func:`plot_pareto` writes, and its number of time-cost front points."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    df = result.table
    ok = df[df["status"] == "ok"]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(13, 5.2), dpi=110)
    n_front = 0
    money = result.price is not None
    if len(ok):
        t = ok["days_to_train"].to_numpy(dtype=float)
        c = ok["cost_usd" if money else "gpu_hours"].to_numpy(dtype=float)
        h = ok["memory_headroom_gb"].to_numpy(dtype=float)
        sc = ax.scatter(t, c, c=h, cmap="viridis", s=14, alpha=0.8)
        fig.colorbar(sc, ax=ax, label="memory headroom per GPU (GiB)")
        front = pareto_front(t, c)
        n_front = front.size
        ax.plot(t[front], c[front], "-o", color="crimson", ms=4, lw=1.2, label=f"Pareto front ({front.size})")
        sc2 = ax2.scatter(t, h, c=ok["gpus"].to_numpy(dtype=float), cmap="plasma", s=14, alpha=0.8)
        fig.colorbar(sc2, ax=ax2, label="GPUs")
        f2 = pareto_front(t, -h)
        ax2.plot(t[f2], h[f2], "-o", color="crimson", ms=4, lw=1.2, label=f"Pareto front ({f2.size})")
        if result.deadline_days is not None:
            for a in (ax, ax2):
                a.axvline(result.deadline_days, color="grey", ls="--", lw=1, label=f"deadline {result.deadline_days:g} d")
        if result.best is not None:
            b = df.iloc[0]
            lab = f"best ({result.objective}): {b['gpus']} GPUs tp{b['tp']} pp{b['pp']} {b['schedule']}"
            ax.scatter([b["days_to_train"]], [b["cost_usd" if money else "gpu_hours"]], marker="*", s=220,
                       color="gold", edgecolor="black", zorder=5, label=lab)
            ax2.scatter([b["days_to_train"]], [b["memory_headroom_gb"]], marker="*", s=220, color="gold",
                        edgecolor="black", zorder=5, label=lab)
    for a in (ax, ax2):
        a.set_xlabel(f"days to train {result.train_tokens:.3g} tokens")
        a.grid(alpha=0.3)
        a.legend(loc="best", fontsize=8)
    ax.set_ylabel("cost (USD)" if money else "GPU-hours")
    ax2.set_ylabel("memory headroom per GPU (GiB)")
    ax.set_title(title or f"strategy search ({result.method}, {result.evaluations} simulated)")
    ax2.set_title("time vs memory headroom (colour: GPUs)")
    fig.tight_layout()
    return fig, n_front
