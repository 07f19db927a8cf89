"""Accuracy benchmark: simulate published, measured training runs and compare iteration times.

    python -m benchmarks.validate [--rows PATTERN] [--json out.json] [--fidelity operator|coarse|auto]
                                  [--markdown table.md] [--check-fidelity] [--cv]
                                  [--write-envelope [PATH]] [--write-intervals [PATH]]
                                  [--check-intervals] [--interval-coverage [--level L]]

Reads ``benchmarks/validation/published_runs.csv`` (measured iteration times of published runs; the
``source`` column says where each figure comes from), builds a strategy mapping per row
(:func:`strategy_for`), simulates it (:func:`simulator.api.simulate_strategy`), converts the measured
metric to seconds per iteration with the conventions of ``benchmarks/validation/README.md``
(:func:`measured_seconds`) and prints predicted vs measured with the % error per row, grouped by
source, with the mean and max absolute error per group and overall. Rows the simulator cannot express
are listed with the reason. docs/validation.md documents the method and the results.

``--rows`` is a comma-separated list of globs (``fnmatch``) or, without glob characters, substrings
of the row id, e.g. ``--rows 'K22-*'``, ``--rows N21`` or ``--rows 'K22-22B*,MPT-7B*'``.
``--fidelity auto`` (default) uses operator fidelity unless a row would exceed
``OPERATOR_TASK_LIMIT`` operator tasks, then coarse (one task per chunk, microbatch and pass;
``taskgraph/coarse.py``); ``--fidelity operator`` / ``coarse`` force one.
``--check-fidelity`` simulates the selected rows at both fidelities and prints the difference;
``--markdown`` writes the table pasted into docs/validation.md.
``--cv`` refits the constants of ``topologies/data/fitted.yaml`` without one source group at a time
and prints each group's left-out error beside its in-sample error (``benchmarks/crossval.py``).
``--write-envelope`` writes the calibration envelope every report quotes
(``simulator/reports/envelope.yaml``: per source group and stack, its features and measured error).
``--write-intervals`` also runs ``--cv`` and writes the prediction intervals' calibration rows
(``simulator/reports/intervals.json``: each row's leave-one-source-out residual) with the envelope
from the same run; ``--check-intervals`` checks the shipped file equals a fresh run (a benchmark:
minutes); ``--interval-coverage`` (no simulation) prints the coverage and half-width of
the intervals on those rows, each left out with its source group (``--markdown`` writes it; the
table in docs/validation.md).

Assumptions shared by all rows (each one stated where it is applied):

* Model: GPT rows are Megatron GPT (GELU 4h MLP, learned positions, LayerNorm, biases, tied
  embeddings, dropout); Llama rows SwiGLU / RoPE / RMSNorm, no biases, untied head, no dropout
  (Touvron 2023); MPT rows GELU / learned positions / LayerNorm, biases, tied, no dropout (the
  benchmarking README's MPT: llm-foundry's pretrain yamls set neither ``no_bias`` nor ``alibi``, so
  MPTConfig's defaults ``no_bias: false``, ``learned_pos_emb: true``, ``alibi: false`` hold -- the
  README's NumParams column equals that count exactly for 1B-70B); BLOOM as the ``bloom-176b``
  preset with the row's vocabulary.
* Cluster: the DGX preset of the row's GPU with ``num_gpus / 8`` nodes.
* FlashAttention: off for the 2021-2022 Megatron rows (Narayanan 2021 and Korthikanti 2022 predate
  it; BLOOM's run started in March 2022, before FlashAttention, Dao 2022, was released) and for the
  zero-bubble rows (their measured peak memory, e.g. 30 GB for GPT-1.5B 1F1B, is only reachable
  with the 5as^2b attention scores stored: Korthikanti 2022 Table 2); on for later ones.
* Pipeline send/recv blocks the sender (Megatron-LM default, ``overlap_p2p_comm`` off).
* Peak memory (rows whose notes give one): the simulated peak over pipeline ranks with no reserve
  (the papers report allocated memory), compared in GiB.
* Megatron 2021-2022 (Narayanan 2021, Korthikanti 2022, BLOOM's Megatron-DeepSpeed) reduced data-
  parallel gradients after the last backward, not overlapped: Megatron-LM's local DDP of that time
  calls ``allreduce_gradients()`` after ``forward_backward_func`` in ``train_step``; bucketed overlap
  (``--overlap-grad-reduce``) came with Megatron-core in 2023. Korthikanti 2022 Section 6.3 says so
  explicitly for the DP=8 530B run. (Not applied to the DeepSpeed ZeRO-3 rows.)
"""
from __future__ import annotations

import argparse
import csv
import fnmatch
import json
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

CSV_PATH = Path(__file__).resolve().parent / "validation" / "published_runs.csv"

#: GPU of a row -> cluster preset (topologies/data/clusters.yaml).
GPU_PRESET = {"A100-SXM-80GB": "dgx-a100-80g", "A100-SXM-40GB": "dgx-a100-40g", "H100-SXM-80GB": "dgx-h100"}
GPUS_PER_NODE = 8  # DGX A100 / DGX H100 (clusters.yaml sources)
#: Above this many estimated operator-level tasks ``--fidelity auto`` switches a row to coarse.
OPERATOR_TASK_LIMIT = 400_000
#: Zero-bubble rows give no vocabulary. ASSUMED 32,000: the paper's repository pretrains with a SentencePiece
#: model, not GPT-2's BPE (sail-sg/zero-bubble-pipeline-parallelism 064369d examples/pretrain_zero_bubble.sh:
#: --tokenizer-type GPTSentencePieceTokenizer --tokenizer-model .../tokenizers/tokenizer.model, its C4 sample
#: dataset), and the SentencePiece models of that use (T5's for C4, Llama's) have 32,000 pieces; the file's own
#: size was not read. GPT-2's 50,257 was assumed before (docs/changelog-validation.md, 2026-11-29).
ZB_VOCAB = 32000
#: PyTorch DistributedDataParallel's default bucket, MB: bucket_cap_mb = 25 MiB (torch/nn/parallel/distributed.py;
#: c10d reducer.hpp kDefaultBucketBytesCap = 25 * 1024 * 1024). Megatron-LM (de7dc40 megatron/training.py) wraps
#: the model in torchDDP(module, device_ids, output_device, process_group) without bucket_cap_mb. The reducer's
#: smaller first bucket (kDefaultFirstBucketBytes, 1 MiB) is not modelled.
TORCH_DDP_BUCKET_MB = 25 * 1024 * 1024 / 1e6
#: Chunks per pipeline rank assumed when a row says "interleaved" without the count: the largest
#: divisor of layers/pp that is <= 3, i.e. the 3 chunks per stage Korthikanti 2022 used for 175B and
#: 530B on the same code base (benchmarks/validation/README.md caveats).
MAX_ASSUMED_VPP = 3


