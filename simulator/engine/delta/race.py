"""The sweep's deadline checks (package doc, :mod:`simulator.engine.delta`, "Fallback"): at each one,
:class:`SweepRace` decides from the measured cost model whether the sweep goes on (and until when) or
gives up, handing the rest to the resumed engine or to a full run. One object per change, built by
``DeltaSimulator._delta``; the sweeps call :meth:`SweepRace.replan` when they pass a deadline."""
from __future__ import annotations

import math
import time

import numpy as np

from simulator.engine.delta import params
from simulator.engine.delta.stats import SweepAbort


class SweepRace:
    """The race of one change's sweep against its alternative (the engine resumed on the tasks after
    the sweep point, or a full run).

    sim: the :class:`~simulator.engine.delta.simulator.DeltaSimulator` (its queue keys, its cost model
        and its kernels are read; ``sim._rest_seen`` is written).
    t0: when the change began (seconds, ``time.perf_counter``).
    first_key: the ready time of the sweep's first event.
    compiled: the compiled sweep runs (its pace threshold, its automatic budget).
    budget: the simulator's ``budget``: a fraction of a full run, None or ``"auto"``.
    deadline: the first deadline (seconds), or ``inf`` with no budget.
    """

    def __init__(self, sim, t0: float, first_key: float, compiled: bool):
        self.sim = sim
        self.t0 = t0
        self.first_key = first_key
        self.compiled = compiled
        budget, self.project = sim.budget, False
        if budget == "auto":
            budget = params.AUTO_BUDGET_COMPILED if compiled else params.AUTO_BUDGET_PYTHON
            self.project = True  # the pace rule (package doc, "Fallback"), with each sweep's threshold
        if budget is None:
            self.cap = self.deadline = math.inf
        else:
            self.cap = t0 + budget * sim._cost.full_run_s
            # first look at the resume's cost once the sweep has spent a share of its fixed part
            self.deadline = min(self.cap, t0 + params.RESUME_RACE * sim._cost.resume_fixed_s)
        self.tasks_ahead: int | None = None  # the tasks after the first key (counted once)
        self.began = t0  # when the ordinary sweep began (after a static re-sweep that gave the change back)

    def replan(self, r, x, processed, work, since=None):
        """:meth:`plan`; its count of the tasks after (r, x) is kept for the resume only when it
        gives up there (the sweep going on changes the state)."""
        nxt = self.plan(r, x, processed, work, since)
        self.sim._rest_seen = None
        return nxt

    def _tasks_after(self, r) -> int:
        """The tasks whose queue key is after ``r`` (and, at the first check, after the first key)."""
        sim = self.sim
        lkv = np.frombuffer(sim._state.queue_key, dtype=np.float64)
        if sim._kernels is not None:  # both counts in one pass, no temporary (the first check needs both)
            first, rest = sim._kernels.count_after(lkv, self.first_key, r)
            if self.tasks_ahead is None:
                self.tasks_ahead = int(first)
            rest = int(rest)
        else:
            rest = int(np.count_nonzero(lkv > r))
            if self.tasks_ahead is None:
                self.tasks_ahead = int(np.count_nonzero(lkv > self.first_key))
        del lkv
        return rest

    def plan(self, r, x, processed, work, since=None):
        """The sweep passed its deadline at (r, x): give up (the engine resumes from here, or runs
        in full) or set the next deadline, from the measured cost model (package doc, "Fallback").
        ``since``: when the sweep itself started (the compiled sweep's set-up is not part of the
        race)."""
        sim, t0, cap, project = self.sim, self.t0, self.cap, self.project
        now = time.perf_counter()
        if since is None:  # the Python sweep: its own time, not a static re-sweep's before it
            since = self.began
        rest = self._tasks_after(r)
        # an abort from here leaves the sweep at (r, x) with the state as counted: the resume
        # takes this count instead of counting again (_resume)
        sim._rest_seen = (r, x, rest)
        swept = max(self.tasks_ahead - rest, 1)  # tasks the sweep point has passed
        # the alternative if the sweep gives up now: the engine resumed on the tasks after the
        # sweep point, or a full run, whichever is expected to be cheaper
        t_full = sim._cost.full_run_s
        est = sim._cost.alternative_s(rest, sim._n_live)
        if project and processed and (now - since) / processed * rest <= est:
            # the compiled sweep: even if every task after its point moves, at the rate measured
            # so far it finishes before the alternative would, so it goes on (checked again later)
            return now + 0.1 * est
        if project and swept >= params.PACE_MIN_SWEPT and est >= params.PACE_MIN_ALT * t_full:
            # the compiled sweep's pace through the timeline: it has passed ``swept`` tasks in key
            # order (re-timing some of them) in ``now - since``; at that pace the rest costs
            # ``pace``. Slower than the alternative: a change that re-times densely, give up now
            # rather than after a fixed share of a full run; faster: go on, within a bound
            pace = (now - since) * rest / swept
            k = params.PACE_ABORT if self.compiled else params.PACE_ABORT_PYTHON
            if pace > k * est:
                raise SweepAbort(f"the sweep had passed {swept} tasks in {1e3 * (now - since):.2f} ms: at that "
                                 f"pace the {rest} tasks after its point would take {1e3 * pace:.2f} ms, more than "
                                 f"{k:g} x the {1e3 * est:.2f} ms the engine is expected to take on "
                                 f"them", (r, x), processed)
            if now < cap and now - t0 + est <= (1.0 + params.PACE_WASTE) * t_full:
                return now + 0.1 * est
        if now >= cap:
            raise SweepAbort(f"time budget spent after {work} tasks", (r, x), processed)
        if now - since >= params.RESUME_RACE * est:
            raise SweepAbort(f"the sweep had cost {1e3 * (now - since):.2f} ms after {work} tasks, more than "
                             f"{params.RESUME_RACE} x the {1e3 * est:.2f} ms the engine is expected to take on the "
                             f"{rest} tasks after its point", (r, x), processed)
        # never more than (1 + FALLBACK_WASTE) full runs in all: the sweep so far plus the alternative
        limit = (1.0 + params.FALLBACK_WASTE) * t_full - est
        if now - t0 >= limit:
            raise SweepAbort(f"the sweep had cost {1e3 * (now - t0):.2f} ms after {work} tasks: with the "
                             f"{1e3 * est:.2f} ms the engine is expected to take on the {rest} tasks after its "
                             f"point, more than {1 + params.FALLBACK_WASTE:g} full runs", (r, x), processed)
        nxt = min(cap, since + params.RESUME_RACE * est, t0 + limit)
        if project and swept < params.PACE_MIN_SWEPT:  # too few tasks passed to judge the pace yet:
            nxt = min(nxt, now + (now - since))        # look again once it has run as long again
        return nxt
