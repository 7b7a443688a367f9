"""Retention deletes only what policy allows: finished, delivered, anchored runs past the
retention period — never pending runs, undelivered events or audit entries — and audits it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from runtime_support import running_worker, wait_status
from sqlalchemy import text
from tests.runtime.test_event_triggers import subscribe

from helpers import count, define, make_config
from jobgate.core.records import AuditFilter
from jobgate.core.states import RunStatus
from jobgate.evidence import anchors, sinks
from jobgate.runtime.outbox import publish_once
from jobgate.service import audit, control, retries
from jobgate.service.engine import Engine
from jobgate.service.retention import retire
from jobgate.service.submission import SubmitRequest
from jobgate.service.triggers import emit_event
from jobgate.store.sqlstore import Store
from jobgate.testing import connection


def _ready_to_retire(engine: Engine, tmp_path: Path) -> datetime:
    """Two days on, with every event delivered and every audit entry anchored (retention takes
    nothing undelivered or unanchored): the instant to retire at."""
    while publish_once(engine.store, [], engine.clock):
        pass
    later = engine.clock.now() + timedelta(days=2)
    audit.seal_pending(engine, engine.clock.now())  # as the leader does: every seal chained, then anchored
    with engine.store.write() as tx:
        anchors.anchor_due(tx, "default", now=later, window=timedelta(hours=1), sink=sinks.FileSink(tmp_path / "a"))
    return later


def submit(engine: Engine, job: str) -> str:
    return engine.submit(SubmitRequest(job, requested_by="ada", reason="r"), actor="ada").run.job_run_id


def test_only_finished_delivered_anchored_runs_go_and_the_deletion_is_audited(
    database_url: str, tmp_path: Path
) -> None:
    store = Store(database_url)
    engine = Engine(store, make_config(tmp_path, retention={"finished_runs_days": 1}))
    try:
        job = define(engine, handler="engine_handlers:succeed")
        delivered, undelivered = [submit(engine, job) for _ in range(2)], submit(engine, job)
        with running_worker(engine):
            for r in [*delivered, undelivered]:
                wait_status(engine, r, RunStatus.COMPLETED)
        while publish_once(engine.store, [], engine.clock):  # every event so far is delivered...
            pass
        with engine.store.write() as tx:  # ...but one more for this run, not yet
            connection(tx).execute(
                text(
                    "INSERT INTO outbox (job_run_id, tenant_id, event_type, payload, created_at) "
                    "VALUES (:r, 'default', 'late', '{}', 0)"
                ),
                {"r": undelivered},
            )
        waiting = submit(engine, job)
        later = engine.clock.now() + timedelta(days=2)
        assert retire(engine, "default", now=later).deleted == 0  # nothing anchored yet: nothing goes
        audit.seal_pending(engine, engine.clock.now())
        with engine.store.write() as tx:
            sink = sinks.FileSink(tmp_path / "anchors.jsonl")
            anchors.anchor_due(tx, "default", now=later, window=timedelta(hours=1), sink=sink)
        # An open dead letter keeps its run too; the dry run counts by the deletion's own rule.
        lettered = submit(engine, job)
        with engine.store.write() as tx:
            connection(tx).execute(
                text("UPDATE job_runs SET status = 'DEAD_LETTERED', ended_at = 1 WHERE job_run_id = :r"),
                {"r": lettered},
            )
            connection(tx).execute(
                text(
                    "INSERT INTO dead_letters (dead_letter_id, job_run_id, tenant_id, job_class, reason, attempts,"
                    " requires_manual_review, created_at) VALUES ('DL-1', :r, 'default', 'MAINTENANCE_JOB', 'x', 1,"
                    " false, 1)"
                ),
                {"r": lettered},
            )
        folders = {r: Path(engine.config.data_dir) / "runs" / r for r in [*delivered, waiting]}
        for folder in folders.values():  # a run's log and work files, as a runner leaves them
            (folder / "attempt-1").mkdir(parents=True, exist_ok=True)
            (folder / "run.log").write_text("line\n")
        assert retire(engine, "default", now=later, dry_run=True).deleted == 2
        done = retire(engine, "default", now=later)
        with engine.store.read() as tx:
            left = {r.job_run_id for r in tx.runs_get([*delivered, undelivered, waiting, lettered])}
        assert left == {undelivered, waiting, lettered} and done.deleted == 2
        assert not any(folders[r].exists() for r in delivered)  # their work folders and logs went with them
        assert (folders[waiting] / "run.log").exists()  # a kept run keeps its files
        (entry,) = audit.search(engine, AuditFilter(tenant_id="default", action="retention.deleted"))
        assert sorted(entry.event.payload["runs"]) == sorted(delivered)
        assert count(engine, "run_transitions", f"job_run_id = '{delivered[0]}'") == 0
        with engine.store.read() as tx:
            assert anchors.verify_tenant(tx, "default", sink_records=sink.records()).ok  # audit log untouched
    finally:
        store.dispose()


def test_without_retention_nothing_is_ever_deleted(engine: Engine) -> None:
    assert retire(engine, "default", now=engine.clock.now() + timedelta(days=3650)).cutoff is None


def test_a_retired_run_put_back_is_named_by_records_verification(database_url: str, tmp_path: Path) -> None:
    # Its tombstone is its latest seal: the row back (even as a queued run) is no jobgate write.
    store = Store(database_url)
    engine = Engine(store, make_config(tmp_path, retention={"finished_runs_days": 1}))
    try:
        job = define(engine, handler="engine_handlers:succeed")
        run = submit(engine, job)
        with running_worker(engine):
            wait_status(engine, run, RunStatus.COMPLETED)
        later = _ready_to_retire(engine, tmp_path)
        with engine.store.read() as tx:
            row = dict(
                connection(tx)
                .execute(text("SELECT * FROM job_runs WHERE job_run_id = :r"), {"r": run})
                .mappings()
                .one()
            )
        assert retire(engine, "default", now=later).deleted == 1
        assert all(r.ok for r in audit.verify_records(engine, ["default"]))
        row.update(status="SCHEDULED", ended_at=None)
        with engine.store.write() as tx:
            cols = ", ".join(row)
            connection(tx).execute(
                text(f"INSERT INTO job_runs ({cols}) VALUES ({', '.join(':' + c for c in row)})"), row
            )
        (report,) = audit.verify_records(engine, ["default"])
        assert not report.ok
        assert any(f.problem == "back_after_tombstone" and f.record_id == run for f in report.findings)
        assert f"run {run}: its row is there again after its tombstone" in report.findings[0].message()
    finally:
        store.dispose()


def test_the_source_of_a_retry_still_to_finish_is_kept(database_url: str, tmp_path: Path) -> None:
    """A retry waiting to run names its source (``retry_of``: its lineage and the version it
    pins): retention keeps the source until the retry has finished, in the dry run too."""
    store = Store(database_url)
    engine = Engine(store, make_config(tmp_path, retention={"finished_runs_days": 1}))
    try:
        job = define(engine, handler="engine_handlers:succeed")
        source, alone = submit(engine, job), submit(engine, job)
        with running_worker(engine):
            wait_status(engine, source, RunStatus.COMPLETED)
            wait_status(engine, alone, RunStatus.COMPLETED)
        pending, created = retries.retry(engine, source, actor="ada", tenant_id="default")
        assert created and pending.status is RunStatus.SCHEDULED
        later = _ready_to_retire(engine, tmp_path)
        assert retire(engine, "default", now=later, dry_run=True).deleted == 1
        assert retire(engine, "default", now=later).deleted == 1
        with engine.store.read() as tx:
            assert {r.job_run_id for r in tx.runs_get([source, alone])} == {source}
        with running_worker(engine):
            wait_status(engine, pending.job_run_id, RunStatus.COMPLETED)
        while publish_once(engine.store, [], engine.clock):
            pass
        assert retire(engine, "default", now=later + timedelta(days=2)).deleted >= 1
        with engine.store.read() as tx:
            assert tx.runs_get([source]) == []
    finally:
        store.dispose()


def test_a_retired_runs_key_or_slot_makes_no_second_run(database_url: str, tmp_path: Path) -> None:
    """Found by a review: once retention deleted a run, the same request (its key) or a backfill
    of the same window (its slot) made a second run, and its body ran again. One run per trigger,
    ever: retention remembers what made each run its trigger's (``retired_runs``)."""
    from jobgate.core.errors import ConflictError
    from jobgate.service import schedules

    store = Store(database_url)
    engine = Engine(store, make_config(tmp_path, retention={"finished_runs_days": 1}))
    try:
        job = define(engine, handler="engine_handlers:succeed")
        keyed = engine.submit(SubmitRequest(job, requested_by="ada", request_id="close-2026-11"), actor="ada").run
        windowed = define(
            engine,
            handler="engine_handlers:succeed",
            trigger_type="cron",
            schedule_expression="0 * * * *",
        )
        start = (engine.clock.now() - timedelta(hours=5)).replace(minute=0, second=0, microsecond=0)
        first = schedules.backfill(
            engine, tenant_id="default", job_definition_id=windowed, start=start, end=start + timedelta(hours=2)
        )
        assert [s.created for s in first] == [True, True]
        ids = [keyed.job_run_id, *(s.job_run_id for s in first if s.job_run_id)]
        with running_worker(engine):
            for r in ids:
                wait_status(engine, r, RunStatus.COMPLETED)
        later = _ready_to_retire(engine, tmp_path)
        assert retire(engine, "default", now=later).deleted == 3
        runs_before = count(engine, "job_runs")
        try:
            engine.submit(SubmitRequest(job, requested_by="ada", request_id="close-2026-11"), actor="ada")
            raise AssertionError("a retired run's key made a second run")
        except ConflictError as refused:
            assert keyed.job_run_id in refused.message and "retired by retention" in refused.message
        again = schedules.backfill(
            engine, tenant_id="default", job_definition_id=windowed, start=start, end=start + timedelta(hours=2)
        )
        assert [(s.created, s.job_run_id) for s in again] == [(False, s.job_run_id) for s in first]
        dry = schedules.backfill(
            engine, tenant_id="default", job_definition_id=windowed, start=start, end=start + timedelta(hours=2),
            dry_run=True,
        )  # fmt: skip
        assert [s.job_run_id for s in dry] == [s.job_run_id for s in first]
        assert count(engine, "job_runs") == runs_before  # nothing stored, nothing to run
    finally:
        store.dispose()


