"""Definition documents and the scheduler policy against their CSI contracts: every demo
definition conforms, and where the contract and the loader judge a document's shape they
agree, refusing the same documents and naming the same field."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

import jobgate.governance.policy_file
from jobgate.config import JobgateConfig
from jobgate.contracts import violations
from jobgate.core.errors import ConfigurationError, ValidationError
from jobgate.definitions import load_definitions, parse_definition
from jobgate.governance.policy_file import parse_policy

JOB = "comp.TG.INPUT.JOB-DEFINITION.v1_0"
WORKFLOW = "comp.TG.INPUT.WORKFLOW-DEFINITION.v1_0"
POLICY = "comp.FAGF.INPUT.SCHEDULER-POLICY.v1_0"


def as_document(content: dict[str, Any], status: str) -> dict[str, Any]:
    """What was written: the stored content (the canonical document) with its lifecycle status."""
    return {**content, "status": status}


def test_every_demo_definition_conforms(demo_dir: Path, demo_config: JobgateConfig) -> None:
    loaded = load_definitions([demo_dir / "definitions"], demo_config)
    assert len(loaded) >= 10
    for item in loaded:
        csi = WORKFLOW if "workflow" in item.definition.content else JOB
        document = as_document(dict(item.definition.content), item.status.value)
        assert violations(csi, document) == [], item.source


BASE: dict[str, Any] = {
    "job_definition_id": "payroll-export",
    "job_class": "MAINTENANCE_JOB",
    "handler": "jobgate.standins:hello",
    "params": [{"name": "name", "pattern": "[a-z]+", "default": "ada"}],
}
STEPS: dict[str, Any] = {
    "steps": [
        {"id": "collect", "job": "demo-hello", "outputs": ["greeting"]},
        {
            "id": "publish",
            "job": "demo-hello",
            "params": {"name": "${steps.collect.outputs.greeting}"},
            "when": "steps.collect.outputs.greeting != null",
            "on_failure": "compensate",
            "compensate": {"job": "demo-hello", "params": {"name": "undo"}},
        },
        {"id": "audit", "job": "demo-hello", "depends_on": [], "retry_policy": "fixed_delay_v1"},
    ],
    "on_failure": "escalate",
}
A_WORKFLOW: dict[str, Any] = {"job_definition_id": "nightly-batch", "job_class": "DAL_ANCHOR_JOB", "workflow": STEPS}


@pytest.mark.parametrize("document", [BASE, A_WORKFLOW])
def test_a_document_the_loader_accepts_conforms(document: dict[str, Any], demo_config: JobgateConfig) -> None:
    parse_definition(document, "doc.yaml", demo_config)
    assert violations(WORKFLOW if "workflow" in document else JOB, document) == []


# (change to BASE, the field both name). A None value removes the key.
REFUSED: list[tuple[dict[str, Any], str]] = [
    ({"job_definition_id": None}, "job_definition_id"),
    ({"job_definition_id": "-leading-dash"}, "job_definition_id"),
    ({"job_class": "REPORT"}, "job_class"),  # REPORT_JOB is a shape a declared class may have
    ({"priority": "urgent"}, "priority"),
    ({"trigger_type": "hourly"}, "trigger_type"),
    ({"status": "paused"}, "status"),
    ({"colour": "blue"}, "colour"),
    ({"audit_required": "yes"}, "audit_required"),
    ({"concurrency_limit": 0}, "concurrency_limit"),
    ({"rate_limit_per_second": 0}, "rate_limit_per_second"),
    ({"handler": "not a handler"}, "handler"),
    ({"trigger_type": "cron"}, "schedule_expression"),
    ({"params": [{"name": "tmpfile"}]}, "params[0].name"),
    ({"params": [{"name": "n", "colour": "blue"}]}, "params[0].colour"),
    ({"permissions": ["a", "a"]}, "permissions"),
]


@pytest.mark.parametrize(("change", "field"), REFUSED)
def test_the_contract_and_the_loader_refuse_the_same_field(
    change: dict[str, Any], field: str, demo_config: JobgateConfig
) -> None:
    document = {k: v for k, v in {**BASE, **change}.items() if v is not None}
    with pytest.raises(ValidationError) as refused:
        parse_definition(document, "doc.yaml", demo_config)
    assert refused.value.field is not None and refused.value.field.startswith(field), refused.value
    paths = [v.path for v in violations(JOB, document)]
    assert any(p == field or p.startswith(field + "[") for p in paths), paths


WORKFLOW_REFUSED: list[tuple[dict[str, Any], str]] = [
    ({"steps": []}, "workflow.steps"),
    ({"steps": [{"job": "demo-hello"}]}, "workflow.steps[0].id"),
    ({"steps": [{"id": "a"}]}, "workflow.steps[0].job"),
    ({"steps": [{"id": "a", "job": "demo-hello", "on_failure": "ignore"}]}, "workflow.steps[0].on_failure"),
    ({"steps": [{"id": "a", "job": "demo-hello", "outputs": ["9lives"]}]}, "workflow.steps[0].outputs[0]"),
    ({"steps": [{"id": "a", "job": "demo-hello", "compensate": {}}]}, "workflow.steps[0].compensate.job"),
    ({"steps": [{"id": "a", "job": "demo-hello", "colour": "blue"}]}, "workflow.steps[0].colour"),
]


@pytest.mark.parametrize(("block", "field"), WORKFLOW_REFUSED)
def test_the_contract_and_the_loader_refuse_the_same_workflow_field(
    block: dict[str, Any], field: str, demo_config: JobgateConfig
) -> None:
    document = {**A_WORKFLOW, "workflow": block}
    with pytest.raises(ValidationError) as refused:
        parse_definition(document, "doc.yaml", demo_config)
    assert refused.value.field == field, refused.value
    assert field in [v.path for v in violations(WORKFLOW, document)]


def test_a_workflow_with_a_handler_too_is_refused_by_both(demo_config: JobgateConfig) -> None:
    document = {**A_WORKFLOW, "handler": "jobgate.standins:hello"}
    with pytest.raises(ValidationError):
        parse_definition(document, "doc.yaml", demo_config)
    assert [v.path for v in violations(WORKFLOW, document)] == ["handler"]
    assert violations(JOB, document) != []  # nor is it a job


# ---------------------------------------------------------------- the scheduler policy
def docstring_policy() -> dict[str, Any]:
    """The example at the top of ``jobgate/policy.py``: the documented format must conform."""
    doc = jobgate.governance.policy_file.__doc__ or ""
    block = doc.split("\n\n")[1]
    parsed: dict[str, Any] = yaml.safe_load(textwrap.dedent(block))
    return parsed


def test_the_documented_policy_conforms_and_parses() -> None:
    document = docstring_policy()
    assert document["policy_id"] == "FAGF-SCHEDULER-POLICY" and len(document) == 7
    parse_policy(document, "policy.py")
    assert violations(POLICY, document) == []


POLICY_REFUSED: list[tuple[dict[str, Any], str]] = [
    ({"version": 0}, "version"),
    ({"policy_id": None}, "policy_id"),
    ({"trigger_types": {"by_job_class": {}}}, "trigger_types.id"),
    ({"trigger_types": {"id": "T", "by_job_class": {"REPORT": ["manual"]}}}, "trigger_types.by_job_class"),
    ({"trigger_types": {"id": "T", "by_job_class": {"REPLAY_JOB": ["hourly"]}}}, "trigger_types.by_job_class"),
    ({"priority": {"id": "P", "max": "urgent"}}, "priority.max"),
    ({"priority": {"id": "P", "by_role": {"consumer": "background"}}}, "priority.by_role.consumer"),
    ({"quotas": {"id": "Q", "runs_per_day": -1}}, "quotas.runs_per_day"),
    ({"quotas": {"id": "Q", "by_tenant": {"acme": {"runs_per_week": 3}}}}, "quotas.by_tenant.acme.runs_per_week"),
    ({"blackouts": [{"id": "B", "daily": "2-3"}]}, "blackouts[0].daily"),
    ({"blackouts": [{"start": "2026-12-24T00:00:00Z", "end": "2026-12-27T00:00:00Z"}]}, "blackouts[0].id"),
    ({"manual_reason": {"id": "R", "why": True}}, "manual_reason.why"),
    ({"colour": "blue"}, "colour"),
]


@pytest.mark.parametrize(("change", "field"), POLICY_REFUSED)
def test_the_contract_and_the_policy_parser_refuse_the_same_field(change: dict[str, Any], field: str) -> None:
    document = {k: v for k, v in {**docstring_policy(), **change}.items() if v is not None}
    with pytest.raises(ConfigurationError) as refused:
        parse_policy(document, "policy.yaml")
    assert refused.value.field is not None and refused.value.field.startswith(field), refused.value
    paths = [v.path for v in violations(POLICY, document)]
    assert any(p.startswith(field) for p in paths), paths
