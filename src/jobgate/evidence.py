"""Evidence bundles (seed 001 §7): everything an auditor needs about one run, in one zip,
checkable offline with nothing but the bundle and a public key.

A bundle holds ``run.json`` (the run, every transition, its attempts, its dead letter),
``definition.json`` (the version that ran, as stored), ``approvals.json``, ``config_snapshot.json``,
``audit.json`` (the entries about the run and its definition), ``proofs.json`` (their
inclusion proofs in anchored roots, where anchored), and ``manifest.json`` with the SHA-256 of
every other file — signed (``manifest.sig``, Ed25519 over the manifest's digest) when
``evidence.signing_key`` is configured.

``verify_bundle`` re-derives everything it can without the database: each file against the
manifest, the manifest against its signature, the definition's and the snapshot's digests
against their content, each audit entry's hash, and each proof against its root.
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobgate import anchoring, evidence_keys, signing
from jobgate.api.views import run_detail_view
from jobgate.core import merkle
from jobgate.core.audit import AuditEntry, AuditEvent, entry_hash
from jobgate.core.canonical import digest, isoformat_utc
from jobgate.core.errors import NotFoundError, ValidationError
from jobgate.definitions.schema import content_digest
from jobgate.service.engine import Engine
from jobgate.store.sql import governance

FORMAT = "jobgate-evidence/1"
MAX_BUNDLE_BYTES = 256 << 20


def _json(value: Any) -> bytes:
    return (json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str) + "\n").encode("utf-8")


def _entry_doc(e: AuditEntry) -> dict[str, Any]:
    ev = e.event
    return {
        "tenant_id": ev.tenant_id,
        "seq": e.seq,
        "at": isoformat_utc(ev.at),
        "actor": ev.actor,
        "action": ev.action,
        "target_type": ev.target_type,
        "target_id": ev.target_id,
        "reason": ev.reason,
        "payload": dict(ev.payload),
        "prev_hash": e.prev_hash,
        "entry_hash": e.entry_hash,
    }


def build_bundle(engine: Engine, job_run_id: str, *, tenant_id: str | None = None) -> bytes:
    """The zip's bytes for one run (read in one transaction, so the files agree)."""
    detail = run_detail_view(engine, job_run_id, tenant_id)
    run = detail.run
    with engine.store.read(tenant_id=tenant_id) as tx:
        stored = tx.definition_get(run.tenant_id, run.job_definition_id, run.definition_version)
        snapshot = tx.snapshot_get(run.config_snapshot_id)
        approvals = tx.approvals_list(run.tenant_id, run.job_definition_id)
        about = [
            e
            for target in (run.job_run_id, run.job_definition_id)
            for e in tx.audit_list(governance.AuditFilter(tenant_id=run.tenant_id, target_id=target, limit=100_000))
        ]
        proofs = [p for e in about if (p := anchoring.inclusion_proof(tx.conn, run.tenant_id, e.seq)) is not None]
    if stored is None or snapshot is None:
        raise NotFoundError("the run's definition version or snapshot is missing", field="job_run_id")
    definition_doc = {
        "job_definition_id": stored.job_definition_id,
        "version": stored.version,
        "digest": stored.digest,
        "content": stored.content,
    }
    approval_docs = [
        {
            **a.__dict__,
            "approved_at": isoformat_utc(a.approved_at),
            "revoked_at": a.revoked_at and isoformat_utc(a.revoked_at),
        }
        for a in approvals
    ]
    snapshot_doc = {
        "config_snapshot_id": snapshot.config_snapshot_id,
        "config_digest": snapshot.config_digest,
        "content": snapshot.content,
    }
    files = {
        "run.json": _json(detail.model_dump(mode="json")),
        "definition.json": _json(definition_doc),
        "approvals.json": _json(approval_docs),
        "config_snapshot.json": _json(snapshot_doc),
        "audit.json": _json(sorted((_entry_doc(e) for e in about), key=lambda d: d["seq"])),
        "proofs.json": _json(proofs),
    }
    manifest = {
        "format": FORMAT,
        "job_run_id": run.job_run_id,
        "tenant_id": run.tenant_id,
        "files": {name: "sha256:" + hashlib.sha256(data).hexdigest() for name, data in sorted(files.items())},
    }
    files["manifest.json"] = _json(manifest)
    signer = evidence_keys.signer_for(engine.config)
    if signer is not None:
        message = "sha256:" + hashlib.sha256(files["manifest.json"]).hexdigest()
        files["manifest.sig"] = _json(signing.sign(message, signer.key_id, signer.private_b64))
    return pack(files)


