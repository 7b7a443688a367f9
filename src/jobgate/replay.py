"""The REPLAY_JOB handler. Its path (``jobgate.replay:replay_job``) is part of the definitions
that name it, and so of their approved digests: it stays here, and replay itself lives in
``jobgate.service.replay``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jobgate.core.states import TERMINAL as TERMINAL_STATUSES
from jobgate.governance.code import host_job
from jobgate.service.replay import replay, sample

if TYPE_CHECKING:
    from jobgate.service.host import Host


@host_job
def replay_job(ctx: Any, host: Host) -> dict[str, Any]:
    """The REPLAY_JOB handler (``handler: jobgate.replay:replay_job``): replay one run
    (``target_run``, an auditor's request or a drift alert) or a seeded random sample of the tenant's
    finished runs (``sample_size``, ``seed``; the seed defaults to the run's idempotency key, so
    a daily schedule draws a different, reproducible sample each day). Every mismatch becomes a
    critical ``replay_mismatch`` event and an audit entry, written exactly once with the run's
    completion."""

    from jobgate.core.audit import AuditEvent
    from jobgate.core.events import replay_mismatch
    from jobgate.service.workflow_replay import replay_workflow
    from jobgate.store.base import RunFilter
    from jobgate.store.sqlstore import StoreTx

    engine = host.engine
    tenant = str(ctx.payload.scope.get("tenant_id") or "default")
    target = str(ctx.params.get("target_run") or "")
    chosen_workflows: list[str] = []
    if target:
        chosen, seed = ([], None) if target.startswith("TGWF-") else ([target], None)
        chosen_workflows = [target] if target.startswith("TGWF-") else []
    else:
        seed = str(ctx.params.get("seed") or ctx.idempotency_key)
        size = int(ctx.params.get("sample_size") or 10)
        with engine.store.read(tenant_id=tenant) as tx:
            finished = [
                r.job_run_id
                for r in tx.runs_list(RunFilter(tenant_id=tenant, statuses=tuple(TERMINAL_STATUSES), limit=10_000))
                if r.job_run_id != ctx.job_run_id
            ]
            ended_workflows = [
                w.workflow_run_id for w in tx.workflows_list(tenant, limit=10_000) if w.status in TERMINAL_STATUSES
            ]
        chosen = sample(finished, size, seed)
        # Workflow runs' state sequences are sampled the same way (seed 000 §14: replayable).
        chosen_workflows = sample(ended_workflows, int(ctx.params.get("workflow_sample_size") or size), seed)
    reports = [replay(engine, run_id, tenant_id=tenant) for run_id in chosen]
    workflow_reports = [replay_workflow(engine, wid, tenant_id=tenant) for wid in chosen_workflows]
    mismatches = [r for r in reports if not r.match]
    workflow_mismatches = [r for r in workflow_reports if not r.match]
    if mismatches or workflow_mismatches:

        def effect(tx: StoreTx) -> None:
            now = engine.clock.now()
            events = [
                (r.job_run_id, tenant, replay_mismatch(
                    tenant_id=tenant, job_run_id=r.job_run_id, difference=str(r.first_difference),
                    replay_run_id=ctx.job_run_id, now=now,
                ))
                for r in mismatches
            ] + [
                (None, tenant, replay_mismatch(
                    tenant_id=tenant, workflow_run_id=w.workflow_run_id, difference=str(w.first_difference),
                    replay_run_id=ctx.job_run_id, now=now,
                ))
                for w in workflow_mismatches
            ]  # fmt: skip
            tx.outbox_append(events, now)
            audit_events = [
                AuditEvent(tenant, ctx.job_run_id, "replay.mismatch", "run", r.job_run_id, now, "critical",
                           {"first_difference": r.first_difference, "original_hash": r.original_hash})
                for r in mismatches
            ] + [
                AuditEvent(tenant, ctx.job_run_id, "replay.mismatch", "workflow", w.workflow_run_id, now, "critical",
                           {"first_difference": w.first_difference, "original_hash": w.original_hash})
                for w in workflow_mismatches
            ]  # fmt: skip
            tx.audit_append(audit_events)

        host.on_complete(ctx, effect)
    for r in mismatches:
        ctx.log(f"REPLAY MISMATCH {r.job_run_id}: {r.first_difference}")
    for w in workflow_mismatches:
        ctx.log(f"REPLAY MISMATCH {w.workflow_run_id}: {w.first_difference}")
    return {
        "seed": seed,
        "replayed": len(reports),
        "matched": len(reports) - len(mismatches),
        "mismatches": [{"job_run_id": r.job_run_id, "first_difference": r.first_difference} for r in mismatches],
        "workflows_replayed": len(workflow_reports),
        "workflows_matched": len(workflow_reports) - len(workflow_mismatches),
        "workflow_mismatches": [
            {"workflow_run_id": w.workflow_run_id, "first_difference": w.first_difference} for w in workflow_mismatches
        ],
    }
