"""Handlers for the SLA monitor tests, run by a real worker in this process."""

from __future__ import annotations

import threading
from typing import Any

from jobgate import ExecutionContext

STARTED = threading.Event()
RELEASE = threading.Event()


def gate(ctx: ExecutionContext) -> dict[str, Any]:
    """Starts, then waits for the test to release it, deaf to cancellation (as a stuck job is):
    its completion comes after whatever the test did meanwhile."""
    STARTED.set()
    if not RELEASE.wait(30):
        raise RuntimeError("never released")
    return {"released": True}
