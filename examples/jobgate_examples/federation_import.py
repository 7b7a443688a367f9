"""Federation Import (seed 000 §8, §54): receive the package, verify the sender's identity, its
signature and its DAL reference — three checks that run in parallel — then decide, and either
accept or reject (two steps whose ``when`` reads the decision: exactly one of them runs).

A failed check does not fail the workflow: an unverifiable package is an expected input, and
rejecting it (kept under ``rejected/`` with the reasons) is the workflow doing its job.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from jobgate import ExecutionContext, NonRetryableError
from jobgate.core.errors import ValidationError
from jobgate.governance.signing import public_key
from jobgate.governance.signing import verify as ed25519_verify
from jobgate_examples.common import digest, get_json, invalid, param, read_json, safe_id, write_json
from jobgate_examples.federation import folder, registry


def _import_dir(ctx: ExecutionContext) -> Path:
    return folder(ctx) / "imports" / safe_id(param(ctx, "import_id"), "import_id")


def _envelope(ctx: ExecutionContext) -> dict[str, Any]:
    value: dict[str, Any] = read_json(_import_dir(ctx) / "package.json", "the received package")
    return value


def _check(ctx: ExecutionContext, name: str, ok: bool, note: str) -> dict[str, Any]:
    write_json(_import_dir(ctx) / "checks" / f"{name}.json", {"check": name, "ok": ok, "note": note})
    return {f"{name}_ok": ok}


def receive(ctx: ExecutionContext) -> dict[str, Any]:
    """Take the delivery out of the inbox into this import's folder (the inbox copy stays)."""
    delivery = safe_id(param(ctx, "delivery_id"), "delivery_id")
    source = folder(ctx) / "inbox" / f"{delivery}.json"
    if not source.is_file():
        raise invalid(f"no delivery {delivery} in the inbox", "NOT_FOUND")
    target = _import_dir(ctx) / "package.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    envelope = _envelope(ctx)
    package = envelope.get("package")
    if not isinstance(package, dict) or not isinstance(package.get("source_eco"), str):
        raise invalid(f"delivery {delivery} is not a federation envelope", "MALFORMED_PACKAGE")
    return {"package_id": str(package.get("package_id")), "source_eco": package["source_eco"]}


def verify_identity(ctx: ExecutionContext) -> dict[str, Any]:
    """The sender is a known, active ECO, and the key that signed is the one registered for it."""
    sender = param(ctx, "source_eco")
    known = registry(ctx).get(sender)
    signed_by = (_envelope(ctx).get("signature") or {}).get("key_id")
    if known is None:
        return _check(ctx, "identity", False, f"{sender} is not in the trust registry")
    if known["status"] != "active":
        return _check(ctx, "identity", False, f"{sender} is {known['status']}")
    if signed_by != known["key_id"]:
        return _check(ctx, "identity", False, f"signed by {signed_by!r}, not {sender}'s key {known['key_id']}")
    return _check(ctx, "identity", True, f"{sender} ({known['did']})")


def verify_signature(ctx: ExecutionContext) -> dict[str, Any]:
    """Recompute the package's digest and check the Ed25519 signature over it."""
    envelope = _envelope(ctx)
    recomputed = digest(envelope["package"])
    if recomputed != envelope.get("package_digest"):
        return _check(ctx, "signature", False, "the package does not match the digest it carries")
    roots = {
        entry["key_id"]: public_key(entry["public_key"], field="public_key")
        for entry in registry(ctx).values()
        if entry["status"] == "active"
    }
    try:
        key_id = ed25519_verify(recomputed, envelope.get("signature"), roots, what="the package")
    except ValidationError as exc:
        return _check(ctx, "signature", False, exc.message)
    return _check(ctx, "signature", True, f"signed by {key_id}")


def verify_dal(ctx: ExecutionContext) -> dict[str, Any]:
    """The DAL entry the sender names must anchor this very package's digest."""
    envelope = _envelope(ctx)
    ref = envelope.get("dal_ref")
    if not isinstance(ref, str):
        return _check(ctx, "dal", False, "no DAL reference")
    try:
        entry = get_json(ctx, f"/dal/anchors/{safe_id(ref, 'dal_ref')}", "read the DAL entry")
    except NonRetryableError as exc:
        return _check(ctx, "dal", False, str(exc))
    if entry.get("artifact_hash") != digest(envelope["package"]):
        return _check(ctx, "dal", False, f"{ref} anchors a different package digest")
    return _check(ctx, "dal", True, f"anchored as {ref}")


def decide(ctx: ExecutionContext) -> dict[str, Any]:
    """Accept only when every check passed; the reasons are the failed checks' notes."""
    oks = {name: param(ctx, f"{name}_ok") == "true" for name in ("identity", "signature", "dal")}
    notes = {name: read_json(_import_dir(ctx) / "checks" / f"{name}.json", f"the {name} check")["note"] for name in oks}
    reasons = [f"{name}: {notes[name]}" for name, ok in oks.items() if not ok]
    decision = "accept" if all(oks.values()) else "reject"
    write_json(_import_dir(ctx) / "decision.json", {"decision": decision, "checks": oks, "reasons": reasons})
    return {"decision": decision, "failed_checks": len(reasons)}


def accept(ctx: ExecutionContext) -> dict[str, Any]:
    package_id = safe_id(param(ctx, "package_id"), "package_id")
    target = folder(ctx) / "accepted" / f"{package_id}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_import_dir(ctx) / "package.json", target)
    return {"accepted": True}


def reject(ctx: ExecutionContext) -> dict[str, Any]:
    """Keep the refused package with the reasons, for the federation conflict review."""
    decision = read_json(_import_dir(ctx) / "decision.json", "the decision")
    target = folder(ctx) / "rejected" / f"{safe_id(param(ctx, 'import_id'), 'import_id')}.json"
    write_json(target, {"envelope": _envelope(ctx), "reasons": decision["reasons"]})
    return {"rejected": True, "reasons": "; ".join(decision["reasons"])}
