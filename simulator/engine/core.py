"""Full-mode event engine: FlexFlow's execution-simulator loop over flat arrays.

Semantics (Jia et al. 2019, "Beyond Data and Model Parallelism for DNNs", Section 5.2, Algorithm 1):
a global priority queue holds the tasks whose predecessors have all finished, keyed by
``(ready_time, task_id)``. Pop the smallest; it starts at ``max(ready_time, device_free[device])``,
ends ``duration`` later, and the device is busy until then. A successor's ready time is the latest
end of its predecessors (and at least 0); it enters the queue when its last predecessor finishes.

Consequences: with positive durations each device runs its tasks FIFO in (ready_time, task_id) order,
and ties are broken by task id, so identical inputs give identical timelines. Zero-duration tasks are allowed: their
successors become ready at the same instant and enter the queue keyed by (that instant, id), i.e. the
rule is always "pop order of the (ready, id) heap".

The engine knows nothing about pipelines: any per-device order a schedule wants is expressed by the
task graph's program-order edges.

Implementation (pure Python + numpy; every shortcut below gives the same pop order, bit for bit, as
the plain loop "pop (ready, id); start; end; for each successor: ready = max, in-degree - 1, push"):

* Successors are classified once, vectorized, before the loop (:func:`successor_plan`). A *chain edge* is
  ``t -> v`` where ``v`` is ``t``'s only successor and ``t`` is ``v``'s only predecessor -- most edges
  of a lowered pipeline (operator chains). For a chain edge ``v`` becomes ready exactly when ``t``
  ends, at ``max(0, end) == end`` when no duration is negative, so the loop pushes ``(end, v)``
  without touching in-degree or ready arrays; ``ready[v]`` is filled in afterwards, vectorized
  (``end = start + duration`` is the same IEEE addition as in the loop). Any negative or NaN
  duration disables chain edges: every task then takes the general path, exactly the plain loop.
* The task pushed last in an iteration is not pushed; the next iteration calls
  ``heapq.heappushpop`` with it, which returns ``min(item, heap[0])`` -- what a push followed by a
  pop returns -- with one sift instead of two (keys are unique because ids are).
* Sources (in-degree 0) all have key ``(0.0, id)``; instead of heapifying all of them, only the
  lowest unpopped one is in the heap, and popping source ``k`` pushes source ``k + 1``. The other
  sources are larger than the one in the heap, so they could not have been popped earlier.
* Per-task inputs and outputs live in ``array.array`` buffers (8 bytes each, no per-element Python
  objects): results come back as zero-copy numpy views, and the loop keeps few live objects.
* Graphs with few chain edges (fewer than half the tasks: random DAGs, wide fan-in / fan-out, many
  zero durations) run :func:`_run_general` instead: the plain loop on flat Python lists (list reads
  hand out cached objects where ``array`` reads box a new int / float per element) with the
  push-pop shortcut, and the sources as a sorted stream merged with the heap. Measured ~1.0-1.05x the plain loop there, against 0.82-0.93x for
  the chain loop (``python -m benchmarks.engine``).
* ``kernel="numba"`` (optional extra ``fast``): the plain loop compiled (simulator/engine/kernels_numba.py),
  ~10x faster, identical results (tests/test_engine_numba.py); the pure-Python loops stay the
  reference. ``kernel="auto"`` (the default) takes the compiled loop when numba is installed and the
  graph is big enough to pay for importing it (:mod:`taskgraph.compiled`; ``EXECSIM_KERNEL=python``
  forces the Python loops, ``=numba`` the compiled ones).
* The garbage collector is disabled around the loop (shared/notes/engine-measurements.md: 0-90 %
  faster with many live objects).

Measured with ``python -m benchmarks.engine`` (2 noisy vCPUs, CPython 3.11): on 1F1B pipeline graphs
of 1e6-3e6 tasks ~2.0-2.6 M tasks/s (the plain loop: 0.65-0.9 M tasks/s as this module used to be,
1.2-1.4 M tasks/s as a bare loop returning lists); on random DAGs with 2 edges per task, where heap
operations dominate, ~0.6-0.7 M tasks/s (plain: 0.4-0.6). Peak memory ~93-110 bytes per task
(tracemalloc), against ~210-260 before. Exactness is tested against the plain loop
(tests/test_engine.py) and against an independent SimPy model (simulator/engine/reference_simpy.py,
tests/test_engine_differential.py).
"""
from __future__ import annotations

