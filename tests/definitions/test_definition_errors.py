"""Every refusal names the file, the field and the rule (STYLE habit 12)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jobgate.config import JobgateConfig, build_config
from jobgate.core.errors import ValidationError
from jobgate.definitions import load_definition_file, load_definitions, parse_definition

BASE: dict[str, Any] = {
    "job_definition_id": "demo-case",
    "job_code": "DEMO-CASE",
    "job_class": "MAINTENANCE_JOB",
    "handler": "jobgate.standins:hello",
    "params": [{"name": "name", "pattern": "[a-z]+", "default": "world"}],
}


def case(changes: dict[str, Any], *, drop: tuple[str, ...] = ()) -> str:
    document = {**BASE, **changes}
    for key in drop:
        del document[key]
    return json.dumps(document, indent=2)


PRIORITIES = "must be one of: critical, high, normal, low, background"

# (case id, file name, file text, expected field, expected fragment of the rule)
CASES: list[tuple[str, str, str, str | None, str]] = [
    ("bad priority", "d.json", case({"priority": "urgent"}), "priority", PRIORITIES),
    (
        "bad job_class",
        "d.json",
        case({"job_class": "REPLAY"}),
        "job_class",
        "unknown job class 'REPLAY' (built in: REPLAY_JOB, DAL_ANCHOR_JOB",
    ),
    (
        "missing job_class",
        "d.json",
        case({}, drop=("job_class",)),
        "job_class",
        "required (built in: REPLAY_JOB",
    ),
    ("missing id", "d.json", case({}, drop=("job_definition_id",)), "job_definition_id", "required"),
    (
        "bad id",
        "d.json",
        case({"job_definition_id": "has space"}),
        "job_definition_id",
        "must be 1-200 characters",
    ),
    (
        "bad trigger type",
        "d.json",
        case({"trigger_type": "hourly"}),
        "trigger_type",
        "must be one of: cron, interval",
    ),
    (
        "bad status",
        "d.json",
        case({"status": "enabled"}),
        "status",
        "must be one of: draft, active, suspended",
    ),
    (
        "unknown retry policy",
        "d.json",
        case({"retry_policy": "nope_v1"}),
        "retry_policy",
        "unknown retry policy 'nope_v1' (known: demo_fast_retry_v1, fixed_delay_v1",
    ),
    (
        "unknown timeout policy",
        "d.json",
        case({"timeout_policy": "forever"}),
        "timeout_policy",
        "unknown timeout policy 'forever'",
    ),
    ("unknown SLA policy", "d.json", case({"sla_policy": "fast"}), "sla_policy", "unknown SLA policy 'fast'"),
    (
        "unknown profile",
        "d.json",
        case({"config_profile": "staging"}),
        "config_profile",
        "unknown config profile 'staging' (known: default, production_scheduler_v1)",
    ),
    (
        "unknown MEID",
        "d.json",
        case({"target_engine_meid": "MEID_NOPE"}, drop=("handler",)),
        "target_engine_meid",
        "unknown target engine MEID 'MEID_NOPE'",
    ),
    (
        "incompatible CMI",
        "d.json",
        case(
            {
                "target_engine_meid": "MEID_TRUST_QUARANTINE_MANAGER",
                "target_engine_cmi": "vera.TG-QUARANTINE.2_0_0",
            },
            drop=("handler",),
        ),
        "target_engine_cmi",
        "target engine CMI not compatible with MEID_TRUST_QUARANTINE_MANAGER",
    ),
    (
        "CMI without MEID",
        "d.json",
        case({"target_engine_cmi": "vera.X"}),
        "target_engine_cmi",
        "only meaningful with target_engine_meid",
    ),
    (
        "unknown runner",
        "d.json",
        case({"runner": "bash"}, drop=("handler",)),
        "runner",
        "unknown runner 'bash' (known: echo-report, python-script)",
    ),
    (
        "two executor sources",
        "d.json",
        case({"runner": "python-script", "body": "x"}),
        "runner",
        "conflicts with handler: a definition has exactly one executor source",
    ),
    (
        "target and handler",
        "d.json",
        case({"target_engine_meid": "MEID_TRUST_DAL_ANCHOR"}),
        "handler",
        "conflicts with target_engine_meid",
    ),
    (
        "no executor source",
        "d.json",
        case({}, drop=("handler",)),
        "target_engine_meid",
        "required: a definition has exactly one executor source: target_engine_meid, handler, runner or workflow",
    ),
    (
        "bad handler",
        "d.json",
        case({"handler": "jobgate.standins.hello"}),
        "handler",
        "must be 'module:function'",
    ),
    (
        "bad param pattern",
        "d.json",
        case({"params": [{"name": "x", "pattern": "[unclosed"}]}),
        "params[0].pattern",
        "invalid regular expression",
    ),
    (
        "reserved param name",
        "d.json",
        case({"params": [{"name": "tmpfile"}]}),
        "params[0].name",
        "'tmpfile' is a reserved name (attempt, run_id, tmpfile, workdir)",
    ),
    (
        "param name not an identifier",
        "d.json",
        case({"params": [{"name": "first-name"}]}),
        "params[0].name",
        "must be an identifier",
    ),
    (
        "duplicate param",
        "d.json",
        case({"params": [{"name": "a"}, {"name": "a"}]}),
        "params[1].name",
        "declared twice",
    ),
    (
        "default fails pattern",
        "d.json",
        case({"params": [{"name": "a", "pattern": "[0-9]+", "default": "x"}]}),
        "params[0].default",
        "does not match the pattern '[0-9]+'",
    ),
    (
        "default fails the safe pattern",
        "d.json",
        case({"params": [{"name": "a", "default": "a b"}]}),
        "params[0].default",
        "does not match the default safe pattern",
    ),
    (
        "unknown param field",
        "d.json",
        case({"params": [{"name": "a", "regex": "x"}]}),
        "params[0].regex",
        "unknown field",
    ),
    (
        "undeclared placeholder in body",
        "d.yaml",
        "job_definition_id: demo-case\njob_class: MAINTENANCE_JOB\nrunner: python-script\n"
        "params: [{name: who}]\nbody: |\n  print('{{who}}')\n  print('{{whom}}')\n",
        "body",
        "line 2: {{whom}} is not a declared param (declared params: who; reserved: attempt",
    ),
    ("body on a handler", "d.json", case({"body": "x"}), "body", "only used by command runners"),
    (
        "runner without body",
        "d.json",
        case({"runner": "python-script"}, drop=("handler",)),
        "runner",
        "runner 'python-script' args[0] uses {{tmpfile}}, but the definition has no body",
    ),
    (
        "cron without schedule",
        "d.json",
        case({"trigger_type": "cron"}),
        "schedule_expression",
        "required when trigger_type is cron",
    ),
    (
        "bad cron",
        "d.json",
        case({"trigger_type": "cron", "schedule_expression": "0 2 * *"}),
        "schedule_expression",
        "must be a 5-field cron expression",
    ),
    (
        "bad interval",
        "d.json",
        case({"trigger_type": "interval", "schedule_expression": "often"}),
        "schedule_expression",
        "must be a whole number of seconds",
    ),
    (
        "schedule on manual",
        "d.json",
        case({"schedule_expression": "0 2 * * *"}),
        "schedule_expression",
        "only used by cron, interval and batch_window triggers, not manual",
    ),
    ("concurrency limit 0", "d.json", case({"concurrency_limit": 0}), "concurrency_limit", "must be >= 1"),
    (
        "concurrency limit bool",
        "d.json",
        case({"concurrency_limit": True}),
        "concurrency_limit",
        "must be an integer, not a boolean",
    ),
    (
        "rate limit 0",
        "d.json",
        case({"rate_limit_per_second": 0}),
        "rate_limit_per_second",
        "must be greater than 0",
    ),
    (
        "audit flag as text",
        "d.json",
        case({"audit_required": "yes"}),
        "audit_required",
        "must be true or false",
    ),
    (
        "workflow step not text",
        "d.json",
        case({"workflow_steps": ["a", 3]}),
        "workflow_steps[1]",
        "must be a non-empty string",
    ),
    (
        "duplicate permission",
        "d.json",
        case({"permissions": ["etl", "etl"]}),
        "permissions[1]",
        "duplicate entry",
    ),
    (
        "typo field",
        "d.json",
        case({"prority": "high"}),
        "prority",
        "unknown field (did you mean 'priority'?)",
    ),
    (
        "non-mapping YAML document",
        "d.yaml",
        "- a\n- b\n",
        None,
        "a definition must be a mapping of fields, not a list",
    ),
    ("non-mapping JSON document", "d.json", '"just text"', None, "must be a mapping of fields, not a string"),
    ("empty file", "d.yaml", "", None, "must be a mapping of fields, not null"),
    (
        "malformed YAML",
        "d.yaml",
        "job_definition_id: x\njob_class: [REPLAY_JOB\npriority: high\n",
        None,
        "invalid YAML at line 3, column 9: did not find expected ',' or ']' "
        "(while parsing a flow sequence started at line 2, column 12)",
    ),
    (
        "malformed JSON",
        "d.json",
        '{\n  "job_definition_id": "x",\n  "job_class": REPLAY_JOB\n}',
        None,
        "invalid JSON at line 3, column 16",
    ),
    (
        "duplicate YAML key",
        "d.yaml",
        "job_definition_id: a\npriority: high\npriority: low\n",
        None,
        "duplicate key 'priority'",
    ),
    (
        "duplicate JSON key",
        "d.json",
        '{"priority": "high", "priority": "low"}',
        None,
        "duplicate key 'priority'",
    ),
    ("NaN in JSON", "d.json", '{"rate_limit_per_second": NaN}', None, "NaN has no canonical JSON form"),
    (
        "lone surrogate",
        "d.json",
        case({"description": "\\ud800"}).replace("\\\\ud800", "\\ud800"),
        "description",
        "lone surrogate",
    ),
    (
        "binary YAML value",
        "d.yaml",
        "job_definition_id: a\ndescription: !!binary aGk=\n",
        "description",
        "a bytes has no JSON form",
    ),
]


@pytest.mark.parametrize(("name", "text", "field", "rule"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_refusal_names_file_field_and_rule(
    demo_config: JobgateConfig,
    write: Callable[[str, str], Path],
    name: str,
    text: str,
    field: str | None,
    rule: str,
) -> None:
    path = write(name, text)
    with pytest.raises(ValidationError) as caught:
        load_definition_file(path, demo_config)
    error = caught.value
    assert error.source == str(path)
    assert error.field == field
    assert rule in error.message
    assert str(error).startswith(f"{path}: {field + ': ' if field else ''}")


def test_runner_args_placeholders_must_be_declared(write: Callable[[str, str], Path], tmp_path: Path) -> None:
    config = build_config(
        {
            "runners": {
                "python-etl": {
                    "binary": "python",
                    "args": ["etl.py", "--config", "{{.tmpfile}}", "--period", "{{.period}}"],
                }
            },
            "targets": {"MEID_ETL": {"cmi": "etl.1", "runner": "python-etl"}},
        },
        base_dir=tmp_path,
        path=None,
    )
    direct = write("direct.yaml", "job_definition_id: a\njob_class: MAINTENANCE_JOB\nrunner: python-etl\nbody: x\n")
    with pytest.raises(ValidationError) as caught:
        load_definition_file(direct, config)
    assert caught.value.field == "runner"
    assert "runner 'python-etl' args[4] uses {{period}}, which is not a declared param" in caught.value.message

    via_target = write(
        "target.yaml",
        "job_definition_id: a\njob_class: MAINTENANCE_JOB\ntarget_engine_meid: MEID_ETL\nbody: x\n",
    )
    with pytest.raises(ValidationError) as caught:
        load_definition_file(via_target, config)
    assert caught.value.field == "target_engine_meid"

    declared = write(
        "ok.yaml",
        "job_definition_id: a\njob_class: MAINTENANCE_JOB\ntarget_engine_meid: MEID_ETL\n"
        "body: 'period={{period}}'\nparams: [{name: period, pattern: '\\d{4}-\\d{2}'}]\n",
    )
    loaded = load_definition_file(declared, config)
    assert loaded.definition.executor.runner == "python-etl"
    assert loaded.definition.executor.target == "MEID_ETL"


def test_a_scenario_header_is_not_a_definition_field(demo_config: JobgateConfig) -> None:
    """A scenario's digest covers its raw text, so a header inside a plain dict is refused."""
    with pytest.raises(ValidationError) as caught:
        parse_definition({**BASE, "orchestrator": {"name": "x"}}, "api", demo_config)
    assert (caught.value.source, caught.value.field) == ("api", "orchestrator")


