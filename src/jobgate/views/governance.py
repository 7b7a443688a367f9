"""The deployment's governance settings as a reader sees them: what must be approved and by
whom, what may run, what safe mode puts in force, and how evidence is kept.

A pure function of the loaded configuration, read-only by design: these settings change only
through ``jobgate.yaml`` (a reviewed file), never through the API. Paths, URLs and secrets are
not shown — only whether each is configured and the public identifiers (key ids, classes).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any


@dataclass(frozen=True)
class Setting:
    name: str  # the key in jobgate.yaml
    value: str
    meaning: str


def _duration(value: timedelta) -> str:
    seconds = int(value.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size} {unit}"
    return f"{value.total_seconds():g} s"


def _listed(values: Any) -> str:
    return ", ".join(sorted(str(v) for v in values)) or "none"


def _on(value: bool) -> str:
    return "on" if value else "off"


def _declared(spec: Any) -> str:
    """``RECONCILIATION_JOB (gates as MAINTENANCE_JOB, priority high, audit-material)``."""
    notes = [f"gates as {spec.gates_as.value}"]
    if spec.default_priority is not None:
        notes.append(f"priority {spec.default_priority.value}")
    if spec.audit_material:
        notes.append("audit-material")
    return f"{spec.name} ({', '.join(notes)})"


def governance_settings(config: Any) -> list[Setting]:
    """Every governance setting in force, in the order a reviewer reads them."""
    evidence, safe, gates = config.evidence, config.safe_mode, config.trust_gates
    retention = config.retention.finished_runs
    letters = config.retention.resolved_dead_letters
    by_class = config.retention.job_classes
    return [
        Setting(
            "governance.four_eyes",
            _on(config.governance.four_eyes),
            "an approval must be a second person's (always so for definitions whose body is code)",
        ),
        Setting(
            "signing.require_signed_definitions",
            _on(config.signing.require_signed_definitions),
            "definitions must be signed by a trusted key before they are applied",
        ),
        Setting("signing.trust_roots", _listed(config.signing.trust_roots), "key ids that may sign definitions"),
        Setting(
            "worker.trusted_handlers",
            _listed(config.worker.trusted_handlers),
            "modules whose host jobs are given jobgate's store, clock and configuration (jobgate's own always are)",
        ),
        Setting(
            "trust_gates.licence",
            "configured" if gates.licence is not None else "none",
            f"signed licence file, signers: {_listed(gates.licence_trust_roots)}",
        ),
        Setting(
            "trust_gates.environment_url",
            "configured" if gates.environment_url else "none",
            f"environment check, answers trusted for {_duration(gates.environment_ttl)}",
        ),
        Setting("policy", "configured" if config.policy is not None else "none", "the scheduler policy file"),
        Setting(
            "job_classes",
            "; ".join(_declared(spec) for spec in sorted(config.job_classes.values(), key=lambda c: c.name)) or "none",
            "job classes declared beside the built-in ones, each held by the rules of the class it gates as",
        ),
        Setting(
            "safe_mode.suspend_job_classes",
            _listed(safe.suspend_job_classes),
            "job classes refused while safe mode is on (and the declared classes that gate as them)",
        ),
        Setting("safe_mode.manual_review", _on(safe.manual_review), "direct manual runs refused while safe mode is on"),
        Setting(
            "safe_mode.allow_automatic",
            _on(safe.allow_automatic),
            "a policy or an alert may switch safe mode on by itself",
        ),
        Setting("safe_mode.job", safe.job or "none", "the definition run at each switch"),
        Setting("evidence.anchor_window", _duration(evidence.anchor_window), "audit entries anchored per window"),
        Setting(
            "evidence.anchor_sink",
            "HTTP endpoint" if evidence.anchor_sink_url else "append-only file",
            "where each anchor is also written, outside the database",
        ),
        Setting(
            "evidence.signing_key_id",
            evidence.signing_key_id if config.evidence_key_path.exists() else "none (anchors and bundles unsigned)",
            "the key that signs anchors and evidence bundles",
        ),
        Setting("evidence.trusted_keys", _listed(evidence.trusted_keys), "earlier evidence keys still trusted"),
        Setting("evidence.seal_interval", _duration(evidence.seal_interval), "how often new seals are chained"),
        Setting(
            "evidence.timestamp_authority",
            "configured" if evidence.timestamp_authority is not None else "none",
            "an RFC 3161 authority stamps every batch anchor",
        ),
        Setting(
            "retention.finished_runs_days",
            "keep for ever" if retention is None else _duration(retention),
            "finished runs kept before retention removes them (never an open dead letter)",
        ),
        Setting(
            "retention.job_classes",
            ", ".join(f"{name}: {_duration(kept)}" for name, kept in sorted(by_class.items())) or "none",
            "job classes whose finished runs have a retention of their own (replay, safe mode ...)",
        ),
        Setting(
            "retention.resolved_dead_letters_days",
            "with the run" if letters is None else _duration(letters),
            "a dead-lettered run is kept at least this long after its letter was resolved",
        ),
        Setting(
            "server.daily_run_quota",
            "unlimited" if config.server.daily_run_quota is None else str(config.server.daily_run_quota),
            "runs a tenant may create per UTC day",
        ),
    ]
