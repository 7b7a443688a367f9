"""console sessions signed out before their expiry

Revision ID: 0027
Revises: 0026

A console session is a signed cookie the server keeps no table of, so signing out only asked the
browser to forget it: a copy of the cookie (a shared machine, a proxy's log) still opened the
console until it expired, up to ``auth.session_hours`` later. Signing out now names the session
here, and every console request of a session named here is refused. A row is kept until the
session it names would have expired anyway, then removed by the next sign-out.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None

VISIBLE = "current_setting('jobgate.tenant', true) IN ('*', tenant_id)"  # as in 0008


def upgrade() -> None:
    op.create_table(
        "ended_sessions",
        sa.Column("session_id", sa.String(length=64), primary_key=True),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("ended_at", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=False),
    )
    op.create_index("ix_ended_sessions_expiry", "ended_sessions", ["expires_at"])
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE ended_sessions ENABLE ROW LEVEL SECURITY")
        op.execute("ALTER TABLE ended_sessions FORCE ROW LEVEL SECURITY")
        op.execute(f"CREATE POLICY jobgate_tenant ON ended_sessions USING ({VISIBLE}) WITH CHECK ({VISIBLE})")


def downgrade() -> None:
    op.drop_index("ix_ended_sessions_expiry", table_name="ended_sessions")
    op.drop_table("ended_sessions")
