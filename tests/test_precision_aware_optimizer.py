"""Megatron-core's precision-aware optimizer (options.optimizer_dtypes; --use-precision-aware-optimizer with
--main-grads-dtype / --main-params-dtype / --exp-avg-dtype / --exp-avg-sq-dtype): bytes per parameter held
and moved by hand, the refusals, the Megatron importer, and both fidelities."""
from __future__ import annotations

import pytest

from strategies.errors import ConfigError
from taskgraph.overheads import FUSED_ADAM_BYTES_PER_PARAM, MASTER_COPY_BYTES_PER_PARAM, adam_step_s


def _strategy(tmp_path, precision="bf16", zero=1, training=None, **options):
    from strategies.strategy_file import parse_strategy
    return parse_strategy({"model": {"preset": "llama3-8b", "layers": 2}, "cluster": {"preset": "dgx-h100", "nodes": 1},
                           "parallel": {"tp": 1, "pp": 1, "zero": zero},
                           "training": {"micro_batch": 1, "global_batch": 8, "seq_len": 1024, "precision": precision,
                                        **(training or {})},
                           "options": {"overlap_interference": False, **options}}, tmp_path)


@pytest.mark.parametrize("precision, options, held, moved", [
    # bf16 weights, fp32 TE masters as int16 remainders (store_param_remainders): 2 + 4 + 4; the kernel
    # reads the fp32 gradient (4), the bf16 weight and remainder and writes both (8), two fp32 moments (16)
    ("bf16", {}, 10, 4 + 8 + 16),
    # bf16 moments are read and written by the kernel (fuse_unscale): 2 + 2 each
    ("bf16", {"exp_avg": "bf16", "exp_avg_sq": "bf16"}, 6, 4 + 8 + 8),
    # fp16 masters (unscale 2+4, mul 4+4, kernel 4+4 + weight 2, aminmax 4, mul 4+4, cast 4+2 = 42), an fp8
    # first moment (1+4, 8, 4, 4+1 = 22), a bf16 second moment alone (2+4, 8, 4+2 + 2+2 = 24), bf16 gradients
    ("bf16", {"main_grads": "bf16", "main_params": "fp16", "exp_avg": "fp8", "exp_avg_sq": "bf16",
              "fp32_grad_accum": False}, 2 + 1 + 2, 2 + 42 + 22 + 24),
    # the same with an fp32 second moment (read and written by the kernel: 8)
    ("bf16", {"main_params": "fp16", "exp_avg": "fp8"}, 2 + 1 + 4, 4 + 42 + 22 + 8),
    # an fp8 recipe other than delayed with fp32 main params: Megatron-core's own fp32 masters (4 + 4 + 4)
    ("fp8", {}, 12, 28),
    ("fp8", {"exp_avg": "bf16", "exp_avg_sq": "bf16"}, 8, 4 + 8 + 8),
    # ... which step gradients cast to fp32 (the cast is priced beside the master copy, as today)
    ("fp8", {"fp32_grad_accum": False}, 12, 28),
])
def test_bytes_per_parameter_held_and_moved(tmp_path, precision, options, held, moved):
    from taskgraph.costing import grad_bytes_per_param
    from taskgraph.memory import optimizer_state_bytes, static_memory
    from taskgraph.overheads import fused_adam_bytes
    from taskgraph.plan import resolve
    dtypes = {k: v for k, v in options.items() if k != "fp32_grad_accum"}
    extra = {"fp32_grad_accum": False} if "fp32_grad_accum" in options else {}
    if precision == "fp8":
        extra["fp8_recipe"] = "blockwise"
    plan = resolve(_strategy(tmp_path, precision, optimizer_dtypes=dtypes, **extra))
    assert optimizer_state_bytes(plan.strategy) == held
    assert fused_adam_bytes(plan.strategy, grad_bytes_per_param(plan)) == moved
    states = static_memory(plan)[0]
    assert states.optimizer == pytest.approx(held * states.params / 8)        # ZeRO-1 over dp 8
    assert states.grads == pytest.approx(grad_bytes_per_param(plan) * states.params)


