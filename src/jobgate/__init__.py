"""jobgate: a governed job scheduler and workflow orchestrator.

The public surface for embedding applications and job handlers; everything else is internal.
"""

from typing import TYPE_CHECKING

from jobgate._version import __version__
from jobgate.context import ExecutionContext
from jobgate.core.errors import (
    ConflictError,
    JobgateError,
    NonRetryableError,
    NotFoundError,
    RetryableError,
    ValidationError,
)
from jobgate.core.models import JobRun, Priority, Scope, TriggerType
from jobgate.core.states import RunStatus
from jobgate.decorator import JobFunction, Param, job

if TYPE_CHECKING:  # what __getattr__ returns, for type checkers
    from jobgate.client import Client, connect


def __getattr__(name: str) -> object:
    """``jobgate.Client`` and ``jobgate.connect``, loaded when first used (``import jobgate``
    stays light for handlers)."""
    if name in {"Client", "connect"}:
        from jobgate import client

        return getattr(client, name)
    raise AttributeError(f"module 'jobgate' has no attribute {name!r}")


__all__ = [
    "Client",
    "ConflictError",
    "ExecutionContext",
    "JobFunction",
    "JobRun",
    "JobgateError",
    "NonRetryableError",
    "NotFoundError",
    "Param",
    "Priority",
    "RetryableError",
    "RunStatus",
    "Scope",
    "TriggerType",
    "ValidationError",
    "__version__",
    "connect",
    "job",
]
