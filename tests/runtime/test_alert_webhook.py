"""The alert webhook (seed 000 §5, §58): alerts reach a real local HTTP receiver through the
outbox, retried with backoff, each with a stable ``alert_id``; with the receiver down the
publisher carries on and the alerts are kept in the local log. Both backends."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from local_http import Recorder, closed_port_url, local_server
from runtime_support import running_worker, wait_all
from sqlalchemy import text

from helpers import define, make_config
from jobgate.contracts import event_contract, validate
from jobgate.core.events import EventType
from jobgate.core.models import OutboxEvent
from jobgate.core.states import RunStatus
from jobgate.runtime import alert_sink as alert_sink_module
from jobgate.runtime.alert_sink import WebhookAlertSink, alert_sink
from jobgate.runtime.outbox import Deferred, JsonLinesSink, RecordingSink, publish_once
from jobgate.runtime.process import default_sinks
from jobgate.service import safemode
from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest
from jobgate.store.sqlstore import Store
from jobgate.testing import connection

FAST = {"backoff_seconds": 0.01, "max_backoff_seconds": 0.05, "timeout_seconds": 2}


@contextmanager
def engine_with(database_url: str, tmp_path: Path, **overrides: Any) -> Iterator[Engine]:
    store = Store(database_url)
    try:
        yield Engine(store, make_config(tmp_path, **overrides))
    finally:
        store.dispose()


def dead_letter_three(engine: Engine) -> list[str]:
    """Three runs that exhaust their retries (dead letters) and one that completes."""
    failing = define(engine, handler="engine_handlers:fail_retryable", retry_policy="test_fixed_v1")
    fine = define(engine)
    ids = [engine.submit(SubmitRequest(failing, request_id=f"d{i}")).run.job_run_id for i in range(3)]
    ok = engine.submit(SubmitRequest(fine, request_id="ok")).run.job_run_id
    with running_worker(engine):
        wait_all(engine, ids, RunStatus.DEAD_LETTERED)
        wait_all(engine, [ok], RunStatus.COMPLETED)
    return ids


def drain(engine: Engine, sinks: list[Any]) -> None:
    while publish_once(engine.store, sinks, engine.clock):
        pass
    with engine.store.read() as tx:
        assert tx.outbox_backlog() == 0  # the cursor moved past every event


def event_ids(engine: Engine, *types: str) -> set[int]:
    with engine.store.read() as tx:
        rows = connection(tx).execute(text("SELECT id, event_type FROM outbox")).all()
    return {int(r[0]) for r in rows if r[1] in types}


def test_every_alert_reaches_a_flaky_receiver_once_with_a_stable_id(database_url: str, tmp_path: Path) -> None:
    with local_server(Recorder(fail_first=4)) as (url, receiver):
        alerts = {"webhook_url": f"{url}/alerts", "max_attempts": 5, **FAST}
        with engine_with(database_url, tmp_path, alerts=alerts) as engine:
            ids = dead_letter_three(engine)
            safemode.activate(engine, "default", actor="ops", reason="drift spike")
            recording = RecordingSink()
            (sink,) = [s for s in default_sinks(engine) if isinstance(s, WebhookAlertSink)]
            drain(engine, [recording, sink])
            drain(engine, [recording, sink])  # nothing left: nothing sent again
            expected = event_ids(engine, "job_dead_lettered", "safe_mode_activation")
            assert len(expected) == 4
            got = [a["alert_id"] for a in receiver.accepted]
            assert sorted(got) == sorted(expected)  # each alert once, none of the others (job_started, ...)
            assert receiver.posts == 4 + 4  # the four refusals were retried
            letters = [a for a in receiver.accepted if a["event_type"] == "trustgate.scheduler.dead_lettered"]
            assert sorted(a["job_run_id"] for a in letters) == sorted(ids)
            for alert, headers in zip(receiver.accepted, receiver.headers, strict=True):
                assert alert["alert_id"] == alert["event_id"]
                kind = "job_dead_lettered" if alert in letters else "safe_mode_activation"
                validate(event_contract(kind), alert)  # the body as received matches the event's contract
                assert headers["Idempotency-Key"] == str(alert["alert_id"])
            assert {e.event_id for e in recording.events} == event_ids(engine, *_all_types(engine))
            assert not (tmp_path / "data" / "alerts-undelivered.jsonl").exists()
            assert (sink.delivered, sink.logged) == (4, 0)


def _all_types(engine: Engine) -> set[str]:
    with engine.store.read() as tx:
        return {r[0] for r in connection(tx).execute(text("SELECT DISTINCT event_type FROM outbox"))}


def test_a_receiver_that_is_down_does_not_stop_the_publisher_and_alerts_go_to_the_local_log(
    database_url: str, tmp_path: Path
) -> None:
    url = closed_port_url()
    alerts = {"webhook_url": url, "max_attempts": 3, "cooldown_seconds": 600, **FAST}
    with engine_with(database_url, tmp_path, alerts=alerts) as engine:
        dead_letter_three(engine)
        jsonl = engine.config.events.jsonl_path
        assert jsonl is not None
        sinks = default_sinks(engine)
        assert [type(s) for s in sinks] == [JsonLinesSink, WebhookAlertSink]  # alerts last
        drain(engine, sinks)  # returns: the publisher is not stuck on the receiver
        every = event_ids(engine, *_all_types(engine))
        mirrored = [json.loads(line)["event_id"] for line in jsonl.read_text().splitlines()]
        assert sorted(mirrored) == sorted(every)  # the other sink got everything, once
        log_path = tmp_path / "data" / "alerts-undelivered.jsonl"
        logged = [json.loads(line) for line in log_path.read_text().splitlines()]
        assert sorted(r["alert_id"] for r in logged) == sorted(event_ids(engine, "job_dead_lettered"))
        shown = url.rstrip("/")  # scheme and host: a webhook's path or query may be its secret
        assert all(r["url"] == shown and r["webhook"] == 1 and r["alert"]["alert_id"] == r["alert_id"] for r in logged)
        assert "after 3 attempts" in logged[0]["problem"]  # the first alert was retried,
        assert all("cooling down" in r["problem"] for r in logged[1:])  # the rest did not wait on it again


def add_events(engine: Engine, alerts: int, others: int) -> None:
    """``alerts`` dead-letter events and ``others`` completions, interleaved, in the outbox."""
    now = engine.clock.now()
    kinds = [EventType.JOB_DEAD_LETTERED] * alerts + [EventType.JOB_COMPLETED] * others
    with engine.store.write() as tx:
        tx.outbox_append(
            [(None, "default", (kind, {"event_type": f"trustgate.scheduler.{kind.value}", "n": i}))
             for i, kind in enumerate(sorted(kinds, key=lambda k: k.value))],
            now,
        )  # fmt: skip


def test_a_slow_receiver_gets_every_alert_within_the_batch_budget(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A healthy receiver taking 0.3 s per alert, a 1 s budget per batch: five alerts do not fit
    in one batch. Those past the budget wait for the next batch (not the local log), no batch
    runs over its budget, and each alert is delivered once."""
    monkeypatch.setattr(alert_sink_module, "BATCH_BUDGET_SECONDS", 1.0)
    with local_server(Recorder(post_delay=0.3)) as (url, receiver):
        alerts = {"webhook_url": f"{url}/hooks/T000/SECRET", "timeout_seconds": 0.6, "max_attempts": 3}
        with engine_with(database_url, tmp_path, alerts=alerts) as engine:
            add_events(engine, alerts=5, others=2)
            sink = alert_sink(engine.config.alerts, engine.config.data_dir)
            assert sink is not None
            recording = RecordingSink()
            spent: list[float] = []
            while True:
                started = time.monotonic()
                n = publish_once(engine.store, [recording, sink], engine.clock)
                spent.append(time.monotonic() - started)
                if n == 0:
                    break
            with engine.store.read() as tx:
                assert tx.outbox_backlog() == 0
            expected = event_ids(engine, "job_dead_lettered")
            every = event_ids(engine, "job_dead_lettered", "job_completed")
    assert sorted(a["alert_id"] for a in receiver.accepted) == sorted(expected)  # each once
    assert receiver.posts == 5
    assert not (tmp_path / "data" / "alerts-undelivered.jsonl").exists()  # the receiver was up
    assert sink.deferred >= 1 and len(spent) >= 3  # it took more than one batch
    assert max(spent) < 1.0 + 0.4, spent  # within the budget (and the other sinks' moment)
    assert {e.event_id for e in recording.events} == every  # the other sink got all (some twice: at least once)


