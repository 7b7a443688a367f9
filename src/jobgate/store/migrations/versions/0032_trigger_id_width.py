"""A run's trigger id as wide as its slot

Revision ID: 0032
Revises: 0031

A scheduled run's trigger id is ``TGTRIG-<schedule id>@<instant>`` (a batch window's names its
start and end), and a schedule id may be 200 characters: the id did not fit the 200-character
column, and a schedule with a long id never fired on PostgreSQL (a truncation error at every
tick; SQLite keeps any length). The column now holds what the slot column holds (300).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0032"
down_revision = "0031"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # SQLite keeps a text of any length whatever the declared width: nothing to change there
    # (and altering it would copy the whole table).
    if op.get_bind().dialect.name == "postgresql":
        op.alter_column("job_runs", "trigger_id", type_=sa.String(300), existing_type=sa.String(200))


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.alter_column("job_runs", "trigger_id", type_=sa.String(200), existing_type=sa.String(300))
