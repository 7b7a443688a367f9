"""Signed anchors: each anchor carries the evidence key's Ed25519 signature over its root, window,
entries, previous chain and times, so a writer who can rewrite the database *and* the sink, but
does not hold the key, is still caught; the public keys are published."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import text
from tests.helpers import config_document, make_config

from jobgate.cli import cli
from jobgate.core.audit import AuditEvent
from jobgate.core.canonical import digest
from jobgate.core.errors import ConfigurationError, ValidationError
from jobgate.evidence import anchors, sinks
from jobgate.evidence import keys as evidence_keys
from jobgate.governance import signing
from jobgate.service import doctor
from jobgate.service.engine import Engine
from jobgate.store.sqlstore import Store
from jobgate.testing import connection

T0 = datetime(2026, 11, 1, 10, 0, tzinfo=UTC)
WINDOW = timedelta(hours=1)


def _world(engine: Engine, tmp_path: Path, *, signed: bool = True) -> sinks.FileSink:
    sink = sinks.FileSink(tmp_path / "anchors.jsonl")
    with engine.store.write() as tx:
        tx.audit_append(
            [AuditEvent("default", "a", "test.fact", "test", str(i), T0 + timedelta(minutes=20 * i)) for i in range(6)]
        )
    signer = evidence_keys.signer_for(engine.config) if signed else None
    with engine.store.write() as tx:
        made = anchors.anchor_due(tx, "default", now=T0 + timedelta(hours=3), window=WINDOW, sink=sink, signer=signer)
    assert len(made) == 2
    return sink


@pytest.fixture
def keyed(database_url: str, tmp_path: Path) -> Iterator[Engine]:
    config = make_config(tmp_path)
    evidence_keys.create(config)
    store = Store(database_url)
    yield Engine(store, config)
    store.dispose()


def _verify(engine: Engine, sink: sinks.FileSink | None = None, **kw: object) -> anchors.Verification:
    keys = evidence_keys.trusted_keys(engine.config)
    with engine.store.read() as tx:
        return anchors.verify_tenant(
            tx,
            "default",
            sink_records=None if sink is None else sink.records(),
            keys=keys,
            **kw,  # type: ignore[arg-type]
        )


def test_anchors_are_signed_and_verify_with_the_published_key(keyed: Engine, tmp_path: Path) -> None:
    sink = _world(keyed, tmp_path)
    result = _verify(keyed, sink)
    assert result.ok and result.unsigned_anchors == 0, result.problem
    copies = sink.records()
    assert all(c["key_id"] == "evidence" and c["signature"] for c in copies)  # the sink's copy carries it
    (published,) = evidence_keys.published(keyed.config)
    key = signing.public_key(published["public_key"], field="k")
    for a in copies:  # anyone can check the sink's copy with the public key alone: the digest of
        # the record without the sink's name and the signature, signed by the key
        message = digest({k: v for k, v in a.items() if k not in ("sink", "key_id", "signature", "timestamp_token")})
        key.verify(base64.b64decode(a["signature"]), message.encode())


@pytest.mark.parametrize(
    "tamper",
    [
        "UPDATE anchors SET window_start = window_start - 3600000000 WHERE anchor_seq = 1",
        "UPDATE anchors SET created_at = created_at + 1 WHERE anchor_seq = 2",
        "UPDATE anchors SET leaf_count = leaf_count + 0, sink = 'elsewhere', key_id = 'other' WHERE anchor_seq = 2",
        "UPDATE anchors SET signature = NULL, key_id = NULL WHERE anchor_seq = 1",
    ],
)
def test_a_rewritten_anchor_fails_its_signature_without_the_sink(keyed: Engine, tmp_path: Path, tamper: str) -> None:
    _world(keyed, tmp_path)
    with keyed.store.write() as tx:
        connection(tx).execute(text(tamper))
    result = _verify(keyed)  # offline: the sink is not read, the signature alone catches it
    assert not result.ok and "anchor" in (result.problem or "")
    assert any(w in (result.problem or "") for w in ("signature", "not signed", "trusted")), result.problem


def test_a_rogue_key_is_not_trusted_and_a_rotated_one_is(keyed: Engine, tmp_path: Path, database_url: str) -> None:
    sink = _world(keyed, tmp_path)
    old = evidence_keys.published(keyed.config)[0]
    # Rotation: a new key signs from now on; the old public key stays trusted by configuration.
    rotated_dir = tmp_path / "rotated"
    config = make_config(rotated_dir, evidence={"signing_key_id": "evidence-2", "trusted_keys": {}})
    evidence_keys.create(config)
    rotated = Engine(keyed.store, config)
    assert "is signed by 'evidence'" in (_verify(rotated, sink).problem or "")
    kept = make_config(
        rotated_dir, evidence={"signing_key_id": "evidence-2", "trusted_keys": {"evidence": old["public_key"]}}
    )
    assert _verify(Engine(keyed.store, kept), sink).ok
    assert [k["status"] for k in evidence_keys.published(kept)] == ["current", "trusted"]


def test_unsigned_anchors_are_refused_unless_named_as_made_before_the_key(keyed: Engine, tmp_path: Path) -> None:
    _world(keyed, tmp_path, signed=False)
    refused = _verify(keyed)
    assert not refused.ok and "anchor 1 is not signed" in (refused.problem or "")
    accepted = _verify(keyed, unsigned_before=3)
    assert accepted.ok and accepted.unsigned_anchors == 2


def test_keys_evidence_creates_and_shows_the_key(tmp_path: Path) -> None:
    folder = tmp_path / "site"
    runner = CliRunner()
    assert runner.invoke(cli, ["init", str(folder)]).exit_code == 0
    key_file = folder / "data" / "keys" / "evidence.key"
    assert key_file.exists() and key_file.stat().st_mode & 0o777 == 0o600  # init made it, owner-only
    shown = runner.invoke(cli, ["--config", str(folder / "jobgate.yaml"), "--json", "keys", "evidence"])
    assert shown.exit_code == 0, shown.output
    (key,) = json.loads(shown.stdout)
    assert key["algorithm"] == "Ed25519" and key["status"] == "current"
    assert signing.public_key(key["public_key"], field="k") is not None
    key_file.unlink()
    missing = runner.invoke(cli, ["--config", str(folder / "jobgate.yaml"), "keys", "evidence"])
    assert missing.exit_code != 0 and "keys evidence --create" in str(missing.exception)
    created = runner.invoke(cli, ["--config", str(folder / "jobgate.yaml"), "--json", "keys", "evidence", "--create"])
    assert created.exit_code == 0 and key_file.exists()
    assert json.loads(created.stdout)[0]["public_key"] != key["public_key"]


def test_entries_left_unanchored_past_two_windows_fail_verification(keyed: Engine, tmp_path: Path) -> None:
    """Found by a review: the anchors deleted from the database and the file sink emptied, the
    keyless chain rewritten, and verification passed (nothing anchored looked like nothing
    anchored yet). Entries no anchor covers for more than two anchor windows fail it, naming
    the first, whether the anchors were never made or removed; a fresh tail passes."""
    sink = _world(keyed, tmp_path)
    with keyed.store.write() as tx:
        tx.audit_append([AuditEvent("default", "a", "test.fact", "test", "late", T0 + timedelta(hours=3))])

    def configured(now: datetime) -> anchors.Verification:
        with keyed.store.read() as tx:
            return anchors.verify_configured(tx, keyed.config, "default", sink_records=sink.records(), now=now)

    assert configured(T0 + timedelta(hours=4)).ok  # the tail is an hour old: the next anchor is due
    late = configured(T0 + timedelta(hours=5, minutes=1))
    assert not late.ok and late.first_bad_seq == 7 and "not anchored" in str(late.problem)
    with keyed.store.write() as tx:  # a later switch anchored at once, alone, anchors nothing before it
        [switch] = tx.audit_append([AuditEvent("default", "a", "safe_mode.activated", "t", "s", T0 + 5 * WINDOW)])
        anchors.anchor_direct(tx, switch, now=T0 + 5 * WINDOW, sink=sink, signer=evidence_keys.signer_for(keyed.config))
    hidden = configured(T0 + timedelta(hours=5, minutes=1))
    assert not hidden.ok and hidden.first_bad_seq == 7, hidden
    with keyed.store.write() as tx:  # the attack: every anchor gone, in the database and the sink
        connection(tx).execute(text("DELETE FROM anchors"))
    sink.path.write_text("")
    gone = configured(T0 + timedelta(hours=5, minutes=1))
    assert not gone.ok and gone.first_bad_seq == 1 and "not anchored" in str(gone.problem)


def test_an_entry_recorded_later_than_its_writer_read_the_clock_is_anchored_after_it(
    keyed: Engine, tmp_path: Path
) -> None:
    """Found by a review: a writer reads the time before it takes the chain's lock, and the
    append raises an entry's time to the chain's latest; an entry anchored at once was signed
    with the writer's earlier time, "made before the entry it anchors" for good (a false tamper
    verdict on an untouched database). The anchor is made no earlier than the entry."""
    sink = sinks.FileSink(tmp_path / "anchors.jsonl")
    signer = evidence_keys.signer_for(keyed.config)
    with keyed.store.write() as tx:  # another writer's entry, a moment later than ours
        tx.audit_append([AuditEvent("default", "a", "test.fact", "test", "1", T0 + timedelta(seconds=2))])
    with keyed.store.write() as tx:
        [switch] = tx.audit_append([AuditEvent("default", "b", "safe_mode.activated", "t", "s", T0)])
        assert switch.event.at == T0 + timedelta(seconds=2)  # kept in order with the chain
        made = anchors.anchor_direct(tx, switch, now=T0, sink=sink, signer=signer)
    assert made.created_at == switch.event.at
    result = _verify(keyed, sink)
    assert result.ok, result.problem


def test_a_trusted_key_under_the_signing_keys_own_id_is_refused_if_it_is_another_key(
    keyed: Engine, tmp_path: Path
) -> None:
    """After a rotation the old public key was listed under the id the new key also took: it
    was silently replaced by the new one, and every anchor the old key signed failed as if its
    content had changed. Refused, naming the entry; the same key listed there stays fine."""
    current = evidence_keys.published(keyed.config)[0]["public_key"]
    other = signing.generate("other").public_b64
    path = keyed.config.evidence_key_path
    clash = make_config(tmp_path, evidence={"signing_key": str(path), "trusted_keys": {"evidence": other}})
    for use in (evidence_keys.trusted_keys, evidence_keys.published):
        with pytest.raises(ConfigurationError) as refused:
            use(clash)
        assert refused.value.field == "evidence.trusted_keys.evidence" and "signing_key_id" in refused.value.message
    (check,) = [c for c in doctor.run_checks(Engine(keyed.store, clash)) if c.name == "evidence key"]
    assert check.level is doctor.Level.RED and "evidence.trusted_keys.evidence" in check.detail
    same = make_config(tmp_path, evidence={"signing_key": str(path), "trusted_keys": {"evidence": current}})
    assert set(evidence_keys.trusted_keys(same)) == {"evidence"}


def test_a_new_key_under_an_id_that_signed_anchors_is_refused(keyed: Engine, tmp_path: Path, database_url: str) -> None:
    sink = _world(keyed, tmp_path)
    old_public = evidence_keys.published(keyed.config)[0]["public_key"]
    key_file = keyed.config.evidence_key_path
    key_file.rename(tmp_path / "old.key")  # the old key taken off the host
    config_file = tmp_path / "jobgate.yaml"
    config_file.write_text(json.dumps(config_document(tmp_path)))
    runner = CliRunner()
    base = ["--config", str(config_file), "--db", database_url]
    refused = runner.invoke(cli, [*base, "keys", "evidence", "--create"])
    assert refused.exit_code == 1 and not key_file.exists()
    said = str(refused.exception)
    assert "signed 2 anchor(s)" in said and "evidence.signing_key_id" in said
    rotated = config_document(
        tmp_path, evidence={"signing_key_id": "evidence-2", "trusted_keys": {"evidence": old_public}}
    )
    config_file.write_text(json.dumps(rotated))
    created = runner.invoke(cli, [*base, "keys", "evidence", "--create"])
    assert created.exit_code == 0, created.output
    assert key_file.exists()
    assert _verify(Engine(keyed.store, make_config(tmp_path, evidence=rotated["evidence"])), sink).ok


def test_a_signature_that_fails_says_a_rotation_may_be_why(keyed: Engine, tmp_path: Path) -> None:
    _world(keyed, tmp_path)
    path = keyed.config.evidence_key_path
    path.unlink()
    evidence_keys.create(keyed.config)  # another key under the same id, made behind the CLI's back
    problem = _verify(keyed).problem or ""
    assert "does not match its content" in problem and "evidence.trusted_keys" in problem


def test_a_rotation_that_leaves_the_old_key_in_place_is_refused_and_a_named_new_file_is_made(
    keyed: Engine, tmp_path: Path, database_url: str
) -> None:
    """A review followed the guide's rotation with the old key's file left where it was: the
    old key went on signing, now as 'evidence-2', and nothing said so. And ``--create`` could
    not make a key at a new ``evidence.signing_key`` path (it said the file did not exist)."""
    _world(keyed, tmp_path)
    old_public = evidence_keys.published(keyed.config)[0]["public_key"]
    config_file = tmp_path / "jobgate.yaml"
    kept = {"signing_key_id": "evidence-2", "trusted_keys": {"evidence": old_public}}
    config_file.write_text(json.dumps(config_document(tmp_path, evidence=kept)))
    runner = CliRunner()
    base = ["--config", str(config_file), "--db", database_url]
    refused = runner.invoke(cli, [*base, "keys", "evidence", "--create"])
    assert refused.exit_code != 0 and "holds the key trusted as 'evidence'" in str(refused.exception)
    (check,) = [
        c
        for c in doctor.run_checks(Engine(keyed.store, make_config(tmp_path, evidence=kept)))
        if c.name == "evidence key"
    ]
    assert check.level is doctor.Level.RED
    new_file = tmp_path / "keys" / "evidence-2.key"
    named = {**kept, "signing_key": str(new_file)}
    config_file.write_text(json.dumps(config_document(tmp_path, evidence=named)))
    created = runner.invoke(cli, [*base, "--json", "keys", "evidence", "--create"])
    assert created.exit_code == 0, created.output
    assert new_file.exists() and keyed.config.evidence_key_path.exists()  # the old file untouched
    listed = {k["key_id"]: k["public_key"] for k in json.loads(created.stdout)}
    assert listed["evidence"] == old_public and listed["evidence-2"] != old_public


def test_an_anchor_is_not_signed_by_a_key_that_breaks_the_chain(keyed: Engine, tmp_path: Path) -> None:
    """A review: the old key went on signing under a new id (signing_key_id changed first), and
    a process on the old configuration signed with the new key under the old id; either way an
    id stood for two keys, or a key for two ids. Refused at signing, nothing anchored."""
    sink = _world(keyed, tmp_path)
    old = evidence_keys.signer_for(keyed.config)
    assert old is not None
    other = signing.generate("x")
    with keyed.store.write() as tx:
        tx.audit_append([AuditEvent("default", "a", "test.fact", "test", "late", T0 + timedelta(hours=3))])
    later = T0 + timedelta(hours=6)
    for signer, field in (
        (evidence_keys.Signer("evidence", other.private_b64), "evidence.signing_key_id"),  # another key, same id
        (evidence_keys.Signer("evidence-2", old.private_b64), "evidence.signing_key"),  # the same key, a new id
    ):
        with pytest.raises(ValidationError) as refused, keyed.store.write() as tx:
            anchors.anchor_due(tx, "default", now=later, window=WINDOW, sink=sink, signer=signer)
        assert refused.value.field == field, refused.value.message
        with keyed.store.read() as tx:
            assert len(tx.anchors.of("default")) == 2
    with keyed.store.write() as tx:  # a new key under a new id: a rotation
        made = anchors.anchor_due(
            tx,
            "default",
            now=later,
            window=WINDOW,
            sink=sink,
            signer=evidence_keys.Signer("evidence-2", other.private_b64),
        )
    assert made and made[0].key_id == "evidence-2"


def test_a_new_key_is_refused_while_an_id_that_signed_anchors_is_not_trusted(
    keyed: Engine, tmp_path: Path, database_url: str
) -> None:
    _world(keyed, tmp_path)
    keyed.config.evidence_key_path.rename(tmp_path / "old.key")
    config_file = tmp_path / "jobgate.yaml"
    config_file.write_text(json.dumps(config_document(tmp_path, evidence={"signing_key_id": "evidence-2"})))
    refused = CliRunner().invoke(
        cli, ["--config", str(config_file), "--db", database_url, "keys", "evidence", "--create"]
    )
    assert refused.exit_code == 1 and not keyed.config.evidence_key_path.exists()
    assert "anchors signed as 'evidence' would no longer verify" in str(refused.exception)
