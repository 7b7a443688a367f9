"""A value that changes with whatever admits a run (SQLite)

Revision ID: 0033
Revises: 0032

Every submission reads its definition's current version, its active approvals and its tenant's
safe mode: three statements, and the definition's content parsed, each time. On SQLite a
process keeps what it read (``store.sql.governance_cache``) and reads instead one value,
``governance_epoch``, which triggers set to a new random number in the same transaction as any
insert, update or delete of those rows, whoever makes it (another process, a direct ``sqlite3``
edit): a kept reading stands only while that value is the one it was read under. PostgreSQL keeps the table (one
schema for both) but no triggers: there the three reads travel in one round trip already, and
a row every governance change locks would queue concurrent changes behind one another.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0033"
down_revision = "0032"
branch_labels = None
depends_on = None

WATCHED = ("definitions", "definition_heads", "definition_approvals", "safe_mode_periods")
EVENTS = ("insert", "update", "delete")


def upgrade() -> None:
    op.create_table(
        "governance_epoch",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("epoch", sa.BigInteger, nullable=False),
        sa.CheckConstraint("id = 1", name="ck_governance_epoch_one_row"),
    )
    if op.get_bind().dialect.name != "sqlite":
        op.execute("INSERT INTO governance_epoch (id, epoch) VALUES (1, 0)")
        return
    # Random from the start: a file restored from a copy made before this migration and migrated
    # again must not meet a reading another file kept under a shared first value.
    op.execute("INSERT INTO governance_epoch (id, epoch) VALUES (1, random())")
    for table in WATCHED:
        for event in EVENTS:
            op.execute(
                f"CREATE TRIGGER governance_epoch_{table}_{event} AFTER {event.upper()} ON {table} "
                "BEGIN UPDATE governance_epoch SET epoch = random() WHERE id = 1; END"
            )


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for table in WATCHED:
            for event in EVENTS:
                op.execute(f"DROP TRIGGER IF EXISTS governance_epoch_{table}_{event}")
    op.drop_table("governance_epoch")
