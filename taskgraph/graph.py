"""The task graph: dense integer task ids, flat numpy arrays, successors in CSR form.

Every array is indexed by task id. The engine reads only ``duration``, ``device`` and the CSR
arrays; everything else (keys, categories, memory events) is metadata for reports, traces and
delta mode. Per-device execution order is data: the lowering adds program-order edges between
consecutive tasks of a device, so the engine stays a generic "DAG + FIFO devices" simulator.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

#: Task categories (index = code stored in ``TaskGraph.category``).
CATEGORIES = (
    "forward",          # 0
    "backward",         # 1 full backward (input + weight gradients)
    "backward-input",   # 2 I: input-gradient backward
    "backward-weight",  # 3 W: weight-gradient backward
    "recompute",        # 4 activation recomputation before a backward
    "pp-send",          # 5 pipeline activation / gradient transfer
    "tp-comm",          # 6 tensor-parallel collective
    "cp-comm",          # 7 context-parallel collective
    "ep-comm",          # 8 expert-parallel all-to-all
    "dp-comm",          # 9 data-parallel gradient / parameter collective
    "optimizer",        # 10 optimizer step
    "other",            # 11
    "offload",          # 12 activation copy to / from host memory (CPU offload)
)
CAT = {name: i for i, name in enumerate(CATEGORIES)}
#: What a memory event holds (index = code in ``TaskGraph.mem_kind``).
MEM_KINDS = ("activation", "temporary", "parameter", "buffer")
COMM_CATEGORIES = frozenset({"pp-send", "tp-comm", "cp-comm", "ep-comm", "dp-comm", "offload"})
IS_COMM_CODE = np.array([c in COMM_CATEGORIES for c in CATEGORIES], dtype=bool)


@dataclass(frozen=True)
class Device:
    """A FIFO resource the engine schedules on.

    name: unique display name (``rank3/compute``, ``link 0->1``).
    rank: owning pipeline rank (the representative GPU); -1 for devices owned by no rank.
    stream: ``compute``, ``send``, ``recv``, ``tp``, ``dp`` ... or ``link`` for a network link.
    represents: number of physical GPUs (or links) this simulated device stands for.
    """

    name: str
    rank: int
    stream: str
    represents: int = 1

    @property
    def is_link(self) -> bool:
        return self.stream == "link"


@dataclass
class TaskGraph:
    """Flat-array task graph. Build one with :class:`TaskGraphBuilder`.

    duration: seconds per task (float64).
    device: device index per task (int32), into ``devices``.
    category: category code per task (int8), into ``CATEGORIES``.
    op, stage, chunk, mb, rank: the task's stable key (int32; ``op`` indexes ``op_names``; -1 = n/a).
    succ_ptr, succ_idx: successors in CSR form (task ``t``'s successors are
        ``succ_idx[succ_ptr[t]:succ_ptr[t+1]]``).
    devices: the devices, indexed by ``device``.
    op_names: names of operators or phases (``fwd``, ``qkv``, ``send-act`` ...).
    mem_task, mem_bytes, mem_at_end, mem_kind: memory events: task ``mem_task[k]`` changes its rank's
        memory by ``mem_bytes[k]`` at its start (``mem_at_end[k] == 0``) or end (``== 1``); the kind
        indexes ``MEM_KINDS`` (activation, temporary, parameter, buffer).
    meta: free-form facts about how the graph was built (shown in reports).
    order_hint: a guess of the engine's order, known from the lowering (``taskgraph/order_hint.py``):
        a permutation of the task ids whose restriction to each device is the guessed FIFO order;
        None = no guess. Only a hint: the sweep that reads it checks it and falls back to the engine.
    """

    duration: np.ndarray
    device: np.ndarray
    category: np.ndarray
    op: np.ndarray
    stage: np.ndarray
    chunk: np.ndarray
    mb: np.ndarray
    rank: np.ndarray
    succ_ptr: np.ndarray
    succ_idx: np.ndarray
    devices: tuple[Device, ...]
    op_names: tuple[str, ...]
    mem_task: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    mem_bytes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float64))
    mem_at_end: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int8))
    mem_kind: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int8))
    meta: dict = field(default_factory=dict)
    order_hint: np.ndarray | None = None

    @property
    def num_tasks(self) -> int:
        return int(self.duration.shape[0])

    @property
    def num_edges(self) -> int:
        return int(self.succ_idx.shape[0])

    @property
    def num_devices(self) -> int:
        return len(self.devices)

    def successors(self, t: int) -> np.ndarray:
        return self.succ_idx[self.succ_ptr[t]: self.succ_ptr[t + 1]]

    def predecessors_csr(self) -> tuple[np.ndarray, np.ndarray]:
        """Predecessors in CSR form (computed on demand; O(E log E))."""
        n = self.num_tasks
        src = np.repeat(np.arange(n, dtype=np.int32), np.diff(self.succ_ptr))
        order = np.argsort(self.succ_idx, kind="stable")
        pred_idx = src[order]
        counts = np.bincount(self.succ_idx, minlength=n)
        pred_ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(counts, out=pred_ptr[1:])
        return pred_ptr, pred_idx

    def is_comm(self) -> np.ndarray:
        return IS_COMM_CODE[self.category]

    def describe(self, t: int) -> str:
        """Human-readable key of task ``t``: ``forward fwd stage=1 chunk=0 mb=3 rank=1 on rank1/compute``."""
        parts = [CATEGORIES[self.category[t]], self.op_names[self.op[t]] if self.op[t] >= 0 else "-"]
        for name in ("stage", "chunk", "mb", "rank"):
            v = int(getattr(self, name)[t])
            if v >= 0:
                parts.append(f"{name}={v}")
        return f"task {t} [" + " ".join(parts) + f"] on {self.devices[self.device[t]].name}"

    def with_durations(self, duration: np.ndarray) -> TaskGraph:
        """A copy with new durations (other arrays shared)."""
        g = TaskGraph(**self.__dict__)
        g.duration = np.asarray(duration, dtype=np.float64)
        return g


class TaskGraphBuilder:
    """Append-only builder: ``add_device``, ``add_task``, ``add_edge``, then ``build()``.

    >>> b = TaskGraphBuilder()
    >>> d = b.add_device(Device("rank0/compute", 0, "compute"))
    >>> t0 = b.add_task(1.0, d, "forward", op="fwd", mb=0)
    >>> t1 = b.add_task(2.0, d, "backward", op="bwd", mb=0)
    >>> b.add_edge(t0, t1)
    >>> g = b.build()
    >>> g.num_tasks, g.successors(0).tolist()
    (2, [1])
    """

    def __init__(self):
        self.devices: list[Device] = []
        self._dev_index: dict[str, int] = {}
        self.op_names: list[str] = []
        self._op_index: dict[str, int] = {}
        self.duration: list[float] = []
        self.device: list[int] = []
        self.category: list[int] = []
        self.op: list[int] = []
        self.stage: list[int] = []
        self.chunk: list[int] = []
        self.mb: list[int] = []
        self.rank: list[int] = []
        self.src: list[int] = []
        self.dst: list[int] = []
        self.mem_task: list[int] = []
        self.mem_bytes: list[float] = []
        self.mem_at_end: list[int] = []
        self.mem_kind: list[int] = []
        self.meta: dict = {}
        self._n = 0          # tasks so far (scalar ones in the lists above, plus block copies)
        self._pieces: list = []  # (block, list lengths at its insertion, first task id, mb)

    def add_device(self, dev: Device) -> int:
        """Add (or look up, by name) a device; returns its index."""
        idx = self._dev_index.get(dev.name)
        if idx is None:
            idx = len(self.devices)
            self.devices.append(dev)
            self._dev_index[dev.name] = idx
        return idx

    def device_index(self, name: str) -> int:
        return self._dev_index[name]

    def op_code(self, name: str) -> int:
        code = self._op_index.get(name)
        if code is None:
            code = len(self.op_names)
            self.op_names.append(name)
            self._op_index[name] = code
        return code

    def add_task(self, duration: float, device: int, category: str, *, op: str | None = None,
                 stage: int = -1, chunk: int = -1, mb: int = -1, rank: int = -1) -> int:
        t = self._n
        self._n += 1
        self.duration.append(float(duration))
        self.device.append(device)
        self.category.append(CAT[category])
        self.op.append(self.op_code(op) if op is not None else -1)
        self.stage.append(stage)
        self.chunk.append(chunk)
        self.mb.append(mb)
        self.rank.append(rank)
        return t

    def add_edge(self, u: int, v: int) -> None:
        self.src.append(u)
        self.dst.append(v)

    def add_memory(self, task: int, nbytes: float, at_end: bool, kind: str = "activation") -> None:
        """Attach a memory change of ``nbytes`` (negative = free) to ``task``'s start or end."""
        self.mem_task.append(task)
        self.mem_bytes.append(float(nbytes))
        self.mem_at_end.append(1 if at_end else 0)
        self.mem_kind.append(MEM_KINDS.index(kind))

    @property
    def num_tasks(self) -> int:
        return self._n

    def mark(self) -> tuple[int, int, int, int]:
        """Where a block recorded by :meth:`block` starts: (task id, and the lengths of the
        per-task, edge and memory lists)."""
        return self._n, len(self.duration), len(self.src), len(self.mem_task)

    def block(self, start: tuple[int, int, int, int]) -> Block:
        """The tasks, edges and memory events added (by ``add_task`` / ``add_edge`` /
        ``add_memory``) since ``start`` (a :meth:`mark`) as a template whose task ids are relative
        to its first task; every edge must stay inside the block."""
        t0, i0, e0, m0 = start
        if self._pieces and self._pieces[-1][4] >= t0:
            raise ValueError("a template block cannot contain another block")
        src = np.asarray(self.src[e0:], dtype=np.int64) - t0
        dst = np.asarray(self.dst[e0:], dtype=np.int64) - t0
        if src.size and (src.min() < 0 or dst.min() < 0):
            raise ValueError("a template block has an edge from outside the block")
        f64, i32 = (lambda xs: np.asarray(xs, dtype=np.float64)), (lambda xs: np.asarray(xs, dtype=np.int32))
        return Block(f64(self.duration[i0:]), i32(self.device[i0:]), np.asarray(self.category[i0:], np.int8),
                     i32(self.op[i0:]), i32(self.stage[i0:]), i32(self.chunk[i0:]), i32(self.mb[i0:]),
                     i32(self.rank[i0:]), src, dst, np.asarray(self.mem_task[m0:], dtype=np.int64) - t0,
                     f64(self.mem_bytes[m0:]), np.asarray(self.mem_at_end[m0:], np.int8),
                     np.asarray(self.mem_kind[m0:], np.int8))

    def add_block(self, blk: Block, mb: int) -> int:
        """Append a copy of ``blk`` whose non-negative microbatch entries become ``mb``; returns the
        id of its first task. The built arrays are those of re-adding its tasks, edges and memory
        events one by one in recorded order; the copy is an array slice joined at :meth:`build`."""
        t0 = self._n
        self._pieces.append((blk, len(self.duration), len(self.src), len(self.mem_task), t0, mb))
        self._n += blk.num_tasks
        return t0

    def build(self) -> TaskGraph:
        n = self._n
        cols = {name: np.asarray(getattr(self, name), dtype=dt) for name, dt in _COLUMNS}
        src = np.asarray(self.src, dtype=np.int64)
        dst = np.asarray(self.dst, dtype=np.int64)
        mem = {name: np.asarray(getattr(self, name), dtype=dt) for name, dt in _MEM_COLUMNS}
        if self._pieces:  # interleave the scalar runs with the block copies, in the order added
            cols, mem, src, dst = self._join_pieces(cols, mem, src, dst)
        succ_ptr, succ_idx = csr_from_edges(n, src, dst)
        return TaskGraph(
            **cols, succ_ptr=succ_ptr, succ_idx=succ_idx,
            devices=tuple(self.devices), op_names=tuple(self.op_names), **mem,
            meta=dict(self.meta),
        )

    def _join_pieces(self, cols: dict, mem: dict, src: np.ndarray, dst: np.ndarray):
        """The columns of the scalar runs (``cols``, ``mem``, ``src``, ``dst``: what ``add_task`` /
        ``add_edge`` / ``add_memory`` appended) interleaved with the block copies in the order added:
        each column is one gather from a pool (the scalar column, then each distinct block's once),
        the same values :func:`numpy.concatenate` of the pieces would give."""
        n_task, n_edge, n_mem = len(self.duration), len(self.src), len(self.mem_task)
        # each distinct block once in the pools, after the scalar columns: its (start, length) there
        # for tasks, edges and memory events
        distinct: dict[int, tuple] = {}
        at = [n_task, n_edge, n_mem]
        for blk, *_ in self._pieces:
            if id(blk) not in distinct:
                lens = (blk.num_tasks, len(blk.src), len(blk.mem_task))
                distinct[id(blk)] = (blk, (at[0], lens[0], at[1], lens[1], at[2], lens[2]))
                at = [a + x for a, x in zip(at, lens)]
        # segments: (pool start, length) for tasks, edges and memory events, with each segment's
        # microbatch (-2: keep the column's) and id offset (0 for the scalar runs)
        seg = []
        i = e = m = 0
        for blk, i1, e1, m1, t0, mb in self._pieces:
            seg.append((i, i1 - i, e, e1 - e, m, m1 - m, -2, 0))
            seg.append((*distinct[id(blk)][1], mb, t0))
            i, e, m = i1, e1, m1
        seg.append((i, n_task - i, e, n_edge - e, m, n_mem - m, -2, 0))
        sg = np.array(seg, dtype=np.int64)

        def take(at, length):
            """Pool positions of the segments ``(at, length)`` laid end to end."""
            total = int(length.sum())
            return np.repeat(at - (np.cumsum(length) - length), length) + np.arange(total, dtype=np.int64)

        ti, ei, mi = take(sg[:, 0], sg[:, 1]), take(sg[:, 2], sg[:, 3]), take(sg[:, 4], sg[:, 5])

        def pool(first, name):
            return np.concatenate([first] + [getattr(b, name) for b, _ in distinct.values()])

        out = {name: pool(cols[name], name)[ti].astype(dt, copy=False) for name, dt in _COLUMNS}
        rep_mb = np.repeat(sg[:, 6].astype(np.int32), sg[:, 1])
        out["mb"] = np.where((rep_mb != -2) & (out["mb"] >= 0), rep_mb, out["mb"]).astype(np.int32)
        off_e = np.repeat(sg[:, 7], sg[:, 3])
        src = pool(src, "src")[ei] + off_e
        dst = pool(dst, "dst")[ei] + off_e
        mems = {name: pool(mem[name], name)[mi] for name, _ in _MEM_COLUMNS}
        mems["mem_task"] = mems["mem_task"].astype(np.int64) + np.repeat(sg[:, 7], sg[:, 5])
        return out, {name: mems[name].astype(dt, copy=False) for name, dt in _MEM_COLUMNS}, src, dst


