"""Every change of a run, by name: the one door through which a status change is made (pure).

The state machine (``core.states``) says which moves exist; this module builds each move as the
``RunChange`` the store applies as a compare-and-set: the transition with its named reason, the
columns it sets (``RunValues``), the events it publishes and, for a run it dead-letters, the dead
letter. ``RunChange`` checks the table when it is made, so a change the table forbids cannot be
built, whoever builds it (``dataclasses.replace`` included), and the store checks it again
before it writes one.

==================  ===============================================  ==============================
constructor         move                                             made by
==================  ===============================================  ==============================
``claimed``         SCHEDULED / RETRY_WAIT -> DISPATCHED             the claim (its SQL, see below)
``started``         DISPATCHED -> RUNNING, attempt + 1               a worker
``released``        DISPATCHED -> SCHEDULED, no attempt used         a worker's shutdown, the rescuer
``settled``         the end (or retry wait) a ``Settlement`` decided  worker, rescuer, SLA, dependencies
``exhausted``       DISPATCHED -> DEAD_LETTERED, never started       a worker (attempts lowered by hand)
``held``            pending -> HELD (a gate refused the attempt)      the claim's admission rule
``hold_released``   HELD -> SCHEDULED                                the rescuer
``refused``         pending -> CANCELLED (a final refusal)            the claim, the rescuer
``cancelled``       pending -> CANCELLED                             a person
``requeued``        DEAD_LETTERED / ESCALATED -> SCHEDULED           a person
==================  ===============================================  ==============================

A claim is one SQL statement per backend (``store.sql.claims``): ``claimed`` and ``started`` say
what it must write, and ``tests/store_contract`` holds the statement's rows to theirs.

Which ends the audit log records (seed 000 §49) is one rule here too, ``material``: the worker
and the rescuer both ask it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, TypedDict

from jobgate.core import events
from jobgate.core.audit import AuditEvent
from jobgate.core.decide import Decision
from jobgate.core.errors import IllegalTransitionError
from jobgate.core.events import Event
from jobgate.core.governance import Verdict
from jobgate.core.models import DeadLetter, DeadLetterReason, JobRun, Transition
from jobgate.core.settle import Settlement, cancel_decision, settle_without_attempt
from jobgate.core.states import ALLOWED, ATTEMPT_RETURNED, RunStatus, TransitionReason


class RunValues(TypedDict, total=False):
    """The columns of a run a change may set besides its status, attempt and lease (the store's
    compare-and-set writes those itself). Typed: a misspelt column or a value of the wrong kind
    is a type error, not a statement the database refuses at run time."""

    due_at: datetime | None
    next_retry_at: datetime | None
    queue_deadline_at: datetime | None
    started_at: datetime | None
    ended_at: datetime | None
    error_code: str | None
    error_message: str | None
    result: dict[str, Any] | None
    result_ref: str | None
    artifact_path: str | None
    artifact_sha256: str | None
    artifact_size: int | None
    progress: float | None
    progress_message: str | None
    hold_reason: str | None
    held_at: datetime | None
    max_attempts: int
    reviewed_by: str | None


RUN_VALUE_COLUMNS = frozenset(RunValues.__annotations__)


@dataclass(frozen=True)
class RunChange:
    """One compare-and-set status change and everything written with it if it matches.

    ``expected_token`` (a worker's write) fences the change to the lease holder; ``revoke_lease``
    bumps the token so a holder who is not the writer (a rescued or cancelled run) can no longer
    write; ``lease_expired_before``: the rescuer's, the lease must still be expired. Made by the
    constructors of this module; a move the state machine forbids is refused here.
    """

    job_run_id: str
    tenant_id: str
    from_status: RunStatus
    to_status: RunStatus
    transition: Transition
    expected_token: int | None = None
    revoke_lease: bool = False
    start_attempt: bool = False
    values: RunValues = field(default_factory=lambda: RunValues())
    events: tuple[Event, ...] | list[Event] = ()
    dead_letter: DeadLetter | None = None
    lease_expired_before: datetime | None = None

    def __post_init__(self) -> None:
        check_change(self)

    def with_dead_letter_id(self, dead_letter_id: str) -> RunChange:
        """This change with its dead letter, and the event announcing it, under ``dead_letter_id``
        (the store numbers a repeat dead letter of one run and attempt, ``settle.repeat_dead_letter_id``:
        the record and its announcement must name the same id)."""
        letter = self.dead_letter
        assert letter is not None, "only a change that dead-letters has a dead letter to rename"
        old = letter.dead_letter_id
        renamed: list[Event] = [
            (kind, {**body, "dead_letter_id": dead_letter_id}) if body.get("dead_letter_id") == old else (kind, body)
            for kind, body in self.events
        ]
        return replace(self, dead_letter=replace(letter, dead_letter_id=dead_letter_id), events=renamed)


def check_change(change: RunChange) -> None:
    """Refuse a change the state machine forbids, one whose transition says another move, or
    one that sets a column no change may set (``IllegalTransitionError``)."""
    source, target = change.from_status, change.to_status
    if target not in ALLOWED[source]:
        raise IllegalTransitionError(
            f"run {change.job_run_id}: illegal transition {source.value} -> {target.value}", field="status"
        )
    t = change.transition
    if t.from_status is not source or t.to_status is not target or t.job_run_id != change.job_run_id:
        raise IllegalTransitionError(f"run {change.job_run_id}: its transition records another move", field="status")
    if not RUN_VALUE_COLUMNS.issuperset(change.values):
        unknown = sorted(set(change.values) - RUN_VALUE_COLUMNS)
        raise IllegalTransitionError(f"run {change.job_run_id}: no change sets {unknown}", field="values")


def _ref(run: Any) -> events.RunRef:
    job_class = run.job_class if isinstance(run.job_class, str) else run.job_class.value
    return events.RunRef(run.job_run_id, job_class, run.job_definition_id, run.tenant_id, run.idempotency_key)


def _status(value: Any) -> RunStatus:
    return value if isinstance(value, RunStatus) else RunStatus(value)


# ---------------------------------------------------------------------------- a worker's moves


def claimed(run: JobRun, *, worker_id: str, now: datetime) -> Transition:
    """SCHEDULED / RETRY_WAIT -> DISPATCHED: the transition a claim records for ``run`` (as it
    was before the claim). The claim's SQL writes it, with the lease, for a batch at once."""
    return Transition(
        run.job_run_id, run.status, RunStatus.DISPATCHED, run.attempt, TransitionReason.CLAIMED.value, worker_id, now
    )


def started(run: JobRun, *, worker_id: str, now: datetime) -> RunChange:
    """DISPATCHED -> RUNNING: the attempt counter moves here, so a claim never started costs
    nothing. ``run`` is as claimed (DISPATCHED, its lease token)."""
    attempt = run.attempt + 1
    values = RunValues(progress=None, progress_message=None)
    if run.started_at is None:
        values["started_at"] = now
    return RunChange(
        job_run_id=run.job_run_id,
        tenant_id=run.tenant_id,
        from_status=RunStatus.DISPATCHED,
        to_status=RunStatus.RUNNING,
        transition=Transition(
            run.job_run_id, RunStatus.DISPATCHED, RunStatus.RUNNING, attempt, TransitionReason.STARTED.value,
            worker_id, now,
        ),
        expected_token=run.lease_token,
        start_attempt=True,
        values=values,
        events=[events.started_event(events.StartedRun.of(run, attempt), now)],
    )  # fmt: skip


def released(
    run: JobRun,
    *,
    actor: str,
    now: datetime,
    reason: TransitionReason,
    fenced: bool = True,
    lease_expired_before: datetime | None = None,
) -> RunChange:
    """DISPATCHED -> SCHEDULED without using an attempt (a shutdown, or a claim whose lease
    lapsed): by its holder, fenced to its token; by someone else, revoking the token, and with
    ``lease_expired_before`` (the rescuer) fenced to the token seen and only while it is expired."""
    expired = lease_expired_before is not None
    return RunChange(
        job_run_id=run.job_run_id,
        tenant_id=run.tenant_id,
        from_status=RunStatus.DISPATCHED,
        to_status=RunStatus.SCHEDULED,
        transition=Transition(
            run.job_run_id, RunStatus.DISPATCHED, RunStatus.SCHEDULED, run.attempt, reason.value, actor, now
        ),
        expected_token=run.lease_token if fenced or expired else None,
        revoke_lease=not fenced or expired,
        values=RunValues(due_at=now),
        lease_expired_before=lease_expired_before,
    )


def returned(run: JobRun, *, actor: str, now: datetime, reason: TransitionReason, note: str) -> RunChange:
    """RUNNING -> SCHEDULED by the attempt's holder (fenced to its lease), the attempt handed
    back: the run's ceiling rises by one, so the next attempt is not one fewer. ``reason`` is
    one of ``ATTEMPT_RETURNED``; ``note`` says why, for the history."""
    if reason not in ATTEMPT_RETURNED:
        raise ValueError(f"{reason} does not return an attempt")
    return RunChange(
        job_run_id=run.job_run_id,
        tenant_id=run.tenant_id,
        from_status=RunStatus.RUNNING,
        to_status=RunStatus.SCHEDULED,
        transition=Transition(
            run.job_run_id,
            RunStatus.RUNNING,
            RunStatus.SCHEDULED,
            run.attempt,
            reason.value,
            actor,
            now,
            {"reason": note},
        ),
        expected_token=run.lease_token,
        values=RunValues(due_at=now, max_attempts=run.max_attempts + 1, progress=None, progress_message=None),
    )


def settled(
    s: Settlement,
    run: JobRun,
    *,
    now: datetime,
    error_message: str | None = None,
    fenced_to: int | None = None,
    revoke: bool = False,
    lease_expired_before: datetime | None = None,
) -> RunChange:
    """The change a ``Settlement`` decided: an end, or a wait for the next attempt.

    ``error_message`` replaces the outcome's (a rule's own wording: a dependency, an SLA);
    ``fenced_to`` fences a change that the settlement did not (one made by someone other than
    the lease holder, for a leased run); ``revoke`` moves the lease token;
    ``lease_expired_before``: the rescuer's, applied only while the lease is still expired."""
    values = RunValues(
        error_code=s.error_code, error_message=s.error_message if error_message is None else error_message
    )
    if s.to_status is RunStatus.RETRY_WAIT:
        values.update({"next_retry_at": s.decision.next_retry_at, "due_at": s.decision.next_retry_at})
        if run.queue_deadline_at is not None and s.decision.next_retry_at is not None:
            # The queue timeout bounds each wait for a worker, so it restarts from the retry's due time.
            values["queue_deadline_at"] = s.decision.next_retry_at + (run.queue_deadline_at - run.due_at)
    else:
        values.update({"ended_at": now, "next_retry_at": None})
    if run.status is RunStatus.HELD:  # ended while held (queue timeout, maximum age): no longer held
        values.update({"hold_reason": None, "held_at": None})
    if s.to_status is RunStatus.COMPLETED:
        values.update({"result": s.result or {}, "progress": 1.0})
        if s.artifact is not None:
            values.update(
                {
                    "artifact_path": s.artifact[0],
                    "artifact_sha256": s.artifact[1],
                    "artifact_size": s.artifact[2],
                    "result_ref": s.artifact[0],
                }
            )
    return RunChange(
        job_run_id=run.job_run_id,
        tenant_id=run.tenant_id,
        from_status=s.from_status,
        to_status=s.to_status,
        transition=s.transition,
        expected_token=s.expected_token if fenced_to is None else fenced_to,
        revoke_lease=revoke,
        values=values,
        events=list(s.events),
        dead_letter=s.dead_letter,
        lease_expired_before=lease_expired_before,
    )


def exhausted(run: JobRun, *, actor: str, now: datetime) -> RunChange:
    """A claimed run with no attempt left (its bound was lowered by hand): dead-lettered, never run."""
    decision = Decision(
        RunStatus.DEAD_LETTERED,
        TransitionReason.RETRIES_EXHAUSTED,
        dead_letter_reason=DeadLetterReason.MAXIMUM_RETRIES_EXCEEDED,
    )
    s = settle_without_attempt(run, decision, now=now, actor=actor, error_code="MAX_ATTEMPTS_REACHED")
    return settled(s, run, now=now, fenced_to=run.lease_token)


# ---------------------------------------------------------------------------- gates


def _refusal_detail(verdict: Verdict) -> dict[str, Any]:
    code = None if verdict.code is None else verdict.code.value
    return {"code": code, "rule": verdict.rule, "message": verdict.message}


def held(run: Any, verdict: Verdict, *, actor: str, now: datetime) -> RunChange:
    """A waiting (or claimed, unstarted) run whose next attempt a gate refused -> HELD, named by
    the refusal's code. No attempt is used; a claimed run loses its lease (fenced to it).
    ``run``: a ``JobRun`` or a claim candidate (anything with their fields)."""
    source = _status(run.status)
    code = None if verdict.code is None else verdict.code.value
    return RunChange(
        job_run_id=run.job_run_id,
        tenant_id=run.tenant_id,
        from_status=source,
        to_status=RunStatus.HELD,
        transition=Transition(
            run.job_run_id, source, RunStatus.HELD, run.attempt, TransitionReason.HELD.value, actor, now,
            _refusal_detail(verdict),
        ),
        expected_token=run.lease_token if source is RunStatus.DISPATCHED else None,
        values=RunValues(hold_reason=code, held_at=now),
        events=[events.job_held(_ref(run), code=code or "held", rule=verdict.rule, message=verdict.message, now=now)],
    )  # fmt: skip


def hold_released(run: Any, *, actor: str, now: datetime) -> RunChange:
    """HELD -> SCHEDULED: the gate that held the run admits it; it keeps its place (due time)."""
    return RunChange(
        job_run_id=run.job_run_id,
        tenant_id=run.tenant_id,
        from_status=RunStatus.HELD,
        to_status=RunStatus.SCHEDULED,
        transition=Transition(
            run.job_run_id, RunStatus.HELD, RunStatus.SCHEDULED, run.attempt, TransitionReason.RELEASED.value, actor,
            now, {"hold_reason": run.hold_reason},
        ),
        values=RunValues(hold_reason=None, held_at=None),
        events=[events.job_released(_ref(run), held_for=run.hold_reason, now=now)],
    )  # fmt: skip


_FINAL_REASONS = {
    "approval_revoked": TransitionReason.APPROVAL_REVOKED,
    "definition_retired": TransitionReason.DEFINITION_RETIRED,
}


def refused(run: Any, verdict: Verdict, *, actor: str, now: datetime) -> RunChange:
    """A run whose next attempt a final rule refused (its approval was revoked, its definition
    retired) -> CANCELLED: its remaining attempts will never run."""
    source = _status(run.status)
    code = None if verdict.code is None else verdict.code.value
    reason = _FINAL_REASONS.get(code or "", TransitionReason.CANCELLED_BY_USER)
    return RunChange(
        job_run_id=run.job_run_id,
        tenant_id=run.tenant_id,
        from_status=source,
        to_status=RunStatus.CANCELLED,
        transition=Transition(
            run.job_run_id, source, RunStatus.CANCELLED, run.attempt, reason.value, actor, now,
            {**_refusal_detail(verdict), "error_code": code},
        ),
        expected_token=run.lease_token if source is RunStatus.DISPATCHED else None,
        revoke_lease=source is RunStatus.DISPATCHED,
        values=RunValues(ended_at=now, error_code=code, error_message=verdict.message, hold_reason=None),
        events=[events.job_cancelled(_ref(run), actor=actor, reason=code, now=now)],
    )  # fmt: skip


# ---------------------------------------------------------------------------- a person's moves


def cancelled(
    run: JobRun,
    *,
    actor: str,
    reason: str | None,
    now: datetime,
    why: TransitionReason = TransitionReason.CANCELLED_BY_USER,
) -> RunChange:
    """A pending run cancelled (a claimed, unstarted one loses its lease). ``reason``: the
    person's words, in the transition and the event; ``why``: the transition's reason."""
    s = settle_without_attempt(
        run, cancel_decision(why), now=now, actor=actor, detail={"reason": reason} if reason else None
    )
    values = RunValues(ended_at=now)
    if run.status is RunStatus.HELD:
        values.update({"hold_reason": None, "held_at": None})
    return RunChange(
        job_run_id=run.job_run_id,
        tenant_id=run.tenant_id,
        from_status=run.status,
        to_status=s.to_status,
        transition=s.transition,
        revoke_lease=run.status is RunStatus.DISPATCHED,
        values=values,
        events=[events.job_cancelled(run, actor=actor, reason=reason, now=now)],
    )


def requeued(run: JobRun, *, actor: str, now: datetime) -> RunChange:
    """A dead-lettered or escalated run given one more attempt, same idempotency key: its
    attempt bound grows by one, and the operator who decided it is recorded (the transition's
    actor). It is no second person's review of the run: ``reviewed_by`` stays as it was."""
    return RunChange(
        job_run_id=run.job_run_id,
        tenant_id=run.tenant_id,
        from_status=run.status,
        to_status=RunStatus.SCHEDULED,
        transition=Transition(
            run.job_run_id, run.status, RunStatus.SCHEDULED, run.attempt, TransitionReason.REQUEUED.value, actor, now
        ),
        values=RunValues(
            max_attempts=run.attempt + 1,
            due_at=now,
            ended_at=None,
            next_retry_at=None,
            queue_deadline_at=None,
        ),
        events=[events.job_requeued(run, actor=actor, now=now)],
    )


# ---------------------------------------------------------------------------- audit


_ALWAYS_MATERIAL = frozenset({RunStatus.DEAD_LETTERED, RunStatus.ESCALATED, RunStatus.CANCELLED})


def material(change: RunChange, *, audit_required: Callable[[], bool]) -> bool:
    """Seed 000 §49: does the audit log record this change? Dead letters, escalations, job
    cancellations and retry exhaustion always; every end of a run whose definition says
    ``audit_required`` (asked only when the rest does not decide); routine ends and waits not
    (they are operational telemetry)."""
    to = change.to_status
    if not to.is_terminal:
        return False
    if to in _ALWAYS_MATERIAL or change.transition.reason == TransitionReason.RETRIES_EXHAUSTED:
        return True
    return audit_required()


def end_audit_event(change: RunChange, *, actor: str, now: datetime, job_definition_id: str) -> AuditEvent:
    """The audit entry of a material end (``material``), written in the change's transaction."""
    return AuditEvent(
        tenant_id=change.tenant_id,
        actor=actor,
        action=f"run.{change.to_status.value.lower()}",
        target_type="run",
        target_id=change.job_run_id,
        at=now,
        reason=change.values.get("error_code") or change.transition.reason,
        payload={"attempt": change.transition.attempt, "job_definition_id": job_definition_id},
    )


def gate_audit_event(change: RunChange, *, actor: str, now: datetime) -> AuditEvent:
    """The audit entry of a hold, a release or a gate's cancellation (seed §49: a governance
    decision about a run is material), written with the change."""
    detail = change.transition.detail
    action = {RunStatus.HELD: "run.held", RunStatus.SCHEDULED: "run.released"}.get(change.to_status, "run.cancelled")
    code = detail.get("code") or detail.get("hold_reason")
    payload = {"attempt": change.transition.attempt, "rule": detail.get("rule"), "message": detail.get("message")}
    return AuditEvent(change.tenant_id, actor, action, "run", change.job_run_id, now, reason=code, payload=payload)
