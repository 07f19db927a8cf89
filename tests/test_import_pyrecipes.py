"""Issue 40 item 1: NeMo 2 and Megatron-Bridge Python recipes read statically (never executed), Bridge's
saved ConfigContainer YAML, and ``import --set``. The fixtures under tests/data/pyrecipes/ reproduce the
structure of the real files (each cites repository, path and commit); every imported field is compared
with what the file (and the cited framework defaults) say, and each import then simulates."""
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from strategies.errors import ConfigError
from strategies.importers import import_config
from strategies.pyrecipe import MAX_DEPTH, MAX_RECIPE_BYTES, evaluate_recipe
from strategies.pyrecipe_values import plain
from strategies.recipe_table import recipe_table
from taskgraph.model import PUBLISHED_PARAMS, load_model_yaml

DATA = Path(__file__).parent / "data" / "pyrecipes"


def _imp(kind, name, **kw):
    return import_config(kind, (DATA / name).read_text(), origin=name, cluster="dgx-h100", **kw)


def _finish(imp):
    from simulator.simulation.importing import check, finish
    s = finish(imp)
    check(s)
    return s


def test_nemo2_llama3_70b_every_field():
    imp = _imp("nemo", "nemo_llama3_70b.py", nodes=4, vocab=128256)
    s = imp.strategy
    # Llama3Config70B (NeMo llama.py:131-156, 215-229): 80 x 8192, 64 heads, 8 groups, ffn 28672, SwiGLU, RMSNorm
    assert s["model"] == {"name": "pretrain_recipe", "layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 8,
                          "ffn": 28672, "vocab": 128256, "mlp": "swiglu", "norm": "rmsnorm", "position": "rope",
                          "tied_embeddings": False, "bias": False, "qkv_bias": False, "dropout": False, "max_seq": 8192}
    # trainer(): tp 4, pp 4, vpp 5, cp 2, sp; distributed_fused_adam -> distributed optimizer (zero 1)
    assert s["parallel"] == {"tp": 4, "pp": 4, "cp": 2, "ep": 1, "sp": True, "zero": 1, "vpp": 5}
    assert s["training"] == {"micro_batch": 1, "global_batch": 512, "seq_len": 8192, "precision": "bf16",
                             "recompute": "none", "train_tokens": 1168251.0 * 512 * 8192}
    assert s["options"] == {"overlap_grad_reduce": True, "overlap_param_gather": True, "flash_attention": True,
                            "fp32_grad_accum": True, "cross_entropy": "native"}   # NeMo 2 GPTConfig's fusion default
    assert s["cluster"] == {"preset": "dgx-h100", "nodes": 4} and s["_gpus_per_node"] == 8
    spec = load_model_yaml(s["model"])
    assert abs(spec.param_count() / PUBLISHED_PARAMS["llama3-70b"] - 1) < 0.02
    assert _finish(imp)["cluster"]["nodes"] == 4


def test_nemo2_recipe_size_and_layout_error():
    """pretrain_recipe's own num_nodes (1) cannot hold tp4 x pp4 x cp2: one error naming both."""
    from simulator.simulation.importing import finish
    with pytest.raises(ConfigError, match=r"tp\(4\) \* pp\(4\) \* cp\(2\) = 32 GPUs does not fit the 8 GPUs"):
        finish(_imp("nemo", "nemo_llama3_70b.py", vocab=128256))
    # --set num_nodes=4 (a recipe argument) is the same run as --nodes 4
    a = _imp("nemo", "nemo_llama3_70b.py", vocab=128256, sets={"num_nodes": 4})
    assert a.strategy["cluster"]["nodes"] == 4


def test_nemo2_performance_mode_and_dotted_set():
    imp = _imp("nemo", "nemo_llama3_70b.py", nodes=8, vocab=128256,
               sets={"performance_mode": True, "trainer.strategy.tensor_model_parallel_size": 8,
                     "data.global_batch_size": 256})
    s = imp.strategy
    # pretrain_performance_optimizations: MegatronCommOverlapCallback(tp_comm_overlap=True), plugins' fp32 off
    assert s["options"]["tp_comm_overlap"] is True and s["options"]["fp32_grad_accum"] is False
    assert s["parallel"]["tp"] == 8 and s["training"]["global_batch"] == 256
    _finish(imp)


