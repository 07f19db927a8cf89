"""training.master_weights: bf16 parameters, gradients and Adam moments without an fp32 master copy (NeMo
AutoModel's default, stacks.yaml [AM], [FSDP2-BF16]) -- exact bytes of the memory model, the Adam step
and FSDP2's copy kernels on tiny cases, the stacks' defaults, the importer, and one error per bad value."""
from __future__ import annotations

from pathlib import Path

import pytest

from simulator.simulation.importing import finish
from strategies.documents import parse_document
from strategies.errors import ConfigError
from strategies.importers import import_config
from strategies.strategy_file import parse_strategy
from taskgraph.costing import build_work, grad_bytes_per_param, optimizer_params
from taskgraph.memory import params_split, static_memory
from taskgraph.overheads import FUSED_ADAM_BYTES_PER_PARAM, adam_step_of, adam_step_s, master_weights
from taskgraph.plan import resolve
from taskgraph.stack_costs import fsdp2_copy_times, zero3_copy_times
from taskgraph.stacks import get_stack

AM = "nemo-automodel"
RECIPE = Path(__file__).resolve().parent.parent / "strategies" / "examples" / "sources" / "automodel_qwen3_moe_30b_te_deepep.yaml"


def _data(stack: str | None = AM, master: bool | None = None, precision: str = "bf16", zero: int = 3) -> dict:
    training = {"micro_batch": 1, "global_batch": 8, "seq_len": 256, "precision": precision}
    if master is not None:
        training["master_weights"] = master
    return {"model": {"preset": "llama3-8b", "layers": 2, "hidden": 256, "heads": 4, "kv_heads": 2, "ffn": 512,
                      "vocab": 1024},
            "cluster": {"preset": "dgx-h100", "nodes": 1},
            "parallel": {"tp": 1, "pp": 1, "dp": 8, "zero": zero},
            "training": training, "options": {} if stack is None else {"stack": stack}}


def _plan(*args, **kw):
    return resolve(parse_strategy(_data(*args, **kw), "."))


def test_defaults_are_each_stacks():
    assert get_stack(AM).master_weights is False
    assert all(get_stack(s).master_weights for s in ("megatron-te", "torchtitan", "llm-foundry", "deepspeed"))
    assert master_weights(_plan()) is False and master_weights(_plan(master=True)) is True
    assert master_weights(_plan("torchtitan")) is True and master_weights(_plan("torchtitan", False)) is False


def test_memory_per_parameter_exact():
    # ZeRO-3 over 8 ranks: bf16 weight 2, bf16 gradient 2, two bf16 moments 4 -> 8 / 8 bytes per parameter;
    # with master weights: weight 2, fp32 gradient 4, master + moments 12 -> 18 / 8 (taskgraph/memory.py)
    for master, (w, g, o) in ((False, (2, 2, 4)), (True, (2, 4, 12))):
        plan = _plan(master=master)
        (n, _), = params_split(plan).values()
        m = static_memory(plan)[0]
        assert (m.weights, m.grads, m.optimizer) == (w * n / 8, g * n / 8, o * n / 8)
        assert m.total == (w + g + o) * n / 8


def test_adam_step_bytes_and_time():
    plan = _plan()
    gpu = plan.cluster.gpu
    bw = gpu.hbm_bandwidth * (gpu.efficiency.optimizer_efficiency or gpu.efficiency.hbm_efficiency)
    # 7 bf16 tensors streamed (read param, grad, 2 moments; write param, 2 moments): 14 bytes, no copy
    assert adam_step_s(gpu, 1e9, master_copy=False, value_bytes=2) == pytest.approx(14e9 / bw, rel=1e-12)
    assert FUSED_ADAM_BYTES_PER_PARAM == 28
    stage = build_work(plan, fidelity="operator").stages[0]
    n = optimizer_params(plan, stage.layers)
    gbp = grad_bytes_per_param(plan)
    # torchtitan's default optimizer.implementation "fused": the fused kernel, 14 B in bf16, 28 B with fp32
    # shards (PyTorch FSDP2: no master copy either)
    assert adam_step_of(_plan("torchtitan", False), n, gbp) == pytest.approx(14 * n / bw, rel=1e-12)
    assert adam_step_of(_plan("torchtitan"), n, gbp) == pytest.approx(28 * n / bw, rel=1e-12)
    # AutoModel's torch.optim.Adam without fused=True: the foreach path's 18 elements ([TORCH-ADAM]) at the copy
    # rate, 36 B in bf16, 72 B with fp32 shards
    copy = gpu.hbm_bandwidth * gpu.efficiency.hbm_efficiency
    assert adam_step_of(plan, n, gbp) == pytest.approx(36 * n / copy, rel=1e-12)
    assert adam_step_of(_plan(master=True), n, gbp) == pytest.approx(72 * n / copy, rel=1e-12)


def test_fsdp2_copy_in_without_the_cast_and_the_reduced_gradients_cast():
    plan = _plan()
    gpu = plan.cluster.gpu
    bw = gpu.hbm_bandwidth * gpu.efficiency.hbm_efficiency
    launch = gpu.efficiency.launch_overhead
    n, params = 8, 1e8
    cin, cout, rs = fsdp2_copy_times(gpu, params, n, 2, 4, shard=2)
    assert cin == pytest.approx(4 * params / n / bw + launch, rel=1e-12)   # all_gather_copy_in alone: 2 + 2
    assert cout == pytest.approx(4 * params / bw + launch, rel=1e-12)
    assert rs == pytest.approx(6 * params / bw + launch + 6 * params / n / bw + launch, rel=1e-12)
    cin32, cout32, rs32 = fsdp2_copy_times(gpu, params, n, 2, 4)
    assert cin32 == pytest.approx(10 * params / n / bw + 2 * launch, rel=1e-12)   # cast 4 + 2, copy 2 + 2
    assert (cout32, rs32) == (cout, pytest.approx(6 * params / bw + launch, rel=1e-12))
    assert zero3_copy_times(get_stack(AM), plan, params, n, 2, 4) == (cin, cout, rs, 0.0)
    assert zero3_copy_times(get_stack(AM), _plan(master=True), params, n, 2, 4) == (cin32, cout32, rs32, 0.0)


