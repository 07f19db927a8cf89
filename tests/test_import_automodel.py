"""``execsim import automodel``: NeMo AutoModel YAML recipes (strategies/import_automodel.py), on one real
recipe of AutoModel's repository (strategies/examples/sources/, its source URL and commit in its header) and
edits of it."""
from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.simulation.importing import finish, import_strategy
from strategies.documents import parse_document
from strategies.errors import ConfigError
from strategies.import_automodel import split_layers, virtual_stages
from strategies.importers import import_config

FIXTURE = Path(__file__).resolve().parent.parent / "strategies" / "examples" / "sources" / "automodel_qwen3_moe_30b_te_deepep.yaml"


def _recipe() -> dict:
    return parse_document(FIXTURE.read_text(), "automodel recipe")


def _import(data: dict, nodes: int | None = None):
    return import_config("automodel", data, cluster="dgx-h100", nodes=nodes)


def test_real_recipe_imports_to_the_expected_strategy():
    imp = _import(_recipe())
    s = finish(imp)
    assert s == {"model": "qwen3-30b-a3b", "cluster": {"preset": "dgx-h100", "nodes": 1},   # benchmark.num_nodes
                 "parallel": {"tp": 1, "pp": 1, "cp": 1, "ep": 8, "sp": False, "zero": 3},
                 "schedule": "1f1b",
                 # step_scheduler 512 / 4, dataset.seq_len 4096, activation_checkpointing: true; max_steps 30
                 "training": {"micro_batch": 4, "global_batch": 512, "seq_len": 4096, "precision": "bf16",
                              "recompute": "full", "train_tokens": 30 * 512 * 4096.0},
                 # one node: DeepEP's node limit dropped (importing.finish); fake_balanced_gate; moe reshard false
                 "options": {"stack": "nemo-automodel", "overlap_grad_reduce": True, "overlap_param_gather": True,
                             "moe_routing": "balanced", "reshard_after_forward": False}}
    assert imp.unmodeled == ("model.backend.enable_fsdp_optimizations",
                             "loss_fn.fp32_upcast false (one pass over the logits fewer: priced with the fp32 copy)")


def test_real_recipe_simulates_and_fidelities_agree():
    import yaml

    from simulator.api import simulate_strategy
    from strategies.strategy_file import parse_strategy
    text, _ = import_strategy("automodel", FIXTURE.read_text(), origin=FIXTURE.name, cluster="dgx-h100")
    s = parse_strategy(yaml.safe_load(text), ".")
    op = simulate_strategy(s, fidelity="operator").training.iteration_time_s
    co = simulate_strategy(s, fidelity="coarse").training.iteration_time_s
    assert op > 0 and abs(co / op - 1) <= 0.02
    assert text.startswith("# Imported by `execsim import automodel` from automodel_qwen3_moe_30b_te_deepep.yaml.")


def test_deepep_over_nodes_is_node_limited_routing():
    # GroupedExpertsDeepEP over 4 nodes: each token reaches at most top-k = 8 nodes (Qwen3 has no group limit)
    assert finish(_import(_recipe(), nodes=4))["options"]["moe_max_nodes"] == 8
    d = _recipe()
    d["model"]["backend"].update(dispatcher="torch", experts="torch_mm")
    imp = _import(d, nodes=4)
    assert "moe_max_nodes" not in imp.strategy["options"]
    # experts.py GroupedExperts: all-gather over EP, all-reduce of the output (taskgraph/moe_dispatchers.py)
    assert imp.strategy["options"]["moe_dispatcher"] == "allgather_allreduce"
    assert not any("dispatcher" in u for u in imp.unmodeled)
    d["distributed"].update(tp_size=2)                 # experts split over tp: not AutoModel's 1-D EP mesh
    imp = _import(d, nodes=4)
    assert "moe_dispatcher" not in imp.strategy["options"]
    assert any(u.startswith("model.backend.dispatcher torch (an all-gather") for u in imp.unmodeled)
    d["distributed"].update(tp_size=1)
    # BackendConfig: gmm experts without DeepEP fall back to the torch dispatcher
    d["model"]["backend"].update(dispatcher="torch", experts="gmm")
    assert "moe_max_nodes" not in _import(d, nodes=4).strategy["options"]


