"""Definitions keep their own schedules; every trigger path honours a definition's trigger_type;
schedules that could never fire are refused when they are stored (issue 19, Found 3 and 5)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text
from tests.helpers import count, define

from jobgate.core.errors import ConflictError, GovernanceRefusal, ValidationError
from jobgate.core.models import Scope, TriggerType
from jobgate.definitions.schema import parse_definition
from jobgate.runtime.scheduler import Scheduler
from jobgate.scheduling.model import Schedule, ScheduleKind, check_schedule
from jobgate.service import approvals
from jobgate.service.engine import Engine
from jobgate.service.schedules import put_schedules, schedule_from_document, set_paused
from jobgate.service.submission import SubmitRequest
from jobgate.testing import FakeClock, connection

SEED_15 = {
    "job_definition_id": "TGJOBDEF-REPLAY-SAMPLING-001",
    "job_code": "TG-REPLAY-SAMPLING-DAILY",
    "job_class": "REPLAY_JOB",
    "trigger_type": "cron",
    "schedule_expression": "0 2 * * *",
    "handler": "engine_handlers:succeed",
    "priority": "high",
}


def apply(engine: Engine, **fields: Any) -> str:
    doc = {**SEED_15, **fields}
    engine.apply_definitions([parse_definition(doc, "test", engine.config)], applied_by="ada")
    return str(doc["job_definition_id"])


def stored(engine: Engine, schedule_id: str = "TGJOBDEF-REPLAY-SAMPLING-001") -> Any:
    with engine.store.read() as tx:
        return tx.schedule_get("default", schedule_id)


def at(text_: str) -> datetime:
    return datetime.fromisoformat(text_.replace("Z", "+00:00"))


def test_the_seed_15_definition_keeps_a_schedule_that_fires_once_approved(engine: Engine) -> None:
    job = apply(engine)
    item = stored(engine)
    assert item is not None and item.source == "definition" and item.schedule.cron == "0 2 * * *"
    assert item.state == "paused: unapproved"  # nothing fires before an admin approved the content
    approvals.approve(engine, "default", job, actor="bob")
    item = stored(engine)
    assert item.state == "active"
    now = engine.clock.now()
    day = now.replace(hour=2, minute=0, second=0, microsecond=0)
    day += timedelta(days=1) if day <= now else timedelta(0)  # the next 02:00 UTC
    scheduler = Scheduler(engine, owner="s")
    assert scheduler.tick(day + timedelta(seconds=5)).fired == 1
    with engine.store.read() as tx:
        (slot,) = connection(tx).execute(text("SELECT slot FROM job_runs")).scalars().all()
    assert slot == f"TGTRIG-TGJOBDEF-REPLAY-SAMPLING-001@{day:%Y-%m-%dT%H:%M:%SZ}"


def test_a_new_version_updates_its_schedule_and_waits_for_its_approval(engine: Engine) -> None:
    job = apply(engine)
    approvals.approve(engine, "default", job, actor="bob")
    first = stored(engine)
    apply(engine, schedule_expression="30 3 * * 1-5", schedule_timezone="Europe/Oslo", schedule_misfire="skip")
    item = stored(engine)
    assert item.schedule.cron == "30 3 * * 1-5" and item.schedule.timezone == "Europe/Oslo"
    assert item.schedule.misfire.value == "skip" and item.watermark >= first.watermark  # applies from the edit
    assert item.state == "paused: unapproved"
    approvals.approve(engine, "default", job, actor="bob")
    assert stored(engine).state == "active"
    apply(engine, trigger_type="manual", schedule_expression=None)  # no longer scheduled: removed
    assert stored(engine) is None
    with engine.store.read() as tx:
        fields = [c.field for c in tx.changes_list("default", "TGJOBDEF-REPLAY-SAMPLING-001")]
    assert fields == ["created", "resumed", "updated", "resumed", "deleted"]


def test_interval_and_window_expressions_and_the_configured_defaults(engine: Engine) -> None:
    apply(engine, job_definition_id="every-15", trigger_type="interval", schedule_expression="every: 15m")
    apply(engine, job_definition_id="hourly-window", trigger_type="batch_window", schedule_expression="1h")
    interval, window = stored(engine, "every-15"), stored(engine, "hourly-window")
    assert interval.schedule.kind is ScheduleKind.INTERVAL and interval.schedule.every == timedelta(minutes=15)
    assert window.schedule.kind is ScheduleKind.BATCH_WINDOW and window.schedule.every == timedelta(hours=1)
    assert interval.schedule.timezone == engine.config.scheduling.timezone == "UTC"


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"schedule_expression": "61 2 * * *"}, "schedule_expression"),
        ({"schedule_expression": "every: 15m"}, "schedule_expression"),  # an interval under cron
        ({"schedule_timezone": "Mars/Olympus"}, "schedule_timezone"),
        ({"schedule_misfire": "sometimes"}, "schedule_misfire"),
        ({"trigger_type": "manual", "schedule_expression": None, "schedule_timezone": "UTC"}, "schedule_timezone"),
    ],
)
def test_a_schedule_that_cannot_fire_is_refused_with_its_definition(
    engine: Engine, fields: dict[str, Any], field: str
) -> None:
    doc = {k: v for k, v in {**SEED_15, **fields}.items() if v is not None}
    with pytest.raises(ValidationError) as err:
        parse_definition(doc, "test", engine.config)
    assert err.value.field == field
    assert count(engine, "definitions") == 0 and count(engine, "schedules") == 0


@pytest.mark.parametrize(
    "fields",
    [
        {"params": [{"name": "name", "required": True}]},
        {
            "trigger_type": "batch_window",
            "schedule_expression": "every 1h",
            "params": [{"name": "window_start", "required": True}],
        },
    ],
)
def test_an_own_schedule_whose_params_could_never_pass_is_refused_with_its_definition(
    engine: Engine, fields: dict[str, Any]
) -> None:
    """Found by a review: stored active, its every fire refused (and, between refusals, shown as
    recovered). Refused as a schedule stored by hand is, and nothing of the apply is stored."""
    with pytest.raises(ValidationError) as err:
        apply(engine, **fields)
    assert err.value.field == "schedule_expression" and "could never fire" in err.value.message
    assert count(engine, "definitions") == 0 and count(engine, "schedules") == 0


def test_a_schedule_of_that_name_from_someone_else_is_not_taken_over(engine: Engine) -> None:
    other = define(engine, trigger_type="cron", schedule_expression="0 5 * * *", job_definition_id="other")
    with engine.store.write() as tx:
        s = check_schedule(
            Schedule(
                "TGJOBDEF-REPLAY-SAMPLING-001", other, ScheduleKind.CRON, at("2026-01-01T00:00Z"), cron="0 1 * * *"
            )
        )
        tx.schedule_put(s, watermark=s.anchor, source="cli", now=s.anchor)
    with pytest.raises(ValidationError) as err:
        apply(engine)
    assert err.value.field == "schedule_expression" and "stored by cli" in err.value.message
    assert count(engine, "definitions", "job_definition_id = 'TGJOBDEF-REPLAY-SAMPLING-001'") == 0
    assert stored(engine).schedule.job_definition_id == "other"


def test_a_definitions_own_schedule_is_not_replaced_or_deleted_by_a_schedule_write(engine: Engine) -> None:
    """The other way round: a schedule write (CLI, API, seed 004's ``/schedules``) does not
    take over the schedule a definition keeps, nor delete it; pausing it stays possible."""
    from jobgate.service import schedules

    job = apply(engine)
    approvals.approve(engine, "default", job, actor="bob")
    kept = stored(engine)
    before = count(engine, "schedule_changes")
    rhythm = {"id": job, "job": job, "cron": "*/30 * * * *", "params": {}}
    with pytest.raises(ConflictError) as refused:
        put_schedules(engine, [schedule_from_document(rhythm, now=engine_now())], source="api", now=engine_now())
    assert refused.value.field == "id" and "kept by definition" in refused.value.message
    with pytest.raises(ConflictError):
        schedules.delete(engine, "default", job, now=engine_now(), actor="ops")
    assert stored(engine) == kept and count(engine, "schedule_changes") == before  # nothing written
    assert set_paused(engine, "default", job, True, now=engine_now(), actor="ops")
    assert stored(engine).schedule.paused


# --- trigger_type on every path --------------------------------------------------------------


@pytest.mark.parametrize(
    ("declared", "trigger", "allowed"),
    [
        ("manual", TriggerType.CRON, False),
        ("manual", TriggerType.EVENT, False),
        ("manual", TriggerType.MANUAL, True),
        ("cron", TriggerType.MANUAL, True),
        ("cron", TriggerType.INTERVAL, False),
        ("cron", TriggerType.BACKFILL, True),
        ("event", TriggerType.CRON, False),
        ("interval", TriggerType.ADAPTIVE, True),
    ],
)
def test_a_trigger_the_definition_does_not_declare_is_refused_and_nothing_is_stored(
    engine: Engine, declared: str, trigger: TriggerType, allowed: bool
) -> None:
    extra = {"schedule_expression": "0 2 * * *"} if declared == "cron" else {}
    extra = {"schedule_expression": "15m"} if declared == "interval" else extra
    job = define(engine, trigger_type=declared, **extra)
    request = SubmitRequest(
        job,
        trigger_type=trigger,
        scope=Scope(),
        reason="test",
        source_event_id="e-1" if trigger is TriggerType.EVENT else None,
        trigger_id=f"TGTRIG-{trigger.value}",
    )
    if allowed:
        assert engine.submit(request).created
        return
    with pytest.raises(GovernanceRefusal) as refused:
        engine.submit(request)
    assert refused.value.code == "trigger_type_not_allowed" and refused.value.field == "trigger_type"
    assert f"trigger_type {declared}" in refused.value.message
    assert count(engine, "job_runs") == 0


# --- schedules refused when stored --------------------------------------------------------------


def _doc(job: str, **extra: Any) -> Schedule:
    return schedule_from_document({"id": "nightly", "job": job, "cron": "0 2 * * *", **extra}, now=engine_now())


def engine_now() -> datetime:
    return datetime.now(UTC)


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"other": "1"}, "params.other"),  # not declared
        ({"day": "1; rm -rf /"}, "params.day"),  # against the declared pattern
        ({}, "params.day"),  # required and missing
        ({"day": "{{current_month}}"}, "params.day"),  # a magic param whose value never matches
    ],
)
def test_params_the_definition_refuses_are_refused_when_the_schedule_is_stored(
    engine: Engine, params: dict[str, str], field: str
) -> None:
    # Scheduled by hand only: a definition's own schedule with no params could never pass them.
    job = define(engine, trigger_type="manual", also_triggered_by=["cron"], job_definition_id="j",
                 params=[{"name": "day", "required": True, "pattern": "[0-9]{4}-[0-9]{2}-[0-9]{2}"}])  # fmt: skip
    before = count(engine, "schedules")
    with pytest.raises(ValidationError) as err:
        put_schedules(engine, [_doc(job, params=params)], source="test", now=engine_now())
    assert err.value.field == field and err.value.source == "nightly"
    assert count(engine, "schedules") == before and count(engine, "schedule_changes", "schedule_id = 'nightly'") == 0


def test_a_non_string_param_is_refused_in_the_document() -> None:
    with pytest.raises(ValidationError) as err:
        schedule_from_document({"id": "n", "job": "j", "cron": "0 2 * * *", "params": {"day": ["x"]}}, now=engine_now())
    assert err.value.field == "params.day"


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"paused": "false"}, "paused"),  # text, and truthy: it was stored paused
        ({"queue": "no", "cron": None, "event_type": "x.y"}, "queue"),
        ({"max_catchup": 1.7}, "max_catchup"),  # it was stored as 1
        ({"max_catchup": True}, "max_catchup"),
        ({"id": "n" * 201}, "schedule_id"),
        ({"timezone": "localtime"}, "timezone"),  # the host's own setting: schedulers would disagree
        ({"timezone": "posixrules"}, "timezone"),
    ],
)
def test_a_value_of_the_wrong_kind_is_refused_not_coerced(extra: dict[str, Any], field: str) -> None:
    doc = {"id": "n", "job": "j", "cron": "0 2 * * *", **extra}
    with pytest.raises(ValidationError) as err:
        schedule_from_document({k: v for k, v in doc.items() if v is not None}, now=engine_now())
    assert err.value.field == field


@pytest.mark.parametrize(
    ("extra", "field", "says"),
    [
        ({"cron": None, "window_seconds": 0.5}, "window_seconds", "from 1 to"),  # not "every"
        ({"cron": None, "every_seconds": -1}, "every_seconds", "from 1 to"),
        ({"cron": None, "every_seconds": 0}, "every_seconds", "from 1 to"),  # the same range as -1's
        ({"max_catchup": -1}, "max_catchup", "from 1 to 100000"),
        ({"max_catchup": 0}, "max_catchup", "from 1 to 100000"),
        ({"misfire_grace_seconds": -1}, "misfire_grace_seconds", "from 0 to 3162240000"),
    ],
)
def test_a_number_out_of_range_is_named_by_its_key_with_the_range_that_holds(
    extra: dict[str, Any], field: str, says: str
) -> None:
    doc = {"id": "n", "job": "j", "cron": "0 2 * * *", **extra}
    with pytest.raises(ValidationError) as err:
        schedule_from_document({k: v for k, v in doc.items() if v is not None}, now=engine_now())
    assert err.value.field == field and says in err.value.message


def test_re_applying_an_interval_schedule_keeps_its_anchor_and_does_not_fire_it_again(engine: Engine) -> None:
    """A document without an anchor starts a new schedule now; applied again later, it keeps
    the stored anchor: nothing changes, nothing is recorded, no extra fire."""
    job = define(engine, trigger_type="interval", schedule_expression="1h")
    doc = {"id": "hourly", "job": job, "every_seconds": 3600}
    t0 = datetime(2026, 6, 1, 13, 0, tzinfo=UTC)
    put_schedules(engine, [schedule_from_document(doc, now=t0)], source="cli", now=t0)
    first = stored(engine, "hourly")
    later = t0 + timedelta(minutes=20)
    put_schedules(engine, [schedule_from_document(doc, now=later)], source="cli", now=later)
    again = stored(engine, "hourly")
    assert again.schedule.anchor == first.schedule.anchor == t0
    with engine.store.read() as tx:
        assert [c.field for c in tx.changes_list("default", "hourly")] == ["created"]
    moved = {**doc, "anchor": "2026-06-01T13:30:00Z"}  # a document naming one moves it
    put_schedules(engine, [schedule_from_document(moved, now=later)], source="cli", now=later)
    assert stored(engine, "hourly").schedule.anchor == datetime(2026, 6, 1, 13, 30, tzinfo=UTC)


def test_a_schedule_id_given_twice_is_refused_and_nothing_is_stored(engine: Engine) -> None:
    job = define(engine, trigger_type="cron", schedule_expression="0 5 * * *")
    twice = [_doc(job), _doc(job, cron="0 3 * * *")]
    with pytest.raises(ValidationError) as err:
        put_schedules(engine, twice, source="cli", now=engine_now())
    assert err.value.field == "id" and count(engine, "schedules", "schedule_id = 'nightly'") == 0


def test_a_schedule_for_a_manual_definition_is_refused_naming_its_trigger_type(engine: Engine) -> None:
    job = define(engine)  # trigger_type manual
    with pytest.raises(ValidationError) as err:
        put_schedules(engine, [_doc(job)], source="test", now=engine_now())
    assert err.value.field == "job" and "trigger_type manual" in err.value.message
    assert count(engine, "schedules") == 0


def test_an_unapproved_definition_is_refused_or_waits_paused_when_asked(engine: Engine) -> None:
    job = define(engine, approve=False, trigger_type="cron", schedule_expression="0 4 * * *", job_definition_id="j")
    with engine.store.write() as tx:  # the definition's own schedule is not the point here
        tx.schedule_delete("default", "j")
    with pytest.raises(ValidationError) as err:
        put_schedules(engine, [_doc(job)], source="test", now=engine_now())
    assert (
        err.value.field == "job" and "is not approved" in err.value.message and "--allow-pending" in err.value.message
    )
    assert count(engine, "schedules") == 0
    warnings: list[str] = []
    put_schedules(engine, [_doc(job)], source="test", now=engine_now(), allow_pending=True, warnings=warnings)
    assert stored(engine, "nightly").state == "paused: unapproved"
    assert warnings and "stored paused (unapproved)" in warnings[0]
    with pytest.raises(ValidationError):  # resuming it by hand is refused while it would not fire
        set_paused(engine, "default", "nightly", False, now=engine_now(), actor="ops")
    approvals.approve(engine, "default", job, actor="bob")  # the approval resumes it
    assert stored(engine, "nightly").state == "active"


def test_an_operators_pause_outlasts_a_new_version_and_its_approval(engine: Engine) -> None:
    """Found by a review: an incident pause, then a new version applied and approved, and the
    approval resumed the schedule. Only a pause waiting for the approval is the approval's."""
    job = apply(engine)
    approvals.approve(engine, "default", job, actor="bob")
    set_paused(engine, "default", "TGJOBDEF-REPLAY-SAMPLING-001", True, now=engine.clock.now(), actor="ops")
    apply(engine, schedule_expression="30 3 * * *")
    assert stored(engine).state == "paused" and stored(engine).schedule.cron == "30 3 * * *"
    approvals.approve(engine, "default", job, actor="bob")
    assert stored(engine).state == "paused"
    set_paused(engine, "default", "TGJOBDEF-REPLAY-SAMPLING-001", False, now=engine.clock.now(), actor="ops")
    assert stored(engine).state == "active"


def test_an_edit_never_resumes_a_paused_schedule(engine: Engine) -> None:
    """Found by a review: ``schedules add`` over a paused schedule stored it active. An edit keeps
    a pause (resuming is ``schedules resume``); a document asking for a pause pauses; and a
    schedule paused only until its definition's approval runs once an edit finds it approved."""
    job = define(engine, trigger_type="interval", schedule_expression="1h")
    doc = {"id": "hourly", "job": job, "every_seconds": 3600}
    now = engine.clock.now()
    put_schedules(engine, [schedule_from_document(doc, now=now)], source="cli", now=now)
    set_paused(engine, "default", "hourly", True, now=now, actor="ops")
    put_schedules(engine, [schedule_from_document({**doc, "every_seconds": 1800}, now=now)], source="cli", now=now)
    edited = stored(engine, "hourly")
    assert edited.schedule.paused and edited.schedule.every == timedelta(minutes=30) and edited.state == "paused"
    set_paused(engine, "default", "hourly", False, now=now, actor="ops")
    put_schedules(engine, [schedule_from_document({**doc, "paused": True}, now=now)], source="cli", now=now)
    assert stored(engine, "hourly").state == "paused"


def test_an_operator_pausing_a_schedule_waiting_for_approval_keeps_it_paused(engine: Engine) -> None:
    """Found by a review: paused (unapproved) after a new version, paused by an operator
    ("already paused", nothing recorded), then resumed by the approval."""
    job = apply(engine)
    approvals.approve(engine, "default", job, actor="bob")
    apply(engine, schedule_expression="30 3 * * *")
    assert stored(engine).state == "paused: unapproved"
    assert set_paused(engine, "default", "TGJOBDEF-REPLAY-SAMPLING-001", True, now=engine.clock.now(), actor="ops")
    approvals.approve(engine, "default", job, actor="bob")
    assert stored(engine).state == "paused"


def test_a_batch_window_definition_takes_new_versions_after_its_window_length_changed(engine: Engine) -> None:
    """Found by a review: a change of window length re-anchors the stored grid where the last
    closed window ended; the next version (a description changed, the length kept) was given
    the epoch anchor again and refused as cutting across windows already run, depending on the
    time of day, with no way for the author to name an anchor. A new version keeps the grid."""
    clock = FakeClock(datetime(2026, 3, 2, 10, 20, tzinfo=UTC))
    engine.clock = engine.definitions.clock = clock
    fields = {"job_definition_id": "windowed", "trigger_type": "batch_window"}
    apply(engine, **fields, schedule_expression="1h")
    clock.advance(timedelta(hours=2))
    apply(engine, **fields, schedule_expression="7m")  # re-anchored at 12:00, the last window's end
    regridded = stored(engine, "windowed").schedule
    assert regridded.anchor == datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
    for later in (timedelta(minutes=57), timedelta(hours=5, minutes=3)):
        clock.advance(later)
        apply(engine, **fields, schedule_expression="7m", description=f"v at {clock.now():%H:%M}")
        assert stored(engine, "windowed").schedule.anchor == regridded.anchor  # the grid kept
    clock.advance(timedelta(minutes=10))
    apply(engine, **fields, schedule_expression="1h")  # and its length changed again
    moved = stored(engine, "windowed").schedule
    assert (moved.anchor - regridded.anchor) % timedelta(minutes=7) == timedelta(0)


def test_applying_an_earlier_versions_content_makes_it_current_with_its_own_schedule(engine: Engine) -> None:
    """Found by a review: applying v1's content after v2 made v1 current again but said
    'unchanged', and kept v2's own schedule."""
    first = engine.apply_definitions([parse_definition(SEED_15, "test", engine.config)], applied_by="ada")[0]
    second = engine.apply_definitions(
        [parse_definition({**SEED_15, "schedule_expression": "0 4 * * *"}, "test", engine.config)], applied_by="ada"
    )[0]
    assert (first.version, first.created, second.version, second.created) == (1, True, 2, True)
    assert stored(engine).schedule.cron == "0 4 * * *"
    again = engine.apply_definitions([parse_definition(SEED_15, "test", engine.config)], applied_by="ada")[0]
    assert (again.version, again.created, again.reverted) == (1, False, True)
    assert stored(engine).schedule.cron == "0 2 * * *"  # v1's own schedule again
    same = engine.apply_definitions([parse_definition(SEED_15, "test", engine.config)], applied_by="ada")[0]
    assert (same.version, same.created, same.reverted) == (1, False, False)


def test_an_approved_version_made_current_again_runs_its_schedule(engine: Engine) -> None:
    """Found by a regression review: v1 approved, v2 applied (waiting), v1 applied again: v1's
    own schedule stayed 'paused: unapproved' though its content's approval stands."""
    job = apply(engine)
    approvals.approve(engine, "default", job, actor="bob")
    assert stored(engine).state == "active"
    apply(engine, schedule_expression="0 4 * * *")
    assert stored(engine).state == "paused: unapproved"
    apply(engine)  # v1 again
    item = stored(engine)
    assert item.schedule.cron == "0 2 * * *" and item.state == "active"
    set_paused(engine, "default", item.schedule.schedule_id, True, actor="op", now=engine.clock.now())
    apply(engine, schedule_expression="0 4 * * *")
    apply(engine)
    assert stored(engine).schedule.paused  # an operator's pause stays theirs
