"""The demo's stand-in engines do real, deterministic local work."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from jobgate.config import JobgateConfig
from jobgate.context import DispatchPayload, ExecutionContext
from jobgate.core.errors import NonRetryableError, RetryableError
from jobgate.service.snapshots import resolve_snapshot
from jobgate.standins import (
    dal_anchor,
    federation_gateway,
    flaky,
    hello,
    quarantine_manager,
    replay_coordinator,
)


def context(
    config: JobgateConfig,
    workdir: Path,
    params: dict[str, str] | None = None,
    *,
    attempt: int = 1,
    key: str = "sha256:key-1",
    profile: str = "default",
) -> ExecutionContext:
    snap = resolve_snapshot(config, profile, "default")
    payload = DispatchPayload(
        job_run_id="TGJOBRUN-1",
        idempotency_key=key,
        attempt=attempt,
        job_definition_id="def-1",
        job_class="REPLAY_JOB",
        config_snapshot_id=snap.config_snapshot_id,
        config_digest=snap.config_digest,
        config=snap.content,
        params=params or {},
        scope={"tenant_id": "default", "eco_number": "ECO-A123"},
        target_engine_meid=None,
        target_engine_cmi=None,
        authorization_context={},
        trace_context={},
        execution_timeout=None,
        max_attempts=3,
    )
    workdir.mkdir(parents=True, exist_ok=True)
    return ExecutionContext(payload=payload, workdir=workdir, log_path=workdir.parent / f"{workdir.name}.log")


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_hello(demo_config: JobgateConfig, tmp_path: Path) -> None:
    ctx = context(demo_config, tmp_path / "w", {"name": "Ada"})
    assert hello(ctx) == {"greeting": "Hello, Ada!"}
    assert (tmp_path / "w" / "hello.txt").read_text() == "Hello, Ada!\n"


def test_flaky_fails_then_succeeds(demo_config: JobgateConfig, tmp_path: Path) -> None:
    with pytest.raises(RetryableError) as caught:
        flaky(context(demo_config, tmp_path / "w", attempt=1))
    assert caught.value.error_code == "DEMO_TRANSIENT_FAILURE"
    assert flaky(context(demo_config, tmp_path / "w", attempt=2)) == {"succeeded_on_attempt": 2}


def test_replay_coordinator_is_deterministic(demo_config: JobgateConfig, tmp_path: Path) -> None:
    first = replay_coordinator(context(demo_config, tmp_path / "a"))
    second = replay_coordinator(context(demo_config, tmp_path / "b"))
    assert (
        first
        == second
        == {
            "replay_manifests_created": 5,
            "replay_jobs_dispatched": 5,
            "replay_mismatches": 0,
            "manifest": "replay/manifest.json",
        }
    )
    assert tree(tmp_path / "a") == tree(tmp_path / "b")
    manifest = json.loads((tmp_path / "a" / "replay" / "manifest.json").read_text())
    assert [s["step"] for s in manifest["steps"]] == [
        "select_replay_population",
        "create_replay_manifests",
        "dispatch_replay_execution",
        "record_replay_results",
        "publish_replay_telemetry",
    ]
    production = replay_coordinator(context(demo_config, tmp_path / "c", profile="production_scheduler_v1"))
    assert production["replay_manifests_created"] == 25
    other_key = context(demo_config, tmp_path / "d", key="sha256:key-2")
    replay_coordinator(other_key)
    assert sorted(p.name for p in (tmp_path / "a" / "replay" / "manifests").iterdir()) != sorted(
        p.name for p in (tmp_path / "d" / "replay" / "manifests").iterdir()
    )


def test_replay_detects_a_tampered_manifest(demo_config: JobgateConfig, tmp_path: Path) -> None:
    """The replay step re-reads manifests from disk, so a change between steps is a mismatch."""
    ctx = context(demo_config, tmp_path / "w")
    original = Path.read_text

    def tampering(path: Path, *args: Any, **kwargs: Any) -> str:
        text = original(path, *args, **kwargs)
        return text.replace("FULL_PIPELINE_REPLAY", "PARTIAL") if path.parent.name == "manifests" else text

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Path, "read_text", tampering)
        result = replay_coordinator(ctx)
    assert result["replay_mismatches"] == 5


def test_dal_anchor_chains_and_is_idempotent(demo_config: JobgateConfig, tmp_path: Path) -> None:
    first = dal_anchor(context(demo_config, tmp_path / "w", {"artifact_id": "TGWF-1"}))
    retry = dal_anchor(context(demo_config, tmp_path / "w", {"artifact_id": "TGWF-1"}, attempt=2))
    second = dal_anchor(context(demo_config, tmp_path / "w", {"artifact_id": "TGWF-2"}, key="sha256:key-2"))
    assert first["already_anchored"] is False and retry["already_anchored"] is True
    assert {k: v for k, v in retry.items() if k != "already_anchored"} == {
        k: v for k, v in first.items() if k != "already_anchored"
    }
    assert (first["sequence"], second["sequence"]) == (1, 2)
    lines = [json.loads(line) for line in (tmp_path / "w" / "dal" / "anchors.jsonl").read_text().splitlines()]
    assert len(lines) == 2
    assert lines[1]["previous_root"] == lines[0]["root"] == first["root"]


def test_federation_gateway_exports_and_verifies(demo_config: JobgateConfig, tmp_path: Path) -> None:
    params = {"source_eco": "ECO-A123", "target_eco": "ECO-B456"}
    result = federation_gateway(context(demo_config, tmp_path / "w", params))
    again = federation_gateway(context(demo_config, tmp_path / "v", params))
    assert result == again
    assert result["delivery_verified"] is True and result["redacted_fields"] == ["scope", "config"]
    delivered = tmp_path / "w" / "federation" / "delivered" / "ECO-B456" / f"{result['package_id']}.json"
    package = json.loads(delivered.read_text())
    assert "scope" not in package["attestation"]
    assert package["signature"].startswith("hmac-sha256:")
    with pytest.raises(NonRetryableError):
        federation_gateway(context(demo_config, tmp_path / "x", {**params, "redaction_profile": "loose"}))
    with pytest.raises(NonRetryableError):
        federation_gateway(context(demo_config, tmp_path / "y", {"source_eco": "ECO-A123"}))


@pytest.mark.parametrize(
    ("as_of", "action", "overdue"),
    [
        ("2026-06-25T13:00:00Z", "none", False),
        ("2026-06-26T12:22:44Z", "remind_reviewer", False),
        ("2026-06-27T12:22:44Z", "remind_reviewer", False),
        ("2026-06-27T12:30:00Z", "escalate", True),  # the seed §23 breach
    ],
)
def test_quarantine_manager(demo_config: JobgateConfig, tmp_path: Path, as_of: str, action: str, overdue: bool) -> None:
    params = {"quarantine_id": "TGQ-2026-00001472", "opened_at": "2026-06-25T12:22:44Z", "as_of": as_of}
    result = quarantine_manager(context(demo_config, tmp_path / "w", params))
    assert (result["action_taken"], result["overdue"]) == (action, overdue)
    assert result["deadline"] == "2026-06-27T12:22:44Z"
    stored = json.loads((tmp_path / "w" / "quarantine" / "TGQ-2026-00001472.json").read_text())
    assert stored == result


def test_quarantine_manager_refuses_bad_input(demo_config: JobgateConfig, tmp_path: Path) -> None:
    base = {"quarantine_id": "TGQ-1", "opened_at": "2026-06-25T12:00:00Z", "as_of": "2026-06-24T12:00:00Z"}
    for params in (base, {**base, "as_of": "yesterday"}, {**base, "opened_at": "2026-06-25T12:00:00"}):
        with pytest.raises(NonRetryableError) as caught:
            quarantine_manager(context(demo_config, tmp_path / "w", params))
        assert caught.value.error_code == "INVALID_INPUT"