class NotExpressible(Exception):
    """The row cannot be expressed as a strategy; the message says why."""


@dataclass
class Result:
    id: str
    group: str
    metric: str
    measured_s: float | None = None
    predicted_s: float | None = None
    error_pct: float | None = None
    fidelity: str = ""
    tasks: int = 0
    wall_s: float = 0.0
    assumptions: list = field(default_factory=list)
    not_expressible: str | None = None
    detail: dict = field(default_factory=dict)
    memory_measured_gb: float | None = None
    memory_predicted_gb: float | None = None
    memory_error_pct: float | None = None


# ---------------------------------------------------------------------------- the data
def load_rows(path: str | Path = CSV_PATH) -> list[dict]:
    """Rows of the CSV as dicts of strings (header = column names)."""
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def group_of(row: dict) -> str:
    """Report group: source (short) and the kind of figure."""
    src = row["source"]
    if "Korthikanti" in src:
        return "Korthikanti 2022 Table 4 (one layer)" if row["metric"] == "layer_fwd_bwd_time" \
            else "Korthikanti 2022 (iteration time)"
    if "Narayanan" in src:
        return f"Narayanan 2021 {row['table']}"
    if "zero bubble" in src:
        return "Qi 2024 zero bubble"
    if "bigscience" in src:
        return "BLOOM-176B log"
    if "mosaicml" in src:
        return "MosaicML llm-foundry"
    if "NeMo" in src:
        return "NVIDIA NeMo"
    return src


def _int(row: dict, key: str) -> int | None:
    v = row[key].strip()
    return None if v in ("", "n/a") else int(v)


# ---------------------------------------------------------------------------- metric conversions
def eq3_flops(global_batch: int, seq_len: int, layers: int, hidden: int, vocab: int) -> float:
    """Narayanan 2021 eq. 3 FLOPs per iteration, which counts the recomputed forward (4 passes):
    F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h))."""
    B, s, l, h, V = global_batch, seq_len, layers, hidden, vocab
    return 96.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (16.0 * l * h))


def model_flops_generic(row: dict) -> float:
    """"Model" FLOPs per iteration for tflops_per_gpu_model rows (README conventions): 6 x matmul
    parameters x tokens plus causal attention 12 l s^2 h B / 2 (QK^T and PV over the unmasked
    half; Narayanan 2021 eq. 3 derivation with the causal halving NeMo counts)."""
    l, h, a, kv = _int(row, "layers"), _int(row, "hidden"), _int(row, "heads"), _int(row, "kv_heads")
    f, V, s, B = _int(row, "ffn"), _int(row, "vocab"), _int(row, "seq_len"), _int(row, "global_batch")
    if None in (l, h, a, kv, f, V, s, B):
        raise NotExpressible("model-FLOP conversion needs layers, hidden, heads, kv_heads, ffn, vocab, "
                             "seq_len and global_batch")
    d = h // a
    mats = 3 if "llama" in row["model"].lower() else 2
    per_layer = h * (a + 2 * kv) * d + a * d * h + mats * h * f
    matmul_params = l * per_layer + V * h
    return 6.0 * matmul_params * B * s + 12.0 * l * s * s * h * B / 2.0


def measured_seconds(row: dict) -> float:
    """The measured figure as seconds per iteration (or per layer fwd+bwd for layer rows)."""
    metric, v = row["metric"], float(row["value"])
    n = _int(row, "num_gpus")
    if metric == "iteration_time":
        return v
    if metric == "layer_fwd_bwd_time":
        return v * 1e-3
    gb = _int(row, "global_batch")
    if gb is None:
        raise NotExpressible(f"global_batch = n/a: {metric} cannot be turned into an iteration time")
    if metric == "tflops_per_gpu_eq3":
        vocab = _int(row, "vocab")
        F = eq3_flops(gb, _int(row, "seq_len"), _int(row, "layers"), _int(row, "hidden"), vocab)
        return F / (n * v * 1e12)
    if metric == "samples_per_sec_per_gpu":
        return gb / (v * n)
    if metric == "tokens_per_sec_per_gpu":
        return gb * _int(row, "seq_len") / (v * n)
    if metric == "tflops_per_gpu_model":
        return model_flops_generic(row) / (n * v * 1e12)
    raise NotExpressible(f"unknown metric {metric!r}")


# ---------------------------------------------------------------------------- row -> strategy
#: Jean Zay's A100 partition (BLOOM): 4 x 100 Gb/s Omni-Path per 8-GPU node, per GPU
JEAN_ZAY_NIC_GBIT = 4 * 100 / 8
#: tr11-176B-ml.slurm ``--pad-vocab-size-to 250880``: the embedding and head BLOOM trained with (250,680 tokens)
BLOOM_PADDED_VOCAB = 250880


def _family(row: dict) -> str:
    m = row["model"].lower()
    for fam in ("llama", "mpt", "bloom"):
        if fam in m:
            return fam
    return "gpt"


