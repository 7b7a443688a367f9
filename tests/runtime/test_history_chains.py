"""History chains: a worker seals the runs it ends from the chain its claim returned.

``job_runs`` keeps ``transition_count`` (every writer adds to it) and the history chain over
``history_extent`` transitions (``store.sql.chains``). Whatever path a run takes — retried,
dead-lettered and requeued, cancelled while queued, rescued — its row's chain, where it claims
to cover the whole history, equals the chain recomputed from its transitions, and its seal
verifies; runs a worker ends under its lease are sealed from the chain (no history values kept
with the seal, so nothing was read back), the others by reading.
"""

from __future__ import annotations

import json

from runtime_support import running_worker, wait_status
from sqlalchemy import text

from helpers import define, history_values
from jobgate.core import seals
from jobgate.core.records import Finding
from jobgate.core.states import RunStatus
from jobgate.export.bundles import build_bundle, run_scope, verify_bundle
from jobgate.service import audit, control
from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest
from jobgate.testing import connection

OK_ON = [{"name": "ok_on", "pattern": "[0-9]+"}]


def _chain_state(engine: Engine, rid: str) -> tuple[int, int | None, str | None, list[list[object]]]:
    with engine.store.read() as tx:
        row = (
            connection(tx)
            .execute(
                text("SELECT transition_count, history_extent, history_hash FROM job_runs WHERE job_run_id = :r"),
                {"r": rid},
            )
            .one()
        )
        history = history_values(connection(tx), rid)
    return int(row[0]), row[1], row[2], history


def _latest_run_seal(engine: Engine, rid: str) -> tuple[int, str]:
    with engine.store.read() as tx:
        row = (
            connection(tx)
            .execute(
                text(
                    "SELECT id, content FROM record_seals WHERE kind = 'run' AND record_id = :r"
                    " ORDER BY id DESC LIMIT 1"
                ),
                {"r": rid},
            )
            .one()
        )
    return int(row[0]), str(row[1])


def _kept_values(engine: Engine, rid: str, content: str) -> dict[str, object]:
    """The values a run's seal kept: inline, or in the ``seal_values`` row it points at."""
    values_id = seals.packed_id(content)
    if values_id is None:
        return dict(json.loads(content))
    with engine.store.read() as tx:
        packed = connection(tx).execute(text("SELECT packed FROM seal_values WHERE id = :i"), {"i": values_id}).scalar()
    return dict(json.loads(seals.unpacked_content(bytes(packed), rid) or "{}"))


def _completed_from_its_chain(engine: Engine) -> str:
    """A run of a fresh definition, run to COMPLETED by a worker and sealed from its chain."""
    rid = engine.submit(SubmitRequest(define(engine))).run.job_run_id
    with running_worker(engine):
        wait_status(engine, rid, RunStatus.COMPLETED)
    assert _sealed_from_chain(engine, rid)
    return rid


def _findings(engine: Engine) -> list[Finding]:
    return [f for r in audit.verify_records(engine, ["default"]) for f in r.findings]


def _sealed_from_chain(engine: Engine, rid: str) -> bool:
    return "history" not in json.loads(_latest_run_seal(engine, rid)[1])  # read: the transitions' text is kept


def _assert_consistent(engine: Engine, rid: str) -> None:
    count, extent, chain, history = _chain_state(engine, rid)
    assert count == len(history)
    if chain is not None and extent == count:
        assert chain == seals.history_of(history)


def test_a_worker_seals_what_it_ends_from_its_chain(engine: Engine) -> None:
    job = define(engine, handler="engine_handlers:fail_until", retry_policy="test_fixed_v1", params=OK_ON)
    first = engine.submit(SubmitRequest(job, params={"ok_on": "1"})).run.job_run_id
    retried = engine.submit(SubmitRequest(job, params={"ok_on": "3"})).run.job_run_id  # two retries first
    with running_worker(engine):
        for rid in (first, retried):
            wait_status(engine, rid, RunStatus.COMPLETED)
    for rid in (first, retried):
        count, extent, chain, history = _chain_state(engine, rid)
        assert count == extent == len(history) and chain == seals.history_of(history)
        assert _sealed_from_chain(engine, rid)  # nothing read back to seal it
    assert _chain_state(engine, retried)[0] == 11  # created, admitted, 3 x (claimed, started, ended)
    assert all(r.ok for r in audit.verify_records(engine, ["default"]))


