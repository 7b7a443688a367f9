"""seals: the hash of every record auditors read, written with the change that made it;
signed anchors

Revision ID: 0019
Revises: 0018

``record_seals`` holds one row per sealed state of a record (``core.seals``): a run when it
ends, a workflow run when it ends, and every change to a definition version or status, a
configuration snapshot, an approval, a token, a schedule, a schedule change, a request or a
safe-mode period; rows are never updated: each ``records.sealed`` audit entry chains a tenant's
seals in an id range by their Merkle root (``ix_audit_log_action`` finds the last one). ``ix_dead_letters_run`` finds a run's dead letters for its seal. ``anchors`` gets ``key_id`` and
``signature``: each anchor is signed with the deployment's Ed25519 evidence key (NULL for the
anchors made before, which ``evidence.unsigned_anchors_before`` accepts by name).

Existing records are sealed as they stand at the upgrade, and chained by the first batch after
it: what changed before the upgrade cannot be told from the rows, and the upgrade says so in
the audit log (the batch entry covers them like any other seals).
"""

from __future__ import annotations

import time

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

VISIBLE = "current_setting('jobgate.tenant', true) IN ('*', tenant_id)"


def upgrade() -> None:
    op.create_table(
        "record_seals",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("record_id", sa.String(length=300), nullable=False),
        sa.Column("event", sa.String(length=16), nullable=False),
        sa.Column("extent", sa.Integer(), nullable=True),
        sa.Column("identity", sa.String(length=80), nullable=False),
        sa.Column("outcome", sa.String(length=80), nullable=True),
        sa.Column("history", sa.String(length=80), nullable=True),
        sa.Column("seal", sa.String(length=80), nullable=False),
        sa.Column("content", sa.Text(), nullable=True),
        sa.Column("sealed_at", sa.BigInteger(), nullable=False),
    )
    op.create_index("ix_record_seals_record", "record_seals", ["tenant_id", "kind", "record_id", "id"])
    op.create_index("ix_record_seals_tenant", "record_seals", ["tenant_id", "id"])
    op.create_index("ix_audit_log_action", "audit_log", ["tenant_id", "action", "seq"])
    op.create_index("ix_dead_letters_run", "dead_letters", ["job_run_id"])
    op.add_column("anchors", sa.Column("key_id", sa.String(length=64), nullable=True))
    op.add_column("anchors", sa.Column("signature", sa.Text(), nullable=True))
    if op.get_bind().dialect.name == "postgresql":  # tenant-scoped like every tenant's table
        op.execute("ALTER TABLE record_seals ENABLE ROW LEVEL SECURITY")
        op.execute("ALTER TABLE record_seals FORCE ROW LEVEL SECURITY")
        op.execute(f"CREATE POLICY jobgate_tenant ON record_seals USING ({VISIBLE}) WITH CHECK ({VISIBLE})")
    _seal_existing(op.get_bind())


def _seal_existing(conn: sa.Connection) -> None:
    """Seal every record the database already holds (the same rules as every later write)."""
    from jobgate.core import seals
    from jobgate.core.states import TERMINAL
    from jobgate.store.sql import seals as record_seals

    now = int(time.time() * 1_000_000)
    terminal = ", ".join(f"'{s.value}'" for s in TERMINAL)
    after = ""
    while True:
        ids = [
            r[0]
            for r in conn.execute(
                sa.text(
                    f"SELECT job_run_id FROM job_runs WHERE status IN ({terminal}) AND job_run_id > :after"
                    " ORDER BY job_run_id LIMIT 2000"
                ),
                {"after": after},
            )
        ]
        if not ids:
            break
        record_seals.seal_runs(conn, ids, now)
        after = ids[-1]
    for (wid,) in conn.execute(sa.text(f"SELECT workflow_run_id FROM workflow_runs WHERE status IN ({terminal})")):
        record_seals.seal_workflow(conn, wid, now)
    for kind, spec in seals.SPECS.items():
        for (tenant,) in conn.execute(sa.text(f"SELECT DISTINCT tenant_id FROM {spec.table}")):
            record_seals.reseal(conn, kind, tenant, {})


def downgrade() -> None:
    with op.batch_alter_table("anchors") as batch:
        batch.drop_column("signature")
        batch.drop_column("key_id")
    op.drop_index("ix_dead_letters_run", table_name="dead_letters")
    op.drop_index("ix_audit_log_action", table_name="audit_log")
    op.drop_index("ix_record_seals_tenant", table_name="record_seals")
    op.drop_index("ix_record_seals_record", table_name="record_seals")
    op.drop_table("record_seals")