#: per-task and per-memory-event builder columns and their dtypes in the built graph
_COLUMNS = (("duration", np.float64), ("device", np.int32), ("category", np.int8), ("op", np.int32),
            ("stage", np.int32), ("chunk", np.int32), ("mb", np.int32), ("rank", np.int32))
_MEM_COLUMNS = (("mem_task", np.int32), ("mem_bytes", np.float64), ("mem_at_end", np.int8),
                ("mem_kind", np.int8))


@dataclass(frozen=True)
class Block:
    """A recorded run of tasks (column arrays; ids relative to the first task), the edges among
    them and their memory events: a per-action template that :meth:`TaskGraphBuilder.add_block`
    replicates over microbatches."""

    duration: np.ndarray
    device: np.ndarray
    category: np.ndarray
    op: np.ndarray
    stage: np.ndarray
    chunk: np.ndarray
    mb: np.ndarray
    rank: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    mem_task: np.ndarray
    mem_bytes: np.ndarray
    mem_at_end: np.ndarray
    mem_kind: np.ndarray

    @property
    def num_tasks(self) -> int:
        return len(self.duration)


def csr_from_edges(n: int, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Successor CSR from an edge list; successors of a task keep the order edges were added."""
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int32)
    if src.size and (src.min() < 0 or src.max() >= n or dst.min() < 0 or dst.max() >= n):
        raise ValueError("edge endpoint out of range")
    order = np.argsort(src, kind="stable")
    succ_idx = dst[order]
    counts = np.bincount(src, minlength=n) if src.size else np.zeros(n, dtype=np.int64)
    succ_ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=succ_ptr[1:])
    return succ_ptr, succ_idx.astype(np.int32)


def kahn_order(n: int, succ_ptr: np.ndarray, succ_idx: np.ndarray) -> list[int]:
    """Kahn's algorithm over a successor CSR of ``n`` nodes: sources in index order, then FIFO,
    each node's successors in CSR order. Shorter than ``n`` when the graph has a cycle (the nodes
    on or behind it are missing); callers check the length."""
    indeg = np.bincount(succ_idx, minlength=n).tolist()
    ptr, succ = succ_ptr.tolist(), succ_idx.tolist()
    out = [a for a in range(n) if indeg[a] == 0]
    i = 0
    while i < len(out):
        a = out[i]
        for v in succ[ptr[a]:ptr[a + 1]]:
            c = indeg[v] - 1
            indeg[v] = c
            if c == 0:
                out.append(v)
        i += 1
    return out
