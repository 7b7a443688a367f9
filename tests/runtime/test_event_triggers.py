"""Events posted to jobgate: matched by type, de-duplicated by source event id, payload filtered."""

from __future__ import annotations

import dataclasses
import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text
from tests.helpers import count, define

from jobgate.core.errors import ConflictError, ValidationError
from jobgate.core.models import DefinitionStatus
from jobgate.scheduling.model import MisfirePolicy, OverlapPolicy, Schedule, ScheduleKind, check_schedule
from jobgate.service import approvals, pubsub_triggers
from jobgate.service.engine import Engine
from jobgate.service.pubsub_map import Subscription, Verdict, read_completion
from jobgate.service.triggers import emit_event, post_alert, record_fact
from jobgate.store.base import RunFilter
from jobgate.testing import connection

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def subscribe(engine: Engine, schedule_id: str, job: str, event_type: str, **kw: Any) -> None:
    s = check_schedule(Schedule(schedule_id, job, ScheduleKind.EVENT, T0, event_type=event_type, **kw))
    with engine.store.write() as tx:
        tx.schedule_put(s, watermark=T0, source="test", now=T0)


def emit(engine: Engine, event_type: str, event_id: str, **data: object) -> list[tuple[str, bool, str | None]]:
    fires = emit_event(engine, event_type=event_type, event_id=event_id, data=data, tenant_id="default", actor="t")
    return [(f.schedule_id, f.created, f.refused) for f in fires]


def test_an_event_fires_its_subscribers_once_and_a_duplicate_is_a_no_op(engine: Engine) -> None:
    job = define(engine, trigger_type="event", params=[{"name": "name", "pattern": "[A-Za-z]{1,20}"}])
    subscribe(engine, "on-done", job, "pipeline.completed", payload_params=("name",))
    assert emit(engine, "pipeline.completed", "ev-1", name="Ada", secret="hunter2") == [("on-done", True, None)]
    assert emit(engine, "pipeline.completed", "ev-1", name="Ada", secret="hunter2") == [("on-done", False, None)]
    # Another event under the same id is the sender's mistake: refused, as the API's
    # Idempotency-Key refuses another body, and nothing is stored.
    with pytest.raises(ConflictError) as other:
        emit(engine, "pipeline.completed", "ev-1", name="Bob")
    assert other.value.field == "data" and "other data" in other.value.message
    assert emit(engine, "pipeline.finished", "ev-2") == []
    with engine.store.read() as tx:
        rows = connection(tx).execute(text("SELECT params, trigger_type FROM job_runs")).all()
    assert rows == [('{"name":"Ada"}', "event")]  # only the listed field reaches the job


@pytest.mark.parametrize(("given", "stored"), [(1e-7, "0.0000001"), (1e16, "10000000000000000"), (12.5, "12.5")])
def test_a_number_in_an_event_reaches_a_decimal_param_as_its_value(engine: Engine, given: float, stored: str) -> None:
    """Found by a review: written with ``str`` (``1e-07``), which no decimal param takes."""
    job = define(engine, trigger_type="event", params=[{"name": "amt", "type": "decimal"}])
    subscribe(engine, "on-amt", job, "amt.ev", payload_params=("amt",))
    assert emit(engine, "amt.ev", "ev-1", amt=given) == [("on-amt", True, None)]
    with engine.store.read() as tx:
        (params,) = connection(tx).execute(text("SELECT params FROM job_runs")).scalars().all()
    assert params == f'{{"amt":"{stored}"}}'


def test_a_refused_or_paused_subscriber_is_recorded_and_stores_no_run(engine: Engine) -> None:
    job = define(engine, trigger_type="event")
    subscribe(engine, "a", job, "x.y")
    paused = define(engine, trigger_type="event")
    subscribe(engine, "b", paused, "x.y", paused=True)
    with engine.store.write() as tx:
        tx.definition_set_status("default", job, DefinitionStatus.SUSPENDED, T0)
    result = emit(engine, "x.y", "ev-9")
    assert [(s, created) for s, created, _ in result] == [("a", False), ("b", False)]
    assert "suspended" in (result[0][2] or "") and result[1][2] == "paused"
    assert count(engine, "job_runs") == 0
    with engine.store.read() as tx:
        assert [r for _, r in tx.misses_list("default", "a")] == ["refused"]
        assert [r for _, r in tx.misses_list("default", "b")] == ["paused"]


