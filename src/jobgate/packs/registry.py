"""The pack registry's operations: publish, list, export an offline seed, import one.

Publishing snapshots a tenant's current versions of the named definitions, and the approvals
of exactly those digests, into a pack ``<id>@<version>`` (``core.packs``). Export reads every
pack and blob of the caller's tenant in one statement (``store.sql.packs.snapshot``) and packs
them with ``packs.archive``, signed with the deployment's evidence key when it has one.

Import is the careful half. In order, and with nothing written before the last step:

1. no trust root configured (``packs.trusted_keys``): ``UnavailableError`` (503 at the API);
2. the archive is checked (``archive.check_archive``): a trusted signature, every byte;
3. each definition is parsed with today's configuration and must hash to its recorded digest;
4. each pack identity must be new or the same digest (``PackDigestConflict``, 409).

Any refusal is written to the audit log (``offline_seed.import_refused``) and nothing else.
Then the definitions go through the ordinary apply (``Engine.apply_definitions``: every rule,
the audit, their own schedules stored paused) and the packs are registered. Definitions arrive
unapproved, unless the deployment sets ``packs.import_approvals`` and the verified archive
carries approvals of those very digests: then each is approved through ``service.approvals``
(four eyes and all), by an actor that names the signing key.

Applying and registering are two transactions: an apply of the same digests is idempotent, so
an import that fails between them is completed by importing the same archive again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from jobgate.core.canonical import canonical_json, isoformat_utc
from jobgate.core.errors import (
    ConflictError,
    GovernanceRefusal,
    NotFoundError,
    UnavailableError,
    ValidationError,
)
from jobgate.core.models import DefinitionStatus
from jobgate.core.packs import (
    PackRecord,
    PackRef,
    blob_digest,
    check_same,
    pack_digest,
    pack_manifest,
    version_order,
)
from jobgate.definitions.schema import LoadedDefinition, parse_definition
from jobgate.evidence import keys as evidence_keys
from jobgate.packs import archive, dsse
from jobgate.service import approvals, audit
from jobgate.service.engine import Engine


class SeedRefused(ValidationError):
    """An offline seed that is not imported: unverified, altered, or not what it claims."""

    code = "offline_seed_refused"


@dataclass(frozen=True)
class Published:
    record: PackRecord
    created: bool  # False: the same identity and digest was stored already


@dataclass(frozen=True)
class Imported:
    signed_by: str
    packs: list[Published]
    definitions: list[dict[str, Any]]  # job_definition_id, version, digest, created
    approved: list[str]  # definition ids approved from the archive's approvals
    skipped: list[dict[str, str]] = field(default_factory=list)  # job_definition_id, reason: left as they are here
    notes: list[str] = field(default_factory=list)  # what a person should know of what was applied


def publish(
    engine: Engine, tenant_id: str, ref: PackRef, job_definition_ids: Sequence[str], *, actor: str
) -> Published:
    """Store ``ref`` holding the current version of each named definition of ``tenant_id`` and
    their live approvals; the same identity and content again is a no-op, other content a 409."""
    if not job_definition_ids:
        raise ValidationError("a pack carries at least one definition", field="definitions")
    now = engine.clock.now()
    with engine.store.write(tenant_id=tenant_id) as tx:
        definitions, approved, blobs = [], [], {}
        for job in sorted(set(job_definition_ids)):
            stored = tx.definition_get(tenant_id, job, None)
            if stored is None:
                raise NotFoundError(f"no job definition {job!r}", field="definitions")
            content = canonical_json(stored.content)
            blob = blob_digest(content)
            blobs[blob] = content
            definitions.append({"job_definition_id": job, "digest": stored.digest, "blob": blob})
            a = tx.approval_get(tenant_id, job, stored.digest)
            if a is not None and a.revoked_at is None:
                approved.append(
                    {
                        "job_definition_id": job,
                        "digest": stored.digest,
                        "approved_by": a.approved_by,
                        "approved_at": isoformat_utc(a.approved_at),
                    }
                )
        manifest = pack_manifest(ref, definitions, approved)
        record = PackRecord(tenant_id, ref, pack_digest(manifest), manifest, "publish", now, actor)
        existing = tx.packs.get(tenant_id, ref)
        if not check_same(None if existing is None else existing.digest, ref, record.digest):
            return Published(existing or record, False)
        tx.packs.put(record, blobs)
        audit.record(
            tx,
            audit.event(
                tenant_id, actor, "pack.published", "pack", ref.key, now,
                payload={"digest": record.digest, "definitions": [d["job_definition_id"] for d in definitions]},
            ),
        )  # fmt: skip
    return Published(record, True)


def list_packs(engine: Engine, tenant_id: str) -> list[PackRecord]:
    with engine.store.read(tenant_id=tenant_id) as tx:
        return tx.packs.of(tenant_id)


def export_seed(engine: Engine, tenant_id: str, *, actor: str) -> bytes:
    """The offline-seed archive of ``tenant_id``'s registry, from one snapshot; the export is
    audited (``offline_seed.exported``) with the archive's digest."""
    with engine.store.read(tenant_id=tenant_id) as tx:
        snap = tx.packs.snapshot(tenant_id)
    signer = evidence_keys.signer_for(engine.config)
    now = engine.clock.now()
    data = archive.build_archive(
        snap.packs, snap.blobs, exported_at=now, signing_key_b64=None if signer is None else signer.private_b64
    )
    payload = {"packs": [p.ref.key for p in snap.packs], "signed": signer is not None}
    audit.record_now(
        engine,
        audit.event(tenant_id, actor, "offline_seed.exported", "offline_seed", archive.archive_digest(data), now,
                    payload=payload),
    )  # fmt: skip
    return data


