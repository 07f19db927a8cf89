"""PNG figures of simulated iterations: pipeline Gantt charts and memory over time.

* :func:`plot_pipelines` -- one Gantt panel per run (label, graph, result), stacked on one shared time
  axis, plus an optional memory panel (the rank with the highest peak of each run).
* :func:`plot_memory` -- memory over time of every rank of one run.

Conventions:

* Time axis in ms, or in s when the longest iteration is over 10 s (same unit on every panel).
* Memory in GiB (2**30 bytes), the unit ``topologies.gpus`` stores HBM capacities in.
* Gantt rows: the compute stream of each rank (``rank r``), and under it, thinner, its
  communication. ``comm_rows="auto"`` (the default) scales with the rank count: up to
  ``SEPARATE_COMM_MAX_RANKS`` ranks get one thin row per kind of communication stream that ever does
  work (``tp`` for TP/CP/EP collectives, ``dp``, ``p2p`` for the rank's outgoing ``link`` devices and
  ``send``/``recv`` streams); up to ``MERGED_COMM_MAX_RANKS`` one merged ``comm`` row per rank; beyond
  that compute rows only (the panel title says so). Devices without a rank get one row each, after
  the ranks.
* Label sizes scale with the row height in pixels; when rows are too thin for every label, every
  k-th rank is labeled.
* Interleaved chunks: chunk c of a rank is drawn in its pass color mixed toward white by
  ``CHUNK_SHADE * c / (vpp - 1)``; the legend shows the shades of the forward color.
* Legends sit outside the data: the pass legend in the figure header, the memory legend in a band
  under the time axis (it never covers the capacity line).
* Bars are colored by pass (F, B, I, W, recompute, communication, optimizer, other) with the
  Okabe-Ito colorblind-safe palette; consecutive tasks of one device that belong to the same pass
  of the same (stage, microbatch) and touch are drawn as one bar (operator-level graphs become one
  bar per action, or a few when blocking collectives split it).
* A panel with at most ``LABEL_LIMIT`` bars is drawn as vector bars (one ``PolyCollection`` per
  (row, pass), what ``broken_barh`` builds, made from numpy arrays) with thin borders, and compute
  actions wide enough get their microbatch number. Denser panels are drawn at the figure's
  resolution: each row becomes an image with one column per screen pixel, colored by
  the pass that occupies most of that pixel's time span and more opaque the busier it is (any work
  shows at least faintly, as a one-pixel bar would). Busy time per pixel comes from prefix sums of
  the sorted starts and ends, so 1e5-1e6 tasks render in well under a second.
* Panel titles give the iteration time, the pipeline bubble (idle waiting on cross-stage
  dependencies, over compute, summed over ranks: ``simulator.reports.report.Report.bubble_fraction``) and
  the exposed communication share, both from :func:`simulator.reports.breakdown.time_breakdown`.
* Output is deterministic: fixed dpi, figure size a function of the inputs only, no layout engine,
  no ``Software`` metadata, so identical inputs give byte-identical PNGs.

Drawing uses :class:`matplotlib.figure.Figure` with the Agg canvas directly (no pyplot, no global
state, works without a display).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from os import PathLike
from pathlib import Path

import numpy as np
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from simulator.engine.core import SimResult
from simulator.reports.memory_timeline import memory_curves
from taskgraph.graph import CATEGORIES, TaskGraph

#: pixels per inch of every figure
DPI = 100
#: figure width (inches) of every figure
FIG_WIDTH_IN = 14.0
#: panels with more bars than this draw no borders or labels and merge sub-pixel gaps
LABEL_LIMIT = 2000
#: comm_rows="auto": one thin row per communication kind up to this many ranks ...
SEPARATE_COMM_MAX_RANKS = 8
#: ... one merged communication row per rank up to this many, compute rows only beyond
MERGED_COMM_MAX_RANKS = 32
#: how far the last chunk's color is mixed toward white (chunk 0 keeps the pass color)
CHUNK_SHADE = 0.5
GIB = float(2**30)

# Pass groups: (name shown in the legend, face color, label text color). Okabe-Ito palette.
GROUPS = (
    ("F (forward)", "#0072B2", "white"),
    ("B (backward)", "#D55E00", "black"),
    ("I (backward-input)", "#E69F00", "black"),
    ("W (backward-weight)", "#009E73", "black"),
    ("recompute", "#CC79A7", "black"),
    ("communication", "#7F7F7F", "white"),
    ("optimizer", "#F0E442", "black"),
    ("other", "#CFCFCF", "black"),
)
_GROUP_OF = {"forward": 0, "backward": 1, "backward-input": 2, "backward-weight": 3, "recompute": 4,
             "pp-send": 5, "tp-comm": 5, "cp-comm": 5, "ep-comm": 5, "dp-comm": 5,
             "optimizer": 6, "other": 7, "offload": 5}
#: group index of each category code
GROUP_OF_CODE = np.array([_GROUP_OF[c] for c in CATEGORIES], dtype=np.int64)
_LABELED_GROUPS = frozenset({0, 1, 2, 3, 4})  # compute passes get microbatch labels

# Communication stream -> thin row kind, in display order.
_STREAM_ROW = {"tp": "tp", "cp": "cp", "ep": "ep", "dp": "dp", "link": "p2p", "send": "p2p", "recv": "p2p"}
_ROW_ORDER = ("tp", "cp", "ep", "dp", "p2p")

# Memory curves: Okabe-Ito for runs, dashed black for the capacity line.
_RUN_COLORS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")
_RUN_STYLES = ("-", "--", "-.", ":")

# Layout (inches).
_LEFT_IN, _RIGHT_IN = 1.0, 0.3
_HEADER_IN = 0.55          # figure title + legend
_TITLE_IN = 0.32           # space above each panel for its title
_XAXIS_IN = 0.5            # tick labels and x label under the last panel
_COMPUTE_ROW_IN, _THIN_ROW_IN = 0.24, 0.13
_MAX_PANEL_IN = 12.0
_MEMORY_LEGEND_ROW_IN = 0.2   # one row of the memory legend band under the time axis
_MEMORY_PANEL_IN = 2.6
_COMPUTE_ROW_H, _THIN_ROW_H = 1.0, 0.45  # row heights in y units; bars fill 80 %


# --------------------------------------------------------------------------------------------------
# Public API

def plot_pipelines(runs: Sequence[tuple[str, TaskGraph, SimResult]], path: str | PathLike, *,
                   memory: bool = True, title: str | None = None, static_bytes=None,
                   capacity_bytes: float | None = None, comm_rows: bool | str = "auto") -> Figure:
    """Write a PNG with one pipeline Gantt panel per run, stacked on a shared time axis; returns the
    matplotlib Figure (for inspection; the file is already written).

    runs: ``(label, graph, result)`` triples, drawn top to bottom.
    memory: add a last panel with memory over time: per run, the rank with the highest peak
        (static level included), as a step curve in GiB.
    title: figure title.
    static_bytes: static memory (weights, gradients, optimizer state) added to the dynamic curves:
        a scalar (every rank), a ``{rank: bytes}`` dict, or a sequence of those with one item per run.
    capacity_bytes: draw a horizontal line at this memory capacity.
    comm_rows: thin communication rows under each rank: ``"auto"`` (by rank count, see the module
        docstring), ``"separate"`` (one per kind; ``True`` is the same), ``"merged"`` (one per rank) or
        ``False`` (none).
    """
    runs = list(runs)
    if not runs:
        raise ValueError("plot_pipelines needs at least one (label, graph, result) run")
    statics = _per_run_static(static_bytes, len(runs))
    t_max = max(float(r.makespan) for _, _, r in runs)
    unit, scale = time_unit(t_max)
    x_hi = (t_max if t_max > 0 else 1.0 / scale) * 1.01

    layouts = [row_layout(g, r, comm_rows) for _, g, r in runs]
    heights = _panel_heights(layouts, memory)
    fig_h = _inches_for_px(_HEADER_IN + sum(_TITLE_IN + h for h in heights) + _XAXIS_IN
                           + _memory_legend_in(len(runs), capacity_bytes, memory))
    fig, canvas = new_figure(FIG_WIDTH_IN, fig_h)
    axes_w_px = (FIG_WIDTH_IN - _LEFT_IN - _RIGHT_IN) * DPI

    top = fig_h - _HEADER_IN
    vpp = max([int(g.chunk.max()) + 1 if g.num_tasks else 1 for _, g, _ in runs] + [1])
    axes = []
    for h in heights:
        top -= _TITLE_IN
        ax = fig.add_axes((_LEFT_IN / FIG_WIDTH_IN, (top - h) / fig_h,
                           (FIG_WIDTH_IN - _LEFT_IN - _RIGHT_IN) / FIG_WIDTH_IN, h / fig_h),
                          sharex=axes[0] if axes else None)
        axes.append(ax)
        top -= h

    used_groups: set[int] = set()
    for ax, (label, g, r), lay in zip(axes, runs, layouts):
        used_groups |= _draw_gantt(ax, g, r, lay, scale, x_hi, axes_w_px, vpp)
        hidden = "   (communication rows hidden at this rank count)" if lay["comm_hidden"] else ""
        ax.set_title(f"{label}   iteration {_fmt_time(r.makespan, unit, scale)}   {_terms(g, r)}{hidden}",
                     loc="left", fontsize=10)
    if memory:
        _draw_memory_runs(axes[-1], runs, statics, capacity_bytes, scale)
    for ax in axes[:-1]:
        ax.tick_params(axis="x", labelbottom=False)
    axes[-1].set_xlabel(f"time ({unit})", fontsize=9)
    axes[0].set_xlim(0.0, x_hi * scale)

    handles = [Patch(facecolor=GROUPS[i][1], edgecolor="none", label=GROUPS[i][0]) for i in sorted(used_groups)]
    if vpp > 1:
        shown = range(vpp) if vpp <= 3 else (0, vpp - 1)  # many chunks: the two ends of the shade ramp
        handles += [Patch(facecolor=shade(GROUPS[0][1], c, vpp), edgecolor="none",
                          label=f"chunk {c}" + (" (lighter)" if c and vpp <= 3 else
                                                f" (chunks 1-{vpp - 2} in between)" if c else ""))
                    for c in shown]
    header_y = 1.0 - (0.5 * _HEADER_IN) / fig_h
    if title:
        fig.text(_LEFT_IN / FIG_WIDTH_IN, header_y, title, ha="left", va="center", fontsize=12, weight="bold")
    if handles:
        fig.legend(handles=handles, loc="center right", bbox_to_anchor=(1.0 - _RIGHT_IN / FIG_WIDTH_IN, header_y),
                   ncol=len(handles), fontsize=8, frameon=False, handlelength=1.2, columnspacing=1.0)
    save_figure(fig, canvas, path)
    return fig


def pipeline_figure_size(runs: Sequence[tuple[str, TaskGraph, SimResult]], *, memory: bool = True,
                         comm_rows: bool | str = "auto", capacity_bytes: float | None = None) -> tuple[int, int]:
    """(width, height) in pixels of the PNG :func:`plot_pipelines` writes for these arguments."""
    layouts = [row_layout(g, r, comm_rows) for _, g, r in runs]
    h_in = (_HEADER_IN + sum(_TITLE_IN + h for h in _panel_heights(layouts, memory)) + _XAXIS_IN
            + _memory_legend_in(len(runs), capacity_bytes, memory))
    return int(round(FIG_WIDTH_IN * DPI)), int(round(h_in * DPI))


def _memory_legend_in(n_runs: int, capacity_bytes, memory: bool) -> float:
    """Height of the memory legend band under the time axis (one entry per run, + capacity)."""
    if not memory:
        return 0.0
    n = n_runs + (capacity_bytes is not None)
    return _MEMORY_LEGEND_ROW_IN * (-(-n // _MEMORY_LEGEND_COLS)) + 0.05


_MEMORY_LEGEND_COLS = 3


def shade(color: str, chunk: int, vpp: int):
    """``color`` mixed toward white for chunk ``chunk`` of ``vpp`` (chunk 0 unchanged)."""
    rgb = np.array([int(color[i:i + 2], 16) / 255.0 for i in (1, 3, 5)])
    f = CHUNK_SHADE * chunk / (vpp - 1) if vpp > 1 else 0.0
    return tuple((rgb + (1.0 - rgb) * f).tolist())


def _inches_for_px(h_in: float) -> float:
    """A figure height whose pixel count is ``round(h_in * DPI)`` however Agg rounds (it truncates
    ``inches * dpi``, so aim a quarter pixel above the whole number)."""
    return (round(h_in * DPI) + 0.25) / DPI


#: size in pixels of the PNG :func:`plot_memory` writes
MEMORY_FIGURE_PX = (int(round(FIG_WIDTH_IN * DPI)), 500)


def plot_memory(graph: TaskGraph, result: SimResult, path: str | PathLike, *, static_bytes=None,
                capacity_bytes: float | None = None, title: str | None = None) -> None:
    """Write a PNG of memory over time (GiB) of every rank: one step line per rank, the static level
    (scalar or ``{rank: bytes}``) added, each rank's peak marked, and the capacity line if given."""
    fig_h = _inches_for_px(MEMORY_FIGURE_PX[1] / DPI)
    legend_in = 2.3
    fig, canvas = new_figure(FIG_WIDTH_IN, fig_h)
    ax = fig.add_axes((_LEFT_IN / FIG_WIDTH_IN, _XAXIS_IN / fig_h,
                       (FIG_WIDTH_IN - _LEFT_IN - legend_in) / FIG_WIDTH_IN,
                       (fig_h - _XAXIS_IN - 0.45) / fig_h))
    unit, scale = time_unit(float(result.makespan))
    curves = memory_curves(graph, result)
    end = float(result.makespan)
    ranks = sorted(curves)
    cmap_pos = np.linspace(0.0, 0.85, max(len(ranks), 1))
    cmap = colormaps["viridis"]
    y_top = 0.0
    for i, rk in enumerate(ranks):
        c = curves[rk]
        st = _static_of(static_bytes, rk)
        x, y = _step_xy(c, end)
        color = cmap(cmap_pos[i])
        peak = c.peak_bytes + st
        ax.step(x * scale, (y + st) / GIB, where="post", color=color, lw=1.2,
                label=f"rank {rk}  peak {peak / GIB:.2f} GiB")
        ax.plot([c.peak_time * scale], [peak / GIB], "o", color=color, ms=5, mec="black", mew=0.6)
        y_top = max(y_top, peak)
    if capacity_bytes is not None:
        ax.axhline(capacity_bytes / GIB, color="black", ls="--", lw=1.0,
                   label=f"capacity {capacity_bytes / GIB:.1f} GiB")
        y_top = max(y_top, float(capacity_bytes))
    if graph.mem_task.size == 0:
        ax.text(0.5, 0.5, "no memory events in this graph", transform=ax.transAxes, ha="center",
                va="center", fontsize=10, color="#555555")
    ax.set_xlim(0.0, (end if end > 0 else 1.0 / scale) * 1.01 * scale)
    ax.set_ylim(0.0, (y_top / GIB) * 1.1 if y_top > 0 else 1.0)
    ax.set_xlabel(f"time ({unit})", fontsize=9)
    ax.set_ylabel("memory (GiB)", fontsize=9)
    ax.tick_params(labelsize=8)
    ax.grid(True, axis="y", color="#E5E5E5", lw=0.6)
    ax.set_axisbelow(True)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False,
              ncol=1 if len(ranks) <= 16 else 2)
    ax.set_title(title or "memory over time (static + activations), peak of each rank marked", loc="left",
                 fontsize=10)
    save_figure(fig, canvas, path)


