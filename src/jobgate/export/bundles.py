"""Evidence bundles (seed 001 §7): everything an auditor needs about a run, a workflow run, a
definition or a period, in one zip, checkable offline with nothing but the bundle and a public
key.

What the files hold is ``evidence.scope``'s: the rows each sealed record is made of, the seals
with their proofs in their batches, the audit entries and their proofs in signed anchors, the
published keys. ``manifest.json`` lists the SHA-256 of every other file and is signed
(``manifest.sig``, Ed25519 over the manifest's digest) with the deployment's evidence key.

``verify_bundle`` re-derives everything without the database: each file against the manifest,
the manifest against its signature, and then ``scope.check_contents``: every seal from
its rows, every seal into its batch root, every entry's hash, every proof into its anchor, and
every anchor's signature.
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from jobgate.core.canonical import isoformat_utc
from jobgate.core.encoding import from_us
from jobgate.core.errors import ValidationError
from jobgate.evidence import keys as evidence_keys
from jobgate.evidence.timestamping import TimestampTrust, authority_for
from jobgate.export.scope import MANIFEST_STAMP, ExportScope, bundle_files, check_contents, json_file
from jobgate.governance import signing
from jobgate.service.absent import no_run
from jobgate.service.engine import Engine

FORMAT = "jobgate-evidence/2"
OUTSIDE_MANIFEST = ("manifest.json", "manifest.sig", MANIFEST_STAMP)
MAX_BUNDLE_BYTES = 256 << 20


def build_bundle(engine: Engine, scope: ExportScope) -> bytes:
    """The zip's bytes for ``scope`` (``evidence.scope``), its manifest signed with the
    deployment's evidence key when it has one."""
    now = engine.clock.now()
    with engine.store.read() as tx:  # read before the files: an anchor made meanwhile only proves more
        anchored = [a.last_seq for a in tx.anchors.of(scope.tenant_id) if a.mode == "batch"]
        began = tx.audit_log_began()
    files = bundle_files(engine, scope)
    manifest = {
        "format": FORMAT,
        "tenant_id": scope.tenant_id,
        "scope": scope.describe(),
        # What the deployment had anchored when this was exported, and when that was: every entry
        # up to ``anchored_through``, and every entry older than two anchor windows before
        # ``exported_at``, has its proof in the bundle (a bundle cannot leave one out unseen).
        "exported_at": isoformat_utc(now),
        "anchored_through": max(anchored, default=0),
        "anchor_window_seconds": engine.config.evidence.anchor_window.total_seconds(),
        # When the deployment's audit log began: a revocation dated before it (a database from
        # before the log) has no entry to find; every later one must have its entry here.
        "audit_log_began": None if began is None else isoformat_utc(from_us(began)),
        "files": {name: "sha256:" + hashlib.sha256(data).hexdigest() for name, data in sorted(files.items())},
    }
    files["manifest.json"] = json_file(manifest)
    message = "sha256:" + hashlib.sha256(files["manifest.json"]).hexdigest()
    signer = evidence_keys.signer_for(engine.config)
    if signer is not None:
        files["manifest.sig"] = json_file(signing.sign(message, signer.key_id, signer.private_b64))
    stamper = authority_for(engine.config)
    if stamper is not None:  # the export's time, vouched for by the authority: not the key holder's to move
        files[MANIFEST_STAMP] = (stamper.stamp(message, created_at=now, not_before=now) + "\n").encode("ascii")
    return pack(files)


def _vouched(files: Mapping[str, bytes]) -> dict[str, str]:
    """The keys the bundle publishes (``keys.json``: the deployment's current key and its rotated
    ones), taken for its anchors' signatures once a trusted key signed the manifest that lists
    that file: the signer vouches for them (found by a review: after a rotation, verifying with
    the current key alone failed every anchor the earlier key signed). They add no power: the
    signing key's holder could sign the anchors themselves. A key given on the command line wins."""
    try:
        listed = json.loads(files.get("keys.json", b"[]"))
    except ValueError:
        return {}
    if not isinstance(listed, list):
        return {}
    vouched: dict[str, str] = {}
    for k in listed:
        if isinstance(k, dict) and isinstance(k.get("key_id"), str) and isinstance(k.get("public_key"), str):
            try:
                signing.public_key(k["public_key"], field=k["key_id"])
            except (ValidationError, ValueError):
                continue  # not a key: its anchors are then checked against the given keys alone
            vouched[k["key_id"]] = k["public_key"]
    return vouched


