"""The host-issue deficit after a device synchronize (benchmarks/host_restart.py restart_lag_s)."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.host_restart import restart_lag_s

US = 1e-6


def _replayed(host, dev):
    """The idle time of a stream that starts kernel j at max(end of kernel j-1, its issue time)."""
    issued = end = 0.0
    for h, d in zip(host, dev):
        issued += h
        end = max(end, issued) + d
    return end - sum(dev)


@pytest.mark.parametrize("host, dev, lag", [
    ([], [], 0.0),
    ([10], [500], 10.0),                  # one launch
    ([10, 10], [500, 500], 10.0),         # then the host leads
    ([10, 10, 10], [2, 2, 2], 26.0),      # host-bound throughout: 30 issued - 4 run
    ([10, 10, 10], [5, 100, 1], 15.0),    # the second launch: 20 issued - 5 run
    ([25, 10, 10], [19, 648, 484], 25.0),  # a ZB-14.6B stage forward's first kernels at 25 us/launch
])
def test_restart_lag_on_hand_computed_cases(host, dev, lag):
    assert restart_lag_s([h * US for h in host], [d * US for d in dev]) == pytest.approx(lag * US, abs=1e-15)


def test_restart_lag_names_both_lengths():
    with pytest.raises(ValueError, match=r"host_s has 2 kernels, device_s 1"):
        restart_lag_s([1.0, 1.0], [1.0])


times = st.lists(st.tuples(st.floats(0, 1e-3), st.floats(0, 1e-3)), min_size=1, max_size=30)


@settings(max_examples=200, deadline=None)
@given(times)
def test_restart_lag_is_the_replayed_idle_time_and_bounded(pairs):
    host, dev = [p[0] for p in pairs], [p[1] for p in pairs]
    lag = restart_lag_s(host, dev)
    assert lag == pytest.approx(_replayed(host, dev), rel=1e-9, abs=1e-15)
    assert host[0] - 1e-15 <= lag <= sum(host) + 1e-15          # at least one launch, at most all of them
    assert restart_lag_s(host[:-1], dev[:-1]) <= lag + 1e-15      # more kernels never shorten it


def test_pair_gap_is_where_the_pair_difference_crosses_zero():
    from benchmarks.host_restart import pair_gaps
    res = [{"id": "m-int-1", "errors": {0.0: -4.0, 500.0: 0.0, 1000.0: 4.0}},
           {"id": "m-1f1b-1", "errors": {0.0: -2.0, 500.0: -1.0, 1000.0: 0.0}},
           {"id": "k-int-1", "errors": {0.0: 1.0, 500.0: 2.0, 1000.0: 3.0}}]   # no partner: left out
    assert pair_gaps(res) == {"m-int-1": pytest.approx(1000 / 3)}   # -4 - -2 = -2 at 0, 4 - 0 = 4 at 1000
