"""Tamper evidence: the audit chain and its anchors are edited directly in the database, and
verification names the right entry; a clean log verifies; proofs verify offline."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import text

from jobgate.core import merkle
from jobgate.core.audit import AuditEvent, chain
from jobgate.core.records import AuditFilter
from jobgate.evidence import anchors, sinks
from jobgate.service.engine import Engine
from jobgate.store import codec
from jobgate.store.sql import governance
from jobgate.testing import connection

T0 = datetime(2026, 11, 1, 10, 0, tzinfo=UTC)
WINDOW = timedelta(hours=1)
# Six entries across two hourly windows (10:xx and 11:xx); anchored at 12:30.
TIMES = [T0 + timedelta(minutes=m) for m in (5, 20, 40, 70, 80, 100)]


@pytest.fixture
def anchored(engine: Engine, tmp_path: Path) -> tuple[Engine, sinks.FileSink]:
    sink = sinks.FileSink(tmp_path / "anchors.jsonl")
    with engine.store.write() as tx:
        tx.audit_append(
            [
                AuditEvent("default", f"actor-{i}", "test.fact", "test", str(i), at, payload={"n": i})
                for i, at in enumerate(TIMES, 1)
            ]
        )
    with engine.store.write() as tx:
        made = anchors.anchor_due(tx, "default", now=T0 + timedelta(hours=2, minutes=30), window=WINDOW, sink=sink)
    assert [(a.first_seq, a.last_seq) for a in made] == [(1, 3), (4, 6)]
    return engine, sink


def check(engine: Engine, sink: sinks.FileSink) -> anchors.Verification:
    with engine.store.read() as tx:
        return anchors.verify_tenant(tx, "default", sink_records=sink.records())


def sql(engine: Engine, statement: str, **params: object) -> None:
    with engine.store.write() as tx:
        connection(tx).execute(text(statement), params)


def test_a_clean_log_verifies_and_windows_tile_the_chain(anchored: tuple[Engine, sinks.FileSink]) -> None:
    engine, sink = anchored
    result = check(engine, sink)
    assert result.ok and (result.entries, result.anchors) == (6, 2)
    assert [r["anchor_seq"] for r in sink.records()] == [1, 2]
    with engine.store.write() as tx:  # nothing more is due: anchoring again adds nothing
        again = anchors.anchor_due(tx, "default", now=T0 + timedelta(hours=3), window=WINDOW, sink=sink)
    assert again == []


def test_a_flipped_byte_is_found_at_its_entry(anchored: tuple[Engine, sinks.FileSink]) -> None:
    engine, sink = anchored
    sql(engine, "UPDATE audit_log SET payload = :p WHERE seq = 3", p='{"n":4}')
    result = check(engine, sink)
    assert not result.ok and result.first_bad_seq == 3


@pytest.mark.parametrize(
    ("tamper", "first_bad"),
    [
        ("DELETE FROM audit_log WHERE seq = 3", 3),
        ("UPDATE audit_log SET seq = CASE seq WHEN 2 THEN 3 WHEN 3 THEN 2 END WHERE seq IN (2, 3)", 2),
        ("UPDATE audit_log SET actor = 'mallory' WHERE seq = 5", 5),
    ],
)
def test_deleted_swapped_and_edited_entries_are_named(
    anchored: tuple[Engine, sinks.FileSink], tamper: str, first_bad: int
) -> None:
    engine, sink = anchored
    if "CASE" in tamper:  # swap through a free position: the pair (tenant, seq) is unique
        sql(engine, "UPDATE audit_log SET seq = 1000 WHERE seq = 2")
        sql(engine, "UPDATE audit_log SET seq = 2 WHERE seq = 3")
        sql(engine, "UPDATE audit_log SET seq = 3 WHERE seq = 1000")
    else:
        sql(engine, tamper)
    result = check(engine, sink)
    assert not result.ok and result.first_bad_seq == first_bad, result


def test_an_inserted_entry_is_named(anchored: tuple[Engine, sinks.FileSink]) -> None:
    engine, sink = anchored
    for seq in (6, 5, 4):  # make room after entry 3
        sql(engine, "UPDATE audit_log SET seq = :n WHERE seq = :s", n=seq + 1, s=seq)
    with engine.store.read() as tx:
        (third,) = governance.audit_range(connection(tx), "default", 3, 3)
    forged = chain([AuditEvent("default", "mallory", "test.fact", "test", "x", TIMES[2])], 3, third.entry_hash)[0]
    sql(
        engine,
        "INSERT INTO audit_log (tenant_id, seq, at, actor, action, target_type, target_id, reason, payload,"
        " prev_hash, entry_hash) VALUES ('default', 4, :at, 'mallory', 'test.fact', 'test', 'x', NULL, '{}', :p, :h)",
        at=codec.to_us(TIMES[2]),
        p=forged.prev_hash,
        h=forged.entry_hash,
    )
    result = check(engine, sink)
    assert not result.ok and result.first_bad_seq == 5  # the old fourth entry no longer follows


def test_a_truncated_tail_is_caught_by_the_anchor(anchored: tuple[Engine, sinks.FileSink]) -> None:
    engine, sink = anchored
    with engine.store.read() as tx:
        (fourth,) = governance.audit_range(connection(tx), "default", 4, 4)
    sql(engine, "DELETE FROM audit_log WHERE seq > 4")
    sql(engine, "UPDATE audit_heads SET seq = 4, entry_hash = :h WHERE tenant_id = 'default'", h=fourth.entry_hash)
    result = check(engine, sink)
    assert not result.ok and result.first_bad_seq == 4 and "no longer exist" in str(result.problem)


def test_a_chain_rewritten_from_scratch_fails_against_the_anchors(anchored: tuple[Engine, sinks.FileSink]) -> None:
    engine, sink = anchored
    with engine.store.read() as tx:
        entries = governance.audit_range(connection(tx), "default", 1, 6)
    events = [e.event for e in entries]
    events[1] = replace(events[1], actor="mallory")
    rewritten = chain(events, 0, "sha256:" + "0" * 64)
    sql(engine, "DELETE FROM audit_log")
    with engine.store.write() as tx:
        connection(tx).execute(text("UPDATE audit_heads SET seq = 0, entry_hash = :g"), {"g": "sha256:" + "0" * 64})
        tx.audit_append(events)  # a perfectly consistent chain...
    assert [e.entry_hash for e in rewritten][-1]
    result = check(engine, sink)
    assert (
        not result.ok and result.first_bad_seq == 1 and "anchor 1" in str(result.problem)
    )  # ...that the anchor refutes


def _rewrite_entries_and_anchors(engine: Engine) -> None:
    """Edit entry 2, then recompute every hash, the head and both anchors in the database, as an
    attacker with write access would: consistent inside it, refuted only by the sink's copy."""
    sql(engine, "UPDATE audit_log SET reason = 'edited' WHERE seq = 2")
    with engine.store.read() as tx:
        entries = governance.audit_range(connection(tx), "default", 1, 6)
    rewritten = chain([e.event for e in entries], 0, "sha256:" + "0" * 64)
    with engine.store.write() as tx:
        for e in rewritten:
            connection(tx).execute(
                text("UPDATE audit_log SET prev_hash = :p, entry_hash = :h WHERE seq = :s"),
                {"p": e.prev_hash, "h": e.entry_hash, "s": e.seq},
            )
        connection(tx).execute(text("UPDATE audit_heads SET entry_hash = :h"), {"h": rewritten[-1].entry_hash})
        prev = anchors.GENESIS_CHAIN
        for n, (first, last) in enumerate([(1, 3), (4, 6)], 1):
            root = merkle.root([e.entry_hash for e in rewritten[first - 1 : last]])
            new_chain = anchors.chain_hash(prev, root)
            connection(tx).execute(
                text("UPDATE anchors SET root = :r, prev_chain = :p, chain = :c WHERE anchor_seq = :n"),
                {"r": root, "p": prev, "c": new_chain, "n": n},
            )
            prev = new_chain
    with engine.store.read() as tx:
        assert anchors.verify_tenant(tx, "default").ok  # consistent inside the database...


