"""A software stack's measured host dispatch per kernel (taskgraph/data/stacks.yaml [HOST-TT]):
re-derived from the measured CSV, the precedence against the cluster's figure, and a host-bound layer
computed by hand per stack."""
from __future__ import annotations

import csv
import statistics
from pathlib import Path

import pytest

from strategies.errors import ConfigError
from strategies.strategy_file import parse_strategy
from taskgraph.model import ModelSpec
from taskgraph.operators import layer_operators
from taskgraph.overheads import host_bound, op_kernels
from taskgraph.plan import resolve
from taskgraph.stacks import get_stack, load_tables
from taskgraph.work import OpCost

HOST_LLAMA = Path(__file__).resolve().parents[1] / "benchmarks/kernel_data/h200-2026-11-26/host_llama.csv"


def host_llama_block(h: int, heads: int, kv: int, ffn: int, s: int):
    """The model's operators of benchmarks/kernel_sweep.py's torchtitan-style Llama block."""
    m = ModelSpec(name="block", layers=1, hidden=h, heads=heads, vocab=32000, kv_heads=kv, ffn=ffn, mlp="swiglu",
                  norm="rmsnorm", position="rope", tied_embeddings=False)
    return layer_operators(m, micro_batch=1, seq_len=s, dtype_bytes=2, flash_attention=True)


def counted_kernels(ops, stack) -> tuple[int, int]:
    """(forward, backward) kernels the model counts for a layer under ``stack``."""
    return (sum(op_kernels(o, "fwd", stack) for o in ops),
            sum(op_kernels(o, "bwd_input", stack) + op_kernels(o, "bwd_weight", stack) for o in ops))


def test_model_counts_of_the_measured_block():
    # torchtitan eager: two RMSNorms of six kernels each (composite rms_norm), SwiGLU's silu and mul,
    # the rest one kernel a pass; compiled: one kernel an operator pass, like Megatron + TE
    ops = host_llama_block(2048, 16, 8, 5632, 2048)
    assert counted_kernels(ops, get_stack("torchtitan")) == (21, 37)
    assert counted_kernels(ops, get_stack("torchtitan-compile")) == (10, 16)
    assert counted_kernels(ops, get_stack("megatron-te")) == (10, 16)


@pytest.mark.parametrize("stack, mode", [("torchtitan", "eager"), ("torchtitan-compile", "compile")])
def test_stack_figure_is_rederived_from_the_measurement(stack, mode):
    # the median over the block's forward+sum+backward rows of host_us / the model's kernel count
    st = get_stack(stack)
    per = []
    with HOST_LLAMA.open() as f:
        for r in csv.DictReader(f):
            if r["mode"] != mode or r["what"] != "forward+sum+backward":
                continue
            ops = host_llama_block(int(r["hidden"]), int(r["heads"]), int(r["kv_heads"]), int(r["ffn"]), int(r["seq"]))
            per.append(float(r["host_us"]) / sum(counted_kernels(ops, st)))
    assert len(per) == (5 if mode == "eager" else 3)
    assert st.host_us_per_kernel == round(statistics.median(per), 1)


def test_hand_computed_host_bound_layer_per_stack():
    # h 2048 block, every operator pass 20 us on the GPU (10 operators: forward 200 us, backward 200 us),
    # no collectives. Host: kernels x us per kernel. Megatron + TE (cluster default 10 us): forward 10 x 10 =
    # 100 us, backward 16 x 10 = 160 us < 200: the GPU paces, nothing changes. torchtitan eager (67.5 us):
    # forward 21 x 67.5 = 1417.5 us, backward 37 x 67.5 = 2497.5 us; compiled (134.2 us): 10 x 134.2 =
    # 1342 us, 16 x 134.2 = 2147.2 us: the layer takes the host's time, each pass stretched alike.
    ops = host_llama_block(2048, 16, 8, 5632, 2048)
    costs = [OpCost(o.name, 20e-6, 20e-6 if o.bwd_input_flops > 0 or o.bwd_input_bytes > 0 else 0.0) for o in ops]
    assert sum(c.fwd for c in costs) == pytest.approx(200e-6) and sum(c.bwd_input for c in costs) == pytest.approx(200e-6)
    expect = {"megatron-te": (10.0, 200.0, 200.0), "torchtitan": (67.5, 1417.5, 2497.5),
              "torchtitan-compile": (134.2, 1342.0, 2147.2)}
    for name, (us, fwd, bwd) in expect.items():
        st = get_stack(name)
        assert (st.host_us_per_kernel or 10.0) == us
        out = host_bound(ops, costs, us * 1e-6, True, 0.0, None if name == "megatron-te" else st)
        assert sum(c.fwd for c in out) * 1e6 == pytest.approx(fwd), name
        assert sum(c.bwd_input + c.bwd_weight for c in out) * 1e6 == pytest.approx(bwd), name


def _plan(tmp_path, stack, cluster=None):
    doc = {"model": {"preset": "llama3-8b", "layers": 2},
           "cluster": cluster or {"preset": "dgx-h100", "nodes": 1},
           "parallel": {"tp": 1, "pp": 1}, "schedule": "1f1b",
           "training": {"micro_batch": 1, "global_batch": 8, "seq_len": 2048},
           "options": {} if stack is None else {"stack": stack}}
    return resolve(parse_strategy(doc, tmp_path))


def test_stack_replaces_the_cluster_default_but_not_a_cluster_figure(tmp_path):
    assert _plan(tmp_path, None).cluster.host_us_per_kernel == 10.0
    assert _plan(tmp_path, "megatron-te").cluster.host_us_per_kernel == 10.0      # no figure: the cluster's
    assert _plan(tmp_path, "llm-foundry").cluster.host_us_per_kernel == 10.0
    assert _plan(tmp_path, "torchtitan").cluster.host_us_per_kernel == 67.5
    assert _plan(tmp_path, "torchtitan-compile").cluster.host_us_per_kernel == 134.2
    own = {"preset": "dgx-h100", "nodes": 1, "host_us_per_kernel": 6}        # measured on the user's CPU
    assert _plan(tmp_path, "torchtitan", own).cluster.host_us_per_kernel == 6.0
    off = {"preset": "dgx-h100", "nodes": 1, "host_us_per_kernel": 0}
    assert _plan(tmp_path, "torchtitan", off).cluster.host_us_per_kernel == 0.0


@pytest.mark.parametrize("bad", ["-1", "fast", "true", "20000"])
def test_bad_stack_host_figure_is_one_clear_error(tmp_path, bad):
    p = tmp_path / "stacks.yaml"
    p.write_text(f"stacks:\n  x:\n    attention: catalog\n    host_us_per_kernel: {bad}\n")
    with pytest.raises(ConfigError, match=r"stack 'x' host_us_per_kernel = .* must be a number of microseconds"):
        load_tables(str(p))
