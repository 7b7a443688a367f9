"""The write side of the SLA monitor: records, their events and audit entries, escalations.

For each subject with something due, in one transaction per batch of subjects:

1. each reminder or breach not yet recorded is inserted with ``ON CONFLICT DO NOTHING``; only
   the monitor whose insert took writes the ``sla_reminder`` / ``sla_breach`` event and, for a
   breach, the audit entry (seed §22: "SLA breaches must emit observability and audit events");
2. if a breach requires escalation and the subject is still open, it is escalated by
   compare-and-set: a RUNNING run to ESCALATED with its lease revoked (the worker's fenced
   completion is then refused, and its stop check halts the attempt), a run that has not
   started to DEAD_LETTERED for manual review (``core.sla.escalation_target`` says why), a
   workflow run to ESCALATED (``version`` compare-and-set, with its transition). The run's
   transition carries its usual event (``job_escalated`` or ``job_dead_lettered``), the
   workflow's ``workflow_escalated``; these are what alert sinks deliver as escalations. The
   breach rows are then marked ``escalated``, so an escalation happens once; one that lost a
   race (the run moved meanwhile) is tried again while the subject stays open. Each escalation
   runs in a savepoint: one that fails is undone and logged alone, and never takes the other
   subjects' records of the batch with it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from jobgate.core import events, transitions
from jobgate.core.audit import AuditEvent
from jobgate.core.decide import Decision
from jobgate.core.models import DeadLetterReason, JobRun
from jobgate.core.records import BreachRecord, WorkflowSubject
from jobgate.core.settle import settle_without_attempt
from jobgate.core.sla import DeadlineKind, Due, Phase, SubjectKind, escalation_target, record_id
from jobgate.core.states import LEASED, RunStatus, TransitionReason
from jobgate.core.transitions import RunChange
from jobgate.service.engine import Engine
from jobgate.store.sqlstore import StoreTx

log = logging.getLogger("jobgate.sla")

ACTOR = "sla-monitor"
ESCALATION_ERROR = "SLA_ESCALATION"
BATCH = 200  # subjects per write transaction


@dataclass
class Subject:
    """A job run or workflow run with what the pass found due for it. ``run`` / ``workflow``
    is set when the pass read it open now: only then may it be escalated."""

    kind: SubjectKind
    tenant_id: str
    subject_id: str
    job_class: str
    job_definition_id: str
    eco_number: str | None
    sla_policy: str | None
    timeout_policy: str | None
    dues: dict[tuple[DeadlineKind, Phase], Due] = field(default_factory=dict)
    run: JobRun | None = None
    workflow: WorkflowSubject | None = None

    def policy_name(self, kind: DeadlineKind) -> str:
        """The policy whose rule a record is about: the timeout policy for a timeout, else the
        SLA policy (each falls back to the other; a record always names one)."""
        first, second = (
            (self.timeout_policy, self.sla_policy) if kind.is_timeout else (self.sla_policy, self.timeout_policy)
        )
        return first or second or "none"


Settled = dict[tuple[str, str], frozenset[tuple[str, str]]]


def record(
    engine: Engine, subjects: Sequence[Subject], now: datetime, settled: Settled | None = None
) -> tuple[int, int, int]:
    """Record and escalate what ``subjects`` have due; (reminders, breaches, escalations) made.

    ``settled`` (kept by the caller between passes): subjects whose records are known, as
    (kind, phase) pairs, and whose escalation is settled (none required, or done). A subject
    with nothing due beyond those is not read again: a run that stays open long after its
    breach costs no query per pass. Records only ever grow, so the memory can miss records
    (then the insert finds them) but never invent one; escalation is always decided on a
    fresh read.
    """
    settled = {} if settled is None else settled
    candidates = [
        s for s in subjects if (s.dues or s.run is not None or s.workflow is not None) and not _known(s, settled)
    ]
    if not candidates:
        return 0, 0, 0
    with engine.store.read() as tx:
        known = tx.sla.breaches_of({(s.tenant_id, s.subject_id) for s in candidates})
    work = [(s, known.get((s.tenant_id, s.subject_id), [])) for s in candidates]
    totals = [0, 0, 0]
    todo = [(s, recorded) for s, recorded in work if _new(s, recorded) or _to_escalate(s, recorded)]
    for start in range(0, len(todo), BATCH):
        with engine.store.write() as tx:
            made = _write(tx, todo[start : start + BATCH], now)
        totals = [a + b for a, b in zip(totals, made, strict=True)]
    for subject, recorded in work:
        # Nothing was written for it and no escalation is pending: settled until a new kind is due.
        if not _new(subject, recorded) and not any(r.requires_escalation and not r.escalated for r in recorded):
            settled[(subject.tenant_id, subject.subject_id)] = frozenset((r.kind, r.phase) for r in recorded)
    return totals[0], totals[1], totals[2]


def _known(subject: Subject, settled: Settled) -> bool:
    pairs = settled.get((subject.tenant_id, subject.subject_id))
    return pairs is not None and all((k.value, p.value) in pairs for k, p in subject.dues)


def _new(subject: Subject, recorded: list[BreachRecord]) -> list[Due]:
    have = {(r.kind, r.phase) for r in recorded}
    return [d for (kind, phase), d in subject.dues.items() if (kind.value, phase.value) not in have]


def _to_escalate(subject: Subject, recorded: list[BreachRecord]) -> bool:
    """Open now, and a breach (recorded or new) requires escalation that has not happened."""
    if subject.run is None and subject.workflow is None:
        return False
    if any(r.requires_escalation and r.escalated for r in recorded):
        return False  # escalated once already (a person may have requeued it since)
    pending = any(r.requires_escalation for r in recorded) or any(
        d.requires_escalation and d.phase is Phase.BREACH for d in subject.dues.values()
    )
    if not pending:
        return False
    if subject.run is not None:
        return escalation_target(subject.run.status) is not None
    return subject.workflow is not None and not subject.workflow.status.is_terminal


def _write(tx: StoreTx, items: list[tuple[Subject, list[BreachRecord]]], now: datetime) -> tuple[int, int, int]:
    """One batch in one transaction: the new records (one insert), the events and audit entries
    of those this monitor inserted, then the escalations."""
    fresh = [(subject, _record_of(subject, d, now)) for subject, recorded in items for d in _new(subject, recorded)]
    taken = tx.sla.breaches_insert([b for _, b in fresh])
    outbox: list[tuple[str | None, str, events.Event]] = []
    audits: list[AuditEvent] = []
    causes: dict[str, BreachRecord] = {}
    reminders = breaches = 0
    for subject, b in fresh:
        if b.sla_breach_id not in taken:
            continue  # another monitor recorded it first: its event, not ours
        run_id = subject.subject_id if subject.kind is SubjectKind.RUN else None
        if b.phase == Phase.REMINDER.value:
            reminders += 1
            outbox.append((run_id, subject.tenant_id, _reminder_event(b)))
            continue
        breaches += 1
        outbox.append((run_id, subject.tenant_id, _breach_event(b)))
        audits.append(_breach_audit(b, now))
        if b.requires_escalation:
            causes.setdefault(subject.subject_id, b)
        log.info(
            "%s %s: %s passed (deadline %s)",
            subject.kind.value,
            subject.subject_id,
            b.kind,
            b.deadline.isoformat(),
            extra={"action": "sla_breach", "job_run_id": run_id, "kind": b.kind},
        )
    if outbox:
        tx.outbox_append(outbox, now)
    if audits:
        tx.audit_append(audits)
    escalated = 0
    for subject, recorded in items:
        cause = next((r for r in recorded if r.requires_escalation), None) or causes.get(subject.subject_id)
        if cause is not None and _to_escalate(subject, [*recorded, cause]) and _escalate_alone(tx, subject, cause, now):
            escalated += 1
    return reminders, breaches, escalated


def _escalate_alone(tx: StoreTx, subject: Subject, cause: BreachRecord, now: datetime) -> bool:
    """One escalation in a savepoint of the batch's transaction: if it fails, only it is undone
    and logged (the breach stays not ``escalated``, so the next pass tries again), and the
    batch keeps the records, events and audit entries of every other subject."""
    try:
        with tx.savepoint("jobgate_escalation"):
            done = _escalate(tx, subject, cause, now)
            if done:
                tx.sla.breaches_mark_escalated(subject.tenant_id, subject.subject_id)
    except Exception:
        log.warning(
            "%s %s: escalation failed; tried again at the next pass",
            subject.kind.value,
            subject.subject_id,
            exc_info=True,
            extra={
                "action": "sla_escalation_failed",
                "job_run_id": subject.run.job_run_id if subject.run else None,
                "workflow_run_id": subject.workflow.workflow_run_id if subject.workflow else None,
                "tenant_id": subject.tenant_id,
                "kind": cause.kind,
            },
        )
        return False
    return done


def _record_of(subject: Subject, d: Due, now: datetime) -> BreachRecord:
    return BreachRecord(
        sla_breach_id=record_id(subject.tenant_id, subject.subject_id, d.kind, d.phase),
        tenant_id=subject.tenant_id,
        subject_kind=subject.kind.value,
        subject_id=subject.subject_id,
        job_class=subject.job_class,
        job_definition_id=subject.job_definition_id,
        eco_number=subject.eco_number,
        kind=d.kind.value,
        phase=d.phase.value,
        sla_policy=subject.policy_name(d.kind),
        deadline=d.deadline,
        detected_at=now,
        severity=d.severity,
        requires_escalation=d.requires_escalation,
    )


def _subject_fields(b: BreachRecord) -> dict[str, Any]:
    return {
        "tenant_id": b.tenant_id,
        "subject_kind": b.subject_kind,
        "subject_id": b.subject_id,
        "job_class": b.job_class,
        "job_definition_id": b.job_definition_id,
        "eco_number": b.eco_number,
        "sla_policy": b.sla_policy,
        "kind": b.kind,
        "deadline": b.deadline,
    }


def _breach_event(b: BreachRecord) -> events.Event:
    return events.sla_breach(
        sla_breach_id=b.sla_breach_id,
        breached_at=b.detected_at,
        severity=b.severity,
        requires_escalation=b.requires_escalation,
        **_subject_fields(b),
    )


def _reminder_event(b: BreachRecord) -> events.Event:
    return events.sla_reminder(sla_reminder_id=b.sla_breach_id, reminded_at=b.detected_at, **_subject_fields(b))


def _breach_audit(b: BreachRecord, now: datetime) -> AuditEvent:
    return AuditEvent(
        b.tenant_id,
        ACTOR,
        "sla.breach",
        b.subject_kind,
        b.subject_id,
        now,
        reason=b.kind,
        payload={
            "sla_breach_id": b.sla_breach_id,
            "sla_policy": b.sla_policy,
            "deadline": b.deadline.isoformat(),
            "severity": b.severity,
            "requires_escalation": b.requires_escalation,
        },
    )


# ---------------------------------------------------------------- escalation
def _escalate(tx: StoreTx, subject: Subject, cause: BreachRecord, now: datetime) -> bool:
    detail = {"sla_breach_id": cause.sla_breach_id, "kind": cause.kind}
    if subject.run is not None:
        change = escalation_change(subject.run, now=now, detail=detail)
        if change is None or not tx.runs_apply([change]):
            return False
        action = f"run.{change.to_status.value.lower()}"
        target = ("run", subject.run.job_run_id)
    else:
        w = subject.workflow
        assert w is not None
        if not tx.sla.workflow_escalate(w, now=now, actor=ACTOR, error_code=ESCALATION_ERROR, detail=detail):
            return False
        tx.outbox_append([(None, w.tenant_id, _workflow_escalated(w, now))], now)
        action = "workflow.escalated"
        target = ("workflow", w.workflow_run_id)
    tx.audit_append(
        [AuditEvent(subject.tenant_id, ACTOR, action, *target, now, reason=TransitionReason.SLA_ESCALATION.value,
                    payload=detail)]
    )  # fmt: skip
    log.info(
        "%s %s: escalated (%s)",
        subject.kind.value,
        subject.subject_id,
        cause.kind,
        extra={"action": "sla_escalation", "job_run_id": subject.run.job_run_id if subject.run else None},
    )
    return True


def escalation_change(run: JobRun, *, now: datetime, detail: dict[str, Any]) -> RunChange | None:
    """The compare-and-set that escalates ``run`` (None: nothing to escalate in its status).

    The transition carries no attempt ``outcome``: it is a recorded fact, not a decision of the
    retry rules, so a replay takes it as recorded (its ``error_code`` included)."""
    target = escalation_target(run.status)
    if target is None:
        return None
    if target is RunStatus.ESCALATED:
        decision = Decision(RunStatus.ESCALATED, TransitionReason.SLA_ESCALATION, requires_manual_review=True)
    else:
        decision = Decision(
            RunStatus.DEAD_LETTERED,
            TransitionReason.SLA_ESCALATION,
            dead_letter_reason=DeadLetterReason.SLA_ESCALATION_REQUIRED,
            requires_manual_review=True,
        )
    s = settle_without_attempt(run, decision, now=now, actor=ACTOR, error_code=ESCALATION_ERROR, detail=detail)
    message = f"SLA escalation: {detail.get('kind', 'a deadline')} passed ({detail.get('sla_breach_id')})"
    # A running run: fenced on the token seen, and revoked, so the worker's completion can no
    # longer match; a claimed one loses its lease.
    running = run.status is RunStatus.RUNNING
    return transitions.settled(
        s,
        run,
        now=now,
        error_message=message,
        fenced_to=run.lease_token if running else None,
        revoke=run.status in LEASED,
    )


def _workflow_escalated(w: WorkflowSubject, now: datetime) -> events.Event:
    return events.workflow_changed(
        events.EventType.WORKFLOW_ESCALATED,
        workflow_run_id=w.workflow_run_id,
        tenant_id=w.tenant_id,
        job_definition_id=w.job_definition_id,
        job_class=w.job_class,
        status=RunStatus.ESCALATED.value,
        error_code=ESCALATION_ERROR,
        now=now,
    )
