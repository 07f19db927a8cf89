"""Measured operator and collective times: ``execsim profile`` (time every operator of a strategy's
graph with PyTorch on this machine) and ``execsim calibrate`` (read a real run's PyTorch profiler
traces). Both write the profile CSV that ``options.profile`` reads (``taskgraph/cost.py``,
:class:`~taskgraph.cost.ProfileTable`).

Modules: ``inventory`` (the distinct operators of a plan at their per-GPU shapes, with the cost
model's time: no PyTorch), ``timing`` (warm-up, median of N; CUDA events or ``perf_counter``),
``torch_ops`` (each operator kind built with PyTorch, three passes timed), ``collectives`` (a
``torch.distributed`` sweep at the sizes the simulation asks for), ``profile_csv`` (rows and the
CSV text), ``kineto`` (reading Kineto traces), ``kernels`` (kernel classes, mapping to operators),
``calibrate`` (measured vs simulated). PyTorch is an optional extra (``pip install '.[profile]'``);
only ``torch_ops``, ``timing`` and ``collectives`` import it, inside their functions.
"""
