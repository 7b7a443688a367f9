"""Every event a real worker (and the control, safe-mode and replay paths) emits conforms to its
CSI contract, as the outbox delivers it; so do the run records and configuration snapshots of
an evidence bundle. One scenario per backend makes every job event type at least once."""

from __future__ import annotations

import io
import json
import zipfile
from collections import Counter

from runtime_support import running_worker, wait_status, wait_until
from sqlalchemy import text

from helpers import define
from jobgate.contracts import event_contract, validate
from jobgate.core.events import EventType
from jobgate.core.models import DefinitionStatus
from jobgate.core.states import RunStatus
from jobgate.health.rules import alert_body
from jobgate.runtime.outbox import RecordingSink, envelope, publish_once
from jobgate.service import control, safemode
from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest
from jobgate.testing import connection

OK_ON = [{"name": "ok_on", "pattern": "[0-9]+"}]
SECONDS = [{"name": "seconds", "pattern": "[0-9.]+"}]
REPLAY_PARAMS = [{"name": "sample_size", "default": "10"}, {"name": "seed", "default": ""}]
# What this scenario makes: every event of a run's own life, safe mode's and replay's. The
# others (workflows, SLAs, dependencies) are emitted by their own machinery and checked with it.
SCENARIO_EVENTS = {t for t in EventType if t.value.startswith("job_")} | {
    EventType.SAFE_MODE_ACTIVATION,
    EventType.SAFE_MODE_DEACTIVATION,
    EventType.REPLAY_MISMATCH,
}


def submit(engine: Engine, job: str, **params: str) -> str:
    request = SubmitRequest(job, params=params, requested_by="ada", reason="contract test")
    return engine.submit(request, actor="ada").run.job_run_id


def delivered(engine: Engine) -> RecordingSink:
    """Everything in the outbox, delivered to a recording sink exactly as the publisher does."""
    sink = RecordingSink()
    while publish_once(engine.store, [sink], engine.clock):
        pass
    return sink


def test_every_event_of_a_run_s_life_conforms_to_its_contract(engine: Engine) -> None:
    ok = define(engine, handler="engine_handlers:succeed")
    flaky = define(engine, handler="engine_handlers:fail_until", retry_policy="test_fixed_v1", params=OK_ON)
    dead = define(engine, handler="engine_handlers:fail_retryable", retry_policy="test_fixed_v1")
    final = define(engine, handler="engine_handlers:fail_final", retry_policy="test_fixed_v1")
    review = define(engine, handler="engine_handlers:fail_retryable", retry_policy="test_review_v1")
    slow = define(engine, handler="engine_handlers:sleep", params=SECONDS)
    replayer = define(engine, job_class="REPLAY_JOB", handler="jobgate.replay:replay_job", params=REPLAY_PARAMS)
    paused = define(engine, handler="engine_handlers:succeed")

    never_started = submit(engine, ok)
    control.cancel_run(engine, never_started, actor="ops", reason="not needed")
    runs = {
        "completed": submit(engine, ok),
        "retried": submit(engine, flaky, ok_on="2"),
        "dead": submit(engine, dead),
        "final": submit(engine, final),
        "escalated": submit(engine, review),
        "stopped": submit(engine, slow, seconds="30"),
        "held": submit(engine, paused),
    }
    with engine.store.write() as tx:  # suspended while its run waits: the attempt is held, then released
        tx.definition_set_status("default", paused, DefinitionStatus.SUSPENDED, engine.clock.now())
    with running_worker(engine):
        wait_status(engine, runs["held"], RunStatus.HELD)
        with engine.store.write() as tx:
            tx.definition_set_status("default", paused, DefinitionStatus.ACTIVE, engine.clock.now())
        wait_status(engine, runs["held"], RunStatus.COMPLETED)
        wait_status(engine, runs["stopped"], RunStatus.RUNNING)
        control.stop_run(engine, runs["stopped"], actor="ops", reason="taking too long")
        wait_status(engine, runs["stopped"], RunStatus.CANCELLED)
        wait_status(engine, runs["completed"], RunStatus.COMPLETED)
        wait_status(engine, runs["retried"], RunStatus.COMPLETED)
        wait_status(engine, runs["escalated"], RunStatus.ESCALATED)
        wait_status(engine, runs["final"], RunStatus.DEAD_LETTERED)
        wait_status(engine, runs["dead"], RunStatus.DEAD_LETTERED)
        control.requeue_run(engine, runs["dead"], actor="ops")
        wait_until(lambda: _attempt(engine, runs["dead"]) == 4, what="the requeued attempt")
        wait_status(engine, runs["dead"], RunStatus.DEAD_LETTERED)
        with engine.store.write() as tx:  # a finished run's record altered after the fact
            connection(tx).execute(
                text(
                    "UPDATE run_transitions SET reason = 'retry_scheduled' "
                    "WHERE job_run_id = :r AND to_status = 'COMPLETED'"
                ),
                {"r": runs["completed"]},
            )
        wait_status(engine, submit(engine, replayer, seed="contracts"), RunStatus.COMPLETED, timeout=20)
    safemode.activate(engine, "default", actor="ops", reason="drill")
    safemode.deactivate(engine, "default", actor="ops", reason="drill over")

    sink = delivered(engine)
    assert sink.events, "the outbox delivered nothing"
    for e in sink.events:
        validate(event_contract(e.event_type), envelope(e))
        validate(event_contract(e.event_type), alert_body(envelope(e)))  # what the alert webhook posts
    seen = Counter(e.event_type for e in sink.events)
    assert set(seen) == {t.value for t in SCENARIO_EVENTS}, seen
    # the retryable failure and the final one are both there (next_retry_at set, then null)
    failed = [e.payload for e in sink.events if e.event_type == EventType.JOB_FAILED]
    assert {p["retryable"] for p in failed} == {True, False}


def test_an_evidence_bundle_s_run_and_snapshot_conform(engine: Engine) -> None:
    from jobgate.export.bundles import build_bundle, run_scope

    job = define(engine, handler="engine_handlers:fail_until", retry_policy="test_fixed_v1", params=OK_ON)
    run_id = submit(engine, job, ok_on="2")
    with running_worker(engine):
        wait_status(engine, run_id, RunStatus.COMPLETED)
    with zipfile.ZipFile(io.BytesIO(build_bundle(engine, run_scope(engine, run_id)))) as bundle:
        run = json.loads(bundle.read(f"runs/{run_id}.json"))["detail"]["run"]
        (row,) = json.loads(bundle.read("snapshots.json"))
    snapshot = {k: row[k] for k in ("config_snapshot_id", "config_digest")} | {"content": json.loads(row["content"])}
    assert run["status"] == "COMPLETED" and run["attempt"] == 2 and run["result"] == {"attempt": 2}
    validate("comp.TG.OUTPUT.JOB-RUN.v1_0", run)
    validate("comp.TG.OUTPUT.RESOLVED-CONFIG.v1_0", snapshot)


def _attempt(engine: Engine, job_run_id: str) -> int:
    with engine.store.read() as tx:
        run = tx.run_get(job_run_id)
    assert run is not None
    return run.attempt
