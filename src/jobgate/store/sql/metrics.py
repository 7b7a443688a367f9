"""The scrape's queries: the seed 000 §50 figures, grouped, read from the database.

A handful of grouped reads per scrape, each over one tenant (``tenant_id``) or all of them
(``None``), so every node of a cluster reports the same numbers. What each figure counts is
decided here, in one place, and kept exact where a cheaper equivalent exists:

* ``started`` is ``sum(attempt)``: a run's attempt counter moves in the very statement that
  records DISPATCHED -> RUNNING (``start_change`` and the claim's ``start_now``), and nothing
  else moves it, so the sum equals the number of transitions to RUNNING without reading them.
* ``retries`` are transitions to RETRY_WAIT, counted in the same pass over the runs; the
  transitions are read (through their run index) only for runs that can have one. RETRY_WAIT
  follows an ended attempt and is left only by starting another (attempt >= 2) or by ending
  without one, so a run on attempt 0, or on attempt 1 in a status reached only from its first
  RUNNING (COMPLETED, FAILED, ESCALATED, RUNNING), never had one: most of a healthy table.
* ``claim latency`` is a current distribution, not a counter: for the runs created in a recent
  window, each one's last claim (transition to DISPATCHED) minus the ``due_at`` it answered.
  ``due_at`` moves only at a retry, a release or a requeue, each followed by a new claim, so a
  run whose last claim is later than its ``due_at`` was claimed for exactly that due time.
  Reading every finished run's claim instead costs an index probe per run of the whole
  history (about half a second per 100,000 runs), which a scrape should not pay.

Retention deletes finished runs with their transitions and resolved dead letters, so these
figures are "as recorded in the database": after a retention sweep they drop.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import ColumnElement, Connection, Subquery, and_, case, func, literal, not_, or_, select

from jobgate.core.records import Distribution, Group, RunCounts
from jobgate.core.states import PENDING, RunStatus
from jobgate.store import codec
from jobgate.store.tables import dead_letters, job_runs, run_transitions, sla_breaches, workers, workflow_runs

R = job_runs.c


def without_jit(conn: Connection) -> None:
    """PostgreSQL only: no JIT compilation for this transaction's reads. The planner prices a
    scrape's grouped reads (a probe per candidate run) above its JIT thresholds, and compiling
    then costs far more than running them (measured: 1.3 s of JIT for a 60 ms query)."""
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql("SET LOCAL jit = off")


def _tenant(column: ColumnElement[str], tenant_id: str | None) -> ColumnElement[bool]:
    return literal(True) if tenant_id is None else column == tenant_id


def _sum_if(condition: ColumnElement[bool]) -> ColumnElement[int]:
    return func.coalesce(func.sum(case((condition, 1), else_=0)), 0)


# Statuses a run on attempt 1 reaches only from its first RUNNING: no RETRY_WAIT before them.
_FIRST_ATTEMPT_ONLY = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.ESCALATED, RunStatus.RUNNING)


# Runs waiting for a worker (``tg_scheduler_queue_depth``): a HELD run waits for a gate (an
# approval, the end of safe mode), and no worker will take it until then.
_WAITING_FOR_A_WORKER = sorted(s.value for s in PENDING - {RunStatus.HELD})


def run_counts(conn: Connection, tenant_id: str | None) -> list[RunCounts]:
    """Created, started, completed, failed, retried and pending runs: one pass over the runs,
    with the transitions read (through their run index) only for runs that may have retried."""
    t = run_transitions.c
    may_have_retried = or_(
        R.attempt >= 2,
        and_(R.attempt == 1, not_(R.status.in_([s.value for s in _FIRST_ATTEMPT_ONLY]))),
    )
    retries_of_run = (
        select(func.count())
        .where(t.job_run_id == R.job_run_id, t.to_status == RunStatus.RETRY_WAIT.value)
        .scalar_subquery()
    )
    q = (
        select(
            R.tenant_id,
            R.job_class,
            R.queue,
            func.count(),
            func.coalesce(func.sum(R.attempt), 0),
            _sum_if(R.status == RunStatus.COMPLETED.value),
            _sum_if(R.status == RunStatus.FAILED.value),
            func.coalesce(func.sum(case((may_have_retried, retries_of_run), else_=0)), 0),
            _sum_if(R.status.in_(_WAITING_FOR_A_WORKER)),
        )
        .where(_tenant(R.tenant_id, tenant_id))
        .group_by(R.tenant_id, R.job_class, R.queue)
    )
    return [RunCounts(*row[:3], *(int(n) for n in row[3:])) for row in conn.execute(q)]


def dead_letter_counts(conn: Connection, tenant_id: str | None) -> dict[Group, int]:
    """Dead letters recorded (one per dead-lettering: a run requeued and dead-lettered again counts twice)."""
    d = dead_letters.c
    q = (
        select(d.tenant_id, d.job_class, func.count())
        .where(_tenant(d.tenant_id, tenant_id))
        .group_by(d.tenant_id, d.job_class)
    )
    return {(tenant, job_class): int(n) for tenant, job_class, n in conn.execute(q)}


def sla_breach_counts(conn: Connection, tenant_id: str | None) -> dict[Group, int]:
    """SLA breaches (not reminders) of runs and workflows."""
    b = sla_breaches.c
    q = (
        select(b.tenant_id, b.job_class, func.count())
        .where(_tenant(b.tenant_id, tenant_id), b.phase == "breach")
        .group_by(b.tenant_id, b.job_class)
    )
    return {(tenant, job_class): int(n) for tenant, job_class, n in conn.execute(q)}


def _distribution(conn: Connection, rows: Subquery, bounds_ms: Sequence[float]) -> list[Distribution]:
    """Bucket ``rows.c.v`` (microseconds) by ``rows.c.tenant_id`` and ``rows.c.job_class`` in
    SQL, so a scrape reads a few numbers per group, never one row per observation."""
    v = rows.c.v
    q = select(
        rows.c.tenant_id,
        rows.c.job_class,
        func.count(),
        func.coalesce(func.sum(v), 0),
        *[_sum_if(v <= round(b * 1000)) for b in bounds_ms],
    ).group_by(rows.c.tenant_id, rows.c.job_class)
    return [
        Distribution(str(r[0]), str(r[1]), tuple(int(x) for x in r[4:]), int(r[2]), float(r[3]) / 1000.0)
        for r in conn.execute(q)
    ]


def workflow_latency(conn: Connection, tenant_id: str | None, bounds_ms: Sequence[float]) -> list[Distribution]:
    """Finished workflows' ``ended_at - created_at``."""
    w = workflow_runs.c
    rows = (
        select(w.tenant_id.label("tenant_id"), w.job_class.label("job_class"), (w.ended_at - w.created_at).label("v"))
        .where(_tenant(w.tenant_id, tenant_id), w.ended_at.is_not(None))
        .subquery()
    )
    return _distribution(conn, rows, bounds_ms)


