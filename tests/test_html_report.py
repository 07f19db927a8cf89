"""The HTML report: self-contained, deterministic, numbers from the one breakdown, and it renders in
real headless Chromium (Debian package ``chromium``) with no console output and a non-blank page."""
import json
import re
import shutil
import subprocess

import numpy as np
import pytest

from simulator.api import simulate_pipeline
from simulator.cli.main import main
from simulator.outputs.html_report import MAX_BARS, html_report, report_data
from strategies.pipeline_file import load_pipeline

PIPE = "strategies/examples/pipeline-interleaved.yaml"
GPT3 = "strategies/examples/gpt3-175b-1024-a100.yaml"


def pipe_sim(**kw):
    from dataclasses import replace
    spec = load_pipeline(PIPE)
    return simulate_pipeline(replace(spec, **kw) if kw else spec)


def embedded(page: str) -> dict:
    m = re.search(r'<script type="application/json" id="data">(.*?)</script>', page, re.DOTALL)
    return json.loads(m.group(1).replace("<\\/", "</"))


def test_self_contained_and_deterministic():
    a = html_report(pipe_sim(), source=PIPE, strategy_text="pipeline: {}\n")
    b = html_report(pipe_sim(), source=PIPE, strategy_text="pipeline: {}\n")
    assert a == b  # byte-identical for identical inputs
    assert "<script src" not in a and "<link" not in a and "@import" not in a
    assert not re.search(r"(src|href)\s*=\s*['\"]?(https?:)?//", a)  # nothing fetched from the network
    assert a.count("<canvas") == 1 and "<svg" in a  # the Gantt; no memory panel without activation sizes


def test_memory_panel_only_with_memory():
    """A pipeline file without activation sizes has no memory to draw: no empty memory panel. With
    memory the panel is there and its time axis gets tick labels (niceTicks over [0, makespan])."""
    bare = html_report(pipe_sim())
    assert "<h2>Memory</h2>" not in bare and "id='mem'" not in bare and bare.count("<canvas") == 1
    with_mem = html_report(pipe_sim(activation=(3e8,) * 8))
    assert "<h2>Memory</h2>" in with_mem and with_mem.count("<canvas") == 2
    assert "niceTicks(0, T * 1.01, 8).forEach" in with_mem


def test_numbers_come_from_the_report():
    sim = pipe_sim()
    d = report_data(sim, PIPE)
    rep = sim.report
    assert d["bubble_fraction"] == rep.bubble_fraction
    assert d["ideal_bubble_fraction"] == pytest.approx(3 / 16)  # (p-1)/(v*m), pp=4 vpp=2 m=8
    for row, rr in zip(d["per_rank"], rep.per_rank):
        assert row["pipeline_bubble_s"] == rr.pipeline_bubble_s and row["exposed_comm_s"] == rr.exposed_comm_s
    g = embedded(html_report(sim))["gantt"]
    assert not g["collapsed"] and len(g["s"]) == len(g["e"]) == len(g["ch"]) == len(g["mb"])
    comp = [i for i, r in enumerate(g["row"]) if g["kinds"][r] == "compute"]
    assert len(comp) == 4 * 2 * 8 * 2  # ranks x chunks x microbatches x (F, B): one bar per action
    assert {g["ch"][i] for i in comp} == {0, 1}  # interleaved chunks are told apart
    assert sum(g["cp"]) > 0


def test_large_runs_collapse_to_stage_level(monkeypatch):
    import simulator.outputs.html_report as hr
    sim = pipe_sim()
    monkeypatch.setattr(hr, "MAX_BARS", 10)
    g = embedded(hr.html_report(sim))["gantt"]
    assert g["collapsed"]
    comp = [i for i, r in enumerate(g["row"]) if g["kinds"][r] == "compute"]
    assert len(comp) == 4 * 2 * 8 * 2  # still one bar per action on compute rows
    assert MAX_BARS == 30_000


def test_cli_report_and_simulate_html(tmp_path, capsys):
    out = tmp_path / "r.html"
    assert main(["report", PIPE, "-o", str(out)]) == 0
    page = out.read_text()
    assert "pipeline bubble" in page and "interleaved-1f1b" in page and "microbatches: 8" in page
    out2 = tmp_path / "s.html"
    assert main(["simulate", PIPE, "--html", str(out2)]) == 0
    assert out2.read_text() == page


@pytest.mark.skipif(shutil.which("chromium") is None,
                    reason="headless browser test needs Chromium: apt-get install -y chromium (Debian package)")
@pytest.mark.parametrize("memory", [False, True], ids=["no-memory", "memory-panel"])
def test_renders_in_headless_chromium(tmp_path, memory):
    from matplotlib.image import imread
    page = tmp_path / "report.html"
    if memory:  # the memory panel with its time-axis ticks runs too
        page.write_text(html_report(pipe_sim(activation=(3e8,) * 8), source=PIPE))
    else:
        assert main(["report", PIPE, "-o", str(page)]) == 0
    shot = tmp_path / "shot.png"
    p = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        "--enable-logging=stderr", "--v=0", "--virtual-time-budget=3000", "--window-size=1200,1400",
                        f"--screenshot={shot}", "--dump-dom", page.as_uri()],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    # the script ran to its end (it marks the body) and wrote nothing to the console (no errors)
    assert 'data-rendered="ok"' in p.stdout
    console = [ln for ln in p.stderr.splitlines() if "CONSOLE" in ln]
    assert console == [], console
    img = imread(str(shot))[..., :3]
    assert img.shape[:2] == (1400, 1200)
    assert float(img.std()) > 0.05  # not a blank page
    blue = np.all(np.abs(img - np.array([0x00, 0x72, 0xB2]) / 255.0) < 0.02, axis=-1).sum()
    assert blue > 500  # forward bars of the Gantt are drawn


INTERACT = """<script>
(function () {
  var c = document.getElementById("gantt"), r = c.getBoundingClientRect();
  function ev(type, x, extra) {
    var init = Object.assign({clientX: r.left + x, clientY: r.top + 30, bubbles: true, cancelable: true}, extra || {});
    c.dispatchEvent(type === "wheel" ? new WheelEvent(type, init) : new MouseEvent(type, init));
  }
  for (var i = 0; i < 6; i++) ev("wheel", 400, {deltaY: -100});   // zoom in around x=400
  ev("mousedown", 400); ev("mousemove", 300); ev("mouseup", 300);  // pan
  ev("mousemove", 420);                                            // hover tooltip
  document.getElementById("showcp").click();                       // critical path off
  ev("wheel", 400, {deltaY: 100}); ev("dblclick", 400);            // zoom out, reset
  window.dispatchEvent(new Event("resize"));
  document.body.setAttribute("data-interacted", "ok");
})();
</script></body>"""


@pytest.mark.skipif(shutil.which("chromium") is None,
                    reason="headless browser test needs Chromium: apt-get install -y chromium (Debian package)")
def test_zoom_pan_hover_run_without_errors(tmp_path):
    page = tmp_path / "report.html"
    page.write_text(html_report(pipe_sim(), source=PIPE).replace("</body>", INTERACT))
    p = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0",
                        "--virtual-time-budget=3000", "--window-size=1200,900", "--dump-dom", page.as_uri()],
                       capture_output=True, text=True, timeout=120)
    assert 'data-rendered="ok"' in p.stdout and 'data-interacted="ok"' in p.stdout
    assert [ln for ln in p.stderr.splitlines() if "CONSOLE" in ln] == []
