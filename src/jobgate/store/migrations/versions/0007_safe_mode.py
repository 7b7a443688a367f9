"""safe mode periods, and the profile keys a configuration schedule watches

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "safe_mode_periods",
        sa.Column("tenant_id", sa.String(length=64), primary_key=True),
        sa.Column("activation", sa.Integer(), primary_key=True),
        sa.Column("activated_at", sa.BigInteger(), nullable=False),
        sa.Column("activated_by", sa.String(length=200), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("deactivated_at", sa.BigInteger(), nullable=True),
        sa.Column("deactivated_by", sa.String(length=200), nullable=True),
        sa.Column("deactivation_reason", sa.Text(), nullable=True),
    )
    with op.batch_alter_table("schedules") as batch:
        batch.add_column(sa.Column("config_watch", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("schedules") as batch:
        batch.drop_column("config_watch")
    op.drop_table("safe_mode_periods")
