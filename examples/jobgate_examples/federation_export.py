"""Federation Export (seed 000 §8, §32-33, §54): resolve config, package the attestation, REDACT,
sign, anchor, export to the partner ECO's gateway, verify delivery.

``resolve_config`` and ``package`` do not depend on each other and run in parallel; ``redact``
waits for both. Redaction happens before signing, so what is signed, anchored and sent is the
redacted package, and the step checks that no removed value survives anywhere in it.
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

from jobgate import ExecutionContext
from jobgate.core.canonical import canonical_json
from jobgate.governance.signing import sign as ed25519_sign
from jobgate_examples.common import (
    digest,
    get_json,
    home,
    invalid,
    param,
    post_json,
    read_json,
    safe_id,
    write_json,
)
from jobgate_examples.federation import folder, identity, private_key


def _export_dir(ctx: ExecutionContext) -> Path:
    return folder(ctx) / "exports" / safe_id(param(ctx, "export_id"), "export_id")


def _profiles(ctx: ExecutionContext) -> dict[str, Any]:
    value: dict[str, Any] = read_json(folder(ctx) / "profiles.json", "the federation profiles")
    return value


def resolve_config(ctx: ExecutionContext) -> dict[str, Any]:
    """The federation profile decides whether this target may receive, and how to redact."""
    name, target = param(ctx, "federation_profile"), param(ctx, "target_eco")
    profile = _profiles(ctx)["profiles"].get(name)
    if profile is None:
        raise invalid(f"unknown federation profile {name!r}", "UNKNOWN_PROFILE")
    if target not in profile["allowed_targets"]:
        raise invalid(f"{target} is not a permitted target of {name}", "TARGET_NOT_PERMITTED")
    if identity(ctx)["eco_number"] != param(ctx, "source_eco"):
        raise invalid(f"this host is not {param(ctx, 'source_eco')}", "NOT_OUR_IDENTITY")
    return {"redaction_profile": profile["redaction_profile"], "require_dal_anchor": profile["require_dal_anchor"]}


def package(ctx: ExecutionContext) -> dict[str, Any]:
    """The attestation as a federation package, still unredacted (it never leaves this folder)."""
    attestation_id = safe_id(param(ctx, "attestation_id"), "attestation_id")
    attestation = read_json(home(ctx) / "attestations" / f"{attestation_id}.json", f"attestation {attestation_id}")
    seed = f"{attestation_id}|{param(ctx, 'export_id')}".encode()
    doc = {
        "package_id": "FEDPKG-" + hashlib.sha256(seed).hexdigest()[:16].upper(),
        "source_eco": param(ctx, "source_eco"),
        "target_eco": param(ctx, "target_eco"),
        "federation_profile": param(ctx, "federation_profile"),
        "sync_type": "trust_attestation_export",
        "attestation": attestation,
    }
    write_json(_export_dir(ctx) / "package.json", doc)
    return {"package_id": doc["package_id"]}


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def redact(ctx: ExecutionContext) -> dict[str, Any]:
    """Remove every field the redaction profile names, then prove none of their values is left."""
    name = param(ctx, "redaction_profile")
    fields = _profiles(ctx)["redaction_profiles"].get(name)
    if fields is None:
        raise invalid(f"unknown redaction profile {name!r}", "UNKNOWN_PROFILE")
    doc = copy.deepcopy(read_json(_export_dir(ctx) / "package.json", "the package"))
    removed: list[str] = []
    secrets: list[str] = []
    for dotted in fields:
        *parents, last = dotted.split(".")
        node = doc
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict) and last in node:
            secrets += _strings(node.pop(last))
            removed.append(dotted)
    doc["redaction_profile"] = name
    doc["redacted_fields"] = removed
    text = json.dumps(doc, ensure_ascii=False)
    leaked = [s for s in secrets if len(s) >= 4 and s in text]
    if leaked:
        raise invalid(f"{len(leaked)} redacted value(s) still appear in the package", "REDACTION_LEAK")
    write_json(_export_dir(ctx) / "redacted.json", doc)
    return {"redacted_count": len(removed), "redacted_sha256": digest(doc)}


def sign(ctx: ExecutionContext) -> dict[str, Any]:
    """Sign the redacted package's digest with this ECO's Ed25519 key."""
    doc = read_json(_export_dir(ctx) / "redacted.json", "the redacted package")
    package_digest = digest(doc)
    if package_digest != param(ctx, "redacted_sha256"):
        raise invalid("the redacted package changed after redaction", "PACKAGE_CHANGED")
    me = identity(ctx)
    signature = ed25519_sign(package_digest, me["key_id"], private_key(ctx))
    write_json(
        _export_dir(ctx) / "signed.json", {"package": doc, "package_digest": package_digest, "signature": signature}
    )
    return {"package_digest": package_digest, "key_id": me["key_id"]}


def anchor(ctx: ExecutionContext) -> dict[str, Any]:
    """Anchor the package digest in the DAL, so the receiver can check it was not altered."""
    answer = post_json(
        ctx,
        "/dal/anchors",
        {
            "artifact_type": "FederationPackage",
            "artifact_id": param(ctx, "package_id"),
            "artifact_hash": param(ctx, "package_digest"),
        },
        "anchor the package",
    )
    return {"ledger_ref": answer["ledger_ref"]}


def export(ctx: ExecutionContext) -> dict[str, Any]:
    """Send the envelope to the target's gateway; keep the exact bytes sent in the outbox."""
    envelope = read_json(_export_dir(ctx) / "signed.json", "the signed package")
    envelope["dal_ref"] = param(ctx, "ledger_ref")
    body = canonical_json(envelope)
    outbox = folder(ctx) / "outbox" / f"{safe_id(envelope['package']['package_id'], 'package_id')}.json"
    outbox.parent.mkdir(parents=True, exist_ok=True)
    outbox.write_bytes(body)
    target = param(ctx, "target_eco")
    answer = post_json(ctx, f"/federation/inbox/{safe_id(target, 'target_eco')}", envelope, f"deliver to {target}")
    return {"receipt_id": answer["receipt_id"], "sent_sha256": "sha256:" + hashlib.sha256(body).hexdigest()}


def verify_delivery(ctx: ExecutionContext) -> dict[str, Any]:
    """The receiver's receipt must name the exact bytes that were sent."""
    target, receipt = safe_id(param(ctx, "target_eco"), "target_eco"), safe_id(param(ctx, "receipt_id"), "receipt_id")
    answer = get_json(ctx, f"/federation/receipts/{target}/{receipt}", "read the delivery receipt")
    if answer.get("sha256") != param(ctx, "sent_sha256"):
        raise invalid(f"{target} holds different bytes than were sent", "DELIVERY_MISMATCH")
    return {"delivery_verified": True}
