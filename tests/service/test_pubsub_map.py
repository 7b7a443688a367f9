"""``pubsub.yaml``, the ``pubsub`` configuration section, and the pure rule of what a message
may fire (seed 004): refusals name the file and the field; the message never picks."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import jobgate.config.pubsub as pubsub_config
from jobgate.config import build_config
from jobgate.core.errors import ConfigurationError
from jobgate.runtime.event_sources import reconnect_delay
from jobgate.service.pubsub_map import Subscription, job_params, judge, load_map, parse_map, read_completion

ENTRY = {"result_name": "MASK_V001", "job_definition_id": "reconcile"}


def mapping(*entries: dict[str, Any]) -> Any:
    return parse_map({"subscriptions": list(entries)}, "pubsub.yaml")


@pytest.mark.parametrize(
    ("entry", "field", "says"),
    [
        ({"job_definition_id": "x"}, "subscriptions[0].result_name", "is required"),
        ({"result_name": "R"}, "subscriptions[0].job_definition_id", "once"),
        ({**ENTRY, "scenario": "y"}, "subscriptions[0].job_definition_id", "once"),
        ({**ENTRY, "on_status": ["success", "done"]}, "subscriptions[0].on_status[1]", "one of"),
        ({**ENTRY, "on_status": []}, "subscriptions[0].on_status", "at least one"),
        ({**ENTRY, "params": {"status": "x"}}, "subscriptions[0].params.status", "shadow"),
        ({**ENTRY, "params": {"note": ["a"]}}, "subscriptions[0].params.note", "string or a number"),
        ({**ENTRY, "when": "always"}, "subscriptions[0].when", "unknown field"),
        ({**ENTRY, "result_name": "a b"}, "subscriptions[0].result_name", "characters"),
    ],
)
def test_a_bad_entry_is_refused_naming_file_and_field(entry: dict[str, Any], field: str, says: str) -> None:
    with pytest.raises(ConfigurationError) as err:
        mapping(entry)
    assert (err.value.source, err.value.field) == ("pubsub.yaml", field)
    assert says in err.value.message


def test_the_same_mapping_twice_is_refused_and_the_file_is_read_by_name(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError) as err:
        mapping(ENTRY, ENTRY)
    assert err.value.field == "subscriptions[1]"
    path = tmp_path / "pubsub.yaml"
    with pytest.raises(ConfigurationError) as err:
        load_map(path)
    assert err.value.source == str(path) and "no such file" in err.value.message
    path.write_text("subscriptions:\n  - result_name: R\n    scenario: s\n    on_status: [failed]\n")
    (sub,) = load_map(path).by_result["R"]
    assert sub == Subscription("R", "s", frozenset({"failed"}), {})


def test_the_message_is_only_a_lookup_key() -> None:
    m = mapping(ENTRY, {"result_name": "MASK_V001", "job_definition_id": "audit", "on_status": ["failed", "success"]})
    ok = judge(m, json.dumps({"result_name": "MASK_V001", "status": "success", "job_definition_id": "evil"}))
    assert [s.job_definition_id for s in ok.fire] == ["reconcile", "audit"] and ok.ignored is None
    assert [s.job_definition_id for s in judge(m, _msg("MASK_V001", "failed")).fire] == ["audit"]
    assert judge(m, _msg("MASK_V001", "completed_with_errors")).ignored == "status"
    assert judge(m, _msg("reconcile", "success")).ignored == "unmapped"  # a definition's name is no key
    assert judge(m, b"\xff").ignored == "not_json"
    assert judge(m, "[1]").ignored == "not_json"
    assert judge(m, "[" * 200_000 + "]" * 200_000).ignored == "not_json"  # nested past the recursion limit
    assert judge(m, json.dumps({"result_name": "MASK_V001", "status": 1})).ignored == "bad_message"
    assert judge(m, json.dumps({"result_name": "MASK_V001", "status": "a\nb"})).ignored == "bad_message"
    # The channel's suffix stands in only when the message has no result_name.
    assert judge(m, json.dumps({"status": "success"}), channel_result="MASK_V001").fire
    assert judge(m, _msg("MASK_V001", "success"), channel_result="MASK_V001").fire


@pytest.mark.parametrize("named", ["MASK_V001", "mask_v001", "", 7, None])
def test_a_message_naming_another_result_than_its_channel_fires_nothing(named: object) -> None:
    """Found by a review: a message published on another pipeline's channel fired MASK_V001's
    jobs by naming it in its body, past a broker ACL that kept the publisher to its own channel."""
    m = mapping(ENTRY)
    body = json.dumps({"result_name": named, "status": "success", "timestamp": "2026-12-07T01:05:00Z"})
    verdict = judge(m, body, channel_result="OTHER")
    # a null result_name is none: the channel's own stands in (unmapped here)
    assert not verdict.fire and verdict.ignored == ("unmapped" if named is None else "other_channel")


def test_only_declared_whitelisted_fields_reach_the_job() -> None:
    sub = Subscription("R", "job", params={"note": "n"})
    done = read_completion({"pipeline_name": "p", "result_name": "R", "status": "success", "secret": "s"})
    assert done is not None
    assert job_params(sub, done, {"status", "secret", "note"}) == {"note": "n", "status": "success"}
    assert job_params(sub, done, set()) == {"note": "n"}


def test_a_completion_is_one_delivery_however_it_is_heard() -> None:
    message = {"result_name": "R", "status": "success", "rows": 10}
    a = read_completion(message)
    b = read_completion(json.loads(json.dumps(message, indent=2)))  # the state key's copy
    assert a is not None and b is not None and a.delivery_id == b.delivery_id
    later = read_completion({**message, "rows": 11})
    assert later is not None and later.delivery_id != a.delivery_id
    stamped = read_completion({**message, "timestamp": "2026-12-04T06:00:00Z"})
    assert stamped is not None and stamped.delivery_id == "R@2026-12-04T06:00:00Z"
    assert read_completion({**message, "x": float("nan")}) is None  # no identity, no run


@pytest.mark.parametrize(
    "stamp",
    [
        "1796511600",
        "1796511600000",
        "2026-12-05T23:00:00+00:00",
        "2026-12-06T00:00:00+01:00",
        "2026-12-05T23:00:00.000Z",
        1796511600,
        1796511600000,
        1796511600.0,
        "2026-12-05T23:00:00Z",
    ],
)
def test_one_instant_is_one_delivery_however_it_is_written(stamp: Any) -> None:
    """Found by a review: the same completion published with its timestamp written another way
    (an offset, epoch seconds or milliseconds) made a run for each way. The identity is the
    instant; the timestamp as written is kept for the runs an earlier release named by it."""
    message = {"result_name": "R", "status": "success", "timestamp": stamp}
    read = read_completion(message)
    assert read is not None and read.delivery_id == "R@2026-12-05T23:00:00Z"
    assert read.written_delivery_id == (None if stamp == "2026-12-05T23:00:00Z" else f"R@{stamp}")
    unread = read_completion({**message, "timestamp": "yesterday"})  # not an instant: named as written
    assert unread is not None and unread.delivery_id == "R@yesterday" and unread.written_delivery_id is None


def test_reconnection_backs_off_exponentially_up_to_the_cap() -> None:
    cap = timedelta(seconds=30)
    delays = [reconnect_delay(n, cap).total_seconds() for n in range(0, 9)]
    assert delays == [0, 0.5, 1, 2, 4, 8, 16, 30, 30]
    assert reconnect_delay(10_000, cap) == cap


def test_the_pubsub_section_is_checked_when_the_configuration_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = build_config({"pubsub": {"url": "redis://127.0.0.1:6379/0"}}, base_dir=tmp_path, path=None)
    assert config.pubsub.map_path == tmp_path / "pubsub.yaml"
    assert config.pubsub.state_key("MASK_V001") == "tdtp:pipeline:MASK_V001:state"
    assert build_config({}, base_dir=tmp_path, path=None).pubsub.url is None
    listen = build_config({"pubsub": {"postgres_channel": "pipeline_done"}}, base_dir=tmp_path, path=None).pubsub
    assert (listen.url, listen.postgres_channel) == (None, "pipeline_done")
    for section, field in [
        ({"url": "http://x"}, "pubsub.url"),
        ({"url": "redis://x", "channel_pattern": "a:*:b*"}, "pubsub.channel_pattern"),
        ({"url": "redis://x", "channel_pattern": "a:b"}, "pubsub.channel_pattern"),
        ({"url": "redis://x", "channel": "a:*"}, "pubsub.channel"),
        ({"url": "redis://x", "reconnect_max_seconds": 0}, "pubsub.reconnect_max_seconds"),
        ({"postgres_channel": "Bad-Name"}, "pubsub.postgres_channel"),
    ]:
        with pytest.raises(ConfigurationError) as err:
            build_config({"pubsub": section}, base_dir=tmp_path, path=None)
        assert err.value.field == field, section
    monkeypatch.setattr(pubsub_config, "redis_installed", lambda: False)
    with pytest.raises(ConfigurationError) as err:
        build_config({"pubsub": {"url": "redis://x"}}, base_dir=tmp_path, path=None)
    assert err.value.field == "pubsub.url" and "jobgate[pubsub]" in err.value.message
    with pytest.raises(ConfigurationError) as err:
        pubsub_config.with_url(config.pubsub, "redis://x", tmp_path)
    assert err.value.field == "--redis-url" and "jobgate[pubsub]" in err.value.message


def test_a_password_never_reaches_a_log_line() -> None:
    assert pubsub_config.safe_url("redis://u:s3cret@host:6380/1") == "redis://u:***@host:6380/1"
    assert pubsub_config.safe_url("redis://host") == "redis://host"


def _msg(result: str, status: str) -> str:
    return json.dumps({"result_name": result, "status": status})


NOT_BEFORE = datetime(2026, 6, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("stamp", "ignored"),
    [
        ("2026-06-02T00:00:00Z", None),
        ("2026-06-02T02:00:00+02:00", None),  # the same instant as above
        ("2026-05-31T23:59:59Z", "expired"),
        (NOT_BEFORE.timestamp() + 1, None),  # epoch seconds
        ((NOT_BEFORE.timestamp() - 1) * 1000, "expired"),  # epoch milliseconds
        ("2026-06-02T00:00:00", "undated"),  # no offset: not an instant
        ("yesterday", "undated"),
        (None, "undated"),  # no timestamp: identity by digest, age unknown
    ],
)
def test_a_polling_key_older_than_retention_fires_nothing(stamp: Any, ignored: str | None) -> None:
    """Once retention may have retired the run a polling key's completion made, reading the key
    again must not make a second one: older (or undated) completions are ignored, named."""
    message: dict[str, Any] = {"result_name": "MASK_V001", "status": "success"}
    if stamp is not None:
        message["timestamp"] = stamp
    verdict = judge(mapping(ENTRY), json.dumps(message), not_before=NOT_BEFORE)
    assert verdict.ignored == ignored
    assert (verdict.fire == ()) == (ignored is not None)
    # without a horizon (no retention), every one of them fires
    assert judge(mapping(ENTRY), json.dumps(message)).ignored is None


def test_the_horizon_is_the_soonest_any_run_may_be_retired() -> None:
    from jobgate.config import RetentionSettings
    from jobgate.runtime.completions import shortest_retention

    assert shortest_retention(RetentionSettings()) is None
    settings = RetentionSettings(
        finished_runs=timedelta(days=90),
        job_classes={"REPLAY_JOB": timedelta(days=30)},
        resolved_dead_letters=timedelta(days=60),
    )
    assert shortest_retention(settings) == timedelta(days=30)
