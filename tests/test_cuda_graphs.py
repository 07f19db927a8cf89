"""CUDA graphs (options.cuda_graphs, taskgraph/cuda_graphs.py): the host issue cost a graph replaces,
closed-form on a tiny host-bound layer; Megatron's refusals; the importers' mapping."""
from types import SimpleNamespace as N

import pytest

from strategies.errors import ConfigError
from strategies.import_common import cuda_graph_option
from strategies.import_megatron import import_megatron
from strategies.strategy_file import parse_strategy
from taskgraph.cuda_graphs import GRAPH_LAUNCH_US, captured_mask, layer_graphs
from taskgraph.overheads import host_bound
from taskgraph.work import Comm, OpCost

US = 1e-6


def _op(name):
    # one memory-bound kernel per pass (taskgraph/overheads.py op_kernels)
    return N(name=name, kind="elementwise", fwd_flops=0, bwd_input_flops=0, bwd_weight_flops=0,
             fwd_bytes=1, bwd_input_bytes=1, bwd_weight_bytes=0, gemms=())


def _layer():
    """Four 10 us kernels per pass, one 5 us TP all-reduce after the first op in each direction."""
    ops = [_op(n) for n in ("qkv", "moe_router", "moe_experts", "mlp_residual")]
    ar = (Comm("tp-comm", "tp-allreduce", 5 * US),)
    costs = [OpCost(o.name, fwd=10 * US, bwd_input=10 * US, bwd_weight=0.0,
                    fwd_post=ar if i == 0 else (), bwd_post=ar if i == 0 else ()) for i, o in enumerate(ops)]
    return ops, costs


def _fwd_us(costs):
    return round(sum(c.fwd for c in costs) / US, 6)


def test_graphs_replace_the_host_issue_cost_closed_form():
    ops, costs = _layer()
    host, coll = 25 * US, 30 * US
    # eager: host 4 x 25 + 30 = 130 us against GPU 40 + 5 = 45 us: compute stretched by 85 to 125 us
    assert _fwd_us(host_bound(ops, costs, host, True, coll)) == 125.0
    opt = N(cuda_graphs="layers", moe_capacity_factor=None)
    # dropless MoE layer: graph 1 = qkv + router (with its all-reduce), host issues the experts and residual:
    # 2 x 25 + one replay (3.5 + 25 copy) = 78.5 us host, GPU 45: compute 40 + 33.5 = 73.5 us
    g = layer_graphs(opt, ops, "layer", host)
    assert g == ((True, True, False, False), pytest.approx((GRAPH_LAUNCH_US + 25) * US))
    assert _fwd_us(host_bound(ops, costs, host, True, coll, graphs=g)) == pytest.approx(73.5)
    # drop-and-pad: the whole layer is one graph: 28.5 us host < 45 us GPU, nothing stretched
    g = layer_graphs(N(cuda_graphs="layers", moe_capacity_factor=1.0), ops, "layer", host)
    assert _fwd_us(host_bound(ops, costs, host, True, coll, graphs=g)) == 40.0
    # full iteration: no host cost in the layer at all
    g = layer_graphs(N(cuda_graphs="full_iteration", moe_capacity_factor=None), ops, "layer", host)
    assert g[1] == 0.0 and _fwd_us(host_bound(ops, costs, host, True, coll, graphs=g)) == 40.0


def test_backward_replays_one_graph_per_captured_run():
    ops, costs = _layer()
    host, coll = 25 * US, 30 * US
    g = layer_graphs(N(cuda_graphs="layers", moe_capacity_factor=None), ops, "layer", host)
    out = host_bound(ops, costs, host, True, coll, graphs=g)
    # backward host: experts + residual 2 x 25 + one replay 28.5 = 78.5; GPU 40 + 5: stretch 33.5 over 40 us
    assert round(sum(c.bwd_input for c in out) / US, 6) == pytest.approx(73.5)


def test_embedding_and_head_stay_host_issued_under_per_layer_graphs():
    ops, _ = _layer()
    assert layer_graphs(N(cuda_graphs="layers", moe_capacity_factor=None), ops, "head", 1e-5) is None
    assert layer_graphs(N(cuda_graphs="none", moe_capacity_factor=None), ops, "layer", 1e-5) is None
    assert captured_mask(ops, "full_iteration", "embedding", False) == (True,) * 4


BASE = {"model": "llama3-8b", "cluster": {"preset": "dgx-h100", "nodes": 1}, "parallel": {"tp": 8, "sp": True},
        "training": {"micro_batch": 1, "global_batch": 8, "seq_len": 128, "precision": "bf16"}}


def _parse(options, training=None):
    return parse_strategy({**BASE, "training": {**BASE["training"], **(training or {})}, "options": options})