def test_a_receiver_that_stays_down_reaches_the_local_log_across_batches(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Retries cut by the budget continue in the next batch, counted: after ``max_attempts`` the
    alert goes to the local log, and the rest follow it there while the webhook cools down."""
    monkeypatch.setattr(alert_sink_module, "BATCH_BUDGET_SECONDS", 1.0)
    with local_server(Recorder(post_status=503, post_delay=0.4)) as (url, receiver):
        alerts = {"webhook_url": f"{url}/hook?token=SECRET", "timeout_seconds": 0.6, "max_attempts": 4,
                  "backoff_seconds": 0.05, "max_backoff_seconds": 0.05, "cooldown_seconds": 600}  # fmt: skip
        with engine_with(database_url, tmp_path, alerts=alerts) as engine:
            add_events(engine, alerts=3, others=0)
            sink = alert_sink(engine.config.alerts, engine.config.data_dir)
            assert sink is not None
            for _ in range(10):  # a batch cut at its first alert delivers nothing, yet moves it on
                publish_once(engine.store, [sink], engine.clock)
                with engine.store.read() as tx:
                    if tx.outbox_backlog() == 0:
                        break
            else:
                pytest.fail("the alerts were never delivered or logged")
            expected = event_ids(engine, "job_dead_lettered")
    assert receiver.posts == 4  # the first alert's four attempts, over more than one batch
    assert sink.deferred >= 1
    logged = [json.loads(x) for x in (tmp_path / "data" / "alerts-undelivered.jsonl").read_text().splitlines()]
    assert sorted(r["alert_id"] for r in logged) == sorted(expected)
    assert "HTTP 503 after 4 attempts" in logged[0]["problem"]
    assert all(r["url"] == url and "SECRET" not in json.dumps(r) for r in logged)


def test_the_publisher_renews_its_lock_before_calling_the_sinks(engine: Engine) -> None:
    from datetime import timedelta

    from jobgate.runtime.leadership import Lease
    from jobgate.runtime.outbox import LOCK_MARGIN, PUBLISHER_LOCK, SINK_BUDGET, OutboxPublisher

    t0 = engine.clock.now()
    lease = Lease(engine.store, PUBLISHER_LOCK, "p1", timedelta(seconds=10))
    token = lease.hold(t0)
    assert token is not None
    later = t0 + timedelta(seconds=3)  # before a third of the ttl: a plain hold writes nothing
    assert lease.hold(later) == token
    with engine.store.read() as tx:
        held = tx.lock_get(PUBLISHER_LOCK)
    assert held is not None and held.expires_at == t0 + timedelta(seconds=10)
    # 7 s left is less than a batch's budget and margin (8 s): renewed before the sinks run.
    assert lease.hold(later, min_remaining=SINK_BUDGET + LOCK_MARGIN) == token
    with engine.store.read() as tx:
        held = tx.lock_get(PUBLISHER_LOCK)
    assert held is not None and held.expires_at == later + timedelta(seconds=10)
    # A publisher whose lock is gone by then calls no sink and marks nothing.
    add_events(engine, alerts=1, others=1)
    called = RecordingSink()
    assert publish_once(engine.store, [called], engine.clock, still_held=lambda: False) == 0
    assert called.events == []
    publisher = OutboxPublisher(engine.store, [called], engine.clock, owner="p2")
    assert publisher._hold_lock() is None  # p1 holds it
    assert publish_once(engine.store, [called], engine.clock, lock=("p1", token), still_held=lambda: True) == 2


def test_a_refusal_is_not_retried_and_is_logged(tmp_path: Path) -> None:
    with local_server(Recorder(post_status=400)) as (url, receiver):
        config = make_config(tmp_path, alerts={"webhook_url": url, **FAST})
        sink = alert_sink(config.alerts, config.data_dir)
        assert sink is not None
        sink.publish([_event(7, "job_dead_lettered"), _event(8, "job_completed")])
        assert receiver.posts == 1  # one alert, one try: a 400 will not change
        (record,) = [json.loads(x) for x in (tmp_path / "data" / "alerts-undelivered.jsonl").read_text().splitlines()]
        assert record["alert_id"] == 7 and record["problem"] == "refused: HTTP 400"


def test_no_webhook_configured_means_no_alert_sink(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    assert alert_sink(config.alerts, config.data_dir) is None


@pytest.mark.parametrize(
    ("alerts", "field"),
    [
        ({"webhook_url": "ftp://x"}, "alerts.webhook_url"),
        ({"webhook_url": ["http://a/", "http://a/"]}, "alerts.webhook_url[1]"),
        ({"webhook_url": "http://a/", "event_types": ["job_dead_letered"]}, "alerts.event_types[0]"),
        ({"webhook_url": "http://a/", "max_attempts": 0}, "alerts.max_attempts"),
        ({"webhook_url": "http://a/", "backoff_seconds": 5, "max_backoff_seconds": 1}, "alerts.max_backoff_seconds"),
        ({"webhok_url": "http://a/"}, "alerts.webhok_url"),
    ],
)
def test_alert_configuration_errors_name_the_key(tmp_path: Path, alerts: dict[str, Any], field: str) -> None:
    from jobgate.core.errors import ConfigurationError

    with pytest.raises(ConfigurationError) as err:
        make_config(tmp_path, alerts=alerts)
    assert err.value.field == field


def _event(event_id: int, event_type: str) -> OutboxEvent:
    from datetime import UTC, datetime

    payload = json.dumps({"event_type": f"trustgate.scheduler.{event_type}", "tenant_id": "default"})
    return OutboxEvent(event_id, None, "default", event_type, payload, datetime(2026, 3, 1, tzinfo=UTC))


@pytest.mark.parametrize(("timeout", "backoff"), [(2.0, 0.05), (0.8, 0.3)])
def test_with_the_real_clock_every_batch_makes_an_attempt_and_the_outbox_moves_on(
    tmp_path: Path, timeout: float, backoff: float
) -> None:
    """A timeout as long as the budget, or a backoff cut to "what is left minus the timeout"
    (a real sleep overshoots): each batch still makes its first attempt, so the alert reaches
    the local log after its attempts instead of being deferred for ever."""
    import socket

    with socket.socket() as s:  # a port nobody listens on: every attempt fails at once
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}/hook"
    alerts = {
        "webhook_url": closed,
        "timeout_seconds": timeout,
        "max_attempts": 3,
        "backoff_seconds": backoff,
        "max_backoff_seconds": backoff,
        "cooldown_seconds": 600,
    }
    config = make_config(tmp_path, alerts=alerts)
    sink = WebhookAlertSink(config.alerts, undelivered_log=tmp_path / "undelivered.jsonl", budget=1.0)
    events = [_event(1, "job_dead_lettered")]
    for _ in range(6):
        try:
            sink.publish(events)
            break
        except Deferred as deferred:
            assert deferred.handled == 0
    else:
        pytest.fail("the alert was deferred at every batch: the outbox would never move again")
    (record,) = [json.loads(x) for x in (tmp_path / "undelivered.jsonl").read_text().splitlines()]
    assert record["alert_id"] == 1 and "after 3 attempts" in record["problem"]
