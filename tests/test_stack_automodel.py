"""NeMo AutoModel as a software stack (options.stack: nemo-automodel, taskgraph/data/stacks.yaml [AM]):
Transformer Engine's attention and fused norms, FSDP2's copies and hooks, eager host cost -- closed
forms on single operators against the catalog's and torchtitan's, and the stack end to end."""
from __future__ import annotations

import pytest

from simulator.api import simulate_strategy
from strategies.errors import ConfigError
from strategies.strategy_file import parse_strategy
from taskgraph.cost import op_time
from taskgraph.model import get_model
from taskgraph.operators import layer_operators
from taskgraph.overheads import op_kernels
from taskgraph.plan import resolve
from taskgraph.stacks import attention_efficiency, get_stack
from topologies.gpus import get_gpu

AM = "nemo-automodel"


def _ops(preset: str = "qwen3-30b-a3b", ep: int = 8):
    ops = layer_operators(get_model(preset), ep=ep, dtype_bytes=2, flash_attention=True, layer_index=0,
                          micro_batch=1, seq_len=4096, tp=1, sp=False, cp=1)
    return {o.name: o for o in ops}


def test_te_norms_and_attention_are_the_catalogs():
    # backend rms_norm te / torch_fp32 (one kernel) and attn te (TE DotProductAttention = the catalog's kernel)
    h100, am, tt = get_gpu("h100"), get_stack(AM), get_stack("torchtitan")
    ops = _ops()
    for name in ("input_norm", "post_attn_norm", "qk_norm", "attn_core"):
        op = ops[name]
        for p in ("fwd", "bwd_input"):
            assert op_time(op, p, h100, stack=am) == op_time(op, p, h100), (name, p)
        assert op_kernels(op, "fwd", am) == 1
    assert op_kernels(ops["input_norm"], "fwd", tt) == 6
    shape = ops["attn_core"].attn_shape
    assert attention_efficiency(am, h100, "fwd", shape) == attention_efficiency(get_stack(None), h100, "fwd", shape)
    # not torchtitan's FlexAttention (a share of FlashAttention-3's rows on H100)
    assert op_time(ops["attn_core"], "fwd", h100, stack=tt) != op_time(ops["attn_core"], "fwd", h100, stack=am)


def test_unfused_mlp_activation_and_loss():
    # moe/layers.py MLP.forward: silu(gate) * up, two kernels; MaskedCrossEntropy(fp32_upcast=True): three
    am = get_stack(AM)
    assert am.passes_of("mlp_act") == 2 and am.passes_of("loss") == 3
    assert am.passes_of("layer3.input_norm") == 1
    assert (am.attention, am.torch_cp, am.fsdp2_copies, am.zero3_master_copy, am.float8_casts) == \
        ("catalog", False, True, False, "")


def _strategy(stack: str, tmp_path, **options):
    return parse_strategy({"model": {"preset": "qwen3-30b-a3b", "layers": 4},
                           "cluster": {"preset": "dgx-h100", "nodes": 1},
                           "parallel": {"tp": 1, "pp": 1, "ep": 8, "zero": 3},
                           "training": {"micro_batch": 2, "global_batch": 32, "seq_len": 4096, "recompute": "full"},
                           "options": {"stack": stack, **options}}, tmp_path)


def test_eager_host_cost_is_torchtitans_measured_figure(tmp_path):
    assert resolve(_strategy(AM, tmp_path)).cluster.host_us_per_kernel == 67.5


def test_automodel_step_between_megatron_and_torchtitan(tmp_path):
    # the same FSDP2 + EP run: TE's attention and norms make it shorter than torchtitan's eager kernels;
    # FSDP2's copy kernels and hooks make it longer than the catalog's (Megatron + TE) stack
    t = {s: simulate_strategy(_strategy(s, tmp_path)).training.iteration_time_s
         for s in ("megatron-te", AM, "torchtitan")}
    assert t["megatron-te"] < t[AM] < t["torchtitan"], t


def test_fsdp2_copies_priced_as_torchtitans(tmp_path):
    # the FSDP2 mechanisms are the same code (PyTorch's fully_shard): with torchtitan's attention and
    # passes the two stacks price a run alike
    from dataclasses import replace

    from taskgraph import stacks
    tt = stacks.get_stack("torchtitan")
    am = stacks.get_stack(AM)
    assert replace(am, name="torchtitan", attention=tt.attention, passes=tt.passes, torch_cp=True,
                   float8_casts=tt.float8_casts, master_weights=True, adam_bytes_per_param=0) == tt
    with pytest.raises(ConfigError, match="nemo-automodel"):   # the error lists the valid names
        stacks.get_stack("nemo_automodel")
