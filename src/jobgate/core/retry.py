"""Retry delays: a pure function of (policy, idempotency key, attempt).

Jitter is derived from the idempotency key and the attempt number, never from live
randomness, so a replay computes the same delay and two runs that fail together still
spread out. The jittered strategy uses "equal jitter": the delay lies in ``[d/2, d]`` where
``d`` is the capped exponential envelope, so it is bounded by ``max_delay`` and, until the
cap, never shorter than the previous attempt's.
"""

from __future__ import annotations

import hashlib
from datetime import timedelta

from jobgate.core.policies import RetryPolicy, RetryStrategy

_JITTER_SCALE = 2**64


def jitter_fraction(idempotency_key: str, attempt: int) -> float:
    """A reproducible number in ``[0, 1)`` for this run and attempt."""
    h = hashlib.sha256(f"{idempotency_key}|{attempt}".encode()).digest()
    return int.from_bytes(h[:8], "big") / _JITTER_SCALE


def envelope(policy: RetryPolicy, attempt: int) -> timedelta:
    """The un-jittered delay after failed attempt number ``attempt`` (1-based)."""
    if attempt < 1:
        raise ValueError("attempt is 1-based")
    if policy.strategy is RetryStrategy.NONE:
        return timedelta(0)
    if policy.strategy in (RetryStrategy.FIXED_DELAY, RetryStrategy.DEAD_LETTER_AFTER_N):
        return min(policy.initial_delay, policy.max_delay)
    # Exponential (with or without jitter) and manual review: double per attempt, capped.
    # Compare exponents before multiplying so attempt 10_000 cannot overflow timedelta.
    initial_us = policy.initial_delay // timedelta(microseconds=1)
    cap_us = policy.max_delay // timedelta(microseconds=1)
    if initial_us == 0:
        return timedelta(0)
    exponent = attempt - 1
    if exponent >= 63 or initial_us << exponent >= cap_us:
        return policy.max_delay
    return timedelta(microseconds=initial_us << exponent)


def retry_delay(policy: RetryPolicy, idempotency_key: str, attempt: int) -> timedelta:
    """How long to wait after failed attempt ``attempt`` before the next one."""
    base = envelope(policy, attempt)
    if not policy.jitter or base == timedelta(0):
        return base
    base_us = base // timedelta(microseconds=1)
    half = base_us // 2
    return timedelta(microseconds=half + int((base_us - half) * jitter_fraction(idempotency_key, attempt)))
