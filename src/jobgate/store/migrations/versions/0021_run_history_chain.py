"""runs keep their transition count and history chain; run seals hash the history as a chain

Revision ID: 0021
Revises: 0020

A run's seal now hashes its history as a chain (``core.seals.history_step``: each transition
extends the link before it) instead of one hash of the whole list, so the worker that ends a
run can seal it from the chain its claim returned, without reading the transitions back.
``job_runs`` gets ``transition_count`` (kept by every writer of a transition), and
``history_hash`` with ``history_extent`` (the chain over that many transitions, kept by the
writers that know it). Existing runs get both from their transitions, and every ended run is
sealed again under the new rule (its earlier seals stay in their batches).
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

_COLUMNS = ("from_status", "to_status", "attempt", "reason", "actor", "at", "detail")


def upgrade() -> None:
    op.add_column("job_runs", sa.Column("transition_count", sa.Integer(), nullable=False, server_default="0"))
    op.add_column("job_runs", sa.Column("history_hash", sa.String(length=80), nullable=True))
    op.add_column("job_runs", sa.Column("history_extent", sa.Integer(), nullable=True))
    _backfill(op.get_bind())


def _backfill(conn: sa.Connection) -> None:
    from jobgate.core import seals
    from jobgate.core.states import TERMINAL
    from jobgate.store.sql import seals as record_seals

    now = int(time.time() * 1_000_000)
    terminal = {s.value for s in TERMINAL}
    after = ""
    while True:
        runs = conn.execute(
            sa.text("SELECT job_run_id, status FROM job_runs WHERE job_run_id > :after ORDER BY job_run_id LIMIT 2000"),
            {"after": after},
        ).all()
        if not runs:
            return
        ids = [r[0] for r in runs]
        history: dict[str, list[list[Any]]] = defaultdict(list)
        rows = conn.execute(
            sa.text(
                f"SELECT job_run_id, {', '.join(_COLUMNS)} FROM run_transitions"
                " WHERE job_run_id IN :ids ORDER BY job_run_id, id"
            ).bindparams(sa.bindparam("ids", expanding=True)),
            {"ids": ids},
        )
        for r in rows:
            history[r[0]].append(list(r[1:]))
        conn.execute(
            sa.text(
                "UPDATE job_runs SET transition_count = :n, history_hash = :h, history_extent = :n"
                " WHERE job_run_id = :id"
            ),
            [{"id": i, "n": len(history[i]), "h": seals.history_of(history[i])} for i in ids],
        )
        ended = [r[0] for r in runs if r[1] in terminal]
        if ended:
            record_seals.seal_runs(conn, ended, now)
        after = ids[-1]


def downgrade() -> None:
    with op.batch_alter_table("job_runs") as batch:
        batch.drop_column("history_extent")
        batch.drop_column("history_hash")
        batch.drop_column("transition_count")
