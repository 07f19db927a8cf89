"""The Megatron-LM 2021-22 stacks (stacks.yaml [MEG-2021]): the vocab-parallel cross-entropy's HBM traffic
by implementation (taskgraph/cross_entropy.py; megatron-2021 and megatron-2022 run the eager fp32 loss) and
2021's unfused gradient accumulation (taskgraph/stack_costs.py unfused_grad_accum): closed forms per
logit and per gradient element, on a tiny head and layer, and priced."""
from __future__ import annotations

import pytest

from strategies.errors import ConfigError
from strategies.strategy_file import parse_strategy
from taskgraph.cost import op_time
from taskgraph.cross_entropy import cross_entropy_bytes
from taskgraph.model import ModelSpec
from taskgraph.operators import head_operators
from taskgraph.plan import resolve
from taskgraph.stack_costs import op_as_run
from taskgraph.stacks import get_stack, read_stack_file
from topologies.gpus import get_gpu

TINY = dict(name="tiny", layers=2, hidden=64, heads=4, kv_heads=4, ffn=256, vocab=1000, mlp="gelu",
            position="learned", norm="layernorm", bias=True, tied_embeddings=True, dropout=True, max_seq=32)


def test_bytes_per_logit_from_the_eager_ops():
    # _VocabParallelCrossEntropy over output.float() (fp16 logits, 2 B): cast 2 + 4, max 4, sub_ 4 + 4,
    # exp 4 + 4, sum 4, div_ 4 + 4 = 38 forward; mul_ 4 + 4, the cast back 4 + 2 = 14 backward
    assert cross_entropy_bytes(2, "eager-fp32") == (2 + 4 + 4 + 8 + 8 + 4 + 8, 8 + 4 + 2) == (38, 14)
    # one fused kernel per pass: read the logits, write the fp32 softmax; read it, write the gradient
    assert cross_entropy_bytes(2) == (10, 6)
    assert cross_entropy_bytes(4, "eager-fp32") == (40, 16) and cross_entropy_bytes(4) == (12, 8)
    with pytest.raises(ConfigError, match=r"^cross_entropy = 'eager' is not one of fused, eager-fp32, native, te"):
        cross_entropy_bytes(2, "eager")


def _head(tp: int):
    ops = head_operators(ModelSpec(**TINY), micro_batch=2, seq_len=16, tp=tp, dtype_bytes=2)
    return {o.name: o for o in ops}


def _plan(tmp_path, stack: str | None, tp: int = 2):
    d = {"model": TINY, "cluster": {"preset": "dgx-a100", "nodes": 1}, "parallel": {"tp": tp, "pp": 1},
         "schedule": "1f1b", "training": {"micro_batch": 2, "global_batch": 16, "seq_len": 16, "precision": "fp16"},
         "options": {"flash_attention": False} | ({"stack": stack} if stack else {})}
    return resolve(parse_strategy(d, tmp_path))


def test_megatron_2021_runs_the_eager_loss(tmp_path):
    # tp 2: 2 x 16 tokens, 500 logits per token on this rank
    loss = _head(2)["loss"]
    logits = 2 * 16 * 500
    assert (loss.fwd_bytes, loss.bwd_input_bytes) == (10 * logits, 6 * logits)
    st = get_stack("megatron-2021")
    assert st.cross_entropy == "eager-fp32" and get_stack("megatron-te").cross_entropy == "native"
    run, f, b = op_as_run(_plan(tmp_path, "megatron-2021"), st, loss)
    assert (run.fwd_bytes, run.bwd_input_bytes, f, b) == (38 * logits, 14 * logits, 0.0, 0.0)
    # the three all-reduces of [s, b] fp32 (max, target logit, sum of exponentials), the memory kept
    # (the fp32 softmax, 4 B per logit) and the other head operators are the same
    assert [(c.op, c.phase, c.bytes) for c in run.comms] == [("all-reduce", "fwd", 4 * 32)] * 3
    assert run.saved_activation_bytes == loss.saved_activation_bytes == 4 * logits
    for name, op in _head(2).items():
        if name != "loss":
            assert op_as_run(_plan(tmp_path, "megatron-2021"), st, op)[0] is op
    # the default stack (None in costing) runs Megatron-core's native fused loss (stacks.yaml [MEG-CE])
    native = op_as_run(_plan(tmp_path, None), None, loss)[0]
    assert (native.fwd_bytes, native.bwd_input_bytes) == (22 * logits, 10 * logits)


