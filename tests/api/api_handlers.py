"""Handlers for the server-process tests (imported by the served worker via PYTHONPATH)."""

from __future__ import annotations

from typing import Any

from jobgate import ExecutionContext


def count_up(ctx: ExecutionContext) -> dict[str, Any]:
    """Reports progress ``params.steps`` times, ``params.pause`` seconds apart."""
    steps = int(ctx.params.get("steps", "5"))
    pause = float(ctx.params.get("pause", "0.2"))
    for i in range(1, steps + 1):
        if ctx.cancelled.wait(pause):
            return {"interrupted_at": i}
        ctx.progress(i / steps, f"step {i} of {steps}")
    return {"steps": steps}
