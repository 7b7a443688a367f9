"""Schedules, their watermarks, and the slots they recorded as missed."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, func, select, update

from jobgate.scheduling.model import MisfirePolicy, OverlapPolicy, Schedule, ScheduleKind
from jobgate.scheduling.plan import Miss
from jobgate.scheduling.records import RecordedMiss, ScheduleChange, StoredSchedule
from jobgate.store import codec
from jobgate.store.sql import driver
from jobgate.store.tables import facts, schedule_changes, schedule_misses, schedules

S = schedules.c


def _us(d: timedelta) -> int:
    return d // timedelta(microseconds=1)


def _definition_values(s: Schedule) -> dict[str, Any]:
    """The columns that describe the schedule (not its progress)."""
    return {
        "job_definition_id": s.job_definition_id,
        "kind": s.kind.value,
        "timezone": s.timezone,
        "cron": s.cron,
        "every_us": None if s.every is None else _us(s.every),
        "anchor": codec.to_us(s.anchor),
        "params": codec.dumps(dict(s.params)),
        "misfire": s.misfire.value,
        "misfire_grace_us": _us(s.misfire_grace),
        "max_catchup": s.max_catchup,
        "overlap": s.overlap.value,
        "paused": s.paused,
        "event_type": s.event_type,
        "payload_params": codec.dumps(list(s.payload_params)),
        "condition": s.condition,
        "min_every_us": None if s.min_every is None else _us(s.min_every),
        "max_every_us": None if s.max_every is None else _us(s.max_every),
        "config_profile": s.config_profile,
        "config_watch": codec.dumps(list(s.config_watch)) if s.config_watch else None,
    }


def schedule_put(
    conn: Connection, s: Schedule, *, watermark: datetime, source: str, now: datetime, pause_reason: str | None = None
) -> bool:
    """Create the schedule, or update what it is (never its watermark); True when created.
    ``pause_reason`` says why a paused schedule is paused (None for a running one)."""
    values = {**_definition_values(s), "pause_reason": pause_reason if s.paused else None}
    changed = conn.execute(
        update(schedules)
        .where(S.tenant_id == s.tenant_id, S.schedule_id == s.schedule_id)
        .values(**values, source=source, updated_at=codec.to_us(now))
    ).rowcount
    if changed:
        return False
    conn.execute(
        schedules.insert().values(
            tenant_id=s.tenant_id,
            schedule_id=s.schedule_id,
            **values,
            watermark=codec.to_us(watermark),
            source=source,
            created_at=codec.to_us(now),
            updated_at=codec.to_us(now),
        )
    )
    return True


def _from_row(r: Any) -> StoredSchedule:
    schedule = Schedule(
        schedule_id=r.schedule_id,
        job_definition_id=r.job_definition_id,
        kind=ScheduleKind(r.kind),
        anchor=codec.from_us(r.anchor),
        timezone=r.timezone,
        cron=r.cron,
        every=None if r.every_us is None else timedelta(microseconds=r.every_us),
        params=codec.loads(r.params),
        misfire=MisfirePolicy(r.misfire),
        misfire_grace=timedelta(microseconds=r.misfire_grace_us),
        max_catchup=r.max_catchup,
        overlap=OverlapPolicy(r.overlap),
        tenant_id=r.tenant_id,
        paused=bool(r.paused),
        event_type=r.event_type,
        payload_params=tuple(codec.loads(r.payload_params)),
        condition=r.condition,
        min_every=None if r.min_every_us is None else timedelta(microseconds=r.min_every_us),
        max_every=None if r.max_every_us is None else timedelta(microseconds=r.max_every_us),
        config_profile=r.config_profile,
        config_watch=tuple(codec.loads(r.config_watch)) if r.config_watch else (),
    )
    return StoredSchedule(
        schedule,
        codec.from_us(r.watermark),
        r.source,
        codec.from_us(r.created_at),
        codec.from_us(r.updated_at),
        bool(r.episode_open),
        int(r.episodes),
        r.config_digest_seen,
        r.pause_reason,
        int(r.failures),
        r.last_error,
        codec.opt_dt(r.retry_at),
    )


def schedules_list(conn: Connection, tenant_id: str | None = None) -> list[StoredSchedule]:
    q = select(schedules).order_by(S.tenant_id, S.schedule_id)
    if tenant_id is not None:
        q = q.where(S.tenant_id == tenant_id)
    return [_from_row(r) for r in conn.execute(q)]


def schedules_failing_count(conn: Connection) -> int:
    return int(conn.execute(select(func.count()).select_from(schedules).where(S.failures > 0)).scalar_one())


def schedule_get(conn: Connection, tenant_id: str, schedule_id: str, *, lock: bool = False) -> StoredSchedule | None:
    """One stored schedule; ``lock``: its row locked until the transaction ends (PostgreSQL; a
    SQLite write transaction holds the whole database), so that an edit reads the watermark no
    scheduler moves before the edit commits."""
    q = select(schedules).where(S.tenant_id == tenant_id, S.schedule_id == schedule_id)
    row = conn.execute(q.with_for_update() if lock and conn.dialect.name == "postgresql" else q).first()
    return None if row is None else _from_row(row)


def schedule_set_paused(
    conn: Connection, tenant_id: str, schedule_id: str, paused: bool, now: datetime, reason: str | None = None
) -> bool:
    stmt = (
        update(schedules)
        .where(S.tenant_id == tenant_id, S.schedule_id == schedule_id)
        .values(paused=paused, pause_reason=reason if paused else None, updated_at=codec.to_us(now))
    )
    return bool(conn.execute(stmt).rowcount)


def schedule_failed(conn: Connection, tenant_id: str, schedule_id: str, error: str, retry_at: datetime) -> None:
    """One more failure in a row: the error kept, the next try at ``retry_at``."""
    stmt = (
        update(schedules)
        .where(S.tenant_id == tenant_id, S.schedule_id == schedule_id)
        .values(failures=S.failures + 1, last_error=error[:2000], retry_at=codec.to_us(retry_at))
    )
    conn.execute(stmt)


def schedule_recovered(conn: Connection, tenant_id: str, schedule_id: str) -> None:
    stmt = (
        update(schedules)
        .where(S.tenant_id == tenant_id, S.schedule_id == schedule_id, S.failures > 0)
        .values(failures=0, last_error=None, retry_at=None)
    )
    conn.execute(stmt)


def schedule_delete(conn: Connection, tenant_id: str, schedule_id: str) -> bool:
    conn.execute(
        schedule_misses.delete().where(
            schedule_misses.c.tenant_id == tenant_id, schedule_misses.c.schedule_id == schedule_id
        )
    )
    stmt = schedules.delete().where(S.tenant_id == tenant_id, S.schedule_id == schedule_id)
    return bool(conn.execute(stmt).rowcount)


def schedule_advance(
    conn: Connection,
    tenant_id: str,
    schedule_id: str,
    expected: datetime,
    to: datetime,
    version: datetime | None = None,
) -> bool:
    """Move the watermark from ``expected`` to ``to``: a compare-and-set, so of two schedulers
    that planned from the same watermark only one records its plan. ``version``: the schedule's
    ``updated_at`` the plan was made from — an edit committed since (a pause, a new cron) makes
    the plan stale, and it is not recorded."""
    match = [S.tenant_id == tenant_id, S.schedule_id == schedule_id, S.watermark == codec.to_us(expected)]
    if version is not None:
        match.append(S.updated_at == codec.to_us(version))
    stmt = update(schedules).where(*match).values(watermark=codec.to_us(to))
    return bool(conn.execute(stmt).rowcount)


_MISS_COLUMNS = ("tenant_id", "schedule_id", "fire_at", "reason", "recorded_at", "event_id")


def misses_record(conn: Connection, tenant_id: str, misses: Sequence[Miss], now: datetime) -> None:
    rows = [
        (tenant_id, m.schedule_id, codec.to_us(m.fire_at), m.reason.value, codec.to_us(now), m.event_id) for m in misses
    ]
    driver.insert_rows(conn, schedule_misses, _MISS_COLUMNS, rows, suffix="ON CONFLICT DO NOTHING")


def miss_of_event(conn: Connection, tenant_id: str, schedule_id: str, event_id: str) -> str | None:
    """The reason a schedule recorded event ``event_id`` as a miss (a paused schedule), or None."""
    m = schedule_misses.c
    q = select(m.reason).where(m.tenant_id == tenant_id, m.schedule_id == schedule_id, m.event_id == event_id).limit(1)
    found = conn.execute(q).scalar_one_or_none()
    return None if found is None else str(found)


def misses_list(conn: Connection, tenant_id: str, schedule_id: str, limit: int = 1000) -> list[tuple[datetime, str]]:
    m = schedule_misses.c
    q = (
        select(m.fire_at, m.reason)
        .where(m.tenant_id == tenant_id, m.schedule_id == schedule_id)
        .order_by(m.fire_at)
        .limit(limit)
    )
    return [(codec.from_us(r.fire_at), r.reason) for r in conn.execute(q)]


def misses_page(
    conn: Connection, tenant_id: str, schedule_id: str, *, reason: str | None, after: datetime | None, limit: int
) -> list[RecordedMiss]:
    """Recorded misses of one schedule, oldest first, after ``after`` (keyset paging)."""
    m = schedule_misses.c
    q = select(m.fire_at, m.reason, m.recorded_at).where(m.tenant_id == tenant_id, m.schedule_id == schedule_id)
    if reason is not None:
        q = q.where(m.reason == reason)
    if after is not None:
        q = q.where(m.fire_at > codec.to_us(after))
    rows = conn.execute(q.order_by(m.fire_at).limit(limit))
    return [RecordedMiss(codec.from_us(r.fire_at), r.reason, codec.from_us(r.recorded_at)) for r in rows]


def schedule_episode(
    conn: Connection, tenant_id: str, schedule_id: str, expected: tuple[bool, int], to: tuple[bool, int]
) -> bool:
    """Move a policy schedule's episode state by compare-and-set (open?, episodes so far)."""
    stmt = (
        update(schedules)
        .where(
            S.tenant_id == tenant_id,
            S.schedule_id == schedule_id,
            S.episode_open == expected[0],
            S.episodes == expected[1],
        )
        .values(episode_open=to[0], episodes=to[1])
    )
    return bool(conn.execute(stmt).rowcount)