def model_mapping(row: dict, notes: list, *, layers: int | None = None) -> dict:
    """Inline model mapping (taskgraph.model.load_model_yaml fields) for the row."""
    fam = _family(row)
    vocab = _int(row, "vocab")
    if vocab is None:
        if "zero bubble" not in row["source"]:
            raise NotExpressible("vocab = n/a")
        vocab = ZB_VOCAB
        notes.append(f"vocab n/a: assumed SentencePiece's {ZB_VOCAB}")
    seq = _int(row, "seq_len")
    m = dict(name=row["id"], layers=layers or _int(row, "layers"), hidden=_int(row, "hidden"),
             heads=_int(row, "heads"), kv_heads=_int(row, "kv_heads"), ffn=_int(row, "ffn"), vocab=vocab)
    if fam == "llama":  # Touvron 2023 Section 2.2; HF LlamaConfig
        m.update(mlp="swiglu", position="rope", norm="rmsnorm", bias=False, tied_embeddings=False,
                 dropout=False, max_seq=seq)
    elif fam == "mpt":
        # llm-foundry MPT as its benchmarking README ran it (scripts/train/yamls/pretrain/mpt-*.yaml at v0.3.0 set
        # neither no_bias nor alibi: llmfoundry/models/mpt/configuration_mpt.py defaults no_bias False,
        # learned_pos_emb True, attn_config alibi False): biases, learned positions, expansion_ratio 4, tied
        # (no lm_head), no dropout. The README's NumParams, e.g. 6,658,859,008 for 7b at 2k = 50368 h + 12 L h^2
        # + 2048 h + 13 L h + 2 h (h 4096, L 32), matches this count exactly for 1b, 7b, 13b, 30b and 70b
        m.update(mlp="gelu", position="learned", norm="layernorm", bias=True, tied_embeddings=True,
                 dropout=False, max_seq=seq)
    elif fam == "bloom":
        # BigScience 2022 Table 3 / bloom-176b preset: GELU, ALiBi, embedding LayerNorm, biases, tied. As the
        # run trained it (bigscience-workshop/bigscience train/tr11-176B-ml/tr11-176B-ml.slurm, dc8d99f): no
        # --hidden-dropout / --attention-dropout, so Megatron-DeepSpeed's defaults 0.1 (megatron/arguments.py,
        # 55f8cf8; the tr11 README: "The default Megatron-LM dropout settings are inherited"), not the HF
        # config's 0.0 (an inference config); the vocabulary padded to --pad-vocab-size-to 250880
        m.update(mlp="gelu", position="alibi", norm="layernorm", bias=True, tied_embeddings=True,
                 embedding_norm=True, dropout=True, max_seq=seq, vocab=BLOOM_PADDED_VOCAB)
        notes.append(f"dropout 0.1 (Megatron defaults, tr11 slurm); vocab padded to {BLOOM_PADDED_VOCAB}")
    else:  # Megatron GPT (Shoeybi 2019; Narayanan 2021): GELU 4h, learned positions, biases, dropout
        m.update(mlp="gelu", position="learned", norm="layernorm", bias=True, tied_embeddings=True,
                 dropout=True, max_seq=seq)
    return m


def _flash(row: dict) -> bool:
    src = row["source"]
    return not any(k in src for k in ("Korthikanti", "Narayanan", "bigscience", "zero bubble"))


def _megatron_2021_22(row: dict) -> bool:
    return any(k in row["source"] for k in ("Korthikanti", "Narayanan", "bigscience"))


def _sync_tp_backward(row: dict) -> bool:
    """Code bases whose column-parallel backward all-reduce is synchronous: Megatron-LM of Narayanan
    2021 (April 2021; the asynchronous LinearWithGradAccumulationAndAsyncAllreduce came later that
    year) and BigScience's Megatron-DeepSpeed fork (megatron/mpu/layers.py: ColumnParallelLinear
    calls copy_to_tensor_model_parallel_region, whose backward is a blocking all-reduce)."""
    return any(k in row["source"] for k in ("Narayanan", "bigscience"))


def _vpp_assumed(layers: int, pp: int) -> int:
    per = layers // pp
    return max(d for d in range(1, min(per, MAX_ASSUMED_VPP) + 1) if per % d == 0)


def _zb_layers_per_stage(layers: int, pp: int, vpp: int) -> list[int]:
    """Qi 2024: first and last pipeline stage hold one fewer layer (the embedding and the loss take
    their place). With one layer per chunk (vpp = max) the first and last virtual stage hold none."""
    if vpp == 1:
        per = (layers + 2) // pp
        if per * pp != layers + 2:
            raise NotExpressible(f"layers + 2 = {layers + 2} does not split over pp = {pp}")
        return [per - 1] + [per] * (pp - 2) + [per - 1]
    return [0] + [1] * (pp * vpp - 2) + [0]


