"""The offline-seed archive (seed 001 §7): a tenant's packs as one ZIP, checkable offline.

Layout, every path made of digests and fixed names only (no user text becomes a path):

- ``packs/<hex>.json``: a pack's canonical manifest; ``<hex>`` is the pack digest;
- ``blobs/<hex>``: a definition's canonical JSON; ``<hex>`` is the SHA-256 of the bytes;
- ``catalog-manifest.json``: the packs (identity, digest, origin, entry) and every entry's
  SHA-256;
- ``catalog-manifest.json.dsse.json``: a DSSE envelope over the manifest (``packs.dsse``), when
  the exporting deployment has an evidence key.

The ZIP is the evidence bundles' canonical archive (``export.bundles.pack``: sorted, stored,
fixed dates), so ``check_archive`` re-packs what it read and compares every byte: a change
anywhere, even in ZIP metadata, is found. Nothing here touches a database.
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
import zlib
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from jobgate.core.canonical import canonical_json, isoformat_utc
from jobgate.core.errors import ValidationError
from jobgate.core.packs import PackRecord, blob_digest, blob_entry, check_manifest, pack_digest
from jobgate.export.bundles import pack
from jobgate.export.scope import json_file
from jobgate.packs import dsse

FORMAT = "jobgate-offline-seed/1"
MANIFEST = "catalog-manifest.json"
ENVELOPE = "catalog-manifest.json.dsse.json"
MAX_ARCHIVE_BYTES = 64 << 20


@dataclass(frozen=True)
class SeedPack:
    """One verified pack of an archive: its manifest (as ``core.packs``) and its blobs' bytes."""

    manifest: dict[str, Any]
    digest: str
    blobs: dict[str, bytes]


@dataclass(frozen=True)
class ArchiveCheck:
    """What ``check_archive`` found: ``ok`` only with no problem at all and a trusted signature."""

    problems: list[str]
    signed_by: str | None = None
    packs: list[SeedPack] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems and self.signed_by is not None


def pack_entry(digest: str) -> str:
    return "packs/" + digest.removeprefix("sha256:") + ".json"


def build_archive(
    records: list[PackRecord], blobs: dict[str, bytes], *, exported_at: datetime, signing_key_b64: str | None
) -> bytes:
    """The archive's bytes for ``records`` and the blobs they name (a snapshot's), its manifest
    signed in a DSSE envelope when ``signing_key_b64`` (an Ed25519 private key) is given."""
    files: dict[str, bytes] = {}
    listed = []
    for r in records:
        files[pack_entry(r.digest)] = canonical_json(r.manifest)
        for d in r.manifest["definitions"]:
            files[blob_entry(d["blob"])] = blobs[d["blob"]]
        listed.append({"pack": r.ref.key, "digest": r.digest, "origin": r.origin, "entry": pack_entry(r.digest)})
    manifest = {
        "format": FORMAT,
        "exported_at": isoformat_utc(exported_at),
        "packs": listed,
        "entries": {name: blob_digest(data) for name, data in sorted(files.items())},
    }
    files[MANIFEST] = json_file(manifest)
    if signing_key_b64 is not None:
        files[ENVELOPE] = json_file(dsse.sign(files[MANIFEST], signing_key_b64))
    return pack(files)


def _members(data: bytes) -> tuple[dict[str, bytes], list[str]]:
    """The archive's files, and a problem for each that cannot be read."""
    if len(data) > MAX_ARCHIVE_BYTES:
        return {}, [f"the archive is larger than {MAX_ARCHIVE_BYTES} bytes"]
    try:
        z = zipfile.ZipFile(io.BytesIO(data))
        members = z.infolist()
    except (zipfile.BadZipFile, OSError, ValueError, RuntimeError, NotImplementedError):
        return {}, ["not a readable ZIP archive"]
    files: dict[str, bytes] = {}
    problems = []
    # Exports store their entries uncompressed (the re-pack check would refuse anything else),
    # so a compressed entry is refused unread: no entry can expand past what was sent.
    packed = [i.filename for i in members if i.compress_type != zipfile.ZIP_STORED]
    if packed:
        return {}, [f"{packed[0]}: compressed; an offline seed stores its entries uncompressed"]
    if sum(i.file_size for i in members) > MAX_ARCHIVE_BYTES:
        return {}, [f"the archive's entries are larger than {MAX_ARCHIVE_BYTES} bytes"]
    for info in members:
        try:
            files[info.filename] = z.read(info)
        except (zipfile.BadZipFile, OSError, ValueError, EOFError, zlib.error, RuntimeError, NotImplementedError):
            problems.append(f"{info.filename}: damaged in the archive")
    return files, problems


