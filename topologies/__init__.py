"""execsim: topologies package."""
