"""HTTP executor: POST the run's dispatch payload (seed 000 §56) to a configured target engine.

Why it is shaped this way:

* The URL comes only from ``HttpTargetSpec``, i.e. the operator's configuration; nothing in a
  definition, a request or the payload can point the executor elsewhere. Redirects are not
  followed for the same reason: a 3xx is reported as a failure of the configured URL.
* Every attempt of a run carries the same ``Idempotency-Key``, so a target that saw an attempt
  whose answer was lost (timeout, dropped connection) can recognise the retry. That is what makes
  retrying a timeout safe.
* Status codes map to outcomes the way HTTP means them: 2xx done, 5xx try again, 4xx "this request
  will never work" -- except 408, 425 and 429, which say "not now" and are retried.
* Stopping is best effort: an in-flight request cannot be withdrawn from the target. ``stop``
  sets ``ctx.cancelled``; a request not yet sent is never sent, and an answer that arrives after
  the stop ends the attempt as ``STOPPED`` (its status is kept in the message as evidence).
  The request itself is bounded by ``spec.timeout``.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import httpx

from jobgate.context import ExecutionContext
from jobgate.core.addresses import shown_url
from jobgate.core.decide import Outcome, OutcomeKind
from jobgate.core.errors import ValidationError
from jobgate.registry import HttpTargetSpec
from jobgate.runtime.executors.base import ExecutionResult, failure, log_best_effort, stopped
from jobgate.runtime.executors.results import NotStorable, loads_strict, storable

# Client errors that mean "not now" rather than "never": Request Timeout, Too Early, Too Many Requests.
RETRYABLE_CLIENT_ERRORS = frozenset({408, 425, 429})
_BODY_EXCERPT = 500


class HttpExecutor:
    """Sends one attempt's payload to ``spec.url``; safe to share between threads.

    ``client`` lets the caller share a connection pool (and owns its lifetime); without one,
    each attempt uses a short-lived client, so nothing here needs closing.
    """

    def __init__(self, spec: HttpTargetSpec, client: httpx.Client | None = None) -> None:
        try:
            url = httpx.URL(spec.url)
        except httpx.InvalidURL as exc:
            raise ValidationError(f"{spec.url!r} is not a valid URL: {exc}", field="url") from None
        if url.scheme not in ("http", "https") or not url.host:
            raise ValidationError(f"{spec.url!r} must be an absolute http(s) URL", field="url")
        self.spec = spec
        self._client = client

    def execute(self, ctx: ExecutionContext) -> ExecutionResult:
        if ctx.is_cancelled():
            return stopped("stopped before the request was sent")
        try:
            body = json.dumps(ctx.payload.as_json(), allow_nan=False).encode()
        except (TypeError, ValueError) as exc:
            return failure(OutcomeKind.NON_RETRYABLE_FAILURE, "INVALID_PAYLOAD", f"payload is not JSON: {exc}")
        headers = {
            **dict(self.spec.headers),
            "Content-Type": "application/json",
            "Idempotency-Key": ctx.idempotency_key,
            "X-Jobgate-Run-Id": ctx.job_run_id,
        }
        if ctx.traceparent:  # W3C Trace Context: the target joins the run's trace (ours wins over config)
            headers = {k: v for k, v in headers.items() if k.lower() != "traceparent"}
            headers["traceparent"] = ctx.traceparent
        timeout = httpx.Timeout(self.spec.timeout.total_seconds())
        try:
            if self._client is not None:
                response = self._post(self._client, body, headers, timeout)
            else:
                with httpx.Client() as client:
                    response = self._post(client, body, headers, timeout)
        except httpx.TimeoutException as exc:
            return self._after(ctx, failure(OutcomeKind.RETRYABLE_FAILURE, "HTTP_TIMEOUT", _describe(exc)))
        except httpx.ConnectError as exc:
            return self._after(ctx, failure(OutcomeKind.RETRYABLE_FAILURE, "HTTP_UNREACHABLE", _describe(exc)))
        except httpx.UnsupportedProtocol as exc:
            return failure(OutcomeKind.NON_RETRYABLE_FAILURE, "HTTP_INVALID_URL", _describe(exc))
        except httpx.TransportError as exc:  # connection dropped mid-exchange, protocol errors
            return self._after(ctx, failure(OutcomeKind.RETRYABLE_FAILURE, "HTTP_TRANSPORT_ERROR", _describe(exc)))
        log_best_effort(ctx, f"[jobgate] POST {shown_url(self.spec.url)} -> HTTP {response.status_code}")
        if ctx.is_cancelled():
            return stopped(f"stopped while the request was in flight; the target answered HTTP {response.status_code}")
        return _map_response(response)

    def stop(self, ctx: ExecutionContext, grace: timedelta) -> None:
        """Mark the attempt cancelled; an in-flight request still runs to its answer or timeout."""
        ctx.cancelled.set()

    def _post(
        self, client: httpx.Client, body: bytes, headers: dict[str, str], timeout: httpx.Timeout
    ) -> httpx.Response:
        return client.post(self.spec.url, content=body, headers=headers, timeout=timeout, follow_redirects=False)

    def _after(self, ctx: ExecutionContext, failure: ExecutionResult) -> ExecutionResult:
        """A failure after a stop is the stop's consequence, not the target's fault."""
        if ctx.is_cancelled():
            return stopped(f"stopped while the request was in flight ({failure.outcome.error_code})")
        log_best_effort(ctx, f"[jobgate] POST {shown_url(self.spec.url)} failed: {failure.outcome.error_message}")
        return failure


def _map_response(response: httpx.Response) -> ExecutionResult:
    status = response.status_code
    if 200 <= status < 300:
        body = _json_object(response)
        return ExecutionResult(Outcome(OutcomeKind.SUCCEEDED), result={"status_code": status} if body is None else body)
    retryable = status >= 500 or status in RETRYABLE_CLIENT_ERRORS
    kind = OutcomeKind.RETRYABLE_FAILURE if retryable else OutcomeKind.NON_RETRYABLE_FAILURE
    excerpt = response.text[:_BODY_EXCERPT].strip()
    message = f"target answered HTTP {status}" + (f": {excerpt}" if excerpt else "")
    return failure(kind, f"HTTP_{status}", message)


def _json_object(response: httpx.Response) -> dict[str, Any] | None:
    """The answer's JSON object, if it is one the store can hold (``results.storable``): NaN,
    Infinity and numbers past a float's range (which Python's parser accepts), a lone surrogate,
    an answer over the result's size: such an answer is kept as its status code only."""
    try:
        value = loads_strict(response.text)
    except ValueError:  # not JSON (json.JSONDecodeError and UnicodeDecodeError are both ValueErrors)
        return None
    try:
        return storable(value, what="the answer")
    except NotStorable:
        return None


def _describe(exc: httpx.HTTPError) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
