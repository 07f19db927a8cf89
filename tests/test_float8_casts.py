"""torchao Float8Linear's amax / cast kernels under the torchtitan stacks (taskgraph/float8_casts.py),
by hand from torchao's kernel roofline (torchao/testing/float8/roofline_utils.py)."""
from __future__ import annotations

import pytest

from taskgraph.cost import op_time
from taskgraph.float8_casts import torchao_cast_cost
from taskgraph.model import get_model
from taskgraph.operators import GemmShape, layer_operators
from taskgraph.stacks import get_stack
from topologies.gpus import get_gpu

G = [GemmShape(64, 32, 16)]   # X 64x16 = 1024, dY 64x32 = 2048, W 16x32 = 512 elements
PASSES = ("fwd", "bwd_input", "bwd_weight")


def test_tensorwise_bytes_per_tensor_match_the_roofline():
    got = [torchao_cast_cost(G, p, "tensorwise", False) for p in PASSES]
    # X: amax 2 + cast 2 + 1 + 1; W: amax 2 + cast 3, again 3 in backward; dY like X in the input gradient
    assert got == [(6 * 1024 + 5 * 512, 6), (6 * 2048 + 3 * 512, 4), (0.0, 0)]
    assert sum(b for b, _ in got) == 6 * 1024 + 6 * 2048 + 8 * 512
    fused = [torchao_cast_cost(G, p, "tensorwise", True) for p in PASSES]   # torch.compile: amax read fused
    assert fused == [(4 * 1024 + 5 * 512, 5), (4 * 2048 + 3 * 512, 3), (0.0, 0)]


def test_rowwise_bytes_per_tensor_match_the_roofline_plus_the_rescales():
    got = [torchao_cast_cost(G, p, "rowwise", False) for p in PASSES]
    # X, dY: 5 then 3; W: 3, then transpose 4 + cast 3; dX and dW rescaled after cuBLAS (read 2, write 2)
    assert got == [(5 * 1024 + 3 * 512, 2), (4 * 1024 + 5 * 2048 + 7 * 512, 4), (3 * 1024 + 3 * 2048 + 4 * 512, 3)]
    fused = torchao_cast_cost(G, "fwd", "rowwise", True)
    assert fused == (3 * 1024 + 3 * 512, 2)


def test_op_time_adds_the_casts_on_torchtitan_only():
    gpu = get_gpu("H100-SXM-80GB")
    op = next(o for o in layer_operators(get_model("llama3-8b"), micro_batch=1, seq_len=4096) if o.name == "mlp_down")
    eff = gpu.efficiency
    for name, fused in (("torchtitan", False), ("torchtitan-compile", True)):
        stack = get_stack(name)
        for p in PASSES:
            plain = op_time(op, p, gpu, "fp8", stack=stack, quantize=False)
            b, k = torchao_cast_cost(op.gemms, p, "rowwise", fused)
            want = plain + b / (gpu.hbm_bandwidth * eff.elementwise_efficiency) + k * eff.launch_overhead
            assert op_time(op, p, gpu, "fp8", stack=stack, fp8_recipe="rowwise") == pytest.approx(want, rel=1e-12)
    # Transformer Engine's per-tensor scaling fuses its casts: no pass of its own
    assert op_time(op, "fwd", gpu, "fp8") == op_time(op, "fwd", gpu, "fp8", quantize=False)
