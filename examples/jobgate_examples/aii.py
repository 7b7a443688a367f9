"""AII Publication (seed 000 §8, §37, §51): aggregate the period's figures from the jobgate
database, validate the payload, publish it (an HTTP target: jobgate's own HTTP executor posts
the dispatch payload to the AII stand-in), record the publication's status.

The AII stand-in accepts one publication per ECO and period: the same payload again is
answered as a duplicate, a different one for a published period is refused (seed §37:
preserve period boundaries, avoid duplicate publication).
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from typing import Any

from jobgate import ExecutionContext
from jobgate.core.models import JobClass
from jobgate.core.states import RunStatus
from jobgate.governance.code import host_job
from jobgate.service.host import Host
from jobgate.store.base import RunFilter
from jobgate_examples.common import append_line, audit_on_complete, digest, home, invalid, param

PAGE = 1000
FIELDS = (
    "eco_number",
    "period",
    "jobs_scheduled",
    "jobs_completed",
    "job_success_rate",
    "retry_rate",
    "dead_letter_rate",
    "avg_workflow_latency_ms",
    "replay_backlog",
    "dal_batch_success_rate",
)
RATES = ("job_success_rate", "retry_rate", "dead_letter_rate", "dal_batch_success_rate")


def _rate(part: int, whole: int) -> float:
    return round(part / whole, 4) if whole else 0.0


@host_job
def aggregate(ctx: ExecutionContext, host: Host) -> dict[str, Any]:
    """The seed §51 figures of the tenant's runs created on ``period`` (a UTC day)."""
    engine = host.engine
    tenant = str(ctx.payload.scope.get("tenant_id") or "default")
    try:
        start = datetime.fromisoformat(param(ctx, "period") + "T00:00:00+00:00")
    except ValueError:
        raise invalid("period must be a day, YYYY-MM-DD") from None
    end = start + timedelta(days=1)
    runs = []
    before = None
    with engine.store.read(tenant_id=tenant) as tx:
        while True:  # in pages, newest first
            page = tx.runs_list(
                RunFilter(tenant_id=tenant, created_from=start, created_to=end, limit=PAGE, before=before)
            )
            runs += page
            if len(page) < PAGE:
                break
            before = (page[-1].created_at, page[-1].job_run_id)
        workflows = tx.workflows_list(tenant, limit=10_000)
    terminal = [r for r in runs if r.status.is_terminal]
    completed = [r for r in terminal if r.status is RunStatus.COMPLETED]
    dal = [r for r in terminal if r.job_class is JobClass.DAL_ANCHOR_JOB]
    latencies = [
        (w.ended_at - w.started_at).total_seconds() * 1000
        for w in workflows
        if w.started_at is not None and w.ended_at is not None and start <= w.created_at < end
    ]
    payload = {
        "eco_number": param(ctx, "eco_number"),
        "period": param(ctx, "period"),
        "jobs_scheduled": len(runs),
        "jobs_completed": len(completed),
        "job_success_rate": _rate(len(completed), len(terminal)),
        "retry_rate": _rate(sum(1 for r in runs if r.attempt > 1), len(runs)),
        "dead_letter_rate": _rate(sum(1 for r in runs if r.status is RunStatus.DEAD_LETTERED), len(runs)),
        "avg_workflow_latency_ms": round(sum(latencies) / len(latencies)) if latencies else 0,
        "replay_backlog": sum(1 for r in runs if r.job_class is JobClass.REPLAY_JOB and not r.status.is_terminal),
        "dal_batch_success_rate": _rate(sum(1 for r in dal if r.status is RunStatus.COMPLETED), len(dal)),
    }
    return {"payload": payload, "jobs_scheduled": payload["jobs_scheduled"]}


def validate(ctx: ExecutionContext) -> dict[str, Any]:
    """Exactly the seed's fields, counts that add up, rates in [0, 1]: anything else is refused
    here rather than published."""
    try:
        payload = json.loads(param(ctx, "payload"))
    except ValueError:
        raise invalid("payload is not JSON") from None
    if not isinstance(payload, dict) or sorted(payload) != sorted(FIELDS):
        raise invalid(f"payload fields must be exactly: {', '.join(FIELDS)}", "INVALID_PAYLOAD")
    if not re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", str(payload["period"])):
        raise invalid("period must be a day", "INVALID_PAYLOAD")
    counts = ("jobs_scheduled", "jobs_completed", "avg_workflow_latency_ms", "replay_backlog")
    if any(not isinstance(payload[k], int) or payload[k] < 0 for k in counts):
        raise invalid("counts must be whole numbers, not negative", "INVALID_PAYLOAD")
    if payload["jobs_completed"] > payload["jobs_scheduled"]:
        raise invalid("more jobs completed than scheduled", "INVALID_PAYLOAD")
    if any(not isinstance(payload[k], int | float) or not 0 <= payload[k] <= 1 for k in RATES):
        raise invalid("rates must lie in [0, 1]", "INVALID_PAYLOAD")
    return {"payload": payload, "payload_sha256": digest(payload)}


def record_status(ctx: ExecutionContext) -> dict[str, Any]:
    """Keep the publication's status beside the others, and in jobgate's audit chain."""
    entry = {
        "publication_id": param(ctx, "publication_id"),
        "status": param(ctx, "status"),
        "period": param(ctx, "period"),
        "eco_number": param(ctx, "eco_number"),
    }
    append_line(home(ctx) / "aii" / "status.jsonl", entry, key="publication_id")
    audit_on_complete(ctx, "aii.published", "aii_publication", entry["publication_id"], entry)
    return {"recorded": True}
