"""Operators acting on live runs: cancel, stop (cooperative and forced), graceful worker shutdown."""

from __future__ import annotations

import os
import time
from datetime import timedelta
from pathlib import Path

import engine_handlers
import pytest
from runtime_support import (
    attempts,
    event_types,
    get_run,
    marker_lines,
    running_worker,
    transitions,
    wait_all,
    wait_status,
    wait_until,
)

from helpers import define
from jobgate.core.errors import ConflictError
from jobgate.core.states import RunStatus
from jobgate.service import control
from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest

SECONDS = [{"name": "seconds", "pattern": "[0-9.]+"}]

# Ignores SIGTERM, then says (atomically) that it is ready and which pid to look for.
STUBBORN_BODY = """\
import os, pathlib, signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
tmp = pathlib.Path("ready.tmp")
tmp.write_text(str(os.getpid()))
tmp.rename("ready")
# real time: the job's work, a command that outlives SIGTERM (and at most 30 s) until SIGKILL
time.sleep(30)
"""


def test_a_cancelled_scheduled_run_is_never_executed(engine: Engine, marker: Path) -> None:
    job = define(engine, handler="engine_handlers:marker")
    doomed = engine.submit(SubmitRequest(job, request_id="doomed")).run
    cancelled = control.cancel_run(engine, doomed.job_run_id, actor="alice", reason="not needed")
    assert cancelled.status is RunStatus.CANCELLED and cancelled.ended_at is not None
    assert transitions(engine, doomed.job_run_id)[-1] == ("SCHEDULED", "CANCELLED", "cancelled_by_user", 0)
    assert event_types(engine, doomed.job_run_id) == ["job_cancelled"]

    other = engine.submit(SubmitRequest(job, request_id="other")).run
    with running_worker(engine):
        wait_status(engine, other.job_run_id, RunStatus.COMPLETED)
    assert [line[0] for line in marker_lines(marker)] == [other.job_run_id]  # doomed ran 0 times
    assert get_run(engine, doomed.job_run_id) == cancelled
    assert len(transitions(engine, doomed.job_run_id)) == 3 and attempts(engine, doomed.job_run_id) == []
    with pytest.raises(ConflictError):
        control.cancel_run(engine, doomed.job_run_id, actor="alice")


def test_cancel_refuses_a_running_run_and_stop_ends_it_promptly(engine: Engine) -> None:
    job = define(engine, handler="engine_handlers:sleep", params=SECONDS)
    run = engine.submit(SubmitRequest(job, params={"seconds": "30"})).run
    rid = run.job_run_id

    # Stop is for running runs only: a scheduled run is refused and left exactly as it was.
    with pytest.raises(ConflictError):
        control.stop_run(engine, rid, actor="alice")
    assert get_run(engine, rid) == run and event_types(engine, rid) == []

    with running_worker(engine) as worker:
        running = wait_status(engine, rid, RunStatus.RUNNING)
        steps = transitions(engine, rid)
        with pytest.raises(ConflictError):
            control.cancel_run(engine, rid, actor="alice")
        assert get_run(engine, rid).status is RunStatus.RUNNING
        assert transitions(engine, rid) == steps and event_types(engine, rid) == ["job_started"]

        requested = control.stop_run(engine, rid, actor="alice", reason="enough")
        assert requested.stop_requested and requested.status is RunStatus.RUNNING
        t0 = time.monotonic()
        done = wait_status(engine, rid, RunStatus.CANCELLED)
        assert time.monotonic() - t0 < 1.5

    assert transitions(engine, rid) == [*steps, ("RUNNING", "CANCELLED", "stopped_by_user", 1)]
    assert done.attempt == 1 and done.lease_owner is None and not done.stop_requested
    assert done.started_at == running.started_at and done.ended_at is not None
    (attempt,) = attempts(engine, rid)
    assert (attempt.outcome, attempt.worker_id) == ("stopped", worker.worker_id)
    assert event_types(engine, rid) == ["job_started", "job_stop_requested", "job_cancelled"]
    with pytest.raises(ConflictError):
        control.stop_run(engine, rid, actor="alice")


