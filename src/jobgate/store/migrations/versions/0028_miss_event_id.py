"""a miss names the event it recorded: ``schedule_misses.event_id``

Revision ID: 0028
Revises: 0027

An event delivered to a paused schedule is recorded as a miss (``paused``) and makes no run. A
sender delivers an event again until it is acknowledged, and the second delivery, after the
schedule was resumed, made the run the first had not: the same event recorded paused and run.
The miss now names the event's id, and a delivery of an event a schedule recorded paused is a
no-op for that schedule, as a second delivery of a fired event is.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None

HAS_EVENT = "event_id IS NOT NULL"


def upgrade() -> None:
    op.add_column("schedule_misses", sa.Column("event_id", sa.String(length=200), nullable=True))
    op.create_index(
        "ix_schedule_misses_event",
        "schedule_misses",
        ["tenant_id", "schedule_id", "event_id"],
        sqlite_where=sa.text(HAS_EVENT),
        postgresql_where=sa.text(HAS_EVENT),
    )


def downgrade() -> None:
    op.drop_index("ix_schedule_misses_event", table_name="schedule_misses")
    with op.batch_alter_table("schedule_misses") as batch:
        batch.drop_column("event_id")
