"""Redis pub/sub triggers (seed 004) against the real Redis on 127.0.0.1:6379.

Each test has a channel prefix of its own, so tests (and other users of the server) never
hear each other. Nothing sleeps: every wait is on the subscriber's ``SourceStats``.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient
from sqlalchemy import text
from tests.helpers import count, define

from jobgate.api.server_state import ServerState
from jobgate.config.pubsub import PubSubSettings
from jobgate.console.app import create_app
from jobgate.runtime.pubsub import RedisPubSub
from jobgate.service.engine import Engine
from jobgate.testing import connection

redis = pytest.importorskip("redis")

REDIS_URL = "redis://127.0.0.1:6379/0"
WAIT = 10.0
FAST = timedelta(milliseconds=50)  # the first reconnection's wait, in tests


@pytest.fixture(scope="module")
def broker() -> Iterator[Any]:
    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.ping()
    except redis.ConnectionError as exc:
        pytest.skip(f"no Redis at {REDIS_URL}: {exc}")
    yield client
    client.close()


@pytest.fixture
def prefix(broker: Any) -> Iterator[str]:
    value = f"jgtest:{uuid.uuid4().hex[:12]}:"
    yield value
    keys = list(broker.scan_iter(match=f"{value}*"))
    if keys:
        broker.delete(*keys)


def settings(tmp_path: Path, prefix: str, entries: list[dict[str, Any]], url: str = REDIS_URL) -> PubSubSettings:
    path = tmp_path / "pubsub.yaml"
    path.write_text(yaml.safe_dump({"subscriptions": entries}))
    return PubSubSettings(url=url, channel_pattern=f"{prefix}*", map_path=path, reconnect_max=timedelta(seconds=1))


def completion(result: str, status: str = "success", **extra: Any) -> str:
    return json.dumps({"pipeline_name": "mask-sync", "result_name": result, "status": status, **extra})


def started(engine: Engine, s: PubSubSettings) -> RedisPubSub:
    source = RedisPubSub(engine, s, reconnect_base=FAST, poll=timedelta(milliseconds=200))
    source.start()
    assert source.stats.wait_count("state_reads", 1, WAIT), source.stats.snapshot()
    return source


def runs(engine: Engine) -> list[tuple[str, str, str]]:
    with engine.store.read() as tx:
        rows = connection(tx).execute(text("SELECT job_definition_id, params, trigger_type FROM job_runs")).all()
    return [(r[0], r[1], r[2]) for r in rows]


def event_job(engine: Engine, *, params: tuple[str, ...] = (), approve: bool = True) -> str:
    return define(
        engine,
        approve=approve,
        trigger_type="event",
        params=[{"name": n, "pattern": "[A-Za-z0-9_:-]{1,50}"} for n in params],
    )


def test_a_message_fires_one_run_with_only_the_declared_whitelisted_params(
    engine: Engine, broker: Any, prefix: str, tmp_path: Path
) -> None:
    job = event_job(engine, params=("result_name", "status", "note"))  # pipeline_name not declared
    entry = {"result_name": "MASK_V001", "job_definition_id": job, "params": {"note": "nudge"}}
    source = started(engine, settings(tmp_path, prefix, [entry]))
    try:
        message = completion("MASK_V001", timestamp="2026-12-04T06:00:00Z", secret="hunter2", scenario="other")
        assert broker.publish(f"{prefix}MASK_V001", message) == 1
        assert source.stats.wait_count("fired", 1, WAIT), source.stats.snapshot()
        assert source.health() == "connected"
        broker.publish(f"{prefix}MASK_V001", message)  # the same completion delivered again
        assert source.stats.wait_count("duplicates", 1, WAIT), source.stats.snapshot()
    finally:
        source.stop()
    assert runs(engine) == [(job, '{"note":"nudge","result_name":"MASK_V001","status":"success"}', "event")]
    with engine.store.read() as tx:
        (trigger,) = connection(tx).execute(text("SELECT trigger FROM job_runs")).scalars().all()
    assert "hunter2" not in str(trigger)  # nothing but the whitelisted fields is stored


def test_unmapped_wrong_status_and_malformed_messages_are_ignored_and_store_nothing(
    engine: Engine, broker: Any, prefix: str, tmp_path: Path
) -> None:
    job = event_job(engine)
    source = started(engine, settings(tmp_path, prefix, [{"result_name": "R1", "job_definition_id": job}]))
    try:
        broker.publish(f"{prefix}R2", completion("R2"))  # not in the mapping
        broker.publish(f"{prefix}R1", completion("R1", "failed"))  # on_status defaults to [success]
        broker.publish(f"{prefix}R1", "not json")
        broker.publish(f"{prefix}R1", json.dumps({"result_name": "R1"}))  # no status
        broker.publish(f"{prefix}{job}", json.dumps({"result_name": job, "status": "success"}))  # names a definition
        broker.publish(f"{prefix}R2", completion("R1"))  # R1's name on another channel
        done = source.stats.wait(
            lambda s: (
                (
                    s["ignored.unmapped"],
                    s["ignored.status"],
                    s["ignored.not_json"],
                    s["ignored.bad_message"],
                    s["ignored.other_channel"],
                )
                == (2, 1, 1, 1, 1)
            ),
            WAIT,
        )
        assert done, source.stats.snapshot()
    finally:
        source.stop()
    assert source.stats["fired"] == 0
    assert count(engine, "job_runs") == 0


def test_the_state_key_read_at_start_up_fires_once_and_not_again_on_restart(
    engine: Engine, broker: Any, prefix: str, tmp_path: Path
) -> None:
    job = event_job(engine, params=("status",))
    s = settings(tmp_path, prefix, [{"result_name": "R1", "job_definition_id": job}])
    broker.set(s.state_key("R1"), completion("R1", timestamp=1764828000), ex=600)  # published while we were down
    first = started(engine, s)
    first.stop()
    assert first.stats.snapshot().get("fired") == 1
    # A restart, after a configuration change, reads the same key: the same completion, the same run.
    engine.config = dataclasses.replace(engine.config, profiles={**engine.config.profiles, "default": {"x": "1"}})
    second = started(engine, s)
    second.stop()
    assert second.stats["fired"] == 0 and second.stats["duplicates"] == 1
    assert runs(engine) == [(job, '{"status":"success"}', "event")]


def test_a_completion_read_again_after_a_gate_closed_finds_its_run_and_records_no_refusal(
    engine: Engine, broker: Any, prefix: str, tmp_path: Path
) -> None:
    """Found by a review: a node's restart read the state key again, and with the definition's
    approval revoked since, the completion whose run exists was recorded refused (one entry a
    node, at every restart). Its run is found before any gate, as a repeated event's is."""
    from jobgate.service import approvals

    job = event_job(engine)
    s = settings(tmp_path, prefix, [{"result_name": "R1", "job_definition_id": job}])
    broker.set(s.state_key("R1"), completion("R1", timestamp=1764828000), ex=600)
    first = started(engine, s)
    first.stop()
    assert first.stats.snapshot().get("fired") == 1
    approvals.revoke(engine, "default", job, actor="admin", reason="under review")
    again = started(engine, s)
    again.stop()
    assert again.stats["duplicates"] == 1 and again.stats["refused"] == 0, again.stats.snapshot()
    assert count(engine, "audit_log", "action = 'run.refused'") == 0
    assert count(engine, "job_runs") == 1


