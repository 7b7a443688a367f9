"""SLA reminders and breaches are sealed records

Revision ID: 0030
Revises: 0029

A reminder or breach is what an auditor reads to learn that a deadline passed, and how it was
escalated; its row could be rewritten (a breach made "info", an escalation undone) or deleted
and nothing told it. Each is now sealed when it is recorded and again when its escalation is
marked, as every other record an auditor reads is (``core.seals``: the ``sla_breach`` kind).
The reminders and breaches already recorded are sealed as they stand at the upgrade, chained by
the first batch after it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0030"
down_revision = "0029"
branch_labels = None
depends_on = None


def upgrade() -> None:
    from jobgate.store.sql import seals as record_seals

    conn = op.get_bind()
    for (tenant,) in conn.execute(sa.text("SELECT DISTINCT tenant_id FROM sla_breaches")):
        record_seals.reseal(conn, "sla_breach", tenant, {})


def downgrade() -> None:
    """Nothing to undo in the schema. The seals stay: batches already chained cover them (their
    Merkle roots would no longer verify without them), and earlier versions read no seal of a
    kind they do not know."""
