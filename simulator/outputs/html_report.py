"""A self-contained interactive HTML report of one simulation (``execsim report FILE -o out.html``,
``execsim simulate FILE --html out.html``).

One file, no network: inline CSS and JavaScript, the data embedded as JSON. Sections: summary,
per-stage table, where the time goes (compute / exposed communication / pipeline bubble / other
idle per rank, from :func:`simulator.reports.breakdown.time_breakdown`, with Narayanan's ideal bubble),
an interactive Gantt on a ``<canvas>`` (wheel = zoom around the cursor, drag = pan, double-click =
reset; bars colored by pass, chunks told apart by shade, microbatch numbers on bars wide enough,
critical-path tasks outlined, hover for details), memory over time per rank with the capacity line,
the critical path by category, and the input file.

Size: bars are the merged per-device segments of :mod:`simulator.outputs.plots`; when there are more than
:data:`MAX_BARS` of them the Gantt collapses to stage level: one bar per action (rank, pass, stage,
microbatch) and the communication rows merged into busy intervals. Memory curves keep at most
:data:`MAX_MEMORY_POINTS` steps per rank (the maximum of each time bucket, so the peak stays).

Deterministic: no timestamps, sorted JSON, times rounded to integer nanoseconds, so identical
inputs give byte-identical files.
"""
from __future__ import annotations

import html
import json
from os import PathLike
from pathlib import Path

import numpy as np

from simulator.outputs.plots import GROUPS, row_layout, task_segments
from simulator.reports.training import format_mfu

#: above this many bars the Gantt collapses to one bar per action (stage level)
MAX_BARS = 30_000
#: memory steps kept per rank
MAX_MEMORY_POINTS = 1500
GIB = float(2**30)


def _ns(x) -> list[int]:
    return np.rint(np.asarray(x, dtype=np.float64) * 1e9).astype(np.int64).tolist()


def _gantt(graph, result) -> dict:
    lay = row_layout(graph, result, "auto")
    row, grp, s, e, mb, action, chunk = task_segments(graph, result, lay["row_of_dev"])
    n = graph.num_tasks
    cp_flag = np.zeros(s.size, dtype=np.int64)  # 1 when a critical-path task lies in the bar
    collapsed = False
    if n and s.size:
        from simulator.reports.report import critical_path
        rows_all = lay["row_of_dev"][graph.device]
        idx = np.flatnonzero((result.end > result.start) & (rows_all >= 0))
        on_cp = np.zeros(n, dtype=bool)
        on_cp[list(critical_path(graph, result).tasks)] = True
        # each task's bar: the last bar of its row starting at or before the task (exact on compute
        # rows, which hold one device; the p2p row merges several links)
        b_order = np.lexsort((s, row))
        key = row[b_order].astype(np.float64) * (4.0 * float(result.makespan) + 1.0) + s[b_order]
        tkey = rows_all[idx].astype(np.float64) * (4.0 * float(result.makespan) + 1.0) + result.start[idx]
        bar = b_order[np.clip(np.searchsorted(key, tkey, side="right") - 1, 0, s.size - 1)]
        np.maximum.at(cp_flag, bar, on_cp[idx].astype(np.int64))
    if s.size > MAX_BARS:
        collapsed = True
        row, grp, s, e, mb, chunk, cp_flag = _collapse(lay, row, grp, s, e, mb, chunk, cp_flag, action,
                                                       float(result.makespan))
    return {"labels": lay["labels"], "kinds": lay["kinds"], "row": row.tolist(), "grp": grp.tolist(),
            "s": _ns(s), "e": _ns(e), "mb": mb.tolist(), "ch": chunk.tolist(), "cp": cp_flag.tolist(),
            "collapsed": collapsed}


