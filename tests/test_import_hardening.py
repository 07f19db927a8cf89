"""Issues 40 and 42: the NeMo launcher YAML and torchtitan TOML / logged-config importers read what the
frameworks accept and refuse the rest with one clear line.

Fixtures (tests/data/nemo/, tests/data/torchtitan/) are real files, or the real file's structure, each
citing repository, path and commit in its header. Every imported field is compared with the file, and the
import then simulates. The Hypothesis tests put a value of every JSON/YAML/TOML type into every field the
importers read (derandomised, a fixed number of examples per importer and field): each either imports
right or is one ConfigError line naming the field, never another exception."""
import copy
import json
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.cli.main import main
from simulator.simulation.importing import check, finish
from strategies.errors import ConfigError
from strategies.import_nemo import NEMO_ACTIVATIONS, resolve_interpolations
from strategies.importers import import_config, parse_source

DATA = Path(__file__).resolve().parent / "data"
NEMOTRON = DATA / "nemo" / "nemotron_8b.yaml"
QWEN2 = DATA / "nemo" / "qwen2_7b.yaml"
TITAN_LOG = DATA / "torchtitan" / "llama3_8b_train.log"


def run(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def clear_error(capsys, *argv) -> str:
    """Exit 2 and exactly one stderr line, starting with execsim, not a warning, at most 600 characters."""
    rc, _, err = run(capsys, *argv)
    lines = err.splitlines()
    assert rc == 2 and len(lines) == 1, err[:800]
    assert lines[0].startswith("execsim: error: ") and len(lines[0]) <= 600, lines[0]
    return lines[0]


def imported(kind, source, **kw):
    """Import, finish against the cluster and resolve as ``execsim simulate`` would."""
    imp = import_config(kind, source, **kw)
    s = finish(imp)
    check(s)
    return s, imp


# ------------------------------------------------------------------------------ NeMo: real files
def test_nemotron_8b_recipe_every_field_and_simulates(tmp_path, capsys):
    """Nemotron 8B: squared-relu MLP (So 2021 "Primer"), layernorm1p, a sentencepiece tokenizer the
    recipe does not name (model: null: --vocab needed, never a default), TP 2 + SP, TE attention."""
    f = yaml.safe_load(NEMOTRON.read_text())
    m, t = f["model"], f["trainer"]
    msg = clear_error(capsys, "import", "nemo", NEMOTRON, "--cluster", "dgx-h100")
    assert "vocabulary size is not known" in msg and "--vocab" in msg
    out = tmp_path / "s.yaml"
    rc, _, _ = run(capsys, "import", "nemo", NEMOTRON, "--cluster", "dgx-h100", "--vocab", "256000", "-o", out)
    assert rc == 0
    s = yaml.safe_load(out.read_text())
    assert s["model"] == {"name": "nemo-gpt", "layers": m["num_layers"], "hidden": m["hidden_size"],
                          "heads": m["num_attention_heads"], "kv_heads": m["num_attention_heads"],
                          "ffn": m["ffn_hidden_size"], "vocab": 256000, "mlp": "squared-relu", "norm": "layernorm",
                          "position": "rope", "max_seq": m["max_position_embeddings"], "tied_embeddings": False,
                          "bias": False, "dropout": False}
    assert s["parallel"] == {"tp": m["tensor_model_parallel_size"], "pp": 1, "cp": 1, "ep": 1, "sp": True, "zero": 1}
    assert s["cluster"] == {"preset": "dgx-h100", "nodes": t["num_nodes"]}
    assert s["training"] == {"micro_batch": m["micro_batch_size"], "global_batch": m["global_batch_size"],
                             "seq_len": m["data"]["seq_length"], "precision": "bf16", "recompute": "none",
                             "train_tokens": float(t["max_steps"] * m["global_batch_size"] * m["data"]["seq_length"])}
    assert s["options"] == {"overlap_grad_reduce": True, "overlap_param_gather": True, "tp_comm_overlap": True,
                            "p2p_overlap": False, "flash_attention": True,
                            "cross_entropy": "native"}   # model.cross_entropy_loss_fusion: true (stacks.yaml [MEG-CE])
    from taskgraph.model import load_model_yaml
    spec = load_model_yaml(s["model"])
    h, f_, v, L = 4096, 16384, 256000, 32
    # closed form: qkv + out 4h^2, two MLP matrices 2hf (no biases), two LayerNorms 4h per layer; final
    # LayerNorm 2h; untied input and output embeddings 2Vh
    assert spec.param_count() == L * (4 * h * h + 2 * h * f_ + 4 * h) + 2 * h + 2 * v * h
    rc, text, _ = run(capsys, "simulate", out)
    assert rc == 0 and "iteration time" in text


def test_qwen2_7b_recipe_qkv_bias_override_vocab_and_data_seq_length(tmp_path, capsys):
    f = yaml.safe_load(QWEN2.read_text())
    m = f["model"]
    out = tmp_path / "s.yaml"
    rc, _, _ = run(capsys, "import", "nemo", QWEN2, "--cluster", "dgx-h100", "-o", out)
    assert rc == 0
    s = yaml.safe_load(out.read_text())
    assert s["model"]["vocab"] == m["override_vocab_size"] == 151936      # the override, not padded
    assert s["model"]["qkv_bias"] is True and s["model"]["bias"] is False  # add_qkv_bias without add_bias_linear
    assert s["model"]["mlp"] == "swiglu" and s["model"]["norm"] == "rmsnorm"
    assert s["training"]["seq_len"] == m["data"]["seq_length"] == 32768
    assert s["parallel"] == {"tp": 4, "pp": 1, "cp": 1, "ep": 1, "sp": True, "zero": 1}
    assert s["cluster"]["nodes"] == f["trainer"]["num_nodes"] == 16
    from taskgraph.model import load_model_yaml
    # Qwen1.5-7B (the tokenizer the recipe names; the same shape): 7.72 B parameters (Hugging Face model card)
    assert load_model_yaml(s["model"]).param_count() == pytest.approx(7.72e9, rel=0.02)
    rc, text, _ = run(capsys, "simulate", out)
    assert rc == 0 and "iteration time" in text


# ------------------------------------------------------------------------------ NeMo: fields
BASE_NEMO = {"trainer": {"num_nodes": 1, "devices": 8, "precision": "bf16", "max_steps": 10},
             "model": {"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "ffn_hidden_size": 256,
                       "micro_batch_size": 1, "global_batch_size": 8, "encoder_seq_length": 128,
                       "max_position_embeddings": 128, "tensor_model_parallel_size": 1,
                       "tokenizer": {"library": "megatron", "type": "GPT2BPETokenizer"},
                       "optim": {"name": "distributed_fused_adam"}, "data": {"seq_length": 128}}}


def nemo(**model):
    d = copy.deepcopy(BASE_NEMO)
    d["model"].update(model)
    return d


@pytest.mark.parametrize("act", sorted(NEMO_ACTIVATIONS))
def test_every_nemo_activation_is_mapped_or_refused_by_name(act):
    """utils_funcs.py activation_to_func's supported_activations, each one."""
    if NEMO_ACTIVATIONS[act] is None:
        with pytest.raises(ConfigError, match=rf"model.activation = '{act}' .ReLU-gated, ReGLU. is not modeled"):
            import_config("nemo", nemo(activation=act), cluster="dgx-h100")
        return
    s, _ = imported("nemo", nemo(activation=act), cluster="dgx-h100")
    assert s["model"]["mlp"] == {"gelu": "gelu", "approx-gelu": "gelu", "geglu": "geglu", "fast-geglu": "geglu",
                                 "swiglu": "swiglu", "fast-swiglu": "swiglu", "squared-relu": "squared-relu"}[act]
    # openai_gelu wins over the activation, the gate stays (activation_to_func; gated = name ends in glu)
    s, _ = imported("nemo", nemo(activation=act, openai_gelu=True), cluster="dgx-h100")
    assert s["model"]["mlp"] == ("geglu" if act.endswith("glu") else "gelu")


def test_squared_relu_costs_two_gemms_and_a_two_flop_activation():
    """relu(x)^2 (So 2021 "Primer" Section 3): gelu's two GEMMs and parameters, 2 FLOPs per element."""
    from taskgraph.model import load_model_yaml
    from taskgraph.operators import layer_operators
    base = {"name": "t", "layers": 2, "hidden": 64, "heads": 4, "ffn": 256, "vocab": 1000, "max_seq": 128}
    sq, ge = load_model_yaml({**base, "mlp": "squared-relu"}), load_model_yaml({**base, "mlp": "gelu"})
    assert sq.param_count() == ge.param_count() and not sq.gated_mlp
    ops = {o.name: o for o in layer_operators(sq, micro_batch=1, seq_len=128)}
    gops = {o.name: o for o in layer_operators(ge, micro_batch=1, seq_len=128)}
    assert ops["mlp_up"].fwd_flops == gops["mlp_up"].fwd_flops == 2 * 128 * 64 * 256
    assert ops["mlp_act"].fwd_flops == 2 * 128 * 256 and gops["mlp_act"].fwd_flops == 8 * 128 * 256


def test_vocabulary_from_the_tokenizer_padded_as_nemo_pads_it_or_the_override():
    """megatron_base_model.py _vocab_size_with_padding: a multiple of make_vocab_size_divisible_by x tp."""
    llama3 = {"library": "huggingface", "type": "meta-llama/Meta-Llama-3-8B"}
    s, _ = imported("nemo", nemo(tokenizer=llama3, tensor_model_parallel_size=4, num_attention_heads=4),
                    cluster="dgx-h100")
    assert s["model"]["vocab"] == 128512                  # 128256 -> next multiple of 128 x 4
    s, _ = imported("nemo", nemo(tokenizer=llama3, make_vocab_size_divisible_by=1), cluster="dgx-h100")
    assert s["model"]["vocab"] == 128256
    s, _ = imported("nemo", nemo(tokenizer={"type": "mistralai/Mistral-Nemo-Base-2407"}), cluster="dgx-h100")
    assert s["model"]["vocab"] == 131072                  # the longest prefix, not Mistral-7B's 32000
    s, _ = imported("nemo", nemo(tokenizer={"library": "sentencepiece", "model": "${data_dir}/t.model"}),
                    cluster="dgx-h100", vocab=50000)
    assert s["model"]["vocab"] == 50048                   # --vocab is the tokenizer's, padded
    s, _ = imported("nemo", nemo(override_vocab_size=1001), cluster="dgx-h100", vocab=50000)
    assert s["model"]["vocab"] == 1001
    with pytest.raises(ConfigError, match=r"vocabulary size is not known .* give --vocab N"):
        import_config("nemo", nemo(tokenizer={"library": "sentencepiece", "model": None}), cluster="dgx-h100")


def test_sequence_length_is_the_data_sections_not_the_models_maximum():
    s, _ = imported("nemo", nemo(encoder_seq_length=256, max_position_embeddings=256, data={"seq_length": 64}),
                    cluster="dgx-h100")
    assert s["training"]["seq_len"] == 64 and s["model"]["max_seq"] == 256
    d = nemo(encoder_seq_length=256, max_position_embeddings=256)
    d["model"]["data"] = {"seq_length": "${model.encoder_seq_length}"}        # the launcher recipes' spelling
    assert imported("nemo", d, cluster="dgx-h100")[0]["training"]["seq_len"] == 256
    d = nemo()
    del d["model"]["encoder_seq_length"], d["model"]["data"]
    with pytest.raises(ConfigError, match=r"model.data.seq_length .* are missing"):
        import_config("nemo", d, cluster="dgx-h100")


@pytest.mark.parametrize("keys,flash", [
    ({"mcore_gpt": True, "transformer_engine": True, "use_flash_attention": False}, True),   # TE's, whatever legacy says
    ({"mcore_gpt": True, "transformer_engine": True, "attention_backend": "unfused"}, False),
    ({"mcore_gpt": True, "transformer_engine": False, "use_flash_attention": True}, False),  # the local spec
    ({"mcore_gpt": False, "use_flash_attention": True}, True),                              # legacy model
    ({}, False),                                                                            # NeMo's defaults
])
def test_attention_kernel_is_the_one_nemo_runs(keys, flash):
    assert imported("nemo", nemo(**keys), cluster="dgx-h100")[0]["options"]["flash_attention"] is flash


def test_nemo_fp8_is_delayed_scaling_and_fp8_params_gather_fp8():
    s, _ = imported("nemo", nemo(fp8=True, fp8_params=True), cluster="dgx-h100")
    assert s["training"]["precision"] == "fp8" and s["options"]["fp8_recipe"] == "delayed"
    assert s["options"]["fp8_param_gather"] is True
    s, imp = imported("nemo", nemo(fp8_params=True), cluster="dgx-h100")
    assert "fp8_recipe" not in s["options"] and "fp8_param_gather" not in s["options"]
    assert "model.fp8_params (no effect without model.fp8)" in imp.unmodeled


def test_nemo_window_size_is_a_sliding_window():
    """launcher_scripts/conf/training/mistral/mistral_7b.yaml (26e42fa): window_size [4096, 0]."""
    s, _ = imported("nemo", nemo(window_size=[64, 0]), cluster="dgx-h100")
    assert s["model"]["sliding_window"] == 64
    assert "sliding_window" not in imported("nemo", nemo(window_size=[-1, 0]), cluster="dgx-h100")[0]["model"]
    with pytest.raises(ConfigError, match=r"model.window_size = \[64\] must be \[left, 0\]"):
        import_config("nemo", nemo(window_size=[64]), cluster="dgx-h100")


NEMO_REFUSED = [
    ({"trainer": 5}, r"trainer = 5 must be a section"),
    ({"model.optim": [1, 2]}, r"model.optim = \[1, 2\] must be a section"),
    ({"model.activations_checkpoint_granularity": "full", "model.activations_checkpoint_method": "block",
      "model.activations_checkpoint_num_layers": "abc"}, r"model.activations_checkpoint_num_layers = 'abc' must be an integer"),
    ({"model.tokenizer": 50257}, r"model.tokenizer = 50257 must be a section"),
    ({"model.tokenizer": "gpt2"}, r"model.tokenizer = 'gpt2' must be a section"),
    ({"model.tokenizer.type": 5}, r"model.tokenizer.type = 5 must be a name"),
    ({"model.make_vocab_size_divisible_by": 0}, r"make_vocab_size_divisible_by = 0 must be an integer from 1"),
    ({"model.hidden_dropout": float("nan")}, r"model.hidden_dropout = nan must be a finite number"),
    ({"model.num_layers": 10 ** 30}, r"model.num_layers = 1000000000000000000000000000000 must be an integer"),
    ({"model.virtual_pipeline_model_parallel_size": 0}, r"virtual_pipeline_model_parallel_size = 0 must be an integer from 1"),
    ({"model.normalization": "foo"}, r"model.normalization = 'foo' is not one of layernorm"),
    ({"model.position_embedding_type": "xpos"}, r"position_embedding_type = 'xpos' is not modeled"),
    ({"model.activation": "relu"}, r"model.activation = 'relu' is not one of gelu"),
    ({"trainer.precision": True}, r"trainer.precision = True is not one of"),
    ({"model.sequence_parallel": "yes"}, r"model.sequence_parallel = 'yes' must be true or false"),
    ({"model.num_layers": "${nowhere}"}, r"model.num_layers = '\$\{nowhere\}' is an interpolation execsim could not"),
    ({"model.attention_backend": "magic"}, r"model.attention_backend = 'magic' is not one of auto"),
    ({"model.moe_token_dispatcher_type": 3, "model.num_moe_experts": 4}, r"moe_token_dispatcher_type = 3 is not one"),
]


def set_dotted(d: dict, dotted: str, value) -> dict:
    *parents, last = dotted.split(".")
    node = d
    for k in parents:
        node = node.setdefault(k, {})
    node[last] = value
    return d


@pytest.mark.parametrize("edits,match", NEMO_REFUSED)
def test_nemo_wrong_types_are_one_clear_line(edits, match, tmp_path, capsys):
    """Each of these raised a traceback, or was accepted, before (issue 42 items 2 and 4)."""
    d = copy.deepcopy(BASE_NEMO)
    for k, v in edits.items():
        set_dotted(d, k, v)
    (tmp_path / "n.yaml").write_text(yaml.safe_dump(d))
    import re
    msg = clear_error(capsys, "import", "nemo", tmp_path / "n.yaml", "--cluster", "dgx-h100")
    assert re.search(match, msg), msg


# ------------------------------------------------------------------------------ NeMo: interpolation
def test_interpolation_resolves_relative_nested_resolvers_and_sections():
    r = resolve_interpolations({"base": {"optim": {"name": "adam"}, "n": 3},
                                "model": {"a": 4, "b": "${multiply:${.a},${base.n}}", "c": "${sum:${.b},-2}",
                                          "optim": "${base.optim}", "o": "${model.optim.name}", "l": [5, "${..a}"],
                                          "first": "${model.l.0}", "p": "x/${.a}/${data_dir}"}})
    m = r["model"]
    assert (m["b"], m["c"], m["o"], m["l"], m["first"], m["p"]) == (12, 10, "adam", [5, 4], 5, "x/4/${data_dir}")
    assert m["optim"] == {"name": "adam"}
    loop = resolve_interpolations({"a": "${b}", "b": "${a}"})           # a cycle stays as written
    assert loop["a"].startswith("${") and loop["b"].startswith("${")


def test_interpolation_of_8_references_over_9_levels_is_refused_not_expanded():
    """Memoised, each level costs one resolution; the characters it would produce are bounded."""
    x = {"a0": "xx"} | {f"a{k}": "".join(f"${{.a{k - 1}}}" for _ in range(8)) for k in range(1, 10)}
    with pytest.raises(ConfigError, match=r"the interpolations in x.a\d expand to more than 100,000 characters"):
        resolve_interpolations({"x": x})
    # whole-value references to sections share the resolved section: bounded by the expanded size
    y = {"d0": {"q": list(range(8))}} | {f"d{k}": {f"k{i}": f"${{y.d{k - 1}}}" for i in range(8)} for k in range(1, 10)}
    with pytest.raises(ConfigError, match=r"expands to more than 1,000,000 values"):
        resolve_interpolations({"y": y})


def test_yaml_alias_bombs_and_self_references_are_refused_before_expansion():
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"] + \
        [f"a{k}: &a{k} [{', '.join([f'*a{k - 1}'] * 9)}]" for k in range(1, 10)]
    text = "\n".join(lines) + "\nmodel: {num_layers: 2}\n"
    with pytest.raises(ConfigError, match=r"expands to more than 1,000,000 values once its aliases"):
        import_config("nemo", parse_source("nemo", text), cluster="dgx-h100")
    with pytest.raises(ConfigError, match=r"a section contains itself"):
        import_config("nemo", parse_source("nemo", "a: &a [1, *a]\nmodel: {num_layers: 2}\n"), cluster="dgx-h100")


# ------------------------------------------------------------------------------ torchtitan
TT = "[model]\nname = 'llama3'\nflavor = '8B'\n[training]\nlocal_batch_size = 1\nseq_len = 4096\n"


def test_torchtitan_converters_as_text_and_quantize_names():
    s, _ = imported("torchtitan", TT.replace("flavor = '8B'\n", "flavor = '8B'\nconverters = 'float8'\n"),
                    cluster="dgx-h100", nodes=1)
    assert s["training"]["precision"] == "fp8" and s["options"]["fp8_recipe"] == "tensorwise"
    t = TT.replace("flavor = '8B'\n", "flavor = '8B'\nconverters = ['quantize.linear.float8']\n") + \
        "[quantize.linear.float8]\nrecipe_name = 'rowwise'\n"
    s, _ = imported("torchtitan", t, cluster="dgx-h100", nodes=1)
    assert s["training"]["precision"] == "fp8" and s["options"]["fp8_recipe"] == "rowwise"
    with pytest.raises(ConfigError, match=r"model.converters = 'int8' is not a converter execsim models"):
        import_config("torchtitan", TT.replace("flavor = '8B'\n", "flavor = '8B'\nconverters = ['int8']\n"),
                      cluster="dgx-h100", nodes=1)


@pytest.mark.parametrize("policy,want", [("always", True), ("never", False), ("default", None)])
def test_fsdp_reshard_after_forward_maps_to_the_option(policy, want):
    s, imp = imported("torchtitan", TT + f"[parallelism]\nfsdp_reshard_after_forward = '{policy}'\n",
                      cluster="dgx-h100", nodes=1)
    assert s["options"].get("reshard_after_forward") is want
    assert not any("fsdp_reshard" in u for u in imp.unmodeled)
    # without FSDP (shard degree 1, replicate 8) it does nothing: said, not dropped
    s, imp = imported("torchtitan", TT + "[parallelism]\ndata_parallel_shard_degree = 1\n"
                      "data_parallel_replicate_degree = 8\nfsdp_reshard_after_forward = 'never'\n",
                      cluster="dgx-h100", nodes=1)
    assert "reshard_after_forward" not in s["options"] and any("no FSDP" in u for u in imp.unmodeled)


def test_torchtitan_compile_as_a_bool_and_layer_selective_ac():
    assert imported("torchtitan", "compile = true\n" + TT, cluster="dgx-h100", nodes=1)[0]["options"]["stack"] == \
        "torchtitan-compile"
    assert imported("torchtitan", TT + "compile = true\n", cluster="dgx-h100", nodes=1)[0]["options"]["stack"] == \
        "torchtitan-compile"
    # selective_ac_option '3': layers 3, 6, 9 ... (count from 1) checkpointed whole (activation_checkpoint.py)
    s, _ = imported("torchtitan", TT + "[activation_checkpoint]\nmode = 'selective'\nselective_ac_option = '3'\n",
                    cluster="dgx-h100", nodes=1)
    assert s["training"]["recompute_layers"][:6] == ["none", "none", "full", "none", "none", "full"]
    assert len(s["training"]["recompute_layers"]) == 32
    s, _ = imported("torchtitan", TT + "[activation_checkpoint]\nselective_ac_option = 'op'\n", cluster="dgx-h100",
                    nodes=1)
    assert s["training"]["recompute"] == "selective"
    s, _ = imported("torchtitan", TT.replace("seq_len = 4096\n", "seq_len = 4096\nglobal_batch_size = 32\n"),
                    cluster="dgx-h100", nodes=1)
    assert s["training"]["global_batch"] == 32 and s["training"]["micro_batch"] == 1   # 4 accumulation steps


def test_torchtitan_logged_job_config_imports_as_its_toml(tmp_path, capsys):
    """job.print_config's 'Running with configs:' JSON, each line behind torchrun's [rank0]: prefix."""
    log = TITAN_LOG.read_text()
    cfg = json.loads(log[log.index("Running with configs: ") + 22:].split("\n[rank0]:[titan]")[0]
                     .replace("\n[rank0]:", "\n"))
    s_log, imp = imported("torchtitan", log, cluster="dgx-h100", nodes=1)
    toml = (f"[model]\nname = '{cfg['model']['name']}'\nflavor = '{cfg['model']['flavor']}'\n[training]\n"
            f"local_batch_size = {cfg['training']['local_batch_size']}\nseq_len = {cfg['training']['seq_len']}\n"
            f"steps = {cfg['training']['steps']}\n[activation_checkpoint]\nselective_ac_option = 'op'\n")
    assert s_log == imported("torchtitan", toml, cluster="dgx-h100", nodes=1)[0]
    assert s_log["model"] == "llama3-8b" and s_log["training"]["seq_len"] == 8192
    assert imp.unmodeled == ("training.dataset",)          # the rest is at torchtitan's defaults
    # the file job.save_config_file writes: the same mapping as JSON
    saved = imported("torchtitan", json.dumps(cfg, indent=2), cluster="dgx-h100", nodes=1)[0]
    assert saved == s_log
    out = tmp_path / "s.yaml"
    rc, _, _ = run(capsys, "import", "torchtitan", TITAN_LOG, "--cluster", "dgx-h100", "--nodes", "1", "-o", out)
    assert rc == 0
    rc, text, _ = run(capsys, "simulate", out)
    assert rc == 0 and "iteration time" in text
    (tmp_path / "nocfg.log").write_text("[rank0]:[titan] 2025-10-22 09:14:01,118 - root - INFO - Starting job: x\n")
    assert "without the job config" in clear_error(capsys, "import", "torchtitan", tmp_path / "nocfg.log",
                                                   "--cluster", "dgx-h100", "--nodes", "1")


def test_hf_assets_config_cannot_be_overwritten_by_the_output(tmp_path, capsys):
    """Issue 42 item 1: `import torchtitan t.toml -o assets/config.json` replaced the config the TOML points to."""
    (tmp_path / "assets").mkdir()
    cfg = tmp_path / "assets" / "config.json"
    cfg.write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
                               "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
                               "intermediate_size": 512, "vocab_size": 1000, "max_position_embeddings": 4096}))
    before = cfg.read_text()
    (tmp_path / "t.toml").write_text(TT.replace("flavor = '8B'\n", "flavor = '8B'\nhf_assets_path = 'assets'\n"))
    msg = clear_error(capsys, "import", "torchtitan", tmp_path / "t.toml", "--cluster", "dgx-h100", "--nodes", "1",
                      "-o", cfg)
    assert "is an input file" in msg and cfg.read_text() == before
    cfg.write_text(before.replace('"llama"', '"no-such-model"').replace("LlamaForCausalLM", "NoSuchForCausalLM"))
    clear_error(capsys, "import", "torchtitan", tmp_path / "t.toml", "--cluster", "dgx-h100", "--nodes", "1")


