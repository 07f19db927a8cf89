"""``execsim goodput``'s checkpoint size follows the optimizer state the memory model holds: the 16-bit
weights plus the masters and moments in the dtypes Megatron's distributed optimizer saves them
(``options.optimizer_dtypes``; taskgraph.memory.saved_optimizer_state_bytes)."""
from __future__ import annotations

import pytest

# the tiny model by hand: word embedding 128·64 + learned positions 2048·64, per layer two layernorms
# (2·128), qkv 64·192 + 192, out 64·64 + 64, fc1 64·256 + 256, fc2 256·64 + 64, the final layernorm 128
PARAMS = 128 * 64 + 2048 * 64 + 2 * (2 * 128 + 64 * 192 + 192 + 64 * 64 + 64 + 64 * 256 + 256 + 256 * 64 + 64) + 128


def _plan(tmp_path, dtypes, tp: int = 1):
    from strategies.strategy_file import parse_strategy
    from taskgraph.plan import resolve
    options = {} if dtypes is None else {"optimizer_dtypes": dtypes}
    return resolve(parse_strategy({"model": {"name": "tiny", "layers": 2, "hidden": 64, "heads": 4, "vocab": 128},
                                   "cluster": {"preset": "dgx-h100", "nodes": 1},
                                   "parallel": {"tp": tp, "pp": 1, "zero": 1},
                                   "training": {"micro_batch": 1, "global_batch": 8, "seq_len": 128},
                                   "options": options}, tmp_path))


@pytest.mark.parametrize("dtypes, per_param", [
    (None, 2 + 12),                                        # bf16 weight, fp32 master + two fp32 moments
    ({}, 2 + 2 + 4 + 4),                                   # TE masters as int16 remainders (store_param_remainders)
    ({"exp_avg": "bf16", "exp_avg_sq": "bf16"}, 2 + 2 + 2 + 2),   # bf16 moments saved as bf16
    # fp16 masters and an fp8 moment: get_unscaled_state returns them unscaled in fp32
    ({"main_params": "fp16", "exp_avg": "fp8"}, 2 + 4 + 4 + 4),
])
def test_checkpoint_bytes_follow_the_optimizer_dtypes(tmp_path, dtypes, per_param):
    from simulator.goodput.setup import checkpoint_bytes
    total, per_gpu = checkpoint_bytes(_plan(tmp_path, dtypes))
    assert PARAMS == 239360
    assert total == PARAMS * per_param
    assert per_gpu == pytest.approx(PARAMS * per_param / 8)      # dp 8 ranks share the sharded save


def test_saved_state_is_the_held_state_without_scaled_dtypes(tmp_path):
    from taskgraph.memory import optimizer_state_bytes, saved_optimizer_state_bytes
    for dtypes in (None, {}, {"exp_avg": "bf16", "exp_avg_sq": "bf16"}):
        s = _plan(tmp_path, dtypes).strategy
        assert saved_optimizer_state_bytes(s) == optimizer_state_bytes(s)
    s = _plan(tmp_path, {"main_params": "fp16", "exp_avg": "fp8"}).strategy
    assert (optimizer_state_bytes(s), saved_optimizer_state_bytes(s)) == (2 + 1 + 4, 12)


def test_tp_replicated_parameters_are_saved_once(tmp_path):
    # tp 2: the layernorms and the row-parallel biases sit on both TP ranks but are saved once; tp x a
    # GPU's share counted them twice (371,328 parameters for this model)
    from simulator.goodput.setup import checkpoint_bytes
    total, _ = checkpoint_bytes(_plan(tmp_path, None, tp=2))
    assert total == PARAMS * (2 + 12)
