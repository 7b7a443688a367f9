"""jobgate: a governed job scheduler and workflow orchestrator.

The public surface for embedding applications and job handlers; everything else is internal.
"""

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
    "__version__",
]