TT_REFUSED = [
    ("model = 'llama3'\n", r"model = 'llama3' must be a section"),
    (TT.split("[training]")[0] + "[[training]]\nseq_len = 4096\n", r"training = \[.*\] must be a section"),
    (TT.replace("seq_len = 4096", "seq_len = nan"), r"training.seq_len = nan must be an integer"),
    (TT + "[parallelism]\ntensor_parallel_degree = 99999999999999999999\n", r"tensor_parallel_degree = 9+ must be"),
    (TT + "compile = 'yes'\n", r"training.compile = 'yes' must be true or false"),
    (TT + "[compile]\nenable = 1\n", r"compile.enable = 1 must be true or false"),
    (TT.replace("flavor = '8B'\n", "flavor = '8B'\nconverters = [5]\n"), r"model.converters = \[5\] must be a list"),
    (TT + "[activation_checkpoint]\nmode = 'memory_budget'\n", r"'memory_budget' .* is not modeled"),
    (TT + "[activation_checkpoint]\nselective_ac_option = 'some'\n", r"selective_ac_option = 'some' must be 'op'"),
    (TT + "[parallelism]\npipeline_parallel_degree = 2\npipeline_parallel_schedule = 5\n",
     r"pipeline_parallel_schedule = 5 is not modeled"),
    (TT + "[parallelism]\nfsdp_reshard_after_forward = 'sometimes'\n", r"fsdp_reshard_after_forward = 'sometimes' is not"),
    ("[model]\nname = 5\n", r"model.name = 5 must be a name"),
    (TT + "[parallelism]\ndata_parallel_shard_degree = 0\n", r"data_parallel_shard_degree = 0 must be an integer from 1"),
]


