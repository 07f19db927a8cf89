"""Megatron-LM launch scripts as they are written (issues 40 and 42): the launch inside the here-document
fed to sbatch and the ``bash -c`` string inside it, the model features the simulator models (MLA, MTP,
MoE layer patterns, sliding windows, quick-GEGLU), and one clear refusal for what it cannot model."""
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.cli.main import main
from simulator.simulation.importing import import_strategy
from strategies.errors import ConfigError
from strategies.import_megatron import MEGATRON_READ
from strategies.importers import import_config

# The structure of NVIDIA/Megatron-LM examples/megatron_fsdp/sbatch_mfsdp_deepseek_v3.sh at commit
# d98e8a64ddf34856e74b24714e3bedb2f5a39553: ${VAR:-default} settings (l. 12-26), one PRETRAIN_ARGS array
# (l. 28-134, trimmed to the flags execsim reads plus a few it lists), arrays re-built inside ifs
# (l. 136-154, 181-188), the command joined into a string (l. 190-194), and an unquoted here-document fed
# to sbatch whose srun runs it with bash -x -c "${TRAINING_CMD}" (l. 206-229).
DSV3 = r'''#!/bin/bash
export TRITON_CACHE_DIR=/tmp/triton_cache_$SLURM_NODEID
MEGATRON_PATH=${MEGATRON_PATH:-"your_own_megatron_path"} # Path to Megatron-LM repository
OUTPUT_PATH=${OUTPUT_PATH:-"your_own_output_path"} # Path for output logs and checkpoints
DATA_PATH=${DATA_PATH:-"your_own_data_path"}
USE_MEGATRON_FSDP=${USE_MEGATRON_FSDP:-1}
SHARDING_STRATEGY=${SHARDING_STRATEGY:-"optim_grads_params"}
PROFILE=${PROFILE:-0}
TP=${TP:-1}
EP=${EP:-8}
MBS=${MBS:-4}
GBS=${GBS:-2048}

PRETRAIN_ARGS=(
    --tensor-model-parallel-size ${TP}
    --expert-model-parallel-size ${EP}
    --expert-tensor-parallel-size 1
    --use-distributed-optimizer
    --overlap-grad-reduce
    --overlap-param-gather
    --sequence-parallel
    --disable-bias-linear
    --micro-batch-size ${MBS}
    --global-batch-size ${GBS}
    --train-samples 585937500
    --recompute-granularity selective
    --seq-length 4096
    --tokenizer-type HuggingFaceTokenizer
    --tokenizer-model deepseek-ai/DeepSeek-V3
    --data-path ${DATA_PATH}
    --split 99,1,0
    --num-layers 61
    --hidden-size 7168
    --ffn-hidden-size 18432
    --num-attention-heads 128
    --kv-channels 128
    --max-position-embeddings 4096
    --position-embedding-type rope
    --normalization RMSNorm
    --swiglu
    --untie-embeddings-and-output-weights
    --multi-latent-attention
    --attention-dropout 0.0
    --hidden-dropout 0.0
    --num-experts 256
    --moe-layer-freq [0]*3+[1]*58
    --moe-ffn-hidden-size 2048
    --moe-shared-expert-intermediate-size 2048
    --moe-router-topk 8
    --moe-token-dispatcher-type flex
    --q-lora-rank 1536
    --kv-lora-rank 512
    --qk-head-dim 128
    --qk-pos-emb-head-dim 64
    --v-head-dim 128
    --mtp-num-layers 1
    --bf16
)

if [ "${USE_MEGATRON_FSDP}" = 1 ]; then
    unset CUDA_DEVICE_MAX_CONNECTIONS
    PRETRAIN_ARGS=(
        "${PRETRAIN_ARGS[@]}"
        --use-megatron-fsdp
        --data-parallel-sharding-strategy ${SHARDING_STRATEGY}
    )
fi

if [ "${PROFILE}" = 1 ]; then
    PROFILE_CMD="nsys profile --sample=none \
        -o ${OUTPUT_PATH}/nsys/Megatron-FSDP-Deepseek-V3-TP${TP}EP${EP}"
    PRETRAIN_ARGS=(
        "${PRETRAIN_ARGS[@]}"
        --profile
    )
else
    PROFILE_CMD=""
fi

TRAINING_CMD="
cd ${MEGATRON_PATH};
git rev-parse HEAD;
export PYTHONPATH=${MEGATRON_PATH}:${PYTHONPATH};
${PROFILE_CMD} python ${MEGATRON_PATH}/pretrain_gpt.py ${PRETRAIN_ARGS[@]}"

SLURM_LOGS="${OUTPUT_PATH}/slurm_logs"
mkdir -p ${SLURM_LOGS} || {
    echo "Error: Failed to create SLURM logs directory ${SLURM_LOGS}"
    exit 1
}

set +e
sbatch <<EOF
#!/bin/bash

#SBATCH --job-name=your_own_job_name
#SBATCH --nodes=your_own_num_nodes
#SBATCH --exclusive

srun \
    --mpi=pmix -l \
    --container-workdir=${MEGATRON_PATH} \
    bash -x -c "${TRAINING_CMD}" 2>&1 | tee ${SLURM_LOGS}/\${SLURM_JOB_ID}.log

EOF
set -e
'''


