"""Workflow state sequences replay to the same hash; an edited record is named."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text
from support import coordinating, jobs, start, wait_workflow, workflow

from jobgate.core.states import RunStatus
from jobgate.service.engine import Engine
from jobgate.service.workflow_replay import replay_workflow
from jobgate.service.workflows import cancel_workflow
from jobgate.testing import connection


def _flows(engine: Engine) -> dict[str, str]:
    j = jobs(engine)
    rec = j["record"]
    return {
        "dag": workflow(
            engine,
            [
                {"id": "a", "job": rec, "params": {"name": "a", "value": "${params.v}"}, "outputs": ["value", "flag"]},
                {"id": "b", "job": rec, "params": {"name": "b"}, "depends_on": []},
                {
                    "id": "c",
                    "job": rec,
                    "params": {"name": "c"},
                    "depends_on": ["a"],
                    "when": "steps.a.outputs.flag == true",
                },
                {
                    "id": "d",
                    "job": rec,
                    "params": {"name": "d", "value": "${steps.a.outputs.value}"},
                    "depends_on": ["a", "b", "c"],
                },
            ],
            params=[{"name": "v"}],
        ),
        "compensated": workflow(
            engine,
            [
                {
                    "id": "a",
                    "job": rec,
                    "params": {"name": "a"},
                    "compensate": {"job": j["undo"], "params": {"name": "a"}},
                },
                {"id": "b", "job": j["fail"], "params": {"name": "b"}},
            ],
            on_failure="compensate",
        ),
        "cancelled": workflow(
            engine, [{"id": "a", "job": j["wait"], "params": {"name": "a"}}, {"id": "b", "job": rec}]
        ),
    }


def test_every_kind_of_workflow_replays_to_the_same_hash_and_an_edit_is_named(engine: Engine, marker: Path) -> None:
    flows = _flows(engine)
    ids = {name: start(engine, wf, **({"v": "yes"} if name == "dag" else {})) for name, wf in flows.items()}
    with coordinating(engine):
        for name in ("dag", "compensated"):
            wait_workflow(engine, ids[name])
        cancel_workflow(engine, ids["cancelled"], actor="op")
        assert wait_workflow(engine, ids["cancelled"]).record.status is RunStatus.CANCELLED
    for name, wid in ids.items():
        report = replay_workflow(engine, wid)
        assert report.match, (name, report)
        assert report.replay_hash == report.original_hash
    # Tamper: a recorded output of the dag's step a changes (as if someone edited the record).
    target = ids["dag"]
    with engine.store.write() as tx:
        connection(tx).execute(
            text(
                "UPDATE workflow_transitions SET detail = :d WHERE workflow_run_id = :w AND step_id = 'd' "
                "AND to_status = 'RUNNING'"
            ),
            {"d": '{"job": "x", "params": {"name": "d", "value": "no"}}', "w": target},
        )
    report = replay_workflow(engine, target)
    assert not report.match and report.first_difference is not None and "seq" in report.first_difference


def test_a_workflow_rows_status_edited_is_a_mismatch(engine: Engine, marker: Path) -> None:
    j = jobs(engine)
    wid = start(engine, workflow(engine, [{"id": "a", "job": j["record"]}]))
    with coordinating(engine):
        assert wait_workflow(engine, wid).record.status is RunStatus.COMPLETED
    with engine.store.write() as tx:
        connection(tx).execute(
            text("UPDATE workflow_runs SET status = 'FAILED' WHERE workflow_run_id = :w"), {"w": wid}
        )
    report = replay_workflow(engine, wid)
    assert not report.match and report.first_difference == "status: recorded FAILED, the sequence ends COMPLETED"


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("outputs", "'{\"n\": 999}'"),
        ("error_code", "'OK_REALLY'"),
        ("job_run_id", "'TGJOBRUN-someone-else'"),
        ("completed_order", "7"),
    ],
)
def test_a_step_rows_field_edited_is_a_mismatch_naming_it(
    engine: Engine, marker: Path, column: str, value: str
) -> None:
    """Not only a step's status: every field of its row the console and the API show (found by a
    review: outputs and an error code edited replayed MATCH)."""
    j = jobs(engine)
    wid = start(engine, workflow(engine, [{"id": "a", "job": j["record"], "params": {"name": "a"}}]))
    with coordinating(engine):
        assert wait_workflow(engine, wid).record.status is RunStatus.COMPLETED
    assert replay_workflow(engine, wid).match
    with engine.store.write() as tx:
        connection(tx).execute(
            text(f"UPDATE workflow_steps SET {column} = {value} WHERE workflow_run_id = :w AND step_id = 'a'"),
            {"w": wid},
        )
    report = replay_workflow(engine, wid)
    assert not report.match and str(report.first_difference).startswith(f"step a: {column}: recorded ")


@pytest.mark.parametrize("column", ["reason", "to_status"])
def test_an_edited_decision_is_a_mismatch(engine: Engine, marker: Path, column: str) -> None:
    j = jobs(engine)
    wf = workflow(engine, [{"id": "a", "job": j["record"]}, {"id": "b", "job": j["record"]}])
    wid = start(engine, wf)
    with coordinating(engine):
        wait_workflow(engine, wid)
    assert replay_workflow(engine, wid).match
    with engine.store.write() as tx:
        connection(tx).execute(
            text(f"UPDATE workflow_transitions SET {column} = 'SKIPPED' WHERE workflow_run_id = :w AND seq = 4"),
            {"w": wid},
        )
    report = replay_workflow(engine, wid)
    assert not report.match and "seq 4" in str(report.first_difference)
    assert f"{column}: recorded 'SKIPPED', replay decides" in str(report.first_difference)  # the field, both values


def test_the_replay_job_samples_workflow_runs_too_and_names_an_altered_one(engine: Engine, marker: Path) -> None:
    from runtime_support import wait_status

    from helpers import define
    from jobgate.service import audit
    from jobgate.service.submission import SubmitRequest
    from jobgate.store.sql.governance import AuditFilter

    j = jobs(engine)
    wf = workflow(engine, [{"id": "a", "job": j["record"], "params": {"name": "a"}}, {"id": "b", "job": j["record"]}])
    ids = [start(engine, wf) for _ in range(2)]
    replayer = define(
        engine,
        job_class="REPLAY_JOB",
        handler="jobgate.replay:replay_job",
        params=[{"name": "sample_size", "default": "10"}, {"name": "seed", "default": ""}],
    )
    with coordinating(engine):
        for wid in ids:
            wait_workflow(engine, wid)
        with engine.store.write() as tx:  # one workflow's record is altered after the fact
            connection(tx).execute(
                text(
                    "UPDATE workflow_transitions SET reason = 'condition_false' WHERE workflow_run_id = :w AND seq = 4"
                ),
                {"w": ids[1]},
            )
        run = engine.submit(SubmitRequest(replayer, params={"seed": "s1"})).run
        done = wait_status(engine, run.job_run_id, RunStatus.COMPLETED, timeout=20)
    assert done.result is not None
    assert done.result["workflows_replayed"] == 2 and done.result["workflows_matched"] == 1
    assert [m["workflow_run_id"] for m in done.result["workflow_mismatches"]] == [ids[1]]
    (entry,) = audit.search(engine, AuditFilter(tenant_id="default", action="replay.mismatch"))
    assert entry.event.target_type == "workflow" and entry.event.target_id == ids[1]
    with engine.store.read() as tx:
        payloads = (
            connection(tx).execute(text("SELECT payload FROM outbox WHERE event_type = 'replay_mismatch'")).scalars()
        )
        assert any(ids[1] in p for p in payloads)


_NEXT = "(SELECT max(seq) + 1 FROM workflow_transitions WHERE workflow_run_id = :w)"
_ADDED = (
    "INSERT INTO workflow_transitions (workflow_run_id, tenant_id, seq, step_id, from_status, to_status, reason,"
    f" actor, at, detail) SELECT CAST(:w AS VARCHAR), 'default', {_NEXT}, %s, %s, %s, %s, 'x', 1, '{{\"advance\": 99}}'"
)
_FIRST_COMPLETION = (
    "seq = (SELECT min(seq) FROM workflow_transitions WHERE workflow_run_id = :w AND reason = 'step_completed')"
)


@pytest.mark.parametrize(
    ("tamper", "named"),
    [
        (_ADDED % ("'a'", "'COMPLETED'", "'CANCELLED'", "'workflow_halted'"), "a halt only cancels an open step"),
        (_ADDED % ("'a'", "'COMPLETED'", "'COMPLETED'", "'workflow_halted'"), "a halt only cancels an open step"),
        (_ADDED % ("NULL", "'COMPLETED'", "'COMPLETED'", "'sla_escalation'"), "may only escalate an open workflow"),
        ("UPDATE workflow_runs SET phase = 'bogus' WHERE workflow_run_id = :w", "phase: recorded bogus"),
        (
            "UPDATE workflow_steps SET status = 'BOGUS' WHERE workflow_run_id = :w AND step_id = 'a'",
            "step a: status: recorded BOGUS",
        ),
        (f"UPDATE workflow_transitions SET detail = '[1, 2]' WHERE workflow_run_id = :w AND {_FIRST_COMPLETION}",
         "cannot be read"),
        (f"UPDATE workflow_transitions SET step_id = 'zz' WHERE workflow_run_id = :w AND {_FIRST_COMPLETION}",
         "cannot be read"),
        (
            "UPDATE workflow_transitions SET detail = '{\"run_ended_at\": \"garbage\"}'"
            f" WHERE workflow_run_id = :w AND {_FIRST_COMPLETION}",
            "cannot be read",
        ),
        ("UPDATE workflow_runs SET params = '[1]' WHERE workflow_run_id = :w", "params"),
    ],
)  # fmt: skip
def test_a_sequence_no_advance_could_write_or_a_malformed_row_is_a_named_mismatch(
    engine: Engine, marker: Path, tamper: str, named: str
) -> None:
    """Found by a review: changes from outside the planner (an SLA escalation, the halt after
    it) were applied on trust, so a halt recording steps COMPLETED replayed MATCH; the phase and
    the step rows were never compared; a malformed row crashed replay."""
    j = jobs(engine)
    wf = workflow(engine, [{"id": "a", "job": j["record"]}, {"id": "b", "job": j["record"]}])
    wid = start(engine, wf)
    with coordinating(engine):
        assert wait_workflow(engine, wid).record.status is RunStatus.COMPLETED
    assert replay_workflow(engine, wid).match
    with engine.store.write() as tx:
        connection(tx).execute(text(tamper), {"w": wid})
    report = replay_workflow(engine, wid)
    assert not report.match and named in str(report.first_difference), report
