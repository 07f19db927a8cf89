"""The per-task timeline state of :class:`simulator.engine.delta.simulator.DeltaSimulator`
(:class:`DeltaState`): what the sweeps, the full runs, the resume and the static re-sweep read and
write, indexed by task id.

Every field is an ``array.array`` buffer: the Python loops index it directly (faster than numpy
scalars) and the compiled kernels get ``np.frombuffer`` views of it, taken at each call and deleted
after it (a live view blocks a resize). The id space grows only through :meth:`DeltaState.grow`,
which extends through :func:`simulator.engine.delta.stats.extend_array` (collect once on ``BufferError``:
numba can leave a view alive in a reference cycle when a kernel compiles).
"""
from __future__ import annotations

from array import array
from dataclasses import dataclass

import numpy as np

from simulator.engine.delta.stats import NAN, extend_array, zeros_array


@dataclass(eq=False)
class DeltaState:
    """Per-task arrays (``array('d')`` float64 or ``array('q')`` int64, one entry per task id;
    tombstones hold NaN times and no queue entry). None until the first full run allocates them.

    ready_time: when the task's last input is available (seconds).
    start_time, end_time: when it runs (seconds).
    queue_key: the ready time of its entry in its device's FIFO queue (the key the queue is sorted
        by with the id; differs from ``ready_time`` only inside a sweep).
    queue_device: the device whose queue holds its entry; -1: no entry (a tombstone, or vacated).
    The sweep's scratch, all zero between changes (package doc, "Delta algorithm"):
    sweep_status: 0 untouched, 1 marked, 3 placed (its end is known: successors pend on it), 2 done.
    new_ready: its new ready time while ``sweep_status`` is odd and no predecessor is pending.
    pending_preds: predecessors not yet resolved in this sweep.
    old_start, old_end: its times before the change (for the changed count and the resume).
    """

    ready_time: array | None = None
    start_time: array | None = None
    end_time: array | None = None
    queue_key: array | None = None
    queue_device: array | None = None
    sweep_status: array | None = None
    new_ready: array | None = None
    pending_preds: array | None = None
    old_start: array | None = None
    old_end: array | None = None

    def views(self) -> tuple:
        """numpy views of the ten arrays, in field order (float64 for times and keys, int64 for
        ``queue_device``, ``sweep_status`` and ``pending_preds``): the first ten arguments of the
        compiled sweep (:func:`simulator.engine.delta.kernels_numba.sweep`), and the one place that
        orders them. Delete the views after the call (a live view blocks :meth:`grow`)."""
        f64 = lambda a: np.frombuffer(a, dtype=np.float64)
        i64 = lambda a: np.frombuffer(a, dtype=np.int64)
        return (f64(self.ready_time), f64(self.start_time), f64(self.end_time), f64(self.queue_key),
                i64(self.queue_device), i64(self.sweep_status), f64(self.new_ready), i64(self.pending_preds),
                f64(self.old_start), f64(self.old_end))

    def allocate(self, n: int, count_changed: bool) -> None:
        """Arrays for an id space of ``n`` (kept when it kept its size). With ``count_changed`` new
        times are NaN: the old values are unknown here, so every task counts as changed."""
        if self.ready_time is None or len(self.ready_time) != n:
            for name in ("ready_time", "start_time", "end_time", "queue_key"):
                setattr(self, name, array("d", bytes(8 * n)))
                if count_changed and name != "queue_key":
                    np.frombuffer(getattr(self, name), dtype=np.float64)[:] = NAN
            self.queue_device = zeros_array("q", n)
        if self.sweep_status is None or len(self.sweep_status) != n:
            self.sweep_status = zeros_array("q", n)
            self.pending_preds = zeros_array("q", n)
            self.new_ready = zeros_array("d", n)
            self.old_start = zeros_array("d", n)
            self.old_end = zeros_array("d", n)

    def grow(self, k: int) -> None:
        """``k`` more ids at the end: no times (NaN), no queue entry, clear scratch."""
        nan_block = array("d", [NAN]) * k
        for arr in (self.ready_time, self.start_time, self.end_time, self.queue_key):
            extend_array(arr, nan_block)
        extend_array(self.queue_device, array("q", [-1]) * k)
        for arr, code in ((self.sweep_status, "q"), (self.pending_preds, "q"), (self.new_ready, "d"),
                          (self.old_start, "d"), (self.old_end, "d")):
            extend_array(arr, zeros_array(code, k))
