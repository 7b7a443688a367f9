"""telemetry rollups: one publication per tenant and period; each worker's lease renewals

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

VISIBLE = "current_setting('jobgate.tenant', true) IN ('*', tenant_id)"  # as in 0008


def upgrade() -> None:
    op.create_table(
        "telemetry_publications",
        sa.Column("tenant_id", sa.String(length=64), primary_key=True),
        sa.Column("period", sa.String(length=32), primary_key=True),
        sa.Column("period_start", sa.BigInteger(), nullable=False),
        sa.Column("period_end", sa.BigInteger(), nullable=False),
        sa.Column("figures", sa.Text(), nullable=False),
        sa.Column("digest", sa.String(length=80), nullable=False),
        sa.Column("published_at", sa.BigInteger(), nullable=False),
        sa.Column("sink", sa.String(length=200), nullable=False),
        sa.Column("job_run_id", sa.String(length=64), nullable=True),
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE telemetry_publications ENABLE ROW LEVEL SECURITY")
        op.execute("ALTER TABLE telemetry_publications FORCE ROW LEVEL SECURITY")
        op.execute(f"CREATE POLICY jobgate_tenant ON telemetry_publications USING ({VISIBLE}) WITH CHECK ({VISIBLE})")
    with op.batch_alter_table("workers") as batch:
        batch.add_column(sa.Column("lease_renewals", sa.BigInteger(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("workers") as batch:
        batch.drop_column("lease_renewals")
    op.drop_table("telemetry_publications")
