"""``Client`` (a server, over HTTP) and ``Embedded`` (a database, in process): submit a run,
read it, wait for it, follow it, cancel it, list runs — one set of methods for both.

Why two and not one: an application that triggers jobs usually talks to the server (its token
decides tenant and role, as for any caller), but one that embeds jobgate, as Huey or Dramatiq
are embedded, submits into its own database and lets workers elsewhere run the jobs. Either way
the rules are the service's: a refusal raises the same ``jobgate`` error (``ValidationError``,
``ConflictError``, ``GovernanceRefusal`` as its code, ...) with the field it names.
"""

from __future__ import annotations

import enum
import json
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from jobgate.client.runs import LocalRuns, RemoteRuns, Submission
from jobgate.core.errors import ConflictError, QuotaExceededError, ValidationError
from jobgate.core.idempotency import check_client_key
from jobgate.core.models import DEFAULT_TENANT
from jobgate.core.params import number_text
from jobgate.core.states import RunStatus

if TYPE_CHECKING:
    import httpx

    from jobgate.decorator import JobFunction
    from jobgate.service.engine import Engine
    from jobgate.views.schemas import RunCreatedOut, RunDetailOut, RunOut


T = TypeVar("T")


@dataclass(frozen=True)
class RunEvent:
    """One event of a run's stream (``GET /api/v1/runs/{id}/stream``): ``state``, ``progress``,
    ``heartbeat``, ``terminal``, ..., its data as the server sent it."""

    event: str
    data: dict[str, Any]
    id: str | None = None


def _params(params: Mapping[str, object] | None) -> dict[str, str]:
    """Parameters as the definition checks them: text. Dates and times in ISO 8601, an Enum
    as its value, a bool as ``true``/``false``, a number as its digits (never in exponent form); the service
    turns each into its declared type's canonical text. A ``None`` is refused rather than
    sent as the text ``None``."""
    out: dict[str, str] = {}
    for name, value in (params or {}).items():
        if isinstance(value, enum.Enum):
            value = value.value
        if value is None:
            raise ValidationError("a parameter needs a value", field=f"params.{name}")
        if isinstance(value, bool):
            out[str(name)] = "true" if value else "false"
        elif isinstance(value, date):  # a datetime too
            out[str(name)] = value.isoformat()
        elif isinstance(value, float | Decimal):  # positional: str() writes 1E-7, which no decimal param takes
            out[str(name)] = number_text(value)
        else:
            out[str(name)] = value if isinstance(value, str) else str(value)
    return out


def _status(value: RunStatus | str) -> RunStatus:
    try:
        return RunStatus(str(value).upper())
    except ValueError:
        known = ", ".join(s.value for s in RunStatus)
        raise ValidationError(f"{value!r} is not a run status ({known})", field="status") from None


def _type_name(kind: object) -> str:
    return str(getattr(kind, "__name__", kind))


