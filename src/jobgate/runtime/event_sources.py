"""Event sources: brokers a process listens to, whose messages become triggers.

A source is started and stopped with its process and says whether it is connected
(``/healthz``'s ``pubsub``: ``connected``, ``disconnected``, or ``skip`` when none is
configured). What a message may fire is never the source's decision: it hands what it heard
to a service (``service.pubsub_triggers``) that submits through the one trigger path.
Redis pub/sub (``runtime.pubsub``) and a PostgreSQL ``LISTEN`` channel (``runtime.pg_listen``)
are the sources today; another broker is another class with these methods.

``SourceStats`` counts what a source did so operators read it in logs and tests wait on it
(``wait``), never on a sleep.
"""

from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Literal, Protocol

from jobgate.clock import Clock
from jobgate.runtime.loops import LoopThread

Health = Literal["connected", "disconnected", "skip"]
RECONNECT_BASE = timedelta(milliseconds=500)
log = logging.getLogger("jobgate.pubsub")


class EventSource(Protocol):
    """One broker subscription of a process."""

    name: str

    def start(self) -> None:
        """Begin listening (on a thread of its own); a broker away is retried, not raised."""
        ...

    def stop(self) -> None:
        """Stop listening and close the connection; returns once it is closed."""
        ...

    def health(self) -> Health:
        """Whether the source holds a live subscription now."""
        ...

    @property
    def running(self) -> bool:
        """Whether its thread is alive (``/readyz``), connected or not."""
        ...

    @property
    def failing(self) -> int:
        """Failed connection attempts in a row (0 while connected): ``/readyz`` ambers it."""
        ...


class Sources:
    """Several sources as one: started and stopped together, ``connected`` only while every
    one is (a dead broker among them must not hide behind a live one)."""

    name = "pubsub"

    def __init__(self, sources: Sequence[EventSource]) -> None:
        self.sources = tuple(sources)

    def start(self) -> None:
        for source in self.sources:
            source.start()

    def stop(self) -> None:
        for source in self.sources:
            source.stop()

    def health(self) -> Health:
        return "connected" if all(s.health() == "connected" for s in self.sources) else "disconnected"

    @property
    def running(self) -> bool:
        return all(s.running for s in self.sources)

    @property
    def failing(self) -> int:
        return max((s.failing for s in self.sources), default=0)


def reconnect_delay(failures: int, cap: timedelta, base: timedelta = RECONNECT_BASE) -> timedelta:
    """The wait before reconnecting after ``failures`` failed attempts in a row: ``base``
    doubled each time, never more than ``cap``. Exponential so a broker that is down is not
    hammered; capped so one that comes back is noticed within ``cap``."""
    if failures <= 0:
        return timedelta(0)
    return min(cap, base * (1 << min(failures - 1, 32)))


class SourceStats:
    """What a source did, by name (``connects``, ``disconnects``, ``messages``, ``fired``,
    ``duplicates``, ``refused``, ``ignored.<why>``), with a condition to wait on."""

    def __init__(self) -> None:
        self._counts: Counter[str] = Counter()
        self._changed = threading.Condition()

    def add(self, name: str, n: int = 1) -> None:
        with self._changed:
            self._counts[name] += n
            self._changed.notify_all()

    def __getitem__(self, name: str) -> int:
        with self._changed:
            return self._counts[name]

    def snapshot(self) -> dict[str, int]:
        with self._changed:
            return dict(self._counts)

    def wait(self, condition: Callable[[SourceStats], bool], timeout: float) -> bool:
        """Wait until ``condition(self)`` holds (True) or ``timeout`` seconds pass (False)."""
        with self._changed:
            return self._changed.wait_for(lambda: condition(self), timeout)

    def wait_count(self, name: str, count: int, timeout: float) -> bool:
        """Wait until counter ``name`` reaches ``count``."""
        return self.wait(lambda s: s._counts[name] >= count, timeout)


class ReconnectingSource(ABC):
    """What every broker source shares: its loop thread, its back-off after a lost or refused
    connection (``reconnect_delay``), its counters and its log lines. A subclass keeps one
    connection: ``connected`` says whether it holds it, ``step`` connects if it must and reads,
    calling ``_lost`` on a broker error, and ``_drop`` releases it."""

    name: str
    leader_only = False
    where: str  # how the log names this source's subscription

    def __init__(self, clock: Clock, *, reconnect_max: timedelta, poll: timedelta, reconnect_base: timedelta) -> None:
        self.poll = poll
        self.reconnect_base = reconnect_base
        self.reconnect_max = reconnect_max
        self.stats = SourceStats()
        self._failures = 0
        self._thread = LoopThread(self, clock)

    # --- EventSource ---------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._thread.stop()
        self._thread.join(timeout=self.poll.total_seconds() + 10)

    def health(self) -> Health:
        return "connected" if self.connected else "disconnected"

    @property
    def running(self) -> bool:
        return self._thread.running

    @property
    def failing(self) -> int:
        """Failed connection attempts in a row (0 once connected)."""
        return self._failures

    # --- Loop ----------------------------------------------------------------------------

    @abstractmethod
    def step(self, now: datetime) -> timedelta:
        """Connect if not connected, then read what arrived; the time until the next step."""

    def close(self) -> None:
        self._drop()

    # --- the connection, for subclasses ----------------------------------------------------

    @property
    @abstractmethod
    def connected(self) -> bool:
        """Whether this source holds its connection now."""

    @abstractmethod
    def _drop(self) -> None:
        """Release the connection, if held."""

    def _now_connected(self) -> None:
        """A connection is up: the back-off starts over, and operators read it in the log."""
        self._failures = 0
        self.stats.add("connects")
        log.info("%s: connected", self.where, extra={"action": "pubsub_connected"})

    def _lost(self, exc: BaseException) -> timedelta:
        """The connection failed or was refused: drop it, count it, wait longer each time."""
        was_connected = self.connected
        self._drop()
        self._failures += 1
        delay = reconnect_delay(self._failures, self.reconnect_max, self.reconnect_base)
        self.stats.add("disconnects" if was_connected else "connect_failures")
        log.warning(
            "%s: %s (%s); reconnecting in %.1fs",
            self.where,
            "connection lost" if was_connected else "cannot connect",
            type(exc).__name__,
            delay.total_seconds(),
            extra={"action": "pubsub_disconnected", "failures": self._failures},
        )
        return delay
