"""Issue 27: imports that read what people write, MoE parallel folding, FP8 recipes and FP8 parameters.

The launch scripts below are written for these tests; each reproduces the bash constructs of a
published recipe and its values, cited by file and line of the recipe (NVIDIA/Megatron-LM main,
examples/; NVIDIA/NeMo-Framework-Launcher launcher_scripts/conf/training/; pytorch/torchtitan
torchtitan/models/*/train_configs/ before 9810191). Set EXECSIM_RECIPES to a folder holding the
recipe files themselves to import them too (test_real_recipes)."""
import os
from pathlib import Path

import pytest

from strategies.errors import ConfigError
from strategies.importers import import_config
from strategies.shell_args import launch_words

# The shape of examples/llama/train_llama3_8b_h100_fp8.sh: ${N:-default} positional defaults (l. 12-15),
# TP_SIZE=1 ... (l. 33-41), arrays (l. 47-102), an if on $DTYPE adding quoted two-word items
# (l. 104-113), an if/else on the tokenizer with the same flags in both branches (l. 133-161), a
# file test that exits (l. 180-184), torchrun with unquoted array splats (l. 187-194).
LLAMA3_FP8 = r'''#!/bin/bash
CHECKPOINT_PATH=${1:-"checkpoints/llama3_8b_fp8"}
TOKENIZER_ARG=${3:-"MOCK"} # Path to tokenizer model, or "MOCK"
DATA_ARG=${4:-"MOCK"}
GPUS_PER_NODE=8
NUM_NODES=1
MASTER_ADDR=${MASTER_ADDR:-localhost}
TP_SIZE=1
CP_SIZE=1
MICRO_BATCH_SIZE=1
GLOBAL_BATCH_SIZE=128
NUM_LAYERS=32
DTYPE="fp8"
SEQ_LENGTH=8192
DISTRIBUTED_ARGS=(
    --nproc_per_node $GPUS_PER_NODE
    --nnodes $NUM_NODES
    --master_addr $MASTER_ADDR
)
MODEL_ARGS=(
    --num-layers $NUM_LAYERS
    --hidden-size 4096
    --ffn-hidden-size 14336
    --num-attention-heads 32
    --group-query-attention
    --num-query-groups 8
    --kv-channels 128
    --seq-length $SEQ_LENGTH
    --max-position-embeddings $SEQ_LENGTH
    --position-embedding-type rope
    --swiglu
    --normalization RMSNorm
    --attention-backend fused
    --untie-embeddings-and-output-weights
    --disable-bias-linear
    --attention-dropout 0.0
    --hidden-dropout 0.0
)
TRAINING_ARGS=(
    --micro-batch-size $MICRO_BATCH_SIZE
    --global-batch-size $GLOBAL_BATCH_SIZE
    --train-samples 1953125000
    --decoupled-lr 5.0e-4      # Specific to decoupled AdamW
    --bf16
    --grad-reduce-in-bf16
)
DTYPE_ARGS=()
if [[ "$DTYPE" == "fp8" ]]; then
    DTYPE_ARGS+=(
        "--fp8-format hybrid"
        "--fp8-amax-history-len 1024"
        "--fp8-param-gather"
    )
fi
MODEL_PARALLEL_ARGS=(
    --tensor-model-parallel-size $TP_SIZE
    --context-parallel-size $CP_SIZE
    --sequence-parallel
)
DDP_ARGS=(
    --use-distributed-optimizer
    --overlap-grad-reduce
    --overlap-param-gather
)
TRAINING_ARGS+=("${DDP_ARGS[@]}")
DATA_ARGS_LIST=()
if [[ "$TOKENIZER_ARG" == "MOCK" ]] || [[ "$DATA_ARG" == "MOCK" ]] || [[ -z "$TOKENIZER_ARG" ]]; then
    DATA_ARGS_LIST+=(
        "--tokenizer-type NullTokenizer"
        "--vocab-size 128256"
        "--split '99,1,0'"
        "--num-workers 1"
    )
else
    DATA_ARGS_LIST+=(
        "--tokenizer-model $TOKENIZER_ARG"
        "--num-workers 1"
        "--vocab-size 128256"
    )
fi
if [ ! -f "$PRETRAIN_SCRIPT_PATH" ]; then
    echo "Error: pretrain_gpt.py not found"
    exit 1
fi
torchrun ${DISTRIBUTED_ARGS[@]} \
    "pretrain_gpt.py" \
    ${MODEL_ARGS[@]} \
    ${TRAINING_ARGS[@]} \
    ${DTYPE_ARGS[@]} \
    ${MODEL_PARALLEL_ARGS[@]} \
    ${DATA_ARGS_LIST[@]} \
    --save "$CHECKPOINT_PATH"
'''

