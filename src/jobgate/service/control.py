"""Operator use cases on existing runs: cancel, stop, requeue, and the reads behind ``runs show``.

Cancel applies to pending runs only and stop to running ones only; the wrong one for the
run's state is a ``ConflictError`` (409 at the API), never a silent no-op.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from jobgate.core import events, transitions
from jobgate.core.errors import ConflictError, NotFoundError, ValidationError
from jobgate.core.models import Attempt, DeadLetter, JobRun, Transition
from jobgate.core.params import UNREADABLE, check_text, readable_value
from jobgate.core.records import AuditFilter
from jobgate.core.states import RunStatus, TransitionReason
from jobgate.service import audit
from jobgate.service.absent import no_run
from jobgate.service.engine import Engine
from jobgate.service.letters import DEAD_LETTER_CLOSED, letter_closed
from jobgate.store.sqlstore import StoreTx


@dataclass(frozen=True)
class RunDetail:
    run: JobRun
    transitions: list[Transition]
    attempts: list[Attempt]
    dead_letter: DeadLetter | None


def run_detail(engine: Engine, job_run_id: str, tenant_id: str | None = None) -> RunDetail:
    with engine.store.read() as tx:
        run = tx.run_get(job_run_id, tenant_id)
        if run is None:
            raise no_run(tx, job_run_id, tenant_id)
        return RunDetail(
            run, tx.run_transitions(job_run_id), tx.run_attempts(job_run_id), tx.dead_letter_open_for(job_run_id)
        )


def cancel_run(
    engine: Engine, job_run_id: str, *, actor: str, reason: str | None = None, tenant_id: str | None = None
) -> JobRun:
    """Cancel a run that has not started. A claimed-but-unstarted run loses its lease too."""
    check_text(reason, "reason", lines=True)
    now = engine.clock.now()
    with engine.store.write() as tx:
        cancel_in(tx, job_run_id, actor=actor, reason=reason, tenant_id=tenant_id, now=now)
        updated = tx.run_get(job_run_id)
    assert updated is not None
    return updated


def cancel_in(
    tx: StoreTx, job_run_id: str, *, actor: str, reason: str | None, tenant_id: str | None, now: datetime
) -> None:
    """``cancel_run`` inside the caller's write transaction (a schedule's ``replace`` cancels in
    the fire's own fenced transaction). Refused with nothing written unless the run is pending."""
    run = tx.run_get(job_run_id, tenant_id)
    if run is None:
        raise no_run(tx, job_run_id, tenant_id)
    refuse_compensation(tx, run, "cancelled")
    if not run.status.is_pending:
        hint = " (use stop for a running run)" if run.status is RunStatus.RUNNING else ""
        raise ConflictError(f"run is {run.status.value}; only a pending run can be cancelled{hint}", field="status")
    change = transitions.cancelled(run, actor=actor, reason=reason, now=now)
    if not tx.runs_apply([change]):
        raise ConflictError("run changed state while being cancelled; try again", field="status")
    audit.record(tx, audit.event(run.tenant_id, actor, "run.cancelled", "run", run.job_run_id, now, reason=reason))


def stop_run(
    engine: Engine, job_run_id: str, *, actor: str, reason: str | None = None, tenant_id: str | None = None
) -> JobRun:
    """Ask the worker running this run to stop it (SIGTERM, then kill after the grace period).

    Asynchronous like seed 004's Stop: this records the request; the run lands in CANCELLED
    when its worker observes the exit.
    """
    check_text(reason, "reason", lines=True)
    with engine.store.write() as tx:
        stop_in(tx, job_run_id, actor=actor, reason=reason, tenant_id=tenant_id, now=engine.clock.now())
        updated = tx.run_get(job_run_id)
    assert updated is not None
    return updated


def stop_in(
    tx: StoreTx, job_run_id: str, *, actor: str, reason: str | None, tenant_id: str | None, now: datetime
) -> None:
    """``stop_run`` inside the caller's write transaction. Refused with nothing written unless
    the run is running; a second request while the first stands writes nothing either."""
    run = tx.run_get(job_run_id, tenant_id)
    if run is None:
        raise no_run(tx, job_run_id, tenant_id)
    refuse_compensation(tx, run, "stopped")
    if run.status is not RunStatus.RUNNING:
        hint = " (use cancel for a pending run)" if run.status.is_pending else ""
        raise ConflictError(f"run is {run.status.value}; only a running run can be stopped{hint}", field="status")
    if run.stop_requested:  # asked already: a repeat changes and records nothing
        return
    if not request_stop(tx, run, actor=actor, reason=reason, now=now):
        raise ConflictError("run finished before the stop was recorded", field="status")


