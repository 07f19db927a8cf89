"""Megatron's combined 1F1B (options.overlap_moe_expert_parallel_comm) and delayed weight gradients
(options.delay_wgrad_compute): the schedule transform, closed-form iteration times on tiny hand-made
cost records, the memory of the extra warm-up micro-batch, the SimPy reference, and the options end
to end (both fidelities, interference from the dispatcher's SMs)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.engine.core import simulate
from strategies.actions import Overlap, flatten_order
from strategies.errors import ScheduleError
from strategies.schedules import get_schedule
from strategies.schedules_combined import combined_1f1b
from strategies.validate import check_deadlock, validate_schedule
from taskgraph.lower_model import lower_model
from taskgraph.work import Comm, IterationWork, LayerWork, OpCost, StageWork


# --- the schedule transform (Megatron schedules.py get_pp_rank_microbatches: warm-up + 1) --------
def test_combined_orders_by_hand():
    s = combined_1f1b(get_schedule("1f1b", 2, 4))
    assert s.grid().splitlines() == [
        "rank 0: 0F0 0F1 (0F2;0B0)OVERLAP_F_B (0F3;0B1)OVERLAP_F_B 0B2 0B3",
        "rank 1: 1F0 (1F1;1B0)OVERLAP_F_B (1F2;1B1)OVERLAP_F_B (1F3;1B2)OVERLAP_F_B 1B3",
    ]
    # interleaved: rank 1 warms up (pp-r-1)*2 + (vpp-1)*pp = 2 forwards, + 1 = 3
    s = combined_1f1b(get_schedule("interleaved-1f1b", 2, 4, 2))
    assert s.grid().splitlines()[1] == ("rank 1: 1F0 1F1 3F0 (3F1;3B0)OVERLAP_F_B (1F2;3B1)OVERLAP_F_B "
                                        "(1F3;1B0)OVERLAP_F_B (3F2;1B1)OVERLAP_F_B (3F3;3B2)OVERLAP_F_B 3B3 1B2 1B3")


def test_combined_refuses_other_schedules():
    with pytest.raises(ScheduleError, match="not to schedule 'zb-h1'"):
        combined_1f1b(get_schedule("zb-h1", 2, 4))


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4), st.integers(1, 12), st.sampled_from([1, 2, 3]))
def test_combined_keeps_every_action_and_its_order(pp, m, vpp):
    if vpp > 1 and pp == 1:
        vpp = 1
    name = "interleaved-1f1b" if vpp > 1 else "1f1b"
    try:
        base = get_schedule(name, pp, m, vpp)
    except ScheduleError:
        return
    s = combined_1f1b(base)
    validate_schedule(s)
    check_deadlock(s)
    for old, new in zip(base.orders, s.orders):
        flat = flatten_order(new)
        assert sorted(map(str, flat)) == sorted(map(str, old))
        for kind in "FB":     # each rank runs its forwards and its backwards in the same order
            assert [a for a in flat if a.kind == kind] == [a for a in old if a.kind == kind]
        lead = next((i for i, a in enumerate(old) if a.kind == "B"), len(old))
        pairs = [e for e in new if isinstance(e, Overlap)]
        assert len(pairs) == len(old) // 2 - lead   # one pair per forward after the warm-up + 1
        # a pair never holds the backward of its own forward (Megatron: "independent")
        assert all(p.forward.mb != p.backward.mb or p.forward.stage != p.backward.stage for p in pairs)


# --- closed forms on hand-made cost records ------------------------------------------------------
A = 1.0   # all-to-all seconds


def _work(stream: str, concurrent: bool, delay: bool = False, saved: float = 0.0, stages: int = 1) -> IterationWork:
    """One stage, one layer: op ``attn`` (1 s fwd, 1 s dgrad) then the dispatch all-to-all (A), op
    ``experts`` (1 s fwd; backward 1 s dgrad + 1 s wgrad) then the combine all-to-all (A). Forward:
    attn, a2a, experts, a2a = 2 + 2A; backward: a2a, experts dgrad, a2a, wgrad, attn = 3 + 2A."""
    a2a = (Comm("ep-comm", "ep-all-to-all", A, stream),)
    attn = OpCost("attn", 1.0, 1.0, saved_bytes=saved)
    experts = OpCost("experts", 1.0, 1.0, 1.0, fwd_pre=a2a, fwd_post=a2a, bwd_pre=a2a, bwd_post=a2a)
    return IterationWork((StageWork((LayerWork("layer0", (attn, experts)),)),) * stages, overlap_grad_reduce=False,
                         overlap_param_gather=False, p2p_overlap=True, concurrent_pairs=concurrent,
                         delay_wgrad=delay)


def _makespan(schedule, work):
    return simulate(lower_model(schedule, work)).makespan


@pytest.mark.parametrize("m", [1, 2, 4, 7])
def test_plain_1f1b_exposes_every_all_to_all(m):
    # F = 2 + 2A = 4, B = 3 + 2A = 5, nothing overlaps on one rank: m (F + B)
    assert _makespan(get_schedule("1f1b", 1, m), _work("tp", False)) == m * 9.0


@pytest.mark.parametrize("m", [1, 2, 4, 7])
def test_combined_step_hides_the_other_halfs_all_to_all(m):
    # F0 alone (4 s), then m-1 combined steps, then B(m-1) alone (5 s). In a step (ties by task id,
    # the forward's tasks first): compute F.attn 0-1, B.experts.dgrad 1-2, F.experts 2-3,
    # B.experts.wgrad 3-4, B.attn 4-5; all-to-all stream B.combine 0-1, F.dispatch 1-2, B.dispatch 2-3,
    # F.combine 3-4: 5 s instead of F + B = 9 s -- the four all-to-alls hide under the other half's
    # compute, so a step costs its compute alone
    want = 9.0 if m == 1 else 4.0 + (m - 1) * 5.0 + 5.0
    assert _makespan(combined_1f1b(get_schedule("1f1b", 1, m)), _work("ep", True)) == want


def test_combined_serial_halves_change_nothing_but_the_order():
    # the same pairs run one half after the other: every all-to-all exposed again, m (F + B)
    assert _makespan(combined_1f1b(get_schedule("1f1b", 1, 4)), _work("ep", False)) == 4 * 9.0


def test_delayed_wgrad_lets_the_dispatch_backward_start():
    # one B alone: a2a 1, experts dgrad 1, then the dispatch backward (1) beside the wgrad (1) instead
    # of before it, attn 1: 4 s instead of 5; F0 = 4 s before it
    sched = get_schedule("1f1b", 1, 1)
    assert _makespan(sched, _work("ep", False)) == 9.0
    assert _makespan(sched, _work("ep", False, delay=True)) == 8.0


def test_reference_simpy_agrees_on_combined_steps():
    from simulator.engine.reference_simpy import simulate_reference
    g = lower_model(combined_1f1b(get_schedule("1f1b", 2, 5)), _work("ep", True, delay=True, stages=2))
    res = simulate(g)
    ref = simulate_reference(g.duration, g.device, g.succ_ptr, g.succ_idx, g.num_devices)
    assert max(ref[1]) == pytest.approx(res.makespan, rel=0, abs=1e-12)


def test_extra_warmup_holds_one_more_microbatch():
    # pp 1: plain 1F1B holds one micro-batch's activations (F0 B0 F1 B1 ...); combined 1F1B runs F1
    # while B0 runs, so two are held at once (Megatron's extra warm-up forward)
    from simulator.reports.memory_timeline import peak_per_rank
    X = 1e9
    plain_s, comb_s = get_schedule("1f1b", 1, 4), combined_1f1b(get_schedule("1f1b", 1, 4))
    g = lower_model(plain_s, _work("ep", True, saved=X))
    assert peak_per_rank(g, simulate(g))[0] == X
    g = lower_model(comb_s, _work("ep", True, saved=X))
    assert peak_per_rank(g, simulate(g))[0] == 2 * X


# --- the options end to end ----------------------------------------------------------------------
def _strategy(tmp_path, schedule="1f1b", pp=2, vpp=1, **options):
    from strategies.strategy_file import parse_strategy
    return parse_strategy({"model": {"preset": "mixtral-8x7b", "layers": 4}, "cluster":
                           {"preset": "dgx-h100", "nodes": 4, "gpus_per_node": 4},
                           "parallel": {"tp": 1, "pp": pp, "vpp": vpp, "ep": 8}, "schedule": schedule,
                           "training": {"micro_batch": 1, "global_batch": 32, "seq_len": 2048},
                           "options": options}, tmp_path)


@pytest.mark.parametrize("schedule,pp,vpp", [("1f1b", 1, 1), ("1f1b", 2, 1), ("interleaved-1f1b", 2, 2)])
def test_overlap_shortens_and_both_fidelities_agree(tmp_path, schedule, pp, vpp):
    from simulator.api import simulate_strategy

    def run(fid, **o):
        return simulate_strategy(_strategy(tmp_path, schedule, pp, vpp, fidelity=fid, **o)).result

    base = run("operator").makespan
    on = {"overlap_moe_expert_parallel_comm": True}
    op, co = run("operator", **on), run("coarse", **on)
    assert op.makespan < base
    assert co.makespan == op.makespan      # the same per-operator graph at either fidelity
    free = run("operator", moe_flex_dispatcher_num_sms=0, **on).makespan
    assert free < op.makespan              # the dispatcher's SMs slow the compute beside it


def test_dispatcher_sms_default_is_deepeps(tmp_path):
    from simulator.api import simulate_strategy
    from topologies.comm_kernels import comm_kernels
    on = {"overlap_moe_expert_parallel_comm": True}
    a = simulate_strategy(_strategy(tmp_path, **on)).result.makespan
    b = simulate_strategy(_strategy(tmp_path, moe_flex_dispatcher_num_sms=comm_kernels().deepep_sms, **on)).result.makespan
    assert a == b


# --- importers -----------------------------------------------------------------------------------
# The MoE flags of a DeepSeek-V3-style Megatron-LM launch (flag names: megatron/core/transformer/
# transformer_config.py overlap_moe_expert_parallel_comm, delay_wgrad_compute, moe_token_dispatcher_type,
# moe_flex_dispatcher_backend, moe_enable_deepep, moe_deepep_num_sms, moe_router_group_topk).
MEGATRON_MOE = ("--num-layers 8 --hidden-size 1024 --num-attention-heads 8 --seq-length 4096 --global-batch-size 64 "
                "--vocab-size 32000 --bf16 --num-experts 64 --moe-router-topk 8 --expert-model-parallel-size 8 "
                "--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 2 "
                "--moe-token-dispatcher-type flex --moe-enable-deepep --moe-router-group-topk 4 "
                "--overlap-moe-expert-parallel-comm --delay-wgrad-compute --moe-deepep-num-sms 20")


def test_megatron_moe_overlap_flags_import():
    from strategies.importers import import_config
    imp = import_config("megatron", MEGATRON_MOE, cluster="dgx-h100", nodes=2)
    o = imp.strategy["options"]
    assert o["overlap_moe_expert_parallel_comm"] is True and o["delay_wgrad_compute"] is True
    assert o["moe_flex_dispatcher_num_sms"] == 20 and o["moe_max_nodes"] == 4
    assert imp.strategy["schedule"] == "interleaved-1f1b"
    assert not [u for u in imp.unmodeled if "moe" in u or "wgrad" in u], imp.unmodeled
    # without group-limited routing a DeepEP token reaches at most its top-k nodes
    imp = import_config("megatron", MEGATRON_MOE.replace("--moe-router-group-topk 4 ", ""), cluster="dgx-h100", nodes=2)
    assert imp.strategy["options"]["moe_max_nodes"] == 8
    # the plain all-to-all dispatcher: no node deduplication, the SMs noted when they have no effect
    plain = MEGATRON_MOE.replace("--moe-token-dispatcher-type flex --moe-enable-deepep ", "--moe-token-dispatcher-type "
                                 "alltoall ").replace("--overlap-moe-expert-parallel-comm --delay-wgrad-compute ", "")
    imp = import_config("megatron", plain, cluster="dgx-h100", nodes=2)
    assert "moe_max_nodes" not in imp.strategy["options"]
    assert "moe-deepep-num-sms 20 (no effect without overlap-moe-expert-parallel-comm)" in imp.unmodeled


@pytest.mark.parametrize("edit,match", [
    (("--overlap-moe-expert-parallel-comm ", ""), r"--delay-wgrad-compute needs overlap-moe-expert-parallel-comm"),
    (("--moe-token-dispatcher-type flex ", ""), r"--moe-enable-deepep needs moe-token-dispatcher-type flex"),
    (("--expert-model-parallel-size 8 ", ""), r"--overlap-moe-expert-parallel-comm needs experts and expert parallelism"),
])
def test_megatron_moe_overlap_refusals(edit, match):
    from strategies.errors import ConfigError
    from strategies.importers import import_config
    with pytest.raises(ConfigError, match=match):
        import_config("megatron", MEGATRON_MOE.replace(*edit), cluster="dgx-h100", nodes=2)


def test_nemo_moe_overlap_keys_import():
    from strategies.importers import import_config
    d = {"trainer": {"num_nodes": 2, "devices": 8, "precision": "bf16-mixed"},
         "model": {"num_layers": 8, "hidden_size": 1024, "num_attention_heads": 8, "global_batch_size": 64,
                   "encoder_seq_length": 4096, "tokenizer": {"type": "meta-llama/Llama-2-7b"},
                   "num_moe_experts": 64, "moe_router_topk": 8, "expert_model_parallel_size": 8,
                   "moe_token_dispatcher_type": "flex", "overlap_moe_expert_parallel_comm": True,
                   "delay_wgrad_compute": True, "moe_flex_dispatcher_num_sms": 24}}
    imp = import_config("nemo", d, cluster="dgx-h100")
    o = imp.strategy["options"]
    assert (o["overlap_moe_expert_parallel_comm"], o["delay_wgrad_compute"], o["moe_flex_dispatcher_num_sms"],
            o["moe_max_nodes"]) == (True, True, 24, 8)
    assert not [u for u in imp.unmodeled if "moe" in u or "wgrad" in u], imp.unmodeled


def test_report_names_the_combined_steps(tmp_path, capsys):
    import yaml

    from simulator.cli.main import main
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump({"model": {"preset": "mixtral-8x7b", "layers": 2}, "cluster": {"preset": "dgx-h100", "nodes": 1},
                                 "parallel": {"tp": 1, "pp": 2, "ep": 4}, "schedule": "1f1b",
                                 "training": {"micro_batch": 1, "global_batch": 16, "seq_len": 1024},
                                 "options": {"overlap_moe_expert_parallel_comm": True}}))
    assert main(["simulate", str(f)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].endswith("microbatches=4 (combined 1F1B steps: options.overlap_moe_expert_parallel_comm)")


def test_delta_equals_a_full_run_on_combined_steps():
    # a what-if on the combined graph (every all-to-all twice as long) re-timed by delta mode is the
    # full run of the changed graph, start for start
    import numpy as np

    from simulator.engine.delta.simulator import DeltaSimulator
    g = lower_model(combined_1f1b(get_schedule("1f1b", 2, 6)), _work("ep", True, delay=True, stages=2))
    ds = DeltaSimulator(g, budget=None)
    a2a = [i for i in range(g.num_tasks) if g.duration[i] == A and g.devices[g.device[i]].stream == "ep"]
    assert len(a2a) == 2 * 2 * 6 * 2          # 2 per pass, F and B, 6 micro-batches, 2 stages
    ds.set_durations(a2a, [2 * A] * len(a2a))
    g.duration[a2a] = 2 * A
    full = simulate(g)
    assert np.array_equal(ds.start, full.start) and ds.makespan == full.makespan
