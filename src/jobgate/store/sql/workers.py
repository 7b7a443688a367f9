"""Worker registrations: heartbeats, a clean stop, and the list the doctor and the console show."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, func, select, update

from jobgate.core.states import RunStatus
from jobgate.store import codec
from jobgate.store.base import WorkerBeat, WorkerInfo
from jobgate.store.sql.predicates import IS_LEASED
from jobgate.store.tables import job_runs, workers


def worker_heartbeat(conn: Connection, b: WorkerBeat) -> None:
    now = codec.to_us(b.now)
    changes: dict[str, Any] = {"heartbeat_at": now, "stopped_at": None}
    if b.capabilities is not None:
        changes["capabilities"] = codec.dumps(dict(b.capabilities))
    done = conn.execute(update(workers).where(workers.c.worker_id == b.worker_id).values(**changes)).rowcount
    if not done:
        conn.execute(
            workers.insert().values(
                worker_id=b.worker_id,
                host=b.host,
                pid=b.pid,
                concurrency=b.concurrency,
                queues=codec.dumps(list(b.queues)),
                started_at=now,
                **changes,
            )
        )


def worker_stopped(conn: Connection, worker_id: str, now_us: int) -> None:
    conn.execute(update(workers).where(workers.c.worker_id == worker_id).values(stopped_at=now_us))


def workers_list(conn: Connection) -> list[WorkerInfo]:
    leases = (
        select(func.max(job_runs.c.lease_expires_at))
        .where(IS_LEASED, job_runs.c.lease_owner == workers.c.worker_id)
        .scalar_subquery()
        .label("leases_until")
    )
    rows = conn.execute(select(workers, leases).order_by(workers.c.heartbeat_at.desc())).mappings()
    return [
        WorkerInfo(
            r["worker_id"],
            r["host"],
            r["pid"],
            r["concurrency"],
            tuple(codec.loads(r["queues"])),
            codec.from_us(r["started_at"]),
            codec.from_us(r["heartbeat_at"]),
            codec.opt_dt(r["stopped_at"]),
            codec.loads(r["capabilities"]) if r["capabilities"] else {},
            codec.opt_dt(r["leases_until"]),
        )
        for r in rows
    ]


def runs_waiting_by_digest(conn: Connection, tenant_id: str | None) -> dict[str, tuple[str, str, int]]:
    """Runs waiting for a worker (SCHEDULED), by definition digest: (tenant, job id, count).
    Read from the open runs' partial index, as the other queue counts are."""
    c = job_runs.c
    q = select(c.definition_digest, c.tenant_id, c.job_definition_id, func.count()).where(
        c.status == RunStatus.SCHEDULED.value
    )
    if tenant_id is not None:
        q = q.where(c.tenant_id == tenant_id)
    q = q.group_by(c.definition_digest, c.tenant_id, c.job_definition_id)
    return {digest: (tenant, job, int(n)) for digest, tenant, job, n in conn.execute(q)}
