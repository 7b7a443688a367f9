"""Time for the shell. The core never reads a clock: loops and services pass ``now`` in.

Leases, lock expiries and schedule watermarks are compared across processes, so on a shared
database they must be measured on one clock: the database's (seed 001 §3: fenced leases on
database time). ``DatabaseClock`` reads it without a query per call: it measures the offset
between the database clock and this host's now and then (half the round trip taken as the
read instant) and adds it to the host clock. A host whose clock is minutes off therefore
still agrees with the others about when a lease expires, to within the round trip.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol

log = logging.getLogger("jobgate.clock")


class Clock(Protocol):
    def now(self) -> datetime: ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


def _host_now() -> datetime:
    return datetime.now(UTC)


class DatabaseClock:
    """The database's time: the host clock plus the measured offset, re-measured every ``refresh``."""

    def __init__(
        self,
        read_database_now: Callable[[], datetime],
        *,
        refresh: timedelta = timedelta(seconds=30),
        retry: timedelta = timedelta(seconds=1),
        host_now: Callable[[], datetime] = _host_now,
    ) -> None:
        self._read = read_database_now
        self._refresh = refresh
        self._retry = retry
        self._host_now = host_now
        self._offset = timedelta(0)
        self._measured = False
        self._next_measure: datetime | None = None
        self._lock = threading.Lock()

    @property
    def offset(self) -> timedelta:
        """Database time minus host time, as last measured."""
        return self._offset

    def now(self) -> datetime:
        host = self._host_now()
        if self._next_measure is None or host >= self._next_measure:
            self._measure(host)
            host = self._host_now()
        return host + self._offset

    def _measure(self, host: datetime) -> None:
        with self._lock:
            if self._next_measure is not None and host < self._next_measure:
                return  # another thread measured meanwhile
            before = self._host_now()
            try:
                database = self._read()
            except Exception as exc:  # the database is away: keep the last offset, try again soon
                self._next_measure = before + self._retry
                log.warning(
                    "cannot read the database clock (%s); %s",
                    type(exc).__name__,
                    "keeping the last measured offset" if self._measured else "using this host's clock meanwhile",
                )
                return
            after = self._host_now()
            self._offset = database - (before + (after - before) / 2)
            self._measured = True
            self._next_measure = after + self._refresh
