"""zb-h1, zb-v, dualpipe-v, looped-bfs (PyTorch pipelining orders)."""
from strategies.schedules import register  # noqa: F401
