"""A pipeline completion heard on pub/sub, into runs, through the one trigger path.

Each subscription ``service.pubsub_map.judge`` lets fire becomes an ``event`` trigger given to
``Engine.submit``, exactly as a posted event or a schedule's fire: the definition's approval,
its ``trigger_type``, the governance gates and the audit of a refusal all apply, and a refused
trigger stores nothing. The run's key is the delivery's identity (``result_name`` + the completion's timestamp, with the
tenant and definition), so the same completion heard twice (a redelivery, the polling key read
at start-up and then the message, a restart after a configuration change) makes one run.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from jobgate.core.canonical import digest
from jobgate.core.errors import GovernanceRefusal, JobgateError
from jobgate.core.idempotency import PUBSUB_EVENT_PREFIX
from jobgate.core.models import Scope, TriggerType
from jobgate.service import audit
from jobgate.service.admission import refusal_event
from jobgate.service.engine import Engine
from jobgate.service.pubsub_map import Completion, Subscription, Verdict, job_params
from jobgate.service.submission import SubmitRequest, SubmitResult

log = logging.getLogger("jobgate.pubsub")

EVENT_TYPE = "pipeline.completed"
ACTOR = "pubsub"


@dataclass(frozen=True)
class PubSubFire:
    """What one subscription's trigger made: a run (``created`` False: it existed), or why not."""

    job_definition_id: str
    job_run_id: str | None
    created: bool
    refused: str | None = None  # the refusal's stable code (definition_not_approved, ...)


def fire(engine: Engine, tenant_id: str, verdict: Verdict, *, via: str) -> list[PubSubFire]:
    """Submit one trigger per subscription the verdict fires; ``via`` says how the completion
    was heard (``message``, ``state``) for the run's reason. A refusal is logged and returned,
    never raised: one refused definition does not keep the others of the message from running."""
    completion = verdict.completion
    if completion is None:
        return []
    out: list[PubSubFire] = []
    for sub in verdict.fire:
        request = SubmitRequest(
            sub.job_definition_id,
            trigger_type=TriggerType.EVENT,
            params=job_params(sub, completion, _declared(engine, tenant_id, sub)),
            scope=Scope(tenant_id=tenant_id),
            requested_by=ACTOR,
            reason=f"pub/sub {via}: {completion.result_name} {completion.status}",
            source_event_id=PUBSUB_EVENT_PREFIX + completion.delivery_id,
            event_type=EVENT_TYPE,
            payload=dict(completion.fields),
            run_key=delivery_key(tenant_id, sub.job_definition_id, completion.delivery_id),
        )
        try:
            result = _made_before(engine, tenant_id, sub.job_definition_id, completion) or engine.submit(
                request, actor=ACTOR
            )
        except JobgateError as exc:
            log.warning(
                "pub/sub %s %s: %s refused: %s",
                completion.result_name,
                completion.status,
                sub.job_definition_id,
                f"{exc.field}: {exc.message}" if exc.field else exc.message,  # the param it names
                extra={"action": "pubsub_refused", "result_name": completion.result_name, "code": exc.code},
            )
            if not isinstance(exc, GovernanceRefusal):  # a governance refusal is audited where it is made
                audit.record_now(engine, refusal_event(request, exc, actor=ACTOR, now=engine.clock.now()))
            out.append(PubSubFire(sub.job_definition_id, None, False, exc.code))
            continue
        run = result.run
        log.info(
            "pub/sub %s %s: %s run %s%s",
            completion.result_name,
            completion.status,
            sub.job_definition_id,
            run.job_run_id,
            "" if result.created else " (already made: a duplicate delivery)",
            extra={"action": "pubsub_fired", "result_name": completion.result_name, "run_id": run.job_run_id},
        )
        out.append(PubSubFire(sub.job_definition_id, run.job_run_id, result.created))
    return out


def _made_before(engine: Engine, tenant_id: str, job_definition_id: str, completion: Completion) -> SubmitResult | None:
    """The run this completion already has, found before any gate (as a repeated event's is):
    a completion read again from its state key at every start, or delivered twice, gets its run
    back even when a gate closed since, with no refusal recorded of a run that exists (found by a
    review: one refusal a node, at every restart). Under the identity it has now, or the one an
    earlier release gave it (the timestamp as written, not yet read as an instant), so an upgrade
    makes no second run."""
    keys = [delivery_key(tenant_id, job_definition_id, completion.delivery_id)]
    if completion.written_delivery_id is not None:
        keys.append(delivery_key(tenant_id, job_definition_id, completion.written_delivery_id))
    with engine.store.read(tenant_id=tenant_id) as tx:
        found = tx.runs_by_keys(keys)
    return SubmitResult(found[0], False) if found else None


def delivery_key(tenant_id: str, job_definition_id: str, delivery_id: str) -> str:
    """The run's idempotency key: the tenant, the definition and the delivery alone. Not the
    configuration's digest (as an event's key has): the state key is read again at every
    start, and a restart after a configuration change must still find the run it made.
    Not a caller's ``Idempotency-Key`` either, so no API caller can claim this run first."""
    return digest({"pubsub": {"tenant_id": tenant_id, "job_definition_id": job_definition_id, "delivery": delivery_id}})


def _declared(engine: Engine, tenant_id: str, sub: Subscription) -> frozenset[str]:
    """The params the definition declares; none when it cannot be read (the submission then
    refuses it, audited, through the usual path)."""
    try:
        with engine.store.read() as tx:
            return frozenset(p.name for p in engine.definition(tx, tenant_id, sub.job_definition_id).params)
    except JobgateError:
        return frozenset()