def test_a_retired_slot_the_scheduler_reaches_later_had_its_run(database_url: str, tmp_path: Path) -> None:
    """Found by a review: slots backfilled while the scheduler was down, then retired before it
    came back, failed every tick of their schedule (the retired key's 409), and no later slot
    ever fired. A retired slot had its run, as a stored one has: the schedule moves on."""
    from jobgate.runtime.scheduler import Scheduler
    from jobgate.scheduling.model import MisfirePolicy, Schedule, ScheduleKind
    from jobgate.service import schedules

    store = Store(database_url)
    engine = Engine(store, make_config(tmp_path, retention={"finished_runs_days": 1}))
    try:
        job = define(engine, handler="engine_handlers:succeed", trigger_type="cron", schedule_expression="0 0 1 1 *")
        start = (engine.clock.now() - timedelta(hours=5)).replace(minute=0, second=0, microsecond=0)
        hourly = Schedule(
            "hourly", job, ScheduleKind.CRON, start, cron="0 * * * *", misfire=MisfirePolicy.FIRE_ALL,
            misfire_grace=timedelta(hours=12),
        )  # fmt: skip
        with engine.store.write() as tx:  # never ticked since before ``start``
            tx.schedule_put(hourly, watermark=start - timedelta(minutes=1), source="test", now=start)
        done = schedules.backfill(
            engine, tenant_id="default", job_definition_id=job, schedule_id="hourly", start=start,
            end=start + timedelta(hours=2),
        )  # fmt: skip
        assert [s.created for s in done] == [True, True]
        with running_worker(engine):
            for s in done:
                assert s.job_run_id is not None
                wait_status(engine, s.job_run_id, RunStatus.COMPLETED)
        later = _ready_to_retire(engine, tmp_path)
        assert retire(engine, "default", now=later).deleted == 2
        runs_before = count(engine, "job_runs")
        scheduler = Scheduler(engine, owner="back")
        ticked = scheduler.tick(now=start + timedelta(hours=2, minutes=30))
        assert ticked.fired == 1  # start + 2h only: the two retired slots had their runs
        with engine.store.read() as tx:
            (stored,) = [s for s in tx.schedules_list() if s.schedule.schedule_id == "hourly"]
        assert stored.failures == 0 and stored.watermark >= start + timedelta(hours=2)
        assert count(engine, "job_runs") == runs_before + 1
    finally:
        store.dispose()


