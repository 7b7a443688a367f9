"""The seed 000 §15 example loads unchanged, and its digest is content, not lifecycle."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from jobgate.config import JobgateConfig
from jobgate.core.canonical import digest
from jobgate.core.models import DefinitionStatus, ExecutorSpec, JobClass, Priority, TriggerType
from jobgate.definitions import load_definition_file, parse_definition, parse_definition_text

# Seed 000 §15, verbatim.
SEED_EXAMPLE = """{
  "job_definition_id": "TGJOBDEF-REPLAY-SAMPLING-001",
  "job_code": "TG-REPLAY-SAMPLING-DAILY",
  "job_class": "REPLAY_JOB",
  "canonical_name": "Daily TrustGate Replay Sampling",
  "trigger_type": "cron",
  "schedule_expression": "0 2 * * *",
  "target_engine_meid": "MEID_TRUST_REPLAY_COORDINATOR",
  "workflow_steps": [
    "select_replay_population",
    "create_replay_manifests",
    "dispatch_replay_execution",
    "record_replay_results",
    "publish_replay_telemetry"
  ],
  "priority": "high",
  "retry_policy": "standard_exponential_backoff_v1",
  "sla_policy": "replay_sampling_daily_v1",
  "audit_required": true,
  "dal_anchor_required": false,
  "status": "active"
}
"""


def seed_document() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(SEED_EXAMPLE)
    return document


def test_demo_file_is_the_seed_example_verbatim(demo_dir: Path) -> None:
    assert (demo_dir / "definitions" / "replay-sampling.json").read_text(encoding="utf-8") == SEED_EXAMPLE


def test_seed_example_loads_unchanged(demo_config: JobgateConfig, write: Callable[[str, str], Path]) -> None:
    path = write("replay-sampling.json", SEED_EXAMPLE)
    loaded = load_definition_file(path, demo_config)
    d = loaded.definition
    assert loaded.source == str(path) == d.source
    assert loaded.status is DefinitionStatus.ACTIVE is d.status
    assert loaded.body_template is None
    assert d.version == 0
    assert (d.job_definition_id, d.job_code, d.canonical_name) == (
        "TGJOBDEF-REPLAY-SAMPLING-001",
        "TG-REPLAY-SAMPLING-DAILY",
        "Daily TrustGate Replay Sampling",
    )
    assert d.job_class is JobClass.REPLAY_JOB
    assert d.trigger_type is TriggerType.CRON
    assert d.priority is Priority.HIGH
    assert d.retry_policy == "standard_exponential_backoff_v1"
    assert d.sla_policy == "replay_sampling_daily_v1"
    assert d.timeout_policy is None
    assert d.config_profile == "default"
    assert d.audit_required is True and d.dal_anchor_required is False
    assert d.target_engine_meid == "MEID_TRUST_REPLAY_COORDINATOR"
    assert d.target_engine_cmi is None
    assert d.executor == ExecutorSpec(
        "python", handler="jobgate.standins:replay_coordinator", target="MEID_TRUST_REPLAY_COORDINATOR"
    )
    assert loaded.workflow_steps[0] == "select_replay_population"
    assert loaded.schedule_expression == "0 2 * * *"
    expected_content = seed_document()
    del expected_content["status"]
    assert d.content == expected_content
    assert d.digest == digest(expected_content)


def test_digest_is_stable(demo_config: JobgateConfig) -> None:
    first = parse_definition(seed_document(), "a.json", demo_config).digest
    second = parse_definition(seed_document(), "b.json", demo_config).digest
    assert first == second
    assert first.startswith("sha256:") and len(first) == len("sha256:") + 64


def test_status_is_not_content(demo_config: JobgateConfig) -> None:
    base = parse_definition(seed_document(), "a.json", demo_config)
    for status in ("draft", "suspended", "retired"):
        changed = parse_definition({**seed_document(), "status": status}, "a.json", demo_config)
        assert changed.status is DefinitionStatus(status)
        assert changed.digest == base.digest
    without = seed_document()
    del without["status"]
    assert parse_definition(without, "a.json", demo_config).digest == base.digest


def test_every_content_change_changes_the_digest(demo_config: JobgateConfig) -> None:
    base = parse_definition(seed_document(), "a.json", demo_config).digest
    changes: list[dict[str, Any]] = [
        {"priority": "critical"},
        {"canonical_name": "Daily TrustGate Replay Sampling."},
        {"schedule_expression": "0 3 * * *"},
        {"workflow_steps": ["select_replay_population"]},
        {"audit_required": False},
        {"description": "added"},
        {"timeout_policy": "default_timeout_v1"},
    ]
    seen = {base}
    for change in changes:
        new = parse_definition({**seed_document(), **change}, "a.json", demo_config).digest
        assert new not in seen, change
        seen.add(new)


def test_yaml_and_json_spellings_share_a_digest(demo_config: JobgateConfig) -> None:
    as_json = parse_definition_text(SEED_EXAMPLE, "a.json", demo_config, fmt="json")
    as_yaml = parse_definition_text(yaml.safe_dump(seed_document()), "a.yaml", demo_config, fmt="yaml")
    assert as_json.digest == as_yaml.digest


def test_content_round_trips(demo_config: JobgateConfig) -> None:
    """The store keeps ``content``; parsing it again must give the same definition and digest."""
    loaded = parse_definition(seed_document(), "a.json", demo_config)
    again = parse_definition(loaded.definition.content, "stored", demo_config)
    assert again.digest == loaded.digest
    assert again.definition.executor == loaded.definition.executor


def test_content_is_a_copy(demo_config: JobgateConfig) -> None:
    document = seed_document()
    loaded = parse_definition(document, "a.json", demo_config)
    document["workflow_steps"].append("tampered")
    assert "tampered" not in loaded.definition.content["workflow_steps"]
    assert loaded.digest == digest(loaded.definition.content)
