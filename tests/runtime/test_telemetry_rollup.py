"""The AII_TELEMETRY_JOB: a closed period's seed 000 §51 figures, published once per tenant and
period — run twice, run concurrently, crash between the sink write and the commit — to a file
sink or an HTTP sink with an Idempotency-Key; the sink is written outside any transaction (a
slow one blocks no other writer) and its address never shows beyond scheme and host."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from runtime_support import get_run, running_worker, scalar, wait_all, wait_status, wait_until
from sqlalchemy import text

from helpers import config_document, define
from jobgate.config import build_config
from jobgate.core import periods
from jobgate.core.errors import RetryableError
from jobgate.core.models import Scope
from jobgate.core.records import Publication
from jobgate.core.states import RunStatus
from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest
from jobgate.store import codec
from jobgate.store.sql import telemetry as store
from jobgate.store.sqlstore import Store
from jobgate.telemetry import rollup
from jobgate.telemetry.sinks import FileSink, HttpSink
from jobgate.testing import connection

TENANT = "acme"
DAY = "2026-03-10"  # the past day the test's runs are moved into
NOON = datetime(2026, 3, 10, 12, tzinfo=UTC)


def make_engine(database_url: str, tmp_path: Path, **telemetry: Any) -> Engine:
    doc = config_document(tmp_path, telemetry={"period": "day", "settle_seconds": 0, **telemetry})
    return Engine(Store(database_url), build_config(doc, base_dir=tmp_path, path=None))


@pytest.fixture
def engine(database_url: str, tmp_path: Path) -> Iterator[Engine]:
    eng = make_engine(database_url, tmp_path, sink_path="telemetry/aii.jsonl")
    yield eng
    eng.store.dispose()


def submit(engine: Engine, job: str, tenant: str = TENANT, scope: dict[str, str] | None = None, **params: str) -> str:
    request = SubmitRequest(
        job,
        params=params,
        scope=Scope.from_dict({"tenant_id": tenant, **(scope or {})}),
        requested_by="ops",
        request_id=uuid.uuid4().hex,
    )
    return engine.submit(request, actor="ops").run.job_run_id


def telemetry_job(engine: Engine, tenant: str = TENANT) -> str:
    return define(
        engine,
        job_class="AII_TELEMETRY_JOB",
        handler="jobgate.telemetry.rollup:telemetry_job",
        tenant_id=tenant,
        params=[{"name": "period", "pattern": "[0-9]{4}-(Q[1-4]|[0-9]{2}(-[0-9]{2})?)"}],
    )


def move_into_the_past(engine: Engine, run_ids: list[str], to: datetime = NOON) -> None:
    """Shift the runs' whole history (every instant they recorded) so they were created at
    ``to``: as if they had run that day."""
    with engine.store.read() as tx:
        first = min(r.created_at for r in tx.runs_get(run_ids))
    shift = codec.to_us(to) - codec.to_us(first)
    ids = {"ids": tuple(run_ids)}
    columns = ("created_at", "due_at", "started_at", "ended_at", "next_retry_at", "queue_deadline_at")
    with engine.store.write() as tx:
        for c in columns:
            connection(tx).execute(
                text(f"UPDATE job_runs SET {c} = {c} + :s WHERE job_run_id IN :ids").bindparams(_expanding("ids")),
                {"s": shift, **ids},
            )
        for table, column in (("run_transitions", "at"), ("dead_letters", "created_at")):
            connection(tx).execute(
                text(f"UPDATE {table} SET {column} = {column} + :s WHERE job_run_id IN :ids").bindparams(
                    _expanding("ids")
                ),
                {"s": shift, **ids},
            )


def _expanding(name: str) -> Any:
    from sqlalchemy import bindparam

    return bindparam(name, expanding=True)


def a_busy_day(engine: Engine) -> list[str]:
    """Four runs of ``acme`` on DAY: two completed (one after a retry), one DAL anchor
    dead-lettered, one replay still open at the day's end; one run of ``other``."""
    ok = define(engine, job_class="MAINTENANCE_JOB", handler="engine_handlers:succeed", tenant_id=TENANT)
    flaky = define(
        engine,
        job_class="DAL_ANCHOR_JOB",
        handler="engine_handlers:fail_until",
        tenant_id=TENANT,
        retry_policy="test_fixed_v1",
        params=[{"name": "ok_on", "pattern": "[0-9]"}],
    )
    bad = define(engine, job_class="DAL_ANCHOR_JOB", handler="engine_handlers:fail_final", tenant_id=TENANT)
    replay = define(engine, job_class="REPLAY_JOB", handler="engine_handlers:succeed", tenant_id=TENANT, queue="nobody")
    theirs = define(engine, job_class="MAINTENANCE_JOB", handler="engine_handlers:succeed", tenant_id="other")
    with running_worker(engine):
        done = [submit(engine, ok), submit(engine, flaky, ok_on="2"), submit(engine, theirs, "other")]
        lettered = submit(engine, bad)
        waiting = submit(engine, replay)  # its queue has no worker: open at the end of the day
        wait_all(engine, done, RunStatus.COMPLETED)
        wait_status(engine, lettered, RunStatus.DEAD_LETTERED)
    made = [*done, lettered, waiting]
    move_into_the_past(engine, made)
    return made


