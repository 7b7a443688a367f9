"""What every example step shares: where the stand-in engines keep their files, how to reach
the stand-in endpoint, hashing, file writes that a retried attempt can repeat safely, and the
audit entry a step may add to jobgate's own chain.

Where things are comes only from the run's configuration snapshot (the profile values
``examples_home`` and ``standin_url`` that ``run_all.py`` writes into ``jobgate.yaml``), never
from a step's params: a param names a thing (a batch id, a package id), the configuration says
where such things live. Every id that becomes part of a path is checked against a pattern
first, so a param can never step out of its folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from jobgate import ExecutionContext, NonRetryableError, RetryableError
from jobgate.core.audit import AuditEvent
from jobgate.core.canonical import canonical_json, digest
from jobgate.store.sql import governance

__all__ = [
    "append_line",
    "audit_on_complete",
    "digest",
    "get_json",
    "home",
    "invalid",
    "iso",
    "param",
    "parse_instant",
    "post_json",
    "read_json",
    "read_lines",
    "safe_id",
    "setting",
    "sha256_file",
    "write_json",
]

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")
_APPEND_LOCK = threading.Lock()  # the worker runs steps in threads: one appender at a time per process
HTTP_TIMEOUT = 5.0  # proxies from the environment are ignored: the stand-in is on this host


def invalid(message: str, code: str = "INVALID_INPUT") -> NonRetryableError:
    """Bad input or a broken invariant: retrying the same step cannot help."""
    return NonRetryableError(message, error_code=code)


def setting(ctx: ExecutionContext, key: str) -> Any:
    """A value of the run's bound configuration profile (snapshot content ``{"values": ...}``)."""
    values = ctx.config.get("values", ctx.config)
    if key not in values:
        raise invalid(f"the configuration profile has no {key!r}: run the examples with run_all.py", "NO_SETTING")
    return values[key]


def home(ctx: ExecutionContext) -> Path:
    """The folder the stand-in engines keep their state in."""
    path = Path(str(setting(ctx, "examples_home")))
    if not path.is_absolute() or not path.is_dir():
        raise invalid(f"examples_home {path} is not an existing absolute folder", "NO_SETTING")
    return path


def param(ctx: ExecutionContext, name: str) -> str:
    value = ctx.params.get(name)
    if not value:
        raise invalid(f"parameter {name!r} is required")
    return value


def safe_id(value: str, what: str) -> str:
    """An id that is about to become a file name: letters, digits and ``_ . : -`` only."""
    if not _ID.fullmatch(value) or value in (".", ".."):
        raise invalid(f"{what} {value!r} is not a plain id")
    return value


def parse_instant(value: str, what: str) -> datetime:
    try:
        instant = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise invalid(f"{what} must be an ISO 8601 instant, got {value!r}") from None
    if instant.tzinfo is None:
        raise invalid(f"{what} must carry a time zone (e.g. a trailing Z)")
    return instant.astimezone(UTC)


def iso(instant: datetime) -> str:
    return instant.astimezone(UTC).isoformat().replace("+00:00", "Z")


# ------------------------------------------------------------------------------------ files
def read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise invalid(f"{what} not found ({path.name})", "NOT_FOUND") from None
    except ValueError as exc:
        raise invalid(f"{what} is not JSON: {exc}") from None


def write_json(path: Path, value: Any) -> Path:
    """Write through a temporary file and a rename: a stopped attempt never leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.partial")
    partial.write_text(json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(partial, path)
    return path


def read_lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def append_line(path: Path, value: Mapping[str, Any], *, key: str) -> bool:
    """Append one JSON line unless a line with the same ``key`` value is already there (a retried
    attempt), so a step's append happens once however often the step runs. True if appended."""
    with _APPEND_LOCK:
        if any(line.get(key) == value[key] for line in read_lines(path)):
            return False
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as fh:
            fh.write(canonical_json(dict(value)).decode("utf-8") + "\n")
        return True


# ------------------------------------------------------------------------------------- HTTP
def _url(ctx: ExecutionContext, path: str) -> str:
    return str(setting(ctx, "standin_url")).rstrip("/") + path


def _answer(response: httpx.Response, what: str) -> dict[str, Any]:
    """2xx: the JSON object; 5xx, 408, 429: try again later; any other 4xx: never."""
    status = response.status_code
    if 200 <= status < 300:
        body = response.json()
        if not isinstance(body, dict):
            raise invalid(f"{what}: the answer is not a JSON object", "BAD_ANSWER")
        return body
    text = response.text[:300].strip()
    if status >= 500 or status in (408, 429):
        raise RetryableError(f"{what}: HTTP {status} {text}", error_code=f"HTTP_{status}")
    raise NonRetryableError(f"{what}: HTTP {status} {text}", error_code=f"HTTP_{status}")


def post_json(ctx: ExecutionContext, path: str, body: Any, what: str) -> dict[str, Any]:
    """POST to the stand-in endpoint with the run's idempotency key, so a retried attempt (whose
    first answer was lost) is recognised by the receiver and not applied twice."""
    headers = {"Idempotency-Key": ctx.idempotency_key}
    if ctx.traceparent:
        headers["traceparent"] = ctx.traceparent
    try:
        response = httpx.post(
            _url(ctx, path), content=canonical_json(body), headers=headers, timeout=HTTP_TIMEOUT, trust_env=False
        )
    except httpx.HTTPError as exc:
        raise RetryableError(f"{what}: {type(exc).__name__}: {exc}", error_code="UNREACHABLE") from None
    return _answer(response, what)


def get_json(ctx: ExecutionContext, path: str, what: str) -> dict[str, Any]:
    try:
        response = httpx.get(_url(ctx, path), timeout=HTTP_TIMEOUT, trust_env=False)
    except httpx.HTTPError as exc:
        raise RetryableError(f"{what}: {type(exc).__name__}: {exc}", error_code="UNREACHABLE") from None
    return _answer(response, what)


# ------------------------------------------------------------------------------------ audit
def audit_on_complete(
    ctx: ExecutionContext,
    action: str,
    target_type: str,
    target_id: str,
    payload: Mapping[str, Any],
    *,
    reason: str | None = None,
) -> None:
    """Append an entry to jobgate's audit chain in the transaction that completes this run: the
    entry exists exactly when the step counts as done, never twice (``ctx.on_complete``)."""
    tenant = str(ctx.payload.scope.get("tenant_id") or "default")

    def effect(conn: Any) -> None:
        event = AuditEvent(
            tenant, ctx.job_run_id, action, target_type, target_id, datetime.now(UTC), reason, dict(payload)
        )
        governance.audit_append(conn, [event], lock_rows=conn.dialect.name == "postgresql")

    ctx.on_complete(effect)


def sha256_file(path: Path) -> str:
    """``sha256:<hex>`` of a file's bytes (what was delivered, not what it parses to)."""
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
