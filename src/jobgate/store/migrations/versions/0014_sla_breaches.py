"""SLA monitoring: each reminder and breach recorded once per subject, kind and phase

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

VISIBLE = "current_setting('jobgate.tenant', true) IN ('*', tenant_id)"  # as in 0008


def upgrade() -> None:
    op.create_table(
        "sla_breaches",
        sa.Column("sla_breach_id", sa.String(length=64), primary_key=True),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("subject_kind", sa.String(length=16), nullable=False),
        sa.Column("subject_id", sa.String(length=64), nullable=False),
        sa.Column("job_class", sa.String(length=64), nullable=False),
        sa.Column("job_definition_id", sa.String(length=200), nullable=False),
        sa.Column("eco_number", sa.String(length=200), nullable=True),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("phase", sa.String(length=16), nullable=False),
        sa.Column("sla_policy", sa.String(length=200), nullable=False),
        sa.Column("deadline", sa.BigInteger(), nullable=False),
        sa.Column("detected_at", sa.BigInteger(), nullable=False),
        sa.Column("severity", sa.String(length=16), nullable=False),
        sa.Column("requires_escalation", sa.Boolean(), nullable=False),
        sa.Column("escalated", sa.Boolean(), nullable=False, server_default="0"),
        sa.UniqueConstraint(
            "tenant_id", "subject_id", "kind", "phase", name="uq_sla_breaches_tenant_id_subject_id_kind_phase"
        ),
    )
    op.create_index("ix_sla_breaches_tenant_detected", "sla_breaches", ["tenant_id", "detected_at"])
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE sla_breaches ENABLE ROW LEVEL SECURITY")
        op.execute("ALTER TABLE sla_breaches FORCE ROW LEVEL SECURITY")
        op.execute(f"CREATE POLICY jobgate_tenant ON sla_breaches USING ({VISIBLE}) WITH CHECK ({VISIBLE})")


def downgrade() -> None:
    op.drop_index("ix_sla_breaches_tenant_detected", table_name="sla_breaches")
    op.drop_table("sla_breaches")
