"""PNG plots: files are written, have the announced pixel size, are byte-identical across runs, and
draw what they should (pass colors, memory panel, dense raster panels)."""

import numpy as np
import pytest
from matplotlib.image import imread

from simulator.engine.core import simulate
from simulator.outputs.plots import (
    GROUPS,
    LABEL_LIMIT,
    MEMORY_FIGURE_PX,
    busy_coverage,
    pipeline_figure_size,
    plot_memory,
    plot_pipelines,
    time_unit,
)
from strategies.actions import Action, Schedule
from strategies.schedules import get_schedule
from taskgraph.lower_model import lower_model
from taskgraph.lower_pipeline import StageCosts, lower_uniform
from taskgraph.work import Bucket, Comm, IterationWork, LayerWork, OpCost, StageWork

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def hand_1f1b() -> Schedule:
    rows = ["0F0 0F1 0B0 0F2 0B1 0B2", "1F0 1B0 1F1 1B1 1F2 1B2"]
    return Schedule("1f1b", 2, 3, 1, (0, 1), tuple(tuple(map(Action.parse, r.split())) for r in rows))


def uniform_run(label, schedule, p2p=1e-4):
    g = lower_uniform(schedule, StageCosts.uniform(schedule.num_stages, 1e-3, 2e-3, p2p=p2p))
    return label, g, simulate(g)


def small_runs():
    return [uniform_run("1f1b (hand)", hand_1f1b()),
            uniform_run("gpipe", get_schedule("gpipe", 2, 3)),
            uniform_run("zb-h1", get_schedule("zb-h1", 2, 3))]


def model_run(name, pp=2, m=4):
    tp = Comm("tp-comm", "tp-allreduce", 1e-4)
    ops = (OpCost("attn", 1e-3, 1e-3, 1e-3, fwd_post=(tp,), saved_bytes=2e9, grad_bytes=1.0),
           OpCost("mlp", 2e-3, 2e-3, 2e-3, bwd_post=(tp,), saved_bytes=3e9, grad_bytes=1.0))
    st = StageWork((LayerWork("L0", ops),), buckets=(Bucket(0, 1, 1.0, 1e-3), Bucket(0, 0, 1.0, 1e-3)),
                   optimizer_s=1e-3)
    s = get_schedule(name, pp, m)
    g = lower_model(s, IterationWork((st,) * s.num_stages, p2p_fwd_s=2e-4, p2p_bwd_s=2e-4))
    return name, g, simulate(g)


def pixel_size(path):
    img = imread(str(path))
    return img.shape[1], img.shape[0]


def color_pixels(path, hex_color, tol=0.02):
    img = imread(str(path))[..., :3]
    rgb = np.array([int(hex_color[i:i + 2], 16) / 255.0 for i in (1, 3, 5)])
    return int(np.all(np.abs(img - rgb) < tol, axis=-1).sum())


def test_plot_pipelines_writes_png_of_announced_size(tmp_path):
    runs = small_runs()
    p = tmp_path / "sub" / "pipes.png"
    plot_pipelines(runs, p, title="pp=2, m=3")
    data = p.read_bytes()
    assert data.startswith(PNG_SIGNATURE)
    assert pixel_size(p) == pipeline_figure_size(runs)
    w, h = pipeline_figure_size(runs)
    assert w == 1400 and h > 600
    # fewer panels, smaller figure; the memory panel adds height
    assert pipeline_figure_size(runs[:1])[1] < h
    assert pipeline_figure_size(runs, memory=False)[1] < h


def test_bars_use_the_pass_colors(tmp_path):
    runs = small_runs()
    p = tmp_path / "pipes.png"
    plot_pipelines(runs, p, memory=False)
    colors = {name.split()[0]: c for name, c, _ in GROUPS}
    for kind in ("F", "B", "I", "W"):  # 1f1b/gpipe have F and B, zb-h1 has I and W
        assert color_pixels(p, colors[kind]) > 200, kind
    assert color_pixels(p, colors["recompute"]) == 0  # legend shows only passes that occur


