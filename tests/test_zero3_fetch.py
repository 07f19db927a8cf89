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
from taskgraph.costing import build_work, comm_time
from taskgraph.model import ModelSpec
from taskgraph.operators import layer_operators
from taskgraph.overheads import host_bound, op_kernels
from taskgraph.plan import resolve
from taskgraph.stacks import get_stack, load_tables
from taskgraph.work import OpCost
from taskgraph.zero3_fetch import (
    PERSISTENCE_THRESHOLD,
    layer_sync_collectives,
    param_tensor_sizes,
    per_param_host_s,
    persistent_refresh_s,
    sync_fetch_collectives,
)
from topologies.collectives import collective_time

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


def _plan(tmp_path, stack: str, tp: int = 2, nodes: int = 1, **par):
    doc = {"model": {"preset": "gpt3-175b", "layers": 2, "hidden": 1024, "heads": 8, "ffn": 4096},
           "cluster": {"preset": "dgx-a100-80g", "nodes": nodes},
           "parallel": {"tp": tp, "pp": 1, "zero": 3, **par}, "schedule": "1f1b",
           "training": {"micro_batch": 4, "global_batch": 32 * nodes, "seq_len": 1024, "precision": "fp16"},
           "options": {"stack": stack}}
    return resolve(parse_strategy(doc, tmp_path))


def _work(tmp_path, stack: str, tp: int = 2, nodes: int = 1, **par):
    return build_work(_plan(tmp_path, stack, tp, nodes, **par), fidelity="operator")


def test_plan_adds_the_fetch_to_each_layer_and_the_refresh_to_the_step(tmp_path):
    # tp 2 x 4 ZeRO-3 ranks on a DGX A100 (10 us per kernel, 45 us per NCCL call): each layer's forward
    # gains 4 weights x (6 x 10 us + 45 us) = 420 us over the same layer on Megatron's stack, and the fill
    # kernels of torch.zeros the synchronizes wait out: the TP shard's 12 h^2 / 2 weight elements x 2 B at the
    # GPU's streaming rate; the step's optimizer work 2 layers x 8 persistent tensors x 5 kernels x 10 us +
    # one NCCL call = 845 us
    plan = _plan(tmp_path, "megatron-te")
    base, ds = _work(tmp_path, "megatron-te").stages[0], _work(tmp_path, "deepspeed-zero3-2021").stages[0]

    def fwd(stage):
        return [sum(c.fwd for c in lw.ops) for lw in stage.layers if lw.name.startswith("layer")]

    gpu = plan.cluster.gpu
    fill = 12 * 1024 ** 2 / 2 * 2 / (gpu.hbm_bandwidth * gpu.efficiency.hbm_efficiency)
    assert len(fwd(ds)) == 2
    assert [d - b for d, b in zip(fwd(ds), fwd(base))] == pytest.approx([420e-6 + fill] * 2)
    assert ds.optimizer_s - base.optimizer_s == pytest.approx(845e-6)


def test_each_tensor_is_its_own_collective_hand_computed():
    # sync_fetch_collectives on the tiny GPT's layer, 8 ranks, 10 us per copy kernel (window 80 us), with
    # made-up call times: a weight's all-gather 300 us, reduce-scatter 500 us; a persistent tensor's 100 us
    ops = _ops()
    bwd = [1e-4 * (i + 1) for i in range(len(ops))]          # 0.1, 0.2, ... ms per operator's backward

    def t(kind, e):
        return (3e-4 if kind == "all-gather" else 5e-4) if e >= PERSISTENCE_THRESHOLD else 1e-4

    names = [o.name for o in ops]
    gather, reduce = sync_fetch_collectives(ops, bwd, GPT, 8, 10e-6, t)
    assert gather == pytest.approx(4 * (300e-6 - 80e-6))   # the 4 weights, less the copy-outs' issue
    # each weight's reduce-scatter less the backward of the operators before it (after the previous weight's)
    between = {"qkv": sum(bwd[:names.index("qkv")]),
               "attn_out": sum(bwd[names.index("qkv") + 1:names.index("attn_out")]),
               "mlp_up": sum(bwd[names.index("attn_out") + 1:names.index("mlp_up")]),
               "mlp_down": sum(bwd[names.index("mlp_up") + 1:names.index("mlp_down")])}
    persistent = 8 * (100e-6 - 80e-6)                       # 4 biases + 2 x 2 LayerNorm tensors
    assert reduce == pytest.approx(sum(max(0.0, 500e-6 - b) for b in between.values()) + persistent)
    assert sync_fetch_collectives(ops, bwd, GPT, 1, 10e-6, t) == (0.0, 0.0)
    # a host slower than the calls hides every gather and every persistent tensor's call
    assert sync_fetch_collectives(ops, [0.0] * len(ops), GPT, 8, 1e-3, t) == (0.0, 4 * 500e-6)


