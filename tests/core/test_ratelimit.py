"""GCRA admission over a fake timeline: exact admissions and the rate*T + burst bound."""

from __future__ import annotations

from datetime import datetime, timedelta
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobgate.core.ratelimit import admit

from .support import NOW

MS = timedelta(milliseconds=1)
US = timedelta(microseconds=1)


def at(ms: float) -> datetime:
    return NOW + timedelta(milliseconds=ms)


def test_rate_10_burst_1() -> None:
    n, tat = admit(None, NOW, rate=10, burst=1, wanted=1)
    assert (n, tat) == (1, at(100))
    n, tat = admit(tat, NOW, rate=10, burst=1, wanted=1)
    assert (n, tat) == (0, at(100))
    n, tat = admit(tat, at(50), rate=10, burst=1, wanted=1)
    assert (n, tat) == (0, at(100))
    n, tat = admit(tat, at(100) - US, rate=10, burst=1, wanted=1)
    assert (n, tat) == (0, at(100))
    n, tat = admit(tat, at(100), rate=10, burst=1, wanted=1)
    assert (n, tat) == (1, at(200))


def test_burst_1_admits_one_of_many() -> None:
    assert admit(None, NOW, rate=10, burst=1, wanted=5) == (1, at(100))


def test_burst_5_admits_five_at_once() -> None:
    n, tat = admit(None, NOW, rate=10, burst=5, wanted=5)
    assert (n, tat) == (5, at(500))
    assert admit(tat, NOW, rate=10, burst=5, wanted=1) == (0, at(500))
    # One cell drains per 100 ms.
    assert admit(tat, at(100), rate=10, burst=5, wanted=5) == (1, at(600))


def test_burst_caps_a_larger_request() -> None:
    assert admit(None, NOW, rate=10, burst=5, wanted=10) == (5, at(500))


def test_idle_time_does_not_accumulate_beyond_the_burst() -> None:
    _, tat = admit(None, NOW, rate=10, burst=5, wanted=5)
    later = NOW + timedelta(hours=1)
    assert admit(tat, later, rate=10, burst=5, wanted=100) == (5, later + timedelta(milliseconds=500))


def test_partial_refill() -> None:
    _, tat = admit(None, NOW, rate=10, burst=5, wanted=5)
    assert admit(tat, at(250), rate=10, burst=5, wanted=5) == (2, at(700))


def test_slow_rate() -> None:
    n, tat = admit(None, NOW, rate=0.5, burst=1, wanted=3)
    assert (n, tat) == (1, at(2000))
    assert admit(tat, at(2000) - US, rate=0.5, burst=1, wanted=1)[0] == 0
    assert admit(tat, at(2000), rate=0.5, burst=1, wanted=1) == (1, at(4000))


@pytest.mark.parametrize("burst", [0, -3])
def test_burst_below_one_is_treated_as_one(burst: int) -> None:
    assert admit(None, NOW, rate=10, burst=burst, wanted=3) == (1, at(100))


@pytest.mark.parametrize("wanted", [0, -1])
def test_wanting_nothing_admits_nothing(wanted: int) -> None:
    assert admit(None, NOW, rate=10, burst=5, wanted=wanted) == (0, NOW)
    assert admit(NOW - timedelta(seconds=9), NOW, rate=10, burst=5, wanted=wanted) == (0, NOW)
    assert admit(at(300), NOW, rate=10, burst=5, wanted=wanted) == (0, at(300))


def test_a_tat_far_ahead_admits_nothing() -> None:
    assert admit(at(10_000), NOW, rate=10, burst=5, wanted=1) == (0, at(10_000))


def test_a_tat_in_the_past_is_the_same_as_none() -> None:
    assert admit(NOW - timedelta(days=3), NOW, rate=10, burst=3, wanted=9) == admit(
        None, NOW, rate=10, burst=3, wanted=9
    )


@pytest.mark.parametrize("rate", [0, -1, -0.5, 1e-12, 2e6])
def test_rate_must_be_within_bounds(rate: float) -> None:
    with pytest.raises(ValueError, match="out of range"):
        admit(None, NOW, rate=rate, burst=1, wanted=1)


# --- the bound, over arbitrary timelines ------------------------------------------------------------

# Rates whose interval is a whole number of microseconds, so the check below is exact.
EXACT_RATES = [0.5, 1, 2, 4, 5, 8, 10, 16, 20, 25, 40, 50, 100, 1000]


