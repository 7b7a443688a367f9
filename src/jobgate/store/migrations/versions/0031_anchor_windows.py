"""An index on each tenant's anchored windows by mode

Revision ID: 0031
Revises: 0030

Every audit append reads the end of the tenant's last batch-anchored window (the floor its
entries' times may not precede). The anchors were found by the primary key's tenant alone and
filtered by mode: every anchor the tenant ever made, read at every append (8,760 a year with the
hourly anchoring ``init`` schedules). Indexed by (tenant, mode, window end), the last is one
index entry away.
"""

from __future__ import annotations

from alembic import op

revision = "0031"
down_revision = "0030"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_anchors_mode_window", "anchors", ["tenant_id", "mode", "window_end"])


def downgrade() -> None:
    op.drop_index("ix_anchors_mode_window", table_name="anchors")
