"""Seed 004 scenario files: an ``orchestrator:`` header plus a body, digested as raw text."""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

import pytest

from jobgate.config import JobgateConfig, build_config
from jobgate.core.errors import ValidationError
from jobgate.core.models import DefinitionStatus, ExecutorSpec, JobClass, ParamSpec, TriggerType
from jobgate.core.params import render, validate_params
from jobgate.definitions import load_definition_file, parse_definition, parse_definition_text

Write = Callable[[str, str], Path]

# Seed 004 "Scenario file", verbatim.
SEED_SCENARIO = """orchestrator:
  name: export-payroll
  description: "Payroll export by period"
  runner: tdtpcli              # optional — omit to use the configured default
  permissions: [etl, enc]      # must be covered by license ∩ Mercury env
  params:
    - name: period
      required: true
      pattern: '^\\d{4}-\\d{2}$'

# Below: normal pipeline YAML; {{.period}} substituted before tdtpcli runs.
sources:
  - name: payroll
    type: mssql
    query: "SELECT * FROM Payroll WHERE Period = '{{.period}}'"
"""


@pytest.fixture
def seed004_config(tmp_path: Path) -> JobgateConfig:
    """Seed 004 runners.yaml, verbatim, with tdtpcli as the default runner."""
    runners = {
        "tdtpcli": {"binary": "./tdtpcli", "args": ["--pipeline", "{{.tmpfile}}"]},
        "python-etl": {
            "binary": "python",
            "args": ["etl_runner.py", "--config", "{{.tmpfile}}", "--period", "{{.period}}"],
        },
        "powershell": {"binary": "pwsh", "args": ["-File", "{{.tmpfile}}"]},
    }
    return build_config({"runners": runners, "default_runner": "tdtpcli"}, base_dir=tmp_path, path=None)


def test_seed_scenario_maps_to_a_definition(seed004_config: JobgateConfig, write: Write) -> None:
    path = write("export-payroll.yaml", SEED_SCENARIO)
    loaded = load_definition_file(path, seed004_config)
    d = loaded.definition
    assert (d.job_definition_id, d.job_code, d.canonical_name) == ("export-payroll",) * 3
    assert d.job_class is JobClass.MAINTENANCE_JOB
    assert d.trigger_type is TriggerType.MANUAL
    assert d.executor == ExecutorSpec("command", runner="tdtpcli")
    assert d.params == (ParamSpec("period", True, r"^\d{4}-\d{2}$"),)
    assert loaded.permissions == ("etl", "enc")
    assert loaded.status is DefinitionStatus.ACTIVE
    assert loaded.body_template == SEED_SCENARIO == d.content["body"]
    assert d.content["description"] == "Payroll export by period"
    assert d.retry_policy == "no_retry_v1"


def test_body_renders_like_seed_004(seed004_config: JobgateConfig, write: Write) -> None:
    loaded = load_definition_file(write("s.yaml", SEED_SCENARIO), seed004_config)
    values = validate_params(loaded.definition.params, {"period": "2026-06"})
    assert loaded.body_template is not None
    assert "WHERE Period = '2026-06'" in render(loaded.body_template, values)
    with pytest.raises(ValidationError):
        validate_params(loaded.definition.params, {"period": "2026-6"})


def test_digest_covers_the_whole_file(seed004_config: JobgateConfig) -> None:
    base = parse_definition_text(SEED_SCENARIO, "s.yaml", seed004_config).digest
    assert parse_definition_text(SEED_SCENARIO, "elsewhere.yaml", seed004_config).digest == base
    edits = [
        SEED_SCENARIO.replace("# Below: normal", "# Below: plain"),  # a comment in the body
        SEED_SCENARIO.replace("type: mssql", "type: postgres"),  # the body itself
        SEED_SCENARIO.replace("# optional", "# optional!"),  # a comment in the header
        SEED_SCENARIO + "\n",  # trailing white space
    ]
    digests = {parse_definition_text(text, "s.yaml", seed004_config).digest for text in edits}
    assert base not in digests and len(digests) == len(edits)


def test_default_runner_is_part_of_the_content(seed004_config: JobgateConfig, tmp_path: Path) -> None:
    """Reassigning a scenario to another runner must invalidate its approval (seed 004)."""
    without = SEED_SCENARIO.replace(
        "  runner: tdtpcli              # optional — omit to use the configured default\n", ""
    )
    by_default = parse_definition_text(without, "s.yaml", seed004_config)
    assert by_default.definition.executor.runner == "tdtpcli"
    assert by_default.definition.content["runner"] == "tdtpcli"
    other = build_config(
        {
            "runners": {
                "tdtpcli": {"binary": "x", "args": ["{{tmpfile}}"]},
                "powershell": {"binary": "pwsh", "args": ["{{tmpfile}}"]},
            },
            "default_runner": "powershell",
        },
        base_dir=tmp_path,
        path=None,
    )
    assert parse_definition_text(without, "s.yaml", other).digest != by_default.digest
    no_default = build_config({"runners": {"tdtpcli": {"binary": "x"}}}, base_dir=tmp_path, path=None)
    with pytest.raises(ValidationError) as caught:
        parse_definition_text(without, "s.yaml", no_default)
    assert caught.value.field == "orchestrator.runner"
    assert "no default_runner" in caught.value.message


