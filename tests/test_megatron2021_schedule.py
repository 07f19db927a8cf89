"""benchmarks/megatron2021_schedule.py: Megatron-LM cdde433's interleaved schedule with its combined blocking
exchanges. Every send meets a receive; with free transfers and equal stages the replay is the ideal
interleaved step, m v (f + b) + (pp - 1)(f + b) (Narayanan 2021 Sec. 2.2.2); transfers only add time."""
from __future__ import annotations

from collections import Counter

import pytest

from benchmarks.megatron2021_schedule import rank_sequence, replay

CASES = [(2, 2, 4), (4, 2, 8), (4, 3, 12), (3, 2, 3), (5, 2, 10)]


@pytest.mark.parametrize(("pp", "vpp", "m"), CASES)
def test_every_send_meets_a_receive(pp, vpp, m):
    sends, recvs = Counter(), Counter()
    for r in range(pp):
        seq = rank_sequence(pp, vpp, m, r)
        assert [a for a in seq if isinstance(a, tuple)].count(("F", 0)) == m
        assert sum(isinstance(a, tuple) for a in seq) == 2 * m * vpp
        for a in seq:
            if isinstance(a, tuple):
                continue
            sends[r, (r + 1) % pp] += a.send_next
            sends[r, (r - 1) % pp] += a.send_prev
            recvs[(r - 1) % pp, r] += a.recv_prev
            recvs[(r + 1) % pp, r] += a.recv_next
    assert +sends == +recvs


@pytest.mark.parametrize(("pp", "vpp", "m"), CASES)
def test_free_transfers_give_the_ideal_interleaved_step(pp, vpp, m):
    f, b = {s: 1.0 for s in range(pp * vpp)}, {s: 2.0 for s in range(pp * vpp)}
    assert max(replay(pp, vpp, m, f, b, 0.0)) == m * vpp * 3.0 + (pp - 1) * 3.0
    assert max(replay(pp, vpp, m, f, b, 0.25)) > max(replay(pp, vpp, m, f, b, 0.0))