def test_an_event_recorded_paused_is_not_run_when_delivered_again_after_resume(engine: Engine) -> None:
    """Found by a review: delivered while paused (recorded ``paused``), then again after resume,
    the event ran: recorded paused and run. A redelivery of it is a no-op for that schedule;
    a new event runs."""
    job = define(engine, trigger_type="event")
    subscribe(engine, "on-done", job, "x.y", paused=True)
    assert emit(engine, "x.y", "ev-b") == [("on-done", False, "paused")]
    with engine.store.write() as tx:
        tx.schedule_set_paused("default", "on-done", False, T0)
    assert emit(engine, "x.y", "ev-b") == [("on-done", False, "recorded paused when first delivered")]
    assert count(engine, "job_runs") == 0
    assert emit(engine, "x.y", "ev-c")[0][1] is True
    with engine.store.read() as tx:
        assert [r for _, r in tx.misses_list("default", "on-done")] == ["paused"]


def test_an_event_delivered_again_after_the_configuration_changed_finds_its_run(engine: Engine) -> None:
    """The key covers the configuration's digest; safe mode's overrides (or an edited profile)
    change it. The run still holds its job's slot for that event id: one run per event, ever."""
    job = define(engine, trigger_type="event", params=[{"name": "name", "pattern": "[A-Za-z]{1,20}"}])
    subscribe(engine, "on-done", job, "pipeline.completed", payload_params=("name",))
    assert emit(engine, "pipeline.completed", "ev-1", name="Ada") == [("on-done", True, None)]
    with engine.store.write() as tx:  # safe mode binding new runs to tightened settings
        tx.safe_mode_activate("default", "ops", "an incident", T0, {"profile_overrides": {"timeout": 5}})
    with engine.store.read() as tx:
        (first,) = tx.runs_list(RunFilter(tenant_id="default"))
    assert emit(engine, "pipeline.completed", "ev-1", name="Ada") == [("on-done", False, None)]
    with pytest.raises(ConflictError):  # still one event: other data under its id is refused
        emit(engine, "pipeline.completed", "ev-1", name="Bob")
    assert emit(engine, "pipeline.completed", "ev-3", name="Ada") == [("on-done", True, None)]
    with engine.store.read() as tx:
        runs = tx.runs_list(RunFilter(tenant_id="default"))
    assert len(runs) == 2 and first.config_digest not in {r.config_digest for r in runs if r != first}
    long_id = "e" * 200  # a slot names a long id by its digest: the slot's column is bounded
    assert emit(engine, "pipeline.completed", long_id, name="Ada") == [("on-done", True, None)]
    assert emit(engine, "pipeline.completed", long_id, name="Ada") == [("on-done", False, None)]


@pytest.mark.parametrize("value", [None, True, False, {"a": 1}, ["Ada"]])
def test_event_data_that_is_not_a_string_or_a_number_is_refused_naming_it(engine: Engine, value: object) -> None:
    """``null`` or ``true`` reached the job as "None" or "True"; nothing fires now, nothing stored."""
    job = define(engine, trigger_type="event", params=[{"name": "name", "pattern": ".{1,20}"}])
    subscribe(engine, "on-done", job, "pipeline.completed", payload_params=("name",))
    with pytest.raises(ValidationError) as err:
        emit_event(
            engine,
            event_type="pipeline.completed",
            event_id="ev-1",
            data={"name": value},
            tenant_id="default",
            actor="t",
        )
    assert err.value.field == "data.name"
    assert count(engine, "job_runs") == 0
    assert emit(engine, "pipeline.completed", "ev-2", name=12) == [("on-done", True, None)]  # a number: its text


