"""Edges found by a review of the governance and evidence code, each pinned by a test: a
requeue meets every gate, a revocation or safe mode that commits between preparation and
creation still refuses, manual review cannot be claimed by a request id, deleted tail anchors
are caught by the sink, an unreadable policy refuses instead of crashing, and a malformed
bundle is a verdict rather than an exception."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import text
from tests.helpers import count, define, make_config

from jobgate.core.audit import AuditEvent
from jobgate.core.errors import ConfigurationError, GovernanceRefusal
from jobgate.core.models import Scope, TriggerType
from jobgate.evidence import anchors, sinks
from jobgate.export.bundles import pack, verify_bundle
from jobgate.service import approvals, control, requests, safemode
from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest
from jobgate.store.sql import governance
from jobgate.store.sqlstore import Store
from jobgate.testing import connection


@pytest.fixture
def guarded(database_url: str, tmp_path: Path) -> Iterator[Engine]:
    store = Store(database_url)
    engine = Engine(
        store,
        make_config(tmp_path, safe_mode={"suspend_job_classes": ["FEDERATION_SYNC_JOB"], "manual_review": True}),
    )
    yield engine
    store.dispose()


def request(job: str, **kw: object) -> SubmitRequest:
    return SubmitRequest(job, scope=Scope(), requested_by="ada", reason="r", **kw)  # type: ignore[arg-type]


def test_a_requeue_meets_the_safe_mode_gate(guarded: Engine) -> None:
    job = define(guarded, job_definition_id="export", job_class="FEDERATION_SYNC_JOB", trigger_type="event")
    run_id = guarded.submit(request(job), actor="ada").run.job_run_id
    with guarded.store.write() as tx:
        connection(tx).execute(
            text("UPDATE job_runs SET status = 'DEAD_LETTERED' WHERE job_run_id = :r"), {"r": run_id}
        )
    safemode.activate(guarded, "default", actor="root", reason="incident")
    with pytest.raises(GovernanceRefusal) as refused:
        control.requeue_run(guarded, run_id, actor="ops")
    assert refused.value.rule == "suspended_class:FEDERATION_SYNC_JOB"
    with guarded.store.read() as tx:
        run = tx.run_get(run_id)
    assert run is not None and run.status.value == "DEAD_LETTERED"


def _dead_letter(engine: Engine, run_id: str) -> None:
    with engine.store.write() as tx:
        connection(tx).execute(
            text("UPDATE job_runs SET status = 'DEAD_LETTERED' WHERE job_run_id = :r"), {"r": run_id}
        )


def test_one_operators_requeue_is_no_second_persons_review(guarded: Engine) -> None:
    """Under manual review a manual run needs a second person: a retry of it is refused, and so
    is a requeue by one operator (it used to count as the review); a run a request's second
    person reviewed is requeued. A requeue never records itself as the run's review."""
    job = define(guarded)
    unreviewed = guarded.submit(request(job), actor="ada").run.job_run_id
    proposed = requests.propose(
        guarded, tenant_id="default", requester="ada", job_definition_id=job, params={}, title="t", reason="r"
    )
    reviewed = requests.approve(guarded, "default", proposed.request_id, actor="root").job_run_id
    assert reviewed is not None
    for run_id in (unreviewed, reviewed):
        _dead_letter(guarded, run_id)
    safemode.activate(guarded, "default", actor="root", reason="incident")
    with pytest.raises(GovernanceRefusal) as refused:
        control.requeue_run(guarded, unreviewed, actor="ops")
    assert (refused.value.code, refused.value.rule) == ("safe_mode_active", "manual_review_required")
    control.requeue_run(guarded, reviewed, actor="ops")
    safemode.deactivate(guarded, "default", actor="root", reason="over")
    control.requeue_run(guarded, unreviewed, actor="ops")
    with guarded.store.read() as tx:
        runs = {r.job_run_id: r for r in tx.runs_get([unreviewed, reviewed])}
    assert [runs[r].status.value for r in (unreviewed, reviewed)] == ["SCHEDULED", "SCHEDULED"]
    assert (runs[unreviewed].reviewed_by, runs[reviewed].reviewed_by) == (None, "root")


def test_a_revocation_between_preparation_and_creation_still_refuses(engine: Engine) -> None:
    job = define(engine)
    now = engine.clock.now()
    prepared = engine.pipeline.prepare([request(job)], now=now, actor="ada")
    approvals.revoke(engine, "default", job, actor="root")
    with pytest.raises(GovernanceRefusal) as refused, engine.store.write() as tx:
        engine.pipeline.create(tx, prepared, now)
    assert refused.value.code == "definition_not_approved" and count(engine, "job_runs") == 0


