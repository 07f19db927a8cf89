"""Replay Megatron-LM 2021's interleaved schedule with its blocking combined exchanges, against the simulator.

    python -m benchmarks.megatron2021_schedule [--rows N21-175B-ptdp,N21-530B-ptdp]

NVIDIA/Megatron-LM cdde433 (2021-04-09, the code of Narayanan 2021) ``megatron/schedules.py``
``forward_backward_pipelining_with_interleaving`` runs, on every pipeline rank, ``recv_forward``, the warm-up
forwards each followed by ``send_forward_recv_forward`` (the last by
``send_forward_backward_recv_forward_backward``), then forward-backward pairs each followed by ONE
``send_forward_backward_recv_forward_backward`` (the pair's forward output goes out only after its backward),
then the cool-down backwards each followed by ``send_backward_recv_backward``; the recv flags are the
code's (``recv_prev`` off on the first rank when the next forward is chunk 0, ``recv_next`` off on the last
rank when the next backward is its last chunk, neither on the last step). ``megatron/p2p_communication.py``
``_communicate`` posts the exchange's sends and receives as one ``batch_isend_irecv``, waits for all of them,
then ``torch.cuda.synchronize()``: an exchange ends when every transfer in it has both ends posted and has
run. :func:`replay` plays those sequences with given forward / backward seconds per virtual stage and one
transfer time, matching each pair's sends and receives in order (NCCL's per-peer FIFO).

:func:`compare` takes a row of ``benchmarks/validation/published_runs.csv``, simulates it (coarse), reads the
simulator's per-stage compute times and pipeline-transfer time from its timeline, replays cdde433's
sequences with them and prints both makespans of the forward-backward part (docs/validation.md, Gaps item 2:
the 2021 schedule adds no per-step time the simulator lacks).
"""
from __future__ import annotations

import argparse
import csv
from collections import defaultdict
from dataclasses import dataclass


@dataclass(frozen=True)
class Exchange:
    """One ``_communicate`` call: which of the four transfers it posts."""

    send_next: bool = False
    send_prev: bool = False
    recv_prev: bool = False
    recv_next: bool = False


def rank_sequence(pp: int, vpp: int, microbatches: int, rank: int) -> list:
    """cdde433's actions on ``rank``: ('F', chunk), ('B', chunk) and :class:`Exchange` items, in order.

    >>> [a if isinstance(a, tuple) else "X" for a in rank_sequence(2, 2, 4, 0)][:9]
    [('F', 0), 'X', ('F', 0), 'X', ('F', 1), 'X', ('F', 1), 'X', ('F', 0)]
    >>> rank_sequence(2, 2, 4, 0)[7]   # the last warm-up exchange also receives the first gradient
    Exchange(send_next=True, send_prev=False, recv_prev=False, recv_next=True)
    """
    total = microbatches * vpp
    all_warmup = microbatches == pp
    warmup = total if all_warmup else min((pp - rank - 1) * 2 + (vpp - 1) * pp, total)
    steady = total - warmup

    def chunk(i: int, forward: bool) -> int:
        c = (i % (pp * vpp)) // pp
        return c if forward else vpp - 1 - c

    def first(c: int) -> bool:
        return rank == 0 and c == 0

    def last(c: int) -> bool:
        return rank == pp - 1 and c == vpp - 1

    seq: list = [] if rank == 0 else [Exchange(recv_prev=True)]
    for k in range(warmup):
        c = chunk(k, True)
        seq.append(("F", c))
        recv_prev = not (rank == 0 and chunk(k + 1, True) == 0) and k != total - 1
        both = k == warmup - 1 and not all_warmup
        seq.append(Exchange(send_next=not last(c), recv_prev=recv_prev, recv_next=both and rank != pp - 1))
    for k in range(steady):
        cf, cb = chunk(k + warmup, True), chunk(k, False)
        seq += [("F", cf), ("B", cb)]
        recv_prev = chunk(k + warmup - (pp - 1), True) != vpp - 1 if rank == 0 else True
        recv_next = chunk(k - (pp - 1), False) != 0 if rank == pp - 1 else True
        seq.append(Exchange(not last(cf), not first(cb), recv_prev and k != steady - 1, recv_next))
    if all_warmup:
        seq.append(Exchange(recv_next=rank != pp - 1))
    for k in range(steady, total):
        cb = chunk(k, False)
        seq.append(("B", cb))
        recv_next = not (rank == pp - 1 and chunk(k + 1, False) == vpp - 1) and k != total - 1
        seq.append(Exchange(send_prev=not first(cb), recv_next=recv_next))
    return seq


