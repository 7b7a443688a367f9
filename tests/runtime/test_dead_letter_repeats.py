"""A run requeued and dead-lettered again at the same attempt (a requeue keeps the attempt
counter): its dependency is still down, or its escalation deadline is still past. Each
dead-lettering gets its own dead letter (the first keeps its derived id, repeats are numbered),
the sweep and the SLA pass keep working, and one failing escalation cannot discard the other
records of its SLA batch. Both backends; time is given to each pass explicitly."""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from runtime_support import dead_letters, events, get_run, transitions

from helpers import define, make_config
from jobgate.config import JobgateConfig
from jobgate.contracts import validate
from jobgate.core.models import DeadLetter, DeadLetterReason, JobRun
from jobgate.core.states import RunStatus
from jobgate.runtime import rescuer
from jobgate.runtime.dependencies import DependencyMonitor
from jobgate.service import control, sla, sla_record
from jobgate.service.engine import Engine
from jobgate.service.replay import replay
from jobgate.service.submission import SubmitRequest

S = timedelta(seconds=1)
POLICIES = [
    {"sla_policy_id": "escalate_after_120", "deadline_seconds": 3600, "escalation_after_seconds": 120},
    {"sla_policy_id": "sla_60", "deadline_seconds": 60},
]


@pytest.fixture
def config(tmp_path: Path) -> JobgateConfig:
    deps = {"dal": {"url": "http://127.0.0.1:9/health", "max_wait_seconds": 60}}
    return make_config(tmp_path, sla_policies=POLICIES, dependencies=deps)


def submit(engine: Engine, job: str) -> JobRun:
    return engine.submit(SubmitRequest(job, request_id=uuid.uuid4().hex)).run


def letters(engine: Engine, run: JobRun) -> list[DeadLetter]:
    """The run's dead letters, oldest first."""
    return sorted(dead_letters(engine, run.job_run_id), key=lambda d: (d.created_at, d.dead_letter_id))


def letter_ids(engine: Engine, run: JobRun) -> list[tuple[str, bool]]:
    """(id, still open) of the run's dead letters, oldest first."""
    return [(d.dead_letter_id, d.resolved_at is None) for d in letters(engine, run)]


def announced(engine: Engine, run: JobRun) -> list[str]:
    """The dead letter ids of the run's ``job_dead_lettered`` events, each valid per its contract."""
    out = []
    for e in events(engine, run.job_run_id):
        if e.event_type == "job_dead_lettered":
            validate(
                "comp.TG.EVENT.JOB-DEAD-LETTERED.v1_0",
                e.payload | {"event_id": e.event_id, "recorded_at": "2026-03-01T00:00:00Z"},
            )
            out.append(str(e.payload["dead_letter_id"]))
    return out


def test_a_run_requeued_while_its_dependency_is_still_down_is_dead_lettered_again(engine: Engine) -> None:
    job = define(engine, dependencies=["dal"])
    run = submit(engine, job)
    monitor = DependencyMonitor(engine, observer="w-test", probe=lambda check: "unreachable: ConnectError")
    t0 = engine.clock.now()
    monitor.tick(t0)  # the outage begins
    monitor.tick(t0 + 61 * S)  # the run waited longer than max_wait (60 s)
    first = f"TGDLQ-{run.job_run_id.removeprefix('TGJOBRUN-')}-0"
    assert letter_ids(engine, run) == [(first, True)]  # the first keeps its derived id
    for n in (2, 3):  # a person requeues it; the DAL is still down; it waits past the bound again
        control.requeue_run(engine, run.job_run_id, actor="reviewer")
        monitor.tick(t0 + (61 + 100 * n) * S)  # raised IntegrityError on every pass before
        assert get_run(engine, run.job_run_id).status is RunStatus.DEAD_LETTERED
    assert letter_ids(engine, run) == [(first, False), (f"{first}.2", False), (f"{first}.3", True)]
    assert announced(engine, run) == [first, f"{first}.2", f"{first}.3"]  # each event names its letter
    assert [d.reason for d in letters(engine, run)] == [DeadLetterReason.MISSING_DEPENDENCY] * 3
    assert [t[1:3] for t in transitions(engine, run.job_run_id)][2:] == [
        ("DEAD_LETTERED", "dependency_unavailable"),
        ("SCHEDULED", "requeued"),
        ("DEAD_LETTERED", "dependency_unavailable"),
        ("SCHEDULED", "requeued"),
        ("DEAD_LETTERED", "dependency_unavailable"),
    ]
    assert replay(engine, run.job_run_id).match


