"""MoE token dispatchers other than the all-to-all (issue 38 item 5, options.moe_dispatcher):
Megatron's MoEAllGatherTokenDispatcher (all-gather of routing map, probs and hidden states over the
expert-TP x EP group, reduce-scatter of the output) and NeMo AutoModel's torch dispatcher (all-gather
over EP, fp32 all-reduce of the output). Closed forms: bytes from the code (taskgraph/moe_dispatchers.py
cites the files), seconds from the collective model, and the refusals Megatron asserts."""
from __future__ import annotations

import pytest

from strategies.errors import ConfigError
from strategies.strategy_file import MOE_DISPATCHERS as NAMES
from strategies.strategy_file import parse_strategy
from taskgraph.costing import build_work
from taskgraph.model import load_model_yaml
from taskgraph.moe_dispatchers import MOE_DISPATCHERS
from taskgraph.operators import layer_operators
from taskgraph.plan import resolve
from topologies.collectives import collective_time
from topologies.placement import group_ranks

MOE = {"preset": "mixtral-8x7b", "layers": 2, "hidden": 1024, "heads": 8, "kv_heads": 4, "ffn": 2048,
       "vocab": 8192, "experts": 8, "top_k": 2, "expert_ffn": 1024}


def _experts(dispatcher: str, tp: int, ep: int, moe_load: float = 1.0):
    ops = layer_operators(load_model_yaml(MOE), micro_batch=1, seq_len=1024, tp=tp, sp=tp > 1, cp=1, ep=ep,
                          dtype_bytes=2, flash_attention=True, layer_index=0, moe_load=moe_load,
                          moe_dispatcher=dispatcher)
    return {o.name: o for o in ops}["moe_experts"]


def _rows(op):
    return [(c.group, c.op, c.phase, c.where, c.bytes, c.copies) for c in op.comms]


def test_names_match_the_functions():
    assert tuple(MOE_DISPATCHERS) == NAMES


def test_megatron_allgather_bytes():
    # tp 2 (sp) x ep 8: each rank holds 1024/2 = 512 tokens; the tp_ep group of 16 gathers 8192 rows
    # of the bool routing map [., 8 experts], the bf16 probs [., 8] and the bf16 hidden states [., 1024]
    op = _experts("allgather", tp=2, ep=8)
    rows, h, E = 16 * 512, 1024, 8
    hid = 2 * rows * h
    assert _rows(op) == [
        ("etp-ep", "all-gather", "fwd", "before", rows * E, 0),
        ("etp-ep", "all-gather", "fwd", "before", 2 * rows * E, 0),
        ("etp-ep", "all-gather", "fwd", "before", hid, 0),
        ("etp-ep", "reduce-scatter", "fwd", "after", hid, 0),
        ("etp-ep", "all-gather", "bwd", "before", hid, 0),
        ("etp-ep", "reduce-scatter", "bwd", "after", hid, 0),
        ("etp-ep", "reduce-scatter", "bwd", "after", 2 * rows * E, 0)]
    # local experts get 512 x tp 2 x top-2 = 2048 copies; permute reads + writes them, unpermute reads
    # them and writes the whole gathered [8192, 1024] output; no chunk sort (two kernels)
    te = 512 * 2 * 2
    assert (op.copy_bytes, op.copy_kernels) == (2 * h * (3 * te + rows), 2)


def test_allgather_traffic_ignores_the_routing_skew():
    # the all-gather moves every token whatever the router does; the all-to-all's busiest rank grows
    ag = [c.bytes for c in _experts("allgather", tp=1, ep=4).comms]
    assert [c.bytes for c in _experts("allgather", tp=1, ep=4, moe_load=1.5).comms] == ag
    a2a = _experts("alltoall", tp=1, ep=4)
    assert _experts("alltoall", tp=1, ep=4, moe_load=1.5).comms[0].bytes == pytest.approx(1.5 * a2a.comms[0].bytes)


def test_automodel_torch_bytes():
    # ep 4, tp 1: 1024 tokens per rank, 4096 gathered; counts int64, x bf16, weights fp32 [., 2],
    # indices int64 [., 2], mask bool; the fp32 [4096, 1024] output all-reduced, its gradient too,
    # then the backward all-reduces of x's (bf16) and the weights' (fp32) gradients
    op = _experts("allgather_allreduce", tp=1, ep=4)
    rows, h, k = 4 * 1024, 1024, 2
    assert [(c.op, c.phase, c.where, c.bytes) for c in op.comms] == [
        ("all-gather", "fwd", "before", 8 * 4), ("all-gather", "fwd", "before", 2 * rows * h),
        ("all-gather", "fwd", "before", 4 * rows * k), ("all-gather", "fwd", "before", 8 * rows * k),
        ("all-gather", "fwd", "before", rows), ("all-reduce", "fwd", "after", 4 * rows * h),
        ("all-reduce", "bwd", "before", 4 * rows * h), ("all-reduce", "bwd", "after", 2 * rows * h),
        ("all-reduce", "bwd", "after", 4 * rows * k)]
    assert {c.group for c in op.comms} == {"ep"}