def refuse_compensation(tx: StoreTx, run: JobRun, what: str) -> None:
    """A workflow's compensation always runs to its end: cancelling the workflow is refused while
    it compensates, and so is cancelling or stopping one of its compensation runs (which ended
    the compensation failed, and the workflow escalated, on one person's word)."""
    if run.workflow_run_id is None:
        return
    for step in tx.workflow_steps(run.workflow_run_id):
        if step.compensation_run_id == run.job_run_id:
            raise ConflictError(
                f"run is the compensation of step {step.step_id} of workflow run {run.workflow_run_id}, which"
                f" always runs to its end: it cannot be {what}",
                field="job_run_id",
            )


def request_stop(tx: StoreTx, run: JobRun, *, actor: str, reason: str | None, now: datetime) -> bool:
    """Ask the worker of running ``run`` to stop it, announced (``job_stop_requested``) and
    audited whoever asks (a person, or a workflow stopping its steps); False when the run was
    no longer running."""
    if not tx.run_request_stop(run.job_run_id):
        return False
    tx.outbox_append(
        [(run.job_run_id, run.tenant_id, events.job_stop_requested(run, actor=actor, reason=reason, now=now))], now
    )
    audit.record(tx, audit.event(run.tenant_id, actor, "run.stop_requested", "run", run.job_run_id, now, reason=reason))
    return True


MAX_CLOSE_NOTE = 2000


def close_dead_letter(
    engine: Engine, job_run_id: str, *, actor: str, note: str, tenant_id: str | None = None
) -> DeadLetter:
    """Close a run's open dead letter without another attempt: someone looked at it and decided
    nothing more is to run (its workflow ended and acted on the failure, the work was done by
    hand, the input is gone). The letter is resolved naming who closed it and why, audited
    (``run.dead_letter_closed``), and the run sealed again with it; the run stays as it ended.
    Without a way to close it, a letter a requeue can never take (a step of an ended workflow)
    stayed open for good, and retention keeps a run with an open letter for good."""
    note = note.strip()
    if not 0 < len(note) <= MAX_CLOSE_NOTE:
        raise ValidationError(f"say why nothing more is to run, 1 to {MAX_CLOSE_NOTE} characters", field="note")
    if not readable_value(note.replace("\n", " ")):  # a line break reads as itself; a terminal escape does not
        raise ValidationError(UNREADABLE, field="note")
    now = engine.clock.now()
    with engine.store.write() as tx:
        run = tx.run_lock(job_run_id)
        if run is None:
            raise no_run(tx, job_run_id, tenant_id)
        if tenant_id is not None and run.tenant_id != tenant_id:
            raise NotFoundError(f"no run {job_run_id!r}", field="job_run_id")
        letter = tx.dead_letter_open_for(job_run_id)
        if letter is None:
            raise ConflictError(f"run is {run.status.value} and has no open dead letter to close", field="status")
        resolution = f"closed by {actor}: {note}"
        tx.dead_letter_resolve(letter.dead_letter_id, resolution, now)
        audit.record(
            tx,
            audit.event(
                run.tenant_id, actor, DEAD_LETTER_CLOSED, "run", run.job_run_id, now, reason=note,
                payload={"dead_letter_id": letter.dead_letter_id},
            ),
        )  # fmt: skip
    return replace(letter, resolved_at=now, resolution=resolution)