def fact_record(conn: Connection, tenant_id: str, name: str, value: float, now: datetime, source: str) -> None:
    conn.execute(
        facts.insert().values(tenant_id=tenant_id, name=name, value=value, recorded_at=codec.to_us(now), source=source)
    )


def facts_list(conn: Connection, tenant_id: str, name: str, limit: int = 100) -> list[tuple[datetime, float, str]]:
    f = facts.c
    q = select(f.recorded_at, f.value, f.source).where(f.tenant_id == tenant_id, f.name == name)
    rows = conn.execute(q.order_by(f.id.desc()).limit(limit)).all()
    return [(codec.from_us(r.recorded_at), float(r.value), r.source) for r in rows]


def schedule_retime(
    conn: Connection, tenant_id: str, schedule_id: str, expected_every: timedelta, every: timedelta, anchor: datetime
) -> bool:
    """Move an interval's period (and its anchor) by compare-and-set on the current period."""
    stmt = (
        update(schedules)
        .where(S.tenant_id == tenant_id, S.schedule_id == schedule_id, S.every_us == _us(expected_every))
        .values(every_us=_us(every), anchor=codec.to_us(anchor))
    )
    return bool(conn.execute(stmt).rowcount)


def change_record(conn: Connection, tenant_id: str, schedule_id: str, change: ScheduleChange) -> None:
    conn.execute(
        schedule_changes.insert().values(
            tenant_id=tenant_id,
            schedule_id=schedule_id,
            changed_at=codec.to_us(change.changed_at),
            field=change.field,
            old_value=change.old_value,
            new_value=change.new_value,
            accepted=change.accepted,
            source=change.source,
            reason=change.reason,
        )
    )


def changes_list(
    conn: Connection, tenant_id: str, schedule_id: str, since: datetime | None = None
) -> list[ScheduleChange]:
    """A schedule's changes in order; ``since``: only those recorded after it."""
    c = schedule_changes.c
    q = select(schedule_changes).where(c.tenant_id == tenant_id, c.schedule_id == schedule_id).order_by(c.id)
    if since is not None:
        q = q.where(c.changed_at > codec.to_us(since))
    return [
        ScheduleChange(
            codec.from_us(r.changed_at), r.field, r.old_value, r.new_value, bool(r.accepted), r.source, r.reason
        )
        for r in conn.execute(q)
    ]


def schedule_config_seen(conn: Connection, tenant_id: str, schedule_id: str, expected: str | None, digest: str) -> bool:
    """Record the snapshot a configuration schedule answered, by compare-and-set on the last one."""
    seen = S.config_digest_seen.is_(None) if expected is None else S.config_digest_seen == expected
    stmt = (
        update(schedules)
        .where(S.tenant_id == tenant_id, S.schedule_id == schedule_id, seen)
        .values(config_digest_seen=digest)
    )
    return bool(conn.execute(stmt).rowcount)
