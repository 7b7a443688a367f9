"""The trigger pipeline: one run per trigger, refusals store nothing."""

from __future__ import annotations

import multiprocessing
import threading
from pathlib import Path

import pytest
from sqlalchemy import text

from helpers import count, define, make_config
from jobgate.core.errors import GovernanceRefusal, NotFoundError, ValidationError
from jobgate.core.models import DefinitionStatus, TriggerType
from jobgate.core.states import RunStatus
from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest
from jobgate.store.sqlstore import Store
from jobgate.testing import connection


def test_submit_creates_one_scheduled_run_with_two_transitions(engine: Engine) -> None:
    job = define(engine, params=[{"name": "n", "pattern": "[0-9]+"}])
    result = engine.submit(SubmitRequest(job, params={"n": "7"}, request_id="r1", requested_by="alice"))
    assert result.created
    run = result.run
    assert run.status is RunStatus.SCHEDULED
    assert run.params == {"n": "7"}
    assert run.config_digest.startswith("sha256:")
    with engine.store.read() as tx:
        transitions = tx.run_transitions(run.job_run_id)
        snapshot = tx.snapshot_get(run.config_snapshot_id)
    assert [(t.from_status, t.to_status) for t in transitions] == [
        (None, RunStatus.CREATED),
        (RunStatus.CREATED, RunStatus.SCHEDULED),
    ]
    assert snapshot is not None and snapshot.config_digest == run.config_digest


def test_same_trigger_twice_is_one_run(engine: Engine) -> None:
    job = define(engine)
    first = engine.submit(SubmitRequest(job, request_id="same"))
    second = engine.submit(SubmitRequest(job, request_id="same"))
    assert first.created and not second.created
    assert first.run.job_run_id == second.run.job_run_id
    assert count(engine, "job_runs") == 1
    assert count(engine, "run_transitions") == 2


def test_duplicate_event_is_one_run(engine: Engine) -> None:
    job = define(engine, trigger_type="event")
    a = engine.submit(SubmitRequest(job, trigger_type=TriggerType.EVENT, source_event_id="evt-1", trigger_id="t-a"))
    b = engine.submit(SubmitRequest(job, trigger_type=TriggerType.EVENT, source_event_id="evt-1", trigger_id="t-b"))
    c = engine.submit(SubmitRequest(job, trigger_type=TriggerType.EVENT, source_event_id="evt-2"))
    assert a.run.job_run_id == b.run.job_run_id != c.run.job_run_id
    assert count(engine, "job_runs") == 2


def test_fifty_concurrent_threads_make_one_run(engine: Engine) -> None:
    job = define(engine)
    barrier = threading.Barrier(50)
    results = []
    lock = threading.Lock()

    def go() -> None:
        barrier.wait()
        r = engine.submit(SubmitRequest(job, request_id="storm"))
        with lock:
            results.append(r)

    threads = [threading.Thread(target=go) for _ in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 50
    assert len({r.run.job_run_id for r in results}) == 1
    assert sum(r.created for r in results) == 1
    assert count(engine, "job_runs") == 1
    assert count(engine, "run_transitions") == 2


def _submit_in_process(url: str, base: str, job: str, barrier: object, out: object) -> None:
    engine = Engine(Store(url, migrate=False), make_config(Path(base)))
    barrier.wait()  # type: ignore[attr-defined]
    r = engine.submit(SubmitRequest(job, request_id="process-storm"))
    out.put((r.run.job_run_id, r.created))  # type: ignore[attr-defined]


def test_fifty_concurrent_processes_make_one_run(engine: Engine, database_url: str, tmp_path: Path) -> None:
    job = define(engine)
    ctx = multiprocessing.get_context("fork")  # fork: 50 interpreters start in well under a second
    barrier = ctx.Barrier(50)
    out = ctx.Queue()
    procs = [
        ctx.Process(target=_submit_in_process, args=(database_url, str(tmp_path), job, barrier, out)) for _ in range(50)
    ]
    for p in procs:
        p.start()
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert len({rid for rid, _ in results}) == 1
    assert sum(created for _, created in results) == 1
    assert count(engine, "job_runs") == 1


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"n": "1; rm -rf /"}, "params.n"),
        ({"n": "$(touch /tmp/x)"}, "params.n"),
        ({"n": "../../etc"}, "params.n"),
        ({"n": "1\n2"}, "params.n"),
        ({"other": "1"}, "params.other"),
        ({}, "params.n"),
    ],
)
def test_refused_submission_stores_nothing(engine: Engine, params: dict[str, str], field: str) -> None:
    job = define(engine, params=[{"name": "n", "required": True, "pattern": "[0-9]+"}])
    with pytest.raises(ValidationError) as err:
        engine.submit(SubmitRequest(job, params=params))
    assert err.value.field == field
    assert count(engine, "job_runs") == 0
    assert count(engine, "run_transitions") == 0
    assert count(engine, "config_snapshots") == 0


def test_a_bad_request_in_a_batch_stores_none_of_the_batch(engine: Engine) -> None:
    job = define(engine, params=[{"name": "n", "pattern": "[0-9]+"}])
    good = [SubmitRequest(job, params={"n": str(i)}) for i in range(5)]
    with pytest.raises(ValidationError):
        engine.submit_many([*good, SubmitRequest(job, params={"n": "x"})])
    assert count(engine, "job_runs") == 0


def test_unknown_definition_is_refused(engine: Engine) -> None:
    with pytest.raises(NotFoundError):
        engine.submit(SubmitRequest("nope"))
    assert count(engine, "job_runs") == 0


