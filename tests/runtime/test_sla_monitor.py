"""The SLA monitor on both backends: every deadline kind, reminders, once-only records (one
monitor twice, two at once), breaches seen while a real worker runs the job, escalation of a
running run (the worker's completion refused by the fence) and of a waiting one, and workflow
runs. Time is explicit: each pass is given its ``now`` (the fake clock), runs are claimed,
started and settled at chosen instants, so no test waits for a deadline to pass."""

from __future__ import annotations

import threading
import uuid
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sla_handlers
import yaml
from runtime_support import dead_letters, event_types, events, get_run, running_worker, transitions, wait_until
from sqlalchemy import select, text

from helpers import config_document, count, define, make_config
from jobgate.config import JobgateConfig
from jobgate.contracts import event_contract, validate
from jobgate.core import transitions as moves
from jobgate.core.decide import Outcome, OutcomeKind
from jobgate.core.models import DeadLetterReason, JobRun
from jobgate.core.settle import settle_attempt
from jobgate.core.sla import RUNS_CURSOR, DeadlineKind, Phase, record_id
from jobgate.core.states import RunStatus
from jobgate.runtime import rescuer
from jobgate.runtime.loops import LoopThread
from jobgate.runtime.sla import LEADER_LOCK, SlaMonitor
from jobgate.service import control, sla
from jobgate.service.engine import Engine
from jobgate.service.policies import settling_policy
from jobgate.service.replay import replay
from jobgate.service.submission import SubmitRequest
from jobgate.store import codec
from jobgate.store.base import RunsClaim
from jobgate.store.sql import sla as sla_rows
from jobgate.store.tables import workflow_runs, workflow_transitions
from jobgate.testing import connection

S = timedelta(seconds=1)
HOUR = timedelta(hours=1)
SECONDS = [{"name": "seconds", "pattern": "[0-9.]+"}]
SEED_23_FIELDS = {
    "event_type", "sla_breach_id", "job_run_id", "job_class", "eco_number", "sla_policy", "deadline",
    "breached_at", "severity", "requires_escalation",
}  # fmt: skip

POLICIES = [
    {"sla_policy_id": "sla_60", "deadline_seconds": 60, "remind_before_seconds": 10},
    {"sla_policy_id": "sla_60_escalating", "deadline_seconds": 60, "requires_escalation": True, "severity": "critical"},
    {"sla_policy_id": "escalate_after_120", "deadline_seconds": 3600, "escalation_after_seconds": 120},
    {
        "sla_policy_id": "quarantine_evidence",
        "deadline_seconds": 3600,
        "evidence_deadline_seconds": 30,
        "evidence_anchor_param": "opened_at",
    },
    {"sla_policy_id": "retry_30", "deadline_seconds": 3600, "retry_window_seconds": 30},
    {"sla_policy_id": "hour_escalating", "deadline_seconds": 3600, "requires_escalation": True},
    {"sla_policy_id": "hour", "deadline_seconds": 3600},
]


@pytest.fixture
def config(tmp_path: Path) -> JobgateConfig:
    return make_config(tmp_path, sla_policies=POLICIES)


# --- helpers -----------------------------------------------------------------------------------


def submit(engine: Engine, job: str, **kw: Any) -> JobRun:
    return engine.submit(SubmitRequest(job, request_id=uuid.uuid4().hex, **kw)).run


def start(engine: Engine, now: datetime, worker: str = "w-test") -> list[JobRun]:
    """Claim and start every due run at ``now`` (as a worker's cycle would)."""
    with engine.store.write() as tx:
        batch = tx.runs_claim(RunsClaim(worker, ("default",), 50, now, now + HOUR, start_now=50))
    return batch.runs()


def settle(engine: Engine, run: JobRun, kind: OutcomeKind, now: datetime, code: str | None = None) -> JobRun:
    """End the running attempt of ``run`` at ``now`` with ``kind`` (the worker's settlement)."""
    s = settle_attempt(
        run, Outcome(kind, code), settling_policy(engine.config, run), now=now, actor="w-test",
        started_at=run.started_at or now,
    )  # fmt: skip
    with engine.store.write() as tx:
        assert tx.runs_apply([moves.settled(s, run, now=now)])
    return get_run(engine, run.job_run_id)


def records(engine: Engine, subject_id: str) -> list[tuple[str, str]]:
    return sorted((b.kind, b.phase) for b in sla.breaches(engine, "default", subject_id=subject_id, limit=1000))


def sla_events(engine: Engine, subject_id: str, kind: str = "sla_breach") -> list[dict[str, Any]]:
    """The subject's events of ``kind``, each checked against its contract as delivered."""
    sql = "SELECT id, payload, created_at FROM outbox WHERE event_type = :t ORDER BY id"
    with engine.store.read() as tx:
        rows = connection(tx).execute(text(sql), {"t": kind}).all()
    found = []
    for event_id, payload, created in rows:
        event = codec.loads(payload)
        if subject_id in (event.get("job_run_id"), event.get("workflow_run_id")):
            validate(event_contract(kind), event | {"event_id": event_id, "recorded_at": _iso(codec.from_us(created))})
            found.append(event)
    return found


