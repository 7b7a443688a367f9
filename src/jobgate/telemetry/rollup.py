"""AII telemetry rollups (seed 000 §37, §51): per tenant and closed period, the scheduler's
figures, published to a sink once — never twice for the same period.

**What the figures mean.** The cohort of a period is the tenant's runs created in it
(``jobs_scheduled``); every other count is of that cohort and only of what happened before the
period ended, so the figures of a closed period are a function of records stamped inside it
(``store.sql.telemetry``). Rates are over ``jobs_scheduled`` (the seed's example has
``job_success_rate`` = ``jobs_completed / jobs_scheduled``), ``null`` when nothing was
scheduled; ``replay_backlog`` is the REPLAY_JOB runs open at the period's end.

**Once per period.** The AII_TELEMETRY_JOB computes the figures in its attempt and publishes in
its own fenced completion transaction (``ctx.on_complete``): the publication row is inserted
with ``ON CONFLICT DO NOTHING`` on (tenant, period) and only the transaction that inserted it
writes the sink, before it commits. Two runs at once: the second waits on the first's row and
inserts nothing. A crash after the sink write and before the commit leaves no row, so the
retried attempt publishes again, and the sink, idempotent by (tenant, period), keeps its one
record (the row stores what the sink holds). A sink that fails fails the attempt: nothing is
recorded, the retry policy applies. A period is published only once it has ended and
``telemetry.settle`` has passed (commits stamped just before the end have landed).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection

from jobgate.core.canonical import digest, isoformat_utc
from jobgate.core.errors import NonRetryableError, ValidationError
from jobgate.service.engine import Engine
from jobgate.store.sql import telemetry as store
from jobgate.store.sql.telemetry import PeriodCounts, Publication
from jobgate.telemetry import periods
from jobgate.telemetry.periods import Period, PeriodKind
from jobgate.telemetry.sinks import TelemetrySink, sink_for

MAX_CATCHUP = 36  # periods one run publishes after an outage, the oldest first; the rest wait for the next run
RATE_DIGITS = 6


def _rate(part: int, whole: int) -> float | None:
    return None if whole == 0 else round(part / whole, RATE_DIGITS)


def figures(counts: PeriodCounts, period: Period, eco_number: str | None = None) -> dict[str, Any]:
    """The seed §51 document for ``counts`` (pure)."""
    out: dict[str, Any] = {} if eco_number is None else {"eco_number": eco_number}
    latency = None
    if counts.workflows_finished:
        latency = round(counts.workflow_latency_us / counts.workflows_finished / 1000)
    out.update(
        period=period.name,
        jobs_scheduled=counts.scheduled,
        jobs_completed=counts.completed,
        job_success_rate=_rate(counts.completed, counts.scheduled),
        retry_rate=_rate(counts.retries, counts.scheduled),
        dead_letter_rate=_rate(counts.dead_lettered, counts.scheduled),
        sla_breach_rate=_rate(counts.breached, counts.scheduled),
        avg_workflow_latency_ms=latency,
        replay_backlog=counts.replay_backlog,
        dal_batch_success_rate=_rate(counts.dal_completed, counts.dal_scheduled),
    )
    return out


def compute(engine: Engine, tenant_id: str, period: Period, eco_number: str | None = None) -> dict[str, Any]:
    """The figures of ``period`` as the database holds them now (for an open period: so far)."""
    with engine.store.read(tenant_id=tenant_id) as tx:
        counts = store.period_counts(tx.conn, tenant_id, period.start, period.end)
    return figures(counts, period, eco_number)


def publishable(period: Period, now: datetime, settle: timedelta) -> bool:
    """Closed, and settled: ``settle`` has passed since its end."""
    return period.end + settle <= now


def due(kind: PeriodKind, now: datetime, settle: timedelta, last: Period | None) -> list[Period]:
    """The periods to publish now, oldest first (pure): every settled period after ``last``
    (the latest published one of this kind), at most ``MAX_CATCHUP``; with no publication
    yet, only the latest settled period (a new deployment does not publish history)."""
    latest = periods.previous(periods.containing(kind, now - settle))
    out: list[Period] = []
    candidate = latest
    while (last is None and not out) or (last is not None and candidate.start > last.start):
        out.append(candidate)
        candidate = periods.previous(candidate)
    return sorted(out)[:MAX_CATCHUP]


def record(tenant_id: str, period: Period, doc: dict[str, Any]) -> dict[str, Any]:
    """What the sink receives: the seed §51 figures with the tenant and the period's bounds."""
    return {
        **doc,
        "tenant_id": tenant_id,
        "period_start": isoformat_utc(period.start),
        "period_end": isoformat_utc(period.end),
    }


