"""The distinct operators of a strategy's graph at their per-GPU shapes (after TP/SP/CP/EP sharding,
at the micro-batch), each with the cost model's time for the three passes: what ``execsim profile``
measures and what a profile CSV needs a row for.

The operators come from the same calls ``taskgraph/costing.py`` makes for every stage (embedding on
the first stage, each layer kind, head on the last), so a row written for every item here matches an
operator of the run (``ProfileTable.check_all_used`` then passes).
"""
from __future__ import annotations

from dataclasses import dataclass

from taskgraph.cost import PASSES, op_shape_key, op_time
from taskgraph.operators import Operator, embedding_operators, head_operators, layer_operators
from taskgraph.plan import DTYPE_BYTES, Plan


@dataclass(frozen=True)
class ProfileItem:
    """One distinct operator of the run: its name, shape key, the operator itself, the modelled
    seconds per pass and how many times one iteration runs it per simulated rank (all stages)."""

    op: Operator
    shape: str
    modelled_s: tuple
    count: int

    @property
    def name(self) -> str:
        return self.op.name


def plan_operators(plan: Plan) -> list[Operator]:
    """Every operator one micro-batch runs over all stages of ``plan``, in stage order (embedding,
    layers, head), at the per-GPU shapes costing uses."""
    strat = plan.strategy
    tr, opt, s = strat.training, strat.options, plan.sizes
    dt = DTYPE_BYTES[tr.precision]
    kw = dict(micro_batch=tr.micro_batch, seq_len=tr.seq_len, tp=s.tp, sp=plan.sp, cp=s.cp, lora=tr.lora)
    ops: list[Operator] = list(embedding_operators(plan.model, dtype_bytes=dt, **kw))
    for li in range(plan.model.layers):
        ops += layer_operators(plan.model, ep=s.ep, etp=s.etp, dtype_bytes=dt, flash_attention=opt.flash_attention,
                               layer_index=li, moe_load=opt.moe_load, cp_comm=opt.cp_comm,
                               cp_balance=opt.cp_load_balance, moe_dispatcher=opt.moe_dispatcher, **kw)
    ops += head_operators(plan.model, dtype_bytes=dt, ep=s.ep, etp=s.etp, flash_attention=opt.flash_attention,
                          moe_load=opt.moe_load, cp_comm=opt.cp_comm, cp_balance=opt.cp_load_balance,
                          moe_dispatcher=opt.moe_dispatcher, **kw)
    return ops


def profile_items(plan: Plan) -> list[ProfileItem]:
    """The distinct (operator name, shape) pairs of ``plan``, first occurrence order, with the cost
    model's seconds per pass (no profile applied) and their count per micro-batch."""
    gpu, opt = plan.cluster.gpu, plan.strategy.options
    dtype = plan.strategy.training.precision
    from taskgraph.costing import grad_bytes_per_param
    gacc = grad_bytes_per_param(plan)
    seen: dict = {}
    for op in plan_operators(plan):
        key = (op.name, op_shape_key(op))
        if key in seen:
            seen[key][1] += 1
            continue
        seen[key] = [op, 1]
    out = []
    for (name, shape), (op, n) in seen.items():
        t = tuple(op_time(op, p, gpu, dtype, flash=opt.flash_attention, grad_accum_bytes=gacc,
                          fp8_recipe=opt.fp8_recipe) for p in PASSES)
        out.append(ProfileItem(op, shape, t, n))
    return out