def test_nemo2_mock_tokenizer_is_gpt2_with_a_note():
    imp = _imp("nemo", "nemo_llama3_70b.py", nodes=4)
    assert imp.strategy["model"]["vocab"] == 50257
    assert any("GPT-2 BPE" in n for n in imp.unmodeled)


def test_bridge_recipe_qwen3_moe_every_field():
    imp = _imp("bridge", "bridge_qwen3_moe.py")
    s = imp.strategy
    assert s["model"] == {"name": "qwen3_30b_a3b_pretrain_16gpu_h100_fp8cs_config", "layers": 48, "hidden": 2048,
                          "heads": 32, "kv_heads": 4, "ffn": 6144, "vocab": 32000, "mlp": "swiglu", "norm": "rmsnorm",
                          "position": "rope", "tied_embeddings": False, "bias": False, "qkv_bias": False,
                          "dropout": False, "max_seq": 4096, "head_dim": 128, "qk_norm": True, "experts": 128,
                          "top_k": 8, "expert_ffn": 768}
    assert s["parallel"] == {"tp": 1, "pp": 2, "cp": 1, "ep": 8, "sp": False, "zero": 1}
    assert s["training"] == {"micro_batch": 2, "global_batch": 256, "seq_len": 4096, "precision": "fp8",
                             "recompute": "selective", "train_tokens": 1000.0 * 256 * 4096}
    # _perf_precision("fp8_cs"): current scaling (tensorwise), fp8 param gather, grads reduced in bf16
    assert s["options"] == {"overlap_grad_reduce": True, "overlap_param_gather": True, "flash_attention": True,
                            "fp8_recipe": "tensorwise", "fp8_param_gather": True, "fp32_grad_accum": False,
                            "cross_entropy": "native"}   # GPTModelProvider's cross_entropy_loss_fusion default
    assert s["_recipe_gpus"] == 16 and s["cluster"]["nodes"] is None
    spec = load_model_yaml({**s["model"], "vocab": 151936})
    assert abs(spec.param_count() / PUBLISHED_PARAMS["qwen3-30b-a3b"] - 1) < 0.02
    assert _finish(imp)["cluster"]["nodes"] == 2          # _16gpu_ on 8-GPU nodes
    assert _finish(_imp("bridge", "bridge_qwen3_moe.py", nodes=4))["cluster"]["nodes"] == 4   # --nodes wins
    assert _imp("bridge", "bridge_qwen3_moe.py", sets={"recompute": False}).strategy["training"]["recompute"] == "none"


def test_bridge_saved_yaml_every_field():
    imp = _imp("bridge", "bridge_run_config.yaml", nodes=2)
    s = imp.strategy
    assert s["model"] == {"name": "bridge_run_config", "layers": 6, "hidden": 7168, "heads": 128, "kv_heads": 128,
                          "ffn": 18432, "vocab": 129280, "mlp": "swiglu", "norm": "rmsnorm", "position": "rope",
                          "tied_embeddings": False, "bias": False, "qkv_bias": False, "dropout": False,
                          "max_seq": 4096, "head_dim": 192, "qk_norm": True, "experts": 256, "top_k": 8,
                          "expert_ffn": 2048, "shared_experts": 1, "moe_layers": [3, 4, 5], "router_bias": True,
                          "attention": "mla", "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
                          "v_head_dim": 128, "mtp_layers": 1}
    assert s["parallel"] == {"tp": 2, "pp": 1, "cp": 1, "ep": 8, "sp": True, "zero": 1, "etp": 1}
    assert s["training"] == {"micro_batch": 1, "global_batch": 64, "seq_len": 4096, "precision": "fp8",
                             "recompute": "full", "train_tokens": 500.0 * 64 * 4096}
    assert s["options"]["fp8_recipe"] == "blockwise" and "fp8_param_gather" not in s["options"]
    _finish(imp)


