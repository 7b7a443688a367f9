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
import uuid
from datetime import datetime, timedelta

from jobgate.runtime.leadership import Lease
from jobgate.service import sla
from jobgate.service.engine import Engine

log = logging.getLogger("jobgate.sla")

LEADER_LOCK = "sla-monitor-leader"


class SlaMonitor:
    """A ``Loop`` (``runtime.loops``): leader-only, a pass about every ``interval``."""

    name = "sla-monitor"
    leader_only = True

    def __init__(
        self,
        engine: Engine,
        *,
        owner: str | None = None,
        interval: timedelta = timedelta(seconds=1),
        lease: timedelta = timedelta(seconds=5),
    ) -> None:
        self.engine = engine
        self.owner = owner or f"sla-{uuid.uuid4().hex[:12]}"  # opaque, as worker ids
        self.interval = interval
        self.state = sla.MonitorState()
        self._lease = Lease(engine.store, LEADER_LOCK, self.owner, lease)

    def tick(self, now: datetime | None = None) -> sla.CheckResult | None:
        """One pass if this monitor leads (None while another does)."""
        now = now or self.engine.clock.now()
        if self._lease.hold(now) is None:
            return None
        result = sla.check(self.engine, now, state=self.state)
        if result.breaches or result.reminders or result.escalations:
            log.info(
                "sla pass: %d breaches, %d reminders, %d escalations",
                result.breaches,
                result.reminders,
                result.escalations,
                extra={"action": "sla_pass"},
            )
        return result

    def step(self, now: datetime) -> timedelta:
        """A pass that could not read everything is followed at once by the next."""
        result = self.tick(now)
        return timedelta(0) if result is not None and result.behind else self._lease.within_renewal(self.interval)

    def close(self) -> None:
        """Hand the lock over."""
        self._lease.release()
