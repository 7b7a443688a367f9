"""workers advertise which definition versions they can execute here

Revision ID: 0022
Revises: 0021

``workers.capabilities`` holds, as JSON, what a worker found when it probed the current
version of every active definition of its queues: by definition digest, the job id, whether
this host can execute it (its handler imports, its runner or target is configured) and why
not, and the code digest it would run. Claims skip what the worker cannot run; ``jobgate
doctor`` names definitions no live worker can run. NULL until the worker's first probe.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("workers", sa.Column("capabilities", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("workers") as batch:
        batch.drop_column("capabilities")
