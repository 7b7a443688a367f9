"""configuration schedules: the profile a schedule watches and the snapshot it last answered

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("schedules") as batch:
        batch.add_column(sa.Column("config_profile", sa.String(length=200), nullable=True))
        batch.add_column(sa.Column("config_digest_seen", sa.String(length=80), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("schedules") as batch:
        batch.drop_column("config_digest_seen")
        batch.drop_column("config_profile")
