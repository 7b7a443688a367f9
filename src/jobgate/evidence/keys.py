"""The deployment's evidence key: the Ed25519 key that signs anchors and evidence bundles.

A database writer can recompute every hash jobgate stores (entries, seals, roots, chains); what
they cannot make is a signature by a key they do not hold. The private key lives in a file
outside the database (``evidence.signing_key``, or ``<data_dir>/keys/evidence.key``, created
owner-only by ``jobgate init``, ``jobgate demo`` or ``jobgate keys evidence --create``); its
public half is published (``jobgate keys evidence``, ``GET /api/v1/audit/keys``, every
evidence bundle), so anyone can check an anchor or a bundle without trusting the operator.
After a rotation the old public keys stay trusted through ``evidence.trusted_keys``.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from jobgate.core.errors import ConfigurationError, ValidationError
from jobgate.governance import signing


@dataclass(frozen=True)
class Signer:
    key_id: str
    private_b64: str

    def sign(self, message: str) -> str:
        """The base64 Ed25519 signature of ``message``."""
        return signing.sign(message, self.key_id, self.private_b64)["value"]

    @property
    def public_b64(self) -> str:
        raw = signing.private_key(self.private_b64).public_key().public_bytes_raw()
        return base64.b64encode(raw).decode()


def signer_for(config: Any) -> Signer | None:
    """The configured evidence key, or None when the deployment has none (a file that exists
    but cannot be read as a key is an error, never a silent fallback to unsigned)."""
    path: Path = config.evidence_key_path
    if not path.exists():
        if config.evidence.signing_key is not None:  # configured explicitly, and missing
            raise ValidationError(f"{path} does not exist", field="evidence.signing_key")
        return None
    try:
        private = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValidationError(f"{path} cannot be read: {exc}", field="evidence.signing_key") from None
    signing.private_key(private, field="evidence.signing_key")
    return Signer(config.evidence.signing_key_id, private)


def trusted_keys(config: Any) -> dict[str, Ed25519PublicKey]:
    """Every key an anchor may be signed by: the current one and the rotated ones kept."""
    out = {
        k: signing.public_key(v, field=f"evidence.trusted_keys.{k}") for k, v in config.evidence.trusted_keys.items()
    }
    signer = _signer_apart_from_trusted(config)
    if signer is not None:
        out[signer.key_id] = signing.public_key(signer.public_b64, field="evidence.signing_key")
    return out


def _signer_apart_from_trusted(config: Any) -> Signer | None:
    """The signing key, refused when a trusted key of the same id is another key: a rotated key
    listed under the id the new key took was silently replaced by it, and every anchor the old
    key signed then failed verification as if its content had changed."""
    signer = signer_for(config)
    if signer is None:
        return None
    public = base64.b64decode(signer.public_b64)
    for key_id, trusted in sorted(config.evidence.trusted_keys.items()):
        same = signing.public_key(trusted, field=f"evidence.trusted_keys.{key_id}").public_bytes_raw() == public
        if key_id != signer.key_id and same:
            raise ConfigurationError(
                f"{config.evidence_key_path} holds the key trusted as {key_id!r}, not a new one: a rotated key"
                " leaves the signing key's file (keep it offline), then `jobgate keys evidence --create` makes"
                f" the new key for {signer.key_id!r}",
                field="evidence.signing_key",
            )
    kept = config.evidence.trusted_keys.get(signer.key_id)
    field = f"evidence.trusted_keys.{signer.key_id}"
    if kept is not None and signing.public_key(kept, field=field).public_bytes_raw() != public:
        raise ConfigurationError(
            f"names the key id {signer.key_id!r} the signing key uses (evidence.signing_key_id), but another key:"
            " a rotated key keeps its id here, and the new key takes another signing_key_id",
            field=field,
        )
    return signer


def published(config: Any) -> list[dict[str, str]]:
    """The public keys as published: current first, then the rotated ones still trusted."""
    signer = _signer_apart_from_trusted(config)
    keys = []
    if signer is not None:
        keys.append(
            {"key_id": signer.key_id, "algorithm": "Ed25519", "public_key": signer.public_b64, "status": "current"}
        )
    for key_id, public in sorted(config.evidence.trusted_keys.items()):
        if signer is None or key_id != signer.key_id:
            keys.append({"key_id": key_id, "algorithm": "Ed25519", "public_key": public, "status": "trusted"})
    return keys


def refuse_a_rotation_that_breaks_verification(config: Any, signers: Mapping[str, int]) -> None:
    """Before a new key is made (``signers``: how many anchors each key id signed). A new key
    under an id that signed anchors already would make each of them fail verification as if its
    content had changed: the new key takes a new id. And the ids that signed anchors stay trusted
    (their public keys in ``evidence.trusted_keys``), or every anchor they signed fails
    verification once their key is gone."""
    key_id = config.evidence.signing_key_id
    untrusted = [k for k in sorted(signers) if k != key_id and k not in config.evidence.trusted_keys]
    if untrusted:
        raise ValidationError(
            f"anchors signed as {untrusted[0]!r} would no longer verify: list its public key in evidence.trusted_keys"
            f" as {untrusted[0]!r} (jobgate keys evidence showed it) before making a new key",
            field="evidence.trusted_keys",
        )
    if signers.get(key_id):
        raise ValidationError(
            f"the key id {key_id!r} signed {signers[key_id]} anchor(s) with the key that was here; a new key under"
            f" the same id would make them fail verification. Keep the old public key in evidence.trusted_keys as"
            f" {key_id!r}, give the new key another evidence.signing_key_id (e.g. {key_id}-2), then create it",
            field="evidence.signing_key_id",
        )


def create(config: Any) -> Signer:
    """Create the evidence key file (owner-only); refuses to overwrite an existing one."""
    path: Path = config.evidence_key_path
    if path.exists():
        raise ValidationError(f"{path} exists; refusing to overwrite the evidence key", field="evidence.signing_key")
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    pair = signing.generate(config.evidence.signing_key_id)
    signing.write_private_key(path, pair)
    return Signer(pair.key_id, pair.private_b64)


def ensure(config: Any) -> Signer:
    """The evidence key, created if the deployment has none yet (``init``, ``demo``)."""
    return signer_for(config) or create(config)
