"""What the engine records and hands on, against its CSI contracts, on both backends: the
trigger of a run of every trigger type, facts and alerts (queue metrics, observability alerts)
judged alike by the contract and by the code that records them, anchor records as the sink
receives them, and resolved configuration snapshots."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from helpers import define
from jobgate.contracts import event_contract, validate, violations
from jobgate.core.errors import ValidationError
from jobgate.core.models import ExecutionWindow, TriggerType
from jobgate.evidence import anchors, sinks
from jobgate.service import schedules, triggers
from jobgate.service.engine import Engine
from jobgate.service.snapshots import resolve_snapshot
from jobgate.service.submission import SubmitRequest
from jobgate.testing import connection

TRIGGER = "comp.TG.INPUT.SCHEDULER-TRIGGER.v1_0"
METRIC = "comp.TG.INPUT.QUEUE-METRIC.v1_0"
ALERT = "comp.TG.INPUT.OBSERVABILITY-ALERT.v1_0"
ANCHOR = "comp.DAL.INPUT.ANCHOR-CANDIDATE.v1_0"
CONFIG = "comp.TG.OUTPUT.RESOLVED-CONFIG.v1_0"


def trigger_of(engine: Engine, job_run_id: str) -> dict[str, Any]:
    with engine.store.read() as tx:
        found = tx.run_trigger(job_run_id)
    assert found is not None
    return found


def test_the_trigger_of_every_trigger_type_conforms(engine: Engine) -> None:
    start = datetime(2026, 6, 25, 18, tzinfo=UTC)
    for kind in TriggerType:
        # A definition of each trigger type (a trigger_type is enforced): cron and interval ones
        # keep a schedule, so they say when.
        when = {TriggerType.CRON: "0 2 * * *", TriggerType.INTERVAL: "1h"}.get(kind)
        declared = TriggerType.MANUAL if kind is TriggerType.WORKFLOW else kind
        job = define(engine, trigger_type=declared.value, **({"schedule_expression": when} if when else {}))
        request = SubmitRequest(
            job,
            trigger_type=kind,
            requested_by="ada",
            source_event_id=f"ev-{kind.value}" if kind in (TriggerType.EVENT, TriggerType.QUEUE) else None,
            event_type="trustgate.quarantine.created" if kind is TriggerType.EVENT else None,
            window=ExecutionWindow(start, start + timedelta(hours=1)) if kind is TriggerType.BATCH_WINDOW else None,
            policy_context={"policy_bundle": "FAGF-2026.2"},
        )
        document = trigger_of(engine, engine.submit(request, actor="ada").run.job_run_id)
        assert document["trigger_type"] == kind.value
        validate(TRIGGER, document)
    assert violations(TRIGGER, {**document, "trigger_type": "event", "source_event_id": None}) != []


def policy_schedule(engine: Engine, job: str, condition: str) -> None:
    now = engine.clock.now()
    doc = {"id": f"when-{condition.split()[0]}", "job": job, "condition": condition}
    schedules.put_schedules(engine, [schedules.schedule_from_document(doc, now=now)], source="test", now=now)


def test_a_queue_metric_that_conforms_is_recorded_and_fires_its_policy(engine: Engine) -> None:
    job = define(engine, trigger_type="policy")
    policy_schedule(engine, job, "queue.dal_anchor.depth > 1000")
    metric = {"name": "queue.dal_anchor.depth", "value": 1500, "source": "dal-collector", "tenant_id": "default"}
    validate(METRIC, metric)
    (fire,) = triggers.record_fact(
        engine,
        tenant_id=metric["tenant_id"],
        name=metric["name"],
        value=metric["value"],
        source=metric["source"],
        actor="test",
    )
    assert fire.fired and fire.job_run_id is not None
    document = trigger_of(engine, fire.job_run_id)
    validate(TRIGGER, document)
    assert document["trigger_type"] == "policy" and document["policy_context"]["value"] == 1500


@pytest.mark.parametrize(
    ("metric", "field"),
    [
        ({"name": "9lives", "value": 1}, "name"),
        ({"name": "queue depth", "value": 1}, "name"),
        ({"name": "", "value": 1}, "name"),
        ({"name": "q", "value": "many"}, "value"),
        ({"name": "q", "value": True}, "value"),
    ],
)
def test_a_queue_metric_is_refused_alike_by_the_contract_and_the_recorder(
    engine: Engine, metric: dict[str, Any], field: str
) -> None:
    assert field in {v.path for v in violations(METRIC, metric)}
    with pytest.raises(ValidationError) as refused:
        triggers.record_fact(engine, tenant_id="default", source="test", actor="test", **metric)
    assert refused.value.field == field


def test_an_alert_that_conforms_is_recorded_as_facts_and_fires(engine: Engine) -> None:
    job = define(engine, trigger_type="policy")
    policy_schedule(engine, job, "alert.replay_drift.ratio > 0.05")
    alert = {"name": "replay_drift", "status": "firing", "data": {"ratio": 0.2, "window": "1h"}, "tenant_id": "default"}
    validate(ALERT, alert)
    fires = triggers.post_alert(
        engine,
        tenant_id=alert["tenant_id"],
        name=alert["name"],
        firing=alert["status"] == "firing",
        data=alert["data"],
        actor="test",
    )
    (run_id,) = [f.job_run_id for f in fires if f.fired and f.job_run_id]
    validate(TRIGGER, trigger_of(engine, run_id))
    for bad, field in [({**alert, "status": "pending"}, "status"), ({**alert, "name": "-x"}, "name")]:
        assert field in {v.path for v in violations(ALERT, bad)}
    with pytest.raises(ValidationError) as refused:
        triggers.post_alert(engine, tenant_id="default", name="-x", firing=True, data={}, actor="test")
    assert refused.value.field == "name"


def test_anchor_records_as_the_sink_receives_them_conform(engine: Engine, tmp_path: Path) -> None:
    from jobgate.store.sql import governance

    for _ in range(3):
        define(engine)  # each approval is an audit entry
    from jobgate.evidence import keys as evidence_keys

    sink = sinks.FileSink(tmp_path / "anchors.jsonl")
    later = engine.clock.now() + timedelta(hours=2)
    signer = evidence_keys.create(engine.config)  # signed, as every deployment's anchors are
    with engine.store.write() as tx:
        (first,) = governance.audit_range(connection(tx), "default", 1, 1)
        anchors.anchor_direct(tx, first, now=later, sink=sink)  # unsigned (before the key): the same shape
        batches = anchors.anchor_due(tx, "default", now=later, window=timedelta(hours=1), sink=sink, signer=signer)
    records = sink.records()
    assert batches and [r["mode"] for r in records] == ["direct"] + ["batch"] * len(batches)
    for record in records:
        validate(ANCHOR, record)


def test_resolved_configuration_snapshots_conform(engine: Engine) -> None:
    policy = {"policy_id": "FAGF-SCHEDULER-POLICY", "version": 3, "digest": "sha256:" + "5" * 64}
    plain = resolve_snapshot(engine.config, "default", "acme")
    tightened = resolve_snapshot(engine.config, "default", "acme", {"replay_sample_rate": 1.0}, policy)
    for snapshot in (plain, tightened):
        document = {
            "config_snapshot_id": snapshot.config_snapshot_id,
            "config_digest": snapshot.config_digest,
            "content": snapshot.content,
        }
        validate(CONFIG, document)
    assert tightened.content["safe_mode_overrides"] == ["replay_sample_rate"]


def test_sla_reminders_and_breaches_conform_as_delivered(engine: Engine, tmp_path: Path) -> None:
    from helpers import make_config
    from jobgate.core.models import Scope
    from jobgate.runtime.outbox import RecordingSink, envelope, publish_once
    from jobgate.service import sla

    policy = {
        "sla_policy_id": "quarantine_review_48h_v1",
        "deadline_seconds": 60,
        "remind_before_seconds": 30,
        "escalation_after_seconds": 120,
        "severity": "critical",
        "requires_escalation": True,
    }
    watched = Engine(engine.store, make_config(tmp_path, sla_policies=[policy]))
    job = define(watched, job_class="QUARANTINE_SLA_JOB", sla_policy="quarantine_review_48h_v1")
    request = SubmitRequest(job, scope=Scope(keys=(("eco_number", "ECO-A123"),)))
    run = watched.submit(request, actor="ops").run
    for seconds in (31, 61, 121):  # a reminder, the SLA deadline, the escalation deadline
        sla.check(watched, run.created_at + timedelta(seconds=seconds))
    sink = RecordingSink()
    while publish_once(watched.store, [sink], watched.clock):
        pass
    kinds = {e.event_type for e in sink.events}
    assert {"sla_reminder", "sla_breach"} <= kinds, kinds
    for e in sink.events:
        validate(event_contract(e.event_type), envelope(e))
    breach = next(e.payload for e in sink.events if e.event_type == "sla_breach")
    assert breach["job_run_id"] == run.job_run_id and breach["eco_number"] == "ECO-A123"


def test_a_telemetry_publication_conforms_as_the_sink_receives_it(engine: Engine) -> None:
    from jobgate.core import periods
    from jobgate.core.periods import PeriodKind
    from jobgate.telemetry import rollup

    ok = define(engine)
    anchor = define(engine, job_class="DAL_ANCHOR_JOB")
    for job in (ok, ok, anchor):
        engine.submit(SubmitRequest(job), actor="ops")
    period = periods.containing(PeriodKind.DAY, engine.clock.now())
    figures = rollup.compute(engine, "default", period, eco_number="ECO-A123")
    published = rollup.record("default", period, figures)  # what ``rollup.publish`` hands the sink
    validate("comp.AII.INPUT.SCHEDULER-TELEMETRY.v1_0", published)
    assert (published["jobs_scheduled"], published["jobs_completed"], published["job_success_rate"]) == (3, 0, 0.0)
    assert published["avg_workflow_latency_ms"] is None and published["dal_batch_success_rate"] == 0.0
    assert violations("comp.AII.INPUT.SCHEDULER-TELEMETRY.v1_0", {**published, "job_success_rate": 1.5}) != []
