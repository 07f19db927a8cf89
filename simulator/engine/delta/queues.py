"""The Python sweep's device queues: :class:`DeviceQueue` (one device's tasks sorted by key, in chunks
of ``params.QUEUE_CHUNK``), the lazy sources a queue is filled from (:class:`DeviceGroups`, a full run's tasks
grouped by device; :class:`QueueDump`, the compiled sweep's linked lists dumped), and :func:`gather_rows`
(CSR rows, vectorized). The algorithm is in the package doc, :mod:`simulator.engine.delta`."""
from __future__ import annotations

from bisect import bisect_left, bisect_right

import numpy as np

from simulator.engine.delta import params


class DeviceGroups:
    """The tasks of a full run grouped by device, in pop order (shared by the device queues, which
    take their slice on first use)."""

    __slots__ = ("bounds", "dev", "nd", "order", "perm", "ready")

    def __init__(self, order, dev, ready, nd):
        """``dev``: the device of each task at the time of the run (a copy, or an array that no
        change writes to before the grouping is computed)."""
        self.order, self.dev, self.ready, self.nd = order, dev, ready, nd
        self.perm = None

    def freeze(self):
        """Before a change writes to the device array: keep the run's devices (a copy)."""
        if self.perm is None:
            self.dev = self.dev.copy()

    def device(self, d):
        """(ids, ready times) of device d's tasks in pop order (numpy)."""
        if self.perm is None:
            dev_o = self.dev[self.order]
            small = dev_o.astype(np.int16 if self.nd < 32768 else np.int32)
            self.perm = np.argsort(small, kind="stable")  # radix sort for small ints
            self.bounds = np.zeros(self.nd + 1, dtype=np.int64)
            np.cumsum(np.bincount(dev_o, minlength=self.nd), out=self.bounds[1:])
        ids = self.order[self.perm[self.bounds[d]:self.bounds[d + 1]]]
        return ids, self.ready[ids]


