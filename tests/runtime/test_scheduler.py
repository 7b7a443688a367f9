"""The scheduler executes plans exactly once: restarts, two schedulers, downtime, refusals."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import text
from tests import helpers
from tests.helpers import count, make_config

from jobgate.core.errors import ValidationError
from jobgate.core.models import DefinitionStatus, TriggerType
from jobgate.core.records import AuditFilter
from jobgate.runtime.scheduler import LEADER_LOCK, Scheduler
from jobgate.scheduling.model import MisfirePolicy, OverlapPolicy, Schedule, ScheduleKind, check_schedule
from jobgate.service.engine import Engine
from jobgate.service.schedules import PutOutcome, backfill, put_schedules, recommend_interval
from jobgate.store.base import RunCreate, RunFilter
from jobgate.testing import FakeClock, connection
from jobgate.views.schemas import RunOut

T0 = datetime(2026, 3, 1, tzinfo=UTC)
HOUR = timedelta(hours=1)


def define(engine: Engine, **fields: object) -> str:
    """A definition these tests' schedules may fire (a trigger_type is enforced): cron, so it keeps
    a schedule of its own, on 29 February only: never due in the March 2026 the tests plan in."""
    return helpers.define(engine, **{"trigger_type": "cron", "schedule_expression": "0 0 29 2 *", **fields})


def add(engine: Engine, schedule: Schedule, watermark: datetime = T0) -> Schedule:
    schedule = check_schedule(schedule)
    with engine.store.write() as tx:
        tx.schedule_put(schedule, watermark=watermark, source="test", now=watermark)
    return schedule


def hourly(job: str, **kw: object) -> Schedule:
    return Schedule("hourly", job, ScheduleKind.CRON, T0, cron="0 * * * *", **kw)  # type: ignore[arg-type]


def scheduled_runs(engine: Engine) -> int:
    return count(engine, "job_runs", "requested_by = 'scheduler'")


def test_each_slot_becomes_one_run_and_a_second_tick_adds_nothing(engine: Engine) -> None:
    job = define(engine)
    add(engine, hourly(job))
    s = Scheduler(engine, owner="a")
    assert s.tick(T0 + 3 * HOUR + timedelta(seconds=5)).fired == 1 + 1  # coalesced catch-up + the on-time 03:00
    assert s.tick(T0 + 3 * HOUR + timedelta(seconds=6)).fired == 0
    assert scheduled_runs(engine) == 2
    assert s.tick(T0 + 4 * HOUR + timedelta(seconds=1)).fired == 1
    assert scheduled_runs(engine) == 3
    with engine.store.read() as tx:
        stored = tx.schedule_get("default", "hourly")
        misses = tx.misses_list("default", "hourly")
    assert stored is not None and stored.watermark == T0 + 4 * HOUR + timedelta(seconds=1)
    assert [(at, reason) for at, reason in misses] == [(T0 + HOUR, "coalesced")]


def test_runs_carry_the_slot_identity_and_rendered_params(engine: Engine) -> None:
    job = define(engine, params=[{"name": "day", "pattern": "[0-9-]{10}"}])
    add(engine, hourly(job, params={"day": "{{current_date}}"}, misfire=MisfirePolicy.FIRE_ALL))
    Scheduler(engine, owner="a").tick(T0 + 2 * HOUR)
    with engine.store.read() as tx:
        rows = (
            connection(tx)
            .execute(text("SELECT trigger_id, trigger_type, params FROM job_runs ORDER BY trigger_id"))
            .all()
        )
    assert [r[0] for r in rows] == ["TGTRIG-hourly@2026-03-01T01:00:00Z", "TGTRIG-hourly@2026-03-01T02:00:00Z"]
    assert {r[1] for r in rows} == {TriggerType.CRON.value}
    assert all('"day":"2026-03-01"' in r[2] for r in rows)


def test_a_restarted_scheduler_plans_from_the_stored_watermark(engine: Engine) -> None:
    job = define(engine)
    add(engine, hourly(job, misfire=MisfirePolicy.FIRE_ALL))
    Scheduler(engine, owner="first").tick(T0 + 2 * HOUR)
    # A new process (new owner) after the first one's lease expired: nothing is made twice.
    later = T0 + 2 * HOUR + timedelta(seconds=30)
    assert Scheduler(engine, owner="second").tick(later).fired == 0
    assert scheduled_runs(engine) == 2


def test_only_the_leader_fires_and_a_standby_takes_over_when_the_lease_expires(engine: Engine) -> None:
    job = define(engine)
    add(engine, hourly(job, misfire=MisfirePolicy.FIRE_ALL))
    leader = Scheduler(engine, owner="leader", lease=timedelta(seconds=10))
    standby = Scheduler(engine, owner="standby", lease=timedelta(seconds=10))
    assert leader.tick(T0 + HOUR).leader
    assert not standby.tick(T0 + HOUR + timedelta(seconds=1)).leader
    assert scheduled_runs(engine) == 1
    # The leader dies (stops renewing); after the lease the standby leads and fires 02:00 once.
    result = standby.tick(T0 + 2 * HOUR)
    assert result.leader and result.fired == 1
    assert scheduled_runs(engine) == 2
    # The old leader comes back: its lease is gone, it is a standby now and writes nothing.
    assert not leader.tick(T0 + 2 * HOUR + timedelta(seconds=2)).leader
    assert scheduled_runs(engine) == 2


def test_a_plan_made_by_a_deposed_leader_is_not_executed(engine: Engine) -> None:
    job = define(engine)
    add(engine, hourly(job))
    old = Scheduler(engine, owner="old", lease=timedelta(seconds=10))
    assert old.hold_leadership(T0) is not None
    new = Scheduler(engine, owner="new", lease=timedelta(seconds=10))
    assert new.tick(T0 + HOUR).fired == 1  # the old lease expired at T0 + 10 s
    # The old one still believes its token is current (renewal not due yet by its own clock):
    old._lease._renew_at = T0 + 2 * HOUR
    assert old.tick(T0 + 2 * HOUR - timedelta(seconds=1)).fired == 0
    assert scheduled_runs(engine) == 1
    with engine.store.read() as tx:
        owner = connection(tx).execute(text("SELECT owner FROM locks WHERE name = :n"), {"n": LEADER_LOCK}).scalar_one()
    assert owner == "new"


def test_a_refused_fire_is_recorded_not_dropped(engine: Engine) -> None:
    job = define(engine)
    add(engine, hourly(job))
    with engine.store.write() as tx:
        tx.definition_set_status("default", job, DefinitionStatus.SUSPENDED, T0)
    result = Scheduler(engine, owner="a").tick(T0 + HOUR)
    assert result.fired == 0 and result.missed == 1
    assert scheduled_runs(engine) == 0
    with engine.store.read() as tx:
        assert tx.misses_list("default", "hourly") == [(T0 + HOUR, "refused")]


def test_fires_refused_under_the_lock_are_each_recorded_at_their_slot(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by a review: slots refused at commit (a revocation, the licence's slots) were all
    recorded at the tick's instant, and the misses table, keyed by instant, kept one of them."""
    from jobgate.core.errors import GovernanceRefusal

    job = define(engine)
    add(engine, hourly(job, misfire=MisfirePolicy.FIRE_ALL))

    create = engine.pipeline.create

    def refused(tx: object, prepared: list[object], *args: object, **kwargs: object) -> object:
        if prepared:  # what the lock shows refuses every fire of the tick
            raise GovernanceRefusal("the licence's slots are full", code="trust_gate_refused")
        return create(tx, prepared, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(engine.pipeline, "create", refused)
    result = Scheduler(engine, owner="a").tick(T0 + 3 * HOUR + timedelta(minutes=10))
    assert result.fired == 0 and result.missed == 3
    with engine.store.read() as tx:
        assert tx.misses_list("default", "hourly") == [(T0 + k * HOUR, "refused") for k in (1, 2, 3)]


def test_a_paused_schedule_fires_nothing_and_records_its_slots(engine: Engine) -> None:
    job = define(engine)
    add(engine, hourly(job, paused=True))
    assert Scheduler(engine, owner="a").tick(T0 + 2 * HOUR).fired == 0
    with engine.store.read() as tx:
        assert [r for _, r in tx.misses_list("default", "hourly")] == ["paused", "paused"]


def test_batch_windows_fire_once_per_closed_window(engine: Engine) -> None:
    job = helpers.define(engine, trigger_type="batch_window")
    add(engine, Schedule("win", job, ScheduleKind.BATCH_WINDOW, T0, every=HOUR, misfire=MisfirePolicy.FIRE_ALL))
    s = Scheduler(engine, owner="a")
    s.tick(T0 + 2 * HOUR + timedelta(minutes=30))
    s.tick(T0 + 3 * HOUR)
    with engine.store.read() as tx:
        rows = connection(tx).execute(text('SELECT "trigger" FROM job_runs ORDER BY created_at')).all()
    assert len(rows) == 3
    assert '"window":["2026-03-01T02:00:00Z","2026-03-01T03:00:00Z"]' in rows[-1][0]


def test_a_schedule_with_the_longest_id_it_may_have_fires(engine: Engine) -> None:
    """Found by a review: a run's trigger id (``TGTRIG-<schedule>@<slot>``) did not fit its
    column for a schedule id near the 200 characters allowed, and such a schedule never fired
    on PostgreSQL; a batch window's slot names its start and end, longer still."""
    from jobgate.scheduling.model import MAX_SCHEDULE_ID

    cron, windows = define(engine), helpers.define(engine, trigger_type="batch_window")
    long_cron, long_window = "c" * MAX_SCHEDULE_ID, "w" * MAX_SCHEDULE_ID
    add(engine, Schedule(long_cron, cron, ScheduleKind.CRON, T0, cron="0 * * * *"))
    add(engine, Schedule(long_window, windows, ScheduleKind.BATCH_WINDOW, T0, every=HOUR))
    result = Scheduler(engine, owner="a").tick(T0 + HOUR + timedelta(seconds=1))
    assert result.fired == 2
    with engine.store.read() as tx:
        ids = sorted(r[0] for r in connection(tx).execute(text("SELECT trigger_id FROM job_runs")).all())
    assert [i.split("@")[0] for i in ids] == [f"TGTRIG-{long_cron}", f"TGTRIG-{long_window}"]


def test_a_failing_schedule_is_marked_backs_off_and_never_delays_the_others(engine: Engine) -> None:
    from jobgate.service import doctor

    job = define(engine)
    add(engine, hourly(job))
    add(engine, Schedule("broken", job, ScheduleKind.CRON, T0, cron="30 * * * *"))
    with engine.store.write() as tx:  # a row no plan can use (written by hand, or an older version)
        connection(tx).execute(text("UPDATE schedules SET timezone = 'Mars/Olympus' WHERE schedule_id = 'broken'"))
    s = Scheduler(engine, owner="a")
    assert s.tick(T0 + HOUR).fired == 1  # the healthy schedule fired; the broken one did not stop it
    with engine.store.read() as tx:
        broken = tx.schedule_get("default", "broken")
    assert broken is not None and broken.state == "failing" and broken.failures == 1
    assert broken.last_error == "internal error (ZoneInfoNotFoundError)"
    assert broken.retry_at == T0 + HOUR + timedelta(seconds=2)
    (check,) = [c for c in doctor.run_checks(engine) if c.name == "schedules"]
    assert check.level is doctor.Level.AMBER and "broken (1 in a row" in check.detail
    s.tick(T0 + HOUR + timedelta(seconds=1))  # backing off: not tried
    with engine.store.read() as tx:
        assert tx.schedule_get("default", "broken").failures == 1  # type: ignore[union-attr]
    s.tick(T0 + HOUR + timedelta(seconds=2))  # tried, failed again: the back-off doubles
    with engine.store.read() as tx:
        again = tx.schedule_get("default", "broken")
    assert again is not None and again.failures == 2 and again.retry_at == T0 + HOUR + timedelta(seconds=6)
    with engine.store.write() as tx:
        connection(tx).execute(text("UPDATE schedules SET timezone = 'UTC' WHERE schedule_id = 'broken'"))
    # Healed: the 00:30 slot it owed while failing is caught up by its misfire policy (fire_once: one
    # late run), and 01:30 fires on time.
    assert s.tick(T0 + HOUR + timedelta(minutes=31)).fired == 2
    with engine.store.read() as tx:
        healed = tx.schedule_get("default", "broken")
    assert healed is not None and healed.state == "active" and healed.last_error is None
    (check,) = [c for c in doctor.run_checks(engine) if c.name == "schedules"]
    assert check.level is doctor.Level.GREEN


def test_refused_fires_wait_out_no_back_off_each_slot_keeps_its_own_cause(engine: Engine) -> None:
    """Found by a review: refused fires backed the schedule off like a failing plan, so under
    ``skip`` the slots due meanwhile (refused ones, and after an approval admitted ones) were
    recorded ``skipped`` as if the scheduler had been down, and an approved definition waited up
    to five minutes. Each slot is now decided when it falls due: refused, then run."""
    from jobgate.service import approvals

    job = define(engine, approve=False)
    minute = Schedule("minutely", job, ScheduleKind.CRON, T0, cron="* * * * *", misfire=MisfirePolicy.SKIP)
    add(engine, minute)
    s = Scheduler(engine, owner="a")
    for k in range(1, 9):  # eight slots refused one after the other, each ticked on time
        s.tick(T0 + k * timedelta(minutes=1) + timedelta(seconds=1))
    with engine.store.read() as tx:
        stored = tx.schedule_get("default", "minutely")
    last_tick = T0 + 8 * timedelta(minutes=1) + timedelta(seconds=1)
    assert stored is not None and stored.state == "failing"
    assert stored.retry_at is None or stored.retry_at <= last_tick  # tried again at the next tick
    approvals.approve(engine, "default", job, actor="admin")
    for k in range(9, 12):  # the minutes right after the approval: each slot runs on time
        assert s.tick(T0 + k * timedelta(minutes=1) + timedelta(seconds=1)).fired == 1
    with engine.store.read() as tx:
        misses = tx.misses_list("default", "minutely")
        healed = tx.schedule_get("default", "minutely")
    assert misses == [(T0 + k * timedelta(minutes=1), "refused") for k in range(1, 9)]
    assert healed is not None and healed.state == "active" and scheduled_runs(engine) == 3


def test_a_refusal_streak_warns_once_and_a_later_failure_backs_off_from_the_start(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """Found by a regression review: with no back-off, a fast schedule refused for a day wrote two
    warnings a slot; and the first real failure after a streak of refusals waited the longest
    back-off (5 min), counted over the refusals."""
    job = define(engine, approve=False)
    add(engine, Schedule("minutely", job, ScheduleKind.CRON, T0, cron="* * * * *"))
    s = Scheduler(engine, owner="a")
    caplog.set_level("DEBUG", logger="jobgate.scheduler")
    for k in range(1, 11):
        s.tick(T0 + k * timedelta(minutes=1) + timedelta(seconds=1))
    warned = [r for r in caplog.records if r.levelname == "WARNING" and r.name == "jobgate.scheduler"]
    assert len(warned) == 2, [r.getMessage() for r in warned]  # refused, failing: once each
    assert count(engine, "audit_log", "action = 'run.refused'") == 10  # every slot still audited
    with engine.store.write() as tx:  # now a plan that fails outright
        connection(tx).execute(text("UPDATE schedules SET timezone = 'Mars/Olympus' WHERE schedule_id = 'minutely'"))
    at = T0 + 11 * timedelta(minutes=1) + timedelta(seconds=1)
    s.tick(at)
    with engine.store.read() as tx:
        broken = tx.schedule_get("default", "minutely")
    assert broken is not None and broken.retry_at == at + timedelta(seconds=2)


def test_refused_fires_mark_the_schedule_failing_until_one_is_admitted(engine: Engine) -> None:
    job = define(engine, approve=False)
    add(engine, hourly(job))
    s = Scheduler(engine, owner="a")
    assert s.tick(T0 + HOUR).fired == 0
    with engine.store.read() as tx:
        stored = tx.schedule_get("default", "hourly")
        misses = tx.misses_list("default", "hourly")
    assert stored is not None and stored.state == "failing" and "no admin approval" in (stored.last_error or "")
    assert misses == [(T0 + HOUR, "refused")]
    # Found by a review: a tick after the back-off with nothing due called it recovered (active,
    # green) though its next fire would be refused as well. Failing until a fire is admitted.
    from jobgate.service import approvals

    s.tick(T0 + HOUR + timedelta(minutes=30))
    with engine.store.read() as tx:
        still = tx.schedule_get("default", "hourly")
    assert still is not None and still.state == "failing"
    approvals.approve(engine, "default", job, actor="admin")
    s.tick(T0 + 2 * HOUR + timedelta(minutes=1))
    with engine.store.read() as tx:
        healed = tx.schedule_get("default", "hourly")
    assert healed is not None and healed.state == "active" and count(engine, "job_runs") == 1


# --- backfill ------------------------------------------------------------------------------


def test_backfill_makes_one_run_per_slot_and_nothing_on_a_second_request(engine: Engine) -> None:
    job = define(engine)
    add(engine, hourly(job), watermark=T0 + 100 * HOUR)
    first = backfill(
        engine, tenant_id="default", job_definition_id=job, schedule_id="hourly", start=T0, end=T0 + 5 * HOUR
    )
    assert [s.fire_at for s in first] == [T0 + k * HOUR for k in range(5)]  # [from, to): 00:00 in, 05:00 out
    assert all(s.created for s in first)
    again = backfill(
        engine, tenant_id="default", job_definition_id=job, schedule_id="hourly", start=T0, end=T0 + 5 * HOUR
    )
    assert not any(s.created for s in again)
    assert [s.job_run_id for s in again] == [s.job_run_id for s in first]
    assert count(engine, "job_runs") == 5


def test_a_schedule_given_again_as_it_is_stored_is_left_untouched(engine: Engine) -> None:
    """Found by a review: adding the same schedule again said "updated" and moved its
    ``updated_at``. Given as stored, from the same source: nothing written, nothing recorded;
    any difference (a field, the source) is an update."""
    job = define(engine)
    when = [T0, T0 + HOUR, T0 + 2 * HOUR, T0 + 3 * HOUR]
    ops = {"source": "cli", "actor": "ops"}
    assert put_schedules(engine, [hourly(job)], now=when[0], **ops) == [PutOutcome.CREATED]
    assert put_schedules(engine, [hourly(job)], now=when[1], **ops) == [PutOutcome.UNCHANGED]
    with engine.store.read() as tx:
        stored = tx.schedule_get("default", "hourly")
        assert stored is not None and stored.updated_at == when[0]
        assert [c.field for c in tx.changes_list("default", "hourly")] == ["created"]
    assert put_schedules(engine, [hourly(job)], now=when[2], source="api", actor="ops") == [PutOutcome.UPDATED]
    assert put_schedules(engine, [hourly(job, timezone="Europe/Oslo")], now=when[3], source="api", actor="ops") == [
        PutOutcome.UPDATED
    ]
    with engine.store.read() as tx:
        stored = tx.schedule_get("default", "hourly")
        assert stored is not None and stored.updated_at == when[3]
        assert [c.field for c in tx.changes_list("default", "hourly")] == ["created", "updated"]


def test_every_backfilled_run_is_audited_with_who_asked_and_the_range(engine: Engine) -> None:
    """Found by a review: a refused backfill was audited, a successful one (a person's request
    that can make thousands of runs) wrote nothing. One entry a run made, committed with it;
    none for slots that had their run already."""
    job = define(engine)
    add(engine, hourly(job), watermark=T0 + 100 * HOUR)
    made = backfill(
        engine, tenant_id="default", job_definition_id=job, schedule_id="hourly", start=T0, end=T0 + 3 * HOUR,
        actor="ada",
    )  # fmt: skip
    backfill(
        engine, tenant_id="default", job_definition_id=job, schedule_id="hourly", start=T0, end=T0 + 4 * HOUR,
        actor="bob",
    )  # fmt: skip
    with engine.store.read() as tx:
        entries = tx.audit_list(AuditFilter(tenant_id="default", action="run.backfilled"))
    assert [(e.event.target_id, e.event.actor) for e in entries[:3]] == [(s.job_run_id, "ada") for s in made]
    assert [e.event.actor for e in entries] == ["ada", "ada", "ada", "bob"]  # the repeated slots: nothing
    assert all(
        "backfill 2026" in (e.event.reason or "") and "schedule hourly" in (e.event.reason or "") for e in entries
    )
    assert count(engine, "job_runs") == 4


def test_an_edit_committed_while_a_tick_plans_makes_its_plan_stale(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pause that returned success is not followed by a fire the tick planned before it: the
    watermark's compare-and-set also holds the schedule's version."""
    from jobgate.service.schedules import set_paused

    job = define(engine)
    add(engine, hourly(job))
    tick = T0 + HOUR
    real = engine.pipeline.prepare

    def pausing(*args: object, **kwargs: object) -> object:
        assert set_paused(engine, "default", "hourly", True, now=tick, actor="ops")  # committed now
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(engine.pipeline, "prepare", pausing)
    Scheduler(engine, owner="a").tick(tick)
    assert count(engine, "job_runs") == 0
    with engine.store.read() as tx:
        stored = tx.schedule_get("default", "hourly")
    assert stored is not None and stored.schedule.paused and stored.watermark == T0


@pytest.mark.parametrize("misfire", list(MisfirePolicy))
def test_a_pause_no_scheduler_saw_still_holds_its_slots(engine: Engine, misfire: MisfirePolicy) -> None:
    """Paused from 02:30 to 05:30 and resumed with no tick in between: the slots of the pause
    (03:00, 04:00, 05:00) are recorded paused and never run, as when a scheduler ticked through
    it; those owed while it was active (01:00, 02:00 before; 06:00 after) go by its misfire
    policy. The guide relies on it to move a daily job between timezones."""
    from jobgate.service.schedules import set_paused

    job = define(engine)
    add(engine, hourly(job, misfire=misfire, misfire_grace=timedelta(minutes=5)))
    assert set_paused(engine, "default", "hourly", True, now=T0 + 2.5 * HOUR, actor="ops")
    assert set_paused(engine, "default", "hourly", False, now=T0 + 5.5 * HOUR, actor="ops")
    Scheduler(engine, owner="a").tick(T0 + 6 * HOUR + timedelta(seconds=1))
    with engine.store.read() as tx:
        misses = dict(tx.misses_list("default", "hourly"))
        fired = {r.trigger_id for r in tx.runs_list(RunFilter(tenant_id="default"))}
    assert {at: r for at, r in misses.items() if r == "paused"} == {T0 + h * HOUR: "paused" for h in (3, 4, 5)}
    paused_slots = {f"TGTRIG-hourly@2026-03-01T0{h}:00:00Z" for h in (3, 4, 5)}
    assert not fired & paused_slots
    assert "TGTRIG-hourly@2026-03-01T06:00:00Z" in fired  # on time after the resume
    late = {f"TGTRIG-hourly@2026-03-01T0{h}:00:00Z" for h in (1, 2)}
    expected_late = {MisfirePolicy.FIRE_ALL: late, MisfirePolicy.FIRE_ONCE: {max(late)}, MisfirePolicy.SKIP: set()}
    assert fired & late == expected_late[misfire]


def test_pause_spans_follow_the_switches_since_the_watermark() -> None:
    from jobgate.scheduling.plan import Period, pause_spans

    t = [T0 + h * HOUR for h in range(8)]
    assert pause_spans([], after=t[0]) == ()
    assert pause_spans([(t[1], False, True), (t[2], True, False)], after=t[0]) == (Period(t[1], t[2]),)
    # paused before the watermark, resumed after it; paused again and still paused
    switches = [(t[2], True, False), (t[4], False, True)]
    assert pause_spans(switches, after=t[0]) == (Period(t[0], t[2]), Period(t[4]))
    # an edit that kept the state is no switch
    assert pause_spans([(t[1], False, False), (t[3], False, True), (t[5], True, True)], after=t[0]) == (Period(t[3]),)


@pytest.mark.parametrize("windows", [False, True])
def test_backfill_refuses_slots_not_due_yet_and_stores_nothing(engine: Engine, windows: bool) -> None:
    """A slot still ahead (a batch window not closed) is the scheduler's, at its time: run early,
    it would see a window half full and leave its real slot taken."""
    job = define(engine)
    engine.clock = FakeClock(T0 + 2 * HOUR + timedelta(minutes=2))
    schedule = (
        check_schedule(Schedule("hourly", job, ScheduleKind.BATCH_WINDOW, T0, every=HOUR)) if windows else hourly(job)
    )
    add(engine, schedule, watermark=T0 + 100 * HOUR)
    with pytest.raises(ValidationError) as refused:
        backfill(engine, tenant_id="default", job_definition_id=job, schedule_id="hourly", start=T0, end=T0 + 5 * HOUR)
    assert refused.value.field == "to" and "not due yet" in refused.value.message
    assert count(engine, "job_runs") == 0
    done = backfill(
        engine, tenant_id="default", job_definition_id=job, schedule_id="hourly", start=T0, end=T0 + 2 * HOUR
    )
    assert all(s.created for s in done) and count(engine, "job_runs") == len(done) > 0


@pytest.mark.parametrize(
    ("start", "end", "field", "says"),
    [
        (T0, datetime(3000, 1, 1, tzinfo=UTC), "to", "not due yet"),  # centuries ahead: refused at once
        (datetime(1900, 1, 1, tzinfo=UTC), T0, "to", "more than 100000 slots"),  # counted up to the limit only
        (datetime(1, 1, 1, tzinfo=UTC), datetime(1, 1, 1, 0, 0, 5, tzinfo=UTC), "from", "calendar"),
        (T0, datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC), "to", "not due yet"),
    ],
)
def test_backfill_of_a_huge_or_extreme_range_is_refused_at_once(
    engine: Engine, start: datetime, end: datetime, field: str, says: str
) -> None:
    job = define(engine)
    engine.clock = FakeClock(T0 + HOUR)
    add(engine, Schedule("fast", job, ScheduleKind.INTERVAL, datetime(1, 1, 1, tzinfo=UTC), every=timedelta(seconds=1)))
    for dry_run in (True, False):
        with pytest.raises(ValidationError) as refused:
            backfill(
                engine,
                tenant_id="default",
                job_definition_id=job,
                schedule_id="fast",
                start=start,
                end=end,
                dry_run=dry_run,
            )
        assert refused.value.field == field and says in refused.value.message
    assert count(engine, "job_runs") == 0


def test_a_backfill_in_the_calendars_first_days_lists_its_slots(engine: Engine) -> None:
    """Found by a review: a range starting in year 1's first minute was refused as reaching past
    the calendar's limits although its slots exist (cron stepped back before year 1)."""
    job = define(engine)
    engine.clock = FakeClock(T0 + HOUR)
    add(engine, Schedule("daily", job, ScheduleKind.CRON, T0, cron="0 2 * * *"))
    add(engine, Schedule("first-minute", job, ScheduleKind.CRON, T0, cron="1 0 * * *"))
    start = datetime(1, 1, 1, 0, 0, 1, tzinfo=UTC)
    for schedule_id, first in (
        ("daily", datetime(1, 1, 1, 2, tzinfo=UTC)),
        ("first-minute", datetime(1, 1, 1, 0, 1, tzinfo=UTC)),
    ):
        found = backfill(
            engine,
            tenant_id="default",
            job_definition_id=job,
            schedule_id=schedule_id,
            start=start,
            end=datetime(1, 1, 5, tzinfo=UTC),
            dry_run=True,
        )
        assert [s.fire_at for s in found] == [first + timedelta(days=d) for d in range(4)]
    with pytest.raises(ValidationError) as refused:
        backfill(engine, tenant_id="default", job_definition_id=job, schedule_id="daily", start=start, end=T0)
    assert refused.value.field == "to" and "more than 100000 slots" in refused.value.message
    assert count(engine, "job_runs") == 0


def test_backfill_does_not_repeat_a_slot_the_scheduler_fired(engine: Engine) -> None:
    job = define(engine)
    add(engine, hourly(job, misfire=MisfirePolicy.FIRE_ALL))
    Scheduler(engine, owner="a").tick(T0 + 2 * HOUR)  # fires 01:00 and 02:00
    result = backfill(
        engine, tenant_id="default", job_definition_id=job, schedule_id="hourly", start=T0, end=T0 + 4 * HOUR
    )
    assert [s.created for s in result] == [True, False, False, True]
    assert count(engine, "job_runs") == 4


def test_a_slot_has_one_run_whatever_the_configuration_did_since(engine: Engine) -> None:
    # Found 2: safe mode (or an edit of the bound profile) changes the configuration digest, so
    # the idempotency key; the slot is still the one it was. The dry run and the real run agree.
    from jobgate.service import safemode

    job = define(engine)
    add(engine, hourly(job, misfire=MisfirePolicy.FIRE_ALL))
    Scheduler(engine, owner="a").tick(T0 + 2 * HOUR)  # fires 01:00 and 02:00
    safemode.activate(engine, "default", actor="ada", reason="incident", now=T0 + 2 * HOUR)
    dry = backfill(
        engine,
        tenant_id="default",
        job_definition_id=job,
        schedule_id="hourly",
        start=T0,
        end=T0 + 4 * HOUR,
        dry_run=True,
    )
    assert [s.job_run_id is not None for s in dry] == [False, True, True, False]
    real = backfill(
        engine, tenant_id="default", job_definition_id=job, schedule_id="hourly", start=T0, end=T0 + 4 * HOUR
    )
    assert [s.created for s in real] == [True, False, False, True]
    assert [s.job_run_id for s in real][1:3] == [s.job_run_id for s in dry][1:3]
    assert count(engine, "job_runs") == 4
    safemode.deactivate(engine, "default", actor="ada", reason="over", now=T0 + 3 * HOUR)
    again = backfill(
        engine, tenant_id="default", job_definition_id=job, schedule_id="hourly", start=T0, end=T0 + 4 * HOUR
    )
    assert not any(s.created for s in again) and count(engine, "job_runs") == 4
    # The scheduler, planning a slot that was backfilled meanwhile, makes nothing either.
    with engine.store.read() as tx:
        slots = connection(tx).execute(text("SELECT slot FROM job_runs ORDER BY slot")).scalars().all()
    assert slots == [f"TGTRIG-hourly@2026-03-01T0{h}:00:00Z" for h in range(4)]


def test_the_store_refuses_a_second_run_for_a_slot(engine: Engine) -> None:
    # The rule is the database's, not the planner's: a run inserted for a held slot is not made.
    job = define(engine)
    add(engine, hourly(job, misfire=MisfirePolicy.FIRE_ALL))
    Scheduler(engine, owner="a").tick(T0 + HOUR)
    with engine.store.read() as tx:
        run = tx.runs_list(RunFilter(limit=10))[0]
    twin = run.evolve(job_run_id="TGJOBRUN-twin", idempotency_key="other-key")
    with engine.store.write() as tx:
        made = tx.runs_create([RunCreate(twin, {}, (), None, None)])
    assert made == [(run, False)] and count(engine, "job_runs") == 1


def test_runs_made_together_are_stored_in_run_id_order_and_a_slot_goes_to_its_first_request(
    engine: Engine,
) -> None:
    # Stored in run id order (a claim then takes neighbouring rows); within one call a slot goes
    # to the first request naming it, whatever the ids, and the later one is told its holder.
    job = define(engine)
    add(engine, hourly(job, misfire=MisfirePolicy.FIRE_ALL))
    Scheduler(engine, owner="a").tick(T0 + HOUR)
    with engine.store.read() as tx:
        run = tx.runs_list(RunFilter(limit=10))[0]
    with engine.store.write() as tx:
        connection(tx).execute(text("DELETE FROM run_transitions"))
        connection(tx).execute(text("DELETE FROM job_runs"))
    later = [run.evolve(job_run_id=f"TGJOBRUN-{c}", idempotency_key=f"key-{c}", slot=None) for c in "dbca"]
    first = run.evolve(job_run_id="TGJOBRUN-z", idempotency_key="key-z", slot="S")
    second = run.evolve(job_run_id="TGJOBRUN-0", idempotency_key="key-0", slot="S")
    creates = [RunCreate(r, {}, (), None, None) for r in (*later, first, second)]
    with engine.store.write() as tx:
        made = tx.runs_create(creates)
    assert [(r.job_run_id, new) for r, new in made] == [
        *((r.job_run_id, True) for r in later),
        ("TGJOBRUN-z", True),
        ("TGJOBRUN-z", False),
    ]
    with engine.store.read() as tx:
        stored = (
            connection(tx)
            .execute(
                text(
                    "SELECT job_run_id FROM job_runs ORDER BY rowid"
                    if engine.store.dialect == "sqlite"
                    else "SELECT job_run_id FROM job_runs ORDER BY ctid"
                )
            )
            .scalars()
            .all()
        )
    assert stored == ["TGJOBRUN-a", "TGJOBRUN-b", "TGJOBRUN-c", "TGJOBRUN-d", "TGJOBRUN-z"]


def test_backfill_of_windows_takes_whole_windows_inside_the_range(engine: Engine) -> None:
    job = helpers.define(engine, trigger_type="batch_window")
    add(engine, Schedule("win", job, ScheduleKind.BATCH_WINDOW, T0, every=HOUR), watermark=T0 + 100 * HOUR)
    result = backfill(
        engine, tenant_id="default", job_definition_id=job, start=T0 + timedelta(minutes=30), end=T0 + 4 * HOUR
    )
    assert [(s.window.start, s.window.end) for s in result if s.window] == [
        (T0 + HOUR, T0 + 2 * HOUR),
        (T0 + 2 * HOUR, T0 + 3 * HOUR),
        (T0 + 3 * HOUR, T0 + 4 * HOUR),
    ]


def _window_backfill(engine: Engine, job: str, start: datetime, end: datetime) -> list[tuple[datetime, bool]]:
    made = backfill(engine, tenant_id="default", job_definition_id=job, start=start, end=end)
    return [(s.window.start, s.created) for s in made if s.window is not None]


def test_a_window_of_another_length_ending_at_the_same_instant_is_another_slot(engine: Engine) -> None:
    # A batch window's slot is its start and end: after the window grows from one hour to two,
    # the window [00:00, 02:00) never ran, though a one-hour window ended at 02:00 too.
    job = helpers.define(engine, trigger_type="batch_window")
    add(engine, Schedule("win", job, ScheduleKind.BATCH_WINDOW, T0, every=HOUR), watermark=T0 + 100 * HOUR)
    assert _window_backfill(engine, job, T0, T0 + 4 * HOUR) == [(T0 + h * HOUR, True) for h in range(4)]
    add(engine, Schedule("win", job, ScheduleKind.BATCH_WINDOW, T0, every=2 * HOUR), watermark=T0 + 100 * HOUR)
    assert _window_backfill(engine, job, T0, T0 + 4 * HOUR) == [(T0, True), (T0 + 2 * HOUR, True)]
    assert _window_backfill(engine, job, T0, T0 + 4 * HOUR) == [(T0, False), (T0 + 2 * HOUR, False)]
    with engine.store.read() as tx:
        slots = connection(tx).execute(text("SELECT slot FROM job_runs ORDER BY created_at, slot")).scalars().all()
    assert slots[-2:] == [
        "TGTRIG-win@2026-03-01T00:00:00Z/2026-03-01T02:00:00Z",
        "TGTRIG-win@2026-03-01T02:00:00Z/2026-03-01T04:00:00Z",
    ]
    with engine.store.read() as tx:
        run = tx.runs_list(RunFilter(limit=1))[0]
    parsed = RunOut.of(run)
    assert parsed.schedule_id == "win" and parsed.slot_at in (T0 + 2 * HOUR, T0 + 4 * HOUR)


def test_a_schedule_id_added_again_for_another_job_has_no_slot_taken(engine: Engine) -> None:
    # The slot is the job's: the first job's runs did none of the second job's work.
    first, second = define(engine), define(engine)
    add(engine, hourly(first, misfire=MisfirePolicy.FIRE_ALL))
    Scheduler(engine, owner="a").tick(T0 + 2 * HOUR)  # the first job's 01:00 and 02:00
    with engine.store.write() as tx:
        assert tx.schedule_delete("default", "hourly")
    add(engine, hourly(second), watermark=T0 + 100 * HOUR)
    made = backfill(
        engine,
        tenant_id="default",
        job_definition_id=second,
        schedule_id="hourly",
        start=T0 + HOUR,
        end=T0 + 3 * HOUR,
    )
    assert [s.created for s in made] == [True, True]
    assert count(engine, "job_runs", f"job_definition_id = '{second}'") == 2
    assert count(engine, "job_runs", f"job_definition_id = '{first}'") == 2


@pytest.mark.parametrize("length", [HOUR, 2 * HOUR])
def test_a_window_run_made_before_migration_0026_still_holds_its_window_only(engine: Engine, length: timedelta) -> None:
    # Runs made before named a window by its end alone, and keep that name (it is sealed with
    # them): such a run holds the window its trigger records, not another ending with it.
    job = helpers.define(engine, trigger_type="batch_window")
    add(engine, Schedule("win", job, ScheduleKind.BATCH_WINDOW, T0, every=HOUR), watermark=T0 + 100 * HOUR)
    old = backfill(engine, tenant_id="default", job_definition_id=job, start=T0 + HOUR, end=T0 + 2 * HOUR)
    with engine.store.write() as tx:
        connection(tx).execute(text("UPDATE job_runs SET slot = 'TGTRIG-win@2026-03-01T02:00:00Z'"))
    add(engine, Schedule("win", job, ScheduleKind.BATCH_WINDOW, T0, every=length), watermark=T0 + 100 * HOUR)
    for dry_run in (True, False):
        again = backfill(
            engine,
            tenant_id="default",
            job_definition_id=job,
            start=T0 + 2 * HOUR - length,
            end=T0 + 2 * HOUR,
            dry_run=dry_run,
        )
        held = [s.job_run_id == old[0].job_run_id for s in again]
        assert held == [length == HOUR]
        if not dry_run:
            assert [s.created for s in again] == [length != HOUR]
    assert count(engine, "job_runs") == (1 if length == HOUR else 2)


def test_a_dry_run_backfill_stores_nothing_and_a_bad_range_is_refused(engine: Engine) -> None:

    job = define(engine)
    add(engine, hourly(job), watermark=T0 + 100 * HOUR)
    plan = backfill(
        engine,
        tenant_id="default",
        job_definition_id=job,
        schedule_id="hourly",
        start=T0,
        end=T0 + 3 * HOUR,
        dry_run=True,
    )
    assert len(plan) == 3 and all(s.job_run_id is None and not s.created for s in plan)
    assert count(engine, "job_runs") == 0
    with pytest.raises(ValidationError) as err:
        backfill(engine, tenant_id="default", job_definition_id=job, schedule_id="hourly", start=T0, end=T0)
    assert err.value.field == "to"
    other = helpers.define(engine)  # manual: no schedule
    with pytest.raises(ValidationError) as err:
        backfill(engine, tenant_id="default", job_definition_id=other, start=T0, end=T0 + HOUR)
    assert err.value.field == "job" and "no schedule" in err.value.message
    assert count(engine, "job_runs") == 0


def test_overlap_forbid_skips_a_fire_while_the_previous_run_is_outstanding(engine: Engine) -> None:
    job = define(engine)
    add(engine, hourly(job, overlap=OverlapPolicy.FORBID))
    s = Scheduler(engine, owner="a")
    assert s.tick(T0 + HOUR).fired == 1  # no worker: that run stays SCHEDULED
    assert s.tick(T0 + 2 * HOUR).fired == 0
    with engine.store.read() as tx:
        assert tx.misses_list("default", "hourly") == [(T0 + 2 * HOUR, "overlap")]


def test_overlap_replace_cancels_the_outstanding_run_and_fires(engine: Engine) -> None:
    job = define(engine)
    add(engine, hourly(job, overlap=OverlapPolicy.REPLACE))
    s = Scheduler(engine, owner="a")
    s.tick(T0 + HOUR)
    assert s.tick(T0 + 2 * HOUR).fired == 1
    with engine.store.read() as tx:
        rows = connection(tx).execute(text("SELECT trigger_id, status FROM job_runs ORDER BY trigger_id")).all()
    assert [(r[0][-20:], r[1]) for r in rows] == [
        ("2026-03-01T01:00:00Z", "CANCELLED"),
        ("2026-03-01T02:00:00Z", "SCHEDULED"),
    ]


# --- adaptive ------------------------------------------------------------------------------


def adaptive(job: str) -> Schedule:
    return Schedule(
        "adapt",
        job,
        ScheduleKind.ADAPTIVE,
        T0,
        every=timedelta(minutes=10),
        min_every=timedelta(minutes=5),
        max_every=timedelta(hours=1),
    )


def test_a_recommendation_moves_an_adaptive_interval_only_within_its_bounds(engine: Engine) -> None:
    job = helpers.define(engine, trigger_type="adaptive")
    add(engine, adaptive(job))
    engine.clock = FakeClock(T0 + timedelta(minutes=25))
    assert recommend_interval(engine, tenant_id="default", schedule_id="adapt", every=HOUR, source="dsail")
    with pytest.raises(ValidationError) as err:
        recommend_interval(engine, tenant_id="default", schedule_id="adapt", every=timedelta(minutes=1), source="dsail")
    assert err.value.field == "every" and "recorded, not applied" in err.value.message
    with engine.store.read() as tx:
        stored = tx.schedule_get("default", "adapt")
        changes = tx.changes_list("default", "adapt")
    assert stored is not None and stored.schedule.every == HOUR
    assert stored.schedule.anchor == T0 + timedelta(minutes=20)  # the current slot of the old grid
    assert [(c.new_value, c.accepted, c.source) for c in changes] == [
        ("3600.0", True, "dsail"),
        ("60.0", False, "dsail"),
    ]
    # The next fires continue from 00:20 at the new pace: 01:20, 02:20.
    Scheduler(engine, owner="a").tick(T0 + timedelta(hours=2, minutes=21))
    with engine.store.read() as tx:
        fired = [
            r[0][-20:] for r in connection(tx).execute(text("SELECT trigger_id FROM job_runs ORDER BY trigger_id"))
        ]
    assert fired[-2:] == ["2026-03-01T01:20:00Z", "2026-03-01T02:20:00Z"]


def test_a_recommendation_for_a_non_adaptive_schedule_is_refused(engine: Engine) -> None:
    job = define(engine)
    add(engine, hourly(job))
    with pytest.raises(ValidationError) as err:
        recommend_interval(engine, tenant_id="default", schedule_id="hourly", every=HOUR, source="dsail")
    assert err.value.field == "schedule_id"
    with engine.store.read() as tx:
        assert tx.changes_list("default", "hourly") == []


# --- configuration ---------------------------------------------------------------------------


def test_a_configuration_schedule_fires_once_per_newly_activated_snapshot(engine: Engine, tmp_path: Path) -> None:
    job = helpers.define(engine, trigger_type="configuration")
    original = engine.config
    engine.config = make_config(tmp_path, profiles={"risk": {"threshold": 5}})
    put_schedules(
        engine,
        [check_schedule(Schedule("on-risk", job, ScheduleKind.CONFIGURATION, T0, config_profile="risk"))],
        source="test",
        now=T0,
    )
    s = Scheduler(engine, owner="a")
    assert s.tick(T0 + HOUR).fired == 0  # the snapshot active when the schedule was added is not news
    engine.config = make_config(tmp_path, profiles={"risk": {"threshold": 7}})  # a new snapshot activates
    assert s.tick(T0 + 2 * HOUR).fired == 1
    assert s.tick(T0 + 3 * HOUR).fired == 0
    with engine.store.read() as tx:
        rows = connection(tx).execute(text("SELECT trigger_type, trigger_id FROM job_runs")).all()
    assert [r[0] for r in rows] == ["configuration"] and "@config-TGCFGSNAP-" in rows[0][1]
    engine.config = original


def test_a_configuration_schedule_for_an_unknown_profile_is_refused(engine: Engine) -> None:
    job = helpers.define(engine, trigger_type="configuration")
    schedule = check_schedule(Schedule("c", job, ScheduleKind.CONFIGURATION, T0, config_profile="nope"))
    with pytest.raises(ValidationError) as err:
        put_schedules(engine, [schedule], source="test", now=T0)
    assert err.value.field == "config_profile"
    with engine.store.read() as tx:
        assert [i.schedule.schedule_id for i in tx.schedules_list()] == []  # a configuration definition keeps none


def test_overlap_replace_by_a_deposed_leader_replaces_nothing(engine: Engine) -> None:
    """The review's m9: ``replace`` cancelled the outstanding run in its own transaction, before
    the fire's fenced commit, so a leader that had lost its lease cancelled a run and fired none.
    Now the replacement lands in the fire's transaction, or not at all."""
    job = define(engine)
    add(engine, hourly(job, overlap=OverlapPolicy.REPLACE))
    old = Scheduler(engine, owner="old", lease=timedelta(seconds=10))
    assert old.tick(T0 + HOUR).fired == 1
    new = Scheduler(engine, owner="new", lease=timedelta(seconds=10))
    assert new.hold_leadership(T0 + HOUR + timedelta(seconds=11)) is not None  # the old lease expired
    old._lease._renew_at = T0 + 3 * HOUR  # the old leader still believes its token is current
    assert old.tick(T0 + 2 * HOUR).fired == 0
    with engine.store.read() as tx:
        rows = connection(tx).execute(text("SELECT trigger_id, status FROM job_runs ORDER BY trigger_id")).all()
    assert [(r[0][-20:], r[1]) for r in rows] == [("2026-03-01T01:00:00Z", "SCHEDULED")]


def test_every_refused_slot_of_a_tick_is_audited_not_only_the_first(engine: Engine) -> None:
    """A catch-up of three slots refused by a gate recorded three refused misses but one
    ``run.refused`` entry: the audit log now holds one for each slot."""
    from jobgate.core.records import AuditFilter
    from jobgate.service import approvals, audit

    job = define(engine)
    add(engine, hourly(job, misfire=MisfirePolicy.FIRE_ALL))
    approvals.revoke(engine, "default", job, actor="admin", reason="under review")
    Scheduler(engine, owner="a").tick(T0 + 3 * HOUR + timedelta(seconds=1))
    entries = audit.search(engine, AuditFilter(tenant_id="default", action="run.refused", limit=100))
    slots = sorted(e.event.payload["trigger_id"] for e in entries)
    assert slots == [f"TGTRIG-hourly@2026-03-01T0{h}:00:00Z" for h in (1, 2, 3)]
    with engine.store.read() as tx:
        assert [r for _, r in tx.misses_list("default", "hourly")] == ["refused"] * 3
    assert scheduled_runs(engine) == 0


def test_an_edit_while_the_scheduler_is_behind_records_the_old_rhythms_slots(engine: Engine) -> None:
    """Found by a review: hourly at :00, no scheduler from 00:00, edited at 03:30 to :30: the
    tick fired 00:30, 01:30, 02:30, 03:30 (instants of neither rhythm while it held) and 01:00,
    02:00, 03:00 vanished. The old rhythm's owed slots are recorded ``edited``; the new rhythm
    owes only its slots after the edit."""
    job = define(engine)
    add(engine, hourly(job, misfire=MisfirePolicy.FIRE_ALL))
    edit_at = T0 + 3 * HOUR + timedelta(minutes=30)
    edited = check_schedule(replace(hourly(job, misfire=MisfirePolicy.FIRE_ALL), cron="30 * * * *"))
    put_schedules(engine, [edited], source="cli", now=edit_at)
    s = Scheduler(engine, owner="a")
    assert s.tick(edit_at + timedelta(minutes=1)).fired == 0
    with engine.store.read() as tx:
        misses = tx.misses_list("default", "hourly")
    assert misses == [(T0 + HOUR * h, "edited") for h in (1, 2, 3)]
    assert s.tick(T0 + 4 * HOUR + timedelta(minutes=30, seconds=1)).fired == 1  # 04:30, the new rhythm
    assert scheduled_runs(engine) == 1


def test_a_backfill_of_a_schedule_without_a_clock_is_refused(engine: Engine) -> None:
    """Found by a review: backfilling a safe-mode schedule made a run for an activation that
    never happened (its creation instant read as one). Only a timed schedule's slots can be
    named by a range; the others' come from what happened."""
    job = define(engine)
    add(engine, Schedule("sm", job, ScheduleKind.SAFE_MODE, T0, every=HOUR))
    before = count(engine, "job_runs")
    with pytest.raises(ValidationError) as refused:
        backfill(engine, tenant_id="default", job_definition_id=job, schedule_id="sm", start=T0, end=T0 + 5 * HOUR)
    assert refused.value.field == "schedule" and "safe_mode" in refused.value.message
    assert count(engine, "job_runs") == before


def test_a_backfill_before_an_intervals_anchor_says_why_it_has_no_slot(engine: Engine) -> None:
    """Found by a review: a backfill of a range before an interval schedule's anchor answered
    "0 slots" and nothing more."""
    job = define(engine)
    add(engine, Schedule("i", job, ScheduleKind.INTERVAL, T0 + 10 * HOUR, every=HOUR))
    with pytest.raises(ValidationError) as refused:
        backfill(engine, tenant_id="default", job_definition_id=job, schedule_id="i", start=T0, end=T0 + 5 * HOUR)
    assert refused.value.field == "to" and "anchor" in refused.value.message


def test_a_window_schedule_applied_again_without_its_anchor_keeps_it(engine: Engine) -> None:
    """Found by a review: a batch-window schedule anchored at :30, applied again from a document
    naming no anchor, was reset to the epoch's grid (windows ending at :00), and the windows ran
    overlapped the ones already run. It keeps the stored anchor, as every other kind does."""
    from jobgate.service.schedules import schedule_from_document

    job = helpers.define(engine, trigger_type="batch_window")
    anchored = {"id": "w", "job": job, "window_seconds": 3600, "anchor": "2026-03-01T00:30:00Z"}
    put_schedules(engine, [schedule_from_document(anchored, now=T0)], source="cli", now=T0)
    again = {"id": "w", "job": job, "window_seconds": 3600}  # no anchor: the stored one stands
    later = T0 + 2 * HOUR
    put_schedules(engine, [schedule_from_document(again, now=later)], source="cli", now=later)
    with engine.store.read() as tx:
        stored = tx.schedule_get("default", "w")
    assert stored is not None and stored.schedule.anchor == T0 + timedelta(minutes=30)


def test_an_edit_of_a_paused_or_interval_schedule_keeps_its_slots_truthful(engine: Engine) -> None:
    """Found by a review: slots that fell while a schedule was paused were recorded ``edited``
    by a later edit (they were the pause's), and an interval schedule edited in its zone alone
    (which moves none of its instants) had its owed slots dropped as ``edited``."""
    from jobgate.scheduling.plan import rhythm_changed

    job = define(engine)
    add(engine, hourly(job, misfire=MisfirePolicy.FIRE_ALL, paused=True))
    edit_at = T0 + 3 * HOUR + timedelta(minutes=30)
    edited = check_schedule(replace(hourly(job, misfire=MisfirePolicy.FIRE_ALL, paused=True), cron="30 * * * *"))
    put_schedules(engine, [edited], source="cli", now=edit_at)
    with engine.store.read() as tx:
        assert {r for _, r in tx.misses_list("default", "hourly")} == {"paused"}
    every = Schedule("i", job, ScheduleKind.INTERVAL, T0, every=HOUR)
    assert not rhythm_changed(every, replace(every, timezone="Europe/Helsinki"))
    assert rhythm_changed(hourly(job), replace(hourly(job), timezone="Europe/Helsinki"))


def test_an_edit_after_a_pause_and_a_resume_records_each_slot_by_when_it_fell(engine: Engine) -> None:
    """Found by a review: paused at 01:30, resumed at 03:30, edited at 04:30, no scheduler
    between: every owed slot was recorded ``edited`` (the state at the edit), though 02:00 and
    03:00 fell while it was paused."""
    from jobgate.service.schedules import set_paused

    job = define(engine)
    add(engine, hourly(job, misfire=MisfirePolicy.FIRE_ALL))
    set_paused(engine, "default", "hourly", True, now=T0 + 1.5 * HOUR)
    set_paused(engine, "default", "hourly", False, now=T0 + 3.5 * HOUR)
    edited = check_schedule(replace(hourly(job, misfire=MisfirePolicy.FIRE_ALL), cron="30 * * * *"))
    put_schedules(engine, [edited], source="cli", now=T0 + 4.5 * HOUR)
    with engine.store.read() as tx:
        misses = tx.misses_list("default", "hourly")
    assert misses == [
        (T0 + HOUR, "edited"),
        (T0 + 2 * HOUR, "paused"),
        (T0 + 3 * HOUR, "paused"),
        (T0 + 4 * HOUR, "edited"),
    ]


def test_a_skip_schedule_without_slack_is_refused() -> None:
    """Found by a review: misfire skip with a grace of 0 skipped every slot (a tick comes a
    little after its slot): refused, naming the grace."""
    with pytest.raises(ValidationError) as refused:
        check_schedule(Schedule("s", "job", ScheduleKind.CRON, T0, cron="* * * * *", misfire=MisfirePolicy.SKIP,
                                misfire_grace=timedelta(0)))  # fmt: skip
    assert refused.value.field == "misfire_grace"
    check_schedule(Schedule("s", "job", ScheduleKind.CRON, T0, cron="* * * * *", misfire=MisfirePolicy.FIRE_ONCE,
                            misfire_grace=timedelta(0)))  # fmt: skip


def test_a_long_tick_renews_the_lease_as_it_goes(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by a review: a tick that took longer than the lease (a schedule far behind) let a
    standby take over, the two deposed each other at every commit, and every schedule stalled.
    The leader renews between schedules, by the time the tick has taken (here 5 s a schedule)."""
    import types

    from jobgate.runtime import scheduler as scheduler_module

    job = define(engine)
    for i in range(3):
        add(engine, replace(hourly(job), schedule_id=f"h{i}"))
    seconds = iter(range(0, 1000, 5))
    monkeypatch.setattr(scheduler_module, "time", types.SimpleNamespace(monotonic=lambda: float(next(seconds))))
    a = Scheduler(engine, owner="a", lease=timedelta(seconds=2))
    assert a.tick(T0 + HOUR).fired == 3
    b = Scheduler(engine, owner="b", lease=timedelta(seconds=2))
    assert not b.tick(T0 + HOUR + timedelta(seconds=6)).leader


def test_an_edit_read_before_a_schedulers_commit_settles_only_what_is_still_owed(engine: Engine) -> None:
    """Found by a review: an edit that read the schedule before a scheduler's tick committed
    recorded ``edited`` misses for slots that tick had fired, and its move of the watermark to
    the edit failed unseen, so the new rhythm's slot before the edit fired. The edit now settles
    from the watermark as it stands, the row locked, and a failed move is refused."""
    from jobgate.service.schedules import settle_owed_before_edit

    job = define(engine)
    every10 = add(
        engine, Schedule("ten", job, ScheduleKind.CRON, T0, cron="*/10 * * * *", misfire=MisfirePolicy.FIRE_ALL)
    )
    with engine.store.read() as tx:
        stale = tx.schedule_get("default", "ten")
    assert stale is not None
    assert Scheduler(engine, owner="a").tick(T0 + timedelta(minutes=25)).fired == 2  # 00:10 and 00:20
    edit_at = T0 + timedelta(minutes=27)
    with engine.store.write() as tx:
        settle_owed_before_edit(tx, stale, replace(every10, cron="26 * * * *"), edit_at)
    with engine.store.read() as tx:
        misses = tx.misses_list("default", "ten")
        stored = tx.schedule_get("default", "ten")
    assert [reason for _at, reason in misses] == []  # what the tick fired is not owed
    assert stored is not None and stored.watermark == edit_at


def test_a_leader_passes_again_before_its_lease_needs_renewing(engine: Engine) -> None:
    """Found by a review: with ``--lease-seconds 1`` the leader slept its 1 s tick and let the
    lease lapse every other turn, a standby taking over each time. A leader sleeps at most a
    third of its lease (when it renews); a standby polls at its usual rate."""
    clock = engine.clock
    leader = Scheduler(engine, owner="leader", lease=timedelta(seconds=1), max_sleep=timedelta(seconds=1))
    standby = Scheduler(engine, owner="standby", lease=timedelta(seconds=1), max_sleep=timedelta(seconds=1))
    assert leader.tick(clock.now()).leader and not standby.tick(clock.now()).leader
    assert leader._sleep_seconds() <= 1 / 3 + 1e-9
    assert standby._sleep_seconds() == 1.0
    patient = Scheduler(engine, owner="patient", lease=timedelta(seconds=30), max_sleep=timedelta(seconds=1))
    assert patient._sleep_seconds() == 1.0  # a long lease: the tick's own rate


def test_a_backfill_in_year_1_west_of_utc_lists_its_slots_and_names_a_param_it_cannot_render(
    engine: Engine,
) -> None:
    """Found by a regression review: west of UTC, year 1's first hours are year 0 locally: a
    cron's slots were refused as reaching past the calendar, and a magic param crashed."""
    job = define(engine, params=[{"name": "d", "pattern": "[0-9-]{7,10}"}])
    engine.clock = FakeClock(T0 + HOUR)
    add(engine, Schedule("ny", job, ScheduleKind.CRON, T0, cron="0 2 * * *", timezone="America/New_York"))
    start, end = datetime(1, 1, 1, 0, 0, 1, tzinfo=UTC), datetime(1, 1, 4, tzinfo=UTC)
    found = backfill(
        engine, tenant_id="default", job_definition_id=job, schedule_id="ny", start=start, end=end, dry_run=True
    )
    assert len(found) == 3 and all(s.fire_at.astimezone().year == 1 for s in found)
    first_day = datetime(1, 1, 1, tzinfo=UTC)
    add(engine, Schedule("iv", job, ScheduleKind.INTERVAL, first_day, every=HOUR, timezone="America/New_York",
                         params={"d": "{{current_date}}"}))  # fmt: skip
    with pytest.raises(ValidationError) as refused:
        backfill(engine, tenant_id="default", job_definition_id=job, schedule_id="iv", start=start, end=end)
    assert refused.value.field == "params.d" and "outside the years 1 to 9999" in refused.value.message
    add(engine, Schedule("month", job, ScheduleKind.INTERVAL, first_day, every=HOUR, params={"d": "{{current_month}}"}))
    made = backfill(
        engine, tenant_id="default", job_definition_id=job, schedule_id="month", start=start, end=first_day + 2 * HOUR
    )
    with engine.store.read() as tx:
        run = tx.run_get(made[0].job_run_id, "default")
    assert run is not None and run.params["d"] == "0001-01"
    assert count(engine, "job_runs") == len(made)


def _windows(engine: Engine) -> list[list[str]]:
    with engine.store.read() as tx:
        rows = connection(tx).execute(text('SELECT "trigger" FROM job_runs')).all()
    return sorted(json.loads(r[0])["window"] for r in rows)


@pytest.mark.parametrize("behind", [False, True])
def test_a_windows_new_length_covers_the_time_from_the_last_closed_window(engine: Engine, behind: bool) -> None:
    """Found by a review: 10-minute windows shortened to 2 minutes at 00:25 began at 00:20 (the
    end of the last closed window) but the watermark moved to the edit, so [00:20, 00:22) and
    [00:22, 00:24) never ran, nothing recorded them, and a later anchor kept backfill from them.
    The new grid is owed from where it begins: its windows closed meanwhile run late (by the
    misfire policy), none is left out and none overlaps. ``behind``: no scheduler ran before
    the edit (the old grid's owed windows are recorded ``edited``, as an edit records them)."""
    job = helpers.define(engine, trigger_type="batch_window")
    ten = Schedule(
        "win", job, ScheduleKind.BATCH_WINDOW, T0, every=timedelta(minutes=10), misfire=MisfirePolicy.FIRE_ALL
    )
    add(engine, ten)
    s = Scheduler(engine, owner="a")
    if not behind:
        assert s.tick(T0 + timedelta(minutes=25)).fired == 2  # [00:00, 00:10) and [00:10, 00:20)
    put_schedules(engine, [replace(ten, every=timedelta(minutes=2))], source="cli", now=T0 + timedelta(minutes=25))
    assert s.tick(T0 + timedelta(minutes=25, seconds=1)).fired == 2  # [00:20, 00:22) and [00:22, 00:24), late
    assert s.tick(T0 + timedelta(minutes=26, seconds=1)).fired == 1  # [00:24, 00:26), on time
    hhmm = [[w[0][11:16], w[1][11:16]] for w in _windows(engine)]
    new = [["00:20", "00:22"], ["00:22", "00:24"], ["00:24", "00:26"]]
    assert hhmm == ([] if behind else [["00:00", "00:10"], ["00:10", "00:20"]]) + new
    with engine.store.read() as tx:
        misses = tx.misses_list("default", "win")
    assert misses == (
        [(T0 + timedelta(minutes=10), "edited"), (T0 + timedelta(minutes=20), "edited")] if behind else []
    )
