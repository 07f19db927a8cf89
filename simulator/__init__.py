"""execsim: simulator package."""

#: the package version (pyproject.toml reads it: one place to bump)
__version__ = "0.1.0"