# The shape of examples/mixtral/train_mixtral_8x7b_distributed.sh: NNODES=${SLURM_NNODES:-"1"} (l. 11),
# MOE_ARGS ending with --overlap-param-gather / --overlap-grad-reduce (l. 50-59) right before
# DATA_ARGS=( (l. 61), $2 left to the caller (l. 16), an `if [ -n "${WANDB_API_KEY}" ]` (l. 102-107).
MIXTRAL = r'''GPUS_PER_NODE=8
NNODES=${SLURM_NNODES:-"1"}
TOKENIZER_MODEL=$2
DISTRIBUTED_ARGS=(
    --nproc_per_node $GPUS_PER_NODE
    --nnodes $NNODES
)
MODEL_ARGS=(
    --disable-bias-linear
    --seq-length 4096
    --max-position-embeddings 32768
    --num-layers 32
    --hidden-size 4096
    --ffn-hidden-size 14336
    --num-attention-heads 32
    --normalization RMSNorm
    --position-embedding-type rope
    --swiglu
    --untie-embeddings-and-output-weights
    --group-query-attention
    --num-query-groups 8
)
MOE_ARGS=(
    --num-experts 8
    --moe-router-topk 2
    --moe-token-dispatcher-type alltoall
    --overlap-param-gather
    --overlap-grad-reduce
)
DATA_ARGS=(
    --tokenizer-type Llama2Tokenizer
    --tokenizer-model ${TOKENIZER_MODEL}
)
TRAINING_ARGS=(
    --micro-batch-size 1
    --global-batch-size 256
    --train-iters 500000
    --bf16
)
MODEL_PARALLEL_ARGS=(
    --tensor-model-parallel-size 1
    --pipeline-model-parallel-size 4
    --expert-model-parallel-size 8
    --use-distributed-optimizer
    --sequence-parallel
)
LOGGING_ARGS=(
    --log-interval 1 \
    --no-load-rng
)
if [ -n "${WANDB_API_KEY}" ]; then
    LOGGING_ARGS+=(
        --wandb-project ${WANDB_PROJECT:-"Mixtral"}
    )
fi
torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py \
    ${MODEL_ARGS[@]} \
    ${MOE_ARGS[@]} \
    ${DATA_ARGS[@]} \
    ${TRAINING_ARGS[@]} \
    ${MODEL_PARALLEL_ARGS[@]} \
    ${LOGGING_ARGS[@]}
'''


def test_bash_semantics_of_the_llama3_fp8_script():
    w = launch_words(LLAMA3_FP8)
    args = [str(a) for a in w.args]
    # the if on DTYPE ran; unquoted ${DTYPE_ARGS[@]} split the quoted two-word items (l. 107-112)
    assert args[args.index("--fp8-format"):args.index("--fp8-format") + 2] == ["--fp8-format", "hybrid"]
    # only the MOCK branch ran (l. 135-146): one --num-workers, --split keeps its literal quotes
    assert args.count("--num-workers") == 1 and "'99,1,0'" in args and "--tokenizer-model" not in args
    # "${DDP_ARGS[@]}" appended item by item (l. 130); the comment after --decoupled-lr is no word
    assert args[args.index("--bf16"):args.index("--bf16") + 5] == ["--bf16", "--grad-reduce-in-bf16",
                                                                  "--use-distributed-optimizer",
                                                                  "--overlap-grad-reduce", "--overlap-param-gather"]
    assert "#" not in " ".join(args)
    assert [str(a) for a in w.launcher] == ["--nproc_per_node", "8", "--nnodes", "1", "--master_addr", "localhost"]
    assert args[-2:] == ["--save", "checkpoints/llama3_8b_fp8"]


def test_llama3_fp8_script_imports_with_its_settings():
    s = import_config("megatron", LLAMA3_FP8, cluster="dgx-h100").strategy
    assert s["cluster"] == {"preset": "dgx-h100", "nodes": 1}                      # NUM_NODES=1 (l. 23)
    assert s["parallel"] == {"tp": 1, "pp": 1, "cp": 1, "ep": 1, "sp": False, "zero": 1}   # l. 33-35, 116-129
    assert s["training"]["precision"] == "fp8" and s["training"]["seq_len"] == 8192      # l. 39-40, 108
    assert s["training"]["global_batch"] == 128 and s["training"]["train_tokens"] == 1953125000 * 8192.0
    assert s["options"]["fp8_recipe"] == "delayed"              # Megatron's default --fp8-recipe
    assert s["options"]["fp8_param_gather"] is True             # l. 111
    assert s["options"]["fp32_grad_accum"] is False             # --grad-reduce-in-bf16 (l. 96)
    assert s["options"]["overlap_grad_reduce"] and s["options"]["overlap_param_gather"]   # l. 127-128
    m = s["model"]
    assert (m["layers"], m["hidden"], m["ffn"], m["heads"], m["kv_heads"], m["head_dim"], m["vocab"]) == \
        (32, 4096, 14336, 32, 8, 128, 128256)


