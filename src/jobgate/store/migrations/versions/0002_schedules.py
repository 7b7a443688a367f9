"""schedules and their recorded misses

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "schedules",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("schedule_id", sa.String(length=200), nullable=False),
        sa.Column("job_definition_id", sa.String(length=200), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("timezone", sa.String(length=64), nullable=False),
        sa.Column("cron", sa.String(length=200), nullable=True),
        sa.Column("every_us", sa.BigInteger(), nullable=True),
        sa.Column("anchor", sa.BigInteger(), nullable=False),
        sa.Column("params", sa.Text(), nullable=False),
        sa.Column("misfire", sa.String(length=32), nullable=False),
        sa.Column("misfire_grace_us", sa.BigInteger(), nullable=False),
        sa.Column("max_catchup", sa.Integer(), nullable=False),
        sa.Column("overlap", sa.String(length=32), nullable=False),
        sa.Column("paused", sa.Boolean(), nullable=False),
        sa.Column("watermark", sa.BigInteger(), nullable=False),
        sa.Column("source", sa.String(length=32), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "schedule_id", name=op.f("pk_schedules")),
    )
    op.create_table(
        "schedule_misses",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("schedule_id", sa.String(length=200), nullable=False),
        sa.Column("fire_at", sa.BigInteger(), nullable=False),
        sa.Column("reason", sa.String(length=32), nullable=False),
        sa.Column("recorded_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "schedule_id", "fire_at", name=op.f("pk_schedule_misses")),
    )


def downgrade() -> None:
    op.drop_table("schedule_misses")
    op.drop_table("schedules")
