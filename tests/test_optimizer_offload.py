"""Megatron's CPU optimizer offload (options.optimizer_cpu_offload, optimizer_offload_fraction,
overlap_cpu_optimizer_d2h_h2d; cluster.host_memory_gbps): the step's closed forms, the iteration time
and GPU memory they change by hand-computed amounts, both fidelities, the Megatron importer."""
from __future__ import annotations

from types import SimpleNamespace as N

import pytest

from strategies.errors import ConfigError
from taskgraph.cpu_optimizer import CPU_ADAM_BYTES_PER_PARAM, cpu_offload_step_time
from taskgraph.overheads import adam_step_s


def _plan(f=1.0, overlap=False):
    o = N(optimizer_offload_fraction=f, overlap_cpu_optimizer_d2h_h2d=overlap)
    # host link 64 GB/s; 8 GPUs share 8 x 34 GB/s of DRAM: 34 GB/s each = 1 s per 1e9 parameters
    return N(strategy=N(options=o), cluster=N(host_link_bandwidth=64e9, host_memory_bandwidth=8 * 34e9, gpus_per_node=8))


def _step(plan, shard, gpu_adam_s, tensors):
    return cpu_offload_step_time(plan, shard, gpu_adam_s, tensors, 4, 2)   # fp32 gradients, bf16 weights


def test_serial_step_closed_form():
    # 16e9 parameters offloaded: gradients 16e9 x 4 B / 64 GB/s = 1 s, CPU 16 s, weights x 2 B = 0.5 s
    assert _step(_plan(), 16e9, 3.0, 4) == pytest.approx(17.5, rel=1e-12)
    # half offloaded: d 0.5, CPU 8 s beside the GPU's half (1.5 s), h 0.25
    assert _step(_plan(0.5), 16e9, 3.0, 4) == pytest.approx(0.5 + 8.0 + 0.25, rel=1e-12)
    # the GPU's half longer than the CPU's: d + g + h
    assert _step(_plan(0.5), 16e9, 30.0, 4) == pytest.approx(0.5 + 15.0 + 0.25, rel=1e-12)
    # nothing offloaded: the GPU step alone
    assert _step(_plan(0.0), 16e9, 3.0, 4) == 3.0


def test_overlapped_step_is_a_three_stage_pipeline():
    # 4 tensors: (1 + 16 + 0.5)/4 + 3/4 x 16 = 16.375 s, beside the GPU's part (none)
    assert _step(_plan(overlap=True), 16e9, 3.0, 4) == pytest.approx(17.5 / 4 + 12.0, rel=1e-12)
    # one tensor: no pipelining, the serial sum
    assert _step(_plan(overlap=True), 16e9, 3.0, 1) == pytest.approx(17.5, rel=1e-12)
    # many tensors: the CPU step alone
    assert _step(_plan(overlap=True), 16e9, 3.0, 10**6) == pytest.approx(16.0, rel=1e-5)


def _strategy(tmp_path, **options):
    from strategies.strategy_file import parse_strategy
    return parse_strategy({"model": {"preset": "llama3-8b", "layers": 2}, "cluster": {"preset": "dgx-h100", "nodes": 1},
                           "parallel": {"tp": 1, "pp": 1, "zero": 1},
                           "training": {"micro_batch": 1, "global_batch": 8, "seq_len": 1024},
                           # no SM interference: its fixed point stops within a tolerance of the
                           # makespan, which would blur the exact difference below
                           "options": {"overlap_interference": False, **options}}, tmp_path)


def test_iteration_and_memory_change_by_the_hand_computed_amounts(tmp_path):
    from simulator.api import simulate_strategy
    from taskgraph.memory import static_memory
    from taskgraph.plan import resolve
    base = _strategy(tmp_path)
    plan = resolve(base)
    from taskgraph.costing import build_work
    # parameters with gradients (what the optimizer steps), from the cost records: fp32 gradients
    P = sum(op.grad_bytes for layer in build_work(plan).stages[0].layers for op in layer.ops) / 4
    shard = P / 8                                         # ZeRO-1 over dp 8
    gpu = plan.cluster.gpu
    adam = adam_step_s(gpu, shard)                        # fused Adam + master copy (ZeRO-1, fp32 gradients)
    d, h = shard * 4 / 64e9, shard * 2 / 64e9             # fp32 gradients down, bf16 weights up (PCIe Gen5)
    c = shard * CPU_ADAM_BYTES_PER_PARAM / (614.4e9 / 8)  # DGX H100 DRAM over its 8 GPUs
    t0 = simulate_strategy(base).result.makespan
    for fid in ("operator", "coarse"):
        t1 = simulate_strategy(_strategy(tmp_path, optimizer_cpu_offload=True, fidelity=fid)).result.makespan
        assert t1 - t0 == pytest.approx(d + c + h - adam, rel=1e-9)   # the step ends the iteration at pp 1
    # memory: the offloaded share's 12 bytes of optimizer state per parameter leave the GPU
    states = static_memory(plan)[0]
    assert states.optimizer == pytest.approx(12 * states.params / 8)
    off = resolve(_strategy(tmp_path, optimizer_cpu_offload=True, optimizer_offload_fraction=0.25))
    assert static_memory(off)[0].optimizer == pytest.approx(0.75 * 12 * states.params / 8)


def test_options_apply_only_with_the_offload(tmp_path):
    with pytest.raises(ConfigError, match="optimizer_offload_fraction = 0.5 applies with"):
        _strategy(tmp_path, optimizer_offload_fraction=0.5)
    with pytest.raises(ConfigError, match=r"must be in \[0, 1\]"):
        _strategy(tmp_path, optimizer_cpu_offload=True, optimizer_offload_fraction=2)


ARGS = ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --global-batch-size 8 "
        "--vocab-size 100 --bf16 --use-distributed-optimizer --optimizer-cpu-offload --use-precision-aware-optimizer ")


def test_megatron_flags_import():
    # megatron/core/optimizer/optimizer_config.py: optimizer_offload_fraction defaults to 0.0
    from strategies.importers import import_config
    o = import_config("megatron", ARGS, cluster="dgx-h100", nodes=1).strategy["options"]
    assert (o["optimizer_cpu_offload"], o["optimizer_offload_fraction"]) == (True, 0.0)
    o = import_config("megatron", ARGS + "--optimizer-offload-fraction 1.0 --overlap-cpu-optimizer-d2h-h2d",
                      cluster="dgx-h100", nodes=1).strategy["options"]
    assert (o["optimizer_offload_fraction"], o["overlap_cpu_optimizer_d2h_h2d"]) == (1.0, True)
    with pytest.raises(ConfigError, match="needs --use-precision-aware-optimizer"):
        import_config("megatron", ARGS.replace("--use-precision-aware-optimizer ", ""), cluster="dgx-h100", nodes=1)
