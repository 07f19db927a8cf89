"""options.cross_entropy (taskgraph/cross_entropy.py, stacks.yaml [MEG-CE]): Megatron-core's loss as the run
passes --cross-entropy-loss-fusion / --cross-entropy-fusion-impl: the bytes per logit of each implementation
from its ops, the option over the stack's own, its one-line error, and what the Megatron and NeMo importers
write."""
from __future__ import annotations

import pytest

from strategies.errors import ConfigError
from strategies.import_megatron import import_megatron
from strategies.import_nemo import import_nemo
from strategies.strategy_file import parse_strategy
from taskgraph.cross_entropy import CROSS_ENTROPY, cross_entropy_bytes
from taskgraph.model import ModelSpec
from taskgraph.operators import head_operators
from taskgraph.plan import resolve
from taskgraph.stack_costs import loss_as_run, op_as_run
from taskgraph.stacks import get_stack, run_stack

TINY = dict(name="tiny", layers=2, hidden=64, heads=4, kv_heads=4, ffn=256, vocab=1000, mlp="gelu",
            position="learned", norm="layernorm", bias=True, tied_embeddings=True, dropout=True, max_seq=32)


def test_native_and_te_bytes_per_logit_from_their_ops():
    # fused_cross_entropy.py's three compiled forward regions over bf16 logits: the fp32 copy with the max
    # (2 + 4), exp(x - max) written back in place with its sum (4 + 4), div_ (4 + 4); the backward reads the
    # softmax, writes the mutated input back and the bf16 gradient (4 + 4 + 2)
    assert cross_entropy_bytes(2, "native") == (2 + 4 + 8 + 8, 4 + 4 + 2) == (22, 10)
    # TE's Triton kernels: online softmax reads (2), the loss kernel reads and writes the gradient in place
    # (2 + 2); element_mul in place (2 + 2)
    assert cross_entropy_bytes(2, "te") == (6, 4)
    assert cross_entropy_bytes(4, "native") == (24, 12) and cross_entropy_bytes(4, "te") == (12, 8)
    # Megatron-core's eager path (d98e8a6) moves what 2021's did
    assert cross_entropy_bytes(2, "eager-fp32") == (38, 14)
    assert CROSS_ENTROPY == ("fused", "eager-fp32", "native", "te")


def _loss(tp: int = 2):
    ops = head_operators(ModelSpec(**TINY), micro_batch=2, seq_len=16, tp=tp, dtype_bytes=2)
    return next(o for o in ops if o.kind == "loss")


def _plan(tmp_path, options: dict):
    d = {"model": TINY, "cluster": {"preset": "dgx-a100", "nodes": 1}, "parallel": {"tp": 2, "pp": 1},
         "schedule": "1f1b", "training": {"micro_batch": 2, "global_batch": 16, "seq_len": 16, "precision": "bf16"},
         "options": {"flash_attention": False} | options}
    return resolve(parse_strategy(d, tmp_path))


@pytest.mark.parametrize("stack,ce,per", [
    (None, None, (22, 10)), (None, "eager-fp32", (38, 14)), (None, "te", (6, 4)), (None, "fused", (10, 6)),
    ("megatron-2022", None, (38, 14)), ("megatron-2022", "native", (22, 10)), ("torchtitan", None, (10, 6)),
    ("torchtitan", "eager-fp32", (38, 14)),
])
def test_option_overrides_the_stack(tmp_path, stack, ce, per):
    logits = 2 * 16 * 500   # tp 2: 500 logits per token on this rank
    opts = ({"stack": stack} if stack else {}) | ({"cross_entropy": ce} if ce else {})
    plan = _plan(tmp_path, opts)
    run = op_as_run(plan, run_stack(stack, None, ce), _loss())[0]
    assert (run.fwd_bytes, run.bwd_input_bytes) == (per[0] * logits, per[1] * logits)
    assert run.comms == _loss().comms and run.saved_activation_bytes == _loss().saved_activation_bytes


def test_option_keeps_the_rest_of_the_stack():
    st = run_stack("torchtitan", "fa2", "eager-fp32")
    assert (st.cross_entropy, st.attention) == ("eager-fp32", "fa2")
    assert st.passes == get_stack("torchtitan").passes
    assert run_stack(None, None, "fused").cross_entropy == "fused"
    loss = _loss()
    assert loss_as_run(loss, 2, "fused") is loss


def test_profile_rows_name_the_built_loss():
    # execsim profile / calibrate key the loss by the operator as built (fused bytes): the run's loss keeps
    # that key whatever implementation prices it
    from taskgraph.cost import op_shape_key
    loss = _loss()
    assert op_shape_key(loss) == f"bytes={10 * 2 * 16 * 500}"
    for impl in ("eager-fp32", "native", "te"):
        run = loss_as_run(loss, 2, impl)
        assert run.fwd_bytes != loss.fwd_bytes and op_shape_key(run) == op_shape_key(loss)


