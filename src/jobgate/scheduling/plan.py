"""Plans: the exact fires a schedule owes between what was planned before and now.

Everything here is pure. ``slots`` enumerates a schedule's fire instants in a range;
``plan`` turns the slots owed since the schedule's watermark into fires and recorded misses
according to the misfire policy, and moves the watermark to now. The scheduler stores the
new watermark in the same transaction as the runs it creates, so a plan is executed once:
a restart plans again from the stored watermark and finds nothing new for the fires it made.

A slot is "on time" while ``now - fire_at <= misfire_grace``; later than that it is missed,
and the misfire policy decides: ``fire_once`` makes one run for the latest missed slot (the
others are recorded as coalesced into it), ``fire_all`` makes one run per missed slot, at most
``max_catchup`` of them (the most recent; older ones are recorded as beyond the limit, with a
warning), ``skip`` makes none (each recorded as skipped). A paused schedule records its slots
as paused and makes nothing.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from jobgate.core.canonical import isoformat_utc
from jobgate.core.errors import ValidationError
from jobgate.core.models import ExecutionWindow
from jobgate.scheduling import cron, magic
from jobgate.scheduling.model import MisfirePolicy, OverlapPolicy, Schedule, ScheduleKind

TRIGGER_PREFIX = "TGTRIG-"
MAX_RECORDED_MISSES = 10_000  # missed slots a plan records one by one (beyond max_catchup)
_END_OF_TIME = datetime(9999, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Slot:
    """One instant a schedule fires at, and the window it covers (batch windows only)."""

    fire_at: datetime  # UTC
    window: ExecutionWindow | None = None


class MissReason(StrEnum):
    COALESCED = "coalesced"  # folded into the one run of a fire_once catch-up
    BEYOND_MAX_CATCHUP = "beyond_max_catchup"
    SKIPPED = "skipped"
    PAUSED = "paused"
    REFUSED = "refused"  # the definition could not run it (unknown, not active, params refused)
    OVERLAP = "overlap"  # forbid / replace: another run of the schedule was (or would be) outstanding
    EDITED = "edited"  # owed by a rhythm an edit replaced before any scheduler decided it


@dataclass(frozen=True)
class Fire:
    """A run to create. ``trigger_id`` names the slot, so a fire made twice is one run."""

    schedule_id: str
    job_definition_id: str
    fire_at: datetime
    window: ExecutionWindow | None
    trigger_id: str
    params: dict[str, str]
    late: bool  # made after its grace period (catch-up or coalesced)


@dataclass(frozen=True)
class Miss:
    schedule_id: str
    fire_at: datetime
    reason: MissReason
    event_id: str | None = None  # an event a paused schedule recorded instead of running it


@dataclass(frozen=True)
class Plan:
    fires: tuple[Fire, ...]
    misses: tuple[Miss, ...]
    watermark: datetime  # every slot at or before this instant has been decided
    warnings: tuple[str, ...] = ()


def slots(schedule: Schedule, after: datetime, until: datetime) -> Iterator[Slot]:
    """The schedule's slots with ``after < fire_at <= until``, ascending (none for event schedules).

    A safe-mode schedule's slots are counted from its ``anchor``, which ``plan_periods`` sets to
    the activation instant: the activation itself, then its cron or interval slots after it.
    """
    if schedule.kind is ScheduleKind.SAFE_MODE:
        yield from _safe_mode_slots(schedule, after, until)
        return
    if not schedule.kind.timed:
        return
    if schedule.kind is ScheduleKind.CRON:
        assert schedule.cron is not None
        for at in cron.fire_times(schedule.cron, schedule.zone, after):
            if at > until:
                return
            yield Slot(at)
        return
    assert schedule.every is not None
    every, anchor = schedule.every, schedule.anchor.astimezone(UTC)
    if schedule.kind in (ScheduleKind.INTERVAL, ScheduleKind.ADAPTIVE):
        # Fires at anchor + k * every, k >= 0.
        k = 0 if after < anchor else (after - anchor) // every + 1
        while (fire := _nth(anchor, k, every)) is not None and fire <= until:
            yield Slot(fire)
            k += 1
        return
    # Batch windows [anchor + k * every, anchor + (k + 1) * every) fire when they close.
    first = _nth(anchor, 1, every)
    k = 1 if first is None or after < first else (after - anchor) // every + 1
    while (end := _nth(anchor, k, every)) is not None and end <= until:
        yield Slot(end, ExecutionWindow(end - every, end))
        k += 1


def _nth(anchor: datetime, k: int, every: timedelta) -> datetime | None:
    """``anchor + k * every``, or None past the last instant a datetime holds (year 9999): a
    rhythm has no slots beyond the calendar."""
    try:
        return anchor + k * every
    except OverflowError:
        return None


def _safe_mode_slots(schedule: Schedule, after: datetime, until: datetime) -> Iterator[Slot]:
    activation = schedule.anchor.astimezone(UTC)
    if after < activation <= until:
        yield Slot(activation)
    after = max(after, activation)
    if schedule.cron is not None:
        for at in cron.fire_times(schedule.cron, schedule.zone, after):
            if at > until:
                return
            yield Slot(at)
    elif schedule.every is not None:
        k = (after - activation) // schedule.every + 1
        while (fire := _nth(activation, k, schedule.every)) is not None and fire <= until:
            yield Slot(fire)
            k += 1


def trigger_id(schedule: Schedule, slot: Slot) -> str:
    """The identity of a slot's trigger: the same schedule and slot always give the same id.

    An instant names a slot (``TGTRIG-<schedule>@<instant>``), except a batch window's, which is
    named by its start and end (``@<start>/<end>``, ISO 8601's interval form): after the
    window's length changes, the window ending at the same instant is another window, with
    other data, and must not pass for the one that ran. The job is not in the name: the store
    keeps a slot unique per job (``ux_job_runs_slot``), so a schedule id reused for another job
    starts with no slot taken."""
    at = isoformat_utc(slot.fire_at)
    if slot.window is not None:
        at = f"{isoformat_utc(slot.window.start)}{WINDOW_SEPARATOR}{isoformat_utc(slot.window.end)}"
    return f"{TRIGGER_PREFIX}{schedule.schedule_id}@{at}"


WINDOW_SEPARATOR = "/"


def slot_window(slot: str) -> list[str] | None:
    """The ``[start, end]`` a batch window's slot names, as written (``isoformat_utc``, the form
    a run's trigger records its window in); None for a slot that names no window."""
    named, _, at = slot.rpartition("@")
    if not named.startswith(TRIGGER_PREFIX) or WINDOW_SEPARATOR not in at:
        return None
    start, _, end = at.partition(WINDOW_SEPARATOR)
    return [start, end]


def legacy_window_slot(slot: str) -> str | None:
    """The name a batch window's slot had before migration 0026 (its end alone), or None for a
    slot that names no window. Runs made then keep that name (it is sealed with them); the store
    finds them by it, and takes one as the window's holder only if its own window matches."""
    window = slot_window(slot)
    return None if window is None else f"{slot.rpartition('@')[0]}@{window[1]}"


def parse_slot(slot: str | None) -> tuple[str, datetime] | None:
    """The (schedule id, instant) a run's slot names (``trigger_id``'s form; a batch window's
    end); None for no slot."""
    if slot is None or not slot.startswith(TRIGGER_PREFIX) or "@" not in slot:
        return None
    schedule_id, _, at = slot[len(TRIGGER_PREFIX) :].rpartition("@")
    try:
        return schedule_id, datetime.fromisoformat(at.rpartition(WINDOW_SEPARATOR)[2].replace("Z", "+00:00"))
    except ValueError:
        return None


def plan(
    schedule: Schedule,
    *,
    watermark: datetime,
    now: datetime,
    until: datetime | None = None,
    paused: Sequence[Period] = (),
) -> Plan:
    """The fires and misses owed for the slots in ``(watermark, min(now, until)]``; lateness is
    measured from ``now``, and the watermark moves to the end of the range. ``paused``: the spans
    the schedule was paused in since the watermark (``pause_spans``), whether or not a scheduler
    ran then: their slots are recorded paused and never run, as while it is paused; the misfire
    policy decides among the others."""
    end = now if until is None else min(now, until)
    if end <= watermark:
        return Plan((), (), watermark)
    # Slots ascend, so the late ones come first. After a long outage there can be millions: only
    # the most recent ones are kept (memory stays bounded); older ones are counted, and a warning
    # says how many were missed and when, instead of a row each.
    keep = schedule.max_catchup + MAX_RECORDED_MISSES
    late: deque[Slot] = deque(maxlen=keep)
    on_time: list[Slot] = []
    unrecorded = _Uncounted()
    held: deque[Slot] = deque(maxlen=MAX_RECORDED_MISSES)  # slots of a span it was paused in
    unheld = _Uncounted()
    decided_to = end
    # A long outage of a fast interval: the late slots past those kept are counted, not walked,
    # up to the first span it was paused in (whose slots are classified one by one).
    # (Not for a schedule paused again since it was active: its walk stops at the first slot
    # owed while active, which must stay undecided.)
    first_pause = min((p.since for p in paused), default=None)
    skip_to = end if first_pause is None else min(end, first_pause - _INSTANT)
    start = watermark
    if skip_to > watermark and not (schedule.paused and paused):
        start = _skip_beyond(schedule, watermark, skip_to, now, keep, unrecorded)
    for slot in slots(schedule, start, end):
        if schedule.paused and paused and not within(slot.fire_at, paused):
            # It fell while the schedule was active, and it was paused again since: the misfire
            # policy decides it when the schedule runs again, not "paused" now.
            decided_to = slot.fire_at - _INSTANT
            break
        if paused and not schedule.paused and within(slot.fire_at, paused):
            unheld.push(held, slot)
            continue
        if schedule.paused or now - slot.fire_at > schedule.misfire_grace:
            unrecorded.push(late, slot)
        else:
            on_time.append(slot)
    warnings: list[str] = []
    unrecorded.warn(warnings, schedule.schedule_id, "paused" if schedule.paused else "late")
    unheld.warn(warnings, schedule.schedule_id, "paused")
    if schedule.paused:
        recorded = tuple(Miss(schedule.schedule_id, s.fire_at, MissReason.PAUSED) for s in late)
        return Plan((), recorded, max(watermark, decided_to), tuple(warnings))
    fires, misses = _decide_late(schedule, list(late), warnings)
    fires += [_fire(schedule, s, late=False) for s in on_time]
    misses += [Miss(schedule.schedule_id, s.fire_at, MissReason.PAUSED) for s in held]
    misses.sort(key=lambda m: m.fire_at)
    return Plan(tuple(fires), tuple(misses), end, tuple(warnings))


def _skip_beyond(
    schedule: Schedule, watermark: datetime, end: datetime, now: datetime, keep: int, counted: _Uncounted
) -> datetime:
    """Where to start walking an interval's or a batch window's slots in ``(watermark, end]`` so
    that at most ``keep`` are walked: the older ones are counted into ``counted`` by arithmetic
    (a 1-second interval 40 days behind has 3.5 million slots; walking them took seconds, past
    the leader's lease). Cron slots are walked (one a minute at most)."""
    if schedule.kind not in (ScheduleKind.INTERVAL, ScheduleKind.ADAPTIVE, ScheduleKind.BATCH_WINDOW):
        return watermark
    assert schedule.every is not None
    every, anchor = schedule.every, schedule.anchor.astimezone(UTC)
    lowest = 0 if schedule.kind is not ScheduleKind.BATCH_WINDOW else 1  # a window fires when it closes
    lowest_at = _nth(anchor, lowest, every)
    if lowest_at is None:  # its first slot is past the calendar: nothing to count
        return watermark
    first_k = lowest if watermark < lowest_at else (watermark - anchor) // every + 1
    # Only late slots are kept to ``keep`` (the on-time ones, within the grace, all run); a paused
    # schedule's are all kept as late.
    late_to = end if schedule.paused else min(end, now - schedule.misfire_grace - _INSTANT)
    last_k = (late_to - anchor) // every if late_to >= anchor else lowest - 1
    skip = (last_k - first_k + 1) - keep
    if skip <= 0:
        return watermark
    first, last = _nth(anchor, first_k, every), _nth(anchor, first_k + skip - 1, every)
    if first is None or last is None:
        return watermark
    counted.count, counted.first, counted.last = skip, first, last
    return last


class _Uncounted:
    """Slots pushed out of a bounded deque: counted, and named by one warning (their first and
    last instants) instead of one recorded miss each."""

    def __init__(self) -> None:
        self.count = 0
        self.first: datetime | None = None
        self.last: datetime | None = None

    def push(self, kept: deque[Slot], slot: Slot) -> None:
        if kept.maxlen is not None and len(kept) == kept.maxlen:
            self.count += 1
            self.first = self.first or kept[0].fire_at
            self.last = kept[0].fire_at
        kept.append(slot)

    def warn(self, warnings: list[str], schedule_id: str, why: str) -> None:
        if self.count and self.first is not None and self.last is not None:
            warnings.append(
                f"schedule {schedule_id}: {self.count} older slots from {isoformat_utc(self.first)} "
                f"to {isoformat_utc(self.last)} were missed ({why}); recorded by this warning, not one by one"
            )


@dataclass(frozen=True)
class Period:
    """A span a safe-mode schedule is active in: from an activation to its deactivation (open
    while safe mode is on)."""

    since: datetime
    until: datetime | None = None


_INSTANT = timedelta(microseconds=1)  # the resolution of stored instants


def within(at: datetime, spans: Sequence[Period]) -> bool:
    """Whether ``at`` falls in one of ``spans`` (from ``since``, until before ``until``)."""
    return any(p.since <= at and (p.until is None or at < p.until) for p in spans)


def pause_spans(switches: Sequence[tuple[datetime, bool, bool]], *, after: datetime) -> tuple[Period, ...]:
    """The spans a schedule was paused in since ``after``, from its pause switches in order:
    ``(at, paused before, paused after)`` (an edit that kept the state is no switch). A span
    open at the end is open (``until`` None): the schedule is still paused."""
    spans: list[Period] = []
    since: datetime | None = after if switches and switches[0][1] else None
    for at, was, now_paused in switches:
        if was == now_paused:
            continue
        if now_paused:
            since = at
        elif since is not None:
            if at > after:
                spans.append(Period(max(since, after), at))
            since = None
    if since is not None:
        spans.append(Period(max(since, after)))
    return tuple(spans)


def plan_periods(
    schedule: Schedule,
    *,
    watermark: datetime,
    now: datetime,
    periods: Sequence[Period],
    paused: Sequence[Period] = (),
) -> Plan:
    """A safe-mode schedule's plan: in each period that reaches past the watermark, the slots of
    ``slots`` anchored at that activation, decided by the misfire policy like any plan.

    The watermark moves only to the end of what was planned (the last period's end, or now
    while one is open), never over a stretch with no period: an activation recorded a moment
    ago may start there, and its fire must not fall behind the watermark. ``paused``: the spans
    the schedule itself was paused in, as for ``plan``.
    """
    fires: list[Fire] = []
    misses: list[Miss] = []
    warnings: list[str] = []
    mark = watermark
    for period in sorted(periods, key=lambda p: p.since):
        start = max(mark, period.since - _INSTANT)
        end = now if period.until is None else min(now, period.until - _INSTANT)  # off at ``until``
        if end <= start:
            continue  # over before the watermark, or not begun by now
        part = plan(replace(schedule, anchor=period.since), watermark=start, now=now, until=end, paused=paused)
        fires += part.fires
        misses += part.misses
        warnings += part.warnings
        mark = part.watermark
        if mark < end:
            break  # it stopped before slots it left undecided (paused again): later periods wait
    return Plan(tuple(fires), tuple(misses), mark, tuple(warnings))


def _decide_late(schedule: Schedule, late: list[Slot], warnings: list[str]) -> tuple[list[Fire], list[Miss]]:
    """The misfire policy over the late slots kept (ascending): what to fire, what to record."""
    fires: list[Fire] = []
    misses: list[Miss] = []
    if late:
        policy = schedule.misfire
        if policy is MisfirePolicy.FIRE_ONCE:
            misses += [Miss(schedule.schedule_id, s.fire_at, MissReason.COALESCED) for s in late[:-1]]
            fires.append(_fire(schedule, late[-1], late=True))
        elif policy is MisfirePolicy.FIRE_ALL:
            dropped = late[: -schedule.max_catchup] if len(late) > schedule.max_catchup else []
            if dropped:
                misses += [Miss(schedule.schedule_id, s.fire_at, MissReason.BEYOND_MAX_CATCHUP) for s in dropped]
                warnings.append(
                    f"schedule {schedule.schedule_id}: {len(late)} missed fires, catching up the latest "
                    f"{schedule.max_catchup} (max_catchup); {len(dropped)} from {isoformat_utc(dropped[0].fire_at)} "
                    f"to {isoformat_utc(dropped[-1].fire_at)} are recorded, not run"
                )
            fires += [_fire(schedule, s, late=True) for s in late[len(dropped) :]]
        else:
            misses += [Miss(schedule.schedule_id, s.fire_at, MissReason.SKIPPED) for s in late]
    return fires, misses


def _fire(schedule: Schedule, slot: Slot, *, late: bool) -> Fire:
    return Fire(
        schedule_id=schedule.schedule_id,
        job_definition_id=schedule.job_definition_id,
        fire_at=slot.fire_at,
        window=slot.window,
        trigger_id=trigger_id(schedule, slot),
        params=magic.render(schedule.params, slot.fire_at, schedule.zone, slot.window),
        late=late,
    )


def next_fires(
    schedule: Schedule, after: datetime, count: int, *, safe_mode_since: datetime | None = None
) -> list[Slot]:
    """The next ``count`` slots after ``after`` (for ``jobgate next``). A safe-mode schedule's
    slots exist only while safe mode is on: counted from its activation (``safe_mode_since``),
    none while it is off (found by a review: none were shown while it was on either)."""
    out: list[Slot] = []
    if schedule.kind is ScheduleKind.SAFE_MODE:
        if safe_mode_since is None:
            return out
        schedule = replace(schedule, anchor=safe_mode_since)
    for slot in slots(schedule, after, _END_OF_TIME):
        out.append(slot)
        if len(out) >= count:
            break
    return out


def apply_overlap(schedule: Schedule, fires: tuple[Fire, ...], *, active: bool) -> tuple[list[Fire], list[Miss]]:
    """The fires the overlap policy lets through, and the ones it records as overlapping.

    ``allow`` lets every fire through. ``forbid`` and ``replace`` keep at most one run of the
    schedule outstanding: of several fires owed at once only the latest is made (each earlier one
    would overlap the next); ``forbid`` makes none while a run is ``active`` (pending or running),
    ``replace`` makes it anyway, after the caller stops the active run.
    """
    if schedule.overlap is OverlapPolicy.ALLOW or not fires:
        return list(fires), []
    misses = [Miss(schedule.schedule_id, f.fire_at, MissReason.OVERLAP) for f in fires[:-1]]
    if active and schedule.overlap is OverlapPolicy.FORBID:
        return [], [*misses, Miss(schedule.schedule_id, fires[-1].fire_at, MissReason.OVERLAP)]
    return [fires[-1]], misses


def regrid(schedule: Schedule, now: datetime) -> datetime:
    """The anchor for an interval schedule whose period changes at ``now``: the last slot of the
    old grid at or before now, so the next fires continue from it at the new pace."""
    assert schedule.every is not None
    anchor = schedule.anchor.astimezone(UTC)
    if now <= anchor:
        return anchor
    return anchor + ((now - anchor) // schedule.every) * schedule.every


def rhythm_changed(before: Schedule, after: Schedule) -> bool:
    """Whether an edit changes when a schedule's slots fall (kind, cron, period, anchor; the zone
    for a cron schedule only: an interval's or a window's instants are counted from its anchor
    whatever the zone)."""
    zoned = ScheduleKind.CRON in (before.kind, after.kind)
    return (before.kind, before.cron, before.every, before.anchor, before.timezone if zoned else None) != (
        after.kind,
        after.cron,
        after.every,
        after.anchor,
        after.timezone if zoned else None,
    )


def owed_before_edit(before: Schedule, watermark: datetime, now: datetime, *, paused: Sequence[Period] = ()) -> Plan:
    """The slots ``before``'s rhythm owed in ``(watermark, now]`` that no scheduler decided, as
    misses: an edit at ``now`` replaces that rhythm, and its new one owes only the slots after
    the edit. ``paused``: the spans it was paused in since the watermark (``pause_spans``); a
    slot that fell in one was the pause's (``paused``), whatever the edit did, and every other
    one the edit's (``edited``), slot by slot (found by a review: one reason for all, taken
    from the state at the edit). Older slots past those recorded are counted in a warning."""
    if before.kind is ScheduleKind.SAFE_MODE or not before.kind.timed or now <= watermark:
        return Plan((), (), watermark)
    spans = tuple(paused) or ((Period(watermark),) if before.paused else ())  # paused since before it
    held = plan(replace(before, paused=True), watermark=watermark, now=now)
    misses = tuple(
        Miss(m.schedule_id, m.fire_at, MissReason.PAUSED if within(m.fire_at, spans) else MissReason.EDITED)
        for m in held.misses
    )
    return Plan((), misses, held.watermark, tuple(w.replace("(paused)", "(edited)") for w in held.warnings))


def windows_after_edit(before: Schedule, after: Schedule, now: datetime) -> Schedule:
    """A batch window's grid after an edit: no window may overlap one that closed already (it
    ran, or was owed), and none may be left out. Windows of a new length start where the last
    window of the old grid that closed by ``now`` ended. A new anchor is accepted when it puts
    a window boundary there (the grid from that boundary on), or while the stored grid has not
    begun; any other anchor is refused, naming the boundary: its windows would cut across a
    window already run, or leave the time up to the first of them out."""
    if before.kind is not ScheduleKind.BATCH_WINDOW or after.kind is not ScheduleKind.BATCH_WINDOW:
        return after
    if before.every == after.every and before.anchor == after.anchor:
        return after
    assert after.every is not None
    if before.anchor.astimezone(UTC) > now:
        return after  # the stored grid has not begun: no window of it has closed
    # The end of the last window closed by now: the stored grid's, or its anchor itself, which
    # an earlier edit set to where the grid before it ended (so the rule holds across edits).
    boundary = regrid(before, now)
    anchor = after.anchor.astimezone(UTC)
    if before.anchor == after.anchor or (anchor <= boundary and (boundary - anchor) % after.every == timedelta(0)):
        return replace(after, anchor=boundary)
    raise ValidationError(
        f"windows from this anchor would overlap the window that closed at {isoformat_utc(boundary)}"
        " or leave the time after it out: name an anchor a whole number of windows before or at"
        f" {isoformat_utc(boundary)} (or add the schedule under a new id to start another grid)",
        field="anchor",
        source=after.schedule_id,
    )