@pytest.mark.parametrize(
    ("old", "new", "field", "rule"),
    [
        ("'^\\d{4}-\\d{2}$'", "'[unclosed'", "orchestrator.params[0].pattern", "invalid regular expression"),
        ("name: period", "name: workdir", "orchestrator.params[0].name", "reserved"),
        ("runner: tdtpcli", "runner: bash", "orchestrator.runner", "unknown runner 'bash'"),
        ("name: export-payroll", "name: 'export payroll'", "orchestrator.name", "must be 1-200 characters"),
        ("  permissions:", "  permisions:", "orchestrator.permisions", "did you mean 'permissions'?"),
        ("{{.period}}'\"", "{{.periode}}'\"", "body", "line 15: {{periode}} is not a declared param"),
        (
            "  params:",
            "  job_class: CLEANUP\n  params:",
            "orchestrator.job_class",
            "unknown job class 'CLEANUP' (built in: REPLAY_JOB",
        ),
    ],
)
def test_header_errors_name_the_header_field(
    seed004_config: JobgateConfig, write: Write, old: str, new: str, field: str, rule: str
) -> None:
    assert old in SEED_SCENARIO
    path = write("s.yaml", SEED_SCENARIO.replace(old, new))
    with pytest.raises(ValidationError) as caught:
        load_definition_file(path, seed004_config)
    assert (caught.value.source, caught.value.field) == (str(path), field)
    assert rule in caught.value.message


def test_header_may_set_jobgate_fields(seed004_config: JobgateConfig) -> None:
    text = SEED_SCENARIO.replace(
        "  params:",
        "  job_class: DAL_ANCHOR_JOB\n  priority: high\n  retry_policy: fixed_delay_v1\n  params:",
    )
    d = parse_definition_text(text, "s.yaml", seed004_config).definition
    assert (d.job_class, d.priority.value, d.retry_policy) == (
        JobClass.DAL_ANCHOR_JOB,
        "high",
        "fixed_delay_v1",
    )


def test_header_has_no_status(seed004_config: JobgateConfig) -> None:
    """Status is lifecycle, outside digests; a scenario's text is all digest."""
    text = SEED_SCENARIO.replace("  params:", "  status: suspended\n  params:")
    with pytest.raises(ValidationError) as caught:
        parse_definition_text(text, "s.yaml", seed004_config)
    assert caught.value.field == "orchestrator.status"


def test_malformed_header_names_its_line(seed004_config: JobgateConfig) -> None:
    text = SEED_SCENARIO.replace("  description:", "   description:")
    with pytest.raises(ValidationError) as caught:
        parse_definition_text(text, "s.yaml", seed004_config)
    assert caught.value.message.startswith("invalid YAML at line 3")
    with pytest.raises(ValidationError) as caught:
        parse_definition_text("orchestrator: [\n", "s.yaml", seed004_config)
    assert "invalid YAML at line 2" in caught.value.message


def test_header_not_first_still_counts(seed004_config: JobgateConfig) -> None:
    header, body = SEED_SCENARIO.split("\n# Below")
    text = "# Below" + body + header
    loaded = parse_definition_text(text, "s.yaml", seed004_config)
    assert loaded.job_definition_id == "export-payroll"
    assert loaded.body_template == text


def test_header_must_be_a_mapping(seed004_config: JobgateConfig) -> None:
    with pytest.raises(ValidationError) as caught:
        parse_definition_text("orchestrator: export-payroll\nsources: []\n", "s.yaml", seed004_config)
    assert (caught.value.field, caught.value.message) == ("orchestrator", "must be a mapping, not a string")


def test_non_yaml_body_with_a_flow_header(demo_config: JobgateConfig, demo_dir: Path) -> None:
    """The demo's Python scenario: the header is YAML, the rest is not, and the file is valid Python."""
    path = demo_dir / "definitions" / "demo-report.yaml"
    text = path.read_text(encoding="utf-8")
    ast.parse(text)  # the runner executes the whole file with python3
    loaded = load_definition_file(path, demo_config)
    assert loaded.job_definition_id == "demo-report"
    assert loaded.definition.executor == ExecutorSpec("command", runner="python-script")
    assert [p.name for p in loaded.definition.params] == ["title", "rows"]
    assert loaded.body_template == text
    rendered = render(text, {"title": "T", "rows": "2", "run_id": "r1", "attempt": "1", "workdir": "/w"})
    ast.parse(rendered)


def test_a_scenario_round_trips_through_its_content(seed004_config: JobgateConfig) -> None:
    """The store keeps the mapped content; parsing it again gives the same digest."""
    loaded = parse_definition_text(SEED_SCENARIO, "s.yaml", seed004_config)
    again = parse_definition(loaded.definition.content, "stored", seed004_config)
    assert again.digest == loaded.digest
    assert again.body_template == SEED_SCENARIO


def test_json_scenario(seed004_config: JobgateConfig) -> None:
    text = '{"orchestrator": {"name": "j", "runner": "powershell"}, "steps": []}'
    loaded = parse_definition_text(text, "j.json", seed004_config, fmt="json")
    assert loaded.body_template == text
    assert loaded.definition.executor.runner == "powershell"
