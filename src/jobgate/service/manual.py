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

import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

from jobgate.core.canonical import digest
from jobgate.core.errors import ConflictError, QuotaExceededError, ValidationError
from jobgate.core.idempotency import client_request_key, retry_key
from jobgate.core.models import JobRun, Scope, TriggerType
from jobgate.core.trace import TRACEPARENT_KEY, parse_traceparent
from jobgate.service import control
from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest, SubmitResult

IDEMPOTENCY_KEY = re.compile(r"[\x21-\x7e]{1,200}")  # visible ASCII, no spaces


def utc_day(now: datetime) -> tuple[datetime, datetime]:
    """The current UTC day as [start, next start) (seed 001 quota period)."""
    start = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return start, start + timedelta(days=1)


def runs_created_today(engine: Engine, tenant_id: str, now: datetime | None = None) -> tuple[int, datetime, datetime]:
    start, end = utc_day(now or engine.clock.now())
    with engine.store.read(tenant_id=tenant_id) as tx:
        return tx.runs_created_count(tenant_id, start, end), start, end


def request_digest(job_definition_id: str, params: Mapping[str, str], scope: Scope) -> str:
    return digest({"job_definition_id": job_definition_id, "params": dict(params), "scope": scope.as_dict()})


def check_daily_quota(engine: Engine, tenant_id: str) -> None:
    """Refuse (429) when ``server.daily_run_quota`` runs of the tenant were created today."""
    quota = engine.config.server.daily_run_quota
    if quota is None:
        return
    used, _, _ = runs_created_today(engine, tenant_id)
    if used >= quota:
        raise QuotaExceededError(f"tenant {tenant_id} created {used} runs today; the daily quota is {quota}")


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
) -> SubmitResult:
    """A manual run for an authenticated caller. ``traceparent`` (the request's W3C header)
    is kept in the trigger's ``policy_context`` when valid, so the run joins the caller's
    trace (``core.trace``); an invalid one is ignored, as the specification asks."""
    if idempotency_key is not None and not IDEMPOTENCY_KEY.fullmatch(idempotency_key):
        raise ValidationError("1-200 visible ASCII characters", field="Idempotency-Key")
    fingerprint = request_digest(job_definition_id, params, scope)
    if idempotency_key is not None:  # a repeat gets its run back, whatever changed since
        with engine.store.read(tenant_id=scope.tenant_id) as tx:
            found = tx.runs_by_keys([client_request_key(scope.tenant_id, idempotency_key)])
        if found:
            _check_same(engine, found[0], fingerprint)
            return SubmitResult(found[0], False)
    check_daily_quota(engine, scope.tenant_id)
    payload: dict[str, str] = {"request_digest": fingerprint}
    adopted = parse_traceparent(traceparent)
    if stated_requester:
        payload["stated_requested_by"] = stated_requester
    request = SubmitRequest(
        job_definition_id,
        trigger_type=TriggerType.MANUAL,
        params=dict(params),
        scope=scope,
        requested_by=actor,
        reason=reason,
        request_id=None if idempotency_key is None else f"api:{idempotency_key}",
        payload=payload,
        client_key=idempotency_key,
        role=role,
        policy_context={} if adopted is None else {TRACEPARENT_KEY: adopted},
    )
    result = engine.submit(request, actor=actor)
    if not result.created:  # a concurrent repeat won the insert
        _check_same(engine, result.run, fingerprint)
    return result


def retry_once(
    engine: Engine, job_run_id: str, *, actor: str, tenant_id: str, role: str | None = None
) -> tuple[JobRun, bool]:
    """Seed 001 retry through the API: an existing retry is returned as is; a new one counts
    against the daily quota like any other run created through the API and is judged with the
    caller's role, as a submit is (the policy's priority ceilings by role)."""
    with engine.store.read(tenant_id=tenant_id) as tx:
        found = tx.runs_by_keys([retry_key(job_run_id)])
    if found and found[0].tenant_id == tenant_id:
        return found[0], False
    check_daily_quota(engine, tenant_id)
    return control.retry_run(engine, job_run_id, actor=actor, tenant_id=tenant_id, role=role)


def _check_same(engine: Engine, run: JobRun, fingerprint: str) -> None:
    with engine.store.read(tenant_id=run.tenant_id) as tx:
        trigger = tx.run_trigger(run.job_run_id) or {}
    if (trigger.get("payload") or {}).get("request_digest") != fingerprint:
        raise ConflictError(
            "this idempotency key was used for a different request (definition, parameters or scope differ)",
            field="Idempotency-Key",
        )
