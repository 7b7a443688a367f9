"""Where telemetry publications go: an append-only JSON-lines file, or an HTTP endpoint.

A sink is written outside any database transaction (``telemetry.rollup``), so a publisher may
write it and then fail before its publication row commits, and two runs may write the same
period at once; the retried or concurrent writer then writes again. So both sinks are
idempotent by (tenant, period):

* the file keeps the first line it holds for the key, under an exclusive file lock, and
  answers it back (the publication row then records exactly what the file holds): never a
  second line for a period;
* the HTTP sink delivers at least once, each time with the same ``Idempotency-Key``
  (``aii-telemetry:<tenant>:<period>``), for the receiver to drop a repeat.

A sink is named by what may be shown of it (``telemetry.redact``), and a failure is reported
with that name and the HTTP status or error type only: the URL's credentials, query or path
never reach a run's error, a log line or the API.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import Any, Protocol

from jobgate.core.errors import NonRetryableError, RetryableError
from jobgate.health.rules import retryable_status
from jobgate.redact import shown_file, shown_url

SINK_REFUSED = "TELEMETRY_SINK_REFUSED"  # a 4xx answer: retrying will not change it
SINK_UNAVAILABLE = "TELEMETRY_SINK_UNAVAILABLE"  # no answer, a timeout, 408, 429 or 5xx


class TelemetrySink(Protocol):
    name: str

    def submit(self, record: dict[str, Any]) -> dict[str, Any]:
        """Deliver ``record`` (keyed by its ``tenant_id`` and ``period``) unless the sink holds
        that key already; return the record the sink holds for the key."""
        ...


def idempotency_key(record: dict[str, Any]) -> str:
    return f"aii-telemetry:{record['tenant_id']}:{record['period']}"


class FileSink:
    """One JSON line per (tenant, period), appended and fsynced under an exclusive file lock,
    so two processes never both append the same key."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.name = shown_file(path)

    def submit(self, record: dict[str, Any]) -> dict[str, Any]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            held = self._find(fd, (record["tenant_id"], record["period"]))
            if held is not None:
                return held
            os.write(fd, (json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n").encode("utf-8"))
            os.fsync(fd)
            return record
        finally:
            os.close(fd)  # releases the lock

    def records(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        lines = self.path.read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines if line.strip()]

    @staticmethod
    def _find(fd: int, key: tuple[str, str]) -> dict[str, Any] | None:
        with open(fd, encoding="utf-8", closefd=False) as f:
            f.seek(0)
            for line in f:
                if line.strip():
                    found: dict[str, Any] = json.loads(line)
                    if (found.get("tenant_id"), found.get("period")) == key:
                        return found
        return None


class HttpSink:
    """POSTs the record as JSON to the configured URL (never one from a request), with an
    ``Idempotency-Key``. A 2xx answer is delivery; a 4xx refusal (but 408 and 429) fails the
    attempt for good, anything else fails it to be retried by its policy. The error names the
    sink by scheme and host only."""

    def __init__(self, url: str, timeout: float) -> None:
        self.url = url
        self.timeout = timeout
        self.name = shown_url(url)  # no credentials, path or query in what is stored or shown

    def submit(self, record: dict[str, Any]) -> dict[str, Any]:
        import httpx

        try:
            response = httpx.post(
                self.url, json=record, timeout=self.timeout, headers={"Idempotency-Key": idempotency_key(record)}
            )
        except httpx.HTTPError as exc:  # its message may quote the URL: only its type is kept
            raise RetryableError(
                f"telemetry sink {self.name}: {type(exc).__name__}", error_code=SINK_UNAVAILABLE
            ) from None
        status = response.status_code
        if 200 <= status < 300:
            return record
        message = f"telemetry sink {self.name} answered HTTP {status}"
        if retryable_status(status):
            raise RetryableError(message, error_code=SINK_UNAVAILABLE)
        raise NonRetryableError(message, error_code=SINK_REFUSED)


def sink_for(config: Any) -> TelemetrySink:
    """The configured sink: ``telemetry.sink_url`` if set, else the append-only file."""
    if config.telemetry.sink_url:
        return HttpSink(config.telemetry.sink_url, config.telemetry.timeout.total_seconds())
    return FileSink(config.telemetry_sink_path)