def trust_roots(engine: Engine) -> dict[str, Any]:
    """The import's trust roots by derived key id; none configured is ``UnavailableError``."""
    roots = dsse.trust_roots(engine.config.packs.trusted_keys, "packs.trusted_keys")
    if not roots:
        raise UnavailableError(
            "no trust root for offline seeds is configured (packs.trusted_keys): nothing can be verified",
            field="packs.trusted_keys",
        )
    return roots


def import_seed(
    engine: Engine,
    tenant_id: str,
    data: bytes,
    *,
    actor: str,
    lineage: tuple[str, ...] = (),
    admit: Callable[[LoadedDefinition], None] | None = None,
) -> Imported:
    """Verify ``data`` and import it into ``tenant_id`` (the steps in the module's docstring).
    ``admit`` is the face's own check of each parsed definition (the API refuses raw handlers
    and definitions the caller's token may not change); a ``ValidationError`` it raises is a
    refusal like any other."""
    roots = trust_roots(engine)
    target = archive.archive_digest(data)
    try:
        checked = archive.check_archive(data, roots)
        if not checked.ok:
            raise SeedRefused("the archive is not imported: " + "; ".join(checked.problems), field="archive")
        assert checked.signed_by is not None
        ordered = sorted(checked.packs, key=lambda p: (p.manifest["pack_id"], version_order(p.manifest["version"])))
        loaded, skipped, notes = _to_apply(engine, tenant_id, _definitions(engine, ordered, admit))
        for item in loaded:  # as POST /definitions: a document naming another tenant is not this one's
            named = item.definition.content.get("tenant_id")
            if named is not None and named != tenant_id:
                raise SeedRefused(f"{item.source}: names tenant {named!r}, not {tenant_id!r}", field="archive")
        fresh = _new_packs(engine, tenant_id, checked.packs, actor)
        # All or none, like ``jobgate apply``: a refusal here (a workflow naming a job the
        # archive lacks, an unsigned definition where signatures are required) writes nothing
        # and is audited like the others.
        applied = engine.apply_definitions(loaded, tenant_id=tenant_id, applied_by=actor, applied_lineage=lineage)
    except (ValidationError, ConflictError, GovernanceRefusal) as exc:
        now = engine.clock.now()
        audit.record_now(
            engine,
            audit.event(tenant_id, actor, "offline_seed.import_refused", "offline_seed", target, now,
                        reason=f"{exc.source}: {exc.message}" if exc.source else exc.message,
                        payload={"code": exc.code, "field": exc.field, "source": exc.source}),
        )  # fmt: skip
        raise
    now = engine.clock.now()
    with engine.store.write(tenant_id=tenant_id) as tx:
        registered = []
        for record, blobs in fresh:
            existing = tx.packs.get(tenant_id, record.ref)
            if check_same(None if existing is None else existing.digest, record.ref, record.digest):
                tx.packs.put(record, blobs)
            registered.append(Published(record, existing is None))
        audit.record(
            tx,
            audit.event(tenant_id, actor, "offline_seed.imported", "offline_seed", target, now,
                        payload={"signed_by": checked.signed_by, "packs": [p.record.ref.key for p in registered],
                                 "definitions": [a.job_definition_id for a in applied]}),
        )  # fmt: skip
    left = {item["job_definition_id"] for item in skipped}
    approved = _approve(engine, tenant_id, checked, actor, left) if engine.config.packs.import_approvals else []
    definitions = [
        {"job_definition_id": a.job_definition_id, "version": a.version, "digest": a.digest, "created": a.created}
        for a in applied
    ]
    return Imported(checked.signed_by, registered, definitions, approved, skipped, notes)