@pytest.mark.parametrize("text,match", TT_REFUSED)
def test_torchtitan_wrong_types_are_one_clear_line(text, match, tmp_path, capsys):
    import re
    (tmp_path / "t.toml").write_text(text)
    msg = clear_error(capsys, "import", "torchtitan", tmp_path / "t.toml", "--cluster", "dgx-h100", "--nodes", "1")
    assert re.search(match, msg), msg


# ------------------------------------------------------------------------------ Hypothesis
#: a value of every JSON / YAML / TOML type, and the edge values of each
VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-2 ** 70, 2 ** 70),
    st.sampled_from([0, -1, 1, 2, 3, 8, 2 ** 53, 2 ** 63, 10 ** 30]),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([float("nan"), float("inf"), 0.5, 1.0, 1e300]),
    st.text(max_size=10), st.sampled_from(["", "abc", "${x}", "${multiply:2,3}", "${model.num_layers}", "8B", "bf16",
                                           "float8", "full", "block", "selective", "op", "1F1B", "rmsnorm", "-1"]),
    st.lists(st.one_of(st.integers(), st.text(max_size=4)), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)
TOML_VALUES = st.one_of(VALUES, st.datetimes(), st.dates(), st.times())

NEMO_FIELDS = {  # dotted field -> where it lands when it imports (None: checked for errors only)
    "trainer": None, "trainer.num_nodes": ("cluster", "nodes"), "trainer.devices": None, "trainer.precision": None,
    "trainer.max_steps": None, "model": None, "model.num_layers": ("model", "layers"),
    "model.hidden_size": ("model", "hidden"), "model.num_attention_heads": ("model", "heads"),
    "model.ffn_hidden_size": ("model", "ffn"), "model.num_query_groups": ("model", "kv_heads"),
    "model.kv_channels": ("model", "head_dim"), "model.micro_batch_size": ("training", "micro_batch"),
    "model.global_batch_size": ("training", "global_batch"), "model.tensor_model_parallel_size": ("parallel", "tp"),
    "model.pipeline_model_parallel_size": ("parallel", "pp"), "model.virtual_pipeline_model_parallel_size": None,
    "model.context_parallel_size": ("parallel", "cp"), "model.expert_model_parallel_size": ("parallel", "ep"),
    "model.sequence_parallel": None, "model.encoder_seq_length": None, "model.max_position_embeddings": ("model", "max_seq"),
    "model.data": None, "model.data.seq_length": ("training", "seq_len"), "model.normalization": None,
    "model.activation": None, "model.openai_gelu": None, "model.bias": ("model", "bias"), "model.qkv_bias": None,
    "model.position_embedding_type": None, "model.share_embeddings_and_output_weights": ("model", "tied_embeddings"),
    "model.hidden_dropout": None, "model.attention_dropout": None, "model.tokenizer": None, "model.tokenizer.type": None,
    "model.tokenizer.model": None, "model.override_vocab_size": ("model", "vocab"),
    "model.make_vocab_size_divisible_by": None, "model.activations_checkpoint_granularity": None,
    "model.activations_checkpoint_method": None, "model.activations_checkpoint_num_layers": None, "model.fp8": None,
    "model.optim": None, "model.optim.name": None, "model.optim.overlap_grad_sync": ("options", "overlap_grad_reduce"),
    "model.optim.overlap_param_sync": None, "model.optim.grad_sync_dtype": None, "model.ub_tp_comm_overlap": None,
    "model.overlap_p2p_comm": None, "model.mcore_gpt": None, "model.transformer_engine": None,
    "model.attention_backend": None, "model.use_flash_attention": None, "model.num_moe_experts": None,
    "model.moe_router_topk": None, "model.moe_expert_capacity_factor": None, "model.moe_token_dispatcher_type": None,
    "model.cpu_offloading": None, "model.cpu_offloading_num_layers": None, "model.window_size": None,
    "model.fp8_params": None,
}
TT_FIELDS = {
    "model": None, "model.name": None, "model.flavor": None, "model.converters": None, "model.hf_assets_path": None,
    "training": None, "training.local_batch_size": ("training", "micro_batch"), "training.seq_len": ("training", "seq_len"),
    "training.global_batch_size": None, "training.steps": None, "training.mixed_precision_param": None,
    "training.compile": None, "parallelism": None, "parallelism.tensor_parallel_degree": ("parallel", "tp"),
    "parallelism.pipeline_parallel_degree": ("parallel", "pp"), "parallelism.context_parallel_degree": ("parallel", "cp"),
    "parallelism.data_parallel_shard_degree": None, "parallelism.data_parallel_replicate_degree": None,
    "parallelism.expert_parallel_degree": None, "parallelism.pipeline_parallel_schedule": None,
    "parallelism.pipeline_parallel_microbatch_size": None, "parallelism.fsdp_reshard_after_forward": None,
    "parallelism.enable_async_tensor_parallel": ("options", "tp_comm_overlap"), "activation_checkpoint": None,
    "activation_checkpoint.mode": None, "activation_checkpoint.selective_ac_option": None, "compile": None,
    "compile.enable": None, "compile.components": None, "float8": None, "float8.recipe_name": None,
    "job.dump_folder": None,
}
BASE_TT = {"model": {"name": "llama3", "flavor": "8B", "converters": ["float8"]},
           "training": {"local_batch_size": 1, "seq_len": 2048, "steps": 10},
           "parallelism": {"data_parallel_shard_degree": -1, "tensor_parallel_degree": 1}}


