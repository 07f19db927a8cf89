"""NVFP4 training (training.precision fp4), the GB300 GPU and the gb300-nvl72 preset (issue 38 item 3):
hand-computed values on tiny cases."""
import pytest

from strategies.errors import ConfigError
from strategies.strategy_file import parse_strategy
from taskgraph.cost import NVFP4_ELEMENT_BYTES, NVFP4_QUANT_BYTES, op_time
from taskgraph.operators import gemm_operator
from taskgraph.plan import first_last_bf16, resolve
from topologies.cluster import get_cluster
from topologies.gpus import GIB, get_gpu, gpu_from_dict


def test_fp4_rates_from_the_datasheets():
    # [FP4] / [GB300]: half of NVIDIA's sparse FP4 figures per GPU
    assert get_gpu("b200").peak_flops("fp4") == 9000e12
    assert get_gpu("gb200").peak_flops("nvfp4") == 10000e12
    gb300 = get_gpu("gb300")
    assert gb300.name == "GB300-288GB"
    assert gb300.peak_flops("fp4") == 15000e12 and gb300.peak_flops("bf16") == 2500e12
    assert gb300.peak_flops("fp8") == 5000e12
    assert gb300.hbm_capacity == 288 * GIB and gb300.hbm_bandwidth == 8000e9 and gb300.power_w == 1400
    # no FP4 efficiency of its own: the FP8 one ([FP4EFF])
    assert gb300.gemm_efficiency("fp4") == gb300.gemm_efficiency("fp8")
    with pytest.raises(ConfigError, match="no fp4 Tensor Cores"):
        get_gpu("h100").peak_flops("fp4")


def test_gb300_nvl72_preset():
    c = get_cluster("gb300-nvl72", nodes=2)
    assert c.gpu.name == "GB300-288GB" and c.gpus_per_node == 72
    assert c.nic_bandwidth == 800e9 / 8 and c.nvlink_bandwidth == 900e9 and c.switch_radix == 144


def _gpu():
    eff = dict(gemm_efficiency_max=1.0, gemm_efficiency_max_fp8=0.5, gemm_efficiency_max_fp4=0.25,
               gemm_tile_m=64, gemm_tile_n=64, gemm_tile_k=32, attention_fwd_efficiency=0.5,
               attention_bwd_efficiency=0.5, hbm_efficiency=1.0, elementwise_efficiency=0.5, launch_overhead_us=1)
    return gpu_from_dict("T4", {"tflops_bf16": 1, "tflops_fp16": 1, "tflops_fp8": 2, "tflops_fp4": 4,
                                "tflops_tf32": 1, "tflops_fp32": 1, "hbm_gb": 1, "hbm_bw_gbps": 1000,
                                "nvlink_gbps": 100, "sm_count": 1, "efficiency": eff})


def test_nvfp4_gemm_time_by_hand():
    # 128 tokens x (64 -> 64): one 64x64 tile per pass, FP4 peak 4 TFLOP/s x efficiency 0.25 = 1 TFLOP/s
    op = gemm_operator("fc", 0, 128, 64, 64, 2, params=64 * 64, saved=0)
    gpu = _gpu()
    flops = 2 * 64 * 64 * 128
    gemm = flops / 1e12 + 1e-6                           # compute-bound, one launch
    assert op_time(op, "fwd", gpu, "fp4", quantize=False) == pytest.approx(gemm)
    # forward quantizes X (128 x 64) and dgrad dY (128 x 64): read for the amaxes, read again and write
    # the row-wise and column-wise E2M1 copies with E4M3 scales = 2 + 2 + 2 x 0.5625 B per element, at
    # the elementwise rate (1000 GB/s x 0.5), in two kernels; wgrad reads the cached copies
    assert NVFP4_QUANT_BYTES == 5.125
    quant = 128 * 64 * 5.125 / 500e9 + 2 * 1e-6
    assert op_time(op, "fwd", gpu, "fp4") == pytest.approx(gemm + quant)
    assert op_time(op, "bwd_input", gpu, "fp4") == pytest.approx(gemm + quant)
    assert op_time(op, "bwd_weight", gpu, "fp4") == pytest.approx(op_time(op, "bwd_weight", gpu, "fp4",
                                                                         quantize=False))
    # the output head stays BF16: 1 TFLOP/s x efficiency 1
    head = gemm_operator("lm_head", 0, 128, 64, 64, 2, params=64 * 64, saved=0)
    assert op_time(head, "fwd", gpu, "fp4") == op_time(head, "fwd", gpu, "bf16")


def test_bf16_layers_follow_the_paper_share_and_megatron_flags():
    assert first_last_bf16(62, "fp4", None, None) == (2, 8)      # the paper's 12B model
    assert first_last_bf16(80, "fp4", None, None) == (3, 10)
    assert first_last_bf16(4, "fp4", None, None) == (0, 1)
    assert first_last_bf16(80, "fp8", None, None) == (0, 0)      # Megatron-Bridge's default
    assert first_last_bf16(80, "fp8", 1, 2) == (1, 2)
    assert first_last_bf16(80, "bf16", 1, 2) == (0, 0)


def _strategy(precision="fp4", preset="dgx-b200", **options):
    return parse_strategy({"model": {"preset": "llama3-8b", "layers": 8}, "cluster": {"preset": preset, "nodes": 1},
                           "parallel": {"tp": 2, "pp": 2, "sp": True, "zero": 1},
                           "training": {"micro_batch": 1, "global_batch": 16, "seq_len": 2048,
                                        "precision": precision}, "options": options}, ".")


def test_bf16_layers_are_costed_in_bf16_and_save_bf16_inputs():
    from taskgraph.costing import build_work
    plan = resolve(_strategy(num_layers_at_start_in_bf16=1, num_layers_at_end_in_bf16=2))
    assert [li for li in range(8) if plan.layer_in_bf16(li)] == [0, 6, 7]
    work = build_work(plan)
    layers = {l.name: l for st in work.stages for l in st.layers}
    fp4, bf16 = layers["layer3"].ops, layers["layer7"].ops
    qkv4 = next(o for o in fp4 if o.name.endswith("qkv"))
    qkv16 = next(o for o in bf16 if o.name.endswith("qkv"))
    assert qkv4.fwd < qkv16.fwd
    # the GEMM inputs kept for backward: column-wise NVFP4 (0.5625 of bf16's 2 bytes) in FP4 layers
    assert qkv4.saved_bytes == pytest.approx(qkv16.saved_bytes * NVFP4_ELEMENT_BYTES / 2)


@pytest.mark.parametrize("preset,precision,options,match", [
    ("dgx-h100", "fp4", {}, "H100-SXM-80GB has no FP4 tensor cores"),
    ("dgx-b200", "bf16", {"fp4_recipe": "nvfp4"}, "options.fp4_recipe"),
    ("dgx-b200", "fp4", {"fp4_recipe": "mxfp4"}, "fp4_recipe"),
    ("dgx-b200", "bf16", {"num_layers_at_end_in_bf16": 2}, "num_layers_at_end_in_bf16"),
    ("dgx-b200", "fp4", {"num_layers_at_start_in_bf16": 5, "num_layers_at_end_in_bf16": 4}, "exceeds model.layers = 8"),
])
def test_bad_fp4_settings_are_refused_by_name(preset, precision, options, match):
    with pytest.raises(ConfigError, match=match):
        resolve(_strategy(precision, preset, **options))
