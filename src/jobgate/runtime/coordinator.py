"""The workflow coordinator loop: every worker process runs one.

It needs no leader: each advance is a compare-and-set on the workflow's version, so two
coordinators deciding the same step write it once, and the step runs they create carry an
idempotency key derived from the workflow and the step. A coordinator that dies mid-advance
leaves nothing behind; the next pass (any process's) decides again from the database.
"""

from __future__ import annotations

import logging
import threading

from jobgate.service.engine import Engine
from jobgate.workflows.service import advance_due

log = logging.getLogger("jobgate.coordinator")


class WorkflowCoordinator:
    def __init__(self, engine: Engine, *, interval: float = 0.1, batch: int = 100) -> None:
        self.engine = engine
        self.interval = interval
        self.batch = batch
        self._stop = threading.Event()
        self._wake = threading.Event()

    def run(self) -> None:
        while not self._stop.is_set():
            try:
                busy = advance_due(self.engine, limit=self.batch) >= self.batch
            except Exception:  # the database is away: back off and try again
                log.warning("workflow pass failed", exc_info=True, extra={"action": "workflow_pass_failed"})
                busy = False
                self._stop.wait(1.0)
            if not busy:
                self._wake.wait(self.interval)
                self._wake.clear()

    def wake(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