def test_the_step_drops_the_master_copy_with_te_masters(tmp_path):
    from taskgraph.overheads import adam_step_of
    from taskgraph.plan import resolve
    base = resolve(_strategy(tmp_path))
    pa = resolve(_strategy(tmp_path, optimizer_dtypes={"exp_avg": "bf16", "exp_avg_sq": "bf16"}))
    gpu, eff = base.cluster.gpu, base.cluster.gpu.efficiency
    opt = getattr(eff, "optimizer_efficiency", None) or eff.hbm_efficiency
    n = 1e9
    assert adam_step_of(base, n, 4) == pytest.approx(adam_step_s(gpu, n))
    assert adam_step_of(base, n, 4) == pytest.approx(n * (FUSED_ADAM_BYTES_PER_PARAM / opt
                                                          + MASTER_COPY_BYTES_PER_PARAM / eff.hbm_efficiency)
                                                     / gpu.hbm_bandwidth)
    # the TE kernel writes the bf16 weight itself: 20 bytes, no separate copy
    assert adam_step_of(pa, n, 4) == pytest.approx(20 * n / (gpu.hbm_bandwidth * opt))


def test_iteration_and_memory_in_both_fidelities(tmp_path):
    from simulator.api import simulate_strategy
    dt = {"exp_avg": "bf16", "exp_avg_sq": "bf16"}
    t = {f: simulate_strategy(_strategy(tmp_path, optimizer_dtypes=dt, fidelity=f)).result.makespan
         for f in ("operator", "coarse")}
    assert t["coarse"] == pytest.approx(t["operator"], rel=0.02)
    t0 = simulate_strategy(_strategy(tmp_path)).result.makespan
    assert t["operator"] < t0       # the step streams 20 bytes instead of 28 + the 6-byte copy


@pytest.mark.parametrize("kwargs, match", [
    ({"optimizer_dtypes": {"exp_avg": "int8"}}, r"optimizer_dtypes.exp_avg = 'int8' is not one of"),
    ({"optimizer_dtypes": {"main_params": "bf16"}}, r"main_params = 'bf16' is not one of fp32, fp16"),
    ({"optimizer_dtypes": {"exp_avgs": "bf16"}}, r"exp_avgs"),
    ({"optimizer_dtypes": "bf16"}, r"must be a mapping"),
    ({"optimizer_dtypes": {}, "stack": "torchtitan"}, r"stack = 'torchtitan'.*set stack: megatron-te"),
    ({"optimizer_dtypes": {}, "zero": 0}, r"only with the distributed optimizer.*zero = 0"),
    ({"optimizer_dtypes": {"main_grads": "bf16"}}, r"main_grads = 'bf16' with options.fp32_grad_accum = true"),
    ({"optimizer_dtypes": {}, "training": {"master_weights": False}}, r"master_weights = false"),
])
def test_refusals_are_one_line(tmp_path, kwargs, match):
    with pytest.raises(ConfigError, match=match) as e:
        _strategy(tmp_path, **kwargs)
    assert "\n" not in str(e.value)


ARGS = ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --global-batch-size 8 "
        "--vocab-size 100 --bf16 --use-distributed-optimizer ")


def _import(args):
    from strategies.importers import import_config
    return import_config("megatron", ARGS + args, cluster="dgx-h100", nodes=1).strategy["options"]


def test_megatron_flags_import():
    assert "optimizer_dtypes" not in _import("")
    assert _import("--use-precision-aware-optimizer")["optimizer_dtypes"] == {}   # every dtype fp32
    o = _import("--use-precision-aware-optimizer --main-grads-dtype bf16 --main-params-dtype fp16 "
                "--exp-avg-dtype fp8 --exp-avg-sq-dtype fp32")
    assert o["optimizer_dtypes"] == {"main_grads": "bf16", "main_params": "fp16", "exp_avg": "fp8"}
    assert o["fp32_grad_accum"] is False       # bf16 main grads: the bf16 gradient buffer


@pytest.mark.parametrize("args, match", [
    ("--exp-avg-dtype bf16", r"--exp-avg-dtype bf16 needs --use-precision-aware-optimizer"),
    ("--use-precision-aware-optimizer --main-params-dtype bf16", r"--main-params-dtype = 'bf16' is not one of"),
    ("--use-precision-aware-optimizer --main-grads-dtype bf16 --accumulate-allreduce-grads-in-fp32",
     r"--main-grads-dtype bf16 with --accumulate-allreduce-grads-in-fp32"),
])
def test_megatron_import_refusals(args, match):
    with pytest.raises(ConfigError, match=match):
        _import(args)
