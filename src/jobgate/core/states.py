"""The one run state machine (seed 000 §14).

One enum, one table of allowed transitions, one function that checks them. Every transition
carries a named reason, so "retry after failure" and "recovered after lease expiry" stay
distinct in the record. The database mirrors the status set with a CHECK constraint, and the
store applies every change as a compare-and-set on the expected status.
"""

from __future__ import annotations

from enum import StrEnum

from jobgate.core.errors import IllegalTransitionError


class RunStatus(StrEnum):
    CREATED = "CREATED"
    SCHEDULED = "SCHEDULED"
    DISPATCHED = "DISPATCHED"
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    RETRY_WAIT = "RETRY_WAIT"
    FAILED = "FAILED"
    DEAD_LETTERED = "DEAD_LETTERED"
    CANCELLED = "CANCELLED"
    ESCALATED = "ESCALATED"
    HELD = "HELD"  # jobgate's: waiting for a governance gate to clear (``core.governance``); not claimable

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL

    @property
    def is_pending(self) -> bool:
        """Waiting for a worker: may be cancelled, may not be stopped."""
        return self in PENDING


class TransitionReason(StrEnum):
    CREATED = "created"
    ADMITTED = "admitted"
    CLAIMED = "claimed"
    STARTED = "started"
    SUCCEEDED = "succeeded"
    RETRY_SCHEDULED = "retry_scheduled"
    FAILED_NON_RETRYABLE = "failed_non_retryable"
    RETRIES_EXHAUSTED = "retries_exhausted"
    ESCALATED_FOR_REVIEW = "escalated_for_review"
    EXECUTION_TIMEOUT = "execution_timeout"
    QUEUE_TIMEOUT = "queue_timeout"
    LEASE_EXPIRED = "lease_expired"
    RELEASED_ON_SHUTDOWN = "released_on_shutdown"
    RELEASED_UNRUNNABLE = "released_unrunnable"  # this worker cannot import its code: another may
    CANCELLED_BY_USER = "cancelled_by_user"
    STOPPED_BY_USER = "stopped_by_user"
    REQUEUED = "requeued"
    MAXIMUM_AGE_EXCEEDED = "maximum_age_exceeded"
    SLA_ESCALATION = "sla_escalation"  # the SLA monitor: a deadline requires human escalation
    DEPENDENCY_UNAVAILABLE = "dependency_unavailable"  # waited past the bound for a declared dependency
    HELD = "held"  # a gate refused the start of an attempt; the hold reason names it
    RELEASED = "released"  # the gate that held the run admits it again
    APPROVAL_REVOKED = "approval_revoked"  # the approval the run was admitted under was revoked
    DEFINITION_RETIRED = "definition_retired"  # the definition was retired before the attempt started


# Reasons a started attempt goes back to the queue without counting against the run's attempts
# (its ceiling is raised by one, as a requeue raises it): the attempt is kept in the history.
ATTEMPT_RETURNED = frozenset({TransitionReason.RELEASED_ON_SHUTDOWN, TransitionReason.RELEASED_UNRUNNABLE})

PENDING = frozenset(
    {RunStatus.CREATED, RunStatus.SCHEDULED, RunStatus.DISPATCHED, RunStatus.RETRY_WAIT, RunStatus.HELD}
)
TERMINAL = frozenset(
    {RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.DEAD_LETTERED, RunStatus.CANCELLED, RunStatus.ESCALATED}
)
CLAIMABLE = frozenset({RunStatus.SCHEDULED, RunStatus.RETRY_WAIT})
LEASED = frozenset({RunStatus.DISPATCHED, RunStatus.RUNNING})

S = RunStatus
ALLOWED: dict[RunStatus, frozenset[RunStatus]] = {
    S.CREATED: frozenset({S.SCHEDULED, S.CANCELLED}),
    # -> HELD: a gate refused the start of an attempt (safe mode, trust gates, code changed, ...).
    S.SCHEDULED: frozenset({S.DISPATCHED, S.CANCELLED, S.DEAD_LETTERED, S.HELD}),
    # DISPATCHED -> SCHEDULED: claimed but never started (graceful shutdown, lease expiry).
    S.DISPATCHED: frozenset({S.RUNNING, S.SCHEDULED, S.CANCELLED, S.DEAD_LETTERED, S.HELD}),
    # RUNNING -> SCHEDULED: the attempt handed back, not used (``ATTEMPT_RETURNED``): its worker
    # shut down past the grace period, or cannot import the run's code on its host.
    S.RUNNING: frozenset({S.COMPLETED, S.RETRY_WAIT, S.FAILED, S.DEAD_LETTERED, S.CANCELLED, S.ESCALATED, S.SCHEDULED}),
    S.RETRY_WAIT: frozenset({S.DISPATCHED, S.CANCELLED, S.DEAD_LETTERED, S.HELD}),
    # Released when its gate admits it again; cancelled by a person or a final rule (approval
    # revoked); dead-lettered when it waited past its queue timeout or the maximum run age.
    S.HELD: frozenset({S.SCHEDULED, S.CANCELLED, S.DEAD_LETTERED}),
    # Requeue of a dead letter or an escalated run after review: a new attempt, same key.
    S.DEAD_LETTERED: frozenset({S.SCHEDULED}),
    S.ESCALATED: frozenset({S.SCHEDULED}),
    S.COMPLETED: frozenset(),
    S.FAILED: frozenset(),
    S.CANCELLED: frozenset(),
}


def is_allowed(source: RunStatus, target: RunStatus) -> bool:
    return target in ALLOWED[source]


def check_transition(source: RunStatus, target: RunStatus, *, job_run_id: str = "") -> None:
    """Raise ``IllegalTransitionError`` unless ``source -> target`` is in the table."""
    if not is_allowed(source, target):
        where = f"run {job_run_id}: " if job_run_id else ""
        raise IllegalTransitionError(f"{where}illegal transition {source.value} -> {target.value}", field="status")


def sources_of(target: RunStatus) -> frozenset[RunStatus]:
    """Every status a run may be in to move to ``target``: the store's compare-and-set set."""
    return frozenset(s for s, targets in ALLOWED.items() if target in targets)
