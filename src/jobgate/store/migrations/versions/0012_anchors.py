"""anchoring: each tenant's Merkle roots over its audit entries, chained root to root

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

VISIBLE = "current_setting('jobgate.tenant', true) IN ('*', tenant_id)"  # as in 0008


def upgrade() -> None:
    op.create_table(
        "anchors",
        sa.Column("tenant_id", sa.String(length=64), primary_key=True),
        sa.Column("anchor_seq", sa.BigInteger(), primary_key=True),
        sa.Column("mode", sa.String(length=16), nullable=False),
        sa.Column("window_start", sa.BigInteger(), nullable=False),
        sa.Column("window_end", sa.BigInteger(), nullable=False),
        sa.Column("first_seq", sa.BigInteger(), nullable=False),
        sa.Column("last_seq", sa.BigInteger(), nullable=False),
        sa.Column("leaf_count", sa.Integer(), nullable=False),
        sa.Column("root", sa.String(length=80), nullable=False),
        sa.Column("prev_chain", sa.String(length=80), nullable=False),
        sa.Column("chain", sa.String(length=80), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("sink", sa.String(length=200), nullable=False),
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE anchors ENABLE ROW LEVEL SECURITY")
        op.execute("ALTER TABLE anchors FORCE ROW LEVEL SECURITY")
        op.execute(f"CREATE POLICY jobgate_tenant ON anchors USING ({VISIBLE}) WITH CHECK ({VISIBLE})")


def downgrade() -> None:
    op.drop_table("anchors")
