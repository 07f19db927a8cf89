"""The measured cost model of delta mode (package doc, :mod:`simulator.engine.delta`, "Fallback"):
what a full run costs, and what the engine resumed from a sweep point costs (a fixed part plus a
part per task after the point), learned as changes run. The sweeps race it (:mod:`~simulator.engine.
delta.race`), the fallback uses it to choose between the resume and a full run."""
from __future__ import annotations

import math
from dataclasses import dataclass

from simulator.engine.delta import params


@dataclass(eq=False)
class CostModel:
    """Seconds, measured on this machine.

    full_run_s: the fastest full run so far (engine + state rebuild); inf before the first.
    full_run_tasks: the id space that run had (a change of more than 10 % forgets older timings).
    resume_fixed_s, resume_per_task_s: the resumed engine's expected time on ``k`` tasks after the
        sweep point is ``resume_fixed_s + resume_per_task_s * k``; the per-task part is seeded from
        the first full run (its time per task x 1.5; None before) and both are refined from every
        resume (:meth:`learn_resume`).
    """

    full_run_s: float = math.inf
    full_run_tasks: int = 0
    resume_fixed_s: float = 3e-4
    resume_per_task_s: float | None = None

    def record_full_run(self, seconds: float, tasks: int, live: int) -> None:
        """A full run over an id space of ``tasks`` (``live`` of them live) took ``seconds``."""
        if abs(tasks - self.full_run_tasks) * 10 > tasks:  # the graph changed size: forget older timings
            self.full_run_s = seconds
            self.full_run_tasks = tasks
        else:  # the fastest run seen: a slow (loaded) run must not inflate the budget
            self.full_run_s = min(self.full_run_s, seconds)
        if self.resume_per_task_s is None and live:
            self.resume_per_task_s = 1.5 * self.full_run_s / live

    def resume_s(self, tasks: int) -> float:
        """The resumed engine's expected time on ``tasks`` tasks after the sweep point."""
        return self.resume_fixed_s + (self.resume_per_task_s or 0.0) * tasks

    def alternative_s(self, tasks: int, live: int) -> float:
        """What giving up costs with ``tasks`` tasks after the sweep point (of ``live``): the resumed
        engine on them, when they are at most ``params.RESUME_MAX_SHARE`` of the live tasks and it is
        expected to be cheaper, else a full run."""
        est = self.full_run_s
        if tasks <= params.RESUME_MAX_SHARE * live:
            est = min(est, self.resume_s(tasks))
        return est

    def resume_costs_more(self, tasks: int, live: int) -> bool:
        """Is the plain full run the better fallback than resuming the engine on ``tasks`` tasks? When
        they are more than ``params.RESUME_MAX_SHARE`` of the ``live`` tasks, or the resume's cost
        model expects more than a full run (with ``RESUME_MAX_SHARE = 1`` the resume is always taken)."""
        return tasks > params.RESUME_MAX_SHARE * live or self.resume_s(tasks) > self.full_run_s

    def learn_resume(self, tasks: int, seconds: float) -> None:
        """Refine the resume's cost model from one measured resume of ``tasks`` tasks (half-life of
        one resume): the per-task part from large resumes, the fixed part from small ones."""
        per = self.resume_per_task_s or 0.0
        if tasks * per > self.resume_fixed_s:
            self.resume_per_task_s = 0.5 * per + 0.5 * max(seconds - self.resume_fixed_s, 0.0) / tasks
        else:
            self.resume_fixed_s = 0.5 * self.resume_fixed_s + 0.5 * max(seconds - tasks * per, 0.0)
