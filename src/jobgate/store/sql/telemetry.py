"""Telemetry rollups: the counts behind one tenant's seed 000 §51 figures for one period, and
the publications (one row per tenant and period, never two).

Every count is bounded by the period's end: the cohort is the runs *created* in
``[start, end)``, and of those only what happened before ``end`` counts (a completion, a
retry, a dead letter, a breach). The counts of a closed period are therefore the same
whenever they are read, before or after publication, on any node — as long as retention has
not yet deleted the runs (retention keeps finished runs for days; periods close sooner), and
but for a run requeued after the end (its ``ended_at`` is cleared: it counts as open then).

The class-specific figures (``dal_*``, ``replay_backlog``) count the seed's own classes by name:
a class declared in jobgate.yaml that gates as one of them (``jobgate.core.classes``) follows
its rules, not its place in these figures; its runs count in the totals.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ColumnElement, Connection, and_, case, func, or_, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from jobgate.core.models import JobClass
from jobgate.core.records import PeriodCounts, Publication
from jobgate.core.states import RunStatus
from jobgate.store import codec
from jobgate.store.tables import (
    dead_letters,
    job_runs,
    run_transitions,
    sla_breaches,
    telemetry_publications,
    workflow_runs,
)

R = job_runs.c


def period_counts(conn: Connection, tenant_id: str, start: datetime, end: datetime) -> PeriodCounts:
    s, e = codec.to_us(start), codec.to_us(end)
    in_cohort = and_(R.tenant_id == tenant_id, R.created_at >= s, R.created_at < e)
    completed = and_(R.status == RunStatus.COMPLETED.value, R.ended_at < e)
    dal = R.job_class == JobClass.DAL_ANCHOR_JOB.value

    def n(condition: ColumnElement[bool]) -> ColumnElement[int]:
        return func.coalesce(func.sum(case((condition, 1), else_=0)), 0)

    scheduled, done, dal_all, dal_done = conn.execute(
        select(func.count(), n(completed), n(dal), n(and_(dal, completed))).where(in_cohort)
    ).one()
    cohort = select(R.job_run_id).where(in_cohort)
    t = run_transitions.c
    retries = conn.execute(
        select(func.count()).where(t.job_run_id.in_(cohort), t.to_status == RunStatus.RETRY_WAIT.value, t.at < e)
    ).scalar_one()
    d = dead_letters.c
    lettered = conn.execute(
        select(func.count(func.distinct(d.job_run_id))).where(
            d.tenant_id == tenant_id, d.job_run_id.in_(cohort), d.created_at < e
        )
    ).scalar_one()
    b = sla_breaches.c
    breached = conn.execute(
        select(func.count(func.distinct(b.subject_id))).where(
            b.tenant_id == tenant_id,
            b.subject_kind == "run",
            b.phase == "breach",
            b.detected_at < e,
            b.subject_id.in_(cohort),
        )
    ).scalar_one()
    w = workflow_runs.c
    finished, latency = conn.execute(
        select(func.count(), func.coalesce(func.sum(w.ended_at - w.created_at), 0)).where(
            w.tenant_id == tenant_id, w.created_at >= s, w.created_at < e, w.ended_at.is_not(None), w.ended_at < e
        )
    ).one()
    backlog = conn.execute(
        select(func.count()).where(
            R.tenant_id == tenant_id,
            R.job_class == JobClass.REPLAY_JOB.value,
            R.created_at < e,
            or_(R.ended_at.is_(None), R.ended_at >= e),
        )
    ).scalar_one()
    return PeriodCounts(
        scheduled=int(scheduled),
        completed=int(done),
        retries=int(retries),
        dead_lettered=int(lettered),
        breached=int(breached),
        dal_scheduled=int(dal_all),
        dal_completed=int(dal_done),
        workflows_finished=int(finished),
        workflow_latency_us=int(latency),
        replay_backlog=int(backlog),
    )


def publication_put(conn: Connection, p: Publication) -> bool:
    """Record the publication of (tenant, period) unless one exists; True if this call made it.

    ``ON CONFLICT DO NOTHING`` on the primary key: a concurrent publisher of the same period
    waits for the first one's transaction and then inserts nothing (PostgreSQL), or finds its
    row (SQLite, one writer at a time). Either way exactly one row.
    """
    values = {
        "tenant_id": p.tenant_id,
        "period": p.period,
        "period_start": codec.to_us(p.period_start),
        "period_end": codec.to_us(p.period_end),
        "figures": codec.dumps(p.figures),
        "digest": p.digest,
        "published_at": codec.to_us(p.published_at),
        "sink": p.sink,
        "job_run_id": p.job_run_id,
    }
    insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
    stmt = insert(telemetry_publications).values(**values).on_conflict_do_nothing()
    made = conn.execute(stmt.returning(telemetry_publications.c.period)).first()  # no row: there was one
    return made is not None


def _publication(row: object) -> Publication:
    r = row._mapping  # type: ignore[attr-defined]
    return Publication(
        tenant_id=r["tenant_id"],
        period=r["period"],
        period_start=codec.from_us(r["period_start"]),
        period_end=codec.from_us(r["period_end"]),
        figures=dict(codec.loads(r["figures"])),
        digest=r["digest"],
        published_at=codec.from_us(r["published_at"]),
        sink=r["sink"],
        job_run_id=r["job_run_id"],
    )


def publication_get(conn: Connection, tenant_id: str, period: str) -> Publication | None:
    p = telemetry_publications.c
    row = conn.execute(select(telemetry_publications).where(p.tenant_id == tenant_id, p.period == period)).first()
    return None if row is None else _publication(row)


def publications_list(conn: Connection, tenant_id: str, limit: int = 100) -> list[Publication]:
    """The tenant's publications, latest period first."""
    p = telemetry_publications.c
    q = (
        select(telemetry_publications)
        .where(p.tenant_id == tenant_id)
        .order_by(p.period_start.desc(), p.period_end.desc())
        .limit(limit)
    )
    return [_publication(row) for row in conn.execute(q)]


def publication_last(conn: Connection, tenant_id: str, kind: str) -> Publication | None:
    """The tenant's latest publication of one period kind (``day``, ``month``, ``quarter``),
    told apart by the shape of the name: ``2026-11-29``, ``2026-11``, ``2026-Q4``."""
    p = telemetry_publications.c
    shapes = {
        "day": func.length(p.period) == 10,
        "month": and_(func.length(p.period) == 7, p.period.not_like("%-Q_")),
        "quarter": p.period.like("%-Q_"),
    }
    q = (
        select(telemetry_publications)
        .where(p.tenant_id == tenant_id, shapes[kind])
        .order_by(p.period_start.desc())
        .limit(1)
    )
    row = conn.execute(q).first()
    return None if row is None else _publication(row)
