"""Where runs are submitted and read: the local database, or a server (``--server URL --token T``
for the command line, ``jobgate.Client`` for applications).

Both sides return the API's own models (``RunOut``, ``RunDetailOut``), so ``jobgate runs …``
and ``jobgate submit`` print the same tables and the same JSON whether they ran against a
database file or over HTTP. Remotely the token decides the tenant and who is asking; a
server's refusal comes back as the same error line the local command would print.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from jobgate.core.errors import (
    ConfigurationError,
    ConflictError,
    JobgateError,
    NotFoundError,
    QuotaExceededError,
    UnavailableError,
    ValidationError,
)
from jobgate.core.idempotency import is_short_run_id
from jobgate.core.lineage import RETRY_EDGE
from jobgate.core.models import Scope
from jobgate.core.states import RunStatus
from jobgate.service import control, manual, retries
from jobgate.service.absent import no_run
from jobgate.service.engine import Engine
from jobgate.store.base import RunFilter
from jobgate.views.runs import run_detail_view
from jobgate.views.schemas import Page, RunCreatedOut, RunDetailOut, RunEdgeOut, RunLineageOut, RunOut, retired_edge

if TYPE_CHECKING:
    import httpx


LINEAGE_DIRECTIONS = ("parents", "children")


@dataclass(frozen=True)
class Submission:
    job: str
    params: dict[str, str]
    reason: str | None
    request_id: str | None


@dataclass(frozen=True)
class LogPart:
    text: str
    end: int  # the byte offset to read from next


class RunsClient(Protocol):
    def submit(self, s: Submission, *, tenant: str, actor: str) -> RunCreatedOut: ...
    def submit_many(self, items: Sequence[Submission], *, tenant: str, actor: str) -> list[RunCreatedOut]: ...
    def list(
        self, *, tenant: str, statuses: Sequence[RunStatus], job: str | None, job_class: str | None, limit: int
    ) -> list[RunOut]: ...
    def detail(self, run_id: str) -> RunDetailOut: ...
    def cancel(self, run_id: str, *, actor: str, reason: str | None) -> RunOut: ...
    def stop(self, run_id: str, *, actor: str, reason: str | None) -> RunOut: ...
    def retry(self, run_id: str, *, actor: str) -> RunCreatedOut: ...
    def lineage(self, run_id: str, direction: str) -> RunLineageOut: ...
    def log(self, run_id: str, *, tail: int | None, offset: int) -> LogPart: ...
    def resolve(self, run_id: str) -> str: ...


class LocalRuns:
    """Straight to the database: the operator on the host, every tenant within reach."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def resolve(self, run_id: str) -> str:
        """A full run id, or the one run whose id ends with the short id a table showed."""
        if not is_short_run_id(run_id):
            return run_id
        with self.engine.store.read() as tx:
            found = tx.run_ids_ending(run_id, limit=2)
        if not found:
            raise NotFoundError(f"no run whose id ends with {run_id!r}", field="run_id")
        if len(found) > 1:
            raise ValidationError(f"more than one run id ends with {run_id!r}: give more of it", field="run_id")
        return found[0]

    def submit(self, s: Submission, *, tenant: str, actor: str) -> RunCreatedOut:
        return self.submit_many([s], tenant=tenant, actor=actor)[0]

    def submit_many(self, items: Sequence[Submission], *, tenant: str, actor: str) -> list[RunCreatedOut]:
        """As the API's create-run does (``service.manual``): a request id is the caller's
        idempotency key, so the same id finds the same run here and through a server, a repeat
        is answered before any gate, and the same id with other parameters is a conflict. The
        API's daily quota does not apply to the operator on the host."""
        asks = [manual.ManualAsk(s.job, s.params, s.reason, s.request_id) for s in items]
        results = manual.submit_manual_many(self.engine, asks, scope=Scope(tenant), actor=actor, quota=False)
        return [RunCreatedOut(created=r.created, run=RunOut.of(r.run)) for r in results]

    def list(
        self, *, tenant: str, statuses: Sequence[RunStatus], job: str | None, job_class: str | None, limit: int
    ) -> list[RunOut]:
        _named_filters(job, job_class)
        wanted = RunFilter(
            tenant_id=tenant, statuses=tuple(statuses), job_definition_id=job, job_class=job_class, limit=limit
        )
        with self.engine.store.read() as tx:
            return [RunOut.of(r) for r in tx.runs_list(wanted)]

    def detail(self, run_id: str) -> RunDetailOut:
        return run_detail_view(self.engine, self.resolve(run_id))

    def cancel(self, run_id: str, *, actor: str, reason: str | None) -> RunOut:
        return RunOut.of(control.cancel_run(self.engine, self.resolve(run_id), actor=actor, reason=reason))

    def stop(self, run_id: str, *, actor: str, reason: str | None) -> RunOut:
        return RunOut.of(control.stop_run(self.engine, self.resolve(run_id), actor=actor, reason=reason))

    def retry(self, run_id: str, *, actor: str) -> RunCreatedOut:
        run, created = manual.retry_once(self.engine, self.resolve(run_id), actor=actor, tenant_id=None, quota=False)
        return RunCreatedOut(created=created, run=RunOut.of(run))

    def lineage(self, run_id: str, direction: str) -> RunLineageOut:
        """``direction`` ``parents`` (the run it retries) or ``children`` (its retries)."""
        found = retries.lineage(self.engine, self.resolve(run_id), None)
        ends = found.parents if direction == "parents" else found.children
        edges = [RunEdgeOut(kind=RETRY_EDGE, run=RunOut.of(r)) for r in ends]
        retired = [retired_edge(g) for g in (found.retired_parents if direction == "parents" else [])]
        return RunLineageOut(job_run_id=found.run.job_run_id, direction=direction, edges=edges, retired=retired)

    def log(self, run_id: str, *, tail: int | None, offset: int) -> LogPart:
        from jobgate.service import run_files

        with self.engine.store.read() as tx:
            run = tx.run_get(self.resolve(run_id))
            if run is None:
                raise no_run(tx, self.resolve(run_id), None, field="run_id")
        part = run_files.read_log(self.engine.config, run, tail_lines=tail, offset=offset)
        return LogPart(part.text, part.end)