def test_eager_loss_priced_by_its_bytes(tmp_path):
    a100 = get_gpu("a100")
    eff = a100.efficiency
    loss = _head(1)["loss"]
    run = op_as_run(_plan(tmp_path, "megatron-2021", tp=1), get_stack("megatron-2021"), loss)[0]
    bw = a100.hbm_bandwidth * eff.elementwise_efficiency
    logits = 2 * 16 * 1000
    for p, per in (("fwd", 38), ("bwd_input", 14)):
        assert op_time(run, p, a100, "fp16") == pytest.approx(per * logits / bw + eff.launch_overhead)
    assert op_time(loss, "fwd", a100, "fp16") == pytest.approx(10 * logits / bw + eff.launch_overhead)


def test_stack_file_checks_cross_entropy(tmp_path):
    p = tmp_path / "stacks.yaml"
    p.write_text("stacks:\n  x: {attention: catalog, cross_entropy: unfused}\n")
    with pytest.raises(ConfigError, match="stack 'x' cross_entropy = 'unfused' must be one of fused, eager-fp32"):
        read_stack_file(str(p))


def test_megatron_2021_adds_gradients_unfused(tmp_path):
    # Megatron-LM before gradient_accumulation_fusion ([MEG-2021]): autograd's param.grad += new after each
    # micro-batch's backward, one add kernel per weight reading both fp16 gradients and writing one (6 B)
    from taskgraph.cost import HP_GRAD_ACCUM_KERNELS
    from taskgraph.operators import layer_operators
    from taskgraph.stack_costs import unfused_grad_accum
    assert get_stack("megatron-2021").grad_add_bytes == 6 and get_stack("megatron-2022").grad_add_bytes == 0
    assert unfused_grad_accum(_plan(tmp_path, "megatron-2021"), get_stack("megatron-2021")) == \
        {"grad_accum_unfused_bytes": 6, "grad_accum_unfused_kernels": 1}
    for st in ("megatron-2022", "megatron-te"):   # the fused accumulation of 2022 on
        assert unfused_grad_accum(_plan(tmp_path, st), get_stack(st))["grad_accum_unfused_bytes"] == 0
    # DeepSpeed's BF16_Optimizer keeps its cast + add
    d = {"model": TINY, "cluster": {"preset": "dgx-a100", "nodes": 1}, "parallel": {"tp": 1, "pp": 1, "dp": 8},
         "schedule": "1f1b", "training": {"micro_batch": 2, "global_batch": 32, "seq_len": 16, "precision": "bf16"},
         "options": {"stack": "deepspeed"}}
    assert unfused_grad_accum(resolve(parse_strategy(d, tmp_path)), get_stack("deepspeed")) == \
        {"grad_accum_unfused_bytes": 18, "grad_accum_unfused_kernels": HP_GRAD_ACCUM_KERNELS}
    # priced: the fresh gradient's write stays in the GEMM's bytes, the add streams 6 B per element
    a100 = get_gpu("a100")
    eff = a100.efficiency
    for op in layer_operators(ModelSpec(**TINY), micro_batch=2, seq_len=16, tp=1, dtype_bytes=2, layer_index=0):
        if op.kind != "gemm":
            continue
        grads = sum(g.k * g.n * g.batch for g in op.gemms)
        plain = op_time(op, "bwd_weight", a100, "fp16")
        t = op_time(op, "bwd_weight", a100, "fp16", grad_accum_bytes=2, grad_accum_unfused_bytes=6,
                    grad_accum_unfused_kernels=1)
        assert t - plain == pytest.approx(6 * grads / (a100.hbm_bandwidth * eff.hbm_efficiency)
                                          + len(op.gemms) * eff.launch_overhead), op.name
    p = tmp_path / "stacks.yaml"
    p.write_text("stacks:\n  x: {attention: catalog, grad_add_bytes: -1}\n")
    with pytest.raises(ConfigError, match="stack 'x' grad_add_bytes = -1 must be an integer"):
        read_stack_file(str(p))


def test_the_deepspeed_stacks_keep_megatrons_eager_loss(tmp_path):
    # [DS-CE]: Megatron-DeepSpeed's pipe model (BLOOM) and DeepSpeedExamples' Megatron-LM v1.1.5 under
    # ZeRO-3 both call mpu.vocab_parallel_cross_entropy on an fp32 copy of the logits
    logits = 2 * 16 * 500
    for name in ("deepspeed", "deepspeed-zero3-2021"):
        st = get_stack(name)
        assert st.cross_entropy == "eager-fp32", name
        run, _, _ = op_as_run(_plan(tmp_path, name), st, _head(2)["loss"])
        assert (run.fwd_bytes, run.bwd_input_bytes) == (38 * logits, 14 * logits), name
