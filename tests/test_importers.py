"""execsim import: Megatron-LM launch scripts, NeMo recipes and torchtitan TOML files -> strategy files."""
from pathlib import Path

import pytest
import yaml

from simulator.cli.main import main
from strategies.errors import ConfigError
from strategies.importers import import_config

DATA = Path(__file__).resolve().parent.parent / "strategies" / "examples" / "sources"
MEGATRON = DATA / "train_gpt3_175b_distributed.sh"
NEMO = DATA / "nemo_llama3_8b.yaml"
TITAN = DATA / "torchtitan_llama3_8b.toml"


def run(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_megatron_gpt3_175b_launch_script(tmp_path, capsys):
    out = tmp_path / "s.yaml"
    rc, _, err = run(capsys, "import", "megatron", MEGATRON, "--cluster", "dgx-a100-80g", "--nodes", "128", "-o", out)
    assert rc == 0
    s = yaml.safe_load(out.read_text())
    assert s["model"] == {"name": "megatron-gpt", "layers": 96, "hidden": 12288, "heads": 96, "kv_heads": 96,
                          "ffn": 49152, "vocab": 50257, "mlp": "gelu", "norm": "layernorm", "position": "learned",
                          "max_seq": 2048, "tied_embeddings": True, "bias": True, "dropout": True}
    assert s["parallel"] == {"tp": 8, "pp": 16, "cp": 1, "ep": 1, "sp": False, "zero": 0}
    assert s["training"] == {"micro_batch": 1, "global_batch": 1536, "seq_len": 2048, "precision": "fp16",
                             "recompute": "none", "train_tokens": 500000 * 1536 * 2048.0}
    # Megatron's defaults: no overlap unless asked, fp16 main grads without the fp32 flag
    assert s["options"]["overlap_grad_reduce"] is False and s["options"]["fp32_grad_accum"] is False
    # one warning line listing what is not modeled, the same list in the file header
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("execsim: warning: megatron settings not modeled")
    assert "--lr," in lines[0] and "--rampup-batch-size" in lines[0]
    assert "--lr-decay-style" in out.read_text().split("model:")[0]
    rc, text, _ = run(capsys, "simulate", out)
    assert rc == 0 and "iteration time" in text
    # the script's own torchrun says 1 node: 8 GPUs cannot hold tp 8 x pp 16
    rc, _, err = run(capsys, "import", "megatron", MEGATRON, "--cluster", "dgx-a100-80g")
    assert rc == 2 and "change --nodes" in err and err.count("\n") == 1


def test_nemo_recipe_matches_shipped_example(tmp_path, capsys):
    out = tmp_path / "s.yaml"
    rc, _, _ = run(capsys, "import", "nemo", NEMO, "--cluster", "dgx-h100", "-o", out)
    assert rc == 0
    s = yaml.safe_load(out.read_text())
    example = yaml.safe_load(Path("strategies/examples/llama3-8b-8-h100.yaml").read_text())
    for sec, keys in (("parallel", ("tp", "pp", "cp")), ("training", ("micro_batch", "global_batch", "seq_len"))):
        for k in keys:
            assert s[sec][k] == example[sec].get(k, 1), (sec, k)
    assert s["cluster"] == {"preset": "dgx-h100", "nodes": 1}
    assert s["parallel"]["zero"] == 1 and s["options"]["overlap_param_gather"] is True
    from taskgraph.model import get_model, load_model_yaml
    assert load_model_yaml(s["model"]).param_count() == get_model("llama3-8b").param_count()


def test_torchtitan_llama3_8b(tmp_path, capsys):
    out = tmp_path / "s.yaml"
    rc, _, err = run(capsys, "import", "torchtitan", TITAN, "--cluster", "dgx-a100-80g", "--nodes", "8", "-o", out)
    assert rc == 0
    s = yaml.safe_load(out.read_text())
    assert s["model"] == "llama3-8b" and s["parallel"]["zero"] == 3       # FSDP over all 64 ranks
    assert s["training"]["global_batch"] == 64 and s["training"]["recompute"] == "selective"
    # training.compile is read now (the software stack: eager -> options.stack torchtitan), not listed as unmodeled
    assert "training.compile" not in err and s["options"]["stack"] == "torchtitan"
    rc, text, _ = run(capsys, "simulate", out)
    assert rc == 0 and "dp=64" in text


def test_stdin_source(monkeypatch, capsys):
    import io
    monkeypatch.setattr("sys.stdin", io.StringIO(TITAN.read_text()))
    rc, out, _ = run(capsys, "import", "torchtitan", "-", "--cluster", "dgx-h100", "--nodes", "1")
    assert rc == 0 and yaml.safe_load(out.split("\n", 3)[-1])["cluster"] == {"preset": "dgx-h100", "nodes": 1}


BASE = ("--num-layers 4 --hidden-size 256 --num-attention-heads 8 --seq-length 512 --micro-batch-size 1 "
        "--global-batch-size 8 --vocab-size 1000 ")


@pytest.mark.parametrize("kind,source,match", [
    ("megatron", BASE + "--bf16 --fp16", "--bf16 and --fp16"),
    ("megatron", BASE + "--recompute-activations --recompute-granularity full", "contradicts"),
    ("megatron", BASE + "--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1 "
                        "--virtual-pipeline-model-parallel-size 4", "keep one"),
    ("megatron", BASE + "--tensor-model-parallel-size 2 --tensor-model-parallel-size 4", "given twice"),
    ("megatron", BASE.replace("--hidden-size 256 ", ""), "--hidden-size is missing"),
    ("megatron", BASE.replace("--vocab-size 1000 ", ""), "vocabulary size"),
    ("nemo", {"trainer": {"num_nodes": 1}}, "'model:' section"),
    ("nemo", {"model": {"num_layers": 2, "hidden_size": 64, "num_attention_heads": 2, "global_batch_size": 8,
                        "encoder_seq_length": 128, "activation": "reglu", "tokenizer": {"type": "gpt2"}}},
     "'reglu' .ReLU-gated, ReGLU. is not modeled"),
    ("torchtitan", {"model": {"name": "llama3", "flavor": "9B"}}, "flavor"),
    ("torchtitan", {"model": {"name": "llama3", "flavor": "8B"},
                    "parallelism": {"pipeline_parallel_degree": 2, "pipeline_parallel_schedule": "Foo"}}, "Foo"),
])
def test_contradictory_or_incomplete_sources_get_one_error(kind, source, match):
    with pytest.raises(ConfigError, match=match):
        import_config(kind, source, cluster="dgx-h100", nodes=1)


def test_block_recompute_maps_per_layer():
    imp = import_config("megatron", BASE + "--pipeline-model-parallel-size 2 --recompute-granularity full "
                        "--recompute-method block --recompute-num-layers 1", cluster="dgx-h100", nodes=1)
    assert imp.strategy["training"]["recompute_layers"] == ["full", "none", "full", "none"]


def test_gpus_per_node_must_match_cluster(capsys):
    rc, _, err = run(capsys, "import", "nemo", NEMO, "--cluster", "gb200-nvl72")
    assert rc == 2 and "8 GPUs per node" in err


def test_megatron_context_parallel_comm_type():
    cp = BASE + "--context-parallel-size 2 "
    assert import_config("megatron", cp, cluster="dgx-h100", nodes=1).strategy["options"]["cp_comm"] == "ring"
    imp = import_config("megatron", cp + "--cp-comm-type a2a", cluster="dgx-h100", nodes=1)
    assert imp.strategy["options"]["cp_comm"] == "a2a"
    imp = import_config("megatron", cp + "--cp-comm-type a2a+p2p", cluster="dgx-h100", nodes=1)
    assert imp.strategy["options"]["cp_comm"] == "ring" and any("a2a+p2p" in u for u in imp.unmodeled)


@pytest.mark.parametrize("args,example", [
    (("megatron", "train_gpt3_175b_distributed.sh", "--cluster", "dgx-a100-80g", "--nodes", "128"),
     "megatron-gpt3-175b-1024-a100.yaml"),
    (("nemo", "nemo_llama3_8b.yaml", "--cluster", "dgx-h100"), "nemo-llama3-8b-8-h100.yaml"),
    (("torchtitan", "torchtitan_llama3_8b.toml", "--cluster", "dgx-a100-80g", "--nodes", "8"),
     "torchtitan-llama3-8b-64-a100.yaml"),
])
def test_shipped_imported_examples_round_trip(args, example, tmp_path, capsys):
    out = tmp_path / "out.yaml"
    kind, src, *rest = args
    rc, _, _ = run(capsys, "import", kind, DATA / src, *rest, "-o", out)
    assert rc == 0
    assert out.read_text() == (DATA.parent / example).read_text()