def test_deepseek_v3_sbatch_heredoc_bash_c():
    """Before: the launch inside the heredoc's bash -c string was not found ('-p' of mkdir read as a flag);
    MLA / MTP / --moe-layer-freq were listed as not modelled."""
    imp = import_config("megatron", DSV3, cluster="dgx-h100", nodes=32, vocab=129280)
    m = imp.strategy["model"]
    assert (m["layers"], m["hidden"], m["heads"], m["attention"], m["head_dim"], m["qk_rope_head_dim"],
            m["q_lora_rank"], m["kv_lora_rank"], m["v_head_dim"], m["mtp_layers"]) == \
        (61, 7168, 128, "mla", 192, 64, 1536, 512, 128, 1)
    assert (m["experts"], m["top_k"], m["expert_ffn"], m["shared_experts"]) == (256, 8, 2048, 1)
    assert m["moe_layers"] == list(range(3, 61))            # [0]*3+[1]*58 (unquoted: no file matches the glob)
    assert imp.strategy["parallel"] == {"tp": 1, "pp": 1, "cp": 1, "ep": 8, "sp": False, "zero": 3}
    assert imp.strategy["training"]["micro_batch"] == 4 and imp.strategy["training"]["global_batch"] == 2048
    assert "--profile" not in imp.unmodeled                     # PROFILE=0: that branch did not run
    for read in ("--multi-latent-attention", "--mtp-num-layers", "--moe-layer-freq", "--q-lora-rank"):
        assert read not in imp.unmodeled