def test_a_killed_connection_reconnects_and_the_next_message_fires(
    engine: Engine, broker: Any, prefix: str, tmp_path: Path
) -> None:
    job = event_job(engine)
    source = started(engine, settings(tmp_path, prefix, [{"result_name": "R1", "job_definition_id": job}]))
    try:
        ids = [c["id"] for c in broker.client_list(_type="pubsub") if c.get("name") == source.client_name]
        assert len(ids) == 1  # one connection covers every pipeline
        broker.client_kill_filter(_id=ids[0])  # CLIENT KILL of ours alone: the server is shared
        assert source.stats.wait_count("disconnects", 1, WAIT), source.stats.snapshot()
        assert source.stats.wait_count("connects", 2, WAIT), source.stats.snapshot()
        broker.publish(f"{prefix}R1", completion("R1", timestamp="t2"))
        assert source.stats.wait_count("fired", 1, WAIT), source.stats.snapshot()
    finally:
        source.stop()
    assert count(engine, "job_runs") == 1


def healthz(state: ServerState) -> Any:
    client = TestClient(create_app(state), base_url="http://127.0.0.1:8080")  # --no-auth: loopback only
    return client.get("/healthz").json()


def test_healthz_says_connected_disconnected_or_skip(engine: Engine, prefix: str, tmp_path: Path) -> None:
    job = event_job(engine)
    entries = [{"result_name": "R1", "job_definition_id": job}]
    assert healthz(ServerState(engine, auth=False)) == {"status": "ok", "pubsub": "skip"}
    up = started(engine, settings(tmp_path, prefix, entries))
    down = RedisPubSub(engine, settings(tmp_path, prefix, entries, url="redis://127.0.0.1:1/0"), reconnect_base=FAST)
    down.start()
    try:
        assert down.stats.wait_count("connect_failures", 2, WAIT), down.stats.snapshot()  # retried, backing off
        for source, said in ((up, "connected"), (down, "disconnected")):
            assert healthz(ServerState(engine, auth=False, pubsub=source.health)) == {"status": "ok", "pubsub": said}
    finally:
        up.stop()
        down.stop()


