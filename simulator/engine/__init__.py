"""The event engine and everything that runs a task graph: the FIFO engine (core), its compiled kernel,
delta mode, the SimPy reference, the static-order sweep, the timeline table and the one simulation
dispatch (lower + run).
"""
