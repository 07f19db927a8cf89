"""Fast checks of the validation data and of benchmarks/validate.py's row handling (no simulation).

The full accuracy run is ``python -m benchmarks.validate`` (about a minute and a half); these tests only
check that the measured-runs CSV parses, that the metric conversions match hand computations, and that
row -> strategy translation produces strategies that parse (and, for a few small rows, resolve).
"""
from __future__ import annotations

import csv

import pytest

from benchmarks import validate as V
from strategies.strategy_file import parse_strategy
from taskgraph.plan import resolve

COLUMNS = ["id", "source", "table", "model", "params_b", "layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "seq_len", "gpu", "num_gpus", "tp", "pp", "dp", "vpp", "cp", "ep", "sp", "zero", "recompute", "micro_batch", "global_batch", "schedule", "precision", "metric", "value", "unit", "notes"]


@pytest.fixture(scope="module")
def rows():
    return V.load_rows()


def _row(rows, rid):
    return next(r for r in rows if r["id"] == rid)


def test_csv_parses_with_the_shared_header(rows):
    with open(V.CSV_PATH, newline="") as f:
        header = next(csv.reader(f))
    assert header == COLUMNS
    assert len(rows) >= 80
    assert all(len(r) == len(COLUMNS) and None not in r for r in rows)  # no ragged lines


def test_every_row_has_a_source_and_a_unique_id(rows):
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids))
    for r in rows:
        assert r["source"].strip(), r["id"]
        assert r["metric"] in ("iteration_time", "layer_fwd_bwd_time", "tflops_per_gpu_eq3",
                               "samples_per_sec_per_gpu", "tokens_per_sec_per_gpu", "tflops_per_gpu_model")
        assert float(r["value"]) > 0
        assert r["gpu"] in V.GPU_PRESET


def test_eq3_conversion_by_hand(rows):
    # Narayanan 2021 Table 1, 1.7B: B=512, s=2048, l=24, h=2304, V=51200, 32 GPUs at 137 TFLOP/s.
    # F = 96*B*s*l*h^2*(1 + s/(6h) + V/(16 l h)); 1 + 2048/13824 + 51200/884736 = 1.20602...
    f = 96 * 512 * 2048 * 24 * 2304 ** 2 * (1 + 2048 / 13824 + 51200 / 884736)
    assert f == pytest.approx(1.5468e16, rel=1e-3)
    assert V.eq3_flops(512, 2048, 24, 2304, 51200) == pytest.approx(f, rel=1e-12)
    assert V.measured_seconds(_row(rows, "N21-1.7B")) == pytest.approx(f / (32 * 137e12), rel=1e-12)
    assert V.measured_seconds(_row(rows, "N21-1.7B")) == pytest.approx(3.528, abs=1e-3)


def test_narayanan_figure_12_pairs_by_hand(rows):
    # Narayanan 2021 Figure 12: GPT-3 175B on 96 GPUs (tp 8, pp 12, b 1), non-interleaved 82 and
    # interleaved 119 TFLOP/s at B = 12: F = 96*12*2048*96*12288^2*(1 + 2048/73728 + 51200/18874368)
    f = 96 * 12 * 2048 * 96 * 12288 ** 2 * (1 + 2048 / 73728 + 51200 / 18874368)
    assert V.measured_seconds(_row(rows, "N21F12-175B-1f1b-12")) == pytest.approx(f / (96 * 82e12), rel=1e-12)
    assert V.measured_seconds(_row(rows, "N21F12-175B-1f1b-12")) == pytest.approx(4.477, abs=1e-3)
    assert V.measured_seconds(_row(rows, "N21F12-175B-int-12")) == pytest.approx(3.085, abs=1e-3)
    # each interleaved row has its non-interleaved partner of the same batch (the p2p-host-gap pairs),
    # and the two differ only in the schedule and its chunks (4: two layers per virtual stage)
    fig = {r["id"]: r for r in rows if r["id"].startswith("N21F12-")}
    assert len(fig) == 10
    for rid, r in fig.items():
        if "-int-" in rid:
            p = fig[rid.replace("-int-", "-1f1b-")]
            diff = {k for k in r if r[k] != p[k]}
            assert diff == {"id", "vpp", "schedule", "value", "notes"}, diff
            assert (r["vpp"], r["schedule"], p["vpp"], p["schedule"]) == ("4", "interleaved", "1", "1f1b")

