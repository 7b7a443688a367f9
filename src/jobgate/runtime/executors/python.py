"""Python executor: call an installed handler ``module:function`` in-process with the attempt's context.

Why in-process: a handler is code the operator installed next to jobgate, so importing it is as
trusted as jobgate itself; what is not trusted is the run's input, which reaches the handler only
as the validated payload inside ``ExecutionContext``.

Why stopping is cooperative: a Python thread cannot be killed. ``stop`` sets ``ctx.cancelled``;
a handler that runs for long must poll ``ctx.is_cancelled()`` (or wait on ``ctx.cancelled``) and
return early. Whatever a handler that saw the stop does then (return or raise), the attempt is
``STOPPED``: the operator's intent decides the run's fate, not how the handler bailed out. A
handler that never looked and returned its result finished its work anyway: the attempt
succeeded, with that result (a workflow then compensates the step like any completed one).

A handler's failures are classified here once, so the worker never inspects exceptions:
``NonRetryableError`` and ``RetryableError`` carry their own error code; any other exception is
retryable and named by its class. Tracebacks go to the run log, never into the recorded outcome,
which is shown to people who may not be allowed to read the handler's internals.
"""

from __future__ import annotations

import contextlib
import functools
import traceback
from collections.abc import Callable, Sequence
from datetime import timedelta

from jobgate.context import ExecutionContext
from jobgate.core.decide import Outcome, OutcomeKind, error_code_of
from jobgate.core.errors import NonRetryableError, RetryableError, ValidationError
from jobgate.governance.code import check_trusted, resolve_handler
from jobgate.plugins.admission import check_handler
from jobgate.runtime.executors.base import ExecutionResult
from jobgate.runtime.executors.capture import AttemptLog, attempt_output
from jobgate.runtime.executors.results import NotStorable, storable
from jobgate.service.host import Host

MAX_ERROR_MESSAGE = 2000

Handler = Callable[[ExecutionContext], object]


def truncate(message: str, limit: int = MAX_ERROR_MESSAGE) -> str:
    return message if len(message) <= limit else message[: limit - 1] + "…"


class PythonExecutor:
    """Runs ``fn(ctx)`` in the calling (worker pool) thread and maps what happens to an ``Outcome``.

    A handler of jobgate's own (``governance.code.host_job``) runs as ``fn(ctx, host)`` when its
    module is trusted (``check_trusted``: jobgate's, or listed in ``worker.trusted_handlers``);
    ``host`` is None only where no worker hosts it (a dry run), and such a handler is refused."""

    def __init__(self, handler: str, host: Host | None = None, trusted: Sequence[str] = ()) -> None:
        self.handler = handler
        check_handler(handler)  # a plugin not admitted here is never imported, whatever the definition says
        fn = resolve_handler(handler)
        if check_trusted(handler, fn, trusted):
            if host is None:
                raise ValidationError(f"{handler!r} is one of jobgate's own jobs: run it in a worker", field="handler")
            fn = functools.partial(fn, host=host)
        self._fn: Handler = fn

    def execute(self, ctx: ExecutionContext) -> ExecutionResult:
        if ctx.is_cancelled():
            return _stopped("stopped before the handler started")
        result = self._call(ctx)
        if ctx.stop_unseen() and result.outcome.kind is OutcomeKind.SUCCEEDED:
            return result  # it never looked at the stop and finished its work: that is what happened
        if ctx.is_cancelled():
            return _stopped("stopped while the handler was running")
        return result

    def stop(self, ctx: ExecutionContext, grace: timedelta) -> None:
        """Ask the handler to return; ``grace`` is unused because there is nothing to force."""
        ctx.cancelled.set()

    def _call(self, ctx: ExecutionContext) -> ExecutionResult:
        # Its prints and log records are the run's log, and so is how it failed: under the
        # attempt's own header, on a line of its own.
        with attempt_output(ctx) as log:
            try:
                value = self._fn(ctx)
            except NonRetryableError as exc:
                code, text = error_code_of(exc.error_code), described(exc)  # whatever the handler passed
                _log(log, f"[jobgate] handler {self.handler} failed (non-retryable, {code}): {text}")
                return _failure(OutcomeKind.NON_RETRYABLE_FAILURE, code, text)
            except RetryableError as exc:
                code, text = error_code_of(exc.error_code), described(exc)
                _log(log, f"[jobgate] handler {self.handler} failed (retryable, {code}): {text}")
                return _failure(OutcomeKind.RETRYABLE_FAILURE, code, text)
            except BaseException as exc:  # sys.exit, KeyboardInterrupt, GeneratorExit raised by
                # the handler's own code (signals reach the main thread, never this one) end its attempt, not the worker
                _log(log, f"[jobgate] handler {self.handler} raised:\n" + "".join(traceback.format_exception(exc)))
                return _failure(OutcomeKind.RETRYABLE_FAILURE, type(exc).__name__, described(exc))
        return _as_result(value)


_SUCCEEDED = ExecutionResult(Outcome(OutcomeKind.SUCCEEDED))  # immutable: shared by every plain success


def _as_result(value: object) -> ExecutionResult:
    """Accept ``None`` or a JSON object the store can hold (``results.storable``); the recorded
    result is the JSON round trip, i.e. exactly what the store will hold."""
    if value is None:
        return _SUCCEEDED
    try:
        normalised = storable(value, what="handler result")
    except NotStorable as refused:
        return _failure(OutcomeKind.NON_RETRYABLE_FAILURE, "INVALID_RESULT", str(refused))
    return ExecutionResult(Outcome(OutcomeKind.SUCCEEDED), result=normalised)


def described(exc: BaseException) -> str:
    """An exception's text for the run's record: its ``str``, or its class when that is empty
    or itself raises (a handler's exception class can do anything)."""
    try:
        return str(exc) or type(exc).__name__
    except Exception:  # whatever a broken __str__ raises
        return type(exc).__name__


def _failure(kind: OutcomeKind, code: str, message: str) -> ExecutionResult:
    return ExecutionResult(Outcome(kind, error_code=code, error_message=truncate(message)))


def _stopped(message: str) -> ExecutionResult:
    return ExecutionResult(Outcome(OutcomeKind.STOPPED, error_message=message))


def _log(log: AttemptLog, text: str) -> None:
    """Best effort: a run log that cannot be written must not turn into a different outcome."""
    with contextlib.suppress(OSError):
        log.line(text)
