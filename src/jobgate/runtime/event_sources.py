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

import threading
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Literal, Protocol

Health = Literal["connected", "disconnected", "skip"]
RECONNECT_BASE = timedelta(milliseconds=500)


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
