"""What a change reports (:class:`DeltaStats`), the sweep's internal give-up signal (:class:`SweepAbort`)
and small helpers shared by the modules of :mod:`simulator.engine.delta`."""
from __future__ import annotations

from array import array
from dataclasses import dataclass

NAN = float("nan")


class SweepAbort(Exception):
    """Internal: the sweep gives up (budget spent or a zero-duration guard fired). ``at``: the sweep
    point ``(ready, id)`` of the event just handled when the sweep stopped for budget or work (every
    list entry with a key up to it is final), None when a guard fired; ``processed``: tasks
    processed so far."""

    def __init__(self, msg: str, at: tuple | None = None, processed: int = 0):
        super().__init__(msg)
        self.at = at
        self.processed = processed


@dataclass
class DeltaStats:
    """What one change cost.

    retimed: tasks whose times were recomputed (all live tasks after a fallback).
    changed: tasks whose start or end changed (new tasks count; removed ones do not).
    moved: tasks whose device-queue key changed (new ready time or new device): FIFO reorderings.
    vacated: tasks pulled out of their device queue while their new time was unknown.
    fallback: True when a full run was used.
    reason: why ('' when no fallback).
    wall_s: wall-clock seconds of the call.
    new_ids: ids given to the new tasks of :meth:`DeltaSimulator.replace_tasks`.
    removed: tasks removed.
    resumed: tasks the engine re-ran from the sweep point when the sweep gave up (0: none; see
        ``DeltaSimulator._resume``); the tasks before that point kept the sweep's times.
    static: True when the change was re-timed by the static re-sweep (every device kept its order;
        ``simulator.engine.delta.static``).
    """

    retimed: int = 0
    changed: int = 0
    moved: int = 0
    vacated: int = 0
    fallback: bool = False
    reason: str = ""
    wall_s: float = 0.0
    new_ids: tuple = ()
    removed: int = 0
    resumed: int = 0
    static: bool = False


def zeros_array(typecode: str, n: int) -> array:
    return array(typecode, bytes(8 * n))


def extend_array(arr: array, block) -> None:
    """``arr.extend(block)`` for the state's arrays, which numpy views (``np.frombuffer``) pass to the
    kernels. A view still referenced from a reference cycle blocks the resize (``BufferError``) until
    the collector frees it: numba leaves one behind when a kernel compiles on its first call with the
    view as argument (an empty numba cache; tests/test_delta.py's successive-changes test caught it
    in CI). Then collect once and extend."""
    try:
        arr.extend(block)
    except BufferError:
        import gc
        gc.collect()
        arr.extend(block)
