"""The transactional outbox and worker registrations."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection, select, update

from jobgate.core.models import OutboxEvent
from jobgate.store import codec
from jobgate.store.base import WorkerBeat, WorkerInfo
from jobgate.store.tables import outbox, workers


def outbox_pending(conn: Connection, limit: int) -> list[OutboxEvent]:
    """Undelivered events, oldest first: per-run order is insertion order."""
    q = select(outbox).where(outbox.c.delivered_at.is_(None)).order_by(outbox.c.id).limit(limit)
    return [codec.outbox_from_row(r) for r in conn.execute(q).mappings()]


def outbox_mark_delivered(conn: Connection, ids: Sequence[int], now_us: int) -> None:
    for start in range(0, len(ids), 500):
        chunk = list(ids[start : start + 500])
        conn.execute(update(outbox).where(outbox.c.id.in_(chunk)).values(delivered_at=now_us))


def outbox_backlog(conn: Connection) -> int:
    from sqlalchemy import func

    return int(conn.execute(select(func.count()).select_from(outbox).where(outbox.c.delivered_at.is_(None))).scalar_one())


def worker_heartbeat(conn: Connection, b: WorkerBeat) -> None:
    now = codec.to_us(b.now)
    done = conn.execute(
        update(workers).where(workers.c.worker_id == b.worker_id).values(heartbeat_at=now, stopped_at=None)
    ).rowcount
    if not done:
        conn.execute(
            workers.insert().values(
                worker_id=b.worker_id, host=b.host, pid=b.pid, concurrency=b.concurrency,
                queues=codec.dumps(list(b.queues)), started_at=now, heartbeat_at=now,
            )
        )


def worker_stopped(conn: Connection, worker_id: str, now_us: int) -> None:
    conn.execute(update(workers).where(workers.c.worker_id == worker_id).values(stopped_at=now_us))


def workers_list(conn: Connection) -> list[WorkerInfo]:
    rows = conn.execute(select(workers).order_by(workers.c.heartbeat_at.desc())).mappings()
    return [
        WorkerInfo(r["worker_id"], r["host"], r["pid"], r["concurrency"], tuple(codec.loads(r["queues"])),
                   codec.from_us(r["started_at"]), codec.from_us(r["heartbeat_at"]), codec.opt_dt(r["stopped_at"]))
        for r in rows
    ]