class _Runs:
    """What both share: every method in terms of ``_runs`` (``LocalRuns`` or ``RemoteRuns``)."""

    _runs: LocalRuns | RemoteRuns
    _actor: str
    _tenant: str

    def submit(
        self,
        job: str | JobFunction,
        params: Mapping[str, object] | None = None,
        *,
        idempotency_key: str | None = None,
        reason: str | None = None,
    ) -> RunOut:
        """One run of ``job`` (its id, or the ``@jobgate.job`` function); with
        ``idempotency_key`` a repeat returns the same run, and the same key with other
        parameters is a ``ConflictError``."""
        job_id = job if isinstance(job, str) else job.job_definition_id
        check_client_key(idempotency_key)  # before anything is sent
        made = self._runs.submit(
            Submission(job_id, _params(params), reason, idempotency_key), tenant=self._tenant, actor=self._actor
        )
        return made.run

    def result(self, run_id: str, as_type: type[T]) -> T:
        """The completed run's result as ``as_type`` (a dataclass, a pydantic model, a
        ``TypedDict``, ``dict[str, Decimal]``...), validated by pydantic: the JSON the record
        holds, read back into the types the handler returned. A run that has not completed
        is a ``ConflictError`` naming its status."""
        from pydantic import TypeAdapter
        from pydantic import ValidationError as PydanticError

        run = self.get(run_id).run
        if run.status != RunStatus.COMPLETED.value:
            raise ConflictError(f"run {run_id} is {run.status}, not COMPLETED: it has no result", field="status")
        try:
            return TypeAdapter(as_type).validate_python(run.result or {})
        except PydanticError as exc:
            raise ValidationError(f"the result is not a {_type_name(as_type)}: {exc}", field="result") from None

    def get(self, run_id: str) -> RunDetailOut:
        """The run with its transitions, attempts and progress."""
        return self._runs.detail(run_id)

    def cancel(self, run_id: str, reason: str | None = None) -> RunOut:
        return self._runs.cancel(run_id, actor=self._actor, reason=reason)

    def retry(self, run_id: str) -> RunCreatedOut:
        """The retry of a terminal run (seed 001 retry contract): ``created`` True the first
        time; asking again returns the same run (its ``retry_of`` names ``run_id``)."""
        return self._runs.retry(run_id, actor=self._actor)

    def children(self, run_id: str) -> list[RunOut]:
        """The runs that retry ``run_id`` (edges derived only from ``retry_of``)."""
        return [e.run for e in self._runs.lineage(run_id, "children").edges]

    def parents(self, run_id: str) -> list[RunOut]:
        """The run ``run_id`` retries, if any."""
        return [e.run for e in self._runs.lineage(run_id, "parents").edges]

    def list(self, *, status: RunStatus | str | None = None, job: str | None = None, limit: int = 100) -> list[RunOut]:
        """Runs, newest first; ``status`` in any case (``"completed"``), refused by name if no status."""
        statuses = [] if status is None else [_status(status)]
        return self._runs.list(tenant=self._tenant, statuses=statuses, job=job, job_class=None, limit=limit)

    def log(self, run_id: str) -> str:
        """The run's log so far (its handler's output, attempt by attempt)."""
        return self._runs.log(run_id, tail=None, offset=0).text

    def _poll(self, run_id: str, timeout: float | None) -> RunOut:
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = 0.01
        while True:
            run = self.get(run_id).run
            if RunStatus(run.status).is_terminal:
                return run
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"run {run_id} is still {run.status} after {timeout} s")
            time.sleep(pause if deadline is None else max(0.0, min(pause, deadline - time.monotonic())))
            pause = min(pause * 2, 0.5)


