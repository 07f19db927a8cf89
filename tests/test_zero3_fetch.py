"""DeepSpeed's 2021 ZeRO-3 fetch (taskgraph/zero3_fetch.py, stacks.yaml [DS-Z3-2021]): every parameter
tensor gathered on its own behind a device synchronize, with one copy kernel per shard rank (tensors under
the persistence threshold once per step); counts and seconds by hand on a tiny GPT, their linear growth
with the shard group, and bad stack values."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strategies.errors import ConfigError
from strategies.strategy_file import parse_strategy
from taskgraph.costing import build_work
from taskgraph.model import ModelSpec
from taskgraph.operators import layer_operators
from taskgraph.overheads import host_bound, op_kernels
from taskgraph.plan import resolve
from taskgraph.stacks import get_stack, load_tables
from taskgraph.work import OpCost
from taskgraph.zero3_fetch import (
    PERSISTENCE_THRESHOLD,
    param_tensor_sizes,
    per_param_host_s,
    persistent_refresh_s,
)

# hidden 512: the four weights hold >= 100,000 elements (gathered each pass), the 4 biases and 4 LayerNorm
# tensors fewer (persistent), as GPT-3 175B's
GPT = ModelSpec(name="tiny-gpt", layers=2, hidden=512, heads=8, vocab=1024, ffn=2048)


def _ops(model=GPT):
    return layer_operators(model, micro_batch=1, seq_len=128, dtype_bytes=2, flash_attention=False)


def test_a_gpt_layer_has_twelve_parameter_tensors():
    # two LayerNorms (gain, bias) and four linear layers (weight, bias): qkv, attention out, fc1, fc2
    tensors = {o.name: param_tensor_sizes(o, GPT) for o in _ops() if param_tensor_sizes(o, GPT)}
    assert tensors == {"input_norm": [512, 512], "qkv": [512 * 1536, 1536], "attn_out": [512 * 512, 512],
                       "post_attn_norm": [512, 512], "mlp_up": [512 * 2048, 2048], "mlp_down": [2048 * 512, 512]}
    assert sum(n for v in tensors.values() for n in v) == sum(o.params for o in _ops())
    rms = ModelSpec(name="rms", layers=2, hidden=256, heads=4, vocab=1024, ffn=1024, norm="rmsnorm", bias=False)
    assert sum(len(param_tensor_sizes(o, rms)) for o in _ops(rms)) == 6   # 2 gains + 4 weights
    assert PERSISTENCE_THRESHOLD == 100_000


def test_hand_computed_host_time_two_layers_four_ranks():
    # per gathered tensor and pass: torch.zeros + own-shard copy_ + 4 copy-outs = 6 kernels x 10 us, one
    # NCCL call x 45 us: 105 us; 4 weights: 420 us per layer and pass; every one of the 12 gradients
    # likewise (bucket copy_, 4 copy-ins, partition copy_, one NCCL call): 1.26 ms per layer's backward
    serial, ahead = per_param_host_s(_ops(), GPT, 4, 10e-6, 45e-6)
    assert serial == pytest.approx((4 * 105e-6, 4 * 105e-6))
    assert ahead == pytest.approx((0.0, 12 * 105e-6))
    # the step of 2 layers, full recomputation: forward, recomputed forward and backward gather the
    # weights (3 x 2 x 4 = 24 gathers, 24 x 6 = 144 kernels, 24 NCCL calls); the 2 x 8 persistent
    # tensors are refreshed once after the optimizer step: 16 x (1 + 4) = 80 kernels and one NCCL call
    assert 3 * 2 * serial[0] == pytest.approx(144 * 10e-6 + 24 * 45e-6)
    assert persistent_refresh_s([_ops(), _ops()], GPT, 4, 10e-6, 45e-6) == pytest.approx(80 * 10e-6 + 45e-6)
    assert per_param_host_s(_ops(), GPT, 1, 10e-6, 45e-6) == ((0.0, 0.0), (0.0, 0.0))   # nothing sharded
    assert persistent_refresh_s([_ops()], GPT, 1, 10e-6, 45e-6) == 0.0


@given(st.integers(2, 4096), st.floats(1e-6, 1e-4), st.floats(0.0, 1e-4))
def test_host_time_grows_linearly_with_the_shard_group(n, host_s, coll_s):
    ops = _ops()

    def f(k):
        serial, ahead = per_param_host_s(ops, GPT, k, host_s, coll_s)
        return serial[0], ahead[1], persistent_refresh_s([ops], GPT, k, host_s, coll_s)

    a, b, c = f(n), f(n + 1), f(2 * n)
    # one copy kernel per rank and tensor: 4 gathered weights, 12 reduced gradients, 8 persistent tensors
    assert [y - x for x, y in zip(a, b)] == pytest.approx([4 * host_s, 12 * host_s, 8 * host_s])
    assert [y - x for x, y in zip(a, c)] == pytest.approx([4 * host_s * n, 12 * host_s * n, 8 * host_s * n])


def test_host_bound_adds_the_fetch_after_the_stretch_and_reduces_ahead():
    ops = _ops()
    costs = [OpCost(o.name, fwd=1e-3, bwd_input=1e-3, bwd_weight=1e-3) for o in ops]
    st_ = get_stack("deepspeed-zero3-2021")
    plain = host_bound(ops, costs, 10e-6, False, 45e-6, get_stack("megatron-te"))
    out = host_bound(ops, costs, 10e-6, False, 45e-6, st_, zero3=(GPT, 4))
    assert plain == tuple(costs)                                     # not host-bound: 1 ms per op
    fetch = 4 * 105e-6
    assert sum(c.fwd for c in out) == pytest.approx(sum(c.fwd for c in costs) + fetch)
    assert sum(c.bwd_input + c.bwd_weight for c in out) == pytest.approx(2 * len(ops) * 1e-3 + fetch)
    # 4096 ranks: the gradients' issue (12 x (4098 x 10 us + 45 us) = 492.3 ms) outlasts the GPU's backward,
    # which then takes the host's time, plus the weights' gathers the GPU waits out
    big = host_bound(ops, costs, 10e-6, False, 45e-6, st_, zero3=(GPT, 4096))
    # the layer's backward kernels (unfused attention: 4, host_bound's count)
    kernels_bwd = sum(4 if o.kind == "attention" else op_kernels(o, "bwd_input", st_) + op_kernels(o, "bwd_weight", st_)
                      for o in ops)
    reduce = 12 * (4098 * 10e-6 + 45e-6)
    bwd = sum(c.bwd_input + c.bwd_weight for c in big)
    assert bwd == pytest.approx(kernels_bwd * 10e-6 + reduce + 4 * (4098 * 10e-6 + 45e-6))


def _work(tmp_path, stack: str):
    doc = {"model": {"preset": "gpt3-175b", "layers": 2, "hidden": 1024, "heads": 8, "ffn": 4096},
           "cluster": {"preset": "dgx-a100-80g", "nodes": 1},
           "parallel": {"tp": 2, "pp": 1, "zero": 3}, "schedule": "1f1b",
           "training": {"micro_batch": 1, "global_batch": 16, "seq_len": 1024, "precision": "fp16"},
           "options": {"stack": stack}}
    return build_work(resolve(parse_strategy(doc, tmp_path)), fidelity="operator")


def test_plan_adds_the_fetch_to_each_layer_and_the_refresh_to_the_step(tmp_path):
    # tp 2 x 4 ZeRO-3 ranks on a DGX A100 (10 us per kernel, 45 us per NCCL call): each layer's forward
    # gains 4 weights x (6 x 10 us + 45 us) = 420 us over the same layer on Megatron's stack; the step's
    # optimizer work 2 layers x 8 persistent tensors x 5 kernels x 10 us + one NCCL call = 845 us
    base, ds = _work(tmp_path, "megatron-te").stages[0], _work(tmp_path, "deepspeed-zero3-2021").stages[0]

    def fwd(stage):
        return [sum(c.fwd for c in lw.ops) for lw in stage.layers if lw.name.startswith("layer")]

    assert len(fwd(ds)) == 2
    assert [d - b for d, b in zip(fwd(ds), fwd(base))] == pytest.approx([420e-6] * 2)
    assert ds.optimizer_s - base.optimizer_s == pytest.approx(845e-6)


@pytest.mark.parametrize("bad", ["yes", "1", "[true]"])
def test_bad_sync_fetch_is_one_clear_error(tmp_path, bad):
    p = tmp_path / "stacks.yaml"
    p.write_text(f"stacks:\n  x:\n    attention: catalog\n    zero3_sync_fetch: {bad}\n")
    with pytest.raises(ConfigError, match=r"stack 'x' zero3_sync_fetch = .* must be true or false"):
        load_tables(str(p))