def publications(engine: Engine, tenant: str = TENANT) -> list[Publication]:
    with engine.store.read() as tx:
        return store.publications_list(connection(tx), tenant)


def test_a_closed_day_is_published_once_with_its_figures(engine: Engine, tmp_path: Path) -> None:
    a_busy_day(engine)
    job = telemetry_job(engine)
    with running_worker(engine):
        first = submit(engine, job, scope={"eco_number": "ECO-A123"}, period=DAY)
        wait_status(engine, first, RunStatus.COMPLETED)
        again = submit(engine, job, scope={"eco_number": "ECO-A123"}, period=DAY)
        wait_status(engine, again, RunStatus.COMPLETED)
    expected = {
        "eco_number": "ECO-A123",
        "period": DAY,
        "jobs_scheduled": 4,
        "jobs_completed": 2,
        "job_success_rate": 0.5,
        "retry_rate": 0.25,
        "dead_letter_rate": 0.25,
        "sla_breach_rate": 0.0,
        "avg_workflow_latency_ms": None,
        "replay_backlog": 1,
        "dal_batch_success_rate": 0.5,
    }
    [published] = publications(engine)
    assert (published.period, published.figures, published.job_run_id) == (DAY, expected, first)
    lines = FileSink(tmp_path / "telemetry" / "aii.jsonl").records()
    assert lines == [
        {**expected, "tenant_id": TENANT, "period_start": "2026-03-10T00:00:00Z", "period_end": "2026-03-11T00:00:00Z"}
    ]
    assert "already published" in (Path(engine.config.data_dir) / "runs" / again / "run.log").read_text()
    # The API's on-demand figures of the same closed period are the published ones.
    assert rollup.compute(engine, TENANT, periods.parse(DAY), "ECO-A123") == expected
    assert publications(engine, "other") == []


def test_the_job_publishes_what_is_due_and_refuses_an_open_period(engine: Engine) -> None:
    job = telemetry_job(engine)
    now = engine.clock.now()
    latest = periods.last_closed(periods.PeriodKind.DAY, now)
    with running_worker(engine):
        runs = [submit(engine, job) for _ in range(2)]
        wait_all(engine, runs, RunStatus.COMPLETED)
        refused = submit(engine, job, period=periods.containing(periods.PeriodKind.DAY, now).name)
        wait_status(engine, refused, RunStatus.DEAD_LETTERED)  # non-retryable: the day has not ended
    today = periods.containing(periods.PeriodKind.DAY, now).name
    # Two runs at once, one publication (two only if midnight passed between them).
    assert [p.period for p in publications(engine)] in ([latest.name], [today], [today, latest.name])
    assert scalar(engine, "SELECT error_code FROM job_runs WHERE job_run_id = :r", r=refused) == "BAD_PERIOD"


