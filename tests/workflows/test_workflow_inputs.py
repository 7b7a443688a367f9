"""A workflow whose steps could only fail half way is refused at its start (``workflows.inputs``):
what a step will be given is checked against its pinned definition as far as the start knows it,
and nothing is stored or run for a refused start."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support import jobs, workflow

from helpers import count, define
from jobgate.core.errors import ValidationError
from jobgate.core.models import ParamSpec
from jobgate.service.engine import Engine
from jobgate.service.submission import SubmitRequest
from jobgate.service.workflows import StartWorkflow, start_workflow
from jobgate.workflows.inputs import check_start
from jobgate.workflows.spec import parse_workflow

DECLARED = {
    "lower": (ParamSpec("tag", required=True, pattern="[a-z]+"), ParamSpec("note")),
    "free": (ParamSpec("tag"),),
}


def _check(body: dict[str, Any], params: dict[str, str], declared: dict[str, Any] = DECLARED) -> None:
    spec = parse_workflow(body, source="wf", param_names=["tag", "other"])
    check_start(spec, declared, params, source="wf")


@pytest.mark.parametrize(
    ("steps", "params", "field"),
    [
        # a param the step's definition does not declare
        ([{"id": "a", "job": "lower", "params": {"tag": "ok", "bogus": "x"}}], {}, "workflow.steps.a.params.bogus"),
        # a literal its declaration refuses
        ([{"id": "a", "job": "lower", "params": {"tag": "NOT_LOWER"}}], {}, "workflow.steps.a.params.tag"),
        # the workflow's own param, filled in, refused likewise
        (
            [{"id": "a", "job": "lower", "params": {"tag": "${params.tag}"}}],
            {"tag": "UP"},
            "workflow.steps.a.params.tag",
        ),
        (
            [{"id": "a", "job": "lower", "params": {"tag": "x-${params.tag}"}}],
            {"tag": "y"},
            "workflow.steps.a.params.tag",
        ),
        # a required param the step never gives
        ([{"id": "a", "job": "lower", "params": {"note": "n"}}], {}, "workflow.steps.a.params.tag"),
        # a workflow param this start has no value for, in a step that always runs...
        (
            [{"id": "a", "job": "free"}, {"id": "b", "job": "free", "params": {"tag": "${params.tag}"}}],
            {},
            "workflow.steps.b.params.tag",
        ),
        # ... or in such a step's compensation
        (
            [{"id": "a", "job": "free", "compensate": {"job": "free", "params": {"tag": "${params.tag}"}}}],
            {},
            "workflow.steps.a.compensate.params.tag",
        ),
        # a bad literal is refused even behind a condition: it could only fail
        (
            [{"id": "a", "job": "lower", "when": 'params.other == "x"', "params": {"tag": "B"}}],
            {},
            "workflow.steps.a.params.tag",
        ),
    ],
)
def test_a_step_input_that_cannot_be_right_is_named(
    steps: list[dict[str, Any]], params: dict[str, str], field: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        _check({"steps": steps}, params)
    assert refused.value.field == field


@pytest.mark.parametrize(
    ("steps", "params"),
    [
        ([{"id": "a", "job": "lower", "params": {"tag": "${params.tag}"}}], {"tag": "fine"}),
        # a missing param behind a condition may be what the condition guards
        ([{"id": "a", "job": "free", "when": 'params.other == "x"', "params": {"tag": "${params.tag}"}}], {}),
        # ... and in every step that waits for a conditional one
        (
            [
                {"id": "a", "job": "free", "when": 'params.other == "x"'},
                {"id": "b", "job": "free", "depends_on": ["a"], "params": {"tag": "${params.tag}"}},
            ],
            {},
        ),
        # another step's output is known only when the step starts
        (
            [
                {"id": "a", "job": "free", "outputs": ["out"]},
                {"id": "b", "job": "lower", "params": {"tag": "${steps.a.outputs.out}"}},
            ],
            {},
        ),
        ([{"id": "a", "job": "lower", "params": {"tag": "${workflow.workflow_run_id}"}}], {}),
    ],
)
def test_what_only_the_step_start_can_know_is_left_to_it(steps: list[dict[str, Any]], params: dict[str, str]) -> None:
    _check({"steps": steps}, params)


def test_a_refused_start_stores_and_runs_nothing(engine: Engine, marker: Path) -> None:
    j = jobs(engine)
    strict = define(
        engine,
        handler="workflow_handlers:record",
        params=[{"name": "name", "required": True, "pattern": "[a-z]+"}],
    )
    wf = workflow(
        engine,
        [
            {"id": "a", "job": j["record"], "params": {"name": "a"}},
            {"id": "b", "job": strict, "params": {"name": "B!"}},
        ],
    )
    before = count(engine, "job_runs"), count(engine, "workflow_runs")
    with pytest.raises(ValidationError) as refused:
        start_workflow(engine, StartWorkflow(wf, requested_by="tester"), actor="tester")
    assert refused.value.field == "workflow.steps.b.params.name"
    with pytest.raises(ValidationError) as as_run:  # fired as a run: refused when the run is made
        engine.submit(SubmitRequest(wf, requested_by="tester"), actor="tester")
    assert as_run.value.field == "workflow.steps.b.params.name"
    assert (count(engine, "job_runs"), count(engine, "workflow_runs")) == before
    assert marker.read_text() == ""  # step a never ran


def test_a_proposal_of_a_workflow_that_could_never_start_is_refused(engine: Engine) -> None:
    """Found by a review: a four-eyes proposal of a workflow whose step would refuse the value
    it passes was stored pending (the same value proposed for the job alone was refused), and
    the second person was handed a request no approval could run. Checked as at a start."""
    from jobgate.service import requests

    strict = define(
        engine,
        handler="workflow_handlers:record",
        params=[{"name": "name", "required": True, "pattern": "[a-z]{1,8}"}],
    )
    wf = workflow(engine, [{"id": "a", "job": strict, "params": {"name": "${params.x}"}}], params=[{"name": "x"}])
    before = count(engine, "run_requests")
    with pytest.raises(ValidationError) as refused:
        requests.propose(
            engine, tenant_id="default", requester="alice", job_definition_id=wf, params={"x": "BAD123"},
            title="t", reason="r",
        )  # fmt: skip
    assert refused.value.field == "workflow.steps.a.params.name"
    assert count(engine, "run_requests") == before
    made = requests.propose(
        engine, tenant_id="default", requester="alice", job_definition_id=wf, params={"x": "good"},
        title="t", reason="r",
    )  # fmt: skip
    assert made.status == "pending" and count(engine, "run_requests") == before + 1


def test_a_schedule_of_a_workflow_whose_every_fire_would_be_refused_is_refused(engine: Engine) -> None:
    """A schedule that could never fire is refused when stored: for a workflow, what its steps
    would be given is checked as at a start (found by a review: it was stored and each fire
    refused), except the params an event's payload brings when it fires."""
    from datetime import UTC, datetime

    from jobgate.service import schedules

    j = jobs(engine)
    wf = workflow(
        engine,
        [{"id": "a", "job": j["record"], "params": {"name": "${params.x}"}}],
        params=[{"name": "x"}],
        trigger_type="manual",
        also_triggered_by=["cron", "event"],
    )
    now = datetime.now(UTC)
    timed = schedules.schedule_from_document({"id": "every-minute", "job": wf, "cron": "* * * * *"}, now=now)
    with pytest.raises(ValidationError) as refused:
        schedules.put_schedules(engine, [timed], source="test", now=now)
    assert refused.value.field == "workflow.steps.a.params.name"
    assert count(engine, "schedules") == 0
    given = schedules.schedule_from_document(
        {"id": "every-minute", "job": wf, "cron": "* * * * *", "params": {"x": "given"}}, now=now
    )
    schedules.put_schedules(engine, [given], source="test", now=now)  # with its value: stored
    by_event = schedules.schedule_from_document(
        {"id": "on-upload", "job": wf, "event_type": "file.uploaded", "payload_params": ["x"]}, now=now
    )
    schedules.put_schedules(engine, [by_event], source="test", now=now)  # the payload brings it


def test_a_workflows_own_schedule_that_could_never_fire_is_refused_at_apply(engine: Engine) -> None:
    """Its own schedule (``trigger_type: cron``) is checked as one stored by hand (found by a
    review: apply stored it active, every fire refused)."""
    j = jobs(engine)
    steps = [{"id": "a", "job": j["record"], "params": {"name": "${params.x}"}}]
    with pytest.raises(ValidationError) as refused:
        workflow(engine, steps, params=[{"name": "x"}], trigger_type="cron", schedule_expression="*/5 * * * *")
    assert refused.value.field == "schedule_expression" and "workflow.steps.a.params.name" in refused.value.message
    assert count(engine, "schedules") == 0
    # with a default for x its fires can run: stored
    workflow(
        engine,
        steps,
        params=[{"name": "x", "default": "given"}],
        trigger_type="cron",
        schedule_expression="*/5 * * * *",
    )
    assert count(engine, "schedules") == 1
