"""The run retry contract (seed 001, "Retry contract"): one service function for both routes.

``retry`` accepts a terminal run and makes its one retry. In order: a run the caller's tenant
does not have is 404; a run already retried answers that retry (``created`` False, 200),
before anything else is asked, whether it was made under this contract or before it (found by
``retry_of``); a run not terminal is 409; a run whose definition no longer exists or is retired
is 400 naming ``job_definition_id``; with ``require_schedule`` (the ``/scheduler/`` route) a run
that belongs to no schedule, or whose schedule no longer exists, is 400 naming ``schedule_id``.
Then the daily quota, then the pipeline, which admits the retry like any submission.

The retry's id is ``idempotency.retry_run_id(tenant, source)`` and its idempotency key derives
from the same two values, so of two concurrent first requests exactly one inserts (ON CONFLICT
DO NOTHING on either) and the other gets that run back with ``created`` False. The retry's one
audit entry, ``run.retried`` naming the actor and the source, is written in the transaction
that inserts it, so the loser writes none. Every refusal stores nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from jobgate.core.errors import ConflictError, UnusableReferenceError
from jobgate.core.lineage import RETRY_REQUEST_PREFIX, retry_refusal, schedule_of
from jobgate.core.models import DefinitionStatus, JobRun, Scope, TriggerType
from jobgate.scheduling.records import StoredSchedule
from jobgate.service.absent import no_run
from jobgate.service.engine import Engine
from jobgate.service.letters import letter_closed
from jobgate.service.submission import SubmitRequest
from jobgate.store.base import RetiredRun, StoredDefinition


@dataclass(frozen=True)
class Lineage:
    """A run's retry edges: the run it retries (at most one) and the runs that retry it."""

    run: JobRun
    parents: list[JobRun]
    children: list[JobRun]
    retired_parents: list[RetiredRun] = field(default_factory=list)  # the parent, when retention deleted it


def retry(
    engine: Engine,
    job_run_id: str,
    *,
    actor: str,
    tenant_id: str | None,
    role: str | None = None,
    quota: bool = True,
    require_schedule: bool = False,
) -> tuple[JobRun, bool]:
    """The retry of ``job_run_id`` and whether this call created it. ``tenant_id`` None: any
    tenant's run (the operator on the host; no quota). ``role``: the asker's, which the
    scheduler policy's priority ceilings judge, as for a submit."""
    with engine.store.read(tenant_id=tenant_id) as tx:
        source = tx.run_get(job_run_id, tenant_id)
        if source is None:
            raise no_run(tx, job_run_id, tenant_id)
        earlier = tx.run_retries(source.tenant_id, source.job_run_id, limit=1)
        if earlier:
            return earlier[0], False
        refusal = retry_refusal(source.status)
        if refusal is not None:
            raise ConflictError(refusal, field="status")
        if letter_closed(tx, source):
            raise ConflictError(
                "the run's dead letter was closed (no more attempts); a closed letter is not retried", field="status"
            )
        if source.workflow_run_id is not None:  # its workflow owns its effects (and their undoing)
            raise ConflictError(
                f"run is a step of workflow run {source.workflow_run_id}: a retry would run it outside its"
                " workflow; start a new workflow run (a step's dead letter is requeued only while its workflow"
                " still waits on it, and otherwise closed, saying why: jobgate dlq close RUN --note …)",
                field="workflow_run_id",
            )
        check_definition(tx.definition_get(source.tenant_id, source.job_definition_id), source)
        schedule_id = schedule_of(source, tx.run_trigger(source.job_run_id))
        if require_schedule:
            check_schedule(schedule_id, None if schedule_id is None else tx.schedule_get(source.tenant_id, schedule_id))
    request = retry_request(source, actor=actor, role=role, schedule_id=schedule_id)
    if quota and tenant_id is not None:
        from jobgate.service.manual import check_daily_quota, quota_turn

        with quota_turn(engine, tenant_id):  # counted and stored as one step of the tenant's
            check_daily_quota(engine, tenant_id, [source.job_definition_id])
            result = engine.submit(request, actor=actor)
    else:
        result = engine.submit(request, actor=actor)
    return result.run, result.created


def check_definition(stored: StoredDefinition | None, source: JobRun) -> None:
    """400 when the source run's definition is gone or retired: its retry could never run."""
    if stored is None:
        raise UnusableReferenceError(
            f"run {source.job_run_id}'s definition {source.job_definition_id!r} no longer exists",
            field="job_definition_id",
        )
    if stored.status is DefinitionStatus.RETIRED:
        raise UnusableReferenceError(
            f"run {source.job_run_id}'s definition {source.job_definition_id!r} is retired",
            field="job_definition_id",
        )


def check_schedule(schedule_id: str | None, stored: StoredSchedule | None) -> None:
    """400 on the schedule-only route when the run belongs to no schedule, or its schedule is gone."""
    if schedule_id is None:
        raise UnusableReferenceError(
            "run belongs to no schedule; retry it at /api/v1/runs/{id}/retry", field="schedule_id"
        )
    if stored is None:
        raise UnusableReferenceError(f"the run's schedule {schedule_id!r} no longer exists", field="schedule_id")


def retry_request(source: JobRun, *, actor: str, role: str | None, schedule_id: str | None) -> SubmitRequest:
    """The submission of ``source``'s retry: its definition version (pinned, so it must still
    be approved), params and scope, keyed and named by the source run (``retry_of``)."""
    payload: dict[str, object] = {"retry_of": source.job_run_id}
    if schedule_id is not None:
        payload["schedule_id"] = schedule_id  # the retry belongs to its source's schedule
    return SubmitRequest(
        job_definition_id=source.job_definition_id,
        trigger_type=TriggerType.MANUAL,
        params=dict(source.params),
        scope=Scope.from_dict(source.scope),
        requested_by=actor,
        reason=f"retry of {source.job_run_id}",
        request_id=f"{RETRY_REQUEST_PREFIX}{source.job_run_id}",
        payload=payload,
        retry_of=source.job_run_id,
        definition_version=source.definition_version,  # the source run's version, not today's
        role=role,
    )


def lineage(engine: Engine, job_run_id: str, tenant_id: str | None, limit: int = 100) -> Lineage:
    """A run's retry edges within its tenant, derived from ``retry_of`` alone. 404 for a run
    ``tenant_id`` does not have (None: any tenant's run, the operator on the host); a parent in
    another tenant (never made by the contract) is not shown."""
    with engine.store.read(tenant_id=tenant_id) as tx:
        run = tx.run_get(job_run_id, tenant_id)
        if run is None:
            raise no_run(tx, job_run_id, tenant_id)
        parent = None if run.retry_of is None else tx.run_get(run.retry_of, run.tenant_id)
        # A parent retention deleted is still the run this one retries: named from its tombstone,
        # never "no parents" (found by a review).
        gone = tx.runs_retired_of(run.tenant_id, [run.retry_of]) if run.retry_of and parent is None else []
        children = tx.run_retries(run.tenant_id, job_run_id, limit)
    return Lineage(run, [] if parent is None else [parent], children, gone)
