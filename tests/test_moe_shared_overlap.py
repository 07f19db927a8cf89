"""Megatron's shared-expert overlap (options.moe_shared_expert_overlap): the shared experts' fc1 beside
the dispatch all-to-all and fc2 beside the combine, the backward mirrored (taskgraph/lower_model.py
shared_pair). Closed-form iteration times on tiny hand-made cost records, with and without the SMs the
all-to-all holds, full recompute, the split backward, the coarse records, the SimPy reference, and the
option end to end (errors, both fidelities)."""
from __future__ import annotations

import pytest

from simulator.engine.core import simulate
from simulator.engine.interference import with_interference
from strategies.schedules import get_schedule
from taskgraph.coarse import coarsen
from taskgraph.lower_model import lower_model
from taskgraph.work import Comm, IterationWork, LayerWork, OpCost, StageWork, shared_pair


def _work(A: float, on: bool, recompute: str = "none", stages: int = 1, f_ep: float = 0.0) -> IterationWork:
    """One layer: ``moe_router`` (1 s fwd, 1 s dgrad), ``moe_experts`` (1 s fwd, 1 s dgrad, 1 s wgrad;
    the dispatch / combine all-to-alls of A s before / after it, both passes) and
    ``moe_shared_experts`` S (2 s fwd, 2 s dgrad, 2 s wgrad; fc1 half of it: shared_fc1_share 0.5).
    Without the overlap: F = 1 + A + 1 + A + 2 = 4 + 2A, B = 2 + 2 + A + 1 + A + 1 + 1 = 7 + 2A."""
    a2a = (Comm("ep-comm", "ep-all-to-all", A, "ep"),)
    router = OpCost("moe_router", 1.0, 1.0)
    experts = OpCost("moe_experts", 1.0, 1.0, 1.0, fwd_pre=a2a, fwd_post=a2a, bwd_pre=a2a, bwd_post=a2a)
    shared = OpCost("moe_shared_experts", 2.0, 2.0, 2.0)
    layer = LayerWork("layer0", (router, experts, shared), recompute=recompute)
    return IterationWork((StageWork((layer,)),) * stages, overlap_grad_reduce=False, overlap_param_gather=False,
                         p2p_overlap=True, shared_expert_overlap=on, shared_fc1_share=0.5,
                         meta={"sm_share": {"ep": f_ep}} if f_ep else {})


def _makespan(schedule, work):
    """The engine's makespan; with an SM share, through the interference fixed point (converged to
    simulator/engine/interference.py TOLERANCE of the work)."""
    g = lower_model(schedule, work)
    if g.meta.get("sm_share"):
        return with_interference(g, simulate)[0].makespan
    return simulate(g).makespan


@pytest.mark.parametrize("A", [0.5, 1.0, 2.0, 3.0])
def test_shared_experts_hide_under_the_all_to_alls(A):
    one = get_schedule("1f1b", 1, 1)
    assert _makespan(one, _work(A, False)) == (4 + 2 * A) + (7 + 2 * A)
    # forward: router 1, [dispatch A | fc1 1], experts 1, [combine A | fc2 1] = 2 + 2 max(A, 1);
    # backward: [combine's backward A | fc2 dgrad + wgrad 2], experts 2, [dispatch's A | fc1 2], router 1
    want = (2 + 2 * max(A, 1.0)) + (3 + 2 * max(A, 2.0))
    assert _makespan(one, _work(A, True)) == want
    # exposed: the shared experts' part the all-to-alls do not cover (A = 1: the backward's 2 x 1 s)
    assert (4 + 2 * A) + (7 + 2 * A) - want == 2 * min(A, 1.0) + 2 * min(A, 2.0)


def test_the_all_to_alls_sms_slow_the_shared_experts_beside_them():
    # f = 0.25 of the SMs while an all-to-all runs (taskgraph/overlap.py bulk): A = 2 covers fc1
    # (1 s at 0.75 = 1.33 s < 2) in the forward; in the backward 2 s of work take 2 s at 0.75 = 1.5 s
    # of it, the last 0.5 s at full speed: 2.5 s per pair. F = 2 + 2 x 2 = 6, B = 3 + 2 x 2.5 = 8
    assert _makespan(get_schedule("1f1b", 1, 1), _work(2.0, True, f_ep=0.25)) == pytest.approx(14.0, rel=1e-3)
    assert _makespan(get_schedule("1f1b", 1, 1), _work(2.0, False, f_ep=0.25)) == 8.0 + 11.0  # nothing beside


