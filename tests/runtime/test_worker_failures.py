"""Failures through a real worker: retries, dead letters, escalation, requeue, timeouts."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pytest
from runtime_support import (
    attempts,
    dead_letters,
    event_types,
    events,
    get_run,
    running_worker,
    transitions,
    wait_status,
    wait_until,
)

from helpers import define, make_config
from jobgate.core.errors import ConflictError
from jobgate.core.models import DeadLetterReason
from jobgate.core.states import RunStatus
from jobgate.runtime import rescuer
from jobgate.service import control
from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest

OK_ON = [{"name": "ok_on", "pattern": "[0-9]+"}]
SECONDS = [{"name": "seconds", "pattern": "[0-9.]+"}]


def _claim_and_start(attempt_before: int, from_status: str = "RETRY_WAIT") -> list[tuple[str | None, str, str, int]]:
    return [
        (from_status, "DISPATCHED", "claimed", attempt_before),
        ("DISPATCHED", "RUNNING", "started", attempt_before + 1),
    ]


def test_retryable_failures_are_retried_until_success_with_the_same_idempotency_key(engine: Engine) -> None:
    job = define(engine, handler="engine_handlers:fail_until", retry_policy="test_fixed_v1", params=OK_ON)
    run = engine.submit(SubmitRequest(job, params={"ok_on": "3"})).run
    with running_worker(engine):
        done = wait_status(engine, run.job_run_id, RunStatus.COMPLETED)
    rid = run.job_run_id

    assert transitions(engine, rid) == [
        (None, "CREATED", "created", 0),
        ("CREATED", "SCHEDULED", "admitted", 0),
        *_claim_and_start(0, "SCHEDULED"),
        ("RUNNING", "RETRY_WAIT", "retry_scheduled", 1),
        *_claim_and_start(1),
        ("RUNNING", "RETRY_WAIT", "retry_scheduled", 2),
        *_claim_and_start(2),
        ("RUNNING", "COMPLETED", "succeeded", 3),
    ]
    assert done.attempt == 3 and done.max_attempts == 3 and done.result == {"attempt": 3}
    assert done.idempotency_key == run.idempotency_key and done.job_run_id == rid
    assert [(a.attempt, a.outcome, a.error_code) for a in attempts(engine, rid)] == [
        (1, "retryable_failure", "FLAKY"),
        (2, "retryable_failure", "FLAKY"),
        (3, "succeeded", None),
    ]

    stored = events(engine, rid)
    assert [e.event_type for e in stored] == [
        "job_started",
        "job_failed",
        "job_retried",
        "job_started",
        "job_failed",
        "job_retried",
        "job_started",
        "job_completed",
    ]
    failed = [e.payload for e in stored if e.event_type == "job_failed"]
    assert [(p["attempt"], p["retryable"], p["error_code"]) for p in failed] == [(1, True, "FLAKY"), (2, True, "FLAKY")]
    retried = [e.payload for e in stored if e.event_type == "job_retried"]
    assert [(p["attempt"], p["next_attempt"]) for p in retried] == [(1, 2), (2, 3)]
    assert {e.payload["idempotency_key"] for e in stored} == {run.idempotency_key}
    assert dead_letters(engine, rid) == []


def test_retryable_failure_is_dead_lettered_after_exactly_max_attempts(engine: Engine) -> None:
    job = define(engine, handler="engine_handlers:fail_retryable", retry_policy="test_fixed_v1")
    run = engine.submit(SubmitRequest(job)).run
    with running_worker(engine):
        done = wait_status(engine, run.job_run_id, RunStatus.DEAD_LETTERED)
    rid = run.job_run_id

    steps = transitions(engine, rid)
    assert [s for s in steps if s[0] == "RUNNING"] == [
        ("RUNNING", "RETRY_WAIT", "retry_scheduled", 1),
        ("RUNNING", "RETRY_WAIT", "retry_scheduled", 2),
        ("RUNNING", "DEAD_LETTERED", "retries_exhausted", 3),
    ]
    assert len(steps) == 2 + 3 * 3
    assert done.attempt == 3 and done.error_code == "TARGET_UNAVAILABLE" and done.ended_at is not None
    assert done.lease_owner is None
    assert [a.outcome for a in attempts(engine, rid)] == ["retryable_failure"] * 3

    (letter,) = dead_letters(engine, rid)
    assert letter.reason is DeadLetterReason.MAXIMUM_RETRIES_EXCEEDED
    assert (letter.last_error_code, letter.attempts, letter.requires_manual_review) == ("TARGET_UNAVAILABLE", 3, False)
    assert letter.resolved_at is None

    stored = events(engine, rid)
    assert [e.event_type for e in stored][-2:] == ["job_failed", "job_dead_lettered"]
    assert stored[-2].payload["retryable"] is False
    last = stored[-1].payload
    assert last["event_type"] == "trustgate.scheduler.dead_lettered"
    assert (last["dead_letter_id"], last["reason"], last["attempts"]) == (
        letter.dead_letter_id,
        "maximum_retries_exceeded",
        3,
    )
    assert event_types(engine, rid).count("job_started") == 3


def test_non_retryable_failure_is_dead_lettered_after_one_attempt(engine: Engine) -> None:
    job = define(engine, handler="engine_handlers:fail_final", retry_policy="test_fixed_v1")
    run = engine.submit(SubmitRequest(job)).run
    with running_worker(engine):
        done = wait_status(engine, run.job_run_id, RunStatus.DEAD_LETTERED)
    rid = run.job_run_id

    assert transitions(engine, rid)[-1] == ("RUNNING", "DEAD_LETTERED", "failed_non_retryable", 1)
    assert done.attempt == 1 and done.max_attempts == 3 and done.error_code == "BAD_INPUT"
    assert [(a.outcome, a.error_code) for a in attempts(engine, rid)] == [("non_retryable_failure", "BAD_INPUT")]
    (letter,) = dead_letters(engine, rid)
    assert letter.reason is DeadLetterReason.NON_RETRYABLE_VALIDATION_FAILURE
    assert (letter.last_error_code, letter.attempts) == ("BAD_INPUT", 1)
    assert event_types(engine, rid) == ["job_started", "job_failed", "job_dead_lettered"]


def test_manual_review_policy_escalates_after_its_attempts(engine: Engine) -> None:
    job = define(engine, handler="engine_handlers:fail_retryable", retry_policy="test_review_v1")
    run = engine.submit(SubmitRequest(job)).run
    with running_worker(engine):
        done = wait_status(engine, run.job_run_id, RunStatus.ESCALATED)
    rid = run.job_run_id

    assert [s for s in transitions(engine, rid) if s[0] == "RUNNING"] == [
        ("RUNNING", "RETRY_WAIT", "retry_scheduled", 1),
        ("RUNNING", "ESCALATED", "escalated_for_review", 2),
    ]
    assert done.attempt == 2 and done.max_attempts == 2 and done.error_code == "TARGET_UNAVAILABLE"
    assert len(attempts(engine, rid)) == 2
    assert dead_letters(engine, rid) == []
    stored = events(engine, rid)
    assert [e.event_type for e in stored][-2:] == ["job_failed", "job_escalated"]
    assert stored[-1].payload["requires_manual_review"] is True and stored[-1].payload["attempts"] == 2


def test_requeue_of_a_dead_lettered_run_runs_it_again_under_the_same_key(engine: Engine) -> None:
    job = define(engine, handler="engine_handlers:fail_until", retry_policy="test_fixed_v1", params=OK_ON)
    run = engine.submit(SubmitRequest(job, params={"ok_on": "4"})).run
    rid = run.job_run_id
    with running_worker(engine) as worker:
        dead = wait_status(engine, rid, RunStatus.DEAD_LETTERED)
        assert dead.attempt == 3 and dead.max_attempts == 3
        (letter,) = dead_letters(engine, rid)
        assert letter.reason is DeadLetterReason.MAXIMUM_RETRIES_EXCEEDED and letter.last_error_code == "FLAKY"

        requeued = control.requeue_run(engine, rid, actor="alice")
        assert (
            requeued.status in (RunStatus.SCHEDULED, RunStatus.DISPATCHED, RunStatus.RUNNING, RunStatus.COMPLETED)
            and requeued.job_run_id == rid
        )
        assert requeued.idempotency_key == run.idempotency_key
        assert requeued.max_attempts == 4 and requeued.attempt == 3
        done = wait_status(engine, rid, RunStatus.COMPLETED)

    steps = transitions(engine, rid)
    i = steps.index(("RUNNING", "DEAD_LETTERED", "retries_exhausted", 3))
    assert steps[i + 1 :] == [
        ("DEAD_LETTERED", "SCHEDULED", "requeued", 3),
        ("SCHEDULED", "DISPATCHED", "claimed", 3),
        ("DISPATCHED", "RUNNING", "started", 4),
        ("RUNNING", "COMPLETED", "succeeded", 4),
    ]
    assert done.attempt == 4 and done.result == {"attempt": 4} and done.idempotency_key == run.idempotency_key
    assert done.error_code is None
    assert [a.attempt for a in attempts(engine, rid)] == [1, 2, 3, 4]
    assert attempts(engine, rid)[-1].worker_id == worker.worker_id
    (resolved,) = dead_letters(engine, rid)
    assert resolved.dead_letter_id == letter.dead_letter_id
    assert resolved.resolved_at is not None and resolved.resolution == "requeued by alice"
    with engine.store.read() as tx:
        assert tx.dead_letter_open_for(rid) is None
    assert event_types(engine, rid)[-3:] == ["job_requeued", "job_started", "job_completed"]
    with pytest.raises(ConflictError):
        control.requeue_run(engine, rid, actor="alice")  # a completed run is not requeued


def test_requeue_of_an_escalated_run_gives_it_one_more_attempt(engine: Engine) -> None:
    job = define(engine, handler="engine_handlers:fail_until", retry_policy="test_review_v1", params=OK_ON)
    run = engine.submit(SubmitRequest(job, params={"ok_on": "3"})).run
    rid = run.job_run_id
    with running_worker(engine):
        wait_status(engine, rid, RunStatus.ESCALATED)
        requeued = control.requeue_run(engine, rid, actor="bob")
        assert requeued.max_attempts == 3
        done = wait_status(engine, rid, RunStatus.COMPLETED)
    assert done.attempt == 3 and done.result == {"attempt": 3}
    assert ("ESCALATED", "SCHEDULED", "requeued", 2) in transitions(engine, rid)
    assert dead_letters(engine, rid) == []


def test_execution_timeout_ends_each_attempt_and_dead_letters_after_max_attempts(engine: Engine) -> None:
    job = define(
        engine,
        handler="engine_handlers:sleep",
        retry_policy="test_fixed_v1",
        timeout_policy="test_exec_timeout_v1",
        params=SECONDS,
    )
    run = engine.submit(SubmitRequest(job, params={"seconds": "5"})).run
    rid = run.job_run_id
    assert run.execution_timeout == timedelta(seconds=0.5)
    start = time.monotonic()
    with running_worker(engine):
        done = wait_status(engine, rid, RunStatus.DEAD_LETTERED)
    elapsed = time.monotonic() - start

    assert elapsed < 5.0  # three attempts of a 5 s sleep, each cut at 0.5 s
    tries = attempts(engine, rid)
    assert [(a.attempt, a.outcome, a.error_code) for a in tries] == [
        (n, "execution_timeout", "EXECUTION_TIMEOUT") for n in (1, 2, 3)
    ]
    for a in tries:
        assert a.ended_at is not None
        assert timedelta(seconds=0.5) <= a.ended_at - a.started_at < timedelta(seconds=1.5)
    assert [s for s in transitions(engine, rid) if s[0] == "RUNNING"] == [
        ("RUNNING", "RETRY_WAIT", "execution_timeout", 1),
        ("RUNNING", "RETRY_WAIT", "execution_timeout", 2),
        ("RUNNING", "DEAD_LETTERED", "retries_exhausted", 3),
    ]
    assert done.error_code == "EXECUTION_TIMEOUT" and done.result is None
    (letter,) = dead_letters(engine, rid)
    assert (letter.reason, letter.last_error_code, letter.attempts) == (
        DeadLetterReason.MAXIMUM_RETRIES_EXCEEDED,
        "EXECUTION_TIMEOUT",
        3,
    )


def test_queue_timeout_dead_letters_a_run_nobody_claimed_and_leaves_others_alone(engine: Engine) -> None:
    timed = define(engine, timeout_policy="test_queue_timeout_v1")
    untimed = define(engine)
    late = engine.submit(SubmitRequest(timed, request_id="late")).run
    future = engine.submit(SubmitRequest(timed, request_id="future", due_at=late.created_at + timedelta(seconds=5))).run
    plain = engine.submit(SubmitRequest(untimed, request_id="plain")).run
    assert late.queue_deadline_at == late.due_at + timedelta(seconds=0.2)

    now = late.created_at + timedelta(seconds=1)
    assert rescuer.sweep(engine, now) == rescuer.SweepResult(lease_expired=0, released=0, queue_expired=1)

    dead = get_run(engine, late.job_run_id)
    assert dead.status is RunStatus.DEAD_LETTERED and dead.attempt == 0
    assert dead.error_code == "QUEUE_TIMEOUT_EXCEEDED" and dead.ended_at == now
    assert dead.error_message is not None and "did not start before its queue deadline" in dead.error_message
    assert transitions(engine, late.job_run_id)[-1] == ("SCHEDULED", "DEAD_LETTERED", "queue_timeout", 0)
    assert attempts(engine, late.job_run_id) == []
    (letter,) = dead_letters(engine, late.job_run_id)
    assert (letter.reason, letter.last_error_code, letter.attempts) == (
        DeadLetterReason.QUEUE_TIMEOUT_EXCEEDED,
        "QUEUE_TIMEOUT_EXCEEDED",
        0,
    )
    assert event_types(engine, late.job_run_id) == ["job_dead_lettered"]

    for other in (future, plain):
        assert get_run(engine, other.job_run_id) == other
        assert len(transitions(engine, other.job_run_id)) == 2
        assert dead_letters(engine, other.job_run_id) == []
    # Idempotent: a second sweep at the same instant changes nothing.
    assert rescuer.sweep(engine, now) == rescuer.SweepResult(0, 0, 0)
    assert len(transitions(engine, late.job_run_id)) == 3


def test_a_run_that_started_is_not_dead_lettered_by_its_queue_timeout_while_waiting_to_retry(
    engine: Engine, tmp_path: Path
) -> None:
    # A queue timeout long enough for a busy machine's first claim (a 0.2 s one was missed under
    # a loaded CI run), and an attempt longer than it.
    queue = {"timeout_policy_id": "test_queue_1500ms_v1", "queue_timeout_seconds": 1.5}
    custom = Engine(engine.store, make_config(tmp_path, timeout_policies=[queue]))
    job = define(
        custom,
        handler="engine_handlers:slow_fail_until",
        retry_policy="test_fixed_v1",
        timeout_policy="test_queue_1500ms_v1",
        params=[*OK_ON, {"name": "delay", "pattern": "[0-9.]+"}],
    )
    with running_worker(custom) as worker:
        # Submit only once the worker is up and idle, so the first claim is not what is timed.
        assert worker.idle.wait(10), "the worker never idled"
        run = custom.submit(SubmitRequest(job, params={"ok_on": "2", "delay": "2"})).run
        # Attempt 1 takes 2 s (longer than the 1.5 s queue timeout) and fails retryably;
        # the retry is due at once (0 s delay), so attempt 2 should run and succeed.
        wait_until(lambda: get_run(custom, run.job_run_id).status.is_terminal, timeout=15, what="the run to end")
    done = get_run(custom, run.job_run_id)
    assert done.status is RunStatus.COMPLETED, (done.status, done.error_code, transitions(custom, run.job_run_id))
    assert done.attempt == 2


def test_a_retry_that_waits_too_long_for_a_worker_is_dead_lettered_by_its_queue_timeout(
    engine: Engine, tmp_path: Path
) -> None:
    """Each wait for a worker is bounded: the deadline restarts from the retry's due time."""
    slow_retry = {
        "retry_policy_id": "test_slow_retry_v1",
        "strategy": "fixed_delay",
        "max_attempts": 3,
        "initial_delay_seconds": 60,
        "max_delay_seconds": 60,
    }
    # A queue timeout long enough that the first claim never misses it on a busy machine (the
    # test is about the wait for the retry, judged below at chosen instants).
    queue_3s = {"timeout_policy_id": "test_queue_3s_v1", "queue_timeout_seconds": 3}
    custom = Engine(engine.store, make_config(tmp_path, retry_policies=[slow_retry], timeout_policies=[queue_3s]))
    job = define(
        custom,
        handler="engine_handlers:fail_retryable",
        retry_policy="test_slow_retry_v1",
        timeout_policy="test_queue_3s_v1",
    )
    with running_worker(custom) as worker:
        assert worker.idle.wait(10), "the worker never idled"  # the first claim is not timed
        rid = custom.submit(SubmitRequest(job)).run.job_run_id
        waiting = wait_status(custom, rid, RunStatus.RETRY_WAIT)
    assert waiting.next_retry_at is not None and waiting.due_at == waiting.next_retry_at
    assert waiting.queue_deadline_at == waiting.next_retry_at + timedelta(seconds=3)

    assert rescuer.sweep(custom, waiting.next_retry_at + timedelta(seconds=2.9)) == rescuer.SweepResult(0, 0, 0)
    late = waiting.next_retry_at + timedelta(seconds=4)
    assert rescuer.sweep(custom, late) == rescuer.SweepResult(0, 0, 1)
    dead = get_run(custom, rid)
    assert dead.status is RunStatus.DEAD_LETTERED and dead.attempt == 1
    assert transitions(custom, rid)[-1] == ("RETRY_WAIT", "DEAD_LETTERED", "queue_timeout", 1)
    (letter,) = dead_letters(custom, rid)
    assert (letter.reason, letter.attempts) == (DeadLetterReason.QUEUE_TIMEOUT_EXCEEDED, 1)


