"""API tokens: their shape, the roles they carry, and how a presented token is checked.

A token is ``jgt_<id>_<secret>``: ``jgt_`` makes it recognisable (secret scanners, logs), the
12-hex ``id`` finds its row without revealing anything, and the secret is 32 random bytes
(URL-safe base64, 43 characters). Only the SHA-256 of the secret is stored: a leaked table
grants nothing, and because the secret is random, a fast hash is enough (no password
stretching needed). The presented secret's hash is compared in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import unicodedata
from enum import StrEnum

TOKEN_PREFIX = "jgt_"
_TOKEN = re.compile(r"jgt_(?P<id>[0-9a-f]{12})_(?P<secret>[A-Za-z0-9_-]{43})")


# A tenant's name, wherever one comes from (a token minted on the host or by the API, a signed
# claim of an identity provider): letters, digits, ``_``, ``-`` and single dots, starting with a
# letter or digit, at most 64. A name a person cannot tell from another (" default", "défault")
# or that reads as a path ("../default") is never a tenant.
TENANT_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_-]|\.(?!\.)){0,63}")
TENANT_RULE = "1-64 letters, digits, _ - and single dots, starting with a letter or digit"


def is_tenant_name(name: object) -> bool:
    return isinstance(name, str) and TENANT_NAME.fullmatch(name) is not None


def readable(text: str) -> bool:
    """Whether ``text`` holds only characters a person sees as themselves: no control, format
    (zero-width, bidirectional overrides), private-use, unassigned or line/paragraph separator
    characters, which would make one name print exactly like another in the audit log."""
    return not any(unicodedata.category(ch)[0] == "C" or unicodedata.category(ch) in ("Zl", "Zp") for ch in text)


class Role(StrEnum):
    """Seed 004 roles, extended; each includes nothing implicitly: the route table says who may."""

    CONSUMER = "consumer"  # read, propose requests
    ACTIVATOR = "activator"  # run, cancel and stop own runs
    OPERATOR = "operator"  # any run of its tenant, dead letters, schedules
    AUDITOR = "auditor"  # read audit, replay, evidence
    ADMIN = "admin"  # everything in its tenant, tokens, approvals


def parse(raw: str) -> tuple[str, str] | None:
    """``(token id, secret)`` of a well-formed token, else None (malformed, empty, truncated)."""
    match = _TOKEN.fullmatch(raw.strip())
    return None if match is None else (match["id"], match["secret"])


def secret_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode("ascii")).hexdigest()


def secret_matches(secret: str, stored_hash: str) -> bool:
    """Constant time in the secret: no timing tells how much of it was right."""
    return hmac.compare_digest(secret_hash(secret), stored_hash)


def compose(token_id: str, secret: str) -> str:
    return f"{TOKEN_PREFIX}{token_id}_{secret}"
