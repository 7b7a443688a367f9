"""What a schedule is: when it fires, what it hands the job, and what it does after downtime."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from jobgate.core.canonical import isoformat_utc
from jobgate.core.errors import ValidationError
from jobgate.core.models import DEFAULT_TENANT, TriggerType
from jobgate.scheduling import conditions, cron, magic


class ScheduleKind(StrEnum):
    """Seed 000 §6 modes: time-driven ones have slots; event-driven ones fire on a posted event."""

    CRON = "cron"
    INTERVAL = "interval"
    BATCH_WINDOW = "batch_window"
    EVENT = "event"  # seed "event_triggered": an event of ``event_type`` posted to jobgate
    QUEUE = "queue"  # the same, for events taken from a queue
    ADAPTIVE = "adaptive"  # an interval a recommender may move, only within ``min_every``..``max_every``
    CONFIGURATION = "configuration"  # a new snapshot of ``config_profile`` becomes active
    POLICY = "policy"  # seed "policy_triggered": a condition over recorded facts, once per episode
    ALERT = "alert"  # the same, over the facts an alert posts (its status and numeric fields)
    SAFE_MODE = "safe_mode"  # fires when safe mode is activated, then on its cron or every, while it lasts

    @property
    def trigger_type(self) -> TriggerType:
        return TriggerType(self.value)

    @property
    def timed(self) -> bool:
        return self in (ScheduleKind.CRON, ScheduleKind.INTERVAL, ScheduleKind.BATCH_WINDOW, ScheduleKind.ADAPTIVE)

    @property
    def evented(self) -> bool:
        return self in (ScheduleKind.EVENT, ScheduleKind.QUEUE)

    @property
    def conditional(self) -> bool:
        return self in (ScheduleKind.POLICY, ScheduleKind.ALERT)


DEFAULT_MISFIRE_GRACE = timedelta(seconds=60)
DEFAULT_MAX_CATCHUP = 100


class MisfirePolicy(StrEnum):
    """What a schedule does with fires it owes but could not make on time (downtime)."""

    FIRE_ONCE = "fire_once"  # coalesce every missed fire into one run now
    FIRE_ALL = "fire_all"  # catch up each missed fire, at most ``max_catchup`` of them
    SKIP = "skip"  # make none of them


class OverlapPolicy(StrEnum):
    ALLOW = "allow"
    FORBID = "forbid"  # skip a fire while a run of the schedule is still pending or running
    REPLACE = "replace"  # stop the running one, then fire


@dataclass(frozen=True)
class Schedule:
    """A schedule attached to one job definition.

    ``every`` is the period of an ``interval`` schedule and the window length of a
    ``batch_window`` one; ``anchor`` is where the periods are counted from (an interval's first
    fire; the start of a window). ``params`` may use magic params (``{{current_date}}`` ...),
    rendered at each fire in the schedule's timezone.
    """

    schedule_id: str
    job_definition_id: str
    kind: ScheduleKind
    anchor: datetime
    timezone: str = "UTC"
    cron: str | None = None
    every: timedelta | None = None
    params: Mapping[str, str] = field(default_factory=dict)
    misfire: MisfirePolicy = MisfirePolicy.FIRE_ONCE
    misfire_grace: timedelta = DEFAULT_MISFIRE_GRACE
    max_catchup: int = DEFAULT_MAX_CATCHUP
    overlap: OverlapPolicy = OverlapPolicy.ALLOW
    tenant_id: str = DEFAULT_TENANT
    paused: bool = False
    # Event schedules: the event type they answer, and the payload fields they pass on as
    # params (seed 004: a whitelist; nothing else from the payload reaches the job).
    event_type: str | None = None
    payload_params: tuple[str, ...] = ()
    # Policy and alert schedules: ``<fact> <op> <number>``, fired once per episode.
    condition: str | None = None
    # Adaptive schedules: the bounds a recommendation may move ``every`` within (seed §52).
    min_every: timedelta | None = None
    max_every: timedelta | None = None
    # Configuration schedules: the profile whose newly activated snapshots they answer.
    config_profile: str | None = None
    # ... and the profile keys it watches (e.g. ``policy_bundle``); empty: every value.
    config_watch: tuple[str, ...] = ()

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)


MAX_CATCHUP_LIMIT = 100_000
MIN_SKIP_GRACE = timedelta(seconds=1)  # a tick comes a little after its slot: a skip needs slack
MAX_SCHEDULE_ID = 200  # the column's width
# tzdata files that stand for the host's own zone setting, not a place.
HOST_ZONES = frozenset({"localtime", "posixrules", "Factory"})
EVENT_TYPE = re.compile(r"[A-Za-z0-9_.:-]{1,200}")  # what a schedule subscribes to, what an event names


def zone_problem(name: str) -> str | None:
    """Why ``name`` is not a zone a schedule may use, or None. One rule for every door (a
    schedule, a definition's ``schedule_timezone``, ``scheduling.timezone``): an IANA zone this
    host knows, not one standing for the host's own setting, nor a ``right/`` (leap-second) or
    ``posix/`` variant, which only some hosts' tzdata holds (and Python reads ``right/`` ones
    wrong: an hour off in winter)."""
    if name in HOST_ZONES or name.startswith(("right/", "posix/")):
        return f"{name!r} depends on the host: name an IANA zone (e.g. Europe/Helsinki)"
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return f"unknown IANA timezone {name!r}"
    return None


def _check_first_slot(s: Schedule) -> None:
    """A timed schedule whose first slot lies past the calendar's last instant (year 9999) could
    never fire: an interval's first slot is its anchor, a batch window's the end of its first
    window (the anchor plus ``every``)."""
    assert s.every is not None
    if s.kind is not ScheduleKind.BATCH_WINDOW:
        return
    try:
        s.anchor.astimezone(UTC) + s.every
    except OverflowError:
        raise ValidationError(
            "the first window (the anchor plus 'every') would close after the calendar's last instant"
            " (year 9999): the schedule could never fire",
            field="anchor",
            source=s.schedule_id,
        ) from None


def check_schedule(s: Schedule) -> Schedule:
    """Refuse a schedule that cannot plan, naming the field; return it (cron text normalised)."""
    if not s.schedule_id or not s.schedule_id.replace("-", "").replace("_", "").replace(".", "").isalnum():
        raise ValidationError("use letters, digits, '-', '_' and '.'", field="schedule_id", source=s.schedule_id)
    if len(s.schedule_id) > MAX_SCHEDULE_ID:
        raise ValidationError(f"at most {MAX_SCHEDULE_ID} characters", field="schedule_id", source=s.schedule_id[:40])
    problem = zone_problem(s.timezone)  # a host's own setting: schedulers on two hosts would disagree
    if problem is not None:
        raise ValidationError(problem, field="timezone", source=s.schedule_id)
    if s.anchor.tzinfo is None:
        raise ValidationError("the anchor needs a timezone", field="anchor", source=s.schedule_id)
    if s.kind is ScheduleKind.SAFE_MODE:
        if s.cron is not None and s.every is not None:
            raise ValidationError("give cron or every, not both", field="cron", source=s.schedule_id)
        if s.every is not None and s.every < timedelta(seconds=1):
            raise ValidationError("needs 'every' of at least one second", field="every", source=s.schedule_id)
        if s.cron is not None:
            try:
                s = replace(s, cron=cron.validate(s.cron))
            except ValidationError as exc:
                raise ValidationError(exc.message, field="cron", source=s.schedule_id) from None
    elif s.kind is ScheduleKind.CRON:
        if not s.cron:
            raise ValidationError("a cron schedule needs an expression", field="cron", source=s.schedule_id)
        if s.every is not None:
            raise ValidationError("a cron schedule has no 'every'", field="every", source=s.schedule_id)
        try:
            normalised = cron.validate(s.cron)
        except ValidationError as exc:
            raise ValidationError(exc.message, field="cron", source=s.schedule_id) from None
        s = replace(s, cron=normalised)
    elif s.kind.timed:
        if s.cron is not None:
            raise ValidationError(
                f"a {s.kind.value} schedule has no cron expression", field="cron", source=s.schedule_id
            )
        if s.every is None or s.every < timedelta(seconds=1):
            raise ValidationError("needs 'every' of at least one second", field="every", source=s.schedule_id)
        _check_first_slot(s)
    else:
        if s.cron is not None or s.every is not None:
            raise ValidationError(
                f"a {s.kind.value} schedule fires on input, not on time", field="cron", source=s.schedule_id
            )
    if s.kind is ScheduleKind.ADAPTIVE:
        if s.min_every is None or s.max_every is None or not s.min_every <= s.max_every:
            raise ValidationError(
                "an adaptive schedule needs min_every <= max_every", field="min_every", source=s.schedule_id
            )
        if s.every is not None and not s.min_every <= s.every <= s.max_every:
            raise ValidationError(f"must be within {s.min_every} .. {s.max_every}", field="every", source=s.schedule_id)
    elif s.min_every is not None or s.max_every is not None:
        raise ValidationError("only adaptive schedules take bounds", field="min_every", source=s.schedule_id)
    if (s.kind is ScheduleKind.CONFIGURATION) != (s.config_profile is not None) or s.config_profile == "":
        raise ValidationError(
            "a configuration schedule, and only it, names a config_profile",
            field="config_profile",
            source=s.schedule_id,
        )
    if s.config_watch and s.kind is not ScheduleKind.CONFIGURATION:
        raise ValidationError("only configuration schedules watch keys", field="watch", source=s.schedule_id)
    for key in s.config_watch:
        if not key or not isinstance(key, str):
            raise ValidationError("a list of profile key names", field="watch", source=s.schedule_id)
    if s.kind.conditional:
        try:
            parsed = conditions.parse(s.condition or "")
        except ValidationError as exc:
            raise ValidationError(exc.message, field="condition", source=s.schedule_id) from None
        s = replace(s, condition=str(parsed))
    elif s.condition is not None:
        raise ValidationError(
            "only policy and alert schedules take a condition", field="condition", source=s.schedule_id
        )
    if s.kind.evented and (not s.event_type or not EVENT_TYPE.fullmatch(s.event_type)):
        raise ValidationError(
            "needs an event type (letters, digits, '.', '_', '-', ':')", field="event_type", source=s.schedule_id
        )
    if not s.kind.evented and (s.event_type is not None or s.payload_params):
        raise ValidationError("only event schedules take an event type", field="event_type", source=s.schedule_id)
    for i, name in enumerate(s.payload_params):
        if not name.isidentifier():
            raise ValidationError(f"{name!r} is not a field name", field="payload_params", source=s.schedule_id)
        if name in s.payload_params[:i]:
            raise ValidationError(f"{name!r} is listed twice", field="payload_params", source=s.schedule_id)
    if s.kind.evented or s.kind.conditional or s.kind is ScheduleKind.CONFIGURATION:
        # Fired by input, one run per event, episode or snapshot: no slot is late or owed, and
        # no fire waits for another. Options that would do nothing are refused, not ignored.
        ignored = {
            "overlap": s.overlap is not OverlapPolicy.ALLOW,
            "misfire": s.misfire is not MisfirePolicy.FIRE_ONCE,
            "misfire_grace": s.misfire_grace != DEFAULT_MISFIRE_GRACE,
            "max_catchup": s.max_catchup != DEFAULT_MAX_CATCHUP,
        }
        for field, given in ignored.items():
            if given:
                raise ValidationError(
                    f"a {s.kind.value} schedule fires on input, not on time: {field} applies only to schedules"
                    " that fire on time",
                    field=field,
                    source=s.schedule_id,
                )
    if s.misfire_grace < timedelta(0):
        raise ValidationError("must not be negative", field="misfire_grace", source=s.schedule_id)
    if s.misfire is MisfirePolicy.SKIP and s.misfire_grace < MIN_SKIP_GRACE:
        raise ValidationError(  # no tick is ever exactly on time: every slot would be skipped
            f"a schedule that skips late slots needs a grace of at least {MIN_SKIP_GRACE.total_seconds():g} s",
            field="misfire_grace",
            source=s.schedule_id,
        )
    if not 1 <= s.max_catchup <= MAX_CATCHUP_LIMIT:
        raise ValidationError(f"must be between 1 and {MAX_CATCHUP_LIMIT}", field="max_catchup", source=s.schedule_id)
    try:
        magic.check(s.params)
    except ValidationError as exc:
        raise ValidationError(exc.message, field=exc.field, source=s.schedule_id) from None
    return s


def schedule_document(s: Schedule) -> dict[str, Any]:
    """What a schedule is, as a document in the terms of ``schedule_from_document`` (plus its
    kind, which that reads back when it agrees): the record kept of each creation and update,
    and what the API shows, so a document read can be posted again as it is."""
    doc: dict[str, Any] = {
        "id": s.schedule_id,
        "job": s.job_definition_id,
        "kind": s.kind.value,
        "tenant": s.tenant_id,
        "timezone": s.timezone,
        "anchor": isoformat_utc(s.anchor),
        "params": dict(s.params),
        "misfire": s.misfire.value,
        "misfire_grace_seconds": s.misfire_grace.total_seconds(),
        "max_catchup": s.max_catchup,
        "overlap": s.overlap.value,
        "paused": s.paused,
    }
    every = None if s.every is None else s.every.total_seconds()
    windowed = s.kind is ScheduleKind.BATCH_WINDOW
    optional = {
        "cron": s.cron,
        "every_seconds": None if windowed else every,
        "window_seconds": every if windowed else None,
        # the flags that tell a kind from another of the same trigger key
        "adaptive": s.kind is ScheduleKind.ADAPTIVE or None,
        "queue": s.kind is ScheduleKind.QUEUE or None,
        "alert": s.kind is ScheduleKind.ALERT or None,
        "safe_mode": s.kind is ScheduleKind.SAFE_MODE or None,
        "event_type": s.event_type,
        "payload_params": list(s.payload_params) or None,
        "condition": s.condition,
        "min_every_seconds": None if s.min_every is None else s.min_every.total_seconds(),
        "max_every_seconds": None if s.max_every is None else s.max_every.total_seconds(),
        "config_profile": s.config_profile,
        "watch": list(s.config_watch) or None,
    }
    doc.update({k: v for k, v in optional.items() if v is not None})
    return doc