def test_bad_value_is_one_line(tmp_path):
    with pytest.raises(ConfigError) as e:
        _plan(tmp_path, {"cross_entropy": "unfused"})
    assert str(e.value) == ("options.cross_entropy = 'unfused' is not a cross-entropy implementation; use one of "
                            "fused, eager-fp32, native, te (or leave it out: the stack's own)")


def test_option_moves_the_step(tmp_path):
    from simulator.simulation.strategy import simulate_strategy
    base = {"model": {"preset": "llama3-8b", "layers": 2}, "cluster": {"preset": "dgx-h100", "nodes": 1},
            "parallel": {"tp": 1, "pp": 1}, "schedule": "1f1b",
            "training": {"micro_batch": 1, "global_batch": 8, "seq_len": 4096}}
    t = {ce: simulate_strategy(parse_strategy({**base, "options": {"cross_entropy": ce}}, tmp_path))
         .training.iteration_time_s for ce in CROSS_ENTROPY}
    default = simulate_strategy(parse_strategy({**base, "options": {}}, tmp_path)).training.iteration_time_s
    assert default == t["native"]
    assert t["eager-fp32"] > t["native"] > t["fused"] > t["te"]


MEG = """torchrun pretrain_gpt.py --tensor-model-parallel-size 2 --pipeline-model-parallel-size 1 \\
  --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 16 --max-position-embeddings 32 \\
  --micro-batch-size 2 --global-batch-size 16 --vocab-size 1000 --bf16 {flags}
"""


@pytest.mark.parametrize("flags,want", [
    ("", "eager-fp32"),                                                  # Megatron-core's default: off
    ("--cross-entropy-loss-fusion", "native"),                           # impl native by default
    ("--cross-entropy-loss-fusion --cross-entropy-fusion-impl native", "native"),
    ("--cross-entropy-loss-fusion --cross-entropy-fusion-impl te", "te"),
    ("--cross-entropy-fusion-impl te", "eager-fp32"),                    # no effect without the fusion flag
])
def test_megatron_importer(flags, want):
    got = import_megatron(MEG.format(flags=flags), cluster="dgx-a100", nodes=1)
    assert got.strategy["options"]["cross_entropy"] == want
    assert "--cross-entropy-loss-fusion" not in got.unmodeled and "--cross-entropy-fusion-impl" not in got.unmodeled
    if flags == "--cross-entropy-fusion-impl te":
        assert "cross-entropy-fusion-impl (no effect without cross-entropy-loss-fusion)" in got.unmodeled


def test_megatron_importer_bad_impl():
    with pytest.raises(ConfigError, match=r"^megatron argument --cross-entropy-fusion-impl = 'cudnn' is not one of "
                                          r"native, te$"):
        import_megatron(MEG.format(flags="--cross-entropy-loss-fusion --cross-entropy-fusion-impl cudnn"),
                        cluster="dgx-a100", nodes=1)


def _nemo(**model):
    return {"trainer": {"num_nodes": 1, "devices": 8, "precision": "bf16-mixed", "max_steps": 10},
            "model": {"micro_batch_size": 1, "global_batch_size": 8, "tensor_model_parallel_size": 1,
                      "pipeline_model_parallel_size": 1, "encoder_seq_length": 2048, "max_position_embeddings": 2048,
                      "num_layers": 2, "hidden_size": 1024, "ffn_hidden_size": 4096, "num_attention_heads": 16,
                      "mcore_gpt": True, **model}}


@pytest.mark.parametrize("model,want", [
    ({}, "eager-fp32"),                                  # Launcher 24.07's GPT-3 / Llama 2 configs: the key is absent
    ({"cross_entropy_loss_fusion": False}, "eager-fp32"),
    ({"cross_entropy_loss_fusion": True}, "native"),     # its Llama 3 configs
    ({"cross_entropy_loss_fusion": True, "cross_entropy_fusion_impl": "te"}, "te"),
])
def test_nemo_importer(model, want):
    got = import_nemo(_nemo(**model), cluster="dgx-h100", vocab=32000)
    assert got.strategy["options"]["cross_entropy"] == want
    assert not any("cross_entropy" in u for u in got.unmodeled)


@pytest.mark.parametrize("sets,want", [
    ({}, "native"),                                        # GPTModelProvider: fusion on, impl native
    ({"model.cross_entropy_loss_fusion": False}, "eager-fp32"),
    ({"model.cross_entropy_fusion_impl": "te"}, "te"),
])
def test_bridge_yaml_importer(sets, want):
    from strategies.import_pyrecipe import import_bridge_yaml
    model = {"num_layers": 2, "hidden_size": 1024, "ffn_hidden_size": 4096, "num_attention_heads": 16,
             "seq_length": 2048, "vocab_size": 32000, "tensor_model_parallel_size": 1,
             "pipeline_model_parallel_size": 1}
    for k, v in sets.items():
        model[k.split(".", 1)[1]] = v
    data = {"model": model, "train": {"micro_batch_size": 1, "global_batch_size": 8, "train_iters": 10}}
    got = import_bridge_yaml(data, cluster="dgx-h100", nodes=1)
    assert got.strategy["options"]["cross_entropy"] == want