def strategy_for(row: dict) -> tuple[dict, list[str]]:
    """Strategy mapping (strategies.strategy_file.parse_strategy input) and the assumptions made."""
    notes: list[str] = []
    gb = _int(row, "global_batch")
    if gb is None:
        raise NotExpressible("global_batch = n/a (the source gives only a throughput at an unstated batch)")
    if row["recompute"] in ("", "n/a"):
        raise NotExpressible("recompute = n/a")
    n = _int(row, "num_gpus")
    if n % GPUS_PER_NODE:
        raise NotExpressible(f"num_gpus = {n} is not a whole number of 8-GPU nodes")
    layer_row = row["metric"] == "layer_fwd_bwd_time"
    model = model_mapping(row, notes)
    layers = model["layers"]
    tp, pp, dp, cp, ep = (_int(row, k) for k in ("tp", "pp", "dp", "cp", "ep"))
    mb = _int(row, "micro_batch")
    if mb is None:
        raise NotExpressible("micro_batch = n/a")
    sched = row["schedule"]
    vpp_s = row["vpp"].strip()
    layers_per_stage = None
    if vpp_s == "max":
        # Qi 2024 Table 3: interleaved 1F1B with one layer per chunk; total stages = layers + 2 slots.
        if (layers + 2) % pp:
            raise NotExpressible(f"vpp = max: layers + 2 = {layers + 2} not divisible by pp = {pp}")
        vpp = (layers + 2) // pp
        notes.append(f"vpp=max: one layer per chunk, vpp={vpp}")
    elif vpp_s in ("", "n/a"):
        vpp = _vpp_assumed(layers, pp) if (sched == "interleaved" and pp > 1) else 1
        if sched == "interleaved" and pp > 1:
            notes.append(f"vpp n/a: assumed {vpp} (largest divisor of layers/pp <= {MAX_ASSUMED_VPP})")
    else:
        vpp = int(vpp_s)
    if "zero bubble" in row["source"]:
        layers_per_stage = _zb_layers_per_stage(layers, pp, vpp)
        notes.append("first/last stage one layer fewer (Qi 2024)")
    elif _family(row) == "bloom" and layers % (pp * vpp):
        # Megatron-DeepSpeed partition_method 'type:transformer|embedding': the two embedding
        # (tied) layers count as layers, so 70 + 2 = 72 slots over 12 stages, 6 each.
        per = (layers + 2) // (pp * vpp)
        layers_per_stage = [per - 1] + [per] * (pp * vpp - 2) + [per - 1]
        notes.append(f"BLOOM partition: layers_per_stage {per - 1}/{per}.../{per - 1}")
    if pp == 1 or sched in ("n/a", "1f1b") or layer_row:
        schedule = "1f1b"
        if vpp != 1:
            vpp = 1
    elif sched == "interleaved":
        schedule = "interleaved-1f1b" if vpp > 1 else "1f1b"
    elif sched == "zb-1p":
        schedule = "zb-h1"  # Qi 2024 ZB-H1 (the paper's "ZB-1p" with its handcrafted order)
    else:
        raise NotExpressible(f"schedule = {sched!r} not known")
    parallel = dict(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, vpp=vpp, sp=row["sp"].strip() == "yes",
                    zero=_int(row, "zero"))
    if layers_per_stage is not None:
        parallel["layers_per_stage"] = layers_per_stage
    if parallel["zero"] == 3 and pp > 1:
        raise NotExpressible("ZeRO-3 with pipeline parallelism is not modeled")
    training = dict(micro_batch=mb, global_batch=gb, seq_len=_int(row, "seq_len"), precision=row["precision"],
                    recompute=row["recompute"])
    options = dict(flash_attention=_flash(row))
    if _flash(row) and "mosaicml" in row["source"].lower():
        # llm-foundry: its Triton FlashAttention and Composer's train metrics (taskgraph/data/stacks.yaml [LLMF])
        options["stack"] = "llm-foundry"
        # bf16 gradients, reduce-scattered in bf16: Composer's get_mixed_precision (composer/trainer/
        # mosaic_fsdp_utils.py, v0.16.3) maps the runs' mixed_precision DEFAULT to MixedPrecision(param_dtype=bf16,
        # reduce_dtype=None), which FSDP reduces in param_dtype ("If this is None but param_dtype is not None,
        # then this takes on the param_dtype value, still running gradient reduction in low precision",
        # torch/distributed/fsdp/api.py MixedPrecision), and PURE (the May 2023 tables) to reduce_dtype=bf16
        options["fp32_grad_accum"] = False
    if "bigscience" in row["source"]:
        # BLOOM ran Megatron-DeepSpeed with DeepSpeed's pipeline engine and BF16_Optimizer (ZeRO-1): its
        # unfused per-micro-batch fp32 gradient accumulation (taskgraph/data/stacks.yaml [DS-BF16])
        options["stack"] = "deepspeed"
    if parallel["zero"] == 3 and "2104.04473" in row["source"]:
        # Narayanan 2021 Table 2's ZeRO-3 rows ran DeepSpeed's ZeRO-3 of early 2021: per-parameter
        # synchronous all-gathers (taskgraph/data/stacks.yaml [DS-Z3-2021])
        options["stack"] = "deepspeed-zero3-2021"
    if _megatron_2021_22(row) and parallel["zero"] < 3:  # (the ZeRO-3 rows are DeepSpeed, not Megatron DDP)
        options["overlap_grad_reduce"] = False
    if _megatron_2021_22(row) and "stack" not in options:
        # Megatron-LM of 2021-22 (not Megatron-DeepSpeed, not DeepSpeed's ZeRO-3): its eager fp32
        # vocab-parallel cross entropy; in 2021 (Narayanan) also autograd's unfused gradient accumulation
        # (taskgraph/data/stacks.yaml [MEG-2021])
        options["stack"] = "megatron-2021" if "Narayanan" in row["source"] else "megatron-2022"
    if "--DDP-impl torch" in row["notes"]:
        if pp > 1:
            raise NotExpressible("--DDP-impl torch with pp > 1 is not modelled")
        # Megatron-LM examples/sc21/run_table_1.sh (de7dc40) runs 1.7B-18.4B with PyTorch's DDP: de7dc40
        # megatron/schedules.py forward_backward_no_pipelining runs every micro-batch but the last under
        # model.no_sync(), so the reducer's bucketed all-reduces overlap the last micro-batch's backward,
        # in 25 MiB buckets; stacks.yaml [TORCH-DDP] for its bucket copies (no flatten, no divide pass)
        options["overlap_grad_reduce"] = True
        options["grad_bucket_mb"] = TORCH_DDP_BUCKET_MB
        options["stack"] = "megatron-2021-torch-ddp"
    elif "no launch script" in row["notes"]:
        # Narayanan 2021 Table 2: examples/sc21 (de7dc40) has no script for it; Megatron's default --DDP-impl local
        notes.append("DDP n/a: assumed local (reduction after the last backward)")
    if _megatron_2021_22(row) and "no scatter/gather" not in row["notes"] and tp > 1 and pp > 1 \
            and not parallel["sp"] and not layer_row:
        # Megatron-LM 2021-22 (--scatter-gather-tensors-in-pipeline, on by default) and DeepSpeed's
        # partitioned pipeline activations (BLOOM): 1/tp per rank, all-gathered on arrival (set only
        # where it acts: a strategy file refuses it with sp, tp 1 or pp 1, where it changes nothing)
        options["pipeline_scatter_gather"] = True
    if "NOT overlapped" in row["notes"]:
        options["overlap_grad_reduce"] = False
    if _sync_tp_backward(row):
        options["tp_async_backward"] = False
    if "NeMo" in row["source"] and vpp > 1:
        # NeMo enables overlap_p2p_comm (and batch_p2p_comm off) with virtual pipelining (NeMo docs,
        # features/optimizations/communication_overlap.rst, "Pipeline-parallel Communication Overlap")
        options["p2p_overlap"] = True
    if "NeMo" in row["source"]:
        # NeMo-Framework-Launcher 24.07 (0b1a110) conf/training gpt3/175b, llama/llama2_70b, llama3_8b and
        # llama3_70b.yaml (the configs the loss below follows): optim.name distributed_fused_adam (optimizer
        # states sharded over DP, gradients reduce-scattered, parameters all-gathered: zero 1, as
        # strategies/import_nemo.py maps it) with overlap_grad_sync and overlap_param_sync true; the two
        # 70B configs set ub_tp_comm_overlap true (Transformer Engine userbuffers), 175B false, 8B tp 1
        parallel["zero"] = max(parallel["zero"], 1)
        options.update(overlap_grad_reduce=True, overlap_param_gather=True)
        if row["model"] in ("Llama-2-70B", "Llama-3-70B"):
            options["tp_comm_overlap"] = True
    if "NeMo" in row["source"] and row["precision"] == "fp8":
        # NeMo's fp8 runs use Transformer Engine's DelayedScaling (strategies/import_nemo.py); TE's
        # per-tensor current scaling only came with TE 2.2 (NVIDIA/TransformerEngine 77fa1e5,
        # 2025-03-07), after the 24.07 container
        options["fp8_recipe"] = "delayed"
    if "NeMo" in row["source"] and cp > 1:
        # NeMo 24.07 (Megatron-core 0.8, TE 1.8.0.dev0: the NeMo user guide's "Software Component Versions")
        # ran TE's ring CP: TE v1.8 (3ec998e) transformer_engine/pytorch/attention.py has one CP,
        # AttnFuncWithCP over flash_attn_p2p_communicate (cp_comm_type came with TE 1.10), and Megatron-core
        # core_r0.8.0 TEDotProductAttention passes only cp_group, cp_global_ranks and cp_stream
        options["cp_comm"] = "ring"
    loss = _cross_entropy(row)
    if loss is not None:
        options["cross_entropy"] = loss
    nodes = n // GPUS_PER_NODE
    if layer_row:
        # One layer, one micro-batch, the TP group of one node (Korthikanti 2022 Table 4).
        nodes = 1
        parallel.update(pp=1, dp=1, vpp=1)
        training["global_batch"] = mb
    if row["gpu"] not in GPU_PRESET:
        raise NotExpressible(f"gpu = {row['gpu']!r} has no cluster preset")
    cluster = dict(preset=GPU_PRESET[row["gpu"]], nodes=nodes)
    if "Narayanan" in row["source"]:
        # 2021: NCCL 2.7-2.11 gave a send/recv pair one channel across nodes (topologies/collectives.py)
        cluster["p2p_net_channels"] = 1
    if "bigscience" in row["source"]:
        # Jean Zay's A100 nodes, not a DGX: "8 GPUs per node ... 4 OmniPath links" of 100 Gb/s (the tr11-176B-ml
        # README, bigscience-workshop/bigscience dc8d99f, "Hardware"): 400 Gb/s per node, 50 per GPU where the
        # DGX preset has 8 x 200
        cluster["nic_gbit"] = JEAN_ZAY_NIC_GBIT
        notes.append(f"Jean Zay: 4 x 100 Gb/s Omni-Path per node ({JEAN_ZAY_NIC_GBIT} Gb/s per GPU)")
    d = dict(model=model, cluster=cluster, parallel=parallel,
             schedule=schedule, training=training, options=options)
    return d, notes


