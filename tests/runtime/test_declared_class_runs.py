"""Job classes declared in jobgate.yaml, end to end on both backends (issue 25 item 5): a
definition of a declared class is applied, approved and run by a worker with its class's default
priority and audit materiality; safe mode and the scheduler policy hold it by its own name and by
the built-in class it gates as; a run stored under it reads back and replays after the class has
left the configuration; and a refused definition or run stores nothing."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from runtime_support import running_worker, wait_status

from helpers import count, make_config
from jobgate.contracts import event_contract, validate
from jobgate.core.errors import ConfigurationError, GovernanceRefusal, ValidationError
from jobgate.core.models import JobClass, Priority, Scope
from jobgate.core.policy import Admission, evaluate
from jobgate.core.records import AuditFilter
from jobgate.core.states import RunStatus
from jobgate.definitions import load_definitions
from jobgate.governance.policy_file import parse_policy
from jobgate.runtime.outbox import RecordingSink, envelope, publish_once
from jobgate.service import approvals, audit, safemode
from jobgate.service.engine import Engine
from jobgate.service.replay import replay
from jobgate.service.submission import SubmitRequest
from jobgate.store.base import RunFilter
from jobgate.store.sqlstore import Store

CLASSES = [
    {
        "name": "RECONCILIATION_JOB",
        "gates_as": "MAINTENANCE_JOB",
        "default_priority": "high",
        "audit_material": True,
        "description": "month-end ledger reconciliation",
    },
    {"name": "PARTNER_EXPORT_JOB", "gates_as": "FEDERATION_SYNC_JOB"},
]
RECON = """\
job_definition_id: recon
job_class: RECONCILIATION_JOB
handler: engine_handlers:succeed
"""


def world(database_url: str, base: Path, **overrides: Any) -> Engine:
    base.mkdir(parents=True, exist_ok=True)
    return Engine(Store(database_url), make_config(base, job_classes=CLASSES, **overrides))


@pytest.fixture
def declared(database_url: str, tmp_path: Path) -> Iterator[Engine]:
    engine = world(database_url, tmp_path / "w")
    yield engine
    engine.store.dispose()


def apply_and_approve(engine: Engine, folder: Path, files: dict[str, str]) -> None:
    """As an operator would: the definitions folder applied, then each approved by an admin."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    loaded = load_definitions([folder], engine.config)
    engine.apply_definitions(loaded)
    for item in loaded:
        approvals.approve(engine, item.definition.tenant_id, item.job_definition_id, actor="test-admin")


def submit(engine: Engine, job: str, **fields: Any) -> str:
    request = SubmitRequest(job, scope=Scope(), requested_by="ada", reason="month end", **fields)
    return engine.submit(request, actor="ada").run.job_run_id


def test_a_declared_class_runs_end_to_end_with_its_priority_and_audit(declared: Engine, tmp_path: Path) -> None:
    engine = declared
    apply_and_approve(
        engine,
        tmp_path / "defs",
        {
            "recon.yaml": RECON,
            "export.yaml": RECON.replace("recon", "export").replace("RECONCILIATION_JOB", "PARTNER_EXPORT_JOB"),
            "urgent.yaml": RECON.replace("recon", "urgent") + "priority: critical\n",
            "plain.yaml": RECON.replace("recon", "plain").replace("RECONCILIATION_JOB", "MAINTENANCE_JOB"),
        },
    )
    runs = {job: submit(engine, job) for job in ("recon", "export", "urgent", "plain")}
    with running_worker(engine):
        done = {job: wait_status(engine, run_id, RunStatus.COMPLETED) for job, run_id in runs.items()}
    assert done["recon"].job_class == "RECONCILIATION_JOB" and done["recon"].priority is Priority.HIGH
    assert done["urgent"].priority is Priority.CRITICAL  # the definition's own priority wins
    assert (done["export"].job_class, done["export"].priority) == ("PARTNER_EXPORT_JOB", Priority.NORMAL)
    with engine.store.read() as tx:
        stored = tx.definition_get("default", "recon")
        listed = tx.runs_list(RunFilter(tenant_id="default", job_class="RECONCILIATION_JOB"))
    assert stored is not None and stored.job_class == "RECONCILIATION_JOB" and "priority" not in stored.content
    assert {r.job_run_id for r in listed} == {runs["recon"], runs["urgent"]}

    def ends(run_id: str) -> list[str]:
        entries = audit.search(engine, AuditFilter(tenant_id="default", target_id=run_id))
        return [e.event.action for e in entries if e.event.action == "run.completed"]

    # Audit-material: every end of its runs is in the audit log; the other class's are not.
    assert ends(runs["recon"]) == ["run.completed"] and ends(runs["urgent"]) == ["run.completed"]
    assert ends(runs["export"]) == []
    assert (done["plain"].job_class, done["plain"].priority) == (JobClass.MAINTENANCE_JOB, Priority.NORMAL)
    # The creation records the declared class as it was resolved (sealed with the run); a run of
    # a built-in class records nothing more than before.
    report = replay(engine, runs["recon"])
    assert report.match, report.first_difference
    assert report.binding is not None and report.binding["job_class"] == {
        "name": "RECONCILIATION_JOB",
        "gates_as": "MAINTENANCE_JOB",
        "default_priority": "high",
        "audit_material": True,
    }
    export = replay(engine, runs["export"])
    assert export.match and export.binding is not None
    assert export.binding["job_class"] == {"name": "PARTNER_EXPORT_JOB", "gates_as": "FEDERATION_SYNC_JOB"}
    plain = replay(engine, runs["plain"])
    assert plain.match and plain.binding is not None and "job_class" not in plain.binding
    # Its events name it and conform to their CSI contracts (declared_job_class).
    sink = RecordingSink()
    while publish_once(engine.store, [sink], engine.clock):
        pass
    mine = [e for e in sink.events if e.job_run_id == runs["recon"]]
    assert {e.event_type for e in mine} >= {"job_started", "job_completed"}
    for e in mine:
        assert e.payload["job_class"] == "RECONCILIATION_JOB"
        validate(event_contract(e.event_type), envelope(e))


