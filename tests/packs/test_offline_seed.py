"""The pack registry and the offline seed, end to end: published on one deployment, exported,
imported into a second on the other backend (SQLite -> PostgreSQL and back, by the ``engine``
fixture's two runs), and every way an archive can be wrong refused with nothing but the refusal
written."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from tests.conftest import _truncate_pg
from tests.helpers import count, make_config

from jobgate.core.errors import UnavailableError
from jobgate.core.packs import PackDigestConflict, PackRef, parse_ref
from jobgate.definitions import parse_definition
from jobgate.evidence import keys as evidence_keys
from jobgate.export.bundles import pack
from jobgate.governance import signing
from jobgate.packs import archive, dsse, registry
from jobgate.service import approvals
from jobgate.service.engine import Engine
from jobgate.store.sqlstore import Store
from jobgate.testing import connection

REF = PackRef("nightly", "1.0.0")


def _doc(job: str, body: str = "print('hello')", **extra: Any) -> dict[str, Any]:
    return {"job_definition_id": job, "job_class": "MAINTENANCE_JOB", "trigger_type": "manual", "runner": "py",
            "body": body, **extra}  # fmt: skip


def _define(engine: Engine, tenant: str, *docs: dict[str, Any], approve: bool = True) -> None:
    loaded = [parse_definition(d, "test", engine.config) for d in docs]
    engine.apply_definitions(loaded, tenant_id=tenant, applied_by="dev-author")
    for item in loaded if approve else []:
        approvals.approve(engine, tenant, item.job_definition_id, actor="dev-reviewer")


@pytest.fixture
def source(engine: Engine) -> Engine:
    """The exporting deployment, with an evidence key (``jobgate keys evidence --create``)."""
    evidence_keys.create(engine.config)
    return engine


@pytest.fixture
def make_target(request: pytest.FixtureRequest, database_url: str, tmp_path: Path) -> Iterator[Any]:
    """A factory of the importing deployment, on the backend the source is not on."""
    made: list[Store] = []

    def make(trusted: list[str] | None = None, **packs: Any) -> Engine:
        if database_url.startswith("sqlite"):
            url: str = request.getfixturevalue("pg_schema_url")
            _truncate_pg(url)
        else:
            path = tmp_path / f"target-{len(made)}.db"
            shutil.copyfile(request.getfixturevalue("sqlite_template"), path)
            url = f"sqlite:///{path}"
        base = tmp_path / f"target-{len(made)}"
        base.mkdir()
        section = {"trusted_keys": trusted or [], **packs}
        store = Store(url)
        made.append(store)
        return Engine(store, make_config(base, packs=section))

    yield make
    for store in made:
        store.dispose()


def _public(engine: Engine) -> str:
    signer = evidence_keys.signer_for(engine.config)
    assert signer is not None
    return signer.public_b64


def _seed(source: Engine) -> bytes:
    _define(source, "acme", _doc("report-a"), _doc("report-b", body="print('b')"))
    registry.publish(source, "acme", REF, ["report-a", "report-b"], actor="dev-admin")
    return registry.export_seed(source, "acme", actor="dev-admin")


def _digests(engine: Engine, tenant: str) -> dict[str, str]:
    with engine.store.read(tenant_id=tenant) as tx:
        return {d.job_definition_id: d.digest for d in tx.definitions_list(tenant)}


def _written(engine: Engine) -> tuple[int, ...]:
    return tuple(count(engine, t) for t in ("definitions", "packs", "pack_blobs", "definition_approvals", "schedules"))


def _refusals(engine: Engine, tenant: str = "acme") -> int:
    return count(engine, "audit_log", f"tenant_id = '{tenant}' AND action = 'offline_seed.import_refused'")


def test_an_export_imports_on_the_other_backend_with_identical_digests(source: Engine, make_target: Any) -> None:
    data = _seed(source)
    target = make_target([_public(source)])
    done = registry.import_seed(target, "acme", data, actor="prod-admin")
    assert _digests(target, "acme") == _digests(source, "acme")
    assert [p.record.ref.key for p in done.packs] == ["nightly@1.0.0"]
    assert done.signed_by == dsse.key_id(signing.public_key(_public(source), field="k"))
    [stored] = registry.list_packs(target, "acme")
    [published] = registry.list_packs(source, "acme")
    assert (stored.digest, stored.origin, stored.manifest) == (published.digest, "import", published.manifest)
    # imported definitions arrive unapproved by default, whatever the archive carries
    assert [a["job_definition_id"] for a in stored.manifest["approvals"]] == ["report-a", "report-b"]
    assert count(target, "definition_approvals") == 0 and done.approved == []
    # the same archive again: idempotent, nothing new
    before = _written(target)
    again = registry.import_seed(target, "acme", data, actor="prod-admin")
    assert [p.created for p in again.packs] == [False] and _written(target) == before
    actions = [r[0] for r in _audit(target, "acme")]
    assert actions.count("offline_seed.imported") == 2


def _audit(engine: Engine, tenant: str) -> list[tuple[str, str]]:
    with engine.store.read() as tx:
        q = text("SELECT action, target_id FROM audit_log WHERE tenant_id = :t ORDER BY seq")
        return [(r[0], r[1]) for r in connection(tx).execute(q, {"t": tenant})]


def test_approvals_carried_by_a_trusted_archive_apply_only_when_the_deployment_allows(
    source: Engine, make_target: Any
) -> None:
    data = _seed(source)
    target = make_target([_public(source)], import_approvals=True)
    done = registry.import_seed(target, "acme", data, actor="prod-admin")
    assert sorted(done.approved) == ["report-a", "report-b"]
    assert approvals.status(target, "acme", "report-a").approved
    # found by a review: the same archive imported again re-approved what this host had revoked
    approvals.revoke(target, "acme", "report-a", actor="prod-admin", reason="code review found a bug")
    again = registry.import_seed(target, "acme", data, actor="prod-admin")
    assert "report-a" not in again.approved and not approvals.status(target, "acme", "report-a").approved
    assert approvals.status(target, "acme", "report-b").approved


def _files(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return {n: z.read(n) for n in z.namelist()}


def _one_byte_of_a_blob(data: bytes) -> bytes:
    name = next(n for n in _files(data) if n.startswith("blobs/"))
    at = data.index(_files(data)[name]) + 5
    return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :]


def _rewritten_blob(data: bytes) -> bytes:
    """One byte of an entry changed and the ZIP rebuilt around it: only the digests can tell."""
    files = _files(data)
    name = next(n for n in files if n.startswith("blobs/"))
    files[name] = files[name].replace(b"print", b"prinT")
    return pack(files)


def _manifest_edit(data: bytes) -> bytes:
    files = _files(data)
    manifest = json.loads(files[archive.MANIFEST])
    manifest["packs"][0]["origin"] = "publish-edited"
    files[archive.MANIFEST] = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()
    return pack(files)


def _stripped(data: bytes) -> bytes:
    files = _files(data)
    del files[archive.ENVELOPE]
    return pack(files)


def _foreign(data: bytes) -> bytes:
    files = _files(data)
    other = signing.generate("foreign")
    files[archive.ENVELOPE] = json.dumps(dsse.sign(files[archive.MANIFEST], other.private_b64)).encode()
    return pack(files)


def _swapped_payload(data: bytes) -> bytes:
    """A genuine envelope of another manifest (an older export) beside an edited one."""
    files = _files(data)
    envelope = json.loads(files[archive.ENVELOPE])
    manifest = json.loads(files[archive.MANIFEST])
    manifest["exported_at"] = "2000-01-01T00:00:00Z"
    files[archive.MANIFEST] = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()
    files[archive.ENVELOPE] = json.dumps(envelope).encode()
    return pack(files)


def _deflated_bomb(data: bytes) -> bytes:
    """The archive's files plus one compressed entry that would expand to 20 MB if read."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for name, content in _files(data).items():
            z.writestr(name, content)
        z.writestr("blobs/bomb", b"\0" * 20_000_000, compress_type=zipfile.ZIP_DEFLATED)
    return out.getvalue()


