"""RFC 3161 timestamps on anchors, against a real local timestamping authority (tests/tsa.py).

The evidence key says who made an anchor; the TSA's token says when, with a clock and a key
jobgate does not hold. Every batch anchor is stamped when it is made (a TSA that cannot stamp
refuses the anchor: nothing stored, nothing sent to the sink), and ``audit verify`` checks
every token offline against the configured roots: the signature and chain, that it is this
anchor's content, and that its time agrees with the anchor's.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from sqlalchemy import text
from tests.helpers import config_document, count, make_config
from tests.tsa import LocalTsa, serving

from jobgate.cli import cli
from jobgate.core.audit import AuditEvent
from jobgate.core.errors import ValidationError
from jobgate.evidence import anchors, sinks, timestamping
from jobgate.service.engine import Engine
from jobgate.store.sqlstore import Store
from jobgate.testing import connection

T0 = datetime(2026, 11, 1, 10, 0, tzinfo=UTC)
NOW = T0 + timedelta(hours=3)


class World:
    def __init__(self, engine: Engine, tsa: LocalTsa, url: str, tmp_path: Path) -> None:
        self.engine, self.tsa, self.url, self.tmp_path = engine, tsa, url, tmp_path

    def entries(self) -> None:
        with self.engine.store.write() as tx:
            tx.audit_append(
                [
                    AuditEvent("default", "a", "test.fact", "test", str(i), T0 + timedelta(minutes=20 * i))
                    for i in range(6)
                ]
            )

    def anchor(self, config: Any = None, now: datetime = NOW) -> list[anchors.Anchor]:
        with self.engine.store.write() as tx:
            return anchors.anchor_configured(tx, config or self.engine.config, "default", now)

    def verify(self, config: Any = None) -> anchors.Verification:
        with self.engine.store.read() as tx:
            return anchors.verify_configured(tx, config or self.engine.config, "default", sink_records=None)

    def config(self, **tsa: Any) -> Any:
        settings = {"url": self.url, "ca_bundle": "tsa-roots.pem", **tsa}
        return make_config(self.tmp_path, evidence={"timestamp_authority": settings})


@pytest.fixture
def world(database_url: str, tmp_path: Path) -> Iterator[World]:
    tsa = LocalTsa(clock=lambda: NOW)
    tsa.write_roots(tmp_path / "tsa-roots.pem")
    with serving(tsa) as url:
        config = make_config(tmp_path, evidence={"timestamp_authority": {"url": url, "ca_bundle": "tsa-roots.pem"}})
        store = Store(database_url)
        w = World(Engine(store, config), tsa, url, tmp_path)
        w.entries()
        yield w
        store.dispose()


def test_every_batch_anchor_carries_a_token_that_verifies(world: World) -> None:
    made = world.anchor()
    assert len(made) == 2 and all(a.timestamp_token for a in made)
    assert world.tsa.served == 2
    result = world.verify()
    assert result.ok, result.problem
    copies = sinks.FileSink(world.engine.config.anchor_sink_path).records()
    assert [c["timestamp_token"] for c in copies] == [a.timestamp_token for a in made]  # the sink keeps it too
    # The token is over the anchor's message, as anyone can check with rfc3161-client alone.
    from rfc3161_client import VerifierBuilder, decode_timestamp_response

    response = decode_timestamp_response(base64.b64decode(made[0].timestamp_token or ""))
    verifier = VerifierBuilder(roots=[world.tsa.root]).build()
    assert verifier.verify_message(response, anchors.anchor_message(made[0]).encode())


@pytest.mark.parametrize(
    ("tamper", "found"),
    [
        ("UPDATE anchors SET timestamp_token = NULL WHERE anchor_seq = 2", "anchor 2 is not timestamped"),
        (
            "UPDATE anchors SET timestamp_token = (SELECT timestamp_token FROM anchors WHERE anchor_seq = 1)"
            " WHERE anchor_seq = 2",
            "anchor 2 has a timestamp token that does not verify (Mismatch between messages)",
        ),
        ("UPDATE anchors SET timestamp_token = 'bm90IGEgdG9rZW4=' WHERE anchor_seq = 1", "not an RFC 3161 response"),
        ("UPDATE anchors SET created_at = created_at - 60000000 WHERE anchor_seq = 1", "anchor 1 has a timestamp"),
        ("UPDATE anchors SET window_end = window_end + 1 WHERE anchor_seq = 1", "anchor 1 has a timestamp"),
    ],
)
def test_a_rewritten_token_or_anchor_is_caught_without_any_key_or_sink(world: World, tamper: str, found: str) -> None:
    """No evidence key is configured here: the token alone catches the change."""
    world.anchor()
    with world.engine.store.write() as tx:
        connection(tx).execute(text(tamper))
    result = world.verify()
    assert not result.ok
    assert found in (result.problem or ""), result.problem


def test_a_token_from_another_authority_is_not_trusted(world: World) -> None:
    world.anchor()
    rogue = LocalTsa(name="rogue TSA")
    rogue.write_roots(world.tmp_path / "rogue-roots.pem")
    result = world.verify(world.config(ca_bundle="rogue-roots.pem"))
    assert not result.ok
    assert "anchor 1 has a timestamp token that does not verify" in (result.problem or "")
    assert "trusted roots" in (result.problem or "")


def test_a_token_whose_time_disagrees_with_the_anchor_is_refused_when_made(world: World) -> None:
    world.tsa.clock = lambda: T0 + timedelta(minutes=50)  # before the first window ended (11:00)
    with pytest.raises(timestamping.TimestampUnavailable, match="before its window ended"):
        world.anchor(now=T0 + timedelta(hours=1, minutes=1))
    world.tsa.clock = lambda: NOW + timedelta(minutes=30)
    with pytest.raises(timestamping.TimestampUnavailable, match="more than 300 s apart"):
        world.anchor()
    assert count(world.engine, "anchors") == 0  # nothing stored
    assert sinks.FileSink(world.engine.config.anchor_sink_path).records() == []  # nothing sent


def test_an_unreachable_authority_refuses_the_anchor(world: World) -> None:
    config = world.config(url="http://127.0.0.1:9/tsa", timeout_seconds=1)
    with pytest.raises(timestamping.TimestampUnavailable, match="did not answer"):
        world.anchor(config)
    assert count(world.engine, "anchors") == 0
    assert sinks.FileSink(world.engine.config.anchor_sink_path).records() == []


def test_a_certificate_without_the_timestamping_purpose_is_refused(database_url: str, tmp_path: Path) -> None:
    tsa = LocalTsa(clock=lambda: NOW, eku=False)
    tsa.write_roots(tmp_path / "tsa-roots.pem")
    with serving(tsa) as url:
        store = Store(database_url)
        try:
            config = make_config(tmp_path, evidence={"timestamp_authority": {"url": url, "ca_bundle": "tsa-roots.pem"}})
            w = World(Engine(store, config), tsa, url, tmp_path)
            w.entries()
            with pytest.raises(timestamping.TimestampUnavailable, match="does not verify"):
                w.anchor()
            assert count(w.engine, "anchors") == 0
        finally:
            store.dispose()


def test_anchors_made_before_the_authority_are_accepted_by_number(world: World) -> None:
    plain = make_config(world.tmp_path)
    assert len(world.anchor(plain)) == 2  # no TSA configured yet: unstamped
    refused = world.verify()
    assert not refused.ok and "anchor 1 is not timestamped" in (refused.problem or "")
    accepted = world.config(unstamped_anchors_before=3)
    assert world.verify(accepted).ok
    with world.engine.store.write() as tx:  # a later window, stamped: checked as any other
        tx.audit_append([AuditEvent("default", "a", "test.fact", "test", "late", NOW + timedelta(minutes=5))])
    world.tsa.clock = lambda: NOW + timedelta(hours=2)
    (later,) = world.anchor(accepted, now=NOW + timedelta(hours=2))
    assert later.anchor_seq == 3 and later.timestamp_token
    assert world.verify(accepted).ok


def test_audit_verify_cli_checks_the_tokens(world: World) -> None:
    world.anchor()
    config_path = world.tmp_path / "jobgate.yaml"
    document = config_document(
        world.tmp_path, evidence={"timestamp_authority": {"url": world.url, "ca_bundle": "tsa-roots.pem"}}
    )
    config_path.write_text(yaml.safe_dump(document))
    runner = CliRunner()
    verify = ["--config", str(config_path), "--db", world.engine.store.url, "audit", "verify", "--offline"]
    ok = runner.invoke(cli, verify)
    assert ok.exit_code == 0, ok.output
    with world.engine.store.write() as tx:
        connection(tx).execute(text("UPDATE anchors SET timestamp_token = NULL WHERE anchor_seq = 1"))
    failed = runner.invoke(cli, verify)
    assert failed.exit_code != 0
    assert "anchor 1 is not timestamped" in failed.output


@pytest.mark.parametrize(
    ("settings", "field", "reason"),
    [
        ({"ca_bundle": "tsa-roots.pem"}, "evidence.timestamp_authority.url", "required"),
        ({"url": "http://127.0.0.1:1/tsa"}, "evidence.timestamp_authority.ca_bundle", "required"),
        ({"url": "ftp://tsa", "ca_bundle": "x.pem"}, "evidence.timestamp_authority.url", "http"),
        ({"url": "http://t/", "ca_bundle": "x.pem", "color": 1}, "evidence.timestamp_authority", "color"),
        ({"url": "http://t/", "ca_bundle": "x.pem", "max_skew_seconds": 7200}, "max_skew_seconds", "between"),
        ({"url": "http://t/", "ca_bundle": "x.pem", "unstamped_anchors_before": -1}, "unstamped_anchors_before", ""),
    ],
)
def test_bad_settings_name_the_field(tmp_path: Path, settings: dict[str, Any], field: str, reason: str) -> None:
    with pytest.raises(ValidationError) as caught:
        make_config(tmp_path, evidence={"timestamp_authority": settings})
    assert field in str(caught.value) and reason in str(caught.value)


def test_an_unreadable_root_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "empty.pem").write_text("not a certificate\n")
    for name, why in (("missing.pem", "cannot read"), ("empty.pem", "no PEM certificate")):
        config = make_config(tmp_path, evidence={"timestamp_authority": {"url": "http://t/", "ca_bundle": name}})
        with pytest.raises(ValidationError, match=why) as caught:
            timestamping.trust_for(config)
        assert caught.value.field == "evidence.timestamp_authority.ca_bundle"


def test_a_bundle_s_anchors_are_checked_offline_with_the_authority_s_roots(world: World) -> None:
    """What ``evidence verify --tsa-ca`` runs on a bundle's ``audit.json`` and ``proofs.json``."""
    import json

    from jobgate.export.scope import check_contents, entry_doc, json_file
    from jobgate.store.sql import governance

    world.anchor()
    with world.engine.store.read() as tx:
        entries = governance.audit_range(connection(tx), "default", 1, 6)
        proofs = [anchors.inclusion_proof(tx, "default", e.seq) for e in entries]
    files = {"audit.json": json_file([entry_doc(e) for e in entries]), "proofs.json": json_file(proofs)}
    trust = timestamping.TimestampTrust((world.tsa.root,))
    checked = check_contents(files, None, trust)
    assert not checked.problems and checked.timestamps_checked == 2
    proofs[0]["anchor"]["timestamp_token"] = proofs[-1]["anchor"]["timestamp_token"]  # anchor 2's token on 1
    for p in proofs:
        if p["anchor"]["anchor_seq"] == 1:
            p["anchor"]["timestamp_token"] = proofs[0]["anchor"]["timestamp_token"]
    swapped = check_contents({**files, "proofs.json": json_file(proofs)}, None, trust)
    assert any("anchor 1 has a timestamp token that does not verify" in p for p in swapped.problems)
    rogue = timestamping.TimestampTrust((LocalTsa(name="rogue").root,))
    assert any("trusted roots" in p for p in check_contents(files, None, rogue).problems)
    stripped = json.loads(files["proofs.json"])
    for p in stripped:
        p["anchor"].pop("timestamp_token")
    unstamped = check_contents({**files, "proofs.json": json_file(stripped)}, None, trust)
    assert "proofs.json: anchor 1 is not timestamped" in unstamped.problems