def test_concurrent_publishers_make_one_publication(engine: Engine, tmp_path: Path) -> None:
    """Two publishers of the same period at the same moment, each as a run does it: the sink
    (slow) outside any transaction, then the row. One line, one row, and only one 'True'."""
    period = periods.parse(DAY)
    doc = rollup.compute(engine, TENANT, period)
    sink = RendezvousFileSink(tmp_path / "sink.jsonl", parties=2)
    start = threading.Barrier(2)
    made: list[bool] = []

    def publisher() -> None:
        start.wait()
        held = rollup.deliver(sink, TENANT, period, doc)
        with engine.store.write() as tx:
            made.append(rollup.publish(tx, TENANT, period, held, sink.name, now=engine.clock.now(), job_run_id=None))

    threads = [threading.Thread(target=publisher) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(made) == [False, True]
    assert len(sink.records()) == 1 and sink.writes == 2  # both wrote; the file kept one line
    [published] = publications(engine)
    assert published.digest == _digest(sink.records()[0])


def test_a_crash_after_the_sink_write_publishes_once_when_retried(engine: Engine, tmp_path: Path) -> None:
    period = periods.parse(DAY)
    sink = FileSink(tmp_path / "sink.jsonl")
    first = {"period": DAY, "jobs_scheduled": 7}

    class Crash(Exception):
        pass

    held = rollup.deliver(sink, TENANT, period, first)  # the sink got it; the completion never came
    with pytest.raises(Crash), engine.store.write() as tx:
        assert rollup.publish(tx, TENANT, period, held, sink.name, now=engine.clock.now(), job_run_id="a")
        raise Crash
    assert publications(engine) == [] and len(sink.records()) == 1
    # The retry computes other figures (say a late commit landed): the sink keeps its record,
    # and the publication records what the sink holds.
    again = rollup.deliver(sink, TENANT, period, {"period": DAY, "jobs_scheduled": 8})
    assert again == held
    with engine.store.write() as tx:
        assert rollup.publish(tx, TENANT, period, again, sink.name, now=engine.clock.now(), job_run_id="b")
    [published] = publications(engine)
    assert published.figures == first and len(sink.records()) == 1
    assert published.digest == _digest(sink.records()[0])
    assert published.sink == "file:sink.jsonl"  # the file's name, not the server's folders


def test_a_failing_sink_records_nothing(engine: Engine, tmp_path: Path) -> None:
    job = telemetry_job(engine)
    with Receiver(status=503) as receiver:
        sink = HttpSink(receiver.url, timeout=5)
        with pytest.raises(RetryableError, match="answered HTTP 503"):
            rollup.deliver(sink, TENANT, periods.parse(DAY), {"period": DAY})
        failing = make_engine(engine.store.url, tmp_path / "b", sink_url=receiver.url)
        try:
            with running_worker(failing):
                run_id = submit(failing, job, period=DAY)
                wait_until(lambda: get_run(failing, run_id).error_code is not None, what="a failed attempt")
        finally:
            failing.store.dispose()
    assert publications(engine) == []
    run = get_run(engine, run_id)
    assert run.error_code == "TELEMETRY_SINK_UNAVAILABLE" and run.status is not RunStatus.COMPLETED


def test_the_http_sink_gets_an_idempotency_key(database_url: str, tmp_path: Path) -> None:
    with Receiver(status=200) as receiver:
        url = receiver.url.replace("http://", "http://aii:s3cret@") + "?token=TOPSECRET"
        engine = make_engine(database_url, tmp_path, sink_url=url)
        try:
            job = telemetry_job(engine)
            with running_worker(engine):
                runs = [submit(engine, job, period=DAY) for _ in range(2)]  # at once: both may send
                wait_all(engine, runs, RunStatus.COMPLETED)
                sent = len(receiver.received)
                later = submit(engine, job, period=DAY)  # after the row committed: nothing to send
                wait_status(engine, later, RunStatus.COMPLETED)
            [published] = publications(engine)
        finally:
            engine.store.dispose()
    assert 1 <= sent <= 2 and len(receiver.received) == sent
    for headers, body in receiver.received:  # a repeat carries the same key, for the receiver to drop
        assert headers["Idempotency-Key"] == f"aii-telemetry:{TENANT}:{DAY}"
        assert body["period"] == DAY and body["tenant_id"] == TENANT and body["jobs_scheduled"] == 0
    assert published.sink == receiver.url.removesuffix("/aii")  # scheme and host only


def test_a_refusing_sink_leaves_no_secret_in_the_run(database_url: str, tmp_path: Path) -> None:
    """A 401 from a sink whose URL carries a user, a password, a path and a token: the run's
    error (what the API returns) names the status and the sink's scheme and host only."""
    with Receiver(status=401) as receiver:
        url = receiver.url.replace("http://", "http://aii:s3cret@") + "/ingest?token=TOPSECRET"
        engine = make_engine(database_url, tmp_path, sink_url=url)
        try:
            job = telemetry_job(engine)
            with running_worker(engine):
                run_id = submit(engine, job, period=DAY)
                wait_until(lambda: get_run(engine, run_id).status.is_terminal, what="the run to end")
            run = get_run(engine, run_id)
            log_text = (Path(engine.config.data_dir) / "runs" / run_id / "run.log").read_text()
        finally:
            engine.store.dispose()
    shown = receiver.url.removesuffix("/aii")
    assert run.error_code == "TELEMETRY_SINK_REFUSED"  # a refusal: not retried
    assert run.error_message == f"telemetry sink {shown} answered HTTP 401"
    for secret in ("s3cret", "TOPSECRET", "aii:", "/ingest"):
        assert secret not in log_text
    assert len(receiver.received) == 1


def test_a_slow_http_sink_does_not_hold_up_other_writers(database_url: str, tmp_path: Path) -> None:
    """The sink is written outside any transaction: while it has not answered yet, a submission
    (a write) of another job commits at once, on SQLite (one write lock) as on PostgreSQL."""
    with Receiver(status=200, hold=True) as receiver:
        engine = make_engine(database_url, tmp_path, sink_url=receiver.url, timeout_seconds=10)
        try:
            job = telemetry_job(engine)
            other = define(engine, tenant_id=TENANT, queue="nobody")
            with running_worker(engine):
                run_id = submit(engine, job, period=DAY)
                assert receiver.arrived.wait(10), "the sink was not called"
                started = time.monotonic()
                submit(engine, other)
                took = time.monotonic() - started
                receiver.release.set()  # the sink answers now, after the submission
                wait_status(engine, run_id, RunStatus.COMPLETED)
            assert len(publications(engine)) == 1
        finally:
            engine.store.dispose()
    assert took < 1.0, f"a submission waited {took:.2f} s for the sink"


class RendezvousFileSink(FileSink):
    """A file sink whose writers wait for each other at its door: the ``parties`` publishers are
    all inside the sink before any of them writes (none has published its row yet)."""

    def __init__(self, path: Path, *, parties: int) -> None:
        super().__init__(path)
        self.writes = 0
        self._door = threading.Barrier(parties)

    def submit(self, record: dict[str, Any]) -> dict[str, Any]:
        self.writes += 1
        self._door.wait(timeout=10)  # BrokenBarrierError if another publisher never came
        return super().submit(record)


class Receiver:
    """A local HTTP endpoint that records what it is sent and answers ``status`` (``arrived`` is
    set when a request came in). With ``hold``, it answers only once ``release`` is set (a slow
    sink, for as long as the test needs)."""

    def __init__(self, status: int, *, hold: bool = False) -> None:
        self.status = status
        self.release = threading.Event()
        if not hold:
            self.release.set()
        self.arrived = threading.Event()
        self.received: list[tuple[dict[str, str], dict[str, Any]]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.received.append((dict(self.headers), body))
                outer.arrived.set()
                outer.release.wait(30)
                self.send_response(outer.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/aii"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def _digest(record: dict[str, Any]) -> str:
    from jobgate.core.canonical import digest

    return digest(record)


@pytest.mark.parametrize(
    ("given", "shown"),
    [
        ("https://aii:s3cret@aii.example.org:8443/ingest/T0/SECRET?token=x#f", "https://aii.example.org:8443"),
        ("http://[::1]:8080/hook", "http://[::1]:8080"),
        ("http:http://aii.example.org/ingest", "http://aii.example.org"),  # as stored by earlier versions
        ("file:/srv/jobgate/data/telemetry/aii.jsonl", "file:aii.jsonl"),
        ("file:aii.jsonl", "file:aii.jsonl"),
        ("http://aii.example.org", "http://aii.example.org"),
    ],
)
def test_sink_names_show_scheme_and_host_only(given: str, shown: str) -> None:
    from jobgate.redact import shown_sink

    assert shown_sink(given) == shown
    assert shown_sink(shown) == shown  # idempotent