class RemoteError(JobgateError):
    """A refusal the server sent back, with its code (shown as ``error: <code>: <message>``)."""

    def __init__(self, code: str, message: str, field: str | None, source: str | None = None) -> None:
        super().__init__(message, field=field, source=source)
        self.code = code


_BY_STATUS: dict[int, type[JobgateError]] = {
    404: NotFoundError,
    409: ConflictError,
    422: ValidationError,
    400: ValidationError,
    429: QuotaExceededError,
}


SHORT_ID_SCAN = 1000  # through a server, a short id is looked for among this many newest runs


def _server_url(url: str) -> bool:
    """Whether ``url`` names a server: http(s), a host, a port in range, no query, fragment or
    space (a review's ``http://[::1``, ``...?x=1`` and ``:99999`` were internal errors or an
    'unreachable server')."""
    import httpx

    if "://" not in url or any(ch.isspace() or ch in "?#" for ch in url):
        return False
    try:
        parsed = httpx.URL(url)
        port = parsed.port
    except (httpx.InvalidURL, ValueError):
        return False
    return (
        parsed.scheme in ("http", "https")
        and bool(parsed.host)
        and not parsed.userinfo  # the token says who asks; user info replaced the bearer header
        and (port is None or 0 < port < 65536)
    )


class RemoteRuns:
    """Over HTTP with a bearer token; the server's rules (roles, tenant, quota) apply."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
        named_as: str = "url",
    ) -> None:
        import httpx  # only remote commands pay for the import

        self._transport_error = httpx.TransportError
        self._named_as = named_as  # what an unreachable server is called: the Python API's ``url``, the CLI's option
        if not _server_url(url):  # a typo is not an unreachable server: a configuration error, not exit 69
            # not repeated: what was typed may hold a password (user:pass@)
            raise ConfigurationError(
                "not a server's URL: http(s)://HOST[:PORT][/PATH], no user or password, query or fragment",
                field=named_as,
            )
        self.http = httpx.Client(
            base_url=url.rstrip("/"),
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout,
            transport=transport,
        )

    def resolve(self, run_id: str) -> str:
        """A full run id, or the one run among the newest ``SHORT_ID_SCAN`` the token may see
        whose id ends with the short id a table showed (the API names runs in full)."""
        if not is_short_run_id(run_id):
            return run_id
        params: dict[str, Any] = {"limit": 500}
        found: list[str] = []
        seen = 0
        while seen < SHORT_ID_SCAN:
            page = Page[RunOut].model_validate(self._call("GET", "/api/v1/runs", params=params))
            found += [r.job_run_id for r in page.items if r.job_run_id.endswith(run_id)]
            seen += len(page.items)
            if not page.next_cursor or len(found) > 1:
                break
            params["cursor"] = page.next_cursor
        if not found:
            raise NotFoundError(
                f"no run whose id ends with {run_id!r} among the newest {SHORT_ID_SCAN}: give the full id (--wide)",
                field="run_id",
            )
        if len(found) > 1:
            raise ValidationError(f"more than one run id ends with {run_id!r}: give more of it", field="run_id")
        return found[0]

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        return self._respond(method, path, **kwargs).json()

    def _respond(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self.http.request(method, path, **kwargs)
        except self._transport_error as exc:
            raise UnavailableError(f"cannot reach {self.http.base_url}: {exc}", field=self._named_as) from None
        if response.status_code >= 400:
            self._refuse(response)
        return response

    def _refuse(self, response: httpx.Response) -> None:
        """The server's refusal as the error the local command would raise."""
        try:
            body = response.json()
            code, message, field = body["error"], body["message"], body.get("field")
            source = body.get("source")
        except (ValueError, KeyError, TypeError, AttributeError):
            code, message, field, source = "http_error", f"HTTP {response.status_code}", None, None
        if isinstance(source, str) and isinstance(message, str) and message.startswith(f"{source}: "):
            message = message.removeprefix(f"{source}: ")  # said again as the local error says it
        else:
            source = None
        kind = _BY_STATUS.get(response.status_code)
        if kind is not None:
            raise kind(message, field=field, source=source)
        raise RemoteError(code, message, field, source)

    @contextlib.contextmanager
    def stream_lines(self, run_id: str) -> Iterator[Iterator[str]]:
        """The lines of the run's event stream (Server-Sent Events), read as they come."""
        try:
            path = f"/api/v1/runs/{_segment(self.resolve(run_id))}/stream"
            with self.http.stream("GET", path, timeout=None) as response:
                if response.status_code >= 400:
                    response.read()
                    self._refuse(response)
                yield response.iter_lines()
        except self._transport_error as exc:
            raise UnavailableError(f"cannot reach {self.http.base_url}: {exc}", field=self._named_as) from None

    def close(self) -> None:
        self.http.close()

    def submit(self, s: Submission, *, tenant: str, actor: str) -> RunCreatedOut:
        headers = {"Idempotency-Key": s.request_id} if s.request_id else {}
        body = {"job_definition_id": s.job, "params": s.params, "reason": s.reason}
        return RunCreatedOut.model_validate(self._call("POST", "/api/v1/runs", json=body, headers=headers))

    def submit_many(self, items: Sequence[Submission], *, tenant: str, actor: str) -> list[RunCreatedOut]:
        return [self.submit(s, tenant=tenant, actor=actor) for s in items]

    def list(
        self, *, tenant: str, statuses: Sequence[RunStatus], job: str | None, job_class: str | None, limit: int
    ) -> list[RunOut]:
        _named_filters(job, job_class)
        params: dict[str, Any] = {"status": [s.value for s in statuses], "limit": min(limit, 500)}
        if job:
            params["job_definition_id"] = job
        if job_class:
            params["job_class"] = job_class
        out: list[RunOut] = []
        while len(out) < limit:
            page = Page[RunOut].model_validate(self._call("GET", "/api/v1/runs", params=params))
            out.extend(page.items)
            if not page.next_cursor:
                break
            params["cursor"] = page.next_cursor
        return out[:limit]

    def detail(self, run_id: str) -> RunDetailOut:
        return RunDetailOut.model_validate(self._call("GET", f"/api/v1/runs/{_segment(self.resolve(run_id))}"))

    def cancel(self, run_id: str, *, actor: str, reason: str | None) -> RunOut:
        body = {"reason": reason}
        return RunOut.model_validate(
            self._call("POST", f"/api/v1/runs/{_segment(self.resolve(run_id))}/cancel", json=body)
        )

    def stop(self, run_id: str, *, actor: str, reason: str | None) -> RunOut:
        body = {"reason": reason}
        return RunOut.model_validate(
            self._call("POST", f"/api/v1/runs/{_segment(self.resolve(run_id))}/stop", json=body)
        )

    def retry(self, run_id: str, *, actor: str) -> RunCreatedOut:
        return RunCreatedOut.model_validate(self._call("POST", f"/api/v1/runs/{_segment(self.resolve(run_id))}/retry"))

    def lineage(self, run_id: str, direction: str) -> RunLineageOut:
        if direction not in LINEAGE_DIRECTIONS:
            raise ValidationError("parents or children", field="direction")
        path = f"/api/v1/runs/{_segment(self.resolve(run_id))}/{direction}"
        return RunLineageOut.model_validate(self._call("GET", path))

    def log(self, run_id: str, *, tail: int | None, offset: int) -> LogPart:
        params: dict[str, Any] = {"tail": tail} if tail is not None else {"offset": offset}
        response = self._respond("GET", f"/api/v1/runs/{_segment(self.resolve(run_id))}/log", params=params)
        return LogPart(response.text, int(response.headers.get("X-Log-End", offset)))


def _segment(value: str) -> str:
    """A run id as one path segment: anything that could change the path is refused here."""
    if not value or any(c in value for c in "/?#%\\") or value in (".", ".."):
        raise ValidationError("not a run id", field="run_id")
    return value


def _named_filters(job: str | None, job_class: str | None) -> None:
    """A filter given empty is refused, naming it, at every door (the API's ``?job_definition_id=``
    is 400): ``--job "$JOB"`` with the variable unset listed every run (found by a review)."""
    for name, value in (("job", job), ("job_class", job_class)):
        if value is not None and not value.strip():
            raise ValidationError("is empty: leave it out to list runs of every one", field=name)