TAMPERS = {
    "a compressed entry (a ZIP bomb)": (_deflated_bomb, "compressed; an offline seed stores its entries uncompressed"),
    "one byte of one entry": (_one_byte_of_a_blob, "damaged in the archive"),
    "a manifest edit": (_manifest_edit, "signs another manifest"),
    "one byte of one entry, its CRC fixed": (_rewritten_blob, "does not match its digest"),
    "a stripped signature": (_stripped, "missing, and only a signed archive is imported"),
    "a foreign signature": (_foreign, "none of them a trust root"),
    "an envelope of another manifest": (_swapped_payload, "signs another manifest"),
    "not a zip": (lambda d: b"PK\x03\x04 nothing", "not a readable ZIP"),
}


@pytest.mark.parametrize("tamper", list(TAMPERS))
def test_a_tampered_archive_is_refused_audited_and_writes_nothing(
    source: Engine, make_target: Any, tamper: str
) -> None:
    edit, reason = TAMPERS[tamper]
    data = edit(_seed(source))
    target = make_target([_public(source)])
    before = _written(target)
    with pytest.raises(registry.SeedRefused) as refused:
        registry.import_seed(target, "acme", data, actor="prod-admin")
    assert reason in refused.value.message
    if tamper == "one byte of one entry":  # named once, as damaged, not also as missing (a review)
        assert "missing from the archive" not in refused.value.message
    assert _written(target) == before
    assert _refusals(target) == 1
    assert _audit(target, "acme")[-1] == ("offline_seed.import_refused", archive.archive_digest(data))


