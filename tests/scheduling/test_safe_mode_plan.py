"""Safe-mode schedules: slots only inside safe-mode periods, counted from each activation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobgate.core.errors import ValidationError
from jobgate.scheduling.model import MisfirePolicy, Schedule, ScheduleKind, check_schedule
from jobgate.scheduling.plan import MissReason, Period, next_fires, plan_periods

T0 = datetime(2026, 6, 25, 18, 30, 7, tzinfo=UTC)
MIN = timedelta(minutes=1)


def safe(**kw: object) -> Schedule:
    return check_schedule(Schedule("sm", "JOB", ScheduleKind.SAFE_MODE, T0 - 30 * MIN, **kw))  # type: ignore[arg-type]


def fired(p: object) -> list[datetime]:
    return [f.fire_at for f in p.fires]  # type: ignore[attr-defined]


def test_nothing_is_owed_and_the_watermark_stays_while_safe_mode_was_never_on() -> None:
    p = plan_periods(safe(every=10 * MIN), watermark=T0, now=T0 + 60 * MIN, periods=[])
    assert p.fires == () and p.misses == () and p.watermark == T0


def test_a_one_shot_safe_mode_schedule_fires_once_at_the_activation() -> None:
    s = safe()
    p = plan_periods(s, watermark=T0, now=T0 + 5 * MIN, periods=[Period(T0 + 2 * MIN)])
    assert fired(p) == [T0 + 2 * MIN] and p.watermark == T0 + 5 * MIN
    again = plan_periods(s, watermark=p.watermark, now=T0 + 50 * MIN, periods=[Period(T0 + 2 * MIN)])
    assert again.fires == ()
    assert next_fires(s, T0, 5) == []  # nothing to show before an activation


def test_an_interval_repeats_from_the_activation_until_the_deactivation() -> None:
    s = safe(every=10 * MIN, misfire=MisfirePolicy.FIRE_ALL)
    period = Period(T0 + 1 * MIN, T0 + 36 * MIN)
    edge = plan_periods(s, watermark=T0, now=T0 + 40 * MIN, periods=[Period(T0 + 1 * MIN, T0 + 31 * MIN)])
    assert fired(edge)[-1] == T0 + 21 * MIN  # a slot at the deactivation instant is already off
    p = plan_periods(s, watermark=T0, now=T0 + 36 * MIN, periods=[period])
    assert fired(p) == [T0 + 1 * MIN, T0 + 11 * MIN, T0 + 21 * MIN, T0 + 31 * MIN]
    assert p.watermark == T0 + 36 * MIN - timedelta(microseconds=1)  # off from the deactivation on
    later = plan_periods(s, watermark=p.watermark, now=T0 + 300 * MIN, periods=[period])
    assert later.fires == () and later.watermark == p.watermark  # switched off: nothing more


def test_a_cron_safe_mode_schedule_fires_at_activation_then_on_its_cron() -> None:
    s = safe(cron="*/15 * * * *", misfire=MisfirePolicy.FIRE_ALL)
    p = plan_periods(s, watermark=T0 - MIN, now=T0 + 40 * MIN, periods=[Period(T0)])
    quarter = datetime(2026, 6, 25, 18, 45, tzinfo=UTC)
    assert fired(p) == [T0, quarter, quarter + 15 * MIN]


def test_late_slots_follow_the_misfire_policy_measured_from_now() -> None:
    s = safe(every=10 * MIN)  # fire_once, 60 s grace
    period = Period(T0, T0 + 25 * MIN)
    p = plan_periods(s, watermark=T0 - MIN, now=T0 + 3 * 60 * MIN, periods=[period])
    assert fired(p) == [T0 + 20 * MIN] and all(f.late for f in p.fires)
    assert [(m.fire_at, m.reason) for m in p.misses] == [
        (T0, MissReason.COALESCED),
        (T0 + 10 * MIN, MissReason.COALESCED),
    ]


def test_every_period_since_the_watermark_is_planned_even_if_several_came_and_went() -> None:
    s = safe(misfire=MisfirePolicy.FIRE_ALL)
    periods = [Period(T0 + 5 * MIN, T0 + 6 * MIN), Period(T0 + 9 * MIN, T0 + 12 * MIN), Period(T0 + 20 * MIN)]
    p = plan_periods(s, watermark=T0, now=T0 + 30 * MIN, periods=periods)
    assert fired(p) == [T0 + 5 * MIN, T0 + 9 * MIN, T0 + 20 * MIN]


def test_an_activation_recorded_just_behind_the_last_tick_still_fires() -> None:
    """The watermark never crosses time without a period, so a late-seen activation is not lost."""
    s = safe()
    first = plan_periods(s, watermark=T0, now=T0 + 10 * MIN, periods=[])
    assert first.watermark == T0
    p = plan_periods(s, watermark=first.watermark, now=T0 + 10 * MIN + 1 * MIN, periods=[Period(T0 + 9 * MIN)])
    assert fired(p) == [T0 + 9 * MIN]


def test_a_paused_safe_mode_schedule_records_its_slots_as_paused() -> None:
    s = safe(every=10 * MIN, paused=True)
    p = plan_periods(s, watermark=T0, now=T0 + 25 * MIN, periods=[Period(T0 + MIN)])
    assert p.fires == () and {m.reason for m in p.misses} == {MissReason.PAUSED} and len(p.misses) == 3


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"cron": "0 * * * *", "every": MIN}, "cron"),
        ({"cron": "61 * * * *"}, "cron"),
        ({"every": timedelta(milliseconds=10)}, "every"),
        ({"condition": "x > 1"}, "condition"),
    ],
)
def test_a_bad_safe_mode_schedule_is_refused_naming_the_field(kw: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as err:
        safe(**kw)
    assert err.value.field == field


instants = st.integers(min_value=0, max_value=6 * 60).map(lambda m: T0 + m * MIN)


@settings(max_examples=150, deadline=None)
@given(
    every=st.integers(min_value=1, max_value=90),
    edges=st.lists(instants, min_size=0, max_size=6, unique=True),
    ticks=st.lists(instants, max_size=8),
)
def test_ticking_often_or_once_owes_the_same_fires(every: int, edges: list[datetime], ticks: list[datetime]) -> None:
    """Plans over a range equal the union of plans over its sub-ranges, across any periods."""
    s = safe(every=every * MIN, misfire=MisfirePolicy.FIRE_ALL, max_catchup=10_000)
    edges = sorted(edges)
    periods = [Period(edges[i], edges[i + 1] if i + 1 < len(edges) else None) for i in range(0, len(edges), 2)]
    end = T0 + 7 * 60 * MIN
    whole = plan_periods(s, watermark=T0 - MIN, now=end, periods=periods)
    mark, pieces = T0 - MIN, []
    for tick in [*sorted(ticks), end]:
        part = plan_periods(s, watermark=mark, now=max(tick, mark), periods=periods)
        pieces += part.fires
        mark = part.watermark
    assert sorted(f.trigger_id for f in pieces) == sorted(f.trigger_id for f in whole.fires)
    assert len({f.trigger_id for f in pieces}) == len(pieces)


def test_a_safe_mode_schedules_pause_with_no_tick_between_is_honoured() -> None:
    """Found by a review: paused and resumed during safe mode with no scheduler running between:
    the slots that fell in the pause ran. They are recorded paused, as for any schedule."""
    s = safe(every=5 * MIN, misfire=MisfirePolicy.FIRE_ALL)
    pause = (Period(T0 + 6 * MIN, T0 + 17 * MIN),)
    p = plan_periods(s, watermark=T0, now=T0 + 21 * MIN, periods=[Period(T0)], paused=pause)
    assert [m.fire_at for m in p.misses if m.reason is MissReason.PAUSED] == [T0 + 10 * MIN, T0 + 15 * MIN]
    assert [f.fire_at for f in p.fires] == [T0 + 5 * MIN, T0 + 20 * MIN]


def test_a_period_left_undecided_holds_back_the_periods_after_it() -> None:
    """Found by a review: paused again after two activations with no tick between, the first
    activation's slots (owed while active) were left undecided and the second period's plan
    then moved the watermark past them: dropped without a record. Planning stops there."""
    s = safe(every=MIN, misfire=MisfirePolicy.FIRE_ALL, paused=True)
    periods = [Period(T0, T0 + 4 * MIN), Period(T0 + 5 * MIN)]
    p = plan_periods(s, watermark=T0 - MIN, now=T0 + 8 * MIN, periods=periods, paused=(Period(T0 + 6 * MIN),))
    assert p.fires == () and p.misses == () and p.watermark < T0
