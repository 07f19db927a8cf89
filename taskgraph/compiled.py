"""The registry of compiled helpers (optional extra ``fast``: numba), and when to use them.

A helper is looked up by name in the module that defines it, and registered under its
module-qualified name (``taskgraph.kernels_numba.kahn_order``: two modules' helpers of one name
never alias): the lowering's own helpers live in
:mod:`taskgraph.kernels_numba` (below the engine, so lowering never imports the simulator); the
engine passes its kernel module (:mod:`simulator.engine.kernels_numba`). Every compiled helper returns
the bits of its Python loop (tests/test_engine_numba.py), so callers may switch between the two at any
call without changing a result.

When to compile: importing numba and loading (or, with an empty cache, compiling) a kernel costs
about a second of CPU, more than a small run saves. A caller says how many seconds of Python loop it
is about to run (``work``); the registry keeps the sum per helper and loads the helper once that sum
reaches :data:`SWITCH_COST_S` -- the ski-rental rule (Karlin, Manasse, Rudolph & Sleator 1988,
"Competitive snoopy caching"): never more than twice the better of always and never compiling. A
helper is loaded at once when numba is already imported (the switch is then nearly free).

``EXECSIM_KERNEL`` (environment): ``auto`` (default, the rule above), ``python`` (never compile:
the reference loops), ``numba`` (compile whenever numba is installed).
"""
from __future__ import annotations

import importlib
import math
import os
import sys

#: module-qualified name (:func:`qualified`) -> compiled function, or None (numba missing, or set by
#: ``benchmarks/search.py`` and the tests to time or check the Python loops). Entries appear when a
#: helper is loaded.
COMPILED: dict = {}
#: Seconds of CPU that importing numba and loading or compiling one kernel costs (measured on the
#: project machine: import ~0.35 s, compiling a kernel with an empty cache ~0.5-1 s).
SWITCH_COST_S = 1.5
#: Environment variable that forces a kernel choice (module doc).
ENV = "EXECSIM_KERNEL"
KERNEL_CHOICES = ("auto", "python", "numba")
SPENT: dict = {}


def kernel_mode() -> str:
    """``EXECSIM_KERNEL`` (``auto`` when unset); an unknown value is an error naming the choices."""
    mode = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if mode not in KERNEL_CHOICES:
        from strategies.errors import ConfigError
        raise ConfigError(f"{ENV}={mode!r} must be one of {', '.join(KERNEL_CHOICES)} (auto: compiled kernels when "
                          f"numba is installed and the run is big enough to pay for them)")
    return mode


def qualified(name: str, module: str = "taskgraph.kernels_numba") -> str:
    """The registry key of helper ``name`` of ``module`` (:data:`COMPILED`): ``<module>.<name>``."""
    return f"{module}.{name}"


def compiled_kernel(name: str, module: str = "taskgraph.kernels_numba", work: float = math.inf):
    """``<module>.<name>`` when numba is installed and it pays (module doc), else None.

    ``work``: seconds of Python loop the caller would run now (``inf``: load it whenever available)."""
    key = qualified(name, module)
    if key in COMPILED:
        return COMPILED[key] if kernel_mode() != "python" else None
    mode = kernel_mode()
    if mode == "python":
        return None
    if mode == "auto" and "numba" not in sys.modules:
        spent = SPENT.get(key, 0.0) + work
        if spent < SWITCH_COST_S:
            SPENT[key] = spent
            return None
    try:
        kernels = importlib.import_module(module)
    except ImportError:
        COMPILED[key] = None
    else:
        COMPILED[key] = getattr(kernels, name)
    return COMPILED[key]


def reset() -> None:
    """Forget loaded helpers and the work counted so far (tests, benchmarks)."""
    COMPILED.clear()
    SPENT.clear()