def test_inactive_definition_is_refused(engine: Engine) -> None:
    """The lifecycle is the admission rule's first gate: a suspended definition's trigger is a
    governance refusal, audited like every gate's refusal at creation (found by a review: it was
    a validation error, and nothing recorded it)."""
    from jobgate.core.errors import GovernanceRefusal
    from jobgate.core.records import AuditFilter
    from jobgate.service import audit

    job = define(engine, status="suspended")
    with pytest.raises(GovernanceRefusal) as err:
        engine.submit(SubmitRequest(job, requested_by="ada"), actor="ada")
    assert err.value.field == "status" and err.value.code == "definition_inactive"
    assert count(engine, "job_runs") == 0
    refused = audit.search(engine, AuditFilter(tenant_id="default", action="run.refused", target_id=job))
    assert [str(e.event.reason) for e in refused] == ["definition_inactive"]


def test_unimportable_handler_is_refused_at_apply_and_nothing_is_stored(engine: Engine) -> None:
    from jobgate.definitions import parse_definition

    loaded = parse_definition(
        {"job_definition_id": "typo", "job_class": "MAINTENANCE_JOB", "handler": "engine_handlers:no_such_function"},
        "defs/typo.yaml",
        engine.config,
    )
    with pytest.raises(ValidationError) as err:
        engine.apply_definitions([loaded])
    assert (err.value.field, err.value.source) == ("handler", "defs/typo.yaml")
    assert count(engine, "definitions") == 0


def test_a_batch_window_is_one_run_however_often_it_is_triggered(engine: Engine) -> None:
    from datetime import UTC, datetime

    from jobgate.core.models import ExecutionWindow

    job = define(engine, trigger_type="batch_window", schedule_expression="1h")
    window = ExecutionWindow(datetime(2026, 6, 25, 18, tzinfo=UTC), datetime(2026, 6, 25, 19, tzinfo=UTC))
    first = engine.submit(SubmitRequest(job, trigger_type=TriggerType.BATCH_WINDOW, window=window))
    again = engine.submit(SubmitRequest(job, trigger_type=TriggerType.BATCH_WINDOW, window=window))
    later = ExecutionWindow(window.end, datetime(2026, 6, 25, 20, tzinfo=UTC))
    other = engine.submit(SubmitRequest(job, trigger_type=TriggerType.BATCH_WINDOW, window=later))
    assert first.created and not again.created and other.created
    assert first.run.job_run_id == again.run.job_run_id != other.run.job_run_id
    assert count(engine, "job_runs") == 2


@pytest.mark.parametrize("field", ["payload", "policy_context"])
def test_a_payload_json_cannot_store_is_refused_and_nothing_is_stored(engine: Engine, field: str) -> None:
    job = define(engine)
    request = SubmitRequest(job, request_id="nan", **{field: {"ratio": float("nan")}})
    with pytest.raises(ValidationError) as err:
        engine.submit(request)
    assert err.value.field == field and "non-finite" in err.value.message
    assert count(engine, "job_runs") == 0


# A submission reads its definition's version through a cache of built versions (a version
# never changes): the cache is keyed on what is stored, so neither a rewritten row nor a
# lifecycle change is ever served from it.


def test_content_rewritten_after_a_submission_is_refused_at_the_next(engine: Engine) -> None:
    job = define(engine, params=[{"name": "n", "pattern": "[0-9]+"}])
    engine.submit(SubmitRequest(job, params={"n": "1"}, request_id="before"))
    with engine.store.write() as tx:  # the stored content changed, its digest kept
        conn = connection(tx)
        content = conn.execute(text("SELECT content FROM definitions WHERE job_definition_id = :j"), {"j": job})
        rewritten = content.scalar_one().replace("[0-9]+", "[0-9a-z]+")
        conn.execute(
            text("UPDATE definitions SET content = :c WHERE job_definition_id = :j"), {"c": rewritten, "j": job}
        )
    with pytest.raises(ValidationError) as refused:
        engine.submit(SubmitRequest(job, params={"n": "2"}, request_id="after"))
    assert refused.value.field == "digest"
    assert count(engine, "job_runs") == 1


def test_a_definition_suspended_after_a_submission_is_refused_at_the_next(engine: Engine) -> None:
    job = define(engine)
    engine.submit(SubmitRequest(job, request_id="before"))
    with engine.store.write() as tx:
        tx.definition_set_status("default", job, DefinitionStatus.SUSPENDED, engine.clock.now())
    with pytest.raises(GovernanceRefusal) as refused:
        engine.submit(SubmitRequest(job, request_id="after"))
    assert refused.value.field == "status"
    assert count(engine, "job_runs") == 1


def test_a_retired_definition_stays_retired_whatever_its_file_says_next(engine: Engine) -> None:
    """Found by a review: re-applying a retired definition's file without ``status: retired``
    brought it back under its old approval, so one person could undo a retirement alone (under
    four eyes too). Retirement is final: the apply is refused, nothing changes."""
    from jobgate.core.models import DefinitionStatus

    job = define(engine)
    define(engine, job_definition_id=job, status="retired")
    for status in ("active", "suspended", "draft"):
        with pytest.raises(ValidationError) as refused:
            define(engine, job_definition_id=job, status=status, approve=False)
        assert refused.value.field == "status" and "retirement is final" in refused.value.message
    with engine.store.read() as tx:
        stored = tx.definition_get("default", job)
    assert stored is not None and stored.status is DefinitionStatus.RETIRED
    define(engine, job_definition_id=job, status="retired", approve=False)  # saying it again is fine
    with pytest.raises(GovernanceRefusal):
        engine.submit(SubmitRequest(job, requested_by="ada"), actor="ada")
