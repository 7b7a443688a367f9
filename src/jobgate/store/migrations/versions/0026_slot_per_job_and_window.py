"""a slot is unique per job, and a batch window's slot names its start

Revision ID: 0026
Revises: 0025

``ux_job_runs_slot`` covered (tenant, slot): a schedule id deleted and added again for another
job found the first job's runs holding its slots, and a backfill of the new job reported them as
run. It now covers (tenant, job, slot). A batch window's slot was named by its end alone, so
after the window's length changed, a window ending at an instant another window had ended at
passed for run; new runs name the window by its start and end (``@<start>/<end>``).

Runs made before keep their slot as it was: it is part of their sealed identity, and rewriting
it would make every such run fail ``audit verify --records``. The store still finds them under
the old name and takes one as a window's holder only if the window its trigger records is that
window (``store.sql.runs``). Downgrading restores the narrower index; it fails if two jobs now
hold the same slot name, which only this revision's rule allowed.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None

HAS_SLOT = "slot IS NOT NULL"


def _slot_index(columns: list[str]) -> None:
    op.create_index(
        "ux_job_runs_slot",
        "job_runs",
        columns,
        unique=True,
        sqlite_where=sa.text(HAS_SLOT),
        postgresql_where=sa.text(HAS_SLOT),
    )


def upgrade() -> None:
    op.drop_index("ux_job_runs_slot", table_name="job_runs")
    _slot_index(["tenant_id", "job_definition_id", "slot"])


def downgrade() -> None:
    op.drop_index("ux_job_runs_slot", table_name="job_runs")
    _slot_index(["tenant_id", "slot"])
