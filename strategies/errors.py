"""Exception tree shared by every execsim package (NetworkX-style: shallow, domain names).

``ExecsimError`` is the base; the CLI catches it and prints its message (no traceback).
Messages name the field, the offending value and how to fix it.
"""


class ExecsimError(Exception):
    """Base class of every error execsim raises on purpose."""


class ConfigError(ExecsimError, ValueError):
    """An input file or argument is malformed or infeasible (names field, value and fix)."""


class ScheduleError(ExecsimError, ValueError):
    """A pipeline schedule is malformed, incomplete, or not supported for the given sizes."""


class SimulationError(ExecsimError, RuntimeError):
    """The engine cannot finish: a cycle in the task graph or a deadlocked device order."""
