"""DTensor's dispatch under tensor parallelism and FSDP2's per-layer hooks on the host
(taskgraph/data/stacks.yaml [HOST-DT]): the stack figures re-derived from the measured CSVs, a
host-bound layer's stretch computed by hand, where the terms apply, and bad values."""
from __future__ import annotations

import csv
from pathlib import Path

import pytest

from benchmarks.host_dtensor import SHAPE, derive
from strategies.errors import ConfigError
from strategies.strategy_file import parse_strategy
from taskgraph.costing import build_work
from taskgraph.overheads import host_bound, stack_host_terms
from taskgraph.plan import resolve
from taskgraph.stacks import get_stack, load_tables
from taskgraph.work import OpCost
from tests.test_stacks_host import counted_kernels, host_llama_block

DATA = Path(__file__).resolve().parents[1] / "benchmarks/kernel_data/amd-epyc-2026-11-29"


def _rows(name: str) -> list[dict]:
    with (DATA / name).open() as f:
        return list(csv.DictReader(f))


def test_measured_block_is_counted_like_the_host_llama_block():
    # the tiny block the CPU ran is the same operator list as [HOST-TT]'s: 21 + 37 eager, 10 + 16 compiled
    ops = host_llama_block(*SHAPE)
    assert counted_kernels(ops, get_stack("torchtitan")) == (21, 37)
    assert counted_kernels(ops, get_stack("torchtitan-compile")) == (10, 16)


def test_eager_stack_figures_are_rederived_from_the_measurement():
    st = get_stack("torchtitan")
    d = derive(_rows("host_dtensor.csv"), sum(counted_kernels(host_llama_block(*SHAPE), st)))
    assert st.dtensor_host_factor == tuple(round(v, 2) for v in d["dtensor_host_factor"])
    assert st.fsdp2_hook_kernels == tuple(round(v, 1) for v in d["fsdp2_hook_kernels"])
    assert st.fsdp2_hook_kernels_tp == tuple(round(v, 1) for v in d["fsdp2_hook_kernels_tp"])
    # the measurement's own content: DTensor multiplies the block's host time several-fold, and every
    # configuration with more layers costs more (a per-layer cost > 0)
    assert all(v > 2.0 for v in d["dtensor_host_factor"])
    assert all(f > 0 and b > 0 for f, b in d["per_layer_us"].values())


def test_compiled_stack_figures_are_rederived_from_the_measurement():
    eager, comp = get_stack("torchtitan"), get_stack("torchtitan-compile")
    d = derive(_rows("host_dtensor_compile.csv"), sum(counted_kernels(host_llama_block(*SHAPE), comp)))
    assert comp.dtensor_host_factor == tuple(round(v, 2) for v in d["dtensor_host_factor"])
    # FSDP2's hooks run outside the compiled blocks: the same host seconds as eager's, in compile's unit
    same = tuple(round(k * eager.host_us_per_kernel / comp.host_us_per_kernel, 1) for k in eager.fsdp2_hook_kernels)
    assert comp.fsdp2_hook_kernels == same
    same_tp = tuple(round(k * eager.host_us_per_kernel / comp.host_us_per_kernel, 1)
                    for k in eager.fsdp2_hook_kernels_tp)
    assert comp.fsdp2_hook_kernels_tp == same_tp


def test_terms_apply_only_to_a_pytorch_native_stack_with_tp_or_sharding():
    tt = get_stack("torchtitan")
    assert stack_host_terms(None, 8, True, 67.5e-6) == ((1.0, 1.0), (0.0, 0.0))          # Megatron + TE
    assert stack_host_terms(get_stack("llm-foundry"), 8, True, 10e-6) == ((1.0, 1.0), (0.0, 0.0))
    assert stack_host_terms(tt, 1, False, 67.5e-6) == ((1.0, 1.0), (0.0, 0.0))
    assert stack_host_terms(tt, 2, False, 67.5e-6)[0] == tt.dtensor_host_factor
    hooks = stack_host_terms(tt, 1, True, 67.5e-6)[1]
    assert hooks == pytest.approx(tuple(k * 67.5e-6 for k in tt.fsdp2_hook_kernels))
    hooks = stack_host_terms(tt, 2, True, 67.5e-6)[1]
    assert hooks == pytest.approx(tuple(k * 67.5e-6 for k in tt.fsdp2_hook_kernels_tp))


