"""Packs (seed 001 §6): a versioned, content-addressed bundle of definitions and their approvals.

A pack's identity is ``<pack_id>@<version>`` within a tenant, both parts normalized by the one
canonicalizer here (``parse_ref``), so ingest, persistence, export and import agree on it. Its
digest is the SHA-256 of its canonical manifest, and each definition it carries is a blob named
by the SHA-256 of its bytes: an archive names files by digests only, never by user text.

The same identity with a different digest is a conflict (409 ``pack_identity_digest_conflict``);
the same identity and digest is an idempotent duplicate. Everything here is pure.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jobgate.core.canonical import digest
from jobgate.core.errors import ConflictError, ValidationError

PACK_FORMAT = "jobgate-pack/1"
_PACK_ID = re.compile(r"[a-z0-9][a-z0-9._-]{0,99}")
_VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")
_SHA256 = re.compile(r"sha256:[0-9a-f]{64}")
ORIGINS = ("publish", "import")


class PackDigestConflict(ConflictError):
    """The same ``<id>@<version>`` is stored with another digest: identities never change content."""

    code = "pack_identity_digest_conflict"


@dataclass(frozen=True)
class PackRef:
    """A pack's identity within a tenant: ``pack_id`` (lower case) and ``version``."""

    pack_id: str
    version: str

    @property
    def key(self) -> str:
        return f"{self.pack_id}@{self.version}"


@dataclass(frozen=True)
class PackRecord:
    """One stored pack: its identity, digest, manifest, where it came from and who stored it."""

    tenant_id: str
    ref: PackRef
    digest: str
    manifest: dict[str, Any]
    origin: str  # publish | import
    created_at: datetime
    created_by: str


def parse_ref(text: Any, field: str = "pack") -> PackRef:
    """``<pack_id>@<version>`` normalized (the id lower-cased), or a ``ValidationError`` naming
    ``field`` and the rule the text breaks."""
    if not isinstance(text, str) or text.count("@") != 1:
        raise ValidationError("a pack is named <pack_id>@<version>, e.g. nightly-reports@1.2.0", field=field)
    pack_id, version = text.split("@")
    pack_id = pack_id.strip().lower()
    if not _PACK_ID.fullmatch(pack_id):
        raise ValidationError(
            f"pack id {_shown(pack_id)} must be 1-100 of a-z 0-9 . _ - starting with a letter or digit", field=field
        )
    if not _VERSION.fullmatch(version):
        raise ValidationError(
            f"pack version {_shown(version)} must be 1-64 of A-Z a-z 0-9 . _ + - starting with a letter or digit",
            field=field,
        )
    return PackRef(pack_id, version)


def _shown(text: str) -> str:
    """A refused name as the message quotes it: its start only (an answer is not an echo)."""
    return repr(text) if len(text) <= 40 else f"{text[:40]!r}... ({len(text)} characters)"


def blob_digest(data: bytes) -> str:
    """A blob's name and identity: ``sha256:<hex>`` of its bytes."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def blob_entry(blob: str) -> str:
    """The archive path of a blob: its digest's hex only, never a name a user chose."""
    check_digest(blob, "blob")
    return "blobs/" + blob.removeprefix("sha256:")


def check_digest(value: Any, field: str) -> str:
    if not isinstance(value, str) or not _SHA256.fullmatch(value):
        raise ValidationError("must be sha256:<64 lower-case hex digits>", field=field)
    return value


def pack_manifest(
    ref: PackRef, definitions: Sequence[Mapping[str, str]], approvals: Sequence[Mapping[str, str]]
) -> dict[str, Any]:
    """The manifest a pack's digest covers: each definition as ``{job_definition_id, digest,
    blob}`` and each approval carried as ``{job_definition_id, digest, approved_by, approved_at}``,
    both sorted by definition id so the same content always has the same digest."""
    return {
        "format": PACK_FORMAT,
        "pack_id": ref.pack_id,
        "version": ref.version,
        "definitions": sorted((dict(d) for d in definitions), key=lambda d: d["job_definition_id"]),
        "approvals": sorted((dict(a) for a in approvals), key=lambda a: a["job_definition_id"]),
    }


def pack_digest(manifest: Mapping[str, Any]) -> str:
    return digest(dict(manifest))


def check_manifest(manifest: Any, field: str) -> PackRef:
    """A pack manifest's shape (as read from an archive): its identity, each definition naming a
    blob by digest, each approval naming a carried definition's digest."""
    if not isinstance(manifest, dict) or manifest.get("format") != PACK_FORMAT:
        raise ValidationError(f"not a {PACK_FORMAT} manifest", field=field)
    ref = parse_ref(f"{manifest.get('pack_id')}@{manifest.get('version')}", field)
    if manifest.get("pack_id") != ref.pack_id:
        raise ValidationError("pack_id is not in its normal form", field=f"{field}.pack_id")
    definitions = manifest.get("definitions")
    approvals = manifest.get("approvals")
    if not isinstance(definitions, list) or not isinstance(approvals, list):
        raise ValidationError("definitions and approvals must be lists", field=field)
    carried: dict[str, str] = {}
    for i, d in enumerate(definitions):
        where = f"{field}.definitions[{i}]"
        if not isinstance(d, dict) or set(d) != {"job_definition_id", "digest", "blob"}:
            raise ValidationError("a definition is {job_definition_id, digest, blob}", field=where)
        if not isinstance(d["job_definition_id"], str) or d["job_definition_id"] in carried:
            raise ValidationError("a definition id, once per pack", field=f"{where}.job_definition_id")
        carried[d["job_definition_id"]] = check_digest(d["digest"], f"{where}.digest")
        check_digest(d["blob"], f"{where}.blob")
    for i, a in enumerate(approvals):
        where = f"{field}.approvals[{i}]"
        if not isinstance(a, dict) or set(a) != {"job_definition_id", "digest", "approved_by", "approved_at"}:
            raise ValidationError("an approval is {job_definition_id, digest, approved_by, approved_at}", field=where)
        if carried.get(a["job_definition_id"]) != a["digest"]:
            raise ValidationError("approves a definition digest the pack does not carry", field=where)
    return ref


def check_same(existing_digest: str | None, ref: PackRef, wanted_digest: str) -> bool:
    """Whether storing ``ref`` with ``wanted_digest`` is new (True) or an idempotent duplicate
    (False); a different stored digest raises ``PackDigestConflict``."""
    if existing_digest is None:
        return True
    if existing_digest != wanted_digest:
        raise PackDigestConflict(
            f"pack {ref.key} is stored with digest {existing_digest}, not {wanted_digest}: "
            "publish the new content under a new version",
            field="pack",
        )
    return False


def version_order(version: str) -> tuple[int, Any]:
    """A sort key that puts ``1.9`` before ``1.10`` and a pre-release before its release
    (``2.0-rc1``, ``2.0rc1`` before ``2.0``; found by a review: a release candidate applied
    after its release ended current): a version Python's packaging reads (PEP 440) is ordered
    as it orders releases; any other comes after those, by its parts (split on ``. _ + -``),
    numbers compared as numbers and before words. An archive's packs are applied in this order,
    so a definition carried by several versions of a pack ends as its newest."""
    from packaging.version import InvalidVersion, Version

    try:
        return (0, Version(version))
    except InvalidVersion:
        return (1, tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"[._+-]", version)))