def test_throughput_conversions_by_hand(rows):
    # samples/s/GPU: 144 samples / (11.8 samples/s/GPU * 8 GPUs)
    assert V.measured_seconds(_row(rows, "ZB-1.5B-1f1b-24")) == pytest.approx(144 / (11.8 * 8))
    # tokens/s/GPU: 96 * 2048 tokens / (4641 tokens/s/GPU * 8 GPUs) = 5.295 s
    assert V.measured_seconds(_row(rows, "MPT-7B-a100")) == pytest.approx(96 * 2048 / (4641 * 8))
    assert V.measured_seconds(_row(rows, "MPT-7B-a100")) == pytest.approx(5.295, abs=1e-3)
    # iteration time passes through; Korthikanti Table 4 layer times are ms
    assert V.measured_seconds(_row(rows, "K22-175B-sel")) == 13.75
    assert V.measured_seconds(_row(rows, "K22-22B-layer-base")) == pytest.approx(0.0196)


def test_model_flops_conversion_needs_a_global_batch(rows):
    with pytest.raises(V.NotExpressible, match="global_batch"):
        V.measured_seconds(_row(rows, "NEMO-LLAMA2-7B-CP4"))
    # with a batch given, 6 x matmul params x tokens + causal attention (README convention)
    r = dict(_row(rows, "NEMO-LLAMA2-7B-CP4"), global_batch="1")
    l, h, f, v, s = 32, 4096, 11008, 32000, 131072
    per_layer = h * (32 + 2 * 32) * 128 + 32 * 128 * h + 3 * h * f
    want = 6.0 * (l * per_layer + v * h) * s + 12.0 * l * s * s * h / 2
    assert V.model_flops_generic(r) == pytest.approx(want)


def test_rows_without_global_batch_are_not_expressible(rows):
    for rid in ("NEMO-LLAMA2-7B-CP4", "NEMO-LLAMA2-7B-CP8"):
        with pytest.raises(V.NotExpressible):
            V.strategy_for(_row(rows, rid))


def test_every_other_row_builds_a_strategy_that_parses(rows):
    n = 0
    for r in rows:
        try:
            d, _ = V.strategy_for(r)
        except V.NotExpressible:
            continue
        s = parse_strategy(d)
        assert s.training.global_batch > 0 and s.cluster["nodes"] >= 1
        n += 1
    assert n >= len(rows) - 2


def test_small_rows_resolve(rows):
    # zero bubble: pure PP over 8 GPUs, first/last stage one layer fewer, vocab assumed 32000 (the repository's SentencePiece tokenizer)
    d, notes = V.strategy_for(_row(rows, "ZB-1.5B-1f1b-24"))
    plan = resolve(parse_strategy(d))
    assert plan.microbatches == 24 and plan.sizes.pp == 8
    assert plan.layers_per_stage == (2, 3, 3, 3, 3, 3, 3, 2)
    assert plan.model.vocab == V.ZB_VOCAB and any("32000" in n for n in notes)
    # vpp = max: one layer per chunk, first/last virtual stage empty
    d, _ = V.strategy_for(_row(rows, "ZB-1.5B-int-24"))
    plan = resolve(parse_strategy(d))
    assert plan.vpp == 3 and plan.schedule.num_stages == 24 and max(plan.layers_per_stage) == 1
    # zb-1p -> zb-h1
    assert V.strategy_for(_row(rows, "ZB-1.5B-zb1p-24"))[0]["schedule"] == "zb-h1"
    # Korthikanti Table 4: one layer, tp 8, one micro-batch, no FlashAttention
    d, _ = V.strategy_for(_row(rows, "K22-22B-layer-sel-sp"))
    plan = resolve(parse_strategy(d))
    assert plan.model.layers == 1 and plan.sizes.tp == 8 and plan.sp and plan.microbatches == 1
    assert d["options"]["flash_attention"] is False and d["training"]["recompute"] == "selective"
    # Llama rows: SwiGLU / RoPE / RMSNorm, GQA, context parallel
    d, _ = V.strategy_for(_row(rows, "NEMO-LLAMA3-8B-8"))
    plan = resolve(parse_strategy(d))
    assert plan.model.mlp == "swiglu" and plan.model.position == "rope" and plan.model.kv_heads == 8
    assert plan.sizes.cp == 2 and plan.sizes.dp == 4 and d["options"]["flash_attention"] is True
    # NeMo 24.07's TE 1.8 has one CP, the p2p ring (AttnFuncWithCP; cp_comm_type came with TE 1.10)
    assert d["options"]["cp_comm"] == "ring" == V.strategy_for(_row(rows, "NEMO-LLAMA3-70B-64"))[0]["options"]["cp_comm"]
    assert "cp_comm" not in V.strategy_for(_row(rows, "NEMO-LLAMA2-70B-64"))[0]["options"]   # cp 1


