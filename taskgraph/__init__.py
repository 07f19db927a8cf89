"""execsim: taskgraph package."""