def _cross_entropy(row: dict) -> str | None:
    """options.cross_entropy as the row's code ran the loss (taskgraph/data/stacks.yaml [MEG-CE]); None: the
    row's stack decides (megatron-2021/-2022, deepspeed: eager-fp32; llm-foundry: fused)."""
    if "zero bubble" in row["source"]:
        # Qi 2024 ran sail-sg/zero-bubble-pipeline-parallelism's arxiv branch (f68d387, 2023-11-29):
        # examples/pretrain_zero_bubble.sh passes no --fp16-lm-cross-entropy and megatron/model/gpt_model.py
        # post_language_model_processing calls tensor_parallel.vocab_parallel_cross_entropy(output.float(), ..):
        # the eager fp32 loss (Megatron's --cross-entropy-loss-fusion came with 7b4a6d7, 2024-06-14)
        return "eager-fp32"
    if "NeMo" in row["source"]:
        # NeMo 1 hands model.cross_entropy_loss_fusion to Megatron-core (build_transformer_config; default
        # False: the eager loss). NeMo-Framework-Launcher's "24.07 release" (0b1a110, container nemo:24.07)
        # sets it true in llama/llama3_8b, llama3_70b and (fee1762, 2024-08-02) llama2_70b.yaml: the fused
        # 'native' loss; gpt3/175b.yaml leaves it out: eager (the git tag 24.07, 8325688, still names the
        # 24.05 container and lacks the key for Llama 2 70B)
        return "eager-fp32" if row["model"].startswith("GPT-3") else "native"
    return None


def estimated_operator_tasks(d: dict) -> int:
    """Rough operator-level task count: microbatches x layers x ~40 tasks per layer and microbatch
    (10 operators x 3 passes plus collectives and recompute)."""
    p, t = d["parallel"], d["training"]
    mbs = t["global_batch"] // (t["micro_batch"] * (p.get("dp") or 1))
    return mbs * d["model"]["layers"] * 40


# ---------------------------------------------------------------------------- simulation
def _layer_times(sim) -> tuple[float, float]:
    """Forward and backward seconds of transformer layer 0 from a one-layer simulation's timeline:
    from the start of layer 0's first forward (backward or recompute) compute task to the end of its
    last one. The layer's TP collectives fall between those points (each layer begins and ends with
    a norm or residual op on the compute stream), so they count as the lowering exposes them."""
    from simulator.engine.timeline import timeline
    df = timeline(sim.graph, sim.result)
    l0 = df[(df["stream"] == "compute") & df["op"].str.startswith("layer0.")]
    fwd = l0[l0["category"] == "forward"]
    bwd = l0[l0["category"] != "forward"]
    return float(fwd["end"].max() - fwd["start"].min()), float(bwd["end"].max() - bwd["start"].min())


def run_row(row: dict, fidelity: str = "auto", patch=None) -> Result:
    """Simulate one row; ``patch(d)`` may change its strategy mapping first (``--cv``)."""
    from simulator.api import simulate_strategy
    from strategies.strategy_file import parse_strategy
    res = Result(row["id"], group_of(row), row["metric"])
    try:
        d, notes = strategy_for(row)
        if patch is not None:
            patch(d)
        res.assumptions = notes
        res.measured_s = measured_seconds(row)
    except NotExpressible as exc:
        res.not_expressible = str(exc)
        return res
    layer_row = row["metric"] == "layer_fwd_bwd_time"
    fid = fidelity
    if layer_row:
        fid = "operator"  # the layer split needs operator tasks
    elif fid == "auto":
        fid = "coarse" if estimated_operator_tasks(d) > OPERATOR_TASK_LIMIT else "operator"
    t0 = time.perf_counter()
    sim = simulate_strategy(parse_strategy(d), fidelity=fid)
    res.wall_s = time.perf_counter() - t0
    res.fidelity, res.tasks = fid, sim.graph.num_tasks
    if layer_row:
        f, b = _layer_times(sim)
        res.predicted_s = f + b
        res.detail = {"fwd_ms": 1e3 * f, "bwd_ms": 1e3 * b}
    else:
        res.predicted_s = sim.training.iteration_time_s
        res.detail = {"mfu": sim.training.mfu, "microbatches": sim.training.microbatches,
                      "bubble_fraction": sim.report.bubble_fraction}
        mm = re.search(r"peak memory (\d+(?:\.\d+)?) GB", row.get("notes") or "")
        if mm:
            from simulator.reports.memory import memory_report
            mem = memory_report(sim.plan, sim.graph, sim.result)
            reserve = sim.plan.strategy.options.memory_reserve_gb * 2**30
            res.memory_measured_gb = float(mm.group(1))
            res.memory_predicted_gb = (max(st.total for st in mem.per_stage) - reserve) / 2**30
            res.memory_error_pct = 100.0 * (res.memory_predicted_gb / res.memory_measured_gb - 1)
    res.error_pct = 100.0 * (res.predicted_s - res.measured_s) / res.measured_s
    return res


