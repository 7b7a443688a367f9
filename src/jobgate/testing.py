"""Tools for testing code that uses jobgate, and jobgate's own tests and benchmarks.

- ``FakeClock``: an engine's clock that moves only when told (``Engine(store, config,
  clock=FakeClock(at))``): schedules, leases and deadlines become exact instants in a test.
- ``run_loop``: a loop (``runtime.loops``: scheduler, SLA monitor, coordinator, publisher, ...)
  on its own thread for the length of a ``with`` block; wait on its passes
  (``loop.wait_passes(n, timeout)``) rather than sleeping.
- ``connection(tx)``: a store transaction's connection, to load, inspect or tamper with rows
  directly. jobgate's own code never reaches past ``StoreTx`` (``tests/test_layers.py``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta

from sqlalchemy import Connection

from jobgate.clock import Clock, SystemClock
from jobgate.runtime.loops import Loop, LoopThread
from jobgate.store.sqlstore import StoreTx


class FakeClock:
    """A clock that stands still until ``advance`` or ``set`` moves it (thread-safe)."""

    def __init__(self, at: datetime) -> None:
        if at.tzinfo is None:
            raise ValueError("naive datetime: a clock tells aware instants")
        self._at = at
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._at

    def set(self, at: datetime) -> None:
        with self._lock:
            self._at = at

    def advance(self, by: timedelta) -> datetime:
        """Move forward (never back) by ``by``; returns the new instant."""
        if by < timedelta(0):
            raise ValueError("a clock does not go back")
        with self._lock:
            self._at += by
            return self._at


class SkewedClock:
    """The host's clock, off by ``skew`` (a host whose clock is wrong)."""

    def __init__(self, skew: timedelta, base: Clock | None = None) -> None:
        self.skew = skew
        self._base = base or SystemClock()

    def now(self) -> datetime:
        return self._base.now() + self.skew


@contextmanager
def run_loop(loop: Loop, clock: Clock, *, stop_timeout: float = 30) -> Iterator[LoopThread]:
    """Run ``loop`` on a thread for the block; stopped and joined at its end (fails if it hangs)."""
    thread = LoopThread(loop, clock).start()
    try:
        yield thread
    finally:
        thread.stop()
        if not thread.join(stop_timeout):
            raise AssertionError(f"loop {loop.name} did not stop within {stop_timeout} s")


def connection(tx: StoreTx) -> Connection:
    """The open transaction's connection: statements on it commit or roll back with ``tx``."""
    return tx._conn
