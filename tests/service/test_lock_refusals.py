"""Refusals under the write lock that creates runs, on every path that stores prepared
submissions: the audit entry names the submission refused (not the batch's first), the runs
prepared again after a safe-mode switch keep their batch's policy and count against one
another's quotas, one observation's
fires share the quota, and a backfill refused under the lock is audited. Nothing is stored."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from tests.helpers import count, define, make_config

from jobgate.core.errors import GovernanceRefusal
from jobgate.core.models import Scope
from jobgate.core.records import AuditFilter
from jobgate.service import approvals, audit, safemode, schedules, triggers
from jobgate.service.engine import Engine
from jobgate.service.submission import RefusedSubmission, SubmitRequest
from jobgate.store.sqlstore import Store

OPEN_POLICY = "policy_id: P\nversion: 1\n"
QUOTA_OF_ONE = OPEN_POLICY + "quotas: {id: SP-Q, runs_per_day: 1}\n"


def request(job: str, request_id: str) -> SubmitRequest:
    return SubmitRequest(job, scope=Scope(), requested_by="ada", reason="r", request_id=request_id)


def refusals(engine: Engine) -> list[tuple[str, str | None]]:
    entries = audit.search(engine, AuditFilter(tenant_id="default", action="run.refused"))
    return [(e.event.target_id, e.event.payload.get("rule")) for e in entries]


@pytest.fixture
def quota(database_url: str, tmp_path: Path) -> Iterator[Engine]:
    """A policy of one run a day, and safe mode that only overrides a profile value."""
    yield from _governed(database_url, tmp_path, QUOTA_OF_ONE)


@pytest.fixture
def open_policy(database_url: str, tmp_path: Path) -> Iterator[Engine]:
    """A policy that admits everything, and safe mode that only overrides a profile value."""
    yield from _governed(database_url, tmp_path, OPEN_POLICY)


def _governed(database_url: str, tmp_path: Path, policy: str) -> Iterator[Engine]:
    path = tmp_path / "policy.yaml"
    path.write_text(policy)
    config = make_config(
        tmp_path,
        policy=str(path),
        profiles={"default": {"replay_sample_size": 5}},
        safe_mode={"profile_overrides": {"replay_sample_size": 50}},
    )
    store = Store(database_url)
    engine = Engine(store, config)
    yield engine
    store.dispose()


def test_a_submission_prepared_again_under_the_lock_keeps_its_policy(open_policy: Engine) -> None:
    """Safe mode switched on between preparation and creation, with overrides and no refusal:
    the submission is prepared again under the new period, still admitted and bound by the
    scheduler policy of its batch (it was once prepared again with no policy at all)."""
    engine = open_policy
    job = define(engine)
    now = engine.clock.now()
    prepared = engine.pipeline.prepare([request(job, "a")], now=now, actor="ada")
    assert prepared[0].facts is not None and prepared[0].facts.policy is not None
    safemode.activate(engine, "default", actor="root", reason="incident")
    with engine.store.write() as tx:
        (result,) = engine.pipeline.create(tx, prepared, now)
    with engine.store.read() as tx:
        snapshot = tx.snapshot_get(result.run.config_snapshot_id)
    assert snapshot is not None and snapshot.content["values"]["replay_sample_size"] == 50  # the new period's
    assert snapshot.content["scheduler_policy"]["policy_id"] == "P"  # and the batch's policy


def test_a_refusal_under_the_lock_names_the_submission_it_refused(engine: Engine) -> None:
    first, second = define(engine, job_definition_id="first"), define(engine, job_definition_id="second")
    now = engine.clock.now()
    prepared = engine.pipeline.prepare([request(first, "a"), request(second, "b")], now=now, actor="ada")
    approvals.revoke(engine, "default", second, actor="root")
    with pytest.raises(RefusedSubmission) as refused:
        engine.pipeline.store_prepared(prepared, now, actor="ada")
    assert refused.value.code == "definition_not_approved" and refused.value.request is prepared[1].request
    assert [target for target, _ in refusals(engine)] == ["second"]
    assert count(engine, "job_runs") == 0


def test_submissions_prepared_again_count_against_one_anothers_quota(quota: Engine) -> None:
    job = define(quota)
    now = quota.clock.now()
    # Prepared apart, each sees no run today and is admitted; created together they are two.
    a = quota.pipeline.prepare([request(job, "a")], now=now, actor="ada")
    b = quota.pipeline.prepare([request(job, "b")], now=now, actor="ada")
    safemode.activate(quota, "default", actor="root", reason="incident")  # both prepared again
    with pytest.raises(RefusedSubmission) as refused:
        quota.pipeline.store_prepared([*a, *b], now, actor="ada")
    assert refused.value.rule == "SP-Q" and refused.value.request is b[0].request
    assert count(quota, "job_runs") == 0


def test_one_observation_fires_its_schedules_within_the_quota(quota: Engine) -> None:
    for job in ("left", "right"):
        define(quota, job_definition_id=job, trigger_type="policy")
        now = quota.clock.now()
        doc = {"id": f"when-{job}", "job": job, "condition": "cpu.load > 5"}
        schedules.put_schedules(quota, [schedules.schedule_from_document(doc, now=now)], source="test", now=now)
    fires = triggers.record_fact(quota, tenant_id="default", name="cpu.load", value=9, source="t", actor="t")
    assert sorted(f.fired for f in fires) == [False, True]
    assert count(quota, "job_runs") == 1
    (refused,) = [f for f in fires if not f.fired]
    assert refused.refused is not None and "SP-Q" in refused.refused
    assert refusals(quota) == [(refused.job_definition_id, "SP-Q")]


def test_a_fire_over_the_quota_is_refused_audited_and_the_observation_kept(quota: Engine) -> None:
    job = define(quota, job_definition_id="watch", trigger_type="policy")
    now = quota.clock.now()
    doc = {"id": "when-watch", "job": job, "condition": "cpu.load > 5"}
    schedules.put_schedules(quota, [schedules.schedule_from_document(doc, now=now)], source="test", now=now)
    quota.submit(request(job, "today"), actor="ada")  # the day's one run, so the fire is refused
    before = count(quota, "job_runs")
    (fire,) = triggers.record_fact(quota, tenant_id="default", name="cpu.load", value=9, source="t", actor="t")
    assert not fire.fired and fire.refused is not None and count(quota, "job_runs") == before
    assert refusals(quota) == [(job, "SP-Q")]
    with quota.store.read() as tx:
        assert [value for _, value, _ in tx.facts_list("default", "cpu.load")] == [9.0]  # the observation kept


def test_a_refused_backfill_stores_nothing_and_is_audited(engine: Engine) -> None:
    job = define(engine, trigger_type="cron", schedule_expression="0 * * * *")  # its schedule comes with it
    now = engine.clock.now()
    approvals.revoke(engine, "default", job, actor="root")
    with pytest.raises(GovernanceRefusal):
        schedules.backfill(engine, tenant_id="default", job_definition_id=job, start=now - timedelta(hours=3), end=now)
    assert count(engine, "job_runs") == 0 and [t for t, _ in refusals(engine)] == [job]