def test_flag_ending_an_array_takes_no_value_from_the_next_line():
    s = import_config("megatron", MIXTRAL, cluster="dgx-h100", nodes=8)
    assert s.strategy["options"]["overlap_grad_reduce"] is True    # MOE_ARGS l. 58 (was read as False)
    assert s.strategy["model"]["experts"] == 8 and s.strategy["parallel"]["ep"] == 8
    assert s.strategy["model"]["vocab"] == 32000                   # Llama2Tokenizer; $2 (the path) not needed
    # the WANDB branch cannot be decided: its flags are listed, not read
    assert "--wandb-project" in s.unmodeled


def test_unset_variable_is_one_error_naming_line_and_env():
    script = "A=(--num-layers 2 --hidden-size 64)\ntorchrun pretrain_gpt.py ${A[@]} --num-attention-heads 4 " \
             "--seq-length 128 --global-batch-size 8 --vocab-size 100 \\\n  --tensor-model-parallel-size $TP\n"
    with pytest.raises(ConfigError, match=r"line 3: --tensor-model-parallel-size takes its value from \$TP, which "
                                          r"the script never sets; give --env TP=VALUE"):
        import_config("megatron", script, cluster="dgx-h100", nodes=1)
    imp = import_config("megatron", script, cluster="dgx-h100", nodes=1, env={"TP": "2"})
    assert imp.strategy["parallel"]["tp"] == 2


@pytest.mark.parametrize("script,tp", [
    ("TP=${TP:-8}\n", 8),                              # the ${VAR:-default} idiom
    ("TP=${TP:-8}\nif [ $TP -gt 4 ]; then TP=4; fi\n", 4),
    ("X=1\nif [[ $X == 2 ]]; then TP=2\nelif [[ $X == 1 ]]; then TP=4\nelse TP=8\nfi\n", 4),
    ("TP=2 && TP=4 || TP=8\n", 4),
])
def test_shell_values_follow_bash(script, tp):
    args = script + ('ARGS="--num-layers 8 --hidden-size 64 --num-attention-heads 8 --seq-length 128 \\\n'
                     '  --global-batch-size 8 --vocab-size 100"\n'
                     'python -m torch.distributed.run --nnodes 1 pretrain_gpt.py $ARGS --tensor-model-parallel-size $TP')
    assert import_config("megatron", args, cluster="dgx-h100").strategy["parallel"]["tp"] == tp


def test_undecidable_branch_that_sets_a_read_flag_is_one_error():
    script = ('if [ -n "$BIG" ]; then L=(--num-layers 64); else L=(--num-layers 8); fi\n'
              'torchrun pretrain_gpt.py ${L[@]} --hidden-size 64 --num-attention-heads 8 --seq-length 128 '
              '--global-batch-size 8 --vocab-size 100\n')
    with pytest.raises(ConfigError, match=r"line 1: --num-layers is set in a branch whose condition cannot be decided \(\$BIG is never set\)"):
        import_config("megatron", script, cluster="dgx-h100", nodes=1)


def test_long_line_is_linear():
    """A 2 MB line of arguments: one run of words (speed measured in benchmarks/shell_args_speed.py)."""
    line = "torchrun pretrain_gpt.py " + " ".join(f"--x{i} {i}" for i in range(140_000))
    w = launch_words(line)
    assert len(line) > 2_000_000 and len(w.args) == 280_000 and w.args[-1] == "139999"


@pytest.mark.parametrize("text,match", [
    ("A='x\ntorchrun pretrain_gpt.py", r"line 1: a ' quote is not closed"),
    ('A=(x y\n', r"the array A=\( is not closed"),
    ("if true; then A=1\n", r"'if' is not closed by 'fi'"),
])
def test_malformed_scripts_get_one_error(text, match):
    with pytest.raises(ConfigError, match=match):
        launch_words(text)