def test_a_stored_run_reads_back_and_replays_after_its_class_is_removed(
    database_url: str, tmp_path: Path, declared: Engine
) -> None:
    apply_and_approve(declared, tmp_path / "defs", {"recon.yaml": RECON})
    run_id = submit(declared, "recon")
    with running_worker(declared):
        wait_status(declared, run_id, RunStatus.COMPLETED)
    # The class leaves jobgate.yaml; the record does not depend on it.
    later = Engine(Store(database_url), make_config(tmp_path / "w"))
    try:
        assert later.config.job_classes == {}
        with later.store.read() as tx:
            run = tx.run_get(run_id)
            (only,) = tx.runs_list(RunFilter(tenant_id="default", job_class="RECONCILIATION_JOB"))
        assert run is not None and (run.job_class, run.priority) == ("RECONCILIATION_JOB", Priority.HIGH)
        assert only.job_run_id == run_id
        report = replay(later, run_id)
        assert report.match and report.notes == (), report.first_difference
        simulated = replay(later, run_id, simulation=True)  # today's configuration refuses the class
        assert not simulated.match and "unknown job class 'RECONCILIATION_JOB'" in str(simulated.first_difference)
        # Deny by default: no new run of a class the configuration no longer declares.
        before = count(later, "job_runs")
        with pytest.raises(ValidationError) as refused:
            submit(later, "recon")
        assert refused.value.field == "job_class" and count(later, "job_runs") == before
    finally:
        later.store.dispose()


@pytest.mark.parametrize(
    ("text", "field"),
    [
        (RECON.replace("RECONCILIATION_JOB", "RECONCILE_JOB"), "job_class"),  # not declared
        (RECON + "audit_required: false\n", "audit_required"),  # its class is audit-material
    ],
)
def test_a_refused_definition_stores_nothing(declared: Engine, tmp_path: Path, text: str, field: str) -> None:
    folder = tmp_path / "defs"
    folder.mkdir()
    (folder / "a-fine.yaml").write_text(RECON.replace("recon", "fine"), encoding="utf-8")
    (folder / "b-bad.yaml").write_text(text.replace("recon", "bad"), encoding="utf-8")
    with pytest.raises(ValidationError) as refused:
        declared.apply_definitions(load_definitions([folder], declared.config))
    assert refused.value.field == field and refused.value.source == str(folder / "b-bad.yaml"), refused.value
    assert count(declared, "definitions") == 0 and count(declared, "job_runs") == 0