class Client(_Runs):
    """A jobgate server, over its HTTP API, as the holder of ``token``: the token decides the
    tenant and what may be done (the server's rules, unchanged).

    >>> with jobgate.Client("http://127.0.0.1:8080", token) as jg:
    ...     run = jg.submit("demo-hello", {"name": "ada"}, idempotency_key="req-42")
    ...     done = jg.wait(run.job_run_id, timeout=60)
    """

    def __init__(
        self, url: str, token: str, *, timeout: float = 30.0, transport: httpx.BaseTransport | None = None
    ) -> None:
        self._remote = RemoteRuns(url, token, timeout=timeout, transport=transport)
        self._runs = self._remote
        self._actor, self._tenant = "token", DEFAULT_TENANT  # the token says who and which tenant

    def stream(self, run_id: str) -> Iterator[RunEvent]:
        """The run's events as the server sends them, until it ends (``terminal``) or is gone."""
        with self._remote.stream_lines(run_id) as lines:
            event, data, event_id = "message", "", None
            for line in lines:
                if line == "":
                    if data:
                        found = RunEvent(event, json.loads(data), event_id)
                        yield found
                        if found.event in ("terminal", "gone"):
                            return
                    event, data, event_id = "message", "", None
                elif line.startswith("event:"):
                    event = line[6:].strip()
                elif line.startswith("data:"):
                    data += line[5:].strip()
                elif line.startswith("id:"):
                    event_id = line[3:].strip()

    def wait(self, run_id: str, timeout: float | None = None) -> RunOut:
        """The run once it has ended: followed on its event stream, not polled (followed again if
        the stream ends first; read back when the token holds all the streams it may);
        ``TimeoutError`` when ``timeout`` seconds pass first."""
        if timeout is not None:
            return self._poll(run_id, timeout)  # a stream cannot be cut at a deadline portably
        pause = 0.01
        while True:
            try:
                for event in self.stream(run_id):
                    if event.event == "terminal":
                        break
            except QuotaExceededError:  # every stream the token may hold is open: read it back instead
                return self._poll(run_id, None)
            run = self.get(run_id).run
            if RunStatus(run.status).is_terminal:
                return run
            # the stream ended before the run did (the server's server.stream_max_seconds, a
            # restart): follow it again, after a pause that grows while it keeps ending early
            time.sleep(pause)
            pause = min(pause * 2, 1.0)

    def close(self) -> None:
        self._remote.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Embedded(_Runs):
    """A jobgate database used in process (``connect``): runs are submitted as the operator on
    the host submits them (``jobgate submit``), with ``actor`` recorded as who asked."""

    def __init__(self, engine: Engine, *, actor: str, tenant: str = DEFAULT_TENANT) -> None:
        self.engine = engine
        self._runs = LocalRuns(engine)
        self._actor, self._tenant = actor, tenant

    def wait(self, run_id: str, timeout: float | None = None) -> RunOut:
        """The run once a worker has ended it (read back with a growing pause, up to 0.5 s)."""
        return self._poll(run_id, timeout)

    def close(self) -> None:
        self.engine.store.dispose()

    def __enter__(self) -> Embedded:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(
    database: str,
    *,
    config: str | Path | None = None,
    actor: str = "app",
    tenant: str = DEFAULT_TENANT,
) -> Embedded:
    """The jobgate database at ``database`` (a URL, or a SQLite file's path), with the
    configuration in ``config`` (a ``jobgate.yaml``). By default: the ``jobgate.yaml`` beside a
    SQLite database (the folder ``jobgate init`` made), else the one in the working folder, as
    every ``jobgate`` command reads it; with neither, the built-in defaults and a warning (a run
    bound to defaults the folder's configuration does not hold differs from the same run
    submitted by the command line, and names its configuration cannot resolve are refused).
    The database must exist at this version's schema (``jobgate init`` or ``jobgate migrate``
    make it)."""
    from jobgate.config import default_config, load_config
    from jobgate.core.params import check_text
    from jobgate.service.engine import Engine
    from jobgate.store.opening import database_url, open_store

    check_text(actor, "actor")  # who acts is printed with every record it makes

    url = database_url(database)
    if config is None:
        config = _configuration_of(url)
    settings = load_config(str(config)) if config is not None else default_config(Path.cwd())
    store = open_store(url, synchronous=settings.sqlite.synchronous)
    return Embedded(Engine(store, settings), actor=actor, tenant=tenant)


def _configuration_of(url: str) -> Path | None:
    """The ``jobgate.yaml`` a database is used with when none is named: beside its SQLite file,
    else in the working folder; None (and a warning) when there is neither."""
    import warnings

    from jobgate.config import CONFIG_FILENAME
    from jobgate.store.opening import sqlite_file

    found = sqlite_file(url)
    for candidate in ([found.parent / CONFIG_FILENAME] if found is not None else []) + [Path(CONFIG_FILENAME)]:
        if candidate.is_file():
            return candidate
    warnings.warn(
        f"no {CONFIG_FILENAME} beside the database or in the working folder: jobgate's built-in defaults are used"
        " (name the folder's file with config=)",
        stacklevel=3,
    )
    return None