def test_layers_per_stage_as_automodel_cuts_them():
    # DeepSeek-V3's benchmark layout: 61 layers, layers_per_stage 2 -> ceil 31 stages, rounded down to a
    # multiple of pp 4 = 28 (7 per rank); 61 = 28 x 2 + 5: the first five stages hold 3 layers
    d = _recipe()
    d["model"]["config"]["pretrained_model_name_or_path"] = "deepseek-ai/DeepSeek-V3"
    d["distributed"].update(pp_size=4, ep_size=64)
    d["distributed"]["pipeline"].update(layers_per_stage=2, pp_microbatch_size=1)
    s = _import(d, nodes=32).strategy
    assert s["model"] == {"preset": "deepseek-v3", "mtp_layers": 0}
    assert (s["schedule"], s["parallel"]["vpp"]) == ("interleaved-1f1b", 7)
    assert s["parallel"]["layers_per_stage"] == [3] * 5 + [2] * 23
    assert s["training"]["micro_batch"] == 1 and s["options"]["moe_max_nodes"] == 4   # topk_group
    d["distributed"]["pipeline"]["round_virtual_stages_to_pp_multiple"] = "up"   # 32 stages: 61 = 32 x 1 + 29
    assert _import(d, nodes=32).strategy["parallel"]["layers_per_stage"] == [2] * 29 + [1] * 3
    del d["distributed"]["pipeline"]["round_virtual_stages_to_pp_multiple"]
    with pytest.raises(ConfigError, match="layers_per_stage = 2 gives 31 stages, not a multiple of pp_size 4"):
        _import(d, nodes=32)


def test_te_fp8_and_attention_backends():
    d = _recipe()
    d["model"]["backend"]["te_fp8"] = {"recipe": "block"}
    d["model"]["backend"]["attn"] = "sdpa"
    s = _import(d).strategy
    assert s["training"]["precision"] == "fp8" and s["options"]["fp8_recipe"] == "blockwise"
    assert s["options"]["attention_kernel"] == "sdpa"
    d["model"]["backend"]["attn"] = "eager"
    assert _import(d).strategy["options"]["flash_attention"] is False


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["model"]["config"].update(pretrained_model_name_or_path="Qwen/Qwen3-30B-A3"),
     "model.config.pretrained_model_name_or_path = 'Qwen/Qwen3-30B-A3' is not a model execsim knows"),
    (lambda d: d["distributed"].update(pp_size=2) or d["distributed"]["pipeline"].update(pp_schedule="zigzag"),
     "distributed.pipeline.pp_schedule = 'zigzag' is not modelled"),
    (lambda d: d["dataset"].pop("seq_len"), "the sequence length is not in the recipe"),
    (lambda d: d["distributed"].update(activation_checkpointing="some"),
     "distributed.activation_checkpointing = 'some' must be true, false, full or selective"),
    (lambda d: d["model"]["backend"].update(attn="tilelang"), "model.backend.attn = 'tilelang'"),
    (lambda d: d["model"]["backend"].update(dispatcher="nccl"), "model.backend.dispatcher = 'nccl' is not one of"),
    (lambda d: d["step_scheduler"].pop("global_batch_size"), "step_scheduler.global_batch_size is not set"),
    (lambda d: d["distributed"].update(tp_size=0), "distributed.tp_size = 0 must be an integer"),
])
def test_bad_recipes_are_one_error_naming_the_key(edit, message):
    d = copy.deepcopy(_recipe())
    edit(d)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")) as e:
        _import(d)
    assert "\n" not in str(e.value)


