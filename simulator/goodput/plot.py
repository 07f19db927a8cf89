"""PNG of a simulated training run (``execsim goodput --plot``).

Top panel: tokens trained against wall-clock days for one seed (the progress drops back to the last
durable checkpoint at each failure), the failure-free line for comparison, failures marked in
vermillion (by component in the legend) and, when there are at most ``MAX_CHECKPOINT_MARKS``,
checkpoints as ticks. Bottom panel: goodput against the checkpoint interval (simulated mean over
seeds) with Daly's closed form. Same conventions as :mod:`simulator.outputs.plots` (Okabe-Ito colours,
fixed dpi and size, Agg canvas, no ``Software`` metadata: identical inputs give identical PNGs).
"""
from __future__ import annotations

import numpy as np

from simulator.outputs.plots import FIG_WIDTH_IN, new_figure, save_figure

MAX_CHECKPOINT_MARKS = 400
DAY = 86400.0


def plot_run(run, report: dict, path, *, title: str = "", closed_form=None) -> None:
    """``run``: a :class:`simulator.goodput.model.RunResult`; ``report``:
    :func:`simulator.goodput.report.goodput_report`'s dict; ``closed_form``: tau -> goodput (Daly 2006) for
    the bottom panel, or None."""
    sweep = report.get("sweep") or []
    fig, canvas = new_figure(FIG_WIDTH_IN, 8.0 if sweep else 5.0)
    ax = fig.add_axes((0.07, 0.42 if sweep else 0.12, 0.9, 0.5 if sweep else 0.78))
    t = np.array([p[0] for p in run.progress]) / DAY
    y = np.array([p[1] for p in run.progress])
    ax.plot(t, y, color="#0072B2", lw=1.2, label="tokens trained (this seed)")
    full = report["tokens_per_iteration"] / report["iteration_time_s"]
    ax.plot([0, run.wall_s / DAY], [0, full * run.wall_s], color="#999999", lw=1.0, ls="--",
            label="failure-free")
    fails = [e for e in run.events if e[1] == "failure"]
    if fails:
        ft = np.array([e[0] for e in fails]) / DAY
        ax.plot(ft, np.interp(ft, t, y), "|", color="#D55E00", ms=8, mew=1.0,
                label=f"failures ({len(fails)})")
    ck = [e[0] for e in run.events if e[1] == "checkpoint"]
    if ck and len(ck) <= MAX_CHECKPOINT_MARKS:
        ax.plot(np.array(ck) / DAY, np.zeros(len(ck)), "|", color="#009E73", ms=6, label="checkpoints")
    ax.set_xlabel("wall-clock days")
    ax.set_ylabel("tokens")
    ax.set_xlim(0, max(run.wall_s / DAY, 1e-9))
    ax.set_ylim(0, None)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    ax.set_title(title or (f"goodput {100 * run.goodput:.1f} % (seed {run.seed}), checkpoint every "
                           f"{report['interval_s']:.0f} s, {run.checkpoints} checkpoints"), fontsize=10)
    if sweep:
        ax2 = fig.add_axes((0.07, 0.07, 0.9, 0.25))
        xs = np.array([r["interval_s"] for r in sweep])
        gs = np.array([r["goodput"] for r in sweep])
        ax2.plot(xs, 100 * gs, "o-", color="#0072B2", ms=4, label=f"simulated (mean of {report['seeds']} seeds)")
        if closed_form is not None:
            xx = np.geomspace(xs.min(), xs.max(), 200)
            ax2.plot(xx, [100 * closed_form(v) for v in xx], color="#E69F00", lw=1.0, label="Daly 2006 closed form")
        if "best_interval_s" in report:
            ax2.axvline(report["best_interval_s"], color="#D55E00", lw=0.8, ls=":",
                        label=f"best simulated {report['best_interval_s']:.0f} s")
        ax2.set_xscale("log")
        ax2.set_xlabel("checkpoint interval (s)")
        ax2.set_ylabel("goodput %")
        ax2.grid(alpha=0.3)
        ax2.legend(loc="lower center", fontsize=8)
    save_figure(fig, canvas, path)