def test_host_bound_adds_the_wait_after_the_stretch():
    ops = _ops()
    costs = [OpCost(o.name, fwd=1e-3, bwd_input=1e-3, bwd_weight=1e-3) for o in ops]
    st_ = get_stack("deepspeed-zero3-2021")
    plain = host_bound(ops, costs, 10e-6, False, 45e-6, st_, zero3=(GPT, 4))
    wait = host_bound(ops, costs, 10e-6, False, 45e-6, st_, zero3=(GPT, 4, (1e-3, 3e-3)))
    assert sum(c.fwd for c in wait) - sum(c.fwd for c in plain) == pytest.approx(1e-3)
    assert (sum(c.bwd_input + c.bwd_weight for c in wait) - sum(c.bwd_input + c.bwd_weight for c in plain)
            == pytest.approx(3e-3))


def test_two_nodes_price_every_tensor_on_the_nccl_model(tmp_path):
    # 16 ZeRO-3 ranks over 2 DGX A100 nodes: the layer's gradients leave the dp stream; its backward waits
    # for each weight's reduce-scatter (2 B per element, the project's NCCL model on the 16 ranks) less the
    # backward of the operators before it, and for the persistent tensors' calls beyond 16 x 10 us
    plan = _plan(tmp_path, "deepspeed-zero3-2021", tp=1, nodes=2)
    ds, base = _work(tmp_path, "deepspeed-zero3-2021", 1, 2), _work(tmp_path, "megatron-te", 1, 2)

    def reduce_scatters(work):
        return [c for lw in work.stages[0].layers for op in lw.ops for c in op.bwd_post
                if c.op == "zero3-grad-reduce-scatter"]

    assert reduce_scatters(ds) == [] and len(reduce_scatters(base)) == 2
    # HSDP (which DeepSpeed 0.3.15 does not have) keeps the per-layer reduce-scatter and replica all-reduce
    assert len(reduce_scatters(_work(tmp_path, "deepspeed-zero3-2021", 1, 2, dp_shard=8))) == 2
    ops = layer_operators(plan.model, micro_batch=4, seq_len=1024, dtype_bytes=2, flash_attention=True)
    group = tuple(range(16))
    costs = [OpCost(o.name, fwd=1e-4, bwd_input=1e-4, bwd_weight=0.0) for o in ops]
    gather, (fwd_wait, bwd_wait) = layer_sync_collectives(plan, ops, costs, group, None, comm_time, 2, 2)
    gpu, names = plan.cluster.gpu, [o.name for o in ops]
    fill = 12 * 1024 ** 2 * 2 / (gpu.hbm_bandwidth * gpu.efficiency.hbm_efficiency)
    prior = {"qkv": names.index("qkv"), "attn_out": names.index("attn_out") - names.index("qkv") - 1,
             "mlp_up": names.index("mlp_up") - names.index("attn_out") - 1,
             "mlp_down": names.index("mlp_down") - names.index("mlp_up") - 1}
    weights = {"qkv": 3 * 1024 ** 2, "attn_out": 1024 ** 2, "mlp_up": 4 * 1024 ** 2, "mlp_down": 4 * 1024 ** 2}
    reduce = sum(max(0.0, collective_time("reduce-scatter", 2 * weights[k], group, plan.cluster) - 1e-4 * prior[k])
                 for k in weights)
    reduce += sum(max(0.0, collective_time("reduce-scatter", 2 * e, group, plan.cluster) - 16 * 10e-6)
                  for e in (1024, 1024, 3 * 1024, 1024, 1024, 1024, 4 * 1024, 1024))
    assert fwd_wait == pytest.approx(fill)
    assert bwd_wait == pytest.approx(fill + reduce)
    assert gather == pytest.approx(sum(max(0.0, collective_time("all-gather", 2 * e, group, plan.cluster) - 160e-6)
                                       for e in weights.values()))


@pytest.mark.parametrize("bad", ["yes", "1", "[true]"])
def test_bad_sync_fetch_is_one_clear_error(tmp_path, bad):
    p = tmp_path / "stacks.yaml"
    p.write_text(f"stacks:\n  x:\n    attention: catalog\n    zero3_sync_fetch: {bad}\n")
    with pytest.raises(ConfigError, match=r"stack 'x' zero3_sync_fetch = .* must be true or false"):
        load_tables(str(p))
