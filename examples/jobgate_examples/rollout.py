"""Configuration Rollout (seed 000 §8, §38): validate the candidate configuration, open a change
record, apply it to the canary node, observe the canary's health, expand to the rest of the
fleet, verify the fleet — and roll back in reverse order when a check fails.

The fleet is a folder of node configurations; a node's health (behind the stand-in endpoint)
is its active configuration run on a golden set of signals through the scoring pipeline. A
configuration can be valid and still unhealthy: it passes ``validate`` and fails ``observe``.
The workflow's ``on_failure: compensate`` then runs the ``compensate`` jobs of the completed
steps, latest first: ``restore_nodes`` for the canary, then ``close_change`` (ROLLED_BACK).
Every node is backed up once per rollout before it is changed, so a retried step or a
compensation restores the configuration the node had before this rollout.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jobgate import ExecutionContext
from jobgate_examples.common import (
    digest,
    get_json,
    home,
    invalid,
    param,
    read_json,
    safe_id,
    write_json,
)
from jobgate_examples.pipeline import FACTORS

CANARY_COUNT = 1


def _fleet(ctx: ExecutionContext) -> Path:
    return home(ctx) / "fleet"


def _nodes(ctx: ExecutionContext) -> list[str]:
    return sorted(p.stem for p in (_fleet(ctx) / "nodes").glob("node-*.json"))


def _candidate(ctx: ExecutionContext) -> dict[str, Any]:
    config_id = safe_id(param(ctx, "config_id"), "config_id")
    value: dict[str, Any] = read_json(home(ctx) / "config" / "candidates" / f"{config_id}.json", f"config {config_id}")
    return value


def _node_list(ctx: ExecutionContext, name: str) -> list[str]:
    nodes = [safe_id(n, "node") for n in param(ctx, name).split(",") if n]
    unknown = sorted(set(nodes) - set(_nodes(ctx)))
    if unknown:
        raise invalid(f"unknown node(s): {', '.join(unknown)}")
    return nodes


def _change_path(ctx: ExecutionContext) -> Path:
    return home(ctx) / "config" / "changes" / f"{safe_id(param(ctx, 'rollout_id'), 'rollout_id')}.json"


def validate(ctx: ExecutionContext) -> dict[str, Any]:
    """The candidate's shape and ranges (the Runtime Configuration Engine's schema)."""
    c = _candidate(ctx)
    problems = []
    if not isinstance(c.get("version"), str) or not c["version"]:
        problems.append("version: required")
    weights = c.get("weights")
    if not isinstance(weights, dict) or sorted(weights) != sorted(FACTORS):
        problems.append(f"weights: exactly {', '.join(FACTORS)}")
    elif any(not isinstance(w, int | float) or not 0 <= w <= 1 for w in weights.values()):
        problems.append("weights: each in [0, 1]")
    elif abs(sum(weights.values()) - 1) > 1e-9:
        problems.append("weights: must sum to 1")
    threshold = c.get("score_threshold")
    if not isinstance(threshold, int | float) or not 0 <= threshold <= 1:
        problems.append("score_threshold: in [0, 1]")
    sample = c.get("replay_sample_size")
    if not isinstance(sample, int) or not 1 <= sample <= 1000:
        problems.append("replay_sample_size: 1 to 1000")
    if problems:
        raise invalid("invalid configuration: " + "; ".join(problems), "CONFIG_INVALID")
    return {"version": c["version"], "config_sha256": digest(c)}


def open_change(ctx: ExecutionContext) -> dict[str, Any]:
    """The change record: what is rolled out, from which versions (compensated by close_change)."""
    path = _change_path(ctx)
    if not path.exists():
        before = {n: read_json(_fleet(ctx) / "nodes" / f"{n}.json", n)["version"] for n in _nodes(ctx)}
        write_json(
            path,
            {
                "rollout_id": param(ctx, "rollout_id"),
                "config_id": param(ctx, "config_id"),
                "version": param(ctx, "version"),
                "from_versions": before,
                "status": "IN_PROGRESS",
            },
        )
    return {"change_id": param(ctx, "rollout_id")}


def close_change(ctx: ExecutionContext) -> dict[str, Any]:
    """Compensation of open_change: the change record ends ROLLED_BACK."""
    change = read_json(_change_path(ctx), "the change record")
    change["status"] = "ROLLED_BACK"
    write_json(_change_path(ctx), change)
    return {"change_status": "ROLLED_BACK"}


def complete_change(ctx: ExecutionContext) -> dict[str, Any]:
    """The last step of a rollout that held: the change record ends COMPLETED."""
    change = read_json(_change_path(ctx), "the change record")
    change["status"] = "COMPLETED"
    write_json(_change_path(ctx), change)
    return {"change_status": "COMPLETED"}


def _apply(ctx: ExecutionContext, nodes: list[str]) -> None:
    """Back each node up once per rollout, then write the candidate as its active configuration."""
    candidate = _candidate(ctx)
    backups = _fleet(ctx) / "backups" / safe_id(param(ctx, "rollout_id"), "rollout_id")
    for node in nodes:
        current = _fleet(ctx) / "nodes" / f"{node}.json"
        backup = backups / f"{node}.json"
        if not backup.exists():
            write_json(backup, read_json(current, node))
        write_json(current, candidate)


def canary(ctx: ExecutionContext) -> dict[str, Any]:
    nodes = _nodes(ctx)[:CANARY_COUNT]
    _apply(ctx, nodes)
    return {"nodes": ",".join(nodes)}


def expand(ctx: ExecutionContext) -> dict[str, Any]:
    """Every node the canary step did not change."""
    canaries = set(_node_list(ctx, "canary_nodes"))
    nodes = [n for n in _nodes(ctx) if n not in canaries]
    _apply(ctx, nodes)
    return {"nodes": ",".join(nodes)}


def restore_nodes(ctx: ExecutionContext) -> dict[str, Any]:
    """Compensation of canary and expand: put back each node's configuration from before."""
    backups = _fleet(ctx) / "backups" / safe_id(param(ctx, "rollout_id"), "rollout_id")
    restored = []
    for node in _node_list(ctx, "nodes"):
        backup = backups / f"{node}.json"
        if backup.exists():
            write_json(_fleet(ctx) / "nodes" / f"{node}.json", read_json(backup, node))
            restored.append(node)
    return {"restored": ",".join(restored)}


def observe(ctx: ExecutionContext) -> dict[str, Any]:
    """Ask each node for its health; one unhealthy node fails the step (and so the rollout).
    ``stage`` (canary or fleet) names the check in the error: ``CANARY_CHECK_FAILED``."""
    reports = [get_json(ctx, f"/fleet/health/{n}", f"health of {n}") for n in _node_list(ctx, "nodes")]
    wrong = [r for r in reports if r.get("version") != param(ctx, "version")]
    if wrong:
        raise invalid(f"{wrong[0]['node']} runs {wrong[0].get('version')}, not {param(ctx, 'version')}", "NOT_APPLIED")
    sick = [r for r in reports if not r.get("healthy")]
    if sick:
        stage = param(ctx, "stage")
        raise invalid(
            f"{stage} check failed: {sick[0]['node']} keeps {sick[0]['agreement']:.0%} of golden decisions (< 90%)",
            f"{stage.upper()}_CHECK_FAILED",
        )
    return {"healthy": len(reports), "min_agreement": min(r["agreement"] for r in reports)}