def audit_actions(engine: Engine, target_id: str) -> list[str]:
    with engine.store.read() as tx:
        rows = (
            connection(tx)
            .execute(text("SELECT action FROM audit_log WHERE target_id = :t ORDER BY seq"), {"t": target_id})
            .all()
        )
    return [r[0] for r in rows]


def prime(engine: Engine, now: datetime) -> None:
    """The first pass on a database places the cursors at the head; later ends are judged."""
    sla.check(engine, now)


# --- SLA deadline and reminders ------------------------------------------------------------------


def test_an_sla_breach_is_recorded_once_with_its_seed_event_and_an_audit_entry(engine: Engine) -> None:
    job = define(engine, sla_policy="sla_60", job_class="QUARANTINE_SLA_JOB")
    run = submit(engine, job, scope=_scope(eco_number="ECO-A123"))
    t0 = run.created_at
    assert sla.check(engine, t0 + 49 * S).reminders == 0  # before the reminder window
    assert records(engine, run.job_run_id) == []
    assert sla.check(engine, t0 + 50 * S).reminders == 1  # 10 s before the deadline
    assert sla.check(engine, t0 + 59 * S).reminders == 0  # once
    (reminder,) = sla_events(engine, run.job_run_id, "sla_reminder")
    assert reminder["kind"] == "sla_deadline" and reminder["deadline"] == _iso(t0 + 60 * S)
    result = sla.check(engine, t0 + 60 * S)
    assert (result.breaches, result.escalations) == (1, 0)
    assert sla.check(engine, t0 + 61 * S).breaches == 0
    assert sla.check(engine, t0 + 600 * S).breaches == 0
    assert records(engine, run.job_run_id) == [("sla_deadline", "breach"), ("sla_deadline", "reminder")]
    (event,) = sla_events(engine, run.job_run_id)
    assert set(event) >= SEED_23_FIELDS
    assert event == event | {
        "event_type": "trustgate.scheduler.sla_breach",
        "sla_breach_id": record_id("default", run.job_run_id, DeadlineKind.SLA_DEADLINE, Phase.BREACH),
        "job_run_id": run.job_run_id,
        "job_class": "QUARANTINE_SLA_JOB",
        "eco_number": "ECO-A123",
        "sla_policy": "sla_60",
        "deadline": _iso(t0 + 60 * S),
        "breached_at": _iso(t0 + 60 * S),
        "severity": "warning",
        "requires_escalation": False,
        "kind": "sla_deadline",
    }
    assert audit_actions(engine, run.job_run_id).count("sla.breach") == 1
    assert get_run(engine, run.job_run_id).status is RunStatus.SCHEDULED  # reported, not acted on


def test_a_run_that_ended_after_its_deadline_between_two_passes_is_still_reported(engine: Engine) -> None:
    job = define(engine, sla_policy="sla_60", handler="engine_handlers:succeed")
    late, on_time = submit(engine, job), submit(engine, job)
    t0 = max(late.created_at, on_time.created_at)
    prime(engine, t0)
    (a, b) = sorted(start(engine, t0 + S), key=lambda r: r.job_run_id != late.job_run_id)
    settle(engine, b, OutcomeKind.SUCCEEDED, t0 + 40 * S)  # on time
    settle(engine, a, OutcomeKind.SUCCEEDED, t0 + 70 * S)  # late; no pass saw it open after 60 s
    result = sla.check(engine, t0 + 100 * S)  # the next pass, after both ended
    assert result.breaches == 1
    assert records(engine, late.job_run_id) == [("sla_deadline", "breach")]
    assert records(engine, on_time.job_run_id) == []
    assert sla_events(engine, late.job_run_id)[0]["deadline"] == _iso(late.created_at + 60 * S)
    assert sla.check(engine, t0 + 200 * S).breaches == 0  # judged once, by the transition that ended it


