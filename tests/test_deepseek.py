"""DeepSeek-V3 mechanisms: node-limited dispatch, concurrent DualPipe pairs, FP8 block-wise scaling,
bidirectional DualPipe. Closed forms on constructed clusters and tiny schedules."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strategies.errors import ConfigError
from topologies.cluster import load_cluster_yaml
from topologies.collectives import all_to_all
from topologies.moe_dispatch import node_limited_all_to_all

BNV = 200e9 * 0.5          # 1e11 B/s after efficiency
BNET = 160e9 / 8 * 0.5     # 1e10 B/s after efficiency
A_NV, A_NET, T0 = 1e-6, 5e-6, 2e-6
S = 8e8


@pytest.fixture(scope="module")
def cl():
    return load_cluster_yaml({
        "name": "toy", "gpu": "h100", "nodes": 8, "gpus_per_node": 4,
        "nvlink_gbps": 200, "nvlink_efficiency": 0.5, "nvlink_latency_us": 1,
        "nic_gbit": 160, "nic_efficiency": 0.5, "nic_latency_us": 5,
        "collective_base_latency_us": 2, "collective_model": "alpha-beta", "contention": False,
    })


def approx(x):
    return pytest.approx(x, rel=1e-12, abs=1e-18)


# --- node-limited routing (DeepSeek-V3 Sections 2.1.2, 3.2.2) ----------------------------------
def test_node_limited_closed_form(cl):
    # 32 ranks on 8 nodes of 4, top-8, M = 2: each token crosses IB to 2 nodes, 7/8 of them remote
    t_ib = 2 * 7 / 8 * (S / 8) / BNET
    t_nv = 3 / 4 * S / BNV
    want = T0 + max(t_ib, t_nv) + 3 * A_NV + 7 * A_NET
    assert node_limited_all_to_all(S, range(32), cl, copies=8, max_nodes=2) == approx(want)
    # plain all-to-all: every copy to its GPU, (n-g)/n of the buffer over IB
    plain = T0 + max(3 / 32 * S / BNV, 28 / 32 * S / BNET) + 3 * A_NV + 28 * A_NET
    assert all_to_all(S, range(32), cl) == approx(plain)
    assert node_limited_all_to_all(S, range(32), cl, copies=8, max_nodes=2) < plain


def test_node_limit_capped_by_nodes_and_top_k(cl):
    # M larger than the nodes spanned (2) or than top-k: D = min(M, N, k)
    two_nodes = node_limited_all_to_all(S, range(8), cl, copies=8, max_nodes=6)
    assert two_nodes == approx(T0 + max(2 * 1 / 2 * S / 8 / BNET, 3 / 4 * S / BNV) + 3 * A_NV + A_NET)
    top2 = node_limited_all_to_all(S, range(32), cl, copies=2, max_nodes=4)
    assert top2 == approx(T0 + max(2 * 7 / 8 * S / 2 / BNET, 3 / 4 * S / BNV) + 3 * A_NV + 7 * A_NET)


def test_node_limited_inside_one_node_is_the_plain_all_to_all(cl):
    assert node_limited_all_to_all(S, range(4), cl, copies=8, max_nodes=1) == all_to_all(S, range(4), cl)
    assert node_limited_all_to_all(0, range(32), cl, copies=8, max_nodes=4) == 0.0


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 8), st.integers(1, 8), st.sampled_from([4, 8, 16, 32]))
def test_fewer_nodes_never_slower(cl, m, k, n):
    a = node_limited_all_to_all(S, range(n), cl, copies=k, max_nodes=m)
    b = node_limited_all_to_all(S, range(n), cl, copies=k, max_nodes=m + 1)
    assert a <= b


@pytest.mark.parametrize("bad", [0, -1, 2.5, "four", True])
def test_moe_max_nodes_bad_values_one_error(tmp_path, bad):
    with pytest.raises(ConfigError, match="options.moe_max_nodes"):
        _moe_strategy(tmp_path, moe_max_nodes=bad)


def _moe_strategy(tmp_path, schedule="1f1b", pp=2, vpp=1, gb=16, nodes=2, cluster_gpn=8, precision="bf16",
                  **options):
    from strategies.strategy_file import parse_strategy
    cluster = {"preset": "dgx-h100", "nodes": nodes * 8 // cluster_gpn, "gpus_per_node": cluster_gpn}
    return parse_strategy({"model": {"preset": "mixtral-8x7b", "layers": 4}, "cluster": cluster,
                           "parallel": {"tp": 1, "pp": pp, "vpp": vpp, "ep": 8}, "schedule": schedule,
                           "training": {"micro_batch": 1, "global_batch": gb, "seq_len": 2048, "precision": precision},
                           "options": options}, tmp_path)


def test_node_limited_shortens_cross_node_ep(tmp_path):
    from simulator.api import simulate_strategy
    # EP 8 inside one 8-GPU node: node-limiting changes nothing
    base = simulate_strategy(_moe_strategy(tmp_path)).result.makespan
    assert simulate_strategy(_moe_strategy(tmp_path, moe_max_nodes=1)).result.makespan == base
    # 4 GPUs per node: each EP-8 group spans 2 nodes; one copy per node instead of top-2 copies
    wide = dict(nodes=4, cluster_gpn=4)
    far = simulate_strategy(_moe_strategy(tmp_path, **wide)).result.makespan
    near = simulate_strategy(_moe_strategy(tmp_path, moe_max_nodes=1, **wide)).result.makespan
    assert near < far


# --- concurrent DualPipe pairs (DeepSeek-V3 Section 3.2.1) -------------------------------------
def _pair_case(concurrent: bool, scale: float = 1.0):
    """pp 1, two stages on rank 0; every stage: op a (1 s) then its all-to-all (1 s) then op b (1 s);
    backward: b (1 s), the all-to-all (1 s), a (1 s). Order 0F0 1F0 (0F1;1B0) 1F1 1B1 0B0 0B1."""
    from simulator.engine.core import simulate
    from strategies.actions import Action, Overlap, Schedule
    from taskgraph.lower_model import lower_model
    from taskgraph.work import Comm, IterationWork, LayerWork, OpCost, StageWork
    a2a = (Comm("ep-comm", "ep-all-to-all", 1.0),)
    layer = LayerWork("layer0", (OpCost("a", 1.0, 1.0, fwd_post=a2a, bwd_pre=a2a), OpCost("b", 1.0, 1.0)))
    work = IterationWork((StageWork((layer,)), StageWork((layer,))), overlap_grad_reduce=False,
                         overlap_param_gather=False, p2p_overlap=True,
                         concurrent_pairs=concurrent, pair_compute_scale=scale)
    A = Action
    order = (A(0, "F", 0), A(1, "F", 0), Overlap(A(0, "F", 1), A(1, "B", 0)), A(1, "F", 1), A(1, "B", 1),
             A(0, "B", 0), A(0, "B", 1))
    sched = Schedule("toy", 1, 2, 2, (0, 0), (order,))
    return simulate(lower_model(sched, work)).makespan


def test_serial_pair_is_the_sum_of_its_halves():
    assert _pair_case(False) == 24.0      # 8 actions x 3 s


def test_concurrent_pair_hides_each_halfs_all_to_all():
    # pair from t = 6: F.a 6-7 | B.b 7-8 | F.a2a 7-8 (comm) | F.b 8-9 | B.a2a 8-9 | B.a 9-10: 4 s, not 6
    assert _pair_case(True) == 22.0
    # compute at half speed (SMs taken by communication): F.a 6-8, B.b 8-10, F.a2a 8-9, F.b 10-12,
    # B.a2a 10-11, B.a 12-14 -> 8 s
    assert _pair_case(True, 2.0) == 26.0


def test_pair_options_validated(tmp_path):
    from taskgraph.plan import resolve
    with pytest.raises(ConfigError, match="options.pair_overlap"):
        _moe_strategy(tmp_path, pair_overlap="parallel")
    with pytest.raises(ConfigError, match="options.pair_comm_sms"):
        resolve(_moe_strategy(tmp_path, pair_overlap="concurrent", pair_comm_sms=132, schedule="dualpipe-v", vpp=2,
                              gb=64))
    # a schedule without pairs: the option has nothing to act on, so it is refused (issue 42)
    with pytest.raises(ConfigError, match="options.pair_overlap = 'concurrent' sets DualPipe's .* schedule '1f1b' "
                                          "has none"):
        resolve(_moe_strategy(tmp_path, pair_overlap="concurrent"))
    with pytest.raises(ConfigError, match="options.pair_comm_sms"):
        _moe_strategy(tmp_path, pair_comm_sms=-1)


def test_concurrent_pairs_on_dualpipe_v(tmp_path):
    from simulator.api import simulate_strategy
    kw = dict(schedule="dualpipe-v", pp=2, vpp=2, gb=64, nodes=4, cluster_gpn=4, p2p_overlap=True, moe_max_nodes=1)
    serial = simulate_strategy(_moe_strategy(tmp_path, **kw)).result.makespan
    free = simulate_strategy(_moe_strategy(tmp_path, pair_overlap="concurrent", pair_comm_sms=0, **kw)).result.makespan
    sm20 = simulate_strategy(_moe_strategy(tmp_path, pair_overlap="concurrent", **kw)).result.makespan
    assert free < serial and free < sm20
    # a schedule without pairs: refused, not ignored (test_pair_options_validated)


# --- FP8 block-wise scaling (DeepSeek-V3 Section 3.3) ------------------------------------------
def test_blockwise_fp8_gemm_time_closed_form():
    from taskgraph.cost import FP8_QUANT_BYTES, op_time
    from taskgraph.operators import GemmShape, Operator
    from topologies.gpus import get_gpu
    gpu = get_gpu("h800")
    m, n, k = 4096, 7168, 2048
    f = 2.0 * m * n * k
    io = 2 * (m * k + k * n + m * n)
    op = Operator("mlp_down", "gemm", 0, (GemmShape(m, n, k),), f, f, f, io, io, io)
    bw = gpu.hbm_bandwidth * gpu.efficiency.elementwise_efficiency
    launch = gpu.efficiency.launch_overhead
    # the GEMMs run DeepGEMM's kernel (serial epilogue, kernels.yaml [DGEMM-K]), then the quantization
    tensorwise = {p: op_time(op, p, gpu, "fp8", gemm_kernel="deepgemm") for p in ("fwd", "bwd_input", "bwd_weight")}
    block = {p: op_time(op, p, gpu, "fp8", fp8_recipe="blockwise") for p in tensorwise}
    # the serial epilogue makes this k = 2048 forward GEMM slower than the catalog's kernel
    assert tensorwise["fwd"] > op_time(op, "fwd", gpu, "fp8")
    # fwd quantizes X (m x k), dgrad dY (m x n), wgrad X^T and dY (k x m + m x n): 3 bytes + 4/128 each
    assert FP8_QUANT_BYTES == 2 + 1 + 4 / 128
    assert block["fwd"] == pytest.approx(tensorwise["fwd"] + m * k * FP8_QUANT_BYTES / bw + launch, rel=1e-12)
    assert block["bwd_input"] == pytest.approx(tensorwise["bwd_input"] + m * n * FP8_QUANT_BYTES / bw + launch, rel=1e-12)
    assert block["bwd_weight"] == pytest.approx(tensorwise["bwd_weight"] + (k * m + m * n) * FP8_QUANT_BYTES / bw
                                                + 2 * launch, rel=1e-12)
    # the output head stays in BF16 (Section 3.3.1)
    head = Operator("lm_head", "gemm", -2, (GemmShape(m, n, k),), f, f, f, io, io, io)
    assert op_time(head, "fwd", gpu, "fp8", fp8_recipe="blockwise") == op_time(head, "fwd", gpu, "bf16")


def test_blockwise_fp8_dispatch_and_cache(tmp_path):
    from taskgraph.costing import FP8_COMM_FACTOR, build_work
    from taskgraph.plan import resolve
    assert FP8_COMM_FACTOR == (1 + 4 / 128) / 2
    kw = dict(nodes=4, cluster_gpn=4, moe_max_nodes=1)

    def experts(**opt):
        s = _moe_strategy(tmp_path, **kw, **opt, precision="fp8" if opt.get("fp8_recipe") else "bf16")
        w = build_work(resolve(s))
        return next(o for l in w.stages[0].layers for o in l.ops if o.name == "moe_experts")

    bf, blk = experts(), experts(fp8_recipe="blockwise")
    # dispatch (fwd before) and the gradient to the experts (bwd before) in FP8; both combines BF16
    assert blk.fwd_post == bf.fwd_post and blk.bwd_post == bf.bwd_post
    assert blk.fwd_pre[0].seconds < bf.fwd_pre[0].seconds and blk.bwd_pre[0].seconds < bf.bwd_pre[0].seconds
    assert blk.saved_bytes == pytest.approx(bf.saved_bytes * FP8_COMM_FACTOR)


def test_fp8_recipe_needs_fp8(tmp_path):
    from taskgraph.plan import resolve
    with pytest.raises(ConfigError, match="options.fp8_recipe = 'blockwise' applies to training.precision: fp8"):
        resolve(_moe_strategy(tmp_path, fp8_recipe="blockwise"))
    with pytest.raises(ConfigError, match="options.fp8_recipe"):
        _moe_strategy(tmp_path, fp8_recipe="rowwize")      # rowwise is a recipe since issue 27


# --- bidirectional DualPipe (DeepSeek-V3 Section 3.2.1; deepseek-ai/DualPipe dualpipe.py) ------
def test_dualpipe_step_order_pp4():
    """pp 4, 8 microbatches, transcribed by hand from DualPipe.step's eight steps (half_rank 0 and 1;
    ranks 2 and 3 swap phases; the middle ranks 1, 2 run their first (F0;B1) unpaired)."""
    from strategies.schedules import get_schedule
    s = get_schedule("dualpipe", 4, 8, 2)
    assert s.stage_to_rank == (0, 1, 2, 3, 3, 2, 1, 0)
    assert s.segments == ((0, 0), (4, 4))
    assert s.grid().replace("OVERLAP_F_B", "").splitlines() == [
        "rank 0: 0F0 0F1 0F2 7F4 7I4 7W4 7F5 (0F3;7B5) (7F6;0B0) 7B6 (7F7;0B1) 7B7 0I2 0W2 0I3 0W3",
        "rank 1: 1F0 6F4 1F1 6F5 1F2 6B4 (6F6;1B0) (1F3;6B5) (6F7;1B1) 6B6 1B2 6I7 1I3 6W7 1W3",
        "rank 2: 5F4 2F0 5F5 2F1 5F6 2B0 (2F2;5B4) (5F7;2B1) (2F3;5B5) 2B2 5B6 2I3 5I7 2W3 5W7",
        "rank 3: 4F4 4F5 4F6 3F0 3I0 3W0 3F1 (4F7;3B1) (3F2;4B4) 3B2 (3F3;4B5) 3B3 4I6 4W6 4I7 4W7",
    ]


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 5), st.integers(0, 6), st.integers(1, 3), st.integers(0, 3), st.integers(1, 3))
def test_dualpipe_bubble_is_table_2(half, extra, f, w, scale):
    """DeepSeek-V3 Table 2: DualPipe's bubble is (PP/2 - 1)(F&B + B - 3W); here with serial pairs
    (F&B = F + B) and uniform stages whose input-gradient backward equals the forward (B - W = F) and
    W <= F, the makespan is m (F + B) plus exactly that (the report's derivation assumes neither; with
    a larger I or W the measured bubble differs, e.g. pp 4, F = I = 1, W = 2 gives 2, not 1)."""
    from simulator.engine.core import simulate
    from strategies.schedules import get_schedule
    from strategies.validate import check_deadlock, validate_schedule
    from taskgraph.lower_pipeline import StageCosts, lower_uniform
    pp, m = 2 * half, 4 * half + 2 * extra
    F, W = float(f * scale), float(min(w, f * scale))
    B = F + W
    s = get_schedule("dualpipe", pp, m, 2)
    validate_schedule(s)
    check_deadlock(s)
    r = simulate(lower_uniform(s, StageCosts.uniform(2 * pp, F, B, ti=F, tw=W)))
    assert r.makespan == m * (F + B) + (pp / 2 - 1) * ((F + B) + B - 3 * W)


def test_dualpipe_holds_two_parameter_copies(tmp_path):
    """Table 2: DualPipe keeps 2x the parameters (each rank holds model stages i and P-1-i)."""
    from strategies.strategy_file import parse_strategy
    from taskgraph.memory import params_per_gpu
    from taskgraph.plan import resolve

    def plan(schedule, vpp):
        return resolve(parse_strategy({"model": {"preset": "llama3-8b", "layers": 8}, "cluster": {"preset": "dgx-h100", "nodes": 1},
                                       "parallel": {"tp": 2, "pp": 4, "vpp": vpp, "sp": True}, "schedule": schedule,
                                       "training": {"micro_batch": 1, "global_batch": 16, "seq_len": 1024}}, tmp_path))
    dual, one = params_per_gpu(plan("dualpipe", 2)), params_per_gpu(plan("1f1b", 1))
    assert sum(dual.values()) == 2 * sum(one.values())
    assert all(dual[r] == one[r] + one[3 - r] for r in range(4))


def test_dualpipe_segments_and_errors(tmp_path):
    from strategies.errors import ScheduleError
    from strategies.schedules import get_schedule
    s = get_schedule("dualpipe", 4, 8, 2)
    assert [s.is_first_stage(x) for x in range(8)] == [True, False, False, False, True, False, False, False]
    assert [s.is_last_stage(x) for x in range(8)] == [False, False, False, True, False, False, False, True]
    assert list(s.stage_microbatches(5)) == [4, 5, 6, 7]
    with pytest.raises(ScheduleError, match="pp must be even"):
        get_schedule("dualpipe", 3, 12, 2)
    with pytest.raises(ScheduleError, match="microbatches must be even and >= 2\\*pp = 8"):
        get_schedule("dualpipe", 4, 6, 2)


def test_dualpipe_strategy_simulates(tmp_path):
    from simulator.api import simulate_strategy
    kw = dict(pp=2, vpp=2, gb=128, nodes=4, cluster_gpn=4, p2p_overlap=True, moe_max_nodes=1)
    v = simulate_strategy(_moe_strategy(tmp_path, schedule="dualpipe-v", **kw))
    d = simulate_strategy(_moe_strategy(tmp_path, schedule="dualpipe", **kw))
    d2 = simulate_strategy(_moe_strategy(tmp_path, schedule="dualpipe", pair_overlap="concurrent", pair_comm_sms=0,
                                         **kw))
    assert d.result.makespan > 0 and d2.result.makespan < d.result.makespan
    # same compute per rank as dualpipe-v (each rank runs every microbatch through half the layers)
    comp = lambda sim: sorted(float(sim.graph.duration[sim.graph.category == c].sum())
                              for c in ("forward",))
    assert comp(d) == pytest.approx(comp(v), rel=1e-9)
