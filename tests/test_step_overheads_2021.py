"""Per-step gradient passes of Megatron-LM's fp16 and 2021 code (taskgraph/overheads.py): the loss scaler's
unscale over the fp32 main gradients (optimizer.py _unscale_main_grads_and_check_for_nan) and the 2021 local
DDP's flatten / divide / copy-back of 16-bit gradients in place of the contiguous buffer's memset
(megatron/model/distributed.py at cdde433; stacks.yaml [MEG-2021] ddp_flatten). Closed forms on one GPU
(no all-reduce latency) with the straggler spread off, so the expected values are exact."""
from __future__ import annotations

import pytest

from strategies.errors import ConfigError
from strategies.strategy_file import parse_strategy
from taskgraph.costing import build_work, grad_bytes_per_param
from taskgraph.overheads import grad_buffer_bytes, step_overhead_s
from taskgraph.plan import resolve
from taskgraph.stacks import get_stack, read_stack_file

TINY = dict(name="tiny", layers=2, hidden=64, heads=4, kv_heads=4, ffn=256, vocab=1000, mlp="gelu",
            position="learned", norm="layernorm", bias=True, tied_embeddings=True, dropout=True, max_seq=32)


def _plan(tmp_path, precision: str, stack: str | None = None):
    d = {"model": TINY, "cluster": {"preset": "dgx-a100", "nodes": 1, "gpus": 1, "gpu_speed_cv": 0},
         "parallel": {"tp": 1, "pp": 1, "dp": 1}, "schedule": "1f1b",
         "training": {"micro_batch": 2, "global_batch": 4, "seq_len": 16, "precision": precision},
         "options": {"overlap_grad_reduce": False} | ({"stack": stack} if stack else {})}
    return resolve(parse_strategy(d, tmp_path))


def _bw(plan) -> float:
    gpu = plan.cluster.gpu
    return gpu.hbm_bandwidth * gpu.efficiency.hbm_efficiency


def test_fp16_unscale_reads_and_writes_every_fp32_gradient(tmp_path):
    # one GPU: no all-reduce latency; the gradient norm reads 4 B per parameter, fp16's unscale reads and
    # writes the same fp32 main gradients (8 B more); bf16 has no loss scaler
    for precision, per_param in (("bf16", 4), ("fp16", 12)):
        plan = _plan(tmp_path, precision)
        assert plan.num_gpus == 1
        assert step_overhead_s(plan, 1e6) == pytest.approx(per_param * 1e6 / _bw(plan), rel=1e-12), precision


def test_megatron_2021_flattens_and_copies_back_instead_of_zeroing(tmp_path):
    # the optimizer step of the one stage: fp16 gradients (2 B). Megatron-core / 2022 zero their buffer (2 B per
    # element); the 2021 local DDP flattens (cat 2 + 2), divides (2 + 2) and copies back (2 + 2): 12 B, no memset
    steps = {}
    for stack in ("megatron-2022", "megatron-2021"):
        plan = _plan(tmp_path, "fp16", stack)
        st = build_work(plan).stages[0]
        gbp = grad_bytes_per_param(plan)
        params = sum(op.grad_bytes for lw in st.layers for op in lw.ops) / gbp
        steps[stack] = (st.optimizer_s, params, _bw(plan), gbp)
    (t22, params, bw, gbp), (t21, params21, _, _) = steps["megatron-2022"], steps["megatron-2021"]
    assert gbp == 2 and params21 == params
    assert t21 - t22 == pytest.approx((12 - 2) * params / bw, rel=1e-9)


def test_grad_buffer_bytes_by_stack_and_gradient_width(tmp_path):
    assert get_stack("megatron-2021").ddp_flatten
    assert not any(get_stack(s).ddp_flatten for s in ("megatron-2022", "megatron-te", "deepspeed"))
    assert grad_buffer_bytes(_plan(tmp_path, "fp16", "megatron-2021"), 2) == 12
    assert grad_buffer_bytes(_plan(tmp_path, "bf16", "megatron-2021"), 4) == 12   # fp32 buffer: zero 4, divide 8
    assert grad_buffer_bytes(_plan(tmp_path, "fp16", "megatron-2022"), 2) == 2
    p = tmp_path / "stacks.yaml"
    p.write_text("stacks:\n  x: {attention: catalog, ddp_flatten: 1}\n")
    with pytest.raises(ConfigError, match="stack 'x' ddp_flatten = 1 must be true or false"):
        read_stack_file(str(p))


def test_torch_ddp_copies_into_its_buckets_and_back(tmp_path):
    # PyTorch's DDP (stacks.yaml [TORCH-DDP]): each fp16 gradient copied into its bucket with the division fused
    # (2 + 2) and the reduced bucket copied back (2 + 2): 8 B per element where the local DDP moves 12
    st = get_stack("megatron-2021-torch-ddp")
    assert st.ddp_bucket_copy and not st.ddp_flatten and st.grad_add_bytes == get_stack("megatron-2021").grad_add_bytes
    assert grad_buffer_bytes(_plan(tmp_path, "fp16", "megatron-2021-torch-ddp"), 2) == 8
    times = {}
    for stack in ("megatron-2021", "megatron-2021-torch-ddp"):
        plan = _plan(tmp_path, "fp16", stack)
        st = build_work(plan).stages[0]
        params = sum(op.grad_bytes for lw in st.layers for op in lw.ops) / grad_bytes_per_param(plan)
        times[stack] = (st.optimizer_s, params, _bw(plan))
    (t21, params, bw), (tt, _, _) = times["megatron-2021"], times["megatron-2021-torch-ddp"]
    assert t21 - tt == pytest.approx((12 - 8) * params / bw, rel=1e-9)
    p = tmp_path / "stacks.yaml"
    p.write_text("stacks:\n  x: {attention: catalog, ddp_bucket_copy: true, ddp_flatten: true}\n")
    with pytest.raises(ConfigError, match="stack 'x' ddp_bucket_copy = True must be true or false, and not true "
                                          "with ddp_flatten"):
        read_stack_file(str(p))
