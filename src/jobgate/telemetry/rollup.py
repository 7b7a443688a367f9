"""AII telemetry rollups (seed 000 §37, §51): per tenant and closed period, the scheduler's
figures, published to a sink once — never twice for the same period.

**What the figures mean.** The cohort of a period is the tenant's runs created in it
(``jobs_scheduled``); every other count is of that cohort and only of what happened before the
period ended, so the figures of a closed period are a function of records stamped inside it
(``store.sql.telemetry``). Rates are over ``jobs_scheduled`` (the seed's example has
``job_success_rate`` = ``jobs_completed / jobs_scheduled``), ``null`` when nothing was
scheduled; ``replay_backlog`` is the REPLAY_JOB runs open at the period's end.

**Once per period.** The AII_TELEMETRY_JOB computes the figures in its attempt, skips the
periods already published, and writes the sink in the attempt too, outside any database
transaction: a slow sink (an HTTP call up to its timeout) holds no lock that other writers wait
for (on SQLite, the one write lock of the whole database). The publication row is then
inserted in the run's own fenced completion (``ctx.on_complete``) with ``ON CONFLICT DO
NOTHING`` on (tenant, period): exactly one row per period, whoever commits first. What this
leaves to the sink is a repeat: an attempt that wrote the sink and failed before its
completion committed is retried, and two runs at once may both write it. The sinks are
idempotent by (tenant, period) for that (``telemetry.sinks``): the file keeps its first line
and answers it back, so never a second line for a period, and the row records that line; the
HTTP sink delivers at least once with the same ``Idempotency-Key`` every time. A sink that
fails fails the attempt (nothing is recorded; the retry policy applies). A period is published
only once it has ended and ``telemetry.settle`` has passed (commits stamped just before the end
have landed).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from jobgate.core import periods
from jobgate.core.canonical import digest, isoformat_utc
from jobgate.core.errors import NonRetryableError, ValidationError
from jobgate.core.periods import Period, PeriodKind
from jobgate.core.records import PeriodCounts, Publication
from jobgate.governance.code import host_job
from jobgate.service.engine import Engine
from jobgate.store.sqlstore import StoreTx
from jobgate.telemetry.sinks import TelemetrySink, sink_for

if TYPE_CHECKING:
    from jobgate.service.host import Host

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
        counts = tx.telemetry.period_counts(tenant_id, period.start, period.end)
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


_RECORD_ONLY = ("tenant_id", "period_start", "period_end")  # in what the sink gets, not in the figures


def deliver(sink: TelemetrySink, tenant_id: str, period: Period, doc: dict[str, Any]) -> dict[str, Any]:
    """Write ``doc`` for (tenant, period) to the sink; returns the record the sink holds for
    the period (an earlier writer's, if there was one). Called outside any transaction."""
    return sink.submit(record(tenant_id, period, doc))


def publish(
    tx: StoreTx,
    tenant_id: str,
    period: Period,
    held: dict[str, Any],
    sink_name: str,
    *,
    now: datetime,
    job_run_id: str | None,
) -> bool:
    """Record that (tenant, period) was published, inside the caller's transaction (the run's
    fenced completion), as ``held``: what ``deliver`` said the sink holds. True if this call
    recorded it, False if a row was there already (``ON CONFLICT DO NOTHING``)."""
    figures = {k: v for k, v in held.items() if k not in _RECORD_ONLY}
    row = Publication(
        tenant_id, period.name, period.start, period.end, figures, digest(held), now, sink_name, job_run_id
    )
    return tx.telemetry.publication_put(row)


def published(engine: Engine, tenant_id: str, chosen: Sequence[Period]) -> set[str]:
    """Which of ``chosen`` the tenant has published already."""
    with engine.store.read(tenant_id=tenant_id) as tx:
        return {p.name for p in chosen if tx.telemetry.publication_get(tenant_id, p.name) is not None}


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
        last = tx.telemetry.publication_last(tenant_id, settings.period.value)
    last_period = None if last is None else periods.parse(last.period)
    return Plan(tenant_id, settings.period, tuple(due(settings.period, now, settings.settle, last_period)))


@host_job
def telemetry_job(ctx: Any, host: Host) -> dict[str, Any]:
    """The AII_TELEMETRY_JOB handler (``handler: jobgate.telemetry.rollup:telemetry_job``):
    computes the figures of every period due for the run's tenant and not yet published, writes
    them to the sink in the attempt, and records each publication once in the run's fenced
    completion. Param ``period`` (optional) publishes that settled period."""
    engine = host.engine
    scope = ctx.payload.scope
    tenant = str(scope.get("tenant_id") or "default")
    eco = scope.get("eco_number")
    now = engine.clock.now()
    try:
        chosen = plan(engine, tenant, now=now, requested=ctx.params.get("period") or None)
    except ValidationError as exc:
        raise NonRetryableError(exc.message, error_code="BAD_PERIOD") from None
    done = published(engine, tenant, chosen.periods)
    computed = [
        (p, compute(engine, tenant, p, None if eco is None else str(eco))) for p in chosen.periods if p.name not in done
    ]
    for name in sorted(done):
        ctx.log(f"telemetry {tenant} {name}: already published")
    sink = sink_for(engine.config)
    # The sink is written here, in the attempt, outside any transaction (see the module docstring).
    held = [(period, deliver(sink, tenant, period, doc)) for period, doc in computed]

    def effect(tx: StoreTx) -> None:
        at = engine.clock.now()
        for period, kept in held:
            made = publish(tx, tenant, period, kept, sink.name, now=at, job_run_id=ctx.job_run_id)
            ctx.log(f"telemetry {tenant} {period.name}: {'published to ' + sink.name if made else 'already published'}")

    if held:
        host.on_complete(ctx, effect)
    return {
        "tenant_id": tenant,
        "period_kind": chosen.kind.value,
        "periods": [p.name for p in chosen.periods],
        "sink": sink.name,
    }
