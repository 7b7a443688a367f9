"""governance at every attempt: HELD runs, approvals that bind code and keep their history,
principals on tokens, appliers on definition versions, pinned digests on requests

Revision ID: 0017
Revises: 0016

- ``job_runs``: the HELD status (a gate refused the start of an attempt), its ``hold_reason`` and
  ``held_at``, a partial index of held runs, and ``reviewed_by`` (a second person reviewed it).
- ``definition_approvals``: one row per approval (``approval_id``), never overwritten by a later
  approval of the same digest, with the ``code_digest`` and ``code_identity`` it binds. Existing
  approvals are kept, in order, with no code digest: their runs are held (``code_not_approved``)
  until someone approves them again.
- ``api_tokens``: ``principal`` and ``minted_by``; ``definitions``: ``applied_by`` and
  ``applied_lineage``; ``run_requests``: ``digest``, ``version`` and ``requester_lineage``.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

VISIBLE = "current_setting('jobgate.tenant', true) IN ('*', tenant_id)"  # as in 0008
OLD = "'CREATED', 'SCHEDULED', 'DISPATCHED', 'RUNNING', 'COMPLETED', 'RETRY_WAIT', 'FAILED', 'DEAD_LETTERED', 'CANCELLED', 'ESCALATED'"
NEW = OLD + ", 'HELD'"
HELD = "status = 'HELD'"  # tables.HELD_SQL


def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    if postgres:
        op.execute("ALTER TABLE job_runs DROP CONSTRAINT ck_job_runs_status")
        op.execute(f"ALTER TABLE job_runs ADD CONSTRAINT ck_job_runs_status CHECK (status IN ({NEW}))")
        for name, kind in (("hold_reason", "VARCHAR(64)"), ("held_at", "BIGINT"), ("reviewed_by", "VARCHAR(200)")):
            op.execute(f"ALTER TABLE job_runs ADD COLUMN {name} {kind}")
    else:
        # SQLite cannot alter a CHECK constraint: the table is rebuilt (batch mode), with the same
        # columns, constraints and indexes.
        with op.batch_alter_table("job_runs", recreate="always") as batch:
            batch.drop_constraint(op.f("ck_job_runs_status"), type_="check")
            batch.create_check_constraint(op.f("ck_job_runs_status"), f"status IN ({NEW})")
            batch.add_column(sa.Column("hold_reason", sa.String(length=64), nullable=True))
            batch.add_column(sa.Column("held_at", sa.BigInteger(), nullable=True))
            batch.add_column(sa.Column("reviewed_by", sa.String(length=200), nullable=True))
    op.create_index(
        "ix_job_runs_held", "job_runs", ["held_at"], sqlite_where=sa.text(HELD), postgresql_where=sa.text(HELD)
    )

    op.create_table(
        "definition_approvals_0017",
        sa.Column("approval_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("job_definition_id", sa.String(length=200), nullable=False),
        sa.Column("digest", sa.String(length=80), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("code_digest", sa.String(length=80), nullable=True),
        sa.Column("code_identity", sa.Text(), nullable=True),
        sa.Column("approved_by", sa.String(length=200), nullable=False),
        sa.Column("approved_at", sa.BigInteger(), nullable=False),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("revoked_at", sa.BigInteger(), nullable=True),
        sa.Column("revoked_by", sa.String(length=200), nullable=True),
        sa.PrimaryKeyConstraint("approval_id", name="pk_definition_approvals_0017"),
    )
    op.execute(
        "INSERT INTO definition_approvals_0017 (tenant_id, job_definition_id, digest, version, approved_by,"
        " approved_at, note, revoked_at, revoked_by) SELECT tenant_id, job_definition_id, digest, version,"
        " approved_by, approved_at, note, revoked_at, revoked_by FROM definition_approvals"
        " ORDER BY approved_at, tenant_id, job_definition_id, digest"
    )
    op.drop_table("definition_approvals")
    op.rename_table("definition_approvals_0017", "definition_approvals")
    if postgres:
        op.execute(
            "ALTER TABLE definition_approvals RENAME CONSTRAINT pk_definition_approvals_0017 TO pk_definition_approvals"
        )
        op.execute(
            "ALTER SEQUENCE definition_approvals_0017_approval_id_seq RENAME TO definition_approvals_approval_id_seq"
        )
        op.execute("ALTER TABLE definition_approvals ENABLE ROW LEVEL SECURITY")
        op.execute("ALTER TABLE definition_approvals FORCE ROW LEVEL SECURITY")
        op.execute(f"CREATE POLICY jobgate_tenant ON definition_approvals USING ({VISIBLE}) WITH CHECK ({VISIBLE})")
    op.create_index(
        "ix_definition_approvals_digest",
        "definition_approvals",
        ["tenant_id", "job_definition_id", "digest", "approval_id"],
    )

    with op.batch_alter_table("api_tokens") as batch:
        batch.add_column(sa.Column("principal", sa.String(length=200), nullable=True))
        batch.add_column(sa.Column("minted_by", sa.Text(), nullable=True))
    with op.batch_alter_table("definitions") as batch:
        batch.add_column(sa.Column("applied_by", sa.String(length=200), nullable=True))
        batch.add_column(sa.Column("applied_lineage", sa.Text(), nullable=True))
    with op.batch_alter_table("run_requests") as batch:
        batch.add_column(sa.Column("digest", sa.String(length=80), nullable=True))
        batch.add_column(sa.Column("version", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("requester_lineage", sa.Text(), nullable=True))


def downgrade() -> None:
    """Back to 0016: held runs wait in SCHEDULED again (their gates are then checked only at
    creation, as before), and each digest keeps its newest approval."""
    postgres = op.get_bind().dialect.name == "postgresql"
    for table, columns in (
        ("run_requests", ("digest", "version", "requester_lineage")),
        ("definitions", ("applied_by", "applied_lineage")),
        ("api_tokens", ("principal", "minted_by")),
    ):
        with op.batch_alter_table(table) as batch:
            for column in columns:
                batch.drop_column(column)
    op.create_table(
        "definition_approvals_0016",
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
    op.execute(
        "INSERT INTO definition_approvals_0016 SELECT a.tenant_id, a.job_definition_id, a.digest, a.version,"
        " a.approved_by, a.approved_at, a.note, a.revoked_at, a.revoked_by FROM definition_approvals a"
        " WHERE a.approval_id = (SELECT max(b.approval_id) FROM definition_approvals b WHERE b.tenant_id ="
        " a.tenant_id AND b.job_definition_id = a.job_definition_id AND b.digest = a.digest)"
    )
    op.drop_table("definition_approvals")
    op.rename_table("definition_approvals_0016", "definition_approvals")
    if postgres:
        op.execute("ALTER TABLE definition_approvals ENABLE ROW LEVEL SECURITY")
        op.execute("ALTER TABLE definition_approvals FORCE ROW LEVEL SECURITY")
        op.execute(f"CREATE POLICY jobgate_tenant ON definition_approvals USING ({VISIBLE}) WITH CHECK ({VISIBLE})")
    op.drop_index("ix_job_runs_held", table_name="job_runs")
    op.execute("UPDATE job_runs SET status = 'SCHEDULED' WHERE status = 'HELD'")
    if postgres:
        op.execute("ALTER TABLE job_runs DROP CONSTRAINT ck_job_runs_status")
        op.execute(f"ALTER TABLE job_runs ADD CONSTRAINT ck_job_runs_status CHECK (status IN ({OLD}))")
        for name in ("hold_reason", "held_at", "reviewed_by"):
            op.execute(f"ALTER TABLE job_runs DROP COLUMN {name}")
    else:
        with op.batch_alter_table("job_runs", recreate="always") as batch:
            batch.drop_constraint(op.f("ck_job_runs_status"), type_="check")
            batch.create_check_constraint(op.f("ck_job_runs_status"), f"status IN ({OLD})")
            for name in ("hold_reason", "held_at", "reviewed_by"):
                batch.drop_column(name)
