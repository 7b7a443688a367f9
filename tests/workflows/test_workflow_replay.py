"""Workflow state sequences replay to the same hash; an edited record is named."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text
from support import coordinating, jobs, start, wait_workflow, workflow

from jobgate.core.states import RunStatus
from jobgate.service.engine import Engine
from jobgate.workflows.replay import replay_workflow
from jobgate.workflows.service import cancel_workflow


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
        tx.conn.execute(
            text(
                "UPDATE workflow_transitions SET detail = :d WHERE workflow_run_id = :w AND step_id = 'd' "
                "AND to_status = 'RUNNING'"
            ),
            {"d": '{"job": "x", "params": {"name": "d", "value": "no"}}', "w": target},
        )
    report = replay_workflow(engine, target)
    assert not report.match and report.first_difference is not None and "seq" in report.first_difference


@pytest.mark.parametrize("column", ["reason", "to_status"])
def test_an_edited_decision_is_a_mismatch(engine: Engine, marker: Path, column: str) -> None:
    j = jobs(engine)
    wf = workflow(engine, [{"id": "a", "job": j["record"]}, {"id": "b", "job": j["record"]}])
    wid = start(engine, wf)
    with coordinating(engine):
        wait_workflow(engine, wid)
    assert replay_workflow(engine, wid).match
    with engine.store.write() as tx:
        tx.conn.execute(
            text(f"UPDATE workflow_transitions SET {column} = 'SKIPPED' WHERE workflow_run_id = :w AND seq = 4"),
            {"w": wid},
        )
    report = replay_workflow(engine, wid)
    assert not report.match and "seq 4" in str(report.first_difference)
