"""Looking at a dependency: the thin I/O edge of the health rules. A probe answers None when
the dependency is up, else one line saying what is wrong (it never raises)."""

from __future__ import annotations

import os
from pathlib import Path

import httpx

from jobgate.health.rules import Check, ProbeKind


def probe(check: Check) -> str | None:
    if check.kind is ProbeKind.FILE:
        return _probe_file(Path(check.where))
    return _probe_http(check)


def _probe_http(check: Check) -> str | None:
    try:
        response = httpx.get(check.where, timeout=check.timeout.total_seconds(), follow_redirects=False)
    except httpx.TimeoutException:
        return f"no answer within {check.timeout.total_seconds():g} s"
    except httpx.HTTPError as exc:
        return f"unreachable: {type(exc).__name__}"
    status = response.status_code
    if check.kind is ProbeKind.HEALTH and not 200 <= status < 300:
        return f"answered HTTP {status}"
    if status >= 500:
        return f"answered HTTP {status}"
    return None


def _probe_file(path: Path) -> str | None:
    """An append-only file sink is usable when its folder exists (or can be made) and is writable."""
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"cannot create {folder}: {exc.strerror}"
    if not os.access(folder, os.W_OK):
        return f"{folder} is not writable"
    if path.exists() and not os.access(path, os.W_OK):
        return f"{path} is not writable"
    return None
