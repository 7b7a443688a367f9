"""Properties: the digest depends on content only, never on how the document was spelled."""

from __future__ import annotations

import json
from typing import Any

import yaml
from hypothesis import assume, given
from hypothesis import strategies as st

from jobgate.config import JobgateConfig
from jobgate.definitions import parse_definition, parse_definition_text
from jobgate.definitions.loader import DocumentFormat

SEED_EXAMPLE: dict[str, Any] = {
    "job_definition_id": "TGJOBDEF-REPLAY-SAMPLING-001",
    "job_code": "TG-REPLAY-SAMPLING-DAILY",
    "job_class": "REPLAY_JOB",
    "canonical_name": "Daily TrustGate Replay Sampling",
    "trigger_type": "cron",
    "schedule_expression": "0 2 * * *",
    "target_engine_meid": "MEID_TRUST_REPLAY_COORDINATOR",
    "workflow_steps": ["select_replay_population", "create_replay_manifests", "dispatch_replay_execution"],
    "priority": "high",
    "retry_policy": "standard_exponential_backoff_v1",
    "sla_policy": "replay_sampling_daily_v1",
    "audit_required": True,
    "dal_anchor_required": False,
    "status": "active",
    "params": [{"name": "sample", "required": False, "pattern": "[0-9]+", "default": "5", "description": "n"}],
}

texts = st.text(alphabet=st.characters(codec="utf-8"), max_size=40)
optional = st.fixed_dictionaries(
    {},
    optional={
        "description": texts,
        "version_note": texts,
        "permissions": st.lists(st.text(min_size=1, max_size=8).filter(str.strip), unique=True, max_size=3),
        "concurrency_limit": st.integers(min_value=1, max_value=10**6),
        "rate_limit_per_second": st.floats(min_value=0.001, max_value=1e6, allow_nan=False),
        "queue": st.sampled_from(["default", "replay", "q-1"]),
        "tenant_id": st.sampled_from(["default", "acme"]),
        "priority": st.sampled_from(["critical", "high", "normal", "low", "background"]),
        "status": st.sampled_from(["draft", "active", "suspended", "retired"]),
    },
)


def reordered(value: Any, order: st.DataObject) -> Any:
    """The same document with every mapping's keys in an order hypothesis picks."""
    if isinstance(value, dict):
        keys = order.draw(st.permutations(list(value)))
        return {key: reordered(value[key], order) for key in keys}
    if isinstance(value, list):
        return [reordered(item, order) for item in value]
    return value


@given(extra=optional, order=st.data())
def test_digest_is_independent_of_key_order(demo_config: JobgateConfig, extra: dict[str, Any], order: Any) -> None:
    document = {**SEED_EXAMPLE, **extra}
    shuffled = reordered(document, order)
    first = parse_definition(document, "a.json", demo_config)
    second = parse_definition(shuffled, "b.json", demo_config)
    assert first.digest == second.digest
    assert first.definition.content == second.definition.content


@given(extra=optional)
def test_digest_is_independent_of_syntax(demo_config: JobgateConfig, extra: dict[str, Any]) -> None:
    """JSON, pretty JSON, block YAML and flow YAML of one document are one definition."""
    document = {**SEED_EXAMPLE, **extra}
    spellings: list[tuple[str, DocumentFormat]] = [
        (json.dumps(document), "json"),
        (json.dumps(document, indent=4, ensure_ascii=False), "json"),
        (yaml.safe_dump(document, sort_keys=False, allow_unicode=True), "yaml"),
        (yaml.safe_dump(document, default_flow_style=True, sort_keys=True), "yaml"),
    ]
    # PyYAML folds a few Unicode line breaks (NEL, U+2028) it emits itself: not our property to test.
    assume(all(yaml.safe_load(text) == document for text, fmt in spellings if fmt == "yaml"))
    digests = {parse_definition_text(text, "x", demo_config, fmt=fmt).digest for text, fmt in spellings}
    assert len(digests) == 1


@given(status=st.sampled_from(["draft", "active", "suspended", "retired"]), extra=optional)
def test_status_never_enters_the_digest(demo_config: JobgateConfig, status: str, extra: dict[str, Any]) -> None:
    document = {**SEED_EXAMPLE, **extra}
    base = parse_definition({k: v for k, v in document.items() if k != "status"}, "a", demo_config)
    assert parse_definition({**document, "status": status}, "a", demo_config).digest == base.digest
