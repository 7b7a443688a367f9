"""Managing schedules: documents (YAML, CLI flags) into checked schedules, stored for a definition.

A new schedule starts its watermark at the moment it is stored: it owes nothing from before it
existed (use a backfill for that). Updating a schedule keeps its watermark, so re-applying a
seed file never fires the past again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import MINYEAR, UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, NamedTuple

from jobgate.core.canonical import canonical_json, isoformat_utc
from jobgate.core.errors import ConflictError, NotFoundError, ValidationError
from jobgate.core.governance import trigger_refusal
from jobgate.core.models import (
    DEFAULT_TENANT,
    ConfigSnapshot,
    DefinitionStatus,
    ExecutionWindow,
    JobDefinition,
    Scope,
    TriggerType,
)
from jobgate.core.params import validate_params
from jobgate.scheduling import magic
from jobgate.scheduling.model import (
    MAX_CATCHUP_LIMIT,
    MisfirePolicy,
    OverlapPolicy,
    Schedule,
    ScheduleKind,
    check_schedule,
    schedule_document,
)
from jobgate.scheduling.plan import (
    MissReason,
    Slot,
    owed_before_edit,
    pause_spans,
    regrid,
    rhythm_changed,
    slots,
    trigger_id,
    windows_after_edit,
)
from jobgate.scheduling.records import (
    OWNED_SOURCE,
    PAUSED_UNAPPROVED,
    RecordedMiss,
    ScheduleChange,
    StoredSchedule,
    pause_after_edit,
    pause_switches,
)
from jobgate.service.engine import Engine
from jobgate.service.pipeline import existing_results
from jobgate.service.snapshots import resolve_snapshot, watched_digest
from jobgate.service.submission import EventOrigin, SubmitRequest
from jobgate.store.sqlstore import StoreTx

log = logging.getLogger("jobgate.schedules")

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
DEFINITION_SOURCE = OWNED_SOURCE  # a schedule kept by its definition's trigger_type + schedule_expression
_KEYS = {
    "id",
    "job",
    "cron",
    "every_seconds",
    "window_seconds",
    "event_type",
    "queue",
    "payload_params",
    "condition",
    "alert",
    "adaptive",
    "min_every_seconds",
    "max_every_seconds",
    "config_profile",
    "watch",
    "safe_mode",
    "timezone",
    "anchor",
    "params",
    "misfire",
    "misfire_grace_seconds",
    "max_catchup",
    "overlap",
    "paused",
    "tenant",
    "kind",  # what ``schedule_document`` says; read back only when it agrees with the rest
}
# Seed 004's schedule seed file names the definition ``scenario`` and its cron ``schedule``.
ALIASES = {"scenario": "job", "schedule": "cron"}


def canonical_keys(doc: Mapping[str, Any], *, source: str) -> dict[str, Any]:
    """``doc`` with seed 004's aliases renamed to jobgate's keys. Both an alias and its original
    are refused, naming both: which of the two was meant is not for a loader to guess."""
    out = dict(doc)
    for alias, original in ALIASES.items():
        if alias not in doc:
            continue
        if original in doc:
            raise ValidationError(
                f"give one of {original!r} and {alias!r} (its seed 004 alias), not both",
                field=f"{original}, {alias}",
                source=str(doc.get("id") or source),
            )
        out[original] = out.pop(alias)
    return out


def schedule_from_document(doc: Mapping[str, Any], *, now: datetime, source: str = "document") -> Schedule:
    """One schedule from its document form (a seed file entry or CLI flags), checked. Seed 004's
    ``scenario:`` and ``schedule:`` are read as ``job:`` and ``cron:``."""
    doc = canonical_keys(doc, source=source)
    unknown = set(doc) - _KEYS
    if unknown:
        raise ValidationError(
            f"unknown keys {sorted(unknown)} (known: {sorted(_KEYS | set(ALIASES))})", field="schedule", source=source
        )
    schedule_id = _text(doc, "id", source)
    triggers = ("cron", "every_seconds", "window_seconds", "event_type", "condition", "config_profile")
    kinds = [k for k in triggers if doc.get(k) is not None]
    for flag in ("safe_mode", "paused", "adaptive", "queue", "alert"):  # "false" is text, and truthy
        if doc.get(flag) is not None and not isinstance(doc[flag], bool):
            raise ValidationError("true or false", field=flag, source=schedule_id)
    catchup = doc.get("max_catchup")
    if catchup is not None and (isinstance(catchup, bool) or not isinstance(catchup, int)):
        raise ValidationError("a whole number", field="max_catchup", source=schedule_id)
    safe_mode = doc.get("safe_mode", False)
    if safe_mode:
        if set(kinds) - {"cron", "every_seconds"} or len(kinds) > 1:
            raise ValidationError(
                "a safe-mode schedule takes at most one of cron, every_seconds", field="schedule", source=schedule_id
            )
    elif len(kinds) != 1:
        raise ValidationError(f"give exactly one of {', '.join(triggers)}", field="schedule", source=schedule_id)
    kind = (
        ScheduleKind.SAFE_MODE
        if safe_mode
        else {
            "cron": ScheduleKind.CRON,
            "every_seconds": ScheduleKind.ADAPTIVE if doc.get("adaptive") else ScheduleKind.INTERVAL,
            "window_seconds": ScheduleKind.BATCH_WINDOW,
            "event_type": ScheduleKind.QUEUE if doc.get("queue") else ScheduleKind.EVENT,
            "condition": ScheduleKind.ALERT if doc.get("alert") else ScheduleKind.POLICY,
            "config_profile": ScheduleKind.CONFIGURATION,
        }[kinds[0]]
    )
    stated = doc.get("kind")
    if stated is not None and stated != kind.value:
        raise ValidationError(
            f"the document describes a {kind.value} schedule; kind says {str(stated)[:40]!r}",
            field="kind",
            source=schedule_id,
        )
    timed = kind in (ScheduleKind.INTERVAL, ScheduleKind.BATCH_WINDOW, ScheduleKind.ADAPTIVE) or (
        kind is ScheduleKind.SAFE_MODE and "every_seconds" in kinds
    )
    bounds = {
        key: timedelta(seconds=_number(doc, key, schedule_id, minimum=1))
        for key in ("min_every_seconds", "max_every_seconds")
        if doc.get(key) is not None
    }
    every = timedelta(seconds=_number(doc, kinds[0], schedule_id, minimum=1)) if timed else None
    watch = doc.get("watch") or []
    if not isinstance(watch, list) or not all(isinstance(k, str) and k for k in watch):
        raise ValidationError("a list of profile key names", field="watch", source=schedule_id)
    payload_params = doc.get("payload_params") or []
    if not isinstance(payload_params, list) or not all(isinstance(p, str) for p in payload_params):
        raise ValidationError("a list of payload field names", field="payload_params", source=schedule_id)
    anchor = (
        (EPOCH if kind is ScheduleKind.BATCH_WINDOW else now)
        if doc.get("anchor") is None
        else parse_instant(doc["anchor"], field="anchor", source=schedule_id)
    )
    params = doc.get("params") or {}
    if not isinstance(params, Mapping) or not all(isinstance(k, str) for k in params):
        raise ValidationError("a mapping of parameter names to values", field="params", source=schedule_id)
    for name, value in params.items():
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise ValidationError("must be a string or a number", field=f"params.{name}", source=schedule_id)
    for key in ("timezone", "cron", "event_type", "condition", "config_profile", "job"):
        if doc.get(key) is not None and not isinstance(doc[key], str):
            raise ValidationError("must be text", field=key, source=schedule_id)
    schedule = Schedule(
        schedule_id=schedule_id,
        job_definition_id=_text(doc, "job", schedule_id),
        kind=kind,
        anchor=anchor,
        timezone=str(doc.get("timezone", "UTC")),
        cron=None if doc.get("cron") is None else str(doc["cron"]),
        every=every,
        params={str(k): str(v) for k, v in params.items()},
        misfire=_choice(MisfirePolicy, doc.get("misfire", MisfirePolicy.FIRE_ONCE.value), "misfire", schedule_id),
        misfire_grace=timedelta(seconds=_number(doc, "misfire_grace_seconds", schedule_id, default=60)),
        max_catchup=int(_number(doc, "max_catchup", schedule_id, default=100, minimum=1, maximum=MAX_CATCHUP_LIMIT)),
        overlap=_choice(OverlapPolicy, doc.get("overlap", OverlapPolicy.ALLOW.value), "overlap", schedule_id),
        tenant_id=str(doc.get("tenant", DEFAULT_TENANT)),
        paused=bool(doc.get("paused", False)),
        event_type=None if doc.get("event_type") is None else str(doc["event_type"]),
        payload_params=tuple(payload_params),
        condition=None if doc.get("condition") is None else str(doc["condition"]),
        min_every=bounds.get("min_every_seconds"),
        max_every=bounds.get("max_every_seconds"),
        config_profile=None if doc.get("config_profile") is None else str(doc["config_profile"]),
        config_watch=tuple(sorted(set(watch))),
    )
    return check_schedule(schedule)


def fire_request(
    schedule: Schedule,
    *,
    at: datetime,
    actor: str,
    reason: str,
    trigger_id: str | None = None,
    window: ExecutionWindow | None = None,
    trigger_type: TriggerType | None = None,
    params: Mapping[str, str] | None = None,
    extra_params: Mapping[str, str] | None = None,
    source_event_id: str | None = None,
    event_type: str | None = None,
    payload: Mapping[str, Any] | None = None,
    policy_context: Mapping[str, Any] | None = None,
    slot: str | None = None,
    origin: EventOrigin | None = None,
) -> SubmitRequest:
    """The submission a schedule makes when it fires at ``at``: its definition, tenant and trigger
    type, and its params with magic params rendered for this fire (``params`` when the caller
    rendered them already), ``extra_params`` on top."""
    values = dict(params) if params is not None else magic.render(schedule.params, at, schedule.zone, window)
    values.update(extra_params or {})
    origin = origin or EventOrigin()
    return SubmitRequest(
        schedule.job_definition_id,
        trigger_type=trigger_type or schedule.kind.trigger_type,
        params=values,
        scope=Scope(tenant_id=schedule.tenant_id, keys=origin.scope_keys()),
        requested_by=actor,
        reason=reason,
        trigger_id=trigger_id,
        source_event_id=source_event_id,
        event_type=event_type,
        payload=dict(payload or {}),
        policy_context={**origin.policy_context, **dict(policy_context or {})},
        source_engine_meid=origin.source_engine_meid,
        source_engine_cmi=origin.source_engine_cmi,
        window=window,
        slot=slot,
    )


class PutOutcome(StrEnum):
    """What storing a schedule did."""

    CREATED = "created"
    UPDATED = "updated"
    UNCHANGED = "unchanged"  # the same schedule, from the same source: nothing written


def put_schedules(
    engine: Engine,
    items: Sequence[Schedule],
    *,
    source: str,
    now: datetime,
    actor: str = "system",
    allow_pending: bool = False,
    warnings: list[str] | None = None,
) -> list[PutOutcome]:
    """Store every schedule or none (one transaction). Returns, per schedule, what was done.
    Each creation, and each update that changes what the schedule is, is recorded with
    ``actor`` in its changes; a schedule given again as it is stored is left untouched.

    A schedule that could never fire is refused before anything is written, naming the field:
    an unknown definition, params its definition would refuse. One whose definition (content or
    code) is not approved is refused too, unless ``allow_pending``: then it is stored paused
    (``unapproved``), resumes by itself when the definition is approved, and a warning is added
    to ``warnings``."""
    given: set[tuple[str, str]] = set()
    for s in items:  # a file naming one id twice would keep only its last entry, silently
        if (s.tenant_id, s.schedule_id) in given:
            raise ValidationError("given twice: each schedule id once", field="id", source=s.schedule_id)
        given.add((s.tenant_id, s.schedule_id))
    # The profile and the keys it watches exist (checked before anything is written).
    current = {(s.tenant_id, s.schedule_id): _current_snapshot(engine, s) for s in items if s.config_profile}
    pending = {(s.tenant_id, s.schedule_id): _pending_reason(engine, s, now) for s in items}
    for s in items:
        waiting = pending[(s.tenant_id, s.schedule_id)]
        if waiting is not None and not allow_pending:
            raise ValidationError(
                f"{waiting.reason}: {waiting.consequence} (approve it first, or store the schedule paused until "
                "then: --allow-pending, or allow_pending in the API)",
                field="job",
                source=s.schedule_id,
            )
        if waiting is not None and warnings is not None:
            warnings.append(f"schedule {s.schedule_id} is stored paused ({PAUSED_UNAPPROVED}): {waiting.reason}")
    outcomes: list[PutOutcome] = []
    with engine.store.write() as tx:
        for s in items:
            unapproved = pending[(s.tenant_id, s.schedule_id)] is not None
            before = tx.schedule_get(s.tenant_id, s.schedule_id, lock=True)
            if before is not None:
                _refuse_owned(before.source, before.schedule, "replaced")
                s = windows_after_edit(before.schedule, _keep_anchor(s, before.schedule, now), now)
            paused, pause_reason = pause_after_edit(before, asked=s.paused, unapproved=unapproved)
            s = replace(s, paused=paused)
            if before is not None and (before.schedule, before.source, before.pause_reason) == (
                s,
                source,
                pause_reason if paused else None,
            ):
                outcomes.append(PutOutcome.UNCHANGED)
                continue
            made = tx.schedule_put(s, watermark=now, source=source, now=now, pause_reason=pause_reason)
            if before is not None:
                notes = settle_owed_before_edit(tx, before, s, now)
                if warnings is not None:
                    warnings.extend(notes)
            if made and (s.tenant_id, s.schedule_id) in current:
                # It answers snapshots activated from now on, not the one already active.
                seen = watched_digest(current[(s.tenant_id, s.schedule_id)], s.config_watch)
                tx.schedule_config_seen(s.tenant_id, s.schedule_id, None, seen)
            old = None if before is None else canonical_json(schedule_document(before.schedule)).decode()
            new = canonical_json(schedule_document(s)).decode()
            if old != new:
                action = "created" if made else "updated"
                tx.change_record(s.tenant_id, s.schedule_id, ScheduleChange(now, action, old, new, True, actor, source))
            outcomes.append(PutOutcome.CREATED if made else PutOutcome.UPDATED)
    for s, outcome in zip(items, outcomes, strict=True):
        if outcome is not PutOutcome.UNCHANGED:
            log.info(
                "schedule %s %s for %s by %s",
                s.schedule_id,
                outcome.value,
                s.job_definition_id,
                actor,
                extra={"action": f"schedule_{outcome.value}", "schedule_id": s.schedule_id},
            )
    return outcomes


class Pending(NamedTuple):
    """Why a schedule's fires wait for an approval. ``held``: its code changed since the
    approval, so its fires are admitted and each run is held at its start (``code_changed``)
    until the code is approved again; otherwise they are refused."""

    reason: str
    held: bool = False

    @property
    def consequence(self) -> str:
        if self.held:
            return "its runs would be held at their start (code_changed) until the code is approved"
        return "its fires would be refused"


def _pending_reason(engine: Engine, s: Schedule, now: datetime) -> Pending | None:
    """Why the schedule's fires would wait until someone approves its definition (None: they
    would be admitted, as far as can be known now). Raises for what only an edit of the
    schedule or of its definition can fix: an unknown or inactive definition, refused params."""
    from jobgate.service import approvals  # approvals resumes schedules: imported late, one way

    with engine.store.read(tenant_id=s.tenant_id) as tx:
        if not tx.definition_versions(s.tenant_id, s.job_definition_id):
            raise ValidationError(f"no job definition {s.job_definition_id!r}", field="job", source=s.schedule_id)
        definition = engine.definition(tx, s.tenant_id, s.job_definition_id)
    if definition.status is not DefinitionStatus.ACTIVE:
        raise ValidationError(
            f"definition {s.job_definition_id!r} is {definition.status.value}; only active definitions run",
            field="job",
            source=s.schedule_id,
        )
    why = trigger_refusal(
        definition.trigger_type, s.kind.trigger_type, s.job_definition_id, definition.also_triggered_by
    )
    if why is not None:
        raise ValidationError(why, field="job", source=s.schedule_id)
    rendered = check_params(definition, s, now)
    if "workflow" in definition.content:  # what its steps will be given, as at a start
        with engine.store.read(tenant_id=s.tenant_id) as tx:
            engine.definitions.check_workflow_inputs(
                tx, definition, s.tenant_id, rendered, later=frozenset(s.payload_params)
            )
    status = approvals.status(engine, s.tenant_id, s.job_definition_id)
    version = f"definition {s.job_definition_id!r} version {status.current_version}"
    if not status.approved:
        return Pending(f"{version} is not approved")
    if not status.code_matches:
        if status.code is None:
            return Pending(f"the code of {version} cannot be read on this host ({status.code_problem})")
        changed = ", ".join(status.code_changed) or "no code identity was approved"
        return Pending(f"the code of {version} is not the approved code ({changed})", held=True)
    return None


def check_params(definition: JobDefinition, s: Schedule, now: datetime) -> dict[str, str]:
    """The params a fire would carry, rendered as of ``now``, satisfy the definition's declared
    params (names, patterns; required ones, except those an event's payload may supply).
    Returns them as rendered."""
    window = ExecutionWindow(now - s.every, now) if s.kind is ScheduleKind.BATCH_WINDOW and s.every else None
    rendered = magic.render(s.params, now, s.zone, window)
    supplied = set(s.payload_params)
    declared = {spec.name for spec in definition.params}
    undeclared = [name for name in s.payload_params if name not in declared]
    if undeclared:  # every event carrying it would be refused: a schedule that could never fire
        known = ", ".join(sorted(declared)) or "none"
        raise ValidationError(
            f"{undeclared[0]!r} is not a param of definition {definition.job_definition_id!r} (its params: {known})",
            field="payload_params",
            source=s.schedule_id,
        )
    specs = [replace(spec, required=False) if spec.name in supplied else spec for spec in definition.params]
    validate_params(specs, rendered, source=s.schedule_id)
    return rendered


def _current_snapshot(engine: Engine, s: Schedule) -> ConfigSnapshot:
    assert s.config_profile is not None
    try:
        current = resolve_snapshot(engine.config, s.config_profile, s.tenant_id)
    except ValidationError as exc:
        raise ValidationError(exc.message, field="config_profile", source=s.schedule_id) from None
    missing = [k for k in s.config_watch if k not in current.content["values"]]
    if missing:
        known = ", ".join(sorted(current.content["values"])) or "none"
        raise ValidationError(
            f"profile {s.config_profile!r} has no key {missing[0]!r} (keys: {known})",
            field="watch",
            source=s.schedule_id,
        )
    return current


def set_paused(
    engine: Engine, tenant_id: str, schedule_id: str, paused: bool, *, now: datetime, actor: str = "system"
) -> bool:
    """Pause or resume; the switch is recorded with ``actor``. False (nothing written) when the
    schedule already was in that state, so scripts may repeat it safely."""
    action = "paused" if paused else "resumed"
    if not paused:  # resuming: its fires must be admissible, as when it was stored
        with engine.store.read(tenant_id=tenant_id) as tx:
            found = tx.schedule_get(tenant_id, schedule_id)
        if found is not None and found.schedule.paused:
            waiting = _pending_reason(engine, found.schedule, now)
            if waiting is not None:
                raise ValidationError(f"{waiting.reason}: approve it first", field="job", source=schedule_id)
    with engine.store.write() as tx:
        stored = tx.schedule_get(tenant_id, schedule_id)
        if stored is None:
            raise NotFoundError(f"no schedule {schedule_id!r}", field="schedule_id")
        if stored.schedule.paused == paused:
            if not (paused and stored.pause_reason == PAUSED_UNAPPROVED):
                return False
            # Paused waiting for an approval, and now by an operator: the pause becomes theirs,
            # so the approval does not resume it (``pause_after_edit``'s rule).
            tx.schedule_set_paused(tenant_id, schedule_id, True, now)
            why = f"was paused ({PAUSED_UNAPPROVED}); now paused by an operator: an approval does not resume it"
            change = ScheduleChange(now, action, "paused", "paused", True, actor, why)
            tx.change_record(tenant_id, schedule_id, change)
            return True
        tx.schedule_set_paused(tenant_id, schedule_id, paused, now)
        state = ("active", "paused")
        change = ScheduleChange(now, action, state[stored.schedule.paused], state[paused], True, actor, None)
        tx.change_record(tenant_id, schedule_id, change)
    log.info("schedule %s %s by %s", schedule_id, action, actor, extra={"action": f"schedule_{action}"})
    return True


def misses(
    engine: Engine, tenant_id: str, schedule_id: str, *, reason: str | None, after: datetime | None, limit: int
) -> list[RecordedMiss]:
    """A page of the schedule's recorded misses, oldest first (``after``: the previous page's last)."""
    if reason is not None and reason not in {r.value for r in MissReason}:
        known = ", ".join(r.value for r in MissReason)
        raise ValidationError(f"{reason!r} is not one of {known}", field="reason")
    with engine.store.read(tenant_id=tenant_id) as tx:
        if tx.schedule_get(tenant_id, schedule_id) is None:
            raise NotFoundError(f"no schedule {schedule_id!r}", field="schedule_id")
        return tx.misses_page(tenant_id, schedule_id, reason=reason, after=after, limit=limit)


def delete(engine: Engine, tenant_id: str, schedule_id: str, *, now: datetime, actor: str = "system") -> None:
    """Delete the schedule and its recorded misses; its changes stay, ending with the deletion."""
    with engine.store.write() as tx:
        stored = tx.schedule_get(tenant_id, schedule_id)
        if stored is not None:
            _refuse_owned(stored.source, stored.schedule, "deleted")
        if stored is None or not tx.schedule_delete(tenant_id, schedule_id):
            raise NotFoundError(f"no schedule {schedule_id!r}", field="schedule_id")
        old = canonical_json(schedule_document(stored.schedule)).decode()
        tx.change_record(tenant_id, schedule_id, ScheduleChange(now, "deleted", old, "deleted", True, actor, None))
    log.info("schedule %s deleted by %s", schedule_id, actor, extra={"action": "schedule_deleted"})


def settle_owed_before_edit(tx: StoreTx, before: StoredSchedule, after: Schedule, now: datetime) -> list[str]:
    """An edit that changes when a schedule's slots fall applies from the moment it is stored.
    What the old rhythm owed before that moment and no scheduler decided yet (its watermark is
    behind: none ran, or it is catching up) is recorded missed, ``edited`` (a backfill runs them
    if they should run), and the watermark moves to the edit: the new rhythm owes only its own
    slots after it, none of the instants before it that belonged to neither. Returns warnings."""
    old = before.schedule
    if not rhythm_changed(old, after):
        return []
    # The watermark as it stands now, the row locked: the caller may have read ``before`` before
    # a scheduler's commit (another transaction, or before this one locked anything), and the
    # slots that commit decided are not owed (found by a review: they got ``edited`` misses beside
    # their runs, and the watermark stayed behind the edit).
    current = tx.schedule_get(old.tenant_id, old.schedule_id, lock=True)
    watermark = before.watermark if current is None else current.watermark
    takes_over = rhythm_takes_over(old, after, now)
    if watermark == takes_over:
        return []
    warnings: list[str] = []
    if watermark < takes_over:
        changes = tx.changes_list(old.tenant_id, old.schedule_id, since=watermark)
        owed = owed_before_edit(
            old, watermark, takes_over, paused=pause_spans(pause_switches(changes), after=watermark)
        )
        if owed.misses:
            tx.misses_record(old.tenant_id, owed.misses, now)
        warnings = list(owed.warnings)
    # Behind the edit: the new rhythm owes its slots from there on. A batch window's new grid
    # begins at the end of the last window closed by now, which a running scheduler's watermark
    # may have passed: it moves back, and the new windows that closed meanwhile are owed (found
    # by a review: they were left out, unrecorded, and the anchor's move kept backfill from them).
    if not tx.schedule_advance(old.tenant_id, old.schedule_id, watermark, takes_over):
        raise ConflictError("the schedule was fired while it was being edited; edit it again", field="schedule")
    return warnings


def rhythm_takes_over(before: Schedule, after: Schedule, now: datetime) -> datetime:
    """Where an edited schedule's new rhythm begins: at the edit, except a batch window's new
    grid, which begins where the last window of the old one that closed by then ended
    (``windows_after_edit`` anchors it there): no window is left out, none overlaps a closed one."""
    begun = before.anchor.astimezone(UTC) <= now
    if after.kind is ScheduleKind.BATCH_WINDOW and before.kind is ScheduleKind.BATCH_WINDOW and begun:
        return min(after.anchor.astimezone(UTC), now)
    return now


def _keep_anchor(s: Schedule, stored: Schedule, now: datetime) -> Schedule:
    """A document that names no anchor is anchored at ``now`` (a batch window at the epoch;
    ``schedule_from_document``, with the ``now`` its caller passes here too): for a schedule
    already stored that would move its grid at every re-apply (an interval would fire again at
    once, a batch window's windows would overlap the ones already run). It keeps the stored
    schedule's anchor instead; a new schedule starts at the default, and a document naming an
    anchor moves it (naming exactly the default reads as naming none)."""
    default = EPOCH if s.kind is ScheduleKind.BATCH_WINDOW else now
    if s.anchor == default and stored.anchor != default:
        return replace(s, anchor=stored.anchor)
    return s


def _refuse_owned(source: str, schedule: Schedule, what: str) -> None:
    """A schedule its definition keeps (``trigger_type`` + ``schedule_expression``, approved
    with it) changes only with a new version of that definition: it is not replaced or deleted
    by a schedule write, as a definition does not take over a schedule stored by someone else.
    Pausing and resuming it stay an operator's."""
    if source == OWNED_SOURCE:
        raise ConflictError(
            f"schedule {schedule.schedule_id!r} is kept by definition {schedule.job_definition_id!r} and is not "
            f"{what} here: change the definition's schedule_expression (a new version, approved again), or "
            "pause it",
            field="id",
            source=schedule.schedule_id,
        )


def _text(doc: Mapping[str, Any], key: str, source: str) -> str:
    value = doc.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ValidationError("required text", field=key, source=source)
    return value.strip()


MAX_SCHEDULE_NUMBER = 100 * 366 * 86400  # a century of seconds: far beyond any real period or grace


def _number(
    doc: Mapping[str, Any],
    key: str,
    source: str,
    default: float | None = None,
    *,
    minimum: float = 0,
    maximum: float = MAX_SCHEDULE_NUMBER,
) -> float:
    """The document's number at ``key``, refused (naming the key, with the range the rule
    allows) when it is not a number in ``[minimum, maximum]``."""
    value = doc.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not minimum <= value <= maximum:
        low, high = (str(int(v)) if float(v).is_integer() else str(v) for v in (minimum, maximum))
        raise ValidationError(f"must be a number from {low} to {high}", field=key, source=source)
    return float(value)


def parse_instant(value: Any, *, field: str, source: str | None = None) -> datetime:
    """An ISO 8601 instant with a timezone offset (``Z`` accepted), or an error naming ``field``."""
    try:
        parsed = value if isinstance(value, datetime) else datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        raise ValidationError(f"{value!r} is not an ISO 8601 instant", field=field, source=source) from None
    if parsed.tzinfo is None:
        raise ValidationError(f"{value!r} needs a timezone offset (e.g. Z)", field=field, source=source)
    try:
        parsed.astimezone(UTC)  # 0001-01-01T00:00:00+14:00 is before year 1 in UTC: no instant to store
    except OverflowError:
        raise ValidationError(f"{value!r} is outside the years 1 to 9999 in UTC", field=field, source=source) from None
    return parsed


def _choice(enum: Any, value: Any, field: str, source: str) -> Any:
    try:
        return enum(str(value))
    except ValueError:
        known = ", ".join(m.value for m in enum)
        raise ValidationError(f"{value!r} is not one of {known}", field=field, source=source) from None


MAX_BACKFILL_SLOTS = 100_000


@dataclass(frozen=True)
class BackfillSlot:
    fire_at: datetime
    window: ExecutionWindow | None
    job_run_id: str | None  # the run of this slot (existing or just created); None in a dry run without one
    created: bool


def backfill(
    engine: Engine,
    *,
    tenant_id: str,
    job_definition_id: str,
    start: datetime,
    end: datetime,
    schedule_id: str | None = None,
    dry_run: bool = False,
    actor: str = "backfill",
    progress: Callable[[int], None] | None = None,
) -> list[BackfillSlot]:
    """One run per slot of the job's schedule in ``[start, end)`` (a batch window: whole windows
    inside the range). A slot's run has the same identity as the scheduler's run for that slot,
    so re-requesting a range, or backfilling slots the scheduler already fired, creates nothing.
    ``dry_run`` stores nothing and says which slots already have a run."""
    if start.tzinfo is None or end.tzinfo is None:
        raise ValidationError("give instants with a timezone offset (e.g. Z)", field="from")
    if end <= start:
        raise ValidationError("must be after --from", field="to")
    if start.astimezone(UTC) == datetime.min.replace(tzinfo=UTC):  # slots are counted after an instant before it
        raise ValidationError("the calendar's first instant cannot start a range: start a second later", field="from")
    schedule = _backfill_schedule(engine, tenant_id, job_definition_id, schedule_id)
    try:
        owed = _owed_slots(schedule, start, end, engine.clock.now())
    except OverflowError:  # a range at the calendar's ends: its slots' instants do not exist
        raise ValidationError(
            "the range's slots reach past the calendar's limits (the years 1 to 9999)",
            field="from" if start.year == MINYEAR else "to",
        ) from None
    if not owed and schedule.kind is not ScheduleKind.CRON and end <= schedule.anchor:
        raise ValidationError(  # an interval's slots are counted from its anchor: none before it
            f"schedule {schedule.schedule_id!r} counts its slots from its anchor {isoformat_utc(schedule.anchor)}:"
            " the range ends before it",
            field="to",
        )
    reason = f"backfill {isoformat_utc(start)}..{isoformat_utc(end)} of schedule {schedule.schedule_id}"
    requests = [
        fire_request(
            schedule,
            at=s.fire_at,
            actor=actor,
            reason=reason,
            trigger_id=trigger_id(schedule, s),
            window=s.window,
            trigger_type=TriggerType.BACKFILL,
            slot=trigger_id(schedule, s),
        )
        for s in owed
    ]
    out: list[BackfillSlot] = []
    for begin in range(0, len(requests), 1000):
        chunk, chunk_slots = requests[begin : begin + 1000], owed[begin : begin + 1000]
        now = engine.clock.now()
        prepared = engine.pipeline.prepare(chunk, now=now, actor=actor)
        with engine.store.read() as tx:  # a slot whose run retention deleted has had its run
            retired = tx.runs_retired_holders([p.create.run for p in prepared])
        if dry_run:
            with engine.store.read() as tx:
                existing = existing_results(tx, prepared)
            for s, p in zip(chunk_slots, prepared, strict=True):
                key = p.create.run.idempotency_key
                had = (
                    existing[key].job_run_id if key in existing else retired[key].job_run_id if key in retired else None
                )
                out.append(BackfillSlot(s.fire_at, s.window, had, False))
        else:
            wanted = [
                (s, p)
                for s, p in zip(chunk_slots, prepared, strict=True)
                if p.create.run.idempotency_key not in retired
            ]
            made = iter(engine.pipeline.store_prepared([p for _, p in wanted], now, actor=actor) if wanted else [])
            for s, p in zip(chunk_slots, prepared, strict=True):
                gone = retired.get(p.create.run.idempotency_key)
                if gone is not None:
                    out.append(BackfillSlot(s.fire_at, s.window, gone.job_run_id, False))
                else:
                    r = next(made)
                    out.append(BackfillSlot(s.fire_at, s.window, r.run.job_run_id, r.created))
        if progress is not None:
            progress(len(chunk))
    if not dry_run:
        log.info(
            "backfill of %s: %d slots, %d runs created",
            job_definition_id,
            len(out),
            sum(s.created for s in out),
            extra={"action": "backfill", "job_definition_id": job_definition_id},
        )
    return out


def _owed_slots(schedule: Schedule, start: datetime, end: datetime, now: datetime) -> list[Slot]:
    """The slots of ``[start, end)`` a backfill makes runs for (a batch window: whole windows
    inside the range). Refused, before any is counted, when one of them is not due yet: a slot
    still ahead (a batch window not closed yet) is the scheduler's, at its time; run now, it
    would see a window half full and leave its real slot taken. Counted only up to the limit,
    so a range of centuries of one-second slots is refused at once, not walked."""

    def inside(s: Slot) -> bool:
        return s.window.start >= start and s.window.end <= end if s.window is not None else s.fire_at < end

    ahead = next((s for s in slots(schedule, max(now, start - _INSTANT), end) if inside(s)), None)
    if ahead is not None:
        raise ValidationError(
            f"slots of the range are not due yet (the first at {isoformat_utc(ahead.fire_at)}): "
            "they run on their schedule; end the range at or before now",
            field="to",
        )
    owed: list[Slot] = []
    for s in slots(schedule, start - _INSTANT, end):
        if inside(s):
            owed.append(s)
            if len(owed) > MAX_BACKFILL_SLOTS:
                raise ValidationError(
                    f"more than {MAX_BACKFILL_SLOTS} slots in the range; at most {MAX_BACKFILL_SLOTS} per request",
                    field="to",
                )
    return owed


_INSTANT = timedelta(microseconds=1)


def _backfill_schedule(engine: Engine, tenant_id: str, job: str, schedule_id: str | None) -> Schedule:
    with engine.store.read() as tx:
        mine = [i.schedule for i in tx.schedules_list(tenant_id) if i.schedule.job_definition_id == job]
    if schedule_id is not None:
        mine = [s for s in mine if s.schedule_id == schedule_id]
        if not mine:
            raise NotFoundError(f"no schedule {schedule_id!r} for {job!r}", field="schedule")
    if not mine:
        raise ValidationError(f"{job!r} has no schedule to take slots from", field="job")
    if len(mine) > 1:
        names = ", ".join(s.schedule_id for s in mine)
        raise ValidationError(f"{job!r} has several schedules ({names}); name one with --schedule", field="schedule")
    if not mine[0].kind.timed:  # its slots come from what happened (an activation, an event, a fact), not a clock
        raise ValidationError(
            f"schedule {mine[0].schedule_id!r} is of kind {mine[0].kind.value}, fired by what happens: only a cron,"
            " interval or batch window (or adaptive) schedule has slots a backfill can name",
            field="schedule",
        )
    return mine[0]


def recommend_interval(
    engine: Engine, *, tenant_id: str, schedule_id: str, every: timedelta, source: str, reason: str | None = None
) -> bool:
    """A recommender's one power over an adaptive schedule (seed 000 §52): propose its interval.

    Within the schedule's bounds the interval moves (the next fires continue from the current
    slot at the new pace); outside them the proposal is refused. Both are recorded. Nothing else
    is reachable from here: a recommendation cannot run, cancel, pause or bypass anything.
    Returns whether the interval changed.
    """
    now = engine.clock.now()
    with engine.store.read() as tx:
        stored = tx.schedule_get(tenant_id, schedule_id)
    if stored is None:
        raise NotFoundError(f"no schedule {schedule_id!r}", field="schedule_id")
    s = stored.schedule
    if s.kind is not ScheduleKind.ADAPTIVE or s.every is None or s.min_every is None or s.max_every is None:
        raise ValidationError(f"schedule {schedule_id!r} is not adaptive", field="schedule_id")
    accepted = s.min_every <= every <= s.max_every
    change = ScheduleChange(
        now, "every", str(s.every.total_seconds()), str(every.total_seconds()), accepted, source, reason
    )
    with engine.store.write() as tx:
        tx.change_record(tenant_id, schedule_id, change)
        if accepted and not tx.schedule_retime(tenant_id, schedule_id, s.every, every, regrid(s, now)):
            raise ConflictError("the interval changed meanwhile; recommend again", field="every")
        if accepted:
            settle_owed_before_edit(tx, stored, replace(s, every=every, anchor=regrid(s, now)), now)
    log.info(
        "schedule %s: %s recommended every %ss (%s)",
        schedule_id,
        source,
        every.total_seconds(),
        "applied" if accepted else f"refused: outside {s.min_every} .. {s.max_every}",
        extra={"action": "schedule_recommendation", "schedule_id": schedule_id},
    )
    if not accepted:
        raise ValidationError(
            f"{every.total_seconds():g}s is outside the policy bounds {s.min_every.total_seconds():g}s .. "
            f"{s.max_every.total_seconds():g}s (recorded, not applied)",
            field="every",
        )
    return True
