"""Declared dependencies (seed 000 §58): runs wait in the queue without using an attempt while
a dependency is down, run once it is back, and are dead-lettered with ``missing_dependency``
after the bound; an outage is reported once. Real local HTTP checks, both backends."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from local_http import Recorder, closed_port_url, local_server
from runtime_support import (
    TEST_SETTINGS,
    dead_letters,
    event_types,
    get_run,
    running_worker,
    transitions,
    wait_all,
    wait_until,
)
from sqlalchemy import text

from helpers import count, define, make_config
from jobgate.contracts import event_contract, validate
from jobgate.core.models import DeadLetterReason, Scope
from jobgate.core.states import RunStatus
from jobgate.health.rules import alert_body
from jobgate.runtime.dependencies import DependencyMonitor
from jobgate.runtime.outbox import RecordingSink, envelope, publish_once
from jobgate.runtime.process import WorkerProcess
from jobgate.runtime.worker import Worker, WorkerSettings
from jobgate.service import doctor
from jobgate.service.doctor import Level
from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest
from jobgate.store.base import RunsClaim
from jobgate.store.sqlstore import Store
from jobgate.testing import connection

CREATED_ONLY = [(None, "CREATED", "created", 0), ("CREATED", "SCHEDULED", "admitted", 0)]


@contextmanager
def engine_with(database_url: str, tmp_path: Path, **overrides: Any) -> Iterator[Engine]:
    store = Store(database_url)
    try:
        yield Engine(store, make_config(tmp_path, **overrides))
    finally:
        store.dispose()


def submit(engine: Engine, job: str, n: int, prefix: str, tenant: str = "default") -> list[str]:
    scope = Scope(tenant_id=tenant)
    return [engine.submit(SubmitRequest(job, request_id=f"{prefix}{i}", scope=scope)).run.job_run_id for i in range(n)]


def outbox_count(engine: Engine, event_type: str) -> int:
    return count(engine, "outbox", f"event_type = '{event_type}'")


def ticks(worker: Worker, n: int) -> None:
    """Let the dependency monitor make ``n`` more passes (each one checks and publishes)."""
    assert worker.dependencies.wait_passes(n, timeout=10), "the dependency monitor stopped"


def test_runs_wait_without_attempts_while_down_and_run_when_it_is_back(database_url: str, tmp_path: Path) -> None:
    with local_server(Recorder(status=503)) as (url, health):
        deps = {"dal": {"url": f"{url}/health", "ttl_seconds": 0.2, "max_wait_seconds": 3600}}
        with engine_with(database_url, tmp_path, dependencies=deps) as engine:
            needy = define(engine, dependencies=["dal"])
            plain = define(engine)
            waiting = submit(engine, needy, 3, "w")
            free = submit(engine, plain, 2, "f")
            with running_worker(engine) as worker:
                wait_all(engine, free, RunStatus.COMPLETED)  # a run without dependencies is unaffected
                ticks(worker, 1)  # the monitor runs (it started with the worker): it has checked once
                assert worker.dependencies.states()["dal"].up is False
                ticks(worker, 3)  # several checks, all down, while the worker is idle and polling
                for run_id in waiting:
                    run = get_run(engine, run_id)
                    assert (run.status, run.attempt) == (RunStatus.SCHEDULED, 0)
                    assert transitions(engine, run_id) == CREATED_ONLY  # never claimed: nothing written
                assert outbox_count(engine, "dependency_unavailable") == 1  # one tenant, one outage
                (check,) = [c for c in doctor.run_checks(engine) if c.name == "dependencies"]
                assert check.level is Level.AMBER and check.detail.startswith("dal down for")

                health.status = 200  # the dependency comes back
                wait_all(engine, waiting, RunStatus.COMPLETED)
            for run_id in waiting:
                assert get_run(engine, run_id).attempt == 1  # the wait cost no attempt
                assert [t[2] for t in transitions(engine, run_id)][2:] == ["claimed", "started", "succeeded"]
            assert outbox_count(engine, "dependency_recovered") == 1
            (check,) = [c for c in doctor.run_checks(engine) if c.name == "dependencies"]
            assert check.level is Level.GREEN
            assert health.gets >= 4
            # Both events, as delivered (and as the alert webhook sends them), match their contracts.
            recording = RecordingSink()
            while publish_once(engine.store, [recording], engine.clock):
                pass
            reported = [e for e in recording.events if e.event_type.startswith("dependency_")]
            assert [e.event_type for e in reported] == ["dependency_unavailable", "dependency_recovered"]
            for e in reported:
                validate(event_contract(e.event_type), envelope(e))
                validate(event_contract(e.event_type), alert_body(envelope(e)))


def test_runs_that_wait_past_the_bound_are_dead_lettered_as_missing_dependency(
    database_url: str, tmp_path: Path
) -> None:
    deps = {"dal": {"url": closed_port_url(), "ttl_seconds": 0.2, "max_wait_seconds": 0.5}}
    with engine_with(database_url, tmp_path, dependencies=deps) as engine:
        job = define(engine, dependencies=["dal"])
        ids = submit(engine, job, 2, "r")
        with running_worker(engine):
            wait_all(engine, ids, RunStatus.DEAD_LETTERED)
        for run_id in ids:
            run = get_run(engine, run_id)
            assert (run.attempt, run.error_code) == (0, "DEPENDENCY_UNAVAILABLE")
            assert run.error_message is not None and "dependency dal unavailable" in run.error_message
            assert transitions(engine, run_id) == [
                *CREATED_ONLY,
                ("SCHEDULED", "DEAD_LETTERED", "dependency_unavailable", 0),
            ]
            (letter,) = dead_letters(engine, run_id)
            assert letter.reason is DeadLetterReason.MISSING_DEPENDENCY and letter.attempts == 0
            assert "job_dead_lettered" in event_types(engine, run_id)
        assert count(engine, "audit_log", "action = 'run.dead_lettered'") == 2


def test_an_outage_seen_by_two_workers_is_reported_once(database_url: str, tmp_path: Path) -> None:
    with local_server(Recorder(status=500)) as (url, health):
        deps = {"dal": {"url": url, "ttl_seconds": 0.1}}
        with engine_with(database_url, tmp_path, dependencies=deps) as engine:
            job = define(engine, dependencies=["dal"])
            other = define(engine, dependencies=["dal"], tenant_id="other")
            ids = submit(engine, job, 2, "a") + submit(engine, other, 1, "b", tenant="other")
            with running_worker(engine) as one, running_worker(engine) as two:
                for w in (one, two):
                    wait_until(lambda w=w: w.dependencies.states().get("dal") is not None, what="checks")
                    ticks(w, 3)
                assert outbox_count(engine, "dependency_unavailable") == 2  # once per tenant, not per worker
                health.status = 200
                wait_all(engine, ids, RunStatus.COMPLETED)
                for w in (one, two):
                    ticks(w, 2)
            assert outbox_count(engine, "dependency_recovered") == 2
            with engine.store.read() as tx:
                sql = text("SELECT tenant_id FROM outbox WHERE event_type = 'dependency_unavailable'")
                assert sorted(r[0] for r in connection(tx).execute(sql)) == ["default", "other"]


def test_the_monitor_holds_runs_until_the_first_check_answers(database_url: str, tmp_path: Path) -> None:
    """A worker that has just started has not looked at the dependency yet: it does not run
    the job on trust. The first check here is slow (the server answers after a gate opens)."""
    gate = threading.Event()

    def probe(check: Any) -> str | None:
        gate.wait(10)
        return None

    deps = {"dal": {"url": closed_port_url()}}
    with engine_with(database_url, tmp_path, dependencies=deps) as engine:
        job = define(engine, dependencies=["dal"])
        (run_id,) = submit(engine, job, 1, "x")
        worker = Worker(engine, WorkerSettings(**TEST_SETTINGS))
        worker.dependencies._probe = probe
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        try:
            assert worker.idle.wait(10), "the worker never idled"
            assert worker.dependencies.blocked  # held: not checked yet
            assert get_run(engine, run_id).status is RunStatus.SCHEDULED
            gate.set()
            wait_until(lambda: get_run(engine, run_id).status is RunStatus.COMPLETED, what="the run to complete")
        finally:
            gate.set()
            worker.stop()
            assert worker.wait_stopped(30)
            thread.join(30)


def test_the_claim_skips_excluded_definition_versions_only(engine: Engine) -> None:
    needy = define(engine)
    plain = define(engine)
    (a,) = submit(engine, needy, 1, "a")
    (b,) = submit(engine, plain, 1, "b")
    digest = get_run(engine, a).definition_digest
    now = engine.clock.now()
    with engine.store.read() as tx:
        assert tx.runs_claimable_exists(("default",), now, (digest,))
        assert tx.runs_claimable_exists(("default",), now)
    with engine.store.write() as tx:
        batch = tx.runs_claim(
            RunsClaim("w1", ("default",), 10, now, now + timedelta(seconds=30), exclude_digests=frozenset({digest}))
        )
    assert [r.job_run_id for r in batch.runs()] == [b]
    with engine.store.read() as tx:
        assert not tx.runs_claimable_exists(("default",), now, (digest,))
        assert tx.runs_claimable_exists(("default",), now)
        assert [r.job_run_id for r in tx.runs_waiting_on([digest], now, 10)] == [a]


def test_outage_markers_open_and_close_once(engine: Engine) -> None:
    t0 = engine.clock.now()
    ttl = timedelta(seconds=30)
    with engine.store.write() as tx:
        assert tx.outage_down("dal", "w1", t0, ttl) == (True, t0)  # opens the outage
        assert tx.outage_down("dal", "w2", t0 + timedelta(seconds=1), ttl) == (False, t0)  # already open
        assert tx.outage_down("dal", "w1", t0 + timedelta(seconds=2), ttl) == (False, t0)  # renewed
    with engine.store.read() as tx:
        (marker,) = tx.outages_open()
    assert marker.owner == "w1" and marker.acquired_at == t0
    # Its observer stops renewing: another takes it over quietly, and the outage keeps its start.
    later = t0 + timedelta(seconds=40)  # expired at t0 + 32 s
    with engine.store.write() as tx:
        assert tx.outage_down("dal", "w2", later, ttl) == (False, t0)
        closed = tx.outage_up("dal")
        assert closed is not None and closed.owner == "w2" and closed.acquired_at == t0
        assert tx.outage_up("dal") is None  # closed once
        assert tx.outages_open() == []
        assert tx.outage_down("dal", "w3", later, ttl) == (True, later)  # a new outage
    # A marker nobody renewed (or closed) for a whole TTL after it expired was watched by no
    # one: the dependency down much later is a new outage, with its own start, reported again.
    much_later = later + timedelta(minutes=5)
    with engine.store.write() as tx:
        assert tx.outage_down("dal", "w4", much_later, ttl) == (True, much_later)
        (marker,) = tx.outages_open()
    assert marker.owner == "w4" and marker.acquired_at == much_later


def test_a_host_without_the_dependency_configured_only_leaves_its_runs_alone(database_url: str, tmp_path: Path) -> None:
    """The definition was stored where ``dal`` is configured; this worker's host has no check
    for it. It must not claim the runs, and must not report an outage or dead-letter them."""
    deps = {"dal": {"url": closed_port_url(), "max_wait_seconds": 60}}
    with engine_with(database_url, tmp_path / "a", dependencies=deps) as configured:
        job = define(configured, dependencies=["dal"])
        (run_id,) = submit(configured, job, 1, "u")
        with engine_with(database_url, tmp_path / "b") as bare:
            monitor = DependencyMonitor(bare, observer="w-bare", probe=lambda check: pytest.fail("nothing to probe"))
            t0 = bare.clock.now()
            for hours in (0, 2, 4):  # far past any wait bound
                monitor.tick(t0 + timedelta(hours=hours))
            assert monitor.blocked == {get_run(bare, run_id).definition_digest}  # not claimed here
            assert monitor.states() == {}
            with bare.store.read() as tx:
                assert tx.outages_open() == []
            assert outbox_count(bare, "dependency_unavailable") == 0
            run = get_run(bare, run_id)
            assert (run.status, run.attempt) == (RunStatus.SCHEDULED, 0) and dead_letters(bare, run_id) == []


def test_a_recovery_whose_report_failed_is_reported_at_the_next_pass(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The write that closes the outage marker fails once: the monitor keeps the dependency
    down (its runs keep waiting) and closes the marker, with its event, at the next pass."""
    from jobgate.store.sqlstore import StoreTx

    job = define(engine)
    with engine.store.read() as tx:
        digest = tx.definition_get("default", job)
    assert digest is not None
    problem: list[str | None] = ["answered HTTP 503"]
    monitor = DependencyMonitor(engine, observer="w-test", probe=lambda check: problem[0])
    monitor._needs = {digest.digest: ("anchor_sink",)}  # as if the definition declared it
    monitor._tenants = {"anchor_sink": frozenset({"default"})}
    monitor._next_scan = engine.clock.now() + timedelta(days=1)
    t0 = engine.clock.now()
    monitor.tick(t0)
    assert outbox_count(engine, "dependency_unavailable") == 1
    problem[0] = None  # it is back; the database refuses the first write that says so
    original = StoreTx.outage_up
    calls: list[int] = []

    def failing_once(self: StoreTx, dependency: str) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("database blip")
        return original(self, dependency)

    monkeypatch.setattr(StoreTx, "outage_up", failing_once)
    with pytest.raises(RuntimeError):
        monitor.tick(t0 + timedelta(seconds=2))
    assert monitor.states()["anchor_sink"].up is False and monitor.blocked  # still waiting here
    monitor.tick(t0 + timedelta(seconds=4))
    assert len(calls) == 2
    assert monitor.states()["anchor_sink"].up is True and not monitor.blocked
    with engine.store.read() as tx:
        assert tx.outages_open() == []
    assert outbox_count(engine, "dependency_recovered") == 1
    # The next outage is a new one, reported with its own start.
    problem[0] = "answered HTTP 503"
    monitor.tick(t0 + timedelta(hours=3))
    with engine.store.read() as tx:
        (marker,) = tx.outages_open()
    assert marker.acquired_at == t0 + timedelta(hours=3)
    assert outbox_count(engine, "dependency_unavailable") == 2