def test_documented_assumptions(rows):
    # Narayanan Table 2: no launch script -> chunks per stage <= 3 and the local DDP, assumed
    d, notes = V.strategy_for(_row(rows, "N21-175B-ptdp-768"))
    assert d["training"]["micro_batch"] == 1 and d["parallel"]["vpp"] == 2  # 96/12 = 8 layers: 2 divides, 3 not
    assert any("vpp n/a" in n for n in notes) and any("DDP n/a" in n for n in notes)
    assert d["options"]["overlap_grad_reduce"] is False  # Megatron 2021: DP all-reduce after backward
    # Korthikanti 530B DP=8: gradient all-reduce NOT overlapped
    d, _ = V.strategy_for(_row(rows, "K22-530B-sel-dp8"))
    assert d["options"]["overlap_grad_reduce"] is False and d["parallel"]["vpp"] == 3
    # BLOOM: 70 layers over 12 stages with the embeddings counted as layers
    d, _ = V.strategy_for(_row(rows, "BLOOM-176B"))
    lps = d["parallel"]["layers_per_stage"]
    assert sum(lps) == 70 and lps[0] == lps[-1] == 5 and set(lps[1:-1]) == {6}
    # ... trained with Megatron's default dropout 0.1 and the vocabulary padded to 250,880 (tr11 slurm)
    assert d["model"]["dropout"] is True and d["model"]["vocab"] == 250880
    # ... on Jean Zay: 4 x 100 Gb/s Omni-Path per 8-GPU node (the tr11 README), not a DGX's 8 x 200
    assert d["cluster"] == {"preset": "dgx-a100-80g", "nodes": 48, "nic_gbit": 50.0}
    # Narayanan 2021 Table 2's ZeRO-3 rows: DeepSpeed's early-2021 ZeRO-3 (stacks.yaml [DS-Z3-2021])
    assert V.strategy_for(_row(rows, "N21-175B-zero3-768"))[0]["options"]["stack"] == "deepspeed-zero3-2021"
    # ... the others Megatron-LM of 2021 (unfused gradient accumulation) or 2022 (stacks.yaml [MEG-2021])
    for rid in ("N21-175B-ptdp-768", "N21-39.1B", "N21F12-175B-int-12"):
        assert V.strategy_for(_row(rows, rid))[0]["options"]["stack"] == "megatron-2021", rid
    # ... Table 1's 1.7B-18.4B launched with --DDP-impl torch (examples/sc21/run_table_1.sh, de7dc40)
    assert V.strategy_for(_row(rows, "N21-7.5B"))[0]["options"]["stack"] == "megatron-2021-torch-ddp"
    assert V.strategy_for(_row(rows, "K22-175B-sel"))[0]["options"]["stack"] == "megatron-2022"
    assert V.strategy_for(_row(rows, "BLOOM-176B"))[0]["options"]["stack"] == "deepspeed"
    # GPT rows: GELU MLP, learned positions, the row's vocabulary
    m = V.strategy_for(_row(rows, "K22-175B-sel"))[0]["model"]
    assert m["mlp"] == "gelu" and m["position"] == "learned" and m["vocab"] == 51200