def _collapse(lay, row, grp, s, e, mb, chunk, cp, action, makespan):
    """One bar per action on compute rows; communication rows merged where gaps are under
    makespan / 4000 (below a pixel at any sensible zoom of the whole iteration)."""
    kinds = np.array([k == "compute" for k in lay["kinds"]], dtype=bool)
    comp = kinds[row]
    out = []
    ci = np.flatnonzero(comp)
    if ci.size:
        a = action[ci]
        first = ci[np.flatnonzero(np.r_[True, a[1:] != a[:-1]])]
        bounds = np.r_[np.flatnonzero(np.r_[True, a[1:] != a[:-1]]), ci.size]
        ends = np.maximum.reduceat(e[ci], bounds[:-1])
        cps = np.maximum.reduceat(cp[ci], bounds[:-1])
        out.append((row[first], grp[first], s[first], ends, mb[first], chunk[first], cps))
    gap = makespan / 4000.0
    for r in np.unique(row[~comp]).tolist():
        ii = np.flatnonzero(row == r)
        o = ii[np.argsort(s[ii], kind="stable")]
        ss, ee = s[o], np.maximum.accumulate(e[o])
        new = np.r_[True, ss[1:] > ee[:-1] + gap]
        f = np.flatnonzero(new)
        last = np.r_[f[1:] - 1, ss.size - 1]
        k = f.size
        out.append((np.full(k, r), np.full(k, 5), ss[f], ee[last], np.full(k, -1), np.zeros(k, np.int64),
                    np.maximum.reduceat(cp[o], f)))
    cols = [np.concatenate([c[i] for c in out]) for i in range(7)]
    order = np.lexsort((cols[2], cols[0]))
    return tuple(c[order] for c in cols)


def _memory(sim) -> dict:
    from simulator.reports.memory_timeline import memory_curves
    graph, result = sim.graph, sim.result
    static, capacity = {}, None
    if hasattr(sim, "plan"):
        from simulator.reports.memory import memory_report
        mem = memory_report(sim.plan, graph, result)
        static = {x.rank: x.weights + x.grads + x.optimizer + x.reserve for x in mem.per_stage}
        capacity = mem.capacity
    curves = memory_curves(graph, result)
    end = float(result.makespan)
    out = []
    for r in sorted(curves):
        c = curves[r]
        t = np.append(np.asarray(c.times, dtype=np.float64), end)
        v = np.append(np.asarray(c.values, dtype=np.float64), c.values[-1] if len(c.values) else 0.0)
        if t.size > MAX_MEMORY_POINTS:  # max of each time bucket keeps the peak
            b = np.minimum((t / (end or 1.0) * (MAX_MEMORY_POINTS - 1)).astype(np.int64), MAX_MEMORY_POINTS - 1)
            first = np.flatnonzero(np.r_[True, b[1:] != b[:-1]])
            v = np.maximum.reduceat(v, first)
            t = t[first]
        out.append({"rank": r, "t": _ns(t), "gib": np.round((v + static.get(r, 0.0)) / GIB, 4).tolist(),
                    "peak_gib": round((c.peak_bytes + static.get(r, 0.0)) / GIB, 3)})
    return {"curves": out, "capacity_gib": None if capacity is None else round(capacity / GIB, 3),
            "has_events": bool(graph.mem_task.size)}


def report_data(sim, source: str = "", interval_level: float = 0.8) -> dict:
    """Everything the page shows, as plain JSON-able data (also handy for tests); the stated
    intervals at ``interval_level`` (simulator/reports/intervals.py)."""
    rep = sim.report
    sched = sim.schedule
    d = {"source": source, "schedule": sched.name, "pp": sched.pp, "vpp": sched.vpp,
         "microbatches": sched.microbatches, "makespan_ns": _ns([rep.makespan_s])[0],
         "bubble_fraction": rep.bubble_fraction, "ideal_bubble_fraction": rep.ideal_bubble_fraction,
         "time_split": rep.time_split, "imbalance": rep.imbalance, "num_tasks": rep.num_tasks,
         "groups": [{"name": n, "color": c, "text": t} for n, c, t in GROUPS],
         "per_rank": [{"rank": r.rank, "compute_s": r.busy_s, "exposed_comm_s": r.exposed_comm_s,
                       "pipeline_bubble_s": r.pipeline_bubble_s, "other_idle_s": r.other_idle_s,
                       "bubble_fraction": r.bubble_fraction} for r in rep.per_rank],
         "critical_path": {"num_tasks": len(rep.critical_path.tasks), "by_category_s": rep.critical_path.by_category},
         "gantt": _gantt(sim.graph, sim.result), "memory": _memory(sim)}
    d["stages"] = {r: list(sched.rank_stages[r]) for r in range(sched.pp)}
    tr = getattr(sim, "training", None)
    if tr is not None:
        p = sim.plan
        d["training"] = {"model": p.model.name, "gpus": p.num_gpus, "gpu": p.cluster.gpu.name,
                         "cluster": p.cluster.name, "tp": p.sizes.tp, "pp": p.sizes.pp, "dp": p.sizes.dp,
                         "cp": p.sizes.cp, "ep": p.sizes.ep, "sp": p.sp, "zero": p.zero,
                         "recompute": p.strategy.training.recompute, "tokens_per_s": tr.tokens_per_s,
                         "mfu": tr.mfu, "hfu": tr.hfu, "mfu_fp8_peak": tr.mfu_fp8_peak, "train_days": tr.train_days,
                         "gpus_per_rank": tr.gpus_per_simulated_rank,
                         "stages": {s.rank: {"stages": list(s.stages), "layers": s.layers} for s in tr.per_stage}}
        from simulator.reports.envelope import plan_envelope
        from simulator.reports.interval_fields import interval_fields
        from simulator.reports.intervals import sim_interval
        d["calibration"] = plan_envelope(p).to_json()
        d["intervals"] = interval_fields(tr, sim_interval(sim, interval_level))
    return d