def test_no_master_weights_shortens_the_automodel_step():
    from simulator.api import simulate_strategy
    # Llama 3 8B's first two layers and its 128k embedding (~1.2 G parameters): the Adam step over the 1/8
    # shard is ~0.5 ms shorter in bf16, where the tiny model's step hides behind the host's launches
    def data(m):
        d = _data(master=m)
        d["model"] = {"preset": "llama3-8b", "layers": 2}
        return d
    t = {m: simulate_strategy(parse_strategy(data(m), ".")).training.iteration_time_s for m in (True, False)}
    assert t[False] < t[True]


@pytest.mark.parametrize("edit, message", [
    (dict(stack=None, master=False), "needs a PyTorch FSDP2 stack, but options.stack = 'megatron-te'"),
    (dict(stack="deepspeed", master=False), "options.stack = 'deepspeed' keeps fp32 master weights"),
    (dict(stack="llm-foundry", master=False), "'llm-foundry'"),
    (dict(precision="fp16"), r"master_weights = false \(stack nemo-automodel's default\) with precision fp16"),
    (dict(stack="torchtitan", master=False, precision="fp16"), "master_weights = false with precision fp16"),
])
def test_refusals_are_one_line(edit, message):
    with pytest.raises(ConfigError, match=message) as e:
        _plan(**edit)
    assert "\n" not in str(e.value)


def test_a_bad_value_names_the_field():
    data = _data()
    data["training"]["master_weights"] = "no"
    with pytest.raises(ConfigError, match="training.master_weights"):
        parse_strategy(data, ".")


def test_fp16_with_master_weights_is_accepted_on_automodel():
    assert master_weights(_plan(master=True, precision="fp16")) is True


@pytest.mark.parametrize("dtype, written", [("auto", None), ("bf16", None), ("torch.bfloat16", None),
                                            ("float32", True), ("torch.float32", True), ("float", True)])
def test_importer_reads_torch_dtype(dtype, written):
    data = parse_document(RECIPE.read_text(), "automodel recipe")
    data["model"]["torch_dtype"] = dtype
    s = finish(import_config("automodel", data, cluster="dgx-h100"))
    assert s["training"].get("master_weights") == written


@pytest.mark.parametrize("dtype, message", [("float16", "fp16 parameters"), ("int8", "must be auto, bf16")])
def test_importer_refuses_other_dtypes(dtype, message):
    data = parse_document(RECIPE.read_text(), "automodel recipe")
    data["model"]["torch_dtype"] = dtype
    with pytest.raises(ConfigError, match=f"model.torch_dtype = .*{message}"):
        import_config("automodel", data, cluster="dgx-h100")


@pytest.mark.parametrize("line, written", [("", None), ("dtype = 'float32'\n", None), ("dtype = 'bfloat16'\n", False)])
def test_torchtitan_training_dtype(line, written):
    # torchtitan [training] dtype (config/job_config.py): "bfloat16" puts parameters, gradients and optimizer
    # states in bf16 without fp32 weights; mixed_precision_param stays the gather / compute dtype
    toml = ("[model]\nname = 'llama3'\nflavor = '8B'\n[training]\nlocal_batch_size = 1\nseq_len = 2048\n"
            "mixed_precision_param = 'bfloat16'\n" + line)
    imp = import_config("torchtitan", toml, cluster="dgx-h100", nodes=1)
    assert imp.strategy["training"].get("master_weights") == written
    assert imp.strategy["training"]["precision"] == "bf16"
    assert not any("dtype" in k for k in imp.unmodeled)


def test_torchtitan_training_dtype_refuses_others():
    toml = "[model]\nname = 'llama3'\nflavor = '8B'\n[training]\nlocal_batch_size = 1\ndtype = 'float16'\n"
    with pytest.raises(ConfigError, match="dtype"):
        import_config("torchtitan", toml, cluster="dgx-h100", nodes=1)


def test_search_memory_bound_stays_below_the_peak_without_master_weights():
    # the search prunes on a lower bound of the peak (simulator/search/space.py static_bound): with bf16
    # moments it must drop to 8 bytes per parameter too, or it would prune runs that fit
    from dataclasses import replace

    from simulator.search.backends import Job, evaluate_row
    from simulator.search.space import SearchSpace, context, enumerate_space, static_bound
    from strategies.strategy_file import load_strategy
    base = load_strategy(Path(__file__).resolve().parent.parent / "strategies" / "examples" / "llama3-8b-8-h100.yaml")
    s = replace(base, options=replace(base.options, stack=AM))
    ctx = context(s)
    space = SearchSpace(tp=(1, 2), pp=(1,), vpp=(1,), cp=(1,), micro_batch=(1,), zero=(3,), recompute=("full",))
    cands, _ = enumerate_space(ctx, space, [8], prune=False)
    assert cands
    for c in cands:
        row = evaluate_row(Job(ctx, 2.99, 1e9), c)
        assert static_bound(ctx, c) / 2**30 <= row["peak_memory_gb"] + 1e-9, c.label()
    fp32 = context(replace(s, training=replace(s.training, master_weights=True)))
    assert all(static_bound(ctx, c) < static_bound(fp32, c) for c in cands)
