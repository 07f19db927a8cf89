"""The house rules of the code layout (docs/architecture.md), checked so they stay true:

* ``simulator/`` holds rooms (sub-packages), and directly only ``__init__.py`` and ``api.py``;
* data flows one way: ``strategies`` <- ``topologies`` <- ``taskgraph`` <- ``simulator``; a lower
  package imports nothing from a higher one;
* inside ``simulator/`` the rooms have floors too (engine < reports < outputs, simulation < search,
  goodput < cli < api), and nothing imports ``simulator.api``;
* no import cycle, imports inside functions included, except the schedule registry (the schedule
  families register themselves in ``strategies.schedules``);
* no module over 800 lines.
"""
from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("strategies", "topologies", "taskgraph", "simulator")
MAX_LINES = 800

# room -> rooms it may import (besides the lower packages)
ROOMS = {
    "engine": set(),
    "reports": {"engine"},
    "outputs": {"engine", "reports"},
    "simulation": {"engine", "reports"},
    "search": {"engine", "reports", "outputs", "simulation"},
    "goodput": {"engine", "reports", "outputs", "simulation"},
    "profiling": {"engine", "reports", "outputs", "simulation"},
    "cli": {"engine", "reports", "outputs", "simulation", "search", "goodput", "profiling"},
}
# the schedule families import the registry, which imports them to fill it
ALLOWED_CYCLE = {"strategies.schedules", "strategies.schedules_basic", "strategies.schedules_zb",
                 "strategies.schedules_dualpipe"}


def _modules() -> dict[str, Path]:
    mods = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts.pop()
            mods[".".join(parts)] = path
    return mods


def _resolve(name: str, mods) -> str | None:
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def import_graph() -> nx.DiGraph:
    """Module -> module for every import statement anywhere in the file (functions included)."""
    mods = _modules()
    g = nx.DiGraph()
    g.add_nodes_from(mods)
    for mod, path in mods.items():
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = mod.split(".")[: len(mod.split(".")) - (0 if is_pkg else 1)]
                    parts = parts[: len(parts) - (node.level - 1)]
                    base = ".".join(parts + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            for t in targets:
                r = _resolve(t, mods)
                if r and r != mod:
                    g.add_edge(mod, r)
    return g


def _room(mod: str) -> str | None:
    parts = mod.split(".")
    return parts[1] if parts[0] == "simulator" and len(parts) > 2 else None


def test_simulator_holds_only_rooms_and_the_api():
    loose = sorted(p.name for p in (ROOT / "simulator").glob("*.py") if p.name not in ("__init__.py", "api.py"))
    assert loose == [], f"modules directly under simulator/: {loose}; put each in the room that owns its job"
    rooms = sorted(p.name for p in (ROOT / "simulator").iterdir() if p.is_dir() and (p / "__init__.py").exists())
    assert rooms == sorted(ROOMS), rooms


def test_lower_packages_import_nothing_above_them():
    g = import_graph()
    rank = {p: i for i, p in enumerate(PACKAGES)}
    bad = [(u, v) for u, v in g.edges if rank[v.split(".")[0]] > rank[u.split(".")[0]]]
    assert bad == [], f"imports that run up a floor: {bad}"


def test_rooms_import_only_lower_rooms_and_nothing_imports_the_api():
    g = import_graph()
    bad = []
    for u, v in g.edges:
        if v == "simulator.api":
            bad.append((u, v))
        ru, rv = _room(u), _room(v)
        if ru and rv and ru != rv and rv not in ROOMS[ru]:
            bad.append((u, v))
        if v.startswith("simulator.") and ru is None and u != "simulator.api" and v != "simulator":
            bad.append((u, v))  # only the api and the rooms import rooms
    assert bad == [], f"imports against the floors of simulator/: {bad}"


def test_no_import_cycle_but_the_schedule_registry():
    g = import_graph()
    cycles = [c for c in nx.simple_cycles(g) if not set(c) <= ALLOWED_CYCLE]
    assert cycles == [], f"import cycles: {cycles[:5]}"


def test_costing_and_lowering_meet_in_the_contract():
    # the cost records live in taskgraph/work.py, which needs no other project module; the costing
    # side reads them from there, and the operator lowering knows nothing of the costing
    g = import_graph()
    assert sorted(g.successors("taskgraph.work")) == []
    costing = ("taskgraph.costing", "taskgraph.coarse", "taskgraph.stage_records", "taskgraph.estimate")
    assert [m for m in costing if g.has_edge(m, "taskgraph.lower_model")] == []
    assert [m for m in costing[:3] if not g.has_edge(m, "taskgraph.work")] == []
    assert not g.has_edge("taskgraph.lower_model", "taskgraph.costing")


def test_no_module_over_800_lines():
    long = {str(p.relative_to(ROOT)): n for p in _modules().values()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}, f"modules over {MAX_LINES} lines: {long}; split each along a seam its module doc names"


def test_the_checker_sees_imports_inside_functions(tmp_path):
    # the graph is what the rules above rest on: a function-level import must be an edge
    g = import_graph()
    assert g.has_edge("simulator.engine.dispatch", "simulator.engine.static_order")
    assert g.has_edge("taskgraph.lower_coarse", "taskgraph.compiled")


def test_every_name_the_api_offers_resolves():
    from simulator import api
    missing = [name for name in api.__all__ if not hasattr(api, name)]
    assert missing == [], f"simulator.api lists names it cannot give: {missing}"
    assert "simulate_strategy" in dir(api) and "sweep" in dir(api)