import gc
import heapq
from array import array
from dataclasses import dataclass

import numpy as np

import taskgraph.compiled as _registry
from strategies.errors import SimulationError


@dataclass
class SimResult:
    """Per-task times (seconds) and the global pop order of one simulation.

    ready, start, end: float64 arrays indexed by task id.
    order: task ids in the order the engine popped them (int32).
    makespan: latest end time (0.0 for an empty graph).
    """

    ready: np.ndarray
    start: np.ndarray
    end: np.ndarray
    order: np.ndarray
    makespan: float


def as_index_array(x) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype.kind not in "iu":
        a = a.astype(np.int64)  # e.g. an empty Python list becomes float64
    return a.reshape(-1)


def simulate_arrays(duration, device, succ_ptr, succ_idx, num_devices: int, describe=None, *,
                    kernel: str = "auto") -> SimResult:
    """Run the FIFO engine on raw arrays. ``describe(t)`` names a task in deadlock errors.

    duration: seconds per task; device: device index per task (``< num_devices``);
    succ_ptr, succ_idx: successors in CSR form (task ``t``'s successors are
    ``succ_idx[succ_ptr[t]:succ_ptr[t+1]]``; duplicate edges are allowed).
    kernel: ``"auto"`` (default: the compiled loop when numba is installed and the graph is big
    enough to pay for loading it, :mod:`taskgraph.compiled`; ``EXECSIM_KERNEL=python`` forces the
    Python loop), ``"python"`` (the reference) or ``"numba"`` (optional extra ``fast``: the same loop
    compiled, :mod:`simulator.engine.kernels_numba`; identical results, tested).
    """
    dur = np.ascontiguousarray(duration, dtype=np.float64).reshape(-1)
    n = int(dur.shape[0])
    ptr = as_index_array(succ_ptr)
    idx = as_index_array(succ_idx)
    if ptr.shape[0] != n + 1 or (n and (ptr[0] != 0 or ptr[-1] != idx.shape[0])):
        raise ValueError(f"succ_ptr has {ptr.shape[0]} entries for {n} tasks and {idx.shape[0]} edges; "
                         f"it must have n + 1 = {n + 1}, start at 0 and end at the number of edges")
    if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= n):
        raise ValueError(f"succ_idx holds a task id outside [0, {n})")
    if n == 0:
        empty = np.zeros(0, dtype=np.float64)
        return SimResult(ready=empty, start=empty.copy(), end=empty.copy(),
                         order=np.zeros(0, dtype=np.int32), makespan=0.0)

    dev_np = np.asarray(device).reshape(-1)
    if dev_np.shape[0] != n:
        raise ValueError(f"device has {dev_np.shape[0]} entries for {n} tasks")
    if kernel == "auto":
        kernel = "numba" if compiled_kernel("run_numba", n * PYTHON_S_PER_TASK) is not None else "python"
    if kernel == "numba":
        from simulator.engine.kernels_numba import run_numba  # optional extra ``fast``

        order_a, ready_a, start_a, indeg_left = run_numba(dur, dev_np, ptr, idx, max(num_devices, 1))
        if order_a.shape[0] < n:
            raise SimulationError(_deadlock_message(n, order_a, indeg_left.tolist(), dev_np.tolist(), describe))
        end_a = start_a + dur
        return SimResult(ready=ready_a, start=start_a, end=end_a, order=order_a.astype(np.int32),
                         makespan=float(end_a.max()))
    if kernel != "python":
        raise ValueError(f"kernel {kernel!r} is not one of 'auto', 'python', 'numba'")
    plan = successor_plan(dur, ptr, idx)
    dev = dev_np.tolist()  # small ints: cached objects, 8 bytes each
    sources = plan.sources.tolist()
    free = [0.0] * max(num_devices, 1)
    order = array("q")
    start = array("d", [0.0]) * n
    general = plan.general
    if general:
        # lists: reads hand out cached objects where array reads box a new int / float per element
        # (the chain loop's array tables cost 5-10 % on graphs with few chain edges, measured with
        # python -m benchmarks.engine)
        durs = dur.tolist()
        cptr = ptr.tolist()
        if idx.shape[0] >= SHARED_IDS_MIN_DEGREE * n:
            # many edges per task: successor ids as shared int objects (one per task, gathered from
            # an object array) instead of one new int per edge: ~30 fewer bytes per edge and faster
            # to build and free (1.1x the plain loop instead of 0.95x, half the memory, on the fanout
            # DAG of python -m benchmarks.engine, 14 edges per task). With ~2 edges per task the
            # per-edge ints of idx.tolist() lie in list order in memory and the loop reads them
            # faster than scattered shared ones (0.9x instead of 1.0x on the random DAG).
            cidx = np.arange(n, dtype=np.int64).astype(object)[idx].tolist()
        else:
            cidx = idx.tolist()
        indeg = plan.indeg.tolist()
        ready = [0.0] * n
        del plan.code, plan.gptr, plan.gsucc
    else:
        durs = array("d", dur.tobytes())
        code = array("q", plan.code.tobytes())
        gptr = array("q", plan.gptr.tobytes())
        gsucc = array("q", plan.gsucc.tobytes())
        indeg = plan.indeg.tolist()  # mostly small ints; mutated by the loop
        num_general = plan.num_general
        del plan.code, plan.gptr, plan.gsucc
        ready = array("d", [0.0]) * n

    if general:
        # The garbage collector stays on: this loop frees every heap tuple it makes, so few
        # collections run during it, whereas switching it off defers one that then traverses the big
        # input lists (~5 % of a 1e5-task run, python -m benchmarks.engine)
        _run_general(durs, dev, cptr, cidx, indeg, sources, ready, start, free, order)
        del durs, cptr, cidx  # before the outputs are allocated: a lower peak
    else:
        gc_was_enabled = gc.isenabled()
        gc.disable()  # measured 0-90 % faster with many live objects (shared/notes/engine-measurements.md)
        try:
            _run(durs, dev, code, gptr, gsucc, indeg, sources, num_general, ready, start, free, order)
        finally:
            if gc_was_enabled:
                gc.enable()

    if len(order) < n:
        raise SimulationError(_deadlock_message(n, np.frombuffer(order, dtype=np.int64), indeg, dev, describe))
    del indeg, dev
    start_a = np.frombuffer(start, dtype=np.float64)
    if general:
        ready_a = np.array(ready, dtype=np.float64)
        del ready
    end_a = start_a + dur  # the loop's ``e = s + dur[t]``: the same IEEE-754 double addition
    if not general:
        ready_a = np.frombuffer(ready, dtype=np.float64)
        if plan.chain_src is not None:
            ready_a[plan.chain_dst] = end_a[plan.chain_src]  # chain successor: ready = its only pred's end
    return SimResult(
        ready=ready_a,
        start=start_a,
        end=end_a,
        order=np.frombuffer(order, dtype=np.int64).astype(np.int32),
        makespan=float(end_a.max()),
    )