def _plan(tmp_path, options: dict, parallel: dict | None = None, nodes: int = 2):
    d = {"model": MOE, "cluster": {"preset": "dgx-h100", "nodes": nodes},
         "parallel": parallel or {"tp": 2, "pp": 1, "ep": 8, "sp": True},
         "schedule": "1f1b", "training": {"micro_batch": 1, "global_batch": 16, "seq_len": 1024}, "options": options}
    return resolve(parse_strategy(d, tmp_path))


def test_allgather_seconds_are_the_collective_model(tmp_path):
    plan = _plan(tmp_path, {"moe_dispatcher": "allgather"})
    ranks = group_ranks("etp-ep", plan.sizes, 0)
    assert ranks == tuple(range(16))                  # tp 2 x ep 8 over both nodes
    op = _experts("allgather", tp=2, ep=8)
    layer = build_work(plan).stages[0].layers[1]
    cost = {o.name: o for o in layer.ops}["moe_experts"]
    got = [(c.category, c.op, c.seconds) for c in cost.fwd_pre + cost.fwd_post + cost.bwd_pre + cost.bwd_post]
    want = [("ep-comm", f"etp-ep-{c.op}", collective_time(c.op, c.bytes, ranks, plan.cluster)) for c in op.comms]
    assert [g[:2] for g in got] == [w[:2] for w in want]
    assert [g[2] for g in got] == pytest.approx([w[2] for w in want], rel=1e-12)


@pytest.mark.parametrize("options, words", [
    ({"moe_dispatcher": "allgather", "moe_max_nodes": 1}, "moe_max_nodes"),
    ({"moe_dispatcher": "allgather", "overlap_moe_expert_parallel_comm": True}, "alltoall/flex"),
    ({"moe_dispatcher": "allgather", "moe_shared_expert_overlap": True}, "only works with alltoall or flex"),
    ({"moe_dispatcher": "all_gather"}, "moe_dispatcher"),
])
def test_refusals_are_one_line(tmp_path, options, words):
    with pytest.raises(ConfigError) as e:
        _plan(tmp_path, options)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_automodel_dispatcher_needs_untensor_parallel_experts(tmp_path):
    with pytest.raises(ConfigError, match="etp: 1"):
        _plan(tmp_path, {"moe_dispatcher": "allgather_allreduce"})
    plan = _plan(tmp_path, {"moe_dispatcher": "allgather_allreduce"}, {"tp": 1, "pp": 1, "ep": 8})
    assert plan.strategy.options.moe_dispatcher == "allgather_allreduce"


def test_dense_model_refuses_the_option(tmp_path):
    d = {"model": "llama3-8b", "cluster": {"preset": "dgx-h100", "nodes": 1}, "parallel": {"tp": 8},
         "training": {"micro_batch": 1, "global_batch": 8, "seq_len": 1024}, "options": {"moe_dispatcher": "allgather"}}
    with pytest.raises(ConfigError, match="no experts"):
        resolve(parse_strategy(d, tmp_path))


@pytest.mark.parametrize("flag, want", [
    ("", "allgather"),                                          # Megatron-core's default dispatcher
    ("--moe-token-dispatcher-type allgather", "allgather"),
    ("--moe-token-dispatcher-type alltoall", None),
])
def test_megatron_importer_maps_the_dispatcher(flag, want, tmp_path):
    from strategies.importers import import_config
    base = ("torchrun pretrain_gpt.py --num-layers 8 --hidden-size 256 --num-attention-heads 8 --seq-length 512 "
            "--micro-batch-size 1 --global-batch-size 8 --vocab-size 1000 --bf16 --num-experts 8 "
            "--expert-model-parallel-size 2 ")
    imp = import_config("megatron", base + flag, cluster="dgx-h100", nodes=1)
    assert imp.strategy["options"].get("moe_dispatcher") == want
    assert not imp.unmodeled
    resolve(parse_strategy(imp.strategy, tmp_path))              # the strategy it writes runs


def test_megatron_importer_refuses_shared_overlap_with_allgather():
    from strategies.importers import import_config
    cmd = ("torchrun pretrain_gpt.py --num-layers 8 --hidden-size 256 --num-attention-heads 8 --seq-length 512 "
           "--micro-batch-size 1 --global-batch-size 8 --vocab-size 1000 --bf16 --num-experts 8 "
           "--expert-model-parallel-size 2 --moe-shared-expert-intermediate-size 1024 --moe-shared-expert-overlap")
    with pytest.raises(ConfigError, match="its default is allgather"):
        import_config("megatron", cmd, cluster="dgx-h100", nodes=1)
