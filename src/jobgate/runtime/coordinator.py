"""The workflow coordinator loop: every worker process runs one.

It needs no leader: each advance is a compare-and-set on the workflow's version, so two
coordinators deciding the same step write it once, and the step runs they create carry an
idempotency key derived from the workflow and the step. A coordinator that dies mid-advance
leaves nothing behind; the next pass (any process's) decides again from the database.

A workflow whose advance keeps failing (its definition unreadable, the database refusing) is
retried with a growing delay, so it neither floods the log nor starves the others.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta

from jobgate.service.engine import Engine
from jobgate.service.workflows import advance

log = logging.getLogger("jobgate.coordinator")
MAX_BACKOFF = 60.0


class WorkflowCoordinator:
    """A ``Loop`` (``runtime.loops``) every process runs: no leader (see the module docstring)."""

    name = "workflows"
    leader_only = False

    def __init__(self, engine: Engine, *, interval: float = 0.2, batch: int = 500) -> None:
        self.engine = engine
        self.interval = timedelta(seconds=interval)
        self.batch = batch
        self._failing: dict[str, tuple[int, float]] = {}  # workflow -> (failures, retry after, monotonic)

    def step(self, now: datetime) -> timedelta:
        """A pass; at once again while a full batch advanced (more may be waiting)."""
        return timedelta(0) if self.pass_once() else self.interval

    def close(self) -> None:
        """Nothing held: every advance is a compare-and-set."""

    def pass_once(self) -> bool:
        """Advance every workflow with something to decide; True when more may be waiting."""
        with self.engine.store.read() as tx:
            due = tx.workflows_due(self.batch)
        now = time.monotonic()
        advanced = 0
        for workflow_run_id in due:
            failures, retry_at = self._failing.get(workflow_run_id, (0, 0.0))
            if retry_at > now:
                continue
            try:
                if advance(self.engine, workflow_run_id):
                    advanced += 1
                self._failing.pop(workflow_run_id, None)
            except Exception:
                failures += 1
                delay = min(MAX_BACKOFF, 0.5 * 2 ** min(failures, 8))
                self._failing[workflow_run_id] = (failures, now + delay)
                log.warning(
                    "workflow %s: advance failed (%d in a row); next try in %.1f s",
                    workflow_run_id,
                    failures,
                    delay,
                    exc_info=failures == 1,  # the traceback once, not every retry
                    extra={"action": "workflow_advance_failed", "workflow_run_id": workflow_run_id},
                )
        return len(due) >= self.batch and advanced > 0