#: module-qualified name -> compiled function, or None without numba: the one registry of compiled
#: helpers (:mod:`taskgraph.compiled`); ``benchmarks/search.py`` and the tests set entries to None.
COMPILED = _registry.COMPILED
#: the module of the engine's compiled helpers (their registry keys: :func:`kernel_key`)
KERNELS = "simulator.engine.kernels_numba"


def kernel_key(name: str) -> str:
    """The registry key (:data:`COMPILED`) of the engine's compiled helper ``name``."""
    return _registry.qualified(name, KERNELS)


def compiled_kernel(name: str, work: float = float("inf")):
    """``simulator.engine.kernels_numba.<name>`` when numba is installed (optional extra ``fast``) and
    ``work`` seconds of Python loop make it pay, else None (:func:`taskgraph.compiled.compiled_kernel`)."""
    return _registry.compiled_kernel(name, KERNELS, work)


#: Edges per task from which the general loop reads successor ids as shared int objects (see
#: simulate_arrays; measured at 2 edges per task: slower, and at 14: faster).
SHARED_IDS_MIN_DEGREE = 4

#: Seconds per task of the Python engine loop (~1 M tasks/s, docs/changelog-performance.md): the work a
#: ``kernel="auto"`` run reports to the registry.
PYTHON_S_PER_TASK = 1e-6