def run_scope(engine: Engine, job_run_id: str, tenant_id: str | None = None) -> ExportScope:
    """The scope of one run, in its own tenant (or in ``tenant_id`` only, when given)."""
    with engine.store.read(tenant_id=tenant_id) as tx:
        run = tx.run_get(job_run_id, tenant_id)
        if run is None:
            raise no_run(tx, job_run_id, tenant_id)
    return ExportScope(tenant_id=run.tenant_id, job_run_id=run.job_run_id)


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
    notes: list[str] = field(default_factory=list)  # what it cannot vouch for yet (not chained, not anchored)
    anchors_checked: int = 0  # anchors whose signature a trusted key verified
    timestamps_checked: int = 0  # batch anchors whose RFC 3161 token verified against the given roots


def _stamp_problems(files: dict[str, bytes], manifest: dict[str, Any], trust: TimestampTrust) -> list[str]:
    """With the authority's roots given, the manifest must carry its token, over its own digest,
    dated when the manifest says it was exported."""
    token = files.get(MANIFEST_STAMP)
    if token is None:
        return [f"{MANIFEST_STAMP}: missing, and a timestamp is required (--tsa-ca)"]
    try:
        exported = datetime.fromisoformat(str(manifest.get("exported_at")).replace("Z", "+00:00"))
    except ValueError:
        return ["manifest.json: exported_at is not a time"]
    message = "sha256:" + hashlib.sha256(files["manifest.json"]).hexdigest()
    problem = trust.problem(
        token.decode("ascii", "replace").strip(), message, created_at=exported, not_before=exported - trust.max_skew
    )
    return [] if problem is None else [f"{MANIFEST_STAMP}: {problem}"]


def verify_bundle(
    data: bytes,
    *,
    public_keys: dict[str, str] | None = None,
    timestamps: TimestampTrust | None = None,
    anchor_window: timedelta | None = None,
) -> BundleCheck:
    """Check a bundle offline. ``public_keys`` (key id -> base64): the signature must verify
    with one of them; without keys, an unsigned bundle is checked for internal consistency.
    ``timestamps``: every batch anchor (and the manifest) must carry an RFC 3161 token that
    verifies with its roots. ``anchor_window``: the deployment's anchor window, when the
    auditor knows it (the manifest's own otherwise)."""
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
    except (ValueError, KeyError, TypeError, RecursionError):  # RecursionError: JSON nested past any bundle's
        return BundleCheck(False, ["manifest.json is not a manifest"], None)
    if manifest.get("format") != FORMAT:
        return BundleCheck(False, [f"manifest.json: format {manifest.get('format')!r}, not {FORMAT}"], None)
    required = {"definitions.json", "snapshots.json", "approvals.json", "seals.json", "audit.json", "proofs.json"}
    problems += [f"{name}: not in the manifest" for name in sorted(required - set(listed))]
    damaged = {p.split(":", 1)[0] for p in problems}
    for name, want in sorted(listed.items()):
        if name in damaged:
            continue
        got = "sha256:" + hashlib.sha256(files[name]).hexdigest() if name in files else None
        if got != want:
            problems.append(f"{name}: {'missing' if got is None else 'does not match the manifest'}")
    for name in sorted(set(files) - set(listed) - set(OUTSIDE_MANIFEST)):
        problems.append(f"{name}: not listed in the manifest")
    if timestamps is not None:
        problems += _stamp_problems(files, manifest, timestamps)
    signed_by = None
    if public_keys:
        if "manifest.sig" not in files:
            problems.append("manifest.sig: missing, and a signature is required")
        else:
            roots = {k: signing.public_key(v, field=k) for k, v in public_keys.items()}
            message = "sha256:" + hashlib.sha256(files["manifest.json"]).hexdigest()
            try:
                signed_by = signing.verify(message, json.loads(files["manifest.sig"]), roots, what="the manifest")
            except (ValidationError, ValueError, RecursionError) as exc:
                problems.append(f"manifest.sig: {type(exc).__name__ if isinstance(exc, RecursionError) else exc}")
    if not problems:
        canonical = pack(files)
        if canonical != data:
            at = next(
                (i for i, (a, b) in enumerate(zip(canonical, data, strict=False)) if a != b),
                min(len(canonical), len(data)),
            )
            problems.append(f"{_placed(data, members, at)}: the archive differs from the exported bytes at offset {at}")
    notes: list[str] = []
    anchors = stamps = 0
    if not problems:
        try:
            anchor_keys = public_keys if signed_by is None else {**_vouched(files), **(public_keys or {})}
            checked = check_contents(files, anchor_keys, timestamps, manifest=manifest, window=anchor_window)
            problems += checked.problems
            notes, anchors, stamps = checked.notes, checked.anchors_checked, checked.timestamps_checked
        except (ValueError, KeyError, TypeError, AttributeError, OverflowError, RecursionError) as exc:
            # signed (or allowed unsigned), but not a bundle's shape: a nested or out-of-range value
            said = f"{type(exc).__name__}: {str(exc)[:200]}"
            problems.append(f"the bundle's files are not what an export writes ({said})")
    return BundleCheck(not problems, problems, signed_by, notes, anchors, stamps)
