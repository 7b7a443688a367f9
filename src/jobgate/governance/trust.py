"""Trust gates (seed 004): a definition that declares ``permissions`` runs only if they are
covered by both an offline licence and an online environment check.

* The **licence** is a signed JSON file on the host (``trust_gates.licence``): ``licence_id``,
  ``holder``, ``permissions``, ``expires_at`` and ``max_concurrent_runs``, signed like a
  definition (Ed25519 over its content digest) by a key of ``trust_gates.licence_trust_roots``.
  A missing, unreadable, badly signed or expired licence covers nothing.
* The **environment check** is an HTTP endpoint named in configuration (never by a request)
  answering ``{"permissions": [...]}`` for this environment. Answers are cached for
  ``ttl_seconds``; when the endpoint cannot be reached (or answers nonsense) the check fails
  closed: definitions that need it are refused, definitions without permissions are not
  affected.

The judgement (``jobgate.core.trust.verdict``) is a pure function of the licence, the
environment's answer, the permissions and the time; reading the file and calling the endpoint,
here, are the thin edges.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from jobgate.core.canonical import digest
from jobgate.core.errors import ValidationError
from jobgate.core.trust import Licence, LicenceState, verdict

__all__ = ["EnvironmentCheck", "Licence", "LicenceFile", "LicenceState", "licence_digest", "parse_licence", "verdict"]

log = logging.getLogger("jobgate.trust")
MAX_LICENCE_BYTES = 1 << 20


def licence_digest(document: Mapping[str, Any]) -> str:
    return digest({k: v for k, v in document.items() if k != "signature"})


def parse_licence(document: Any, roots: Mapping[str, Any]) -> Licence:
    """A verified licence from its document, or ``ValidationError`` naming the field."""
    from jobgate.governance.signing import verify

    if not isinstance(document, dict):
        raise ValidationError("a licence is a JSON object", field="licence")
    verify(licence_digest(document), document.get("signature"), roots, what="the licence")
    try:
        permissions = document["permissions"]
        if not isinstance(permissions, list) or not all(isinstance(p, str) and p for p in permissions):
            raise ValidationError("a list of permission names", field="licence.permissions")
        expires = datetime.fromisoformat(str(document["expires_at"]).replace("Z", "+00:00"))
        if expires.tzinfo is None:
            raise ValidationError("an instant with a timezone", field="licence.expires_at")
        limit = document.get("max_concurrent_runs")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise ValidationError("a whole number from 1", field="licence.max_concurrent_runs")
        holder = str(document.get("holder", ""))
        return Licence(str(document["licence_id"]), holder, frozenset(permissions), expires, limit)
    except KeyError as exc:
        raise ValidationError("required", field=f"licence.{exc.args[0]}") from None
    except ValueError:
        raise ValidationError("an ISO 8601 instant", field="licence.expires_at") from None


class LicenceFile:
    """The licence on disk, re-read when the file changes (a renewal takes effect at once)."""

    def __init__(self, path: Path | None, roots: Mapping[str, Any]) -> None:
        self.path = path
        self.roots = roots
        self._seen: tuple[float, int] | None = None
        self._state = LicenceState(None, "no licence configured (trust_gates.licence)")
        self._lock = threading.Lock()

    def state(self) -> LicenceState:
        if self.path is None:
            return self._state
        try:
            st = self.path.stat()
        except OSError as exc:
            return LicenceState(None, f"{self.path}: {exc.strerror}")
        key = (st.st_mtime, st.st_size)
        with self._lock:
            if key != self._seen:
                self._state = self._read(st.st_size)
                self._seen = key
            return self._state

    def _read(self, size: int) -> LicenceState:
        assert self.path is not None
        if size > MAX_LICENCE_BYTES:
            return LicenceState(None, f"{self.path} is larger than a licence can be")
        try:
            document = json.loads(self.path.read_text(encoding="utf-8"))
            return LicenceState(parse_licence(document, self.roots))
        except (OSError, ValueError) as exc:
            return LicenceState(None, f"{self.path}: {exc}")
        except ValidationError as exc:
            return LicenceState(None, f"{self.path}: {exc}")


class EnvironmentCheck:
    """The online check: one GET per ``ttl`` at most; a failure is cached for the same time,
    so an unreachable endpoint is not hammered, and answers ``None`` (refuse)."""

    def __init__(self, url: str | None, *, ttl: float, timeout: float) -> None:
        self.url = url
        self.ttl = ttl
        self.timeout = timeout
        self._until = 0.0
        self._value: frozenset[str] | None = None
        self._lock = threading.Lock()

    def permissions(self) -> frozenset[str] | None:
        if self.url is None:
            return None
        with self._lock:
            now = time.monotonic()
            if now >= self._until:
                self._value = self._fetch()
                self._until = now + self.ttl
            return self._value

    def _fetch(self) -> frozenset[str] | None:
        import httpx

        assert self.url is not None
        try:
            response = httpx.get(self.url, timeout=self.timeout, follow_redirects=False)
            response.raise_for_status()
            answer = response.json()
            granted = answer["permissions"]
            if not isinstance(granted, list) or not all(isinstance(p, str) for p in granted):
                raise ValueError("permissions is not a list of names")
            return frozenset(granted)
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            log.warning("environment check %s failed: %s", self.url, exc, extra={"action": "trust_gate_unreachable"})
            return None
