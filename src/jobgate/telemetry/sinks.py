"""Where telemetry publications go: an append-only JSON-lines file, or an HTTP endpoint.

Both are idempotent by (tenant, period), because a publisher may write the sink and then die
before its database transaction commits; the retried attempt writes again, and the sink must
keep one record. The file keeps the first line it holds for the key and answers it back (the
publication row then records exactly what the sink holds); the HTTP sink sends an
``Idempotency-Key`` naming the tenant and period, for the receiver to drop a repeat.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit


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
        self.name = f"file:{path}"

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
    ``Idempotency-Key``; any non-2xx answer fails the attempt, to be retried by its policy."""

    def __init__(self, url: str, timeout: float) -> None:
        self.url = url
        self.timeout = timeout
        parts = urlsplit(url)
        shown = parts._replace(netloc=parts.hostname or "", query="", fragment="")
        if parts.port is not None:
            shown = shown._replace(netloc=f"{parts.hostname}:{parts.port}")
        self.name = f"http:{urlunsplit(shown)}"  # no credentials or query in what is stored

    def submit(self, record: dict[str, Any]) -> dict[str, Any]:
        import httpx

        response = httpx.post(
            self.url, json=record, timeout=self.timeout, headers={"Idempotency-Key": idempotency_key(record)}
        )
        response.raise_for_status()
        return record


def sink_for(config: Any) -> TelemetrySink:
    """The configured sink: ``telemetry.sink_url`` if set, else the append-only file."""
    if config.telemetry.sink_url:
        return HttpSink(config.telemetry.sink_url, config.telemetry.timeout.total_seconds())
    return FileSink(config.telemetry_sink_path)