def test_unknown_keys_are_listed_not_dropped():
    d = _recipe()
    d["distributed"]["enable_compile"] = True
    d["peft"] = {"dim": 8}
    d["optimizer"]["lr"] = 1e-3          # optimizer hyper-parameters do not enter the simulation
    imp = _import(d)
    assert "distributed.enable_compile" in imp.unmodeled and "peft.dim" in imp.unmodeled
    assert not any(u.startswith("optimizer.") for u in imp.unmodeled)


@pytest.mark.parametrize("edit, note", [
    ({}, None),                                          # the shipped recipe: torch.optim.Adam, weight_decay 0
    ({"foreach": False}, None),                          # _single_tensor_adam: the same passes, the same bytes
    ({"fused": True}, ("optimizer.fused true (torch's fused Adam, 28 B per fp32 parameter: priced as the foreach "
                      "path's 72)")),
    ({"weight_decay": 0.1}, ("optimizer.weight_decay 0.1 (one more foreach pass, 84 B per fp32 parameter: priced "
                            "without it, 72)")),           # Adam's L2 decay: _foreach_add(grads, params), 2 + 1
    ({"_target_": "torch.optim.AdamW", "weight_decay": None},   # AdamW's default 0.01: _foreach_mul_, 1 + 1
     "optimizer.weight_decay 0.01 (one more foreach pass, 80 B per fp32 parameter: priced without it, 72)"),
    ({"_target_": "transformer_engine.pytorch.optimizers.FusedAdam"},
     ("optimizer._target_ transformer_engine.pytorch.optimizers.FusedAdam (priced as torch's foreach Adam, 72 B per "
     "fp32 parameter)")),
])
def test_optimizer_the_stack_does_not_price_is_listed(edit, note):
    # stack nemo-automodel prices torch's foreach Adam without weight decay (stacks.yaml [TORCH-ADAM])
    d = _recipe()
    d["optimizer"].update(edit)
    listed = [u for u in _import(d).unmodeled if u.startswith("optimizer.")]
    assert listed == ([note] if note else [])


def test_set_overrides_a_recipe_field():
    text, _ = import_strategy("automodel", FIXTURE.read_text(), origin=FIXTURE.name, cluster="dgx-h100",
                              sets={"dataset.seq_len": 2048, "step_scheduler.local_batch_size": 2})
    assert "seq_len: 2048" in text and "micro_batch: 2" in text


@settings(max_examples=300, deadline=None)
@given(layers=st.integers(1, 200), pp=st.integers(1, 16), per=st.integers(1, 200),
       rounding=st.sampled_from(["up", "down"]))
def test_stage_split_invariants(layers, pp, per, rounding):
    # AutoModel's stages (calculate_virtual_stages, generate_hf_model_fqn_per_model_part): a multiple of pp
    # within one pp of ceil(layers / per); every layer in exactly one stage, stages differing by at most one
    stages = virtual_stages(layers, pp, per, rounding, 2)
    assert stages % pp == 0 and abs(stages - math.ceil(layers / per)) < pp
    if stages:
        counts = split_layers(layers, stages)
        assert len(counts) == stages and sum(counts) == layers and max(counts) - min(counts) <= 1
        assert counts == sorted(counts, reverse=True)


def test_single_and_multi_stage_schedules_take_their_stage_counts():
    d = _recipe()
    d["distributed"].update(pp_size=4)
    d["distributed"]["pipeline"].update(pp_schedule="1f1b", layers_per_stage=12, pp_microbatch_size=1)
    assert "vpp" not in _import(d).strategy["parallel"]          # 48 layers: 4 stages of 12, one per rank
    d["distributed"]["pipeline"]["layers_per_stage"] = 6            # 8 stages: two per rank, 1F1B runs one
    with pytest.raises(ConfigError, match="the schedule runs one stage per rank"):
        _import(d)
    d["distributed"]["pipeline"]["pp_schedule"] = "Interleaved1F1B"
    assert _import(d).strategy["parallel"]["vpp"] == 2
