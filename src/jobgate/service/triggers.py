"""Input triggers: posted events, recorded facts and alerts fire the schedules that watch them.

Events: an event posted to jobgate fires the schedules that subscribe to its type.

The event never chooses what runs: it is matched by type against schedules an operator stored,
and from its data only the fields a schedule lists in ``payload_params`` reach the job, as
params the definition must declare (seed 004), each a string or a number. The source event id
is part of each run's idempotency key and its slot (one run per job and event id, whatever the
configuration), so an event delivered twice makes each run once.
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
import unicodedata
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from jobgate.core.canonical import canonical_json
from jobgate.core.errors import ConflictError, GovernanceRefusal, JobgateError, ValidationError
from jobgate.core.idempotency import PUBSUB_EVENT_PREFIX, slot_of_event
from jobgate.core.params import number_text, readable_value
from jobgate.scheduling import conditions
from jobgate.scheduling.model import EVENT_TYPE, Schedule
from jobgate.scheduling.plan import TRIGGER_PREFIX, Miss, MissReason
from jobgate.scheduling.records import StoredSchedule
from jobgate.service import audit
from jobgate.service.admission import AdmissionBatch, refusal_event
from jobgate.service.engine import Engine
from jobgate.service.manual import check_daily_quota, quota_turn
from jobgate.service.schedules import fire_request
from jobgate.service.submission import EventOrigin, PreparedSubmission, SubmitRequest

log = logging.getLogger("jobgate.events")

MAX_EVENT_ID = 200


@dataclass(frozen=True)
class EventFire:
    schedule_id: str
    job_definition_id: str
    job_run_id: str | None
    created: bool
    refused: str | None = None  # why no run was made (paused, definition refused it)


def emit_event(
    engine: Engine,
    *,
    event_type: str,
    event_id: str,
    data: Mapping[str, Any],
    tenant_id: str,
    actor: str,
    only_definitions: Collection[str] | None = None,
    origin: EventOrigin | None = None,
    quota: bool = False,
) -> list[EventFire]:
    """Fire every schedule of ``tenant_id`` subscribed to ``event_type``; one result per schedule.
    ``only_definitions`` (a token limited to some definitions) leaves the others' schedules be;
    ``origin`` (seed §18: source engine, signal, ECO, policy context) is recorded with each run.

    A delivery of an event whose run a schedule's job already has gets that run back before any
    gate, and before the daily quota (``quota``: the server's callers), as a repeated manual
    request does (seed §11): closed gates or a spent quota since the first delivery would have
    told a retrying sender that nothing was made, and recorded refusals of a run that exists."""
    if not EVENT_TYPE.fullmatch(event_type or ""):  # no schedule could subscribe to it: a typo, say so
        raise ValidationError("an event type: 1-200 letters, digits, '.', '_', '-', ':'", field="event_type")
    if not event_id or len(event_id) > MAX_EVENT_ID or not _prints_as_itself(event_id):
        raise ValidationError(
            f"an event id of 1 to {MAX_EVENT_ID} printable characters, in Unicode's composed form (NFC), with no"
            " invisible one",
            field="id",
        )
    if event_id.startswith(PUBSUB_EVENT_PREFIX):
        raise ValidationError(
            f"event ids beginning {PUBSUB_EVENT_PREFIX!r} name pub/sub completions; choose another id", field="id"
        )
    if not isinstance(data, Mapping):
        raise ValidationError("event data is a JSON object", field="data")
    try:
        canonical_json(dict(data))
    except ValueError as exc:
        raise ValidationError(str(exc), field="data") from None
    with engine.store.read() as tx:
        subscribed = [
            i.schedule
            for i in tx.schedules_list(tenant_id)
            if i.schedule.kind.evented
            and i.schedule.event_type == event_type
            and (only_definitions is None or i.schedule.job_definition_id in only_definitions)
        ]
        # Delivered before to a paused schedule? Read in the same transaction as the schedules.
        recorded = {s.schedule_id: tx.miss_of_event(tenant_id, s.schedule_id, event_id) for s in subscribed}
        slot = slot_of_event(event_id)
        pairs = [(s.job_definition_id, slot) for s in subscribed]
        held = tx.runs_holding_slots(tenant_id, pairs)
        # a run retention deleted held its slot too: the event had its run (one per event, ever)
        retired = tx.runs_retired_in_slots(tenant_id, [p for p in pairs if p not in held])
    had_run = {**{p: r.job_run_id for p, r in retired.items()}, **{p: r.job_run_id for p, r in held.items()}}
    for schedule in subscribed:  # checked before any schedule fires: all or nothing
        for name in schedule.payload_params:
            if name in data:
                param_value(data[name], name)
    # Other data under an id already received is the sender's mistake, refused before anything
    # is stored: a schedule added since the first delivery made a run of it (found by a review).
    for first in {r.job_run_id: r for r in held.values()}.values():
        if (why := _received_with_other_data(engine, first.job_run_id, event_type, data)) is not None:
            raise _received_before(event_id, first.job_run_id, why)
    fresh = [
        s
        for s in subscribed
        if (s.job_definition_id, slot) not in had_run and recorded[s.schedule_id] is None and not s.paused
    ]
    # counted and stored as one step of the tenant's (``manual.quota_turn``)
    with quota_turn(engine, tenant_id) if quota and fresh else contextlib.nullcontext():
        if quota and fresh:
            check_daily_quota(engine, tenant_id, list({s.job_definition_id: None for s in fresh}))
        now = engine.clock.now()
        out: list[EventFire] = []
        for schedule in subscribed:
            if (run_id := had_run.get((schedule.job_definition_id, slot))) is not None:  # delivered before
                out.append(EventFire(schedule.schedule_id, schedule.job_definition_id, run_id, False, None))
                continue
            if recorded[schedule.schedule_id] is not None:  # the event was recorded, not run: again a no-op
                why = f"recorded {recorded[schedule.schedule_id]} when first delivered"
                out.append(EventFire(schedule.schedule_id, schedule.job_definition_id, None, False, why))
                continue
            if schedule.paused:
                _record(engine, schedule, Miss(schedule.schedule_id, now, MissReason.PAUSED, event_id=event_id))
                out.append(EventFire(schedule.schedule_id, schedule.job_definition_id, None, False, "paused"))
                continue
            try:
                result = engine.submit(_request(schedule, event_type, event_id, data, actor, now, origin), actor=actor)
            except JobgateError as exc:
                log.warning("event %s %s: schedule %s refused: %s", event_type, event_id, schedule.schedule_id, exc)
                _record(engine, schedule, Miss(schedule.schedule_id, now, MissReason.REFUSED))
                out.append(EventFire(schedule.schedule_id, schedule.job_definition_id, None, False, str(exc)))
                continue
            other = (
                None if result.created else _received_with_other_data(engine, result.run.job_run_id, event_type, data)
            )
            out.append(
                EventFire(
                    schedule.schedule_id, schedule.job_definition_id, result.run.job_run_id, result.created, other
                )
            )
    conflicts = [f for f in out if f.refused in (OTHER_DATA, OTHER_TYPE)]
    if conflicts and not any(f.created for f in out):
        raise _received_before(event_id, conflicts[0].job_run_id, conflicts[0].refused)
    log.info(
        "event %s %s: %d schedules, %d runs created",
        event_type,
        event_id,
        len(out),
        sum(f.created for f in out),
        extra={"action": "event_received", "event_type": event_type},
    )
    return out


OTHER_DATA = "received before with other data"
OTHER_TYPE = "received before as another event type"


def _received_before(event_id: str, job_run_id: str | None, why: str | None) -> ConflictError:
    """The 409 of an id received before as another event, naming what differs."""
    return ConflictError(
        f"event {event_id!r} was {why} (run {job_run_id}): an event id names one event; send a new event"
        " under a new id",
        field="event_type" if why == OTHER_TYPE else "data",
    )


def _received_with_other_data(engine: Engine, job_run_id: str, event_type: str, data: Mapping[str, Any]) -> str | None:
    """``OTHER_TYPE`` or ``OTHER_DATA`` when the run an earlier delivery of this event id made
    recorded another event type or other data: a redelivery carries the same event, so a different one under the
    same id is a sender's mistake, refused as the API's Idempotency-Key refuses another body
    under its key (found by a review: another type with the same data was taken for a repeat)."""
    with engine.store.read() as tx:
        trigger = tx.run_trigger(job_run_id) or {}
    recorded_type = trigger.get("event_type")
    if recorded_type is not None and recorded_type != event_type:
        return OTHER_TYPE
    recorded = trigger.get("payload") or {}
    return None if canonical_json(dict(recorded)) == canonical_json(dict(data)) else OTHER_DATA


def _request(
    schedule: Schedule,
    event_type: str,
    event_id: str,
    data: Mapping[str, Any],
    actor: str,
    now: datetime,
    origin: EventOrigin | None = None,
) -> SubmitRequest:
    return fire_request(
        schedule,
        at=now,
        actor=actor,
        reason=f"event {event_type} via schedule {schedule.schedule_id}",
        extra_params={name: param_value(data[name], name) for name in schedule.payload_params if name in data},
        source_event_id=event_id,
        event_type=event_type,
        payload=data,
        origin=origin,
    )


_VARIATION_SELECTOR = re.compile("[\ufe00-\ufe0f\U000e0100-\U000e01ef]")


def _prints_as_itself(event_id: str) -> bool:
    """Whether no other id prints the same: ids told apart only by an invisible character (a
    zero-width space, a direction override, a combining grapheme joiner, a Hangul filler, a
    variation selector) or by another spelling of one letter (``é`` composed or not) would each
    make their own run. Printable (``str.isprintable``), readable as a param value must be
    (``core.params.readable_value``), composed (NFC), and no variation selector."""
    return (
        event_id.isprintable()
        and readable_value(event_id)
        and unicodedata.is_normalized("NFC", event_id)
        and _VARIATION_SELECTOR.search(event_id) is None
    )


def param_value(value: Any, name: str) -> str:
    """An event field as the param it becomes: a string as given, a finite number as its text.
    ``null``, ``true`` or an object reached the job as ``"None"``, ``"True"`` or a dict's repr;
    they are refused, naming the field, as ``POST /runs`` refuses them."""
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        # Positional, as a run's param given as a number is read (``1e-07`` is ``0.0000001``):
        # ``str`` wrote exponents, which no decimal param takes.
        return number_text(value)
    raise ValidationError(f"a string or a number (it becomes the param {name!r})", field=f"data.{name}")


def _record(engine: Engine, schedule: Schedule, miss: Miss) -> None:
    with engine.store.write() as tx:
        tx.misses_record(schedule.tenant_id, [miss], miss.fire_at)


# --- policy and alert triggers ------------------------------------------------------------------

MAX_FACT_NAME = 200
_FACT_NAME = re.compile(rf"[A-Za-z_][A-Za-z0-9_.:-]{{0,{MAX_FACT_NAME - 1}}}")


@dataclass(frozen=True)
class PolicyFire:
    schedule_id: str
    job_definition_id: str
    fired: bool  # this observation started an episode
    job_run_id: str | None = None
    refused: str | None = None


def _check_fact(name: str, value: object, *, name_field: str = "name", value_field: str = "value") -> float:
    """The fact's value as a float, or a refusal naming the field: a name of the fact grammar and
    a finite number a float can hold (an integer beyond one is refused, not an overflow)."""
    if len(name or "") > MAX_FACT_NAME:
        raise ValidationError(
            f"the fact's name {name[:40]!r}… is {len(name)} characters, at most {MAX_FACT_NAME}", field=name_field
        )
    if not _FACT_NAME.fullmatch(name or ""):
        raise ValidationError("a fact name: a letter, then letters, digits, '.', '_', '-', ':'", field=name_field)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError("a finite number", field=value_field)
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise ValidationError("a finite number (at most about 1.8e308 in size)", field=value_field)
    return number


def record_fact(
    engine: Engine, *, tenant_id: str, name: str, value: float, source: str, actor: str
) -> list[PolicyFire]:
    """Record one observation and fire each policy or alert schedule whose condition on this fact
    starts an episode with it (false -> true). Re-recording while it holds fires nothing."""
    _check_fact(name, value)
    now = engine.clock.now()
    with engine.store.read() as tx:
        watching = [
            i
            for i in tx.schedules_list(tenant_id)
            if i.schedule.kind.conditional and conditions.parse(i.schedule.condition or "").fact == name
        ]
    decided: list[tuple[StoredSchedule, conditions.EpisodeStep, list[PreparedSubmission], str | None]] = []
    # One admission batch for the observation: its fires are created in one transaction, so the
    # policy's quotas count each against the others (each prepared alone, two fires on a
    # quota of one were both admitted).
    batch = AdmissionBatch(engine.admission.scheduler_policy(actor=actor, now=now)) if watching else None
    for item in watching:
        s = item.schedule
        st = conditions.step(item.episode_open, conditions.parse(s.condition or "").holds(float(value)))
        prepared: list[PreparedSubmission] = []
        refused = "paused" if st.fire and s.paused else None
        if st.fire and not s.paused:
            request = fire_request(
                s,
                at=now,
                actor=actor,
                reason=f"{s.condition} (schedule {s.schedule_id}, episode {item.episodes + 1})",
                trigger_id=episode_trigger_id(item, item.episodes + 1),
                policy_context={"condition": s.condition, "fact": name, "value": value, "source": source},
            )
            try:
                prepared = engine.pipeline.prepare([request], now=now, actor=actor, batch=batch)
            except JobgateError as exc:
                refused = str(exc)
        decided.append((item, st, prepared, refused))
    out: list[PolicyFire] = []
    with engine.store.write() as tx:
        tx.fact_record(tenant_id, name, float(value), now, source)
        for item, st, prepared, refused in decided:
            s = item.schedule
            if s.paused:  # a paused schedule keeps its episode state: it decides again when resumed
                if st.fire:
                    tx.misses_record(s.tenant_id, [Miss(s.schedule_id, now, MissReason.PAUSED)], now)
                out.append(PolicyFire(s.schedule_id, s.job_definition_id, False, refused=refused))
                continue
            after = (st.open, item.episodes + (1 if st.fire else 0))
            if not tx.schedule_episode(s.tenant_id, s.schedule_id, (item.episode_open, item.episodes), after):
                continue  # a concurrent observation decided this schedule's episode first
            run_id = None
            if prepared:
                try:
                    (made,) = engine.pipeline.create(tx, prepared, now)
                    run_id = made.run.job_run_id
                except GovernanceRefusal as exc:  # refused under the lock: this fire alone, audited
                    refused = str(exc)
                    submitted = prepared[0].request
                    assert submitted is not None  # prepared here, from a request
                    audit.record(tx, refusal_event(submitted, exc, actor=actor, now=now))
            if st.fire and refused is not None:
                tx.misses_record(s.tenant_id, [Miss(s.schedule_id, now, MissReason.REFUSED)], now)
            out.append(PolicyFire(s.schedule_id, s.job_definition_id, st.fire and refused is None, run_id, refused))
    return out


def post_alert(
    engine: Engine, *, tenant_id: str, name: str, firing: bool, data: Mapping[str, Any], actor: str
) -> list[PolicyFire]:
    """An alert is recorded as facts: ``alert.<name>`` is 1 while firing and 0 once resolved, and
    each numeric field of its data becomes ``alert.<name>.<field>``. Alert schedules hold
    conditions over those (``alert.replay_drift == 1``, ``alert.replay_drift.ratio > 0.05``)."""
    if not _FACT_NAME.fullmatch(name or ""):
        raise ValidationError("an alert name: a letter, then letters, digits, '.', '_', '-', ':'", field="name")
    try:
        canonical_json(dict(data))
    except ValueError as exc:
        raise ValidationError(str(exc), field="data") from None
    source = f"alert {name}"
    # Every field is checked before any fact is recorded: a refused alert records nothing (and
    # fires nothing), where its first fields' facts had been recorded, and had fired, already.
    _check_fact(f"alert.{name}", 1.0)
    facts = []
    for field, value in sorted(data.items()):
        if isinstance(value, int | float) and not isinstance(value, bool):
            fact = f"alert.{name}.{field}"
            _check_fact(fact, value, name_field=f"data.{field}", value_field=f"data.{field}")
            facts.append((fact, value))
    out = []
    for fact, value in facts:
        out += record_fact(engine, tenant_id=tenant_id, name=fact, value=value, source=source, actor=actor)
    out += record_fact(
        engine, tenant_id=tenant_id, name=f"alert.{name}", value=1.0 if firing else 0.0, source=source, actor=actor
    )
    return out


def episode_trigger_id(item: StoredSchedule, episode: int) -> str:
    """A policy or alert schedule's episode as a slot: the schedule as created (a schedule
    deleted and added again counts its episodes from one again, and its slots are its own, not
    the earlier schedule's, which hold its runs for ever) and the episode's number."""
    created = item.created_at.astimezone(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    return f"{TRIGGER_PREFIX}{item.schedule.schedule_id}@{created}.episode-{episode}"
