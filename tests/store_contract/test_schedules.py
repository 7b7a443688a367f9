"""Schedules, their watermarks and episodes, the slots they missed, their change history and the
facts policy schedules read, on both backends.

The contract: a schedule is created once and updated in place, never moving its watermark; every
piece of progress (watermark, episode, interval, configuration seen) moves only by
compare-and-set on the value the caller planned from; misses are recorded once per slot; a change
is recorded in the schedule's history and in the tenant's audit chain together; every read is
scoped to its tenant.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from tests.store_contract.support import T0

from jobgate.core.records import AuditFilter
from jobgate.scheduling.model import MisfirePolicy, OverlapPolicy, Schedule, ScheduleKind
from jobgate.scheduling.plan import Miss, MissReason
from jobgate.scheduling.records import ScheduleChange
from jobgate.service.engine import Engine

EVERY = timedelta(minutes=5)


def _schedule(schedule_id: str = "every-5m", *, tenant: str = "default", **kw: object) -> Schedule:
    fields: dict[str, object] = {
        "every": EVERY, "params": {"day": "{{current_date}}"}, "misfire": MisfirePolicy.FIRE_ALL,
        "misfire_grace": timedelta(seconds=30), "max_catchup": 7, "overlap": OverlapPolicy.FORBID,
    }  # fmt: skip
    fields.update(kw)
    kind = fields.pop("kind", ScheduleKind.INTERVAL)
    return Schedule(schedule_id, "nightly", kind, T0, tenant_id=tenant, **fields)  # type: ignore[arg-type]


def _put(engine: Engine, s: Schedule, **kw: object) -> bool:
    with engine.store.write() as tx:
        return tx.schedule_put(s, watermark=kw.pop("watermark", T0), source=kw.pop("source", "api"), now=T0, **kw)  # type: ignore[arg-type]


def test_schedule_put_creates_a_schedule_once_and_reads_it_back(engine: Engine) -> None:
    s = _schedule()
    assert _put(engine, s)
    with engine.store.read() as tx:
        stored = tx.schedule_get("default", "every-5m")
        assert tx.schedule_get("tenant-b", "every-5m") is None
        assert tx.schedule_get("default", "unknown") is None
    assert stored is not None
    assert stored.schedule == s
    assert (stored.watermark, stored.source, stored.created_at, stored.updated_at) == (T0, "api", T0, T0)
    assert (stored.episode_open, stored.episodes, stored.config_digest_seen) == (False, 0, None)
    assert (stored.pause_reason, stored.failures, stored.last_error, stored.retry_at) == (None, 0, None, None)
    assert stored.state == "active"


def test_schedule_put_of_a_stored_schedule_updates_it_but_never_its_watermark(engine: Engine) -> None:
    _put(engine, _schedule())
    later = T0 + timedelta(hours=1)
    changed = _schedule(every=timedelta(minutes=10), paused=True)
    with engine.store.write() as tx:
        created = tx.schedule_put(changed, watermark=later, source="file", now=later, pause_reason="operator")
    assert not created
    with engine.store.read() as tx:
        stored = tx.schedule_get("default", "every-5m")
    assert stored is not None
    assert stored.schedule == changed
    assert (stored.watermark, stored.source, stored.created_at, stored.updated_at) == (T0, "file", T0, later)
    assert (stored.pause_reason, stored.state) == ("operator", "paused: operator")


def test_schedules_list_is_by_tenant_then_id(engine: Engine) -> None:
    for tenant, sid in (("tenant-b", "a"), ("default", "z"), ("default", "m")):
        _put(engine, _schedule(sid, tenant=tenant))
    with engine.store.read() as tx:
        assert [(s.schedule.tenant_id, s.schedule.schedule_id) for s in tx.schedules_list()] == [
            ("default", "m"), ("default", "z"), ("tenant-b", "a"),
        ]  # fmt: skip
        assert [s.schedule.schedule_id for s in tx.schedules_list("default")] == ["m", "z"]
        assert tx.schedules_list("tenant-c") == []


def test_schedule_set_paused_pauses_with_a_reason_and_resumes_without_one(engine: Engine) -> None:
    _put(engine, _schedule())
    with engine.store.write() as tx:
        assert tx.schedule_set_paused("default", "every-5m", True, T0 + timedelta(minutes=1), "unapproved")
        paused = tx.schedule_get("default", "every-5m")
        assert tx.schedule_set_paused("default", "every-5m", False, T0 + timedelta(minutes=2), "ignored")
        resumed = tx.schedule_get("default", "every-5m")
        assert not tx.schedule_set_paused("tenant-b", "every-5m", True, T0)
        assert not tx.schedule_set_paused("default", "unknown", True, T0)
    assert paused is not None and resumed is not None
    assert (paused.schedule.paused, paused.pause_reason) == (True, "unapproved")
    assert paused.updated_at == T0 + timedelta(minutes=1)
    assert (resumed.schedule.paused, resumed.pause_reason) == (False, None)


def test_failures_are_counted_in_a_row_until_the_schedule_recovers(engine: Engine) -> None:
    _put(engine, _schedule("a"))
    _put(engine, _schedule("b"))
    retry = T0 + timedelta(minutes=1)
    with engine.store.write() as tx:
        assert tx.schedules_failing_count() == 0
        tx.schedule_failed("default", "a", "boom", T0)
        tx.schedule_failed("default", "a", "x" * 5000, retry)
        tx.schedule_failed("default", "unknown", "nothing to count", retry)
        failing = tx.schedule_get("default", "a")
        assert tx.schedules_failing_count() == 1
        tx.schedule_recovered("default", "a")
        tx.schedule_recovered("default", "b")  # was not failing: nothing changes
        recovered = tx.schedule_get("default", "a")
        assert tx.schedules_failing_count() == 0
    assert failing is not None and recovered is not None
    assert (failing.failures, failing.retry_at, failing.state) == (2, retry, "failing")
    assert failing.last_error is not None and 0 < len(failing.last_error) <= 2000
    assert (recovered.failures, recovered.last_error, recovered.retry_at, recovered.state) == (0, None, None, "active")


def test_schedule_delete_removes_the_schedule_and_its_misses(engine: Engine) -> None:
    _put(engine, _schedule())
    _put(engine, _schedule(tenant="tenant-b"))
    with engine.store.write() as tx:
        tx.misses_record("default", [Miss("every-5m", T0, MissReason.PAUSED)], T0)
        assert tx.schedule_delete("default", "every-5m")
        assert not tx.schedule_delete("default", "every-5m")
        assert tx.schedule_get("default", "every-5m") is None
        assert tx.misses_list("default", "every-5m") == []
        assert tx.schedule_get("tenant-b", "every-5m") is not None


def test_the_watermark_moves_only_from_the_value_planned_from(engine: Engine) -> None:
    _put(engine, _schedule())
    t1, t2 = T0 + EVERY, T0 + 2 * EVERY
    with engine.store.write() as tx:
        assert tx.schedule_advance("default", "every-5m", T0, t1)
        assert not tx.schedule_advance("default", "every-5m", T0, t2)  # a second scheduler planned from T0
        assert not tx.schedule_advance("tenant-b", "every-5m", t1, t2)
        assert tx.schedule_advance("default", "every-5m", t1, t2)
        stored = tx.schedule_get("default", "every-5m")
    assert stored is not None and stored.watermark == t2


def test_misses_are_recorded_once_per_slot_and_listed_oldest_first(engine: Engine) -> None:
    _put(engine, _schedule())
    later = T0 + timedelta(minutes=1)
    slots = [T0 + i * EVERY for i in range(4)]
    with engine.store.write() as tx:
        tx.misses_record("default", [Miss("every-5m", slots[2], MissReason.PAUSED)], T0)
        tx.misses_record(
            "default",
            [Miss("every-5m", slots[0], MissReason.SKIPPED), Miss("every-5m", slots[2], MissReason.OVERLAP)],
            later,
        )
        tx.misses_record("default", [Miss("every-5m", slots[1], MissReason.BEYOND_MAX_CATCHUP)], later)
        tx.misses_record("tenant-b", [Miss("every-5m", slots[3], MissReason.SKIPPED)], later)
        tx.misses_record("default", [], later)
    with engine.store.read() as tx:
        listed = tx.misses_list("default", "every-5m")
        page = tx.misses_page("default", "every-5m", reason=None, after=None, limit=10)
        paused = tx.misses_page("default", "every-5m", reason="paused", after=None, limit=10)
        after = tx.misses_page("default", "every-5m", reason=None, after=slots[0], limit=1)
    assert listed == [(slots[0], "skipped"), (slots[1], "beyond_max_catchup"), (slots[2], "paused")]
    assert [(m.fire_at, m.reason, m.recorded_at) for m in page] == [
        (slots[0], "skipped", later), (slots[1], "beyond_max_catchup", later), (slots[2], "paused", T0),
    ]  # fmt: skip
    assert [m.fire_at for m in paused] == [slots[2]]
    assert [m.fire_at for m in after] == [slots[1]]


def test_a_miss_names_the_event_a_paused_schedule_recorded(engine: Engine) -> None:
    _put(engine, _schedule())
    with engine.store.write() as tx:
        tx.misses_record("default", [Miss("every-5m", T0, MissReason.PAUSED, event_id="ev-1")], T0)
        tx.misses_record("default", [Miss("every-5m", T0 + EVERY, MissReason.PAUSED)], T0)
    with engine.store.read() as tx:
        assert tx.miss_of_event("default", "every-5m", "ev-1") == "paused"
        assert tx.miss_of_event("default", "every-5m", "ev-2") is None
        assert tx.miss_of_event("tenant-b", "every-5m", "ev-1") is None
        assert tx.miss_of_event("default", "other", "ev-1") is None


def test_an_episode_moves_only_from_the_state_seen(engine: Engine) -> None:
    _put(engine, _schedule("policy", kind=ScheduleKind.POLICY, every=None, condition="drift > 0.1"))
    with engine.store.write() as tx:
        assert tx.schedule_episode("default", "policy", (False, 0), (True, 1))
        assert not tx.schedule_episode("default", "policy", (False, 0), (True, 1))
        assert tx.schedule_episode("default", "policy", (True, 1), (False, 1))
        assert not tx.schedule_episode("tenant-b", "policy", (False, 1), (True, 2))
        stored = tx.schedule_get("default", "policy")
    assert stored is not None and (stored.episode_open, stored.episodes) == (False, 1)


def test_an_interval_is_retimed_only_from_the_period_seen(engine: Engine) -> None:
    _put(engine, _schedule())
    anchor = T0 + timedelta(hours=1)
    with engine.store.write() as tx:
        assert not tx.schedule_retime("default", "every-5m", timedelta(minutes=7), timedelta(minutes=9), anchor)
        assert tx.schedule_retime("default", "every-5m", EVERY, timedelta(minutes=9), anchor)
        assert not tx.schedule_retime("default", "every-5m", EVERY, timedelta(minutes=11), anchor)
        stored = tx.schedule_get("default", "every-5m")
    assert stored is not None
    assert stored.schedule == replace(_schedule(), every=timedelta(minutes=9), anchor=anchor)
    assert stored.watermark == T0


def test_the_configuration_seen_moves_only_from_the_digest_seen(engine: Engine) -> None:
    _put(engine, _schedule("config", kind=ScheduleKind.CONFIGURATION, every=None, config_profile="default"))
    with engine.store.write() as tx:
        assert not tx.schedule_config_seen("default", "config", "sha256:old", "sha256:a")
        assert tx.schedule_config_seen("default", "config", None, "sha256:a")
        assert not tx.schedule_config_seen("default", "config", None, "sha256:b")
        assert tx.schedule_config_seen("default", "config", "sha256:a", "sha256:b")
        stored = tx.schedule_get("default", "config")
    assert stored is not None and stored.config_digest_seen == "sha256:b"


def test_a_change_is_recorded_in_the_history_and_in_the_audit_chain(engine: Engine) -> None:
    _put(engine, _schedule())
    accepted = ScheduleChange(T0, "every", "300", "540", True, "recommender", "queue is short")
    refused = ScheduleChange(T0 + timedelta(seconds=1), "every", "540", "5", False, "recommender", "below min")
    with engine.store.write() as tx:
        tx.change_record("default", "every-5m", accepted)
        tx.change_record("default", "every-5m", refused)
        tx.change_record("tenant-b", "every-5m", accepted)
    with engine.store.read() as tx:
        assert tx.changes_list("default", "every-5m") == [accepted, refused]
        assert tx.changes_list("default", "unknown") == []
        entries = tx.audit_list(AuditFilter("default", target_type="schedule"))
    assert [(e.event.action, e.event.target_id, e.event.actor, e.event.reason) for e in entries] == [
        ("schedule.every", "every-5m", "recommender", "queue is short"),
        ("schedule.every", "every-5m", "recommender", "below min"),
    ]
    assert dict(entries[0].event.payload) == {"from": "300", "to": "540", "accepted": True}


def test_facts_are_listed_newest_first_per_tenant_and_name(engine: Engine) -> None:
    with engine.store.write() as tx:
        for i in range(3):
            tx.fact_record("default", "drift", i / 10, T0 + timedelta(seconds=i), f"probe-{i}")
        tx.fact_record("default", "other", 9.0, T0, "probe")
        tx.fact_record("tenant-b", "drift", 7.0, T0, "probe")
    with engine.store.read() as tx:
        facts = tx.facts_list("default", "drift")
        assert tx.facts_list("default", "drift", limit=1) == facts[:1]
        assert tx.facts_list("tenant-c", "drift") == []
    assert facts == [
        (T0 + timedelta(seconds=2), 0.2, "probe-2"),
        (T0 + timedelta(seconds=1), 0.1, "probe-1"),
        (T0, 0.0, "probe-0"),
    ]
