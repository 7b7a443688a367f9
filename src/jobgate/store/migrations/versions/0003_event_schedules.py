"""event schedules: the event type a schedule answers and the payload fields it passes on

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("schedules") as batch:
        batch.add_column(sa.Column("event_type", sa.String(length=200), nullable=True))
        batch.add_column(sa.Column("payload_params", sa.Text(), nullable=False, server_default="[]"))


def downgrade() -> None:
    with op.batch_alter_table("schedules") as batch:
        batch.drop_column("payload_params")
        batch.drop_column("event_type")