def check_archive(data: bytes, roots: dict[str, Ed25519PublicKey]) -> ArchiveCheck:
    """Verify an archive offline against ``roots`` (trusted keys by derived id): the envelope's
    signature by a root over the manifest, every entry against the manifest, nothing unlisted,
    each pack's bytes against its digest and shape, each blob against its name, and the archive
    byte for byte against the canonical re-pack of its files."""
    files, problems = _members(data)
    if MANIFEST not in files:
        return ArchiveCheck([*problems, f"{MANIFEST} is missing"])
    signed_by = None
    if ENVELOPE not in files:
        problems.append(f"{ENVELOPE}: missing, and only a signed archive is imported")
    else:
        try:
            signed_by = dsse.verify(files[ENVELOPE], files[MANIFEST], roots)
        except ValidationError as exc:
            problems.append(f"{ENVELOPE}: {exc.message}")
    try:
        manifest = json.loads(files[MANIFEST])
        entries: dict[str, str] = manifest["entries"]
        listed: list[dict[str, str]] = manifest["packs"]
        if manifest["format"] != FORMAT or not isinstance(entries, dict) or not isinstance(listed, list):
            raise TypeError
    except (ValueError, KeyError, TypeError, RecursionError):
        return ArchiveCheck([*problems, f"{MANIFEST}: not a {FORMAT} manifest"], signed_by)
    damaged = {p.split(":", 1)[0] for p in problems}
    for name in sorted((set(entries) | set(files)) - {MANIFEST, ENVELOPE} - damaged):  # a damaged file is named once
        if name not in entries:
            problems.append(f"{name}: not listed in the manifest")
        elif name not in files:
            problems.append(f"{name}: listed in the manifest, missing from the archive")
        elif blob_digest(files[name]) != entries[name]:
            problems.append(f"{name}: does not match its digest in the manifest")
    if problems:
        return ArchiveCheck(problems, signed_by)
    seeds = []
    for i, item in enumerate(listed):
        try:
            seeds.append(_seed(files, item, f"packs[{i}]"))
        except (ValidationError, KeyError, TypeError, ValueError, RecursionError) as exc:
            problems.append(exc.message if isinstance(exc, ValidationError) else f"packs[{i}]: not a pack entry")
    if not problems and pack(files) != data:
        problems.append("the archive's bytes differ from the canonical archive of its files")
    return ArchiveCheck(problems, signed_by, seeds if not problems else [])


def _seed(files: dict[str, bytes], item: dict[str, str], where: str) -> SeedPack:
    """One listed pack, its entry's bytes checked against its digest and its blobs against theirs."""
    if not isinstance(item, dict) or not all(isinstance(item.get(k), str) for k in ("digest", "entry", "pack")):
        raise TypeError(where)  # a signed manifest may still list a malformed entry
    digest = item["digest"]
    if item["entry"] != pack_entry(digest) or item["entry"] not in files:
        raise ValidationError(f"{where}: its entry is not packs/<digest>.json", field=where)
    manifest = json.loads(files[item["entry"]])
    ref = check_manifest(manifest, where)
    if ref.key != item["pack"] or pack_digest(manifest) != digest or canonical_json(manifest) != files[item["entry"]]:
        raise ValidationError(f"{where}: {item['pack']} does not match its digest {digest}", field=where)
    blobs = {}
    for d in manifest["definitions"]:
        name = blob_entry(d["blob"])
        if name not in files or blob_digest(files[name]) != d["blob"]:
            raise ValidationError(f"{where}: blob {d['blob']} is missing or altered", field=where)
        blobs[d["blob"]] = files[name]
    return SeedPack(manifest, digest, blobs)


def archive_digest(data: bytes) -> str:
    """The archive's own SHA-256 (the target an import's audit entries name)."""
    return hashlib.sha256(data).hexdigest()