def test_deepseek_v3_import_simulates(tmp_path, capsys):
    """The imported MLA + MTP + MoE-pattern strategy is one the simulator runs (scaled down to stay fast)."""
    small = DSV3.replace("--num-layers 61", "--num-layers 5").replace("[0]*3+[1]*58", "[0]*3+[1]*2") \
        .replace("--num-experts 256", "--num-experts 16").replace("GBS=${GBS:-2048}", "GBS=${GBS:-64}") \
        .replace("MBS=${MBS:-4}", "MBS=${MBS:-1}").replace("--seq-length 4096", "--seq-length 1024")
    src, out = tmp_path / "dsv3.sh", tmp_path / "s.yaml"
    src.write_text(small)
    assert main(["import", "megatron", str(src), "--cluster", "dgx-h100", "--nodes", "1", "--vocab", "129280",
                 "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["simulate", str(out)]) == 0
    assert "iteration time" in capsys.readouterr().out


BASE = ("torchrun pretrain_gpt.py --num-layers 8 --hidden-size 256 --num-attention-heads 8 --seq-length 512 "
        "--micro-batch-size 1 --global-batch-size 8 --vocab-size 1000 --bf16 ")


@pytest.mark.parametrize("extra,want", [
    ("--quick-geglu", {"mlp": "geglu"}),
    ("--window-size \"(128,0)\" --window-attn-skip-freq 4", {"sliding_window": 128, "global_attention_every": 4}),
    ("--window-size \"(128,0)\" --window-attn-skip-freq [1,1,0]*2+[1,1]", {"sliding_window": 128,
                                                                     "global_attention_every": 3}),
    ("--num-experts 4 --moe-layer-freq 2", {"experts": 4, "moe_layers": 2}),
    ("--mtp-num-layers 2", {"mtp_layers": 2}),
    ("--multi-latent-attention", {"attention": "mla", "head_dim": 192, "qk_rope_head_dim": 64, "kv_lora_rank": 32,
                                  "v_head_dim": 128}),     # Megatron's _add_mla_args defaults
])
def test_modelled_flags_map_to_model_fields(extra, want):
    imp = import_config("megatron", BASE + extra, cluster="dgx-h100", nodes=1)
    assert {k: imp.strategy["model"].get(k) for k in want} == want
    assert not imp.unmodeled


@pytest.mark.parametrize("script,match", [
    ("torchrun pretrain_mamba.py --num-layers 2", r"pretrain_mamba.py, which trains a Mamba"),
    ("torchrun pretrain_bert.py --num-layers 2", r"pretrain_bert.py, which trains BERT"),
    ("torchrun pretrain_t5.py --encoder-num-layers 2", r"pretrain_t5.py, which trains T5"),
    (BASE + "--hybrid-override-pattern M*M*", r"--hybrid-override-pattern configures a hybrid Mamba model"),
    (BASE + "--fp4-format e2m1 --fp8-format hybrid", r"--fp4-format and --fp8-format are both set"),
    (BASE + "--fp8-format hybrid -tp 2", r"'-tp' is a single-dash flag"),        # was: dropped
    ("import argparse\ndef main():\n    pass\n", r"is a Python file"),
    ("torchrun pretrain_gpt.py\x00 --num-layers 2", r"NUL bytes"),
    (BASE + "--window-size \"(128,0)\" --window-attn-skip-freq [1,0,1,0,1,1,0,1]", r"not every k-th layer"),
    (BASE + "--num-experts 4 --moe-layer-freq [1]*9", r"one 0/1 per layer \(8\)"),
    (BASE + "--q-lora-rank 16", r"--multi-latent-attention is not given"),
])
def test_refused_by_name(script, match):
    with pytest.raises(ConfigError, match=match):
        import_config("megatron", script, cluster="dgx-h100", nodes=1)


@pytest.mark.parametrize("script,tp", [
    ("cat <<EOF\ntorchrun pretrain_gpt.py --tensor-model-parallel-size 8\nEOF\n" + BASE + "--tensor-model-parallel-size 2", 2),
    ("sbatch <<'EOF'\n" + BASE + "--tensor-model-parallel-size 4\nEOF\n", 4),
    ('bash -c "' + BASE + '--tensor-model-parallel-size \\$((1 + 1))"', 2),
    ("run() {\n  " + BASE + '"$@"\n}\nrun --tensor-model-parallel-size 4\n', 4),
    ("for TP in 2; do\n  " + BASE + "--tensor-model-parallel-size $TP\ndone\n", 2),
    ('MODEL=8b\ncase "$MODEL" in\n  8b) TP=2;;\n  70b) TP=8;;\nesac\n' + BASE + "--tensor-model-parallel-size $TP", 2),
    ('M=80\nif [[ $M == 8* ]]; then TP=4; else TP=1; fi\n' + BASE + "--tensor-model-parallel-size $TP", 4),
    ("TP=2\nreadonly TP\n: ${TP:=8}\n" + BASE + "--tensor-model-parallel-size $TP", 2),
    ('set -- 4\n' + BASE + "--tensor-model-parallel-size $1", 4),
    ("IFS=,\nL=--tensor-model-parallel-size,2\n" + BASE + "$L", 2),
])
def test_launch_found_where_bash_runs_it(script, tp):
    assert import_config("megatron", script, cluster="dgx-h100", nodes=1).strategy["parallel"]["tp"] == tp


def test_nodes_given_so_unset_launcher_counts_are_not_needed():
    """--nodes / --cluster given: torchrun's --nnodes $NNODES / --nproc_per_node $GPUS_PER_NODE may stay unset."""
    script = "torchrun --nnodes $NNODES --nproc_per_node $GPUS_PER_NODE " + BASE[len("torchrun "):]
    assert import_config("megatron", script, cluster="dgx-h100", nodes=2).strategy["cluster"]["nodes"] == 2
    with pytest.raises(ConfigError, match=r"--nnodes takes its value from \$NNODES, which the script never sets"):
        import_config("megatron", script, cluster="dgx-h100")


def test_one_line_redirect_with_parentheses_is_one_error():
    """Issue 42: '> out (x)' looped for ever growing memory; now bash's reading: a subshell, no flags."""
    with pytest.raises(ConfigError, match="no --flags found"):
        import_config("megatron", "> out (x)", cluster="dgx-h100", nodes=1)


# ------------------------------------------------------------------------------------ training logs
LOG = Path(__file__).resolve().parent / "data" / "megatron_llama3_8b_fp8_train.log"


def test_training_log_argument_dump(tmp_path, capsys):
    """Issue 40 item 2: the argument dump is read (world size included) and the logged iteration time is
    printed beside the simulated one (median of 2044.1, 2031.7, 2040.2, 2036.9, 2038.4 = 2038.4)."""
    out = tmp_path / "s.yaml"
    assert main(["import", "megatron", str(LOG), "--cluster", "dgx-h100", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "iteration time: measured 2,038.4 ms (median of the logged iterations, the first excluded), simulated" in text
    import yaml
    s = yaml.safe_load(out.read_text())
    assert s["cluster"] == {"preset": "dgx-h100", "nodes": 2}                 # world_size 16 / 8 GPUs per node
    assert s["parallel"] == {"tp": 4, "pp": 2, "cp": 1, "ep": 1, "sp": True, "zero": 1}
    assert s["training"] == {"micro_batch": 1, "global_batch": 128, "seq_len": 8192, "precision": "fp8",
                             "recompute": "none", "train_tokens": 100 * 128 * 8192.0}
    m = s["model"]
    assert (m["layers"], m["hidden"], m["heads"], m["kv_heads"], m["ffn"], m["vocab"], m["head_dim"], m["bias"],
            m["tied_embeddings"]) == (32, 4096, 32, 8, 14336, 128256, 128, False, False)
    assert s["options"]["fp8_param_gather"] is True and s["options"]["fp32_grad_accum"] is False


def test_training_log_world_size_against_nodes():
    text = LOG.read_text()
    with pytest.raises(ConfigError, match=r"world_size is 16 GPUs but --nodes gives 32 \(4 x 8\)"):
        import_strategy("megatron", text, origin="x.log", cluster="dgx-h100", nodes=4)
    with pytest.raises(ConfigError, match=r"no '---- end of arguments ----' line"):
        import_config("megatron", text.split("-------------------- end")[0], cluster="dgx-h100")
    bad = text.replace("  micro_batch_size", "  micro_batch_size 1\n  garbage")
    with pytest.raises(ConfigError, match=r"is not 'name ..... value' inside the argument dump"):
        import_config("megatron", bad, cluster="dgx-h100")


@pytest.mark.parametrize("extra,match", [
    ("--hidden-dropout abc", r"--hidden-dropout = 'abc' must be a number"),      # was a ValueError traceback
    ("--attention-dropout 2", r"--attention-dropout = 2.0 must be a probability in \[0, 1\]"),
    ("--hidden-dropout nan", r"must be a probability"),
])
def test_bad_dropout_is_one_error(extra, match):
    with pytest.raises(ConfigError, match=match):
        import_config("megatron", BASE + extra, cluster="dgx-h100", nodes=1)


@pytest.mark.parametrize("script", ["return; break; continue\n" + BASE, "f() { " + BASE + "; return; }\nf\n",
                                    BASE + " 2>&1 | tee log", BASE + " > log 2> &1"])
def test_control_words_outside_their_block_and_redirections(script):
    """return/break/continue outside a function or loop did nothing in bash but were a traceback here;
    a redirection at the end of the text ran past the last token."""
    assert import_config("megatron", script, cluster="dgx-h100", nodes=1).strategy["model"]["layers"] == 8


def test_log_without_its_argument_dump_is_named():
    """Issue 42: a training log read as a script grew without bound; without the dump it is one error."""
    tail = LOG.read_text().split("end of arguments ---------------------\n")[1]
    with pytest.raises(ConfigError, match=r"a training log without its argument dump"):
        import_config("megatron", tail, cluster="dgx-h100", nodes=1)


@pytest.mark.parametrize("text", [
    "> out (x)\n", "a\u00a0(b)\n", "x\v(y)\n", "x\f(y)\n", ";;\n", "diff <(a) <(b)\n", "(( x = 4 * 2 ))\n",
    "declare -a A=(1 2)\n", "X=x\nwhile true; do X=$X$X; done\n", "f() { f; f; }\nf\n",
    "A=(x)\nfor i in $(seq 1 99); do A=(${A[@]} ${A[@]}); done\n", "echo ${D^^x} ${!N}\n", "p $((0x1G))\n",
    "torchrun pretrain_gpt.py --num-layers $((8 / 0))\n", "\x00\x01", "import os\nos.system('x')\n",
])
def test_hostile_scripts_get_one_clear_line(tmp_path, capsys, text):
    """Issue 42's bar: exit 2, exactly one stderr line starting with 'execsim', at most 600 characters."""
    src = tmp_path / "train.sh"
    src.write_bytes(text.encode("utf-8"))
    rc = main(["import", "megatron", str(src), "--cluster", "dgx-h100", "--nodes", "1"])
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("execsim: error:") and len(lines[0]) <= 600, err
    assert out == ""


_ODD = st.sampled_from(["abc", "-1", "0", "1", "2", "1e400", "nan", "inf", "1.5", "''", "True", "(1,2)", "[0]*3",
                        "99999999999999999999", "0x10", "-", "--", "'a b'", "$((1<<70))"])


@settings(max_examples=200, derandomize=True, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(sorted(MEGATRON_READ)), _ODD), min_size=1, max_size=4))
def test_every_read_flag_with_odd_values_imports_or_is_one_error(pairs):
    """Issue 42: values of every kind in every flag the importer reads: a strategy or one ConfigError."""
    script = BASE + " ".join(f"--{f} {v}" for f, v in pairs)
    try:
        import_strategy("megatron", script, origin="x.sh", cluster="dgx-h100", nodes=1)
    except ConfigError as e:
        assert "\n" not in str(e) and len(str(e)) <= 560


@pytest.mark.parametrize("script,match", [
    # Megatron-LM examples/academic_paper_scripts/sc21/SBATCH.sh @ d98e8a64: submits another file
    ("sbatch -p ${SLURM_PARTITION} \\\n  --nodes=${NNODES} \\\n  --export=MEGATRON_CODE_DIR,MEGATRON_PARAMS SRUN.sh\nexit 0\n",
     r"runs SRUN.sh, which execsim does not open"),                      # was: '-p' is a single-dash flag
    # examples/mimo/scripts/run_vlm_train.sh: another training program
    ("mkdir -p logs\ntorchrun --nproc_per_node 8 examples/mimo/train.py --num-layers 2\n",
     r"launches examples/mimo/train.py, not a Megatron-LM pretrain_\*.py training script"),
    ("python -m torch.distributed.run --nproc_per_node 8 -m examples.mimo.pretrain_mimo --num-layers 2\n",
     r"launches -m examples.mimo.pretrain_mimo"),
    # examples/academic_paper_scripts/sc21/SRUN.sh: the arguments come from the environment
    ('CMD="python -u ${MEGATRON_CODE_DIR}/pretrain_gpt.py ${MEGATRON_PARAMS}"\nsrun -l sh -c "${CMD}"\n',
     (r"the pretrain_gpt.py argument list takes its value from \$MEGATRON_PARAMS, which the script never sets; "
     r"give --env MEGATRON_PARAMS=VALUE")),
    ("torchrun --nproc_per_node 8 ../../pretrain_hybrid.py ${options}\n", r"pretrain_hybrid.py, which trains a hybrid"),
])
def test_scripts_that_launch_something_else_are_named(script, match):
    with pytest.raises(ConfigError, match=match):
        import_config("megatron", script, cluster="dgx-h100", nodes=1)


@pytest.mark.parametrize("extra,want", [
    # --fp4-format e2m1 (was called a typo of --fp8-format, then refused): NVFP4 with every layer in FP4,
    # as Megatron builds it without --first-last-layers-bf16 (arguments.py defaults 1 / 1 with it)
    ("--fp4-format e2m1", (0, 0)),
    ("--fp4-format e2m1 --fp4-recipe nvfp4 --first-last-layers-bf16", (1, 1)),
    ("--fp4-format e2m1 --first-last-layers-bf16 --num-layers-at-end-in-bf16 3", (1, 3)),
])
def test_fp4_flags_map_to_nvfp4(extra, want):
    imp = import_config("megatron", BASE + extra, cluster="gb200-nvl72", nodes=1)
    o = imp.strategy["options"]
    assert imp.strategy["training"]["precision"] == "fp4" and o["fp4_recipe"] == "nvfp4"
    assert (o["num_layers_at_start_in_bf16"], o["num_layers_at_end_in_bf16"]) == want
    assert not imp.unmodeled


def test_fp8_bf16_layers_only_with_the_flag():
    o = import_config("megatron", BASE + "--fp8-format hybrid", cluster="dgx-h100", nodes=1).strategy["options"]
    assert "num_layers_at_start_in_bf16" not in o
    o = import_config("megatron", BASE + "--fp8-format hybrid --first-last-layers-bf16", cluster="dgx-h100",
                      nodes=1).strategy["options"]
    assert (o["num_layers_at_start_in_bf16"], o["num_layers_at_end_in_bf16"]) == (1, 1)