def one_import(kind: str, data: dict, dotted: str, value, lands) -> None:
    """Either the import is right (the value lands where it should) or one ConfigError line names the field."""
    try:
        s, _ = imported(kind, data, cluster="dgx-h100", nodes=1 if kind == "torchtitan" else None)
    except ConfigError as exc:
        msg = str(exc)
        assert "\n" not in msg and len(msg) <= 584, msg[:700]
        if isinstance(value, (list, dict)) and dotted.count(".") and lands:
            assert dotted.split(".")[-1] in msg, msg
        return
    if lands is not None and value is not None and not isinstance(value, (list, dict)):
        assert s[lands[0]][lands[1]] == value, (dotted, value, s[lands[0]])


@pytest.mark.parametrize("dotted", sorted(NEMO_FIELDS))
@settings(derandomize=True, max_examples=12, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(value=VALUES)
def test_nemo_any_value_in_any_field_imports_right_or_is_one_error(dotted, value):
    d = nemo(num_moe_experts=None) if dotted.startswith("model.moe") else copy.deepcopy(BASE_NEMO)
    if dotted.startswith("model.moe"):
        d["model"].update(num_moe_experts=4, moe_router_topk=2)
    one_import("nemo", set_dotted(d, dotted, value), dotted, value, NEMO_FIELDS[dotted])


@pytest.mark.parametrize("dotted", sorted(TT_FIELDS))
@settings(derandomize=True, max_examples=12, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(value=TOML_VALUES)
def test_torchtitan_any_value_in_any_field_imports_right_or_is_one_error(dotted, value):
    one_import("torchtitan", set_dotted(copy.deepcopy(BASE_TT), dotted, value), dotted, value, TT_FIELDS[dotted])


@pytest.mark.parametrize("ac,want", [(None, "none"), ({"preserve_rng_state": True, "determinism_check": "default"}, "full"),
                                     ({"preserve_rng_state": True, "force_recompute_mm_shapes_by_fqns": []}, "selective")])
def test_registry_era_logged_config_reads_model_spec_and_the_ac_class(ac, want):
    """After 9810191 torchtitan logs Trainer.Config.to_dict(): model_spec {name, flavor, model}, and the
    activation-checkpoint policy as its config class's fields (distributed/activation_checkpoint.py)."""
    cfg = {"model_spec": {"name": "llama3", "flavor": "8B", "model": {"dim": 4096, "converters": ["x"]}},
           "hf_assets_path": "./nowhere", "training": {"local_batch_size": 2, "seq_len": 4096},
           "parallelism": {"tensor_parallel_degree": 2}, "activation_checkpoint": ac}
    s, imp = imported("torchtitan", cfg, cluster="dgx-h100", nodes=1)
    assert s["model"] == "llama3-8b" and s["training"]["recompute"] == want and s["parallel"]["tp"] == 2
    assert "model_spec.model.converters" in imp.unmodeled and "model_spec.model.dim" not in imp.unmodeled
    with pytest.raises(ConfigError, match=r"MemoryBudgetAC.* is not modeled"):
        import_config("torchtitan", {**cfg, "activation_checkpoint": {"memory_budget": 0.5}}, cluster="dgx-h100", nodes=1)