def test_dead_lettered_requeued_and_cancelled_runs_are_sealed_by_reading(engine: Engine) -> None:
    dead = define(engine, handler="engine_handlers:fail_final")
    ok = define(engine)
    lettered = engine.submit(SubmitRequest(dead)).run.job_run_id
    cancelled = engine.submit(SubmitRequest(ok)).run.job_run_id
    control.cancel_run(engine, cancelled, actor="ops", reason="not needed")
    with running_worker(engine):
        wait_status(engine, lettered, RunStatus.DEAD_LETTERED)
        _, extent, chain, _ = _chain_state(engine, lettered)
        assert chain is None and extent is None  # a dead letter clears the chain
        assert not _sealed_from_chain(engine, lettered)
        control.requeue_run(engine, lettered, actor="ops")
        wait_status(engine, lettered, RunStatus.DEAD_LETTERED)
    for rid in (lettered, cancelled):
        _assert_consistent(engine, rid)
        assert not _sealed_from_chain(engine, rid)
    assert _chain_state(engine, cancelled)[0] == 3  # created, admitted, cancelled: counted by every writer
    assert all(r.ok for r in audit.verify_records(engine, ["default"]))


def test_a_requeued_runs_sealed_letters_are_checked_only_with_the_values_its_seal_kept(engine: Engine) -> None:
    """Found by a review: while a requeued run waits, what it may have changed since its seal
    (``max_attempts``, its dead letters) is held to the values that seal kept; with those values
    gone, nothing shows the change was a requeue's: it fails closed."""
    lettered = engine.submit(SubmitRequest(define(engine, handler="engine_handlers:fail_final"))).run.job_run_id
    with running_worker(engine):
        wait_status(engine, lettered, RunStatus.DEAD_LETTERED)
    control.requeue_run(engine, lettered, actor="ops")  # no worker: it waits, open, past its seal
    assert _findings(engine) == []
    with engine.store.write() as tx:
        connection(tx).execute(text("UPDATE record_seals SET content = NULL WHERE record_id = :r"), {"r": lettered})
    found = _findings(engine)
    assert [f.record_id for f in found] == [lettered]  # the identity a requeue changed is no longer shown sound


def test_a_requeued_run_verifies_while_it_waits_and_after_it_ends_again(engine: Engine) -> None:
    """A requeue raises ``max_attempts``, which the seal of the dead letter holds: verification
    lets a requeue raise it and nothing else, while the run is open and once it is sealed again."""
    lettered = engine.submit(SubmitRequest(define(engine, handler="engine_handlers:fail_final"))).run.job_run_id
    with running_worker(engine):
        wait_status(engine, lettered, RunStatus.DEAD_LETTERED)
    control.requeue_run(engine, lettered, actor="ops")  # no worker: it waits, open, past its seal
    assert _findings(engine) == []
    with running_worker(engine):
        wait_status(engine, lettered, RunStatus.DEAD_LETTERED)
    assert _findings(engine) == []
    bundle = build_bundle(engine, run_scope(engine, lettered))  # its seals, read offline by the same rules
    checked = verify_bundle(bundle)
    assert not checked.problems, checked.problems
    control.requeue_run(engine, lettered, actor="ops")  # and an open run is held to the same rules
    with engine.store.write() as tx:
        connection(tx).execute(
            text("UPDATE job_runs SET requested_by = 'mallory' WHERE job_run_id = :r"), {"r": lettered}
        )
    assert [(f.problem, f.part, f.column) for f in _findings(engine)] == [("changed", "identity", "requested_by")]


def test_a_dead_letter_resolved_in_place_is_sealed_again_and_verifies(engine: Engine) -> None:
    lettered = engine.submit(SubmitRequest(define(engine, handler="engine_handlers:fail_final"))).run.job_run_id
    with running_worker(engine):
        wait_status(engine, lettered, RunStatus.DEAD_LETTERED)
    with engine.store.write() as tx:
        letter = tx.dead_letter_open_for(lettered)
        assert letter is not None
        tx.dead_letter_resolve(letter.dead_letter_id, "discarded by ops", engine.clock.now())
    with engine.store.read() as tx:
        count = connection(tx).execute(text("SELECT count(*) FROM record_seals WHERE record_id = :r"), {"r": lettered})
        assert count.scalar_one() == 2
    assert _findings(engine) == []