def test_a_retired_trigger_record_deleted_or_rewritten_is_named(database_url: str, tmp_path: Path) -> None:
    """Found by a review: deleting a retired run's ``retired_runs`` row let its trigger run a
    second time, and ``audit verify --records`` said nothing. The retention entry, chained and
    anchored, holds a digest of each retired run's key and slot: a row deleted, a row rewritten,
    a row no entry names and a run holding a retired key are each named."""
    store = Store(database_url)
    engine = Engine(store, make_config(tmp_path, retention={"finished_runs_days": 1}))
    try:
        job = define(engine, handler="engine_handlers:succeed")
        kept, rewritten, gone = (
            engine.submit(SubmitRequest(job, requested_by="ada", request_id=f"close-{n}"), actor="ada").run.job_run_id
            for n in (1, 2, 3)
        )
        with running_worker(engine):
            for r in (kept, rewritten, gone):
                wait_status(engine, r, RunStatus.COMPLETED)
        later = _ready_to_retire(engine, tmp_path)
        assert retire(engine, "default", now=later).deleted == 3
        assert all(r.ok for r in audit.verify_records(engine, ["default"]))
        with engine.store.write() as tx:
            sql = connection(tx)
            sql.execute(text("DELETE FROM retired_runs WHERE job_run_id = :r"), {"r": gone})
            sql.execute(
                text("UPDATE retired_runs SET idempotency_key = 'forged' WHERE job_run_id = :r"), {"r": rewritten}
            )
            sql.execute(
                text(
                    "INSERT INTO retired_runs (job_run_id, tenant_id, job_definition_id, idempotency_key, slot, status,"
                    " created_at, ended_at, retired_at) SELECT 'TGJOBRUN-invented', tenant_id, job_definition_id,"
                    " 'invented-key', NULL, status, created_at, ended_at, retired_at FROM retired_runs"
                    " WHERE job_run_id = :r"
                ),
                {"r": kept},
            )
        again = engine.submit(SubmitRequest(job, requested_by="ada", request_id="close-3"), actor="ada").run
        assert again.job_run_id != gone  # its trigger ran again: what the row was there to stop
        with engine.store.write() as tx:  # and a run given a retired key directly
            connection(tx).execute(
                text("UPDATE job_runs SET idempotency_key = (SELECT idempotency_key FROM retired_runs WHERE"
                     " job_run_id = :k) WHERE job_run_id = :r"),
                {"k": kept, "r": again.job_run_id},
            )  # fmt: skip
        (report,) = audit.verify_records(engine, ["default"])
        found = {(f.problem, f.record_id) for f in report.findings}
        assert ("retired_record_missing", gone) in found
        assert ("retired_record_changed", rewritten) in found
        assert ("retired_record_unexplained", "TGJOBRUN-invented") in found
        assert ("trigger_reused", again.job_run_id) in found
        named = {f.problem: f.message() for f in report.findings}
        assert (
            f"run {gone}: retired by retention, but the record of its key and slot" in named["retired_record_missing"]
        )
        assert f"holds the key or slot of run {kept}, retired by retention" in named["trigger_reused"]
    finally:
        store.dispose()


