"""Helpers for the runtime tests: a worker in a thread, waiting on database conditions, reads.

Nothing here sleeps and hopes. Prefer a signal the code under test gives (a
``threading.Event``, ``LoopThread.wait_passes``, a ``FakeClock``); where there is none,
``wait_until`` polls a real condition (often a database read) and fails the test with a
message after a deadline.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import text

from jobgate.core.models import Attempt, DeadLetter, JobRun
from jobgate.core.states import RunStatus
from jobgate.runtime.worker import Worker, WorkerSettings
from jobgate.service.engine import Engine
from jobgate.store import codec
from jobgate.testing import connection

POLL = 0.01  # the longest pause between two looks of ``wait_until``
FIRST_POLL = 0.001  # the first pause: most conditions hold within a few milliseconds

# Small timings for tests: fast polling, short grace periods, so a stop never takes long.
TEST_SETTINGS: dict[str, Any] = {
    "concurrency": 4,
    "lease": timedelta(seconds=10),
    "poll_interval": timedelta(milliseconds=20),
    "shutdown_grace": timedelta(seconds=5),
    "stop_grace": timedelta(seconds=1),
    "rescue_interval": timedelta(milliseconds=200),
}


def wait_until(
    condition: Callable[[], object],
    *,
    timeout: float = 10.0,
    what: str = "condition",
    last: Callable[[], object] | None = None,
    poll: float = POLL,
) -> float:
    """Poll ``condition`` until it is true; return the seconds waited.

    For a real condition the code offers no signal for: the first looks come 1 ms apart, then
    twice as far apart each time, up to ``poll`` (larger for a costly look: a subprocess, an
    HTTP request). After ``timeout`` the condition is asked one last time, then the test fails
    naming ``what``, how many looks it took and, with ``last``, what was seen instead (say the
    run's status)."""
    start = time.monotonic()
    deadline = start + timeout
    pause = FIRST_POLL
    looks = 0
    while True:
        looks += 1
        if condition():
            return time.monotonic() - start
        now = time.monotonic()
        if now >= deadline:
            break
        time.sleep(min(pause, deadline - now))  # the polling itself: see the docstring
        pause = min(pause * 2, poll)
    seen = "" if last is None else f"; last seen: {last()!r}"
    raise AssertionError(f"timed out after {timeout:g} s ({looks} looks) waiting for {what}{seen}")


def get_run(engine: Engine, job_run_id: str) -> JobRun:
    with engine.store.read() as tx:
        run = tx.run_get(job_run_id)
    assert run is not None, job_run_id
    return run


def wait_status(engine: Engine, job_run_id: str, status: RunStatus, *, timeout: float = 10.0) -> JobRun:
    wait_until(
        lambda: get_run(engine, job_run_id).status is status,
        timeout=timeout,
        what=f"run {job_run_id} to reach {status.value}",
        last=lambda: get_run(engine, job_run_id).status.value,
    )
    return get_run(engine, job_run_id)


def wait_all(engine: Engine, job_run_ids: list[str], status: RunStatus, *, timeout: float = 10.0) -> None:
    def done() -> bool:
        with engine.store.read() as tx:
            return all(r.status is status for r in tx.runs_get(job_run_ids))

    def seen() -> dict[str, int]:
        with engine.store.read() as tx:
            return dict(Counter(r.status.value for r in tx.runs_get(job_run_ids)))

    wait_until(done, timeout=timeout, what=f"{len(job_run_ids)} runs to reach {status.value}", last=seen)


Step = tuple[str | None, str, str, int]


def transitions(engine: Engine, job_run_id: str) -> list[Step]:
    """(from, to, reason, attempt) of every transition of the run, in the order recorded."""
    with engine.store.read() as tx:
        rows = tx.run_transitions(job_run_id)
    return [
        (None if t.from_status is None else t.from_status.value, t.to_status.value, t.reason, t.attempt) for t in rows
    ]


def actors(engine: Engine, job_run_id: str) -> list[str]:
    with engine.store.read() as tx:
        return [t.actor for t in tx.run_transitions(job_run_id)]


def attempts(engine: Engine, job_run_id: str) -> list[Attempt]:
    with engine.store.read() as tx:
        return tx.run_attempts(job_run_id)


def dead_letters(engine: Engine, job_run_id: str) -> list[DeadLetter]:
    with engine.store.read() as tx:
        return [d for d in tx.dead_letters_list(None, open_only=False) if d.job_run_id == job_run_id]


@dataclass(frozen=True)
class StoredEvent:
    event_id: int
    event_type: str
    payload: dict[str, Any]
    delivered: bool


def events(engine: Engine, job_run_id: str) -> list[StoredEvent]:
    """The run's outbox rows in id (= delivery) order; delivered = no longer pending in the store."""
    with engine.store.read() as tx:
        rows = (
            connection(tx)
            .execute(
                text("SELECT id, event_type, payload FROM outbox WHERE job_run_id = :rid ORDER BY id"),
                {"rid": job_run_id},
            )
            .all()
        )
        pending = {e.event_id for e in tx.outbox_pending(1_000_000)}
    return [StoredEvent(int(r[0]), str(r[1]), codec.loads(r[2]), int(r[0]) not in pending) for r in rows]


def event_types(engine: Engine, job_run_id: str) -> list[str]:
    return [e.event_type for e in events(engine, job_run_id)]


def scalar(engine: Engine, sql: str, **params: Any) -> Any:
    with engine.store.read() as tx:
        return connection(tx).execute(text(sql), params).scalar_one()


def marker_lines(path: Path) -> list[list[str]]:
    if not path.exists():
        return []
    return [line.split() for line in path.read_text().splitlines() if line.strip()]


@contextmanager
def running_worker(engine: Engine, *, worker_class: type[Worker] = Worker, **overrides: Any) -> Iterator[Worker]:
    """A ``Worker`` running in a thread; stopped gracefully and joined on exit (fails if it hangs)."""
    worker = worker_class(engine, WorkerSettings(**{**TEST_SETTINGS, **overrides}))
    thread = threading.Thread(target=worker.run, name=f"test-worker-{worker.worker_id}", daemon=True)
    thread.start()
    try:
        yield worker
    finally:
        worker.stop()
        stopped = worker.wait_stopped(30)
        thread.join(30)
        assert stopped and not thread.is_alive(), f"worker {worker.worker_id} did not stop"
