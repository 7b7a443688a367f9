"""Local stand-ins for the seed's target engines, so the demo runs real jobs on one machine.

Each handler does what its engine's name says, with local files in the attempt's work
directory instead of remote services: the replay coordinator writes replay manifests and
re-derives their hashes, the DAL anchor hashes its input into a hash-chained ledger file,
the federation gateway builds, redacts, signs and delivers a package, the quarantine
manager decides reminders and escalations against the SLA. Every result is deterministic
given the run's inputs (params, configuration snapshot, idempotency key): no clock reads,
no randomness, so a replayed run produces the same files and the same result.

Handlers take an ``ExecutionContext`` and return a JSON object (the run's recorded result)
or raise ``RetryableError`` / ``NonRetryableError`` (see ``runtime.executors.python``).
Long handlers check ``ctx.is_cancelled()`` between steps so a stop takes effect promptly.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from jobgate.context import ExecutionContext
from jobgate.core.canonical import canonical_json
from jobgate.core.errors import NonRetryableError, RetryableError

REPLAY_STEPS = (
    "select_replay_population",
    "create_replay_manifests",
    "dispatch_replay_execution",
    "record_replay_results",
    "publish_replay_telemetry",
)
REDACTION_PROFILES: dict[str, tuple[str, ...]] = {
    "none": (),
    "standard_federation": ("scope", "config"),
    "strict_federation": ("scope", "config", "job_run_id"),
}


def hello(ctx: ExecutionContext) -> dict[str, Any]:
    """Greet ``name`` into ``hello.txt``: the smallest complete run (param in, file and result out)."""
    name = ctx.params.get("name", "world")
    greeting = f"Hello, {name}!"
    _write_text(ctx.workdir / "hello.txt", greeting + "\n")
    ctx.log(greeting)
    return {"greeting": greeting}


def flaky(ctx: ExecutionContext) -> dict[str, Any]:
    """Fail retryably until attempt ``succeed_on_attempt`` (default 2), to show retries and backoff."""
    succeed_on = _int_param(ctx, "succeed_on_attempt", 2)
    ctx.log(f"attempt {ctx.attempt}; succeeds from attempt {succeed_on}")
    if ctx.attempt < succeed_on:
        raise RetryableError(
            f"simulated transient failure on attempt {ctx.attempt}", error_code="DEMO_TRANSIENT_FAILURE"
        )
    return {"succeeded_on_attempt": ctx.attempt}


def replay_coordinator(ctx: ExecutionContext) -> dict[str, Any]:
    """Seed §15 workflow: sample signals, write replay manifests, replay them, record, publish.

    The population is ``replay_population_size`` signal ids; the sample (``replay_sample_size``,
    from the params or the configuration profile) is the signals with the smallest
    SHA-256(idempotency key, signal id): a random-looking sample that a replay of the run
    reproduces exactly. "Replaying" a signal re-reads its manifest from disk and recomputes
    the input hash it recorded; a mismatch means the manifest changed after it was written.
    """
    population = _int_setting(ctx, "replay_population_size", 100)
    size = min(_int_setting(ctx, "replay_sample_size", 5), population)
    root = ctx.workdir / "replay"
    performed: list[dict[str, Any]] = []

    def step(name: str, **detail: Any) -> None:
        performed.append({"step": name, **detail})
        ctx.progress(len(performed) / len(REPLAY_STEPS), name)
        ctx.log(f"replay: {name} {json.dumps(detail, sort_keys=True)}")

    signals = [f"SIG-{n:06d}" for n in range(1, population + 1)]
    sample = sorted(signals, key=lambda sig: _sha256(f"{ctx.idempotency_key}|{sig}".encode()))[:size]
    step(REPLAY_STEPS[0], population=population, selected=len(sample))

    _check_cancelled(ctx, REPLAY_STEPS[1])
    manifests: dict[str, Path] = {}
    for signal_id in sorted(sample):
        manifest = {
            "signal_id": signal_id,
            "replay_type": "FULL_PIPELINE_REPLAY",
            "job_run_id": ctx.job_run_id,
            "config_snapshot_id": ctx.payload.config_snapshot_id,
            "config_digest": ctx.payload.config_digest,
        }
        manifest["input_hash"] = "sha256:" + _sha256(canonical_json(manifest))
        manifests[signal_id] = _write_json(root / "manifests" / f"{signal_id}.json", manifest)
    step(REPLAY_STEPS[1], manifests=len(manifests))

    _check_cancelled(ctx, REPLAY_STEPS[2])
    results = []
    for signal_id, path in manifests.items():
        stored = json.loads(path.read_text(encoding="utf-8"))
        recorded = stored.pop("input_hash")
        replayed = "sha256:" + _sha256(canonical_json(stored))
        results.append(
            {"signal_id": signal_id, "original_hash": recorded, "replay_hash": replayed, "match": replayed == recorded}
        )
    step(REPLAY_STEPS[2], dispatched=len(results))

    _check_cancelled(ctx, REPLAY_STEPS[3])
    mismatches = sum(1 for result in results if not result["match"])
    _write_json(root / "results.json", {"job_run_id": ctx.job_run_id, "results": results})
    step(REPLAY_STEPS[3], matches=len(results) - mismatches, mismatches=mismatches)

    _check_cancelled(ctx, REPLAY_STEPS[4])
    telemetry = {
        "event": "replay_sampling_completed",
        "job_run_id": ctx.job_run_id,
        "replays": len(results),
        "mismatches": mismatches,
    }
    _append_line(root / "telemetry.jsonl", telemetry)
    step(REPLAY_STEPS[4], events=1)

    manifest_path = _write_json(root / "manifest.json", {"job_run_id": ctx.job_run_id, "steps": performed})
    return {
        "replay_manifests_created": len(manifests),
        "replay_jobs_dispatched": len(results),
        "replay_mismatches": mismatches,
        "manifest": str(manifest_path.relative_to(ctx.workdir)),
    }


def dal_anchor(ctx: ExecutionContext) -> dict[str, Any]:
    """Hash the run's input (params and scope) and append it to a hash-chained anchors ledger.

    Each ledger line carries ``root = SHA-256(previous root || artifact hash)``, so altering or
    dropping any earlier line breaks every later root. A retry of the same run finds its own
    entry (same idempotency key and hash) and returns it instead of anchoring twice.
    """
    artifact = {
        "artifact_type": ctx.params.get("artifact_type", "TrustSchedulerWorkflowEvent"),
        "artifact_id": ctx.params.get("artifact_id", ctx.job_run_id),
        "job_definition_id": ctx.payload.job_definition_id,
        "params": ctx.params,
        "scope": ctx.payload.scope,
    }
    artifact_hash = "sha256:" + _sha256(canonical_json(artifact))
    ledger = ctx.workdir / "dal" / "anchors.jsonl"
    entries = _read_lines(ledger)
    for entry in entries:
        if entry["idempotency_key"] == ctx.idempotency_key and entry["artifact_hash"] == artifact_hash:
            return {**_anchor_result(entry), "already_anchored": True}
    previous = entries[-1]["root"] if entries else "sha256:" + "0" * 64
    entry = {
        "sequence": len(entries) + 1,
        "artifact_id": artifact["artifact_id"],
        "artifact_hash": artifact_hash,
        "previous_root": previous,
        "root": "sha256:" + _sha256(f"{previous}|{artifact_hash}".encode()),
        "idempotency_key": ctx.idempotency_key,
    }
    _append_line(ledger, entry)
    ctx.log(f"anchored {artifact_hash} as #{entry['sequence']} (root {entry['root']})")
    return {**_anchor_result(entry), "already_anchored": False}


def safe_mode_report(ctx: ExecutionContext) -> dict[str, Any]:
    """The SAFE_MODE_JOB of seed §39-40: record, as an artifact, the configuration a safe-mode
    switch left in force — the phase, the period, and the configuration this run was bound to,
    which carries safe mode's tightened values after an activation and the ordinary ones after
    a deactivation. (The period's full action list and reason are in its row and its audit
    entry.) The report's digest in the run's result ties the switch to exactly this record."""
    phase = _required(ctx, "phase")
    if phase not in ("activate", "deactivate"):
        raise _invalid(f"phase must be activate or deactivate, not {phase!r}")
    report = {
        "phase": phase,
        "activation": _int_param(ctx, "activation", 0),
        "tenant_id": ctx.payload.scope.get("tenant_id"),
        "config_snapshot_id": ctx.payload.config_snapshot_id,
        "config_digest": ctx.payload.config_digest,
        "bound_values": _setting_values(ctx),
    }
    path = _write_json(ctx.workdir / "safe-mode-report.json", report)
    digest = "sha256:" + _sha256(path.read_bytes())
    ctx.log(f"safe mode {phase} (activation {report['activation']}): report {digest}")
    return {"phase": phase, "activation": report["activation"], "report_sha256": digest}


def _setting_values(ctx: ExecutionContext) -> dict[str, Any]:
    values = ctx.config
    if "profile" in values and isinstance(values.get("values"), dict):
        values = values["values"]
    return dict(values)


def federation_gateway(ctx: ExecutionContext) -> dict[str, Any]:
    """Seed §8 federation export: package the attestation, redact, sign, export, verify delivery.

    The signature is an HMAC-SHA256 with the profile's ``federation_signing_key`` (a local
    stand-in for a DID key); delivery copies the package to ``delivered/<target_eco>/`` and
    verifies the copy's SHA-256 against the exported file's.
    """
    source_eco = _required(ctx, "source_eco")
    target_eco = _required(ctx, "target_eco")
    redaction = ctx.params.get("redaction_profile", "standard_federation")
    if redaction not in REDACTION_PROFILES:
        raise _invalid(f"unknown redaction profile {redaction!r} (known: {', '.join(REDACTION_PROFILES)})")
    attestation = {
        "job_run_id": ctx.job_run_id,
        "config_snapshot_id": ctx.payload.config_snapshot_id,
        "config_digest": ctx.payload.config_digest,
        "scope": ctx.payload.scope,
        "config": ctx.config,
    }
    redacted = [key for key in REDACTION_PROFILES[redaction] if key in attestation]
    for key in redacted:
        del attestation[key]
    package: dict[str, Any] = {
        "source_eco": source_eco,
        "target_eco": target_eco,
        "sync_type": ctx.params.get("sync_type", "trust_attestation_export"),
        "federation_profile": ctx.params.get("federation_profile", "buyer_standard_assurance_v1"),
        "redaction_profile": redaction,
        "redacted_fields": redacted,
        "attestation": attestation,
    }
    package["package_id"] = "FEDPKG-" + _sha256(canonical_json(package))[:16].upper()
    signing_key = str(_setting(ctx, "federation_signing_key", "jobgate-demo-signing-key")).encode()
    signature = hmac.new(signing_key, canonical_json(package), hashlib.sha256).hexdigest()
    package["signature"] = "hmac-sha256:" + signature
    _check_cancelled(ctx, "export")
    exported = _write_bytes(
        ctx.workdir / "federation" / "outbox" / f"{package['package_id']}.json", canonical_json(package)
    )
    delivered = _write_bytes(
        ctx.workdir / "federation" / "delivered" / target_eco / exported.name, exported.read_bytes()
    )
    package_sha = _sha256(exported.read_bytes())
    if _sha256(delivered.read_bytes()) != package_sha:
        raise RetryableError("delivered copy differs from the export", error_code="DELIVERY_MISMATCH")
    return {
        "packages_exported": 1,
        "package_id": package["package_id"],
        "package_sha256": "sha256:" + package_sha,
        "delivery_verified": True,
        "redacted_fields": redacted,
    }


def quarantine_manager(ctx: ExecutionContext) -> dict[str, Any]:
    """Seed §35 ``check_and_escalate_if_overdue``: remind at half the SLA, escalate when overdue.

    It records a review decision under ``quarantine/`` and never releases or rejects the
    record itself: that stays with the reviewer workflow (seed §34). ``as_of`` is a param, not
    the clock, so the same inputs always give the same decision.
    """
    quarantine_id = _required(ctx, "quarantine_id")
    opened_at = _instant(ctx, "opened_at")
    as_of = _instant(ctx, "as_of")
    if as_of < opened_at:
        raise _invalid("as_of is before opened_at")
    sla = timedelta(hours=_int_setting(ctx, "quarantine_review_hours", 48))
    deadline = opened_at + sla
    age = as_of - opened_at
    if age > sla:
        action = "escalate"
    elif age * 2 >= sla:
        action = "remind_reviewer"
    else:
        action = "none"
    decision = {
        "quarantine_id": quarantine_id,
        "eco_number": ctx.params.get("eco_number"),
        "opened_at": _iso(opened_at),
        "as_of": _iso(as_of),
        "deadline": _iso(deadline),
        "overdue": age > sla,
        "action_taken": action,
        "job_run_id": ctx.job_run_id,
    }
    _write_json(ctx.workdir / "quarantine" / f"{quarantine_id}.json", decision)
    ctx.log(f"quarantine {quarantine_id}: {action} (deadline {decision['deadline']})")
    return decision


# -- helpers -------------------------------------------------------------------------------------


def _setting(ctx: ExecutionContext, key: str, default: Any) -> Any:
    """A profile value; the payload's config is a snapshot ``{"profile", "values"}`` or the values."""
    values = ctx.config
    if "profile" in values and isinstance(values.get("values"), dict):
        values = values["values"]
    return values.get(key, default)