def test_the_key_s_holder_cannot_re_date_an_anchor(world: World) -> None:
    """An anchor moved in time and re-signed with the evidence key passes the signature check;
    the TSA's token, made with a key jobgate does not hold, still tells."""
    from dataclasses import replace

    from jobgate.evidence import keys as evidence_keys
    from jobgate.store.sql import governance

    evidence_keys.create(world.engine.config)
    signer = evidence_keys.signer_for(world.engine.config)
    assert signer is not None
    world.anchor()
    with world.engine.store.write() as tx:
        first = governance.anchors_list(connection(tx), "default")[0]
        moved = replace(first, created_at=first.created_at - timedelta(minutes=50))
        resigned = signer.sign(anchors.anchor_message(moved))
        connection(tx).execute(
            text("UPDATE anchors SET created_at = created_at - 3000000000, signature = :s WHERE anchor_seq = 1"),
            {"s": resigned},
        )
    with world.engine.store.read() as tx:
        keys = evidence_keys.trusted_keys(world.engine.config)
        signature_only = anchors.verify_tenant(tx, "default", keys=keys)
    assert signature_only.ok  # the key's holder re-dated it, and the signature agrees
    result = world.verify()
    assert not result.ok and "anchor 1 has a timestamp token that does not verify" in (result.problem or "")


