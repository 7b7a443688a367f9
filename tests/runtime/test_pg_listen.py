"""PostgreSQL ``LISTEN`` triggers: the second completion source, through the same protocol and
the same mapping, against the real PostgreSQL. Nothing sleeps: waits are on ``SourceStats``."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.helpers import count, define

from jobgate.config.pubsub import PubSubSettings
from jobgate.core.errors import ConfigurationError
from jobgate.runtime.pg_listen import PgListen
from jobgate.service.engine import Engine
from jobgate.store.listen import listen_conninfo

WAIT = 10.0


def settings(tmp_path: Path, entries: list[dict[str, Any]]) -> PubSubSettings:
    path = tmp_path / "pubsub.yaml"
    path.write_text(yaml.safe_dump({"subscriptions": entries}))
    channel = f"jgtest_{uuid.uuid4().hex[:12]}"
    return PubSubSettings(map_path=path, postgres_channel=channel, reconnect_max=timedelta(seconds=1))


@pytest.fixture
def pg(engine: Engine) -> Iterator[Any]:
    """A second session on the store's database, to NOTIFY and to end the listener's session."""
    conninfo = listen_conninfo(engine.store.url)
    if conninfo is None:
        pytest.skip("LISTEN is PostgreSQL's")
    import psycopg

    with psycopg.connect(conninfo, autocommit=True) as conn:
        yield conn


def notify(pg: Any, channel: str, **message: Any) -> None:
    pg.execute("SELECT pg_notify(%s, %s)", (channel, json.dumps(message)))


def test_a_notification_fires_one_run_and_a_repeat_is_the_same_run(engine: Engine, pg: Any, tmp_path: Path) -> None:
    job = define(engine, trigger_type="event", params=[{"name": "status", "pattern": "[a-z_]{1,30}"}])
    s = settings(tmp_path, [{"result_name": "R1", "job_definition_id": job}])
    source = PgListen(engine, s, poll=timedelta(milliseconds=200), reconnect_base=timedelta(milliseconds=50))
    source.start()
    try:
        assert source.stats.wait_count("connects", 1, WAIT), source.stats.snapshot()
        assert source.health() == "connected"
        notify(pg, s.postgres_channel, result_name="R2", status="success")  # not mapped
        notify(pg, s.postgres_channel, result_name="R1", status="success", timestamp="t1", secret="x")
        notify(pg, s.postgres_channel, result_name="R1", status="success", timestamp="t1")
        done = source.stats.wait(lambda st: st["fired"] == 1 and st["duplicates"] == 1, WAIT)
        assert done and source.stats["ignored.unmapped"] == 1, source.stats.snapshot()
        # The listening session ends (a restart, a failover): it reconnects, and listens again.
        pg.execute("SELECT pg_terminate_backend(%s)", (source.backend_pid,))
        assert source.stats.wait_count("connects", 2, WAIT), source.stats.snapshot()
        notify(pg, s.postgres_channel, result_name="R1", status="success", timestamp="t2")
        assert source.stats.wait_count("fired", 2, WAIT), source.stats.snapshot()
    finally:
        source.stop()
    assert source.health() == "disconnected"
    assert count(engine, "job_runs") == 2


def test_listening_needs_postgresql(engine: Engine, tmp_path: Path) -> None:
    if listen_conninfo(engine.store.url) is not None:
        pytest.skip("the SQLite case")
    with pytest.raises(ConfigurationError) as err:
        PgListen(engine, settings(tmp_path, []))
    assert err.value.field == "pubsub.postgres_channel" and "PostgreSQL" in err.value.message


def test_both_sources_run_as_one_and_are_connected_only_together(engine: Engine, pg: Any, tmp_path: Path) -> None:
    import dataclasses

    from jobgate.runtime.event_sources import Sources
    from jobgate.runtime.pubsub import pubsub_source

    s = dataclasses.replace(settings(tmp_path, []), channel_pattern=f"jgtest:{uuid.uuid4().hex[:12]}:*")
    engine.config = dataclasses.replace(engine.config, pubsub=s)
    assert isinstance(pubsub_source(engine), PgListen)  # no Redis URL: LISTEN alone
    both = pubsub_source(engine, "redis://127.0.0.1:6379/0")
    assert isinstance(both, Sources) and both.health() == "disconnected"
    both.start()
    try:
        for source in both.sources:
            assert source.stats.wait_count("connects", 1, WAIT), source.stats.snapshot()  # type: ignore[attr-defined]
        assert both.health() == "connected" and both.running
    finally:
        both.stop()
    assert both.health() == "disconnected" and not both.running