def _int_setting(ctx: ExecutionContext, key: str, default: int) -> int:
    """A positive integer from the params, else from the profile, else ``default``."""
    raw = ctx.params.get(key, _setting(ctx, key, default))
    try:
        value = int(raw)
    except (TypeError, ValueError):
        raise _invalid(f"{key} must be an integer, got {raw!r}") from None
    if value < 1:
        raise _invalid(f"{key} must be at least 1")
    return value


def _int_param(ctx: ExecutionContext, key: str, default: int) -> int:
    try:
        return int(ctx.params.get(key, default))
    except ValueError:
        raise _invalid(f"{key} must be an integer") from None


def _required(ctx: ExecutionContext, key: str) -> str:
    value = ctx.params.get(key)
    if not value:
        raise _invalid(f"parameter {key!r} is required")
    return value


def _instant(ctx: ExecutionContext, key: str) -> datetime:
    raw = _required(ctx, key)
    try:
        value = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise _invalid(f"{key} must be an ISO 8601 instant, got {raw!r}") from None
    if value.tzinfo is None:
        raise _invalid(f"{key} must carry a time zone (e.g. a trailing Z)")
    return value.astimezone(UTC)


def _invalid(message: str) -> NonRetryableError:
    """Bad input: retrying the same params cannot help, so the run fails for good."""
    return NonRetryableError(message, error_code="INVALID_INPUT")


def _iso(instant: datetime) -> str:
    return instant.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _check_cancelled(ctx: ExecutionContext, before: str) -> None:
    if ctx.is_cancelled():
        raise RetryableError(f"stopped before {before}", error_code="STOPPED")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _anchor_result(entry: dict[str, Any]) -> dict[str, Any]:
    keys = ("sequence", "artifact_id", "artifact_hash", "root")
    return {"anchored": True, **{key: entry[key] for key in keys}}


def _write_bytes(path: Path, data: bytes) -> Path:
    """Write via a temporary file and rename, so a stopped attempt never leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_bytes(data)
    os.replace(partial, path)
    return path


def _write_text(path: Path, text: str) -> Path:
    return _write_bytes(path, text.encode("utf-8"))


def _write_json(path: Path, value: Any) -> Path:
    return _write_text(path, json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def _append_line(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(canonical_json(value).decode("utf-8") + "\n")


def _read_lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
