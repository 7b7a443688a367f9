"""runs retention deleted are remembered: ``retired_runs``

Revision ID: 0029
Revises: 0028

Retention deletes finished runs; their idempotency keys and slots went with them, so the same
request or a backfill of the same window made a second run of a trigger that had had one ("one
run per slot, ever" held only while the first was kept), and a period's evidence bundle could
not say that runs of the period had been retired. Each run retention deletes now leaves a row
here: its key, its slot, its status and times.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None

HAS_SLOT = "slot IS NOT NULL"
VISIBLE = "current_setting('jobgate.tenant', true) IN ('*', tenant_id)"


def upgrade() -> None:
    op.create_table(
        "retired_runs",
        sa.Column("job_run_id", sa.String(length=64), primary_key=True),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("job_definition_id", sa.String(length=200), nullable=False),
        sa.Column("idempotency_key", sa.String(length=80), nullable=False),
        sa.Column("slot", sa.String(length=300), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("ended_at", sa.BigInteger(), nullable=True),
        sa.Column("retired_at", sa.BigInteger(), nullable=False),
    )
    op.create_index("ix_retired_runs_key", "retired_runs", ["idempotency_key"])
    op.create_index(
        "ix_retired_runs_slot",
        "retired_runs",
        ["tenant_id", "job_definition_id", "slot"],
        sqlite_where=sa.text(HAS_SLOT),
        postgresql_where=sa.text(HAS_SLOT),
    )
    op.create_index("ix_retired_runs_created", "retired_runs", ["tenant_id", "created_at"])
    if op.get_bind().dialect.name == "postgresql":  # tenant-scoped like every tenant's table
        op.execute("ALTER TABLE retired_runs ENABLE ROW LEVEL SECURITY")
        op.execute("ALTER TABLE retired_runs FORCE ROW LEVEL SECURITY")
        op.execute(f"CREATE POLICY jobgate_tenant ON retired_runs USING ({VISIBLE}) WITH CHECK ({VISIBLE})")


def downgrade() -> None:
    op.drop_table("retired_runs")
