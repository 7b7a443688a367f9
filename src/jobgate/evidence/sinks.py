"""Where anchors go outside the database: an append-only local file (the default) or an HTTP
endpoint named in configuration. Verification reads the sink back and compares it with the
anchors the database holds, so a sink that cannot be read fails verification closed."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from jobgate.core.errors import JobgateError, UnavailableError
from jobgate.redact import shown_file, shown_url


class AnchorSink(Protocol):
    name: str

    def submit(self, record: dict[str, Any]) -> None: ...

    def records(self) -> list[dict[str, Any]]:
        """Every anchor record the sink holds: what verification checks the database against.
        Raises ``SinkUnreadable`` when it cannot be read (verification fails closed)."""
        ...


class SinkUnreadable(JobgateError):
    """The anchor sink could not be read: verification cannot vouch for the anchors."""

    code = "sink_unreadable"


class FileSink:
    """One JSON line per anchor, appended and fsynced. Idempotent: an anchor already in the file
    (a retried attempt) is not written twice."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.name = shown_file(path)  # stored with each anchor and shown to its tenant: no folders

    def submit(self, record: dict[str, Any]) -> None:
        key = (record["tenant_id"], record["anchor_seq"])
        if any((r["tenant_id"], r["anchor_seq"]) == key and r["chain"] == record["chain"] for r in self.records()):
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, line.encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)

    def records(self) -> list[dict[str, Any]]:
        """The file's records; a file that cannot be read, or a line that is not an anchor
        record, makes the sink unreadable (named by its line), not a crash."""
        if not self.path.exists():
            return []
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise SinkUnreadable(
                f"the anchor sink file could not be read ({type(exc).__name__})", field="evidence.anchor_sink"
            ) from None
        numbered = [(n, _json_or_none(line)) for n, line in enumerate(lines, start=1) if line.strip()]
        return anchor_records(numbered, "line {n} of the anchor sink file", "evidence.anchor_sink")


def _json_or_none(line: str) -> Any:
    try:
        return json.loads(line)
    except (ValueError, RecursionError):  # RecursionError: nested past any anchor record
        return None


def anchor_records(numbered: Sequence[tuple[int, Any]], where: str, field: str) -> list[dict[str, Any]]:
    """A sink's records, each checked (``record_problem``); the first that is not an anchor
    record makes the sink unreadable, named by ``where`` (its number in place of ``{n}``)."""
    for n, record in numbered:
        if (problem := record_problem(record)) is not None:
            raise SinkUnreadable(f"{where.format(n=n)} is not an anchor record ({problem})", field=field)
    return [record for _, record in numbered]


def record_problem(record: Any) -> str | None:
    """Why a sink's record is not an anchor record (None when it is one): verification matches
    copies to anchors by tenant and sequence number, so those must be there and of their kind.
    The other fields are compared with the stored anchor's, and a wrong one is a finding."""
    if not isinstance(record, dict):
        return "not a JSON object"
    if not isinstance(record.get("tenant_id"), str):
        return "no tenant_id text"
    seq = record.get("anchor_seq")
    if not isinstance(seq, int) or isinstance(seq, bool):
        return "no anchor_seq number"
    return None


class HttpSink:
    """POSTs each anchor as JSON to an endpoint named in configuration (never in a request)."""

    def __init__(self, url: str, timeout: float = 10.0) -> None:
        self.url = url
        self.timeout = timeout
        self.name = shown_url(url)  # the URL may carry a credential: scheme and host only

    def submit(self, record: dict[str, Any]) -> None:
        """POST one anchor record; a refusal or a transport failure is named without the URL
        (an anchor job's failure becomes its run's sealed error message)."""
        import httpx

        try:
            httpx.post(self.url, json=record, timeout=self.timeout).raise_for_status()
        except httpx.HTTPStatusError as exc:
            raise UnavailableError(
                f"the HTTP anchor sink {self.name} refused anchor {record.get('anchor_seq')}"
                f" (HTTP {exc.response.status_code})",
                field="evidence.anchor_sink_url",
            ) from None
        except httpx.HTTPError as exc:
            raise UnavailableError(
                f"the HTTP anchor sink {self.name} could not be reached ({type(exc).__name__})",
                field="evidence.anchor_sink_url",
            ) from None

    def records(self) -> list[dict[str, Any]]:
        """``GET`` on the same URL: the records it accepted, as a JSON list (or ``{"records":
        [...]}``). The URL is configuration (it may carry a credential): never in a message."""
        import httpx

        try:
            answer = httpx.get(self.url, timeout=self.timeout, headers={"Accept": "application/json"})
            answer.raise_for_status()
            data = answer.json()
        except (httpx.HTTPError, ValueError, RecursionError) as exc:
            raise SinkUnreadable(
                f"the HTTP anchor sink could not be read ({type(exc).__name__})", field="evidence.anchor_sink_url"
            ) from None
        found = data.get("records") if isinstance(data, dict) else data
        if not isinstance(found, list):
            raise SinkUnreadable(
                "the HTTP anchor sink did not answer a list of anchor records", field="evidence.anchor_sink_url"
            )
        numbered = list(enumerate(found, start=1))
        return anchor_records(numbered, "record {n} of the HTTP anchor sink", "evidence.anchor_sink_url")


def sink_for(config: Any) -> AnchorSink:
    """The configured sink: ``evidence.anchor_sink_url`` if set, else the append-only file."""
    if config.evidence.anchor_sink_url:
        return HttpSink(config.evidence.anchor_sink_url)
    return FileSink(config.anchor_sink_path)