def test_a_run_keeps_the_retry_policy_it_was_admitted_under(engine: Engine, tmp_path: Path) -> None:
    from helpers import make_config
    from jobgate.store.sqlstore import Store

    job = define(engine, handler="engine_handlers:fail_until", retry_policy="test_fixed_v1", params=OK_ON)
    rid = engine.submit(SubmitRequest(job, params={"ok_on": "3"})).run.job_run_id
    # The operator now edits the named policy down to a single attempt: the run is not affected.
    edited = make_config(
        tmp_path / "edited",
        retry_policies=[
            {"retry_policy_id": "test_fixed_v1", "strategy": "none", "max_attempts": 1},
            {"retry_policy_id": "test_review_v1", "strategy": "none", "max_attempts": 1},
        ],
    )
    later = Engine(Store(engine.store.url), edited)
    try:
        with running_worker(later):
            done = wait_status(later, rid, RunStatus.COMPLETED)
        assert done.attempt == 3
        assert done.bound_retry_policy is not None and done.bound_retry_policy["max_attempts"] == 3
    finally:
        later.store.dispose()


@pytest.mark.parametrize("kind", ["KeyboardInterrupt", "GeneratorExit", "BaseException"])
def test_a_handler_raising_past_exception_fails_its_attempt_and_the_worker_goes_on(engine: Engine, kind: str) -> None:
    """It killed the pool's thread: the run stayed RUNNING and the next run waited for ever."""
    bad = define(engine, handler="engine_handlers:interrupted", retry_policy="no_retry_v1", params=[{"name": "kind"}])
    good = define(engine, handler="engine_handlers:succeed")
    failed = engine.submit(SubmitRequest(bad, params={"kind": kind})).run
    after = engine.submit(SubmitRequest(good)).run
    with running_worker(engine, concurrency=1):
        done = wait_status(engine, failed.job_run_id, RunStatus.DEAD_LETTERED)
        wait_status(engine, after.job_run_id, RunStatus.COMPLETED)
    assert done.error_code == kind and "raised by the handler" in (done.error_message or "")