def test_a_bundle_s_manifest_is_timestamped_so_its_export_time_is_vouched_for(world: World, database_url: str) -> None:
    """The manifest says when it was exported and what was anchored then; with an authority,
    a token over it (``manifest.tsr``) makes that time the authority's, not the key holder's:
    ``--tsa-ca`` requires it and refuses one over other bytes."""
    import io
    import zipfile

    from jobgate.export.bundles import build_bundle, pack, verify_bundle
    from jobgate.export.scope import ExportScope
    from jobgate.testing import FakeClock

    engine = Engine(Store(database_url), world.engine.config, clock=FakeClock(NOW))
    try:
        world.anchor()
        bundle = build_bundle(engine, ExportScope(start=T0, end=NOW))
        trust = timestamping.TimestampTrust((world.tsa.root,))
        names = zipfile.ZipFile(io.BytesIO(bundle)).namelist()
        assert "manifest.tsr" in names
        checked = verify_bundle(bundle, timestamps=trust)
        assert checked.ok, checked.problems
        source = zipfile.ZipFile(io.BytesIO(bundle))
        files = {n: source.read(n) for n in names}
        stripped = pack({n: d for n, d in files.items() if n != "manifest.tsr"})
        assert (
            "manifest.tsr: missing, and a timestamp is required (--tsa-ca)"
            in verify_bundle(stripped, timestamps=trust).problems
        )
        assert verify_bundle(stripped).ok  # without the authority's roots nothing asks for it
        other = pack(
            {**files, "manifest.json": files["manifest.json"].replace(b'"anchored_through": ', b'"anchored_through":')}
        )
        assert any(p.startswith("manifest.tsr:") for p in verify_bundle(other, timestamps=trust).problems)
    finally:
        engine.store.dispose()
