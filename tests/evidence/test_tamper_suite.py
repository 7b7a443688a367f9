"""The tamper suite: one direct edit of the database (or of the anchor sink's file) at a time,
each on a fresh copy of a governed world, each caught by ``jobgate audit verify --records``
with a message naming the record.

The world (``world.py``) has completed, dead-lettered and cancelled runs, a workflow run,
definitions and their versions, a snapshot, approvals (one revoked), tokens (one revoked), a
paused schedule and its changes, a rejected request, a safe-mode period, the audit chain, its
anchors and the sink's copies. The attacker writes as the database's owner (past row security),
and may recompute any hash: only what a seal, a batch root chained into the audit log, an
anchor or the sink's copy pins down can be caught, and the table in docs/guide/evidence.md says
what cannot.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import Connection, text
from world import Copies, World, build

from jobgate.cli import cli
from jobgate.core import seals
from jobgate.core.canonical import digest, isoformat_utc
from jobgate.core.errors import JobgateError

Tamper = str | Callable[[Connection, dict[str, Any]], None]


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def copies(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Copies]:
    folder = tmp_path_factory.mktemp(f"world-{request.param}")
    if request.param == "sqlite":
        url = f"sqlite:///{folder}/jobgate.db"
    else:
        url = request.getfixturevalue("pg_schema_url")
        from tests.conftest import _truncate_pg

        _truncate_pg(url)
    with pytest.MonkeyPatch.context() as patch:  # the workflow step's handler marks its runs
        patch.setenv("JOBGATE_TEST_MARKER", str(folder / "marker.txt"))
        world = build(folder, url)
    made = Copies(world, folder)
    yield made
    made.close()


def verify(world: World) -> tuple[int, str]:
    result = CliRunner().invoke(
        cli, ["--config", str(world.config_file), "--db", world.url, "audit", "verify", "--records"]
    )
    out = result.output
    if isinstance(result.exception, JobgateError):  # what ``main`` prints on stderr, exit 1
        out += f"error: {result.exception.code}: {result.exception}\n"
    elif result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, out


def test_the_untouched_world_verifies(copies: Copies) -> None:
    world = copies.fresh()
    code, out = verify(world)
    assert code == 0, out
    assert "sealed records" in out and "pending" in out


def _sql(statement: str) -> Callable[[Connection, dict[str, Any]], None]:
    def apply(conn: Connection, ids: dict[str, Any]) -> None:
        conn.execute(text(statement.format(**ids)))

    return apply


def _rewrite_run_and_its_seal(conn: Connection, ids: dict[str, Any]) -> None:
    """The consistent rewrite: the run's error and its seal row, recomputed with the published
    rules. The batch root in the audit log no longer matches."""
    rid = ids["run"]
    conn.execute(text("UPDATE job_runs SET error_message = 'forged' WHERE job_run_id = :r"), {"r": rid})
    run = conn.execute(text("SELECT * FROM job_runs WHERE job_run_id = :r"), {"r": rid}).mappings().one()
    ts = (
        conn.execute(text("SELECT * FROM run_transitions WHERE job_run_id = :r ORDER BY id"), {"r": rid})
        .mappings()
        .all()
    )
    parts = seals.run_parts(run, ts, [])
    seal = seals.seal_of("run", rid, "sealed", parts)
    conn.execute(
        text(
            "UPDATE record_seals SET outcome = :o, seal = :s WHERE id ="
            " (SELECT max(id) FROM record_seals WHERE kind = 'run' AND record_id = :r)"
        ),
        {"o": parts.outcome, "s": seal, "r": rid},
    )


def _forge(table: str, key: str, source: str, **changes: Any) -> Callable[[Connection, dict[str, Any]], None]:
    """A row that never happened: a copy of a real one (``key`` = the world's id ``source``)
    with ``changes``, inserted whole."""

    def apply(conn: Connection, ids: dict[str, Any]) -> None:
        found = conn.execute(text(f"SELECT * FROM {table} WHERE {key} = :k"), {"k": ids[source]}).mappings().one()
        row = {**found, **{c: ids.get(v, v) if isinstance(v, str) else v for c, v in changes.items()}}
        cols = ", ".join(row)
        conn.execute(text(f"INSERT INTO {table} ({cols}) VALUES ({', '.join(':' + c for c in row)})"), row)

    return apply


_forge_run = _forge(
    "job_runs", "job_run_id", "run", job_run_id="TGJOBRUN-forged", idempotency_key="forged-key", slot=None
)
_forge_approval = _forge("definition_approvals", "approval_id", "approval", approval_id=9999, approved_by="mallory")
_forge_token = _forge(
    "api_tokens", "token_id", "token", token_id="forgedtoken00000", role="admin", secret_hash="0" * 64
)
# a dead letter of the dead-lettered run, copied onto a run that completed
_forge_letter = _forge("dead_letters", "job_run_id", "dead", dead_letter_id="TGDL-forged", job_run_id="run")


def _extra_transition(conn: Connection, ids: dict[str, Any]) -> None:
    conn.execute(
        text(
            "INSERT INTO run_transitions (job_run_id, tenant_id, from_status, to_status, attempt, reason, actor, at)"
            " SELECT job_run_id, tenant_id, to_status, to_status, attempt, reason, 'mallory', at + 1"
            " FROM run_transitions WHERE id = (SELECT max(id) FROM run_transitions WHERE job_run_id = :r)"
        ),
        {"r": ids["run"]},
    )


def _rewrite_anchor_everywhere(world: World) -> None:
    """A writer with the database and the sink's file (not the key): the first anchor's window
    moved, in the table and in the sink's copy alike. Only the signature is left to catch it."""
    url = world.url
    from sqlalchemy import create_engine
    from world import admin_url

    eng = create_engine(admin_url(url).replace("postgresql://", "postgresql+psycopg://", 1))
    with eng.begin() as conn:
        conn.execute(text("UPDATE anchors SET window_start = window_start - 3600000000 WHERE anchor_seq = 1"))
    eng.dispose()
    lines = [json.loads(x) for x in world.sink.read_text().splitlines() if x.strip()]
    first = lines[0]
    start = datetime.fromisoformat(first["window_start"].replace("Z", "+00:00")) - timedelta(hours=1)
    first["window_start"] = isoformat_utc(start)
    world.sink.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in lines))


def _sink_edit(change: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]) -> Callable[[World], None]:
    def apply(world: World) -> None:
        lines = [json.loads(x) for x in world.sink.read_text().splitlines() if x.strip()]
        world.sink.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in change(lines)))

    return apply