def test_rewriting_the_anchors_too_is_caught_by_the_sink(anchored: tuple[Engine, sinks.FileSink]) -> None:
    engine, sink = anchored
    _rewrite_entries_and_anchors(engine)
    result = check(engine, sink)
    assert not result.ok and "sink" in str(result.problem)  # ...but not with the sink outside it


def test_an_http_sink_is_read_back_and_refutes_a_rewrite(engine: Engine) -> None:
    from tests.runtime.local_http import Recorder, closed_port_url, local_server

    with local_server(Recorder(serve_accepted=True)) as (url, recorder):
        sink = sinks.HttpSink(url, timeout=5)
        with engine.store.write() as tx:
            tx.audit_append(
                [
                    AuditEvent("default", "a", "test.fact", "test", str(i), at, payload={})
                    for i, at in enumerate(TIMES, 1)
                ]
            )
        with engine.store.write() as tx:
            anchors.anchor_due(tx, "default", now=T0 + timedelta(hours=2, minutes=30), window=WINDOW, sink=sink)
        assert len(recorder.accepted) == 2 and sink.records() == recorder.accepted
        with engine.store.read() as tx:
            assert anchors.verify_tenant(tx, "default", sink_records=sink.records()).ok
        _rewrite_entries_and_anchors(engine)
        with engine.store.read() as tx:
            result = anchors.verify_tenant(tx, "default", sink_records=sink.records())
        assert not result.ok and "differs from the sink's copy" in str(result.problem)
    with pytest.raises(sinks.SinkUnreadable) as unreadable:  # fails closed, and names no URL
        sinks.HttpSink(closed_port_url(), timeout=2).records()
    assert "127.0.0.1" not in unreadable.value.message and unreadable.value.field == "evidence.anchor_sink_url"


