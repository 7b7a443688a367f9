"""The pure rules of alerting and dependency health, and the configuration they read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from helpers import make_config
from jobgate.config.health import DEFAULT_ALERT_TYPES, known_event_types
from jobgate.core.errors import ConfigurationError
from jobgate.health import rules
from jobgate.health.rules import Change, ProbeKind, State

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
S = timedelta(seconds=1)


def test_observations_move_the_state_and_name_the_change() -> None:
    fresh = State("dal")
    up, change = rules.observe(fresh, None, T0)
    assert (up.up, up.since, change) == (True, T0, None)  # found up at start: not a recovery
    down, change = rules.observe(fresh, "answered HTTP 503", T0)
    assert (down.up, down.since, down.problem, change) == (False, T0, "answered HTTP 503", Change.WENT_DOWN)
    still, change = rules.observe(down, "unreachable: ConnectError", T0 + 5 * S)
    assert (still.since, still.checked_at, still.problem, change) == (T0, T0 + 5 * S, "unreachable: ConnectError", None)
    back, change = rules.observe(still, None, T0 + 9 * S)
    assert (back.up, back.since, back.problem, change) == (True, T0 + 9 * S, None, Change.RECOVERED)
    again, change = rules.observe(back, "x", T0 + 10 * S)
    assert change is Change.WENT_DOWN and again.since == T0 + 10 * S


def test_blocked_holds_versions_with_any_dependency_not_known_up() -> None:
    needs = {"d1": ("dal",), "d2": ("dal", "env"), "d3": ("env",), "d4": ("gone",)}
    states = {"dal": State("dal", up=True), "env": State("env")}  # env: not checked yet
    assert rules.blocked(needs, states) == {"d2", "d3", "d4"}  # d4: no longer configured
    states["env"] = State("env", up=True)
    assert rules.blocked(needs, states) == {"d4"}
    states["dal"] = State("dal", up=False)
    assert rules.blocked(needs, states) == {"d1", "d2", "d4"}
    assert rules.blocked({}, states) == frozenset()


@pytest.mark.parametrize(
    ("state", "now", "expected"),
    [
        (State("d", up=False, since=T0), T0 + 59 * S, None),  # the outage is younger than the bound
        (State("d", up=False, since=T0), T0 + 60 * S, T0),  # runs due at or before T0 waited 60 s
        (State("d", up=False, since=T0), T0 + 90 * S, T0 + 30 * S),
        (State("d", up=True, since=T0), T0 + 90 * S, None),
        (State("d"), T0 + 90 * S, None),  # never checked: nothing has waited for an outage
    ],
)
def test_the_wait_bound_counts_from_the_later_of_due_and_outage_start(
    state: State, now: datetime, expected: datetime | None
) -> None:
    assert rules.wait_cutoff(state, 60 * S, now) == expected


def test_checks_are_due_after_their_ttl_and_every_second_while_down() -> None:
    assert rules.next_check(State("d"), 30 * S, T0) == T0
    assert rules.next_check(State("d", up=True, checked_at=T0), 30 * S, T0) == T0 + 30 * S
    assert rules.next_check(State("d", up=False, checked_at=T0), 30 * S, T0) == T0 + S
    assert rules.next_check(State("d", up=False, checked_at=T0), S / 5, T0) == T0 + S / 5


@pytest.mark.parametrize(("attempt", "seconds"), [(1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (5, 4.0), (50, 4.0)])
def test_webhook_retries_back_off_doubling_up_to_the_cap(attempt: int, seconds: float) -> None:
    assert rules.retry_delay(attempt, S / 2, 4 * S) == timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("status", "retry"), [(500, True), (503, True), (429, True), (408, True), (400, False), (404, False), (410, False)]
)
def test_only_passing_failures_are_retried(status: int, retry: bool) -> None:
    assert rules.retryable_status(status) is retry


def test_the_alert_body_is_the_envelope_with_its_event_id_as_alert_id() -> None:
    body = rules.alert_body({"event_id": 41, "recorded_at": "2026-03-01T12:00:00Z", "event_type": "x"})
    assert body == {"alert_id": 41, "event_id": 41, "recorded_at": "2026-03-01T12:00:00Z", "event_type": "x"}


def test_default_alert_types_are_all_known_event_types() -> None:
    assert known_event_types() >= DEFAULT_ALERT_TYPES
    assert {"job_dead_lettered", "job_escalated", "safe_mode_activation", "sla_breach"} <= DEFAULT_ALERT_TYPES


# ---------------------------------------------------------------------- configuration
def test_derived_and_configured_checks(tmp_path: Path) -> None:
    config = make_config(
        tmp_path,
        targets={
            "fed.export": {"cmi": "c1", "http": {"url": "http://127.0.0.1:1/export", "timeout_seconds": 30}},
            "local.job": {"cmi": "c1", "handler": "m:f"},
        },
        trust_gates={"environment": {"url": "http://127.0.0.1:1/env", "ttl_seconds": 7}},
        dependencies={
            "dal": {"url": "http://127.0.0.1:1/health", "max_wait_seconds": 600},
            "anchor_sink": {"max_wait_seconds": 120},
        },
    )
    checks = rules.checks(config)
    assert sorted(checks) == ["anchor_sink", "dal", "environment_check", "target:fed.export"]
    assert checks["anchor_sink"].kind is ProbeKind.FILE and checks["anchor_sink"].max_wait == 120 * S
    assert checks["anchor_sink"].where == str(tmp_path / "data" / "anchors" / "anchors.jsonl")
    assert (checks["environment_check"].kind, checks["environment_check"].ttl) == (ProbeKind.HEALTH, 7 * S)
    target = checks["target:fed.export"]
    assert (target.kind, target.where, target.timeout) == (ProbeKind.REACHABLE, "http://127.0.0.1:1/export", 2 * S)
    assert (checks["dal"].kind, checks["dal"].max_wait, checks["dal"].ttl) == (ProbeKind.HEALTH, 600 * S, 10 * S)


def test_an_anchor_sink_url_is_checked_over_http(tmp_path: Path) -> None:
    config = make_config(tmp_path, evidence={"anchor_sink_url": "https://dal.example/anchors"})
    check = rules.checks(config)["anchor_sink"]
    assert (check.kind, check.where) == (ProbeKind.REACHABLE, "https://dal.example/anchors")


@pytest.mark.parametrize(
    ("dependencies", "field"),
    [
        ({"dal": {}}, "dependencies.dal.url"),  # not a derived check: it needs a URL
        ({"environment_check": {"ttl_seconds": 5}}, "dependencies.environment_check.url"),  # no environment URL
        ({"dal": {"url": "file:///x"}}, "dependencies.dal.url"),
        ({"dal": {"url": "http://x/", "max_wait_seconds": -1}}, "dependencies.dal.max_wait_seconds"),
        ({"dal": {"url": "http://x/", "timeout": 1}}, "dependencies.dal.timeout"),
        ({"bad name": {"url": "http://x/"}}, "dependencies.bad name"),
    ],
)
def test_dependency_configuration_errors_name_the_key(tmp_path: Path, dependencies: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigurationError) as err:
        make_config(tmp_path, dependencies=dependencies)
    assert err.value.field == field


def test_a_scenario_header_may_declare_dependencies(tmp_path: Path) -> None:
    from jobgate.core.errors import ValidationError
    from jobgate.definitions import parse_definition_text

    config = make_config(tmp_path, dependencies={"dal": {"url": "http://127.0.0.1:1/health"}})
    text = "orchestrator:\n  name: nightly\n  runner: py\n  dependencies: [dal]\nprint('hello')\n"
    loaded = parse_definition_text(text, "s.yaml", config)
    assert loaded.definition.content["dependencies"] == ["dal"]
    with pytest.raises(ValidationError) as err:
        parse_definition_text(text.replace("[dal]", "[dall]"), "s.yaml", config)
    assert err.value.field == "orchestrator.dependencies[0]"
