"""The ``execsim`` command line: the main parser and one module per command. Only this room prints and
exits.

Before numpy loads: OpenBLAS (numpy's BLAS in its wheels) starts a pool of worker threads, one per core,
when its library loads, unless ``OPENBLAS_NUM_THREADS`` says otherwise (OpenBLAS USAGE.md, "How can I
use OpenBLAS in multi-threaded applications?"). No command multiplies matrices (the one BLAS call,
``np.dot`` of two short vectors in ``topologies/fabric.py``, and ``np.polyfit`` of a few points run on
one thread either way), so a command sets it to 1 unless the user set it: the pool's start and its
buffers cost ~0.03-0.04 CPU-s of every run (docs/performance.md, "The GPT-3 example end to end").
"""
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
