"""Idempotency keys and the run ids derived from them (seed 000 §24).

``IdempotencyKey = SHA256(JobDefinitionId || TriggerId || Scope || ConfigDigest || ExecutionWindow)``
over a canonical encoding. What "trigger id" means depends on the trigger: the source event
id for events (a redelivered event finds the same run), the authorised request id for manual
runs, the window for batch and scheduled fires. The key is unique in the store (and the run id
carries 80 bits of it after its time prefix), so "one run per key" is a fact of the database's
unique index, not a promise of the code.
"""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime, timedelta

from jobgate.core.canonical import digest, isoformat_utc
from jobgate.core.errors import ValidationError
from jobgate.core.models import JsonObject, Trigger, TriggerType

RUN_ID_PREFIX = "TGJOBRUN-"
CLIENT_KEY = re.compile(r"[\x21-\x7e]{1,200}")  # a caller's Idempotency-Key: visible ASCII, no spaces
CLIENT_KEY_RULE = "1-200 visible ASCII characters"


def check_client_key(key: str | None) -> None:
    """A caller's idempotency key, as every start judges it (a run, a workflow, through any
    face): none, or ``CLIENT_KEY``; "" is no key and is said so."""
    if key is not None and not CLIENT_KEY.fullmatch(key):
        raise ValidationError(CLIENT_KEY_RULE, field="Idempotency-Key")


# A definition's ``idempotency_policy`` (seed 000 §12 "idempotency method"): ``trigger`` (the
# default) keys a run by its trigger's identity as above; ``window`` keys a run that has an
# execution window by the window alone, so a scheduled fire, a backfill and a manual run of the
# same window are one run, ever (a trigger without a window is keyed as ``trigger``).
IDEMPOTENCY_POLICIES = ("trigger", "window")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def trigger_identity(trigger: Trigger) -> str:
    """The part of the trigger that makes two deliveries "the same request"."""
    if trigger.trigger_type in (TriggerType.EVENT, TriggerType.QUEUE) and trigger.source_event_id:
        return f"event:{trigger.source_event_id}"
    if trigger.trigger_type is TriggerType.MANUAL and trigger.request_id:
        return f"request:{trigger.request_id}"
    return f"trigger:{trigger.trigger_id}"


EVENT_SLOT_PREFIX = "TGEVENT-"
# The source event ids jobgate makes itself (a pub/sub completion's delivery); an event from
# outside may not take one, or it would hold that completion's slot first, with its own data.
PUBSUB_EVENT_PREFIX = "pubsub:"
_SLOT_CHARS = 300  # job_runs.slot's width


def event_slot(trigger: Trigger) -> str | None:
    """The slot a run made for an outside event holds: one run per job and event id, whatever
    changed since the first delivery. The key alone did not hold it: the key covers the
    configuration's digest, so an event delivered again after a configuration edit (or with safe
    mode's overrides on) made a second run. None for every other trigger."""
    if trigger.trigger_type not in (TriggerType.EVENT, TriggerType.QUEUE) or not trigger.source_event_id:
        return None
    return slot_of_event(trigger.source_event_id)


def slot_of_event(source_event_id: str) -> str:
    """The slot the run of one job made for event ``source_event_id`` holds (``event_slot``)."""
    slot = EVENT_SLOT_PREFIX + source_event_id
    if len(slot) > _SLOT_CHARS:  # a long id is named by its digest: the slot's column is bounded
        slot = EVENT_SLOT_PREFIX + "sha256:" + hashlib.sha256(source_event_id.encode("utf-8")).hexdigest()
    return slot


def idempotency_key(
    *,
    job_definition_id: str,
    trigger: Trigger,
    scope: JsonObject,
    config_digest: str,
    policy: str = "trigger",
) -> str:
    window = None
    if trigger.window is not None:
        window = [isoformat_utc(trigger.window.start), isoformat_utc(trigger.window.end)]
    identity = "window" if policy == "window" and window is not None else trigger_identity(trigger)
    return digest(
        {
            "job_definition_id": job_definition_id,
            "trigger": identity,
            "scope": scope,
            "config_digest": config_digest,
            "execution_window": window,
        }
    )


def run_id_for(key: str, created_at: datetime) -> str:
    """``TGJOBRUN-``, the creation time in milliseconds (12 hex digits), then 80 bits of the key.

    Time first so that runs created together sit together in every index keyed by run id (the
    run table's own key, the transitions): with ids in hash order each run's transition rows
    landed on a different index page, and the pages a batch dirtied (and the commit wrote and
    synced) grew with the table. The idempotency key, unique in the store, is what makes a
    second creation of the same run a no-op, not the id. Two keys created in the same
    millisecond share an id only if their first 80 bits agree.
    """
    if created_at.tzinfo is None:
        raise ValueError("naive datetime: jobgate only handles timezone-aware instants")
    millis = (created_at - _EPOCH) // timedelta(milliseconds=1)
    return f"{RUN_ID_PREFIX}{millis:012x}{key.removeprefix('sha256:')[:20]}"


RETRY_DOMAIN = "jobgate.run-retry.v1"


def retry_key(tenant_id: str, source_job_run_id: str) -> str:
    """The key of the (single) retry of a terminal run: a function of the tenant and the source
    run alone, so asking again returns the same retry even after the configuration changed
    (seed 001). Retries made before the tenant was part of it are found by ``retry_of``."""
    return digest({"tenant_id": tenant_id, "retry_of": source_job_run_id})


def retry_run_id(tenant_id: str, source_job_run_id: str) -> str:
    """The id of the retry of a run (seed 001 retry contract): ``TGJOBRUN-`` and the first 32
    hex digits of SHA-256 over ``jobgate.run-retry.v1``, the tenant and the source run id,
    newline-separated. Deterministic, so the insert of a second retry of one run conflicts on
    the run's own key even before its idempotency key is compared. The same length and alphabet
    as ``run_id_for``'s ids (``short_run_id`` takes its last 12 digits), but not time-ordered."""
    text = f"{RETRY_DOMAIN}\n{tenant_id}\n{source_job_run_id}".encode()
    return f"{RUN_ID_PREFIX}{hashlib.sha256(text).hexdigest()[:32]}"


def client_request_key(tenant_id: str, client_key: str) -> str:
    """The key of a run asked for with a caller's idempotency key: a function of the tenant and
    that key alone, so a repeat finds the first run even after its definition or the
    configuration changed (the caller's key names the request, not its content)."""
    return digest({"tenant_id": tenant_id, "client_key": client_key})


SHORT_ID_LENGTH = 12  # 48 of the key's 80 bits: what a table at 80 columns shows of a run id
_SHORT = re.compile(r"^[0-9a-f]{8,32}$")


def short_run_id(job_run_id: str) -> str:
    """The end of a run id (its key's bits, not its time): unique in practice, short to read."""
    return job_run_id[-SHORT_ID_LENGTH:] if job_run_id.startswith(RUN_ID_PREFIX) else job_run_id


def is_short_run_id(value: str) -> bool:
    """Whether ``value`` reads as the end of a run id (8 to 32 lower-case hex digits)."""
    return bool(_SHORT.match(value))