def test_a_broker_that_refuses_our_commands_backs_off_like_one_that_is_down(
    engine: Engine, prefix: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    job = event_job(engine)
    entries = [{"result_name": "R1", "job_definition_id": job}]
    refusing = RedisPubSub(
        engine, settings(tmp_path, prefix, entries, url="redis://127.0.0.1:6379/99"), reconnect_base=FAST
    )  # no database 99 on the server: every SELECT is refused
    refusing.start()
    try:
        assert refusing.stats.wait_count("connect_failures", 3, WAIT), refusing.stats.snapshot()
        assert refusing.failing >= 3  # what /readyz ambers the source by, as a failing loop
    finally:
        refusing.stop()
    assert any(getattr(r, "action", None) == "pubsub_disconnected" for r in caplog.records)
    assert not any(r.exc_info for r in caplog.records)  # a line, not a traceback


def test_an_unapproved_definition_is_refused_by_the_gate_and_the_refusal_audited(
    engine: Engine, broker: Any, prefix: str, tmp_path: Path
) -> None:
    job = event_job(engine, approve=False)
    source = started(engine, settings(tmp_path, prefix, [{"result_name": "R1", "job_definition_id": job}]))
    try:
        broker.publish(f"{prefix}R1", completion("R1", timestamp="t1"))
        assert source.stats.wait_count("refused", 1, WAIT), source.stats.snapshot()
    finally:
        source.stop()
    assert count(engine, "job_runs") == 0
    assert count(engine, "audit_log", f"action = 'run.refused' AND target_id = '{job}' AND actor = 'pubsub'") == 1


def test_a_refused_param_is_named_in_the_log_and_the_audit_entry(
    engine: Engine, broker: Any, prefix: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Found by a review: a pipeline name that failed its pattern was refused saying only
    "value does not match the pattern", with no param named (the events path names it)."""
    job = event_job(engine, params=("pipeline_name",))
    source = started(engine, settings(tmp_path, prefix, [{"result_name": "R1", "job_definition_id": job}]))
    try:
        broker.publish(f"{prefix}R1", completion("R1", timestamp="t1", pipeline_name="not allowed!"))
        assert source.stats.wait_count("refused", 1, WAIT), source.stats.snapshot()
    finally:
        source.stop()
    assert any("pipeline_name" in r.getMessage() for r in caplog.records if r.levelname == "WARNING")
    with engine.store.read() as tx:
        sql = "SELECT payload FROM audit_log WHERE action = 'run.refused'"
        (payload,) = [json.loads(p) for (p,) in connection(tx).execute(text(sql))]
    assert "pipeline_name" in payload["field"] and count(engine, "job_runs") == 0


def test_a_mapping_to_a_missing_definition_is_refused_and_the_refusal_audited(
    engine: Engine, broker: Any, prefix: str, tmp_path: Path
) -> None:
    """Found by a review: only the gates' refusals were audited; a definition not found was
    logged alone, where the guide says every refusal is audited."""
    source = started(engine, settings(tmp_path, prefix, [{"result_name": "R9", "job_definition_id": "no-such-job"}]))
    try:
        broker.publish(f"{prefix}R9", completion("R9", timestamp="t9"))
        assert source.stats.wait_count("refused", 1, WAIT), source.stats.snapshot()
    finally:
        source.stop()
    assert count(engine, "job_runs") == 0
    refused = "action = 'run.refused' AND target_id = 'no-such-job' AND actor = 'pubsub' AND reason = 'not_found'"
    assert count(engine, "audit_log", refused) == 1


def test_serve_runs_the_subscriber_beside_its_loops_and_a_bad_mapping_fails_the_start(
    engine: Engine, prefix: str
) -> None:
    from jobgate.core.errors import ConfigurationError
    from jobgate.server import ApiServer, ServeOptions

    options = ServeOptions(worker=False, scheduler=False, redis_url=REDIS_URL)
    mapping = engine.config.base_dir / "pubsub.yaml"  # --redis-url: the mapping beside the configuration
    mapping.unlink(missing_ok=True)
    with pytest.raises(ConfigurationError) as err:
        ApiServer(engine, options)
    assert err.value.source == str(mapping) and "no such file" in err.value.message
    mapping.write_text(yaml.safe_dump({"subscriptions": [{"result_name": "R1", "job_definition_id": "any"}]}))
    server = ApiServer(engine, options)
    assert server.pubsub is not None and server.state.pubsub() == "disconnected"
    server.start_loops()
    try:
        assert server.pubsub.stats.wait_count("connects", 1, WAIT), server.pubsub.stats.snapshot()
        assert server.state.pubsub() == "connected" and server.loops()["pubsub"] is True
    finally:
        server.stop_loops()
    assert server.pubsub.health() == "disconnected" and not server.pubsub.running
