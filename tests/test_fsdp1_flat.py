"""PyTorch FSDP1's FlatParameter kernels (stacks.yaml [FSDP1], taskgraph/fsdp1_flat.py): closed forms per
unit and pass on a tiny unit, the divide factors of torch's default hooks, and the kernels joining the
ZeRO-3 collectives of the llm-foundry stack."""
from __future__ import annotations

from dataclasses import replace

import pytest

from strategies.errors import ConfigError
from strategies.strategy_file import parse_strategy
from taskgraph import costing
from taskgraph.fsdp1_flat import fsdp1_flat_kernels, fsdp1_flat_times, fsdp1_microbatches, gradient_divide_factors
from taskgraph.operators import layer_operators
from taskgraph.plan import resolve
from taskgraph.stacks import get_stack, load_tables
from topologies.gpus import get_gpu


@pytest.mark.parametrize("world, pre, post", [(1, 1, 1), (2, 2, 1), (4, 2, 2), (8, 4, 2), (16, 4, 4), (64, 8, 8),
                                               (128, 16, 8), (6, 4, 1.5), (12, 4, 3)])
def test_divide_factors_as_torchs_default_hooks(world, pre, post):
    # DefaultState._get_gradient_predivide_factor: double while the factor divides world and is below world /
    # factor (tested before doubling, so 6 ranks end on 4, not a divisor: postdivide 1.5)
    assert gradient_divide_factors(world) == (pre, post)
    assert pre * post == world


def test_kernels_of_a_tiny_unit_bf16_reduce():
    # 1,001 elements over 4 ranks: shard 251, padded 1,004; bf16 params and bf16 reduction, 3 micro-batches
    k = fsdp1_flat_kernels(1001, 4, 2, 2, 3)
    assert k["gather"] == [("cast-shard", 6 * 251, 1)]                 # read fp32 4 + write bf16 2 per shard element
    assert k["grad"] == [("grad-cat", 4 * 1001, 1)]                     # at::cat of the views' bf16 gradients
    assert k["reduce"] == [("pad", 2 * (1001 + 1004), 1),               # F.pad: 4 does not divide 1,001
                           ("predivide", 4 * 1004, 1), ("postdivide", 4 * 251, 1),   # 2 x 2: both > 1 at 4 ranks
                           ("cast-fp32", 6 * 251, 1),                   # _cast_grad_to_param_dtype
                           ("accumulate", 12 * 251 * 2 / 3, 2 / 3)]     # micro-batches 2 and 3 of 3


def test_kernels_fp32_reduce_and_no_mixed_precision():
    # reduce_dtype fp32: the bf16 gradient is cast up before the reduce-scatter and nothing after it
    k = fsdp1_flat_kernels(1000, 8, 2, 4, 1)
    assert k["reduce"] == [("cast-reduce", 6 * 1000, 1), ("predivide", 8 * 1000, 1), ("postdivide", 8 * 125, 1)]
    # fp32 training: no low-precision shard, a 4-B gradient, no casts; two ranks: the predivide alone
    k = fsdp1_flat_kernels(1000, 2, 4, 4, 1)
    assert k["gather"] == []
    assert k["grad"] == [("grad-cat", 8 * 1000, 1)]
    assert k["reduce"] == [("predivide", 8 * 1000, 1)]


def test_times_are_the_kernels_at_hbm_efficiency():
    gpu = get_gpu("H100-SXM-80GB")
    bw, launch = gpu.hbm_bandwidth * gpu.efficiency.hbm_efficiency, gpu.efficiency.launch_overhead
    p = 12 * 4096 ** 2   # an MPT-7B block's weights
    gather, cat, reduce = fsdp1_flat_times(gpu, p, 8, 2, 2, 1)
    assert gather == pytest.approx(6 * p / 8 / bw + launch)
    assert cat == pytest.approx(4 * p / bw + launch)
    assert reduce == pytest.approx((4 * p + 4 * p / 8 + 6 * p / 8) / bw + 3 * launch)


