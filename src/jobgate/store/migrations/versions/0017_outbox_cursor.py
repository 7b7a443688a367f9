"""the outbox is delivered by cursor on PostgreSQL too: events carry their transaction id

Revision ID: 0017
Revises: 0016

Marking each delivered event rewrote its row and left a dead entry in the pending index: a
quarter of the worker's write-ahead log, and reads of the pending index that slowed as dead
entries piled up between vacuums. Events now carry the id of the transaction that wrote them
(a column default), and the publisher's cursor is the pair (xid, id).

Events already written: delivered ones get xid 0 and the cursor is placed after all of them;
undelivered ones get xid 1, so they come next, in id order, before anything written later.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

XID_DEFAULT = "(pg_current_xact_id()::text)::bigint"


def upgrade() -> None:
    op.add_column("outbox", sa.Column("xid", sa.BigInteger(), nullable=True))
    op.add_column("outbox_cursors", sa.Column("delivered_xid", sa.BigInteger(), nullable=False, server_default="0"))
    op.drop_index("ix_outbox_pending", table_name="outbox")
    if op.get_bind().dialect.name == "postgresql":
        op.execute("UPDATE outbox SET xid = CASE WHEN delivered_at IS NULL THEN 1 ELSE 0 END")
        op.execute(f"ALTER TABLE outbox ALTER COLUMN xid SET DEFAULT {XID_DEFAULT}")
        now = "(extract(epoch from clock_timestamp()) * 1000000)::bigint"
        op.execute(
            "INSERT INTO outbox_cursors (name, delivered_through, updated_at, delivered_xid) "
            f"SELECT 'default', coalesce((SELECT max(id) FROM outbox WHERE xid = 0), 0), {now}, 0 "
            "ON CONFLICT (name) DO UPDATE SET delivered_through = excluded.delivered_through, delivered_xid = 0"
        )
    op.create_index("ix_outbox_xid", "outbox", ["xid", "id"], sqlite_where=sa.text("xid IS NOT NULL"))


def downgrade() -> None:
    op.drop_index("ix_outbox_xid", table_name="outbox")
    if op.get_bind().dialect.name == "postgresql":
        # Back to marking: what the cursor passed is delivered.
        op.execute(
            "UPDATE outbox SET delivered_at = coalesce(delivered_at, 0) FROM outbox_cursors c "
            "WHERE c.name = 'default' AND (outbox.xid, outbox.id) <= (c.delivered_xid, c.delivered_through)"
        )
        op.execute("DELETE FROM outbox_cursors WHERE name = 'default'")
    op.create_index(
        "ix_outbox_pending",
        "outbox",
        ["id"],
        sqlite_where=sa.text("delivered_at IS NULL"),
        postgresql_where=sa.text("delivered_at IS NULL"),
    )
    with op.batch_alter_table("outbox_cursors") as batch:
        batch.drop_column("delivered_xid")
    with op.batch_alter_table("outbox") as batch:
        batch.drop_column("xid")
