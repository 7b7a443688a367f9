"""Replay Verification (seed 000 §8, §28-29, §53): prepare replay, execute replay, compare hash,
record result, audit, emit telemetry — and, only on a mismatch, raise a drift alert.

The replay coordinator's stand-in is a folder of recorded signals (their inputs, the pipeline
version and weights that scored them, and the hash of the output production recorded). The
replay itself runs in a subprocess through the ``replay-pipeline`` command runner
(``jobgate_examples.replay_execute``), so the re-derivation does not share memory with the
step that recorded what to expect.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jobgate import ExecutionContext
from jobgate_examples.common import (
    append_line,
    audit_on_complete,
    digest,
    home,
    invalid,
    param,
    post_json,
    read_json,
    safe_id,
    write_json,
)


def _run_dir(ctx: ExecutionContext) -> Path:
    return home(ctx) / "replay" / "runs" / safe_id(param(ctx, "replay_id"), "replay_id")


def prepare(ctx: ExecutionContext) -> dict[str, Any]:
    """Write the replay manifest: the recorded inputs and pipeline, bound to this run's snapshot."""
    signal_id = safe_id(param(ctx, "signal_id"), "signal_id")
    signal = read_json(home(ctx) / "replay" / "signals" / f"{signal_id}.json", f"signal {signal_id}")
    if digest(signal["recorded_output"]) != signal["recorded_output_hash"]:
        raise invalid(f"signal {signal_id}: its recorded output does not match its recorded hash", "RECORD_CORRUPT")
    manifest = {
        "replay_id": param(ctx, "replay_id"),
        "signal_id": signal_id,
        "replay_type": "FULL_PIPELINE_REPLAY",
        "inputs": signal["inputs"],
        "pipeline": signal["pipeline"],
        "input_hash": digest({"inputs": signal["inputs"], "pipeline": signal["pipeline"]}),
        "config_snapshot_id": ctx.payload.config_snapshot_id,
        "config_digest": ctx.payload.config_digest,
    }
    write_json(_run_dir(ctx) / "manifest.json", manifest)
    ctx.log(f"replay {manifest['replay_id']}: manifest for {signal_id} ({signal['pipeline']['version']})")
    return {
        "input_hash": manifest["input_hash"],
        "recorded_hash": signal["recorded_output_hash"],
        "pipeline_version": signal["pipeline"]["version"],
    }


def compare(ctx: ExecutionContext) -> dict[str, Any]:
    """Re-hash the replay's output file (not just the hash the runner reported) and compare it
    with the hash production recorded."""
    output = read_json(_run_dir(ctx) / "replay-output.json", "the replay output")
    replay_hash = digest(output)
    if replay_hash != param(ctx, "replay_hash"):
        raise invalid("the replay output changed after the replay wrote it", "REPLAY_OUTPUT_CHANGED")
    match = replay_hash == param(ctx, "recorded_hash")
    return {"match": match, "verdict": "MATCH" if match else "MISMATCH", "replay_score": output["score"]}


def record(ctx: ExecutionContext) -> dict[str, Any]:
    path = home(ctx) / "replay" / "results.jsonl"
    entry = {
        "replay_id": param(ctx, "replay_id"),
        "signal_id": param(ctx, "signal_id"),
        "verdict": param(ctx, "verdict"),
        "recorded_hash": param(ctx, "recorded_hash"),
        "replay_hash": param(ctx, "replay_hash"),
        "job_run_id": ctx.job_run_id,
    }
    append_line(path, entry, key="replay_id")
    return {"result_recorded": True}


def audit(ctx: ExecutionContext) -> dict[str, Any]:
    """An entry in jobgate's audit chain, written with this step's completion; a mismatch is
    recorded as critical (seed §53: Hash(original) must equal Hash(replay))."""
    verdict = param(ctx, "verdict")
    action = "replay.verified" if verdict == "MATCH" else "replay.mismatch"
    audit_on_complete(
        ctx,
        action,
        "signal",
        param(ctx, "signal_id"),
        {"replay_id": param(ctx, "replay_id"), "verdict": verdict},
        reason=None if verdict == "MATCH" else "critical",
    )
    return {"audit_action": action}


def telemetry(ctx: ExecutionContext) -> dict[str, Any]:
    event = {
        "event_id": f"{param(ctx, 'replay_id')}:replay_verification_completed",
        "event": "replay_verification_completed",
        "replay_id": param(ctx, "replay_id"),
        "verdict": param(ctx, "verdict"),
    }
    append_line(home(ctx) / "observability" / "telemetry.jsonl", event, key="event_id")
    return {"emitted": 1}


def flag_drift(ctx: ExecutionContext) -> dict[str, Any]:
    """Only after a mismatch (the step's ``when``): alert the replay on-call and keep the case."""
    signal_id = safe_id(param(ctx, "signal_id"), "signal_id")
    answer = post_json(
        ctx,
        "/notifications",
        {
            "kind": "replay_drift",
            "to": "replay-oncall",
            "subject": f"replay of {signal_id} does not reproduce the recorded output",
            "ref": param(ctx, "replay_id"),
        },
        "notify replay on-call",
    )
    write_json(
        home(ctx) / "replay" / "drift" / f"{signal_id}.json",
        {"signal_id": signal_id, "replay_id": param(ctx, "replay_id"), "notification_id": answer["notification_id"]},
    )
    return {"notification_id": answer["notification_id"]}