@pytest.mark.parametrize(
    ("damage", "named"),
    [
        ("garbage{\n", "line 3 "),
        ("{}\n", "no tenant_id"),
        ("[1, 2]\n", "not a JSON object"),
        ('{"tenant_id": "default", "anchor_seq": "1"}\n', "no anchor_seq"),
        ('{"tenant_id": "default", "anchor_seq": true}\n', "no anchor_seq"),
    ],
)
def test_a_damaged_sink_file_is_unreadable_and_names_its_line(
    anchored: tuple[Engine, sinks.FileSink], damage: str, named: str
) -> None:
    _, sink = anchored
    assert len(sink.records()) == 2
    with sink.path.open("a", encoding="utf-8") as f:
        f.write(damage)
    with pytest.raises(sinks.SinkUnreadable) as unreadable:
        sink.records()
    assert named in unreadable.value.message and unreadable.value.field == "evidence.anchor_sink"


def test_a_sink_path_that_is_a_folder_is_unreadable(tmp_path: Path) -> None:
    with pytest.raises(sinks.SinkUnreadable) as unreadable:
        sinks.FileSink(tmp_path).records()
    assert "IsADirectoryError" in unreadable.value.message


def test_every_anchored_entry_has_a_proof_that_verifies_offline(anchored: tuple[Engine, sinks.FileSink]) -> None:
    engine, _ = anchored
    with engine.store.read() as tx:
        proofs = [anchors.inclusion_proof(tx, "default", seq) for seq in range(1, 7)]
        assert anchors.inclusion_proof(tx, "default", 7) is None
    for p in proofs:
        assert p is not None
        assert merkle.verify(p["entry_hash"], p["proof"], p["root"])
        assert not merkle.verify(p["entry_hash"], p["proof"], proofs[0]["root"] if p["seq"] > 3 else proofs[5]["root"])  # type: ignore[index]


