"""The SLA monitor loop: one per cluster, a pass about every second.

Every long-running process (each ``jobgate worker``, and ``jobgate serve``) runs one; they
compete for the fenced, expiring ``sla-monitor-leader`` lock (``runtime.leadership``), and only
the holder makes passes (``service.sla.check``); the others wait as standbys and take over
within the lease when the holder dies. The lock saves the cluster identical reads; it is not
what keeps records single: a pass is idempotent and each record is once-only in the store, so
a holder that stalled past its lease overlapping the new one doubles nothing.

A pass that could not read everything (a long backlog of transitions after downtime) is
followed at once by the next; otherwise the loop waits ``interval``.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from datetime import datetime, timedelta

from jobgate.runtime.leadership import Lease
from jobgate.service import sla
from jobgate.service.engine import Engine

log = logging.getLogger("jobgate.sla")

LEADER_LOCK = "sla-monitor-leader"


class SlaMonitor:
    def __init__(
        self,
        engine: Engine,
        *,
        owner: str | None = None,
        interval: timedelta = timedelta(seconds=1),
        lease: timedelta = timedelta(seconds=5),
    ) -> None:
        self.engine = engine
        self.owner = owner or f"sla-{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.interval = interval
        self.state = sla.MonitorState()
        self._lease = Lease(engine.store, LEADER_LOCK, self.owner, lease)
        self._stop = threading.Event()
        self._passes = 0
        self._changed = threading.Condition()

    def tick(self, now: datetime | None = None) -> sla.CheckResult | None:
        """One pass if this monitor leads (None while another does)."""
        now = now or self.engine.clock.now()
        if self._lease.hold(now) is None:
            return None
        result = sla.check(self.engine, now, state=self.state)
        with self._changed:
            self._passes += 1
            self._changed.notify_all()
        if result.breaches or result.reminders or result.escalations:
            log.info(
                "sla pass: %d breaches, %d reminders, %d escalations",
                result.breaches,
                result.reminders,
                result.escalations,
                extra={"action": "sla_pass"},
            )
        return result

    def run(self) -> None:
        """Pass until stopped, then hand the lock over."""
        try:
            while not self._stop.is_set():
                behind = False
                try:
                    result = self.tick()
                    behind = result is not None and result.behind
                except Exception:  # the database away, a bad row: log, and try again next turn
                    log.exception("sla pass failed; retrying", extra={"action": "sla_pass_failed"})
                if not behind:
                    self._stop.wait(self.interval.total_seconds())
        finally:
            self._lease.release()

    def wait_passes(self, count: int, timeout: float) -> bool:
        """Wait until this monitor has made ``count`` passes in all (for tests and shutdown)."""
        with self._changed:
            return self._changed.wait_for(lambda: self._passes >= count, timeout)

    @property
    def passes(self) -> int:
        return self._passes

    def stop(self) -> None:
        self._stop.set()

    def release(self) -> None:
        self._lease.release()

    def start_thread(self) -> threading.Thread:
        t = threading.Thread(target=self.run, name="jobgate-sla-monitor", daemon=True)
        t.start()
        return t