def test_a_transition_that_commits_late_is_still_judged(engine: Engine, database_url: str) -> None:
    """PostgreSQL: a run's late end is inserted (its id taken) by a transaction that stays open,
    stamped long before it commits, while a higher id, stamped even earlier, commits. The
    cursor must not pass the missing id while it may still commit."""
    if not database_url.startswith("postgresql"):
        pytest.skip("SQLite has one writer at a time: ids become visible in order")
    job = define(engine, sla_policy="sla_60")
    late, other = submit(engine, job), submit(engine, job)
    t0 = max(late.created_at, other.created_at)
    prime(engine, t0)
    started = {r.job_run_id: r for r in start(engine, t0 + S)}
    holding, release = threading.Event(), threading.Event()

    def slow_writer() -> None:  # ends ``late`` after its deadline, and does not commit yet
        run = started[late.job_run_id]
        s = settle_attempt(
            run, Outcome(OutcomeKind.SUCCEEDED), settling_policy(engine.config, run), now=t0 + 70 * S,
            actor="w-test", started_at=t0 + S,
        )  # fmt: skip
        with engine.store.write() as tx:
            assert tx.runs_apply([moves.settled(s, run, now=t0 + 70 * S)])
            holding.set()
            release.wait(30)

    writer = threading.Thread(target=slow_writer)
    writer.start()
    try:
        assert holding.wait(10)
        settle(engine, started[other.job_run_id], OutcomeKind.SUCCEEDED, t0 + 10 * S)  # a higher id, committed
        state = sla.MonitorState()
        assert sla.check(engine, t0 + 50 * S, state=state).breaches == 0  # ``late`` still looks RUNNING
        assert sla.check(engine, t0 + 55 * S, state=state).breaches == 0
        with engine.store.read() as tx:
            cursor = tx.sla.cursor_get(RUNS_CURSOR)
            ids = [r[0] for r in connection(tx).execute(text("SELECT id FROM run_transitions ORDER BY id"))]
        gap = next(i for i in range(ids[0], ids[-1]) if i not in ids)  # the uncommitted end's id
        assert cursor == gap - 1  # held just before it, though a higher id has committed
    finally:
        release.set()
        writer.join(30)
    assert get_run(engine, late.job_run_id).status is RunStatus.COMPLETED
    result = sla.check(engine, t0 + 100 * S, state=state)
    assert result.breaches == 1  # judged by the transition that ended it, committed late
    assert records(engine, late.job_run_id) == [("sla_deadline", "breach"), ("sla_deadline", "reminder")]
    assert records(engine, other.job_run_id) == []


def test_a_rolled_back_gap_is_passed_after_the_grace(engine: Engine, database_url: str) -> None:
    """A transaction that took transition ids and rolled back leaves a gap for good: the cursor
    passes it once it has been missing for ``GAP_GRACE`` on the monitor's clock, no sooner."""
    if not database_url.startswith("postgresql"):
        pytest.skip("SQLite: ids become visible in order, a rolled-back id is taken again")
    job = define(engine, sla_policy="sla_60")
    first, second = submit(engine, job), submit(engine, job)
    t0 = max(first.created_at, second.created_at)
    prime(engine, t0)
    started = {r.job_run_id: r for r in start(engine, t0 + S)}

    class Rollback(Exception):
        pass

    with pytest.raises(Rollback), engine.store.write() as tx:  # takes an id, then rolls back
        run = started[first.job_run_id]
        s = settle_attempt(run, Outcome(OutcomeKind.SUCCEEDED), settling_policy(engine.config, run),
                           now=t0 + 2 * S, actor="w-test", started_at=t0 + S)  # fmt: skip
        tx.runs_apply([moves.settled(s, run, now=t0 + 2 * S)])
        raise Rollback
    settle(engine, started[second.job_run_id], OutcomeKind.SUCCEEDED, t0 + 3 * S)
    with engine.store.read() as tx:
        head = tx.sla.max_id(False)

    def cursor() -> int:
        with engine.store.read() as tx:
            value = tx.sla.cursor_get(RUNS_CURSOR)
        assert value is not None
        return value

    sla.check(engine, t0 + 10 * S)
    assert cursor() < head
    sla.check(engine, t0 + 10 * S + sla.GAP_GRACE - timedelta(microseconds=1))
    assert cursor() < head  # not yet
    sla.check(engine, t0 + 10 * S + sla.GAP_GRACE)
    assert cursor() == head


# --- timeouts ------------------------------------------------------------------------------------


def test_an_execution_timeout_is_reported_while_the_attempt_runs_and_after_it_was_stopped(engine: Engine) -> None:
    job = define(engine, timeout_policy="test_exec_timeout_v1", retry_policy="test_fixed_v1")  # 0.5 s
    running, stopped = submit(engine, job), submit(engine, job)
    t0 = max(running.created_at, stopped.created_at)
    prime(engine, t0)
    started = {r.job_run_id: r for r in start(engine, t0 + S)}
    assert sla.check(engine, t0 + 1.4 * S).breaches == 0  # both within their 0.5 s
    # ``stopped``: the worker stopped its attempt at the timeout and retried it, between passes.
    settle(engine, started[stopped.job_run_id], OutcomeKind.EXECUTION_TIMEOUT, t0 + 1.6 * S, "EXECUTION_TIMEOUT")
    result = sla.check(engine, t0 + 1.7 * S)
    assert result.breaches == 2
    for run in (running, stopped):
        assert records(engine, run.job_run_id) == [("execution_timeout", "breach")]
        (event,) = sla_events(engine, run.job_run_id)
        assert event["deadline"] == _iso(t0 + 1.5 * S) and event["sla_policy"] == "test_exec_timeout_v1"
    assert get_run(engine, running.job_run_id).status is RunStatus.RUNNING  # found while running