def _fmt_s(x: float) -> str:
    return f"{x:.3f} s" if x >= 10 else f"{x * 1e3:.3f} ms"


def _summary_html(d: dict) -> str:
    rows = [("input", d["source"] or "-"),
            ("schedule", f"{d['schedule']}, pp={d['pp']}, vpp={d['vpp']}, microbatches={d['microbatches']}"),
            ("iteration time", _fmt_s(d["makespan_ns"] * 1e-9))]
    t = d.get("training")
    iv = d.get("intervals")
    if iv:
        pct = f"{100 * iv['interval_level']:g} %"
        lo, hi = iv["iteration_time_interval_s"]
        rows[-1] = ("iteration time", f"{_fmt_s(d['makespan_ns'] * 1e-9)} ({pct}: {_fmt_s(lo)}–{_fmt_s(hi)})")
        lo, hi = iv["tokens_per_s_interval"]
        m_lo, m_hi = iv["mfu_interval"]
        rows.append(("stated interval", f"{pct}: {lo:,.0f}–{hi:,.0f} tokens/s, "
                                        f"MFU {100 * m_lo:.1f}–{100 * m_hi:.1f}%"
                     + (f", {iv['train_days_interval'][0]:.1f}–{iv['train_days_interval'][1]:.1f} days to train"
                        if iv["train_days_interval"] else "") + f"; {iv['interval']['summary']}"))
    if t:
        rows += [("model / cluster", f"{t['model']} on {t['gpus']} x {t['gpu']} ({t['cluster']})"),
                 ("parallelism", (f"tp={t['tp']} pp={t['pp']} dp={t['dp']} cp={t['cp']} ep={t['ep']} sp={t['sp']} "
                                 f"zero={t['zero']} recompute={t['recompute']}; each simulated rank stands for "
                                 f"{t['gpus_per_rank']} GPUs")),
                 ("throughput", f"{t['tokens_per_s']:,.0f} tokens/s, "
                                f"{format_mfu(t['mfu'], t['hfu'], t.get('mfu_fp8_peak'))}"
                                + (f", {t['train_days']:.1f} days to train" if t["train_days"] else ""))]
    if d.get("calibration"):
        rows.append(("calibration", d["calibration"]["summary"]))
    ideal = d["ideal_bubble_fraction"]
    if len(d["per_rank"]) == 1:
        bub = "none (one pipeline rank)"
    else:
        bub = f"{d['bubble_fraction']:.4f} of compute" + (f" (ideal (p-1)/(v&middot;m) = {ideal:.4f})"
                                                          if ideal is not None else " (no closed-form ideal for "
                                                          "this schedule)")
    ts = d["time_split"]
    rows += [("pipeline bubble", bub),
             ("time split (all ranks)", ", ".join(f"{k.replace('_', ' ')} {100 * ts.get(k, 0.0):.1f}%"
                                                  for k in ("compute", "exposed_comm", "pipeline_bubble",
                                                            "other_idle"))),
             ("imbalance", f"{d['imbalance']:.3f} (max / mean compute)"), ("tasks", f"{d['num_tasks']:,}")]
    mem = d["memory"]
    if mem["capacity_gib"] is not None and mem["curves"]:
        worst = max(mem["curves"], key=lambda c: c["peak_gib"])
        fits = all(c["peak_gib"] <= mem["capacity_gib"] for c in mem["curves"])
        rows.append(("memory", (f"peak {worst['peak_gib']:.1f} GiB on rank {worst['rank']} of "
                               f"{mem['capacity_gib']:.1f} GiB: {'fits' if fits else 'OUT OF MEMORY'}")))
    body = "".join(f"<tr><th>{html.escape(k)}</th><td>{v if k in ('pipeline bubble',) else html.escape(v)}</td></tr>"
                   for k, v in rows)
    return f"<table class='kv'>{body}</table>"


