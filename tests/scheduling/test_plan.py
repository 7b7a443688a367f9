"""Plans: intervals and batch windows, misfire policies after downtime, determinism, magic params."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobgate.core.errors import ValidationError
from jobgate.scheduling import plan as plan_module
from jobgate.scheduling.model import MisfirePolicy, OverlapPolicy, Schedule, ScheduleKind, check_schedule
from jobgate.scheduling.plan import (
    MAX_RECORDED_MISSES,
    MissReason,
    Period,
    apply_overlap,
    legacy_window_slot,
    next_fires,
    owed_before_edit,
    parse_slot,
    plan,
    slots,
    windows_after_edit,
)

T0 = datetime(2026, 3, 1, 0, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)
MINUTE = timedelta(minutes=1)


def hourly(misfire: MisfirePolicy = MisfirePolicy.FIRE_ONCE, **kw: object) -> Schedule:
    return check_schedule(
        Schedule("hourly", "job", ScheduleKind.CRON, T0, cron="0 * * * *", misfire=misfire, **kw)  # type: ignore[arg-type]
    )


def window(size: timedelta = HOUR, anchor: datetime = T0) -> Schedule:
    return check_schedule(Schedule("win", "job", ScheduleKind.BATCH_WINDOW, anchor, every=size))


def interval(every: timedelta, anchor: datetime = T0) -> Schedule:
    return check_schedule(Schedule("int", "job", ScheduleKind.INTERVAL, anchor, every=every))


# --- intervals and windows -------------------------------------------------------------------


def test_interval_fires_at_the_anchor_and_every_period_after() -> None:
    got = [s.fire_at for s in slots(interval(timedelta(minutes=25)), T0 - HOUR, T0 + HOUR)]
    assert got == [T0, T0 + timedelta(minutes=25), T0 + timedelta(minutes=50)]
    assert next(s.fire_at for s in slots(interval(timedelta(minutes=25)), T0, T0 + HOUR)) == T0 + timedelta(minutes=25)


def test_batch_windows_are_half_open_and_fire_when_they_close() -> None:
    got = list(slots(window(), T0, T0 + 3 * HOUR))
    assert [(s.window.start, s.window.end) for s in got if s.window] == [
        (T0, T0 + HOUR),
        (T0 + HOUR, T0 + 2 * HOUR),
        (T0 + 2 * HOUR, T0 + 3 * HOUR),
    ]
    assert [s.fire_at for s in got] == [T0 + HOUR, T0 + 2 * HOUR, T0 + 3 * HOUR]
    # A window that has not closed yet does not fire; one closing exactly at 'until' does.
    assert list(slots(window(), T0, T0 + HOUR - timedelta(microseconds=1))) == []
    assert len(list(slots(window(), T0, T0 + HOUR))) == 1


def test_batch_window_bounds_enter_the_fire_and_its_params() -> None:
    s = check_schedule(
        Schedule(
            "win",
            "job",
            ScheduleKind.BATCH_WINDOW,
            T0,
            every=HOUR,
            params={"from": "{{window_start}}", "to": "{{window_end}}"},
        )
    )
    (fire,) = plan(s, watermark=T0, now=T0 + HOUR).fires
    assert fire.window is not None and (fire.window.start, fire.window.end) == (T0, T0 + HOUR)
    assert fire.params == {"from": "2026-03-01T00:00:00Z", "to": "2026-03-01T01:00:00Z"}


kinds = st.sampled_from(["cron", "interval", "window"])
instants = st.integers(min_value=0, max_value=20 * 24 * 3600).map(lambda s: T0 + timedelta(seconds=s))


def schedule_of(kind: str, period_minutes: int) -> Schedule:
    every = timedelta(minutes=period_minutes)
    if kind == "cron":
        return check_schedule(
            Schedule(
                "c",
                "job",
                ScheduleKind.CRON,
                T0,
                timezone="Europe/Oslo",
                cron=f"*/{period_minutes % 59 + 1} 1-23/2 * * *",
            )
        )
    if kind == "interval":
        return interval(every, anchor=T0 + timedelta(minutes=7))
    return window(every, anchor=T0 + timedelta(minutes=7))


@settings(max_examples=150, deadline=None)
@given(kind=kinds, period=st.integers(min_value=1, max_value=600), a=instants, b=instants, c=instants)
def test_slots_over_a_range_are_the_union_of_slots_over_its_parts(
    kind: str, period: int, a: datetime, b: datetime, c: datetime
) -> None:
    a, b, c = sorted((a, b, c))
    s = schedule_of(kind, period)
    whole = list(slots(s, a, c))
    assert whole == list(slots(s, a, b)) + list(slots(s, b, c))
    assert all(a < x.fire_at <= c for x in whole)
    assert [x.fire_at for x in whole] == sorted({x.fire_at for x in whole})  # ascending, no duplicates


@settings(max_examples=100, deadline=None)
@given(kind=kinds, period=st.integers(min_value=1, max_value=600), start=instants, steps=st.lists(instants, max_size=6))
def test_planning_in_steps_makes_each_on_time_fire_exactly_once(
    kind: str, period: int, start: datetime, steps: list[datetime]
) -> None:
    # A scheduler that wakes up at arbitrary moments (each within the grace period of the
    # previous) makes the same fires as one that planned the whole range at once.
    s = schedule_of(kind, period)
    grace = timedelta(days=30)
    s = check_schedule(Schedule(**{**s.__dict__, "misfire_grace": grace}))
    ends = sorted(t for t in steps if t > start)
    made, watermark = [], start
    for now in ends:
        p = plan(s, watermark=watermark, now=now)
        made += [f.trigger_id for f in p.fires]
        watermark = p.watermark
    if ends:
        assert made == [f.trigger_id for f in plan(s, watermark=start, now=ends[-1]).fires]
    assert len(made) == len(set(made))


def test_same_inputs_same_plan() -> None:
    s = hourly(MisfirePolicy.FIRE_ALL)
    assert plan(s, watermark=T0, now=T0 + 5 * HOUR) == plan(s, watermark=T0, now=T0 + 5 * HOUR)
    assert plan(s, watermark=T0 + 5 * HOUR, now=T0 + 5 * HOUR).fires == ()


# --- misfires after downtime -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("downtime", "policy", "fires", "late", "misses", "reason"),
    [
        # 3 hours down, woken 10 s after the 03:00 slot: 01:00 and 02:00 are late, 03:00 on time.
        (3 * HOUR, MisfirePolicy.FIRE_ONCE, 2, 1, 1, MissReason.COALESCED),
        (3 * HOUR, MisfirePolicy.FIRE_ALL, 3, 2, 0, None),
        (3 * HOUR, MisfirePolicy.SKIP, 1, 0, 2, MissReason.SKIPPED),
        # 3 days down: 72 slots, 71 late; fire_all stops at max_catchup=24 and records the rest.
        (72 * HOUR, MisfirePolicy.FIRE_ONCE, 2, 1, 70, MissReason.COALESCED),
        (72 * HOUR, MisfirePolicy.FIRE_ALL, 25, 24, 47, MissReason.BEYOND_MAX_CATCHUP),
        (72 * HOUR, MisfirePolicy.SKIP, 1, 0, 71, MissReason.SKIPPED),
    ],
)
def test_misfire_policies_after_downtime(
    downtime: timedelta, policy: MisfirePolicy, fires: int, late: int, misses: int, reason: MissReason | None
) -> None:
    s = hourly(policy, max_catchup=24, misfire_grace=timedelta(seconds=60))
    p = plan(s, watermark=T0, now=T0 + downtime + timedelta(seconds=10))
    assert len(p.fires) == fires
    assert sum(f.late for f in p.fires) == late
    assert len(p.misses) == misses
    assert all(m.reason is reason for m in p.misses)
    assert p.fires[-1].fire_at == T0 + downtime and not p.fires[-1].late  # the slot just due is on time
    # Every owed slot is accounted for exactly once: made or recorded as missed.
    accounted = sorted([f.fire_at for f in p.fires] + [m.fire_at for m in p.misses])
    assert accounted == [T0 + k * HOUR for k in range(1, int(downtime / HOUR) + 1)]
    assert bool(p.warnings) == (reason is MissReason.BEYOND_MAX_CATCHUP)


def test_fire_all_catches_up_the_most_recent_slots_in_order() -> None:
    # Woken at 10:00:30: 01:00-09:00 are late, 10:00 is within the grace period.
    p = plan(hourly(MisfirePolicy.FIRE_ALL, max_catchup=3), watermark=T0, now=T0 + 10 * HOUR + timedelta(seconds=30))
    assert [f.fire_at for f in p.fires] == [T0 + k * HOUR for k in (7, 8, 9, 10)]
    assert [f.late for f in p.fires] == [True, True, True, False]
    assert "max_catchup" in p.warnings[0] and "6 from 2026-03-01T01:00:00Z to 2026-03-01T06:00:00Z" in p.warnings[0]


def test_fire_once_coalesces_into_the_latest_missed_slot() -> None:
    p = plan(hourly(MisfirePolicy.FIRE_ONCE), watermark=T0, now=T0 + 3 * HOUR + timedelta(minutes=30))
    assert [f.fire_at for f in p.fires] == [T0 + 3 * HOUR]
    assert [m.fire_at for m in p.misses] == [T0 + HOUR, T0 + 2 * HOUR]


def test_a_slot_within_its_grace_period_is_on_time() -> None:
    p = plan(
        hourly(MisfirePolicy.SKIP, misfire_grace=timedelta(minutes=5)),
        watermark=T0,
        now=T0 + HOUR + timedelta(minutes=4),
    )
    assert [f.late for f in p.fires] == [False]


def test_a_paused_schedule_records_its_slots_and_makes_nothing() -> None:
    p = plan(hourly(paused=True), watermark=T0, now=T0 + 3 * HOUR)
    assert p.fires == () and [m.reason for m in p.misses] == [MissReason.PAUSED] * 3
    assert p.watermark == T0 + 3 * HOUR


def test_slots_owed_while_active_wait_for_the_policy_when_paused_again_before_a_tick() -> None:
    """Found by a review: paused at 00:02, resumed at 01:30, paused again at 03:30 with no tick
    between: 02:00 and 03:00 fell while it was active, yet were recorded paused. They are
    left to the misfire policy for when it runs again; the slots of the first pause are paused."""
    spans = (Period(T0 + timedelta(minutes=2), T0 + HOUR + timedelta(minutes=30)), Period(T0 + 3.5 * HOUR))
    now = T0 + 4 * HOUR + timedelta(minutes=1)
    p = plan(hourly(MisfirePolicy.FIRE_ALL, paused=True), watermark=T0 + timedelta(minutes=1), now=now, paused=spans)
    assert p.fires == () and [(m.fire_at, m.reason) for m in p.misses] == [(T0 + HOUR, MissReason.PAUSED)]
    assert T0 + HOUR <= p.watermark < T0 + 2 * HOUR  # 02:00 is still owed
    resumed = plan(
        hourly(MisfirePolicy.FIRE_ALL),
        watermark=p.watermark,
        now=now + HOUR,
        paused=(Period(T0 + 3.5 * HOUR, now + timedelta(minutes=30)),),
    )
    assert [f.fire_at for f in resumed.fires] == [T0 + 2 * HOUR, T0 + 3 * HOUR, T0 + 5 * HOUR]
    assert [m.fire_at for m in resumed.misses] == [T0 + 4 * HOUR]


def test_more_paused_slots_than_are_recorded_are_counted_in_a_warning() -> None:
    """A one-second interval paused for four hours with no tick between: the oldest slots past
    the recorded ones are named by a warning, never dropped in silence."""
    every = interval(timedelta(seconds=1))
    span = (Period(T0 + timedelta(seconds=10), T0 + 4 * HOUR),)
    p = plan(every, watermark=T0, now=T0 + 4 * HOUR + timedelta(seconds=1), paused=span)
    paused = [m for m in p.misses if m.reason is MissReason.PAUSED]
    assert len(paused) == MAX_RECORDED_MISSES
    total = 4 * 3600 - 10
    assert any(f"{total - MAX_RECORDED_MISSES} older slots" in w and "(paused)" in w for w in p.warnings), p.warnings


# --- magic params and identities -----------------------------------------------------------


def test_magic_params_use_the_schedules_timezone() -> None:
    # 00:30 on 1 June in Oslo is still 31 May in UTC: the job gets Oslo's dates.
    s = check_schedule(
        Schedule(
            "pay",
            "export-payroll",
            ScheduleKind.CRON,
            T0,
            timezone="Europe/Oslo",
            cron="30 0 1 * *",
            params={"period": "{{current_month}}", "day": "{{ current_date }}", "prev": "{{yesterday}}", "x": "plain"},
        )
    )
    (fire,) = plan(
        s, watermark=datetime(2026, 5, 31, 12, tzinfo=UTC), now=datetime(2026, 5, 31, 22, 31, tzinfo=UTC)
    ).fires
    assert fire.fire_at == datetime(2026, 5, 31, 22, 30, tzinfo=UTC)
    assert fire.params == {"period": "2026-06", "day": "2026-06-01", "prev": "2026-05-31", "x": "plain"}


def test_unknown_magic_params_are_refused_when_the_schedule_is_checked() -> None:
    with pytest.raises(ValidationError) as err:
        hourly(params={"p": "{{current_year}}"})
    assert err.value.field == "params.p" and "current_year" in err.value.message


def test_trigger_ids_name_the_schedule_and_the_slot() -> None:
    p = plan(hourly(), watermark=T0, now=T0 + HOUR)
    assert [f.trigger_id for f in p.fires] == ["TGTRIG-hourly@2026-03-01T01:00:00Z"]


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"kind": ScheduleKind.INTERVAL}, "cron"),
        ({"kind": ScheduleKind.INTERVAL, "cron": None, "every": timedelta(0)}, "every"),
        ({"every": HOUR}, "every"),
        ({"max_catchup": 0}, "max_catchup"),
        ({"misfire_grace": timedelta(seconds=-1)}, "misfire_grace"),
        ({"schedule_id": "bad id!"}, "schedule_id"),
        ({"anchor": datetime(2026, 1, 1)}, "anchor"),
    ],
)
def test_invalid_schedules_are_refused_naming_the_field(changes: dict[str, object], field: str) -> None:
    base = {
        "schedule_id": "s",
        "job_definition_id": "job",
        "kind": ScheduleKind.CRON,
        "anchor": T0,
        "cron": "0 * * * *",
    }
    with pytest.raises(ValidationError) as err:
        check_schedule(Schedule(**{**base, **changes}))  # type: ignore[arg-type]
    assert err.value.field == field


# --- overlap ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overlap", "active", "made", "overlapping"),
    [
        (OverlapPolicy.ALLOW, True, [1, 2, 3], []),
        (OverlapPolicy.FORBID, False, [3], [1, 2]),
        (OverlapPolicy.FORBID, True, [], [1, 2, 3]),
        (OverlapPolicy.REPLACE, True, [3], [1, 2]),
        (OverlapPolicy.REPLACE, False, [3], [1, 2]),
    ],
)
def test_overlap_policies(overlap: OverlapPolicy, active: bool, made: list[int], overlapping: list[int]) -> None:
    s = hourly(MisfirePolicy.FIRE_ALL, overlap=overlap)
    fires = plan(s, watermark=T0, now=T0 + 3 * HOUR).fires
    kept, misses = apply_overlap(s, fires, active=active)
    assert [f.fire_at for f in kept] == [T0 + k * HOUR for k in made]
    assert [m.fire_at for m in misses] == [T0 + k * HOUR for k in overlapping]
    assert all(m.reason is MissReason.OVERLAP for m in misses)


def test_a_very_long_outage_keeps_memory_bounded_and_still_accounts_for_every_slot() -> None:
    s = check_schedule(
        Schedule("sec", "job", ScheduleKind.INTERVAL, T0, every=timedelta(seconds=1), misfire=MisfirePolicy.SKIP)
    )
    now = T0 + timedelta(hours=30)  # 108,000 one-second slots owed
    p = plan(s, watermark=T0, now=now)
    assert len(p.misses) == s.max_catchup + MAX_RECORDED_MISSES  # the most recent ones, one by one
    (warning,) = p.warnings
    unrecorded = int(warning.split(": ")[1].split(" ")[0])
    assert len(p.fires) + len(p.misses) + unrecorded == 108_000
    assert "from 2026-03-01T00:00:01Z" in warning  # the oldest unrecorded slot is named
    assert p.misses[-1].fire_at < p.fires[0].fire_at  # recorded misses are the newest late slots


def test_a_window_slot_names_its_start_and_end_and_reads_back_as_its_end() -> None:
    # A window ending at the same instant with another length is another slot.
    one, two = (plan(window(size), watermark=T0, now=T0 + 2 * HOUR).fires[-1] for size in (HOUR, 2 * HOUR))
    assert one.trigger_id == "TGTRIG-win@2026-03-01T01:00:00Z/2026-03-01T02:00:00Z"
    assert two.trigger_id == "TGTRIG-win@2026-03-01T00:00:00Z/2026-03-01T02:00:00Z"
    assert parse_slot(one.trigger_id) == parse_slot(two.trigger_id) == ("win", T0 + 2 * HOUR)
    assert legacy_window_slot(one.trigger_id) == legacy_window_slot(two.trigger_id) == "TGTRIG-win@2026-03-01T02:00:00Z"
    assert legacy_window_slot("TGTRIG-hourly@2026-03-01T01:00:00Z") is None
    assert legacy_window_slot("TGTRIG-s@config-1") is None and parse_slot("TGTRIG-s@config-1") is None
    assert parse_slot("TGTRIG-a@b@2026-03-01T01:00:00Z") == ("a@b", T0 + HOUR)


def test_a_rhythm_near_the_end_of_the_calendar_has_no_slots_past_it() -> None:
    """Found by a review: ``jobgate next`` of an interval anchored in year 9998 crashed (exit 70)."""
    late = datetime(9998, 12, 31, tzinfo=UTC)
    every = check_schedule(Schedule("g", "job", ScheduleKind.INTERVAL, late, every=timedelta(days=36600)))
    assert [s.fire_at for s in next_fires(every, late - HOUR, 3)] == [late]
    never = Schedule("w", "job", ScheduleKind.BATCH_WINDOW, late, every=timedelta(days=36600))
    assert next_fires(never, late - HOUR, 3) == []


@pytest.mark.parametrize(
    ("anchor", "every"),
    [
        (datetime(9999, 12, 31, 23, tzinfo=UTC), HOUR),  # found by a review: stored, then "internal error"
        (datetime(9998, 12, 31, tzinfo=UTC), timedelta(days=36600)),
        (T0, timedelta(days=3_000_000)),
    ],
)
def test_a_batch_window_whose_first_window_closes_past_the_calendar_is_refused(
    anchor: datetime, every: timedelta
) -> None:
    """Its first window would close after year 9999: it could never fire. Refused naming the
    anchor; one stored before this rule plans nothing and raises nothing, however long behind."""
    never = Schedule("w", "job", ScheduleKind.BATCH_WINDOW, anchor, every=every)
    with pytest.raises(ValidationError) as refused:
        check_schedule(never)
    assert refused.value.field == "anchor" and "could never fire" in refused.value.message
    for watermark in (anchor - HOUR, datetime(1, 1, 2, tzinfo=UTC)):
        done = plan(never, watermark=watermark, now=datetime(9999, 12, 31, 23, 59, tzinfo=UTC))
        assert done.fires == () and done.misses == ()
    assert next_fires(never, anchor - HOUR, 3) == []


def test_a_new_window_length_starts_where_the_last_closed_window_ended() -> None:
    """Found by a review: 1-hour windows ran to 03:00; at 03:30 the length became 2 hours and the
    next window was [02:00, 04:00), processing 02:00-03:00 twice. It is [03:00, 05:00)."""
    before = window(HOUR)
    after = windows_after_edit(before, window(2 * HOUR), T0 + 3.5 * HOUR)
    [first] = next_fires(after, T0 + 3.5 * HOUR, 1)
    assert first.window is not None and (first.window.start, first.window.end) == (T0 + 3 * HOUR, T0 + 5 * HOUR)
    assert windows_after_edit(before, window(HOUR), T0 + 3.5 * HOUR) == window(HOUR)  # same length: untouched


def test_a_new_anchor_never_makes_a_window_overlap_one_closed_or_leave_time_out() -> None:
    """Found by a review: hourly windows ran to 01:00 (from T0); at 01:10 the anchor moved to
    T0 + 30 min and the next window was [00:30, 01:30), processing 00:30-01:00 twice."""
    before, now = window(HOUR), T0 + HOUR + 10 * MINUTE
    for anchor in (T0 + 30 * MINUTE, T0 + 2 * HOUR, T0 + HOUR + MINUTE):
        with pytest.raises(ValidationError) as refused:
            windows_after_edit(before, window(HOUR, anchor), now)
        assert refused.value.field == "anchor" and "2026" in refused.value.message
    # an anchor on the grid of the boundary (at it, or whole windows before it): windows from it
    for anchor, size in ((T0 + HOUR, HOUR), (T0 - 5 * HOUR, HOUR), (T0 + HOUR - 30 * MINUTE, 30 * MINUTE)):
        after = windows_after_edit(before, window(size, anchor), now)
        [first] = next_fires(after, now, 1)
        assert first.window is not None and first.window.start == T0 + HOUR, anchor
    # the stored grid not begun yet: any anchor
    future = window(HOUR, T0 + 2 * HOUR)
    assert windows_after_edit(future, window(HOUR, T0 + 7 * MINUTE), T0 + 30 * MINUTE) == window(HOUR, T0 + 7 * MINUTE)


def test_a_length_edit_first_does_not_open_the_way_for_any_anchor() -> None:
    """Found by a regression review: a length edit stored the grid from the boundary, and the
    next edit found "no window closed" under it and accepted any anchor (a window cutting across
    the one just closed, or the time up to a future anchor left out)."""
    now = T0 + 20 * HOUR + 25 * MINUTE
    stored = windows_after_edit(window(HOUR), window(40 * MINUTE), now)
    assert stored.anchor == T0 + 20 * HOUR
    for anchor in (T0 + 19 * HOUR + 50 * MINUTE, T0 + 24 * HOUR):
        with pytest.raises(ValidationError):
            windows_after_edit(stored, window(40 * MINUTE, anchor), now)
    assert windows_after_edit(stored, window(20 * MINUTE, T0 + 19 * HOUR), now).anchor == T0 + 20 * HOUR


def test_the_slots_an_edit_replaces_are_recorded_edited() -> None:
    owed = owed_before_edit(hourly(MisfirePolicy.FIRE_ALL), T0, T0 + 3.5 * HOUR)
    assert owed.fires == () and [(m.fire_at, m.reason) for m in owed.misses] == [
        (T0 + h * HOUR, MissReason.EDITED) for h in (1, 2, 3)
    ]


def test_slots_owed_before_an_edit_are_the_pauses_or_the_edits_each_by_when_it_fell() -> None:
    """Found by a review: one reason for every slot, taken from the state at the edit; a pause
    and a resume with no scheduler between made the pause's slots ``edited``, and slots owed
    while active then paused were all ``paused``."""
    hourly_all = hourly(MisfirePolicy.FIRE_ALL)
    pause = (Period(T0 + 1.5 * HOUR, T0 + 3.5 * HOUR),)  # paused, then resumed, before the edit
    owed = owed_before_edit(hourly_all, T0, T0 + 4.5 * HOUR, paused=pause)
    assert [(m.fire_at, m.reason) for m in owed.misses] == [
        (T0 + HOUR, MissReason.EDITED),
        (T0 + 2 * HOUR, MissReason.PAUSED),
        (T0 + 3 * HOUR, MissReason.PAUSED),
        (T0 + 4 * HOUR, MissReason.EDITED),
    ]
    still = owed_before_edit(replace(hourly_all, paused=True), T0, T0 + 3.5 * HOUR, paused=(Period(T0 + 2.5 * HOUR),))
    assert [m.reason for m in still.misses] == [MissReason.EDITED, MissReason.EDITED, MissReason.PAUSED]
    paused_all_along = owed_before_edit(replace(hourly_all, paused=True), T0, T0 + 2.5 * HOUR)
    assert [m.reason for m in paused_all_along.misses] == [MissReason.PAUSED, MissReason.PAUSED]


@settings(max_examples=40, deadline=None)
@given(
    kind=st.sampled_from([ScheduleKind.INTERVAL, ScheduleKind.BATCH_WINDOW]),
    every_s=st.integers(1, 7),
    anchor_s=st.integers(-5000, 5000),
    behind_s=st.integers(0, 30_000),
    misfire=st.sampled_from(list(MisfirePolicy)),
    pause=st.one_of(st.none(), st.tuples(st.integers(0, 30_000), st.integers(1, 3_000))),
    paused_now=st.booleans(),
)
def test_counting_a_long_outages_slots_plans_as_walking_them(
    kind: ScheduleKind,
    every_s: int,
    anchor_s: int,
    behind_s: int,
    misfire: MisfirePolicy,
    pause: tuple[int, int] | None,
    paused_now: bool,
) -> None:
    """Found by a review: a 1-second interval 40 days behind took 9 s to plan (every slot
    walked), longer than the leader's lease; and a pause during the outage turned the counting
    off. The late slots past those a plan keeps are counted by arithmetic up to the first pause
    span: the plan is the one walking every slot gives."""
    s = check_schedule(
        Schedule(
            "s",
            "job",
            kind,
            T0 + timedelta(seconds=anchor_s),
            every=timedelta(seconds=every_s),
            misfire=misfire,
            paused=paused_now,
        )
    )
    now = T0 + timedelta(seconds=behind_s)
    spans = () if pause is None else (Period(T0 + timedelta(seconds=pause[0]), T0 + timedelta(seconds=sum(pause))),)
    counted = plan(s, watermark=T0, now=now, paused=spans)
    with mock.patch.object(plan_module, "_skip_beyond", lambda schedule, watermark, *rest: watermark):
        walked = plan(s, watermark=T0, now=now, paused=spans)
    assert counted == walked


def test_a_safe_mode_schedules_next_fires_are_shown_while_safe_mode_is_on() -> None:
    """Found by a review: ``jobgate next`` listed none for a safe-mode schedule while safe mode
    was on and it fired every two seconds. Off: none; on: its activation's grid from then on."""
    every = Schedule("sm", "job", ScheduleKind.SAFE_MODE, T0, every=HOUR)
    assert next_fires(every, T0 + 2.5 * HOUR, 3) == []  # safe mode off
    on = T0 + 2 * HOUR
    assert [s.fire_at for s in next_fires(every, T0 + 2.5 * HOUR, 3, safe_mode_since=on)] == [
        T0 + 3 * HOUR,
        T0 + 4 * HOUR,
        T0 + 5 * HOUR,
    ]
    assert [s.fire_at for s in next_fires(every, on - HOUR, 1, safe_mode_since=on)] == [on]  # its activation