def _plan(tmp_path, stack="llm-foundry", mbs=1, zero=3):
    d = {"model": {"preset": "llama3-8b", "layers": 2}, "cluster": {"preset": "dgx-h100", "nodes": 1},
         "parallel": {"tp": 1, "pp": 1, "dp": 8, "zero": zero}, "schedule": "1f1b",
         "training": {"micro_batch": 1, "global_batch": 8 * mbs, "seq_len": 2048},
         "options": {"stack": stack, "fp32_grad_accum": False}}
    return resolve(parse_strategy(d, tmp_path))


def _comms(work):
    # embedding, layer 0 (the forward's first: its gather hides behind nothing), layer 1 (the backward's first)
    first, last = work.stages[0].layers[1], work.stages[0].layers[2]
    pick = (("fwd_pre", "zero3-param-gather"), ("bwd_pre", "zero3-param-gather"),
            ("bwd_post", "zero3-grad-reduce-scatter"))
    ops = (first.ops[0], last.ops[-1], first.ops[0])
    return [sum(c.seconds for c in getattr(o, f) if c.op == name) for o, (f, name) in zip(ops, pick)]


@pytest.mark.parametrize("mbs", [1, 4])
def test_fsdp1_kernels_join_the_zero3_collectives(tmp_path, monkeypatch, mbs):
    # the forward gather grows by the shard cast, the backward gather by the cast and the exposed gradient
    # concat, the reduce-scatter by the post-backward stream's kernels; without the field, none of them
    plan = _plan(tmp_path, mbs=mbs)
    costing.clear_cost_cache()
    with_flat = _comms(costing.build_work(plan))
    real = costing.run_stack
    monkeypatch.setattr(costing, "run_stack", lambda name, *rest: replace(real(name, *rest), fsdp1_flat=False))
    costing.clear_cost_cache()
    without = _comms(costing.build_work(plan))
    monkeypatch.undo()
    costing.clear_cost_cache()
    params = sum(o.params for o in layer_operators(plan.model, ep=1, dtype_bytes=2, flash_attention=True,
                                                   layer_index=0, micro_batch=1, seq_len=2048, tp=1, sp=False, cp=1))
    gather, cat, reduce = fsdp1_flat_times(plan.cluster.gpu, params, 8, 2, 2, mbs)
    assert costing.grad_bytes_per_param(plan) == 2 and plan.microbatches == mbs
    assert with_flat[0] - without[0] == pytest.approx(gather)        # the first layer: nothing hides its gather
    assert with_flat[1] - without[1] == pytest.approx(gather + cat)  # the last layer of the backward: likewise
    assert with_flat[2] - without[2] == pytest.approx(reduce)


def test_micro_batches_key_the_layer_costs_only_for_fsdp1(tmp_path):
    assert fsdp1_microbatches(_plan(tmp_path, mbs=4)) == 4
    assert fsdp1_microbatches(_plan(tmp_path, mbs=4, zero=1)) == 0
    assert fsdp1_microbatches(_plan(tmp_path, stack="torchtitan", mbs=4)) == 0
    costing.clear_cost_cache()
    one = _comms(costing.build_work(_plan(tmp_path, mbs=1)))
    four = _comms(costing.build_work(_plan(tmp_path, mbs=4)))   # same layers, memo must not reuse mbs=1's
    assert four[2] > one[2] and four[:2] == one[:2]


def test_only_llm_foundry_runs_fsdp1():
    assert get_stack("llm-foundry").fsdp1_flat and not get_stack("llm-foundry").fsdp2_copies
    assert not get_stack("torchtitan").fsdp1_flat


@pytest.mark.parametrize("value, extra", [("1", ""), ("maybe", ""), ("true", "    fsdp2_copies: true\n")])
def test_bad_fsdp1_flat_is_one_line(tmp_path, value, extra):
    p = tmp_path / "stacks.yaml"
    p.write_text(f"stacks:\n  x:\n    attention: catalog\n    fsdp1_flat: {value}\n{extra}")
    with pytest.raises(ConfigError, match=r"stack 'x' fsdp1_flat = .* must be true or false, and not true with "
                                          r"fsdp2_copies") as e:
        load_tables(str(p))
    assert "\n" not in str(e.value)
