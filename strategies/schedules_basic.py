"""gpipe, 1f1b, interleaved-1f1b (Megatron-LM / PyTorch orders)."""
from strategies.schedules import register  # noqa: F401