def test_a_requeued_run_still_overdue_is_escalated_without_losing_the_batch(engine: Engine) -> None:
    """Dead-lettered by the queue timeout (attempt 0), requeued, then past its escalation
    deadline while it waits: the SLA escalation dead-letters it at attempt 0 again. Another
    subject's breach, recorded in the same batch, is kept."""
    overdue = define(engine, sla_policy="escalate_after_120", timeout_policy="test_queue_timeout_v1")
    plain = define(engine, sla_policy="sla_60")
    run, other = submit(engine, overdue), submit(engine, plain)
    t0 = max(run.created_at, other.created_at)
    sla.check(engine, t0)  # places the cursors
    assert rescuer.sweep(engine, t0 + S).queue_expired == 1
    assert sla.check(engine, t0 + 2 * S).breaches == 1  # the queue timeout
    control.requeue_run(engine, run.job_run_id, actor="reviewer")
    assert get_run(engine, run.job_run_id).status is RunStatus.SCHEDULED
    result = sla.check(engine, t0 + 121 * S)  # raised IntegrityError, and lost every record, before
    assert (result.breaches, result.escalations) == (2, 1)  # its escalation deadline, the other's deadline
    assert get_run(engine, run.job_run_id).status is RunStatus.DEAD_LETTERED
    first = f"TGDLQ-{run.job_run_id.removeprefix('TGJOBRUN-')}-0"
    assert letter_ids(engine, run) == [(first, False), (f"{first}.2", True)]
    assert [d.reason for d in letters(engine, run)] == [
        DeadLetterReason.QUEUE_TIMEOUT_EXCEEDED,
        DeadLetterReason.SLA_ESCALATION_REQUIRED,
    ]
    assert announced(engine, run) == [first, f"{first}.2"]
    assert [b.kind for b in sla.breaches(engine, "default", subject_id=other.job_run_id)] == ["sla_deadline"]
    assert replay(engine, run.job_run_id).match


def test_one_failing_escalation_does_not_discard_the_batch(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    escalating = define(engine, sla_policy="escalate_after_120")
    plain = define(engine, sla_policy="sla_60")
    broken, fine, other = submit(engine, escalating), submit(engine, escalating), submit(engine, plain)
    t0 = max(r.created_at for r in (broken, fine, other))
    original = sla_record.escalation_change

    def failing(run: JobRun, **kw: Any) -> Any:
        if run.job_run_id == broken.job_run_id:
            raise RuntimeError("escalation bug")
        return original(run, **kw)

    monkeypatch.setattr(sla_record, "escalation_change", failing)
    result = sla.check(engine, t0 + 121 * S)
    assert (result.breaches, result.escalations) == (3, 1)  # every record kept; only the broken one waits
    assert get_run(engine, broken.job_run_id).status is RunStatus.SCHEDULED
    assert get_run(engine, fine.job_run_id).status is RunStatus.DEAD_LETTERED
    assert [b.escalated for b in sla.breaches(engine, "default", subject_id=broken.job_run_id)] == [False]
    monkeypatch.setattr(sla_record, "escalation_change", original)
    again = sla.check(engine, t0 + 122 * S)  # tried again at the next pass
    assert (again.breaches, again.escalations) == (0, 1)
    assert get_run(engine, broken.job_run_id).status is RunStatus.DEAD_LETTERED
    assert [b.escalated for b in sla.breaches(engine, "default", subject_id=broken.job_run_id)] == [True]