# Megatron-LM examples/sc21/run_table_1.sh at de7dc40 (Narayanan 2021's launch scripts): TP, PP, MBS, GBS,
# NNODES, DDP and --num-layers-per-virtual-pipeline-stage (None: not passed, non-interleaved)
SC21_TABLE_1 = {
    "N21-1.7B": (1, 1, 16, 512, 4, "torch", None), "N21-3.6B": (2, 1, 16, 512, 8, "torch", None),
    "N21-7.5B": (4, 1, 16, 512, 16, "torch", None), "N21-18.4B": (8, 1, 8, 1024, 32, "torch", None),
    "N21-39.1B": (8, 2, 4, 1536, 64, "local", None), "N21-76.1B": (8, 4, 2, 1792, 128, "local", 5),
    "N21-145.6B": (8, 8, 2, 2304, 192, "local", 5), "N21-310.1B": (8, 16, 1, 2160, 240, "local", 3),
    "N21-529.6B": (8, 35, 1, 2520, 315, "local", 1), "N21-1008B": (8, 64, 1, 3072, 384, "local", None)}


@pytest.mark.parametrize("rid", sorted(SC21_TABLE_1))
def test_narayanan_table_1_runs_its_launch_script(rows, rid):
    tp, pp, mbs, gbs, nodes, ddp, per_chunk = SC21_TABLE_1[rid]
    row = _row(rows, rid)
    assert "run_table_1.sh (de7dc40)" in row["notes"] and f"--DDP-impl {ddp}" in row["notes"]
    d, notes = V.strategy_for(row)
    p, t, o = d["parallel"], d["training"], d["options"]
    assert (p["tp"], p["pp"], t["micro_batch"], t["global_batch"], d["cluster"]["nodes"]) == (tp, pp, mbs, gbs, nodes)
    assert t["recompute"] == "full" and t["precision"] == "fp16" and t["seq_len"] == 2048  # CONFIG.sh, --checkpoint-activations
    chunks = 1 if per_chunk is None else d["model"]["layers"] // pp // per_chunk
    assert p["vpp"] == chunks and d["schedule"] == ("interleaved-1f1b" if chunks > 1 else "1f1b")
    # --DDP-impl torch: PyTorch DDP's 25 MiB buckets overlapped with the last backward; local: after it
    assert o["overlap_grad_reduce"] is (ddp == "torch")
    assert o["stack"] == {"torch": "megatron-2021-torch-ddp", "local": "megatron-2021"}[ddp]
    assert o.get("grad_bucket_mb") == (25 * 2 ** 20 / 1e6 if ddp == "torch" else None)
    assert not any("n/a" in n for n in notes)  # nothing assumed


def test_narayanan_figures_12_and_18_run_their_launch_scripts(rows):
    # run_figure_12.sh / run_figure_18.sh (de7dc40): TP 8, PP 12, MBS 1, DDP local, --checkpoint-activations,
    # interleaved with --num-layers-per-virtual-pipeline-stage 2 (96 / 12 / 2 = 4 chunks); Figure 18 adds
    # --no-scatter-gather-tensors-in-pipeline
    for r in rows:
        if r["id"].startswith(("N21F12-", "N21F18-")):
            assert "(de7dc40)" in r["notes"], r["id"]
            d, notes = V.strategy_for(r)
            assert d["training"]["micro_batch"] == 1 and d["options"]["overlap_grad_reduce"] is False, r["id"]
            assert d["parallel"]["vpp"] == (1 if "-1f1b-" in r["id"] else 4), r["id"]
            assert d["options"].get("pipeline_scatter_gather", False) is ("-nosg-" not in r["id"]), r["id"]
            assert d["options"]["stack"] == "megatron-2021" and not notes, r["id"]


def test_select_and_summary():
    rows = [{"id": "K22-22B-full"}, {"id": "K22-175B-sel"}, {"id": "N21-1.7B"}]
    assert [r["id"] for r in V.select(rows, "K22-*")] == ["K22-22B-full", "K22-175B-sel"]
    assert [r["id"] for r in V.select(rows, "1.7B")] == ["N21-1.7B"]
    assert [r["id"] for r in V.select(rows, "1.7B, K22-22B*")] == ["K22-22B-full", "N21-1.7B"]
    res = [V.Result("a", "g", "m", 1.0, 1.1, 10.0), V.Result("b", "g", "m", 1.0, 0.8, -20.0),
           V.Result("c", "h", "m", not_expressible="x")]
    s = V.summarize(res)
    assert s["g"] == {"n": 2, "mae_pct": pytest.approx(15.0), "max_pct": pytest.approx(20.0)}
    assert s["overall"]["n"] == 2 and "h" not in s
