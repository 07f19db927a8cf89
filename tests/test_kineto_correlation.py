"""Issue 41: on GPU traces a kernel's operator is found by its correlation id -- the runtime call
that launched it (``cudaLaunchKernel``; ``cudaGraphLaunch`` for every kernel of a CUDA graph) and the
innermost ``cpu_op`` around that call -- not by ``External id`` alone (HTA's sampled traces give
kernels another External id range than the operators: 0 of 602 kernels found theirs before)."""
from __future__ import annotations

import json
from pathlib import Path

from simulator.profiling.kernels import instances
from simulator.profiling.kineto import read_trace

DATA = Path(__file__).parent / "data" / "kineto_hta"


def test_kernels_of_a_real_trace_find_their_launching_operator():
    rt = read_trace(DATA / "sampled_rank-0.json.gz")
    with_op = [k for k in rt.kernels if k.op]
    assert len(rt.kernels) == 602 and len(with_op) == 594
    mm = [k for k in rt.kernels if k.op == "aten::mm"]
    assert mm and all(len(k.dims) == 2 and all(k.dims) for k in mm)


def _event(name, cat, ts, dur, tid, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def test_cuda_graph_kernels_take_the_operator_around_the_graph_launch(tmp_path):
    ev = [_event("ProfilerStep#1", "user_annotation", 0, 100, 1), _event("ProfilerStep#2", "user_annotation", 100, 100, 1),
          # an eager GEMM: its kernel names another External id than the operator's
          _event("aten::mm", "cpu_op", 10, 20, 1, **{"External id": 5, "Input Dims": [[64, 32], [32, 128]]}),
          _event("cudaLaunchKernel", "cuda_runtime", 12, 5, 1, correlation=70, **{"External id": 70}),
          _event("sm90_xmma_gemm_bf16", "kernel", 30, 8, 7, stream=7, correlation=70, **{"External id": 70}),
          # a CUDA graph replayed: two kernels, both with the launch's correlation
          _event("aten::cudagraph_replay", "cpu_op", 40, 30, 1, **{"External id": 6}),
          _event("cudaGraphLaunch", "cuda_runtime", 45, 10, 1, correlation=90),
          _event("ampere_gemm_128x64", "kernel", 60, 8, 7, stream=7, correlation=90),
          _event("vectorized_elementwise_kernel", "kernel", 70, 4, 7, stream=7, correlation=90),
          # the last step's kernel is dropped (HTA's filter), whatever its launch
          _event("cudaLaunchKernel", "cuda_runtime", 150, 5, 1, correlation=99),
          _event("late_kernel", "kernel", 160, 4, 7, stream=7, correlation=99)]
    (tmp_path / "rank0.json").write_text(json.dumps({"traceEvents": ev}))
    rt = read_trace(tmp_path / "rank0.json")
    ks = {k.name: k for k in rt.kernels}
    assert set(ks) == {"sm90_xmma_gemm_bf16", "ampere_gemm_128x64", "vectorized_elementwise_kernel"}
    assert (ks["sm90_xmma_gemm_bf16"].op, ks["sm90_xmma_gemm_bf16"].dims, ks["sm90_xmma_gemm_bf16"].ext) == \
        ("aten::mm", ((64, 32), (32, 128)), 5)
    graph = [ks["ampere_gemm_128x64"], ks["vectorized_elementwise_kernel"]]
    assert all(k.op == "aten::cudagraph_replay" and k.ext == -1 and k.correlation == 90 for k in graph)
    # each graph kernel is its own call (not one summed instance named after the first)
    assert sorted(i[0] for i in instances(rt.kernels)) == sorted(ks)