class DeviceQueue:
    """One device's tasks sorted by key (ready, id): a list of chunks (parallel lists of ready times and
    ids) plus each chunk's first key, so a lookup is two bisects and an insert / delete moves at most
    2 * QUEUE_CHUNK entries (one flat list would memmove O(n) per change).

    After a full run a queue starts as a slice of the run's arrays (``src``); on first use it gets
    its chunk index (``fr``, ``fi``), and each chunk becomes Python lists only when it is touched
    (an unmaterialized chunk is ``R[c] = (a, b, ids, ready)``, ``I[c] = None``: rows a..b of those
    arrays), so a change pays for the chunks it touches, not for the device. The resumed fallback
    appends its tasks the same way (:meth:`extend`). In a non-canonical timeline the queue
    holds the engine's device order instead (only ``ids()`` is used then)."""

    __slots__ = ("I", "R", "fi", "fr", "src")

    def __init__(self, src=None):
        self.src = src  # (DeviceGroups, device) or None
        if src is None:
            self.R, self.I, self.fr, self.fi = [], [], [], []
        else:
            self.R = None

    def _load(self):
        groups, d = self.src
        self.src = None
        ids, rs = groups.device(d)
        self.R, self.I, self.fr, self.fi = [], [], [], []
        self._append_np(rs, ids)

    def _append_np(self, rs: np.ndarray, ids: np.ndarray) -> None:
        """Append key-sorted entries (all after the last one) as unmaterialized chunks."""
        L = params.QUEUE_CHUNK
        m = ids.shape[0]
        self.R.extend((a, min(a + L, m), ids, rs) for a in range(0, m, L))
        self.I.extend([None] * ((m + L - 1) // L))
        self.fr.extend(rs[::L].tolist())
        self.fi.extend(ids[::L].tolist())

    def _mat(self, c):
        """Materialize chunk c; returns (R[c], I[c])."""
        a, b, ids, rs = self.R[c]
        Rc = self.R[c] = rs[a:b].tolist()
        Ic = self.I[c] = ids[a:b].tolist()
        return Rc, Ic

    def ids(self) -> list:
        if self.R is None:
            return self.src[0].device(self.src[1])[0].tolist()
        out = []
        for c, Ic in enumerate(self.I):
            if Ic is None:
                a, b, ids, _ = self.R[c]
                out.extend(ids[a:b].tolist())
            else:
                out.extend(Ic)
        return out

    def ids_np(self) -> np.ndarray:
        """:meth:`ids` as one int64 array, the unmaterialized chunks as slices of their source arrays
        (no Python list of them: the static re-sweep's device lists, ``StaticResweep.py_links``, after an ordinary
        sweep)."""
        if self.R is None:
            return np.asarray(self.src[0].device(self.src[1])[0], dtype=np.int64)
        parts = []
        for c, Ic in enumerate(self.I):
            if Ic is None:
                a, b, ids, _ = self.R[c]
                parts.append(np.asarray(ids[a:b], dtype=np.int64))
            else:
                parts.append(np.array(Ic, dtype=np.int64))
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def _find(self, r, x):
        """(chunk, index) where key (r, x) is, or would be inserted; the chunk is materialized."""
        fr = self.fr
        c = bisect_right(fr, r) - 1
        if c >= 0 and fr[c] == r:
            fi = self.fi
            while c >= 0 and fr[c] == r and fi[c] > x:
                c -= 1
        if c < 0:
            c = 0
        Ic = self.I[c]
        if Ic is None:
            Rc, Ic = self._mat(c)
        else:
            Rc = self.R[c]
        i = bisect_left(Rc, r)
        L = len(Rc)
        while i < L and Ic[i] < x and Rc[i] == r:
            i += 1
        return c, i

    def _last_before(self, c):
        """(ready, id) of the last entry of chunk c - 1 (materializing it)."""
        Ip = self.I[c - 1]
        if Ip is None:
            Rp, Ip = self._mat(c - 1)
        else:
            Rp = self.R[c - 1]
        return Rp[-1], Ip[-1]

    def remove(self, r, x) -> int:
        """Delete x (key (r, x)); return the id of the entry that followed it, or -1."""
        if self.R is None:
            self._load()
        c, i = self._find(r, x)
        Rc = self.R[c]
        Ic = self.I[c]
        del Rc[i]
        del Ic[i]
        if not Ic:
            del self.R[c]
            del self.I[c]
            del self.fr[c]
            del self.fi[c]
            return self.fi[c] if c < len(self.fi) else -1
        if i == 0:
            self.fr[c] = Rc[0]
            self.fi[c] = Ic[0]
        if i < len(Ic):
            return Ic[i]
        return self.fi[c + 1] if c + 1 < len(self.fi) else -1

    def move(self, r0, x, r1):
        """Change x's key from (r0, x) to (r1, x). When its neighbours stay the same, only the key is
        rewritten and (-2, -2) is returned; otherwise the entry moves and the ids after its old and
        after its new place are returned (-1 = none)."""
        if self.R is None:
            self._load()
        c, i = self._find(r0, x)
        Rc = self.R[c]
        Ic = self.I[c]
        if i:
            ok = Rc[i - 1] < r1 or (Rc[i - 1] == r1 and Ic[i - 1] < x)
        elif c:
            pr, pi = self._last_before(c)
            ok = pr < r1 or (pr == r1 and pi < x)
        else:
            ok = True
        if ok:
            j = i + 1
            if j < len(Ic):
                ok = r1 < Rc[j] or (r1 == Rc[j] and x < Ic[j])
            elif c + 1 < len(self.fr):
                nx = self.fr[c + 1]
                ok = r1 < nx or (r1 == nx and x < self.fi[c + 1])
            if ok:
                Rc[i] = r1
                if i == 0:
                    self.fr[c] = r1
                return -2, -2
        return self.remove(r0, x), self.place(r1, x, False)[1]

    def last_upto(self, r, x) -> int:
        """Id of the last entry with key <= (r, x), or -1."""
        if self.R is None:
            self._load()
        if not self.I:
            return -1
        c, i = self._find(r, x)
        Rc, Ic = self.R[c], self.I[c]
        if i < len(Ic) and Rc[i] == r and Ic[i] == x:
            i += 1
        if i:
            return Ic[i - 1]
        return self._last_before(c)[1] if c else -1

    def cut_after(self, r, x) -> None:
        """Delete every entry with key > (r, x)."""
        if self.R is None:
            self._load()
        if not self.I:
            return
        c, i = self._find(r, x)
        Rc, Ic = self.R[c], self.I[c]
        if i < len(Ic) and Rc[i] == r and Ic[i] == x:
            i += 1
        del Rc[i:], Ic[i:]
        keep = c + 1 if i else c
        del self.R[keep:], self.I[keep:], self.fr[keep:], self.fi[keep:]

    def extend(self, rs: np.ndarray, ids: np.ndarray) -> None:
        """Append key-sorted entries (all after the last one), materialized on first touch."""
        if self.R is None:
            self._load()
        self._append_np(rs, ids)


    def place(self, r, x, present: bool):
        """Insert x at key (r, x) unless ``present``; return (id before it, id after it), -1 = none."""
        if self.R is None:
            self._load()
        if not self.I:
            self.R.append([r])
            self.I.append([x])
            self.fr.append(r)
            self.fi.append(x)
            return -1, -1
        c, i = self._find(r, x)
        Rc = self.R[c]
        Ic = self.I[c]
        if not present:
            Rc.insert(i, r)
            Ic.insert(i, x)
            if i == 0:
                self.fr[c] = r
                self.fi[c] = x
        prev = Ic[i - 1] if i else (self._last_before(c)[1] if c else -1)
        j = i + 1
        L = len(Ic)
        nxt = Ic[j] if j < L else (self.fi[c + 1] if c + 1 < len(self.fi) else -1)
        if L > 2 * params.QUEUE_CHUNK:
            h = L // 2
            self.R.insert(c + 1, Rc[h:])
            self.I.insert(c + 1, Ic[h:])
            self.fr.insert(c + 1, Rc[h])
            self.fi.insert(c + 1, Ic[h])
            del Rc[h:]
            del Ic[h:]
        return prev, nxt


class QueueDump:
    """Device queues dumped from the compiled sweep's linked lists (``DeviceQueue`` source, like
    :class:`DeviceGroups`): ids of each device in key order and their ready times."""

    __slots__ = ("bounds", "ids", "rs")

    def __init__(self, ids, rs, bounds):
        self.ids, self.rs, self.bounds = ids, rs, bounds

    def device(self, d):
        a, b = int(self.bounds[d]), int(self.bounds[d + 1])
        return self.ids[a:b], self.rs[a:b]


def gather_rows(ptr: np.ndarray, idx: np.ndarray, rows: np.ndarray):
    """The CSR entries of ``rows``: (position in ``rows`` of each entry's row, entry), vectorized."""
    starts = ptr[rows]
    cnt = ptr[rows + 1] - starts
    tot = int(cnt.sum())
    if not tot:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    row = np.repeat(np.arange(rows.size, dtype=np.int64), cnt)
    pos = np.arange(tot, dtype=np.int64) + np.repeat(starts - (np.cumsum(cnt) - cnt), cnt)
    return row, idx[pos]