def test_the_oldest_unanchored_entry_is_the_first_no_anchor_covers(engine: Engine, tmp_path: Path) -> None:
    sink = sinks.FileSink(tmp_path / "anchors.jsonl")
    with engine.store.write() as tx:
        tx.audit_append(
            [AuditEvent("default", "a", "test.fact", "test", str(i), at, payload={}) for i, at in enumerate(TIMES, 1)]
        )
    with engine.store.read() as tx:
        assert tx.oldest_unanchored(None) == [("default", TIMES[0])]  # nothing anchored yet
    with engine.store.write() as tx:  # 11:05: only the 10:xx window has ended
        anchors.anchor_due(tx, "default", now=T0 + timedelta(hours=1, minutes=5), window=WINDOW, sink=sink)
        (entry,) = governance.audit_range(connection(tx), "default", 4, 4)
        anchors.anchor_direct(tx, entry, now=T0 + timedelta(hours=1, minutes=6), sink=sink)
    with engine.store.read() as tx:
        # 1-3 in the batch, 4 anchored directly: 5 is the oldest entry nothing covers.
        assert tx.oldest_unanchored("default") == [("default", TIMES[4])]
        assert tx.oldest_unanchored("other") == []
    with engine.store.write() as tx:
        anchors.anchor_due(tx, "default", now=T0 + timedelta(hours=3), window=WINDOW, sink=sink)
    with engine.store.read() as tx:
        assert tx.oldest_unanchored(None) == []


@pytest.mark.parametrize(("column", "value"), [("payload", "{not json"), ("payload", "[1, 2]"), ("payload", "")])
def test_a_malformed_entry_is_named_not_a_crash(
    anchored: tuple[Engine, sinks.FileSink], column: str, value: str
) -> None:
    engine, sink = anchored
    literal = f"'{value}'" if column == "payload" else value
    sql(engine, f"UPDATE audit_log SET {column} = {literal} WHERE tenant_id = 'default' AND seq = 3")
    result = check(engine, sink)
    assert not result.ok and result.first_bad_seq == 3
    assert result.problem is not None and "audit entry 3 of default" in result.problem and column in result.problem


def test_an_entry_anchored_directly_has_a_proof(anchored: tuple[Engine, sinks.FileSink]) -> None:
    engine, sink = anchored
    with engine.store.write() as tx:
        (entry,) = tx.audit_append([AuditEvent("default", "ops", "safe_mode.activated", "tenant", "default", T0)])
        anchors.anchor_direct(tx, entry, now=T0 + timedelta(hours=3), sink=sink)
    with engine.store.read() as tx:
        found = anchors.inclusion_proof(tx, "default", entry.seq)
    assert found is not None and found["anchor"]["mode"] == "direct"
    assert merkle.verify(found["entry_hash"], found["proof"], found["root"])


def _forge_after(engine: Engine, seq: int, *, replace_it: bool) -> None:
    """A well-formed entry at ``seq + 1`` (a new one, or the existing one rewritten), linked and
    hashed as jobgate would, without touching the head."""
    with engine.store.read() as tx:
        (before,) = governance.audit_range(connection(tx), "default", seq, seq)
    forged = chain([AuditEvent("default", "mallory", "test.fact", "test", "x", TIMES[-1])], seq, before.entry_hash)[0]
    if replace_it:
        sql(engine, "DELETE FROM audit_log WHERE tenant_id = 'default' AND seq = :s", s=seq + 1)
    sql(
        engine,
        "INSERT INTO audit_log (tenant_id, seq, at, actor, action, target_type, target_id, reason, payload,"
        " prev_hash, entry_hash) VALUES ('default', :s, :at, 'mallory', 'test.fact', 'test', 'x', NULL, '{}', :p, :h)",
        s=seq + 1,
        at=codec.to_us(TIMES[-1]),
        p=forged.prev_hash,
        h=forged.entry_hash,
    )


