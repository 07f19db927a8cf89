"""A stage's cost records as whole values: paced by its slowest GPU, and split into the parts that do
not depend on the stage's layer indices (so stages of one shape share one memoised build) and back.
Split out of :mod:`taskgraph.costing`, which builds the records."""
from __future__ import annotations

from dataclasses import replace

from taskgraph.work import LayerWork, OpCost, StageWork


def paced(st: StageWork, f: float) -> StageWork:
    """Stragglers (topologies/stragglers.py): the stage's compute runs at its slowest GPU's speed;
    communication and the gradient buckets' collectives are unchanged (the optimizer step is paced
    by ``_stage_work``, whose CPU-offloaded part is not GPU work)."""
    if f == 1.0:
        return st
    scaled: dict = {}  # a stage's layers mostly share one ops tuple (the layer cache): scale each once
    layers = []
    for l in st.layers:
        ops = scaled.get(id(l.ops))
        if ops is None:
            ops = scaled[id(l.ops)] = tuple(scaled_op(o, f) for o in l.ops)
        layers.append(replace(l, ops=ops))
    return StageWork(tuple(layers), st.buckets, st.optimizer_s)


def scaled_op(o: OpCost, f: float) -> OpCost:
    """``replace(o, fwd=o.fwd * f, bwd_input=o.bwd_input * f, bwd_weight=o.bwd_weight * f)`` without
    re-running the dataclass constructor (the search paces every operator of every candidate)."""
    c = object.__new__(OpCost)
    d = c.__dict__
    d.update(o.__dict__)
    d["fwd"], d["bwd_input"], d["bwd_weight"] = o.fwd * f, o.bwd_input * f, o.bwd_weight * f
    return c


def stage_parts(st: StageWork) -> tuple:
    """A stage's records without the layer names (which depend on the stage's layer indices)."""
    return tuple(l.ops for l in st.layers), st.buckets, st.optimizer_s


def named_stage(parts: tuple, lis, pols, first: bool, last: bool) -> StageWork:
    """Rebuild a stage from :func:`stage_parts` with its own layer names."""
    ops, buckets, opt_s = parts
    layers = [LayerWork("embedding", ops[0])] if first else []
    i = len(layers)
    for li, pol in zip(lis, pols):
        layers.append(LayerWork(f"layer{li}", ops[i], pol))
        i += 1
    if last:
        layers.append(LayerWork("head", ops[i]))
    return StageWork(tuple(layers), buckets, opt_s)