def select(rows: list[dict], pattern: str | None) -> list[dict]:
    """Rows whose id matches ``pattern``: comma-separated globs (fnmatch) or substrings."""
    if not pattern:
        return rows
    pats = [p.strip() for p in pattern.split(",") if p.strip()]

    def hit(rid: str) -> bool:
        return any(fnmatch.fnmatchcase(rid, p) if any(ch in p for ch in "*?[") else p in rid for p in pats)
    return [r for r in rows if hit(r["id"])]


def summarize(results: list[Result]) -> dict:
    """Mean and max absolute % error per group and overall (simulated rows only)."""
    groups: dict[str, list[float]] = {}
    for r in results:
        if r.error_pct is not None:
            groups.setdefault(r.group, []).append(abs(r.error_pct))
    out = {g: {"n": len(v), "mae_pct": sum(v) / len(v), "max_pct": max(v)} for g, v in groups.items()}
    allv = [x for v in groups.values() for x in v]
    if allv:
        out["overall"] = {"n": len(allv), "mae_pct": sum(allv) / len(allv), "max_pct": max(allv)}
    mem = [abs(r.memory_error_pct) for r in results if r.memory_error_pct is not None]
    if mem:
        out["peak memory"] = {"n": len(mem), "mae_pct": sum(mem) / len(mem), "max_pct": max(mem)}
    return out


def _fmt_s(x: float | None, layer: bool) -> str:
    if x is None:
        return "-"
    return f"{1e3 * x:9.2f} ms" if layer else f"{x:9.3f} s "


def format_results(results: list[Result]) -> str:
    lines = []
    groups: dict[str, list[Result]] = {}
    for r in results:
        groups.setdefault(r.group, []).append(r)
    summ = summarize(results)
    for g, rs in groups.items():
        lines.append(f"\n== {g}")
        lines.append(f"{'id':24s} {'measured':>12s} {'predicted':>12s} {'error':>8s}  {'fid':8s} {'tasks':>8s}  notes")
        for r in rs:
            if r.not_expressible:
                lines.append(f"{r.id:24s} {'not expressible: ' + r.not_expressible}")
                continue
            layer = r.metric == "layer_fwd_bwd_time"
            notes = list(r.assumptions)
            if layer:
                notes.insert(0, f"fwd {r.detail['fwd_ms']:.2f} ms bwd {r.detail['bwd_ms']:.2f} ms")
            elif "mfu" in r.detail:
                notes.insert(0, f"MFU {100 * r.detail['mfu']:.1f}%")
            if r.memory_error_pct is not None:
                notes.insert(0, f"peak memory {r.memory_predicted_gb:.1f} vs {r.memory_measured_gb:.0f} GiB "
                                f"({r.memory_error_pct:+.1f}%)")
            lines.append(f"{r.id:24s} {_fmt_s(r.measured_s, layer):>12s} {_fmt_s(r.predicted_s, layer):>12s} "
                         f"{r.error_pct:+7.1f}%  {r.fidelity:8s} {r.tasks:>8d}  {'; '.join(notes)}")
        if g in summ:
            s = summ[g]
            lines.append(f"{'':24s} mean |error| {s['mae_pct']:.1f}%   max |error| {s['max_pct']:.1f}%   "
                         f"({s['n']} rows)")
    if "overall" in summ:
        s = summ["overall"]
        lines.append(f"\nOVERALL: mean |error| {s['mae_pct']:.1f}%   max |error| {s['max_pct']:.1f}%   ({s['n']} rows)")
    ne = [r for r in results if r.not_expressible]
    if ne:
        lines.append(f"not expressible: {len(ne)} row(s): " + ", ".join(r.id for r in ne))
    return "\n".join(lines)


def format_markdown(results: list[Result]) -> str:
    """The per-row table and the per-group summary as Markdown (pasted into docs/validation.md)."""
    out = ["| row | group | measured | predicted | error | fidelity | assumptions |",
           "|---|---|---:|---:|---:|---|---|"]
    for r in results:
        if r.not_expressible:
            out.append(f"| {r.id} | {r.group} | | | not expressible | | {r.not_expressible} |")
            continue
        layer = r.metric == "layer_fwd_bwd_time"
        unit, k = ("ms", 1e3) if layer else ("s", 1.0)
        notes = ([f"fwd {r.detail['fwd_ms']:.2f} ms, bwd {r.detail['bwd_ms']:.2f} ms"] if layer else []) + r.assumptions
        if r.memory_error_pct is not None:
            notes.insert(0, f"peak memory {r.memory_predicted_gb:.1f} vs {r.memory_measured_gb:.0f} GiB "
                            f"({r.memory_error_pct:+.1f}%)")
        out.append(f"| {r.id} | {r.group} | {k * r.measured_s:.3f} {unit} | {k * r.predicted_s:.3f} {unit} | "
                   f"{r.error_pct:+.1f}% | {r.fidelity} | {'; '.join(notes)} |")
    out += ["", "| group | rows | mean abs error | max abs error |", "|---|---:|---:|---:|"]
    for g, s in summarize(results).items():
        out.append(f"| {g} | {s['n']} | {s['mae_pct']:.1f}% | {s['max_pct']:.1f}% |")
    return "\n".join(out)


def check_fidelity(rows: list[dict]) -> str:
    """Predicted iteration time of each row at operator and at coarse fidelity, and their difference."""
    lines = [f"{'id':24s} {'operator':>12s} {'coarse':>12s} {'diff':>8s}"]
    for row in rows:
        if row["metric"] == "layer_fwd_bwd_time":
            continue
        a, b = run_row(row, "operator"), run_row(row, "coarse")
        if a.predicted_s is None:
            continue
        lines.append(f"{row['id']:24s} {a.predicted_s:10.3f} s {b.predicted_s:10.3f} s "
                     f"{100 * (b.predicted_s / a.predicted_s - 1):+7.2f}%  ({a.tasks} vs {b.tasks} tasks)")
    return "\n".join(lines)


def stack_of(row: dict) -> str:
    """Software stack of a row, as the calibration envelope names it (simulator/reports/envelope.py)."""
    src = row["source"]
    if "NeMo" in src:
        return "nemo"  # NeMo 24.07: Megatron-core + Transformer Engine
    if "bigscience" in src:
        return "megatron-deepspeed"
    if _int(row, "zero") == 3:
        return "fsdp" if "mosaicml" in src else "deepspeed-zero3"  # llm-foundry FSDP; DeepSpeed ZeRO-3 (N21)
    return "megatron"