def _definitions(
    engine: Engine, seeds: list[archive.SeedPack], admit: Callable[[LoadedDefinition], None] | None
) -> list[tuple[LoadedDefinition, PackRef]]:
    """Every carried definition parsed with this deployment's configuration, each hashing to the
    digest its pack recorded (a definition this host reads differently is refused, not applied),
    with the newest pack carrying it. Content carried by several packs is placed where its
    newest pack puts it, so a definition's contents come in the order its newest packs carry
    them, the last its current one: a pack that rolls a definition back to earlier content
    ends on that content."""
    out: dict[tuple[str, str], tuple[LoadedDefinition, PackRef]] = {}
    for seed in seeds:
        ref = PackRef(seed.manifest["pack_id"], seed.manifest["version"])
        for d in seed.manifest["definitions"]:
            source = f"{ref.key}:{d['job_definition_id']}"
            try:
                document = json.loads(seed.blobs[d["blob"]])
            except (ValueError, RecursionError):
                raise SeedRefused(f"{source}: not a JSON definition", field="archive") from None
            loaded = parse_definition(document, source, engine.config)
            if loaded.job_definition_id != d["job_definition_id"] or loaded.digest != d["digest"]:
                raise SeedRefused(
                    f"{source}: reads here as {loaded.job_definition_id} {loaded.digest}, not {d['digest']}",
                    field="archive",
                )
            if admit is not None:
                admit(loaded)
            out.pop((loaded.job_definition_id, loaded.digest), None)
            out[(loaded.job_definition_id, loaded.digest)] = (loaded, ref)
    return list(out.values())