# ------------------------------------------------------------------------------------------ NeMo
# launcher_scripts/conf/training/llama/llama3_1_70b.yaml: trainer l. 14-30, model l. 55-168
NEMO_70B = {"run": {"name": "llama3_1_70b", "results_dir": "${base_results_dir}/${.name}"},
            "trainer": {"num_nodes": 128, "devices": 8, "precision": "bf16", "max_steps": 300000},
            "exp_manager": {"checkpoint_callback_params": {"model_parallel_size": "${multiply:${training.model."
                            "tensor_model_parallel_size}, ${training.model.pipeline_model_parallel_size}}"}},
            "model": {"micro_batch_size": 1, "global_batch_size": 2048, "tensor_model_parallel_size": 4,
                      "pipeline_model_parallel_size": 4, "virtual_pipeline_model_parallel_size": 10,
                      "context_parallel_size": 2, "encoder_seq_length": 8192,
                      "max_position_embeddings": "${.encoder_seq_length}", "num_layers": 80, "hidden_size": 8192,
                      "ffn_hidden_size": 28672, "num_attention_heads": 64, "num_query_groups": 8,
                      "normalization": "rmsnorm", "bias": False, "activation": "fast-swiglu",
                      "position_embedding_type": "rope", "share_embeddings_and_output_weights": False,
                      "tokenizer": {"library": "huggingface", "type": "meta-llama/Meta-Llama-3.1-70B"},
                      "sequence_parallel": True, "ub_tp_comm_overlap": True, "overlap_p2p_comm": True,
                      "optim": {"name": "mcore_distributed_optim", "overlap_grad_sync": True,
                                "overlap_param_sync": True},
                      "data": {"data_prefix": [".0333", "${data_dir}/my-llama_00_text_document"]}}}


def test_nemo_launcher_recipe_distributed_optimizer_and_interpolation():
    imp = import_config("nemo", NEMO_70B, cluster="dgx-h100")
    s = imp.strategy
    assert s["parallel"] == {"tp": 4, "pp": 4, "cp": 2, "ep": 1, "sp": True, "zero": 1, "vpp": 10}   # l. 60-63, 153
    assert s["model"]["max_seq"] == 8192                                    # ${.encoder_seq_length}
    assert s["cluster"] == {"preset": "dgx-h100", "nodes": 128}
    assert s["options"]["overlap_param_gather"] and s["options"]["tp_comm_overlap"] and s["options"]["p2p_overlap"]


def test_nemo_interpolation_resolver():
    from strategies.import_nemo import resolve_interpolations
    r = resolve_interpolations(NEMO_70B)
    assert r["exp_manager"]["checkpoint_callback_params"]["model_parallel_size"] == 16    # multiply: 4 x 4
    assert r["run"]["results_dir"] == "${base_results_dir}/llama3_1_70b"                  # unknown stays
    loop = resolve_interpolations({"a": "${b}", "b": "${a}"})
    assert loop["a"].startswith("${")


def test_nemo_mixtral_capacity_and_bf16_gradient_sync():
    """launcher_scripts/conf/training/mixtral/mixtral_8x7b.yaml l. 50-52 (alltoall dispatcher, padded to
    capacity factor 1.0) and l. 153 (optim.grad_sync_dtype: bf16)."""
    d = {**NEMO_70B, "model": {**NEMO_70B["model"], "num_moe_experts": 8, "moe_router_topk": 2,
                               "moe_token_dispatcher_type": "alltoall", "moe_pad_expert_input_to_capacity": True,
                               "moe_expert_capacity_factor": 1.5,
                               "optim": {**NEMO_70B["model"]["optim"], "grad_sync_dtype": "bf16"}}}
    opt = import_config("nemo", d, cluster="dgx-h100").strategy["options"]
    assert opt["moe_capacity_factor"] == 1.5 and opt["moe_imbalance"] == 1.5 and opt["fp32_grad_accum"] is False
    d["model"]["moe_token_dispatcher_type"] = "allgather"
    d["model"]["expert_model_parallel_size"] = 8
    imp = import_config("nemo", d, cluster="dgx-h100")
    assert imp.strategy["options"]["moe_dispatcher"] == "allgather"      # Megatron's MoEAllGatherTokenDispatcher
    assert not any("dispatcher" in u for u in imp.unmodeled)
    d["model"]["moe_token_dispatcher_type"] = "alltoall_seq"
    imp = import_config("nemo", d, cluster="dgx-h100")
    assert "moe_dispatcher" not in imp.strategy["options"]
    assert any("alltoall_seq (simulated as the all-to-all dispatcher)" in u for u in imp.unmodeled)


@pytest.mark.parametrize("prec,want", [("bf16", "bf16"), ("bf16-mixed", "bf16"), (16, "fp16"), ("16-mixed", "fp16")])
def test_nemo_precision_spellings(prec, want):
    d = {**NEMO_70B, "trainer": {**NEMO_70B["trainer"], "precision": prec, "max_steps": -1}}
    s = import_config("nemo", d, cluster="dgx-h100").strategy
    assert s["training"]["precision"] == want and "train_tokens" not in s["training"]


@pytest.mark.parametrize("source,match", [
    ({**NEMO_70B, "trainer": {**NEMO_70B["trainer"], "precision": 32}}, r"trains in FP32"),
    ({**NEMO_70B, "trainer": {**NEMO_70B["trainer"], "max_steps": 0}}, r"max_steps = 0 must be an integer from 1 to \d+ or -1"),
    ("from nemo.collections import llm\nimport nemo_run as run\n", r"which recipe\? give --recipe FUNCTION"),
])
def test_nemo_refusals(source, match):
    with pytest.raises(ConfigError, match=match):
        import_config("nemo", source, cluster="dgx-h100")