def claim_latency(
    conn: Connection, tenant_id: str | None, since: datetime, bounds_ms: Sequence[float]
) -> list[Distribution]:
    """Runs created since ``since``: each one's last claim minus the due time it answered.

    A run whose due time is later than its last claim (waiting for a retry, released, requeued)
    has not been claimed for it yet and is left out. The window keeps the cost of a scrape to
    the recent runs (the tenant's creation index finds them, and each run's claim is one probe
    of the transitions' run index), whatever the history holds. The rows are materialised
    once, so the buckets do not repeat the probe.
    """
    t = run_transitions.c
    last_claim = (
        select(func.max(t.at))
        .where(t.job_run_id == R.job_run_id, t.to_status == RunStatus.DISPATCHED.value)
        .scalar_subquery()
    )
    recent = (
        select(R.tenant_id, R.job_class, R.due_at, last_claim.label("claimed_at"))
        .where(_tenant(R.tenant_id, tenant_id), R.created_at >= codec.to_us(since))
        .cte("recent_claims")
        .prefix_with("MATERIALIZED")
    )
    rows = (
        select(recent.c.tenant_id, recent.c.job_class, (recent.c.claimed_at - recent.c.due_at).label("v"))
        .where(recent.c.claimed_at >= recent.c.due_at)
        .subquery()
    )
    return _distribution(conn, rows, bounds_ms)


def lease_renewals(conn: Connection, alive_since: datetime) -> dict[str, int]:
    """Run leases each live worker has renewed (workers serve every tenant): those not stopped
    that heartbeat at or after ``alive_since``. A worker's row outlives its process, and one
    series per process ever started would grow without bound; a stopped worker's series ends."""
    W = workers.c
    q = select(W.worker_id, W.lease_renewals).where(W.stopped_at.is_(None), W.heartbeat_at >= codec.to_us(alive_since))
    return {worker: int(n) for worker, n in conn.execute(q)}