@pytest.mark.parametrize(
    "change",
    [
        "status = 'FAILED'",
        "created_at = created_at - 86400000000",
        "ended_at = ended_at + 1",
        "retired_at = retired_at - 1",
        "job_definition_id = 'other-job'",
    ],
)
def test_a_retired_runs_end_and_times_rewritten_are_named(database_url: str, tmp_path: Path, change: str) -> None:
    """Found by a review: a retired run's status and times could be rewritten in retired_runs and
    were then shown as fact by ``runs show`` and an evidence bundle's notes; the retention entry
    holds a digest of them too."""
    store = Store(database_url)
    engine = Engine(store, make_config(tmp_path, retention={"finished_runs_days": 1}))
    try:
        job = define(engine, handler="engine_handlers:succeed")
        run = engine.submit(SubmitRequest(job, requested_by="ada", request_id="close-1"), actor="ada").run.job_run_id
        with running_worker(engine):
            wait_status(engine, run, RunStatus.COMPLETED)
        later = _ready_to_retire(engine, tmp_path)
        assert retire(engine, "default", now=later).deleted == 1
        assert all(r.ok for r in audit.verify_records(engine, ["default"]))
        with engine.store.write() as tx:
            connection(tx).execute(text(f"UPDATE retired_runs SET {change} WHERE job_run_id = :r"), {"r": run})
        (report,) = audit.verify_records(engine, ["default"])
        [finding] = [f for f in report.findings if f.record_id == run]
        assert finding.problem == "retired_record_changed" and "status, created_at" in (finding.column or "")
    finally:
        store.dispose()