def test_an_entry_appended_behind_the_heads_back_is_named(anchored: tuple[Engine, sinks.FileSink]) -> None:
    engine, sink = anchored
    _forge_after(engine, 6, replace_it=False)
    result = check(engine, sink)
    assert not result.ok and result.first_bad_seq == 7 and "follow the head (6)" in str(result.problem)


def test_the_last_entry_rewritten_is_named_not_a_missing_tail(anchored: tuple[Engine, sinks.FileSink]) -> None:
    engine, sink = anchored
    _forge_after(engine, 5, replace_it=True)
    result = check(engine, sink)
    assert (
        not result.ok
        and result.first_bad_seq == 6
        and "entry 6 is not the one the head recorded" in str(result.problem)
    )


def test_a_chain_whose_head_row_was_deleted_is_still_verified(anchored: tuple[Engine, sinks.FileSink]) -> None:
    engine, _ = anchored
    with engine.store.write() as tx:  # a second tenant, no anchors, its head row then deleted
        tx.audit_append([AuditEvent("acme", "a", "test.fact", "test", "1", T0)])
    sql(engine, "DELETE FROM audit_heads WHERE tenant_id = 'acme'")
    with engine.store.read() as tx:
        assert governance.audit_tenants(connection(tx)) == ["acme", "default"]
        result = anchors.verify_tenant(tx, "acme")
    assert not result.ok and result.first_bad_seq == 1 and "follow the head (0)" in str(result.problem)


def test_an_entry_committed_after_its_window_was_anchored_is_recorded_after_it(
    anchored: tuple[Engine, sinks.FileSink],
) -> None:
    """Windows follow from the chain alone: a late entry (its event in an anchored window) is
    recorded at the window's end, so the next batch holds it and the anchored one stays whole."""
    engine, sink = anchored
    late = AuditEvent("default", "slow", "test.late", "test", "late", T0 + timedelta(minutes=10))
    with engine.store.write() as tx:
        (entry,) = tx.audit_append([late])
    assert entry.event.at == T0 + timedelta(hours=2)  # the end of the last anchored window
    with engine.store.write() as tx:
        made = anchors.anchor_due(tx, "default", now=T0 + timedelta(hours=4), window=WINDOW, sink=sink)
    assert [(a.first_seq, a.last_seq, a.window_start) for a in made] == [(7, 7, T0 + timedelta(hours=2))]
    result = check(engine, sink)
    assert result.ok, result.problem


def test_entry_times_never_go_back_along_the_chain(engine: Engine) -> None:
    minutes = (30, 10, 45, 40)
    with engine.store.write() as tx:
        tx.audit_append([AuditEvent("t", "a", "x", "t", "1", T0 + timedelta(minutes=minutes[0]))])
    for i, m in enumerate(minutes[1:], 2):  # each in its own transaction, as concurrent writers commit
        with engine.store.write() as tx:
            tx.audit_append([AuditEvent("t", "a", "x", "t", str(i), T0 + timedelta(minutes=m))])
    with engine.store.read() as tx:
        times = [e.event.at for e in tx.audit_list(AuditFilter(tenant_id="t", limit=10))]
    assert sorted(times) == times == [T0 + timedelta(minutes=m) for m in (30, 30, 45, 45)]


@pytest.mark.parametrize(
    ("tamper", "problem"),
    [
        ("UPDATE anchors SET created_at = window_end - 1 WHERE anchor_seq = 1", "had not ended"),
        ("UPDATE anchors SET window_end = window_end + 3600000000 WHERE anchor_seq = 1", "follow anchor 1"),
        ("UPDATE anchors SET window_start = window_start + 60000000 WHERE anchor_seq = 2", "follow anchor 1"),
    ],
)
def test_an_anchor_whose_times_do_not_fit_is_named_without_the_sink(
    anchored: tuple[Engine, sinks.FileSink], tamper: str, problem: str
) -> None:
    engine, _sink = anchored
    sql(engine, tamper)
    with engine.store.read() as tx:
        result = anchors.verify_tenant(tx, "default")
    assert not result.ok and problem in (result.problem or ""), result.problem