@pytest.mark.parametrize("options, training, match", [
    ({"cuda_graphs": "layer"}, None, r"options.cuda_graphs = 'layer' is not one of none, layers, full_iteration"),
    ({"cuda_graphs": "layers", "stack": "torchtitan"}, None, r"stack = 'torchtitan' has no CUDA graph capture"),
    ({"cuda_graphs": "layers", "activation_offload_layers": 2}, None, r"refuses per-layer graphs with CPU offloading"),
    ({"cuda_graphs": "layers"}, {"recompute": "full"}, r"full recompute only with the full-iteration graph"),
])
def test_refusals(options, training, match):
    with pytest.raises(ConfigError, match=match):
        _parse(options, training)


def test_full_iteration_accepts_what_per_layer_graphs_refuse():
    assert _parse({"cuda_graphs": "full_iteration"}, {"recompute": "full"}).options.cuda_graphs == "full_iteration"


def test_full_iteration_refuses_a_dropless_moe():
    from taskgraph.plan import resolve
    s = parse_strategy({"model": "mixtral-8x7b", "cluster": {"preset": "dgx-h100", "nodes": 1},
                        "parallel": {"tp": 1, "ep": 8}, "training": {"micro_batch": 1, "global_batch": 8,
                                                                    "seq_len": 1024, "precision": "bf16"},
                        "options": {"cuda_graphs": "full_iteration"}})
    with pytest.raises(ConfigError, match=r"dropless .*set moe_capacity_factor or cuda_graphs: layers"):
        resolve(s)


@pytest.mark.parametrize("fields, want", [
    ({}, None), ({"cuda_graph_impl": "none"}, None),
    ({"cuda_graph_impl": "local"}, "layers"), ({"cuda_graph_impl": "transformer_engine"}, "layers"),
    ({"cuda_graph_impl": "full_iteration"}, "full_iteration"),
    ({"enable_cuda_graph": True}, "layers"), ({"external_cuda_graph": True}, "layers"),
    ({"enable_cuda_graph": True, "cuda_graph_scope": "full_iteration"}, "full_iteration"),
    ({"cuda_graph_impl": "transformer_engine", "cuda_graph_modules": ["attn", "moe_router"]}, "layers"),
])
def test_importer_mapping(fields, want):
    options = {}
    cuda_graph_option(fields.get, str, options, "")
    assert options.get("cuda_graphs") == want


def test_importer_refuses_what_megatron_refuses():
    with pytest.raises(ConfigError, match=r"enable_cuda_graph and external_cuda_graph are both set"):
        cuda_graph_option({"enable_cuda_graph": True, "external_cuda_graph": True}.get, str, {}, "")
    with pytest.raises(ConfigError, match=r"cuda_graph_impl = 'local' with the deprecated"):
        cuda_graph_option({"enable_cuda_graph": True, "cuda_graph_impl": "local"}.get, str, {}, "")


def test_megatron_flags_map_and_are_no_longer_unmodelled():
    args = ("--tensor-model-parallel-size 8 --sequence-parallel --num-layers 32 --hidden-size 4096 "
            "--num-attention-heads 32 --seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 1 "
            "--global-batch-size 8 --bf16 --vocab-size 32000 --cuda-graph-impl transformer_engine")
    imp = import_megatron(args, cluster="dgx-h100", nodes=1)
    assert imp.strategy["options"]["cuda_graphs"] == "layers"
    assert not [f for f in imp.unmodeled if "cuda-graph" in f]


def test_per_layer_graphs_keep_two_input_sized_buffers_per_layer_in_flight():
    from taskgraph.memory import cuda_graph_buffer_bytes
    from taskgraph.plan import resolve
    plan = resolve(_parse({"cuda_graphs": "layers"}))
    # layer input 2 B x 128 tokens x 4096 / tp 8 (sequence parallel) = 131,072 B; 2 buffers x 32 layers x 2 in flight
    assert cuda_graph_buffer_bytes(plan, ((0, 0), (0, 1))) == 2 * 131072 * 32 * 2
    assert cuda_graph_buffer_bytes(resolve(_parse({"cuda_graphs": "full_iteration"})), ((0, 0),)) == 0.0
    assert cuda_graph_buffer_bytes(resolve(_parse({})), ((0, 0),)) == 0.0


def test_bridge_and_nemo2_recipes_map_their_cuda_graph_fields():
    from pathlib import Path

    from strategies.importers import import_config
    data = Path(__file__).parent / "data" / "pyrecipes" / "bridge_run_config.yaml"
    imp = import_config("bridge", data.read_text(), origin="run_config.yaml", cluster="dgx-h100", nodes=2,
                        sets={"model.cuda_graph_impl": "transformer_engine", "model.cuda_graph_scope": ["attn"]})
    assert imp.strategy["options"]["cuda_graphs"] == "layers"
    assert not [n for n in imp.unmodeled if "cuda_graph" in n]
