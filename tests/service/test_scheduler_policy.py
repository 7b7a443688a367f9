"""The scheduler policy: each rule refuses by its id (nothing stored, audited), a change of the
file is audited before it binds, and every run's snapshot names the policy that admitted it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.helpers import count, define, make_config

from jobgate.core.errors import ConfigurationError, GovernanceRefusal
from jobgate.core.models import Priority, Scope, TriggerType
from jobgate.core.policy import CEILINGS, Admission, evaluate
from jobgate.core.records import AuditFilter
from jobgate.governance.policy_file import parse_policy
from jobgate.service import audit
from jobgate.service.engine import Engine
from jobgate.service.submission import SYSTEM_TENANT, SubmitRequest
from jobgate.store.sqlstore import Store

POLICY: dict[str, Any] = {
    "policy_id": "FAGF-SCHEDULER-POLICY",
    "version": 1,
    "trigger_types": {"id": "SP-TRIGGERS", "by_job_class": {"FEDERATION_SYNC_JOB": ["event"]}},
    "priority": {"id": "SP-PRIORITY", "max": "high", "by_role": {"consumer": "normal"}},
    "manual_reason": {"id": "SP-REASON"},
    "blackouts": [
        {"id": "SP-FREEZE", "start": "2026-12-24T00:00:00Z", "end": "2026-12-27T00:00:00Z"},
        {"id": "SP-NIGHTLY", "daily": "23:00-01:00", "timezone": "UTC", "job_classes": ["REPLAY_JOB"]},
    ],
    "quotas": {
        "id": "SP-QUOTA",
        "runs_per_day": 100,
        "concurrent_runs": 3,
        "by_tenant": {"small": {"runs_per_day": 1}},
    },
}
NOON = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def admission(**overrides: Any) -> Admission:
    base: dict[str, Any] = {
        "tenant_id": "default",
        "job_class": "MAINTENANCE_JOB",
        "trigger_type": "manual",
        "priority": "normal",
        "reason": "month end",
        "role": None,
        "now": NOON,
    }
    base.update(overrides)
    return Admission(**base)


@pytest.mark.parametrize(
    ("overrides", "rule"),
    [
        ({}, None),
        ({"job_class": "FEDERATION_SYNC_JOB"}, "SP-TRIGGERS"),
        ({"job_class": "FEDERATION_SYNC_JOB", "trigger_type": "event"}, None),
        ({"priority": "critical"}, "SP-PRIORITY"),
        ({"priority": "high", "role": "consumer"}, "SP-PRIORITY"),
        ({"priority": "high", "role": "operator"}, None),
        ({"reason": "  "}, "SP-REASON"),
        ({"reason": None, "trigger_type": "cron"}, None),
        ({"now": datetime(2026, 12, 25, 9, 0, tzinfo=UTC)}, "SP-FREEZE"),
        ({"now": datetime(2026, 11, 30, 23, 30, tzinfo=UTC), "job_class": "REPLAY_JOB"}, "SP-NIGHTLY"),
        ({"now": datetime(2026, 11, 30, 0, 30, tzinfo=UTC), "job_class": "REPLAY_JOB"}, "SP-NIGHTLY"),
        ({"now": datetime(2026, 11, 30, 23, 30, tzinfo=UTC)}, None),  # the nightly window is REPLAY_JOB's only
        ({"runs_today": 100}, "SP-QUOTA"),
        ({"open_runs": 3}, "SP-QUOTA"),
        ({"tenant_id": "small", "runs_today": 1}, "SP-QUOTA"),
    ],
)
def test_each_rule_refuses_by_its_id(overrides: dict[str, Any], rule: str | None) -> None:
    refusal = evaluate(parse_policy(POLICY, "policy.yaml"), admission(**overrides))
    assert (None if refusal is None else refusal.rule) == rule
    if refusal is not None:
        assert refusal.code == "policy_refused" and rule in refusal.message


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"version": 0}, "version"),
        ({"trigger_types": {"by_job_class": {}}}, "trigger_types.id"),
        ({"trigger_types": {"id": "X", "by_job_class": {"NOPE": ["manual"]}}}, "trigger_types.by_job_class.NOPE"),
        ({"priority": {"id": "X", "max": "urgent"}}, "priority.max"),
        ({"blackouts": [{"id": "X", "daily": "25:00-26:00"}]}, "blackouts[0].daily"),
        ({"unknown": 1}, "unknown"),
    ],
)
def test_a_bad_policy_file_names_the_field(change: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigurationError) as bad:
        parse_policy({**POLICY, **change}, "policy.yaml")
    assert field in str(bad.value)


@pytest.fixture
def governed(database_url: str, tmp_path: Path) -> Iterator[tuple[Engine, Path]]:
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump({**POLICY, "quotas": {"id": "SP-QUOTA", "concurrent_runs": 2}}))
    store = Store(database_url)
    engine = Engine(store, make_config(tmp_path, policy=str(path)))
    define(engine, job_definition_id="job")
    define(engine, job_definition_id="export", job_class="FEDERATION_SYNC_JOB", trigger_type="event")
    yield engine, path
    store.dispose()


def submit(engine: Engine, job: str = "job", reason: str | None = "ok", **kw: Any) -> str:
    request = SubmitRequest(job, scope=Scope(), requested_by="ada", reason=reason, **kw)
    return engine.submit(request, actor="ada").run.job_run_id


def test_the_engine_enforces_binds_and_audits_the_policy(governed: tuple[Engine, Path]) -> None:
    engine, path = governed
    first = submit(engine)
    for job, reason, rule in (("job", None, "SP-REASON"), ("export", "x", "SP-TRIGGERS")):
        with pytest.raises(GovernanceRefusal) as refused:
            submit(engine, job, reason)
        assert refused.value.rule == rule
    submit(engine, "export", trigger_type=TriggerType.EVENT, source_event_id="e1", event_type="x.y")
    with pytest.raises(GovernanceRefusal) as over:
        submit(engine)  # two open runs already: the concurrent quota
    assert over.value.rule == "SP-QUOTA" and count(engine, "job_runs") == 2
    refusals = audit.search(engine, AuditFilter(tenant_id="default", action="run.refused"))
    assert [e.event.payload["rule"] for e in refusals] == ["SP-REASON", "SP-TRIGGERS", "SP-QUOTA"]
    with engine.store.read() as tx:
        run = tx.run_get(first)
        assert run is not None
        snapshot = tx.snapshot_get(run.config_snapshot_id)
    assert snapshot is not None and snapshot.content["scheduler_policy"]["version"] == 1
    # A new version is audited once, then binds the next runs.
    path.write_text(yaml.safe_dump({**POLICY, "version": 2, "quotas": {"id": "SP-QUOTA", "concurrent_runs": 9}}))
    later = submit(engine)
    submit(engine)
    with engine.store.read() as tx:
        run = tx.run_get(later)
        assert run is not None
        snapshot = tx.snapshot_get(run.config_snapshot_id)
    assert snapshot is not None and snapshot.content["scheduler_policy"]["version"] == 2
    loaded = audit.search(engine, AuditFilter(tenant_id=SYSTEM_TENANT, action="policy.loaded"))
    assert [e.event.payload["version"] for e in loaded] == [1, 2]


@pytest.mark.parametrize(
    ("policy", "request_fields", "rule"),
    [
        ({"priority": {"id": "SP-P", "by_role": {"consumer": "low"}}}, {"role": "consumer"}, "SP-P"),
        ({"manual_reason": {"id": "SP-R"}}, {"reason": None}, "SP-R"),
        ({"trigger_types": {"id": "SP-T", "by_job_class": {"MAINTENANCE_JOB": ["cron"]}}}, {}, "SP-T"),
        ({"quotas": {"id": "SP-Q", "runs_per_day": 0}}, {}, "SP-Q"),
        ({"quotas": {"id": "SP-C", "concurrent_runs": 0}}, {}, "SP-C"),
        ("blackout", {}, "SP-NOW"),
    ],
)
def test_each_rule_refuses_through_the_engine_stores_nothing_and_is_audited(
    database_url: str, tmp_path: Path, policy: Any, request_fields: dict[str, Any], rule: str
) -> None:
    if policy == "blackout":
        now = datetime.now(UTC)
        window = {"id": "SP-NOW", "start": (now.replace(year=now.year - 1)).isoformat(), "end": "2999-01-01T00:00:00Z"}
        policy = {"blackouts": [window]}
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump({"policy_id": "P", "version": 1, **policy}))
    store = Store(database_url)
    engine = Engine(store, make_config(tmp_path, policy=str(path)))
    try:
        define(engine, job_definition_id="job")
        fields: dict[str, Any] = {"reason": "ok", **request_fields}
        with pytest.raises(GovernanceRefusal) as refused:
            engine.submit(SubmitRequest("job", scope=Scope(), requested_by="ada", **fields), actor="ada")
        assert refused.value.rule == rule and count(engine, "job_runs") == 0
        (entry,) = audit.search(engine, AuditFilter(tenant_id="default", action="run.refused"))
        assert entry.event.payload["rule"] == rule
    finally:
        store.dispose()


@pytest.mark.parametrize("priority", [p.value for p in Priority])
@pytest.mark.parametrize("ceiling", CEILINGS)
def test_every_priority_is_judged_against_every_ceiling(priority: str, ceiling: str) -> None:
    # Found 4 (issue 19): the ceiling's order once lacked ``background`` and crashed on it. The
    # order is the one of ``Priority`` (critical first), so a run is refused exactly when its
    # priority is more urgent than the ceiling.
    policy = parse_policy({"policy_id": "P", "version": 1, "priority": {"id": "SP-P", "max": ceiling}}, "p.yaml")
    refusal = evaluate(policy, admission(priority=priority))
    order = [p.value for p in Priority]
    assert (refusal is not None) == (order.index(priority) < order.index(ceiling))


def test_a_background_definition_runs_under_a_priority_rule(database_url: str, tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump({"policy_id": "P", "version": 1, "priority": {"id": "SP-P", "max": "normal"}}))
    store = Store(database_url)
    engine = Engine(store, make_config(tmp_path, policy=str(path)))
    try:
        define(engine, job_definition_id="report", priority="background")
        run = engine.submit(SubmitRequest("report", scope=Scope(), requested_by="ada", reason="ok"), actor="ada").run
        assert run.priority is Priority.BACKGROUND
    finally:
        store.dispose()


def test_an_unknown_priority_in_the_policy_names_the_allowed_list() -> None:
    with pytest.raises(ConfigurationError) as bad:
        parse_policy({"policy_id": "P", "version": 1, "priority": {"id": "X", "by_tenant": {"a": "urgent"}}}, "p.yaml")
    assert "priority.by_tenant.a" in str(
        bad.value
    ) and "low, normal, high, critical (background is never capped)" in str(bad.value)