def test_safe_mode_switched_on_after_preparation_still_refuses(guarded: Engine) -> None:
    job = define(guarded, job_definition_id="export", job_class="FEDERATION_SYNC_JOB", trigger_type="event")
    now = guarded.clock.now()
    event = request(job, trigger_type=TriggerType.EVENT, source_event_id="e1", event_type="x.y")
    prepared = guarded.pipeline.prepare([event], now=now)
    safemode.activate(guarded, "default", actor="root", reason="incident")
    with pytest.raises(GovernanceRefusal) as refused, guarded.store.write() as tx:
        guarded.pipeline.create(tx, prepared, now)
    assert refused.value.code == "safe_mode_active"


def test_manual_review_cannot_be_claimed_with_a_request_id(guarded: Engine) -> None:
    job = define(guarded)
    safemode.activate(guarded, "default", actor="root", reason="incident")
    with pytest.raises(GovernanceRefusal) as refused:
        guarded.submit(request(job, request_id="request:TGREQ-forged"), actor="ada")
    assert refused.value.rule == "manual_review_required"


def test_deleted_tail_anchors_are_caught_by_the_sink(engine: Engine, tmp_path: Path) -> None:
    t0 = datetime(2026, 11, 1, 10, tzinfo=UTC)
    sink = sinks.FileSink(tmp_path / "anchors.jsonl")
    with engine.store.write() as tx:
        tx.audit_append(
            [AuditEvent("default", "a", "x", "t", str(i), t0 + timedelta(minutes=25 * i)) for i in range(6)]
        )
    with engine.store.write() as tx:
        made = anchors.anchor_due(tx, "default", now=t0 + timedelta(hours=5), window=timedelta(hours=1), sink=sink)
    last = made[-1]
    with engine.store.write() as tx:  # the tail and its anchor are removed, the head made to fit
        (keep,) = governance.audit_range(connection(tx), "default", last.first_seq - 1, last.first_seq - 1)
        connection(tx).execute(text("DELETE FROM audit_log WHERE seq >= :s"), {"s": last.first_seq})
        connection(tx).execute(text("DELETE FROM anchors WHERE anchor_seq = :n"), {"n": last.anchor_seq})
        connection(tx).execute(
            text("UPDATE audit_heads SET seq = :s, entry_hash = :h"), {"s": keep.seq, "h": keep.entry_hash}
        )
    with engine.store.read() as tx:
        assert anchors.verify_tenant(tx, "default").ok  # the database alone agrees with itself...
        result = anchors.verify_tenant(tx, "default", sink_records=sink.records())
    assert not result.ok and "in the sink but not in the database" in str(result.problem)  # ...the sink does not


def test_an_unreadable_policy_refuses_instead_of_crashing(database_url: str, tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("policy_id: P\nversion: 1\n")
    store = Store(database_url)
    engine = Engine(store, make_config(tmp_path, policy=str(path)))
    try:
        job = define(engine)
        engine.submit(request(job), actor="ada")
        path.unlink()
        with pytest.raises(ConfigurationError):
            engine.submit(request(job, request_id="second"), actor="ada")
        assert count(engine, "job_runs") == 1
    finally:
        store.dispose()


@pytest.mark.parametrize("files", [{}, [], {"run.json": 1}])
def test_a_malformed_manifest_is_a_verdict_not_an_exception(files: object) -> None:
    bundle = pack({"manifest.json": json.dumps({"format": "x", "files": files}).encode()})
    result = verify_bundle(bundle)
    assert not result.ok and result.problems
    assert zipfile.ZipFile(io.BytesIO(bundle)).namelist() == ["manifest.json"]


def test_a_request_for_a_retired_definition_is_refused_and_nothing_stored(engine: Engine) -> None:
    """Found by a review: a proposal of a retired definition was stored pending, though no one
    could ever approve it (retirement is final)."""
    from jobgate.core.errors import ConflictError

    job = define(engine)
    define(engine, job_definition_id=job, status="retired", approve=False)
    before = count(engine, "run_requests")
    with pytest.raises(ConflictError) as refused:
        requests.propose(
            engine, tenant_id="default", requester="ada", job_definition_id=job, params={}, title="t", reason="r"
        )
    assert refused.value.field == "job_definition_id" and "retired" in refused.value.message
    assert count(engine, "run_requests") == before
