"""The DAL_ANCHOR_JOB handler. Its path (``jobgate.anchoring:anchor_job``) is part of the
definitions that name it, and so of their approved digests: it stays here, and the anchoring
itself lives in ``jobgate.evidence.anchors``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jobgate.evidence.anchors import anchor_configured
from jobgate.evidence.sinks import sink_for
from jobgate.governance.code import host_job

if TYPE_CHECKING:
    from jobgate.service.host import Host
    from jobgate.store.sqlstore import StoreTx


@host_job
def anchor_job(ctx: Any, host: Host) -> dict[str, Any]:
    """The DAL_ANCHOR_JOB handler (``handler: jobgate.anchoring:anchor_job``): anchors every
    ended window of the run's tenant in the run's own fenced completion, so each anchor is
    written exactly once however often the job is retried or its worker dies; a sink failure
    fails the attempt (retried, then dead-lettered, like any job)."""
    config = host.config
    tenant = str(ctx.payload.scope.get("tenant_id") or "default")
    sink = sink_for(config)
    window = config.evidence.anchor_window

    def effect(tx: StoreTx) -> None:
        made = anchor_configured(tx, config, tenant, host.clock.now())
        ctx.log(f"anchored {len(made)} window(s) of {tenant} to {sink.name}")

    host.on_complete(ctx, effect)
    return {"tenant_id": tenant, "window_seconds": window.total_seconds(), "sink": sink.name}
