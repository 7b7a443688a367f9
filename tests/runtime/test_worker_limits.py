"""Limits that hold across threads and workers: per-definition concurrency and rate, and
exactly-once execution when two workers drain the same queue."""

from __future__ import annotations

import itertools
import threading
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from runtime_support import (
    get_run,
    marker_lines,
    running_worker,
    scalar,
    wait_all,
    wait_until,
)

from helpers import define
from jobgate.core.states import RunStatus
from jobgate.runtime.worker import Worker
from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest
from jobgate.store.base import RunsClaim
from jobgate.store.sqlstore import Store


def _leased(engine: Engine, job: str) -> int:
    return int(
        scalar(
            engine,
            "SELECT count(*) FROM job_runs WHERE job_definition_id = :j AND status IN ('DISPATCHED', 'RUNNING')",
            j=job,
        )
    )


def test_concurrency_limit_one_never_runs_two_at_once(engine: Engine, marker: Path) -> None:
    job = define(
        engine,
        handler="engine_handlers:overlap",
        concurrency_limit=1,
        params=[{"name": "seconds", "pattern": "[0-9.]+"}],
    )
    ids = [
        r.run.job_run_id for r in engine.submit_many([SubmitRequest(job, params={"seconds": "0.3"}) for _ in range(3)])
    ]
    samples: list[int] = []
    with running_worker(engine, concurrency=4):

        def sample() -> bool:
            samples.append(_leased(engine, job))
            return all(get_run(engine, i).status is RunStatus.COMPLETED for i in ids)

        wait_until(sample, timeout=10, what="the limited runs to complete")
    assert max(samples) == 1 and len(samples) > 10

    lines = marker_lines(marker)
    intervals = sorted(
        (float(s[2]), float(e[2])) for s in lines if s[0] == "start" for e in lines if e[0] == "end" and e[1] == s[1]
    )
    assert len(intervals) == 3
    for (_, end), (next_start, _) in itertools.pairwise(intervals):
        assert next_start >= end  # each run started only after the previous one ended


def test_rate_limit_spreads_starts(engine: Engine) -> None:
    job = define(engine, rate_limit_per_second=5)
    ids = [r.run.job_run_id for r in engine.submit_many([SubmitRequest(job) for _ in range(10)])]
    with running_worker(engine, concurrency=4):
        wait_all(engine, ids, RunStatus.COMPLETED, timeout=15)
    starts = sorted(s for s in (get_run(engine, i).started_at for i in ids) if s is not None)
    assert len(starts) == 10
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(starts)]
    assert min(gaps) >= 0.199  # 5 per second, burst 1: one start per 0.2 s at most
    assert 1.79 <= (starts[-1] - starts[0]).total_seconds() < 5.0


def test_queue_rate_limit_holds_across_definitions_and_two_workers(engine: Engine, database_url: str) -> None:
    """A queue's rate (seed 001 RatePerSecond) covers every definition on it and every worker."""
    first, second = define(engine, queue="slow"), define(engine, queue="slow")
    ids = [r.run.job_run_id for r in engine.submit_many([SubmitRequest(j) for j in (first, second) * 4])]
    other_store = Store(database_url, migrate=False)
    other = Engine(other_store, engine.config)
    rates = {"slow": (5.0, 1)}
    try:
        with (
            running_worker(engine, concurrency=4, queues=("slow",), queue_rates=rates),
            running_worker(other, concurrency=4, queues=("slow",), queue_rates=rates),
        ):
            wait_all(engine, ids, RunStatus.COMPLETED, timeout=15)
    finally:
        other_store.dispose()
    starts = sorted(s for s in (get_run(engine, i).started_at for i in ids) if s is not None)
    assert len(starts) == 8
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(starts)]
    assert min(gaps) >= 0.199  # 5 per second for the queue as a whole, burst 1