# --------------------------------------------------------------------------------------------------
# Helpers

def new_figure(w_in: float, h_in: float):
    """A white figure of ``w_in`` x ``h_in`` inches at the plots' DPI, with its Agg canvas."""
    fig = Figure(figsize=(w_in, h_in), dpi=DPI, facecolor="white")
    canvas = FigureCanvasAgg(fig)
    return fig, canvas


def save_figure(fig: Figure, canvas: FigureCanvasAgg, path) -> None:
    """Write ``fig`` as a PNG without the software tag (byte-identical across runs)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, format="png", dpi=DPI, metadata={"Software": None}, facecolor="white")


def time_unit(t_max: float) -> tuple[str, float]:
    """``("s", 1.0)`` when the longest iteration is over 10 s, else ``("ms", 1e3)``."""
    return ("s", 1.0) if t_max > 10.0 else ("ms", 1e3)


def _fmt_time(t: float, unit: str, scale: float) -> str:
    v = t * scale
    return f"{v:.4g} {unit}" if abs(v) < 1e4 else f"{v:,.0f} {unit}"


def _terms(g: TaskGraph, r: SimResult) -> str:
    """``pipeline bubble 3.6% of compute, exposed comm 10.6% of time`` (``simulator.reports.breakdown``)."""
    from simulator.reports.breakdown import time_breakdown
    bd = time_breakdown(g, r.start, r.end, r.ready, float(r.makespan))
    comp = sum(b.compute_s for b in bd)
    if not bd or comp <= 0:
        return ""
    bubble = sum(b.pipeline_bubble_s for b in bd) / comp
    exposed = sum(b.exposed_comm_s for b in bd) / (len(bd) * float(r.makespan))
    head = "no pipeline bubble (one rank)" if len(bd) == 1 else f"pipeline bubble {bubble:.1%} of compute"
    return f"{head}, exposed comm {exposed:.1%} of time"


def _comm_mode(g: TaskGraph, comm_rows) -> str:
    """``"separate"``, ``"merged"`` or ``"none"`` for this graph (``"auto"`` by rank count)."""
    if comm_rows is False or comm_rows is None:
        return "none"
    if comm_rows in ("separate", "merged", "none"):
        return comm_rows
    if comm_rows is not True and comm_rows != "auto":
        raise ValueError(f"comm_rows = {comm_rows!r}; use 'auto', 'separate', 'merged', True or False")
    n = len({d.rank for d in g.devices if d.stream == "compute" and d.rank >= 0})
    if comm_rows is True or n <= SEPARATE_COMM_MAX_RANKS:
        return "separate"
    return "merged" if n <= MERGED_COMM_MAX_RANKS else "none"


def row_layout(g: TaskGraph, r: SimResult, comm_rows) -> dict:
    """Rows of one Gantt panel: ``labels``, ``kinds`` ("compute"/"thin"), ``y0`` (top of each row),
    ``heights``, and ``row_of_dev`` (row index per device, -1 = not drawn)."""
    mode = _comm_mode(g, comm_rows)
    nd = g.num_devices
    active = np.zeros(nd, dtype=bool)
    if g.num_tasks:
        pos = r.end > r.start
        active[np.unique(g.device[pos])] = True
    keys: dict[tuple, list[int]] = {}
    for i, d in enumerate(g.devices):
        if d.stream == "compute":
            key = (0, d.rank, 0, "") if d.rank >= 0 else (1, 0, 0, d.name)
        elif mode == "none" or not active[i]:
            continue
        else:
            kind = _STREAM_ROW.get(d.stream, d.stream) if mode == "separate" else "comm"
            sub = (_ROW_ORDER.index(kind) + 1) if kind in _ROW_ORDER else len(_ROW_ORDER) + 1
            key = (0, d.rank, sub, kind) if d.rank >= 0 else (1, 0, 0, d.name)
        keys.setdefault(key, []).append(i)
    labels, kinds, heights = [], [], []
    row_of_dev = np.full(nd, -1, dtype=np.int64)
    for row, key in enumerate(sorted(keys)):
        devs = keys[key]
        compute = all(g.devices[i].stream == "compute" for i in devs)
        if key[0] == 0:
            labels.append(f"rank {key[1]}" if key[2] == 0 else key[3])
        else:
            labels.append(key[3])
        kinds.append("compute" if compute else "thin")
        heights.append(_COMPUTE_ROW_H if compute else _THIN_ROW_H)
        row_of_dev[devs] = row
    heights_a = np.asarray(heights, dtype=np.float64)
    y0 = np.concatenate([[0.0], np.cumsum(heights_a)[:-1]]) if heights else np.zeros(0)
    return {"labels": labels, "kinds": kinds, "heights": heights_a, "y0": y0, "row_of_dev": row_of_dev,
            "total": float(heights_a.sum()) if heights else 1.0,
            "n_compute": kinds.count("compute"), "n_thin": kinds.count("thin"),
            "comm_hidden": mode == "none" and comm_rows not in (False, None, "none") and bool(
                np.any(active & np.array([d.stream != "compute" for d in g.devices], dtype=bool)))}


def _panel_heights(layouts, memory: bool) -> list[float]:
    """Heights (inches) of the Gantt panels, then of the memory panel if any."""
    out = []
    for lay in layouts:
        h = lay["n_compute"] * _COMPUTE_ROW_IN + lay["n_thin"] * _THIN_ROW_IN + 0.1
        out.append(float(min(max(h, 0.8), _MAX_PANEL_IN)))
    return out + ([_MEMORY_PANEL_IN] if memory else [])


def task_segments(g: TaskGraph, r: SimResult, row_of_dev: np.ndarray):
    """Bars of one panel, sorted by (device, start): (row, group, start, end, mb, action, chunk) arrays.
    Touching tasks of one device with the same pass, stage and microbatch are merged into one bar;
    ``action`` numbers the runs of bars of one device with the same pass, stage and microbatch
    (an operator-level action split by blocking collectives is one action)."""
    empty = (np.zeros(0, np.int64),) * 2 + (np.zeros(0),) * 2 + (np.zeros(0, np.int64),) * 3
    if g.num_tasks == 0:
        return empty
    rows_all = row_of_dev[g.device]
    idx = np.flatnonzero((r.end > r.start) & (rows_all >= 0))
    if idx.size == 0:
        return empty
    dev = g.device[idx].astype(np.int64)
    s, e = r.start[idx], r.end[idx]
    order = np.lexsort((idx, s, dev))
    idx, dev, s, e = idx[order], dev[order], s[order], e[order]
    grp = GROUP_OF_CODE[g.category[idx]]
    mb, stage = g.mb[idx], g.stage[idx]
    eps = 1e-9 * max(float(r.makespan), 1e-30)
    same = np.zeros(idx.size, dtype=bool)
    same[1:] = (dev[1:] == dev[:-1]) & (grp[1:] == grp[:-1]) & (mb[1:] == mb[:-1]) & (stage[1:] == stage[:-1])
    brk = ~same
    brk[1:] |= s[1:] > e[:-1] + eps
    first = np.flatnonzero(brk)
    seg_end = np.maximum.reduceat(e, first)
    action = np.cumsum(~same)[first] - 1
    chunk = np.maximum(g.chunk[idx[first]], 0).astype(np.int64)
    return row_of_dev[dev[first]], grp[first], s[first], seg_end, mb[first].astype(np.int64), action, chunk


def busy_coverage(s: np.ndarray, e: np.ndarray, bounds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Busy seconds of the intervals [s, e) (s < e) inside each pixel column [bounds[j], bounds[j+1]),
    and whether any interval touches the column (exact, by counting).

    F(x) = sum over intervals of clip(x - s, 0, e - s) = sum_{s < x} (x - s) - sum_{e < x} (x - e);
    busy seconds = F(b[j+1]) - F(b[j]) (rounding noise is masked by the exact presence test)."""
    s, e = np.sort(s), np.sort(e)

    def part(t):
        c = np.concatenate([[0.0], np.cumsum(t)])
        k = np.searchsorted(t, bounds, side="left")
        return k * bounds - c[k]
    busy = np.diff(part(s) - part(e))
    # intervals touching column j: s < b[j+1] and e > b[j]
    present = (np.searchsorted(s, bounds[1:], side="left") - np.searchsorted(e, bounds[:-1], side="right")) > 0
    return np.where(present, np.maximum(busy, 0.0), 0.0), present