@pytest.mark.parametrize(
    ("event_id", "data", "field"),
    [
        ("", {}, "id"),
        ("x" * 201, {}, "id"),
        ("ok", {"v": float("nan")}, "data"),
        # Invisible: each printed as "h-1" and made its own run (found by a review).
        *[(f"h-1{c}", {}, "id") for c in ("\u200b", "\u007f", "\u0085", "\u202e", "\t", "\u2028")],
        # ... and those str.isprintable lets through, and another spelling of one letter
        *[(f"h-1{c}", {}, "id") for c in ("\u034f", "\ufe0f", "\u3164", "\u115f", "\uffa0")],
        ("cafe\u0301", {}, "id"),
    ],
)
def test_a_bad_event_is_refused_naming_the_field(
    engine: Engine, event_id: str, data: dict[str, object], field: str
) -> None:
    job = define(engine, trigger_type="event")
    subscribe(engine, "a", job, "x.y")
    with pytest.raises(ValidationError) as err:
        emit_event(engine, event_type="x.y", event_id=event_id, data=data, tenant_id="default", actor="t")
    assert err.value.field == field
    assert count(engine, "job_runs") == 0


@pytest.mark.parametrize("event_type", ["", "x y", "x\ty", "x" * 201, "é"])
def test_an_event_type_no_schedule_could_subscribe_to_is_refused(engine: Engine, event_type: str) -> None:
    """Every door says so (the API refused an empty type; the CLI answered "no schedule")."""
    with pytest.raises(ValidationError) as err:
        emit_event(engine, event_type=event_type, event_id="e-1", data={}, tenant_id="default", actor="t")
    assert err.value.field == "event_type"


def test_event_schedules_take_an_event_type_and_no_time(engine: Engine) -> None:
    with pytest.raises(ValidationError) as err:
        check_schedule(Schedule("e", "job", ScheduleKind.EVENT, T0))
    assert err.value.field == "event_type"
    with pytest.raises(ValidationError) as err:
        check_schedule(Schedule("e", "job", ScheduleKind.EVENT, T0, event_type="a", cron="* * * * *"))
    assert err.value.field == "cron"


# --- policy and alert triggers ----------------------------------------------------------------


def watch(engine: Engine, schedule_id: str, job: str, condition: str, kind: ScheduleKind = ScheduleKind.POLICY) -> None:
    s = check_schedule(Schedule(schedule_id, job, kind, T0, condition=condition))
    with engine.store.write() as tx:
        tx.schedule_put(s, watermark=T0, source="test", now=T0)


def observe(engine: Engine, name: str, value: float) -> list[str]:
    fires = record_fact(engine, tenant_id="default", name=name, value=value, source="test", actor="t")
    return [f.schedule_id for f in fires if f.fired]


def test_a_policy_fires_once_per_episode_not_once_per_evaluation(engine: Engine) -> None:
    job = define(engine, trigger_type="policy")
    watch(engine, "drift", job, "replay.drift_ratio > 0.05")
    series = [0.01, 0.07, 0.09, 0.08, 0.02, 0.03, 0.11, 0.12]
    fired = [observe(engine, "replay.drift_ratio", v) for v in series]
    assert fired == [[], ["drift"], [], [], [], [], ["drift"], []]
    with engine.store.read() as tx:
        rows = connection(tx).execute(text("SELECT trigger_id, trigger_type FROM job_runs ORDER BY trigger_id")).all()
        stored = tx.schedule_get("default", "drift")
        history = tx.facts_list("default", "replay.drift_ratio")
    made = "TGTRIG-drift@20260301T000000000000Z"  # the schedule as created (T0): its episodes are its own
    assert [tuple(r) for r in rows] == [(f"{made}.episode-1", "policy"), (f"{made}.episode-2", "policy")]
    assert stored is not None and (stored.episode_open, stored.episodes) == (True, 2)
    assert [v for _, v, _ in history] == list(reversed(series))


