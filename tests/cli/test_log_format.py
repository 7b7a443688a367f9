"""The JSON log format: stable keys, run context, exceptions, and the configuration that picks it."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from jobgate.config import build_config
from jobgate.core.errors import ConfigurationError
from jobgate.core.trace import run_trace_id
from jobgate.logs import STABLE_KEYS, configure, run_fields


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    """The root logger sent to a buffer as JSON from debug up; restored afterwards."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    stream = io.StringIO()
    configure("json", "debug", stream)
    try:
        yield stream
    finally:
        for h in list(root.handlers):
            root.removeHandler(h)
        for h in handlers:
            root.addHandler(h)
        root.setLevel(level)


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_every_record_has_the_stable_keys_and_a_default_action(captured: io.StringIO) -> None:
    before = datetime.now(UTC)
    logging.getLogger("jobgate.example").info("plain %s", "words")
    (doc,) = lines(captured)
    assert list(doc)[: len(STABLE_KEYS)] == list(STABLE_KEYS)
    assert doc["level"] == "info" and doc["logger"] == "jobgate.example" and doc["message"] == "plain words"
    assert doc["action"] == "jobgate.example"  # no action given: the logger's name
    ts = str(doc["ts"])
    assert ts.endswith("Z")
    stamp = datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    assert abs((stamp - before).total_seconds()) < 5


def test_run_context_and_extras_are_keys_of_their_own(captured: io.StringIO) -> None:
    fields = run_fields("TGJOBRUN-1", tenant_id="acme", attempt=2, action="run_retry_scheduled", error_code=None)
    logging.getLogger("jobgate.worker").warning("retrying", extra=fields)
    (doc,) = lines(captured)
    assert doc["action"] == "run_retry_scheduled" and doc["level"] == "warning"
    assert doc["job_run_id"] == "TGJOBRUN-1" and doc["tenant_id"] == "acme" and doc["attempt"] == 2
    assert doc["trace_id"] == run_trace_id("TGJOBRUN-1")
    assert "workflow_run_id" not in doc and "error_code" not in doc  # None values are left out


def test_a_workflow_steps_lines_carry_the_workflow_trace(captured: io.StringIO) -> None:
    logging.getLogger("jobgate.worker").info("x", extra=run_fields("TGJOBRUN-1", workflow_run_id="TGWFRUN-2"))
    (doc,) = lines(captured)
    assert doc["workflow_run_id"] == "TGWFRUN-2" and doc["trace_id"] == run_trace_id("TGJOBRUN-1", "TGWFRUN-2")


def test_an_exception_is_one_field_on_one_line(captured: io.StringIO) -> None:
    try:
        raise ValueError("bad\nvalue")
    except ValueError:
        logging.getLogger("jobgate.worker").exception("turn failed", extra={"action": "turn_failed"})
    assert len(captured.getvalue().splitlines()) == 1
    (doc,) = lines(captured)
    exc = doc["exc"]
    assert isinstance(exc, dict)
    assert exc["type"] == "ValueError" and exc["message"] == "bad\nvalue"
    assert "Traceback" in exc["traceback"] and "test_an_exception_is_one_field" in exc["traceback"]


def test_values_json_cannot_hold_are_written_as_text(captured: io.StringIO) -> None:
    logging.getLogger("x").info("odd", extra={"path": Path("/tmp/a"), "ids": ("a", 1), "when": datetime(2026, 1, 1)})
    (doc,) = lines(captured)
    assert doc["path"] == "/tmp/a" and doc["ids"] == ["a", 1] and doc["when"] == "2026-01-01 00:00:00"


def test_the_level_filters_and_configuring_again_replaces_the_handler(captured: io.StringIO) -> None:
    other = io.StringIO()
    configure("text", "warning", other)
    log = logging.getLogger("jobgate.worker")
    log.info("hidden")
    log.warning("shown")
    assert captured.getvalue() == ""  # the first handler was replaced, not added to
    assert other.getvalue().rstrip().endswith("WARNING jobgate.worker shown")
    with pytest.raises(ConfigurationError, match="--log-format"):
        configure("xml", "info")  # type: ignore[arg-type]


def test_the_logging_section_is_checked_naming_the_key(tmp_path: Path) -> None:
    def load(doc: object) -> object:
        return build_config({"logging": doc}, base_dir=tmp_path, path=None).logging

    assert load({"format": "json", "level": "WARNING"}) == load({"format": "json", "level": "warning"})
    for bad, key in [
        ({"format": "xml"}, "logging.format"),
        ({"level": "loud"}, "logging.level"),
        ({"level": 3}, "logging.level"),
        ({"formt": "json"}, "logging.formt"),
        ("json", "logging"),
    ]:
        with pytest.raises(ConfigurationError, match=key.replace(".", r"\.")):
            load(bad)
