"""Manual runs asked for by an authenticated caller (the API's create-run and seed §42 schedule).

An ``Idempotency-Key`` makes a request repeatable: the run's idempotency key derives from the
tenant and that key alone, so the unique key in the store gives one run per caller key even
under concurrent repeats, and asking again returns that run. The same key with a different
request (definition, parameters or scope) is a conflict, not a silent reuse: the request's
digest is kept in the trigger's payload and compared. Without a key each request is a new
trigger, so a new run (the seed §24 key over a fresh trigger id).

A daily quota, when configured, is checked before anything is written; a refused request
stores nothing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

from jobgate.core.canonical import digest
from jobgate.core.errors import ConflictError, QuotaExceededError, ValidationError
from jobgate.core.models import Scope, TriggerType
from jobgate.service.engine import Engine, SubmitRequest, SubmitResult

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
) -> SubmitResult:
    if idempotency_key is not None and not IDEMPOTENCY_KEY.fullmatch(idempotency_key):
        raise ValidationError("1-200 visible ASCII characters", field="Idempotency-Key")
    fingerprint = request_digest(job_definition_id, params, scope)
    quota = engine.config.server.daily_run_quota
    if quota is not None:
        used, _, _ = runs_created_today(engine, scope.tenant_id)
        if used >= quota:
            raise QuotaExceededError(f"tenant {scope.tenant_id} created {used} runs today; the daily quota is {quota}")
    payload: dict[str, str] = {"request_digest": fingerprint}
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
    )
    result = engine.submit(request, actor=actor)
    if not result.created:
        with engine.store.read(tenant_id=scope.tenant_id) as tx:
            trigger = tx.run_trigger(result.run.job_run_id) or {}
        if (trigger.get("payload") or {}).get("request_digest") != fingerprint:
            raise ConflictError(
                "this idempotency key was used for a different request (definition, parameters or scope differ)",
                field="Idempotency-Key",
            )
    return result
