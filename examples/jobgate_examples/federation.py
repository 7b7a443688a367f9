"""What the federation examples share: the trust registry, this ECO's identity, the envelope.

An envelope is ``{package, package_digest, signature, dal_ref}``: the package (redacted before
it is signed), the digest of its canonical JSON, an Ed25519 signature over that digest by the
sender's key (``jobgate.governance.signing``), and the DAL ledger entry that anchored the same digest.
The receiver recomputes the digest from the package it got, so a change of any byte of the
package fails both the signature and the DAL check.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jobgate import ExecutionContext
from jobgate_examples.common import home, read_json


def folder(ctx: ExecutionContext) -> Path:
    return home(ctx) / "federation"


def registry(ctx: ExecutionContext) -> dict[str, Any]:
    """Known ECOs: DID, key id, base64 Ed25519 public key, status (the DID cache stand-in)."""
    value: dict[str, Any] = read_json(folder(ctx) / "trust-registry.json", "the federation trust registry")
    return value


def identity(ctx: ExecutionContext) -> dict[str, Any]:
    """This ECO: its number and signing key id (the private key is a file beside it, 0600)."""
    value: dict[str, Any] = read_json(folder(ctx) / "identity.json", "this ECO's federation identity")
    return value


def private_key(ctx: ExecutionContext) -> str:
    me = identity(ctx)
    return (folder(ctx) / "keys" / f"{me['eco_number']}.key").read_text(encoding="ascii").strip()