def test_a_changed_transition_breaks_a_chained_seal(engine: Engine) -> None:
    rid = _completed_from_its_chain(engine)
    with engine.store.write() as tx:
        connection(tx).execute(
            text("UPDATE run_transitions SET actor = 'mallory' WHERE job_run_id = :r AND reason = 'started'"),
            {"r": rid},
        )
    found = _findings(engine)
    assert [(f.record_id, f.part) for f in found] == [(rid, "history")]
    assert "one of its transitions was changed, removed or added" in found[0].message()


def test_a_changed_column_of_a_chained_seal_is_named_with_both_values(engine: Engine) -> None:
    rid = _completed_from_its_chain(engine)
    with engine.store.write() as tx:
        connection(tx).execute(text("UPDATE job_runs SET queue = 'elsewhere' WHERE job_run_id = :r"), {"r": rid})
    found = _findings(engine)
    assert [(f.record_id, f.part, f.column) for f in found] == [(rid, "identity", "queue")]
    assert found[0].detail == 'sealed "default", now "elsewhere"'


def test_a_run_seal_in_the_older_digest_form_still_names_the_column(engine: Engine) -> None:
    """Run seals of earlier versions kept four hex digits a column; their content is not part of
    the seal, so the older form verifies as before and names the column (without values)."""
    rid = _completed_from_its_chain(engine)
    seal_id, content = _latest_run_seal(engine, rid)
    kept = _kept_values(engine, rid, content)
    older = {part: "".join(seals.column_digests(kept[part])) for part in ("identity", "outcome")}
    with engine.store.write() as tx:
        older_content = json.dumps({"digests": older})
        connection(tx).execute(
            text("UPDATE record_seals SET content = :c WHERE id = :i"), {"c": older_content, "i": seal_id}
        )
    assert all(r.ok for r in audit.verify_records(engine, ["default"]))  # the older form verifies
    with engine.store.write() as tx:
        connection(tx).execute(text("UPDATE job_runs SET error_message = 'x' WHERE job_run_id = :r"), {"r": rid})
    found = _findings(engine)
    assert [(f.record_id, f.part, f.column, f.detail) for f in found] == [(rid, "outcome", "error_message", None)]


def test_a_worker_packs_the_values_its_seals_keep(engine: Engine) -> None:
    """The runs a worker ends together keep their values in one compressed ``seal_values`` row
    (what naming a changed column needs), each seal pointing at it; the values are the run's."""
    rid = _completed_from_its_chain(engine)
    _, content = _latest_run_seal(engine, rid)
    assert seals.packed_id(content) is not None
    kept = _kept_values(engine, rid, content)
    with engine.store.read() as tx:
        queue = connection(tx).execute(text("SELECT queue FROM job_runs WHERE job_run_id = :r"), {"r": rid}).scalar()
    assert kept["identity"][seals.RUN_IDENTITY.index("queue")] == queue  # type: ignore[index]


def test_a_seal_keeping_its_values_inline_still_names_column_and_values(engine: Engine) -> None:
    """Seals written before the values were packed keep them in ``content``: read as before."""
    rid = _completed_from_its_chain(engine)
    seal_id, content = _latest_run_seal(engine, rid)
    inline = json.dumps(_kept_values(engine, rid, content), separators=(",", ":"))
    with engine.store.write() as tx:
        connection(tx).execute(text("UPDATE record_seals SET content = :c WHERE id = :i"), {"c": inline, "i": seal_id})
        connection(tx).execute(text("UPDATE job_runs SET queue = 'elsewhere' WHERE job_run_id = :r"), {"r": rid})
    found = _findings(engine)
    assert [(f.record_id, f.part, f.column) for f in found] == [(rid, "identity", "queue")]
    assert found[0].detail == 'sealed "default", now "elsewhere"'


def test_changed_packed_values_cannot_hide_a_change(engine: Engine) -> None:
    """The packed values are diagnosis only: rewriting or deleting them leaves every seal
    verifying, and a changed run is still found, named by its part."""
    rid = _completed_from_its_chain(engine)
    _, content = _latest_run_seal(engine, rid)
    values_id = seals.packed_id(content)
    with engine.store.write() as tx:
        connection(tx).execute(text("DELETE FROM seal_values WHERE id = :i"), {"i": values_id})
    assert all(r.ok for r in audit.verify_records(engine, ["default"]))
    with engine.store.write() as tx:
        connection(tx).execute(text("UPDATE job_runs SET queue = 'elsewhere' WHERE job_run_id = :r"), {"r": rid})
    found = _findings(engine)
    assert [(f.record_id, f.part, f.column) for f in found] == [(rid, "identity", None)]