def test_cli_import_then_simulate(tmp_path, capsys):
    from simulator.cli.main import main
    out = tmp_path / "s.yaml"
    assert main(["import", "bridge", str(DATA / "bridge_run_config.yaml"), "--cluster", "dgx-h100", "--nodes", "2",
                 "--set", "train.global_batch_size=32", "-o", str(out)]) == 0
    text = out.read_text()
    assert "# Source: bridge_run_config.yaml, saved ConfigContainer" in text and "global_batch: 32" in text
    rec = tmp_path / "r.yaml"
    assert main(["import", "nemo", str(DATA / "nemo_llama3_70b.py"), "--cluster", "dgx-h100", "--nodes", "4",
                 "--vocab", "128256", "--set", "model.config.num_layers=20", "-o", str(rec)]) == 0
    assert "framework defaults from NVIDIA/NeMo@8cfedd720346" in rec.read_text()
    assert main(["simulate", str(out), "--fidelity", "coarse"]) == 0
    assert main(["simulate", str(rec), "--fidelity", "coarse"]) == 0
    capsys.readouterr()


def test_unresolved_value_names_line_and_set():
    src = ("from somewhere import build_model, pick\nfrom megatron.bridge.recipes.common import _pretrain_common\n"
           "def my_pretrain_8gpu_config(size='big'):\n    cfg = _pretrain_common()\n    cfg.model = build_model()\n"
           "    if pick(size):\n        cfg.train.global_batch_size = 64\n    return cfg\n")
    with pytest.raises(ConfigError, match=r"r\.py:6: the condition `pick\(size\)` .* give it with --set size=VALUE"):
        import_config("bridge", src, origin="r.py", cluster="dgx-h100")
    src2 = src.replace("    if pick(size):\n        cfg.train.global_batch_size = 64\n", "")
    with pytest.raises(ConfigError, match=r"model \(model\) is not known without running it \(r\.py:5: somewhere\.build_model\); give its fields with --set model\.num_layers=N"):
        import_config("bridge", src2, origin="r.py", cluster="dgx-h100")
    imp = import_config("bridge", src2, origin="r.py", cluster="dgx-h100", vocab=32000, sets={
        "model.num_layers": 2, "model.hidden_size": 256, "model.num_attention_heads": 4})
    assert imp.strategy["model"]["layers"] == 2 and imp.strategy["_recipe_gpus"] == 8