def _stage_table(d: dict) -> str:
    t = d.get("training") or {}
    stages = t.get("stages", {})
    peaks = {c["rank"]: c["peak_gib"] for c in d["memory"]["curves"]}
    show_mem = d["memory"]["has_events"] or d["memory"]["capacity_gib"] is not None
    unit, k = ("s", 1.0) if d["makespan_ns"] >= 10e9 else ("ms", 1e3)
    head = ["rank", "stages", "layers", f"compute {unit}", f"exposed comm {unit}", f"pipeline bubble {unit}",
            f"other idle {unit}", "bubble / compute"] + (["peak memory GiB"] if show_mem else [])
    out = ["<table class='grid'><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>"]
    for r in d["per_rank"]:
        st = stages.get(r["rank"], {})
        cells = [str(r["rank"]), ",".join(map(str, d["stages"].get(r["rank"], []))) or "-", str(st.get("layers", "-")),
                 f"{r['compute_s'] * k:.3f}", f"{r['exposed_comm_s'] * k:.3f}", f"{r['pipeline_bubble_s'] * k:.3f}",
                 f"{r['other_idle_s'] * k:.3f}", f"{r['bubble_fraction']:.4f}"]
        if show_mem:
            cells.append(f"{peaks.get(r['rank'], 0.0):.2f}")
        out.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return "".join(out) + "</table>"


_PART_COLORS = (("compute", "#0072B2"), ("exposed comm", "#7F7F7F"), ("pipeline bubble", "#E69F00"),
                ("other idle", "#D9D9D9"))


def _split_svg(d: dict) -> str:
    """Per rank, a stacked bar of the four parts over the iteration (inline SVG)."""
    w, left, bar_h, gap = 900, 70, 16, 6
    ms = d["makespan_ns"] * 1e-9 or 1.0
    rows = d["per_rank"]
    h = len(rows) * (bar_h + gap) + 30
    parts = []
    for i, r in enumerate(rows):
        y = i * (bar_h + gap)
        x = float(left)
        parts.append(f"<text x='{left - 6}' y='{y + bar_h - 4}' text-anchor='end'>rank {r['rank']}</text>")
        for (name, color), key in zip(_PART_COLORS, ("compute_s", "exposed_comm_s", "pipeline_bubble_s",
                                                     "other_idle_s")):
            wpx = (w - left) * r[key] / ms
            if wpx <= 0:
                continue
            parts.append(f"<rect x='{x:.2f}' y='{y}' width='{wpx:.2f}' height='{bar_h}' fill='{color}'>"
                         f"<title>rank {r['rank']}: {name} {_fmt_s(r[key])}</title></rect>")
            x += wpx
    ly = len(rows) * (bar_h + gap) + 14
    lx = left
    for name, color in _PART_COLORS:
        parts.append(f"<rect x='{lx}' y='{ly - 10}' width='12' height='12' fill='{color}'/>"
                     f"<text x='{lx + 16}' y='{ly}'>{name}</text>")
        lx += 30 + 8 * len(name)
    return (f"<svg class='split' viewBox='0 0 {w} {h}' width='{w}' height='{h}' role='img' "
            f"aria-label='time split per rank'>{''.join(parts)}</svg>")


