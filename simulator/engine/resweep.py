"""Re-time a task graph after its durations changed, in the device order of a previous engine run,
and prove the result is the engine's.

The interference fixed point (``simulator/engine/interference.py``) runs the engine on one graph
with durations that moved by a few percent; tasks keep their device order (on the GPT-3 175B example
every device's order is unchanged, and all but the DP stream's tasks start the moment they are
ready). A sweep over the previous run's pop order ``pi`` computes, for each task,

    S(x) = max(E of x's predecessors on other devices, E(prev(x))),   E(x) = S(x) + dur(x)

with ``prev(x)`` the task before ``x`` on its device in ``pi`` -- the same IEEE operations as the
engine's ``s = max(ready, free[dev]); e = s + dur`` (predecessors on the device itself end no later
than ``prev(x)``: ends never decrease along a device). Then, with numpy, the ready times ``R`` (the
latest predecessor end, 0 without one) and three checks:

* ``E(x) == max(R(x), E(prev(x))) + dur(x)`` for every task (the model equations);
* along each device, keys ``(R, id)`` increase (``prev`` is the task before ``x`` in key order);
* every edge ``u -> v`` has ``key(u) < key(v)`` (canonical).

When all hold, Lemma 1 of ``simulator/engine/delta/__init__.py`` says the engine pops exactly the
key-sorted order and produces exactly these times, so the result is returned with that order
(bit-identical to :func:`simulator.engine.core.simulate`; tests/test_resweep.py). When one fails (a
device's order changed, zero-duration ties the old order breaks the other way, a negative or NaN
duration) it returns None and the caller runs the engine.

The same sweep runs the *first* run too (:func:`sweep_in_order`): in the order the lowering guesses
before any run (``graph.order_hint``, ``taskgraph/order_hint.py``: actions in a topological order, each
action's tasks in id order), after checking that the guess is a permutation; a guess that is not a
topological order is refused by the sweep itself (a read ahead of the loop, or the device and edge
checks contradict: :func:`plan_for_guess`). Everything that depends on the order and
not on the durations is a :class:`SweepPlan`; the interference fixed point keeps the accepted plan
and re-runs only its loop and checks in later rounds (a refused plan is dropped: the engine runs).

Measured on the GPT-3 175B / 1,024 GPU example (346,312 tasks, docs/changelog-performance.md): the plan
~0.05 CPU-s once, then ~0.05 per run (the loop ~0.025: no heap, no per-task tuple; the rest the
numpy checks and the key sort) against ~0.19 for the Python engine. With the engine's compiled
kernel loaded the caller runs the engine instead (``interference.with_interference``).
"""
from __future__ import annotations

import numpy as np

from simulator.engine.core import SimResult


def resweep(graph, prev: SimResult) -> SimResult | None:
    """The engine's result for ``graph`` (its current ``duration``) when each device keeps the task
    order of ``prev`` (an engine result on the same graph structure), else None (module doc)."""
    n = graph.num_tasks
    if n == 0 or prev.order.shape[0] != n:
        return None
    return SweepPlan(graph, prev.order.astype(np.int64)).run(graph.duration)


def sweep_in_order(graph, pi) -> SimResult | None:
    """The engine's result for ``graph`` when the engine's FIFO order on each device is the
    restriction of ``pi`` to it, else None; ``pi`` is a guess (the lowering's ``order_hint``): it is
    checked to be a permutation of the task ids, and the result is then checked as in
    :func:`resweep`, which also refuses every ``pi`` that is not a topological order
    (:func:`plan_for_guess`)."""
    plan = plan_for_guess(graph, pi)
    return plan.run(graph.duration) if plan is not None else None