def _envelope_keys(rows: list[dict], results: list[Result]) -> tuple[dict, dict]:
    """The envelope's key (source group, stack, architecture) of each run row, and each key's name.
    Layer rows (one layer, not a run) and rows not simulated are left out."""
    from topologies.gpus import get_gpu
    by_id = {row["id"]: row for row in rows}
    keys: dict[str, tuple] = {}
    for r in results:
        if r.error_pct is None or r.metric == "layer_fwd_bwd_time":
            continue
        keys[r.id] = (r.group, stack_of(by_id[r.id]), get_gpu(by_id[r.id]["gpu"]).architecture)
    kinds: dict[str, set] = {}
    for g, st, arch in keys.values():
        kinds.setdefault(g, set()).add((st, arch))
    names = {}
    for g, st, arch in dict.fromkeys(keys.values()):
        split = [x for i, x in enumerate((st, arch)) if len({k[i] for k in kinds[g]}) > 1]
        names[(g, st, arch)] = f"{g} ({', '.join(split)})" if split else g
    return keys, names


def envelope_groups(rows: list[dict], results: list[Result]) -> list[dict]:
    """The calibration envelope's groups (simulator/reports/envelope.py): one per source group,
    stack and GPU generation, with the features its rows take and its measured iteration-time error.
    Layer rows (one layer, not a run) are left out. The CSV has no expert column: every row is a
    dense model."""
    by_id = {row["id"]: row for row in rows}
    keys, names = _envelope_keys(rows, results)
    keyed: dict[tuple, list] = {}
    for r in results:
        if r.id in keys:
            keyed.setdefault(keys[r.id], []).append((by_id[r.id], r))
    out = []
    for key, items in keyed.items():
        errs = [abs(r.error_pct) for _, r in items]
        gpus = sorted({row["gpu"] for row, _ in items})
        n = [_int(row, "num_gpus") for row, _ in items]
        out.append({"name": names[key], "stack": key[1], "gpus": gpus,
                    "architectures": [key[2]], "families": ["dense"],
                    "precisions": sorted({row["precision"] for row, _ in items}), "min_gpus": min(n),
                    "max_gpus": max(n), "rows": len(items),
                    "mean_abs_error_pct": round(sum(errs) / len(errs), 1), "max_abs_error_pct": round(max(errs), 1)})
    return out


def interval_rows(rows: list[dict], results: list[Result], left_out: dict[str, float]) -> list[dict]:
    """The rows of the interval table (simulator/reports/intervals.py): per run row simulated, its
    envelope group and features, fidelity, in-sample and leave-one-source-out signed % error
    (``left_out``: row id -> error with the constants refitted without its source group) and, where
    the row gives one, the peak-memory error."""
    from topologies.gpus import get_gpu
    by_id = {row["id"]: row for row in rows}
    keys, names = _envelope_keys(rows, results)
    out = []
    for r in results:
        if r.id not in keys or r.id not in left_out:
            continue
        row = by_id[r.id]
        out.append({"id": r.id, "source_group": r.group, "envelope_group": names[keys[r.id]],
                    "stack": keys[r.id][1], "gpu": row["gpu"], "architecture": get_gpu(row["gpu"]).architecture,
                    "family": "dense", "precision": row["precision"], "gpus": _int(row, "num_gpus"),
                    "fidelity": r.fidelity, "error_pct": round(r.error_pct, 3),
                    "left_out_error_pct": round(left_out[r.id], 3),
                    "memory_error_pct": None if r.memory_error_pct is None else round(r.memory_error_pct, 3)})
    return out


#: The ``about`` field of simulator/reports/intervals.json (JSON has no comments).
INTERVALS_ABOUT = ("The prediction intervals' calibration rows: per run row of benchmarks/validation/published_runs.csv, "
                   "its envelope group, features, fidelity, the iteration-time error with the shipped constants "
                   "(error_pct), with the constants refitted without its source group (left_out_error_pct: the "
                   "leave-one-source-out residual) and the peak-memory error where the row gives one. Generated by "
                   "`python -m benchmarks.validate --write-intervals`: do not edit by hand. Read by "
                   "simulator/reports/intervals.py (docs/validation.md, 'Prediction intervals').")


def format_interval_rows(items: list[dict]) -> str:
    """The interval table's text: JSON (parsed in about a millisecond, where YAML took ~100 ms on
    every ``simulate``), one row per line, deterministic."""
    rows = ",\n".join("  " + json.dumps(it) for it in items)
    return f'{{"about": {json.dumps(INTERVALS_ABOUT)},\n "rows": [\n{rows}\n]}}\n'



def format_envelope(groups: list[dict]) -> str:
    """The envelope file's text (YAML; strings JSON-quoted), deterministic."""
    lines = ["# The calibration envelope: the measured groups of benchmarks/validation/published_runs.csv, the",
             "# features their rows share and the iteration-time error measured with the shipped constants.",
             "# Generated by `python -m benchmarks.validate --write-envelope`: do not edit by hand. Read by",
             "# simulator/reports/envelope.py; every report names the group nearest to its run (docs/validation.md).",
             "groups:"]
    for g in groups:
        lines.append(f"  - name: {json.dumps(g['name'])}")
        for k in ("stack", "gpus", "architectures", "families", "precisions", "min_gpus", "max_gpus", "rows",
                  "mean_abs_error_pct", "max_abs_error_pct"):
            lines.append(f"    {k}: {json.dumps(g[k])}")
    return "\n".join(lines) + "\n"


def cv_results(rows: list[dict], fidelity: str, base: list[Result] | None = None):
    """Leave-one-group-out cross-validation of topologies/data/fitted.yaml (benchmarks/crossval.py)
    over ``rows`` (``base``: their plain results, simulated here when not given). Returns the
    all-rows refit, the per-group results and the evaluator."""
    from benchmarks.crossval import Evaluator, cross_validate, patch_strategy
    from strategies.fitted import constants, load_fits
    fits = load_fits()
    consts = constants(fits)
    base = {r.id: r for r in (base if base is not None else (run_row(row, fidelity) for row in rows))
            if r.error_pct is not None}
    by_id = {row["id"]: row for row in rows if row["id"] in base}

    def simulate(row: dict, values: dict) -> float:
        r = run_row(row, fidelity, patch=lambda d: patch_strategy(d, row, values, consts))
        return r.error_pct

    ev = Evaluator(by_id, consts, {i: r.error_pct for i, r in base.items()}, simulate)
    groups = {i: r.group for i, r in base.items()}
    full, per_group = cross_validate(fits, groups, ev, progress=lambda g: print(f"  cv: leaving out {g}",
                                                                              file=sys.stderr, flush=True))
    return full, per_group, ev