@pytest.mark.parametrize(
    "edit",
    [
        lambda item: {**item, "digest": 5},
        lambda item: {**item, "entry": ["packs/x.json"]},
        lambda item: {**item, "pack": None},
        lambda item: "a pack",
        lambda item: [item],
    ],
    ids=["digest a number", "entry a list", "pack null", "a string", "a list"],
)
def test_a_signed_manifest_with_a_malformed_pack_entry_is_refused_audited_and_writes_nothing(
    source: Engine, make_target: Any, edit: Any
) -> None:
    """Signed by a trusted key, yet its listing malformed: refused naming the entry, as every
    other malformed manifest is (found by a review: a number as digest crashed the import)."""
    files = _files(_seed(source))
    manifest = json.loads(files[archive.MANIFEST])
    manifest["packs"][0] = edit(manifest["packs"][0])
    files[archive.MANIFEST] = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()
    signer = evidence_keys.signer_for(source.config)
    assert signer is not None
    files[archive.ENVELOPE] = json.dumps(dsse.sign(files[archive.MANIFEST], signer.private_b64)).encode()
    data = pack(files)
    target = make_target([_public(source)])
    before = _written(target)
    with pytest.raises(registry.SeedRefused) as refused:
        registry.import_seed(target, "acme", data, actor="prod-admin")
    assert "packs[0]" in refused.value.message
    assert _written(target) == before
    assert _audit(target, "acme")[-1] == ("offline_seed.import_refused", archive.archive_digest(data))


def test_a_verified_archive_checks_clean_offline(source: Engine) -> None:
    data = _seed(source)
    roots = dsse.trust_roots([_public(source)], "roots")
    checked = archive.check_archive(data, roots)
    assert checked.ok and checked.problems == [] and len(checked.packs) == 1
    assert all(n.startswith(("blobs/", "packs/", "catalog-manifest")) for n in _files(data))
    assert not any("report-a" in n or "nightly" in n for n in _files(data))  # no user text in paths


def test_the_same_identity_with_another_digest_is_a_conflict(source: Engine, make_target: Any) -> None:
    data = _seed(source)
    _define(source, "acme", _doc("report-a", body="print('changed')"))
    with pytest.raises(PackDigestConflict) as conflict:
        registry.publish(source, "acme", REF, ["report-a", "report-b"], actor="dev-admin")
    assert conflict.value.code == "pack_identity_digest_conflict"
    # the importing side: its own nightly@1.0.0 differs from the archive's
    target = make_target([_public(source)])
    _define(target, "acme", _doc("report-a", body="print('prod')"))
    registry.publish(target, "acme", REF, ["report-a"], actor="prod-admin")
    before = _written(target)
    with pytest.raises(PackDigestConflict):
        registry.import_seed(target, "acme", data, actor="prod-admin")
    assert _written(target) == before and _refusals(target) == 1


def test_no_trust_root_is_unavailable(source: Engine, make_target: Any) -> None:
    data = _seed(source)
    target = make_target([])
    with pytest.raises(UnavailableError, match=r"packs\.trusted_keys"):
        registry.import_seed(target, "acme", data, actor="prod-admin")
    assert count(target, "definitions") == 0


def test_an_import_lands_in_the_callers_tenant_only(source: Engine, make_target: Any) -> None:
    data = _seed(source)
    target = make_target([_public(source)])
    registry.import_seed(target, "beta", data, actor="beta-admin")
    assert registry.list_packs(target, "acme") == [] and _digests(target, "acme") == {}
    assert [p.ref.key for p in registry.list_packs(target, "beta")] == ["nightly@1.0.0"]
    assert set(_digests(target, "beta")) == {"report-a", "report-b"}
    # and another tenant's export holds none of beta's packs
    other = registry.export_seed(target, "acme", actor="acme-admin")
    assert json.loads(_files(other)[archive.MANIFEST])["packs"] == []