def simulate(graph, *, kernel: str = "auto") -> SimResult:
    """Simulate a :class:`taskgraph.graph.TaskGraph` in full mode (``kernel``: see :func:`simulate_arrays`)."""
    return simulate_arrays(graph.duration, graph.device, graph.succ_ptr, graph.succ_idx,
                           graph.num_devices, describe=graph.describe, kernel=kernel)


class _Plan:
    """Successor tables for :func:`_run` (see :func:`successor_plan`)."""

    __slots__ = (
        "chain_dst",
        "chain_src",
        "code",
        "general",
        "gptr",
        "gsucc",
        "indeg",
        "num_general",
        "sources",
    )


def successor_plan(dur: np.ndarray, ptr: np.ndarray, idx: np.ndarray) -> _Plan:
    """Classify every task's successors (vectorized).

    ``code[t]``:
      ``>= 0``  -- the chain successor ``v`` of ``t`` (``t -> v`` is ``t``'s only out-edge and ``v``'s
                   only in-edge; only when no duration is negative or NaN);
      ``-1``    -- ``t`` has no successors and is not a source;
      ``-2 - k`` -- general: successors ``gsucc[gptr[k]:gptr[k+1]]``; ``k >= num_general`` means
                   ``t`` is source number ``k - num_general`` (sources in id order).
    """
    n = dur.shape[0]
    cnt = np.diff(ptr)
    if cnt.size and int(cnt.min()) < 0:
        raise ValueError("succ_ptr must be non-decreasing")
    indeg = np.bincount(idx, minlength=n)
    is_src = indeg == 0
    p = _Plan()
    p.chain_src = p.chain_dst = None
    if 2 * int(np.count_nonzero(cnt == 1)) < n:  # chain tasks <= single-successor tasks: general loop
        p.general = True
        p.code = p.gptr = p.gsucc = None
        p.indeg, p.sources, p.num_general = indeg, np.flatnonzero(is_src), 0
        return p
    chain = None
    if idx.size and bool(np.all(dur >= 0.0)):  # False if any NaN
        first = idx[np.minimum(ptr[:-1], idx.size - 1)]
        chain = (cnt == 1) & (indeg[first] == 1) & ~is_src
        p.chain_src = np.flatnonzero(chain)
        p.chain_dst = first[p.chain_src]
        general = (cnt > 0) & ~chain & ~is_src
    else:
        general = (cnt > 0) & ~is_src
    src_ids = np.flatnonzero(is_src)
    n_chain = 0 if p.chain_src is None else int(p.chain_src.shape[0])
    p.general = 2 * n_chain < n  # few chain edges (random DAGs, wide fan-in/out): the list loop
    if p.general:
        p.code = p.gptr = p.gsucc = None
        p.indeg, p.sources, p.num_general = indeg, src_ids, 0
        return p
    gen_ids = np.flatnonzero(general)
    G = int(gen_ids.shape[0])
    code = np.full(n, -1, dtype=np.int64)
    if chain is not None:
        code[p.chain_src] = p.chain_dst
    code[gen_ids] = -2 - np.arange(G, dtype=np.int64)
    code[src_ids] = -2 - G - np.arange(src_ids.shape[0], dtype=np.int64)
    gptr = np.zeros(G + src_ids.shape[0] + 1, dtype=np.int64)
    np.cumsum(np.concatenate([cnt[gen_ids], cnt[src_ids]]), out=gptr[1:])
    # successors of general tasks, then of sources, each group in id order (CSR slices kept in order)
    gsucc = np.concatenate([idx[np.repeat(general, cnt)], idx[np.repeat(is_src, cnt)]]).astype(np.int64)
    p.code, p.gptr, p.gsucc, p.indeg, p.sources, p.num_general = code, gptr, gsucc, indeg, src_ids, G
    return p


