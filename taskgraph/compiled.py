"""The registry of compiled helpers (optional extra ``fast``: numba).

A helper is looked up by name in the module that defines it: the lowering's own helpers live in
:mod:`taskgraph.kernels_numba` (below the engine, so lowering never imports the simulator); the
engine passes its kernel module (:mod:`simulator.engine.kernels_numba`). Callers that use a helper
automatically (the search's static-order sweep, the coarse lowering's topological order) get the bits
of their Python loops from it (tests/test_engine_numba.py), and the Python loops without numba.
"""
from __future__ import annotations

import importlib

#: name -> compiled function, or None without numba (filled lazily). ``benchmarks/search.py`` and
#: the tests set entries to None to time or check the Python loops.
COMPILED: dict = {}


def compiled_kernel(name: str, module: str = "taskgraph.kernels_numba"):
    """``<module>.<name>`` when numba is installed (optional extra ``fast``), else None."""
    if name not in COMPILED:
        try:
            kernels = importlib.import_module(module)
        except ImportError:
            COMPILED[name] = None
        else:
            COMPILED[name] = getattr(kernels, name)
    return COMPILED[name]