def test_a_policy_deleted_and_added_again_fires_its_own_episodes(engine: Engine) -> None:
    """Found by a review: a re-created policy schedule counted its episodes from one again, and
    its first episode's slot was the deleted schedule's (which holds its run for ever): the fire
    was reported and no run made."""
    job = define(engine, trigger_type="policy")
    watch(engine, "drift", job, "replay.drift_ratio > 0.05")
    assert observe(engine, "replay.drift_ratio", 0.07) == ["drift"]
    with engine.store.write() as tx:
        tx.schedule_delete("default", "drift")
    later = Schedule("drift", job, ScheduleKind.POLICY, T0, condition="replay.drift_ratio > 0.05", tenant_id="default")
    with engine.store.write() as tx:
        tx.schedule_put(check_schedule(later), watermark=T0, source="test", now=T0 + timedelta(minutes=2))
    assert observe(engine, "replay.drift_ratio", 0.01) == []
    assert observe(engine, "replay.drift_ratio", 0.09) == ["drift"]
    assert count(engine, "job_runs", "trigger_type = 'policy'") == 2


def test_other_facts_do_not_touch_a_policy(engine: Engine) -> None:
    job = define(engine, trigger_type="policy")
    watch(engine, "drift", job, "replay.drift_ratio > 0.05")
    assert observe(engine, "queue.depth", 1000) == []
    assert count(engine, "job_runs") == 0


def test_an_alert_fires_once_while_it_keeps_firing(engine: Engine) -> None:
    job = define(engine, trigger_type="alert")
    watch(engine, "on-drift", job, "alert.replay_drift.ratio > 0.05", ScheduleKind.ALERT)
    post = lambda firing, **data: [  # noqa: E731
        f.schedule_id
        for f in post_alert(engine, tenant_id="default", name="replay_drift", firing=firing, data=data, actor="t")
        if f.fired
    ]
    assert post(True, ratio=0.2) == ["on-drift"]
    assert post(True, ratio=0.3) == []
    assert post(False, ratio=0.01) == []
    assert post(True, ratio=0.4) == ["on-drift"]
    assert count(engine, "job_runs", "trigger_type = 'alert'") == 2


def test_a_refused_policy_fire_is_recorded_and_stores_no_run(engine: Engine) -> None:
    job = define(engine, trigger_type="policy")
    watch(engine, "drift", job, "x > 1")
    with engine.store.write() as tx:
        tx.definition_set_status("default", job, DefinitionStatus.SUSPENDED, T0)
    fires = record_fact(engine, tenant_id="default", name="x", value=2, source="test", actor="t")
    assert [(f.fired, "suspended" in (f.refused or "")) for f in fires] == [(False, True)]
    assert count(engine, "job_runs") == 0
    with engine.store.read() as tx:
        assert [r for _, r in tx.misses_list("default", "drift")] == ["refused"]


@pytest.mark.parametrize(
    ("name", "value", "field"), [("1x", 1.0, "name"), ("x", float("inf"), "value"), ("x", 10**400, "value")]
)
def test_a_bad_fact_is_refused_and_nothing_is_recorded(engine: Engine, name: str, value: float, field: str) -> None:
    with pytest.raises(ValidationError) as err:
        record_fact(engine, tenant_id="default", name=name, value=value, source="test", actor="t")
    assert err.value.field == field
    assert count(engine, "facts") == 0


@pytest.mark.parametrize(
    ("field", "value", "named"), [("b c", 3, "data.b c"), ("huge", 10**400, "data.huge"), ("inf", math.inf, "data")]
)
def test_an_alert_with_one_bad_field_records_nothing_and_fires_nothing(
    engine: Engine, field: str, value: object, named: str
) -> None:
    """Every field is checked before anything is recorded: the fields before the bad one in the
    alert's order (``a``) would have been recorded, and fired their schedule, first."""
    job = define(engine, trigger_type="alert")
    watch(engine, "on-a", job, "alert.disk.a > 5", ScheduleKind.ALERT)
    with pytest.raises(ValidationError) as err:
        post_alert(engine, tenant_id="default", name="disk", firing=True, data={"a": 10, field: value}, actor="t")
    assert err.value.field == named
    assert count(engine, "facts") == 0 and count(engine, "job_runs") == 0 and count(engine, "outbox") == 0
    fires = post_alert(engine, tenant_id="default", name="disk", firing=True, data={"a": 10}, actor="t")
    assert [f.fired for f in fires] == [True]  # the corrected alert opens the episode


