"""The MAINTENANCE_JOB handler. Its path (``jobgate.retention:retention_job``) is part of the
definitions that name it, and so of their approved digests: it stays here, and retention itself
lives in ``jobgate.service.retention``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jobgate.governance.code import host_job
from jobgate.service.retention import retire

if TYPE_CHECKING:
    from jobgate.service.host import Host


@host_job
def retention_job(ctx: Any, host: Host) -> dict[str, Any]:
    """The MAINTENANCE_JOB handler (``handler: jobgate.retention:retention_job``) for the run's tenant."""
    engine = host.engine
    tenant = str(ctx.payload.scope.get("tenant_id") or "default")
    done = retire(engine, tenant)
    ctx.log(f"retention: {done.deleted} finished runs of {tenant} deleted (ended before {done.cutoff})")
    return {
        "tenant_id": tenant,
        "deleted": done.deleted,
        "ended_before": None if done.cutoff is None else done.cutoff.isoformat(),
    }