def test_yaml_dates_stay_text(demo_config: JobgateConfig, write: Callable[[str, str], Path]) -> None:
    """An unquoted date must not become a ``date`` (it would have no canonical JSON form)."""
    path = write(
        "d.yaml",
        "job_definition_id: a\njob_class: MAINTENANCE_JOB\nhandler: m:f\n"
        "description: 2026-06-25\nversion_note: 2026-06-25T18:00:00Z\n",
    )
    content = load_definition_file(path, demo_config).definition.content
    assert content["description"] == "2026-06-25"
    assert content["version_note"] == "2026-06-25T18:00:00Z"


def test_null_means_absent(demo_config: JobgateConfig, write: Callable[[str, str], Path]) -> None:
    path = write("d.json", case({"timeout_policy": None, "sla_policy": None, "concurrency_limit": None}))
    d = load_definition_file(path, demo_config).definition
    assert (d.timeout_policy, d.sla_policy, d.concurrency_limit) == (None, None, None)


def test_loads_of_several_files_name_the_bad_one(
    demo_config: JobgateConfig, write: Callable[[str, str], Path], tmp_path: Path
) -> None:
    write("defs/a.json", case({"job_definition_id": "a"}))
    bad = write("defs/b.json", case({"job_definition_id": "b", "priority": "urgent"}))
    with pytest.raises(ValidationError) as caught:
        load_definitions([tmp_path / "defs"], demo_config)
    assert caught.value.source == str(bad)