def test_an_alert_whose_facts_names_grow_too_long_is_refused_saying_so(engine: Engine) -> None:
    """The name alone is allowed; ``alert.<name>.<field>`` is a fact name, 200 characters at most."""
    for name, data, field in (("a" * 195, {}, "name"), ("a" * 194, {"b": 1}, "data.b")):
        with pytest.raises(ValidationError, match="characters, at most 200") as err:
            post_alert(engine, tenant_id="default", name=name, firing=True, data=data, actor="t")
        assert err.value.field == field
    assert count(engine, "facts") == 0


@pytest.mark.parametrize(
    ("kind", "extra"),
    [(ScheduleKind.EVENT, {"event_type": "x.done"}), (ScheduleKind.POLICY, {"condition": "x > 1"})],
)
@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("overlap", OverlapPolicy.FORBID),
        ("misfire", MisfirePolicy.SKIP),
        ("misfire_grace", timedelta(seconds=5)),
        ("max_catchup", 3),
    ],
)
def test_options_a_schedule_fired_by_input_would_ignore_are_refused(
    kind: ScheduleKind, extra: dict[str, Any], option: str, value: object
) -> None:
    """Found by a review: ``--overlap forbid`` on an event schedule was stored and ignored (three
    events, three runs at once). An input-fired schedule has no late slot and no overlap rule."""
    with pytest.raises(ValidationError, match="fires on input, not on time") as err:
        check_schedule(Schedule("s", "job", kind, T0, **extra, **{option: value}))  # type: ignore[arg-type]
    assert err.value.field == option


def test_a_payload_param_the_definition_does_not_declare_is_refused_when_stored(engine: Engine) -> None:
    """Every event carrying it would be refused: a schedule that could never fire is refused,
    naming the field, and nothing is stored; a name listed twice is refused too."""
    from jobgate.service.schedules import put_schedules

    job = define(engine, trigger_type="event", params=[{"name": "name", "pattern": ".{1,20}"}])
    for listed in (("nosuch",), ("name", "name")):
        with pytest.raises(ValidationError) as err:
            s = check_schedule(Schedule("x", job, ScheduleKind.EVENT, T0, event_type="e", payload_params=listed))
            put_schedules(engine, [s], source="test", now=T0)
        assert err.value.field == "payload_params", listed
    assert count(engine, "schedules") == 0
    ok = check_schedule(Schedule("x", job, ScheduleKind.EVENT, T0, event_type="e", payload_params=("name",)))
    put_schedules(engine, [ok], source="test", now=T0)


def test_a_redelivery_finds_its_run_with_every_gate_closed_and_records_no_refusal(engine: Engine) -> None:
    """Found by a review: an event delivered again after its approval was revoked (or safe mode
    came on) was refused by every schedule, telling a retrying sender nothing was made, and
    audited and recorded as missed for a run that exists. A repeat is answered first (seed §11)."""
    job = define(engine, trigger_type="event")
    subscribe(engine, "a", job, "t.ev")
    subscribe(engine, "b", job, "t.ev")
    first = emit_event(engine, event_type="t.ev", event_id="rd1", data={}, tenant_id="default", actor="t")
    run_id = first[0].job_run_id
    assert run_id is not None and [(f.created, f.job_run_id) for f in first] == [(True, run_id), (False, run_id)]
    approvals.revoke(engine, "default", job, actor="root", reason="closed")
    entries, misses = count(engine, "audit_log"), count(engine, "schedule_misses")
    again = emit_event(engine, event_type="t.ev", event_id="rd1", data={}, tenant_id="default", actor="t")
    assert [(f.job_run_id, f.created, f.refused) for f in again] == [(run_id, False, None)] * 2
    assert (count(engine, "audit_log"), count(engine, "schedule_misses"), count(engine, "job_runs")) == (
        entries,
        misses,
        1,
    )
    with pytest.raises(ConflictError):  # other data under the same id is still the sender's mistake
        emit_event(engine, event_type="t.ev", event_id="rd1", data={"x": 1}, tenant_id="default", actor="t")
    fresh = emit_event(engine, event_type="t.ev", event_id="rd2", data={}, tenant_id="default", actor="t")
    assert all(f.job_run_id is None and f.refused for f in fresh) and count(engine, "job_runs") == 1


