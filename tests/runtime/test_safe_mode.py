"""Safe mode: switched by a person with a reason, recorded as periods, and the schedules that
fire only while it is on."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import text
from tests.helpers import count, define, make_config

from jobgate.core.errors import ConflictError, ValidationError
from jobgate.runtime.scheduler import Scheduler
from jobgate.scheduling.model import MisfirePolicy, Schedule, ScheduleKind, check_schedule
from jobgate.service import safemode
from jobgate.service.engine import Engine
from jobgate.service.schedules import delete, put_schedules, set_paused
from jobgate.testing import connection

T0 = datetime(2026, 6, 25, 18, 30, tzinfo=UTC)
MIN = timedelta(minutes=1)


def test_safe_mode_switches_on_and_off_and_keeps_every_period(engine: Engine) -> None:
    assert safemode.status(engine, "default") is None
    on = safemode.activate(engine, "default", actor="ada", reason="replay_drift_spike", now=T0)
    assert (on.activation, on.active, on.activated_by) == (1, True, "ada")
    off = safemode.deactivate(engine, "default", actor="bob", reason="drift resolved", now=T0 + MIN)
    assert (off.active, off.deactivated_by, off.deactivated_at) == (False, "bob", T0 + MIN)
    again = safemode.activate(engine, "default", actor="ada", reason="second incident", now=T0 + 2 * MIN)
    assert again.activation == 2
    assert [(p.activation, p.active) for p in safemode.history(engine, "default")] == [(1, False), (2, True)]
    assert safemode.status(engine, "other") is None  # per tenant
    with engine.store.read() as tx:
        kinds = [r[0] for r in connection(tx).execute(text("SELECT event_type FROM outbox ORDER BY id"))]
    assert kinds == ["safe_mode_activation", "safe_mode_deactivation", "safe_mode_activation"]


@pytest.mark.parametrize(
    ("switch", "reason", "field"),
    [("on", "", "reason"), ("on", "   ", "reason"), ("on", "x" * 2001, "reason"), ("off", "fine", "safe_mode")],
)
def test_a_refused_switch_names_the_field_and_stores_nothing(
    engine: Engine, switch: str, reason: str, field: str
) -> None:
    fn = safemode.activate if switch == "on" else safemode.deactivate
    with pytest.raises((ValidationError, ConflictError)) as err:
        fn(engine, "default", actor="ada", reason=reason, now=T0)
    assert err.value.field == field  # type: ignore[union-attr]
    assert count(engine, "safe_mode_periods") == 0 and count(engine, "outbox") == 0


def test_activating_twice_is_refused_and_says_since_when(engine: Engine) -> None:
    safemode.activate(engine, "default", actor="ada", reason="incident", now=T0)
    with pytest.raises(ConflictError, match="already on since 2026-06-25T18:30:00") as err:
        safemode.activate(engine, "default", actor="bob", reason="me too", now=T0 + MIN)
    assert err.value.field == "safe_mode"
    assert count(engine, "safe_mode_periods") == 1 and count(engine, "outbox") == 1


def test_concurrent_activations_open_one_period(engine: Engine) -> None:
    errors: list[Exception] = []
    barrier = threading.Barrier(4)

    def activate(i: int) -> None:
        barrier.wait()
        try:
            safemode.activate(engine, "default", actor=f"op{i}", reason="incident", now=T0)
        except ConflictError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=activate, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(errors) == 3
    assert count(engine, "safe_mode_periods") == 1 and count(engine, "outbox") == 1


# --- safe-mode schedules ---------------------------------------------------------------------


def safe_schedule(engine: Engine, job: str, **kw: object) -> None:
    s = check_schedule(Schedule("emergency", job, ScheduleKind.SAFE_MODE, T0, **kw))  # type: ignore[arg-type]
    put_schedules(engine, [s], source="test", now=T0)


def runs(engine: Engine) -> list[tuple[str, str]]:
    with engine.store.read() as tx:
        rows = connection(tx).execute(text("SELECT trigger_type, trigger_id FROM job_runs ORDER BY trigger_id")).all()
    return [(r[0], r[1]) for r in rows]


def test_a_safe_mode_schedule_fires_only_while_safe_mode_is_on(engine: Engine) -> None:
    job = define(engine, trigger_type="safe_mode")
    safe_schedule(engine, job, every=10 * MIN)
    s = Scheduler(engine, owner="a")
    assert s.tick(T0 + 30 * MIN).fired == 0  # off: nothing, however long
    safemode.activate(engine, "default", actor="ada", reason="incident", now=T0 + 31 * MIN)
    assert s.tick(T0 + 31 * MIN + timedelta(seconds=1)).fired == 1  # at the activation
    assert s.tick(T0 + 41 * MIN + timedelta(seconds=1)).fired == 1  # then every 10 minutes
    safemode.deactivate(engine, "default", actor="ada", reason="over", now=T0 + 45 * MIN)
    assert s.tick(T0 + 90 * MIN).fired == 0
    assert runs(engine) == [
        ("safe_mode", "TGTRIG-emergency@2026-06-25T19:01:00Z"),
        ("safe_mode", "TGTRIG-emergency@2026-06-25T19:11:00Z"),
    ]
    safemode.activate(engine, "default", actor="ada", reason="again", now=T0 + 100 * MIN)
    assert s.tick(T0 + 100 * MIN + timedelta(seconds=2)).fired == 1  # each activation fires anew


def test_an_activation_while_the_scheduler_was_down_follows_the_misfire_policy(engine: Engine) -> None:
    job = define(engine, trigger_type="safe_mode")
    safe_schedule(engine, job, every=10 * MIN, misfire=MisfirePolicy.FIRE_ALL)
    safemode.activate(engine, "default", actor="ada", reason="incident", now=T0 + MIN)
    safemode.deactivate(engine, "default", actor="ada", reason="over", now=T0 + 25 * MIN)
    assert Scheduler(engine, owner="a").tick(T0 + 3 * 60 * MIN).fired == 3  # 18:31, 18:41, 18:51
    assert Scheduler(engine, owner="b").tick(T0 + 4 * 60 * MIN).fired == 0


# --- configuration schedules watching keys (a policy bundle) ---------------------------------


def test_a_schedule_watching_the_policy_bundle_fires_only_when_the_bundle_changes(
    engine: Engine, tmp_path: Path
) -> None:
    job = define(engine, trigger_type="configuration")
    engine.config = make_config(tmp_path, profiles={"prod": {"policy_bundle": "FAGF-2026.1", "sample": 5}})
    schedule = Schedule("on-bundle", job, ScheduleKind.CONFIGURATION, T0, config_profile="prod")
    put_schedules(engine, [check_schedule(_watching(schedule))], source="test", now=T0)
    s = Scheduler(engine, owner="a")
    assert s.tick(T0 + MIN).fired == 0
    engine.config = make_config(tmp_path, profiles={"prod": {"policy_bundle": "FAGF-2026.1", "sample": 9}})
    assert s.tick(T0 + 2 * MIN).fired == 0  # another value changed: not this schedule's business
    engine.config = make_config(tmp_path, profiles={"prod": {"policy_bundle": "FAGF-2026.2", "sample": 9}})
    assert s.tick(T0 + 3 * MIN).fired == 1
    assert s.tick(T0 + 4 * MIN).fired == 0
    (run,) = runs(engine)
    assert run[0] == "configuration" and "@config-watch-" in run[1]


def test_watched_values_that_had_their_run_make_no_second_one_whatever_else_changed(
    engine: Engine, tmp_path: Path
) -> None:
    """One run per watched values, ever: going back to values that had their run, after an
    unwatched key changed (so the whole snapshot's digest, in the idempotency key, differs),
    makes none."""
    job = define(engine, trigger_type="configuration")

    def profile(bundle: str, sample: int) -> None:  # the profile the runs are bound to, too
        engine.config = make_config(tmp_path, profiles={"default": {"policy_bundle": bundle, "sample": sample}})

    profile("FAGF-2026.1", 5)
    schedule = Schedule("on-bundle", job, ScheduleKind.CONFIGURATION, T0, config_profile="default")
    put_schedules(engine, [check_schedule(_watching(schedule))], source="test", now=T0)
    s = Scheduler(engine, owner="a")
    steps = [("FAGF-2026.2", 5, 1), ("FAGF-2026.1", 6, 2), ("FAGF-2026.2", 7, 2), ("FAGF-2026.1", 8, 2)]
    for minute, (bundle, sample, expected) in enumerate(steps, start=1):
        profile(bundle, sample)
        s.tick(T0 + minute * MIN)
        assert len(runs(engine)) == expected, (bundle, sample)
    assert len({r[1] for r in runs(engine)}) == 2  # one run per watched values' trigger


def _watching(s: Schedule) -> Schedule:
    from dataclasses import replace

    return replace(s, config_watch=("policy_bundle",))


def test_watching_a_key_the_profile_lacks_is_refused_and_nothing_is_stored(engine: Engine, tmp_path: Path) -> None:
    job = define(engine, trigger_type="configuration")
    engine.config = make_config(tmp_path, profiles={"prod": {"policy_bundle": "FAGF-2026.1"}})
    schedule = Schedule("c", job, ScheduleKind.CONFIGURATION, T0, config_profile="prod", config_watch=("polcy",))
    with pytest.raises(ValidationError, match="no key 'polcy'") as err:
        put_schedules(engine, [check_schedule(schedule)], source="test", now=T0)
    assert err.value.field == "watch"
    assert count(engine, "schedules") == 0 and count(engine, "schedule_changes") == 0


# --- every schedule change is recorded --------------------------------------------------------


def test_adding_updating_pausing_resuming_and_deleting_are_each_recorded_with_who(engine: Engine) -> None:
    job = define(engine, trigger_type="cron", schedule_expression="0 0 29 2 *")
    s = check_schedule(Schedule("h", job, ScheduleKind.CRON, T0, cron="0 * * * *"))
    put_schedules(engine, [s], source="seed.yaml", now=T0, actor="ada")
    put_schedules(engine, [s], source="seed.yaml", now=T0 + MIN, actor="ada")  # the same: nothing to record
    moved = check_schedule(Schedule("h", job, ScheduleKind.CRON, T0, cron="30 * * * *"))
    put_schedules(engine, [moved], source="cli", now=T0 + 2 * MIN, actor="bob")
    assert set_paused(engine, "default", "h", True, now=T0 + 3 * MIN, actor="bob") is True
    assert set_paused(engine, "default", "h", True, now=T0 + 4 * MIN, actor="bob") is False  # already paused
    set_paused(engine, "default", "h", False, now=T0 + 5 * MIN, actor="cy")
    delete(engine, "default", "h", now=T0 + 6 * MIN, actor="cy")
    with engine.store.read() as tx:
        changes = tx.changes_list("default", "h")
    assert [(c.field, c.source) for c in changes] == [
        ("created", "ada"),
        ("updated", "bob"),
        ("paused", "bob"),
        ("resumed", "cy"),
        ("deleted", "cy"),
    ]
    assert '"cron":"0 * * * *"' in (changes[1].old_value or "") and '"cron":"30 * * * *"' in changes[1].new_value
    assert (changes[2].old_value, changes[2].new_value) == ("active", "paused")
    # ... and each is in the hash-chained audit log, with who did it.
    from jobgate.service import audit
    from jobgate.store.sql.governance import AuditFilter

    entries = audit.search(engine, AuditFilter(tenant_id="default", target_type="schedule", target_id="h"))
    assert [(e.event.action, e.event.actor) for e in entries] == [
        ("schedule.created", "ada"),
        ("schedule.updated", "bob"),
        ("schedule.paused", "bob"),
        ("schedule.resumed", "cy"),
        ("schedule.deleted", "cy"),
    ]