@pytest.mark.parametrize("declared", [["dal", "nope"], ["dal", "dal"], "dal"])
def test_a_definition_naming_an_unknown_dependency_is_refused_at_load(tmp_path: Path, declared: Any) -> None:
    from jobgate.core.errors import ValidationError
    from jobgate.definitions import parse_definition

    config = make_config(tmp_path, dependencies={"dal": {"url": "http://127.0.0.1:1/health"}})
    doc = {"job_definition_id": "j", "job_class": "MAINTENANCE_JOB", "handler": "m:f", "dependencies": declared}
    with pytest.raises(ValidationError) as err:
        parse_definition(doc, "j.yaml", config)
    assert err.value.field in ("dependencies", "dependencies[1]")
    if declared == ["dal", "nope"]:
        assert str(err.value) == "j.yaml: dependencies[1]: unknown dependency 'nope' (known: anchor_sink, dal)"


def test_probes_tell_up_from_down(tmp_path: Path) -> None:
    from jobgate.health.probes import probe
    from jobgate.health.rules import Check, ProbeKind

    def check(kind: ProbeKind, where: str) -> Check:
        return Check("d", kind, where, timedelta(seconds=2), timedelta(seconds=10), timedelta(hours=1))

    with local_server(Recorder(status=503)) as (url, health):
        assert probe(check(ProbeKind.HEALTH, url)) == "answered HTTP 503"
        assert probe(check(ProbeKind.REACHABLE, url)) == "answered HTTP 503"
        health.status = 405  # an endpoint that only takes POST still answers: reachable, not healthy
        assert probe(check(ProbeKind.REACHABLE, url)) is None
        assert probe(check(ProbeKind.HEALTH, url)) == "answered HTTP 405"
        health.status = 204
        assert probe(check(ProbeKind.HEALTH, url)) is None
    assert probe(check(ProbeKind.HEALTH, closed_port_url())) == "unreachable: ConnectError"
    assert probe(check(ProbeKind.FILE, str(tmp_path / "anchors" / "a.jsonl"))) is None  # the folder is made
    blocker = tmp_path / "file"
    blocker.write_text("")
    problem = probe(check(ProbeKind.FILE, str(blocker / "a.jsonl")))
    assert problem is not None and problem.startswith("cannot create")


