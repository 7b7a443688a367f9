"""Console sessions: who signed in, carried by the browser in a cookie only the server can make.

A cookie's value is ``base64url(JSON) "." base64url(HMAC-SHA256(key, JSON))``: the server keeps
no session table, and any change to the value fails the MAC (compared in constant time). The
JSON holds the principal, the credential it signed in with, an expiry and the session's CSRF
token. The key is 32 random bytes in ``<data_dir>/keys/session.key`` (0600, made on first use;
servers sharing a database on several hosts share the file). The cookie is HttpOnly (no script
reads it), SameSite=Strict (no other site's page sends it), and Secure behind HTTPS.

A session of a jobgate token names the token: every request checks it is still valid, so a
revoked token ends its sessions at once. A session of a pasted credential that expires (a token,
a provider's JWT) ends with it (``console.signin``). A directory session, or one from the
provider's sign-in page, lasts ``auth.session_hours``, and what it mints expires with it; a
directory session is asked of the directory again (``LdapDirectory.still_member``): gone, it
ends; in another group, it takes that group's role. Signing out ends a session on the server
too: its id (``session_id``) is stored as ended
until the cookie would have expired, and a copy of the cookie presented afterwards opens nothing.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import secrets
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from jobgate.core.tokens import Role
from jobgate.service.tokens import Principal

SESSION_COOKIE = "jobgate_session"
PENDING_COOKIE = "jobgate_signin"  # the OIDC flow's state between the redirect and the callback
PENDING_SECONDS = 600


def session_key(data_dir: Path) -> bytes:
    """The deployment's session key, made on first use (0600, never overwritten)."""
    path = Path(data_dir) / "keys" / "session.key"
    try:
        return bytes.fromhex(path.read_text(encoding="ascii").strip())
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    key = secrets.token_bytes(32)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:  # another process made it first: use theirs
        return bytes.fromhex(path.read_text(encoding="ascii").strip())
    with os.fdopen(fd, "w", encoding="ascii") as fh:
        fh.write(key.hex() + "\n")
    return key


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Signer:
    """Signs and checks cookie values; ``purpose`` keeps a value of one kind from passing for another."""

    def __init__(self, key: bytes, purpose: str) -> None:
        self._key = hashlib.sha256(key + b"\0" + purpose.encode()).digest()

    def dumps(self, payload: dict[str, Any], lifetime: float, *, now: float | None = None) -> str:
        body = json.dumps({**payload, "exp": (now or time.time()) + lifetime}, separators=(",", ":")).encode()
        return f"{_b64(body)}.{_b64(hmac.new(self._key, body, hashlib.sha256).digest())}"

    def loads(self, value: str | None, *, now: float | None = None) -> dict[str, Any] | None:
        """The payload of a value this signer made and that has not expired, else None."""
        if not value or len(value) > 8192 or value.count(".") != 1:
            return None
        body_text, mac_text = value.split(".")
        try:
            body, mac = _unb64(body_text), _unb64(mac_text)
        except (binascii.Error, ValueError):
            return None
        if not hmac.compare_digest(mac, hmac.new(self._key, body, hashlib.sha256).digest()):
            return None
        try:
            payload = json.loads(body)
        except ValueError:
            return None
        if not isinstance(payload, dict) or not isinstance(payload.get("exp"), int | float):
            return None
        return payload if payload["exp"] > (now or time.time()) else None


def session_payload(principal: Principal) -> dict[str, Any]:
    """What a session remembers of its principal, and a fresh CSRF token."""
    return {
        "credential": principal.credential,
        "tenant": principal.tenant_id,
        "role": principal.role.value,
        "jobs": None if principal.jobs is None else list(principal.jobs),
        "name": principal.name,
        "minted_by": list(principal.minted_by),
        "display_name": principal.display_name,
        # the credential's own expiry: a token minted in the console outlives it no more than
        # one minted through the API does
        "expires_at": None if principal.expires_at is None else principal.expires_at.isoformat(),
        "csrf": secrets.token_urlsafe(24),
    }


def session_id(payload: dict[str, Any]) -> str:
    """The id a session is ended under: the SHA-256 of its CSRF token, a secret made for this
    session alone (the stored id reveals nothing a form could be forged with)."""
    return hashlib.sha256(str(payload.get("csrf", "")).encode("utf-8")).hexdigest()


def principal_of(payload: dict[str, Any]) -> Principal:
    jobs = payload.get("jobs")
    return Principal(
        credential=str(payload["credential"]),
        tenant_id=str(payload["tenant"]),
        role=Role(payload["role"]),
        jobs=None if jobs is None else tuple(str(j) for j in jobs),
        name=payload.get("name"),
        minted_by=tuple(str(m) for m in payload.get("minted_by") or ()),
        display_name=payload.get("display_name"),
        expires_at=_expiry(payload.get("expires_at")),
    )


def _expiry(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        return None
    return at if at.tzinfo is not None else None
