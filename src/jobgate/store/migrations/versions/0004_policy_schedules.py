"""policy and alert schedules: conditions, episodes, recorded facts

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("schedules") as batch:
        batch.add_column(sa.Column("condition", sa.String(length=300), nullable=True))
        batch.add_column(sa.Column("episode_open", sa.Boolean(), nullable=False, server_default=sa.text("false")))
        batch.add_column(sa.Column("episodes", sa.Integer(), nullable=False, server_default="0"))
    op.create_table(
        "facts",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.Column("recorded_at", sa.BigInteger(), nullable=False),
        sa.Column("source", sa.String(length=200), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_facts")),
    )
    op.create_index("ix_facts_name", "facts", ["tenant_id", "name", "id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_facts_name", table_name="facts")
    op.drop_table("facts")
    with op.batch_alter_table("schedules") as batch:
        batch.drop_column("episodes")
        batch.drop_column("episode_open")
        batch.drop_column("condition")
