"""The job a workflow definition runs when a trigger fires it (cron, event, manual, a request).

The trigger run passes every gate a job does (its steps' approvals included); its body only
starts the workflow run, keyed by the trigger run's id, so however often the attempt is retried
there is one workflow run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jobgate.core.errors import GovernanceRefusal, NonRetryableError
from jobgate.core.models import Scope
from jobgate.governance.code import host_job

if TYPE_CHECKING:
    from jobgate.service.host import Host


@host_job
def start_workflow_job(ctx: Any, host: Host) -> dict[str, Any]:
    from jobgate.service.workflows import StartWorkflow, start_workflow

    engine = host.engine
    payload = ctx.payload
    with engine.store.read() as tx:
        run = tx.run_get(payload.job_run_id)
        trigger = tx.run_trigger(payload.job_run_id) or {}
    if run is None:
        raise NonRetryableError(f"run {payload.job_run_id} is gone", error_code="RUN_MISSING")
    request = StartWorkflow(
        job_definition_id=payload.job_definition_id,
        params=dict(payload.params),
        scope=Scope.from_dict(payload.scope),
        requested_by=run.requested_by,
        reason=f"started by run {run.job_run_id}",
        trigger_run_id=run.job_run_id,
        trigger_type=run.trigger_type,
        definition_version=run.definition_version,  # the version its trigger run was admitted for
        traceparent=run.traceparent,
        # the role its trigger run was admitted with: the policy's ceilings judge the steps by it
        role=role if isinstance(role := trigger.get("role"), str) else None,
        reviewed_by=run.reviewed_by,  # a four-eyes request's: safe mode's manual review is met
    )
    try:
        record, created = start_workflow(engine, request, actor=run.requested_by or "scheduler")
    except GovernanceRefusal as exc:
        # A step's definition lost its approval after the trigger run was admitted: the run ends
        # naming the refusal's code (audited where it was decided), not an exception's class.
        raise NonRetryableError(exc.message, error_code=exc.code) from None
    ctx.log(f"workflow run {record.workflow_run_id} {'started' if created else 'already started'}")
    return {"workflow_run_id": record.workflow_run_id, "created": created}