def test_stop_kills_a_command_that_ignores_sigterm_after_the_grace_period(engine: Engine) -> None:
    job = define(engine, handler=None, runner="py", body=STUBBORN_BODY)
    rid = engine.submit(SubmitRequest(job)).run.job_run_id
    ready = Path(engine.config.data_dir) / "runs" / rid / "attempt-1" / "ready"
    with running_worker(engine):
        wait_until(ready.exists, timeout=15, what="the command to ignore SIGTERM")
        pid = int(ready.read_text())
        control.stop_run(engine, rid, actor="alice")
        t0 = time.monotonic()
        done = wait_status(engine, rid, RunStatus.CANCELLED, timeout=10)
        took = time.monotonic() - t0

    assert 0.5 <= took < 3.0  # SIGTERM was ignored; SIGKILL came after the runner's 0.5 s grace
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert transitions(engine, rid)[-1] == ("RUNNING", "CANCELLED", "stopped_by_user", 1)
    assert done.error_code is None and [a.outcome for a in attempts(engine, rid)] == ["stopped"]
    log = (Path(engine.config.data_dir) / "runs" / rid / "run.log").read_text()
    assert "exited with signal SIGKILL" in log


def test_graceful_shutdown_releases_claimed_runs_and_lets_the_running_one_finish(engine: Engine, marker: Path) -> None:
    slow = define(engine, handler="engine_handlers:sleep", params=SECONDS)
    quick = define(engine, handler="engine_handlers:marker")
    busy = engine.submit(SubmitRequest(slow, params={"seconds": "1.5"})).run.job_run_id
    with running_worker(engine, concurrency=1, prefetch=5) as worker:
        wait_status(engine, busy, RunStatus.RUNNING)
        queued = [r.run.job_run_id for r in engine.submit_many([SubmitRequest(quick) for _ in range(5)])]
        wait_all(engine, queued, RunStatus.DISPATCHED)
        assert {get_run(engine, q).lease_owner for q in queued} == {worker.worker_id}

        worker.stop()
        wait_all(engine, queued, RunStatus.SCHEDULED, timeout=1.0)  # released at once, not at the end
        assert get_run(engine, busy).status is RunStatus.RUNNING
        assert worker.wait_stopped(10)

    done = get_run(engine, busy)
    assert done.status is RunStatus.COMPLETED and done.result == {"slept": 1.5}
    for q in queued:
        run = get_run(engine, q)
        assert run.attempt == 0 and run.lease_owner is None and run.lease_expires_at is None
        assert transitions(engine, q)[-2:] == [
            ("SCHEDULED", "DISPATCHED", "claimed", 0),
            ("DISPATCHED", "SCHEDULED", "released_on_shutdown", 0),
        ]
        assert attempts(engine, q) == [] and event_types(engine, q) == []
    assert not marker.exists()

    # Released without using an attempt: the next worker runs each once, as attempt 1.
    with running_worker(engine):
        wait_all(engine, queued, RunStatus.COMPLETED)
    assert sorted(line[0] for line in marker_lines(marker)) == sorted(queued)
    assert {line[1] for line in marker_lines(marker)} == {"1"}
    assert all(get_run(engine, q).attempt == 1 for q in queued)


