"""Retry delays: exact numbers per strategy, and the properties the docstring promises."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobgate.core.policies import BUILTIN_RETRY_POLICIES, RetryPolicy, RetryStrategy
from jobgate.core.retry import envelope, jitter_fraction, retry_delay

from .support import policy, seconds

US = timedelta(microseconds=1)
STANDARD = BUILTIN_RETRY_POLICIES["standard_exponential_backoff_v1"]
KNOWN_KEY = "payroll-2026-01"


def us(delay: timedelta) -> int:
    return delay // US


# --- envelope and delays, exactly -----------------------------------------------------------


@pytest.mark.parametrize("attempt", [0, -1, -100])
def test_attempt_is_one_based(attempt: int) -> None:
    with pytest.raises(ValueError, match="1-based"):
        envelope(STANDARD, attempt)
    with pytest.raises(ValueError, match="1-based"):
        retry_delay(STANDARD, KNOWN_KEY, attempt)


@pytest.mark.parametrize("attempt", [1, 2, 5, 10_000])
def test_none_never_waits(attempt: int) -> None:
    none = BUILTIN_RETRY_POLICIES["no_retry_v1"]
    assert none.strategy is RetryStrategy.NONE
    assert envelope(none, attempt) == timedelta(0)
    assert retry_delay(none, KNOWN_KEY, attempt) == timedelta(0)
    # Even a "none" policy that asks for jitter and has delays configured waits 0.
    odd = RetryPolicy("odd", RetryStrategy.NONE, 1, seconds(30), seconds(60), jitter=True)
    assert retry_delay(odd, KNOWN_KEY, attempt) == timedelta(0)


@pytest.mark.parametrize("attempt", [1, 2, 3, 4, 100, 10_000])
def test_fixed_delay_is_constant(attempt: int) -> None:
    assert retry_delay(BUILTIN_RETRY_POLICIES["fixed_delay_v1"], KNOWN_KEY, attempt) == seconds(10)
    assert retry_delay(policy(RetryStrategy.FIXED_DELAY, initial=45, maximum=600), KNOWN_KEY, attempt) == seconds(45)


@pytest.mark.parametrize("attempt", [1, 2, 3, 7, 10_000])
def test_dead_letter_after_n_uses_the_fixed_delay(attempt: int) -> None:
    p = policy(RetryStrategy.DEAD_LETTER_AFTER_N, initial=45, maximum=600)
    assert retry_delay(p, KNOWN_KEY, attempt) == seconds(45)


# initial 30 s, max 1800 s: 30, 60, 120, 240, 480, 960, then 1920 is capped to 1800.
EXPONENTIAL_30_1800 = [30, 60, 120, 240, 480, 960, 1800, 1800, 1800, 1800]


@pytest.mark.parametrize(("attempt", "expected"), list(enumerate(EXPONENTIAL_30_1800, start=1)))
def test_exponential_backoff_doubles_then_caps(attempt: int, expected: int) -> None:
    p = policy(RetryStrategy.EXPONENTIAL_BACKOFF, initial=30, maximum=1800)
    assert envelope(p, attempt) == seconds(expected)
    assert retry_delay(p, KNOWN_KEY, attempt) == seconds(expected)


@pytest.mark.parametrize(("attempt", "expected"), list(enumerate([60, 120, 240, 480, 600, 600, 600], start=1)))
def test_manual_review_after_n_backs_off_exponentially(attempt: int, expected: int) -> None:
    p = BUILTIN_RETRY_POLICIES["manual_review_v1"]
    assert retry_delay(p, KNOWN_KEY, attempt) == seconds(expected)


def test_exponential_cap_that_is_exactly_a_power_of_two_is_reached_exactly() -> None:
    p = policy(RetryStrategy.EXPONENTIAL_BACKOFF, initial=30, maximum=240)
    assert [retry_delay(p, KNOWN_KEY, a) for a in range(1, 7)] == [seconds(s) for s in (30, 60, 120, 240, 240, 240)]


def test_exponential_with_fractional_seconds() -> None:
    p = policy(RetryStrategy.EXPONENTIAL_BACKOFF, initial=0.25, maximum=1.5)
    assert [retry_delay(p, KNOWN_KEY, a) for a in range(1, 6)] == [
        seconds(0.25),
        seconds(0.5),
        seconds(1),
        seconds(1.5),
        seconds(1.5),
    ]


@pytest.mark.parametrize("strategy", [RetryStrategy.EXPONENTIAL_BACKOFF, RetryStrategy.EXPONENTIAL_BACKOFF_JITTER])
def test_zero_initial_delay_means_no_wait(strategy: RetryStrategy) -> None:
    p = policy(strategy, initial=0, maximum=1800, jitter=True)
    assert [retry_delay(p, KNOWN_KEY, a) for a in (1, 2, 50, 10_000)] == [timedelta(0)] * 4


# The seed §21 policy (30 s doubling, cap 1800 s, equal jitter) and key "payroll-2026-01":
# envelopes 30, 60, 120, 240, 480, 960, 1800, 1800 s; delays in microseconds below.
JITTERED_KNOWN_KEY = [17888339, 57696841, 89527850, 230427924, 424179499, 679641543, 1488400490, 1199619902]


@pytest.mark.parametrize(("attempt", "expected_us"), list(enumerate(JITTERED_KNOWN_KEY, start=1)))
def test_exponential_jitter_exact_for_a_known_key(attempt: int, expected_us: int) -> None:
    assert us(retry_delay(STANDARD, KNOWN_KEY, attempt)) == expected_us


@pytest.mark.parametrize("attempt", range(1, 9))
def test_exponential_jitter_follows_the_equal_jitter_formula(attempt: int) -> None:
    # Recomputed here from the documented recipe, independently of retry.py.
    digest = hashlib.sha256(f"{KNOWN_KEY}|{attempt}".encode()).digest()
    fraction = int.from_bytes(digest[:8], "big") / 2**64
    base = min(30_000_000 << (attempt - 1), 1_800_000_000)
    half = base // 2
    assert us(retry_delay(STANDARD, KNOWN_KEY, attempt)) == half + int((base - half) * fraction)
    assert jitter_fraction(KNOWN_KEY, attempt) == fraction


def test_known_jitter_fractions() -> None:
    assert jitter_fraction(KNOWN_KEY, 1) == pytest.approx(0.19255593477445967, abs=1e-15)
    assert jitter_fraction(KNOWN_KEY, 2) == pytest.approx(0.9232280522171149, abs=1e-15)
    assert jitter_fraction("payroll-2026-02", 1) == pytest.approx(0.2309211678793912, abs=1e-15)


def test_jitter_flag_also_spreads_a_fixed_delay() -> None:
    p = policy(RetryStrategy.FIXED_DELAY, initial=10, maximum=10, jitter=True)
    delays = {us(retry_delay(p, f"key-{i}", 1)) for i in range(50)}
    assert len(delays) > 40
    assert all(5_000_000 <= d <= 10_000_000 for d in delays)


def test_jitter_varies_across_keys_and_attempts() -> None:
    by_key = {us(retry_delay(STANDARD, f"run-{i}", 3)) for i in range(100)}
    assert len(by_key) >= 95
    fractions = {jitter_fraction(KNOWN_KEY, a) for a in range(1, 101)}
    assert len(fractions) == 100


def test_jitter_fraction_depends_on_the_separator() -> None:
    # "k|12" and "k1|2" must not be the same input.
    assert jitter_fraction("k", 12) != jitter_fraction("k1", 2)


# --- large attempts -------------------------------------------------------------------------


@pytest.mark.parametrize("attempt", [62, 63, 64, 65, 1_000, 10_000, 10**6, 10**18])
@pytest.mark.parametrize(
    "strategy",
    [
        RetryStrategy.EXPONENTIAL_BACKOFF,
        RetryStrategy.EXPONENTIAL_BACKOFF_JITTER,
        RetryStrategy.MANUAL_REVIEW_AFTER_N,
    ],
)
def test_large_attempts_do_not_overflow(strategy: RetryStrategy, attempt: int) -> None:
    p = policy(strategy, initial=30, maximum=1800, jitter=strategy is RetryStrategy.EXPONENTIAL_BACKOFF_JITTER)
    assert envelope(p, attempt) == seconds(1800)
    delay = retry_delay(p, KNOWN_KEY, attempt)
    assert seconds(900) <= delay <= seconds(1800)


def test_exponent_boundary_with_the_largest_cap() -> None:
    p = RetryPolicy("huge", RetryStrategy.EXPONENTIAL_BACKOFF, 10, US, timedelta.max)
    assert envelope(p, 63) == timedelta(microseconds=2**62)  # exponent 62: still computed
    assert envelope(p, 64) == timedelta.max  # exponent 63: the cap, without shifting
    assert envelope(p, 10_000) == timedelta.max
    jittered = RetryPolicy("huge_j", RetryStrategy.EXPONENTIAL_BACKOFF_JITTER, 10, US, timedelta.max, jitter=True)
    assert timedelta.max / 2 <= retry_delay(jittered, KNOWN_KEY, 10_000) <= timedelta.max


# --- properties -----------------------------------------------------------------------------

NON_NONE = [s for s in RetryStrategy if s is not RetryStrategy.NONE]
DAY_US = 86_400 * 10**6


@st.composite
def policies(draw: st.DrawFn, *, jitter: bool | None = None) -> RetryPolicy:
    strategy = draw(st.sampled_from(NON_NONE))
    initial = draw(st.integers(min_value=0, max_value=DAY_US))
    maximum = draw(st.integers(min_value=initial, max_value=30 * DAY_US))
    use_jitter = draw(st.booleans()) if jitter is None else jitter
    return RetryPolicy(
        "prop",
        strategy,
        draw(st.integers(1, 50)),
        timedelta(microseconds=initial),
        timedelta(microseconds=maximum),
        jitter=use_jitter,
    )


keys = st.text(min_size=0, max_size=40)
attempts = st.integers(min_value=1, max_value=200)


@settings(max_examples=150, deadline=None)
@given(p=policies(jitter=False), key=keys, attempt=attempts)
def test_unjittered_delays_are_monotone_and_capped(p: RetryPolicy, key: str, attempt: int) -> None:
    now, after = retry_delay(p, key, attempt), retry_delay(p, key, attempt + 1)
    assert timedelta(0) <= now <= after <= p.max_delay
    assert now == envelope(p, attempt)


@settings(max_examples=150, deadline=None)
@given(p=policies(), key=keys, attempt=st.integers(min_value=1, max_value=100_000))
def test_every_delay_is_within_zero_and_max_delay(p: RetryPolicy, key: str, attempt: int) -> None:
    assert timedelta(0) <= retry_delay(p, key, attempt) <= p.max_delay


@settings(max_examples=150, deadline=None)
@given(p=policies(jitter=True), key=keys, attempt=attempts)
def test_jittered_delay_lies_in_half_envelope_to_envelope(p: RetryPolicy, key: str, attempt: int) -> None:
    base = us(envelope(p, attempt))
    assert base // 2 <= us(retry_delay(p, key, attempt)) <= base


@settings(max_examples=150, deadline=None)
@given(p=policies(jitter=True), key=keys, attempt=attempts)
def test_jitter_is_reproducible(p: RetryPolicy, key: str, attempt: int) -> None:
    twin = RetryPolicy(p.retry_policy_id, p.strategy, p.max_attempts, p.initial_delay, p.max_delay, jitter=True)
    assert retry_delay(p, key, attempt) == retry_delay(twin, key, attempt)
    assert jitter_fraction(key, attempt) == jitter_fraction(key, attempt)


@settings(max_examples=150, deadline=None)
@given(key=keys, other=keys, attempt=attempts)
def test_jitter_varies_across_keys(key: str, other: str, attempt: int) -> None:
    fraction = jitter_fraction(key, attempt)
    assert 0.0 <= fraction < 1.0
    if key != other:
        assert fraction != jitter_fraction(other, attempt)


@settings(max_examples=150, deadline=None)
@given(p=policies(jitter=True), key=keys)
def test_jittered_delays_never_shrink_until_the_cap(p: RetryPolicy, key: str) -> None:
    attempt = 1
    while attempt < 80 and envelope(p, attempt + 1) == 2 * envelope(p, attempt):
        assert retry_delay(p, key, attempt) <= retry_delay(p, key, attempt + 1)
        attempt += 1
