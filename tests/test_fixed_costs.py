"""The Adam step and the Hopper memory-bound efficiencies measured on an H200
(taskgraph/overheads.py adam_step_s; topologies/data/gpus.yaml [HBM-H200])."""
from __future__ import annotations

import csv
from pathlib import Path

import pytest

from strategies.errors import ConfigError
from taskgraph.overheads import adam_step_s
from topologies.gpus import get_gpu, gpu_from_dict, gpu_to_dict

MEMBOUND = Path(__file__).resolve().parents[1] / "benchmarks/kernel_data/h200-2026-11-26/membound.csv"


def _membound() -> dict:
    with MEMBOUND.open() as f:
        return {r["kernel"]: float(r["gbps"]) for r in csv.DictReader(f)}


def test_hopper_figures_are_the_measured_fractions_of_the_h200_peak():
    rows, h200 = _membound(), get_gpu("h200")
    peak = h200.hbm_bandwidth / 1e9
    assert peak == 4800.0
    assert h200.efficiency.hbm_efficiency == round(rows["copy bf16"] / peak, 2) == 0.87
    assert h200.efficiency.optimizer_efficiency == round(rows["AdamW fused step fp32"] / peak, 2) == 0.72
    # the assumed transfer to the HBM3 GH100s; the HBM2e ones keep the A100 figure and no optimizer figure
    for name in ("H100-SXM-80GB", "H800-SXM-80GB", "H100-NVL-94GB", "H20-96GB"):
        e = get_gpu(name).efficiency
        assert (e.hbm_efficiency, e.optimizer_efficiency) == (0.87, 0.72), name
    for name in ("H100-PCIe-80GB", "H100-HBM2e-96GB", "A100-SXM-80GB"):
        e = get_gpu(name).efficiency
        assert (e.hbm_efficiency, e.optimizer_efficiency) == (0.85, None), name


def test_adam_step_hand_computed():
    # 1e9 parameters on an H100 SXM (3.35 TB/s): fused Adam 28 GB at 0.72 = 11.609 ms; Megatron's master
    # copy 6 GB at 0.87 = 2.059 ms; fp16 gradients add their fp32 cast, 6 GB more at 0.87
    h100 = get_gpu("h100")
    fused, copy = 28e9 / (3.35e12 * 0.72), 6e9 / (3.35e12 * 0.87)
    assert adam_step_s(h100, 1e9, master_copy=False) == pytest.approx(fused, rel=1e-12)
    assert adam_step_s(h100, 1e9) == pytest.approx(fused + copy, rel=1e-12)
    assert adam_step_s(h100, 1e9, grad_bytes=2) == pytest.approx(fused + 2 * copy, rel=1e-12)
    assert adam_step_s(h100, 1e9, master_copy=False, grad_bytes=2) == pytest.approx(fused, rel=1e-12)
    assert round((fused + copy) * 1e3, 3) == 13.667
    # a GPU without an optimizer figure streams all 34 bytes at hbm_efficiency (A100 80 GB: 2.039 TB/s, 0.85)
    a100 = get_gpu("a100")
    assert adam_step_s(a100, 1e9) == pytest.approx(34e9 / (2.039e12 * 0.85), rel=1e-12)


def test_optimizer_efficiency_is_checked():
    d = gpu_to_dict(get_gpu("h100"))
    assert gpu_from_dict("x", d).efficiency.optimizer_efficiency == 0.72
    d["efficiency"]["optimizer_efficiency"] = None
    assert gpu_from_dict("x", d).efficiency.optimizer_efficiency is None
    for bad in (1.5, 0, "fast"):
        d["efficiency"]["optimizer_efficiency"] = bad
        with pytest.raises(ConfigError, match="optimizer_efficiency"):
            gpu_from_dict("x", d)


def test_profile_models_the_optimizer_with_the_step_it_times(tmp_path):
    # execsim profile's modelled column for the optimizer row is the simulator's own step
    from simulator.profiling.measure import optimizer_items
    from strategies.strategy_file import parse_strategy
    from taskgraph.plan import resolve
    for zero in (1, 3):
        plan = resolve(parse_strategy({"model": {"preset": "llama3-8b", "layers": 2},
                                       "cluster": {"preset": "dgx-h100", "nodes": 1},
                                       "parallel": {"tp": 1, "pp": 1, "zero": zero}, "schedule": "1f1b",
                                       "training": {"micro_batch": 1, "global_batch": 8, "seq_len": 4096}}, tmp_path))
        [(n, _, modelled)] = optimizer_items(plan)
        assert modelled == adam_step_s(plan.cluster.gpu, n, True, 4)   # the default stack copies (DeepSpeed ZeRO-3)


def test_master_copy_by_stack_under_zero3(tmp_path):
    # below ZeRO-3 every stack copies; under ZeRO-3 DeepSpeed (and the default) copies its fp32 partition
    # back ([DS-Z3]), PyTorch FSDP (torchtitan, llm-foundry) casts at the gather instead ([FSDP])
    from strategies.strategy_file import parse_strategy
    from taskgraph.overheads import master_copy
    from taskgraph.plan import resolve

    def plan(zero, stack):
        return resolve(parse_strategy({"model": {"preset": "llama3-8b", "layers": 2},
                                       "cluster": {"preset": "dgx-h100", "nodes": 1},
                                       "parallel": {"tp": 1, "pp": 1, "zero": zero}, "schedule": "1f1b",
                                       "training": {"micro_batch": 1, "global_batch": 8, "seq_len": 4096},
                                       "options": {} if stack is None else {"stack": stack}}, tmp_path))
    want = {None: True, "megatron-te": True, "deepspeed": True, "torchtitan": False, "torchtitan-compile": False,
            "llm-foundry": False}
    for stack, copy in want.items():
        assert master_copy(plan(1, stack)) is True, stack
        assert master_copy(plan(3, stack)) is copy, stack


def test_bad_master_copy_flag_is_one_clear_error(tmp_path):
    from taskgraph.stacks import load_tables
    p = tmp_path / "stacks.yaml"
    p.write_text("stacks:\n  x:\n    attention: catalog\n    zero3_master_copy: sometimes\n")
    with pytest.raises(ConfigError, match=r"stack 'x' zero3_master_copy = 'sometimes' must be true or false"):
        load_tables(str(p))
