"""Record seals (``core.seals``), their batches in the audit chain and the evidence an export packs
(``tx.evidence``), on both backends.

The contract: every write to a sealed record seals it in the same transaction (a run when it
ends); the pending seals of a tenant are chained once, in batches recorded in its audit chain;
verification finds no fault in records the store wrote and names the record a later change
touched; the raw rows an export packs recompute to their seal, and the seal's proof leads to the
root its batch entry chained.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import text
from tests.store_contract.support import T0, complete, dead_letter, make

from jobgate.core import merkle, seals
from jobgate.core.audit import AuditEvent
from jobgate.core.encoding import to_us
from jobgate.core.records import AuditFilter, StepRecord, StoredToken, WorkflowRecord, WorkflowUpdate
from jobgate.core.states import RunStatus
from jobgate.service.engine import Engine
from jobgate.testing import connection


def _token(token_id: str, tenant: str = "default") -> StoredToken:
    return StoredToken(token_id, tenant, "operator", None, "ci", "hash", "admin", T0, None, None, None)


def test_ended_runs_and_written_records_are_pending_until_chained(engine: Engine) -> None:
    with engine.store.read() as tx:
        assert tx.seals_tenants() == [] and tx.seals_pending_tenants() == []
    complete(engine)
    make(engine, tenant="tenant-c")  # open: nothing sealed yet
    with engine.store.write() as tx:
        tx.token_put(_token("tok-1", "tenant-b"))
    with engine.store.read() as tx:
        assert tx.seals_tenants() == ["default", "tenant-b", "tenant-c"]  # tenants with sealed kinds of record
        assert tx.seals_pending_tenants() == ["default", "tenant-b"]
    with engine.store.write() as tx:
        (batch,) = tx.seals_chain("default", T0)
        assert tx.seals_chain("default", T0) == []  # chained already
        assert tx.seals_pending_tenants() == ["tenant-b"]
        (entry,) = tx.audit_list(AuditFilter("default", action=seals.BATCH_ACTION))
    assert (batch.tenant_id, batch.seq, batch.count) == ("default", entry.seq, 1)
    assert entry.event.payload["root"] == batch.root and entry.event.payload["count"] == 1
    with engine.store.write() as tx:
        tx.token_revoke("tenant-b", "tok-1", "admin", T0)  # a change seals the record again
        (again,) = tx.seals_chain("tenant-b", T0)
    assert again.count == 2


def test_verification_finds_nothing_wrong_with_what_the_store_wrote(engine: Engine) -> None:
    complete(engine)
    dead_letter(engine)
    with engine.store.write() as tx:
        tx.token_put(_token("tok-1"))
        period = tx.safe_mode_activate("default", "ada", "drill", T0)
        assert period is not None
        # with the audit entries the service's doors write beside every making of a record
        tx.audit_append(
            [
                AuditEvent("default", "admin", "token.created", "token", "tok-1", T0),
                AuditEvent(
                    "default", "ada", "safe_mode.activated", "safe_mode", "default", T0,
                    payload={"activation": period.activation},
                ),
            ]
        )  # fmt: skip
        tx.seals_chain("default", T0)
        tx.token_revoke("default", "tok-1", "admin", T0)  # sealed again, not chained yet
        # with the audit entry the service's one door writes beside every revocation
        tx.audit_append([AuditEvent("default", "admin", "token.revoked", "token", "tok-1", T0)])
    with engine.store.read() as tx:
        report = tx.seals_verify("default")
        assert tx.seals_verify("tenant-c").ok
    assert report.ok, [f.message() for f in report.findings]
    assert (report.tenant_id, report.batches, report.pending) == ("default", 1, 1)
    assert (report.checked["run"], report.checked["token"], report.checked["safe_mode"]) == (2, 1, 1)


def test_verification_names_a_record_changed_behind_the_stores_back(engine: Engine) -> None:
    done = complete(engine)
    with engine.store.write() as tx:
        tx.seals_chain("default", T0)
        connection(tx).execute(
            text("UPDATE job_runs SET error_message = 'rewritten' WHERE job_run_id = :r"), {"r": done.job_run_id}
        )
    with engine.store.read() as tx:
        report = tx.seals_verify("default")
    assert not report.ok
    (finding,) = report.findings
    assert (finding.kind, finding.record_id, finding.problem, finding.part) == (
        "run",
        done.job_run_id,
        "changed",
        "outcome",
    )


def test_batch_entries_record_each_batchs_range_of_seals(engine: Engine) -> None:
    complete(engine)
    with engine.store.write() as tx:
        (first,) = tx.seals_chain("default", T0)
    complete(engine)
    complete(engine)
    with engine.store.write() as tx:
        (second,) = tx.seals_chain("default", T0)
        entries = tx.evidence.batch_entries("default")
        assert tx.evidence.batch_entries("tenant-b") == []
    assert [(e.seq, e.count, e.root) for e in entries] == [
        (first.seq, 1, first.root),
        (second.seq, 2, second.root),
    ]
    assert entries[0].after == 0 and entries[1].after == entries[0].last_id < entries[1].last_id


def test_the_seals_chained_through_an_entry_are_its_last_batchs(engine: Engine) -> None:
    """``seals_chained_through``: the last seal id a batch entry at or before an audit entry
    chained (what an anchor covering that entry covers of the seals; retention asks it)."""
    complete(engine)
    with engine.store.write() as tx:
        (first,) = tx.seals_chain("default", T0)
    complete(engine)
    with engine.store.write() as tx:
        (second,) = tx.seals_chain("default", T0)
        entries = tx.evidence.batch_entries("default")
        assert tx.seals_chained_through("default", first.seq - 1) == 0
        assert tx.seals_chained_through("default", first.seq) == entries[0].last_id
        assert tx.seals_chained_through("default", second.seq - 1) == entries[0].last_id
        assert tx.seals_chained_through("default", second.seq) == entries[1].last_id
        assert tx.seals_chained_through("tenant-b", second.seq) == 0


def test_an_exported_run_recomputes_to_its_seal_and_its_proof_to_the_batch_root(engine: Engine) -> None:
    done = complete(engine)
    lettered = dead_letter(engine)
    with engine.store.write() as tx:
        (batch,) = tx.seals_chain("default", T0)
    with engine.store.read() as tx:
        raw = tx.evidence.raw_runs([lettered.job_run_id, "TGJOBRUN-unknown", done.job_run_id])
        proofs = tx.evidence.seal_proofs("default", [("run", done.job_run_id), ("run", "TGJOBRUN-unknown")])
    assert [r["row"]["job_run_id"] for r in raw] == [lettered.job_run_id, done.job_run_id]  # in the order asked
    exported = raw[1]
    assert (exported["row"]["status"], exported["row"]["created_at"]) == ("COMPLETED", to_us(done.created_at))
    assert [t["to_status"] for t in exported["transitions"]] == [
        "CREATED",
        "SCHEDULED",
        "DISPATCHED",
        "RUNNING",
        "COMPLETED",
    ]
    assert exported["dead_letters"] == [] and len(raw[0]["dead_letters"]) == 1
    (proof,) = proofs
    parts = seals.run_parts(exported["row"], exported["transitions"], exported["dead_letters"])
    assert (proof["identity"], proof["outcome"], proof["history"]) == (parts.identity, parts.outcome, parts.history)
    assert proof["seal"] == seals.seal_of("run", done.job_run_id, proof["event"], parts)
    assert proof["batch_seq"] == batch.seq
    assert merkle.verify(proof["seal"], proof["proof"], batch.root)


def test_a_seal_not_chained_yet_has_no_batch(engine: Engine) -> None:
    with engine.store.write() as tx:
        tx.token_put(_token("tok-1"))
    with engine.store.read() as tx:
        (proof,) = tx.evidence.seal_proofs("default", [("token", "tok-1")])
        assert tx.evidence.seal_proofs("default", []) == []
    assert (proof["kind"], proof["record_id"], proof["event"], proof["batch_seq"]) == ("token", "tok-1", "sealed", None)
    assert "proof" not in proof


def test_raw_rows_are_the_sealed_columns_of_a_single_row_record(engine: Engine) -> None:
    with engine.store.write() as tx:
        tx.token_put(_token("tok-1"))
        tx.token_put(_token("tok-2"))
        tx.token_put(_token("tok-1b", tenant="tenant-b"))
        (row,) = tx.evidence.raw_rows("token", "default", {"token_id": "tok-1"})
        assert len(tx.evidence.raw_rows("token", "default", {})) == 2
        assert tx.evidence.raw_rows("token", "tenant-b", {"token_id": "tok-1"}) == []
        (proof,) = tx.evidence.seal_proofs("default", [("token", "tok-1")])
    assert set(row) == set(seals.SPECS["token"].columns)
    assert (row["token_id"], row["tenant_id"], row["created_at"]) == ("tok-1", "default", to_us(T0))
    assert seals.row_parts(seals.SPECS["token"], row).identity == proof["identity"]


def test_an_exported_workflow_is_its_row_steps_and_transitions(engine: Engine) -> None:
    w = WorkflowRecord(
        "wf-1", "default", "key-1", "flow", 1, "sha256:f", "MAINTENANCE_JOB", RunStatus.RUNNING, "forward",
        {}, {}, {}, "snap-1", "sha256:c", None, T0,
    )  # fmt: skip
    ended = T0 + timedelta(minutes=1)
    with engine.store.write() as tx:
        tx.workflow_insert(w, [StepRecord("wf-1", "a", "default", 0, "DONE")], [])
        tx.workflow_apply(
            WorkflowUpdate("wf-1", "default", 0, {"status": RunStatus.COMPLETED, "ended_at": ended}, [], [])
        )
        raw = tx.evidence.raw_workflow("wf-1")
        assert tx.evidence.raw_workflow("wf-unknown") is None
        (proof,) = tx.evidence.seal_proofs("default", [("workflow", "wf-1")])
    assert raw is not None
    assert (raw["row"]["status"], raw["row"]["ended_at"]) == ("COMPLETED", to_us(ended))
    assert [s["step_id"] for s in raw["steps"]] == ["a"] and raw["transitions"] == []
    parts = seals.workflow_parts(raw["row"], raw["steps"], raw["transitions"])
    assert (proof["identity"], proof["outcome"], proof["history"]) == (parts.identity, parts.outcome, parts.history)


def test_the_audit_log_began_at_its_first_entry_of_any_tenant(engine: Engine) -> None:
    with engine.store.read() as tx:
        assert tx.audit_log_began() is None
    with engine.store.write() as tx:
        tx.audit_append([AuditEvent("tenant-b", "ada", "token.created", "token", "t2", T0 + timedelta(seconds=5))])
    with engine.store.write() as tx:
        tx.audit_append([AuditEvent("default", "ada", "token.created", "token", "t1", T0 + timedelta(seconds=9))])
        tx.audit_append([AuditEvent("tenant-c", "ada", "token.created", "token", "t3", T0 + timedelta(seconds=7))])
    with engine.store.read() as tx:  # unscoped: every tenant's entries
        assert tx.audit_log_began() == to_us(T0 + timedelta(seconds=5))
