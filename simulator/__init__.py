"""execsim: simulator package."""