def replay(pp: int, vpp: int, microbatches: int, fwd: dict, bwd: dict, transfer_s: float) -> list[float]:
    """End time of every rank: ``fwd`` / ``bwd`` map a virtual stage (``chunk * pp + rank``) to seconds.

    A transfer starts when both its send and its receive are posted and takes ``transfer_s``; an exchange
    ends with its last transfer. Raises RuntimeError if the sequences deadlock.

    >>> ends = replay(4, 2, 8, {s: 1.0 for s in range(8)}, {s: 2.0 for s in range(8)}, 0.0)
    >>> max(ends) == 8 * 2 * 3 + (4 - 1) * 3   # m v (f + b) + (pp - 1)(f + b): the ideal interleaved step
    True
    """
    seqs = [rank_sequence(pp, vpp, microbatches, r) for r in range(pp)]
    at, t = [0] * pp, [0.0] * pp
    posted: dict = defaultdict(list)   # (kind, src, dst) -> post times in order
    mine: list = [None] * pp           # the current exchange's (post time, [(kind, src, dst, index)])
    while True:
        moved = False
        for r in range(pp):
            while at[r] < len(seqs[r]):
                a = seqs[r][at[r]]
                if isinstance(a, tuple):
                    t[r] += (fwd if a[0] == "F" else bwd)[a[1] * pp + r]
                    at[r] += 1
                    moved = True
                    continue
                if mine[r] is None:
                    items = []
                    for on, kind, src, dst in ((a.send_next, "s", r, (r + 1) % pp), (a.send_prev, "s", r, (r - 1) % pp),
                                               (a.recv_prev, "r", (r - 1) % pp, r), (a.recv_next, "r", (r + 1) % pp, r)):
                        if on:
                            items.append((kind, src, dst, len(posted[kind, src, dst])))
                            posted[kind, src, dst].append(t[r])
                    mine[r] = (t[r], items)
                    moved = True
                t0, items = mine[r]
                other = {"s": "r", "r": "s"}
                if any(len(posted[other[k], s, d]) <= i for k, s, d, i in items):
                    break
                t[r] = max([t0] + [max(posted["s", s, d][i], posted["r", s, d][i]) + transfer_s
                                   for _, s, d, i in items])
                mine[r] = None
                at[r] += 1
                moved = True
        if all(at[r] == len(seqs[r]) for r in range(pp)):
            return t
        if not moved:
            raise RuntimeError(f"deadlock: ranks at {at}")


def compare(row: dict) -> tuple[float, float]:
    """(simulator's end of the last forward / backward, cdde433's replayed makespan) for one row."""
    from benchmarks.validate import strategy_for
    from simulator.api import simulate_strategy
    from simulator.engine.timeline import timeline
    from strategies.strategy_file import parse_strategy
    d, _ = strategy_for(row)
    sim = simulate_strategy(parse_strategy(d), fidelity="coarse")
    df = timeline(sim.graph, sim.result)
    m, pp, vpp = sim.training.microbatches, d["parallel"]["pp"], d["parallel"]["vpp"]
    comp = df[df["stream"] == "compute"]
    fwd = (comp[comp["category"] == "forward"].groupby("stage")["duration"].sum() / m).to_dict()
    bwd = (comp[comp["category"] == "backward"].groupby("stage")["duration"].sum() / m).to_dict()
    transfer = float(df[df["category"] == "pp-send"]["duration"].mean())
    fb_end = float(comp[comp["category"].isin(["forward", "backward"])]["end"].max())
    return fb_end, max(replay(pp, vpp, m, fwd, bwd, transfer))


def main(argv=None) -> int:
    from benchmarks.validate import CSV_PATH, select
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="N21-175B-ptdp,N21-530B-ptdp", help="row ids (validate's --rows syntax)")
    args = ap.parse_args(argv)
    with open(CSV_PATH, newline="") as fh:
        rows = select(list(csv.DictReader(fh)), args.rows)
    for row in rows:
        sim_s, replay_s = compare(row)
        print(f"{row['id']:22s} simulator {sim_s:8.3f} s   cdde433 replay {replay_s:8.3f} s   "
              f"replay - simulator {replay_s - sim_s:+.3f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
