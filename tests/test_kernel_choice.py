"""When the compiled kernels run (taskgraph/compiled.py): the ski-rental rule, EXECSIM_KERNEL, and the
default kernel="auto" giving the Python loop's bits (simulate, compare, goodput, search and the API
all reach the engine through simulate / the static-order sweep)."""
from __future__ import annotations

import cmath
import math
import sys

import numpy as np
import pytest

import taskgraph.compiled as registry
from simulator.engine.core import simulate_arrays
from strategies.errors import ConfigError


@pytest.fixture
def fresh(monkeypatch):
    saved, spent = dict(registry.COMPILED), dict(registry.SPENT)
    registry.reset()
    yield monkeypatch
    registry.reset()
    registry.COMPILED.update(saved)
    registry.SPENT.update(spent)


def test_ski_rental_rule_loads_once_the_python_work_pays(fresh):
    fresh.delitem(sys.modules, "numba", raising=False)  # numba not imported yet: loading costs
    fresh.setenv(registry.ENV, "auto")
    assert registry.compiled_kernel("sqrt", "math", work=0.5) is None
    assert registry.compiled_kernel("sqrt", "math", work=0.5) is None  # 1.0 s spent < SWITCH_COST_S
    assert registry.compiled_kernel("sqrt", "math", work=0.6) is math.sqrt  # 1.6 s >= 1.5 s
    assert registry.compiled_kernel("sqrt", "math", work=0.0) is math.sqrt  # loaded: stays


def test_two_modules_helpers_of_one_name_do_not_alias(fresh):
    fresh.setenv(registry.ENV, "numba")
    assert registry.compiled_kernel("sqrt", "math") is math.sqrt
    assert registry.compiled_kernel("sqrt", "cmath") is cmath.sqrt  # not math's, registered first
    assert set(registry.COMPILED) == {"math.sqrt", "cmath.sqrt"}


def test_loaded_at_once_when_numba_is_already_imported(fresh):
    fresh.setitem(sys.modules, "numba", sys)  # any module object: "already imported"
    fresh.setenv(registry.ENV, "auto")
    assert registry.compiled_kernel("floor", "math", work=1e-9) is math.floor


def test_environment_forces_a_choice(fresh):
    fresh.delitem(sys.modules, "numba", raising=False)
    fresh.setenv(registry.ENV, "numba")
    assert registry.compiled_kernel("sqrt", "math", work=0.0) is math.sqrt
    fresh.setenv(registry.ENV, "python")
    assert registry.compiled_kernel("sqrt", "math", work=1e9) is None  # even when loaded
    fresh.setenv(registry.ENV, "fast")
    with pytest.raises(ConfigError, match="EXECSIM_KERNEL='fast' must be one of auto, python, numba"):
        registry.compiled_kernel("ceil", "math")


def test_auto_kernel_gives_the_python_bits(fresh):
    pytest.importorskip("numba", reason="the fast extra (numba) is not installed")
    rng = np.random.default_rng(3)
    n = 3000
    dur = np.where(rng.random(n) < 0.2, 0.0, rng.random(n))
    src = rng.integers(0, n - 1, size=2 * n)
    dst = np.minimum(src + 1 + rng.integers(0, 50, size=2 * n), n - 1)
    order = np.argsort(src, kind="stable")
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=ptr[1:])
    dev = rng.integers(0, 16, size=n)
    ref = simulate_arrays(dur, dev, ptr, dst[order], 16, kernel="python")
    fresh.setenv(registry.ENV, "numba")
    got = simulate_arrays(dur, dev, ptr, dst[order], 16)
    assert registry.COMPILED.get("simulator.engine.kernels_numba.run_numba") is not None  # it did run compiled
    for a in ("ready", "start", "end", "order"):
        assert np.array_equal(getattr(ref, a), getattr(got, a))