def test_hand_computed_host_bound_layer_under_tp_and_fsdp2():
    # h 2048 block, every operator pass 20 us on the GPU (forward 200 us, backward 200 us), no
    # collectives; torchtitan eager at 67.5 us per counted kernel: forward 21 kernels, backward 37.
    # TP: 21 x 67.5 x a and 37 x 67.5 x b; FSDP2 adds (kf, kb) x 67.5 us, over TP's DTensors (tf, tb) x 67.5.
    ops = host_llama_block(2048, 16, 8, 5632, 2048)
    costs = [OpCost(o.name, 20e-6, 20e-6 if o.bwd_input_flops > 0 or o.bwd_input_bytes > 0 else 0.0) for o in ops]
    st = get_stack("torchtitan")
    a, b = st.dtensor_host_factor
    kf, kb = st.fsdp2_hook_kernels
    tf, tb = st.fsdp2_hook_kernels_tp
    host = 67.5e-6
    cases = {(2, False): (21 * 67.5 * a, 37 * 67.5 * b),
             (1, True): ((21 + kf) * 67.5, (37 + kb) * 67.5),
             (8, True): ((21 * a + tf) * 67.5, (37 * b + tb) * 67.5)}
    for (tp, sharded), (fwd_us, bwd_us) in cases.items():
        scale, hooks = stack_host_terms(st, tp, sharded, host)
        out = host_bound(ops, costs, host, True, 0.0, st, scale, hooks)
        assert sum(c.fwd for c in out) * 1e6 == pytest.approx(fwd_us), (tp, sharded)
        assert sum(c.bwd_input + c.bwd_weight for c in out) * 1e6 == pytest.approx(bwd_us), (tp, sharded)
        ratio = out[0].fwd / costs[0].fwd
        assert all(o.fwd == pytest.approx(c.fwd * ratio) for o, c in zip(out, costs))   # stretched alike


def _work(tmp_path, stack: str, tp: int, zero: int = 1, nodes: int = 1):
    doc = {"model": {"preset": "llama3-8b", "layers": 2, "hidden": 1024, "heads": 8, "kv_heads": 8, "ffn": 2816},
           "cluster": {"preset": "dgx-h100", "nodes": nodes},
           "parallel": {"tp": tp, "pp": 1, "zero": zero}, "schedule": "1f1b",
           "training": {"micro_batch": 1, "global_batch": 8 * nodes * 8 // tp, "seq_len": 512},
           "options": {"stack": stack}}
    return build_work(resolve(parse_strategy(doc, tmp_path)), fidelity="operator")


def _layer_fwd_s(work) -> tuple[float, int, float]:
    """(compute seconds, collectives, their seconds) of the first transformer layer's forward."""
    layer = next(lw for lw in work.stages[0].layers if lw.name.startswith("layer"))
    return sum(c.fwd for c in layer.ops), sum(len(c.fwd_pre) + len(c.fwd_post) for c in layer.ops), \
        sum(x.seconds for c in layer.ops for x in c.fwd_pre + c.fwd_post)


def test_plan_applies_the_dtensor_factor_to_a_host_bound_small_layer(tmp_path):
    # hidden 1024, 512 tokens, tp 2: the layer is host-bound under torchtitan, so its forward (compute
    # + its collectives) takes exactly the host's time: 21 kernels x 67.5 us x a + collectives x 30 us
    st = get_stack("torchtitan")
    compute, n_coll, comm = _layer_fwd_s(_work(tmp_path, "torchtitan", 2))
    host = 21 * 67.5e-6 * st.dtensor_host_factor[0] + n_coll * 30e-6
    assert compute + comm == pytest.approx(host)
    # the compiled stack: 10 kernels x 134.2 us x its own factor
    cst = get_stack("torchtitan-compile")
    compute, n_coll, comm = _layer_fwd_s(_work(tmp_path, "torchtitan-compile", 2))
    assert compute + comm == pytest.approx(10 * 134.2e-6 * cst.dtensor_host_factor[0] + n_coll * 30e-6)


@pytest.mark.parametrize("tp", [1, 2])
def test_plan_adds_fsdp2_hooks_under_zero3(tmp_path, tp):
    # ZeRO-3 over 8 / tp ranks (FSDP2 shards): the host-bound layer's forward takes 21 kernels x a + the
    # hooks, in 67.5 us units, plus its collectives (the all-gathers among them) at 30 us each
    st = get_stack("torchtitan")
    compute, n_coll, comm = _layer_fwd_s(_work(tmp_path, "torchtitan", tp, zero=3))
    a = st.dtensor_host_factor[0] if tp > 1 else 1.0
    hook = (st.fsdp2_hook_kernels_tp if tp > 1 else st.fsdp2_hook_kernels)[0]
    assert compute + comm == pytest.approx((21 * a + hook) * 67.5e-6 + n_coll * 30e-6)


@pytest.mark.parametrize("field, bad", [
    ("dtensor_host_factor", "3"), ("dtensor_host_factor", "{fwd: 0.5, bwd: 2}"),
    ("dtensor_host_factor", "{fwd: 2}"), ("dtensor_host_factor", "{fwd: 2, bwd: true}"),
    ("fsdp2_hook_kernels", "{fwd: -1, bwd: 2}"), ("fsdp2_hook_kernels", "{fwd: 1, bwd: 2, all: 3}"),
    ("fsdp2_hook_kernels", "{fwd: 1, bwd: 5000}")])
def test_bad_stack_host_terms_are_one_clear_error(tmp_path, field, bad):
    p = tmp_path / "stacks.yaml"
    p.write_text(f"stacks:\n  x:\n    attention: catalog\n    {field}: {bad}\n")
    with pytest.raises(ConfigError, match=rf"stack 'x' {field} = .* must be {{fwd: x, bwd: y}}"):
        load_tables(str(p))
