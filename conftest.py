"""Collection rules for the whole repository (pytest reads this file before the doctest modules).

The numba kernels raise ImportError on import when numba is not installed (the ``fast`` extra), so
``--doctest-modules`` could not import them and collection stopped with errors; without numba they are
not collected (their tests in tests/ skip with a reason instead). Issue 41: ``pip install '.[test]'``
then ``pytest`` passes without numba or torch.
"""
from __future__ import annotations

import importlib.util

#: modules that import numba at their top (each raises ImportError without it)
NUMBA_MODULES = ["simulator/engine/kernels_numba.py", "simulator/engine/delta/kernels_numba.py",
                 "simulator/engine/delta/kernels_static.py", "taskgraph/kernels_numba.py"]

collect_ignore = [] if importlib.util.find_spec("numba") is not None else list(NUMBA_MODULES)

#: test data that happens to be Python (real recipe files the importers read statically, never run):
#: --doctest-modules would import them, and they import frameworks (lightning, nemo_run) we never need
collect_ignore_glob = ["tests/data/*"]
