"""jobgate: a governed job scheduler and workflow orchestrator.

The public surface for embedding applications and job handlers; everything else is internal.
"""

from importlib.metadata import PackageNotFoundError, version

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

try:
    __version__ = version("jobgate")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+source"

__all__ = [
    "ConflictError",
    "ExecutionContext",
    "JobRun",
    "JobgateError",
    "NonRetryableError",
    "NotFoundError",
    "Priority",
    "RetryableError",
    "RunStatus",
    "Scope",
    "TriggerType",
    "ValidationError",
]