def test_shutdown_grace_bounds_how_long_a_running_attempt_may_keep_the_worker(engine: Engine) -> None:
    """Past the grace period the attempt is handed back, not failed: with the default policy (no
    retries) the run is not dead-lettered; the next worker runs it, its history showing both."""
    job = define(engine, handler="engine_handlers:patient_first_attempt")
    rid = engine.submit(SubmitRequest(job)).run.job_run_id
    with running_worker(engine, shutdown_grace=timedelta(seconds=0.3)) as worker:
        wait_status(engine, rid, RunStatus.RUNNING)
        t0 = time.monotonic()
        worker.stop()
        assert worker.wait_stopped(5)
        assert time.monotonic() - t0 < 2.0
    run = get_run(engine, rid)
    assert run.status is RunStatus.SCHEDULED and run.attempt == 1 and run.max_attempts == 2
    assert transitions(engine, rid)[-1] == ("RUNNING", "SCHEDULED", "released_on_shutdown", 1)
    assert [a.outcome for a in attempts(engine, rid)] == ["released_on_shutdown"]
    assert get_run(engine, rid).error_code is None
    # The next worker runs it to the end, as attempt 2 of 2.
    with running_worker(engine):
        wait_status(engine, rid, RunStatus.COMPLETED)
    assert [a.outcome for a in attempts(engine, rid)] == ["released_on_shutdown", "succeeded"]
    from jobgate.service import audit, replay

    assert replay.replay(engine, rid).match  # the handed-back attempt replays from the record
    assert all(r.ok for r in audit.verify_records(engine, ["default"]))  # and its seal holds


def test_a_stop_requested_before_a_failing_attempt_ends_is_not_lost(engine: Engine, marker: Path) -> None:
    # The race made deterministic: stop checks are 60 s apart, so the attempt ends (failing) after the
    # stop was recorded but before the worker looked. The recorded intent must still win.
    warmup = define(engine, handler="engine_handlers:sleep", params=SECONDS)
    job = define(engine, handler="engine_handlers:gated_fail_once", retry_policy="test_fixed_v1")
    first = engine.submit(SubmitRequest(warmup, params={"seconds": "0.5"})).run.job_run_id
    with running_worker(engine, stop_check_interval=timedelta(seconds=60)):
        # While ``first`` ran, the worker made its first stop check; the next one is 60 s away.
        wait_status(engine, first, RunStatus.COMPLETED)
        rid = engine.submit(SubmitRequest(job)).run.job_run_id
        wait_until(lambda: ["waiting", rid, "1"] in marker_lines(marker), what="attempt 1 to wait on its gate")
        control.stop_run(engine, rid, actor="alice")
        engine_handlers.open_gate(marker)
        wait_until(lambda: get_run(engine, rid).status.is_terminal, what="the stopped run to end")
    done = get_run(engine, rid)
    assert done.status is RunStatus.CANCELLED, transitions(engine, rid)
    assert done.attempt == 1 and not done.stop_requested
    assert transitions(engine, rid)[-1] == ("RUNNING", "CANCELLED", "stopped_by_user", 1)
    assert [a.outcome for a in attempts(engine, rid)] == ["stopped"]
    assert marker_lines(marker)[-1] == ["waiting", rid, "1"]  # never retried


def test_a_stop_the_handler_never_heard_ends_completed_with_what_it_did(engine: Engine, marker: Path) -> None:
    # The handler sleeps deaf to the stop and finishes its work: the run says so (its result
    # kept, not CANCELLED), as a workflow step that completed anyway is then compensated.
    job = define(engine, handler="engine_handlers:slow_marker", params=SECONDS)
    rid = engine.submit(SubmitRequest(job, params={"seconds": "1"})).run.job_run_id
    with running_worker(engine):
        wait_until(lambda: any(line[:2] == ["start", rid] for line in marker_lines(marker)), what="the start")
        control.stop_run(engine, rid, actor="alice", reason="enough")
        wait_until(lambda: get_run(engine, rid).status.is_terminal, what="the run to end")
    done = get_run(engine, rid)
    assert done.status is RunStatus.COMPLETED and done.result == {}, transitions(engine, rid)
    assert marker_lines(marker)[-1][:2] == ["done", rid]
    assert [a.outcome for a in attempts(engine, rid)] == ["succeeded"]