def _sink_root(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    lines[0]["root"] = "sha256:" + "1" * 64
    return lines


def _delete_run_and_history(conn: Connection, ids: dict[str, Any]) -> None:
    for table in ("run_transitions", "job_runs"):
        conn.execute(text(f"DELETE FROM {table} WHERE job_run_id = :r"), {"r": ids["run"]})


def _dead_letter_as_success(conn: Connection, ids: dict[str, Any]) -> None:
    """The reported case: a dead-lettered run made COMPLETED, its transition, status and open
    dead letter all changed together."""
    for statement in (
        "UPDATE job_runs SET status = 'COMPLETED', error_code = NULL, error_message = NULL WHERE job_run_id = :r",
        "UPDATE run_transitions SET to_status = 'COMPLETED', reason = 'completed'"
        " WHERE job_run_id = :r AND to_status = 'DEAD_LETTERED'",
        "DELETE FROM dead_letters WHERE job_run_id = :r",
    ):
        conn.execute(text(statement), {"r": ids["dead"]})


FIRST_T = "(SELECT min(id) FROM run_transitions WHERE job_run_id = '{run}')"
LAST_BATCH = "(SELECT max(seq) FROM audit_log WHERE action = 'records.sealed')"
LAST_T = "(SELECT max(id) FROM run_transitions WHERE job_run_id = '{run}')"
CHANGE = "(SELECT min(id) FROM schedule_changes WHERE schedule_id = '{schedule}')"
SEAL = "(SELECT min(id) FROM record_seals WHERE kind = 'run' AND record_id = '{run}')"
BATCH = "(SELECT min(seq) FROM audit_log WHERE action = 'records.sealed')"


def _run(assignment: str, target: str = "run") -> Callable[[Connection, dict[str, Any]], None]:
    return _sql(f"UPDATE job_runs SET {assignment} WHERE job_run_id = '{{{target}}}'")


def _row(table: str, assignment: str, where: str) -> Callable[[Connection, dict[str, Any]], None]:
    return _sql(f"UPDATE {table} SET {assignment} WHERE {where}")


# (name, tamper, what the message must name: a key of the world's ids, or a literal fragment)
TAMPERS: list[tuple[str, Tamper, str]] = [
    # runs: every column an auditor reads
    ("run status", _run("status = 'FAILED'"), "run"),
    ("run error message", _run("error_message = 'x'"), "run"),
    ("run result", _run("result = '{{\"ok\": false}}'"), "run"),
    ("run params", _run('params = \'{{"month": "1999-01"}}\''), "run"),
    ("run definition digest", _run("definition_digest = 'sha256:00'"), "run"),
    ("run definition version", _run("definition_version = 9"), "run"),
    ("run config digest", _run("config_digest = 'sha256:00'"), "run"),
    ("run snapshot", _run("config_snapshot_id = 'other'"), "run"),
    ("run requester", _run("requested_by = 'mallory'"), "run"),
    ("run reviewer", _run("reviewed_by = 'mallory'"), "run"),
    ("run trigger", _run("trigger = '{{}}'"), "run"),
    ("run trigger type", _run("trigger_type = 'cron'"), "run"),
    ("run created at", _run("created_at = created_at - 1"), "run"),
    ("run ended at", _run("ended_at = ended_at + 1"), "run"),
    ("run attempts used", _run("attempt = 0"), "run"),
    ("run artifact digest", _run("artifact_sha256 = 'ab'"), "run"),
    ("run queue", _run("queue = 'other'"), "run"),
    ("run priority", _run("priority = 'critical'"), "run"),
    ("cancelled run completed", _run("status = 'COMPLETED'", "cancelled"), "cancelled"),
    ("run deleted", _sql("DELETE FROM job_runs WHERE job_run_id = '{run}'"), "run"),
    ("run deleted with its history", _delete_run_and_history, "run"),
    ("dead letter rewritten as a success", _dead_letter_as_success, "dead"),
    ("run and seal rewritten consistently", _rewrite_run_and_its_seal, "records.sealed"),
    ("forged finished run", _forge_run, "TGJOBRUN-forged"),
    # transitions (the attempts are read from them)
    ("transition actor", _row("run_transitions", "actor = 'mallory'", f"id = {FIRST_T}"), "run"),
    ("transition reason", _row("run_transitions", "reason = 'forged'", f"id = {LAST_T}"), "run"),
    ("transition time", _row("run_transitions", "at = at + 1", f"id = {LAST_T}"), "run"),
    ("transition detail", _row("run_transitions", "detail = '{{}}'", f"id = {LAST_T}"), "run"),
    ("transition attempt number", _row("run_transitions", "attempt = 3", f"id = {LAST_T}"), "run"),
    ("transition to status", _row("run_transitions", "to_status = 'FAILED'", f"id = {LAST_T}"), "run"),
    ("transition deleted", _sql(f"DELETE FROM run_transitions WHERE id = {FIRST_T}"), "run"),
    ("last transition deleted", _sql(f"DELETE FROM run_transitions WHERE id = {LAST_T}"), "run"),
    ("transition inserted", _extra_transition, "run"),
    # dead letters
    ("dead letter deleted", _sql("DELETE FROM dead_letters WHERE job_run_id = '{dead}'"), "dead"),
    (
        "dead letter resolved behind the back",
        _row("dead_letters", "resolved_at = 1, resolution = 'discarded'", "job_run_id = '{dead}'"),
        "dead",
    ),
    ("dead letter error code", _row("dead_letters", "last_error_code = 'OTHER'", "job_run_id = '{dead}'"), "dead"),
    (
        "dead letter review flag",
        _row("dead_letters", "requires_manual_review = NOT requires_manual_review", "job_run_id = '{dead}'"),
        "dead",
    ),
    ("dead letter forged", _forge_letter, "run"),
    ("dead letter job class", _row("dead_letters", "job_class = 'ADMIN_JOB'", "job_run_id = '{dead}'"), "dead"),
    # definitions, their status, snapshots
    ("definition content", _row("definitions", "content = '{{}}'", "job_definition_id = '{definition}'"), "definition"),
    (
        "definition digest",
        _row("definitions", "digest = 'sha256:00'", "job_definition_id = '{definition}'"),
        "definition",
    ),
    ("definition code", _row("definitions", "job_code = 'other'", "job_definition_id = '{definition}'"), "definition"),
    ("definition applier", _row("definitions", "applied_by = 'x'", "job_definition_id = '{definition}'"), "definition"),
    (
        "definition version deleted",
        _sql("DELETE FROM definitions WHERE job_definition_id = '{definition}'"),
        "definition",
    ),
    (
        "definition status",
        _row("definition_heads", "status = 'retired'", "job_definition_id = '{definition}'"),
        "definition",
    ),
    (
        "definition head version",
        _row("definition_heads", "current_version = 7", "job_definition_id = '{definition}'"),
        "definition",
    ),
    ("snapshot content", _row("config_snapshots", "content = '{{}}'", "config_snapshot_id = '{snapshot}'"), "snapshot"),
    (
        "snapshot digest",
        _row("config_snapshots", "config_digest = 'x'", "config_snapshot_id = '{snapshot}'"),
        "snapshot",
    ),
    ("snapshot deleted", _sql("DELETE FROM config_snapshots WHERE config_snapshot_id = '{snapshot}'"), "snapshot"),
    # approvals and revocations
    ("approver", _row("definition_approvals", "approved_by = 'mallory'", "approval_id = {approval}"), "approval"),
    ("approved digest", _row("definition_approvals", "digest = 'sha256:00'", "approval_id = {approval}"), "approval"),
    (
        "approved code",
        _row("definition_approvals", "code_digest = 'sha256:00'", "approval_id = {approval}"),
        "approval",
    ),
    (
        "revocation undone",
        _row("definition_approvals", "revoked_at = NULL, revoked_by = NULL", "approval_id = {revoked_approval}"),
        "revoked_approval",
    ),
    (
        "revoker",
        _row("definition_approvals", "revoked_by = 'x'", "approval_id = {revoked_approval}"),
        "revoked_approval",
    ),
    ("approval deleted", _sql("DELETE FROM definition_approvals WHERE approval_id = {approval}"), "approval"),
    ("approval forged", _forge_approval, "9999"),
    # tokens
    ("token role", _row("api_tokens", "role = 'admin'", "token_id = '{token}'"), "token"),
    (
        "token revocation undone",
        _row("api_tokens", "revoked_at = NULL, revoked_by = NULL", "token_id = '{revoked_token}'"),
        "revoked_token",
    ),
    ("token secret", _row("api_tokens", f"secret_hash = '{'0' * 64}'", "token_id = '{token}'"), "token"),
    ("token job list", _row("api_tokens", "jobs = '[]'", "token_id = '{token}'"), "token"),
    ("token principal", _row("api_tokens", "principal = 'mallory'", "token_id = '{token}'"), "token"),
    ("token forged", _forge_token, "forgedtoken00000"),
    # schedules and their changes
    ("schedule cron", _row("schedules", "cron = '* * * * *'", "schedule_id = '{schedule}'"), "schedule"),
    (
        "schedule resumed",
        _row("schedules", "paused = false, pause_reason = NULL", "schedule_id = '{schedule}'"),
        "schedule",
    ),
    ("schedule timezone", _row("schedules", "timezone = 'Asia/Tokyo'", "schedule_id = '{schedule}'"), "schedule"),
    ("schedule params", _row("schedules", 'params = \'{{"x": "1"}}\'', "schedule_id = '{schedule}'"), "schedule"),
    ("schedule deleted", _sql("DELETE FROM schedules WHERE schedule_id = '{schedule}'"), "schedule"),
    ("schedule change value", _row("schedule_changes", "new_value = 'forged'", f"id = {CHANGE}"), "schedule_change"),
    ("schedule change deleted", _sql(f"DELETE FROM schedule_changes WHERE id = {CHANGE}"), "schedule_change"),
    # requests (four eyes)
    ("request decision", _row("run_requests", "status = 'approved'", "request_id = '{request}'"), "request"),
    ("request decider", _row("run_requests", "decided_by = 'rita'", "request_id = '{request}'"), "request"),
    ("request params", _row("run_requests", "params = '{{}}'", "request_id = '{request}'"), "request"),
    ("request deleted", _sql("DELETE FROM run_requests WHERE request_id = '{request}'"), "request"),
    # safe mode
    ("safe mode reason", _sql("UPDATE safe_mode_periods SET reason = 'forged'"), "safe_mode"),
    (
        "safe mode reopened",
        _sql("UPDATE safe_mode_periods SET deactivated_at = NULL, deactivated_by = NULL"),
        "safe_mode",
    ),
    ("safe mode period deleted", _sql("DELETE FROM safe_mode_periods"), "safe_mode"),
    # workflow runs, their steps and state sequence
    ("workflow status", _row("workflow_runs", "status = 'FAILED'", "workflow_run_id = '{workflow}'"), "workflow"),
    (
        "workflow params",
        _row("workflow_runs", 'params = \'{{"x": "1"}}\'', "workflow_run_id = '{workflow}'"),
        "workflow",
    ),
    ("workflow error", _row("workflow_runs", "error_message = 'x'", "workflow_run_id = '{workflow}'"), "workflow"),
    ("workflow step status", _row("workflow_steps", "status = 'FAILED'", "workflow_run_id = '{workflow}'"), "workflow"),
    (  # a review: moved steps left verification at exit 0 (the tenant is read, not hashed)
        "workflow steps moved to another tenant",
        _row("workflow_steps", "tenant_id = 'other'", "workflow_run_id = '{workflow}'"),
        "workflow",
    ),
    (
        "workflow transitions moved to another tenant",
        _row("workflow_transitions", "tenant_id = 'other'", "workflow_run_id = '{workflow}'"),
        "workflow",
    ),
    (
        "workflow transition actor",
        _row("workflow_transitions", "actor = 'mallory'", "workflow_run_id = '{workflow}'"),
        "workflow",
    ),
    ("workflow deleted", _sql("DELETE FROM workflow_runs WHERE workflow_run_id = '{workflow}'"), "workflow"),
    # the audit chain, its head, its anchors
    ("audit entry payload", _row("audit_log", "payload = '{{}}'", "seq = 3"), "entry 3"),
    ("audit entry actor", _row("audit_log", "actor = 'mallory'", "seq = 2"), "entry 2"),
    ("audit entry deleted", _sql("DELETE FROM audit_log WHERE seq = 4"), "entry 4"),
    ("audit head moved back", _row("audit_heads", "seq = seq - 1", "tenant_id = 'default'"), "head"),
    ("audit head deleted", _sql("DELETE FROM audit_heads"), "default"),
    ("seal batch root", _row("audit_log", 'payload = \'{{"root": "x"}}\'', f"seq = {BATCH}"), "entry"),
    ("anchor root", _row("anchors", "root = 'sha256:00'", "anchor_seq = 1"), "anchor 1"),
    ("anchor window", _row("anchors", "window_start = window_start - 3600000000", "anchor_seq = 1"), "anchor 1"),
    ("anchor created at", _row("anchors", "created_at = created_at + 1", "anchor_seq = 1"), "anchor 1"),
    ("anchor deleted", _sql("DELETE FROM anchors WHERE anchor_seq = (SELECT max(anchor_seq) FROM anchors)"), "anchor"),
    # the seals themselves
    ("seal rewritten", _row("record_seals", "seal = 'sha256:00'", f"id = {SEAL}"), "run"),
    ("seal identity rewritten", _row("record_seals", "identity = 'sha256:00'", f"id = {SEAL}"), "run"),
    ("seal deleted", _sql(f"DELETE FROM record_seals WHERE id = {SEAL}"), "run"),
    ("seal moved out of its batch", _row("record_seals", "id = id + 1000000", f"id = {SEAL}"), "records"),
    # found by a regression review: below every batch's range, a seal was read by nothing
    ("seal moved below every batch", _row("record_seals", "id = -7", f"id = {SEAL}"), "#-7"),
    ("every seal deleted", _sql("DELETE FROM record_seals"), "has no seal"),
]
# -- changed, then sealed again ------------------------------------------------------------------
# The attacker also appends a new seal for what they changed, computed with the published rules,
# and lets the leader chain it (``audit seal``): the record then agrees with its latest seal. The
# earlier seals, already under batch roots and signed anchors, are what give it away
# (``core.seal_trails``).


def _append_seal(conn: Connection, kind: str, rid: str, parts: seals.Parts, event: str = seals.SEALED) -> None:
    conn.execute(
        text(
            "INSERT INTO record_seals (tenant_id, kind, record_id, event, extent, identity, outcome, history, seal,"
            " content, sealed_at) VALUES ('default', :k, :r, :e, :x, :i, :o, :h, :s, :c,"
            " (SELECT max(sealed_at) + 1 FROM record_seals))"
        ),
        {
            "k": kind,
            "r": rid,
            "e": event,
            "x": parts.extent,
            "i": parts.identity,
            "o": parts.outcome,
            "h": parts.history,
            "s": seals.seal_of(kind, rid, event, parts),
            "c": parts.content,
        },
    )


def _apply(edit: Tamper, conn: Connection, ids: dict[str, Any]) -> None:
    if callable(edit):
        edit(conn, ids)
    else:
        conn.execute(text(edit.format(**ids)))


def _resealed_run(edit: Tamper, target: str, *, values: bool = True) -> Callable[[Connection, dict[str, Any]], None]:
    """``edit``, then a seal of the run as it is now by the published rules; ``values``: the
    seal keeps its value lists (without them nothing names a column, and nothing may pass)."""

    def apply(conn: Connection, ids: dict[str, Any]) -> None:
        _apply(edit, conn, ids)
        rid, key = ids[target], {"r": ids[target]}
        run = conn.execute(text("SELECT * FROM job_runs WHERE job_run_id = :r"), key).mappings().one()
        ts = conn.execute(text("SELECT * FROM run_transitions WHERE job_run_id = :r ORDER BY id"), key).mappings().all()
        order = "ORDER BY created_at, dead_letter_id"
        ls = conn.execute(text(f"SELECT * FROM dead_letters WHERE job_run_id = :r {order}"), key).mappings().all()
        parts = seals.run_parts(run, ts, ls)
        _append_seal(conn, seals.RUN, rid, parts if values else dataclasses.replace(parts, content=None))

    return apply


def _letter_gone_run_completed(conn: Connection, ids: dict[str, Any]) -> None:
    """A review's case: the dead-lettered run's open letter deleted and its row made a success,
    its transitions left as they were (sealed again in place, as a resolved letter is)."""
    for statement in (
        "UPDATE job_runs SET status = 'COMPLETED', error_code = NULL, error_message = NULL,"
        " result = '{\"ok\": true}' WHERE job_run_id = :r",
        "DELETE FROM dead_letters WHERE job_run_id = :r",
    ):
        conn.execute(text(statement), {"r": ids["dead"]})


def _letter_gone_error_rewritten(conn: Connection, ids: dict[str, Any]) -> None:
    for statement in (
        "UPDATE job_runs SET error_message = 'nothing to see' WHERE job_run_id = :r",
        "DELETE FROM dead_letters WHERE job_run_id = :r",
    ):
        conn.execute(text(statement), {"r": ids["dead"]})


def _earlier_values_cleared(edit: Tamper) -> Callable[[Connection, dict[str, Any]], None]:
    """``edit`` after the values the dead-lettered run's seals kept were cleared (inline or packed)."""

    def apply(conn: Connection, ids: dict[str, Any]) -> None:
        conn.execute(text("UPDATE record_seals SET content = NULL WHERE record_id = :r"), {"r": ids["dead"]})
        conn.execute(text("DELETE FROM seal_values"))
        _apply(edit, conn, ids)

    return apply


def _resealed_row(kind: str, edit: Tamper, where: str) -> Callable[[Connection, dict[str, Any]], None]:
    spec = seals.SPECS[kind]

    def apply(conn: Connection, ids: dict[str, Any]) -> None:
        _apply(edit, conn, ids)
        for row in conn.execute(text(f"SELECT * FROM {spec.table} WHERE {where.format(**ids)}")).mappings():
            _append_seal(conn, kind, seals.record_id(spec, row), seals.row_parts(spec, row))

    return apply


def _resealed_workflow(edit: Tamper) -> Callable[[Connection, dict[str, Any]], None]:
    def apply(conn: Connection, ids: dict[str, Any]) -> None:
        _apply(edit, conn, ids)
        key = {"w": ids["workflow"]}
        row = conn.execute(text("SELECT * FROM workflow_runs WHERE workflow_run_id = :w"), key).mappings().one()
        steps = conn.execute(
            text("SELECT * FROM workflow_steps WHERE workflow_run_id = :w ORDER BY position"), key
        ).mappings()
        moves = conn.execute(
            text("SELECT * FROM workflow_transitions WHERE workflow_run_id = :w ORDER BY seq"), key
        ).mappings()
        _append_seal(conn, seals.WORKFLOW, ids["workflow"], seals.workflow_parts(row, list(steps), list(moves)))

    return apply


def _under_tombstone(
    kind: str, rid: str, deletes: tuple[str, ...], event: str
) -> Callable[[Connection, dict[str, Any]], None]:
    """The record deleted, and a tombstone closing its latest seal appended as jobgate writes them."""

    def apply(conn: Connection, ids: dict[str, Any]) -> None:
        record = rid.format(**ids)
        latest = conn.execute(
            text("SELECT seal FROM record_seals WHERE kind = :k AND record_id = :r ORDER BY id DESC LIMIT 1"),
            {"k": kind, "r": record},
        ).scalar_one()
        for delete in deletes:
            conn.execute(text(delete.format(**ids)))
        _append_seal(conn, kind, record, seals.Parts(identity=latest), event)

    return apply


def _forged_requeue(conn: Connection, ids: dict[str, Any]) -> None:
    """The dead-lettered run given a requeue nobody made and a happy ending, as jobgate writes
    them: a requeue transition, a new attempt that succeeds, its letter resolved, one more
    attempt allowed. The trail's rules allow all of that after a requeue; the audit log has no
    ``run.requeued`` entry for it."""
    key = {"r": ids["dead"]}
    last = conn.execute(
        text("SELECT attempt, at FROM run_transitions WHERE job_run_id = :r ORDER BY id DESC LIMIT 1"), key
    ).one()
    attempt, at = int(last[0]), int(last[1]) + 1_000_000
    moves = [
        ("DEAD_LETTERED", "SCHEDULED", attempt, "requeued", "alice", at, None),
        ("SCHEDULED", "DISPATCHED", attempt, "claimed", "worker-1", at + 1, None),
        ("DISPATCHED", "RUNNING", attempt + 1, "started", "worker-1", at + 2, None),
        ("RUNNING", "COMPLETED", attempt + 1, "succeeded", "worker-1", at + 3, '{"outcome": "succeeded"}'),
    ]
    for m in moves:
        conn.execute(
            text(
                "INSERT INTO run_transitions (job_run_id, tenant_id, from_status, to_status, attempt, reason, actor,"
                " at, detail) VALUES (:r, 'default', :f, :t, :a, :why, :who, :at, :d)"
            ),
            {**key, "f": m[0], "t": m[1], "a": m[2], "why": m[3], "who": m[4], "at": m[5], "d": m[6]},
        )
    conn.execute(
        text(
            "UPDATE dead_letters SET resolved_at = :at, resolution = 'requeued by alice'"
            " WHERE job_run_id = :r AND resolved_at IS NULL"
        ),
        {**key, "at": at},
    )
    conn.execute(
        text(
            "UPDATE job_runs SET status = 'COMPLETED', attempt = :a, max_attempts = max_attempts + 1,"
            " error_code = NULL, error_message = NULL, ended_at = :end, transition_count = transition_count + 4"
            " WHERE job_run_id = :r"
        ),
        {**key, "a": attempt + 1, "end": at + 3},
    )


RUN_TABLES_DELETED = tuple(
    f"DELETE FROM {t} WHERE job_run_id = '{{dead}}'" for t in ("run_transitions", "dead_letters", "job_runs")
)
RESEAL_TAMPERS: list[tuple[str, Tamper, str]] = [
    ("dead letter rewritten as a success", _resealed_run(_dead_letter_as_success, "dead"), "dead"),
    (
        "letter deleted, run made a success, sealed without values",
        _resealed_run(_letter_gone_run_completed, "dead", values=False),
        "dead",
    ),
    (
        "letter deleted, error rewritten, sealed without values",
        _resealed_run(_letter_gone_error_rewritten, "dead", values=False),
        "dead",
    ),
    (
        "earlier values cleared, then a success sealed",
        _earlier_values_cleared(_resealed_run(_letter_gone_run_completed, "dead")),
        "dead",
    ),
    ("requeue forged, then a success", _resealed_run(_forged_requeue, "dead"), "dead"),
    ("run requester", _resealed_run(_run("requested_by = 'mallory'"), "run"), "run"),
    ("run result", _resealed_run(_run("result = '{{\"ok\": false}}'"), "run"), "run"),
    ("transition actor", _resealed_run(_row("run_transitions", "actor = 'mallory'", f"id = {FIRST_T}"), "run"), "run"),
    (
        "revocation undone",
        _resealed_row(
            "approval",
            _row("definition_approvals", "revoked_at = NULL, revoked_by = NULL", "approval_id = {revoked_approval}"),
            "approval_id = {revoked_approval}",
        ),
        "revoked_approval",
    ),
    (
        "approver",
        _resealed_row(
            "approval",
            _row("definition_approvals", "approved_by = 'mallory'", "approval_id = {approval}"),
            "approval_id = {approval}",
        ),
        "approval",
    ),
    # found by a review: closed by a database write and sealed again, with no audit entry of it
    (
        "safe mode switched off behind the audit log",
        _resealed_row(
            "safe_mode",
            _row(
                "safe_mode_periods",
                "deactivated_at = activated_at + 1000000, deactivated_by = 'root', deactivation_reason = 'resolved'",
                "activation = {safe_mode_on}",
            ),
            "activation = {safe_mode_on}",
        ),
        "deactivated_by",
    ),
    (
        "token revoked behind the audit log",
        _resealed_row(
            "token",
            _row("api_tokens", "revoked_at = created_at + 1, revoked_by = 'root'", "token_id = '{token}'"),
            "token_id = '{token}'",
        ),
        "token",
    ),
    (
        "approval revoked behind the audit log",
        _resealed_row(
            "approval",
            _row(
                "definition_approvals", "revoked_at = approved_at + 1, revoked_by = 'carol'", "approval_id = {approval}"
            ),
            "approval_id = {approval}",
        ),
        "approval",
    ),
    (
        "token revocation undone",
        _resealed_row(
            "token",
            _row("api_tokens", "revoked_at = NULL, revoked_by = NULL", "token_id = '{revoked_token}'"),
            "token_id = '{revoked_token}'",
        ),
        "revoked_token",
    ),
    (
        "token role",
        _resealed_row("token", _row("api_tokens", "role = 'admin'", "token_id = '{token}'"), "token_id = '{token}'"),
        "token",
    ),
    (
        "definition applier",
        _resealed_row(
            "definition",
            _row("definitions", "applied_by = 'mallory'", "job_definition_id = '{definition}'"),
            "job_definition_id = '{definition}'",
        ),
        "definition",
    ),
    (
        "snapshot content",
        _resealed_row(
            "snapshot",
            _row("config_snapshots", "content = '{{}}'", "config_snapshot_id = '{snapshot}'"),
            "config_snapshot_id = '{snapshot}'",
        ),
        "snapshot",
    ),
    (
        "schedule change value",
        _resealed_row(
            "schedule_change", _row("schedule_changes", "new_value = 'forged'", f"id = {CHANGE}"), f"id = {CHANGE}"
        ),
        "schedule_change",
    ),
    (
        "request decision reversed",
        _resealed_row(
            "request",
            _row("run_requests", "status = 'approved'", "request_id = '{request}'"),
            "request_id = '{request}'",
        ),
        "request",
    ),
    # found by a review: a record inserted whole with a seal computed for it was chained and
    # anchored like any other; its one door writes an audit entry with it
    (
        "approval inserted whole with its own seal",
        _resealed_row("approval", _forge_approval, "approval_id = 9999"),
        "9999",
    ),
    (
        "admin token inserted whole with its own seal",
        _resealed_row("token", _forge_token, "token_id = 'forgedtoken00000'"),
        "forgedtoken00000",
    ),
    (
        "request inserted whole, approved, with its own seal",
        _resealed_row(
            "request",
            _forge(
                "run_requests",
                "request_id",
                "request",
                request_id="TGREQ-forged",
                status="approved",
                decided_by="bob",
                decision_note="fine",
            ),
            "request_id = 'TGREQ-forged'",
        ),
        "TGREQ-forged",
    ),
    (
        "safe mode period inserted whole with its own seal",
        _resealed_row(
            "safe_mode",
            _forge("safe_mode_periods", "activation", "safe_mode_on", activation=777, activated_by="mallory"),
            "activation = 777",
        ),
        "safe_mode",
    ),
    (
        "safe mode reopened",
        _resealed_row(
            "safe_mode",
            "UPDATE safe_mode_periods SET deactivated_at = NULL, deactivated_by = NULL",
            "tenant_id = 'default'",
        ),
        "safe_mode",
    ),
    (
        "workflow status",
        _resealed_workflow(_row("workflow_runs", "status = 'FAILED'", "workflow_run_id = '{workflow}'")),
        "workflow",
    ),
    (
        "run deleted under a forged retirement",
        _under_tombstone(
            seals.RUN,
            "{dead}",
            RUN_TABLES_DELETED,
            seals.RETIRED,
        ),
        "dead",
    ),
    (
        "approval deleted under a forged tombstone",
        _under_tombstone(
            "approval",
            "{approval}",
            ("DELETE FROM definition_approvals WHERE approval_id = {approval}",),
            seals.DELETED,
        ),
        "approval",
    ),
    (
        "safe mode period deleted under a forged tombstone",
        _under_tombstone("safe_mode", "1", ("DELETE FROM safe_mode_periods",), seals.DELETED),
        "safe_mode",
    ),
]


def _sink_second_copy(
    change: Callable[[dict[str, Any]], None],
) -> Callable[[list[dict[str, Any]]], list[dict[str, Any]]]:
    """The true copy kept, a different one of the same anchor added after it (found by a
    review: any one matching copy was enough, so a rewrite's trace in the sink went unseen)."""

    def add(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
        other = dict(lines[0])
        change(other)
        return [*lines, other]

    return add


SINK_TAMPERS: list[tuple[str, Callable[[World], None], str]] = [
    ("sink copy root changed", _sink_edit(_sink_root), "anchor 1"),
    (
        "a second, unsigned copy of an anchor in the sink",
        _sink_edit(_sink_second_copy(lambda r: r.update(leaf_count=r["leaf_count"] - 1))),
        "anchor 1 has another record in the sink",
    ),
    (
        "a second copy with another root, its signature kept",
        _sink_edit(_sink_second_copy(lambda r: r.update(root="sha256:" + "0" * 64))),
        "anchor 1 has another record in the sink",
    ),
    ("sink copy removed", _sink_edit(lambda lines: lines[1:]), "anchor 1"),
    ("anchor and sink copy rewritten alike", _rewrite_anchor_everywhere, "anchor 1 has a signature"),
]


def _expected(fragment: str, ids: dict[str, Any]) -> str:
    return str(ids[fragment]) if fragment in ids else fragment


@pytest.mark.parametrize(("name", "tamper", "names"), TAMPERS, ids=[t[0] for t in TAMPERS])
def test_a_direct_edit_is_caught_and_named(copies: Copies, name: str, tamper: Any, names: str) -> None:
    world = copies.fresh()
    copies.tamper(lambda conn: tamper(conn, world.ids))
    code, out = verify(world)
    assert code != 0, f"{name}: not detected\n{out}"
    error = next((line for line in out.splitlines() if line.startswith("error: ")), "")
    assert _expected(names, world.ids) in error, f"{name}: the message does not name {names}\n{out}"


@pytest.mark.parametrize(("name", "tamper", "names"), RESEAL_TAMPERS, ids=[t[0] for t in RESEAL_TAMPERS])
def test_a_record_changed_and_sealed_again_is_caught(copies: Copies, name: str, tamper: Any, names: str) -> None:
    world = copies.fresh()
    copies.tamper(lambda conn: tamper(conn, world.ids))
    sealed = CliRunner().invoke(cli, ["--config", str(world.config_file), "--db", world.url, "audit", "seal"])
    assert sealed.exit_code == 0, sealed.output  # the forged seal chained like any other
    code, out = verify(world)
    assert code != 0, f"{name}: not detected\n{out}"
    error = next((line for line in out.splitlines() if line.startswith("error: ")), "")
    assert _expected(names, world.ids) in error, f"{name}: the message does not name {names}\n{out}"


# What the offline check says of each: the forged latest seal does not follow from the earlier
# ones, or (a requeue nobody made, then an ending sealed by the published rules: found by a
# review, the bundle checked the requeue's audit entry only while the run had not ended again)
# the requeue has no audit entry.
EXPORTED_SAYS = {
    "dead letter rewritten as a success": "earlier",
    "run requester": "earlier",
    "letter deleted, run made a success, sealed without values": "earlier",
    "requeue forged, then a success": "no run.requeued audit entry",
}
EXPORTED_RESEALS = [t for t in RESEAL_TAMPERS if t[0] in EXPORTED_SAYS]


@pytest.mark.parametrize(("name", "tamper", "names"), EXPORTED_RESEALS, ids=[t[0] for t in EXPORTED_RESEALS])
def test_an_export_of_a_record_sealed_again_is_refused_offline(
    copies: Copies, tmp_path: Path, name: str, tamper: Any, names: str
) -> None:
    """The bundle carries every seal of each record and the values they kept, and the audit
    entries about it: read offline by the same rules as the database's check."""
    world = copies.fresh()
    copies.tamper(lambda conn: tamper(conn, world.ids))
    base = ["--config", str(world.config_file), "--db", world.url]
    assert CliRunner().invoke(cli, [*base, "audit", "seal"]).exit_code == 0
    bundle = tmp_path / "run.zip"
    run = _expected(names, world.ids)
    exported = CliRunner().invoke(cli, [*base, "evidence", "export", run, "--out", str(bundle)])
    assert exported.exit_code == 0, exported.output
    checked = CliRunner().invoke(cli, ["evidence", "verify", str(bundle), "--allow-unsigned"])
    assert checked.exit_code == 1, f"{name}: the bundle verifies\n{checked.output}"
    assert f"runs/{run}.json" in checked.output and EXPORTED_SAYS[name] in checked.output, checked.output


# Found by a review: a definition's bundle verified an approval revoked (or made) behind the
# audit log that ``audit verify --records`` refused: it never asked the approval's entries.
EXPORTED_APPROVALS = {
    "approval revoked behind the audit log": "with no definition.approval_revoked audit entry",
    "approval inserted whole with its own seal": "approval 9999: approved_by mallory with no definition.approved",
}


@pytest.mark.parametrize("name", sorted(EXPORTED_APPROVALS))
def test_a_definitions_bundle_asks_each_approvals_audit_entries(copies: Copies, tmp_path: Path, name: str) -> None:
    _, tamper, _ = next(t for t in RESEAL_TAMPERS if t[0] == name)
    world = copies.fresh()
    copies.tamper(lambda conn: tamper(conn, world.ids))
    base = ["--config", str(world.config_file), "--db", world.url]
    assert CliRunner().invoke(cli, [*base, "audit", "seal"]).exit_code == 0
    bundle = tmp_path / "definition.zip"
    definition = str(world.ids["definition"])
    exported = CliRunner().invoke(cli, [*base, "evidence", "export", "--definition", definition, "--out", str(bundle)])
    assert exported.exit_code == 0, exported.output
    checked = CliRunner().invoke(cli, ["evidence", "verify", str(bundle), "--allow-unsigned"])
    assert checked.exit_code == 1 and EXPORTED_APPROVALS[name] in checked.output, checked.output


def test_an_untouched_definitions_bundle_verifies(copies: Copies, tmp_path: Path) -> None:
    world = copies.fresh()
    base = ["--config", str(world.config_file), "--db", world.url]
    bundle = tmp_path / "definition.zip"
    for definition in (str(world.ids["definition"]), "spare"):  # spare's approval was revoked, as jobgate does
        assert (
            CliRunner()
            .invoke(cli, [*base, "evidence", "export", "--definition", definition, "--out", str(bundle)])
            .exit_code
            == 0
        )
        checked = CliRunner().invoke(cli, ["evidence", "verify", str(bundle), "--allow-unsigned"])
        assert checked.exit_code == 0, checked.output
        bundle.unlink()


@pytest.mark.parametrize(("name", "tamper", "names"), SINK_TAMPERS, ids=[t[0] for t in SINK_TAMPERS])
def test_an_edited_sink_copy_is_caught(copies: Copies, name: str, tamper: Any, names: str) -> None:
    world = copies.fresh()
    tamper(world)
    code, out = verify(world)
    error = next((line for line in out.splitlines() if line.startswith("error: ")), "")
    assert code != 0 and names in error, f"{name}\n{out}"


# A value no jobgate write could have made (a time past the year 9999): every command that reads
# the row names it and exits 1, none crashes (exit 70, "internal").
NEVER_A_TIME = 9223372036854775807
MALFORMED: list[tuple[str, Tamper, list[str], str]] = [
    (
        "anchor window",
        _row("anchors", f"window_start = {NEVER_A_TIME}", "anchor_seq = 1"),
        ["audit verify", "evidence export {run}"],
        "anchor 1",
    ),
    (
        "transition time",
        _row("run_transitions", f"at = {NEVER_A_TIME}", f"id = {LAST_T}"),
        ["runs show {run}", "replay {run}", "evidence export {run}"],
        "a transition of run {run}",
    ),
    (
        "run creation time",
        _run(f"created_at = {NEVER_A_TIME}"),
        ["runs show {run}", "replay {run}"],
        "run {run}",
    ),
    ("audit entry time", _row("audit_log", f"at = {NEVER_A_TIME}", "seq = 2"), ["audit verify"], "audit entry 2"),
    # found by a review: a detail, params or scope that is JSON but not an object crashed them
    (
        "transition detail a list",
        _row("run_transitions", "detail = '[1]'", f"id = {LAST_T}"),
        ["runs show {run}", "replay {run}", "evidence export {run}"],
        "a transition of run {run}",
    ),
    (
        "transition detail a string",
        _row("run_transitions", """detail = '"x"'""", f"id = {LAST_T}"),
        ["runs show {run}", "replay {run}", "evidence export {run}"],
        "a transition of run {run}",
    ),
    ("run params a list", _run("params = '[1]'"), ["runs show {run}", "replay {run}"], "run {run}"),
    # found by a review: a batch entry without its range made verify (and the leader's chaining) crash
    (
        "seal batch entry without its range",
        _row("audit_log", """payload = '{{"root": "x"}}'""", f"seq = {LAST_BATCH}"),
        ["audit verify --records"],
        "audit entry",
    ),
]


@pytest.mark.parametrize(("name", "tamper", "commands", "names"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_a_row_no_write_could_make_is_named_not_a_crash(
    copies: Copies, tmp_path: Path, name: str, tamper: Any, commands: list[str], names: str
) -> None:
    world = copies.fresh()
    copies.tamper(lambda conn: tamper(conn, world.ids))
    for command in commands:
        args = command.format(**world.ids).split()
        if args[0] == "evidence":
            args += ["--out", str(tmp_path / "bundle.zip")]
        result = CliRunner().invoke(cli, ["--config", str(world.config_file), "--db", world.url, *args])
        said = result.output + (str(result.exception) if result.exception is not None else "")
        if result.exception is not None and not isinstance(result.exception, SystemExit | JobgateError):
            raise result.exception  # a crash: what the user would see as "internal"
        assert result.exit_code == 1, f"{name}: {command}\n{said}"
        assert names.format(**world.ids) in said, f"{name}: {command} does not name it\n{said}"


@pytest.mark.parametrize(
    ("statement", "names", "column"),
    [
        ("UPDATE job_runs SET error_message = CAST('x' AS BLOB) WHERE job_run_id = '{dead}'", "dead", "error_message"),
        ("UPDATE run_transitions SET actor = CAST('x' AS BLOB) WHERE id = " + LAST_T, "run", "actor"),
        (
            "UPDATE definition_approvals SET approved_by = CAST('x' AS BLOB) WHERE approval_id = {approval}",
            "approval",
            "approved_by",
        ),
        (
            "UPDATE workflow_runs SET error_message = CAST('x' AS BLOB) WHERE workflow_run_id = '{workflow}'",
            "workflow",
            "error_message",
        ),
    ],
)
def test_bytes_in_a_text_column_are_named_not_a_crash(copies: Copies, statement: str, names: str, column: str) -> None:
    # SQLite stores whatever a direct write gives a column; PostgreSQL refuses bytes in text.
    world = copies.fresh()
    if not world.url.startswith("sqlite"):
        pytest.skip("PostgreSQL refuses bytes in a text column")
    copies.tamper(lambda conn: conn.execute(text(statement.format(**world.ids))))
    code, out = verify(world)
    assert code == 1, out
    error = next((line for line in out.splitlines() if line.startswith("error: ")), "")
    assert _expected(names, world.ids) in out and f"column {column}" in out, out
    assert error, out


@pytest.mark.parametrize(
    ("statement", "column"),
    [
        ("UPDATE job_runs SET error_code = X'ff' WHERE job_run_id = '{dead}'", "error_code"),
        ("UPDATE job_runs SET error_message = X'41' WHERE job_run_id = '{dead}'", "error_message"),  # valid UTF-8
        ("UPDATE run_transitions SET actor = X'00ff' WHERE job_run_id = '{dead}'", "actor"),
    ],
)
def test_bytes_in_a_text_column_are_named_by_every_command_that_shows_the_run(
    copies: Copies, tmp_path: Path, statement: str, column: str
) -> None:
    """Found by a review: a byte value in a run's text column made ``runs show``, ``runs list``
    and ``replay`` exit 70 ("internal"), and ``GET /runs`` answer 500; valid UTF-8 bytes passed
    unnoticed. Each names the record and the column, exit 1."""
    world = copies.fresh()
    if not world.url.startswith("sqlite"):
        pytest.skip("PostgreSQL refuses bytes in a text column")
    copies.tamper(lambda conn: conn.execute(text(statement.format(**world.ids))))
    run = str(world.ids["dead"])
    listed = [] if statement.startswith("UPDATE run_transitions") else [["runs", "list"]]  # it shows no transition
    for command in (["runs", "show", run], *listed, ["replay", run], ["evidence", "export", run]):
        if command[0] == "evidence":
            command += ["--out", str(tmp_path / "bundle.zip")]
        result = CliRunner().invoke(cli, ["--config", str(world.config_file), "--db", world.url, *command])
        if result.exception is not None and not isinstance(result.exception, SystemExit | JobgateError):
            raise result.exception  # a crash: what the user would see as "internal"
        said = result.output + str(result.exception)
        assert result.exit_code == 1 and run in said and column in said, (command, said)


EVIDENCE_TABLES = (
    "job_runs",
    "run_transitions",
    "dead_letters",
    "definitions",
    "definition_heads",
    "config_snapshots",
    "definition_approvals",
    "api_tokens",
    "schedules",
    "schedule_changes",
    "run_requests",
    "safe_mode_periods",
    "workflow_runs",
    "workflow_steps",
    "workflow_transitions",
    "audit_log",
    "audit_heads",
    "anchors",
    "record_seals",
)


def test_the_suite_edits_every_table_that_holds_evidence() -> None:
    source = Path(__file__).read_text()
    start = source.index("TAMPERS: list")
    covered = {t for t in EVIDENCE_TABLES if f"{t} " in source[start:] or f'"{t}"' in source[start:]}
    assert covered == set(EVIDENCE_TABLES)
    assert len(TAMPERS) + len(SINK_TAMPERS) + len(RESEAL_TAMPERS) >= 60


def test_a_second_copy_the_evidence_key_signed_is_not_a_forgery() -> None:
    """An anchoring attempt can write the sink and then not commit (its lease lost): its retry
    anchors again under the same number. That leftover is signed; only an unsigned or
    re-written one is a forgery."""
    from jobgate.evidence.anchors import UNSIGNED_FIELDS, _forged_copy
    from jobgate.governance import signing

    key = signing.generate("evidence")
    keys = {key.key_id: signing.public_key(key.public_b64, field="key")}

    def signed(record: dict[str, Any]) -> dict[str, Any]:
        message = digest({k: v for k, v in record.items() if k not in UNSIGNED_FIELDS})
        made = signing.sign(message, key.key_id, key.private_b64)
        return {**record, "key_id": made["key_id"], "signature": made["value"]}

    stored = signed({"tenant_id": "t", "anchor_seq": 3, "root": "sha256:" + "a" * 64, "sink": "file:x"})
    leftover = signed({**stored, "root": "sha256:" + "b" * 64})
    assert _forged_copy(stored, [stored, leftover], keys) is None
    assert _forged_copy(stored, [stored, {**leftover, "root": "sha256:" + "c" * 64}], keys) is not None
    assert _forged_copy(stored, [stored, {**leftover, "signature": None}], keys) is not None


def test_an_anchor_deleted_names_the_first_entry_it_covered(copies: Copies) -> None:
    """Found by a review: with the last anchor deleted (the sink remembers it), verify named the
    entry after the chain's end, which does not exist, instead of the first entry it covered."""
    world = copies.fresh()
    records = [json.loads(x) for x in world.sink.read_text().splitlines() if x.strip()]
    last = max((r for r in records if r["tenant_id"] == "default"), key=lambda r: r["anchor_seq"])
    copies.tamper(lambda conn: _sql(f"DELETE FROM anchors WHERE anchor_seq = {last['anchor_seq']}")(conn, world.ids))
    result = CliRunner().invoke(
        cli, ["--json", "--config", str(world.config_file), "--db", world.url, "audit", "verify"]
    )
    [report] = [r for r in json.loads(result.output) if r["tenant"] == "default"]
    assert report["first_bad_seq"] == last["first_seq"] and f"anchor {last['anchor_seq']}" in report["problem"]


def test_seals_are_chained_past_a_batch_entry_that_does_not_read(copies: Copies) -> None:
    """The leader's chaining (``audit seal``) reads where the last batch ended: an entry edited so
    that it names no range is passed over, not a crash that stops every later batch."""
    world = copies.fresh()
    copies.tamper(lambda conn: conn.execute(text(f"UPDATE audit_log SET payload = '{{}}' WHERE seq = {LAST_BATCH}")))
    sealed = CliRunner().invoke(cli, ["--config", str(world.config_file), "--db", world.url, "audit", "seal"])
    assert sealed.exception is None or isinstance(sealed.exception, SystemExit), sealed.exception
    assert sealed.exit_code == 0, sealed.output


def test_a_seal_with_an_extent_no_write_makes_is_named_not_a_crash(copies: Copies) -> None:
    """Found by a review (SQLite keeps any value in an integer column): a run seal whose extent
    is not a number, its hash recomputed to match, made ``audit verify --records`` crash."""
    world = copies.fresh()
    if world.url.startswith("postgresql"):
        pytest.skip("PostgreSQL refuses text in an integer column")
    rid = world.ids["run"]

    def forge(conn: Connection) -> None:
        row = (
            conn.execute(text("SELECT * FROM record_seals WHERE record_id = :r ORDER BY id DESC LIMIT 1"), {"r": rid})
            .mappings()
            .one()
        )
        seal = seals.seal_hash("run", rid, row["event"], "x", row["identity"], row["outcome"], row["history"])  # type: ignore[arg-type]
        conn.execute(text("UPDATE record_seals SET extent = 'x', seal = :s WHERE id = :i"), {"s": seal, "i": row["id"]})

    copies.tamper(forge)
    code, out = verify(world)
    assert code == 1 and rid in out, out