def requeue_run(engine: Engine, job_run_id: str, *, actor: str, tenant_id: str | None = None) -> JobRun:
    """Give a dead-lettered or escalated run one more attempt, same idempotency key.

    ``max_attempts`` grows by one so the new attempt is within bounds; the dead letter is
    marked resolved with who requeued it. A requeue is a way to run, so it meets every gate a
    new trigger meets (approval, signatures, safe mode, trust gates and slots, policy).
    """
    now = engine.clock.now()
    policy = engine.admission.scheduler_policy(actor=actor, now=now)
    with engine.store.write() as tx:
        run = tx.run_lock(job_run_id)  # a retry of it being made waits, or has committed and is seen
        if run is None:
            raise no_run(tx, job_run_id, tenant_id)
        if tenant_id is not None and run.tenant_id != tenant_id:
            raise NotFoundError(f"no run {job_run_id!r}", field="job_run_id")
        if run.status not in (RunStatus.DEAD_LETTERED, RunStatus.ESCALATED):
            raise ConflictError(
                f"run is {run.status.value}; only dead-lettered or escalated runs can be requeued", field="status"
            )
        retried = tx.run_retries(run.tenant_id, run.job_run_id, 1)
        if retried:  # its work goes on in the retry: requeued too, it would be done twice
            raise ConflictError(
                f"run was retried as {retried[0].job_run_id} ({retried[0].status.value}): requeue or retry that run",
                field="job_run_id",
            )
        letter = tx.dead_letter_open_for(job_run_id)
        if letter is None and letter_closed(tx, run):
            raise ConflictError(
                "the run's dead letter was closed (no more attempts); a closed letter is not requeued",
                field="status",
            )
        if run.workflow_run_id is not None:
            check_step_requeue(tx, run)
        refusal = engine.admission.requeue_refusal(tx, run, actor=actor, now=now, policy=policy)
        if refusal is None:
            change = transitions.requeued(run, actor=actor, now=now)
            if not tx.runs_apply([change]):
                raise ConflictError("run changed state while being requeued; try again", field="status")
            if letter is not None:
                tx.dead_letter_resolve(letter.dead_letter_id, f"requeued by {actor}", now)
            audit.record(tx, audit.event(run.tenant_id, actor, "run.requeued", "run", run.job_run_id, now))
            updated = tx.run_get(job_run_id)
    if refusal is not None:  # nothing written above; the refusal itself is recorded
        payload = {"rule": refusal.rule, "message": refusal.message, "action": "requeue"}
        audit.record_now(
            engine,
            audit.event(
                run.tenant_id, actor, "run.refused", "run", run.job_run_id, now, reason=refusal.code, payload=payload
            ),
        )
        raise refusal
    assert updated is not None
    return updated


def retry_run(
    engine: Engine, job_run_id: str, *, actor: str, tenant_id: str | None = None, role: str | None = None
) -> tuple[JobRun, bool]:
    """A new run for a terminal run, at most once per source run (seed 001 retry contract,
    ``service.retries.retry`` without the API's quota). Asking twice returns the same retry run
    (``created`` False the second time). The source run is left as it was. The retry runs the
    source run's definition version (pinned), which must still be approved.
    """
    from jobgate.service import retries

    return retries.retry(engine, job_run_id, actor=actor, tenant_id=tenant_id, role=role, quota=False)


def check_step_requeue(tx: StoreTx, run: JobRun) -> None:
    """A workflow step's run may be requeued only while its workflow still waits for it: once
    the workflow has acted on its failure (failed, compensated, escalated), running the step
    again would act outside the workflow that owns it."""
    workflow = tx.workflow_lock(str(run.workflow_run_id))
    # Only a step still RUNNING waits for this run (a STOPPING one was asked to stop). The
    # version moves on, so a coordinator that decided from the run's end loses its race.
    waiting = (
        workflow is not None
        and any(
            s.job_run_id == run.job_run_id and s.status == "RUNNING"
            for s in tx.workflow_steps(workflow.workflow_run_id)
        )
        and tx.workflow_bump(workflow.workflow_run_id)
    )
    if workflow is None or not waiting:
        state = "gone" if workflow is None else f"{workflow.status.value}, and has acted on this step's end"
        raise ConflictError(
            f"run is a step of workflow run {run.workflow_run_id}, which is {state}: start a new workflow run"
            " (and close this run's dead letter, saying why: jobgate dlq close RUN --note …)",
            field="workflow_run_id",
        )


@dataclass(frozen=True)
class Cancellation:
    """Who cancelled (or stopped) a run, and when it ended cancelled."""

    by: str
    at: datetime


def cancellation(tx: StoreTx, run: JobRun) -> Cancellation | None:
    """Who ended a cancelled run, None for any other. A stopped run's cancelling transition is
    its worker's (it saw the process exit); the person is the one whose stop request is
    audited (the run's stop flag is cleared when it ends)."""
    if run.status is not RunStatus.CANCELLED:
        return None
    ended = next((t for t in reversed(tx.run_transitions(run.job_run_id)) if t.to_status is RunStatus.CANCELLED), None)
    if ended is None:
        return None
    if ended.reason == TransitionReason.STOPPED_BY_USER:
        wanted = AuditFilter(run.tenant_id, action="run.stop_requested", target_type="run", target_id=run.job_run_id)
        asked = tx.audit_list(replace(wanted, limit=1))
        if asked:
            return Cancellation(asked[0].event.actor, ended.at)
    return Cancellation(ended.actor, ended.at)
