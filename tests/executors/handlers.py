"""Handlers for the Python executor tests, importable as ``<this module>:<name>``."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

from jobgate.core.errors import NonRetryableError, RetryableError
from jobgate.runtime.executors import ExecutionContext

NOT_CALLABLE = 42


def succeed(ctx: ExecutionContext) -> dict[str, Any]:
    return {"run": ctx.job_run_id, "attempt": ctx.attempt, "params": ctx.params, "count": 3}


def succeed_with_int_keys(ctx: ExecutionContext) -> dict[Any, Any]:
    return {1: "one"}


def return_nothing(ctx: ExecutionContext) -> None:
    ctx.log("did nothing, successfully")


def return_list(ctx: ExecutionContext) -> list[int]:
    return [1, 2]


def return_unserialisable(ctx: ExecutionContext) -> dict[str, Any]:
    return {"when": object()}


def return_nan(ctx: ExecutionContext) -> dict[str, Any]:
    return {"ratio": float("nan")}


def return_huge(ctx: ExecutionContext) -> dict[str, Any]:
    """Over a result's 1 MiB: it rides in the run's row and every event of it (an artifact's job)."""
    return {"blob": "x" * (1 << 20)}


def return_deep(ctx: ExecutionContext) -> dict[str, Any]:
    """Nested past what the API's serialiser shows (a review: one such run broke its tenant's list)."""
    top: dict[str, Any] = {}
    inner = top
    for _ in range(300):
        inner["a"] = {}
        inner = inner["a"]
    return top


def return_surrogate(ctx: ExecutionContext) -> dict[str, Any]:
    return {"name": "\udcff.csv"}  # a file name decoded with surrogateescape


def refuse(ctx: ExecutionContext) -> None:
    raise NonRetryableError("period 2026-13 does not exist", error_code="BAD_PERIOD")


def refuse_with_a_number(ctx: ExecutionContext) -> None:
    raise NonRetryableError("period 2026-13 does not exist", error_code=12345)  # type: ignore[arg-type]


def refuse_with_none(ctx: ExecutionContext) -> None:
    raise NonRetryableError("period 2026-13 does not exist", error_code=None)  # type: ignore[arg-type]


def busy(ctx: ExecutionContext) -> None:
    raise RetryableError("target is busy", error_code="TARGET_BUSY")


def crash(ctx: ExecutionContext) -> None:
    raise ValueError("boom " * 1000)


def call_exit(ctx: ExecutionContext) -> None:
    sys.exit(3)


def wait_for_stop(ctx: ExecutionContext) -> dict[str, Any]:
    """A well-behaved long handler: announces itself, then waits for cancellation."""
    ctx.progress(0.0, "started")
    if not ctx.cancelled.wait(timeout=10):
        raise AssertionError("never stopped")
    return {"partial": True}


RELEASE = threading.Event()  # what lets ``finish_despite_stop`` go on, set by its test


def finish_despite_stop(ctx: ExecutionContext) -> dict[str, Any]:
    """A handler that never looks at the stop: it waits for the test, then finishes its work."""
    ctx.progress(0.0, "started")
    if not RELEASE.wait(timeout=10):
        raise AssertionError("never released")
    return {"done": True}


def poll_until_stopped(ctx: ExecutionContext) -> dict[str, Any]:
    """A well-behaved handler that polls ``is_cancelled()`` and returns early, as if finished."""
    ctx.progress(0.0, "started")
    for _ in range(1000):
        if ctx.is_cancelled():
            return {"partial": True}
        time.sleep(0.01)  # real time: the job's own work between two looks at is_cancelled()
    raise AssertionError("never stopped")


def fail_after_stop(ctx: ExecutionContext) -> None:
    ctx.progress(0.0, "started")
    ctx.cancelled.wait(timeout=10)
    raise RetryableError("interrupted", error_code="INTERRUPTED")


async def coroutine(ctx: ExecutionContext) -> None:
    return None


class Nested:
    @staticmethod
    def handle(ctx: ExecutionContext) -> dict[str, Any]:
        return {"nested": True}


def print_then_fail(ctx: ExecutionContext) -> None:
    """Output that does not end its line, then a failure."""
    print("no newline", end="")
    raise NonRetryableError("BAD_INPUT", "the input was bad")
