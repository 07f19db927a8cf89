"""Fixtures shared by several test modules."""
from __future__ import annotations

import functools

import pytest


@pytest.fixture
def hta_in_process(monkeypatch):
    """Holistic Trace Analysis parses a trace folder in a fork()ed multiprocessing pool
    (hta/common/trace.py, Trace.parse_multiple_ranks). Forking the pytest process after earlier tests
    left threads in it (Ray, numba, tqdm's monitor) can leave a pool worker blocked on the queue's
    lock while the pool waits for it: the suite hung there once. The tests parse in process, HTA's own
    ``use_multiprocessing=False`` path (the same parser, one rank after another)."""
    trace = pytest.importorskip("hta.common.trace", reason="Holistic Trace Analysis is not installed "
                                                            "(pip install 'execsim[hta]')")
    monkeypatch.setattr(trace.Trace, "load_traces",
                        functools.partialmethod(trace.Trace.load_traces, use_multiprocessing=False))
