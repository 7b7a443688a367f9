"""trust gates: licensed slots held by runs, and the row that serialises taking one

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

VISIBLE = "current_setting('jobgate.tenant', true) IN ('*', tenant_id)"  # as in 0008


def upgrade() -> None:
    op.create_table(
        "licence_slots",
        sa.Column("job_run_id", sa.String(length=64), primary_key=True),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
    )
    op.create_table(
        "gate_counters",
        sa.Column("name", sa.String(length=64), primary_key=True),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE licence_slots ENABLE ROW LEVEL SECURITY")
        op.execute("ALTER TABLE licence_slots FORCE ROW LEVEL SECURITY")
        op.execute(f"CREATE POLICY jobgate_tenant ON licence_slots USING ({VISIBLE}) WITH CHECK ({VISIBLE})")


def downgrade() -> None:
    op.drop_table("gate_counters")
    op.drop_table("licence_slots")