def test_two_workers_drain_300_runs_each_exactly_once(engine: Engine, database_url: str, marker: Path) -> None:
    job = define(engine, handler="engine_handlers:marker")
    ids = [r.run.job_run_id for r in engine.submit_many([SubmitRequest(job) for _ in range(300)])]
    other_store = Store(database_url, migrate=False)
    other = Engine(other_store, engine.config)
    try:
        with (
            running_worker(engine, concurrency=4, batch_size=16) as a,
            running_worker(other, concurrency=4, batch_size=16) as b,
        ):
            wait_until(
                lambda: scalar(engine, "SELECT count(*) FROM job_runs WHERE status = 'COMPLETED'") == 300,
                timeout=60,
                what="300 runs to complete",
            )
    finally:
        other_store.dispose()

    lines = marker_lines(marker)
    assert len(lines) == 300
    assert {line[0] for line in lines} == set(ids)
    assert {line[1] for line in lines} == {"1"}
    started = "FROM run_transitions WHERE to_status = 'RUNNING'"
    assert scalar(engine, f"SELECT count(*) {started}") == 300  # one attempt per run, none repeated
    assert scalar(engine, f"SELECT count(DISTINCT job_run_id) {started}") == 300
    assert scalar(engine, "SELECT max(attempt) FROM job_runs") == 1
    assert scalar(engine, "SELECT count(*) FROM run_transitions") == 300 * 5
    assert scalar(engine, "SELECT count(*) FROM outbox WHERE event_type = 'job_started'") == 300
    assert a.settled + b.settled == 300
    assert a.stale_writes_refused == b.stale_writes_refused == 0
    # Both really worked the queue (each holds at most 4 runs at a time, so neither can take all).
    assert a.settled > 0 and b.settled > 0
    assert scalar(engine, f"SELECT count(DISTINCT actor) {started}") == 2


class _CountingPolls(Worker):
    """Counts the polls that came due (one per ``poll_interval``): a test waits for so many polls
    rather than for so many seconds."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.polls = 0
        self._polled = threading.Condition()

    def _poll_due(self, now: datetime) -> bool:
        due = super()._poll_due(now)
        if due:
            with self._polled:
                self.polls += 1
                self._polled.notify_all()
        return due

    def wait_polls(self, count: int, timeout: float) -> bool:
        """Wait until ``count`` polls in all have come due."""
        with self._polled:
            return self._polled.wait_for(lambda: self.polls >= count, timeout)


def test_a_worker_whose_queue_is_at_its_rate_waits_instead_of_claiming_over_and_over(engine: Engine) -> None:
    """A backlog behind a queue rate: the claim finds runs but may start none, and says nothing
    more is waiting; the worker waits for its poll instead of running a claiming transaction
    every few milliseconds (it did, on SQLite, for one review: hundreds of cycles a second)."""
    job = define(engine, queue="slow")
    engine.submit_many([SubmitRequest(job, request_id=f"slow-{i}") for i in range(50)])
    rates = {"slow": (0.2, 1)}
    with running_worker(
        engine, worker_class=_CountingPolls, concurrency=4, queues=("slow",), queue_rates=rates
    ) as worker:
        assert isinstance(worker, _CountingPolls)
        wait_until(lambda: worker.stats.started >= 1, what="the one run the rate allows")
        cycles, polls = worker.stats.cycles, worker.polls
        # Fifty polls (a second, at 20 ms): the rate allows nothing more for 5 s. A worker that
        # claimed over and over would not even get to ask whether its poll is due.
        assert worker.wait_polls(polls + 50, timeout=10), f"{worker.polls - polls} polls came due"
        idle_cycles = worker.stats.cycles - cycles
    assert worker.stats.started == 1
    # At most a look per poll (every 20 ms in these tests); it was over 300 a second.
    assert idle_cycles <= 60, idle_cycles


def test_runs_of_a_queue_at_its_rate_do_not_hide_the_runs_of_another_queue(engine: Engine) -> None:
    """The candidate read takes exactly as many runs as the claim may: a rate-limited queue with
    no room now is left out of it, or its runs (ranked first) would fill it and the other
    queue's runs behind them would wait for a later claim."""
    slow, fast = define(engine, queue="slow"), define(engine, queue="fast")
    engine.submit_many([SubmitRequest(slow, request_id=f"s{i}") for i in range(4)])
    made = engine.submit_many([SubmitRequest(fast, request_id=f"f{i}") for i in range(2)])
    fast_ids = {r.run.job_run_id for r in made}
    rates = {"slow": (0.2, 1)}
    now = engine.clock.now()
    later = now + timedelta(seconds=30)
    with engine.store.write() as tx:  # the slow queue's one run for the next five seconds
        first = tx.runs_claim(RunsClaim("w", ("slow",), 1, now, later, rates, start_now=1)).runs()
    assert len(first) == 1
    with engine.store.write() as tx:
        batch = tx.runs_claim(RunsClaim("w", ("slow", "fast"), 2, now, later, rates, start_now=2))
    assert {r.job_run_id for r in batch.runs()} == fast_ids