def test_a_result_that_is_not_unicode_text_fails_its_run_alone(engine: Engine) -> None:
    """A lone surrogate in a result made every settlement of the worker's batch unwritable: the
    innocent runs beside it were dead-lettered as lease expiries and SIGTERM went unheard."""
    bad = define(engine, handler="engine_handlers:surrogate_result", retry_policy="no_retry_v1")
    good = define(engine, handler="engine_handlers:succeed")
    failed = engine.submit(SubmitRequest(bad)).run
    fine = [engine.submit(SubmitRequest(good, request_id=f"f{i}")).run for i in range(3)]
    with running_worker(engine):
        done = wait_status(engine, failed.job_run_id, RunStatus.DEAD_LETTERED)
        for run in fine:
            wait_status(engine, run.job_run_id, RunStatus.COMPLETED)
    assert done.error_code == "INVALID_RESULT" and "surrogate" in (done.error_message or "")


def test_a_failure_holding_what_a_store_refuses_is_recorded_escaped(engine: Engine) -> None:
    """PostgreSQL refuses NUL in text, no store takes a lone surrogate: the settlement failed
    and the run was dead-lettered as a lease expiry, its real error lost."""
    job = define(engine, handler="engine_handlers:unstorable_failure", retry_policy="test_fixed_v1")
    run = engine.submit(SubmitRequest(job)).run
    with running_worker(engine):
        done = wait_status(engine, run.job_run_id, RunStatus.DEAD_LETTERED)
    assert done.error_code == "CODE_X"
    assert done.error_message == "bad byte \\x00 in caf\\udce9"
    (letter,) = dead_letters(engine, run.job_run_id)
    assert letter.reason is DeadLetterReason.NON_RETRYABLE_VALIDATION_FAILURE and letter.last_error_code == "CODE_X"


