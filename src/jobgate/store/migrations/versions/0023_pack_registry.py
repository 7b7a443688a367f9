"""the pack registry: versioned packs and their content-addressed blobs, per tenant

Revision ID: 0023
Revises: 0022

``packs`` holds one row per (tenant, pack id, version) with the digest of its canonical
manifest; ``pack_blobs`` the definitions it carries, keyed by their SHA-256. Both are only ever
inserted (an identity never changes content: ``core.packs``), and both are tenant-scoped by
row-level security on PostgreSQL, as every tenant table is (0008).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

VISIBLE = "current_setting('jobgate.tenant', true) IN ('*', tenant_id)"  # as in 0008


def upgrade() -> None:
    op.create_table(
        "packs",
        sa.Column("tenant_id", sa.String(length=64), primary_key=True),
        sa.Column("pack_id", sa.String(length=100), primary_key=True),
        sa.Column("version", sa.String(length=64), primary_key=True),
        sa.Column("digest", sa.String(length=80), nullable=False),
        sa.Column("manifest", sa.Text(), nullable=False),
        sa.Column("origin", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("created_by", sa.String(length=200), nullable=False),
    )
    op.create_table(
        "pack_blobs",
        sa.Column("tenant_id", sa.String(length=64), primary_key=True),
        sa.Column("digest", sa.String(length=80), primary_key=True),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
    )
    if op.get_bind().dialect.name == "postgresql":
        for table in ("packs", "pack_blobs"):
            op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
            op.execute(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")
            op.execute(f"CREATE POLICY jobgate_tenant ON {table} USING ({VISIBLE}) WITH CHECK ({VISIBLE})")


def downgrade() -> None:
    op.drop_table("pack_blobs")
    op.drop_table("packs")