def test_a_pack_name_is_checked_and_normalized() -> None:
    assert parse_ref("Nightly-Reports@1.2.0+b1") == PackRef("nightly-reports", "1.2.0+b1")
    for bad in ("nightly", "a@b@c", "../x@1", "x@", "x@../1", ""):
        with pytest.raises(Exception, match="pack"):
            parse_ref(bad, "pack")


def test_the_packs_section_is_checked_when_read(tmp_path: Path) -> None:
    from jobgate.core.errors import ValidationError

    with pytest.raises(ValidationError) as bad:
        make_config(tmp_path, packs={"trusted_keys": ["not-a-key"]})
    assert bad.value.field == "packs.trusted_keys[0]"
    with pytest.raises(ValidationError) as unknown:
        make_config(tmp_path, packs={"trust": []})
    assert unknown.value.field == "packs.trust"
    assert make_config(tmp_path).packs.import_approvals is False


def test_the_key_id_is_derived_from_the_key() -> None:
    pair = signing.generate("any-label")
    envelope = dsse.sign(b"{}", pair.private_b64)
    public = signing.public_key(pair.public_b64, field="k")
    assert envelope["signatures"][0]["keyid"] == dsse.key_id(public)
    assert dsse.key_id(public).removeprefix("sha256-") == hashlib.sha256(public.public_bytes_raw()).hexdigest()
    roots = dsse.trust_roots([pair.public_b64], "roots")
    assert dsse.verify(json.dumps(envelope).encode(), b"{}", roots) == dsse.key_id(public)


def test_a_definition_naming_another_tenant_is_refused_and_audited(source: Engine, make_target: Any) -> None:
    """As ``POST /definitions``: an archive's definition that names its tenant lands only there."""
    _define(source, "acme", _doc("report-t", tenant_id="acme"))
    registry.publish(source, "acme", REF, ["report-t"], actor="dev-admin")
    data = registry.export_seed(source, "acme", actor="dev-admin")
    target = make_target([_public(source)])
    before = _written(target)
    with pytest.raises(registry.SeedRefused) as refused:
        registry.import_seed(target, "beta", data, actor="prod-admin")
    assert "names tenant 'acme', not 'beta'" in refused.value.message
    assert _written(target) == before and _refusals(target, "beta") == 1
    assert registry.import_seed(target, "acme", data, actor="prod-admin").definitions  # its own tenant: imported


def test_the_newest_version_of_a_pack_is_current_after_an_import(source: Engine, make_target: Any) -> None:
    """Found by a review: an archive's packs were applied in its manifest's text order (1.0,
    1.10, 1.9), so an older version's content ended current; and an older archive imported
    again turned the definition back. Packs apply in version order, and content this host has
    as an earlier version is not applied again."""
    from jobgate.core.packs import PackRef

    _define(source, "acme", _doc("report-a", body="print('one')"))
    registry.publish(source, "acme", PackRef("p1", "1.0"), ["report-a"], actor="dev-admin")
    first = registry.export_seed(source, "acme", actor="dev-admin")
    for version, body in (("1.9", "print('nine')"), ("1.10", "print('ten')")):
        _define(source, "acme", _doc("report-a", body=body))
        registry.publish(source, "acme", PackRef("p1", version), ["report-a"], actor="dev-admin")
    newest = _digests(source, "acme")["report-a"]
    everything = registry.export_seed(source, "acme", actor="dev-admin")
    target = make_target([_public(source)])
    registry.import_seed(target, "acme", everything, actor="prod-admin")
    assert _digests(target, "acme")["report-a"] == newest
    registry.import_seed(target, "acme", first, actor="prod-admin")  # the older archive again
    assert _digests(target, "acme")["report-a"] == newest


def test_version_order_reads_numbers_as_numbers_and_releases_after_their_candidates() -> None:
    """Found by a review: ``2.0-rc1`` sorted after ``2.0``, so a release candidate imported with
    its release ended current (and, never applied again, stayed so)."""
    from jobgate.core.packs import version_order

    assert sorted(["1.10", "1.9", "1.0", "2", "1.9.1", "1.9-rc1"], key=version_order) == [
        "1.0", "1.9-rc1", "1.9", "1.9.1", "1.10", "2",
    ]  # fmt: skip
    assert sorted(["2.0", "2.0rc1", "2.0-rc2", "2.0.dev1", "2.0.post1"], key=version_order) == [
        "2.0.dev1", "2.0rc1", "2.0-rc2", "2.0", "2.0.post1",
    ]  # fmt: skip
    assert sorted(["release-b", "2.0", "release-a"], key=version_order) == ["2.0", "release-a", "release-b"]
