"""The executor seam: one small protocol, three implementations (python, command, http).

A worker hands an executor one ``ExecutionContext`` and gets back one ``Outcome``-bearing
``ExecutionResult``; it never inspects exceptions or exit codes itself. An executor receives
only its run's snapshot and payload (seed 000 §56), nothing broader.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

from jobgate.context import ExecutionContext
from jobgate.core.decide import Outcome, OutcomeKind


@dataclass(frozen=True)
class Artifact:
    path: str
    sha256: str
    size: int


@dataclass(frozen=True)
class ExecutionResult:
    outcome: Outcome
    result: dict[str, Any] | None = None
    artifact: Artifact | None = None


class Executor(Protocol):
    """Runs one attempt to its end. ``execute`` blocks; ``stop`` may be called from another
    thread and must make ``execute`` return soon (for commands: SIGTERM, then SIGKILL after the
    grace period)."""

    def execute(self, ctx: ExecutionContext) -> ExecutionResult: ...

    def stop(self, ctx: ExecutionContext, grace: timedelta) -> None: ...


def failure(kind: OutcomeKind, code: str, message: str) -> ExecutionResult:
    return ExecutionResult(Outcome(kind, error_code=code, error_message=message))


def stopped(message: str) -> ExecutionResult:
    return ExecutionResult(Outcome(OutcomeKind.STOPPED, error_message=message))


def log_best_effort(ctx: ExecutionContext, text: str) -> None:
    """A run log that cannot be written must not turn into a different outcome."""
    with contextlib.suppress(OSError):
        ctx.log(text)
