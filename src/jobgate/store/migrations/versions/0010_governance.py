"""governance: the audit log (a hash chain per tenant), definition approvals, run requests,
and the actions each safe-mode period put in force

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

VISIBLE = "current_setting('jobgate.tenant', true) IN ('*', tenant_id)"  # as in 0008
TABLES = ("audit_log", "audit_heads", "definition_approvals", "run_requests")


def upgrade() -> None:
    op.create_table(
        "audit_log",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("at", sa.BigInteger(), nullable=False),
        sa.Column("actor", sa.String(length=200), nullable=False),
        sa.Column("action", sa.String(length=100), nullable=False),
        sa.Column("target_type", sa.String(length=64), nullable=False),
        sa.Column("target_id", sa.String(length=200), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("prev_hash", sa.String(length=80), nullable=False),
        sa.Column("entry_hash", sa.String(length=80), nullable=False),
        sa.UniqueConstraint("tenant_id", "seq", name="uq_audit_log_tenant_seq"),
    )
    op.create_index("ix_audit_log_tenant_at", "audit_log", ["tenant_id", "at"])
    op.create_index("ix_audit_log_target", "audit_log", ["tenant_id", "target_type", "target_id"])
    op.create_table(
        "audit_heads",
        sa.Column("tenant_id", sa.String(length=64), primary_key=True),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("entry_hash", sa.String(length=80), nullable=False),
    )
    op.create_table(
        "definition_approvals",
        sa.Column("tenant_id", sa.String(length=64), primary_key=True),
        sa.Column("job_definition_id", sa.String(length=200), primary_key=True),
        sa.Column("digest", sa.String(length=80), primary_key=True),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("approved_by", sa.String(length=200), nullable=False),
        sa.Column("approved_at", sa.BigInteger(), nullable=False),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("revoked_at", sa.BigInteger(), nullable=True),
        sa.Column("revoked_by", sa.String(length=200), nullable=True),
    )
    op.create_table(
        "run_requests",
        sa.Column("request_id", sa.String(length=64), primary_key=True),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("job_definition_id", sa.String(length=200), nullable=False),
        sa.Column("params", sa.Text(), nullable=False),
        sa.Column("title", sa.String(length=200), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("requested_by", sa.String(length=200), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("tested_at", sa.BigInteger(), nullable=True),
        sa.Column("tested_by", sa.String(length=200), nullable=True),
        sa.Column("verdict", sa.Text(), nullable=True),
        sa.Column("decided_at", sa.BigInteger(), nullable=True),
        sa.Column("decided_by", sa.String(length=200), nullable=True),
        sa.Column("decision_note", sa.Text(), nullable=True),
        sa.Column("job_run_id", sa.String(length=64), nullable=True),
        sa.CheckConstraint("status IN ('pending', 'approved', 'rejected')", name="ck_run_requests_status"),
    )
    op.create_index("ix_run_requests_tenant", "run_requests", ["tenant_id", "status", "created_at"])
    with op.batch_alter_table("safe_mode_periods") as batch:
        batch.add_column(sa.Column("actions", sa.Text(), nullable=True))
    if op.get_bind().dialect.name == "postgresql":
        for table in TABLES:
            op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
            op.execute(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")
            op.execute(f"CREATE POLICY jobgate_tenant ON {table} USING ({VISIBLE}) WITH CHECK ({VISIBLE})")


def downgrade() -> None:
    with op.batch_alter_table("safe_mode_periods") as batch:
        batch.drop_column("actions")
    op.drop_index("ix_run_requests_tenant", table_name="run_requests")
    op.drop_table("run_requests")
    op.drop_table("definition_approvals")
    op.drop_table("audit_heads")
    op.drop_index("ix_audit_log_target", table_name="audit_log")
    op.drop_index("ix_audit_log_tenant_at", table_name="audit_log")
    op.drop_table("audit_log")
