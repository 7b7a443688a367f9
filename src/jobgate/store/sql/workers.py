"""Worker registrations: heartbeats, a clean stop, and the list the doctor and the console show."""

from __future__ import annotations

from sqlalchemy import Connection, select, update

from jobgate.store import codec
from jobgate.store.base import WorkerBeat, WorkerInfo
from jobgate.store.tables import workers


def worker_heartbeat(conn: Connection, b: WorkerBeat) -> None:
    now = codec.to_us(b.now)
    done = conn.execute(
        update(workers).where(workers.c.worker_id == b.worker_id).values(heartbeat_at=now, stopped_at=None)
    ).rowcount
    if not done:
        conn.execute(
            workers.insert().values(
                worker_id=b.worker_id,
                host=b.host,
                pid=b.pid,
                concurrency=b.concurrency,
                queues=codec.dumps(list(b.queues)),
                started_at=now,
                heartbeat_at=now,
            )
        )


def worker_stopped(conn: Connection, worker_id: str, now_us: int) -> None:
    conn.execute(update(workers).where(workers.c.worker_id == worker_id).values(stopped_at=now_us))


def workers_list(conn: Connection) -> list[WorkerInfo]:
    rows = conn.execute(select(workers).order_by(workers.c.heartbeat_at.desc())).mappings()
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
        )
        for r in rows
    ]
