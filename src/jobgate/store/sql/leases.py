"""Leases and the scans over leased runs: renewals (fenced), stop requests, progress, and what
the rescuer and the SLA monitor look for (expired leases, runs over age or past their queue
deadline, held runs).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import (
    Connection,
    or_,
    select,
    tuple_,
    update,
)

from jobgate.core.models import JobRun
from jobgate.core.states import RunStatus
from jobgate.store import codec
from jobgate.store.base import LeaseRenew
from jobgate.store.sql.predicates import (
    IS_CLAIMABLE,
    IS_HELD,
    IS_LEASED,
    LEASED_STATUSES,
    WAITS_WITH_QUEUE_DEADLINE,
    chunks,
)
from jobgate.store.tables import (
    job_runs,
    workers,
)

C = job_runs.c


def leases_renew(conn: Connection, p: LeaseRenew) -> set[str]:
    """Extend the holder's leases; return the run ids it still holds (the others were taken)."""
    held: set[str] = set()
    exp = codec.to_us(p.lease_expires_at)
    for chunk in chunks(list(p.leases)):
        stmt = (
            update(job_runs)
            .where(
                C.status.in_(LEASED_STATUSES),
                C.lease_owner == p.worker_id,
                C.job_run_id.in_([r[0] for r in chunk]),
                tuple_(C.job_run_id, C.lease_token).in_(chunk),
            )
            .values(lease_expires_at=exp)
            .returning(C.job_run_id)
        )
        held.update(r[0] for r in conn.execute(stmt))
    if held:  # the lease-renewal metric's source of truth, counted in the renewing transaction
        W = workers.c
        conn.execute(
            update(workers).where(W.worker_id == p.worker_id).values(lease_renewals=W.lease_renewals + len(held))
        )
    return held


def runs_claimable_exists(
    conn: Connection, queues: Sequence[str], now: datetime, exclude_digests: Sequence[str] = ()
) -> bool:
    q = select(C.job_run_id).where(IS_CLAIMABLE, C.queue.in_(queues), C.due_at <= codec.to_us(now)).limit(1)
    if exclude_digests:  # runs waiting for a dependency that is down are not work to claim
        q = q.where(C.definition_digest.not_in(list(exclude_digests)))
    return conn.execute(q).first() is not None


def runs_lease_expired(conn: Connection, now: datetime, limit: int) -> list[JobRun]:
    q = (
        select(job_runs)
        .where(IS_LEASED, C.lease_expires_at < codec.to_us(now))
        .order_by(C.lease_expires_at)
        .limit(limit)
    )
    return [codec.run_from_row(r) for r in conn.execute(q).mappings()]


def runs_over_age(conn: Connection, created_before: datetime, limit: int) -> list[JobRun]:
    """The oldest open runs created before ``created_before``: up to ``limit`` waiting ones and
    ``limit`` leased ones (each read walks only its small partial index, never finished runs)."""
    cutoff = codec.to_us(created_before)
    out: list[JobRun] = []
    for open_ in (IS_CLAIMABLE, IS_LEASED, IS_HELD):
        q = select(job_runs).where(open_, C.created_at < cutoff).order_by(C.created_at).limit(limit)
        out += [codec.run_from_row(r) for r in conn.execute(q).mappings()]
    return out


def runs_queue_expired(conn: Connection, now: datetime, limit: int) -> list[JobRun]:
    q = select(job_runs).where(WAITS_WITH_QUEUE_DEADLINE, C.queue_deadline_at <= codec.to_us(now)).limit(limit)
    return [codec.run_from_row(r) for r in conn.execute(q).mappings()]


def runs_waiting_on(conn: Connection, digests: Sequence[str], due_before: datetime, limit: int) -> list[JobRun]:
    """Waiting runs of the definition versions ``digests`` due at or before ``due_before``,
    longest waiting first: those that waited too long for a dependency."""
    q = (
        select(job_runs)
        .where(IS_CLAIMABLE, C.definition_digest.in_(list(digests)), C.due_at <= codec.to_us(due_before))
        .order_by(C.due_at)
        .limit(limit)
    )
    return [codec.run_from_row(r) for r in conn.execute(q).mappings()]


def runs_stop_requested(conn: Connection, ids: Sequence[str]) -> set[str]:
    out: set[str] = set()
    for chunk in chunks(list(ids)):
        q = select(C.job_run_id).where(C.job_run_id.in_(chunk), C.stop_requested.is_(True))
        out.update(r[0] for r in conn.execute(q))
    return out


def runs_stop_check(conn: Connection, leases: Sequence[tuple[str, int]]) -> tuple[set[str], set[str]]:
    """For runs a worker is running, (id, its lease token): which a user asked to stop, and which
    are no longer its to run (the status moved on or the token did: escalated by the SLA
    monitor, closed by the rescuer). One read, so the worker's stop check stays one query."""
    stop: set[str] = set()
    taken: set[str] = set()
    tokens = dict(leases)
    for chunk in chunks(list(tokens)):
        q = select(C.job_run_id, C.stop_requested, C.status, C.lease_token).where(C.job_run_id.in_(chunk))
        seen: set[str] = set()
        for run_id, stop_requested, status, token in conn.execute(q):
            seen.add(run_id)
            if status != RunStatus.RUNNING.value or token != tokens[run_id]:
                taken.add(run_id)
            elif stop_requested:
                stop.add(run_id)
        taken.update(set(chunk) - seen)  # gone altogether (retired)
    return stop, taken


def run_progress(conn: Connection, job_run_id: str, token: int, fraction: float | None, message: str | None) -> bool:
    """The lease holder's progress, monotonic within an attempt (seed 001 §3): a fraction below
    the one recorded is refused (a late or reordered report cannot move a run backwards), and a
    report without a fraction changes only the message. Each start resets it (transitions)."""
    stmt = update(job_runs).where(
        C.job_run_id == job_run_id, C.lease_token == token, C.status == RunStatus.RUNNING.value
    )
    if fraction is None:
        return conn.execute(stmt.values(progress_message=message)).rowcount == 1
    stmt = stmt.where(or_(C.progress.is_(None), C.progress <= fraction))
    return conn.execute(stmt.values(progress=fraction, progress_message=message)).rowcount == 1


def runs_held(conn: Connection, limit: int) -> list[JobRun]:
    """Held runs, longest held first (the partial index of held runs: only they are read)."""
    q = select(job_runs).where(IS_HELD).order_by(C.held_at).limit(limit)
    return [codec.run_from_row(r) for r in conn.execute(q).mappings()]