def _to_apply(
    engine: Engine, tenant_id: str, carried: list[tuple[LoadedDefinition, PackRef]]
) -> tuple[list[LoadedDefinition], list[dict[str, str]], list[str]]:
    """The carried definitions to apply, the definitions left as they are here (with why), and
    notes on what was applied (a definition packs of different ids carry differently).

    A definition is left alone when this host suspended or retired it (a local decision stands
    across imports, as a local revocation does: resume it here and apply the content wanted, or
    import a newer pack), and when the newest pack carrying it was imported here already (an
    older archive imported again: whatever this host did since stands). Otherwise its contents
    are applied in order, the newest pack's last, which may be content this host stores as an
    earlier version (the exporter rolled it back)."""
    newest: dict[str, PackRef] = {}
    by_pack: dict[str, dict[str, str]] = {}  # job -> pack id -> the digest its newest version carries
    for item, ref in carried:
        newest[item.job_definition_id] = ref
        by_pack.setdefault(item.job_definition_id, {})[ref.pack_id] = item.digest
    skipped: list[dict[str, str]] = []
    notes: list[str] = []
    with engine.store.read(tenant_id=tenant_id) as tx:
        leave: set[str] = set()
        unchanged: dict[str, str] = {}  # job -> its current digest, for a job nothing newer is carried for
        for job, ref in newest.items():
            current = tx.definition_get(tenant_id, job)
            if current is not None and current.status is not DefinitionStatus.ACTIVE:
                leave.add(job)
                skipped.append(
                    {
                        "job_definition_id": job,
                        "reason": f"{current.status.value} here: {ref.key}'s content is not applied"
                        + (" (retirement is final)" if current.status is DefinitionStatus.RETIRED else
                           " (to take it: resume it here and apply that content, or import a newer pack)"),
                    }
                )  # fmt: skip
            elif tx.packs.get(tenant_id, ref) is not None and current is not None:
                unchanged[job] = current.digest  # its newest pack was imported before: nothing newer for it
        for job, packs in sorted(by_pack.items()):
            if job not in leave and job not in unchanged and len(set(packs.values())) > 1:
                notes.append(
                    f"{job}: carried with different content by packs {', '.join(sorted(packs))}: the content of"
                    f" {newest[job].key} is applied (packs are ordered by id, then version; versions of different"
                    " packs are not compared): apply the one you want with jobgate apply"
                )
        apply = [
            item
            for item, _ in carried
            if item.job_definition_id not in leave
            and unchanged.get(item.job_definition_id, item.digest) == item.digest  # the current one: shown unchanged
        ]
    return apply, skipped, notes


def _new_packs(
    engine: Engine, tenant_id: str, seeds: list[archive.SeedPack], actor: str
) -> list[tuple[PackRecord, dict[str, bytes]]]:
    """The archive's packs as this tenant's records; a stored identity with another digest
    refuses the whole import (``PackDigestConflict``)."""
    now = engine.clock.now()
    out = []
    with engine.store.read(tenant_id=tenant_id) as tx:
        for seed in seeds:
            ref = PackRef(seed.manifest["pack_id"], seed.manifest["version"])
            existing = tx.packs.get(tenant_id, ref)
            check_same(None if existing is None else existing.digest, ref, seed.digest)
            out.append((PackRecord(tenant_id, ref, seed.digest, seed.manifest, "import", now, actor), seed.blobs))
    return out


def _revoked_here(engine: Engine, tenant_id: str, job_definition_id: str, digest: str) -> bool:
    """Whether this host revoked an approval of this very content: an archive (even the one it
    came from, imported again) does not undo that; only an approval given here does."""
    with engine.store.read(tenant_id=tenant_id) as tx:
        history = tx.approvals_list(tenant_id, job_definition_id)
    return any(a.digest == digest and a.revoked_at is not None for a in history) and not any(
        a.digest == digest and a.revoked_at is None for a in history
    )


def _approve(engine: Engine, tenant_id: str, checked: archive.ArchiveCheck, actor: str, left: set[str]) -> list[str]:
    """Approve what the verified archive's approvals name, each through the ordinary approval
    (a refusal there, four eyes for one, leaves that definition unapproved). A definition the
    import left as it is here (``left``: suspended or retired here, say) is left unapproved too:
    a local decision stands, and resuming it later must not run it on the pack's approval."""
    done = []
    approver = f"offline-seed:{checked.signed_by}"
    for seed in checked.packs:
        for a in seed.manifest["approvals"]:
            if a["job_definition_id"] in left:
                continue
            if _revoked_here(engine, tenant_id, a["job_definition_id"], a["digest"]):
                continue  # a revocation made here stands until someone here approves again
            note = f"approved by {a['approved_by']} at {a['approved_at']} where exported; imported by {actor}"
            try:
                approvals.approve(
                    engine, tenant_id, a["job_definition_id"], actor=approver, note=note, digest=a["digest"]
                )
            except (GovernanceRefusal, ConflictError):
                continue
            done.append(a["job_definition_id"])
    return done