# ------------------------------------------------------------------------------------ torchtitan
def test_torchtitan_flavors_float8_and_refusals(tmp_path):
    base = "[model]\nname = 'qwen3'\nflavor = '0.6B'\n[training]\nlocal_batch_size = 2\nseq_len = 4096\n"
    s = import_config("torchtitan", base, cluster="dgx-h100", nodes=1).strategy
    assert s["model"]["layers"] == 28 and s["model"]["hidden"] == 1024 and s["model"]["tied_embeddings"] is True
    f8 = base.replace("flavor = '0.6B'\n", "flavor = '0.6B'\nconverters = ['float8']\n") + \
        "[float8]\nrecipe_name = 'rowwise'\nenable_fsdp_float8_all_gather = true\n"
    s = import_config("torchtitan", f8, cluster="dgx-h100", nodes=1).strategy
    assert s["training"]["precision"] == "fp8" and s["options"]["fp8_recipe"] == "rowwise"
    assert s["options"]["fp8_param_gather"] is True
    with pytest.raises(ConfigError, match="FP32 training is not modeled"):
        import_config("torchtitan", base + "mixed_precision_param = 'float32'\n", cluster="dgx-h100", nodes=1)
    with pytest.raises(ConfigError, match=r"job.dump_folder = 2025-01-01 is a TOML date"):
        import_config("torchtitan", "[job]\ndump_folder = 2025-01-01\n" + base, cluster="dgx-h100", nodes=1)
    # the HF config behind hf_assets_path, relative to the TOML's folder
    (tmp_path / "assets").mkdir()
    (tmp_path / "assets" / "config.json").write_text("{}")
    s = import_config("torchtitan", base.replace("flavor = '0.6B'\n", "flavor = '0.6B'\nhf_assets_path = 'assets'\n"),
                      cluster="dgx-h100", nodes=1, base_dir=str(tmp_path)).strategy
    assert s["model"] == str((tmp_path / "assets" / "config.json").resolve())



@pytest.mark.parametrize("optimizer, note", [
    ("", None),                                                   # implementation "fused", torchtitan's default
    ("implementation = 'fused'\n", None),
    # AdamW (the default name) with its default weight_decay 0.1: seven foreach passes + the decay's mul_, 72 + 8
    ("implementation = 'foreach'\n", ("optimizer.implementation foreach (torch's foreach Adam, 80 B per fp32 "
                                     "parameter: priced as the fused kernel's 28)")),
    # Adam's L2 decay: _foreach_add(grads, params), 72 + 12; without decay the seven passes alone
    ("name = 'Adam'\nimplementation = 'for-loop'\n", ("optimizer.implementation for-loop (torch's for-loop Adam, 84 B "
                                                     "per fp32 parameter: priced as the fused kernel's 28)")),
    ("name = 'Adam'\nweight_decay = 0.0\nimplementation = 'foreach'\n",
     ("optimizer.implementation foreach (torch's foreach Adam, 72 B per fp32 parameter: priced as the fused "
     "kernel's 28)")),
])
def test_torchtitan_optimizer_implementation_is_listed_when_not_fused(optimizer, note):
    """torchtitan passes fused = (implementation == "fused") to torch (components/optimizer.py build_optimizers);
    the stacks price the fused kernel, so another implementation is listed as not modelled ([TORCH-ADAM])."""
    base = "[model]\nname = 'qwen3'\nflavor = '0.6B'\n[training]\nlocal_batch_size = 2\nseq_len = 4096\n"
    imp = import_config("torchtitan", base + "[optimizer]\n" + optimizer, cluster="dgx-h100", nodes=1)
    assert [u for u in imp.unmodeled if u.startswith("optimizer.")] == ([note] if note else [])


def test_torchtitan_bad_optimizer_implementation_is_one_error():
    base = "[model]\nname = 'qwen3'\nflavor = '0.6B'\n[optimizer]\nimplementation = 'fast'\n"
    with pytest.raises(ConfigError, match="optimizer.implementation = 'fast'") as e:
        import_config("torchtitan", base, cluster="dgx-h100", nodes=1)
    assert "\n" not in str(e.value) and "foreach" in str(e.value)


def test_torchtitan_hf_assets_from_the_working_directory(tmp_path, monkeypatch):
    """torchtitan resolves hf_assets_path from where it runs (the repository root)."""
    (tmp_path / "assets" / "hf" / "Qwen3-0.6B").mkdir(parents=True)
    (tmp_path / "assets" / "hf" / "Qwen3-0.6B" / "config.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    t = ("[model]\nname = 'qwen3'\nflavor = '0.6B'\nhf_assets_path = './assets/hf/Qwen3-0.6B'\n"
         "[training]\nlocal_batch_size = 1\nseq_len = 4096\n")
    s = import_config("torchtitan", t, cluster="dgx-h100", nodes=1, base_dir=str(tmp_path / "elsewhere")).strategy
    assert s["model"] == str((tmp_path / "assets" / "hf" / "Qwen3-0.6B" / "config.json").resolve())


