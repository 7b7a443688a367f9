"""one run per schedule slot, whatever the configuration did: ``job_runs.slot``; schedules
that say why they are paused and that they are failing

Revision ID: 0018
Revises: 0017

``schedules`` gets ``pause_reason`` (``unapproved``: waiting for its definition's approval) and
``failures``, ``last_error``, ``retry_at``: a schedule whose plan or fire fails is marked and
backed off, and never delays the others.

A scheduled or backfilled run names its slot (``TGTRIG-<schedule>@<instant>``, its trigger id);
``ux_job_runs_slot`` makes (tenant, slot) unique. The idempotency key alone could not: it
includes the configuration digest (seed §24), so after a configuration change a backfill made
a second run for every slot that had run. Existing scheduled and backfilled runs get their
slot, the earliest run of each slot (by run id, which starts with the creation time) keeping
it: where the old behaviour had made a second run, that run stays, without a slot.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

TIMED = "'cron', 'interval', 'batch_window', 'adaptive', 'safe_mode', 'backfill'"
HAS_SLOT = "slot IS NOT NULL"


def upgrade() -> None:
    op.add_column("job_runs", sa.Column("slot", sa.String(length=300), nullable=True))
    op.execute(
        "UPDATE job_runs SET slot = trigger_id WHERE job_run_id IN ("
        " SELECT min(job_run_id) FROM job_runs"
        f" WHERE trigger_type IN ({TIMED}) AND trigger_id LIKE 'TGTRIG-%@%' AND trigger_id NOT LIKE '%@config-%'"
        " GROUP BY tenant_id, trigger_id)"
    )
    op.create_index(
        "ux_job_runs_slot",
        "job_runs",
        ["tenant_id", "slot"],
        unique=True,
        sqlite_where=sa.text(HAS_SLOT),
        postgresql_where=sa.text(HAS_SLOT),
    )
    op.add_column("schedules", sa.Column("pause_reason", sa.String(length=32), nullable=True))
    op.add_column("schedules", sa.Column("failures", sa.Integer(), nullable=False, server_default="0"))
    op.add_column("schedules", sa.Column("last_error", sa.Text(), nullable=True))
    op.add_column("schedules", sa.Column("retry_at", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("schedules") as batch:
        for name in ("retry_at", "last_error", "failures", "pause_reason"):
            batch.drop_column(name)
    op.drop_index("ux_job_runs_slot", table_name="job_runs")
    with op.batch_alter_table("job_runs") as batch:
        batch.drop_column("slot")
