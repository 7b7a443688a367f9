"""workflows: workflow runs, their steps, and every state change of either in order

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

VISIBLE = "current_setting('jobgate.tenant', true) IN ('*', tenant_id)"  # as in 0008
TABLES = ("workflow_runs", "workflow_steps", "workflow_transitions")
# Frozen as they were at this revision (0017 adds HELD to job_runs only).
STATUSES = "'CREATED', 'SCHEDULED', 'DISPATCHED', 'RUNNING', 'COMPLETED', 'RETRY_WAIT', 'FAILED', 'DEAD_LETTERED', 'CANCELLED', 'ESCALATED'"
ACTIVE = "status IN ('CREATED', 'SCHEDULED', 'DISPATCHED', 'RUNNING')"
OPEN_STEP = "status IN ('PENDING', 'RUNNING', 'STOPPING', 'COMPENSATING')"


def upgrade() -> None:
    op.create_table(
        "workflow_runs",
        sa.Column("workflow_run_id", sa.String(length=64), primary_key=True),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("idempotency_key", sa.String(length=80), nullable=False),
        sa.Column("job_definition_id", sa.String(length=200), nullable=False),
        sa.Column("definition_version", sa.Integer(), nullable=False),
        sa.Column("definition_digest", sa.String(length=80), nullable=False),
        sa.Column("job_class", sa.String(length=64), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("phase", sa.String(length=16), nullable=False),
        sa.Column("params", sa.Text(), nullable=False),
        sa.Column("scope", sa.Text(), nullable=False),
        sa.Column("trigger", sa.Text(), nullable=False),
        sa.Column("config_snapshot_id", sa.String(length=80), nullable=False),
        sa.Column("config_digest", sa.String(length=80), nullable=False),
        sa.Column("requested_by", sa.String(length=200), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("started_at", sa.BigInteger(), nullable=True),
        sa.Column("ended_at", sa.BigInteger(), nullable=True),
        sa.Column("error_code", sa.String(length=200), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False, server_default="0"),
        sa.Column("version", sa.Integer(), nullable=False, server_default="0"),
        sa.UniqueConstraint("idempotency_key", name="uq_workflow_runs_idempotency_key"),
        sa.CheckConstraint(f"status IN ({STATUSES})", name="ck_workflow_runs_status"),
    )
    op.create_index(
        "ix_workflow_runs_active",
        "workflow_runs",
        ["created_at"],
        sqlite_where=sa.text(ACTIVE),
        postgresql_where=sa.text(ACTIVE),
    )
    op.create_index("ix_workflow_runs_tenant_created", "workflow_runs", ["tenant_id", "created_at"])
    op.create_table(
        "workflow_steps",
        sa.Column("workflow_run_id", sa.String(length=64), primary_key=True),
        sa.Column("step_id", sa.String(length=100), primary_key=True),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=24), nullable=False),
        sa.Column("job_run_id", sa.String(length=64), nullable=True),
        sa.Column("compensation_run_id", sa.String(length=64), nullable=True),
        sa.Column("outputs", sa.Text(), nullable=True),
        sa.Column("completed_order", sa.Integer(), nullable=True),
        sa.Column("started_at", sa.BigInteger(), nullable=True),
        sa.Column("ended_at", sa.BigInteger(), nullable=True),
        sa.Column("error_code", sa.String(length=200), nullable=True),
    )
    op.create_index(
        "ix_workflow_steps_open",
        "workflow_steps",
        ["workflow_run_id"],
        sqlite_where=sa.text(OPEN_STEP),
        postgresql_where=sa.text(OPEN_STEP),
    )
    op.create_index("ix_workflow_steps_run", "workflow_steps", ["job_run_id"])
    op.create_table(
        "workflow_transitions",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
        sa.Column("workflow_run_id", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("step_id", sa.String(length=100), nullable=True),
        sa.Column("from_status", sa.String(length=24), nullable=True),
        sa.Column("to_status", sa.String(length=24), nullable=False),
        sa.Column("reason", sa.String(length=64), nullable=False),
        sa.Column("actor", sa.String(length=200), nullable=False),
        sa.Column("at", sa.BigInteger(), nullable=False),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.UniqueConstraint("workflow_run_id", "seq", name="uq_workflow_transitions_workflow_run_id_seq"),
    )
    if op.get_bind().dialect.name == "postgresql":
        for table in TABLES:
            op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
            op.execute(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")
            op.execute(f"CREATE POLICY jobgate_tenant ON {table} USING ({VISIBLE}) WITH CHECK ({VISIBLE})")


def downgrade() -> None:
    op.drop_table("workflow_transitions")
    op.drop_index("ix_workflow_steps_run", table_name="workflow_steps")
    op.drop_index("ix_workflow_steps_open", table_name="workflow_steps")
    op.drop_table("workflow_steps")
    op.drop_index("ix_workflow_runs_tenant_created", table_name="workflow_runs")
    op.drop_index("ix_workflow_runs_active", table_name="workflow_runs")
    op.drop_table("workflow_runs")