@pytest.mark.parametrize("name,flavor,total_b", [
    # published totals: Llama 4 Scout 109B / Maverick 400B (Meta model cards; Scout's vision encoder is
    # not in torchtitan's text model), DeepSeek-V2-Lite 15.7B / DeepSeek-V2 236B (DeepSeek-V2 report),
    # DeepSeek-V3 671B
    ("llama4", "17bx16e", 107.8), ("llama4", "17bx128e", 400.7), ("deepseek_v3", "16B", 15.7),
    ("deepseek_v3", "236B", 235.7), ("deepseek_v3", "671B", 671.0), ("qwen3", "30B-A3B", 30.5),
])
def test_every_torchtitan_moe_flavor(name, flavor, total_b):
    from taskgraph.model import get_model, load_model_yaml
    t = f"[model]\nname = '{name}'\nflavor = '{flavor}'\n[training]\nlocal_batch_size = 1\nseq_len = 4096\n"
    m = import_config("torchtitan", t, cluster="dgx-h100", nodes=8).strategy["model"]
    spec = get_model(m) if isinstance(m, str) else load_model_yaml(m)
    assert round(spec.param_count() / 1e9, 1) == total_b
    assert spec.mtp_layers == 0     # torchtitan's DeepSeek-V3 has no MTP module


def test_torchtitan_irope_flavor_is_chunked_attention():
    """torchtitan llama4 *_irope (models/llama4/model/args.py: every_n_layers_nope 4,
    fixed_attn_block_size 8192): layers 0, 4, 8 ... global, the rest attend within 8192-token blocks;
    at seq_len 32768 a local layer scores 4 blocks' causal pairs, 1/4 of the global layer's."""
    from taskgraph.model import load_model_yaml
    from taskgraph.operators import layer_operators
    t = "[model]\nname = 'llama4'\nflavor = '17bx16e_irope'\n[training]\nlocal_batch_size = 1\nseq_len = 32768\n"
    imp = import_config("torchtitan", t, cluster="dgx-h100", nodes=8)
    spec = load_model_yaml(imp.strategy["model"])
    assert (spec.attention_chunk, spec.global_attention_every, spec.global_attention_start) == (8192, 4, 0)
    assert not any("chunked attention" in w for w in imp.unmodeled)
    assert [i for i in range(12) if not spec.is_local_attention_layer(i)] == [0, 4, 8]
    core = [next(o for o in layer_operators(spec, micro_batch=1, seq_len=32768, layer_index=i) if o.name == "attn_core")
            for i in (0, 1)]
    assert core[1].fwd_flops / core[0].fwd_flops == pytest.approx(4 * 8192 * 8193 / (32768 * 32769))


# ------------------------------------------------------------------------ MoE parallel folding
def _plan(parallel: dict, model="mixtral-8x7b", nodes=32, options=None, precision="bf16"):
    from strategies.strategy_file import parse_strategy
    from taskgraph.plan import resolve
    return resolve(parse_strategy({"model": model, "cluster": {"preset": "dgx-h100", "nodes": nodes},
                                   "parallel": parallel, "options": options or {},
                                   "training": {"micro_batch": 1, "global_batch": 256, "seq_len": 4096,
                                                "precision": precision}}, "."))


def test_etp_changes_expert_memory_by_the_hand_computed_amount():
    """Mixtral 8x7B, tp 2, pp 8, ep 8 on 256 H100: with etp 1 each GPU holds its one local expert
    whole (3 x h x expert_ffn) instead of half of it: + 4 layers x 3 x 4096 x 7168 parameters per GPU."""
    from taskgraph.memory import params_per_gpu
    folded = params_per_gpu(_plan({"tp": 2, "pp": 8, "ep": 8, "etp": 1, "sp": True}))
    plain = params_per_gpu(_plan({"tp": 2, "pp": 8, "ep": 8, "sp": True}))
    assert folded[3] - plain[3] == 4 * 3 * 4096 * 7168


