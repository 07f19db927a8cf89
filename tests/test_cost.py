"""Cost model: exact roofline values on a hand-sized GPU (taskgraph/cost.py)."""
import pytest

from strategies.errors import ConfigError
from taskgraph.cost import op_time
from taskgraph.operators import gemm_operator
from topologies.gpus import gpu_from_dict, gpu_to_dict

US = 1e-6


def _gpu(tflops: float, overlap: bool | None):
    eff = dict(gemm_efficiency_max=1.0, gemm_efficiency_max_fp8=None, gemm_tile_m=64, gemm_tile_n=64,
               gemm_tile_k=32, attention_fwd_efficiency=0.5, attention_bwd_efficiency=0.5,
               hbm_efficiency=1.0, elementwise_efficiency=1.0, launch_overhead_us=0)
    if overlap is not None:
        eff["gemm_epilogue_overlap"] = overlap
    return gpu_from_dict("T1", {"tflops_bf16": tflops, "tflops_fp16": tflops, "tflops_fp8": None,
                                "tflops_tf32": tflops, "tflops_fp32": tflops, "hbm_gb": 1,
                                "hbm_bw_gbps": 1000, "nvlink_gbps": 100, "sm_count": 1, "efficiency": eff})


# One GEMM: 128 tokens x (64 -> 64). wgrad = [64 x 128] @ [128 x 64]: one 64x64 tile, 2*64*64*128 FLOPs.
# Bytes of the wgrad pass: read X (128x64) and dY (128x64), write dW (64x64), bf16: 40960 B.
# Accumulating into an fp32 main_grad instead of writing dW: read + write 4 B per element = 32768 B,
# in place of the 8192 B plain write.
OP = gemm_operator("fc", 0, 128, 64, 64, 2, params=64 * 64, saved=0)
FLOPS = 2 * 64 * 64 * 128


def test_compute_bound_wgrad_accumulation_serial_vs_overlapped_epilogue():
    comp = FLOPS / 1e12                       # 1 TFLOP/s, every quantization factor 1
    rest, acc = (40960 - 8192) / 1e12, 32768 / 1e12   # 1000 GB/s, efficiency 1
    ampere, hopper = _gpu(1, False), _gpu(1, True)
    assert op_time(OP, "bwd_weight", ampere) == pytest.approx(comp)            # no accumulation
    assert op_time(OP, "bwd_weight", ampere, grad_accum_bytes=4) == pytest.approx(comp + acc)
    assert op_time(OP, "bwd_weight", hopper, grad_accum_bytes=4) == pytest.approx(max(comp, rest + acc))
    assert op_time(OP, "bwd_weight", hopper, grad_accum_bytes=4) == pytest.approx(comp)
    # forward and input gradient are untouched by the accumulation
    for p in ("fwd", "bwd_input"):
        assert op_time(OP, p, ampere, grad_accum_bytes=4) == op_time(OP, p, ampere)


def test_memory_bound_wgrad_accumulation_enters_the_memory_term():
    hopper = _gpu(1000, True)                 # compute 1.05 ns << memory
    assert op_time(OP, "bwd_weight", hopper) == pytest.approx(40960 / 1e12)
    assert op_time(OP, "bwd_weight", hopper, grad_accum_bytes=4) == pytest.approx((32768 + 32768) / 1e12)
    # fp16 main_grad: read + write 2 B per element
    assert op_time(OP, "bwd_weight", hopper, grad_accum_bytes=2) == pytest.approx((32768 + 16384) / 1e12)


def test_epilogue_overlap_field_defaults_roundtrips_and_is_checked():
    assert _gpu(1, None).efficiency.gemm_epilogue_overlap is True
    g = _gpu(1, False)
    assert gpu_to_dict(g)["efficiency"]["gemm_epilogue_overlap"] is False
    with pytest.raises(ConfigError, match=r"'gemm_epilogue_overlap' = 'no' must be true or false"):
        _gpu(1, "no")


def test_catalog_epilogue_overlap_by_architecture():
    from topologies.gpus import get_gpu
    assert not get_gpu("a100").efficiency.gemm_epilogue_overlap
    assert not get_gpu("a100-40g").efficiency.gemm_epilogue_overlap
    assert get_gpu("h100").efficiency.gemm_epilogue_overlap
    assert get_gpu("h200").efficiency.gemm_epilogue_overlap