def test_a_bundle_cannot_show_a_retired_run_ending_otherwise(database_url: str, tmp_path: Path) -> None:
    """The same offline: a period bundle carries the retention entry naming its retired runs,
    and what ``retired.json`` says of one (its status, times) must be what that entry holds."""
    import io
    import json
    import zipfile

    from jobgate.export.bundles import build_bundle, pack, verify_bundle
    from jobgate.export.scope import ExportScope

    store = Store(database_url)
    engine = Engine(store, make_config(tmp_path, retention={"finished_runs_days": 1}))
    try:
        job = define(engine, handler="engine_handlers:succeed")
        started = engine.clock.now()
        run = engine.submit(SubmitRequest(job, requested_by="ada", request_id="close-1"), actor="ada").run.job_run_id
        with running_worker(engine):
            wait_status(engine, run, RunStatus.COMPLETED)
        later = _ready_to_retire(engine, tmp_path)
        assert retire(engine, "default", now=later).deleted == 1
        audit.seal_pending(engine, engine.clock.now())
        bundle = build_bundle(engine, ExportScope(start=started - timedelta(hours=1), end=engine.clock.now()))
        assert verify_bundle(bundle).ok
        source = zipfile.ZipFile(io.BytesIO(bundle))
        files = {n: source.read(n) for n in source.namelist() if n not in ("manifest.json", "manifest.sig")}
        listed = json.loads(files["retired.json"])
        assert [r["status"] for r in listed] == ["COMPLETED"]
        listed[0]["status"] = "FAILED"
        files["retired.json"] = json.dumps(listed).encode()
        import hashlib

        manifest = json.loads(source.read("manifest.json"))
        manifest["files"] = {n: "sha256:" + hashlib.sha256(d).hexdigest() for n, d in sorted(files.items())}
        files["manifest.json"] = json.dumps(manifest).encode()
        result = verify_bundle(pack(files))
        assert not result.ok and any(f"run {run}'s definition, status or times" in p for p in result.problems)
    finally:
        store.dispose()


