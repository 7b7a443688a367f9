"""runs name the run they retry: ``job_runs.retry_of``

Revision ID: 0024
Revises: 0023

The retry contract (seed 001, ``service.retries``) needs the edge from a retry to its source
as a column: a retry is found by it (at most one retry per source run, including retries made
before the run id of a retry became deterministic), and the lineage reads
(``/runs/{id}/children`` and ``/parents``) are derived from it alone. ``ix_job_runs_retry_of``
holds only the runs that are retries, by tenant.

Existing retries get the column from their trigger (manual, request id ``retry-of:<source>``,
payload ``{"retry_of": <source>}``), the document every retry has been created with; the trigger is part of a run's sealed identity, so
the backfilled value is covered by the seals those runs already have, and none is resealed.
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

IS_RETRY = "retry_of IS NOT NULL"
_PAGE = 2000


def upgrade() -> None:
    op.add_column("job_runs", sa.Column("retry_of", sa.String(length=64), nullable=True))
    _backfill(op.get_bind())
    op.create_index(
        "ix_job_runs_retry_of",
        "job_runs",
        ["tenant_id", "retry_of"],
        sqlite_where=sa.text(IS_RETRY),
        postgresql_where=sa.text(IS_RETRY),
    )


def _backfill(conn: sa.Connection) -> None:
    """Page through the runs whose trigger mentions ``retry_of`` (a cheap text filter; the
    payload itself decides) and copy the payload's value to the column."""
    after = ""
    while True:
        rows = conn.execute(
            sa.text(
                "SELECT job_run_id, trigger FROM job_runs"
                " WHERE job_run_id > :after AND trigger LIKE '%retry_of%' ORDER BY job_run_id LIMIT :n"
            ),
            {"after": after, "n": _PAGE},
        ).all()
        if not rows:
            return
        updates = []
        for job_run_id, trigger in rows:
            source = retry_source(trigger)
            if source is not None:
                updates.append({"id": job_run_id, "source": source})
        if updates:
            conn.execute(sa.text("UPDATE job_runs SET retry_of = :source WHERE job_run_id = :id"), updates)
        after = rows[-1][0]


def retry_source(trigger: str | None) -> str | None:
    """The run a stored trigger document says its run retries, if any: only a retry's own
    trigger (manual, request id ``retry-of:<source>``, payload ``retry_of``) counts, as
    ``core.lineage.retry_source`` (copied: a migration keeps the rule it shipped with)."""
    try:
        doc = json.loads(trigger or "{}")
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    payload = doc.get("payload")
    source = payload.get("retry_of") if isinstance(payload, dict) else None
    if not isinstance(source, str) or not source:
        return None
    if doc.get("trigger_type") != "manual" or doc.get("request_id") != f"retry-of:{source}":
        return None
    return source


def downgrade() -> None:
    op.drop_index("ix_job_runs_retry_of", table_name="job_runs")
    with op.batch_alter_table("job_runs") as batch:
        batch.drop_column("retry_of")
