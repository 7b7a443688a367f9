"""adaptive schedules: interval bounds, and the record of every recommended change

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("schedules") as batch:
        batch.add_column(sa.Column("min_every_us", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("max_every_us", sa.BigInteger(), nullable=True))
    op.create_table(
        "schedule_changes",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("schedule_id", sa.String(length=200), nullable=False),
        sa.Column("changed_at", sa.BigInteger(), nullable=False),
        sa.Column("field", sa.String(length=64), nullable=False),
        sa.Column("old_value", sa.Text(), nullable=True),
        sa.Column("new_value", sa.Text(), nullable=False),
        sa.Column("accepted", sa.Boolean(), nullable=False),
        sa.Column("source", sa.String(length=200), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_schedule_changes")),
    )
    op.create_index(
        "ix_schedule_changes_schedule", "schedule_changes", ["tenant_id", "schedule_id", "id"], unique=False
    )


def downgrade() -> None:
    op.drop_index("ix_schedule_changes_schedule", table_name="schedule_changes")
    op.drop_table("schedule_changes")
    with op.batch_alter_table("schedules") as batch:
        batch.drop_column("max_every_us")
        batch.drop_column("min_every_us")