def publish(
    conn: Connection,
    tenant_id: str,
    period: Period,
    doc: dict[str, Any],
    sink: TelemetrySink,
    *,
    now: datetime,
    job_run_id: str | None,
) -> bool:
    """Publish ``doc`` for (tenant, period) inside the caller's transaction: True if this
    call published it, False if it was published already (the sink is then not written).
    The row is inserted first and the sink written before the caller commits; if the sink
    fails, the exception undoes the row with the rest of the transaction."""
    sent = record(tenant_id, period, doc)  # the digest is of what the sink receives
    row = Publication(tenant_id, period.name, period.start, period.end, doc, digest(sent), now, sink.name, job_run_id)
    if not store.publication_put(conn, row):
        return False
    held = sink.submit(sent)
    if held != sent:  # the sink kept an earlier attempt's record: the row records what it holds
        kept = {k: v for k, v in held.items() if k not in ("tenant_id", "period_start", "period_end")}
        store.publication_replace_figures(conn, tenant_id, period.name, kept, digest(held))
    return True


@dataclass(frozen=True)
class Plan:
    tenant_id: str
    kind: PeriodKind
    periods: tuple[Period, ...]


def plan(engine: Engine, tenant_id: str, *, now: datetime, requested: str | None = None) -> Plan:
    """The periods a rollup run publishes: ``requested`` (a settled period, for a backfill),
    or those ``due`` after the tenant's latest publication of the configured kind."""
    settings = engine.config.telemetry
    if requested is not None:
        period = periods.parse(requested)
        if not publishable(period, now, settings.settle):
            raise ValidationError(
                f"{period.name} has not ended, or ended less than {settings.settle} ago", field="period"
            )
        return Plan(tenant_id, period.kind, (period,))
    with engine.store.read(tenant_id=tenant_id) as tx:
        last = store.publication_last(tx.conn, tenant_id, settings.period.value)
    last_period = None if last is None else periods.parse(last.period)
    return Plan(tenant_id, settings.period, tuple(due(settings.period, now, settings.settle, last_period)))


def telemetry_job(ctx: Any) -> dict[str, Any]:
    """The AII_TELEMETRY_JOB handler (``handler: jobgate.telemetry.rollup:telemetry_job``):
    computes the figures of every period due for the run's tenant and publishes each once, in
    the run's fenced completion. Param ``period`` (optional) publishes that settled period."""
    engine: Engine | None = ctx.host_engine
    if engine is None:
        raise NonRetryableError("the telemetry job runs inside a jobgate worker", error_code="NO_HOST_ENGINE")
    scope = ctx.payload.scope
    tenant = str(scope.get("tenant_id") or "default")
    eco = scope.get("eco_number")
    now = engine.clock.now()
    try:
        chosen = plan(engine, tenant, now=now, requested=ctx.params.get("period") or None)
    except ValidationError as exc:
        raise NonRetryableError(exc.message, error_code="BAD_PERIOD") from None
    computed = [(p, compute(engine, tenant, p, None if eco is None else str(eco))) for p in chosen.periods]
    sink = sink_for(engine.config)

    def effect(conn: Connection) -> None:
        at = engine.clock.now()
        for period, doc in computed:
            made = publish(conn, tenant, period, doc, sink, now=at, job_run_id=ctx.job_run_id)
            ctx.log(f"telemetry {tenant} {period.name}: {'published to ' + sink.name if made else 'already published'}")

    ctx.on_complete(effect)
    return {
        "tenant_id": tenant,
        "period_kind": chosen.kind.value,
        "periods": [p.name for p, _ in computed],
        "sink": sink.name,
    }