def _run(dur, dev, code, gptr, gsucc, indeg, sources, G, ready, start, free, order) -> None:
    """The hot loop. Fills ``start``, ``ready`` (except chain successors) and ``order`` in place."""
    if not sources:
        return
    pop = heapq.heappop
    push = heapq.heappush
    pushpop = heapq.heappushpop
    append = order.append
    ns = len(sources)
    heap: list = []
    item = (0.0, sources[0])
    while True:
        r, t = item
        append(t)
        d = dev[t]
        s = free[d]
        if r > s:
            s = r
        e = s + dur[t]
        free[d] = e
        start[t] = s
        v = code[t]
        if v >= 0:  # chain edge: v is ready at e exactly
            item = pushpop(heap, (e, v))
            continue
        if v != -1:
            k = -2 - v
            if k >= G:  # a source: bring the next source into the heap
                i = k - G + 1
                if i < ns:
                    push(heap, (0.0, sources[i]))
            nxt = None
            for w in gsucc[gptr[k]:gptr[k + 1]]:
                rw = ready[w]
                if e > rw:
                    ready[w] = rw = e
                c = indeg[w] - 1
                indeg[w] = c
                if c == 0:
                    if nxt is not None:
                        push(heap, nxt)
                    nxt = (rw, w)
            if nxt is not None:
                item = pushpop(heap, nxt)
                continue
        if heap:
            item = pop(heap)
        else:
            return


def _run_general(dur, dev, ptr, idx, indeg, sources, ready, start, free, order) -> None:
    """The plain loop on flat lists, with two exact shortcuts. Fills ``start``, ``ready``, ``order``.

    * Push + pop as one ``heappushpop`` (as :func:`_run`).
    * The sources are not in the heap: they are a stream sorted by key ``(0.0, id)``, merged with it.
      While sources remain, the next one competes with the heap's root: it pops unless the root is
      smaller (a task that became ready at 0.0 with a lower id: zero or negative durations), and a
      newly ready successor is pushed (its key is usually large: a short sift). Merging a sorted
      stream with a heap by their heads pops the same sequence as a heap holding them all. Keeping
      the next source in the heap instead (:func:`_run`'s scheme) cost two full-depth sifts per
      source, since its key is the smallest: on random DAGs, where 14 % of the tasks are sources,
      ~10 % of the loop (python -m benchmarks.engine).
    """
    if not sources:
        return
    pop = heapq.heappop
    push = heapq.heappush
    pushpop = heapq.heappushpop
    append = order.append
    ns = len(sources)
    heap: list = []
    si = 1  # sources[si] is the next source to pop
    item = (0.0, sources[0])
    while True:
        r, t = item
        append(t)
        d = dev[t]
        s = free[d]
        if r > s:
            s = r
        e = s + dur[t]
        free[d] = e
        start[t] = s
        nxt = None
        for w in idx[ptr[t]:ptr[t + 1]]:
            rw = ready[w]
            if e > rw:
                ready[w] = rw = e
            c = indeg[w] - 1
            indeg[w] = c
            if c == 0:
                if nxt is not None:
                    push(heap, nxt)
                nxt = (rw, w)
        if si < ns:  # the source stream against the heap's root
            if nxt is not None:
                push(heap, nxt)
            item = (0.0, sources[si])
            if heap and heap[0] < item:
                item = pop(heap)
            else:
                si += 1
        elif nxt is not None:
            item = pushpop(heap, nxt)
        elif heap:
            item = pop(heap)
        else:
            return


def _deadlock_message(n, order, indeg, dev, describe) -> str:
    done = np.zeros(n, dtype=bool)
    done[np.asarray(order, dtype=np.int64)] = True
    stuck = np.flatnonzero(~done)
    name = describe or (lambda t: f"task {t}")
    heads = {}
    for t in stuck.tolist():  # lowest unfinished id per device = its blocked head in program order
        heads.setdefault(dev[t], t)
    lines = [(f"simulation stuck: {len(stuck)} of {n} tasks can never start (a cycle in the task graph "
             f"or a schedule whose per-device order deadlocks). Blocked head task of each device:")]
    for d in sorted(heads):
        t = heads[d]
        lines.append(f"  device {d}: {name(t)} waits for {indeg[t]} unfinished predecessor(s)")
    return "\n".join(lines)
