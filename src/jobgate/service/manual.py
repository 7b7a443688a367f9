"""Manual runs asked for by an authenticated caller (the API's create-run and seed §42 schedule).

An ``Idempotency-Key`` makes a request repeatable: the run's idempotency key derives from the
tenant and that key alone, so the unique key in the store gives one run per caller key even
under concurrent repeats, and asking again returns that run. The same key with a different
request (definition, parameters or scope) is a conflict, not a silent reuse: the request's
digest is kept in the trigger's payload and compared. Without a key each request is a new
trigger, so a new run (the seed §24 key over a fresh trigger id).

A daily quota (``server.daily_run_quota``), when configured, limits the runs a tenant creates
through the API per UTC day (creates, seed §42 schedules, retries, events); it is checked
before anything is written, so a refused request stores nothing, and a repeat of an earlier
request is answered from the store before the quota is looked at. Two requests racing at the
boundary can both pass the check: the limit is exact to within the requests in flight.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from jobgate.core.canonical import digest
from jobgate.core.errors import ConflictError, NotFoundError, QuotaExceededError, ValidationError
from jobgate.core.idempotency import check_client_key, client_request_key
from jobgate.core.models import JobRun, Scope, TriggerType
from jobgate.core.params import UNREADABLE, check_text, readable_value
from jobgate.core.trace import TRACEPARENT_KEY, parse_traceparent
from jobgate.service import retries
from jobgate.service.engine import Engine
from jobgate.service.pipeline import same_params
from jobgate.service.submission import SubmitRequest, SubmitResult
from jobgate.store.sqlstore import StoreTx
from jobgate.workflows.spec import workflow_spec_of


def utc_day(now: datetime) -> tuple[datetime, datetime]:
    """The current UTC day as [start, next start) (seed 001 quota period)."""
    start = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return start, start + timedelta(days=1)


def runs_created_today(engine: Engine, tenant_id: str, now: datetime | None = None) -> tuple[int, datetime, datetime]:
    start, end = utc_day(now or engine.clock.now())
    with engine.store.read(tenant_id=tenant_id) as tx:
        return tx.runs_created_count(tenant_id, start, end), start, end


def request_digest(job_definition_id: str, params: Mapping[str, str], scope: Scope) -> str:
    for name, value in params.items():  # text that is not UTF-8 cannot be digested: name where it is
        if isinstance(value, str) and not readable_value(value):
            raise ValidationError(UNREADABLE, field=f"params.{name}")
    return digest({"job_definition_id": job_definition_id, "params": dict(params), "scope": scope.as_dict()})


@contextlib.contextmanager
def quota_turn(engine: Engine, tenant_id: str) -> Iterator[None]:
    """Around a quota's count and the write that stores what it counted: one request of the
    tenant at a time, across processes (``Store.turn``), when a daily quota is configured. Counted
    in a read before the creating transaction, concurrent requests each saw room for themselves
    (found by a regression review: ten at once at a quota of five were all created)."""
    if engine.config.server.daily_run_quota is None:
        yield
        return
    with engine.store.turn(f"jobgate.quota:{tenant_id}"):
        yield


def check_daily_quota(engine: Engine, tenant_id: str, starting: Sequence[str] = (), *, adding: int = 0) -> None:
    """Refuse (429) when the runs a request would create take the tenant past
    ``server.daily_run_quota`` runs created today: one for each definition it starts
    (``starting``, one entry a run: an event fires every schedule subscribed to it), and a
    workflow's steps with it; ``adding`` runs more (a workflow started directly makes its steps
    alone). A request that would go past is refused whole."""
    quota = engine.config.server.daily_run_quota
    if quota is None:
        return
    runs = adding + runs_started(engine, tenant_id, starting)
    used, _, _ = runs_created_today(engine, tenant_id)
    if used + runs > quota:
        more = "" if runs == 1 else f"; this request would create {runs}"
        raise QuotaExceededError(f"tenant {tenant_id} created {used} runs today{more}; the daily quota is {quota}")


def runs_started(engine: Engine, tenant_id: str, starting: Sequence[str]) -> int:
    """The runs starting each of these definitions creates: one, and a workflow's every step
    (its steps are runs too, made as the workflow goes). A definition not found counts one: its
    start is refused later, naming it."""
    if not starting:
        return 0
    runs = len(starting)
    with engine.store.read(tenant_id=tenant_id) as tx:
        for job_definition_id in set(starting):
            try:
                definition = engine.definition(tx, tenant_id, job_definition_id)
            except NotFoundError:
                continue
            if "workflow" in definition.content:
                steps = len(workflow_spec_of(definition.content, job_definition_id).steps)
                runs += steps * starting.count(job_definition_id)
    return runs


def submit_manual(
    engine: Engine,
    *,
    scope: Scope,
    actor: str,
    job_definition_id: str,
    params: Mapping[str, str],
    reason: str | None,
    idempotency_key: str | None,
    stated_requester: str | None = None,
    role: str | None = None,
    traceparent: str | None = None,
    quota: bool = True,
) -> SubmitResult:
    """A manual run for an authenticated caller. ``traceparent`` (the request's W3C header)
    is kept in the trigger's ``policy_context`` when valid, so the run joins the caller's
    trace (``core.trace``); an invalid one is ignored, as the specification asks. ``quota``
    off: the operator on the host (``jobgate submit`` on the database), whom the API's daily
    quota does not limit."""
    return submit_manual_many(
        engine,
        [ManualAsk(job_definition_id, params, reason, idempotency_key, stated_requester, traceparent)],
        scope=scope,
        actor=actor,
        role=role,
        quota=quota,
    )[0]


@dataclass(frozen=True)
class ManualAsk:
    """One manual run asked for: what ``submit_manual`` takes per run."""

    job_definition_id: str
    params: Mapping[str, str]
    reason: str | None = None
    idempotency_key: str | None = None
    stated_requester: str | None = None
    traceparent: str | None = None


def submit_manual_many(
    engine: Engine, asks: Sequence[ManualAsk], *, scope: Scope, actor: str, role: str | None = None, quota: bool = True
) -> list[SubmitResult]:
    """``submit_manual`` for several runs, created in one transaction. A repeat of an earlier
    request (its idempotency key) gets its run back before anything else is asked (the quota,
    the gates: nothing new would run); the same key with a different request is a conflict."""
    for name, value in (("environment", scope.environment), ("region", scope.region), *scope.keys):
        check_text(value, f"scope.{name}")  # printed with the run as its caller wrote it
    fingerprints: list[str] = []
    for ask in asks:
        check_client_key(ask.idempotency_key)
        check_text(ask.reason, "reason", lines=True)
        check_text(ask.stated_requester, "requested_by")
        fingerprints.append(request_digest(ask.job_definition_id, ask.params, scope))
    repeats = _repeats(engine, scope.tenant_id, asks, fingerprints)
    fresh = [i for i in range(len(asks)) if i not in repeats]
    requests = [_request(asks[i], fingerprints[i], scope, actor, role) for i in fresh]
    with quota_turn(engine, scope.tenant_id) if fresh and quota else contextlib.nullcontext():
        if fresh and quota:
            check_daily_quota(engine, scope.tenant_id, [asks[i].job_definition_id for i in fresh])
        made = dict(zip(fresh, engine.submit_many(requests, actor=actor) if requests else [], strict=True))
    for i, result in made.items():
        if not result.created:  # a concurrent repeat won the insert
            _check_same(engine, result.run, asks[i], fingerprints[i])
    return [repeats[i] if i in repeats else made[i] for i in range(len(asks))]


def _repeats(
    engine: Engine, tenant_id: str, asks: Sequence[ManualAsk], fingerprints: Sequence[str]
) -> dict[int, SubmitResult]:
    """The asks whose idempotency key already holds a run: that run, whatever changed since."""
    keyed = {
        client_request_key(tenant_id, ask.idempotency_key): i
        for i, ask in enumerate(asks)
        if ask.idempotency_key is not None
    }
    if not keyed:
        return {}
    out: dict[int, SubmitResult] = {}
    with engine.store.read(tenant_id=tenant_id) as tx:
        for run in tx.runs_by_keys(list(keyed)):
            i = keyed[run.idempotency_key]
            _refuse_another_request(engine, tx, run, asks[i], fingerprints[i])
            out[i] = SubmitResult(run, False)
    return out


def _same_values(engine: Engine, tx: StoreTx, run: JobRun, ask: ManualAsk) -> bool:
    """Whether ``ask`` asks for what ``run`` holds, value by value: ``12.5`` is the decimal
    ``12.50``, ``+007`` the integer ``7``, ``10:00+01:00`` the instant ``09:00Z`` (the request's
    digest is of the text as sent, so equal values written differently differed there)."""
    if ask.job_definition_id != run.job_definition_id:
        return False
    return same_params(engine.definitions, tx, run.tenant_id, run.job_definition_id, ask.params, run.params)


def _request(ask: ManualAsk, fingerprint: str, scope: Scope, actor: str, role: str | None) -> SubmitRequest:
    payload: dict[str, str] = {"request_digest": fingerprint}
    adopted = parse_traceparent(ask.traceparent)
    if ask.stated_requester:
        payload["stated_requested_by"] = ask.stated_requester
    key = ask.idempotency_key
    return SubmitRequest(
        ask.job_definition_id,
        trigger_type=TriggerType.MANUAL,
        params=dict(ask.params),
        scope=scope,
        requested_by=actor,
        reason=ask.reason,
        request_id=None if key is None else f"api:{key}",
        payload=payload,
        client_key=key,
        role=role,
        policy_context={} if adopted is None else {TRACEPARENT_KEY: adopted},
    )


def retry_once(
    engine: Engine,
    job_run_id: str,
    *,
    actor: str,
    tenant_id: str | None,
    role: str | None = None,
    quota: bool = True,
    require_schedule: bool = False,
) -> tuple[JobRun, bool]:
    """Seed 001 retry (``service.retries.retry``): an existing retry is returned as is, before
    anything else is asked; a new one counts against the API's daily quota (``quota``; off for
    the operator on the host) like any other run created through the API and is judged with the
    caller's role, as a submit is. ``tenant_id`` None: any tenant's run (the operator on the host)."""
    return retries.retry(
        engine,
        job_run_id,
        actor=actor,
        tenant_id=tenant_id,
        role=role,
        quota=quota,
        require_schedule=require_schedule,
    )


def _check_same(engine: Engine, run: JobRun, ask: ManualAsk, fingerprint: str) -> None:
    with engine.store.read(tenant_id=run.tenant_id) as tx:
        _refuse_another_request(engine, tx, run, ask, fingerprint)


def _refuse_another_request(engine: Engine, tx: StoreTx, run: JobRun, ask: ManualAsk, fingerprint: str) -> None:
    """Refuse a key reused for another request: the run's trigger keeps the request's digest;
    only when it differs are the values compared (``_same_values``: a definition read)."""
    trigger = tx.run_trigger(run.job_run_id) or {}
    if (trigger.get("payload") or {}).get("request_digest") != fingerprint and not _same_values(engine, tx, run, ask):
        raise ConflictError(
            "this idempotency key was used for a different request (definition, parameters or scope differ)",
            field="Idempotency-Key",
        )
