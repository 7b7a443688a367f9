"""seals keep their values packed: ``seal_values``

Revision ID: 0025
Revises: 0024

A seal keeps the values it hashed (``record_seals.content``) so that verification names the
column that changed and both values. For the runs a worker ends together those values repeat
each other, and stored one by one they were most of what sealing a run wrote; now they are
packed, compressed, one row of ``seal_values`` for the runs of a tenant that one statement
seals, and each of those seals says where (``{"packed": n}``, ``core.seals.pack_contents``).

Seals written before keep their values inline and are read as before. Downgrading drops the
packed values: the seals still verify, and a change to one of those runs is then named by its
part (identity, outcome, history) without the column.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None

VISIBLE = "current_setting('jobgate.tenant', true) IN ('*', tenant_id)"


def upgrade() -> None:
    op.create_table(
        "seal_values",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("packed", sa.LargeBinary(), nullable=False),
    )
    if op.get_bind().dialect.name == "postgresql":  # tenant-scoped like every tenant's table
        op.execute("ALTER TABLE seal_values ENABLE ROW LEVEL SECURITY")
        op.execute("ALTER TABLE seal_values FORCE ROW LEVEL SECURITY")
        op.execute(f"CREATE POLICY jobgate_tenant ON seal_values USING ({VISIBLE}) WITH CHECK ({VISIBLE})")


def downgrade() -> None:
    op.drop_table("seal_values")