def test_same_inputs_give_identical_bytes(tmp_path):
    runs = small_runs()
    a, b = tmp_path / "a.png", tmp_path / "b.png"
    plot_pipelines(runs, a, title="same")
    plot_pipelines(small_runs(), b, title="same")  # rebuilt and re-simulated inputs
    assert a.read_bytes() == b.read_bytes()
    c = tmp_path / "c.png"
    plot_pipelines(runs, c, title="different")
    assert c.read_bytes() != a.read_bytes()


def test_memory_panel_with_memory_events(tmp_path):
    runs = [model_run("1f1b"), model_run("zb-h1")]
    assert all(g.mem_task.size > 0 for _, g, _ in runs)
    plain, full = tmp_path / "plain.png", tmp_path / "full.png"
    plot_pipelines(runs, plain)
    plot_pipelines(runs, full, static_bytes={0: 20e9, 1: 25e9}, capacity_bytes=80 * 2**30)
    assert pixel_size(full) == pixel_size(plain) == pipeline_figure_size(runs)
    assert full.read_bytes() != plain.read_bytes()
    again = tmp_path / "again.png"
    plot_pipelines([model_run("1f1b"), model_run("zb-h1")], again, static_bytes={0: 20e9, 1: 25e9},
                   capacity_bytes=80 * 2**30)
    assert again.read_bytes() == full.read_bytes()
    # run colors of the memory curves (1st and 2nd of the run palette) are drawn
    assert color_pixels(full, "#0072B2") > 0 and color_pixels(full, "#D55E00") > 0
    # per-run static levels: one item per run, or an error naming the fix
    plot_pipelines(runs, tmp_path / "per-run.png", static_bytes=[10e9, {0: 5e9}])
    with pytest.raises(ValueError, match="one item per run"):
        plot_pipelines(runs, tmp_path / "bad.png", static_bytes=[1.0])


def test_memory_panel_without_memory_events(tmp_path):
    runs = small_runs()
    p = tmp_path / "nomem.png"
    plot_pipelines(runs, p, memory=True, capacity_bytes=1e9)
    assert pixel_size(p) == pipeline_figure_size(runs, memory=True, capacity_bytes=1e9)


def test_plot_memory(tmp_path):
    _, g, r = model_run("1f1b", pp=3, m=5)
    a, b = tmp_path / "a.png", tmp_path / "b.png"
    plot_memory(g, r, a, static_bytes=15e9, capacity_bytes=40 * 2**30, title="memory")
    plot_memory(g, r, b, static_bytes=15e9, capacity_bytes=40 * 2**30, title="memory")
    assert a.read_bytes().startswith(PNG_SIGNATURE)
    assert a.read_bytes() == b.read_bytes()
    assert pixel_size(a) == MEMORY_FIGURE_PX
    # a graph without memory events still plots (flat lines at the static level)
    _, g0, r0 = small_runs()[0]
    plot_memory(g0, r0, tmp_path / "flat.png", static_bytes={0: 1e9, 1: 2e9})
    assert pixel_size(tmp_path / "flat.png") == MEMORY_FIGURE_PX


def test_dense_panel_is_rasterized_deterministically(tmp_path):
    s = get_schedule("1f1b", 4, 400)
    run = uniform_run("1f1b m=400", s)
    assert run[1].num_tasks > LABEL_LIMIT
    a, b = tmp_path / "a.png", tmp_path / "b.png"
    plot_pipelines([run, uniform_run("gpipe", get_schedule("gpipe", 4, 8))], a, memory=False)
    plot_pipelines([run, uniform_run("gpipe", get_schedule("gpipe", 4, 8))], b, memory=False)
    assert a.read_bytes() == b.read_bytes()
    # steady state is 2/3 backward: the dense rows show the backward color
    assert color_pixels(a, {n.split()[0]: c for n, c, _ in GROUPS}["B"]) > 10000


def test_coverage_is_exact_busy_time_per_pixel():
    s = np.array([0.0, 0.25, 1.5, 2.0])
    e = np.array([0.2, 1.25, 1.75, 2.0 + 1e-12])
    bounds = np.linspace(0.0, 3.0, 4)  # pixels [0,1) [1,2) [2,3)
    busy, present = busy_coverage(s, e, bounds)
    assert busy == pytest.approx([0.95, 0.5, 1e-12], abs=1e-15)
    assert present.tolist() == [True, True, True]
    busy, present = busy_coverage(s[:2], e[:2], bounds)
    assert present.tolist() == [True, True, False] and busy[2] == 0.0