def test_a_second_attempt_is_timed_from_its_own_start(engine: Engine) -> None:
    job = define(engine, timeout_policy="test_exec_timeout_v1", retry_policy="test_fixed_v1")
    run = submit(engine, job)
    t0 = run.created_at
    prime(engine, t0)
    (first,) = start(engine, t0 + S)
    settle(engine, first, OutcomeKind.RETRYABLE_FAILURE, t0 + 1.2 * S, "FLAKY")  # within the timeout
    (second,) = start(engine, t0 + 10 * S)
    assert second.attempt == 2
    assert sla.check(engine, t0 + 10.4 * S).breaches == 0  # 9.4 s after the first start, 0.4 after its own
    assert sla.check(engine, t0 + 10.5 * S).breaches == 1
    assert sla_events(engine, run.job_run_id)[0]["deadline"] == _iso(t0 + 10.5 * S)


def test_a_queue_timeout_is_reported_while_waiting_and_when_the_rescuer_dead_lettered_it(engine: Engine) -> None:
    job = define(engine, timeout_policy="test_queue_timeout_v1")  # 0.2 s
    waiting, rescued = submit(engine, job), submit(engine, job)
    t0 = max(waiting.created_at, rescued.created_at)
    prime(engine, t0)
    with engine.store.write() as tx:  # only ``rescued`` is past its deadline when the rescuer sweeps
        connection(tx).execute(
            text("UPDATE job_runs SET queue_deadline_at = :d WHERE job_run_id = :r"),
            {"d": codec.to_us(t0 + 100 * S), "r": waiting.job_run_id},
        )
    assert rescuer.sweep(engine, t0 + S).queue_expired == 1
    assert get_run(engine, rescued.job_run_id).status is RunStatus.DEAD_LETTERED
    assert sla.check(engine, t0 + 2 * S).breaches == 1  # the dead letter, seen by its transition
    assert records(engine, rescued.job_run_id) == [("queue_timeout", "breach")]
    assert sla.check(engine, t0 + 100 * S).breaches == 1  # ``waiting``, still waiting at its deadline
    assert records(engine, waiting.job_run_id) == [("queue_timeout", "breach")]
    assert get_run(engine, waiting.job_run_id).status is RunStatus.SCHEDULED


# --- retry window, escalation deadline, evidence deadline ---------------------------------------


def test_a_retry_still_pending_after_the_retry_window_is_a_breach(engine: Engine) -> None:
    job = define(engine, sla_policy="retry_30", retry_policy="test_patient_v1")
    run = submit(engine, job)
    t0 = run.created_at
    (first,) = start(engine, t0 + 5 * S)
    retrying = settle(engine, first, OutcomeKind.RETRYABLE_FAILURE, t0 + 6 * S, "FLAKY")
    assert retrying.status is RunStatus.RETRY_WAIT
    assert sla.check(engine, t0 + 35 * S - timedelta(microseconds=1)).breaches == 0
    assert sla.check(engine, t0 + 35 * S).breaches == 1  # 30 s after the first start
    assert records(engine, run.job_run_id) == [("retry_window", "breach")]
    assert get_run(engine, run.job_run_id).status is RunStatus.RETRY_WAIT  # the policy does not escalate


def test_a_pending_run_past_its_escalation_deadline_is_dead_lettered_for_review(engine: Engine) -> None:
    job = define(engine, sla_policy="escalate_after_120")
    run = submit(engine, job)
    t0 = run.created_at
    assert sla.check(engine, t0 + 119 * S).escalations == 0
    result = sla.check(engine, t0 + 120 * S)
    assert (result.breaches, result.escalations) == (1, 1)
    done = get_run(engine, run.job_run_id)
    assert done.status is RunStatus.DEAD_LETTERED and done.error_code == "SLA_ESCALATION"
    assert transitions(engine, run.job_run_id)[-1] == ("SCHEDULED", "DEAD_LETTERED", "sla_escalation", 0)
    (letter,) = dead_letters(engine, run.job_run_id)
    assert letter.reason is DeadLetterReason.SLA_ESCALATION_REQUIRED and letter.requires_manual_review
    (event,) = sla_events(engine, run.job_run_id)
    assert event["kind"] == "escalation_deadline" and event["requires_escalation"] and event["severity"] == "critical"
    dead = [e.payload for e in events(engine, run.job_run_id) if e.event_type == "job_dead_lettered"]
    validate("comp.TG.EVENT.JOB-DEAD-LETTERED.v1_0", dead[0] | {"event_id": 1, "recorded_at": _iso(t0)})
    assert audit_actions(engine, run.job_run_id)[-2:] == ["sla.breach", "run.dead_lettered"]
    (b,) = sla.breaches(engine, "default", subject_id=run.job_run_id)
    assert b.escalated
    assert replay(engine, run.job_run_id).match
    # A person reviews and requeues it: the monitor does not escalate it again.
    control.requeue_run(engine, run.job_run_id, actor="reviewer")
    again = sla.check(engine, t0 + 500 * S)
    assert (again.breaches, again.reminders, again.escalations) == (0, 0, 0)
    assert get_run(engine, run.job_run_id).status is RunStatus.SCHEDULED


