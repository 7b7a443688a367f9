"""AII telemetry rollups over HTTP (seed 000 §51): the tenant's published periods, or one
period's figures — as published, or computed now when not (yet) published.

Figures are tenant-wide aggregates, so a token limited to some definitions may not read them
(other definitions do not exist for it); the same holds for ``/metrics``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel

from jobgate.api.access import GOVERNANCE_READ, WholeTenant, allow
from jobgate.api.errors import BadRequest
from jobgate.api.server_state import ServerState, server_state
from jobgate.core import periods
from jobgate.core.errors import ValidationError
from jobgate.core.records import Publication
from jobgate.redact import shown_sink
from jobgate.telemetry import rollup

router = APIRouter(prefix="/api/v1", tags=["telemetry"])

State = Annotated[ServerState, Depends(server_state)]


class TelemetryPeriodOut(BaseModel):
    period: str
    period_start: datetime
    period_end: datetime
    state: str  # published | closed (not published yet) | open (still running: figures so far)
    published_at: datetime | None = None
    sink: str | None = None
    digest: str | None = None
    job_run_id: str | None = None
    figures: dict[str, Any]

    @classmethod
    def of(cls, p: Publication) -> TelemetryPeriodOut:
        return cls(
            period=p.period,
            period_start=p.period_start,
            period_end=p.period_end,
            state="published",
            published_at=p.published_at,
            sink=shown_sink(p.sink),  # scheme and host, or a file's name: nothing of its secrets or folders
            digest=p.digest,
            job_run_id=p.job_run_id,
            figures=p.figures,
        )


class TelemetryOut(BaseModel):
    tenant_id: str
    items: list[TelemetryPeriodOut]


@router.get("/telemetry", response_model=TelemetryOut)
@allow(GOVERNANCE_READ)
def get_telemetry(
    caller: WholeTenant,
    state: State,
    period: Annotated[str | None, Query(max_length=32, description=periods.RULE)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> TelemetryOut:
    """Without ``period``: the tenant's publications, latest first. With it: that period as
    published, or, when it has not been published, its figures computed now (``closed``: what
    a publication would hold; ``open``: the period so far). A period not yet begun is 422."""
    engine = state.engine
    tenant = caller.tenant_id
    if period is None:
        with engine.store.read(tenant_id=tenant) as tx:
            found = tx.telemetry.publications_list(tenant, limit)
        return TelemetryOut(tenant_id=tenant, items=[TelemetryPeriodOut.of(p) for p in found])
    try:
        chosen = periods.parse(period)
    except ValidationError as exc:
        raise BadRequest(exc.message, field="period") from None
    with engine.store.read(tenant_id=tenant) as tx:
        published = tx.telemetry.publication_get(tenant, chosen.name)
    if published is not None:
        return TelemetryOut(tenant_id=tenant, items=[TelemetryPeriodOut.of(published)])
    now = engine.clock.now()
    if not chosen.has_started(now):
        raise ValidationError(f"{chosen.name} has not begun", field="period")
    item = TelemetryPeriodOut(
        period=chosen.name,
        period_start=chosen.start,
        period_end=chosen.end,
        state="closed" if chosen.is_closed(now) else "open",
        figures=rollup.compute(engine, tenant, chosen),
    )
    return TelemetryOut(tenant_id=tenant, items=[item])