def test_full_recompute_reruns_the_overlapped_forward():
    # A = 1: the recomputed forward takes the overlapped 4 s before the backward's 7 s
    assert _makespan(get_schedule("1f1b", 1, 1), _work(1.0, True, recompute="full")) == 4.0 + 4.0 + 7.0
    assert _makespan(get_schedule("1f1b", 1, 1), _work(1.0, False, recompute="full")) == 6.0 + 6.0 + 9.0


def test_split_backward_overlaps_the_input_gradients_only():
    # zb-h1 on one rank, one micro-batch: F 4, I = [A | fc2 dgrad 1] + experts dgrad 1 + [A | fc1 dgrad 1]
    # + router 1 = 2 + 2 max(A, 1) = 4 (A = 1), W = 2 + 1 = 3 (shared wgrad, experts wgrad)
    assert _makespan(get_schedule("zb-h1", 1, 1), _work(1.0, True)) == 4.0 + 4.0 + 3.0


@pytest.mark.parametrize("name,pp,m", [("1f1b", 1, 3), ("1f1b", 2, 4), ("zb-h1", 2, 4), ("interleaved-1f1b", 2, 4)])
@pytest.mark.parametrize("f_ep", [0.0, 0.2])
@pytest.mark.parametrize("recompute", ["none", "full"])
def test_coarse_records_agree_with_the_operator_lowering(name, pp, m, f_ep, recompute):
    vpp = 2 if name == "interleaved-1f1b" else 1
    sched = get_schedule(name, pp, m, vpp)
    work = _work(1.5, True, recompute, stages=sched.num_stages, f_ep=f_ep)
    if name == "zb-h1":
        work = IterationWork(work.stages, overlap_grad_reduce=False, overlap_param_gather=False, p2p_overlap=True,
                             shared_expert_overlap=True, shared_fc1_share=0.5,
                             meta={**work.meta, "split_backward": True})
    # exact without interference; with it the operator lowering's fixed point converges to 1e-3
    assert _makespan(sched, coarsen(work)) == pytest.approx(_makespan(sched, work), rel=2e-3 if f_ep else 1e-12)


def test_reference_simpy_agrees():
    from simulator.engine.reference_simpy import simulate_reference
    g = lower_model(get_schedule("1f1b", 2, 5), _work(1.5, True, stages=2))
    ref = simulate_reference(g.duration, g.device, g.succ_ptr, g.succ_idx, g.num_devices)
    assert max(ref[1]) == pytest.approx(simulate(g).makespan, rel=0, abs=1e-12)


def test_no_all_to_all_no_pair():
    # ep = 1: the experts carry no all-to-alls, the layer runs in its chain as before
    layer = LayerWork("l", (OpCost("moe_router", 1, 1), OpCost("moe_experts", 1, 1, 1),
                            OpCost("moe_shared_experts", 1, 1, 1)))
    assert shared_pair(layer, True) is None
    assert shared_pair(_work(1.0, True).stages[0].layers[0], True) == (1, 2)
    assert shared_pair(_work(1.0, True).stages[0].layers[0], False) is None


def test_delta_equals_a_full_run():
    # a what-if (every all-to-all twice as long) re-timed by delta mode is the full run of the changed graph
    import numpy as np

    from simulator.engine.delta.simulator import DeltaSimulator
    g = lower_model(get_schedule("1f1b", 2, 6), _work(1.5, True, stages=2))
    ds = DeltaSimulator(g, budget=None)
    a2a = [i for i in range(g.num_tasks) if g.devices[g.device[i]].stream == "ep"]
    assert len(a2a) == 2 * 2 * 6 * 2          # 2 per pass, F and B, 6 micro-batches, 2 stages
    ds.set_durations(a2a, [3.0] * len(a2a))
    g.duration[a2a] = 3.0
    full = simulate(g)
    assert np.array_equal(ds.start, full.start) and ds.makespan == full.makespan


# --- the option end to end ------------------------------------------------------------------------
def _strategy(ep: int = 2, **options):
    from strategies.strategy_file import parse_strategy
    return parse_strategy({"model": {"preset": "mixtral-8x7b", "layers": 2, "hidden": 1024, "heads": 8, "kv_heads": 4,
                                     "ffn": 2048, "vocab": 8192, "experts": 4, "top_k": 2, "expert_ffn": 1024,
                                     "shared_experts": 1},
                           "cluster": {"preset": "dgx-h100", "nodes": 1},
                           "parallel": {"tp": 2, "pp": 2, "ep": ep, "sp": True}, "schedule": "1f1b",
                           "training": {"micro_batch": 1, "global_batch": 16, "seq_len": 1024}, "options": options}, ".")


