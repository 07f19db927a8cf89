"""The device queues of :class:`simulator.engine.delta.simulator.DeltaSimulator` (package doc,
:mod:`simulator.engine.delta`, "Delta algorithm" and "Compiled sweep"): each device's tasks in key
order, in the two forms the sweeps use -- :class:`~simulator.engine.delta.queues.DeviceQueue` objects
for the Python sweep, linked lists for the compiled one -- and which of them is current.
:class:`DeviceQueueSet` converts between them lazily, when a path needs the other form."""
from __future__ import annotations

import numpy as np

from simulator.engine.delta.queues import DeviceGroups, DeviceQueue, QueueDump
from simulator.engine.delta.state import DeltaState


class DeviceQueueSet:
    """The device queues, kept in step with the state's ``queue_key`` / ``queue_device``.

    state: the simulator's :class:`~simulator.engine.delta.state.DeltaState` (the queue entries' keys
        and devices are read from it).
    kernels: :mod:`simulator.engine.delta.kernels_numba`, or None (no linked lists then).
    objects: one ``DeviceQueue`` per device (the Python sweep's), or None until needed.
    links: the compiled sweep's linked lists ``(qh, qt, qn, qp)`` (head and tail per device, next and
        previous per task), or None until needed; ``links_spare``: their arrays, kept for the next
        compiled full run to fill.
    last_placed: per device, the last entry the compiled sweep placed (its search start).
    objects_stale: the linked lists are newer than ``objects`` (a compiled sweep, resume or re-sweep
        changed them).
    keys_stale: ``objects`` hold keys older than a Python static re-sweep's (orders unchanged); they
        are rebuilt from that re-sweep's device lists (``relist``).
    as_full_run: no queue changed since the last full run, whose device groups are ``groups``.
    """

    def __init__(self, state: DeltaState, kernels):
        self.state = state
        self.kernels = kernels
        self.objects: list | None = None
        self.links: tuple | None = None
        self.links_spare: tuple | None = None
        self.last_placed: np.ndarray | None = None
        self.objects_stale = False
        self.keys_stale = False
        self.relist: tuple | None = None
        self.as_full_run = False
        self.groups: DeviceGroups | None = None

    def as_objects(self, n_devices: int, keep_links: bool = False) -> list:
        """The device queues as ``DeviceQueue`` objects, brought up to date from the compiled sweep's
        linked lists when those are newer; unless ``keep_links`` (read only), the caller changes
        them, so the linked lists are dropped (rebuilt by the next compiled sweep)."""
        self.settle_keys(n_devices)
        if self.objects_stale:
            qh, _, qn, _ = self.links
            where = np.frombuffer(self.state.queue_device, dtype=np.int64)
            count = int(np.count_nonzero(where != -1))
            del where
            ids, bounds = self.kernels.dump_links(qh, qn, n_devices, count)
            rs = np.frombuffer(self.state.queue_key, dtype=np.float64)[ids]
            dump = QueueDump(ids, rs, bounds)
            self.objects = [DeviceQueue((dump, d)) for d in range(n_devices)]
            self.objects_stale = False
        if not keep_links:
            self.links = None
            self.as_full_run = False
        return self.objects

    def as_links(self, n: int, n_devices: int) -> tuple:
        """The compiled sweep's device queues: linked lists in key order over ``n`` ids, built from the
        last full run's device groups when no queue changed since, else by sorting the entries by
        (device, key)."""
        if self.links is None:
            nd = n_devices
            if self.as_full_run:  # a canonical full run's pop order is key order: one pass
                where = np.frombuffer(self.state.queue_device, dtype=np.int64)  # the queue entries' devices
                self.links = self.kernels.links_from_order(self.groups.order, where, n, nd)
                del where
            else:
                where = np.frombuffer(self.state.queue_device, dtype=np.int64)
                lk = np.frombuffer(self.state.queue_key, dtype=np.float64)
                e = np.flatnonzero(where != -1)
                ids = e[np.lexsort((e, lk[e], where[e]))]
                bounds = np.zeros(nd + 1, dtype=np.int64)
                np.cumsum(np.bincount(where[e], minlength=nd), out=bounds[1:])
                del where, lk
                self.links = self.kernels.build_links(np.ascontiguousarray(ids, dtype=np.int64),
                                                      np.ascontiguousarray(bounds, dtype=np.int64), n, nd)
            self.last_placed = np.full(nd, -1, dtype=np.int64)
        return self.links

    def keys_changed(self, ids, bounds) -> None:
        """A Python static re-sweep changed keys, not orders: ``ids`` grouped by device in key order
        (``bounds`` per device) rebuild the objects with the new keys when they are next needed."""
        self.keys_stale = True
        self.relist = (ids, bounds)

    def settle_keys(self, n_devices: int) -> None:
        """Bring the objects' keys up to date after a Python static re-sweep (the device orders did not
        change; only keys did)."""
        if self.keys_stale:
            ids, bounds = self.relist
            dump = QueueDump(ids, np.frombuffer(self.state.queue_key, dtype=np.float64)[ids], bounds)
            self.objects = [DeviceQueue((dump, d)) for d in range(n_devices)]
            self.keys_stale = False
            self.relist = None

    def links_for_full_run(self, n: int, n_devices: int) -> tuple:
        """Linked-list arrays for a compiled full run over ``n`` ids to fill (the current or spare
        ones when their sizes fit, else new)."""
        links = self.links or self.links_spare
        if links is None or links[0].shape[0] != n_devices or links[2].shape[0] != n:
            links = tuple(np.empty(k, dtype=np.int64) for k in (n_devices, n_devices, n, n))
        return links

    def filled_by_full_run(self, links, n_devices: int) -> None:
        """A compiled full run wrote ``links`` (whether or not it finished)."""
        self.links = self.links_spare = links
        self.last_placed = np.full(n_devices, -1, dtype=np.int64)

    def from_compiled_run(self, order, device_np, n_devices: int) -> None:
        """After a compiled full run with pop ``order`` (live ids): the linked lists are the queues now
        (the objects are rebuilt from them when needed); the groups keep the run's order and devices."""
        self.groups = DeviceGroups(order, device_np, None, n_devices)
        self.objects = None
        self.as_full_run = True
        self.objects_stale = True
        self.keys_stale = False
        self.relist = None

    def from_python_run(self, order, device_np, ready, n_devices: int) -> None:
        """After a full run of the Python engine with pop ``order`` (live ids) and ready times ``ready``:
        the objects from its device groups, no linked lists."""
        self.links = None
        groups = DeviceGroups(order, device_np, ready, n_devices)  # (set_devices, replace_tasks: freeze)
        self.objects = [DeviceQueue((groups, d)) for d in range(n_devices)]
        self.groups = groups
        self.as_full_run = True  # no queue changed since this run
        self.objects_stale = False
        self.keys_stale = False
        self.relist = None

    def links_changed(self) -> None:
        """The linked lists changed (a compiled sweep, resume or re-sweep): the objects are stale."""
        self.objects_stale = True
