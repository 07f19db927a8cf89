"""A whole training run over days: failures, checkpoints, restarts and goodput (SimPy), and its plot.
"""