def plan_for_guess(graph, pi) -> SweepPlan | None:
    """:class:`SweepPlan` of ``graph`` in the guessed order ``pi``, or None when ``pi`` is not a
    permutation of the task ids.

    That ``pi`` is a topological order is not checked here (it was, one gather per edge): a
    permutation with an edge ``u -> v`` and ``u`` after ``v`` in ``pi`` is refused by
    :meth:`SweepPlan.run` for any durations. If ``u`` and ``v`` are on different devices, the loop
    reads ``E`` at ``u``'s slot (``v``'s cross-device predecessor, or one of ``v``'s helpers reads
    it), which lies after the slot being computed: ``E`` is not that long yet and the read raises
    IndexError, which ``run`` answers with None. If they are on the same device, ``v`` comes
    before ``u`` on it, so the device check needs ``key(v) < key(u)`` (keys increase along each
    device, and the consecutive pairs chain) while the edge check needs ``key(u) < key(v)``: one
    fails. Tests: tests/test_resweep.py (by hand on both cases; any permutation of random DAGs)."""
    n = graph.num_tasks
    pi = np.asarray(pi, dtype=np.int64)
    if n == 0 or pi.shape != (n,) or int(pi.min()) < 0 or int(pi.max()) >= n:
        return None
    pos = np.full(n, -1, dtype=np.int64)
    pos[pi] = np.arange(n)
    if not bool(np.all(pos >= 0)):  # a repeated id leaves another one out
        return None
    return SweepPlan(graph, pi)


