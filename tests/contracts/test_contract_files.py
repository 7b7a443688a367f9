"""The contract files themselves: one valid draft 2020-12 schema per seed 000 §41 CSI (and per
event jobgate emits), enums that are the code's enums, the seed's own examples judged with
every difference named, and violations that name the path and the rule."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

sys.path.insert(0, str(Path(__file__).resolve().parent))

from seed_examples import SEED

from jobgate.contracts import ContractError, contract_ids, event_contract, schema, validate, violations
from jobgate.contracts.validation import CSI_PATTERN
from jobgate.core.decide import Outcome, OutcomeKind, decide
from jobgate.core.errors import ValidationError
from jobgate.core.events import EventType
from jobgate.core.models import DeadLetterReason, DefinitionStatus, JobClass, Priority, TriggerType
from jobgate.core.policies import RetryPolicy, RetryStrategy
from jobgate.core.states import RunStatus
from jobgate.workflows.plan import StepStatus
from jobgate.workflows.spec import FailurePolicy

# Seed 000 §41, both tables, in the seed's order.
SEED_CSIS = (
    "comp.TG.INPUT.SCHEDULER-TRIGGER.v1_0",
    "comp.TG.INPUT.JOB-DEFINITION.v1_0",
    "comp.TG.INPUT.WORKFLOW-DEFINITION.v1_0",
    "comp.TG.OUTPUT.RESOLVED-CONFIG.v1_0",
    "comp.TG.INPUT.RUNTIME-EVENT.v1_0",
    "comp.TG.INPUT.QUEUE-METRIC.v1_0",
    "comp.TG.INPUT.OBSERVABILITY-ALERT.v1_0",
    "comp.FAGF.INPUT.SCHEDULER-POLICY.v1_0",
    "comp.TG.OUTPUT.SCHEDULED-JOB.v1_0",
    "comp.TG.OUTPUT.JOB-RUN.v1_0",
    "comp.TG.OUTPUT.WORKFLOW-RUN.v1_0",
    "comp.TG.EVENT.JOB-STARTED.v1_0",
    "comp.TG.EVENT.JOB-COMPLETED.v1_0",
    "comp.TG.EVENT.JOB-FAILED.v1_0",
    "comp.TG.EVENT.JOB-RETRIED.v1_0",
    "comp.TG.EVENT.JOB-DEAD-LETTERED.v1_0",
    "comp.DAL.INPUT.ANCHOR-CANDIDATE.v1_0",
    "comp.AII.INPUT.SCHEDULER-TELEMETRY.v1_0",
    "comp.DSAIL.INPUT.SCHEDULER-FEEDBACK.v1_0",
)
# The enums a contract spells out, by the name of their $defs entry, and the code's enum.
CODE_ENUMS: dict[str, set[str]] = {
    "job_class": {c.value for c in JobClass},
    "run_status": {s.value for s in RunStatus},
    "priority": {p.value for p in Priority},
    "trigger_type": {t.value for t in TriggerType},
    "definition_status": {s.value for s in DefinitionStatus},
    "dead_letter_reason": {r.value for r in DeadLetterReason},
    "step_status": {s.value for s in StepStatus},
    "failure_policy": {p.value for p in FailurePolicy},
}


@pytest.mark.parametrize("csi_id", SEED_CSIS)
def test_every_seed_csi_has_a_contract(csi_id: str) -> None:
    assert csi_id in contract_ids()


@pytest.mark.parametrize("csi_id", contract_ids())
def test_each_file_is_a_valid_schema_named_by_its_csi_id(csi_id: str) -> None:
    document = schema(csi_id)
    Draft202012Validator.check_schema(document)
    assert CSI_PATTERN.fullmatch(csi_id), csi_id
    assert document["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert document["$id"] == f"urn:jobgate:contract:{csi_id}"
    assert document["title"] and document["description"]
    assert document["type"] == "object" and "additionalProperties" in document, "closed or open: decided, not implied"


def test_the_contracts_are_found_and_the_package_data_ships_them() -> None:
    assert len(contract_ids()) >= len(SEED_CSIS)
    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text(encoding="utf-8")
    assert '"contracts/*.json"' in pyproject


@pytest.mark.parametrize("kind", list(EventType))
def test_every_event_type_has_its_contract(kind: EventType) -> None:
    csi_id = event_contract(kind.value)
    assert csi_id in contract_ids()
    assert event_contract(kind.qualified) == csi_id
    assert schema(csi_id)["properties"]["event_type"] == {"const": kind.qualified}


def test_every_event_contract_is_an_event_jobgate_emits() -> None:
    emitted = {event_contract(k.value) for k in EventType}
    declared = {c for c in contract_ids() if c.startswith("comp.TG.EVENT.")}
    assert emitted and declared == emitted


def _enum_defs(node: Any, found: dict[str, list[set[str]]]) -> None:
    if isinstance(node, dict):
        for name, sub in node.get("$defs", {}).items():
            if name in CODE_ENUMS:
                found.setdefault(name, []).append(set(sub["enum"]))
        for value in node.values():
            _enum_defs(value, found)
    elif isinstance(node, list):
        for value in node:
            _enum_defs(value, found)


def test_enums_in_the_contracts_are_the_code_s_enums() -> None:
    found: dict[str, list[set[str]]] = {}
    for csi_id in contract_ids():
        _enum_defs(schema(csi_id), found)
    assert set(found) == set(CODE_ENUMS), "every enum is used by some contract"
    for name, copies in found.items():
        for values in copies:
            assert values == CODE_ENUMS[name], name


def test_the_retry_reasons_are_those_the_decision_can_give() -> None:
    policy = RetryPolicy("p", RetryStrategy.FIXED_DELAY, max_attempts=3)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    reasons = {
        d.reason.value
        for kind in OutcomeKind
        if (d := decide(Outcome(kind), policy, idempotency_key="k", attempt=1, max_attempts=3, now=now)).to_status
        is RunStatus.RETRY_WAIT
    }
    assert set(schema("comp.TG.EVENT.JOB-RETRIED.v1_0")["properties"]["reason"]["enum"]) == reasons


# ---------------------------------------------------------------- the seed's examples
# What jobgate adds to each example, and the example's placeholder ids ("TGJOBRUN-2026-00001472",
# "sha256:8b1c91...") that are not jobgate's formats (jobgate derives ids from digests). Only §18
# and §48 differ in substance: an event trigger without its source event id (jobgate requires
# it: it is the idempotency key's trigger identity, seed §24), and the anchor record (below).
PLACEHOLDER_IDS = {"job_run_id", "config_snapshot_id", "idempotency_key", "config_digest", "dead_letter_id"}
ENVELOPE = {"event_id", "recorded_at"}
RUN_KEYS = {"tenant_id", "idempotency_key", "job_definition_id"}
EXPECTED: dict[str, set[str]] = {
    "§15": set(),
    "§16": PLACEHOLDER_IDS - {"dead_letter_id"}
    | {
        "tenant_id",
        "definition_version",
        "definition_digest",
        "trigger_type",
        "max_attempts",
        "queue",
        "params",
        "scope",
        "created_at",
        "due_at",
        "requested_by",
        "ended_at",
        "next_retry_at",
        "error_code",
        "error_message",
        "result",
        "stop_requested",
        "has_artifact",
        "artifact_sha256",
        "artifact_size",
        "workflow_run_id",
    },
    "§18": {"source_event_id"},
    "§23": ENVELOPE | {"sla_breach_id", "job_run_id", "job_definition_id", "tenant_id", "kind"},
    "§27": ENVELOPE | RUN_KEYS | {"job_run_id", "dead_letter_id"},
    "§42": {"job_run_id", "config_snapshot_id"},
    "§44": {
        "workflow_run_id",
        "job_definition_id",
        "definition_version",
        "definition_digest",
        "tenant_id",
        "created_at",
        "started_at",
        "ended_at",
        "error_code",
        "error_message",
        "steps",
    },
    "§45": ENVELOPE | RUN_KEYS - {"job_definition_id"} | {"job_run_id", "config_snapshot_id", "attempt"},
    "§46": ENVELOPE | RUN_KEYS | {"job_run_id", "attempt"},
    "§47": ENVELOPE | RUN_KEYS | {"job_run_id"},
    "§51": {"tenant_id", "period_start", "period_end"},
    # jobgate anchors Merkle roots over audit-log windows, chained; the seed's candidate names one
    # artifact. None of the seed's fields is in jobgate's record and none of jobgate's in the seed's.
    "§48": {"artifact_type", "artifact_id", "artifact_hash", "engine_cmi", "meid", "event_type", "created_at"}
    ^ {name for name in schema("comp.DAL.INPUT.ANCHOR-CANDIDATE.v1_0")["required"]},
}


@pytest.mark.parametrize("section", sorted(SEED))
def test_the_seed_s_example_differs_only_where_named(section: str) -> None:
    csi_id, example = SEED[section]
    assert {v.path for v in violations(csi_id, example)} == EXPECTED[section]


# ---------------------------------------------------------------- refusals name the path and the rule
def a_run(**changes: Any) -> dict[str, Any]:
    run: dict[str, Any] = {
        "job_run_id": "TGJOBRUN-019a2b3c4d5e" + "a" * 20,
        "tenant_id": "acme",
        "job_definition_id": "payroll.close",
        "definition_version": 1,
        "definition_digest": "sha256:" + "1" * 64,
        "job_class": "MAINTENANCE_JOB",
        "trigger_id": "TGTRIG-REQ-1",
        "trigger_type": "manual",
        "idempotency_key": "sha256:" + "2" * 64,
        "config_snapshot_id": "TGCFGSNAP-" + "3" * 24,
        "config_digest": "sha256:" + "3" * 64,
        "status": "SCHEDULED",
        "attempt": 0,
        "max_attempts": 3,
        "priority": "normal",
        "queue": "default",
        "params": {"period": "2026-06"},
        "scope": {"tenant_id": "acme", "eco_number": "ECO-A123"},
        "created_at": "2026-06-25T18:00:00Z",
        "due_at": "2026-06-25T18:00:00.250000Z",
        "requested_by": None,
        "started_at": None,
        "ended_at": None,
        "next_retry_at": None,
        "error_code": None,
        "error_message": None,
        "result": None,
        "stop_requested": False,
        "has_artifact": False,
        "artifact_sha256": None,
        "artifact_size": None,
        "workflow_run_id": None,
    }
    run.update(changes)
    return run


RUN = "comp.TG.OUTPUT.JOB-RUN.v1_0"


def test_a_conforming_document_passes() -> None:
    validate(RUN, a_run())
    assert violations(RUN, a_run(status="COMPLETED", result={"rows": 3}, ended_at="2026-06-25T18:01:00Z")) == []


@pytest.mark.parametrize(
    ("document", "path", "rule"),
    [
        ({k: v for k, v in a_run().items() if k != "tenant_id"}, "tenant_id", "required field missing"),
        (a_run(status="PENDING"), "status", "must be one of: CREATED, SCHEDULED"),
        (a_run(priority="urgent"), "priority", "must be one of: critical, high"),
        (a_run(job_class="report"), "job_class", "does not match ^[A-Z][A-Z0-9]*(_[A-Z0-9]+)*_JOB$"),
        (a_run(colour="blue"), "colour", "unexpected field"),
        (a_run(params={"n": 1}), "params.n", "1 is not of type 'string'"),
        (a_run(scope={"region": "eu"}), "scope.tenant_id", "required field missing"),
        (a_run(created_at="2026-06-25T18:00:00+02:00"), "created_at", "does not match"),  # jobgate writes Z
        (a_run(created_at="2026-02-30T18:00:00Z"), "created_at", "is not a date-time"),
        (a_run(job_run_id="TGJOBRUN-2026-00001472"), "job_run_id", "does not match ^TGJOBRUN-[0-9a-f]{32}$"),
        (a_run(attempt=-1), "attempt", "less than the minimum of 0"),
    ],
)
def test_a_violation_names_its_path_and_rule(document: dict[str, Any], path: str, rule: str) -> None:
    with pytest.raises(ContractError) as caught:
        validate(RUN, document)
    error = caught.value
    assert (error.field, error.source, error.code) == (path, RUN, "contract_violation")
    assert rule in error.message, error.message
    assert str(error).startswith(f"{RUN}: {path}: ")


def test_a_nested_violation_names_the_whole_path() -> None:
    workflow = {
        "workflow_run_id": "TGWF-2026-" + "b" * 20,
        "status": "RUNNING",
        "current_step": "build",
        "completed_steps": ["collect"],
        "remaining_steps": ["submit"],
        "job_definition_id": "dal-batch",
        "definition_version": 2,
        "definition_digest": "sha256:" + "4" * 64,
        "tenant_id": "acme",
        "created_at": "2026-06-25T18:00:00Z",
        "started_at": "2026-06-25T18:00:01Z",
        "ended_at": None,
        "error_code": None,
        "error_message": None,
        "steps": [
            {
                "step_id": "collect",
                "status": "COMPLETED",
                "job_run_id": "TGJOBRUN-" + "c" * 32,
                "compensation_run_id": None,
                "outputs": {"count": 3},
            },
            {"step_id": "build", "status": "WAITING", "job_run_id": None, "compensation_run_id": None, "outputs": None},
        ],
    }
    (problem,) = violations("comp.TG.OUTPUT.WORKFLOW-RUN.v1_0", workflow)
    assert problem.path == "steps[1].status" and problem.reason.startswith("must be one of: PENDING, RUNNING")


def test_every_violation_is_kept_and_the_message_counts_them() -> None:
    with pytest.raises(ContractError) as caught:
        validate(RUN, a_run(status="nope", priority="nope", extra=1))
    assert [v.path for v in caught.value.violations] == ["extra", "priority", "status"]
    assert caught.value.message.endswith("(and 2 more)")


def test_exactly_one_executor_is_named_as_such() -> None:
    definition = {"job_definition_id": "x", "job_class": "MAINTENANCE_JOB"}
    csi = "comp.TG.INPUT.JOB-DEFINITION.v1_0"
    assert [str(v) for v in violations(csi, definition)] == [
        "(document): must have exactly one of: target_engine_meid | handler | runner"
    ]
    both = {**definition, "handler": "m:f", "runner": "py"}
    assert [str(v) for v in violations(csi, both)] == [
        "(document): must have only one of: target_engine_meid | handler | runner"
    ]


def test_an_unknown_contract_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(ValidationError, match=r"unknown contract 'comp\.TG\.OUTPUT\.NOPE\.v1_0'.*JOB-RUN"):
        validate("comp.TG.OUTPUT.NOPE.v1_0", {})


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("2026-06-25T18:00:00Z", True),
        ("2026-06-25T18:00:00.5+02:00", True),
        ("2026-06-25t18:00:00z", True),  # RFC 3339 allows lower case
        ("2026-06-25T18:00:00", False),  # no offset: not an instant
        ("2026-06-25 18:00:00Z", False),
        ("2026-13-01T00:00:00Z", False),
        ("2026-02-29T00:00:00Z", False),  # 2026 is not a leap year
        ("2028-02-29T00:00:00Z", True),
        ("yesterday", False),
    ],
)
def test_instants_are_rfc3339_with_an_offset(value: str, ok: bool) -> None:
    policy = {"policy_id": "p", "version": 1, "blackouts": [{"id": "b", "start": value, "end": "2030-01-01T00:00:00Z"}]}
    found = violations("comp.FAGF.INPUT.SCHEDULER-POLICY.v1_0", policy)
    assert (found == []) is ok, found