def test_a_command_naming_a_retired_run_says_it_was_retired(database_url: str, tmp_path: Path) -> None:
    """Found by a review: show, retry, replay, cancel and an evidence export of a run retention
    deleted said only "no run", though retired_runs remembers it: they say it was retired, when
    and as what (still a 404), except to a caller limited to other definitions."""
    import pytest

    from jobgate.core.errors import NotFoundError
    from jobgate.export.bundles import build_bundle, run_scope
    from jobgate.export.scope import ExportScope
    from jobgate.service import control
    from jobgate.service.absent import no_run
    from jobgate.service.replay import replay

    store = Store(database_url)
    engine = Engine(store, make_config(tmp_path, retention={"finished_runs_days": 1}))
    try:
        job = define(engine, handler="engine_handlers:succeed")
        run = submit(engine, job)
        with running_worker(engine):
            wait_status(engine, run, RunStatus.COMPLETED)
        later = _ready_to_retire(engine, tmp_path)
        assert retire(engine, "default", now=later).deleted == 1
        asks = (
            lambda: control.run_detail(engine, run, "default"),
            lambda: control.run_detail(engine, run),  # the operator on the host: any tenant
            lambda: replay(engine, run, tenant_id="default"),
            lambda: retries.retry(engine, run, actor="ada", tenant_id="default"),
            lambda: control.cancel_run(engine, run, actor="ada", reason="x", tenant_id="default"),
            lambda: run_scope(engine, run, "default"),
            # as the API builds it (found by a review: GET /evidence said only "no run")
            lambda: build_bundle(engine, ExportScope(tenant_id="default", job_run_id=run)),
        )
        for ask in asks:
            with pytest.raises(NotFoundError) as refused:
                ask()
            assert refused.value.field == "job_run_id"
            assert "retired by retention at" in refused.value.message and "COMPLETED" in refused.value.message
        with engine.store.read() as tx:
            assert "retired" not in no_run(tx, run, "other-tenant").message  # another tenant's: nothing
            assert "retired" not in no_run(tx, run, "default", may_see=lambda job: False).message
        # The short id a table showed finds the retired run too (found by a review: "no run whose
        # id ends with ..." lost the explanation in the usual case).
        from jobgate.client.runs import LocalRuns

        assert LocalRuns(engine).resolve(run[-12:]) == run
    finally:
        store.dispose()


def test_an_escalated_run_awaiting_review_is_kept_until_requeued(database_url: str, tmp_path: Path) -> None:
    """Found by a review: a run ESCALATED for manual review has no dead letter, and retention
    deleted it with the finished runs (in the dry run's count too), so the review item vanished
    and could no longer be requeued. It is kept, as an open dead letter is, until requeued."""
    store = Store(database_url)
    engine = Engine(store, make_config(tmp_path, retention={"finished_runs_days": 1}))
    try:
        done = define(engine, handler="engine_handlers:succeed")
        review = define(engine, handler="engine_handlers:fail_retryable", retry_policy="test_review_v1")
        finished, escalated = submit(engine, done), submit(engine, review)
        with running_worker(engine):
            wait_status(engine, finished, RunStatus.COMPLETED)
            wait_status(engine, escalated, RunStatus.ESCALATED)
        later = _ready_to_retire(engine, tmp_path)
        assert retire(engine, "default", now=later, dry_run=True).deleted == 1
        assert retire(engine, "default", now=later).deleted == 1
        with engine.store.read() as tx:
            assert {r.job_run_id for r in tx.runs_get([finished, escalated])} == {escalated}
        control.requeue_run(engine, escalated, actor="ops")  # the review it waited for
        with engine.store.read() as tx:
            assert tx.runs_get([escalated])[0].status is RunStatus.SCHEDULED
    finally:
        store.dispose()


def test_the_source_of_an_escalated_retry_is_kept(database_url: str, tmp_path: Path) -> None:
    """Found by a regression review: retention kept ESCALATED runs but still deleted the source
    of an ESCALATED retry, so the retry awaiting review lost its parent."""
    store = Store(database_url)
    engine = Engine(store, make_config(tmp_path, retention={"finished_runs_days": 1}))
    try:
        review = define(engine, handler="engine_handlers:fail_retryable", retry_policy="test_review_v1")
        source = submit(engine, review)
        control.cancel_run(engine, source, actor="ops", reason="not yet")
        pending, _ = retries.retry(engine, source, actor="ada", tenant_id="default")
        with running_worker(engine):
            wait_status(engine, pending.job_run_id, RunStatus.ESCALATED)
        later = _ready_to_retire(engine, tmp_path)
        assert retire(engine, "default", now=later, dry_run=True).deleted == 0
        assert retire(engine, "default", now=later).deleted == 0
        with engine.store.read() as tx:
            assert {r.job_run_id for r in tx.runs_get([source, pending.job_run_id])} == {source, pending.job_run_id}
    finally:
        store.dispose()