def _cp_html(d: dict) -> str:
    cp = d["critical_path"]
    total = sum(cp["by_category_s"].values()) or 1.0
    unit, k_ = ("s", 1.0) if d["makespan_ns"] >= 10e9 else ("ms", 1e3)
    cells = "".join(f"<tr><td>{html.escape(k)}</td><td>{v * k_:.3f} {unit}</td><td>{100 * v / total:.1f}%</td></tr>"
                    for k, v in cp["by_category_s"].items())
    return (f"<p>{cp['num_tasks']:,} tasks, each bound to the previous by a dependency or its device's queue, end "
            f"at the makespan; outlined in black in the Gantt (a black tick under bars too narrow to outline).</p><table class='grid'><tr><th>category</th>"
            f"<th>time on the path</th><th>share</th></tr>{cells}</table>")


def html_report(sim, *, source: str = "", strategy_text: str = "", interval_level: float = 0.8) -> str:
    """The report page as a string (see the module docstring)."""
    d = report_data(sim, source, interval_level)
    data = json.dumps({"gantt": d["gantt"], "memory": d["memory"], "groups": d["groups"],
                       "makespan_ns": d["makespan_ns"], "vpp": d["vpp"]}, sort_keys=True, separators=(",", ":"))
    data = data.replace("</", "<\\/")
    title = f"execsim report: {source or d['schedule']}"
    note = (" Collapsed to stage level (one bar per action, communication merged) to keep the file small."
            if d["gantt"]["collapsed"] else "")
    sections = [
        ("Summary", _summary_html(d)),
        ("Per stage", _stage_table(d) + "<p class='note'>pipeline bubble = idle waiting on a cross-stage "
                                        "dependency; exposed comm = communication while compute is idle; other "
                                        "idle = the rest (docs/glossary.md). bubble / compute is Narayanan's "
                                        "t_pb / t_id.</p>"),
        ("Where the time goes", _split_svg(d)),
        ("Timeline", ("<div class='controls'><button id='reset'>reset zoom</button> <label><input type='checkbox' "
                     "id='showcp' checked> outline critical path</label> <span class='note'>wheel: zoom, drag: pan, "
                     "double-click: reset. Chunks: darker = chunk 0, lighter = later chunks; numbers are "
                     f"microbatches.{note}</span></div><div id='legend' class='legend'></div>"
                     "<div class='wrap'><canvas id='gantt'></canvas><div id='tip' class='tip'></div></div>")),
        *([("Memory", "<div class='memwrap'><canvas id='mem'></canvas><div id='memlegend' class='legend v'></div></div>")]
          if d["memory"]["has_events"] or d["memory"]["capacity_gib"] is not None else []),
        ("Critical path", _cp_html(d)),
        ("Input", f"<pre>{html.escape(strategy_text)}</pre>" if strategy_text else "<p>-</p>"),
    ]
    body = "".join(f"<section><h2>{h}</h2>{c}</section>" for h, c in sections)
    return (_PAGE.replace("%TITLE%", html.escape(title)).replace("%CSS%", _CSS).replace("%BODY%", body)
            .replace("%DATA%", data).replace("%JS%", _JS))


def write_html_report(path: str | PathLike, sim, *, source: str = "", strategy_text: str = "",
                      interval_level: float = 0.8) -> None:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(html_report(sim, source=source, strategy_text=strategy_text, interval_level=interval_level),
                 encoding="utf-8")


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>%TITLE%</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>%CSS%</style></head>
<body><h1>%TITLE%</h1>%BODY%
<script type="application/json" id="data">%DATA%</script>
<script>%JS%</script></body></html>
"""

_CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:16px 24px;color:#222;background:#fff}
h1{font-size:20px;margin:0 0 8px}h2{font-size:16px;margin:18px 0 6px;border-bottom:1px solid #ddd}
table{border-collapse:collapse}.kv th{text-align:left;padding:2px 12px 2px 0;color:#555;font-weight:600}
.grid th,.grid td{border:1px solid #ddd;padding:3px 8px;text-align:right}.grid th{background:#f4f4f4}
.note{color:#666;font-size:12px}.wrap{position:relative}canvas{display:block;width:100%}
.legend{display:flex;flex-wrap:wrap;gap:4px 14px;margin:6px 0;font-size:12px}
.legend span.sw{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-2px}
.legend.v{flex-direction:column;flex-wrap:nowrap;min-width:190px}
.memwrap{display:flex;gap:12px;align-items:flex-start}.memwrap canvas{flex:1;min-width:0}
.tip{position:absolute;display:none;pointer-events:none;background:rgba(255,255,255,.95);border:1px solid #999;
padding:4px 6px;font-size:12px;white-space:nowrap}
pre{background:#f7f7f7;padding:8px;overflow:auto;max-height:400px;font-size:12px}
svg.split text{font-size:12px;fill:#333}button{font-size:12px}
"""