def test_time_unit_switches_to_seconds_past_10_s():
    assert time_unit(9.99) == ("ms", 1e3)
    assert time_unit(10.5) == ("s", 1.0)


def test_devices_without_rank_and_empty_input(tmp_path):
    from benchmarks.graphs import random_dag
    g = random_dag(3000, devices=4)
    plot_pipelines([("random", g, simulate(g))], tmp_path / "random.png")
    assert (tmp_path / "random.png").read_bytes().startswith(PNG_SIGNATURE)
    with pytest.raises(ValueError, match="at least one"):
        plot_pipelines([], tmp_path / "none.png")


def test_large_graph_renders_in_image_mode(tmp_path):
    # speed is measured in benchmarks, not asserted here (shared, noisy machines)
    from benchmarks.graphs import pipeline_graph
    g = pipeline_graph(50_000)
    r = simulate(g)
    plot_pipelines([("50k", g, r)], tmp_path / "big.png", memory=True)
    assert pixel_size(tmp_path / "big.png") == pipeline_figure_size([("300k", g, r)])


def uniform_pp(name, pp, m, vpp=1):
    s = get_schedule(name, pp, m, vpp)
    return uniform_run(f"{name} pp={pp}", s)


@pytest.mark.parametrize("pp,expect", [(4, "separate"), (16, "merged"), (64, "none")])
def test_comm_rows_collapse_with_rank_count(tmp_path, pp, expect):
    from simulator.outputs.plots import row_layout
    _, g, r = run = uniform_pp("1f1b", pp, pp)
    lay = row_layout(g, r, "auto")
    assert lay["n_compute"] == pp
    assert lay["n_thin"] == {"separate": pp, "merged": pp, "none": 0}[expect]  # p2p only in these graphs
    assert lay["comm_hidden"] == (expect == "none")
    if expect != "none":
        assert set(lay["labels"][1::2]) == ({"p2p"} if expect == "separate" else {"comm"})
    fig = plot_pipelines([run], tmp_path / "p.png", memory=False)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    sizes = {t.get_fontsize() for t in ax.get_yticklabels() if t.get_text().startswith("rank")}
    assert labels[0] == "rank 0" and len(sizes) == 1 and 5.0 <= sizes.pop() <= 8.0
    # labels never overlap: at most one rank label per ~9 px of panel height
    h_px = ax.get_position().height * fig.get_figheight() * 100
    assert sum(lab.startswith("rank") for lab in labels) <= h_px / 9 + 1


def test_interleaved_chunks_are_shaded(tmp_path):
    from simulator.outputs.plots import shade
    run = uniform_pp("interleaved-1f1b", 4, 8, vpp=2)
    p = tmp_path / "il.png"
    fig = plot_pipelines([run], p, memory=False)
    f_color = GROUPS[0][1]
    light = "#" + "".join(f"{round(v * 255):02X}" for v in shade(f_color, 1, 2))
    assert color_pixels(p, f_color) > 200 and color_pixels(p, light) > 200
    assert [t.get_text() for t in fig.legends[0].get_texts()][-2:] == ["chunk 0", "chunk 1 (lighter)"]


def test_memory_legend_is_outside_the_axes(tmp_path):
    runs = [model_run("1f1b"), model_run("zb-h1")]
    fig = plot_pipelines(runs, tmp_path / "m.png", static_bytes={0: 20e9, 1: 25e9}, capacity_bytes=80 * 2**30)
    mem_ax = fig.axes[-1]
    canvas = fig.canvas
    renderer = canvas.get_renderer()
    mem_leg = next(lg for lg in fig.legends if any("capacity" in t.get_text() for t in lg.get_texts()))
    leg = mem_leg.get_window_extent(renderer)
    box = mem_ax.get_window_extent(renderer)
    assert leg.y1 < box.y0  # the memory legend sits wholly below the memory axes
    texts = [t.get_text() for t in mem_leg.get_texts()]
    assert texts[-1] == "capacity 80.0 GiB" and len(texts) == 3
    assert mem_ax.get_legend() is None