def test_a_breach_and_its_escalation_are_sealed_records(engine: Engine) -> None:
    """Found by a review: a breach made "info", its escalation undone, a reminder deleted, all in
    the database, and ``audit verify --records`` said nothing while the CLI, the API and the
    metrics showed the forged values. Each is sealed when recorded and when its escalation is
    marked; a change no jobgate write makes is named with its column."""
    from jobgate.service import audit

    job = define(engine, sla_policy="escalate_after_120")
    run = submit(engine, job)
    assert sla.check(engine, run.created_at + 120 * S).escalations == 1
    (b,) = sla.breaches(engine, "default", subject_id=run.job_run_id)
    assert b.escalated
    (clean,) = audit.verify_records(engine, ["default"])
    assert clean.ok, [f.message() for f in clean.findings]
    with engine.store.write() as tx:
        connection(tx).execute(
            text("UPDATE sla_breaches SET severity = 'info', escalated = :f WHERE sla_breach_id = :b"),
            {"f": False, "b": b.sla_breach_id},
        )
    (report,) = audit.verify_records(engine, ["default"])
    (finding,) = [f for f in report.findings if f.kind == "sla_breach"]
    assert finding.record_id == b.sla_breach_id and finding.column in ("severity", "escalated")
    with engine.store.write() as tx:
        connection(tx).execute(text("DELETE FROM sla_breaches WHERE sla_breach_id = :b"), {"b": b.sla_breach_id})
    (report,) = audit.verify_records(engine, ["default"])
    assert [(f.kind, f.record_id, f.problem) for f in report.findings if f.kind == "sla_breach"] == [
        ("sla_breach", b.sla_breach_id, "deleted")
    ]


def test_the_evidence_deadline_counts_from_the_quarantine_opening(engine: Engine) -> None:
    job = define(
        engine,
        sla_policy="quarantine_evidence",
        job_class="QUARANTINE_SLA_JOB",
        params=[{"name": "opened_at", "pattern": "[0-9TZ:.+-]{1,40}"}, {"name": "eco_number"}],
    )
    opened = _iso_now_minus(engine, 20 * S)
    run = submit(engine, job, params={"opened_at": opened, "eco_number": "ECO-B7"})
    anchor = datetime.fromisoformat(opened.replace("Z", "+00:00"))
    assert sla.check(engine, anchor + 30 * S - timedelta(microseconds=1)).breaches == 0
    assert sla.check(engine, anchor + 30 * S).breaches == 1  # 10 s after the run was created
    (event,) = sla_events(engine, run.job_run_id)
    assert (event["kind"], event["eco_number"], event["deadline"]) == (
        "evidence_deadline",
        "ECO-B7",
        _iso(anchor + 30 * S),
    )


def test_an_anchor_at_the_calendars_end_does_not_stop_the_monitor(engine: Engine) -> None:
    """Found by a review: one run whose anchor parameter said ``9999-12-31T23:59:59Z`` made every
    pass fail (the deadline overflowed), for every run of every tenant, cancelled or not. An
    anchor more than a century from the run's creation is none: the deadline counts from creation."""
    job = define(
        engine,
        sla_policy="quarantine_evidence",
        job_class="QUARANTINE_SLA_JOB",
        params=[{"name": "opened_at", "pattern": "[0-9TZ:.+-]{1,40}"}],
    )
    other = define(engine, sla_policy="sla_60")
    far = submit(engine, job, params={"opened_at": "9999-12-31T23:59:59Z"})
    early = submit(engine, job, params={"opened_at": "0001-01-01T00:00:00Z"})
    plain = submit(engine, other)
    at = max(r.created_at for r in (far, early, plain))
    result = sla.check(engine, at + 61 * S)
    assert result.breaches == 3  # both evidence deadlines from creation (30 s), and the other's
    assert records(engine, far.job_run_id) == [("evidence_deadline", "breach")]
    assert records(engine, plain.job_run_id) == [("sla_deadline", "breach")]


def test_an_eco_number_param_longer_than_one_is_left_out_not_a_failed_pass(engine: Engine) -> None:
    """Found by a regression review: a run whose ``eco_number`` param held 300 characters failed
    the breach record's insert (200) on PostgreSQL, and with it every monitor pass."""
    job = define(engine, sla_policy="sla_60", params=[{"name": "eco_number", "pattern": "[A-Z0-9-]{1,2000}"}])
    long = submit(engine, job, params={"eco_number": "E" * 300})
    short = submit(engine, job, params={"eco_number": "ECO-2"})
    result = sla.check(engine, max(long.created_at, short.created_at) + 61 * S)
    assert result.breaches == 2
    (event,) = sla_events(engine, short.job_run_id)
    assert event["eco_number"] == "ECO-2"
    (other,) = sla_events(engine, long.job_run_id)
    assert other["eco_number"] is None


# --- once only -----------------------------------------------------------------------------------


