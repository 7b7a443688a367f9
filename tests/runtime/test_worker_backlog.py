"""A backlog is drained cycle after cycle: each cycle settles the last batch and claims the next.

Nothing announces a backlog: a notification comes when a run is submitted or released, not
while runs wait their turn. A worker whose last claim came back full now claims again in its
next cycle. Before, when the attempts of a cycle had all finished by the time the loop looked
for work (short jobs, a slow cycle), the next cycle only settled them, and the claim waited for
a wake-up or the next poll: a transaction more per batch, and in the PostgreSQL throughput
benchmark an idle wait of the poll interval (50 ms) between batches.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from typing import Any

from runtime_support import running_worker, wait_all

from helpers import define
from jobgate.core.states import RunStatus
from jobgate.runtime.worker import Worker
from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest


class _SlowCycles(Worker):
    """Holds its loop after each cycle until the attempts the cycle started have all finished
    (their results handed back), so the loop finds them done when it looks for more work."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._handed_back = threading.Condition()

    def _execute(self, flight: Any) -> None:
        super()._execute(flight)  # the result is queued for the loop
        with self._handed_back:
            self._handed_back.notify_all()

    def _cycle(self, now: datetime, *, renew: bool, claim: int) -> None:
        super()._cycle(now, renew=renew, claim=claim)
        with self._handed_back:  # every thread in use has handed its result back (none collected yet)
            self._handed_back.wait_for(lambda: self._results.qsize() >= self._busy_threads, timeout=10)


def test_a_backlog_is_claimed_batch_after_batch_without_waiting_for_a_poll(engine: Engine) -> None:
    job = define(engine)
    runs = [engine.submit(SubmitRequest(job, params={}, request_id=f"backlog-{i}")).run.job_run_id for i in range(12)]
    # Polling every hour: only the first look (at start-up) and the worker's own reading of
    # its claims can get the backlog done in time.
    with running_worker(
        engine, worker_class=_SlowCycles, concurrency=2, batch_size=2, poll_interval=timedelta(hours=1)
    ) as worker:
        wait_all(engine, runs, RunStatus.COMPLETED, timeout=20)
    assert worker.settled == 12 and worker.stale_writes_refused == 0
    # Six batches of two: each cycle settles the batch before and claims the next, and one more
    # settles the last (before: a settling cycle and a claiming cycle per batch, 11 or 12).
    assert worker.stats.cycles <= 8, worker.stats.cycles
