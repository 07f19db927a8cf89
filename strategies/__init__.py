"""Parallel strategies and pipeline schedules (imports nothing from the other execsim packages)."""