def test_a_dead_letter_already_retried_is_not_requeued_too(engine: Engine) -> None:
    """Both would have run: the source requeued and its retry, the same work twice."""
    from jobgate.service import retries

    job = define(engine, handler="engine_handlers:fail_final", retry_policy="test_fixed_v1")
    run = engine.submit(SubmitRequest(job)).run
    with running_worker(engine):
        wait_status(engine, run.job_run_id, RunStatus.DEAD_LETTERED)
    retry, _ = retries.retry(engine, run.job_run_id, actor="alice", tenant_id="default")
    with pytest.raises(ConflictError) as refused:
        control.requeue_run(engine, run.job_run_id, actor="bob")
    assert refused.value.field == "job_run_id" and retry.job_run_id in refused.value.message
    assert get_run(engine, run.job_run_id).status is RunStatus.DEAD_LETTERED  # nothing changed


def test_a_retry_resolves_its_sources_dead_letter(engine: Engine) -> None:
    """Found by a review: a retried dead letter stayed open for ever (listed as waiting, never
    retired by retention), and no command could close it. The retry resolves it, in its own
    transaction, and the source's record still verifies (resolved in place, sealed again)."""
    from jobgate.service import audit, retries

    job = define(engine, handler="engine_handlers:fail_final", retry_policy="test_fixed_v1")
    run = engine.submit(SubmitRequest(job)).run
    with running_worker(engine):
        wait_status(engine, run.job_run_id, RunStatus.DEAD_LETTERED)
    retry, created = retries.retry(engine, run.job_run_id, actor="alice", tenant_id="default")
    assert created
    (letter,) = dead_letters(engine, run.job_run_id)
    assert letter.resolved_at is not None and letter.resolution == f"retried as {retry.job_run_id} by alice"
    with engine.store.read() as tx:
        assert tx.dead_letter_open_for(run.job_run_id) is None
    audit.seal_pending(engine, engine.clock.now())
    assert [f.message() for r in audit.verify_records(engine, ["default"]) for f in r.findings] == []