def test_once_anchors_are_signed_none_is_written_or_verified_without_the_key(engine: Engine, tmp_path: Path) -> None:
    # Losing the key file must not turn signing, or its checking, off in silence.
    from jobgate.core.errors import ValidationError
    from jobgate.evidence.keys import Signer
    from jobgate.governance import signing

    pair = signing.generate("evidence-1")
    signer = Signer(pair.key_id, pair.private_b64)
    sink = sinks.FileSink(tmp_path / "anchors.jsonl")
    with engine.store.write() as tx:
        tx.audit_append([AuditEvent("default", "a", "test.fact", "test", str(i), at) for i, at in enumerate(TIMES, 1)])
    with engine.store.write() as tx:
        first = anchors.anchor_due(
            tx, "default", now=T0 + timedelta(minutes=90), window=WINDOW, sink=sink, signer=signer
        )
    assert [a.signature is not None for a in first] == [True]
    with pytest.raises(ValidationError) as refused, engine.store.write() as tx:
        anchors.anchor_due(tx, "default", now=T0 + timedelta(hours=3), window=WINDOW, sink=sink)
    assert refused.value.field == "evidence.signing_key" and "evidence-1" in refused.value.message
    with engine.store.read() as tx:
        assert len(tx.anchors.of("default")) == 1  # nothing stored
        keyless = anchors.verify_tenant(tx, "default", sink_records=sink.records())
        keyed = anchors.verify_tenant(
            tx,
            "default",
            sink_records=sink.records(),
            keys={pair.key_id: signing.public_key(signer.public_b64, field="k")},
        )
    assert len(sink.records()) == 1  # nor sent to the sink
    assert not keyless.ok and "no evidence key is available" in str(keyless.problem)
    assert keyed.ok


def test_a_deployment_that_never_signed_still_anchors_and_verifies_unsigned(
    anchored: tuple[Engine, sinks.FileSink],
) -> None:
    engine, sink = anchored
    with engine.store.read() as tx:
        assert anchors.verify_tenant(tx, "default", sink_records=sink.records()).ok


@pytest.mark.parametrize("answer", ["refused", "unreachable"])
def test_an_http_sink_failure_names_no_credential_and_stores_no_anchor(engine: Engine, answer: str) -> None:
    """The sink URL is configuration and may carry a credential: an anchor that the sink refuses
    (or cannot take) is not written, and the failure (an anchor job's sealed error message) and
    the sink's stored name say scheme and host only."""
    from tests.runtime.local_http import Recorder, closed_port_url, local_server

    from jobgate.core.errors import UnavailableError

    with engine.store.write() as tx:
        tx.audit_append(
            [AuditEvent("default", "a", "test.fact", "test", str(i), at, payload={}) for i, at in enumerate(TIMES, 1)]
        )

    def anchor(url: str) -> None:
        secret_url = url.replace("http://", "http://auditor:S3cret@").rstrip("/") + "/sink?token=TOPSECRET"
        sink = sinks.HttpSink(secret_url, timeout=2)
        assert "S3cret" not in sink.name and "TOPSECRET" not in sink.name and sink.name.startswith("http://127.0.0.1:")
        with pytest.raises(UnavailableError) as failed, engine.store.write() as tx:
            anchors.anchor_due(tx, "default", now=T0 + timedelta(hours=2, minutes=30), window=WINDOW, sink=sink)
        said = str(failed.value)
        assert "S3cret" not in said and "TOPSECRET" not in said and failed.value.field == "evidence.anchor_sink_url"

    if answer == "refused":
        with local_server(Recorder(post_status=500)) as (url, _recorder):
            anchor(url)
    else:
        anchor(closed_port_url())
    with engine.store.read() as tx:
        assert tx.anchors.last("default") is None  # nothing anchored that the sink did not take
