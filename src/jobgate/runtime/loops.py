"""Background loops, one protocol: what a process runs besides its worker.

A loop is an object with a name, a ``leader_only`` flag, and ``step(now) -> next wake``: one
pass, and how long until the next (zero: again at once, there is a backlog). ``close()`` runs
once when it stops (a leader hands its lease over, the publisher drains). The scheduler, the
SLA monitor, the workflow coordinator, the outbox publisher, the dependency checks, the
rescuer and SQLite's checkpoints are loops; ``LoopThread`` runs one on a thread of its own,
and the worker steps the rescuer from its own turn (its sweeps share the worker's admission
facts).

Leader-only loops hold a named, fenced lease (``runtime.leadership``) inside ``step``: the
loop itself decides what a lost lease means (the scheduler fences its writes with the lease's
token), the runner only keeps time.

Every pass is counted, and ``LoopThread.wait_passes`` lets a test wait for the next pass of a
loop instead of sleeping (``jobgate.testing``).
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime, timedelta
from typing import Protocol

from jobgate.clock import Clock
from jobgate.store.errors import is_transient

log = logging.getLogger("jobgate.loops")

ERROR_BACKOFF = timedelta(seconds=1)


class Loop(Protocol):
    """One background duty of a process."""

    name: str
    leader_only: bool  # one in the cluster makes passes at a time (it holds a lease to do so)

    def step(self, now: datetime) -> timedelta:
        """One pass at ``now``; how long until the next one (zero: at once)."""
        ...

    def close(self) -> None:
        """After the last pass: release what the loop holds."""
        ...


class LoopThread:
    """Runs one ``Loop`` on a daemon thread until ``stop``: step, wait for the wake the step
    asked for (or ``wake()``, or ``stop()``), step again. A pass that raises is logged and the
    loop waits ``ERROR_BACKOFF`` (the database away, a bad row), then tries again."""

    def __init__(self, loop: Loop, clock: Clock, *, error_backoff: timedelta = ERROR_BACKOFF) -> None:
        self.loop = loop
        self.clock = clock
        self.error_backoff = error_backoff
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._passes = 0
        self._failures = 0
        self._failing = 0  # failed passes in a row (``/readyz`` ambers a loop that keeps failing)
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def start(self) -> LoopThread:
        self._thread = threading.Thread(target=self.run, name=f"jobgate-{self.loop.name}", daemon=True)
        self._thread.start()
        return self

    def run(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    wait = self.loop.step(self.clock.now())
                    self._count(failed=False)
                except Exception as exc:
                    if is_transient(exc):  # a dropped session or a deadlock: a passing error, one line
                        if not self._failing:  # once until a pass succeeds, not at every pass of an outage
                            log.warning(
                                "%s: pass failed: database unavailable (%s); trying again",
                                self.loop.name,
                                type(exc).__name__,
                                extra={"action": "loop_failed"},
                            )
                    else:
                        log.exception("%s: pass failed; trying again", self.loop.name, extra={"action": "loop_failed"})
                    self._count(failed=True)
                    wait = self.error_backoff
                if wait > timedelta(0):
                    self._wake.wait(wait.total_seconds())
                    self._wake.clear()
        finally:
            try:
                self.loop.close()
            except Exception:
                log.warning("%s: closing failed", self.loop.name, exc_info=True)

    def _count(self, *, failed: bool) -> None:
        with self._changed:
            self._passes += 1
            self._failures += failed
            self._failing = self._failing + 1 if failed else 0
            self._changed.notify_all()

    @property
    def passes(self) -> int:
        return self._passes

    @property
    def failing(self) -> int:
        """How many passes in a row have failed (0 after one that did not)."""
        return self._failing

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def wait_passes(self, count: int, timeout: float) -> bool:
        """Wait until the loop has made ``count`` passes in all, failed ones included."""
        with self._changed:
            return self._changed.wait_for(lambda: self._passes >= count, timeout)

    def wake(self) -> None:
        """Make the next pass now rather than when the last one asked."""
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the thread to end (``close`` included); True if it did."""
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()
