"""row-level security on PostgreSQL: a transaction sees and writes only its tenant's rows

Revision ID: 0008
Revises: 0007

Every tenant-owned table gets the policy ``jobgate_tenant``: a row is visible and writable
only when the session's ``jobgate.tenant`` setting is its tenant, or ``*`` (the cluster's own
processes: workers, schedulers, the rescuer). Unset means nothing: a connection that did not
say who it acts for sees no tenant's rows. ``FORCE`` makes the policy bind the tables' owner
too; superusers and BYPASSRLS roles are never bound by PostgreSQL, which is why jobgate should
connect as an ordinary application role (README: Cluster mode). SQLite has no such wall.
"""

from __future__ import annotations

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

TENANT_TABLES = (
    "config_snapshots",
    "dead_letters",
    "definition_heads",
    "definitions",
    "facts",
    "job_runs",
    "outbox",
    "run_transitions",
    "safe_mode_periods",
    "schedule_changes",
    "schedule_misses",
    "schedules",
)
VISIBLE = "current_setting('jobgate.tenant', true) IN ('*', tenant_id)"


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table in TENANT_TABLES:
        op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        op.execute(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")
        op.execute(f"CREATE POLICY jobgate_tenant ON {table} USING ({VISIBLE}) WITH CHECK ({VISIBLE})")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table in TENANT_TABLES:
        op.execute(f"DROP POLICY IF EXISTS jobgate_tenant ON {table}")
        op.execute(f"ALTER TABLE {table} NO FORCE ROW LEVEL SECURITY")
        op.execute(f"ALTER TABLE {table} DISABLE ROW LEVEL SECURITY")