_JS = r"""
"use strict";
(function () {
  var D = JSON.parse(document.getElementById("data").textContent);
  var G = D.gantt, N = G.s.length, T = D.makespan_ns > 0 ? D.makespan_ns : 1;
  var dpr = window.devicePixelRatio || 1;
  function unit(ns) { return T >= 1e10 ? [1e9, "s"] : [1e6, "ms"]; }
  var U = unit(T);
  function fmt(ns) { return (ns / U[0]).toPrecision(4) + " " + U[1]; }
  function hex(c) { return [parseInt(c.substr(1, 2), 16), parseInt(c.substr(3, 2), 16), parseInt(c.substr(5, 2), 16)]; }
  function shade(c, k) {  // chunk k: mix toward white
    var v = D.vpp > 1 ? Math.min(k / D.vpp, 1) * 0.55 : 0, h = hex(c);
    return "rgb(" + h.map(function (x) { return Math.round(x + (255 - x) * v); }).join(",") + ")";
  }
  // legend
  var used = {}, i;
  for (i = 0; i < N; i++) used[G.grp[i]] = 1;
  var lg = document.getElementById("legend"), html = "";
  D.groups.forEach(function (g, k) {
    if (used[k]) html += "<span><span class='sw' style='background:" + g.color + "'></span>" + g.name + "</span>";
  });
  if (D.vpp > 1) {
    for (var c = 0; c < D.vpp; c++) html += "<span><span class='sw' style='background:" + shade(D.groups[0].color, c) +
      "'></span>F chunk " + c + "</span>";
  }
  lg.innerHTML = html;
  // rows
  var nrow = G.labels.length, rowY = [], rowH = [], y = 22;
  var RH = nrow > 48 ? 14 : nrow > 24 ? 18 : 24;
  for (i = 0; i < nrow; i++) { var h = G.kinds[i] === "compute" ? RH : Math.round(RH * 0.5); rowY.push(y); rowH.push(h); y += h; }
  var H = y + 4, LEFT = 64;
  var cv = document.getElementById("gantt"), ctx = cv.getContext("2d"), tip = document.getElementById("tip");
  var t0 = 0, t1 = T * 1.01, W = 800;
  function size() {
    W = Math.max(cv.parentElement.clientWidth, 300);
    cv.width = W * dpr; cv.height = H * dpr; cv.style.height = H + "px";
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  }
  function xOf(t) { return LEFT + (t - t0) * (W - LEFT - 8) / (t1 - t0); }
  function tOf(x) { return t0 + (x - LEFT) * (t1 - t0) / (W - LEFT - 8); }
  function niceTicks(lo, hi, n) {
    // about n ticks (in units of U) at 1, 2 or 5 times a power of ten between lo and hi (ns)
    var raw = (hi - lo) / U[0] / n, p = Math.pow(10, Math.floor(Math.log10(raw))), st = 10 * p;
    [5, 2, 1].forEach(function (m) { if (m * p >= raw) st = m * p; });
    var out = [], a = Math.ceil(lo / U[0] / st);
    for (var j = a; j * st <= hi / U[0] && out.length < 50; j++) out.push(j * st);
    return out;
  }
  function ticks() { return niceTicks(t0, t1, 8); }
  function draw() {
    ctx.clearRect(0, 0, W, H);
    ctx.font = "11px sans-serif"; ctx.fillStyle = "#333"; ctx.textBaseline = "middle";
    ctx.strokeStyle = "#eee"; ctx.lineWidth = 1;
    ticks().forEach(function (v) {
      var x = xOf(v * U[0]); ctx.beginPath(); ctx.moveTo(x, 18); ctx.lineTo(x, H); ctx.stroke();
      ctx.textAlign = "center"; ctx.fillText(+v.toPrecision(6) + " " + U[1], x, 9);
    });
    ctx.textAlign = "right";
    for (var r = 0; r < nrow; r++) {
      ctx.fillStyle = G.kinds[r] === "compute" ? "#222" : "#777";
      ctx.font = (G.kinds[r] === "compute" ? Math.min(12, RH - 4) : Math.max(8, rowH[r] - 2)) + "px sans-serif";
      ctx.fillText(G.labels[r], LEFT - 6, rowY[r] + rowH[r] / 2);
    }
    ctx.save(); ctx.beginPath(); ctx.rect(LEFT, 18, W - LEFT, H); ctx.clip();
    var showcp = document.getElementById("showcp").checked, fs = Math.max(8, Math.min(12, RH - 8));
    ctx.font = fs + "px sans-serif"; ctx.textAlign = "center";
    for (var k = 0; k < N; k++) {
      if (G.e[k] < t0 || G.s[k] > t1) continue;
      var x0 = xOf(G.s[k]), x1 = xOf(G.e[k]), w = Math.max(x1 - x0, 0.6), rr = G.row[k];
      var yy = rowY[rr] + 1, hh = rowH[rr] - 2, g = D.groups[G.grp[k]];
      ctx.fillStyle = shade(g.color, G.ch[k]); ctx.fillRect(x0, yy, w, hh);
      if (showcp && G.cp[k]) {  // outline when wide enough, else a dark tick under the bar
        ctx.fillStyle = "#000";
        if (w >= 6) { ctx.strokeStyle = "#000"; ctx.lineWidth = 1; ctx.strokeRect(x0 + 0.5, yy + 0.5, w - 1, hh - 1); }
        else ctx.fillRect(x0, yy + hh - 2, w, 2);
      }
      if (G.mb[k] >= 0 && G.kinds[rr] === "compute" && w > 7 * String(G.mb[k]).length + 4) {
        ctx.fillStyle = G.ch[k] > 0 ? "#000" : g.text; ctx.fillText(String(G.mb[k]), x0 + w / 2, yy + hh / 2);
      }
    }
    ctx.restore();
  }
  function find(x, yv) {
    var r = -1, k;
    for (k = 0; k < nrow; k++) if (yv >= rowY[k] && yv < rowY[k] + rowH[k]) { r = k; break; }
    if (r < 0) return -1;
    var t = tOf(x), tol = (t1 - t0) / (W - LEFT) * 2;
    for (k = 0; k < N; k++) if (G.row[k] === r && G.s[k] - tol <= t && t <= G.e[k] + tol) return k;
    return -1;
  }
  var drag = null;
  cv.addEventListener("wheel", function (ev) {
    ev.preventDefault();
    var t = tOf(ev.offsetX), f = ev.deltaY > 0 ? 1.25 : 0.8, span = Math.max((t1 - t0) * f, 1000);
    t0 = Math.max(t - (t - t0) * span / (t1 - t0), -T * 0.05); t1 = t0 + span; draw();
  }, { passive: false });
  cv.addEventListener("mousedown", function (ev) { drag = [ev.offsetX, t0, t1]; });
  window.addEventListener("mouseup", function () { drag = null; });
  cv.addEventListener("mousemove", function (ev) {
    if (drag) {
      var dt = (ev.offsetX - drag[0]) * (drag[2] - drag[1]) / (W - LEFT - 8);
      t0 = drag[1] - dt; t1 = drag[2] - dt; draw(); return;
    }
    var k = find(ev.offsetX, ev.offsetY);
    if (k < 0) { tip.style.display = "none"; return; }
    var g = D.groups[G.grp[k]].name;
    tip.innerHTML = G.labels[G.row[k]] + ": " + g + (G.mb[k] >= 0 ? ", microbatch " + G.mb[k] : "") +
      (D.vpp > 1 ? ", chunk " + G.ch[k] : "") + "<br>" + fmt(G.s[k]) + " to " + fmt(G.e[k]) +
      " (" + fmt(G.e[k] - G.s[k]) + ")" + (G.cp[k] ? "<br>on the critical path" : "");
    tip.style.display = "block"; tip.style.left = (ev.offsetX + 12) + "px"; tip.style.top = (ev.offsetY + 12) + "px";
  });
  cv.addEventListener("mouseleave", function () { tip.style.display = "none"; });
  function reset() { t0 = 0; t1 = T * 1.01; draw(); }
  cv.addEventListener("dblclick", reset);
  document.getElementById("reset").addEventListener("click", reset);
  document.getElementById("showcp").addEventListener("change", draw);
  // memory (no section, no canvas, when the run has neither memory events nor a capacity)
  var M = D.memory, mc = document.getElementById("mem"), mx = mc ? mc.getContext("2d") : null, MH = 300;
  var pal = ["#440154", "#3b528b", "#21918c", "#5ec962", "#fde725", "#d55e00", "#cc79a7", "#0072b2"];
  function color(i, n) { return n <= pal.length ? pal[Math.round(i * (pal.length - 1) / Math.max(n - 1, 1))] : "hsl(" + Math.round(270 * i / n) + ",70%,40%)"; }
  function drawMem() {
    if (!mc) return;
    var w = Math.max(mc.parentElement.clientWidth - 220, 300);
    mc.width = w * dpr; mc.height = MH * dpr; mc.style.height = MH + "px"; mx.setTransform(dpr, 0, 0, dpr, 0, 0);
    var L = 56, B = 36, top = 10, ymax = M.capacity_gib || 0, n = M.curves.length, leg = "";
    M.curves.forEach(function (c) { ymax = Math.max(ymax, c.peak_gib); });
    ymax = ymax > 0 ? ymax * 1.1 : 1;
    function X(t) { return L + t / (T * 1.01) * (w - L - 8); }
    function Y(v) { return top + (1 - v / ymax) * (MH - top - B); }
    mx.clearRect(0, 0, w, MH); mx.strokeStyle = "#ccc"; mx.strokeRect(L, top, w - L - 8, MH - top - B);
    mx.fillStyle = "#333"; mx.font = "11px sans-serif"; mx.textAlign = "right"; mx.textBaseline = "middle";
    for (var q = 0; q <= 4; q++) { var v = ymax * q / 4; mx.fillText(v.toFixed(1), L - 4, Y(v)); }
    mx.save(); mx.translate(12, MH / 2); mx.rotate(-Math.PI / 2); mx.textAlign = "center"; mx.fillText("GiB per GPU", 0, 0); mx.restore();
    mx.textAlign = "center";
    niceTicks(0, T * 1.01, 8).forEach(function (v) {  // time ticks and labels along the x axis
      var x = X(v * U[0]); mx.strokeStyle = "#ccc"; mx.beginPath(); mx.moveTo(x, MH - B); mx.lineTo(x, MH - B + 4); mx.stroke();
      mx.fillText(String(+v.toPrecision(6)), x, MH - B + 11);
    });
    mx.fillText("time (" + U[1] + ")", L + (w - L) / 2, MH - 7);
    M.curves.forEach(function (c, i) {
      var col = color(i, n); mx.strokeStyle = col; mx.lineWidth = 1.5; mx.beginPath();
      for (var k = 0; k < c.t.length; k++) {
        var x = X(c.t[k]), yv = Y(c.gib[k]);
        if (k === 0) mx.moveTo(x, yv); else { mx.lineTo(x, Y(c.gib[k - 1])); mx.lineTo(x, yv); }
      }
      mx.stroke();
      leg += "<span><span class='sw' style='background:" + col + "'></span>rank " + c.rank + " peak " + c.peak_gib.toFixed(2) + " GiB</span>";
    });
    if (M.capacity_gib) {
      mx.setLineDash([6, 4]); mx.strokeStyle = "#000"; mx.lineWidth = 1; mx.beginPath();
      mx.moveTo(L, Y(M.capacity_gib)); mx.lineTo(w - 8, Y(M.capacity_gib)); mx.stroke(); mx.setLineDash([]);
      leg += "<span><span class='sw' style='background:repeating-linear-gradient(90deg,#000 0 4px,#fff 4px 6px)'></span>capacity " + M.capacity_gib.toFixed(1) + " GiB</span>";
    }
    if (!M.has_events) leg += "<span>no memory events in this graph</span>";
    document.getElementById("memlegend").innerHTML = leg;
  }
  function all() { size(); draw(); drawMem(); }
  window.addEventListener("resize", all);
  all();
  document.body.setAttribute("data-rendered", "ok");
})();
"""
