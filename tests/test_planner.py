from simulator.search.recompute import compress, plan_recompute
from strategies.strategy_file import parse_strategy


def constructed(mb=4):
    # GPT-3 175B, tp8 pp8 1F1B with flash attention: selective recompute drops almost nothing, so
    # uniform selective does not fit at micro_batch 4, uniform full does, and a mix is faster.
    return parse_strategy({
        "model": "gpt3-175b", "cluster": {"preset": "dgx-a100-80g", "nodes": 8},
        "parallel": {"tp": 8, "pp": 8, "sp": True, "zero": 1}, "schedule": "1f1b",
        "training": {"micro_batch": mb, "global_batch": 8 * mb, "seq_len": 2048, "recompute": "none"},
        "options": {"flash_attention": True}})


def test_planner_fits_where_uniform_selective_does_not():
    rp = plan_recompute(constructed(), fidelity="coarse")
    assert not rp.uniform["selective"].fits and not rp.uniform["none"].fits
    assert rp.uniform["full"].fits
    assert rp.best is not None and rp.best.fits
    assert len(set(rp.best.policies)) > 1          # a per-layer mix, not a uniform policy
    assert rp.best.iteration_time_s <= rp.uniform["full"].iteration_time_s


def test_planner_keeps_no_recompute_when_it_fits():
    rp = plan_recompute(constructed(mb=1), fidelity="coarse")
    assert rp.best.policies == ("none",) * 96


def test_compress():
    assert compress(("full", "full", "none", "selective")) == "layers 0-1: full, 2: none, 3: selective"