def test_exit_when_idle_stops_with_runs_whose_dependency_is_down_and_names_them(
    database_url: str, tmp_path: Path
) -> None:
    """Found by a review: ``jobgate worker --exit-when-idle`` never exited while a due run waited
    for a dependency that was down, hanging the script or CI that relied on it. It stops once
    nothing it would claim is due, and names the runs it leaves waiting."""
    deps = {"dal": {"url": closed_port_url(), "ttl_seconds": 0.2, "max_wait_seconds": 3600}}
    with engine_with(database_url, tmp_path, dependencies=deps) as engine:
        needy = define(engine, dependencies=["dal"])
        waiting = submit(engine, needy, 2, "w")
        proc = WorkerProcess(engine, WorkerSettings(poll_interval=timedelta(milliseconds=20)), publish=False)
        proc.start()
        proc.stop_when_idle()
        ended = threading.Event()
        threading.Thread(target=lambda: (proc.join(), ended.set()), daemon=True).start()
        try:
            assert ended.wait(60), "the worker did not exit"  # real time: a bound on the process's own exit
        finally:
            proc.stop()
        assert sorted(r.job_run_id for r in proc.left_behind()) == sorted(waiting)
        assert {get_run(engine, r).status for r in waiting} == {RunStatus.SCHEDULED}
