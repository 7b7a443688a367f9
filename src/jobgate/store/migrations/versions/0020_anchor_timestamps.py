"""anchors keep the RFC 3161 token a timestamping authority gave them

Revision ID: 0020
Revises: 0019

``anchors.timestamp_token`` holds, base64, the DER TimeStampResp the configured timestamping
authority (``evidence.timestamp_authority``) returned for the anchor's message
(``evidence.anchors.anchor_message``). NULL for anchors made before a TSA was configured, which
``evidence.timestamp_authority.unstamped_anchors_before`` accepts by number, and for direct
anchors, which the next batch anchor's stamp covers through its chain (``timestamping``).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("anchors", sa.Column("timestamp_token", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("anchors") as batch:
        batch.drop_column("timestamp_token")
