"""Process logging: plain text for a person at a terminal, or one JSON object per line.

A JSON line always has the same keys, so a log pipeline can index them without guessing:

- ``ts``: the record's instant, RFC 3339 in UTC with microseconds (``2026-11-30T12:00:00.123456Z``);
- ``level``: ``debug``, ``info``, ``warning``, ``error`` or ``critical``;
- ``logger``: the logger's name (``jobgate.worker``);
- ``action``: a stable machine key for what happened (``run_retry_scheduled``, ``lease_lost``,
  ``shutdown``...), given by the call as ``extra={"action": ...}``; a call without one gets
  its logger's name, so the key is never missing and a search for a logger still works;
- ``message``: the human sentence;

and, when the call knows them, ``job_run_id``, ``workflow_run_id``, ``trace_id``,
``span_id`` and ``tenant_id`` (see ``run_fields``), then any other ``extra`` the call passed
(``attempt``, ``schedule_id``...) under its own name; a key whose value is None is left out.
A record logged with an exception has ``exc``: ``{"type", "message", "traceback"}``. The
traceback is kept, in that one field, at every level: such records are the unexpected
failures (``log.exception``), and the traceback is their evidence; it stays on the record's
single line, so a line is still a record.

Configured once per process by ``configure`` from the CLI's ``--log-format``/``--log-level``
or the configuration's ``logging`` section; the format costs nothing for records below the
level, which is how the worker keeps a line per run at ``debug`` off its hot path.
"""

from __future__ import annotations

import logging
import sys
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import IO, Any, Literal

import orjson

from jobgate.core.errors import ConfigurationError
from jobgate.core.params import escaped
from jobgate.core.trace import run_trace_id
from jobgate.documents import Reader

LogFormat = Literal["text", "json"]
FORMATS: tuple[LogFormat, ...] = ("text", "json")
LEVELS = ("debug", "info", "warning", "error")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
CONTEXT_KEYS = ("job_run_id", "workflow_run_id", "trace_id", "span_id", "tenant_id")
STABLE_KEYS = ("ts", "level", "logger", "action", "message")
# Attributes every LogRecord has: whatever else is on a record came from ``extra``
# (``color_message`` is uvicorn's copy of the message with terminal colours).
_RECORD_ATTRIBUTES = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
    "taskName",
    "color_message",
}
_RESERVED = frozenset(STABLE_KEYS) | frozenset(CONTEXT_KEYS) | {"exc"}


@dataclass(frozen=True)
class LoggingSettings:
    """The ``logging`` section of ``jobgate.yaml``: ``{format: text|json, level: info}``."""

    format: LogFormat = "text"
    level: str = "info"


def parse_logging_settings(r: Reader, value: Any) -> LoggingSettings:
    """The ``logging`` section, checked; a bad value is refused naming its key."""
    if value is None:
        return LoggingSettings()
    doc = r.mapping(value, "logging")
    r.only_keys(doc, "logging", ("format", "level"))
    fmt = doc.get("format", "text")
    if fmt not in FORMATS:
        r.fail("logging.format", f"must be one of: {', '.join(FORMATS)}")
    level = doc.get("level", "info")
    if not isinstance(level, str) or level.lower() not in LEVELS:
        r.fail("logging.level", f"must be one of: {', '.join(LEVELS)}")
    return LoggingSettings(fmt, level.lower())


def _timestamp(created: float) -> str:
    return datetime.fromtimestamp(created, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _json_value(value: Any) -> Any:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, list | tuple):
        return [_json_value(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _json_value(v) for k, v in value.items()}
    return str(value)


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line, with the stable keys first (see the module doc)."""

    def format(self, record: logging.LogRecord) -> str:
        fields = record.__dict__
        doc: dict[str, Any] = {
            "ts": _timestamp(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "action": fields.get("action") or record.name,
            "message": record.getMessage(),
        }
        for key in CONTEXT_KEYS:
            value = fields.get(key)
            if value is not None:
                doc[key] = value
        for key, value in fields.items():
            if value is not None and key not in _RECORD_ATTRIBUTES and key not in doc and key not in _RESERVED:
                doc[key] = _json_value(value)
        if record.exc_info and record.exc_info[0] is not None:
            kind, exc, tb = record.exc_info
            doc["exc"] = {
                "type": kind.__name__,
                "message": str(exc),
                "traceback": "".join(traceback.format_exception(kind, exc, tb)),
            }
        elif record.exc_text:
            doc["exc"] = {"type": None, "message": None, "traceback": record.exc_text}
        return orjson.dumps(doc, default=str).decode()


class TextFormatter(logging.Formatter):
    """``TEXT_FORMAT``, one line a message: a line break or a terminal escape in a message
    (a safe-mode reason, a run's error text) is written as its escape, so no text a caller
    stored can add a forged line to the log or rewrite the terminal reading it. Tracebacks,
    which follow the message, keep their lines."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = escaped(record.message)
        return super().formatMessage(record)


def escape_last_resort() -> None:
    """A one-shot command configures no handler: its warnings go to Python's last-resort
    handler, which wrote a reason's line break as a forged second line. It escapes them too."""
    if logging.lastResort is not None:
        logging.lastResort.setFormatter(TextFormatter("%(message)s"))


_HANDLER_NAME = "jobgate"


def configure(fmt: LogFormat = "text", level: str = "info", stream: IO[str] | None = None) -> logging.Handler:
    """Send every logger's records to ``stream`` (stderr) in ``fmt``, from ``level`` up.

    Replaces the handler a previous call installed (a process configures once, but tests and
    ``serve`` after ``init`` may call again), and leaves other handlers alone.
    """
    if fmt not in FORMATS:
        raise ConfigurationError(f"must be one of: {', '.join(FORMATS)}", field="--log-format")
    if level.lower() not in LEVELS:
        raise ConfigurationError(f"must be one of: {', '.join(LEVELS)}", field="--log-level")
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == _HANDLER_NAME]:
        root.removeHandler(old)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter(TEXT_FORMAT))
    root.addHandler(handler)
    root.setLevel(level.upper())
    # httpx logs every request at info (dependency checks, webhooks, sinks: one line per call);
    # jobgate logs the outcomes that matter itself, so the library speaks from warning up
    # unless debug was asked for.
    logging.getLogger("httpx").setLevel(logging.DEBUG if level.lower() == "debug" else logging.WARNING)
    return handler


def run_fields(
    job_run_id: str,
    *,
    tenant_id: str | None = None,
    workflow_run_id: str | None = None,
    traceparent: str | None = None,
    trace_id: str | None = None,
    **more: Any,
) -> dict[str, Any]:
    """The ``extra`` of a log line about one run: its ids and its trace id (derived when not
    given: one hash, so call this only for a line that will be emitted)."""
    return {
        "job_run_id": job_run_id,
        "tenant_id": tenant_id,
        "workflow_run_id": workflow_run_id,
        "trace_id": trace_id or run_trace_id(job_run_id, workflow_run_id, traceparent),
        **more,
    }