def test_safe_mode_suspends_a_declared_class_by_its_name_or_the_class_it_gates_as(
    database_url: str, tmp_path: Path
) -> None:
    # MAINTENANCE_JOB is suspended: RECONCILIATION_JOB, which gates as it, is held too. The
    # declared PARTNER_EXPORT_JOB is suspended by name; FEDERATION_SYNC_JOB, the class it gates
    # as, is not: suspending a declared class does not reach the built-in one.
    engine = world(
        database_url,
        tmp_path / "w",
        safe_mode={"suspend_job_classes": ["MAINTENANCE_JOB", "PARTNER_EXPORT_JOB"]},
    )
    try:
        apply_and_approve(
            engine,
            tmp_path / "defs",
            {
                "recon.yaml": RECON,
                "export.yaml": RECON.replace("recon", "export").replace("RECONCILIATION_JOB", "PARTNER_EXPORT_JOB"),
                "sync.yaml": RECON.replace("recon", "sync").replace("RECONCILIATION_JOB", "FEDERATION_SYNC_JOB"),
            },
        )
        queued = submit(engine, "recon")  # before safe mode: held at its attempt instead
        safemode.activate(engine, "default", actor="ops", reason="incident")
        before = count(engine, "job_runs")
        for job, rule in (
            ("recon", "suspended_class:MAINTENANCE_JOB"),
            ("export", "suspended_class:PARTNER_EXPORT_JOB"),
        ):
            with pytest.raises(GovernanceRefusal) as refused:
                submit(engine, job)
            assert (refused.value.code, refused.value.rule) == ("safe_mode_active", rule)
        assert count(engine, "job_runs") == before  # nothing stored
        free = submit(engine, "sync")
        with running_worker(engine):
            held = wait_status(engine, queued, RunStatus.HELD)
            wait_status(engine, free, RunStatus.COMPLETED)
            assert held.hold_reason == "safe_mode_active"
            safemode.deactivate(engine, "default", actor="ops", reason="over")
            wait_status(engine, queued, RunStatus.COMPLETED)
        refusals = audit.search(engine, AuditFilter(tenant_id="default", action="run.refused"))
        assert [e.event.payload["rule"] for e in refusals] == [
            "suspended_class:MAINTENANCE_JOB",
            "suspended_class:PARTNER_EXPORT_JOB",
        ]
    finally:
        engine.store.dispose()


def test_the_refusal_names_the_class_a_declared_one_gates_as(database_url: str, tmp_path: Path) -> None:
    engine = world(database_url, tmp_path / "w", safe_mode={"suspend_job_classes": ["MAINTENANCE_JOB"]})
    try:
        apply_and_approve(engine, tmp_path / "defs", {"recon.yaml": RECON})
        safemode.activate(engine, "default", actor="ops", reason="incident")
        with pytest.raises(GovernanceRefusal) as refused:
            submit(engine, "recon")
        assert "suspends MAINTENANCE_JOB (RECONCILIATION_JOB gates as it)" in refused.value.message
    finally:
        engine.store.dispose()


NOON = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def test_policy_rules_of_either_name_bind_a_declared_class() -> None:
    policy = parse_policy(
        {
            "policy_id": "P",
            "version": 1,
            "trigger_types": {
                "id": "SP-T",
                "by_job_class": {"MAINTENANCE_JOB": ["manual", "cron"], "RECONCILIATION_JOB": ["cron"]},
            },
            "blackouts": [{"id": "SP-B", "daily": "11:00-13:00", "job_classes": ["FEDERATION_SYNC_JOB"]}],
        },
        "policy.yaml",
        declared=("RECONCILIATION_JOB", "PARTNER_EXPORT_JOB"),
    )

    def judged(job_class: str, gates_as: str | None, trigger: str = "manual") -> str | None:
        a = Admission("default", job_class, trigger, "normal", "r", None, NOON, gates_as=gates_as)
        refusal = evaluate(policy, a)
        return None if refusal is None else refusal.rule

    assert judged("MAINTENANCE_JOB", None) is None
    assert judged("RECONCILIATION_JOB", "MAINTENANCE_JOB") == "SP-T"  # its own rule is narrower
    assert judged("RECONCILIATION_JOB", "MAINTENANCE_JOB", "cron") is None
    assert judged("PARTNER_EXPORT_JOB", "FEDERATION_SYNC_JOB") == "SP-B"  # its gates_as class's blackout
    with pytest.raises(ConfigurationError) as unknown:  # a class neither built in nor declared
        parse_policy({"policy_id": "P", "version": 1, "blackouts": [{"id": "B", "daily": "1:00-2:00",
                      "job_classes": ["RECONCILIATION_JOB"]}]}, "policy.yaml")  # fmt: skip
    assert "unknown job class 'RECONCILIATION_JOB'" in str(unknown.value)


def test_the_scheduler_policy_holds_a_declared_class_by_its_gates_as_rule(database_url: str, tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "policy_id": "P",
                "version": 1,
                "trigger_types": {"id": "SP-T", "by_job_class": {"MAINTENANCE_JOB": ["cron"]}},
            }
        )
    )
    engine = world(database_url, tmp_path / "w", policy=str(path))
    try:
        apply_and_approve(engine, tmp_path / "defs", {"recon.yaml": RECON})
        with pytest.raises(GovernanceRefusal) as refused:
            submit(engine, "recon")
        assert refused.value.rule == "SP-T" and count(engine, "job_runs") == 0
        assert "MAINTENANCE_JOB (so RECONCILIATION_JOB, which gates as it)" in refused.value.message
    finally:
        engine.store.dispose()
