"""Handlers the workflow tests' steps run: each leaves a line in the marker file, so a test
reads which steps really executed, in which order, and how often.

A wait or a sleep here is the step's work (what is being scheduled), never a test waiting."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from jobgate import ExecutionContext, NonRetryableError


def _mark(ctx: ExecutionContext, what: str) -> None:
    path = Path(os.environ["JOBGATE_TEST_MARKER"])
    with path.open("a") as fh:
        fh.write(f"{what} {ctx.params.get('name', '-')} {ctx.job_run_id} {ctx.attempt}\n")


def record(ctx: ExecutionContext) -> dict[str, Any]:
    """Marks its execution; its outputs echo its params (``name``, ``value``) and a ``count``."""
    _mark(ctx, "ran")
    value = ctx.params.get("value", "")
    return {"name": ctx.params.get("name", ""), "value": value, "count": len(value), "flag": value == "yes"}


def fail(ctx: ExecutionContext) -> dict[str, Any]:
    _mark(ctx, "failed")
    raise NonRetryableError("this step fails", error_code="STEP_BROKEN")


def undo(ctx: ExecutionContext) -> dict[str, Any]:
    _mark(ctx, "undo")
    return {}


def undo_fails(ctx: ExecutionContext) -> dict[str, Any]:
    _mark(ctx, "undo-failed")
    raise NonRetryableError("cannot undo", error_code="UNDO_BROKEN")


def wait(ctx: ExecutionContext) -> dict[str, Any]:
    """Marks its start, then waits (up to 20 s) until stopped or until the gate file exists."""
    _mark(ctx, "started")
    gate = Path(os.environ["JOBGATE_TEST_MARKER"] + ".gate")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        # The step's work: a stop ends it at once; the gate file is looked at every 20 ms (a
        # test's ``touch``: an event could not be waited on together with the stop).
        if ctx.cancelled.wait(0.02):
            _mark(ctx, "stopped")
            return {"interrupted": True}
        if gate.exists():
            break
    _mark(ctx, "ran")
    return {"name": ctx.params.get("name", ""), "value": "", "count": 0, "flag": False}


def slow_first_attempt(ctx: ExecutionContext) -> dict[str, Any]:
    """Attempt 1 marks its start and sleeps (its worker process is meant to be SIGKILLed);
    later attempts run at once."""
    _mark(ctx, "started")
    if ctx.attempt == 1:
        time.sleep(30)  # the step's work, until its worker process is killed
    _mark(ctx, "ran")
    return {"name": ctx.params.get("name", ""), "value": "", "count": 0, "flag": False}