def test_mtp_module_experts_follow_expert_tp():
    """An MTP module's transformer layer is built like the decoder's (Megatron MultiTokenPredictionLayer
    uses the decoder layer spec), so with etp 1 its local experts are whole on each GPU, as the
    decoder's are: at etp 1 the last rank holds its decoder layer's and the MTP layer's 64 / 8 = 8
    local experts (3 x h x expert_ffn each) whole, at etp = tp = 2 half of each."""
    from taskgraph.memory import params_split
    model = {"name": "moe64", "layers": 8, "hidden": 1024, "heads": 16, "vocab": 1000, "experts": 64, "top_k": 4,
             "expert_ffn": 512, "mlp": "swiglu", "max_seq": 4096, "mtp_layers": 1}
    folded = params_split(_plan({"tp": 2, "pp": 8, "ep": 8, "etp": 1, "sp": True}, model=model))
    plain = params_split(_plan({"tp": 2, "pp": 8, "ep": 8, "sp": True}, model=model))
    # rank 0 holds one decoder layer: its experts go from half to whole, + 8 x 3 x 1024 x 512 / 2 (and
    # the grouped-GEMM extras of moe_experts); the last rank holds a decoder layer and the MTP layer
    layer_gain = folded[0][1] - plain[0][1]
    assert layer_gain >= 8 * 3 * 1024 * 512 // 2
    assert folded[7][1] - plain[7][1] == 2 * layer_gain


def test_expert_states_shard_over_the_expert_data_parallel_group():
    """Mixtral 8x7B, pp 4, ep 8 on 64 H100 (dp 16, ZeRO-1): Megatron's distributed optimizer shards
    the routed experts' states over expert-data-parallel = 64 / (4 * 8 * 1) = 2 ranks, the rest over
    dp = 16: optimizer bytes = 12 * dense / 16 + 12 * experts / 2."""
    from taskgraph.memory import params_split, static_memory
    p = _plan({"tp": 1, "pp": 4, "ep": 8, "zero": 1}, nodes=8)
    assert p.expert_shard_size == 2 and p.shard_size == 16
    for r, (dense, experts) in params_split(p).items():
        assert experts > 0
        assert static_memory(p)[r].optimizer == pytest.approx(12 * dense / 16 + 12 * experts / 2, rel=1e-12)
    folded = _plan({"tp": 2, "pp": 8, "ep": 8, "etp": 1, "sp": True, "zero": 1})      # 256 GPUs: edp = 32/8
    assert folded.expert_shard_size == 4


def test_ep_wider_than_dp_is_expressible():
    """TP 2, PP 8, EP 32 on 256 GPUs (dp = 16): the expert mesh etp 1 x ep 32 folds over tp x dp."""
    model = {"name": "moe64", "layers": 8, "hidden": 1024, "heads": 16, "vocab": 1000, "experts": 64, "top_k": 4,
             "expert_ffn": 512, "mlp": "swiglu", "max_seq": 4096}  # learned positions: max_seq bounds seq_len
    p = _plan({"tp": 2, "pp": 8, "ep": 32, "etp": 1, "sp": True}, model=model)
    from topologies.placement import group_ranks
    assert p.sizes.dp == 16 and p.sizes.edp == 1
    assert group_ranks("ep", p.sizes, 0) == tuple(range(32))      # the whole stage: tp x dp
    assert group_ranks("tp", p.sizes, 0) == (0, 1)


def test_expert_tensor_parallel_imports():
    """TP 2, PP 8, EP 32 on 256 GPUs: Megatron --expert-tensor-parallel-size 1; torchtitan
    expert_tensor_parallel_degree."""
    args = ("--num-layers 16 --hidden-size 1024 --num-attention-heads 16 --seq-length 4096 --global-batch-size 64 "
            "--vocab-size 1000 --num-experts 64 --moe-router-topk 4 --moe-ffn-hidden-size 512 --swiglu "
            "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 8 --expert-model-parallel-size 32 "
            "--expert-tensor-parallel-size 1 --sequence-parallel --moe-token-dispatcher-type alltoall")
    s = import_config("megatron", args, cluster="dgx-h100", nodes=32).strategy
    assert s["parallel"]["etp"] == 1 and s["parallel"]["ep"] == 32
    from simulator.simulation.importing import check, finish
    check(finish(import_config("megatron", args, cluster="dgx-h100", nodes=32)))      # resolves: ep 32 > dp 16
    t = ("[model]\nname = 'qwen3'\nflavor = '30B-A3B'\n[training]\nlocal_batch_size = 1\nseq_len = 4096\n"
         "[parallelism]\ntensor_parallel_degree = 2\nexpert_parallel_degree = 8\nexpert_tensor_parallel_degree = 1\n")
    assert import_config("torchtitan", t, cluster="dgx-h100", nodes=1).strategy["parallel"]["etp"] == 1


def test_fp8_param_gather_halves_weight_bytes():
    """--fp8-param-gather: weights held in FP8 (1 byte) instead of BF16 (2): exactly params bytes less."""
    from taskgraph.memory import params_per_gpu, static_memory
    base = dict(parallel={"tp": 1, "pp": 1, "zero": 1}, model="llama3-8b", nodes=1, precision="fp8")
    p0, p1 = _plan(**base), _plan(**base, options={"fp8_param_gather": True})
    assert static_memory(p0)[0].weights - static_memory(p1)[0].weights == params_per_gpu(p0)[0]


