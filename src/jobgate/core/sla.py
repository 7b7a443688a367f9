"""SLA rules (seed 000 §22-23, §34-35): which reminders and breaches are due for a subject.

A subject is a job run or a workflow run. The monitor observes it in two ways, and this module
decides from either in the same way:

- *live*: the subject is open now and was read at ``at = now``;
- *ended*: a transition took it out of an open status at ``at`` (an attempt ended, the run
  ended, a waiting run was claimed); ``status`` is the status it left.

A deadline of some kind is breached when the subject was seen, at an instant at or after the
deadline, in a status that kind watches. A subject that left the watched status before the
deadline never breaches it, so "the run ended after its deadline" and "the run is still open
past its deadline" are the same rule, and a run that finished in time is never reported.
Reminders come only from live observations, ``deadline - remind_before <= now < deadline``: a
reminder for a subject that already ended, or after its deadline, would tell nobody anything.

What each kind watches, and from when:

- ``execution_timeout``: RUNNING, from the current attempt's start (the worker stops the attempt
  at that instant; the monitor reports it);
- ``queue_timeout``: waiting for a worker (SCHEDULED, RETRY_WAIT), until ``queue_deadline_at``
  (the rescuer dead-letters the run then; the monitor reports it);
- ``sla_deadline``, ``escalation_deadline``, ``evidence_deadline``: any open status, from the
  subject's creation (the evidence deadline from the instant held by the policy's
  ``evidence_anchor_param`` when the subject carries that parameter: the quarantine's opening
  is what evidence is due against, not when a check job happened to be created);
- ``retry_window``: a retry pending or running (RETRY_WAIT; SCHEDULED or DISPATCHED after an
  attempt; RUNNING from the second attempt on), from the first attempt's start.

Pure: no clock, no I/O; the monitor passes the observation in.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from jobgate.core.policies import SlaPolicy
from jobgate.core.states import RunStatus

SLA_RECORD_PREFIX = "TGSLA-"
DEFAULT_SEVERITY = "warning"  # a timeout of a subject without an SLA policy
# Which definitions' subjects the monitor looks at, by creation: (definitions, created before, as
# UTC microseconds) per group of SLA policies that share an offset.
SlaGroups = Sequence[tuple[Sequence[str], int]]
RUNS_CURSOR = "sla-monitor:runs"  # how far the monitor has read the runs' ids (named cursor)
WORKFLOWS_CURSOR = "sla-monitor:workflows"


class DeadlineKind(StrEnum):
    EXECUTION_TIMEOUT = "execution_timeout"
    QUEUE_TIMEOUT = "queue_timeout"
    SLA_DEADLINE = "sla_deadline"
    RETRY_WINDOW = "retry_window"
    ESCALATION_DEADLINE = "escalation_deadline"
    EVIDENCE_DEADLINE = "evidence_deadline"

    @property
    def is_timeout(self) -> bool:
        """Enforced by the worker or the rescuer (``TimeoutPolicy``); the monitor only reports it."""
        return self in (DeadlineKind.EXECUTION_TIMEOUT, DeadlineKind.QUEUE_TIMEOUT)


class Phase(StrEnum):
    REMINDER = "reminder"
    BREACH = "breach"


class SubjectKind(StrEnum):
    RUN = "run"
    WORKFLOW = "workflow"


WAITING = frozenset({RunStatus.SCHEDULED, RunStatus.RETRY_WAIT})


@dataclass(frozen=True)
class Observation:
    """One look at a subject: open in ``status`` at ``at`` (see the module docstring).

    ``attempt`` is the run's attempt counter at that moment (0 before the first start);
    ``first_started_at`` the first attempt's start; ``attempt_started_at`` the start of attempt
    ``attempt`` when ``status`` is RUNNING. ``evidence_anchor`` is what the evidence deadline
    counts from (``evidence_anchor`` below), ``created_at`` when absent. Workflow runs have no
    attempts and no timeouts: those fields stay empty.
    """

    status: RunStatus
    at: datetime
    live: bool
    created_at: datetime
    attempt: int = 0
    first_started_at: datetime | None = None
    attempt_started_at: datetime | None = None
    queue_deadline_at: datetime | None = None
    execution_timeout: timedelta | None = None
    evidence_anchor: datetime | None = None


@dataclass(frozen=True)
class Due:
    """A reminder or breach the observation shows: at most one per kind and phase."""

    kind: DeadlineKind
    phase: Phase
    deadline: datetime
    severity: str
    requires_escalation: bool


def due(obs: Observation, policy: SlaPolicy | None) -> list[Due]:
    """The reminders and breaches ``obs`` shows under ``policy`` (None: timeouts only).

    Recording each at most once is the store's part (a unique key per subject, kind and
    phase); this says only what the observation proves.
    """
    if obs.status.is_terminal:
        return []
    severity = policy.severity if policy is not None else DEFAULT_SEVERITY
    out: list[Due] = []
    if obs.status is RunStatus.RUNNING and obs.execution_timeout is not None and obs.attempt_started_at is not None:
        deadline = obs.attempt_started_at + obs.execution_timeout
        if obs.at >= deadline:
            out.append(Due(DeadlineKind.EXECUTION_TIMEOUT, Phase.BREACH, deadline, severity, False))
    if obs.status in WAITING and obs.queue_deadline_at is not None and obs.at >= obs.queue_deadline_at:
        out.append(Due(DeadlineKind.QUEUE_TIMEOUT, Phase.BREACH, obs.queue_deadline_at, severity, False))
    if policy is None:
        return out
    for kind, deadline in policy_deadlines(obs, policy):
        if obs.at >= deadline:
            escalate = kind is DeadlineKind.ESCALATION_DEADLINE or policy.requires_escalation
            level = "critical" if kind is DeadlineKind.ESCALATION_DEADLINE else severity
            out.append(Due(kind, Phase.BREACH, deadline, level, escalate))
        elif obs.live and policy.remind_before is not None and obs.at >= deadline - policy.remind_before:
            out.append(Due(kind, Phase.REMINDER, deadline, "info", False))
    if policy.retry_window is not None and obs.first_started_at is not None and _retrying(obs):
        deadline = obs.first_started_at + policy.retry_window
        if obs.at >= deadline:
            out.append(Due(DeadlineKind.RETRY_WINDOW, Phase.BREACH, deadline, severity, policy.requires_escalation))
    return out


def policy_deadlines(obs: Observation, policy: SlaPolicy) -> list[tuple[DeadlineKind, datetime]]:
    """The deadlines counted from creation (or the evidence anchor) that may have reminders."""
    out = [(DeadlineKind.SLA_DEADLINE, obs.created_at + policy.deadline)]
    if policy.escalation_after is not None:
        out.append((DeadlineKind.ESCALATION_DEADLINE, obs.created_at + policy.escalation_after))
    if policy.evidence_deadline is not None:
        out.append((DeadlineKind.EVIDENCE_DEADLINE, (obs.evidence_anchor or obs.created_at) + policy.evidence_deadline))
    return out


def _retrying(obs: Observation) -> bool:
    """A retry is pending or running: at least one attempt ended and the run is still open."""
    if obs.status is RunStatus.RETRY_WAIT:
        return True
    if obs.status is RunStatus.RUNNING:
        return obs.attempt >= 2
    return obs.status in (RunStatus.SCHEDULED, RunStatus.DISPATCHED) and obs.attempt >= 1


def earliest_offset(policy: SlaPolicy) -> timedelta:
    """How long after its creation a subject under ``policy`` can first have something due
    (a reminder or a breach): the monitor reads only subjects at least this old.

    An evidence deadline anchored on a parameter may lie before creation, so it gives zero.
    The retry window counts from the first start, which is never before creation.
    """
    remind = policy.remind_before or timedelta(0)
    offsets = [policy.deadline - remind]
    if policy.escalation_after is not None:
        offsets.append(policy.escalation_after - remind)
    if policy.evidence_deadline is not None:
        offsets.append(timedelta(0) if policy.evidence_anchor_param else policy.evidence_deadline - remind)
    if policy.retry_window is not None:
        offsets.append(policy.retry_window)
    return max(timedelta(0), min(offsets))


MAX_ANCHOR_DISTANCE = timedelta(days=36525)  # a century either way of the subject's creation


def evidence_anchor(policy: SlaPolicy | None, params: Mapping[str, Any], created_at: datetime) -> datetime:
    """What the evidence deadline counts from: the instant in the parameter the policy names
    (ISO 8601 with an offset, e.g. ``2026-06-25T12:22:44Z``), else the subject's creation. A
    missing or unreadable value, or one more than a century from the creation, falls back to
    creation rather than silencing the deadline."""
    name = policy.evidence_anchor_param if policy is not None else None
    value = params.get(name) if name else None
    if not isinstance(value, str):
        return created_at
    try:
        instant = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return created_at
    if instant.tzinfo is None:
        return created_at
    # An instant further than a century from the subject's creation is no anchor of it; and one
    # near the calendar's end would overflow with the deadline added (found by a review: one
    # run's ``9999-12-31`` stopped the monitor's every pass, for every tenant).
    if abs(instant - created_at) > MAX_ANCHOR_DISTANCE:
        return created_at
    return instant


def escalation_target(status: RunStatus) -> RunStatus | None:
    """Where a job run goes when a breach requires escalation, by the status it is in.

    A RUNNING run moves to ESCALATED (the state machine's RUNNING -> ESCALATED) and its lease is
    revoked, so its worker's fenced completion is refused. A run that has not started (SCHEDULED,
    RETRY_WAIT, DISPATCHED) is dead-lettered with ``sla_escalation_required`` and
    ``requires_manual_review``: seed §14 reaches ESCALATED only from RUNNING, and a dead letter
    awaiting review says the same thing to the operator ("a person must look at this before
    it runs"), is listed by ``jobgate dlq list`` and is requeued by ``jobgate dlq requeue``
    after that review, with no new edge in the state machine. Terminal runs stay as they are.
    """
    if status is RunStatus.RUNNING:
        return RunStatus.ESCALATED
    if status in (RunStatus.SCHEDULED, RunStatus.RETRY_WAIT, RunStatus.DISPATCHED):
        return RunStatus.DEAD_LETTERED
    return None


def record_id(tenant_id: str, subject_id: str, kind: DeadlineKind, phase: Phase) -> str:
    """The id of the one record of ``kind``/``phase`` for a subject: derived, so two monitors
    computing it agree, and a replay names it the same."""
    raw = "\x1f".join((tenant_id, subject_id, kind.value, phase.value)).encode()
    return SLA_RECORD_PREFIX + hashlib.sha256(raw).hexdigest()[:32]


MAX_ECO_NUMBER = 200  # as a scope's key is bounded, and the breach record holds


def eco_number(scope: Mapping[str, Any], params: Mapping[str, Any]) -> str | None:
    """The ECO a subject concerns (seed §23 ``eco_number``): its scope's key, else its parameter.
    A value longer than an ECO number may be is none (found by a review: a 300-character param
    failed the breach record's insert, and with it every pass of the monitor, on PostgreSQL)."""
    for source in (scope, params):
        value = source.get("eco_number")
        if isinstance(value, str) and 0 < len(value) <= MAX_ECO_NUMBER:
            return value
    return None