def run_cv(rows: list[dict], fidelity: str, markdown: str | None = None) -> str:
    """Leave-one-group-out cross-validation of topologies/data/fitted.yaml (benchmarks/crossval.py)
    over ``rows``; returns the report (and writes it as Markdown to ``markdown``)."""
    from benchmarks.crossval import format_cv
    from strategies.fitted import load_fits
    fits = load_fits()
    full, per_group, ev = cv_results(rows, fidelity)
    text = format_cv(full, per_group, fits)
    how = sorted({f"{k}: {v}" for g in per_group for k, v in g.how.items() if not v.startswith("its rows")})
    text += "\nrefits that could not use their own rows: " + ("; ".join(how) or "none")
    text += f"\n{ev.simulations} extra simulations (fidelity {fidelity})"
    if markdown:
        Path(markdown).write_text(format_cv(full, per_group, fits, markdown=True) + "\n")
    return text


def fresh_interval_rows(rows: list[dict], fidelity: str, results: list[Result] | None = None) -> str:
    """The text of simulator/reports/intervals.json computed now: every row, then ``--cv``."""
    results = results if results is not None else [run_row(row, fidelity) for row in rows]
    _, per_group, _ = cv_results(rows, fidelity, results)
    left_out = {i: e for g in per_group for i, e in g.left_out_errors.items()}
    return format_interval_rows(interval_rows(rows, results, left_out))


def check_intervals(rows: list[dict], fidelity: str) -> int:
    """Whether the shipped calibration rows equal a fresh computation (the benchmark behind
    tests/test_intervals.py, which recomputes the quantiles from the shipped rows only)."""
    from simulator.reports.intervals import INTERVALS_PATH
    fresh = fresh_interval_rows(rows, fidelity).splitlines()
    shipped = INTERVALS_PATH.read_text(encoding="utf-8").splitlines()
    differ = [(a, b) for a, b in zip(shipped, fresh) if a != b]
    if not differ and len(fresh) == len(shipped):
        print(f"{INTERVALS_PATH.name}: equal to a fresh run ({len(fresh)} lines)")
        return 0
    print(f"{INTERVALS_PATH.name} differs from a fresh run ({len(differ)} lines; {len(shipped)} shipped, {len(fresh)} "
          f"fresh): regenerate with python -m benchmarks.validate --write-intervals")
    for a, b in differ[:20]:
        print(f"  shipped: {a}\n  fresh:   {b}")
    return 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.validate", description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", help="glob or substring of row ids to run")
    ap.add_argument("--json", help="write per-row results and the summary to this JSON file")
    ap.add_argument("--fidelity", choices=("auto", "operator", "coarse"), default="auto",
                    help="auto: operator unless a row is very large (then coarse)")
    ap.add_argument("--csv", default=str(CSV_PATH), help="measured-runs CSV (default: the project copy)")
    ap.add_argument("--markdown", help="also write the per-row table and group summary as Markdown here")
    ap.add_argument("--check-fidelity", action="store_true",
                    help="instead: simulate the selected rows at operator and coarse fidelity and compare")
    ap.add_argument("--cv", action="store_true",
                    help="instead: leave-one-group-out cross-validation of the fitted constants "
                         "(topologies/data/fitted.yaml); --markdown writes its tables")
    ap.add_argument("--write-envelope", nargs="?", const="", metavar="PATH",
                    help="also write the calibration envelope (per-group errors and features) to PATH "
                         "(default: simulator/reports/envelope.yaml); run it on all rows")
    ap.add_argument("--write-intervals", nargs="?", const="", metavar="PATH",
                    help="also run --cv and write the intervals' calibration rows to PATH (default: "
                         "simulator/reports/intervals.json) and the envelope (--write-envelope) from the same run")
    ap.add_argument("--check-intervals", action="store_true",
                    help="instead: run every row and --cv, and check that the shipped intervals' calibration rows "
                         "(simulator/reports/intervals.json) equal a fresh computation (exit 1 when they do not)")
    ap.add_argument("--interval-coverage", action="store_true",
                    help="instead: print the coverage of the prediction intervals on the shipped calibration "
                         "rows, each left out with its source group (no simulation); --markdown writes it")
    ap.add_argument("--level", type=float, default=0.8, help="interval level for --interval-coverage (default 0.8)")
    args = ap.parse_args(argv)
    if args.interval_coverage:
        from simulator.reports.intervals import coverage_table
        text = coverage_table(args.level)
        print(text)
        if args.markdown:
            Path(args.markdown).write_text(coverage_table(args.level, markdown=True) + "\n")
        return 0
    if args.check_intervals:
        return check_intervals(load_rows(args.csv), args.fidelity)
    if args.write_intervals is not None and args.write_envelope is None:
        args.write_envelope = ""
    if args.write_envelope is not None and (args.rows or args.cv or args.check_fidelity):
        print("--write-envelope / --write-intervals need a plain run over every row (its errors are the "
              "groups'); drop --rows, --cv and --check-fidelity", file=sys.stderr)
        return 2
    rows = select(load_rows(args.csv), args.rows)
    if not rows:
        print(f"no row id matches {args.rows!r}", file=sys.stderr)
        return 2
    if args.check_fidelity:
        print(check_fidelity(rows))
        return 0
    if args.cv:
        t0 = time.perf_counter()
        print(run_cv(rows, args.fidelity, args.markdown))
        print(f"wall time {time.perf_counter() - t0:.1f} s")
        return 0
    t0 = time.perf_counter()
    results = []
    for row in rows:
        results.append(run_row(row, args.fidelity))
        r = results[-1]
        if r.error_pct is not None:
            print(f"  {r.id:24s} {r.error_pct:+7.1f}%  ({r.fidelity}, {r.tasks} tasks, {r.wall_s:.1f} s)",
                  file=sys.stderr, flush=True)
    print(format_results(results))
    print(f"wall time {time.perf_counter() - t0:.1f} s")
    if args.markdown:
        Path(args.markdown).write_text(format_markdown(results) + "\n")
    if args.write_envelope is not None:
        from simulator.outputs.files import write_output
        from simulator.reports.envelope import ENVELOPE_PATH
        path = args.write_envelope or str(ENVELOPE_PATH)
        write_output(path, format_envelope(envelope_groups(rows, results)), "--write-envelope")
        print(f"calibration envelope written to {path}")
    if args.write_intervals is not None:
        from simulator.outputs.files import write_output
        from simulator.reports.intervals import INTERVALS_PATH
        path = args.write_intervals or str(INTERVALS_PATH)
        write_output(path, fresh_interval_rows(rows, args.fidelity, results), "--write-intervals")
        print(f"prediction intervals' calibration rows written to {path}")
    if args.json:
        payload = {"rows": [r.__dict__ for r in results], "summary": summarize(results)}
        Path(args.json).write_text(json.dumps(payload, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
