"""Strategy search: the candidate space, fast evaluation and sweeps, exhaustive and MCMC search,
backends, search plots, and the per-layer recompute planner.
"""