@pytest.mark.parametrize("fidelity", ["operator", "coarse"])
def test_option_shortens_the_iteration_in_both_fidelities(fidelity):
    from simulator.simulation.strategy import simulate_strategy
    off = simulate_strategy(_strategy(), fidelity=fidelity).training.iteration_time_s
    on = simulate_strategy(_strategy(moe_shared_expert_overlap=True), fidelity=fidelity).training.iteration_time_s
    assert on < off
    op = simulate_strategy(_strategy(moe_shared_expert_overlap=True), fidelity="operator").training.iteration_time_s
    assert on == pytest.approx(op, rel=0.02)


def test_without_expert_parallelism_nothing_moves():
    # ep = 1: no all-to-all for the shared experts to hide under, the layer's chain is unchanged
    from simulator.simulation.strategy import simulate_strategy
    a = simulate_strategy(_strategy(ep=1)).training.iteration_time_s
    assert simulate_strategy(_strategy(ep=1, moe_shared_expert_overlap=True)).training.iteration_time_s == a


# --- importers: Megatron-LM flag names (megatron/training/arguments.py, transformer_config.py
# moe_shared_expert_overlap, moe_shared_expert_intermediate_size, moe_token_dispatcher_type) -----------
MEGATRON = ("--num-layers 8 --hidden-size 1024 --num-attention-heads 8 --seq-length 4096 --global-batch-size 64 "
            "--vocab-size 32000 --bf16 --num-experts 64 --moe-router-topk 8 --moe-ffn-hidden-size 512 "
            "--moe-shared-expert-intermediate-size 1024 --expert-model-parallel-size 8 "
            "--moe-token-dispatcher-type alltoall --moe-shared-expert-overlap")


def test_megatron_flag_imports():
    from strategies.importers import import_config
    imp = import_config("megatron", MEGATRON, cluster="dgx-h100", nodes=2)
    assert imp.strategy["options"]["moe_shared_expert_overlap"] is True
    assert imp.strategy["model"]["shared_experts"] == 2
    assert not [u for u in imp.unmodeled if "shared" in u], imp.unmodeled
    # no shared experts: Megatron never takes the overlapped path; a note, not an option
    imp = import_config("megatron", MEGATRON.replace("--moe-shared-expert-intermediate-size 1024 ", ""),
                        cluster="dgx-h100", nodes=2)
    assert "moe_shared_expert_overlap" not in imp.strategy["options"]
    assert "moe-shared-expert-overlap (no effect without shared experts)" in imp.unmodeled


@pytest.mark.parametrize("edit,match", [
    (("--moe-token-dispatcher-type alltoall ", ""), (r"--moe-shared-expert-overlap needs moe-token-dispatcher-type "
                                                    r"alltoall or flex")),
    (("--moe-shared-expert-overlap", "--moe-shared-expert-overlap --overlap-moe-expert-parallel-comm"),
     r"--moe-shared-expert-overlap with overlap-moe-expert-parallel-comm: Megatron refuses the pair"),
])
def test_megatron_refusals(edit, match):
    from strategies.errors import ConfigError
    from strategies.importers import import_config
    with pytest.raises(ConfigError, match=match):
        import_config("megatron", MEGATRON.replace(*edit), cluster="dgx-h100", nodes=2)


def test_nemo_keys_import():
    # NeMo 1 hands model.* TransformerConfig fields to Megatron-core unchanged
    from strategies.importers import import_config
    d = {"trainer": {"num_nodes": 2, "devices": 8, "precision": "bf16-mixed"},
         "model": {"num_layers": 8, "hidden_size": 1024, "ffn_hidden_size": 512, "num_attention_heads": 8,
                   "global_batch_size": 64, "encoder_seq_length": 4096, "tokenizer": {"type": "meta-llama/Llama-2-7b"},
                   "num_moe_experts": 64, "moe_router_topk": 8, "expert_model_parallel_size": 8,
                   "moe_token_dispatcher_type": "alltoall", "moe_shared_expert_intermediate_size": 1024,
                   "moe_shared_expert_overlap": True}}
    imp = import_config("nemo", d, cluster="dgx-h100")
    assert imp.strategy["options"]["moe_shared_expert_overlap"] is True
    assert imp.strategy["model"]["shared_experts"] == 2
    assert not [u for u in imp.unmodeled if "shared" in u], imp.unmodeled