def pack(files: dict[str, bytes]) -> bytes:
    """The one canonical archive of ``files``: sorted, stored (not compressed: no zlib version
    can change the bytes), fixed dates. So a verifier re-packs what it read and compares every
    byte — a change anywhere in the zip, even in metadata, is found and placed in a file."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as z:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, date_time=(2000, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_STORED
            info.create_system = 3
            info.external_attr = 0o644 << 16
            z.writestr(info, files[name])
    return buffer.getvalue()


def _placed(data: bytes, members: list[zipfile.ZipInfo], offset: int) -> str:
    """Which file's region of the archive holds ``offset`` (or the archive's directory)."""
    owner = "the archive's directory"
    for info in sorted(members, key=lambda i: i.header_offset):
        if info.header_offset <= offset:
            owner = info.filename
    end_of_data = max((i.header_offset + 30 + len(i.filename) + i.compress_size for i in members), default=0)
    return owner if offset < end_of_data else "the archive's directory"


@dataclass(frozen=True)
class BundleCheck:
    ok: bool
    problems: list[str]
    signed_by: str | None


def verify_bundle(data: bytes, *, public_keys: dict[str, str] | None = None) -> BundleCheck:
    """Check a bundle offline. ``public_keys`` (key id -> base64): the signature must verify
    with one of them; without keys, an unsigned bundle is checked for internal consistency."""
    problems: list[str] = []
    try:
        z = zipfile.ZipFile(io.BytesIO(data))
        members = z.infolist()
    except (zipfile.BadZipFile, OSError, ValueError, RuntimeError, NotImplementedError) as exc:
        return BundleCheck(False, [f"not a readable zip: {exc}"], None)
    files: dict[str, bytes] = {}
    for info in members:
        if info.file_size > MAX_BUNDLE_BYTES:
            problems.append(f"{info.filename}: larger than a bundle file can be")
            continue
        try:
            files[info.filename] = z.read(info)
        except (
            zipfile.BadZipFile,
            OSError,
            ValueError,
            EOFError,
            zlib.error,
            RuntimeError,
            NotImplementedError,
        ) as exc:
            # A damaged member (a flipped flag can even claim encryption or an unknown method): named.
            problems.append(f"{info.filename}: damaged in the archive ({exc})")
    if "manifest.json" not in files:
        return BundleCheck(False, [*problems, "manifest.json is missing or damaged"], None)
    try:
        manifest = json.loads(files["manifest.json"])
        listed: dict[str, str] = manifest["files"]
        if not isinstance(listed, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in listed.items()
        ):
            raise TypeError("files is not a mapping of names to digests")
    except (ValueError, KeyError, TypeError):
        return BundleCheck(False, ["manifest.json is not a manifest"], None)
    required = {"run.json", "definition.json", "approvals.json", "config_snapshot.json", "audit.json", "proofs.json"}
    problems += [f"{name}: not in the manifest" for name in sorted(required - set(listed))]
    damaged = {p.split(":", 1)[0] for p in problems}
    for name, want in sorted(listed.items()):
        if name in damaged:
            continue
        got = "sha256:" + hashlib.sha256(files[name]).hexdigest() if name in files else None
        if got != want:
            problems.append(f"{name}: {'missing' if got is None else 'does not match the manifest'}")
    for name in sorted(set(files) - set(listed) - {"manifest.json", "manifest.sig"}):
        problems.append(f"{name}: not listed in the manifest")
    signed_by = None
    if public_keys:
        if "manifest.sig" not in files:
            problems.append("manifest.sig: missing, and a signature is required")
        else:
            roots = {k: signing.public_key(v, field=k) for k, v in public_keys.items()}
            message = "sha256:" + hashlib.sha256(files["manifest.json"]).hexdigest()
            try:
                signed_by = signing.verify(message, json.loads(files["manifest.sig"]), roots, what="the manifest")
            except (ValidationError, ValueError) as exc:
                problems.append(f"manifest.sig: {exc}")
    if not problems:
        canonical = pack(files)
        if canonical != data:
            at = next(
                (i for i, (a, b) in enumerate(zip(canonical, data, strict=False)) if a != b),
                min(len(canonical), len(data)),
            )
            problems.append(f"{_placed(data, members, at)}: the archive differs from the exported bytes at offset {at}")
    if not problems:
        try:
            problems += _content_checks(files)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:  # signed, but not a bundle's shape
            problems.append(f"the bundle's files are not what an export writes ({type(exc).__name__}: {exc})")
    return BundleCheck(not problems, problems, signed_by)


def _content_checks(files: dict[str, bytes]) -> list[str]:
    """What the files claim about themselves: digests re-derived from their content."""
    out: list[str] = []
    definition = json.loads(files["definition.json"])
    if content_digest(definition["content"]) != definition["digest"]:
        out.append("definition.json: content does not match its digest")
    snapshot = json.loads(files["config_snapshot.json"])
    if digest(snapshot["content"]) != snapshot["config_digest"]:
        out.append("config_snapshot.json: content does not match its digest")
    from datetime import datetime

    for e in json.loads(files["audit.json"]):
        event = AuditEvent(
            e["tenant_id"], e["actor"], e["action"], e["target_type"], e["target_id"],
            datetime.fromisoformat(e["at"].replace("Z", "+00:00")), e["reason"], e["payload"],
        )  # fmt: skip
        if entry_hash(event, e["seq"], e["prev_hash"]) != e["entry_hash"]:
            out.append(f"audit.json: entry {e['seq']} does not match its hash")
    entries = {e["seq"]: e["entry_hash"] for e in json.loads(files["audit.json"])}
    for p in json.loads(files["proofs.json"]):
        if entries.get(p["seq"]) != p["entry_hash"]:
            out.append(f"proofs.json: the proof of entry {p['seq']} is not for the entry in audit.json")
        elif p["root"] != p["anchor"]["root"] or p["anchor"]["chain"] != anchoring.chain_hash(
            p["anchor"]["prev_chain"], p["root"]
        ):
            out.append(f"proofs.json: entry {p['seq']}'s root is not its anchor's")
        elif not merkle.verify(p["entry_hash"], p["proof"], p["root"]):
            out.append(f"proofs.json: the proof of entry {p['seq']} does not reach its root")
    return out


def write_bundle(path: Path, data: bytes) -> None:
    if path.exists():
        raise ValidationError(f"{path} exists; refusing to overwrite it", field="--out")
    path.write_bytes(data)