def test_a_retry_prepared_while_its_source_is_requeued_is_not_made(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by a review: a retry read its source (dead-lettered), a requeue committed, then the
    retry was made: the source and its retry both ran. The retry is decided under a lock on
    its source, which the requeue takes too."""
    from helpers import count
    from jobgate.service import retries

    job = define(engine, handler="engine_handlers:fail_final", retry_policy="test_fixed_v1")
    run = engine.submit(SubmitRequest(job)).run
    with running_worker(engine):
        wait_status(engine, run.job_run_id, RunStatus.DEAD_LETTERED)
    original = retries.retry_request

    def requeued_meanwhile(*args: object, **kwargs: object) -> object:
        control.requeue_run(engine, run.job_run_id, actor="bob")  # commits between the read and the write
        return original(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(retries, "retry_request", requeued_meanwhile)
    with pytest.raises(ConflictError) as refused:
        retries.retry(engine, run.job_run_id, actor="alice", tenant_id="default")
    assert refused.value.field == "status" and "requeued meanwhile" in refused.value.message
    assert count(engine, "job_runs", f"retry_of = '{run.job_run_id}'") == 0  # nothing made
    assert get_run(engine, run.job_run_id).status is RunStatus.SCHEDULED  # the requeue stands


def test_a_requeue_and_a_retry_racing_never_both_win(engine: Engine) -> None:
    """The same race without a hook: each of several dead-lettered runs is requeued and retried
    by two threads released together; never both."""
    import threading
    from collections.abc import Callable
    from functools import partial

    from jobgate.service import retries

    job = define(engine, handler="engine_handlers:fail_final", retry_policy="test_fixed_v1")
    ids = [engine.submit(SubmitRequest(job, request_id=f"race-{i}")).run.job_run_id for i in range(6)]
    with running_worker(engine):
        for rid in ids:
            wait_status(engine, rid, RunStatus.DEAD_LETTERED)

    def attempt(name: str, act: Callable[[], object], gate: threading.Barrier, wins: list[str]) -> None:
        gate.wait()
        try:
            act()
            wins.append(name)
        except ConflictError:
            pass

    for rid in ids:
        wins: list[str] = []
        gate = threading.Barrier(2)
        threads = [
            threading.Thread(
                target=attempt, args=("requeue", partial(control.requeue_run, engine, rid, actor="bob"), gate, wins)
            ),
            threading.Thread(
                target=attempt,
                args=("retry", partial(retries.retry, engine, rid, actor="alice", tenant_id="default"), gate, wins),
            ),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert len(wins) == 1, (rid, wins)


def test_a_workers_own_rescuer_leaves_its_expired_leases_to_it(engine: Engine) -> None:
    """Found by a regression review: cut from the database past its leases, a worker's own
    rescuer dead-lettered its runs as LEASE_EXPIRED as the database came back, then refused the
    successes the same worker was holding. The worker sweeping is alive: its leases are its own
    to settle; another worker's rescuer takes them back only if it dies."""
    from jobgate.store.base import RunsClaim

    run = engine.submit(SubmitRequest(define(engine), request_id="held")).run
    now = engine.clock.now()
    with engine.store.write() as tx:
        claimed = tx.runs_claim(RunsClaim("worker-me", ("default",), 1, now, now + timedelta(seconds=1))).runs()
    assert [r.job_run_id for r in claimed] == [run.job_run_id]
    later = now + timedelta(seconds=5)  # its lease expired while the worker could not renew it
    held = {run.job_run_id}
    assert rescuer.sweep(engine, later, spare_owner="worker-me", spared=held) == rescuer.SweepResult(0, 0, 0)
    assert get_run(engine, run.job_run_id).lease_owner == "worker-me"
    # a run the worker gave up (its settlement could not be written) is no longer one it holds
    assert rescuer.sweep(engine, later, spare_owner="worker-me", spared=set()).released == 1  # claimed, not started
    assert get_run(engine, run.job_run_id).lease_owner is None


def test_a_run_whose_row_another_transaction_holds_is_left_for_the_next_sweep(
    database_url: str, engine: Engine
) -> None:
    """Found by a review: the rescuer waited on the row lock of a settlement whose completion
    effect outlasted its lease, and the worker it runs in stopped claiming meanwhile (1,414 runs
    waited 15 s). A held run is skipped, the rest recovered at once, the held one next time."""
    if engine.store.dialect != "postgresql":
        pytest.skip("SQLite has no row locks: its one writer holds the whole file")
    import threading

    from jobgate.store.sqlstore import Store

    timed = define(engine, timeout_policy="test_queue_timeout_v1")
    held, free = (engine.submit(SubmitRequest(timed, request_id=r)).run for r in ("held", "free"))
    now = max(held.created_at, free.created_at) + timedelta(seconds=1)
    locked, release = threading.Event(), threading.Event()
    other = Store(database_url)

    def hold() -> None:
        with other.write() as tx:
            tx.run_lock(held.job_run_id)
            locked.set()
            release.wait(60)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert locked.wait(30)
        swept: list[rescuer.SweepResult] = []
        sweeper = threading.Thread(target=lambda: swept.append(rescuer.sweep(engine, now)))
        sweeper.start()
        sweeper.join(30)
        assert not sweeper.is_alive(), "the sweep waited on a row another transaction holds"
        assert swept == [rescuer.SweepResult(0, 0, 1)]
        assert get_run(engine, free.job_run_id).status is RunStatus.DEAD_LETTERED
        assert get_run(engine, held.job_run_id).status is RunStatus.SCHEDULED
    finally:
        release.set()
        holder.join(30)
        other.dispose()
    assert rescuer.sweep(engine, now) == rescuer.SweepResult(0, 0, 1)
    assert get_run(engine, held.job_run_id).status is RunStatus.DEAD_LETTERED
