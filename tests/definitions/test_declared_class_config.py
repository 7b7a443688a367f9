"""Job classes declared in jobgate.yaml (``job_classes:``, issue 25 item 5): the configuration's
refusals name the field, a definition may name a declared class beside the twelve built in, its
class gives it a default priority and audit materiality, and the content digest stays over the
document as written."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from jobgate.config import JobgateConfig, build_config, load_config
from jobgate.contracts import schema, violations
from jobgate.core.classes import CLASS_NAME_PATTERN, JobClassSpec, known_classes
from jobgate.core.errors import ConfigurationError, ValidationError
from jobgate.core.models import ExecutorSpec, JobClass, Priority
from jobgate.definitions import parse_definition
from jobgate.definitions.schema import recorded_definition

Write = Callable[[str, str], Path]

CLASSES = """\
job_classes:
  - name: RECONCILIATION_JOB
    gates_as: MAINTENANCE_JOB
    default_priority: high
    audit_material: true
    description: Month-end ledger reconciliation
  - name: PARTNER_EXPORT_JOB
    gates_as: FEDERATION_SYNC_JOB
"""
BUILT_IN = ", ".join(c.value for c in JobClass)


def config_with(write: Write, text: str = CLASSES) -> JobgateConfig:
    return load_config(write("jobgate.yaml", text))


def document(**fields: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"job_definition_id": "recon", "job_class": "RECONCILIATION_JOB", "handler": "m:f"}
    doc.update(fields)
    return {k: v for k, v in doc.items() if v is not None}


# ---------------------------------------------------------------- the configuration
def test_declared_classes_are_read_with_their_settings(write: Write) -> None:
    config = config_with(write)
    assert list(config.job_classes) == ["RECONCILIATION_JOB", "PARTNER_EXPORT_JOB"]
    recon = config.job_classes["RECONCILIATION_JOB"]
    assert recon == JobClassSpec(
        "RECONCILIATION_JOB", JobClass.MAINTENANCE_JOB, Priority.HIGH, True, "Month-end ledger reconciliation"
    )
    partner = config.job_classes["PARTNER_EXPORT_JOB"]
    assert (partner.gates_as, partner.default_priority, partner.audit_material) == (
        JobClass.FEDERATION_SYNC_JOB,
        None,
        False,
    )
    assert build_config({}, base_dir=write("x", "").parent, path=None).job_classes == {}


BAD: list[tuple[str, str, str]] = [
    ("job_classes: {RECON_JOB: MAINTENANCE_JOB}\n", "job_classes", "must be a list"),
    ("job_classes:\n  - RECON_JOB\n", "job_classes[0]", "must be a mapping"),
    ("job_classes:\n  - {gates_as: MAINTENANCE_JOB}\n", "job_classes[0].name", "required"),
    ("job_classes:\n  - {name: recon, gates_as: MAINTENANCE_JOB}\n", "job_classes[0].name", "UPPER_SNAKE_CASE"),
    ("job_classes:\n  - {name: RECONCILIATION, gates_as: MAINTENANCE_JOB}\n", "job_classes[0].name", "ending in _JOB"),
    (f"job_classes:\n  - {{name: {'A' * 61}_JOB, gates_as: MAINTENANCE_JOB}}\n", "job_classes[0].name", "at most 64"),
    (
        "job_classes:\n  - {name: MAINTENANCE_JOB, gates_as: REPLAY_JOB}\n",
        "job_classes[0].name",
        "MAINTENANCE_JOB is a built-in class",
    ),
    (
        "job_classes:\n  - {name: RECON_JOB, gates_as: REPLAY_JOB}\n  - {name: RECON_JOB, gates_as: REPLAY_JOB}\n",
        "job_classes[1].name",
        "duplicate class 'RECON_JOB' (first declared at job_classes[0])",
    ),
    ("job_classes:\n  - {name: RECON_JOB}\n", "job_classes[0].gates_as", "required: the built-in class whose"),
    (
        "job_classes:\n  - {name: RECON_JOB, gates_as: CLEANUP_JOB}\n",
        "job_classes[0].gates_as",
        "unknown built-in class 'CLEANUP_JOB' (one of: REPLAY_JOB, DAL_ANCHOR_JOB",
    ),
    (  # no chains: a declared class gates as a built-in one, never as another declared one
        "job_classes:\n  - {name: A_JOB, gates_as: REPLAY_JOB}\n  - {name: B_JOB, gates_as: A_JOB}\n",
        "job_classes[1].gates_as",
        "unknown built-in class 'A_JOB'",
    ),
    (
        "job_classes:\n  - {name: RECON_JOB, gates_as: SAFE_MODE_JOB}\n",
        "job_classes[0].gates_as",
        "SAFE_MODE_JOB is never held by safe mode",
    ),
    (
        "job_classes:\n  - {name: RECON_JOB, gates_as: REPLAY_JOB, default_priority: urgent}\n",
        "job_classes[0].default_priority",
        "must be one of: critical, high, normal, low, background",
    ),
    (
        "job_classes:\n  - {name: RECON_JOB, gates_as: REPLAY_JOB, audit_material: 'yes'}\n",
        "job_classes[0].audit_material",
        "must be true or false",
    ),
    (
        "job_classes:\n  - {name: RECON_JOB, gates_as: REPLAY_JOB, gates: REPLAY_JOB}\n",
        "job_classes[0].gates",
        "unknown field (did you mean 'gates_as'?)",
    ),
    (
        "job_classes:\n  - {name: RECON_JOB, gates_as: REPLAY_JOB}\nsafe_mode: {suspend_job_classes: [OTHER_JOB]}\n",
        "safe_mode.suspend_job_classes[0]",
        "unknown job class 'OTHER_JOB' (built in: REPLAY_JOB",
    ),
]


@pytest.mark.parametrize(("text", "field", "rule"), BAD, ids=[f"{b[1]}|{b[2][:24]}" for b in BAD])
def test_each_refusal_names_the_field(write: Write, text: str, field: str, rule: str) -> None:
    path = write("jobgate.yaml", text)
    with pytest.raises(ConfigurationError) as caught:
        load_config(path)
    assert (caught.value.source, caught.value.field) == (str(path), field), caught.value
    assert rule in caught.value.message, caught.value.message


def test_safe_mode_may_suspend_a_declared_class(write: Write) -> None:
    config = config_with(write, CLASSES + "safe_mode: {suspend_job_classes: [PARTNER_EXPORT_JOB, REPLAY_JOB]}\n")
    assert config.safe_mode.suspend_job_classes == ("PARTNER_EXPORT_JOB", "REPLAY_JOB")


def test_the_name_rule_is_the_contracts() -> None:
    declared = schema("comp.TG.OUTPUT.JOB-RUN.v1_0")["$defs"]["declared_job_class"]
    assert declared["pattern"] == f"^{CLASS_NAME_PATTERN.pattern}$" and declared["maxLength"] == 64
    assert all(CLASS_NAME_PATTERN.fullmatch(c.value) for c in JobClass)  # the built-in names have the shape too


# ---------------------------------------------------------------- definitions
def test_a_definition_may_name_a_declared_class(write: Write) -> None:
    config = config_with(write)
    d = parse_definition(document(), "recon.yaml", config).definition
    assert d.job_class == "RECONCILIATION_JOB" and not isinstance(d.job_class, JobClass)
    assert d.class_spec is config.job_classes["RECONCILIATION_JOB"] and d.gates_as is JobClass.MAINTENANCE_JOB
    builtin = parse_definition(document(job_class="REPLAY_JOB"), "r.yaml", config).definition
    assert builtin.job_class is JobClass.REPLAY_JOB and builtin.class_spec is None
    assert builtin.gates_as is JobClass.REPLAY_JOB
    assert violations("comp.TG.INPUT.JOB-DEFINITION.v1_0", document()) == []


def test_an_unknown_class_is_refused_listing_both_kinds(write: Write) -> None:
    config = config_with(write)
    with pytest.raises(ValidationError) as caught:
        parse_definition(document(job_class="RECONCILE_JOB"), "recon.yaml", config)
    assert caught.value.field == "job_class"
    assert caught.value.message == (
        f"unknown job class 'RECONCILE_JOB' (built in: {BUILT_IN};"
        " declared in jobgate.yaml: PARTNER_EXPORT_JOB, RECONCILIATION_JOB)"
    )
    assert "none declared in jobgate.yaml" in known_classes({})
    with pytest.raises(ValidationError) as missing:
        parse_definition(document(job_class=None), "recon.yaml", config)
    assert missing.value.field == "job_class" and "declared in jobgate.yaml: PARTNER_EXPORT" in missing.value.message


def test_the_class_default_priority_applies_and_the_digest_stays_the_document_s(write: Write) -> None:
    config = config_with(write)
    defaulted = parse_definition(document(), "recon.yaml", config).definition
    assert defaulted.priority is Priority.HIGH and "priority" not in defaulted.content
    explicit = parse_definition(document(priority="low"), "recon.yaml", config).definition
    assert explicit.priority is Priority.LOW
    # The digest covers the document as written: another default in jobgate.yaml changes what a
    # run gets, never what the approval pinned.
    other = replace(
        config,
        job_classes={
            **config.job_classes,
            "RECONCILIATION_JOB": replace(config.job_classes["RECONCILIATION_JOB"], default_priority=Priority.CRITICAL),
        },
    )
    again = parse_definition(document(), "recon.yaml", other).definition
    assert again.priority is Priority.CRITICAL and again.digest == defaulted.digest
    plain = parse_definition(document(job_class="PARTNER_EXPORT_JOB"), "p.yaml", config).definition
    assert plain.priority is Priority.NORMAL and plain.audit_required is False


def test_an_audit_material_class_makes_its_definitions_audit_required(write: Write) -> None:
    config = config_with(write)
    assert parse_definition(document(), "recon.yaml", config).definition.audit_required is True
    assert parse_definition(document(audit_required=True), "recon.yaml", config).definition.audit_required is True
    with pytest.raises(ValidationError) as caught:
        parse_definition(document(audit_required=False), "recon.yaml", config)
    assert caught.value.field == "audit_required"
    assert "RECONCILIATION_JOB is an audit-material class" in caught.value.message
    assert "leave audit_required out or set it to true" in caught.value.message
    # A class that is not audit-material leaves the choice to the definition.
    chosen = parse_definition(document(job_class="PARTNER_EXPORT_JOB", audit_required=False), "p.yaml", config)
    assert chosen.definition.audit_required is False


def test_a_recorded_definition_reads_its_class_from_the_record(write: Write) -> None:
    config = config_with(write)
    d = parse_definition(document(), "recon.yaml", config).definition
    executor = ExecutorSpec("python", handler="m:f")
    spec = JobClassSpec.from_record(config.job_classes["RECONCILIATION_JOB"].record())
    assert spec == replace(config.job_classes["RECONCILIATION_JOB"], description="")
    rebuilt = recorded_definition(d.content, d.digest, executor, spec)
    assert (rebuilt.job_class, rebuilt.priority, rebuilt.audit_required, rebuilt.gates_as) == (
        "RECONCILIATION_JOB",
        Priority.HIGH,
        True,
        JobClass.MAINTENANCE_JOB,
    )
    with pytest.raises(ValidationError) as caught:  # a declared class the record does not declare
        recorded_definition(d.content, d.digest, executor)
    assert caught.value.field == "job_class" and "neither built in nor declared" in caught.value.message
    assert JobClassSpec.from_record({"name": "X_JOB", "gates_as": "NOPE"}) is None