class SweepPlan:
    """The sweep of one graph structure in one topological order ``pi`` (module doc): everything
    that does not depend on the durations, so the interference fixed point re-times its rounds
    with :meth:`run` alone (the checks run every time: a plan is never trusted)."""

    __slots__ = (
        "a_l",
        "b_l",
        "dst",
        "edge_lt",
        "m",
        "n",
        "pair_lt",
        "pi",
        "prevdev",
        "px",
        "py",
        "slot",
        "src",
        "tsk",
    )

    def __init__(self, graph, pi: np.ndarray, src: np.ndarray | None = None):
        n = graph.num_tasks
        dev = np.asarray(graph.device)
        if src is None:
            src = np.repeat(np.arange(n, dtype=np.int64), np.diff(graph.succ_ptr))
        dst = np.asarray(graph.succ_idx, dtype=np.int64)
        # the previous task on each device in pi (-1 for the first): a stable sort of pi by device
        dpi = dev[pi]
        small = graph.num_devices < 65536  # 16-bit keys sort by radix
        by_dev = pi[np.argsort(dpi.astype(np.uint16) if small else dpi, kind="stable")]
        bounds = np.cumsum(np.bincount(dpi, minlength=graph.num_devices))
        same = np.ones(n - 1, dtype=bool)  # by_dev[i + 1] follows by_dev[i] on the same device
        same[bounds[(bounds > 0) & (bounds < n)] - 1] = False
        px, py = by_dev[:-1][same], by_dev[1:][same]
        prevdev = np.full(n, -1, dtype=np.int64)
        prevdev[py] = px
        # predecessors on other devices: one is read in the loop; a task with several gets helper
        # entries just before it that fold them into a running max (on a private slot, zero duration)
        cross = dev[src] != dev[dst]
        cu, cv = src[cross], dst[cross]
        cnt = np.bincount(cv, minlength=n)
        one = cnt[cv] == 1
        # sequence slots: 0 is "nothing" (E = 0.0); task pi[i] and its helpers follow in pi order
        many = cnt > 1
        o = np.argsort(cv[~one], kind="stable")
        hv, hu = cv[~one][o], cu[~one][o]  # tasks with several, grouped, and those predecessors
        nh = np.bincount(hv, minlength=n) if hv.size else np.zeros(n, dtype=np.int64)
        slot = np.empty(n, dtype=np.int64)  # after its own helpers and those of every task before it
        slot[pi] = 1 + np.arange(n) + np.cumsum(nh[pi])
        m = 1 + n + hv.size
        a_in = np.zeros(m, dtype=np.int64)    # slot read as the cross-device predecessor
        b_in = np.zeros(m, dtype=np.int64)    # slot read as the previous entry on the device
        ts = slot[pi]
        a_in[slot[cv[one]]] = slot[cu[one]]
        b_in[slot[py]] = slot[px]  # the previous task on the device (0 for a device's first: b_in is 0)
        if hv.size:
            # helper k of task t sits at slot[t] - nh[t] + k: it reads pred k and the helper before it
            first = np.cumsum(nh) - nh
            k = np.arange(hv.size) - first[hv]
            hs = slot[hv] - nh[hv] + k
            a_in[hs] = slot[hu]
            b_in[hs] = np.where(k > 0, hs - 1, 0)
            a_in[slot[many]] = slot[many] - 1  # the task reads its last helper
        # the loop's lists: an operand that is the entry just before (88 % of the entries on the GPT-3
        # example) is read as E[-1], the list's last item, the same float; the other operand takes the
        # first list. A maximum of floats >= +0.0 without NaN (run) is the same in either operand
        # order, and -1 and 0 are the interpreter's cached ints, so ``tolist`` creates about half as
        # many int objects (docs/changelog-performance.md)
        j = np.arange(m - 1)  # the slot before each entry (entry 1 + j)
        a, b = a_in[1:], b_in[1:]
        b_prev = b == j
        a_prev = ~b_prev & (a == j)
        self.a_l = np.where(a_prev, b, a).tolist()
        self.b_l = np.where(b_prev | a_prev, -1, b).tolist()
        # each entry's duration as one gather: task pi[i] at slot ts[i], a helper reads +0.0 (index n)
        tsk = np.full(m - 1, n, dtype=np.int64)
        tsk[ts - 1] = pi
        self.n, self.pi, self.tsk, self.m, self.slot = n, pi, tsk, m, slot
        self.src, self.dst, self.px, self.py, self.prevdev = src, dst, px, py, prevdev
        self.pair_lt, self.edge_lt = px < py, src < dst  # the id tie-breaks of the checks

    def run(self, duration) -> SimResult | None:
        """The engine's result for these durations, or None when a check fails (module doc)."""
        dur = np.asarray(duration, dtype=np.float64)
        if dur.shape != (self.n,) or not bool(np.all(dur >= 0.0)):  # NaN fails too
            return None
        E = [0.0]
        try:
            # the durations through a memoryview: each float is made as the loop reads it (the same
            # value as ``tolist`` gives; ~7 ms less per run on the GPT-3 example than building the list)
            for a, b, d in zip(self.a_l, self.b_l, memoryview(np.append(dur, 0.0)[self.tsk])):
                r = E[a]
                s = E[b]
                if r > s:
                    s = r
                E.append(s + d)
        except IndexError:  # a read ahead of the sweep: pi is not a topological order (plan_for_guess)
            return None
        end = np.fromiter(E, dtype=np.float64, count=self.m)[self.slot]
        # the latest predecessor end per task, 0.0 without one: the ends are >= +0.0 (sums of
        # durations checked >= 0 onto E = 0.0), so the maximum with the initial 0.0 changes none, and a
        # maximum is exact in any order (unbuffered ``maximum.at``: no sort of the edges by target)
        ready = np.zeros(self.n, dtype=np.float64)
        np.maximum.at(ready, self.dst, end[self.src])
        prevdev = self.prevdev
        start = np.maximum(ready, np.where(prevdev >= 0, end[np.maximum(prevdev, 0)], 0.0))
        if not np.array_equal(end, start + dur):
            return None
        rx, ry = ready[self.px], ready[self.py]
        if not bool(np.all((rx < ry) | ((rx == ry) & self.pair_lt))):
            return None
        ru, rv = ready[self.src], ready[self.dst]
        if not bool(np.all((ru < rv) | ((ru == rv) & self.edge_lt))):
            return None
        order = np.argsort(ready, kind="stable")  # the key-sorted order: ties in id order
        return SimResult(ready=ready, start=start, end=end, order=order.astype(np.int32),
                         makespan=float(end.max()))