def _draw_raster(ax, row, grp, s, e, lay, scale: float, x_hi: float, axes_w_px: float, chunk=None,
                 vpp: int = 1) -> set:
    """Draw a dense panel as one image row per Gantt row, one image column per screen pixel: a
    column takes the color of the pass that occupies most of it, more opaque the busier it is
    (any work at all shows at least faintly, as a one-pixel bar would)."""
    n_px = max(int(round(axes_w_px)), 1)
    bounds = np.linspace(0.0, x_hi, n_px + 1)
    px = x_hi / n_px
    vpp = max(int(vpp), 1)
    chunk = np.zeros(s.size, dtype=np.int64) if chunk is None else np.minimum(chunk, vpp - 1)
    ng = len(GROUPS) * vpp  # (pass, chunk) colour keys
    rgb = _bar_colors(np.repeat(np.arange(len(GROUPS)), vpp), np.tile(np.arange(vpp), len(GROUPS)), vpp)
    key = grp * vpp + chunk
    used = set()
    heights, y0 = lay["heights"], lay["y0"]
    for rw in np.unique(row).tolist():
        in_row = row == rw
        occ = np.full((ng, n_px), -1.0)
        busy = np.zeros(n_px, dtype=bool)
        for kk in np.unique(key[in_row]).tolist():
            sel = in_row & (key == kk)
            sec, present = busy_coverage(s[sel], e[sel], bounds)
            occ[kk] = np.where(present, sec, -1.0)
            busy |= present
            used.add(kk // vpp)
        total = np.maximum(occ, 0.0).sum(axis=0)
        img = np.zeros((1, n_px, 4))
        img[0, :, :3] = rgb[np.argmax(occ, axis=0)]
        img[0, :, 3] = np.where(busy, 0.4 + 0.6 * np.minimum(total / px, 1.0), 0.0)
        h = heights[rw]
        ax.imshow(img, extent=(0.0, x_hi * scale, y0[rw] + 0.9 * h, y0[rw] + 0.1 * h), aspect="auto",
                  interpolation="nearest", resample=False, zorder=1)
    return used


def _row_px(ax, lay: dict) -> float:
    """Height in pixels of one compute row of this panel."""
    h_px = ax.get_position().height * ax.figure.get_figheight() * DPI
    return h_px * _COMPUTE_ROW_H / max(lay["total"], 1e-9)


def _draw_gantt(ax, g: TaskGraph, r: SimResult, lay: dict, scale: float, x_hi: float, axes_w_px: float,
                vpp: int = 1) -> set:
    row, grp, s, e, mb, action, chunk = task_segments(g, r, lay["row_of_dev"])
    row_px = _row_px(ax, lay)
    if s.size > LABEL_LIMIT:
        used = _draw_raster(ax, row, grp, s, e, lay, scale, x_hi, axes_w_px, chunk, vpp)
    else:
        used = _draw_bars(ax, row, grp, s, e, lay, scale, chunk, vpp)
        _label_actions(ax, lay, row, grp, s, e, mb, action, scale, axes_w_px / (x_hi * scale), row_px, chunk)
    heights, y0 = lay["heights"], lay["y0"]
    if r.makespan > 0:
        ax.axvline(float(r.makespan) * scale, color="black", lw=0.8, ls=":")
    ax.set_ylim(lay["total"], 0.0)
    # label sizes follow the row height (points = px * 72 / DPI); too-thin rows label every k-th rank
    compute_pt = float(np.clip(0.62 * row_px * 72.0 / DPI, 5.0, 8.0))
    thin_px = row_px * _THIN_ROW_H / _COMPUTE_ROW_H
    step = max(1, int(np.ceil(9.0 / max(row_px, 1e-9))))
    ticks, labels, kinds = [], [], []
    k = 0
    for i, (lab, kind) in enumerate(zip(lay["labels"], lay["kinds"])):
        if kind == "compute":
            k += 1
            if (k - 1) % step:
                continue
        elif thin_px < 6.0 or step > 1:
            continue
        ticks.append(float(y0[i] + 0.5 * heights[i]))
        labels.append(lab)
        kinds.append(kind)
    ax.set_yticks(ticks)
    ax.set_yticklabels(labels)
    for lab, kind in zip(ax.get_yticklabels(), kinds):
        if kind == "compute":
            lab.set_fontsize(compute_pt)
        else:
            lab.set_fontsize(float(np.clip(0.7 * thin_px * 72.0 / DPI, 4.5, 6.0)))
            lab.set_color("#555555")
    ax.tick_params(axis="y", length=0)
    ax.tick_params(axis="x", labelsize=8)
    ax.grid(True, axis="x", color="#E5E5E5", lw=0.6)
    ax.set_axisbelow(True)
    return used


def _bar_colors(grp: np.ndarray, chunk: np.ndarray, vpp: int) -> np.ndarray:
    """RGB per bar: the pass color, mixed toward white by chunk (``shade``)."""
    base = np.array([[int(c[i:i + 2], 16) / 255.0 for i in (1, 3, 5)] for _, c, _ in GROUPS])[grp]
    f = (CHUNK_SHADE * chunk / (vpp - 1) if vpp > 1 else np.zeros(chunk.size))[:, None]
    return base + (1.0 - base) * f


def _draw_bars(ax, row, grp, s, e, lay, scale: float, chunk=None, vpp: int = 1) -> set:
    """Draw bars as one collection per (row, group), as ``broken_barh`` would, built from numpy;
    each bar shaded by its chunk."""
    used = set()
    heights, y0 = lay["heights"], lay["y0"]
    chunk = np.zeros(s.size, dtype=np.int64) if chunk is None else chunk
    key = row * len(GROUPS) + grp
    order = np.lexsort((s, key))
    key, row, grp, s, e, chunk = key[order], row[order], grp[order], s[order], e[order], chunk[order]
    colors = _bar_colors(grp, chunk, vpp)
    bounds = np.flatnonzero(np.r_[True, key[1:] != key[:-1], True])
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        rw, gp = int(row[a]), int(grp[a])
        used.add(gp)
        h = heights[rw]
        top, bot = y0[rw] + 0.1 * h, y0[rw] + 0.9 * h
        x0, x1 = s[a:b] * scale, e[a:b] * scale
        verts = np.empty((b - a, 4, 2), dtype=np.float64)
        verts[:, 0, 0] = verts[:, 1, 0] = x0
        verts[:, 2, 0] = verts[:, 3, 0] = x1
        verts[:, 0, 1] = verts[:, 3, 1] = top
        verts[:, 1, 1] = verts[:, 2, 1] = bot
        ax.add_collection(PolyCollection(verts, closed=True, facecolors=colors[a:b], edgecolors="white",
                                         linewidths=0.3), autolim=False)
    return used


def _label_actions(ax, lay, row, grp, s, e, mb, action, scale: float, px_per_unit: float, row_px: float = 24.0,
                   chunk=None) -> None:
    """Write the microbatch number at the middle of each compute action wide enough to hold it (font
    size follows the row height; rows under ~8 px get no labels)."""
    fs = float(min(7.0, 0.55 * row_px * 72.0 / DPI))
    if s.size == 0 or fs < 4.5:
        return
    first = np.flatnonzero(np.r_[True, action[1:] != action[:-1]])
    last = np.r_[first[1:] - 1, s.size - 1]
    heights, y0, kinds = lay["heights"], lay["y0"], lay["kinds"]
    # room for the longest label of the panel, so all bars of one width are labeled alike
    digits = len(str(max(int(mb.max()), 0)))
    need = ((6.0 * fs / 7.0) * digits + 4.0) / (scale * px_per_unit)  # seconds a label needs
    for a, b in zip(first.tolist(), last.tolist()):
        gp, rw, m = int(grp[a]), int(row[a]), int(mb[a])
        if gp not in _LABELED_GROUPS or m < 0 or kinds[rw] != "compute":
            continue
        text = str(m)
        w = e[a:b + 1] - s[a:b + 1]
        k = a + int(np.argmax(w))
        lo_hi, color = None, (GROUPS[gp][2] if chunk is None or chunk[a] == 0 else "black")
        if w[k - a] >= need:  # inside the action's widest bar
            lo_hi = (float(s[k]), float(e[k]))
        elif float(e[a:b + 1].max()) - float(s[a]) >= need:  # over the action's span (bars and gaps)
            lo_hi, color = (float(s[a]), float(e[a:b + 1].max())), "black"
        if lo_hi is None:
            continue
        ax.text((lo_hi[0] + lo_hi[1]) * 0.5 * scale, y0[rw] + 0.5 * heights[rw], text, ha="center",
                va="center", fontsize=fs, color=color, clip_on=True)


def _per_run_static(static_bytes, n_runs: int) -> list:
    if isinstance(static_bytes, (list, tuple)):
        if len(static_bytes) != n_runs:
            raise ValueError(f"static_bytes has {len(static_bytes)} items for {n_runs} runs; give a scalar, "
                             f"a {{rank: bytes}} dict, or one item per run")
        return list(static_bytes)
    return [static_bytes] * n_runs


def _static_of(static_bytes, rank: int) -> float:
    if static_bytes is None:
        return 0.0
    if isinstance(static_bytes, Mapping):
        return float(static_bytes.get(rank, 0.0))
    return float(static_bytes)


def _step_xy(c, end: float) -> tuple[np.ndarray, np.ndarray]:
    """A memory curve as step points extended to ``end`` (the last value holds until then)."""
    x = np.asarray(c.times, dtype=np.float64)
    y = np.asarray(c.values, dtype=np.float64)
    last = max(end, float(x[-1]) if x.size else 0.0)
    return np.append(x, last), np.append(y, y[-1] if y.size else 0.0)


def _draw_memory_runs(ax, runs, statics, capacity_bytes, scale: float) -> None:
    y_top = 0.0
    any_events = False
    for i, ((label, g, r), st) in enumerate(zip(runs, statics)):
        curves = memory_curves(g, r)
        any_events |= g.mem_task.size > 0
        if not curves:
            continue
        # the rank with the highest peak, static level included (lowest rank on ties)
        best = max(sorted(curves), key=lambda rk: curves[rk].peak_bytes + _static_of(st, rk))
        c = curves[best]
        add = _static_of(st, best)
        x, y = _step_xy(c, float(r.makespan))
        peak = c.peak_bytes + add
        color = _RUN_COLORS[i % len(_RUN_COLORS)]
        ls = _RUN_STYLES[(i // len(_RUN_COLORS)) % len(_RUN_STYLES)]
        ax.step(x * scale, (y + add) / GIB, where="post", color=color, ls=ls, lw=1.3,
                label=f"{label}: rank {best}, peak {peak / GIB:.2f} GiB")
        ax.plot([c.peak_time * scale], [peak / GIB], "o", color=color, ms=4.5, mec="black", mew=0.5)
        y_top = max(y_top, peak)
    if capacity_bytes is not None:
        ax.axhline(capacity_bytes / GIB, color="black", ls="--", lw=1.0,
                   label=f"capacity {capacity_bytes / GIB:.1f} GiB")
        y_top = max(y_top, float(capacity_bytes))
    if not any_events:
        ax.text(0.5, 0.5, "no memory events in these graphs", transform=ax.transAxes, ha="center",
                va="center", fontsize=9, color="#555555")
    ax.set_ylim(0.0, (y_top / GIB) * 1.12 if y_top > 0 else 1.0)
    ax.set_ylabel("memory (GiB)", fontsize=9)
    ax.tick_params(labelsize=8)
    ax.grid(True, axis="y", color="#E5E5E5", lw=0.6)
    ax.set_axisbelow(True)
    ax.set_title("memory over time: rank with the highest peak of each run (static + activations)",
                 loc="left", fontsize=10)
    # legend in the band under the time axis (never over the curves or the capacity line)
    fig = ax.figure
    band_in = _memory_legend_in(len(runs), capacity_bytes, True)
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="upper left", ncol=_MEMORY_LEGEND_COLS, fontsize=8, frameon=False,
                   bbox_to_anchor=(_LEFT_IN / FIG_WIDTH_IN, band_in / fig.get_figheight()), borderaxespad=0.0,
                   handlelength=2.0, columnspacing=1.5)
