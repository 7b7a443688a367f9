"""The chaos benchmark's job: a short body, then one side-effect row through the exactly-once
completion (``ctx.on_complete``) into ``chaos_effects``, a table with no unique constraint, so
a doubled effect would show as a second row."""

from __future__ import annotations

import os
import time
from typing import Any

from sqlalchemy import text

from jobgate import ExecutionContext

_INSERT = text("INSERT INTO chaos_effects (job_run_id, attempt, worker_pid) VALUES (:r, :a, :w)")


def effect(ctx: ExecutionContext) -> dict[str, Any]:
    time.sleep(int(ctx.params.get("ms", "50")) / 1000)
    row = {"r": ctx.job_run_id, "a": ctx.attempt, "w": os.getpid()}
    ctx.on_complete(lambda conn: conn.execute(_INSERT, row))
    return {"attempt": ctx.attempt}


def naive_effect(ctx: ExecutionContext) -> dict[str, Any]:
    """The same row written by the job itself, committed before the run completes: what a job
    queue without a fenced completion gives. ``chaos.py --naive`` shows its checks catch it."""
    import psycopg

    time.sleep(int(ctx.params.get("ms", "50")) / 1000)
    with psycopg.connect(os.environ["JOBGATE_CHAOS_DB"]) as conn:
        conn.execute(
            "INSERT INTO chaos_effects (job_run_id, attempt, worker_pid) VALUES (%s, %s, %s)",
            (ctx.job_run_id, ctx.attempt, os.getpid()),
        )
    time.sleep(int(ctx.params.get("ms", "50")) / 1000)  # a window to die in after the effect
    return {"attempt": ctx.attempt}