def test_two_monitors_at_once_record_each_breach_once(engine: Engine) -> None:
    job = define(engine, sla_policy="sla_60_escalating")
    runs = [submit(engine, job) for _ in range(12)]
    now = max(r.created_at for r in runs) + 61 * S
    barrier = threading.Barrier(2)
    results: list[sla.CheckResult] = []

    def monitor() -> None:
        barrier.wait()
        results.append(sla.check(engine, now))

    threads = [threading.Thread(target=monitor) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(results) == 2
    assert sum(r.breaches for r in results) == 12 and sum(r.escalations for r in results) == 12
    assert count(engine, "sla_breaches") == 12
    assert count(engine, "outbox", "event_type = 'sla_breach'") == 12
    assert count(engine, "audit_log", "action = 'sla.breach'") == 12
    assert count(engine, "dead_letters") == 12
    for r in runs:
        assert transitions(engine, r.job_run_id)[-1][1:3] == ("DEAD_LETTERED", "sla_escalation")


def test_one_monitor_leads_and_a_standby_takes_over_when_it_releases(engine: Engine) -> None:
    job = define(engine, sla_policy="sla_60")
    run = submit(engine, job)
    now = run.created_at + 61 * S
    first, second = SlaMonitor(engine, owner="first"), SlaMonitor(engine, owner="second")
    result = first.tick(now)
    assert result is not None and result.breaches == 1
    assert second.tick(now) is None  # a standby: no pass
    first.close()
    assert second.tick(now) is not None
    with engine.store.read() as tx:
        lock = tx.lock_get(LEADER_LOCK)
    assert lock is not None and lock.owner == "second"
    assert count(engine, "sla_breaches") == 1


# --- with a real worker --------------------------------------------------------------------------


def test_a_breach_is_detected_while_the_run_is_still_running(engine: Engine) -> None:
    job = define(engine, sla_policy="hour", handler="engine_handlers:sleep", params=SECONDS)
    run = submit(engine, job, params={"seconds": "30"})
    with running_worker(engine):
        wait_until(lambda: get_run(engine, run.job_run_id).status is RunStatus.RUNNING, what="the run started")
        result = sla.check(engine, run.created_at + HOUR + S)  # the monitor's clock: an hour on
        assert result.breaches == 1 and result.escalations == 0
        assert get_run(engine, run.job_run_id).status is RunStatus.RUNNING  # reported, still running
        control.stop_run(engine, run.job_run_id, actor="test")
        wait_until(lambda: get_run(engine, run.job_run_id).status is RunStatus.CANCELLED, what="stopped")
    assert records(engine, run.job_run_id) == [("sla_deadline", "breach")]


def test_the_monitor_loop_reports_a_breach_while_a_worker_runs_the_job(tmp_path: Path, database_url: str) -> None:
    """Real time end to end: a 1 s SLA, a 30 s job, the loop in its thread."""
    from jobgate.store.sqlstore import Store

    config = make_config(tmp_path, sla_policies=[{"sla_policy_id": "one_second", "deadline_seconds": 1}])
    engine = Engine(Store(database_url), config)
    try:
        job = define(engine, sla_policy="one_second", handler="engine_handlers:sleep", params=SECONDS)
        monitor = LoopThread(SlaMonitor(engine, interval=timedelta(milliseconds=100)), engine.clock).start()
        run = submit(engine, job, params={"seconds": "30"})
        with running_worker(engine):
            wait_until(lambda: records(engine, run.job_run_id) != [], timeout=15, what="the breach")
            assert get_run(engine, run.job_run_id).status is RunStatus.RUNNING
            control.stop_run(engine, run.job_run_id, actor="test")
            wait_until(lambda: get_run(engine, run.job_run_id).status.is_terminal, what="stopped")
        monitor.stop()
        assert monitor.join(10)
        (event,) = sla_events(engine, run.job_run_id)
        assert event["deadline"] == _iso(run.created_at + S)
    finally:
        engine.store.dispose()


def test_escalating_a_running_run_stops_its_worker_and_nothing_completes_it(engine: Engine) -> None:
    job = define(engine, sla_policy="hour_escalating", handler="engine_handlers:sleep", params=SECONDS)
    run = submit(engine, job, params={"seconds": "30"})
    with running_worker(engine) as worker:
        wait_until(lambda: get_run(engine, run.job_run_id).status is RunStatus.RUNNING, what="the run started")
        result = sla.check(engine, run.created_at + HOUR + S)
        assert (result.breaches, result.escalations) == (1, 1)
        # The worker's stop check sees the run is no longer its own and interrupts the handler.
        wait_until(lambda: not worker._running, timeout=10, what="the worker let go of the run")
        assert worker.lease_losses == 1
    done = get_run(engine, run.job_run_id)
    assert done.status is RunStatus.ESCALATED and done.error_code == "SLA_ESCALATION" and done.result is None
    assert done.lease_owner is None
    assert transitions(engine, run.job_run_id)[-1] == ("RUNNING", "ESCALATED", "sla_escalation", 1)
    kinds = event_types(engine, run.job_run_id)
    assert "job_escalated" in kinds and "job_completed" not in kinds and kinds.count("sla_breach") == 1
    escalated = next(e.payload for e in events(engine, run.job_run_id) if e.event_type == "job_escalated")
    validate("comp.TG.EVENT.JOB-ESCALATED.v1_0", escalated | {"event_id": 1, "recorded_at": _iso(run.created_at)})
    assert audit_actions(engine, run.job_run_id)[-2:] == ["sla.breach", "run.escalated"]
    assert replay(engine, run.job_run_id).match  # the escalation replays as the recorded fact it is


def test_the_fence_refuses_a_completion_that_comes_after_the_escalation(engine: Engine) -> None:
    sla_handlers.STARTED.clear()
    sla_handlers.RELEASE.clear()
    job = define(engine, sla_policy="hour_escalating", handler="sla_handlers:gate")
    run = submit(engine, job)
    # A worker that will not look before the handler returns: no stop check, no lease renewal.
    with running_worker(engine, stop_check_interval=HOUR, lease=timedelta(minutes=10)) as worker:
        assert sla_handlers.STARTED.wait(10)

        def renewed() -> bool:  # the claim set start + lease; the first renewal (right after) moves it
            r = get_run(engine, run.job_run_id)
            assert r.started_at is not None and r.lease_expires_at is not None
            return r.lease_expires_at > r.started_at + timedelta(minutes=10)

        wait_until(renewed, what="the first lease renewal (the next is minutes away)")
        assert sla.check(engine, run.created_at + HOUR + S).escalations == 1
        assert get_run(engine, run.job_run_id).status is RunStatus.ESCALATED
        sla_handlers.RELEASE.set()  # the job completes now, after the escalation
        wait_until(lambda: worker.stale_writes_refused == 1, timeout=10, what="the completion refused")
    done = get_run(engine, run.job_run_id)
    assert done.status is RunStatus.ESCALATED and done.result is None
    assert "job_completed" not in event_types(engine, run.job_run_id)
    assert [t[1] for t in transitions(engine, run.job_run_id)][-1] == "ESCALATED"


# --- workflow runs -------------------------------------------------------------------------------


def test_a_workflow_run_is_reported_while_running_and_escalated_past_its_escalation_deadline(
    engine: Engine,
) -> None:
    job = define(engine, sla_policy="escalate_after_120")
    t0 = engine.clock.now()
    wf = _workflow(engine, job, "RUNNING", t0, version=3, seq=4)
    assert sla.check(engine, t0 + 119 * S).breaches == 0
    result = sla.check(engine, t0 + 120 * S)
    assert (result.breaches, result.escalations) == (1, 1)
    (event,) = sla_events(engine, wf)
    assert event["workflow_run_id"] == wf and "job_run_id" not in event and event["kind"] == "escalation_deadline"
    with engine.store.read() as tx:
        row = connection(tx).execute(select(workflow_runs).where(workflow_runs.c.workflow_run_id == wf)).one()
        last = (
            connection(tx)
            .execute(
                select(workflow_transitions)
                .where(workflow_transitions.c.workflow_run_id == wf)
                .order_by(workflow_transitions.c.seq.desc())
            )
            .first()
        )
    assert (row.status, row.version, row.error_code) == ("ESCALATED", 4, "SLA_ESCALATION")
    assert last is not None
    assert (last.seq, last.step_id, last.from_status, last.to_status, last.reason) == (
        5, None, "RUNNING", "ESCALATED", "sla_escalation",
    )  # fmt: skip
    assert len(sla_events(engine, wf, "workflow_escalated")) == 1
    assert audit_actions(engine, wf) == ["sla.breach", "workflow.escalated"]
    assert sla.check(engine, t0 + 600 * S).escalations == 0


def test_a_workflow_that_lost_the_version_race_is_not_overwritten(engine: Engine) -> None:
    job = define(engine, sla_policy="escalate_after_120")
    t0 = engine.clock.now()
    wf = _workflow(engine, job, "RUNNING", t0, version=1, seq=1)
    state = sla.MonitorState()
    original = sla_rows.workflow_escalate

    def engine_advanced_first(conn: Any, w: Any, **kw: Any) -> bool:  # the workflow engine wins the race
        conn.execute(workflow_runs.update().where(workflow_runs.c.workflow_run_id == wf).values(version=2))
        return original(conn, w, **kw)

    sla_rows.workflow_escalate = engine_advanced_first  # type: ignore[assignment]
    try:
        assert sla.check(engine, t0 + 120 * S, state=state).escalations == 0
    finally:
        sla_rows.workflow_escalate = original  # type: ignore[assignment]
    assert _workflow_status(engine, wf) == ("RUNNING", 2)
    assert sla.check(engine, t0 + 121 * S, state=state).escalations == 1  # tried again while open
    assert _workflow_status(engine, wf) == ("ESCALATED", 3)


def test_a_workflow_that_ended_after_its_deadline_between_passes_is_reported(engine: Engine) -> None:
    job = define(engine, sla_policy="sla_60")
    t0 = engine.clock.now()
    prime(engine, t0)
    late = _workflow(engine, job, "RUNNING", t0, version=1, seq=1)
    on_time = _workflow(engine, job, "RUNNING", t0, version=1, seq=1)
    _end_workflow(engine, late, t0 + 70 * S, seq=2)
    _end_workflow(engine, on_time, t0 + 50 * S, seq=2)
    assert sla.check(engine, t0 + 100 * S).breaches == 1
    assert records(engine, late) == [("sla_deadline", "breach")]
    assert records(engine, on_time) == []


# --- the API and the CLI -------------------------------------------------------------------------


def test_breaches_are_listed_per_tenant(engine: Engine) -> None:
    job = define(engine, sla_policy="sla_60")
    run = submit(engine, job)
    sla.check(engine, run.created_at + 61 * S)
    assert [b.subject_id for b in sla.breaches(engine, "default")] == [run.job_run_id]
    assert sla.breaches(engine, "acme") == []
    assert sla.breaches(engine, "default", phase="reminder") == []


def test_the_one_shot_cli_runs_a_pass(engine: Engine, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from jobgate.cli import cli

    job = define(engine, sla_policy="sla_60")
    run = submit(engine, job)
    config_path = tmp_path / "jobgate.yaml"
    config_path.write_text(yaml.safe_dump(config_document(tmp_path, sla_policies=POLICIES)))
    runner = CliRunner()
    args = ["--config", str(config_path), "--db", engine.store.url, "--json"]
    first = runner.invoke(cli, [*args, "sla", "check"], catch_exceptions=False)
    assert first.exit_code == 0, first.output
    # The run is seconds old: nothing due yet. Age it by an hour in the database, then check.
    with engine.store.write() as tx:
        connection(tx).execute(
            text("UPDATE job_runs SET created_at = created_at - :h WHERE job_run_id = :r"),
            {"h": 3600 * 10**6, "r": run.job_run_id},
        )
    second = runner.invoke(cli, [*args, "sla", "check"], catch_exceptions=False)
    assert '"breaches": 1' in second.output
    listed = runner.invoke(cli, [*args, "sla", "breaches"], catch_exceptions=False)
    assert run.job_run_id in listed.output and '"kind": "sla_deadline"' in listed.output


# --- small helpers -------------------------------------------------------------------------------


def _scope(**keys: str) -> Any:
    from jobgate.core.models import Scope

    return Scope(keys=tuple(sorted(keys.items())))


def _iso(at: datetime) -> str:
    from jobgate.core.canonical import isoformat_utc

    return isoformat_utc(at)


def _iso_now_minus(engine: Engine, ago: timedelta) -> str:
    return _iso(engine.clock.now() - ago)


def _workflow(engine: Engine, job: str, status: str, created: datetime, *, version: int, seq: int) -> str:
    """A workflow run row for ``job``'s current version, as the workflow engine would write it."""
    wf = f"TGWF-2026-{uuid.uuid4().hex[:20]}"
    with engine.store.read() as tx:
        stored = tx.definition_get("default", job)
    assert stored is not None
    with engine.store.write() as tx:
        connection(tx).execute(
            workflow_runs.insert().values(
                workflow_run_id=wf, tenant_id="default", idempotency_key=uuid.uuid4().hex, job_definition_id=job,
                definition_version=stored.version, definition_digest=stored.digest, job_class=stored.job_class,
                status=status, phase="forward", params="{}", scope='{"tenant_id": "default"}', trigger="{}",
                config_snapshot_id="TGCFGSNAP-x", config_digest="sha256:x", created_at=codec.to_us(created),
                version=version,
            )
        )  # fmt: skip
        for n in range(1, seq + 1):
            connection(tx).execute(
                workflow_transitions.insert().values(
                    workflow_run_id=wf, tenant_id="default", seq=n, step_id=None if n == 1 else "a",
                    from_status=None, to_status="RUNNING", reason="test", actor="test", at=codec.to_us(created),
                )
            )  # fmt: skip
    return wf


def _end_workflow(engine: Engine, wf: str, at: datetime, *, seq: int) -> None:
    with engine.store.write() as tx:
        connection(tx).execute(
            workflow_runs.update()
            .where(workflow_runs.c.workflow_run_id == wf)
            .values(status="COMPLETED", ended_at=codec.to_us(at), version=workflow_runs.c.version + 1)
        )
        connection(tx).execute(
            workflow_transitions.insert().values(
                workflow_run_id=wf, tenant_id="default", seq=seq, step_id=None, from_status="RUNNING",
                to_status="COMPLETED", reason="completed", actor="test", at=codec.to_us(at),
            )
        )  # fmt: skip


def _workflow_status(engine: Engine, wf: str) -> tuple[str, int]:
    with engine.store.read() as tx:
        row = (
            connection(tx)
            .execute(
                select(workflow_runs.c.status, workflow_runs.c.version).where(workflow_runs.c.workflow_run_id == wf)
            )
            .one()
        )
    return str(row[0]), int(row[1])
