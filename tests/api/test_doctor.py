"""``jobgate doctor``: the judgements (pure, every threshold) and the command."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from tests.cli.test_cli import jobgate

from jobgate.core.capabilities import Capability
from jobgate.core.records import LockInfo
from jobgate.service import doctor
from jobgate.service.doctor import Level
from jobgate.store.base import WorkerInfo
from jobgate.store.migrate import HEAD

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def worker(beat_ago: float, stopped: bool = False, **capabilities: Capability) -> WorkerInfo:
    at = NOW - timedelta(seconds=beat_ago)
    found = {digest: c.as_json() for digest, c in capabilities.items()}
    return WorkerInfo("w", "h", 1, 4, ("default",), at, at, at if stopped else None, found)


def test_a_definition_no_live_worker_can_run_is_named_red_when_runs_wait() -> None:
    cannot = Capability("default", "my-job", False, reason="cannot import module 'mypkg'")
    can = Capability("default", "my-job", True, code_digest="sha256:c")
    other = Capability("acme", "their-job", False, reason="runner 'etl' is not registered")
    waiting = {"d1": ("default", "my-job", 3)}
    red = doctor.judge_capable_workers(NOW, [worker(1, d1=cannot, d2=other)], waiting)
    assert red.level is Level.RED
    assert "my-job (3 waiting): cannot import module 'mypkg'" in red.detail and "their-job (0 waiting)" in red.detail
    scoped = doctor.judge_capable_workers(NOW, [worker(1, d1=cannot, d2=other)], waiting, tenant_id="acme")
    assert scoped.level is Level.AMBER and "my-job" not in scoped.detail  # another tenant's, nothing waiting
    # One live worker that can is enough; a stale one that could does not count.
    assert doctor.judge_capable_workers(NOW, [worker(1, d1=cannot), worker(2, d1=can)], waiting).level is Level.GREEN
    assert doctor.judge_capable_workers(NOW, [worker(1, d1=cannot), worker(600, d1=can)], waiting).level is Level.RED
    assert doctor.judge_capable_workers(NOW, [], waiting).level is Level.GREEN  # the workers check says it


@pytest.mark.parametrize(
    ("waited", "level"),
    [(None, Level.GREEN), (5, Level.GREEN), (60, Level.AMBER), (899, Level.AMBER), (900, Level.RED)],
)
def test_queue_wait_thresholds(waited: float | None, level: Level) -> None:
    oldest = None if waited is None else NOW - timedelta(seconds=waited)
    assert doctor.judge_queue(NOW, 0 if waited is None else 3, oldest).level is level


def test_schema_workers_leader_and_outbox() -> None:
    assert doctor.judge_schema(HEAD).level is Level.GREEN
    assert doctor.judge_schema(None).level is Level.RED and doctor.judge_schema("0001").level is Level.RED
    assert doctor.judge_workers(NOW, [worker(1)], due=5, embedded=False).level is Level.GREEN
    assert doctor.judge_workers(NOW, [worker(1), worker(60)], due=0, embedded=False).level is Level.AMBER
    assert doctor.judge_workers(NOW, [], due=5, embedded=False).level is Level.RED
    assert doctor.judge_workers(NOW, [], due=0, embedded=False).level is Level.AMBER
    assert doctor.judge_workers(NOW, [worker(1, stopped=True)], due=5, embedded=True).level is Level.GREEN
    held = LockInfo("scheduler-leader", "s1", 3, NOW, NOW + timedelta(seconds=10))
    lapsed = LockInfo("scheduler-leader", "s1", 3, NOW - timedelta(minutes=1), NOW - timedelta(seconds=1))
    assert doctor.judge_leader(NOW, held, schedules=2).level is Level.GREEN
    assert doctor.judge_leader(NOW, lapsed, schedules=2).level is Level.RED
    assert doctor.judge_leader(NOW, None, schedules=0).level is Level.GREEN
    assert doctor.judge_outbox(NOW, 0, None).level is Level.GREEN
    assert doctor.judge_outbox(NOW, 10, NOW - timedelta(minutes=2)).level is Level.AMBER
    assert doctor.judge_outbox(NOW, 10, NOW - timedelta(hours=1)).level is Level.RED
    assert doctor.worst([doctor.Check("a", Level.GREEN, ""), doctor.Check("b", Level.AMBER, "")]) is Level.AMBER


def test_anchoring_is_amber_once_the_oldest_unanchored_entry_waited_two_windows() -> None:
    hour = timedelta(hours=1)
    assert doctor.judge_anchoring(NOW, [], hour).level is Level.GREEN
    fresh = doctor.judge_anchoring(NOW, [("acme", NOW - 90 * timedelta(minutes=1))], hour)
    assert fresh.level is Level.GREEN and "(acme) is 90 min old" in fresh.detail
    stale = doctor.judge_anchoring(NOW, [("acme", NOW - 30 * timedelta(minutes=1)), ("b", NOW - 3 * hour)], hour)
    assert stale.level is Level.AMBER and "(b) is 180 min old" in stale.detail


def test_a_missing_evidence_key_is_red_once_anchors_are_signed() -> None:
    assert doctor.judge_evidence_key("k1", None, 0, "k1").level is Level.GREEN
    assert doctor.judge_evidence_key(None, None, 0, None).level is Level.AMBER  # never signed anything
    missing = doctor.judge_evidence_key(None, None, 1, "k1")
    assert missing.level is Level.RED and "'k1'" in missing.detail and "1 trusted" in missing.detail
    broken = doctor.judge_evidence_key(None, "not a key", 0, None)
    assert broken.level is Level.RED and "not a key" in broken.detail


def test_the_command_reports_every_check_and_fails_on_red(tmp_path: Path) -> None:
    jobgate(tmp_path, "init", "site")
    folder = tmp_path / "site"
    jobgate(folder, "submit", "demo-hello")
    jobgate(folder, "schedules", "add", "beat", "demo-window", "--window", "60")
    proc = jobgate(folder, "--json", "doctor", check=False)
    checks = {c["check"]: c for c in json.loads(proc.stdout)}
    assert list(checks) == [
        "database", "migrations", "queue", "workers", "capable workers", "scheduler leader", "outbox",
        "dependencies", "schedules", "anchoring", "evidence key",
    ]  # fmt: skip
    assert checks["schedules"]["status"] == "green" and checks["evidence key"]["status"] == "green"
    assert checks["migrations"]["status"] == "green" and checks["queue"]["detail"].startswith("1 due")
    assert checks["scheduler leader"]["status"] == "red"  # a schedule and no scheduler running
    assert proc.returncode == 1 and "red" in proc.stderr


def test_a_postgresql_role_that_row_level_security_does_not_bind_is_red() -> None:
    red = doctor.judge_tenancy("postgresql", "postgres")
    assert red is not None and red.level is Level.RED and "postgres" in red.detail and "row-level" in red.detail
    green = doctor.judge_tenancy("postgresql", None)
    assert green is not None and green.level is Level.GREEN
    assert doctor.judge_tenancy("sqlite", None) is None  # no row security on SQLite to bypass


def test_doctor_reports_tenant_separation_on_postgresql_only(engine: object) -> None:
    from jobgate.service.engine import Engine

    assert isinstance(engine, Engine)
    checks = {c.name: c for c in doctor.run_checks(engine)}
    if engine.store.dialect == "postgresql":  # the suite's role is an ordinary one
        assert checks["tenant separation"].level is Level.GREEN
    else:
        assert "tenant separation" not in checks


def test_without_a_leader_only_active_timed_schedules_count_as_not_firing(engine: object) -> None:
    """Paused schedules fire nothing anyway, and event, queue, policy and alert schedules fire
    where their input arrives: none of them needs a scheduler."""
    from jobgate.scheduling.model import Schedule, ScheduleKind, check_schedule
    from jobgate.service.engine import Engine

    assert isinstance(engine, Engine)
    made = [
        Schedule("timed", "job", ScheduleKind.INTERVAL, NOW, every=timedelta(hours=1)),
        Schedule("paused", "job", ScheduleKind.INTERVAL, NOW, every=timedelta(hours=1), paused=True),
        Schedule("evented", "job", ScheduleKind.EVENT, NOW, event_type="x.y"),
        Schedule("watching", "job", ScheduleKind.POLICY, NOW, condition="load > 3"),
    ]
    with engine.store.write() as tx:
        for s in made:
            tx.schedule_put(check_schedule(s), watermark=NOW, source="test", now=NOW)
    checks = {c.name: c for c in doctor.run_checks(engine)}
    assert checks["scheduler leader"].level is Level.RED
    assert "1 active timed schedules are not firing" in checks["scheduler leader"].detail
