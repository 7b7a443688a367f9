"""The scoring pipeline the examples replay and canary-check: a deterministic trust score.

``score`` is what production ran on a signal; the Replay Verification example runs it again
(in a subprocess, through a command runner) and compares output hashes, and the Configuration
Rollout example's node health check runs a golden set of signals through it with the node's
active configuration. Pure, so the same inputs and configuration always give the same bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

FACTORS = ("evidence_quality", "source_reliability", "consistency")


def score(inputs: Mapping[str, float], weights: Mapping[str, float], threshold: float) -> dict[str, Any]:
    """The weighted score (6 decimals) and the decision it implies."""
    missing = [f for f in FACTORS if f not in inputs or f not in weights]
    if missing:
        raise ValueError(f"missing factor(s): {', '.join(missing)}")
    value = round(sum(float(inputs[f]) * float(weights[f]) for f in FACTORS), 6)
    return {"score": value, "decision": "PASS" if value >= threshold else "REVIEW"}


def agreement(golden: list[Mapping[str, Any]], weights: Mapping[str, float], threshold: float) -> float:
    """The share of golden signals whose decision under this configuration is the expected one."""
    if not golden:
        return 0.0
    same = sum(1 for g in golden if score(g["inputs"], weights, threshold)["decision"] == g["expected_decision"])
    return round(same / len(golden), 4)
