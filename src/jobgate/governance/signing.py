"""Ed25519 signatures over definitions and licences, checked against configured trust roots.

What is signed is a definition's content digest (``sha256:…`` of its canonical JSON without
``status`` and without the signature itself), as UTF-8 bytes: the digest already commits to
every byte of the content, and signing it means a signature survives re-formatting of the
file but not any change of meaning. A signature is ``{"key_id": name, "value": base64}``;
``key_id`` picks the trust root, so keys can be rotated by adding a root before removing the
old one. Keys are raw 32-byte Ed25519 keys in base64 (public: for ``jobgate.yaml``; private:
kept by whoever signs, written 0600 by ``jobgate keys generate``).
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from jobgate.core.errors import ValidationError


class SignatureRefused(ValidationError):
    code = "signature_refused"


@dataclass(frozen=True)
class KeyPair:
    key_id: str
    private_b64: str
    public_b64: str


def generate(key_id: str) -> KeyPair:
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes_raw()
    public = key.public_key().public_bytes_raw()
    return KeyPair(key_id, base64.b64encode(private).decode(), base64.b64encode(public).decode())


def _raw(value: str, *, what: str, field: str) -> bytes:
    try:
        raw = base64.b64decode(value.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise ValidationError(f"{what} is not base64", field=field) from None
    if len(raw) != 32:
        raise ValidationError(f"{what} must be 32 bytes (an Ed25519 key), not {len(raw)}", field=field)
    return raw


def public_key(value: str, *, field: str) -> Ed25519PublicKey:
    return Ed25519PublicKey.from_public_bytes(_raw(value, what="a public key", field=field))


def private_key(value: str, *, field: str = "key") -> Ed25519PrivateKey:
    return Ed25519PrivateKey.from_private_bytes(_raw(value, what="a private key", field=field))


def sign(message: str, key_id: str, private_b64: str) -> dict[str, str]:
    value = private_key(private_b64).sign(message.encode("utf-8"))
    return {"key_id": key_id, "value": base64.b64encode(value).decode()}


def verify(message: str, signature: Any, trust_roots: Mapping[str, Ed25519PublicKey], *, what: str) -> str:
    """The key id that signed ``message``; ``SignatureRefused`` naming why otherwise."""
    if signature is None:
        raise SignatureRefused(f"{what} is not signed, and signatures are required here", field="signature")
    if not isinstance(signature, Mapping) or set(signature) != {"key_id", "value"}:
        raise SignatureRefused("a signature is {key_id, value}", field="signature")
    key_id, value = signature["key_id"], signature["value"]
    root = trust_roots.get(key_id) if isinstance(key_id, str) else None
    if root is None:
        known = ", ".join(sorted(trust_roots)) or "none configured"
        raise SignatureRefused(f"signed by {key_id!r}, which is not a trust root (roots: {known})", field="signature")
    try:
        raw = base64.b64decode(str(value), validate=True)
        root.verify(raw, message.encode("utf-8"))
    except (binascii.Error, ValueError, InvalidSignature):
        raise SignatureRefused(
            f"{what}'s signature by {key_id!r} does not match its content", field="signature"
        ) from None
    return str(key_id)


PRIVATE_KEY_MODE = 0o600  # readable by the owner only, from the moment the file exists


def private_key_file(pair: KeyPair) -> bytes:
    """What a private key file holds: the key's base64 text and a newline."""
    return (pair.private_b64 + "\n").encode("ascii")


def write_private_key(path: Path, pair: KeyPair) -> None:
    """Created readable by the owner only (never world-readable, not even briefly); an existing
    file is refused rather than overwritten."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_KEY_MODE)
    with os.fdopen(fd, "wb") as fh:
        fh.write(private_key_file(pair))