def simulate(rate: float, burst: int, requests: list[tuple[int, int]]) -> list[int]:
    """Feed (gap in µs, wanted) requests through ``admit``; return each admission's time in µs."""
    tat: datetime | None = None
    clock = 0
    admitted: list[int] = []
    for gap, wanted in requests:
        clock += gap
        now = NOW + timedelta(microseconds=clock)
        n, new_tat = admit(tat, now, rate=rate, burst=burst, wanted=wanted)
        assert 0 <= n <= max(wanted, 0)
        assert new_tat >= now
        assert new_tat - now <= timedelta(seconds=max(burst, 1) / rate)
        if tat is not None:
            assert new_tat >= tat  # the TAT never moves back
        tat = new_tat
        admitted += [clock] * n
    return admitted


def assert_bound(rate: float, burst: int, admitted: list[int]) -> None:
    """For every window [t_i, t_j] between two admissions: count <= rate * T + burst."""
    r = Fraction(rate)
    for i in range(len(admitted)):
        for j in range(i, len(admitted)):
            window_s = Fraction(admitted[j] - admitted[i], 1_000_000)
            assert j - i + 1 <= r * window_s + max(burst, 1), (
                rate,
                burst,
                admitted[i],
                admitted[j],
                j - i + 1,
            )


requests = st.lists(
    st.tuples(st.integers(0, 300_000) | st.sampled_from([0, 1, 99_999, 100_000]), st.integers(0, 6)),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(rate=st.sampled_from(EXACT_RATES), burst=st.integers(1, 6), reqs=requests)
def test_admissions_never_exceed_rate_times_window_plus_burst(
    rate: float, burst: int, reqs: list[tuple[int, int]]
) -> None:
    assert_bound(rate, burst, simulate(rate, burst, reqs))


@settings(max_examples=100, deadline=None)
@given(
    rate=st.sampled_from(EXACT_RATES),
    burst=st.integers(1, 6),
    wanted=st.integers(1, 10),
    start=st.integers(0, 10**6),
)
def test_asking_for_n_at_once_equals_asking_n_times(rate: float, burst: int, wanted: int, start: int) -> None:
    tat0 = NOW + timedelta(microseconds=start)
    together = admit(tat0, NOW, rate=rate, burst=burst, wanted=wanted)
    count, tat = 0, tat0
    for _ in range(wanted):
        n, tat = admit(tat, NOW, rate=rate, burst=burst, wanted=1)
        count += n
    assert together == (count, tat)


@pytest.mark.parametrize(
    ("rate", "burst", "step_ms", "steps", "expected", "first_ms"),
    [
        (10, 3, 10, 200, 22, [0, 10, 20, 100, 200, 300]),  # 3 up front, then one per 100 ms up to 1.9 s
        (1, 1, 250, 40, 10, [0, 1000, 2000, 3000, 4000, 5000]),
        (4, 2, 50, 40, 9, [0, 50, 250, 500, 750, 1000]),
        (100, 10, 1, 1000, 109, [0, 1, 2, 3, 4, 5]),
    ],
)
def test_a_steady_caller_gets_the_burst_then_the_rate(
    rate: float, burst: int, step_ms: int, steps: int, expected: int, first_ms: list[int]
) -> None:
    admitted = simulate(rate, burst, [(0, 1)] + [(step_ms * 1000, 1)] * (steps - 1))
    assert len(admitted) == expected
    assert [t // 1000 for t in admitted[:6]] == first_ms
    assert_bound(rate, burst, admitted)


# --- microsecond rounding of the interval (known bugs) ----------------------------------------------


def test_non_exact_interval_does_not_exceed_the_bound() -> None:
    # A greedy caller asks again at the very instant its TAT allows, for a few seconds.
    tat: datetime | None = None
    now = NOW
    admitted: list[int] = []
    while now < NOW + timedelta(seconds=3):
        n, tat = admit(tat, now, rate=3, burst=1, wanted=1)
        admitted += [(now - NOW) // US] * n
        now = max(tat, now + US)
    assert_bound(3, 1, admitted)


def test_very_high_rate_still_honours_the_burst() -> None:
    n, _ = admit(None, NOW, rate=1_000_000, burst=1, wanted=100)
    assert n <= 1
