"""DSSE envelopes (Dead Simple Signing Envelope, v1) over an offline-seed catalog manifest.

The signature covers the pre-authentication encoding ``PAE(payloadType, payload)``, never the
JSON around it, so re-serializing the envelope cannot change what was signed, and the payload
type is bound into the signature. Signatures are Ed25519 by the deployment's evidence key
(``evidence.keys``). The ``keyid`` is derived from the key itself: ``sha256-<hex of the raw
32-byte public key>``, so the same key cannot be relabelled and rotating it changes the id; a
verifier looks the public key up by that id among its trust roots and re-derives the id from
the key it holds, so a root configured under a wrong id trusts nothing.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Sequence
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from jobgate.core.errors import ValidationError
from jobgate.governance import signing

PAYLOAD_TYPE = "application/vnd.jobgate.catalog-manifest+json"


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding: ``DSSEv1 <len> <type> <len> <payload>``."""
    kind = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def key_id(public: Ed25519PublicKey) -> str:
    """``sha256-<hex>`` of the raw public key: an id nobody can pin to another key."""
    return "sha256-" + hashlib.sha256(public.public_bytes_raw()).hexdigest()


def trust_roots(public_keys_b64: Sequence[str], field: str) -> dict[str, Ed25519PublicKey]:
    """Trust roots by derived key id, from base64 Ed25519 public keys (``field`` names the
    configuration key in an error)."""
    roots = {}
    for i, value in enumerate(public_keys_b64):
        public = signing.public_key(value, field=f"{field}[{i}]")
        roots[key_id(public)] = public
    return roots


def sign(payload: bytes, private_b64: str) -> dict[str, Any]:
    """The envelope of ``payload``, signed with the Ed25519 key ``private_b64``."""
    private = signing.private_key(private_b64, field="evidence.signing_key")
    sig = private.sign(pae(PAYLOAD_TYPE, payload))
    return {
        "payloadType": PAYLOAD_TYPE,
        "payload": base64.b64encode(payload).decode("ascii"),
        "signatures": [{"keyid": key_id(private.public_key()), "sig": base64.b64encode(sig).decode("ascii")}],
    }


def verify(envelope_bytes: bytes, payload: bytes, roots: dict[str, Ed25519PublicKey]) -> str:
    """The key id of a trusted signature over ``payload`` in the envelope, or a
    ``ValidationError`` naming what is wrong: not an envelope, another payload type, a payload
    that is not ``payload``, no signature by a trusted key, a signature that does not verify."""
    try:
        envelope = json.loads(envelope_bytes)
        payload_type, carried, signatures = envelope["payloadType"], envelope["payload"], envelope["signatures"]
        carried_bytes = base64.b64decode(carried, validate=True)
    except (ValueError, KeyError, TypeError, RecursionError, binascii.Error):
        raise ValidationError("not a DSSE envelope {payloadType, payload, signatures}", field="envelope") from None
    if payload_type != PAYLOAD_TYPE:
        raise ValidationError(f"payloadType {payload_type!r}, not {PAYLOAD_TYPE}", field="envelope.payloadType")
    if carried_bytes != payload:
        raise ValidationError("the envelope signs another manifest than the archive holds", field="envelope.payload")
    if not isinstance(signatures, list) or not signatures:
        raise ValidationError("the envelope carries no signature", field="envelope.signatures")
    message = pae(payload_type, carried_bytes)
    seen = []
    for s in signatures:
        if not isinstance(s, dict) or not isinstance(s.get("keyid"), str) or not isinstance(s.get("sig"), str):
            raise ValidationError("a signature is {keyid, sig}", field="envelope.signatures")
        seen.append(s["keyid"])
        root = roots.get(s["keyid"])
        if root is None:
            continue
        try:
            root.verify(base64.b64decode(s["sig"], validate=True), message)
        except (binascii.Error, ValueError, InvalidSignature):
            raise ValidationError(
                f"the signature by {s['keyid']} does not match the manifest", field="envelope.signatures"
            ) from None
        return str(s["keyid"])
    raise ValidationError(
        f"signed by {', '.join(seen)}, none of them a trust root here (packs.trusted_keys)",
        field="envelope.signatures",
    )