def test_fp8_recipes_add_their_quantization_passes():
    """rowwise (torchao) quantizes both operands of every GEMM in a separate amax + cast pass (5 bytes
    per element); mxfp8 the activation operand in forward and dgrad, writing both layouts (4 + 2/32)."""
    from taskgraph.cost import FP8_RECIPE_COSTS, op_time
    from taskgraph.operators import layer_operators
    from topologies.gpus import get_gpu
    gpu = get_gpu("B200")
    op = next(o for o in layer_operators(_plan({"tp": 1}, model="llama3-8b", nodes=1).model, micro_batch=1,
                                         seq_len=4096) if o.name.endswith("mlp_down"))
    g = op.gemms[0]
    m, n, k = g.m, g.n, g.k
    eff = gpu.efficiency
    bw = gpu.hbm_bandwidth * eff.elementwise_efficiency
    base = op_time(op, "fwd", gpu, "fp8", fp8_recipe="tensorwise")
    assert op_time(op, "fwd", gpu, "fp8", fp8_recipe="delayed") == base
    row = op_time(op, "fwd", gpu, "fp8", fp8_recipe="rowwise")
    assert row - base == pytest.approx((m * k + k * n) * 5.0 / bw + 2 * eff.launch_overhead, rel=1e-12)
    mx = op_time(op, "fwd", gpu, "fp8", fp8_recipe="mxfp8")
    assert mx - base == pytest.approx(m * k * (4 + 2 / 32) / bw + eff.launch_overhead, rel=1e-12)
    assert op_time(op, "bwd_weight", gpu, "fp8", fp8_recipe="mxfp8") == \
        op_time(op, "bwd_weight", gpu, "fp8", fp8_recipe="tensorwise")
    from strategies.strategy_file import FP4_RECIPES, FP8_RECIPES
    assert set(FP8_RECIPE_COSTS) == set(FP8_RECIPES) | set(FP4_RECIPES)   # NVFP4's quantization passes too


def test_activation_offload_exposes_what_the_next_pass_cannot_hide():
    """Offloaded layer: S saved bytes go to the host at 64 GB/s (PCIe Gen5 x16) and come back;
    exposed: max(0, S / 64e9 - forward) after its forward and max(0, S / 64e9 - backward) before its
    backward; its activations hold no GPU memory."""
    from taskgraph.costing import build_work
    p0 = _plan({"tp": 1}, model="llama3-8b", nodes=1)
    p1 = _plan({"tp": 1}, model="llama3-8b", nodes=1, options={"activation_offload_layers": 2})
    l0 = build_work(p0).stages[0].layers[1]          # layer 0 (after the embedding)
    l1 = build_work(p1).stages[0].layers[1]
    S = sum(o.saved_bytes for o in l0.ops)
    fwd = sum(o.fwd for o in l0.ops)
    bwd = sum(o.bwd_input + o.bwd_weight for o in l0.ops)
    out = [c for o in l1.ops for c in o.fwd_post if c.category == "offload"]
    back = [c for o in l1.ops for c in o.bwd_pre if c.category == "offload"]
    assert p1.cluster.host_link_bandwidth == 64e9
    assert out[0].seconds == pytest.approx(max(0.0, S / 64e9 - fwd), rel=1e-12)
    assert back[0].seconds == pytest.approx(max(0.0, S / 64e9 - bwd), rel=1e-12)
    assert sum(o.saved_bytes for o in l1.ops) == 0 and S > 0
    layer2 = build_work(p1).stages[0].layers[3]      # layer 2: not offloaded
    assert sum(o.saved_bytes for o in layer2.ops) == S


# ------------------------------------------------------------------------------ real recipes
RECIPES = os.environ.get("EXECSIM_RECIPES")


@pytest.mark.skipif(not RECIPES, reason="EXECSIM_RECIPES (a folder of Megatron-LM / NeMo launcher recipe files) "
                                        "is not set")
def test_real_recipes():
    d = Path(RECIPES)
    s = import_config("megatron", (d / "train_llama3_8b_h100_fp8.sh").read_text(), cluster="dgx-h100").strategy
    assert s["options"]["fp8_param_gather"] and s["parallel"]["zero"] == 1
    s = import_config("megatron", (d / "train_mixtral_8x7b_distributed.sh").read_text(), cluster="dgx-h100",
                      nodes=8).strategy
    assert s["options"]["overlap_grad_reduce"] is True
    s = import_config("megatron", (d / "train_llama3_8b_fsdp_h100_fp8.sh").read_text(), cluster="dgx-h100").strategy
    assert s["parallel"]["zero"] == 3