def test_hostile_recipes_are_never_executed(tmp_path):
    marker = tmp_path / "pwned"
    src = (f"import os, subprocess\n__import__('os').system('touch {marker}')\nos.system('touch {marker}')\n"
           f"def pretrain_recipe():\n    eval('1')\n    subprocess.run(['touch', '{marker}'])\n"
           f"    exec(open('{marker}', 'w').write('x'))\n    return os.system('touch {marker}')\n")
    with pytest.raises(ConfigError):
        import_config("nemo", src, origin="evil.py", cluster="dgx-h100", nodes=1)
    assert not marker.exists()
    loop = "def pretrain_recipe():\n    while True:\n        pass\n"
    with pytest.raises(ConfigError, match="While statement is not something execsim reads"):
        import_config("nemo", loop, origin="l.py", cluster="dgx-h100", nodes=1)
    rec = "def pretrain_recipe(n=0):\n    return pretrain_recipe(n + 1)\n"
    with pytest.raises(ConfigError, match=f"nest deeper than {MAX_DEPTH}"):
        import_config("nemo", rec, origin="r.py", cluster="dgx-h100", nodes=1)
    with pytest.raises(ConfigError, match="over the 2 MiB"):
        import_config("nemo", "x = 1\n" * (MAX_RECIPE_BYTES // 6 + 1), origin="big.py", cluster="dgx-h100", nodes=1)
    with pytest.raises(ConfigError, match="nest deeper"):
        import_config("nemo", "x = " + "[" * 500 + "]" * 500 + "\n", origin="deep.py", cluster="dgx-h100", nodes=1)
    bomb = "def pretrain_recipe():\n    a = ['x'] * 100000\n    b = [a] * 100000\n    return str(b)\n"
    with pytest.raises(ConfigError):
        import_config("nemo", bomb, origin="b.py", cluster="dgx-h100", nodes=1)
    grow = "def pretrain_recipe():\n    s = 'x' * 90000\n    return s + s\n"
    with pytest.raises(ConfigError, match="over the 100000"):
        import_config("nemo", grow, origin="g.py", cluster="dgx-h100", nodes=1)


def test_static_reader_semantics():
    src = ("def f(a, b=2, *rest, c=3, **kw):\n    return [a, b, rest, c, kw]\n"
           "def g():\n    x = {'k': 1, **{'j': 2}}\n    x['m'] = 3\n    s = f'{x[\"k\"]}-{2 ** 3}'\n"
           "    y = 7 if s == '1-8' else 0\n    for i in range(3):\n        if i == 1:\n            continue\n"
           "        y += i\n    return [f(1), f(1, 5, 6, c=4, z=9), x, s, y, 'AbC'.lower(), 10 // 3, -5 % 3]\n")
    assert plain(evaluate_recipe(src, "s.py", "g")) == [
        [1, 2, [], 3, {}], [1, 5, [6], 4, {"z": 9}], {"k": 1, "j": 2, "m": 3}, "1-8", 9, "abc", 3, 1]


def test_every_table_entry_cites_file_and_commit():
    t = recipe_table()
    for src in t["sources"].values():
        assert len(src["commit"]) == 40 and "/" in src["repository"]
    for name, e in t["entries"].items():
        assert e["source"] in t["sources"] and (".py" in e["cite"]), name


_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-2 ** 70, 2 ** 70), st.floats(allow_nan=True),
                    st.text(max_size=8), st.lists(st.integers(0, 3), max_size=3),
                    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
_FIELDS = ["model.num_layers", "model.hidden_size", "model.num_attention_heads", "model.num_query_groups",
           "model.ffn_hidden_size", "model.normalization", "model.activation_func", "model.gated_linear_unit",
           "model.position_embedding_type", "model.add_bias_linear", "model.num_moe_experts", "model.moe_layer_freq",
           "model.moe_ffn_hidden_size", "model.window_size", "model.kv_lora_rank", "model.mtp_num_layers",
           "model.tensor_model_parallel_size", "model.sequence_parallel", "model.recompute_granularity",
           "model.recompute_num_layers", "train.global_batch_size", "train.micro_batch_size", "dataset.seq_length",
           "mixed_precision", "mixed_precision.fp8_recipe", "ddp.use_distributed_optimizer", "tokenizer.vocab_size",
           "comm_overlap", "train.train_iters", "model.expert_model_parallel_size", "model.cuda_graph_impl",
           "model.cuda_graph_scope", "optimizer.use_precision_aware_optimizer", "optimizer.exp_avg_dtype",
           "optimizer.main_grads_dtype"]


@settings(max_examples=120, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@given(field=st.sampled_from(_FIELDS), value=_VALUES)
@example(field="model.num_layers", value="abc")
@example(field="mixed_precision", value=5)
def test_bridge_fields_of_every_type_give_a_strategy_or_one_error(field, value):
    """Any value of any type in any field read: an Imported or one ConfigError, never another exception."""
    try:
        imp = _imp("bridge", "bridge_run_config.yaml", nodes=2, sets={field: value})
    except ConfigError as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 600
        return
    assert imp.source == "bridge"


@settings(max_examples=60, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@given(arg=st.sampled_from(["num_nodes", "performance_mode", "num_gpus_per_node", "name"]), value=_VALUES)
def test_nemo_recipe_arguments_of_every_type(arg, value):
    try:
        _imp("nemo", "nemo_llama3_70b.py", vocab=128256, sets={arg: value})
    except ConfigError as exc:
        assert "\n" not in str(exc)


def _checkout(tmp_path):
    """A tiny checkout laid out as NeMo's: the recipe imports a helper module and a config class of its
    own package (nemo/collections/llm/recipes/llama31_405b.py + gpt/model/llama.py, structure only)."""
    pkg = tmp_path / "nemo" / "collections" / "llm"
    (pkg / "recipes").mkdir(parents=True)
    (pkg / "gpt" / "model").mkdir(parents=True)
    (pkg / "gpt" / "model" / "llama.py").write_text(
        "from dataclasses import dataclass, field\nimport torch.nn.functional as F\n"
        "class GPTConfig:\n    seq_length: int = 1024\n    share_embeddings_and_output_weights: bool = True\n"
        "@dataclass\nclass LlamaConfig(GPTConfig):\n    normalization: str = 'RMSNorm'\n"
        "    activation_func = F.silu\n    gated_linear_unit: bool = True\n    position_embedding_type: str = 'rope'\n"
        "    add_bias_linear: bool = False\n    share_embeddings_and_output_weights: bool = False\n"
        "    hidden_dropout: float = 0.0\n    attention_dropout: float = 0.0\n"
        "@dataclass\nclass TinyLlamaConfig(LlamaConfig):\n    num_layers: int = 126\n    hidden_size: int = 1024\n"
        "    ffn_hidden_size: int = 4096\n    num_attention_heads: int = 16\n    num_query_groups: int = 8\n"
        "    seq_length: int = 4096\n    moe_layer_freq: list = field(default_factory=lambda: [1] * 4)\n")
    (pkg / "recipes" / "helpers.py").write_text(
        "import nemo_run as run\nfrom nemo.collections.llm.gpt.model.llama import TinyLlamaConfig\n"
        "SEQ = 2 ** 12\n"
        "def tiny_model():\n    return run.Config(LlamaModel, config=run.Config(TinyLlamaConfig))\n"
        "def tiny_trainer(pp=8, vpp=2, nodes=1):\n"
        "    return run.Config(Trainer, num_nodes=nodes, devices=8, strategy=run.Config(MegatronStrategy,\n"
        "        pipeline_model_parallel_size=pp, virtual_pipeline_model_parallel_size=vpp,\n"
        "        account_for_embedding_in_pipeline_split=True, account_for_loss_in_pipeline_split=True))\n")
    rec = pkg / "recipes" / "tiny.py"
    rec.write_text(
        "import nemo_run as run\nfrom nemo.collections.llm.recipes.helpers import SEQ, tiny_model, tiny_trainer\n"
        "def pretrain_recipe(num_nodes: int = 2):\n"
        "    r = run.Partial(pretrain, model=tiny_model(), trainer=tiny_trainer(nodes=num_nodes),\n"
        "        data=run.Config(MockDataModule, seq_length=SEQ, global_batch_size=64, micro_batch_size=1))\n"
        "    r.model.config.num_layers = sum([x * 63 for x in [1, 1] if x])\n"
        "    return r\n")
    return rec


def test_recipe_reads_its_own_checkout_statically(tmp_path):
    rec = _checkout(tmp_path)
    imp = import_config("nemo", rec.read_text(), origin=rec.name, base_dir=str(rec.parent), cluster="dgx-h100",
                        vocab=32000)
    s = imp.strategy
    # TinyLlamaConfig over LlamaConfig over GPTConfig: the class's own values win; moe_layer_freq from default_factory
    assert s["model"]["layers"] == 126 and s["model"]["kv_heads"] == 8 and s["model"]["mlp"] == "swiglu"
    assert s["model"]["tied_embeddings"] is False and s["training"]["seq_len"] == 4096
    # account_for_embedding/loss_in_pipeline_split: (126 + 2) / 16 = 8 per virtual stage, first and last 7
    assert s["parallel"]["layers_per_stage"] == [7] + [8] * 14 + [7]
    assert s["cluster"]["nodes"] == 2
    # without the checkout the helpers are unknown: one error naming the line and the way round
    with pytest.raises(ConfigError, match=r"tiny\.py:4: tiny_model\.config \(a call of a function defined in another file"):
        import_config("nemo", rec.read_text(), origin=rec.name, cluster="dgx-h100", vocab=32000)


@pytest.mark.parametrize("config,match", [
    ("MegatronBertBaseConfig", "not a decoder-only transformer"), ("NVIDIAMambaConfig8B", "not a decoder-only"),
    ("T5Config3B", "not a decoder-only"), ("Gemma2Config27B", "model preset"), ("Llama4Experts16Config", "chunked"),
    ("UnheardOfConfig", r"not in execsim's table of framework defaults"),
])
def test_model_families_refused_by_name(config, match):
    src = (DATA / "nemo_llama3_70b.py").read_text().replace("run.Config(Llama3Config70B)", f"run.Config({config})")
    with pytest.raises(ConfigError, match=match):
        import_config("nemo", src, origin="r.py", cluster="dgx-h100", nodes=4, vocab=32000)


def _titan(config, **kw):
    path = DATA / "llama3" / "config_registry.py"
    return import_config("torchtitan", path.read_text(), origin=path.name, base_dir=str(path.parent),
                         cluster="dgx-h100", recipe=config, **kw)


def test_torchtitan_config_registry_every_field():
    s = _titan("llama3_70b", nodes=8).strategy
    assert s["model"] == "llama3-70b"     # model_registry("70B") in models/llama3/
    assert s["parallel"] == {"tp": 8, "pp": 1, "cp": 1, "ep": 1, "sp": True, "zero": 3}
    # 8 * 8192 tokens per micro-batch per rank over max_context_length 8192: local batch 8
    assert s["_local_batch"] == 8 and s["training"]["seq_len"] == 8192 and s["training"]["recompute"] == "full"
    assert s["training"]["precision"] == "bf16" and s["_steps"] == 1000
    f = _titan("llama3_405b", nodes=16).strategy
    assert f["model"] == "llama3-405b" and f["training"]["precision"] == "fp8"
    assert f["options"]["fp8_recipe"] == "tensorwise" and f["options"]["tp_comm_overlap"] is True   # async TP
    e = _titan("llama3_8b_selective", nodes=1).strategy
    assert e["model"] == "llama3-8b" and e["parallel"]["tp"] == 1 and e["training"]["recompute"] == "selective"
    assert _finish(_titan("llama3_8b_selective", nodes=1))["training"]["global_batch"] == 64   # 8 x dp 8
    with pytest.raises(ConfigError, match=r"which job\? give --config NAME \(this registry defines: llama3_70b"):
        _titan(None, nodes=1)


@settings(max_examples=80, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@given(field=st.sampled_from(["training.max_context_length", "training.num_tokens_per_microbatch_per_dp_rank",
                              "training.steps", "training.num_tokens_per_train_step", "parallelism.tensor_parallel_degree",
                              "parallelism.pipeline_parallel_degree", "parallelism.data_parallel_shard_degree",
                              "model_spec.flavor", "model_spec.converters", "activation_checkpoint", "compile.enable",
                              "training.mixed_precision_param", "hf_assets_path"]), value=_VALUES)
def test_torchtitan_registry_fields_of_every_type(field, value):
    try:
        _titan("llama3_70b", nodes=8, sets={field: value})
    except ConfigError as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 600


# ------------------------------------------------------------------ real Python recipes (EXECSIM_RECIPES)
REAL = os.environ.get("EXECSIM_RECIPES")
_REAL_CASES = [   # (path under EXECSIM_RECIPES, kind, function, extra arguments, expected fields)
    ("nemo/collections/llm/recipes/llama3_70b.py", "nemo", None, {"nodes": 4, "vocab": 128256},
     {"layers": 80, "hidden": 8192, "kv_heads": 8, "tp": 4, "pp": 4, "vpp": 5, "cp": 2, "global_batch": 512}),
    ("src/megatron/bridge/recipes/llama/h100/llama3.py", "bridge", "llama3_70b_pretrain_32gpu_h100_bf16_config", {},
     {"layers": 80, "hidden": 8192, "kv_heads": 8, "tp": 4, "pp": 4, "vpp": 5, "cp": 2, "global_batch": 512}),
    ("torchtitan/models/llama3/config_registry.py", "torchtitan", "llama3_70b", {"nodes": 8},
     {"model": "llama3-70b", "tp": 8, "recompute": "full"}),
]


@pytest.mark.skipif(not REAL, reason="EXECSIM_RECIPES (a folder holding NeMo / Megatron-Bridge / torchtitan "
                                     "checkouts) is not set")
@pytest.mark.parametrize("rel,kind,fn,extra,want", _REAL_CASES)
def test_real_python_recipes(rel, kind, fn, extra, want):
    path = Path(REAL) / rel
    if not path.is_file():
        pytest.skip(f"{rel} is not under EXECSIM_RECIPES")
    imp = import_config(kind, path.read_text(), origin=path.name, base_dir=str(path.parent), cluster="dgx-h100",
                        recipe=fn, **extra)
    s = imp.strategy
    got = {"tp": s["parallel"]["tp"], "pp": s["parallel"].get("pp"), "vpp": s["parallel"].get("vpp", 1),
           "cp": s["parallel"].get("cp"), "recompute": s["training"].get("recompute"),
           "global_batch": s["training"].get("global_batch"), "model": s["model"]}
    if isinstance(s["model"], dict):
        got.update({k: s["model"].get(k) for k in ("layers", "hidden", "kv_heads")})
    assert {k: got[k] for k in want} == want
    _finish(imp)


def test_pipeline_layout_strings_and_recipe_try_except():
    from strategies.import_pyrecipe import layout_stages
    # perf_recipes/llama/h100/llama3.py (Bridge 067f987d) llama3_70b fp8: pp 8, the layout gives 40 stages -> vpp 5
    counts = layout_stages("Et*2|(t*2|)*34,t*3|(t*2|)*3,tL", 80, 8, "x")
    assert len(counts) == 40 and counts[35] == 3 and counts[-1] == 1 and sum(counts) == 80
    assert layout_stages([["E", "t"], ["t", "L"]], 2, 2, "x") == [1, 1]
    with pytest.raises(ConfigError, match="unrolls to over 1,000,000"):
        layout_stages("(t|)*999999999", 1, 1, "x")
    with pytest.raises(ConfigError, match="has 'x', not a layer Megatron knows"):
        layout_stages("Etx|tL", 2, 2, "x")
    src = ("def pretrain_recipe(pp=3):\n    try:\n        if pp == 3:\n            raise ValueError('no layout')\n"
           "        layout = 'a'\n    except ValueError:\n        layout = None\n    return {'layout': layout}\n")
    assert plain(evaluate_recipe(src, "t.py", "pretrain_recipe")) == {"layout": None}
    assert plain(evaluate_recipe(src, "t.py", "pretrain_recipe", arguments={"pp": 2})) == {"layout": "a"}


def test_bridge_moe_overlap_lives_in_comm_overlap():
    import yaml
    data = yaml.safe_load((DATA / "bridge_run_config.yaml").read_text())
    data["comm_overlap"] = {"_target_": "CommOverlapConfig", "overlap_moe_expert_parallel_comm": True,
                            "delay_wgrad_compute": True}
    imp = import_config("bridge", data, origin="run_config.yaml", cluster="dgx-h100", nodes=2)
    o = imp.strategy["options"]
    assert o["overlap_moe_expert_parallel_comm"] is True and o["delay_wgrad_compute"] is True


def test_hostile_checkouts_are_bounded(tmp_path):
    from strategies.pyrecipe import MAX_FILES
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    for i in range(MAX_FILES + 5):     # a chain of helper modules longer than the file bound
        (pkg / f"m{i}.py").write_text(f"from pkg.m{i + 1} import f as g\ndef f():\n    return g()\n")
    (pkg / "a.py").write_text("from pkg.b import x\ny = 1\n")        # a cycle of re-exports
    (pkg / "b.py").write_text("from pkg.a import x\n")
    rec = pkg / "r.py"
    rec.write_text("from pkg.m0 import f\nfrom pkg.a import x\ndef pretrain_recipe():\n    return f()\n"
                   "def cyc():\n    return {'v': x}\n")
    with pytest.raises(ConfigError, match=f"more than {MAX_FILES} files|nest deeper"):
        evaluate_recipe(rec.read_text(), str(rec), "pretrain_recipe", source_dir=pkg)
    out = plain(evaluate_recipe(rec.read_text(), str(rec), "cyc", source_dir=pkg))
    from strategies.pyrecipe import Ref
    assert out["v"] == Ref("pkg.a.x")       # the cycle resolves to nothing: the name stays a name


def test_output_may_not_replace_a_file_the_recipe_read(tmp_path, capsys):
    from simulator.cli.main import main
    rec = _checkout(tmp_path)
    helper = rec.parent / "helpers.py"
    before = helper.read_text()
    rc = main(["import", "nemo", str(rec), "--cluster", "dgx-h100", "--vocab", "32000", "-o", str(helper)])
    err = capsys.readouterr().err
    assert rc == 2 and helper.read_text() == before and err.count("\n") == 1 and "helpers.py" in err
    assert main(["import", "nemo", str(rec), "--cluster", "dgx-h100", "--vocab", "32000", "--set",
                 "trainer.num_nodes=.inf"]) == 2
    assert "--set" in capsys.readouterr().err
