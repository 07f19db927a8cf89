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
from taskgraph.lower_model import Comm, IterationWork, LayerWork, OpCost, StageWork, lower_model, shared_pair


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
