"""an index for the rescuer's sweep of waiting runs past their queue deadline

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

WHERE = "status IN ('SCHEDULED', 'RETRY_WAIT') AND queue_deadline_at IS NOT NULL"  # tables.QUEUE_DEADLINE_SQL


def upgrade() -> None:
    op.create_index(
        "ix_job_runs_queue_deadline",
        "job_runs",
        ["queue_deadline_at"],
        sqlite_where=sa.text(WHERE),
        postgresql_where=sa.text(WHERE),
    )


def downgrade() -> None:
    op.drop_index("ix_job_runs_queue_deadline", table_name="job_runs")