def test_an_event_redelivered_after_retention_is_answered_with_its_retired_run(
    database_url: str, tmp_path: Path
) -> None:
    """Found by a regression review: an event redelivered after retention deleted its run was
    refused by each schedule (a miss recorded each time) and, with the quota spent, told 429;
    it had its run, and is answered with it, before any gate or quota."""
    store = Store(database_url)
    engine = Engine(store, make_config(tmp_path, retention={"finished_runs_days": 1}))
    try:
        job = define(engine, handler="engine_handlers:succeed", trigger_type="event")
        subscribe(engine, "on-ev", job, "t.ev")
        (first,) = emit_event(engine, event_type="t.ev", event_id="e1", data={}, tenant_id="default", actor="t")
        assert first.job_run_id is not None
        with running_worker(engine):
            wait_status(engine, first.job_run_id, RunStatus.COMPLETED)
        later = _ready_to_retire(engine, tmp_path)
        assert retire(engine, "default", now=later).deleted == 1
        misses = count(engine, "schedule_misses")
        (again,) = emit_event(
            engine, event_type="t.ev", event_id="e1", data={}, tenant_id="default", actor="t", quota=True
        )
        assert (again.job_run_id, again.created, again.refused) == (first.job_run_id, False, None)
        assert count(engine, "schedule_misses") == misses and count(engine, "job_runs") == 0
    finally:
        store.dispose()


def test_a_retry_whose_source_was_retired_still_names_it_as_its_parent(database_url: str, tmp_path: Path) -> None:
    """Found by a review: ``runs children --parents`` said "no parents" once retention deleted
    the run a retry retries; the lineage names it from its tombstone."""
    from jobgate.client.runs import LocalRuns
    from jobgate.testing import FakeClock

    store = Store(database_url)
    clock = FakeClock(datetime(2026, 11, 2, 9, 0, tzinfo=UTC))
    engine = Engine(store, make_config(tmp_path), clock=clock)
    try:
        job = define(engine, handler="engine_handlers:succeed")
        source = submit(engine, job)
        control.cancel_run(engine, source, actor="ops", reason="not today")
        clock.advance(timedelta(hours=1))
        retry, _ = retries.retry(engine, source, actor="ada", tenant_id="default")
        control.cancel_run(engine, retry.job_run_id, actor="ops", reason="not today either")
        later = _ready_to_retire(engine, tmp_path)
        with engine.store.write() as tx:  # only the source ended before the cutoff
            assert tx.runs_retire("default", clock.now() - timedelta(minutes=30), 10, now=later) == [source]
        found = retries.lineage(engine, retry.job_run_id, "default")
        assert found.parents == [] and [g.job_run_id for g in found.retired_parents] == [source]
        shown = LocalRuns(engine).lineage(retry.job_run_id, "parents")
        assert shown.edges == [] and [(e.job_run_id, e.status) for e in shown.retired] == [(source, "CANCELLED")]
    finally:
        store.dispose()


def test_a_run_with_an_entry_or_seal_after_the_last_anchor_waits_for_the_next(
    database_url: str, tmp_path: Path
) -> None:
    """Found by a review: a dead letter closed after the run's end was anchored wrote an audit
    entry and a seal no anchor covered, and retention deleted the run two seconds later (it
    looked at the run's end alone), against "every audit entry about them is already under an
    anchor". The run waits until an anchor covers them; then it goes."""
    store = Store(database_url)
    engine = Engine(store, make_config(tmp_path, retention={"finished_runs_days": 1}))
    try:
        job = define(engine, handler="engine_handlers:fail_final")
        dead = submit(engine, job)
        with running_worker(engine):
            wait_status(engine, dead, RunStatus.DEAD_LETTERED)
        later = _ready_to_retire(engine, tmp_path)
        control.close_dead_letter(engine, dead, actor="ops", note="done by hand")  # after the anchor
        assert retire(engine, "default", now=later, dry_run=True).deleted == 0
        assert retire(engine, "default", now=later).deleted == 0
        with engine.store.read() as tx:
            assert tx.run_get(dead) is not None
        again = _ready_to_retire(engine, tmp_path)  # chained and anchored: everything about it covered
        assert retire(engine, "default", now=again).deleted == 1
    finally:
        store.dispose()