@pytest.mark.parametrize("event_id", ["pubsub:RES_A@2026-12-07T00:00:00Z", "pubsub:"])
def test_an_outside_event_cannot_take_a_pubsub_completions_id(engine: Engine, event_id: str) -> None:
    """Found by a review: an operator's event under a pub/sub completion's id held that
    completion's slot first, with its own params; the completion's run was never made."""
    job = define(engine, trigger_type="event")
    subscribe(engine, "a", job, "t.ev")
    with pytest.raises(ValidationError) as refused:
        emit_event(engine, event_type="t.ev", event_id=event_id, data={}, tenant_id="default", actor="t")
    assert refused.value.field == "id" and count(engine, "job_runs") == 0


def test_a_completion_run_named_by_its_timestamp_as_written_is_found_again(engine: Engine) -> None:
    """A pub/sub completion's run made before timestamps were read as instants is keyed by the
    timestamp as written: delivered again (the state key read at a restart after the upgrade),
    it finds that run instead of making a second one under the instant's name."""
    job = define(engine, trigger_type="event")
    sub = Subscription("R", job)
    message = {"result_name": "R", "status": "success", "timestamp": 1796511600}
    read = read_completion(message)
    assert read is not None and read.written_delivery_id is not None
    before = dataclasses.replace(read, delivery_id=read.written_delivery_id, written_delivery_id=None)
    [made] = pubsub_triggers.fire(engine, "default", Verdict(before, (sub,)), via="message")
    assert made.created and made.job_run_id is not None
    again = pubsub_triggers.fire(engine, "default", Verdict(read, (sub,)), via="state")
    assert [(f.job_run_id, f.created) for f in again] == [(made.job_run_id, False)]
    assert count(engine, "job_runs") == 1


def test_other_data_under_a_received_id_stores_nothing_even_for_a_schedule_added_since(engine: Engine) -> None:
    """Found by a regression review: a schedule added after an event's first delivery made a
    run of a redelivery carrying other data, while the earlier schedules said "received before
    with other data". The id names one event: refused (409, field data), nothing stored."""
    job, added = define(engine, trigger_type="event"), define(engine, trigger_type="event")
    subscribe(engine, "first", job, "t.ev")
    emit_event(engine, event_type="t.ev", event_id="e1", data={"n": 1}, tenant_id="default", actor="t")
    subscribe(engine, "since", added, "t.ev")
    with pytest.raises(ConflictError) as conflict:
        emit_event(engine, event_type="t.ev", event_id="e1", data={"n": 2}, tenant_id="default", actor="t")
    assert conflict.value.field == "data" and count(engine, "job_runs") == 1
    same = emit_event(engine, event_type="t.ev", event_id="e1", data={"n": 1}, tenant_id="default", actor="t")
    assert [f.created for f in same] == [False, True]  # the same event: the new schedule's job runs it


def test_another_type_under_a_received_id_is_a_conflict_not_a_repeat(engine: Engine) -> None:
    """Found by a review: the same id and data under another event type was answered as a
    repeat of the first (created false, its run), and the second type's schedule fired nothing."""
    job = define(engine, trigger_type="event")
    subscribe(engine, "items", job, "q.item")
    subscribe(engine, "others", job, "q.other")
    emit_event(engine, event_type="q.item", event_id="k1", data={"item": "a"}, tenant_id="default", actor="t")
    with pytest.raises(ConflictError) as conflict:
        emit_event(engine, event_type="q.other", event_id="k1", data={"item": "a"}, tenant_id="default", actor="t")
    assert conflict.value.field == "event_type" and "another event type" in str(conflict.value)
    assert count(engine, "job_runs") == 1
    again = emit_event(engine, event_type="q.item", event_id="k1", data={"item": "a"}, tenant_id="default", actor="t")
    assert [f.created for f in again] == [False]
